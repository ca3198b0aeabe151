//! Replay (docs/API.md §5): `GET /v1/streams/{stream}/events`, streamed in chunks with bounded memory.
//!
//! The storage cursor does blocking reads, so each ~64 KiB chunk is filled on the blocking pool
//! (`spawn_blocking` per chunk: a slow client never pins a blocking thread) by a producer task
//! that hands chunks over a channel of `CHANNEL_CHUNKS` (2). Memory per response is therefore
//! at most a few chunks plus the cursor's read window, whatever the range.
//!
//! A small unfiltered page (at most `CACHED_PAGE_EVENTS` events) is first read on the async
//! worker from the page cache only (`vx_storage::vfs::cached_only`): the common point read
//! ("the event at seq N", "the last 10 events") then costs no hop to the blocking pool and
//! back; a page whose bytes are not cached is read on the pool, as every larger one is.
//!
//! The first chunk is read before the response head is sent, so that an error at the start
//! is a proper error response; a failure later ends the body without its final chunk.
//!
//! `X-Vx-Next-Seq` is sent only for queries without `since`/`until`/`types`/`entity`. Such a
//! query reads the contiguous range `[start, min(to, last_seq, start + limit - 1)]` of a
//! gapless stream, so `start + events returned` is known before the first byte: it is that
//! range's end + 1 (or `start` when the range is empty).

use super::AppError;
use super::follow::{self, LiveQuery};
use super::openapi::schemas::{Binary, ErrorBody, StoredEvent, Timestamp};
use super::output::{Output, negotiate, position_headers, unknown_stream};
use super::params::Params;
use super::streams::engine;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::{Path, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use vx_storage::{Cursor, ReadError, ReadQuery};

const LIMIT_DEFAULT: u64 = 1000;
const LIMIT_MAX: u64 = 100_000;
/// A chunk is sent once it holds at least this many bytes.
const CHUNK_BYTES: usize = 64 << 10;
/// Chunks buffered between the producer and the connection.
const CHANNEL_CHUNKS: usize = 2;

const NEXT_SEQ: HeaderName = HeaderName::from_static("x-vx-next-seq");

/// A cursor with its output encoding: what each blocking step advances.
struct Replay {
    cursor: Cursor,
    output: Output,
    /// Events written so far (a JSON array needs commas between them).
    events: u64,
    opened: bool,
    done: bool,
}

impl Replay {
    /// Fill the next chunk; `None` once the body is complete. Blocking.
    fn next_chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
        if self.done {
            return Ok(None);
        }
        let mut buf = Vec::with_capacity(CHUNK_BYTES + (CHUNK_BYTES >> 2));
        if !self.opened {
            self.opened = true;
            if self.output == Output::JsonArray {
                buf.push(b'[');
            }
        }
        while buf.len() < CHUNK_BYTES {
            match self.cursor.next_event()? {
                Some((seq, ev)) => {
                    if self.output == Output::JsonArray && self.events > 0 {
                        buf.push(b',');
                    }
                    if self.output == Output::Yaml {
                        vx_proto::canonical_yaml::write_document(&mut buf, &ev, Some(seq));
                    } else if self.output == Output::Frames {
                        // Stored events always fit the frame's length prefixes.
                        vx_proto::frames::encode_event_frame(&mut buf, &ev, seq)
                            .map_err(|e| ReadError::Io(std::io::Error::other(e)))?;
                    } else {
                        vx_proto::canonical::write_event(&mut buf, &ev, seq);
                    }
                    if self.output == Output::Ndjson {
                        buf.push(b'\n');
                    }
                    self.events += 1;
                }
                None => {
                    if self.output == Output::JsonArray {
                        buf.push(b']');
                    }
                    self.done = true;
                    break;
                }
            }
        }
        Ok(Some(Bytes::from(buf)))
    }
}

