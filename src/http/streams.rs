//! Stream metadata (docs/API.md §5): `GET /v1/streams` (a page of streams, sorted bytewise),
//! `GET /v1/streams/{stream}`, and `DELETE /v1/streams/{stream}` (a durable tombstone).

use super::AppError;
use super::openapi::schemas::{DurabilityAsked, ErrorBody};
use super::params::Params;
use crate::state::AppState;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use vx_storage::StreamInfo;

pub const SHARD: HeaderName = HeaderName::from_static("x-vx-shard");

const LIST_DEFAULT: u64 = 100;
const LIST_MAX: u64 = 10_000;

/// The JSON form of one stream.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Stream)]
pub struct StreamJson<'a> {
    stream: &'a str,
    /// The first retained seq.
    first_seq: u64,
    /// The last visible seq.
    last_seq: u64,
    /// Retained events and their bytes.
    events: u64,
    bytes: u64,
    /// The least and greatest `ts` of the retained events; `null` without any.
    first_ts: Option<i64>,
    last_ts: Option<i64>,
}

impl<'a> From<&'a StreamInfo> for StreamJson<'a> {
    fn from(s: &'a StreamInfo) -> Self {
        StreamJson {
            stream: &s.stream,
            first_seq: s.first_seq,
            last_seq: s.last_seq,
            events: s.events,
            bytes: s.bytes,
            first_ts: s.first_ts,
            last_ts: s.last_ts,
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = StreamPage)]
pub struct Page<'a> {
    streams: Vec<StreamJson<'a>>,
    /// The last name of the page when more follow (pass it as `after`), else `null`.
    next: Option<String>,
}

pub fn engine(state: &AppState) -> Result<&vx_router::Router, AppError> {
    state.router().ok_or_else(AppError::starting)
}

pub fn with_shard(mut resp: Response, shard: u32) -> Response {
    resp.headers_mut().insert(SHARD, HeaderValue::from(shard));
    resp
}

/// List streams
///
/// A page of streams, sorted bytewise by name (docs/API.md §5.1). Deleted streams are not
/// listed; a stream whose events were all retained away is, with `events: 0`.
#[utoipa::path(
    get,
    path = "/v1/streams",
    operation_id = "list_streams",
    tag = "streams",
    params(
        ("prefix" = Option<String>, Query, description = "only names starting with it"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 10000, description = "streams per page (default 100)"),
        ("after" = Option<String>, Query, description = "exclusive: start after this name (a page's `next`)"),
    ),
    responses(
        (status = 200, description = "A page of streams", body = Page),
        (status = 400, description = "`bad_request`: an unknown, repeated or invalid parameter", body = ErrorBody),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let params = Params::parse(&uri, &["prefix", "limit", "after"])?;
    let limit = params.limit(LIST_DEFAULT, LIST_MAX)?;
    let router = engine(&state)?;
    let prefix = params.get("prefix").unwrap_or("").to_string();
    // `limit` ≤ LIST_MAX, so it fits any usize.
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let after = params.get("after").map(str::to_string);
    let cluster = state.cluster();
    let mut page = local_page(
        router,
        cluster.map(|c| &**c),
        &prefix,
        after.as_deref(),
        limit,
    )
    .await?;
    if let Some(cluster) = cluster
        && !headers.contains_key(crate::cluster::FORWARDED)
    {
        // Every owner lists its own shards; the pages merge in name order.
        let auth = headers.get(axum::http::header::AUTHORIZATION);
        let others = super::cluster::listing::pages(cluster, uri.query(), auth).await?;
        page = super::cluster::listing::merge(page, others, limit);
    }
    Ok(Json(Page {
        streams: page.0.iter().map(StreamJson::from).collect(),
        next: page.1,
    })
    .into_response())
}

