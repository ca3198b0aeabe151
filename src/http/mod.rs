//! The HTTP API (docs/API.md §3, §5, §7): [`app`] builds the axum router over an [`AppState`]; tests
//! drive it with `tower::ServiceExt::oneshot`, the server serves it on TCP and a Unix socket.
//!
//! - [`cluster`]: cluster mode's HTTP side: reads forwarded to a shard's owner, listings
//!   and queries merged across owners, the owners' internal outcome route.
//! - [`ingest`]: `POST /v1/events`.
//! - [`otlp`]: `POST /v1/traces` and `POST /v1/logs` (OTLP/HTTP in), and the layer that gives
//!   their errors OTLP's shape.
//! - [`streams`]: `GET /v1/streams`, `GET`/`DELETE /v1/streams/{stream}`.
//! - [`replay`]: `GET /v1/streams/{stream}/events`, streamed; [`follow`]: its live and paced
//!   forms (SSE, NDJSON) and `GET /v1/streams/{stream}/ws`; [`output`]: what both answer in
//!   (`Accept` negotiation, position headers).
//! - [`features`]: the feature store's routes (docs/API.md §6).
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`openapi`]: the route table every route is served from, and the OpenAPI document it
//!   generates (`GET /v1/openapi.json`).
//! - [`status`]: the status page (`/`, `/ui/{asset}`, embedded) and `GET /v1/status`.
//! - [`guard`]: the middleware every request passes: OTLP's error shape, the request's span,
//!   readiness; and every matched route: latency, auth, cluster mode's forwarding of reads.
//! - [`params`]: query-string parsing with errors in the one error shape.
//! - [`queue_fill`]: the `X-Vx-Queue-Fill` header of every ingest answer.

pub mod cluster;
pub mod features;
pub mod follow;
pub mod guard;
pub mod ingest;
pub mod openapi;
pub mod ops;
pub mod otlp;
pub mod output;
pub mod params;
pub mod queue_fill;
pub mod replay;
pub mod status;
pub mod streams;

#[cfg(test)]
mod tests;

pub use crate::error::AppError;
use crate::state::AppState;
use axum::Router;
use axum::middleware::from_fn_with_state;

/// The whole HTTP application: the routes of [`openapi::routes`] behind the middleware.
pub fn app(state: AppState) -> Router {
    let (routes, _) = openapi::routes().split_for_parts();
    routes
        // A route layer runs after matching, so it sees the route template.
        .route_layer(from_fn_with_state(state.clone(), guard::route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), guard::request))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> AppError {
    AppError::not_found(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> AppError {
    AppError::method_not_allowed(format!("{method} is not allowed on {}", uri.path()))
}
