//! The two middlewares every request passes (docs/API.md §8):
//! - [`request`], around the router: OTLP's error shape on the OTLP routes, a tracing span,
//!   the readiness gate (503 `not_ready` while starting or draining);
//! - [`route`], around each matched route: latency by route template, bearer-token auth, and
//!   in cluster mode the forwarding of reads to a shard's owner
//!   ([`super::cluster::forward::reads`]).
//!
//! Each is one `from_fn` whose steps are plain async functions awaited in turn: a request
//! then pays one boxed future per middleware, not one per step (with a layer per step, the
//! layers' boxing and copying of the futures nested inside them was a tenth of a 1-event
//! read's CPU, docs/BENCHMARKS.md).

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

/// The middleware around the router, outermost first: OTLP's error shape on the OTLP routes
/// ([`super::otlp::error_shape`]: it sees every answer, a fallback's or the readiness gate's
/// too), the request's span ([`trace`]), the readiness gate ([`readiness`]).
pub async fn request(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let otlp = super::otlp::error_wire(&req);
    let resp = trace(&state, req, next).await;
    match otlp {
        Some(protobuf) => super::otlp::error_shape(resp, protobuf).await,
        None => resp,
    }
}

/// One span per request; the handlers' events (and errors) are logged inside it, and an
/// ingest request's `batch` span is its child. The `otel.*` fields are read by the OTLP
/// export (kind, and error status for 5xx answers); `status` by both.
async fn trace(state: &AppState, req: Request, next: Next) -> Response {
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
        let resp = readiness(state, req, next).await;
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
async fn readiness(state: &AppState, req: Request, next: Next) -> Response {
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

/// The middleware around each matched route (it sees the route template), outermost first:
/// latency by route template up to the response head (auth included), [`auth`], and the
/// forwarding of reads in cluster mode, once they are authorized here.
pub async fn route(
    State(state): State<AppState>,
    path: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let resp = match auth(&state, path.as_ref(), &req) {
        None => super::cluster::forward::reads(&state, req, next).await,
        Some(refused) => refused,
    };
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

/// Token auth when tokens are configured; `Some` is the answer refusing the request: 401
/// without a valid token, 403 when the token lacks the route's scope. `admin` grants every
/// scope. The token comes as a bearer token or as the password of Basic credentials
/// ([`crate::auth::http_token`]); the status page's routes challenge with `Basic` (a browser
/// then prompts), the API with `Bearer`.
fn auth(state: &AppState, path: Option<&MatchedPath>, req: &Request) -> Option<Response> {
    let tokens = state.tokens();
    if tokens.is_empty() {
        return None;
    }
    let scope = path.and_then(|p| required_scope(req.method(), p.as_str()))?;
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::http_token);
    let page = path.is_some_and(|p| super::status::PAGE_ROUTES.contains(&p.as_str()));
    let refused = crate::auth::authorize(tokens, presented.as_deref(), scope).err()?;
    Some(match refused {
        // 401 says which scheme to use.
        f if f.code == vx_proto::ErrorCode::Unauthorized && page => {
            AppError::unauthorized_basic(f.message).into_response()
        }
        f if f.code == vx_proto::ErrorCode::Unauthorized => {
            AppError::unauthorized(f.message).into_response()
        }
        f => AppError::from(f).into_response(),
    })
}