/// This node's page of streams: all of them in single-node mode; in cluster mode those of
/// the shards it owns (its data dir may still hold shards that moved away).
async fn local_page(
    router: &vx_router::Router,
    cluster: Option<&crate::cluster::Cluster>,
    prefix: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<(Vec<StreamInfo>, Option<String>), AppError> {
    let owned = cluster.map(|c| c.node.ownership().owned(vx_cluster::txn::Topic::Streams));
    let store = router.store().clone();
    let (prefix, mut after) = (prefix.to_string(), after.map(str::to_string));
    // The listing may read the carry file and index files: off the async workers.
    tokio::task::spawn_blocking(move || {
        let mut out: Vec<StreamInfo> = Vec::new();
        loop {
            let (streams, next) = store.list_streams(&prefix, after.as_deref(), limit);
            let mut truncated = false;
            for s in streams {
                if owned.as_ref().is_some_and(|o| !o.contains(&s.shard)) {
                    continue;
                }
                if out.len() == limit {
                    truncated = true;
                    break;
                }
                out.push(s);
            }
            let last = || out.last().map(|s| s.stream.clone());
            match next {
                _ if truncated => return (last(), out),
                Some(n) if out.len() < limit => after = Some(n),
                // More exist past this page: say where it ends.
                Some(_) => return (last(), out),
                None => return (None, out),
            }
        }
    })
    .await
    .map(|(next, out)| (out, next))
    .map_err(|e| AppError::internal(format!("listing streams failed: {e}")))
}

/// One stream
///
/// That stream's metadata (docs/API.md §5.2); `{stream}` arrives percent-decoded (`%2F` is a
/// `/` in the name).
#[utoipa::path(
    get,
    path = "/v1/streams/{stream}",
    operation_id = "get_stream",
    tag = "streams",
    params(("stream" = String, Path, description = "the stream's name, one percent-encoded segment")),
    responses(
        (status = 200, description = "The stream", body = StreamJson, headers(("X-Vx-Shard" = u32, description = "the stream's shard"))),
        (status = 400, description = "`bad_request`: a query parameter, or a name that is not UTF-8", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown or deleted", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the shard it would live on"))),
        (status = 500, description = "`internal`: reading the stream failed", body = ErrorBody),
    ),
)]
pub async fn one(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
) -> Result<Response, AppError> {
    let Path(stream) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    Params::parse(&uri, &[])?;
    let router = engine(&state)?;
    let shard = router.shard_of(&stream);
    // Recomputing a stream's ts range after retention reads index files: off the workers.
    let store = router.store().clone();
    let name = stream.clone();
    let info = tokio::task::spawn_blocking(move || store.stream(&name))
        .await
        .map_err(|e| AppError::internal(format!("reading the stream failed: {e}")))?;
    match info {
        Some(info) => Ok(with_shard(
            Json(StreamJson::from(&info)).into_response(),
            info.shard,
        )),
        None => Ok(with_shard(
            AppError::not_found(format!("unknown stream {stream:?}")).into_response(),
            shard,
        )),
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = StreamDeleted)]
pub struct Deleted<'a> {
    stream: &'a str,
    /// The stream's last seq: a later write continues after it.
    last_seq: u64,
    #[schema(value_type = crate::http::openapi::schemas::Durability)]
    durability: &'static str,
    /// Cluster mode: the delete's position (also `X-Vx-Position`).
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<String>,
}

/// Delete a stream
///
/// A tombstone record in the log (docs/API.md §5.3): from then on the stream is 404 and
/// unlisted and its followers end. 200 with the stream's last seq (a later write continues
/// after it) and the durability reached; 404 for an unknown or already deleted stream.
#[utoipa::path(
    delete,
    path = "/v1/streams/{stream}",
    operation_id = "delete_stream",
    tag = "streams",
    params(
        ("stream" = String, Path, description = "the stream's name, one percent-encoded segment"),
        ("X-Vx-Durability" = Option<DurabilityAsked>, Header, description = "as for writes (docs/API.md §3.5)"),
    ),
    responses(
        (status = 200, description = "Deleted", body = Deleted, headers(
            ("X-Vx-Shard" = u32, description = "the stream's shard"),
            ("X-Vx-Position" = String, description = "cluster mode: the delete's position"))),
        (status = 400, description = "`bad_request`: a query parameter, `X-Vx-Durability`, or a name that is not UTF-8", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown or already deleted", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the stream's shard"))),
        (status = 507, description = "`storage_full`: the log cannot be written", body = ErrorBody),
    ),
)]
pub async fn delete(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, AppError> {
    let Path(stream) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    Params::parse(&uri, &[])?;
    let asked = super::ingest::durability(&headers, state.cluster().is_some())?;
    let writes = state.writes().ok_or_else(AppError::starting)?;
    let shard = writes.router().shard_of(&stream);
    let deleted = writes
        .delete_stream(&stream, asked, super::ingest::auth(&headers))
        .await;
    let resp = match deleted {
        Ok(d) => {
            state.metrics().streams_deleted.inc();
            let position = d.position.as_ref().map(ToString::to_string);
            let mut resp = Json(Deleted {
                stream: &stream,
                last_seq: d.last_seq,
                durability: d.durability.as_str(),
                position: position.clone(),
            })
            .into_response();
            if let Some(p) = position.and_then(|p| HeaderValue::from_str(&p).ok()) {
                resp.headers_mut().insert(crate::cluster::POSITION, p);
            }
            resp
        }
        Err(refused) => refused.into_app().into_response(),
    };
    Ok(with_shard(resp, shard))
}