/// The first chunk of a small page, read here on the async worker from the page cache only
/// (`vx_storage::vfs::cached_only`): no hop to the blocking pool and back. A read whose bytes
/// are not cached fails with [`ReadError::is_uncached`], and the page is read again on the
/// pool (the cursor is dropped: what it consumed is not in any chunk).
fn first_cached(mut replay: Replay) -> Result<(Replay, Option<Bytes>), ReadError> {
    let res = vx_storage::vfs::cached_only(|| replay.next_chunk());
    res.map(|chunk| (replay, chunk))
}

/// One blocking step, moving the replay to the blocking pool and back.
async fn step(mut replay: Replay) -> Result<(Replay, Option<Bytes>), ReadError> {
    let (replay, res) = tokio::task::spawn_blocking(move || {
        let res = replay.next_chunk();
        (replay, res)
    })
    .await
    .map_err(|e| ReadError::Io(std::io::Error::other(format!("replay task failed: {e}"))))?;
    res.map(|chunk| (replay, chunk))
}

/// Attempts at the first chunk when retention removes what a cursor was about to read.
const FIRST_CHUNK_ATTEMPTS: u32 = 4;
/// Pages of at most this many events, without filters, are first read on the async worker
/// from the page cache ([`first_cached`]). Bounded work: with the index's samples a page
/// walks at most ~64 events before its first one (docs/ARCHITECTURE.md, "Samples"), and a
/// chunk holds at most [`CHUNK_BYTES`]; filtered pages may scan any number of events, so
/// they keep the pool.
const CACHED_PAGE_EVENTS: u64 = 64;

/// The query parameters of the events and WebSocket routes, as the OpenAPI document describes
/// them (both routes list them from here; [`QUERY`] is what the handlers accept).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(
    dead_code,
    reason = "a description for the document: the handlers parse [`QUERY`]"
)]
struct ReplayParams {
    /// first seq, inclusive (default and floor: the first retained)
    from: Option<u64>,
    /// last seq, inclusive
    to: Option<u64>,
    /// events with `ts` ≥ this: integer milliseconds or an RFC 3339 time
    since: Option<Timestamp>,
    /// events with `ts` < this: integer milliseconds or an RFC 3339 time
    until: Option<Timestamp>,
    /// a comma list of event types
    #[param(pattern = "^[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*$")]
    types: Option<String>,
    /// only events of this entity
    entity: Option<String>,
    /// events in the answer (default 1000; live: ends the follow after that many, no default)
    #[param(minimum = 1, maximum = 100000)]
    limit: Option<u64>,
    /// true (or 1): go on live after the stored events (docs/API.md §5.5)
    follow: Option<bool>,
    /// `original`: space events by their original `ts`
    #[param(pattern = "^original$")]
    pace: Option<String>,
    /// with pace=original: the speed-up (default 1.0)
    #[param(minimum = 0.1, maximum = 100)]
    speed: Option<f64>,
}

/// The query parameters of the events and WebSocket routes.
const QUERY: &[&str] = &[
    "from", "to", "since", "until", "types", "entity", "limit", "follow", "pace", "speed",
];

/// `types`: a comma list of valid event types.
fn parse_types(params: &Params) -> Result<Option<Vec<String>>, AppError> {
    let Some(list) = params.get("types") else {
        return Ok(None);
    };
    let types: Vec<String> = list.split(',').map(|t| t.trim().to_string()).collect();
    if let Some(bad) = types.iter().find(|t| !vx_proto::rules::valid_type(t)) {
        return Err(AppError::bad_request(format!(
            "types: {bad:?} is not a valid event type"
        )));
    }
    Ok(Some(types))
}

