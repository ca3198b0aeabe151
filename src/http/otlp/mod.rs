//! OTLP/HTTP in (docs/API.md §7): `POST /v1/traces` and `POST /v1/logs`. The way of `/v1/events`
//! ([`super::ingest`]): headers first (content type, encoding, durability), the body read under
//! the same limit, timeout and in-flight budget, then the router's one submit path (atomic
//! admission, 429 with `Retry-After`, durability). Differences, all OTLP's:
//! - the body is read whole and decoded in one piece (a protobuf message cannot be decoded
//!   before its end), its decoded size bounded first and held in the in-flight budget
//!   (`vx_otlp::cost`);
//! - success is `Export…ServiceResponse` in the request's encoding, with `partial_success`
//!   for items that could not be events (`vx_otlp::map`);
//! - errors are re-shaped by [`error_shape`] ([`status`]), which also sees the answers of the
//!   middleware (auth, readiness) and of the fallbacks.
//!
//! Decoding and mapping are `vx_otlp`'s (pure, shared with the fuzz crate); what needs the
//! HTTP layer, the handler and the error answers built from Veltrix's error bodies, is here.

pub mod status;

use super::AppError;
use super::ingest::{body_error, closing, durability, encoding, submit};
use super::openapi::schemas::{Binary, ContentEncoding, DurabilityAsked};
use super::queue_fill::with_fill;
use crate::otlp::{self, Signal, Wire};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use vx_sys::now_ms;

/// The OTLP routes.
pub const TRACES: &str = "/v1/traces";
pub const LOGS: &str = "/v1/logs";

/// Whether `path` is an OTLP route, whose errors take OTLP's shape.
pub(crate) fn is_otlp(path: &str) -> bool {
    path == TRACES || path == LOGS
}

/// `/v1/events`' conditional write header.
const EXPECTED_LAST_SEQ: &str = "x-vx-expected-last-seq";

/// Largest error body [`error_shape`] re-shapes (Veltrix's own error bodies are far smaller).
const MAX_ERROR_BODY: usize = 64 << 10;

/// An OTLP/HTTP export route: `$name`, `POST $path`, for `$signal`, documented (its OpenAPI
/// operation included) with `$summary` and `$what` (the description's first line: utoipa
/// reads doc literals only, not `concat!`). Both routes are one handler ([`export`]) and one
/// description; only these differ.
macro_rules! export_route {
    ($name:ident, $path:literal, $operation:literal, $signal:expr, $summary:literal, $what:literal) => {
        #[doc = $summary]
        #[doc = ""]
        #[doc = $what]
        #[doc = "durability of `/v1/events`. Errors take OTLP's shape (§10.4)."]
        #[utoipa::path(
            post,
            path = $path,
            operation_id = $operation,
            tag = "ingest",
            params(
                ("Content-Encoding" = Option<ContentEncoding>, Header,
                    description = "`gzip` (also `x-gzip`), `zstd` or `identity`; other codings are 415"),
                ("X-Vx-Durability" = Option<DurabilityAsked>, Header,
                    description = "as on `/v1/events` (docs/API.md §3.5)"),
            ),
            request_body(
                description = "An OTLP/HTTP export request, protobuf or JSON",
                content(
                    (Binary = "application/x-protobuf"),
                    (Object = "application/json"),
                ),
            ),
            responses(
                (status = 200, description = "Stored; `partialSuccess` counts the items that could not be events. Protobuf or JSON, as sent",
                    content(
                        (Binary = "application/x-protobuf"),
                        (Object = "application/json"),
                    )),
                (status = 400, description = "`malformed` (the body does not decode) or `bad_request` (a bad header, or `X-Vx-Expected-Last-Seq`)"),
                (status = 408, description = "`timeout`: the body stalled"),
                (status = 413, description = "`too_large`: the body, or its events, over `ingest.max_body_bytes` or the in-flight budget"),
                (status = 415, description = "`unsupported_media_type`"),
                (status = 429, description = "`backpressure`", headers(
                    ("Retry-After" = u64, description = "whole seconds, at least 1"),
                    ("X-Vx-Retry-After-Ms" = u64, description = "the same delay in milliseconds"))),
                (status = 507, description = "`storage_full`"),
            ),
        )]
        pub async fn $name(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
            export(&state, $signal, &headers, body).await
        }
    };
}

export_route!(
    traces,
    "/v1/traces",
    "export_traces",
    Signal::Traces,
    "OTLP traces in",
    "Each span becomes one event (docs/API.md §7.5), with the admission, atomicity and"
);
export_route!(
    logs,
    "/v1/logs",
    "export_logs",
    Signal::Logs,
    "OTLP logs in",
    "Each log record becomes one event (docs/API.md §7.5), with the admission, atomicity and"
);

