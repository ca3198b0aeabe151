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
//! - [`status`]: the status page (`/`, `/ui/{asset}`, embedded) and `GET /v1/status`.
//! - [`guard`]: the middleware every request passes: readiness, auth, latency.
//! - [`params`]: query-string parsing with errors in the one error shape.
//! - [`queue_fill`]: the `X-Vx-Queue-Fill` header of every ingest answer.

pub mod cluster;
pub mod features;
pub mod follow;
pub mod guard;
pub mod ingest;
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
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};

/// The whole HTTP application.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/events", post(ingest::ingest))
        .route(otlp::TRACES, post(otlp::traces))
        .route(otlp::LOGS, post(otlp::logs))
        .route("/v1/streams", get(streams::list))
        .route(
            "/v1/streams/{stream}",
            get(streams::one).delete(streams::delete),
        )
        .route("/v1/streams/{stream}/events", get(replay::events))
        .route("/v1/streams/{stream}/ws", get(replay::ws))
        .route("/v1/features/query", post(features::query))
        .route(
            "/v1/features/{entity}",
            get(features::get)
                .put(features::put)
                .delete(features::delete_entity),
        )
        .route(
            "/v1/features/{entity}/{name}",
            axum::routing::delete(features::delete_one),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/status", get(status::status))
        .route("/", get(status::index))
        .route("/ui/{asset}", get(status::asset))
        .route(cluster::internal::OUTCOME, get(cluster::internal::outcome))
        // Route layers run after matching, so they see the route template; the later one
        // wraps the earlier, so latency includes auth. Cluster mode forwards reads of a shard
        // another node owns once they are authorized here.
        .route_layer(from_fn_with_state(state.clone(), cluster::forward::reads))
        .route_layer(from_fn_with_state(state.clone(), guard::auth))
        .route_layer(from_fn_with_state(state.clone(), guard::latency))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), guard::readiness))
        .layer(from_fn(guard::trace))
        // Outermost but for tracing: OTLP clients get every error, whoever made it, in
        // OTLP's shape.
        .layer(from_fn(otlp::error_shape))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> AppError {
    AppError::not_found(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> AppError {
    AppError::method_not_allowed(format!("{method} is not allowed on {}", uri.path()))
}
