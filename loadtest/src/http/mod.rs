//! vx-loadtest's HTTP/1.1 client: one connection per load slot over TCP or a Unix socket
//! ([`HttpConn`]), one request at a time, and the Veltrix requests the scenarios send on it. A
//! load slot owns its connection, so the number of connections is exactly what the workload
//! says (a pooled client would open more).
//!
//! Why not hyper's client? The load generator shares the cores with the server it measures,
//! so what a request costs the client is charged to the server in every closed-loop rate and
//! open-loop tail measured on one box. A hyper client connection is a connection task plus a
//! request handle and a channel between them: every request crosses two tasks twice, and its
//! head goes through `http`'s typed request and header map. On the 2-core box that was about
//! 32 µs of client CPU per 1-event read, twice the RESP lane's 15 µs for the same read
//! (docs/BENCHMARKS.md, issue 32). Here the slot's own task writes the request (head and a
//! small body in one write) and reads the answer in place: the head is parsed for its status,
//! framing and close ([`wire`]), the body decoded by [`chunked`], header lookups scan the
//! head's text. What is needed of HTTP/1.1 is small: requests we write ourselves, answers
//! with `Content-Length`, chunked or close-delimited bodies, no 1xx but skipped, no upgrades.

pub mod chunked;
pub mod wire;

use self::chunked::{BodyDecoder, ChunkError};
use self::wire::{Head, HeadError, Sock, parse_head, read_head};
use crate::endpoint::Endpoint;
use bytes::Bytes;
use std::time::Duration;

