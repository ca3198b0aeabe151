//! Ingest (docs/API.md §3): `POST /v1/events`. Headers are checked first (content type, encoding,
//! durability, conditional write), then the body is decompressed (gzip, zstd) and decoded
//! incrementally by `vx_ingest` under the in-flight byte budget, then the batch goes through
//! the router's atomic admission to the log. Every answer, success or error, carries
//! `X-Vx-Queue-Fill`.

use super::AppError;
use super::openapi::schemas::{Binary, ContentEncoding, DurabilityAsked, ErrorBody, EventsJson};
use super::queue_fill::with_fill;
use crate::metrics::Measured;
use crate::state::AppState;
use crate::write::{Asked, Events, Written};
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::ser::SerializeMap;
use std::time::{Duration, Instant};
use vx_sys::now_ms;

const DURABILITY: &str = "x-vx-durability";
const EXPECTED_LAST_SEQ: &str = "x-vx-expected-last-seq";

/// `last_seq` as a JSON object in first-appearance order.
struct LastSeq<'a>(&'a [(String, u64)]);

impl Serialize for LastSeq<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (stream, seq) in self.0 {
            map.serialize_entry(stream, seq)?;
        }
        map.end()
    }
}

/// The 200 of a write (docs/API.md §3.6); cluster mode at `replicated` leaves out
/// `duplicates` and `last_seq` (§12.1).
#[derive(Serialize, utoipa::ToSchema)]
pub struct Stored<'a> {
    /// Events newly stored.
    accepted: u64,
    /// Repeats of stored ids (docs/API.md §2.4).
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicates: Option<u64>,
    /// Per stream, in first-appearance order: the highest seq newly assigned, or the stored
    /// seq of the duplicate when all of the stream's events were duplicates.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<std::collections::BTreeMap<String, u64>>)]
    last_seq: Option<LastSeq<'a>>,
    #[schema(value_type = crate::http::openapi::schemas::Durability)]
    durability: &'static str,
    /// Cluster mode: the write's position (also `X-Vx-Position`).
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<String>,
}

/// The metrics label of a decoder format.
fn format_label(format: vx_ingest::Format) -> &'static str {
    format.as_str()
}

/// What the headers ask for, checked before a byte of the body is read.
struct Request {
    format: vx_ingest::Format,
    encoding: vx_ingest::Encoding,
    durability: Asked,
    expected_last_seq: Option<u64>,
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, AppError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| AppError::bad_request(format!("header {name} is not ASCII")))
        })
        .transpose()
}

fn check_headers(headers: &HeaderMap, clustered: bool) -> Result<Request, AppError> {
    // A Content-Type that is not even ASCII is unsupported, like any other unknown type.
    let content_type = headers
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not ASCII)"));
    let format = vx_ingest::format_for(content_type)
        .map_err(|e| AppError::unsupported_media_type(e.to_string(), vx_ingest::SUPPORTED_TYPES))?;
    let encoding = encoding(headers)?;
    let durability = durability(headers, clustered)?;
    let expected_last_seq = header_str(headers, EXPECTED_LAST_SEQ)?
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                AppError::bad_request(format!(
                    "X-Vx-Expected-Last-Seq {v:?} is not a non-negative integer"
                ))
            })
        })
        .transpose()?;
    Ok(Request {
        format,
        encoding,
        durability,
        expected_last_seq,
    })
}

/// `Content-Encoding` of an ingest body (gzip, zstd or none), 415 for any other.
pub(super) fn encoding(headers: &HeaderMap) -> Result<vx_ingest::Encoding, AppError> {
    vx_ingest::encoding_for(header_str(headers, CONTENT_ENCODING.as_str())?).map_err(|e| {
        AppError::unsupported_media_type(e.to_string(), vx_ingest::SUPPORTED_ENCODINGS)
    })
}