async fn export(state: &AppState, signal: Signal, headers: &HeaderMap, body: Body) -> Response {
    let metrics = state.metrics();
    let label = signal.label();
    let reject = |e: AppError, events: Option<u64>, fill: f64| {
        metrics.rejected(e.code, label, events);
        with_fill(e.into_response(), fill)
    };
    let content_type = headers
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not ASCII)"));
    let Some(wire) = Wire::for_content_type(content_type) else {
        let shown: String = content_type.unwrap_or("").chars().take(100).collect();
        let e = AppError::unsupported_media_type(
            format!(
                "unsupported Content-Type {shown:?} for OTLP; supported: {}",
                otlp::SUPPORTED_TYPES.join(", ")
            ),
            otlp::SUPPORTED_TYPES,
        );
        return closing(reject(e, None, 0.0));
    };
    let encoding = match encoding(headers) {
        Ok(enc) => enc,
        Err(e) => return closing(reject(e, None, 0.0)),
    };
    let durability = match durability(headers, state.cluster().is_some()) {
        Ok(d) => d,
        Err(e) => return closing(reject(e, None, 0.0)),
    };
    if headers.contains_key(EXPECTED_LAST_SEQ) {
        // An export spans streams (one per service), and its exporter would not know what to
        // do with a 409: refuse rather than ignore a condition the client asked for.
        let e = AppError::bad_request("X-Vx-Expected-Last-Seq is not supported on OTLP routes");
        return closing(reject(e, None, 0.0));
    }
    if state.writes().is_none() {
        return closing(reject(AppError::starting(), None, 0.0));
    }

    let limits = state.limits();
    let budget = state.budget();
    let read =
        vx_ingest::read_encoded_body(body.into_data_stream(), encoding, limits, budget).await;
    let (bytes, mut permit) = match read {
        Ok(ok) => ok,
        Err(e) => return closing(reject(body_error(e), None, 0.0)),
    };
    // The body has been read to its end from here on: refusals keep the connection.
    let cost = match otlp::decoded_cost(signal, wire, &bytes) {
        Ok(c) => c,
        Err(e) => return reject(AppError::from(e), None, 0.0),
    };
    let whole = cost.saturating_add(bytes.len() as u64);
    if whole > budget.total() {
        let e = vx_proto::InputError::too_large(
            "ingest.max_inflight_bytes",
            budget.total(),
            format!(
                "decoding this OTLP body would take about {whole} bytes, more than the whole \
                 in-flight budget of {} bytes (ingest.max_inflight_bytes); send smaller batches",
                budget.total()
            ),
        );
        return reject(AppError::from(e), None, 0.0);
    }
    permit.grow(cost).await;
    let mapping = otlp::Mapping {
        stream_attribute: state.otlp_stream_attribute(),
        max_event_bytes: limits.max_event_bytes,
        max_batch_bytes: limits.max_body_bytes,
        now_ms: now_ms(),
    };
    // CPU work on this worker, bounded by the body limit, as the other decoders' is.
    let mapped = match otlp::decode_and_map(signal, wire, &bytes, &mapping) {
        Ok(m) => m,
        Err(e) => return reject(AppError::from(e), None, 0.0),
    };
    drop(bytes);
    // The decoded message is gone; from admission on, the router's queued-byte budget holds
    // the batch (admission runs at the first poll of `submit`).
    drop(permit);

    let mut mapped = mapped;
    let batch = std::mem::take(&mut mapped.batch);
    let submitted = submit(
        state,
        label,
        crate::write::Events {
            batch,
            asked: durability,
            expected_last_seq: None,
            auth: super::ingest::auth(headers),
        },
    )
    .await;
    let accepted = match submitted {
        Ok(accepted) => accepted,
        Err(refused) => return refused,
    };
    if mapped.rejected > 0 {
        metrics.rejected_items(vx_proto::ErrorCode::InvalidEvent, label, mapped.rejected);
    }
    let body = otlp::success_body(signal, wire, &mapped);
    let resp = (
        StatusCode::OK,
        [(CONTENT_TYPE, HeaderValue::from_static(wire.content_type()))],
        body,
    )
        .into_response();
    with_fill(resp, accepted.queue_fill)
}

/// Whether a request's errors get OTLP's `Status` shape ([`error_shape`]): `Some` on an OTLP
/// route, with whether its body is protobuf.
pub(crate) fn error_wire(req: &Request) -> Option<bool> {
    if !is_otlp(req.uri().path()) {
        return None;
    }
    let protobuf = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| Wire::for_content_type(Some(ct)))
        == Some(Wire::Protobuf);
    Some(protobuf)
}

/// Any error answer on an OTLP route, whoever made it (the handler, auth, readiness, a
/// fallback), gets OTLP's `Status` shape in the request's encoding ([`status`]); the request
/// middleware ([`crate::http::guard::request`]) applies it outermost. Status and headers
/// stay as they are.
pub(crate) async fn error_shape(resp: Response, protobuf: bool) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_ERROR_BODY).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "reading an error answer to re-shape it failed");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let Some(shaped) = status::reshape(&bytes, protobuf) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let ct = if protobuf { Wire::Protobuf } else { Wire::Json };
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct.content_type()));
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(shaped))
}