/// Follow a stream over WebSocket
///
/// A live follower (docs/API.md §5.6): the query of the events route with `follow`
/// defaulting to true; one text message per event (canonical JSON with `seq`). The query,
/// the stream and `server.max_followers` are checked before the upgrade.
#[utoipa::path(
    get,
    path = "/v1/streams/{stream}/ws",
    operation_id = "follow_websocket",
    tag = "streams",
    params(
        ("stream" = String, Path, description = "the stream's name, one percent-encoded segment"),
        ReplayParams,
        ("Last-Event-ID" = Option<u64>, Header, description = "the seq of the last event received: start right after it (wins over `from`)"),
    ),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol", headers(
            ("X-Vx-First-Seq" = u64, description = "the stream's first retained seq"),
            ("X-Vx-Last-Seq" = u64, description = "the stream's last visible seq when the answer started"),
            ("X-Vx-Shard" = u32, description = "the stream's shard"),
        )),
        (status = 400, description = "`bad_request`: a parameter, or not a WebSocket upgrade", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown stream", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the shard it would live on"))),
        (status = 503, description = "`not_ready`: starting, draining, or over `server.max_followers` (`limit`, `max`)", body = ErrorBody),
    ),
)]
pub async fn ws(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    uri: Uri,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, AppError> {
    let Path(stream) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    let params = Params::parse(&uri, QUERY)?;
    let types = parse_types(&params)?;
    let q = LiveQuery::parse(&params, &headers, true, types, LIMIT_DEFAULT, LIMIT_MAX)?;
    let upgrade = upgrade.map_err(|e| {
        AppError::bad_request(format!(
            "this route is a WebSocket endpoint: {}",
            e.body_text()
        ))
    })?;
    follow::websocket(&state, &stream, q, upgrade)
}

/// Replay a stream
///
/// The stream's events in `seq` order (docs/API.md §5.4), streamed with bounded memory, in
/// the format `Accept` picks: NDJSON (none, `*/*`), a JSON array, YAML documents, EVENT
/// frames, or Server-Sent Events. With `follow`, `pace` or `speed`, or `Accept:
/// text/event-stream`, the live and paced form (§5.5): SSE or NDJSON only, with
/// `Cache-Control: no-cache` and `X-Accel-Buffering: no`.
#[utoipa::path(
    get,
    path = "/v1/streams/{stream}/events",
    operation_id = "replay_events",
    tag = "streams",
    params(
        ("stream" = String, Path, description = "the stream's name, one percent-encoded segment"),
        ReplayParams,
        ("Last-Event-ID" = Option<u64>, Header, description = "the seq of the last event received: start right after it (wins over `from`)"),
    ),
    responses(
        (status = 200, description = "The events", content(
            (String = "application/x-ndjson"),
            (Vec<StoredEvent> = "application/json"),
            (String = "application/yaml"),
            (Binary = "application/vnd.veltrix.frames"),
            (String = "text/event-stream"),
        ), headers(
            ("X-Vx-First-Seq" = u64, description = "the stream's first retained seq"),
            ("X-Vx-Last-Seq" = u64, description = "the stream's last visible seq when the answer started"),
            ("X-Vx-Shard" = u32, description = "the stream's shard"),
            ("X-Vx-Next-Seq" = u64, description = "without since/until/types/entity: the seq to ask for next"),
        )),
        (status = 400, description = "`bad_request`: a parameter, `Last-Event-ID`, or a non-ASCII `Accept`", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown stream", body = ErrorBody, headers(("X-Vx-Shard" = u32, description = "the shard it would live on"))),
        (status = 406, description = "`not_acceptable`: no output for `Accept` (`supported`)", body = ErrorBody),
        (status = 500, description = "`internal`: reading the log failed before the first byte", body = ErrorBody),
        (status = 503, description = "`not_ready`: starting, draining, or over `server.max_followers` (`limit`, `max`)", body = ErrorBody),
    ),
)]
pub async fn events(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    // The request itself, not `Uri` and `HeaderMap`: those extractors clone the head's parts.
    req: Request,
) -> Result<Response, AppError> {
    let Path(stream) = path.map_err(|e| AppError::bad_request(e.body_text()))?;
    let (uri, headers) = (req.uri(), req.headers());
    let params = Params::parse(uri, QUERY)?;
    let output = negotiate(headers)?;
    let types = parse_types(&params)?;
    let live = ["follow", "pace", "speed"]
        .iter()
        .any(|p| params.get(p).is_some());
    if live || output == Output::Sse {
        let q = LiveQuery::parse(&params, headers, false, types, LIMIT_DEFAULT, LIMIT_MAX)?;
        return follow::respond(&state, &stream, q, output);
    }
    let limit = params.limit(LIMIT_DEFAULT, LIMIT_MAX)?;
    let query = ReadQuery {
        from: follow::start(&params, headers)?.0,
        to: params.u64("to")?,
        since: params.ts("since")?,
        until: params.ts("until")?,
        types,
        entity: params.get("entity").map(str::to_string),
        limit,
    };
    let filtered = query.filtered();
    let to = query.to;

    let router = engine(&state)?;
    // Nothing is sent before the first chunk is read: when retention removes events under
    // it, the response starts over at the new first retained seq (docs/API.md §5) instead of failing.
    let mut attempt = 0;
    // The events a page can hold: its limit, or fewer when `from` and `to` bound it.
    let most = match (query.from, to) {
        (Some(from), Some(to)) => limit.min(to.saturating_sub(from).saturating_add(1)),
        _ => limit,
    };
    let mut cached = !filtered && most <= CACHED_PAGE_EVENTS;
    let (replay, first, (first_seq, last_seq, shard, start)) = loop {
        attempt += 1;
        let Some(cursor) = router.store().read(&stream, query.clone()) else {
            return Err(unknown_stream(router, &stream));
        };
        let meta = (
            cursor.first_seq(),
            cursor.last_seq(),
            cursor.shard(),
            cursor.start_seq(),
        );
        let replay = Replay {
            cursor,
            output,
            events: 0,
            opened: false,
            done: false,
        };
        let stepped = if cached {
            first_cached(replay)
        } else {
            // Boxed: the blocking pool's hop would otherwise enlarge every read's future.
            Box::pin(step(replay)).await
        };
        match stepped {
            Ok((replay, first)) => break (replay, first, meta),
            Err(e) if e.is_uncached() => {
                cached = false;
                attempt -= 1;
            }
            Err(ReadError::Retained { .. }) if attempt < FIRST_CHUNK_ATTEMPTS => continue,
            Err(e) => {
                tracing::error!(stream = %stream, error = %e, "replay failed");
                return Err(AppError::internal(format!("reading the log failed: {e}")));
            }
        }
    };
    let next_seq = (!filtered).then(|| {
        let end = to
            .unwrap_or(u64::MAX)
            .min(last_seq)
            .min(start.saturating_add(limit - 1));
        if end >= start { end + 1 } else { start }
    });
    // `None`: the range holds no event, and the body is empty.
    let first = first.unwrap_or_default();

    let body = if replay.done {
        Body::from(first)
    } else {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(CHANNEL_CHUNKS);
        tokio::spawn(produce(replay, first, tx, stream));
        Body::from_stream(ReceiverStream::new(rx))
    };

    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(output.content_type()),
    );
    position_headers(h, first_seq, last_seq, shard);
    if let Some(n) = next_seq {
        h.insert(NEXT_SEQ, HeaderValue::from(n));
    }
    Ok(resp)
}

/// Send `first`, then keep filling chunks until the cursor ends, the client goes away (the
/// channel closes), or a read fails (the body then ends with an error, so no final chunk).
async fn produce(
    mut replay: Replay,
    first: Bytes,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    stream: String,
) {
    if tx.send(Ok(first)).await.is_err() {
        return;
    }
    loop {
        match step(replay).await {
            Ok((_, None)) => return,
            Ok((next, Some(chunk))) => {
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
                replay = next;
            }
            Err(e) => {
                tracing::error!(stream = %stream, error = %e, "replay failed mid-stream");
                // The receiver may be gone already; either way the body ends here.
                let _ = tx.send(Err(std::io::Error::other(e))).await;
                return;
            }
        }
    }
}