/// A replay or error body is read in full only up to this much; larger bodies are counted
/// as they stream.
const MAX_KEPT_BODY: usize = 64 << 10;
/// A body up to this size goes out in the same write as the head; a larger one in a second.
const INLINE_BODY: usize = 16 << 10;
/// Bytes read at once while a body streams in.
const READ_CHUNK: usize = 64 << 10;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("{0} is not an HTTP endpoint")]
    NotHttp(String),
    #[error("sending the request: {0}")]
    Send(std::io::Error),
    #[error(transparent)]
    Head(#[from] HeadError),
    #[error("the body broke off: {0}")]
    Body(std::io::Error),
    #[error("the body broke off: the server closed the connection")]
    BodyClosed,
    #[error("the body's framing: {0}")]
    Chunk(#[from] ChunkError),
}

/// What came back.
pub struct Reply {
    pub status: u16,
    head: Head,
    /// Body bytes received.
    pub bytes: u64,
    /// Newlines in the body (NDJSON replay: events).
    pub lines: u64,
    /// The body itself when it is at most `MAX_KEPT_BODY` and was asked for.
    pub body: Option<Bytes>,
}

impl Reply {
    /// A 2xx answer.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `X-Vx-Retry-After-Ms`, else `Retry-After` (seconds).
    pub fn retry_after(&self) -> Option<Duration> {
        self.header_u64("x-vx-retry-after-ms")
            .map(Duration::from_millis)
            .or_else(|| self.header_u64("retry-after").map(Duration::from_secs))
    }

    pub fn header_u64(&self, name: &str) -> Option<u64> {
        self.head.header(name).and_then(|v| v.parse().ok())
    }

    /// A short description of a failed answer: the status and the error code (docs/API.md §10).
    pub fn failure(&self) -> String {
        let code = self
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        match code {
            Some(code) => format!("HTTP {} {code}", self.status),
            None => format!("HTTP {}", self.status),
        }
    }

    /// A reply as the lanes' unit tests need one.
    #[cfg(test)]
    pub fn for_test(status: u16, headers: &[(&str, &str)], body: &str) -> Reply {
        let mut text = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        text.push_str("\r\n");
        let head = parse_head(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        Reply {
            status,
            head,
            bytes: body.len() as u64,
            lines: 0,
            body: Some(Bytes::from(body.to_string())),
        }
    }
}

/// One keep-alive connection; after an answer that closes it, the next request opens a new
/// one first.
pub struct HttpConn {
    endpoint: Endpoint,
    sock: Option<Sock>,
    /// `Host:` and `Authorization:` lines, written into every request.
    fixed: String,
    /// The request being written (reused).
    out: Vec<u8>,
    /// Bytes read and not yet used (reused).
    buf: Vec<u8>,
}

impl HttpConn {
    pub async fn connect(ep: &Endpoint, token: Option<&str>) -> Result<HttpConn, HttpError> {
        let host = match ep {
            Endpoint::Http(addr) => addr.as_str(),
            Endpoint::Unix(_) => "localhost",
            other => return Err(HttpError::NotHttp(other.to_string())),
        };
        let mut fixed = format!("host: {host}\r\n");
        if let Some(t) = token {
            fixed.push_str(&format!("authorization: Bearer {t}\r\n"));
        }
        let mut conn = HttpConn {
            endpoint: ep.clone(),
            sock: None,
            fixed,
            out: Vec::with_capacity(1024),
            buf: Vec::with_capacity(8192),
        };
        conn.open().await?;
        Ok(conn)
    }

    async fn open(&mut self) -> Result<(), HttpError> {
        let sock = Sock::connect(&self.endpoint)
            .await
            .map_err(|source| HttpError::Connect {
                endpoint: self.endpoint.to_string(),
                source,
            })?;
        self.buf.clear();
        self.sock = Some(sock);
        Ok(())
    }

    /// Send one request and read the answer. `keep_body`: keep a small body (errors are
    /// always kept, so their code can be reported). A call dropped before it returns leaves
    /// the connection in an unknown state: the lanes then drop it.
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&'static str, &str)],
        body: Bytes,
        keep_body: bool,
    ) -> Result<Reply, HttpError> {
        self.write_request(method, path, headers, &body).await?;
        let head = self.read_answer_head().await?;
        let reply = self.read_body(head, keep_body).await;
        if reply.as_ref().map_or(true, |r| r.head.close) {
            self.sock = None;
        }
        reply
    }

    async fn write_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&'static str, &str)],
        body: &[u8],
    ) -> Result<(), HttpError> {
        use std::io::Write as _;
        let out = &mut self.out;
        out.clear();
        // Writes into a Vec cannot fail.
        let _ = write!(out, "{method} {path} HTTP/1.1\r\n{}", self.fixed);
        for (k, v) in headers {
            let _ = write!(out, "{k}: {v}\r\n");
        }
        if !body.is_empty() || !matches!(method, "GET" | "HEAD" | "DELETE") {
            let _ = write!(out, "content-length: {}\r\n", body.len());
        }
        out.extend_from_slice(b"\r\n");
        let inline = body.len() <= INLINE_BODY;
        if inline {
            out.extend_from_slice(body);
        }
        if self.sock.is_none() {
            self.open().await?;
        }
        let Some(sock) = self.sock.as_mut() else {
            return Err(HeadError::Closed.into());
        };
        sock.write_all(&self.out).await.map_err(HttpError::Send)?;
        if !inline {
            sock.write_all(body).await.map_err(HttpError::Send)?;
        }
        Ok(())
    }

    /// The answer's head, skipping any 1xx; the body's first bytes stay in `buf`.
    async fn read_answer_head(&mut self) -> Result<Head, HttpError> {
        let Some(sock) = self.sock.as_mut() else {
            return Err(HeadError::Closed.into());
        };
        loop {
            let end = read_head(sock, &mut self.buf).await?;
            let head = parse_head(&self.buf[..end])?;
            self.buf.drain(..end);
            if !(100..200).contains(&head.status) {
                return Ok(head);
            }
        }
    }

    async fn read_body(&mut self, head: Head, keep_body: bool) -> Result<Reply, HttpError> {
        let keep = keep_body || !(200..300).contains(&head.status);
        let mut dec = BodyDecoder::new(head.body);
        let mut acc = BodyAcc::new(keep);
        let mut pending = std::mem::take(&mut self.buf);
        let result = loop {
            if let Err(e) = dec.feed(&pending, &mut |d| acc.add(d)) {
                break Err(e.into());
            }
            pending.clear();
            if dec.done() {
                break Ok(());
            }
            let Some(sock) = self.sock.as_mut() else {
                break Err(HttpError::BodyClosed);
            };
            pending.reserve(READ_CHUNK.min(acc.expected(&head)));
            match sock.read_buf(&mut pending).await {
                Ok(0) if head.body == chunked::BodyKind::UntilClose => break Ok(()),
                Ok(0) => break Err(HttpError::BodyClosed),
                Ok(_) => {}
                Err(e) => break Err(HttpError::Body(e)),
            }
        };
        // One request at a time: nothing follows the body, so the buffer is empty again.
        pending.clear();
        self.buf = pending;
        result?;
        Ok(Reply {
            status: head.status,
            bytes: acc.bytes,
            lines: acc.lines,
            body: acc.into_body(),
            head,
        })
    }
}

/// A body as it streams in: counted, and kept while it fits.
struct BodyAcc {
    bytes: u64,
    lines: u64,
    kept: Option<Vec<u8>>,
}

impl BodyAcc {
    fn new(keep: bool) -> BodyAcc {
        BodyAcc {
            bytes: 0,
            lines: 0,
            kept: keep.then(Vec::new),
        }
    }

    fn add(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        self.lines += memchr::memchr_iter(b'\n', data).count() as u64;
        if let Some(kept) = &mut self.kept {
            if kept.len() + data.len() <= MAX_KEPT_BODY {
                kept.extend_from_slice(data);
            } else {
                // Never a body with a hole in it: past the limit, none at all.
                self.kept = None;
            }
        }
    }

    /// What is left to read of a sized body, else a read's worth.
    fn expected(&self, head: &Head) -> usize {
        match head.body {
            chunked::BodyKind::Length(n) => {
                usize::try_from(n.saturating_sub(self.bytes)).unwrap_or(READ_CHUNK)
            }
            _ => READ_CHUNK,
        }
    }

    fn into_body(self) -> Option<Bytes> {
        self.kept.map(Bytes::from)
    }
}

