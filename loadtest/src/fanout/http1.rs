//! The follower's HTTP/1.1 request: one `GET …/events?follow=true` on its own connection,
//! the response head ([`crate::http::wire`]), then a body the caller reads through
//! [`crate::http::chunked`].
//!
//! A follower is one task that awaits readiness and reads, synchronously, into its worker
//! thread's buffer ([`super::receive`]), so it holds no buffer of its own at rest, and a read
//! is decoded in place (chunks, then SSE) without a copy into a body frame: a fan-out run
//! holds thousands of followers on a load host that shares its cores with the server it
//! measures, so what a follower costs at rest and per event is the measurement's noise floor.

use crate::endpoint::Endpoint;
use crate::http::chunked::{BodyDecoder, ChunkError};
use crate::http::segment;
use crate::http::wire::{HeadError, Sock, parse_head, read_head};

/// An error body is read up to this much (for its error code, docs/API.md §10).
const MAX_ERROR_BODY: usize = 64 << 10;

/// Why a follow could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("sending the follow request: {0}")]
    Send(std::io::Error),
    #[error("the follow answer: {0}")]
    Head(#[from] HeadError),
    /// Not 200: the status and the error code (docs/API.md §10) of the body, when it has one.
    #[error("HTTP {status}{}", with_space(.code))]
    Status { status: u16, code: Option<String> },
    #[error("the follow answer is {0:?}, not text/event-stream")]
    NotSse(String),
    #[error(transparent)]
    Body(#[from] ChunkError),
    #[error("no answer to the follow request within {0} s")]
    Timeout(f64),
}

/// ` code`, or nothing.
fn with_space(code: &Option<String>) -> String {
    code.as_ref().map(|c| format!(" {c}")).unwrap_or_default()
}

/// The follow request: from `from`, or after `last_event_id` when resuming.
pub(super) fn follow_request(
    host: &str,
    stream: &str,
    token: Option<&str>,
    from: u64,
    last_event_id: Option<u64>,
) -> Vec<u8> {
    let path = format!("/v1/streams/{}/events?follow=true", segment(stream));
    let mut req = match last_event_id {
        Some(_) => format!("GET {path} HTTP/1.1\r\n"),
        None => format!("GET {path}&from={from} HTTP/1.1\r\n"),
    };
    req.push_str(&format!(
        "Host: {host}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
    ));
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

/// Send the follow request and read the response head. 200 `text/event-stream`: the
/// connection, its body decoder and the body bytes read with the head. Otherwise the status
/// and error code (docs/API.md §10).
pub(super) async fn open(
    ep: &Endpoint,
    req: &[u8],
) -> Result<(Sock, BodyDecoder, Vec<u8>), OpenError> {
    let mut sock = Sock::connect(ep).await.map_err(|e| OpenError::Connect {
        endpoint: ep.to_string(),
        source: e,
    })?;
    sock.write_all(req).await.map_err(OpenError::Send)?;
    let mut buf = Vec::with_capacity(1024);
    let head_end = read_head(&mut sock, &mut buf).await?;
    let head = parse_head(&buf[..head_end])?;
    let rest = buf.split_off(head_end);
    let mut dec = BodyDecoder::new(head.body);
    if head.status != 200 {
        // The error body (bounded), for its code.
        let mut body = Vec::new();
        let mut raw = rest;
        loop {
            dec.feed(&raw, &mut |d| {
                let room = MAX_ERROR_BODY.saturating_sub(body.len());
                body.extend_from_slice(&d[..d.len().min(room)]);
            })?;
            if dec.done() || body.len() >= MAX_ERROR_BODY {
                break;
            }
            raw.clear();
            raw.reserve(4096);
            if sock.read_buf(&mut raw).await.unwrap_or(0) == 0 {
                break;
            }
        }
        let code = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        return Err(OpenError::Status {
            status: head.status,
            code,
        });
    }
    let content_type = head.header("content-type").unwrap_or_default();
    if !content_type
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
    {
        return Err(OpenError::NotSse(content_type.to_string()));
    }
    Ok((sock, dec, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_requests() {
        let req = String::from_utf8(follow_request("h:1", "a/b c", Some("t"), 7, None))
            .unwrap_or_default();
        assert!(req.starts_with(
            "GET /v1/streams/a%2Fb%20c/events?follow=true&from=7 HTTP/1.1\r\nHost: h:1\r\n"
        ));
        assert!(req.contains("Accept: text/event-stream\r\n"));
        assert!(req.contains("Authorization: Bearer t\r\n") && req.ends_with("\r\n\r\n"));
        let req =
            String::from_utf8(follow_request("h:1", "s", None, 7, Some(9))).unwrap_or_default();
        assert!(req.starts_with("GET /v1/streams/s/events?follow=true HTTP/1.1\r\n"));
        assert!(req.contains("Last-Event-ID: 9\r\n") && !req.contains("Authorization"));
    }
}
