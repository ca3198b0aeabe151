//! `X-Vx-Queue-Fill` (docs/API.md §3): every ingest answer says how full the shard queues are. The
//! ingest routes set it from admission ([`with_fill`]); the readiness guard gives `0.00` to
//! the ingest answers that never reached admission.

use axum::http::HeaderValue;
use axum::response::Response;

pub const QUEUE_FILL: &str = "x-vx-queue-fill";

fn queue_fill(fill: f64) -> HeaderValue {
    let fill = if fill.is_finite() {
        fill.clamp(0.0, 1.0)
    } else {
        0.0
    };
    HeaderValue::from_str(&format!("{fill:.2}")).unwrap_or(HeaderValue::from_static("0.00"))
}

/// `resp` with the queue fill `fill` (0 to 1, two decimals).
pub fn with_fill(mut resp: Response, fill: f64) -> Response {
    resp.headers_mut().insert(QUEUE_FILL, queue_fill(fill));
    resp
}
