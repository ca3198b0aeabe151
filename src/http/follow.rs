//! Live and paced replay over HTTP (docs/API.md §5): `GET /v1/streams/{stream}/events` with
//! `follow=true`, `pace=original` or `Accept: text/event-stream`, and the WebSocket route
//! `GET /v1/streams/{stream}/ws`. What to send comes from [`crate::live::Follower`]; this
//! module only frames it.
//!
//! - **SSE**: `id: <seq>` and `data: <canonical JSON>` per event; `: heartbeat` comments;
//!   `event: retained` (data `{"from", "first_seq"}`) when events the follower had not got were
//!   removed, after which it goes on; `event: deleted` (data `{"stream", "last_seq"}`) as the
//!   last frame when the stream is deleted. The body ends at shutdown (clients reconnect with
//!   `Last-Event-ID`) and, with `limit` or `to`, once reached.
//! - **NDJSON** (`follow=true` with an NDJSON `Accept`): one line per event, an empty line as
//!   heartbeat; a retention gap ends the body without its final chunk (as paged replay does),
//!   a delete ends it cleanly.
//! - **WebSocket**: one text message per event (canonical JSON with `seq`), a ping as heartbeat,
//!   `{"retained": {"from", "first_seq"}}` as a notice; close 1000 `deleted` on delete, 1000
//!   `done` at the end of a range, 1001 at shutdown, 1011 on a read failure.

use super::AppError;
use super::output::{Output, position_headers, unknown_stream};
use super::params::Params;
use super::streams::engine;
use crate::failure::Failure;
use crate::live::{FollowEnd, Follower, Membership, Next, Notice, Pace, Transport};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use vx_proto::ErrorCode;
use vx_storage::ReadQuery;

const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// How long a client told it is over `server.max_followers` should wait.
const FULL_RETRY_MS: u64 = 1000;
/// Inbound WebSocket messages are only ever control frames or small ones: a client has
/// nothing to send.
const WS_MAX_MESSAGE: usize = 64 << 10;

/// The query of a live or paced replay, validated.
pub struct LiveQuery {
    pub follow: bool,
    pub from: Option<u64>,
    pub resume: bool,
    pub to: Option<u64>,
    pub limit: Option<u64>,
    /// The exact filters (`since`, `until`, `types`, `entity`).
    pub filter: ReadQuery,
    pub pace: Option<Pace>,
}

impl LiveQuery {
    /// From the query string (the paged replay's parameters plus `follow`, `pace` and
    /// `speed`) and `Last-Event-ID`. `follow_default` is the WebSocket route's.
    pub fn parse(
        params: &Params,
        headers: &HeaderMap,
        follow_default: bool,
        types: Option<Vec<String>>,
        limit_default: u64,
        limit_max: u64,
    ) -> Result<LiveQuery, AppError> {
        let follow = match params.get("follow") {
            None => follow_default,
            Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(v) => {
                return Err(AppError::bad_request(format!(
                    "follow={v:?}: expected true or false"
                )));
            }
        };
        let pace = match params.get("pace") {
            None => None,
            Some("original") => Some(Pace {
                speed: parse_speed(params.get("speed"))?,
            }),
            Some(v) => {
                return Err(AppError::bad_request(format!(
                    "pace={v:?}: the only pace is \"original\""
                )));
            }
        };
        if pace.is_none() && params.get("speed").is_some() {
            return Err(AppError::bad_request("speed needs pace=original"));
        }
        let (from, resume) = start(params, headers)?;
        // Live, `limit` ends the follow only when given; a bounded replay keeps its default.
        let limit = if follow && params.get("limit").is_none() {
            None
        } else {
            Some(params.limit(limit_default, limit_max)?)
        };
        Ok(LiveQuery {
            follow,
            from,
            resume,
            to: params.u64("to")?,
            limit,
            filter: ReadQuery {
                since: params.ts("since")?,
                until: params.ts("until")?,
                types,
                entity: params.get("entity").map(str::to_string),
                ..ReadQuery::default()
            },
            pace,
        })
    }
}

/// Where a replay starts: `from`, or right after `Last-Event-ID`, which wins (a reconnecting
/// EventSource repeats its URL: the header is the newer position); whether it is a resume.
pub fn start(params: &Params, headers: &HeaderMap) -> Result<(Option<u64>, bool), AppError> {
    let Some(v) = headers.get(LAST_EVENT_ID) else {
        return Ok((params.u64("from")?, false));
    };
    let id = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .ok_or_else(|| {
            AppError::bad_request("Last-Event-ID must be the seq of an event received")
        })?;
    // Checked all the same: a bad `from` is a bad request whatever the header says.
    params.u64("from")?;
    Ok((Some(id.saturating_add(1)), true))
}

