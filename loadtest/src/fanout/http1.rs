//! The follower's HTTP/1.1 client: one `GET …/events?follow=true` on its own connection, the
//! response head, then a body read by the caller through [`super::chunked`].
//!
//! Why not hyper, which the load lanes use ([`crate::http`])? A fan-out run holds thousands of
//! followers on a load host that shares its cores with the server it measures, so what a
//! follower costs at rest and per event is the measurement's noise floor. A hyper client
//! connection is a connection task plus a request handle and a channel between them, and it
//! owns a read buffer per connection (8 KiB and up) that stays allocated while the follower
//! waits. Here a follower is one task that awaits readiness and reads, synchronously, into its
//! worker thread's buffer, so it holds no buffer of its own at rest, and a read is decoded in
//! place (chunks, then SSE) without a copy into a body frame. That needs only a small subset
//! of HTTP/1.1: one request per connection, a response head bounded to 64 KiB, and a chunked,
//! sized or close-delimited body. No benchmark could compare the two on this refactor, so the
//! client stays what it was on the wire, moved into this small module.

use super::chunked::{BodyDecoder, BodyKind, ChunkError};
use crate::endpoint::Endpoint;
use crate::http::segment;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// A response head longer than this is refused.
const MAX_HEAD: usize = 64 << 10;
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
    #[error("reading the follow answer: {0}")]
    Read(std::io::Error),
    #[error("a response head over 64 KiB")]
    HeadTooLong,
    #[error("the server closed the connection before answering")]
    Closed,
    #[error("a response head that is not UTF-8")]
    HeadNotUtf8,
    #[error("not an HTTP/1.x answer: {0:?}")]
    NotHttp(String),
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

pub(super) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// ` code`, or nothing.
fn with_space(code: &Option<String>) -> String {
    code.as_ref().map(|c| format!(" {c}")).unwrap_or_default()
}

impl Sock {
    async fn connect(ep: &Endpoint) -> std::io::Result<Sock> {
        match ep {
            Endpoint::Http(addr) => {
                let s = TcpStream::connect(addr.as_str()).await?;
                s.set_nodelay(true)?;
                Ok(Sock::Tcp(s))
            }
            Endpoint::Unix(path) => Ok(Sock::Unix(UnixStream::connect(path).await?)),
            other => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{other} is not an HTTP endpoint"),
            )),
        }
    }

    async fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.write_all(b).await,
            Sock::Unix(s) => s.write_all(b).await,
        }
    }

    async fn read_buf(&mut self, b: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read_buf(b).await,
            Sock::Unix(s) => s.read_buf(b).await,
        }
    }

    pub(super) async fn readable(&self) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.readable().await,
            Sock::Unix(s) => s.readable().await,
        }
    }

    pub(super) fn try_read(&self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.try_read(b),
            Sock::Unix(s) => s.try_read(b),
        }
    }
}

/// The parts of a response head a follower needs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    body: BodyKind,
    content_type: String,
}

fn parse_head(head: &[u8]) -> Result<Head, OpenError> {
    let text = std::str::from_utf8(head).map_err(|_| OpenError::HeadNotUtf8)?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| OpenError::NotHttp(status_line.to_string()))?;
    let (mut chunked, mut length, mut content_type) = (false, None, String::new());
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-length" => length = value.parse::<u64>().ok(),
            "content-type" => content_type = value.to_ascii_lowercase(),
            _ => {}
        }
    }
    let body = match (chunked, length) {
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    };
    Ok(Head {
        status,
        body,
        content_type,
    })
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
    let head_end = loop {
        if let Some(i) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(OpenError::HeadTooLong);
        }
        buf.reserve(1024);
        let n = sock.read_buf(&mut buf).await.map_err(OpenError::Read)?;
        if n == 0 {
            return Err(OpenError::Closed);
        }
    };
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
    if !head.content_type.starts_with("text/event-stream") {
        return Err(OpenError::NotSse(head.content_type));
    }
    Ok((sock, dec, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_and_requests() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: chunked\r\nX-Vx-First-Seq: 1\r\n\r\n");
        assert_eq!(
            h.ok(),
            Some(Head {
                status: 200,
                body: BodyKind::Chunked,
                content_type: "text/event-stream".into()
            })
        );
        let h = parse_head(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 12\r\n\r\n");
        assert_eq!(
            h.ok().map(|h| (h.status, h.body)),
            Some((503, BodyKind::Length(12)))
        );
        assert!(matches!(
            parse_head(b"SSH-2.0\r\n\r\n"),
            Err(OpenError::NotHttp(_))
        ));
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
