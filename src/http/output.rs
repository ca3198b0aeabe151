//! What a replay answer is, however it is served (paged by [`super::replay`], live or paced by
//! [`super::follow`]): its format, chosen by `Accept`, the headers that say where it starts,
//! and the 404 of a stream that does not exist. Both serve from here, so neither needs the
//! other's internals.

use super::AppError;
use super::streams::SHARD;
use axum::http::header::ACCEPT;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

const NDJSON: &str = "application/x-ndjson";
const JSON: &str = "application/json";
const YAML: &str = "application/yaml";
const FRAMES: &str = vx_proto::frames::CONTENT_TYPE;
const SSE: &str = "text/event-stream";
const SUPPORTED: [&str; 5] = [NDJSON, JSON, YAML, FRAMES, SSE];

const LAST_SEQ: HeaderName = HeaderName::from_static("x-vx-last-seq");
const FIRST_SEQ: HeaderName = HeaderName::from_static("x-vx-first-seq");

/// The body format chosen by `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Ndjson,
    JsonArray,
    /// YAML documents, one event per document (`vx_proto::canonical_yaml`).
    Yaml,
    /// EVENT frames of docs/PROTOCOL.md, one per event.
    Frames,
    /// Server-Sent Events: served by [`super::follow`] (live or paced, or a bounded range).
    Sse,
}

impl Output {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Output::Ndjson => NDJSON,
            Output::JsonArray => JSON,
            Output::Yaml => YAML,
            Output::Frames => FRAMES,
            Output::Sse => SSE,
        }
    }
}

/// Pick the output by `Accept` (media ranges by descending `q`, first match wins): NDJSON
/// for none, `*/*`, `application/*` and `application/x-ndjson` (or `application/jsonl`), a
/// JSON array for `application/json`, YAML documents for `application/yaml` (or
/// `application/x-yaml`, `text/yaml`), EVENT frames for `application/vnd.veltrix.frames`;
/// anything else is 406.
pub fn negotiate(headers: &HeaderMap) -> Result<Output, AppError> {
    let mut ranges: Vec<(f32, String)> = Vec::new();
    for value in headers.get_all(ACCEPT) {
        let value = value
            .to_str()
            .map_err(|_| AppError::bad_request("the Accept header is not ASCII"))?;
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            if media.is_empty() {
                continue;
            }
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if q > 0.0 {
                ranges.push((q, media));
            }
        }
    }
    if ranges.is_empty() && headers.get(ACCEPT).is_none() {
        return Ok(Output::Ndjson);
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, media) in &ranges {
        match media.as_str() {
            "application/x-ndjson" | "application/jsonl" | "application/*" | "*/*" => {
                return Ok(Output::Ndjson);
            }
            "application/json" => return Ok(Output::JsonArray),
            "application/yaml" | "application/x-yaml" | "text/yaml" => return Ok(Output::Yaml),
            "application/vnd.veltrix.frames" => return Ok(Output::Frames),
            "text/event-stream" => return Ok(Output::Sse),
            _ => {}
        }
    }
    Err(AppError::not_acceptable(
        "replay answers in application/x-ndjson, application/json, application/yaml, \
         application/vnd.veltrix.frames or (live) text/event-stream",
        &SUPPORTED,
    ))
}

/// `X-Vx-First-Seq`, `X-Vx-Last-Seq` and `X-Vx-Shard`: what every replay response, paged or
/// live, says of where it starts.
pub(super) fn position_headers(h: &mut HeaderMap, first_seq: u64, last_seq: u64, shard: u32) {
    h.insert(LAST_SEQ, HeaderValue::from(last_seq));
    h.insert(FIRST_SEQ, HeaderValue::from(first_seq));
    h.insert(SHARD, HeaderValue::from(shard));
}

/// 404 for a stream that does not exist (or was deleted), with the shard it would live on.
pub(super) fn unknown_stream(router: &vx_router::Router, stream: &str) -> AppError {
    AppError::not_found(format!("unknown stream {stream:?}"))
        .with_header(SHARD, router.shard_of(stream))
}