/// A body that could not be read or decoded. Sent with [`closing`]: the rest of the body
/// was not read, and the body's share of the in-flight budget went with the error.
pub(super) fn body_error(e: vx_ingest::IngestError) -> AppError {
    match e {
        vx_ingest::IngestError::Input(e) => AppError::from(e),
        vx_ingest::IngestError::Body(msg) => {
            AppError::malformed(format!("reading the request body failed: {msg}"))
        }
        e @ vx_ingest::IngestError::Timeout(_) => AppError::timeout(e.to_string()),
        vx_ingest::IngestError::Internal(msg) => {
            tracing::error!(error = %msg, "reading a request body failed");
            AppError::internal(msg)
        }
    }
}

/// The one write path ([`crate::write`]) for every ingest route: the written batch, counted
/// per format, or the refusal (429 with `Retry-After`, a write error) as a counted answer.
pub(super) async fn submit(
    state: &AppState,
    label: &'static str,
    events: Events,
) -> Result<Written, Response> {
    let metrics = state.metrics();
    let count = events.batch.len() as u64;
    let Some(writes) = state.writes() else {
        let e = AppError::starting();
        metrics.rejected(e.code, label, Some(count));
        return Err(with_fill(e.into_response(), 0.0));
    };
    match writes.events(events).await {
        Ok(w) => {
            let handles = metrics.format(label);
            handles.ingested.inc_by(w.accepted);
            handles.duplicates.inc_by(w.duplicates.unwrap_or(0));
            Ok(w)
        }
        Err(refused) => {
            let fill = refused.queue_fill;
            let error = refused.into_app();
            metrics.rejected(error.code, label, Some(count));
            Err(with_fill(error.into_response(), fill))
        }
    }
}

/// `X-Vx-Durability`, on writes and deletes ([`crate::write::asked`]).
pub(crate) fn durability(headers: &HeaderMap, clustered: bool) -> Result<Asked, AppError> {
    let level = header_str(headers, DURABILITY)?;
    crate::write::asked(level, clustered).map_err(AppError::from)
}

/// The client's `Authorization`, passed on when another node must be asked (cluster mode).
pub(crate) fn auth(headers: &HeaderMap) -> Option<HeaderValue> {
    headers.get(axum::http::header::AUTHORIZATION).cloned()
}

/// The 200 of a write: its JSON body, and in cluster mode its position as a header too.
pub(crate) fn stored(took: &Written) -> Response {
    let position = took.position.as_ref().map(ToString::to_string);
    let body = Stored {
        accepted: took.accepted,
        duplicates: took.duplicates,
        last_seq: took.last_seq.as_deref().map(LastSeq),
        durability: took.durability.as_str(),
        position: position.clone(),
    };
    match serde_json::to_vec(&body) {
        Ok(json) => {
            let mut resp = (
                StatusCode::OK,
                [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                json,
            )
                .into_response();
            if let Some(p) = position.and_then(|p| HeaderValue::from_str(&p).ok()) {
                resp.headers_mut().insert(crate::cluster::POSITION, p);
            }
            resp
        }
        Err(e) => AppError::internal(format!("encoding the answer failed: {e}")).into_response(),
    }
}

/// A refusal sent before the body was read to its end: the rest of the body is never read,
/// so the connection cannot carry another request; say so rather than close it silently.
pub(super) fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(
        axum::http::header::CONNECTION,
        HeaderValue::from_static("close"),
    );
    resp
}