fn parse_speed(v: Option<&str>) -> Result<f64, AppError> {
    let Some(v) = v else { return Ok(1.0) };
    match v.parse::<f64>() {
        Ok(s) if (0.1..=100.0).contains(&s) => Ok(s),
        _ => Err(AppError::bad_request(format!(
            "speed={v:?} is out of range: it must be a number from 0.1 to 100"
        ))),
    }
}

/// Where a follower starts, with the headers of its response.
struct Opened {
    follower: Follower,
    first_seq: u64,
    last_seq: u64,
    shard: u32,
}

/// Check the stream, join its topic when following, and build the follower.
fn open(
    state: &AppState,
    stream: &str,
    q: LiveQuery,
    transport: Transport,
) -> Result<Opened, AppError> {
    let router = engine(state)?;
    let store = router.store();
    let probe = ReadQuery {
        limit: 1,
        ..ReadQuery::default()
    };
    let Some(cursor) = store.read(stream, probe) else {
        return Err(unknown_stream(router, stream));
    };
    let (first_seq, last_seq, shard) = (cursor.first_seq(), cursor.last_seq(), cursor.shard());
    drop(cursor);
    let hub = state.hub();
    let member: Option<Membership> = if q.follow {
        Some(hub.join(store, stream, transport).map_err(|full| {
            AppError::from(
                Failure::new(
                    ErrorCode::NotReady,
                    format!(
                        "this server has {} followers, its server.max_followers",
                        full.max
                    ),
                )
                .retry_after(FULL_RETRY_MS)
                .limit("server.max_followers", Some(full.max as u64)),
            )
        })?)
    } else {
        None
    };
    // A bounded replay ends at the stream's end when it started, like a paged one.
    let to = if q.follow {
        q.to
    } else {
        Some(q.to.map_or(last_seq, |t| t.min(last_seq)))
    };
    let start = crate::live::follow::Start {
        stream: stream.to_string(),
        from: q.from.unwrap_or(first_seq),
        resume: q.resume,
        to,
        limit: q.limit,
        filter: q.filter,
        pace: q.pace,
        sse: transport == Transport::Sse,
    };
    let follower = Follower::new(store.clone(), std::sync::Arc::clone(hub), start, member);
    Ok(Opened {
        follower,
        first_seq,
        last_seq,
        shard,
    })
}

fn headers(resp: &mut Response, content_type: &'static str, o: (u64, u64, u32)) {
    let (first_seq, last_seq, shard) = o;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies (nginx) must not buffer a live body.
    h.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    position_headers(h, first_seq, last_seq, shard);
}

/// A streamed SSE or NDJSON response (the events route with `follow`, `pace` or SSE).
pub fn respond(
    state: &AppState,
    stream: &str,
    q: LiveQuery,
    output: Output,
) -> Result<Response, AppError> {
    let sse = match output {
        Output::Sse => true,
        Output::Ndjson => false,
        _ => {
            return Err(AppError::not_acceptable(
                "follow and pace answer text/event-stream or application/x-ndjson",
                &["text/event-stream", "application/x-ndjson"],
            ));
        }
    };
    let transport = if sse {
        Transport::Sse
    } else {
        Transport::Ndjson
    };
    let opened = open(state, stream, q, transport)?;
    let meta = (opened.first_seq, opened.last_seq, opened.shard);
    let stream_name = stream.to_string();
    let body = futures_util::stream::unfold(
        Some((opened.follower, stream_name)),
        move |st| async move {
            let (mut f, name) = st?;
            let chunk = match f.next().await {
                Next::Events(events) => Ok(concat(&events, sse)),
                Next::Frames(frames) => Ok(frames),
                Next::Heartbeat => Ok(Bytes::from_static(if sse {
                    b": heartbeat\n\n"
                } else {
                    b"\n"
                })),
                Next::Notice(Notice::Retained { from, first_seq }) => {
                    if sse {
                        Ok(Bytes::from(format!(
                            "event: retained\ndata: {{\"from\":{from},\"first_seq\":{first_seq}}}\n\n"
                        )))
                    } else {
                        let e = std::io::Error::other(format!(
                            "events from seq {from} to {} were removed before they were sent",
                            first_seq.saturating_sub(1)
                        ));
                        return Some((Err(e), None));
                    }
                }
                Next::End(FollowEnd::Deleted { last_seq }) => {
                    if !sse {
                        return None;
                    }
                    let mut data = Vec::new();
                    vx_proto::canonical::write_json_str(&mut data, &name);
                    let data = String::from_utf8_lossy(&data).into_owned();
                    let frame = format!(
                        "event: deleted\ndata: {{\"stream\":{data},\"last_seq\":{last_seq}}}\n\n"
                    );
                    return Some((Ok(Bytes::from(frame)), None));
                }
                Next::End(FollowEnd::Done | FollowEnd::Shutdown) => return None,
                Next::End(FollowEnd::Failed(msg)) => {
                    tracing::error!(stream = %name, error = %msg, "live replay failed");
                    return Some((Err(std::io::Error::other(msg)), None));
                }
            };
            Some((chunk, Some((f, name))))
        },
    );
    let mut resp = Body::from_stream(body).into_response();
    let ct = if sse {
        "text/event-stream"
    } else {
        "application/x-ndjson"
    };
    headers(&mut resp, ct, meta);
    Ok(resp)
}