/// How long to hold off after a 429 (or a frames `busy`): what the server asked, else a
/// second.
pub fn retry_pause(retry_after: Option<Duration>) -> Duration {
    retry_after.unwrap_or(Duration::from_secs(1))
}

/// A path segment, percent-encoded (stream names may hold `/`).
pub fn segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A scripted server: each accepted connection answers its requests, in order, with the
    /// next of `answers` (a connection ends when its answer says `close`); it sends back what
    /// it read, request by request, once the answers have run out and the client closed.
    async fn server(
        answers: Vec<&'static [u8]>,
    ) -> (Endpoint, tokio::task::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let ep = Endpoint::Http(l.local_addr().map(|a| a.to_string()).unwrap_or_default());
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut answers = answers.into_iter();
            'conns: while let Ok((mut s, _)) = l.accept().await {
                loop {
                    let mut req = Vec::new();
                    let mut b = [0u8; 4096];
                    // Requests here are small: a head and at most a short body.
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) if answers.len() == 0 => break 'conns,
                            Ok(0) | Err(_) => continue 'conns,
                            Ok(n) => req.extend_from_slice(&b[..n]),
                        }
                    }
                    seen.push(String::from_utf8_lossy(&req).into_owned());
                    let Some(a) = answers.next() else {
                        break 'conns;
                    };
                    let _ = s.write_all(a).await;
                    if memchr::memmem::find(a, b"close").is_some() {
                        continue 'conns;
                    }
                }
            }
            seen
        });
        (ep, task)
    }

    async fn call(c: &mut HttpConn, m: &str, body: &'static str, keep: bool) -> Reply {
        let body = Bytes::from_static(body.as_bytes());
        c.call(m, "/p?q=1", &[("x-a", "b")], body, keep)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn answers_of_every_framing_on_one_connection_and_a_new_one_after_close() {
        let (ep, task) = server(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nx-vx-next-seq: 7\r\n\r\na\nb\nc\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nx\ny\r\n2\r\nz\n\r\n0\r\n\r\n",
            b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 45\r\nx-vx-retry-after-ms: 25\r\nconnection: close\r\n\r\n{\"error\":{\"code\":\"overloaded\",\"message\":\"x\"}}",
            b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil close\n",
            b"HTTP/1.1 204 No Content\r\ncontent-length: 3\r\n\r\n",
        ])
        .await;
        let mut c = HttpConn::connect(&ep, Some("tok"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r = call(&mut c, "GET", "", true).await;
        assert_eq!((r.status, r.bytes, r.lines), (200, 6, 3));
        assert_eq!(r.header_u64("X-Vx-Next-Seq"), Some(7));
        assert_eq!(r.body.as_deref(), Some(&b"a\nb\nc\n"[..]));
        // Chunked, after a 1xx; a success's body is only counted unless asked for.
        let r = call(&mut c, "POST", "{}", false).await;
        assert_eq!((r.status, r.bytes, r.lines, r.body), (200, 5, 2, None));
        // An error's body is kept for its code.
        let r = call(&mut c, "GET", "", false).await;
        assert_eq!(r.failure(), "HTTP 429 overloaded");
        assert_eq!(r.retry_after(), Some(Duration::from_millis(25)));
        // The server closed: the next request goes out on a new connection; its body runs to
        // the close.
        let r = call(&mut c, "DELETE", "", true).await;
        assert_eq!(
            (r.status, r.body.as_deref()),
            (200, Some(&b"until close\n"[..]))
        );
        let r = call(&mut c, "PUT", "", true).await;
        assert_eq!((r.status, r.bytes), (204, 0));
        drop(c);
        let seen = task.await.unwrap_or_default();
        assert_eq!(seen.len(), 5);
        assert!(seen[0].starts_with("GET /p?q=1 HTTP/1.1\r\nhost: 127.0.0.1:"));
        assert!(seen[0].contains("\r\nauthorization: Bearer tok\r\nx-a: b\r\n\r\n"));
        assert!(!seen[0].contains("content-length"));
        assert!(seen[1].starts_with("POST ") && seen[1].ends_with("content-length: 2\r\n\r\n{}"));
        assert!(seen[4].starts_with("PUT ") && seen[4].contains("content-length: 0\r\n"));
    }

    #[tokio::test]
    async fn a_body_cut_short_or_a_head_too_long_is_an_error() {
        let long: &'static [u8] = Box::leak(
            [
                &b"HTTP/1.1 200 OK\r\nx: "[..],
                &vec![b'y'; 2 * wire::MAX_HEAD],
                b"\r\n\r\n",
            ]
            .concat()
            .into_boxed_slice(),
        );
        let (ep, _task) = server(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\nshort",
            long,
        ])
        .await;
        let mut c = HttpConn::connect(&ep, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let r = c.call("GET", "/", &[], Bytes::new(), true).await;
        assert!(matches!(r, Err(HttpError::BodyClosed)), "{:?}", r.err());
        let r = c.call("GET", "/", &[], Bytes::new(), true).await;
        assert!(
            matches!(r, Err(HttpError::Head(HeadError::TooLong))),
            "{:?}",
            r.err()
        );
    }
}