/// Ingest events
///
/// One request is atomic: every event in it is stored, or none is (docs/API.md §3). Bodies
/// are decoded as they arrive; the format is chosen by `Content-Type`, parameters ignored.
/// Every answer carries `X-Vx-Queue-Fill`.
#[utoipa::path(
    post,
    path = "/v1/events",
    operation_id = "ingest_events",
    tag = "ingest",
    params(
        ("Content-Encoding" = Option<ContentEncoding>, Header,
            description = "`gzip` (also `x-gzip`), `zstd` or `identity`; other codings are 415"),
        ("X-Vx-Durability" = Option<DurabilityAsked>, Header,
            description = "the durability level to reach before answering (docs/API.md §3.5; `replicated` and `applied` in cluster mode only, else 400); case-insensitive"),
        ("X-Vx-Expected-Last-Seq" = Option<u64>, Header,
            description = "conditional write: the stream's last seq must be this (0: empty); all events must belong to one stream"),
    ),
    request_body(
        description = "Events, in the format `Content-Type` names (docs/API.md §3.2)",
        content(
            (EventsJson = "application/json"),
            (String = "application/x-ndjson"),
            (String = "application/jsonl"),
            (EventsJson = "application/yaml"),
            (EventsJson = "application/x-yaml"),
            (EventsJson = "text/yaml"),
            (Binary = "application/vnd.veltrix.frames"),
        ),
    ),
    responses(
        (status = 200, description = "Stored (or a no-op), at the durability level reached", body = Stored,
            headers(("X-Vx-Position" = String, description = "cluster mode: the write's position"))),
        (status = 400, description = "`malformed`: not well-formed in the declared format; `bad_request`: a bad header", body = ErrorBody),
        (status = 408, description = "`timeout`: the body stalled for `ingest.body_timeout`", body = ErrorBody),
        (status = 409, description = "`conflict`: the expected last seq differs (`last_seq`)", body = ErrorBody),
        (status = 413, description = "`too_large`: a body, event, depth or expansion over its limit (`limit`, `max`)", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: the content type or encoding (`supported`)", body = ErrorBody),
        (status = 422, description = "`invalid_event`: an event breaks a rule (`index`, `field`)", body = ErrorBody),
        (status = 429, description = "`backpressure`", body = ErrorBody, headers(
            ("Retry-After" = u64, description = "whole seconds, at least 1"),
            ("X-Vx-Retry-After-Ms" = u64, description = "the same delay in milliseconds"))),
        (status = 500, description = "`internal`: a decoder failed for a reason of the server's own", body = ErrorBody),
        (status = 507, description = "`storage_full`", body = ErrorBody),
    ),
)]
pub async fn ingest(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let metrics = state.metrics();
    let req = match check_headers(&headers, state.cluster().is_some()) {
        Ok(r) => r,
        Err(e) => {
            metrics.rejected(e.code, "unknown", None);
            return closing(with_fill(e.into_response(), 0.0));
        }
    };
    let label = format_label(req.format);
    let reject = |e: AppError, events: Option<u64>, fill: f64| {
        metrics.rejected(e.code, label, events);
        with_fill(e.into_response(), fill)
    };
    if state.writes().is_none() {
        return closing(reject(AppError::starting(), None, 0.0));
    }

    let began = Instant::now();
    let mut decoding = Duration::ZERO;
    let decoded = vx_ingest::decode_encoded_body_timed(
        body.into_data_stream(),
        req.format,
        req.encoding,
        state.limits(),
        state.budget(),
        now_ms(),
        &mut decoding,
    )
    .await;
    let read = began.elapsed();
    // The permit holds the body's share of the in-flight budget until the batch is handed to
    // the router, whose queued-byte budget accounts for it from admission on (admission runs
    // at the first poll of `submit`, with no await in between).
    let (batch, permit) = match decoded {
        Ok(ok) => ok,
        Err(e) => return closing(reject(body_error(e), None, 0.0)),
    };
    let events = batch.len() as u64;
    if req.expected_last_seq.is_some() && batch.runs().len() > 1 {
        return reject(
            AppError::bad_request(
                "X-Vx-Expected-Last-Seq needs all events of the request in one stream",
            ),
            Some(events),
            0.0,
        );
    }

    drop(permit);
    let decoded_at = Instant::now();
    let submitted = submit(
        &state,
        label,
        Events {
            batch,
            asked: req.durability,
            expected_last_seq: req.expected_last_seq,
            auth: auth(&headers),
        },
    )
    .await;
    match submitted {
        Ok(took) => {
            let resp = with_fill(stored(&took), took.queue_fill);
            let measured = Measured {
                receive: Some(read.saturating_sub(decoding)),
                decode: Some(decoding),
                decoded: decoded_at,
                done: Instant::now(),
            };
            metrics.stages.observe(&measured, &took.stages);
            resp
        }
        Err(refused) => refused,
    }
}
