//! Middleware every request passes, outermost first: a tracing span, the readiness gate
//! (503 `not_ready` while starting or draining), then — for matched routes — latency and
//! bearer-token auth (SPEC §8).

use super::AppError;
use crate::config::Scope;
use crate::state::{AppState, Phase};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, CONNECTION};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Instant;
use tracing::Instrument;

/// Routes that answer while starting and draining: an orchestrator must be able to see why.
const ALWAYS_OPEN: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

pub const QUEUE_FILL: &str = "x-vx-queue-fill";

/// One span per request; the handlers' events (and errors) are logged inside it.
pub async fn trace(req: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.uri().path(),
    );
    async move {
        let started = Instant::now();
        let resp = next.run(req).await;
        tracing::debug!(
            status = resp.status().as_u16(),
            micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "response"
        );
        resp
    }
    .instrument(span)
    .await
}

/// 503 `not_ready` outside the `Ready` phase, and `X-Vx-Queue-Fill: 0.00` on ingest answers
/// that never reached admission (SPEC §3: every ingest response carries it).
pub async fn readiness(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let is_ingest = matches!(path, "/v1/events" | super::otlp::TRACES | super::otlp::LOGS);
    let mut resp = if ALWAYS_OPEN.contains(&path) {
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
        h.observe(started.elapsed().as_secs_f64());
    }
    resp
}

/// The scope a route needs; `None`: open to all (health checks). Deleting a stream destroys
/// what producers wrote, so it needs `admin`, not `ingest`.
fn required_scope(method: &Method, route: &str) -> Option<Scope> {
    match route {
        "/healthz" | "/readyz" => None,
        "/v1/events" | "/v1/traces" | "/v1/logs" => Some(Scope::Ingest),
        "/v1/streams/{stream}" if method == Method::DELETE => Some(Scope::Admin),
        // Feature writes are writes, like events; reads (GET, the batch query) need `read`.
        "/v1/features/{entity}" if method != Method::GET => Some(Scope::Ingest),
        "/v1/features/{entity}/{name}" => Some(Scope::Ingest),
        _ => Some(Scope::Read),
    }
}

/// Bearer-token auth when tokens are configured: 401 without a valid token, 403 when the
/// token lacks the route's scope. `admin` grants every scope.
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
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    match crate::auth::authorize(tokens, presented, scope) {
        Ok(()) => next.run(req).await,
        // 401 says which scheme to use.
        Err(f) if f.code == vx_proto::ErrorCode::Unauthorized => {
            AppError::unauthorized(f.message).into_response()
        }
        Err(f) => AppError::from(f).into_response(),
    }
}
