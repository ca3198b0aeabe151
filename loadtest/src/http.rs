//! One HTTP/1.1 connection (hyper's low-level client) over TCP or a Unix socket, and the
//! Veltrix requests the scenarios send on it. A load slot owns its connection, so the number
//! of connections is exactly what the workload says (a pooled client would open more).

use crate::endpoint::Endpoint;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::{TcpStream, UnixStream};

/// A replay or error body is read in full only up to this much; larger bodies are counted
/// as they stream.
const MAX_KEPT_BODY: usize = 64 << 10;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot connect to {endpoint}: {cause}")]
    Connect {
        endpoint: String,
        cause: ConnectCause,
    },
    #[error("{0} is not an HTTP endpoint")]
    NotHttp(String),
    #[error("{0}")]
    Request(#[from] hyper::http::Error),
    #[error("{0}")]
    Send(#[from] hyper::Error),
    #[error("the body broke off: {0}")]
    Body(hyper::Error),
}

/// What failed while connecting.
#[derive(Debug, thiserror::Error)]
pub enum ConnectCause {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("{0}")]
    Handshake(hyper::Error),
    #[error("{0}")]
    Header(hyper::header::InvalidHeaderValue),
}

pub struct HttpConn {
    send: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    auth: Option<HeaderValue>,
}

/// What came back.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Body bytes received.
    pub bytes: u64,
    /// Newlines in the body (NDJSON replay: events).
    pub lines: u64,
    /// The body itself when it is at most `MAX_KEPT_BODY` and was asked for.
    pub body: Option<Bytes>,
}

impl Reply {
    /// `X-Vx-Retry-After-Ms`, else `Retry-After` (seconds).
    pub fn retry_after(&self) -> Option<Duration> {
        self.header_u64("x-vx-retry-after-ms")
            .map(Duration::from_millis)
            .or_else(|| self.header_u64("retry-after").map(Duration::from_secs))
    }

    pub fn header_u64(&self, name: &str) -> Option<u64> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
    }

    /// A short description of a failed answer: the status and the error code (docs/API.md §10).
    pub fn failure(&self) -> String {
        let code = self
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        match code {
            Some(code) => format!("HTTP {} {code}", self.status.as_u16()),
            None => format!("HTTP {}", self.status),
        }
    }
}

impl HttpConn {
    pub async fn connect(ep: &Endpoint, token: Option<&str>) -> Result<HttpConn, HttpError> {
        let fail = |cause: ConnectCause| HttpError::Connect {
            endpoint: ep.to_string(),
            cause,
        };
        let (send, host) = match ep {
            Endpoint::Http(addr) => {
                let tcp = TcpStream::connect(addr)
                    .await
                    .map_err(|e| fail(ConnectCause::Io(e)))?;
                tcp.set_nodelay(true)
                    .map_err(|e| fail(ConnectCause::Io(e)))?;
                (
                    handshake(TokioIo::new(tcp))
                        .await
                        .map_err(|e| fail(ConnectCause::Handshake(e)))?,
                    addr.as_str(),
                )
            }
            Endpoint::Unix(path) => {
                let uds = UnixStream::connect(path)
                    .await
                    .map_err(|e| fail(ConnectCause::Io(e)))?;
                (
                    handshake(TokioIo::new(uds))
                        .await
                        .map_err(|e| fail(ConnectCause::Handshake(e)))?,
                    "localhost",
                )
            }
            other => return Err(HttpError::NotHttp(other.to_string())),
        };
        let header = |v: &str| HeaderValue::from_str(v).map_err(|e| fail(ConnectCause::Header(e)));
        let host = header(host)?;
        let auth = match token {
            Some(t) => Some(header(&format!("Bearer {t}"))?),
            None => None,
        };
        Ok(HttpConn { send, host, auth })
    }

    /// Send one request and read the answer. `keep_body`: keep a small body (errors are
    /// always kept, so their code can be reported).
    pub async fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&'static str, &str)],
        body: Bytes,
        keep_body: bool,
    ) -> Result<Reply, HttpError> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.host.clone());
        if let Some(a) = &self.auth {
            req = req.header("authorization", a.clone());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(body))?;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let (parts, mut body) = resp.into_parts();
        let keep = keep_body || !status.is_success();
        let mut kept: Vec<u8> = Vec::new();
        let mut overflowed = false;
        let mut bytes = 0u64;
        let mut lines = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(HttpError::Body)?;
            if let Ok(data) = frame.into_data() {
                bytes += data.len() as u64;
                lines += memchr::memchr_iter(b'\n', &data).count() as u64;
                if keep && !overflowed {
                    if kept.len() + data.len() <= MAX_KEPT_BODY {
                        kept.extend_from_slice(&data);
                    } else {
                        // Never a body with a hole in it: past the limit, none at all.
                        overflowed = true;
                        kept = Vec::new();
                    }
                }
            }
        }
        Ok(Reply {
            status,
            headers: parts.headers,
            bytes,
            lines,
            body: (keep && !overflowed).then(|| Bytes::from(kept)),
        })
    }
}

async fn handshake<T>(io: TokioIo<T>) -> Result<SendRequest<Full<Bytes>>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (send, conn) = http1::handshake(io).await?;
    // The connection task ends when the slot drops its sender or the server closes.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// A path segment, percent-encoded (stream names may hold `/`).
/// How long to hold off after a 429 (or a frames `busy`): what the server asked, else a
/// second.
pub fn retry_pause(retry_after: Option<Duration>) -> Duration {
    retry_after.unwrap_or(Duration::from_secs(1))
}

pub fn segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}
