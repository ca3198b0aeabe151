//! HTTP/1.1 on the wire, as both of vx-loadtest's clients speak it (the load lanes'
//! [`super::HttpConn`] and the fan-out followers'): the socket, reading a response head
//! (bounded), and parsing it into what a client needs: the status, how the body is
//! delimited, whether the server closes, and the header lines for lookups.

use super::chunked::BodyKind;
use crate::endpoint::Endpoint;
use std::ops::Range;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// A response head longer than this is refused.
pub const MAX_HEAD: usize = 64 << 10;

/// Why a response head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("reading the answer: {0}")]
    Read(std::io::Error),
    #[error("a response head over 64 KiB")]
    TooLong,
    #[error("the server closed the connection before answering")]
    Closed,
    #[error("not an HTTP/1.x answer: {0:?}")]
    NotHttp(String),
    #[error("a malformed response head: {0}")]
    Malformed(httparse::Error),
    #[error("a response head without its end")]
    Partial,
}

/// A connection over TCP (`TCP_NODELAY`) or a Unix socket.
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    pub async fn connect(ep: &Endpoint) -> std::io::Result<Sock> {
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

    pub async fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.write_all(b).await,
            Sock::Unix(s) => s.write_all(b).await,
        }
    }

    /// Read into `b`'s spare capacity (reserve first).
    pub async fn read_buf(&mut self, b: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read_buf(b).await,
            Sock::Unix(s) => s.read_buf(b).await,
        }
    }

    pub async fn readable(&self) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.readable().await,
            Sock::Unix(s) => s.readable().await,
        }
    }

    pub fn try_read(&self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.try_read(b),
            Sock::Unix(s) => s.try_read(b),
        }
    }
}

/// Read from `sock` into `buf` (which may already hold bytes) until it holds a whole response
/// head; returns the head's length, its blank line included. Bytes after it (the body's
/// start) stay in `buf`.
pub async fn read_head(sock: &mut Sock, buf: &mut Vec<u8>) -> Result<usize, HeadError> {
    let mut searched = 0;
    loop {
        // A CRLFCRLF may straddle the previous read: look again from 3 bytes before its end.
        if let Some(i) = memchr::memmem::find(&buf[searched..], b"\r\n\r\n") {
            return Ok(searched + i + 4);
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLong);
        }
        searched = buf.len().saturating_sub(3);
        buf.reserve(4096);
        if sock.read_buf(buf).await.map_err(HeadError::Read)? == 0 {
            return Err(HeadError::Closed);
        }
    }
}

/// Most header lines a response head may have.
const MAX_HEADERS: usize = 64;

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub body: BodyKind,
    /// The server closes the connection after this answer (`Connection: close`, HTTP/1.0
    /// without keep-alive, or a body that ends at the close).
    pub close: bool,
    /// The head's bytes and where each header's name and value are in them, for
    /// [`Head::header`].
    bytes: Vec<u8>,
    fields: Vec<(Range<usize>, Range<usize>)>,
}

impl Head {
    /// The value of the first header named `name` (ASCII case-insensitive), if it is UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        let (_, value) = self.fields.iter().find(|(n, _)| {
            self.bytes
                .get(n.clone())
                .is_some_and(|n| n.eq_ignore_ascii_case(name.as_bytes()))
        })?;
        std::str::from_utf8(self.bytes.get(value.clone())?).ok()
    }
}

/// Parse a response head (httparse; its blank line may be included). A 1xx, 204 or 304
/// answer has no body whatever its headers say (RFC 9112 §6.3).
pub fn parse_head(head: &[u8]) -> Result<Head, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let first_line = || {
        let end = memchr::memchr(b'\r', head).unwrap_or(head.len()).min(200);
        HeadError::NotHttp(String::from_utf8_lossy(&head[..end]).into_owned())
    };
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HeadError::Partial),
        Err(httparse::Error::Version | httparse::Error::Status) => return Err(first_line()),
        Err(e) => return Err(HeadError::Malformed(e)),
    }
    let (Some(status), Some(version)) = (resp.code, resp.version) else {
        return Err(first_line());
    };
    // Where a slice of `head` starts in it.
    let at = |s: &[u8]| (s.as_ptr() as usize).saturating_sub(head.as_ptr() as usize);
    let (mut chunked, mut length, mut close) = (false, None, version == 0);
    let mut fields = Vec::with_capacity(resp.headers.len());
    for h in resp.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        fields.push((
            at(name)..at(name) + name.len(),
            at(value)..at(value) + value.len(),
        ));
        let has = |token: &[u8]| {
            value
                .split(|&b| b == b',')
                .any(|v| v.trim_ascii().eq_ignore_ascii_case(token))
        };
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = has(b"chunked");
        } else if name.eq_ignore_ascii_case(b"content-length") {
            length = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
        } else if name.eq_ignore_ascii_case(b"connection") {
            if has(b"close") {
                close = true;
            } else if has(b"keep-alive") {
                close = false;
            }
        }
    }
    let body = match (chunked, length) {
        _ if matches!(status, 100..=199 | 204 | 304) => BodyKind::Length(0),
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    };
    Ok(Head {
        status,
        body,
        close: close || body == BodyKind::UntilClose,
        bytes: head.to_vec(),
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: chunked\r\nX-Vx-First-Seq: 1\r\n\r\n");
        let h = h.ok();
        assert_eq!(
            h.as_ref().map(|h| (h.status, h.body, h.close)),
            Some((200, BodyKind::Chunked, false))
        );
        assert_eq!(
            h.as_ref().and_then(|h| h.header("content-type")),
            Some("text/event-stream")
        );
        assert_eq!(
            h.as_ref().and_then(|h| h.header("x-vx-first-seq")),
            Some("1")
        );
        assert_eq!(h.as_ref().and_then(|h| h.header("x-vx-last-seq")), None);
        let h = parse_head(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 12\r\nconnection: close\r\n\r\n",
        );
        assert_eq!(
            h.ok().map(|h| (h.status, h.body, h.close)),
            Some((503, BodyKind::Length(12), true))
        );
        // Neither length nor chunked: the body runs to the close.
        let h = parse_head(b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(
            h.ok().map(|h| (h.body, h.close)),
            Some((BodyKind::UntilClose, true))
        );
        // No body on a 204, whatever it says; HTTP/1.0 closes unless kept alive.
        let h = parse_head(b"HTTP/1.0 204 No Content\r\ncontent-length: 5\r\n\r\n");
        assert_eq!(
            h.ok().map(|h| (h.body, h.close)),
            Some((BodyKind::Length(0), true))
        );
        assert!(matches!(
            parse_head(b"SSH-2.0\r\n\r\n"),
            Err(HeadError::NotHttp(_))
        ));
        assert!(matches!(
            parse_head(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        // A value that is not UTF-8 is there, but not as text.
        let h = parse_head(b"HTTP/1.1 200 OK\r\nx-a: \xff\r\nx-b: 2\r\n\r\n").ok();
        assert_eq!(h.as_ref().and_then(|h| h.header("x-a")), None);
        assert_eq!(h.as_ref().and_then(|h| h.header("X-B")), Some("2"));
    }
}