/// The events as one chunk: a shared slice for one event, else one copy of them all.
fn concat(events: &[crate::live::Encoded], sse: bool) -> Bytes {
    let one = |e: &crate::live::Encoded| if sse { e.sse() } else { e.ndjson() };
    match events {
        [] => Bytes::new(),
        [e] => one(e),
        many => {
            let parts: Vec<Bytes> = many.iter().map(one).collect();
            let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
            for p in &parts {
                out.extend_from_slice(p);
            }
            Bytes::from(out)
        }
    }
}

/// `GET /v1/streams/{stream}/ws`: checked like the events route before the upgrade, so an
/// unknown stream is a 404 and a full server a 503, not a closed socket.
pub fn websocket(
    state: &AppState,
    stream: &str,
    q: LiveQuery,
    ws: WebSocketUpgrade,
) -> Result<Response, AppError> {
    let opened = open(state, stream, q, Transport::WebSocket)?;
    let meta = (opened.first_seq, opened.last_seq, opened.shard);
    let follower = opened.follower;
    let mut resp = ws
        .max_message_size(WS_MAX_MESSAGE)
        .max_frame_size(WS_MAX_MESSAGE)
        .on_upgrade(move |socket| serve_ws(socket, follower))
        .into_response();
    position_headers(resp.headers_mut(), meta.0, meta.1, meta.2);
    Ok(resp)
}

async fn serve_ws(socket: WebSocket, mut f: Follower) {
    let (mut tx, mut rx) = socket.split();
    // The read half answers pings (tungstenite queues the pong for the next write) and
    // notices the client leaving.
    let gone = tokio_util::sync::CancellationToken::new();
    let reader = {
        let gone = gone.clone();
        tokio::spawn(async move {
            while let Some(Ok(msg)) = rx.next().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
            }
            gone.cancel();
        })
    };
    loop {
        let next = tokio::select! {
            biased;
            () = gone.cancelled() => break,
            n = f.next() => n,
        };
        let sent = match next {
            Next::Events(events) => {
                let mut r = Ok(());
                for e in &events {
                    let text = match Utf8Bytes::try_from(e.json()) {
                        Ok(t) => t,
                        Err(_) => continue, // canonical JSON is UTF-8
                    };
                    r = tx.feed(Message::Text(text)).await;
                    if r.is_err() {
                        break;
                    }
                }
                match r {
                    Ok(()) => tx.flush().await,
                    Err(e) => Err(e),
                }
            }
            // A WebSocket follower never asks for whole SSE publications.
            Next::Frames(_) => Ok(()),
            Next::Heartbeat => tx.send(Message::Ping(Bytes::new())).await,
            Next::Notice(Notice::Retained { from, first_seq }) => {
                let text =
                    format!("{{\"retained\":{{\"from\":{from},\"first_seq\":{first_seq}}}}}");
                tx.send(Message::Text(text.into())).await
            }
            Next::End(end) => {
                let (code, reason) = match end {
                    FollowEnd::Deleted { .. } => (1000, "deleted"),
                    FollowEnd::Done => (1000, "done"),
                    FollowEnd::Shutdown => (1001, "shutting down"),
                    FollowEnd::Failed(_) => (1011, "reading the log failed"),
                };
                let _ = tx
                    .send(Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })))
                    .await;
                break;
            }
        };
        if sent.is_err() {
            break;
        }
    }
    drop(f);
    // The client answers the close (or goes): give it a moment, then drop the socket.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), reader).await;
}
