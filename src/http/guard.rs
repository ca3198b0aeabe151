//! Middleware every request passes, outermost first: a tracing span, the readiness gate
//! (503 `not_ready` while starting or draining), then — for matched routes — latency and
//! bearer-token auth (docs/API.md §8).

use super::AppError;
use super::queue_fill::QUEUE_FILL;
use crate::config::Scope;
use crate::state::{AppState, Phase};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, CONNECTION};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Instant;
use tracing::Instrument;

/// Routes that answer while starting and draining: an orchestrator must be able to see why,
/// and so must an operator watching the status page (its JSON then says `starting` or
/// `draining`, with `null` for what needs the store). The API's description needs nothing
/// either.
const ALWAYS_OPEN: [&str; 6] = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/status",
    "/",
    super::openapi::path::PATH,
];

/// Whether `path` (a request's, or a route template) answers in every phase.
pub(crate) fn always_open(path: &str) -> bool {
    // The page's assets: `/ui/{asset}`.
    ALWAYS_OPEN.contains(&path) || path.starts_with("/ui/")
}

/// Whether every answer on `path` carries `X-Vx-Queue-Fill` (the ingest routes).
pub(crate) fn reports_queue_fill(path: &str) -> bool {
    matches!(path, "/v1/events" | super::otlp::TRACES | super::otlp::LOGS)
}

/// One span per request; the handlers' events (and errors) are logged inside it, and an
/// ingest request's `batch` span is its child. The `otel.*` fields are read by the OTLP
/// export (kind, and error status for 5xx answers); `status` by both.
pub async fn trace(req: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        method = %req.method(),
        path = %req.uri().path(),
        status = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    async move {
        let started = Instant::now();
        let resp = next.run(req).await;
        let status = resp.status();
        let current = tracing::Span::current();
        current.record("status", i64::from(status.as_u16()));
        if status.is_server_error() {
            current.record("otel.status_code", "ERROR");
        }
        tracing::debug!(
            status = status.as_u16(),
            micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "response"
        );
        resp
    }
    .instrument(span)
    .await
}

/// 503 `not_ready` outside the `Ready` phase, and `X-Vx-Queue-Fill: 0.00` on ingest answers
/// that never reached admission (docs/API.md §3: every ingest response carries it).
pub async fn readiness(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let is_ingest = reports_queue_fill(path);
    let mut resp = if always_open(path) {
        next.run(req).await
    } else {
        match state.phase() {
            Phase::Ready => next.run(req).await,
            Phase::Starting => AppError::starting().into_response(),
            Phase::Draining => AppError::draining().into_response(),
        }
    };
    if is_ingest && !resp.headers().contains_key(QUEUE_FILL) {
        resp.headers_mut()
            .insert(QUEUE_FILL, HeaderValue::from_static("0.00"));
    }
    if state.phase() == Phase::Draining {
        // Requests that were in flight when the drain began close their connection too.
        resp.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Request latency by route template, up to the response head.
pub async fn latency(
    State(state): State<AppState>,
    path: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let resp = next.run(req).await;
    if let Some(h) = path.and_then(|p| state.metrics().route(p.as_str()).cloned()) {
        h.observe(started.elapsed());
    }
    resp
}

/// The scope a route needs; `None`: open to all (health checks). Deleting a stream destroys
/// what producers wrote, so it needs `admin`, not `ingest`.
pub(crate) fn required_scope(method: &Method, route: &str) -> Option<Scope> {
    match route {
        // The API's description is public, like the health checks (docs/API.md §7.8).
        "/healthz" | "/readyz" | super::openapi::path::PATH => None,
        "/v1/events" | "/v1/traces" | "/v1/logs" => Some(Scope::Ingest),
        // Asked by the node that took a write with `applied`, with its client's token.
        crate::cluster::OUTCOME => Some(Scope::Ingest),
        "/v1/streams/{stream}" if method == Method::DELETE => Some(Scope::Admin),
        // Feature writes are writes, like events; reads (GET, the batch query) need `read`.
        "/v1/features/{entity}" if method != Method::GET => Some(Scope::Ingest),
        "/v1/features/{entity}/{name}" => Some(Scope::Ingest),
        _ => Some(Scope::Read),
    }
}

/// Token auth when tokens are configured: 401 without a valid token, 403 when the token lacks
/// the route's scope. `admin` grants every scope. The token comes as a bearer token or as the
/// password of Basic credentials ([`crate::auth::http_token`]); the status page's routes
/// challenge with `Basic` (a browser then prompts), the API with `Bearer`.
pub async fn auth(
    State(state): State<AppState>,
    path: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let tokens = state.tokens();
    let scope = path
        .as_ref()
        .and_then(|p| required_scope(req.method(), p.as_str()));
    let (true, Some(scope)) = (!tokens.is_empty(), scope) else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::http_token);
    let page = path
        .as_ref()
        .is_some_and(|p| super::status::PAGE_ROUTES.contains(&p.as_str()));
    match crate::auth::authorize(tokens, presented.as_deref(), scope) {
        Ok(()) => next.run(req).await,
        // 401 says which scheme to use.
        Err(f) if f.code == vx_proto::ErrorCode::Unauthorized && page => {
            AppError::unauthorized_basic(f.message).into_response()
        }
        Err(f) if f.code == vx_proto::ErrorCode::Unauthorized => {
            AppError::unauthorized(f.message).into_response()
        }
        Err(f) => AppError::from(f).into_response(),
    }
}
