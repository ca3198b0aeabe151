//! Reads on any node: the step of the route middleware ([`crate::http::guard::route`]) in
//! front of the routes of one stream
//! (`/v1/streams/{stream}`, its events and its WebSocket) and of one entity
//! (`/v1/features/{entity}`). It finds the shard; if this node owns it, the request is
//! served here (after waiting, bounded, for `X-Vx-Min-Position` or for a shard still
//! catching up); if another node does, the request is sent there and its answer streamed
//! back as it comes (a live follow included), with `X-Vx-Node` naming the node that answered.
//! A request that was forwarded already is never forwarded again: if this node is not the
//! owner (any more), the shard is moving, and the answer is 503 with `Retry-After`.
//!
//! Writes are not forwarded: any node produces them to Kafka.

use crate::cluster::read::{moving, moving_to};
use crate::cluster::{Cluster, FORWARDED, MIN_POSITION, NODE};
use crate::http::AppError;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{CONNECTION, HOST, TRANSFER_ENCODING};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use percent_encoding::percent_decode_str;
use vx_cluster::Route;
use vx_cluster::position::Position;
use vx_cluster::txn::Topic;

/// The shard (and topic) a path addresses, if it addresses one stream or one entity.
fn target(path: &str, shards: u32) -> Option<(Topic, u32)> {
    let mut parts = path.trim_start_matches('/').split('/');
    let (v1, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
    if v1 != "v1" || name.is_empty() {
        return None;
    }
    let name = percent_decode_str(name).decode_utf8().ok()?;
    match kind {
        "streams" => Some((Topic::Streams, vx_proto::shard::shard_of(&name, shards))),
        "features" if name != "query" => {
            Some((Topic::Entities, vx_proto::shard::shard_of(&name, shards)))
        }
        _ => None,
    }
}

/// Whether cluster mode answers `method` on `path` (a request's, or a route template) at the
/// owner of a shard: the reads this middleware forwards.
pub(crate) fn forwards(method: &Method, path: &str) -> bool {
    method == Method::GET && target(path, 1).is_some()
}

/// The middleware step: a single node, and any request but a GET, goes straight on.
pub async fn reads(state: &AppState, req: Request, next: Next) -> Response {
    match (state.cluster(), state.router()) {
        // Boxed: a forward's HTTP exchange makes this path's future large, and unboxed its
        // space would be part of every read's future on a single node too, copied whole each
        // time it is boxed further out (a measurable memcpy on a 1-event read).
        (Some(cluster), Some(router)) if req.method() == Method::GET => {
            Box::pin(clustered(cluster, router, req, next)).await
        }
        _ => next.run(req).await,
    }
}

/// A GET in cluster mode: served here, forwarded to the shard's owner, or refused while the
/// shard moves.
async fn clustered(
    cluster: &Cluster,
    router: &vx_router::Router,
    req: Request,
    next: Next,
) -> Response {
    let Some((topic, shard)) = target(req.uri().path(), router.store().shards()) else {
        return next.run(req).await;
    };
    let min = match min_position(&req) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let forwarded = req.headers().contains_key(FORWARDED);
    match cluster.here(min.as_ref(), forwarded, topic, shard).await {
        Ok(true) => with_node(next.run(req).await, cluster.node_header()),
        Ok(false) => match cluster.node.route(topic, shard) {
            Route::Remote(owner) => {
                cluster
                    .forwarded
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                proxy(cluster, req, &owner.url)
                    .await
                    .unwrap_or_else(IntoResponse::into_response)
            }
            _ => AppError::from(moving(shard)).into_response(),
        },
        Err(e) => AppError::from(e).into_response(),
    }
}

/// `X-Vx-Min-Position`, if the request has one.
pub fn min_position(req: &Request) -> Result<Option<Position>, AppError> {
    match req.headers().get(MIN_POSITION) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| Position::parse(s).ok())
            .map(Some)
            .ok_or_else(|| {
                AppError::bad_request(
                    "X-Vx-Min-Position is not a position (pass back a write's X-Vx-Position, unchanged)",
                )
            }),
    }
}

fn with_node(mut resp: Response, node: HeaderValue) -> Response {
    resp.headers_mut()
        .entry(HeaderName::from_static(NODE))
        .or_insert(node);
    resp
}

/// Hop-by-hop headers, never passed on.
fn hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TRANSFER_ENCODING
        || name == HOST
        || matches!(
            name.as_str(),
            "keep-alive" | "proxy-connection" | "te" | "trailer" | "upgrade"
        )
}

/// Send `req` to the owner at `url` and stream its answer back.
async fn proxy(cluster: &Cluster, req: Request, url: &str) -> Result<Response, AppError> {
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    if req.headers().contains_key("upgrade") {
        return super::ws::proxy(cluster, req, url).await;
    }
    let mut out = cluster.client().get(format!("{url}{path}"));
    for (name, value) in req.headers() {
        if !hop(name) {
            out = out.header(name.clone(), value.clone());
        }
    }
    out = out.header(FORWARDED, cluster.node_header());
    let resp = out.send().await.map_err(|e| {
        tracing::debug!(url, error = %e, "forwarding a read failed");
        AppError::from(moving_to(url))
    })?;
    let mut builder = Response::builder().status(resp.status().as_u16());
    for (name, value) in resp.headers() {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) && !hop(&n)
        {
            builder = builder.header(n, v);
        }
    }
    builder
        .body(Body::from_stream(resp.bytes_stream()))
        .map_err(|e| AppError::internal(format!("forwarding the answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_shard() {
        let s = |name: &str| vx_proto::shard::shard_of(name, 8);
        assert_eq!(
            target("/v1/streams/a%2Fb/events", 8),
            Some((Topic::Streams, s("a/b")))
        );
        assert_eq!(target("/v1/streams/x", 8), Some((Topic::Streams, s("x"))));
        assert_eq!(
            target("/v1/features/e1", 8),
            Some((Topic::Entities, s("e1")))
        );
        assert_eq!(target("/v1/features/query", 8), None);
        assert_eq!(target("/v1/streams", 8), None);
        assert_eq!(target("/metrics", 8), None);
    }
}
