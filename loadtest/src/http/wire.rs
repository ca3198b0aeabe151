//! HTTP/1.1 on the wire, as both of vx-loadtest's clients speak it (the load lanes'
//! [`super::HttpConn`] and the fan-out followers'): the socket, reading a response head
//! (bounded), and parsing it into what a client needs: the status, how the body is
//! delimited, whether the server closes, and the header lines for lookups.

use super::chunked::BodyKind;
use crate::endpoint::Endpoint;
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
    #[error("a response head that is not UTF-8")]
    NotUtf8,
    #[error("not an HTTP/1.x answer: {0:?}")]
    NotHttp(String),
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

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub body: BodyKind,
    /// The server closes the connection after this answer (`Connection: close`, HTTP/1.0
    /// without keep-alive, or a body that ends at the close).
    pub close: bool,
    /// The head's text, for [`Head::header`].
    text: String,
}

impl Head {
    /// The value of the first header named `name` (ASCII case-insensitive), trimmed.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.text.split("\r\n").skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Parse a response head (its blank line may be included). A 1xx, 204 or 304 answer has no
/// body whatever its headers say (RFC 9112 §6.3).
pub fn parse_head(head: &[u8]) -> Result<Head, HeadError> {
    let text = std::str::from_utf8(head).map_err(|_| HeadError::NotUtf8)?;
    let status_line = text.split("\r\n").next().unwrap_or_default();
    let (version, status) = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| {
            let mut parts = rest.split(' ');
            Some((parts.next()?, parts.next()?.parse::<u16>().ok()?))
        })
        .ok_or_else(|| HeadError::NotHttp(status_line.to_string()))?;
    let mut head = Head {
        status,
        body: BodyKind::UntilClose,
        close: version == "0",
        text: text.to_string(),
    };
    let (mut chunked, mut length) = (false, None);
    for line in text.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<u64>().ok();
        } else if name.eq_ignore_ascii_case("connection") {
            let value = value.to_ascii_lowercase();
            if value.contains("close") {
                head.close = true;
            } else if value.contains("keep-alive") {
                head.close = false;
            }
        }
    }
    head.body = match (chunked, length) {
        _ if matches!(status, 100..=199 | 204 | 304) => BodyKind::Length(0),
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    };
    head.close |= head.body == BodyKind::UntilClose;
    Ok(head)
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
            parse_head(b"HTTP/1.1 200 \xff\r\n\r\n"),
            Err(HeadError::NotUtf8)
        ));
    }
}
