//! Operations endpoints (docs/API.md §7): liveness, readiness and the metrics exposition.

use super::AppError;
use super::openapi::schemas::{ErrorBody, Health};
use crate::state::{AppState, Phase};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Liveness
///
/// 200 while the process runs, in every phase, without auth (docs/API.md §7.1).
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    responses((status = 200, description = "Alive: `{\"status\": \"ok\"}`", body = Health)),
)]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness
///
/// 200 once bootstrapped; 503 `not_ready` before, while draining, and after a failed fsync
/// (docs/API.md §7.2). No auth.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready: `{\"status\": \"ready\"}`", body = Health),
        (status = 503, description = "`not_ready`: starting, draining, or the store refuses writes after a failed fsync", body = ErrorBody),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.is_ready() {
        return Json(json!({"status": "ready"})).into_response();
    }
    let message = match state.phase() {
        Phase::Starting => "starting: recovering the log",
        Phase::Draining => "shutting down",
        Phase::Ready => "the store refuses writes after a failed fsync; restart the process",
    };
    AppError::new(vx_proto::ErrorCode::NotReady, message)
        .with_header(RETRY_AFTER, 1)
        .into_response()
}

/// Metrics
///
/// The Prometheus text format by default (what `promtool check metrics` reads); OpenMetrics
/// when the scraper asks for it in `Accept`, as Prometheus itself does (docs/API.md §7.3).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    responses(
        (status = 200, description = "The exposition", content(
            (String = "text/plain; version=0.0.4; charset=utf-8"),
            (String = "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )),
        (status = 500, description = "`internal`: encoding the metrics failed", body = ErrorBody),
    ),
)]
pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let (text, content_type) = if openmetrics {
        (
            state.metrics().encode_openmetrics(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    } else {
        (
            state.metrics().encode_prometheus(),
            "text/plain; version=0.0.4; charset=utf-8",
        )
    };
    match text {
        Ok(text) => {
            let mut resp = text.into_response();
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            resp
        }
        Err(_) => AppError::internal("encoding the metrics failed").into_response(),
    }
}
