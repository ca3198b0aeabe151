//! The client side of the CLI (docs/API.md §7): commands that talk to a running server over HTTP, on
//! TCP (`--server http://HOST:PORT`) or the Unix socket (`--server unix:/path`), with an
//! optional bearer token. This module owns what they share: the server address and token
//! ([`ClientArgs`]), the HTTP client, the one error type ([`ClientError`], printed as one
//! line by `main`), reading the error body (docs/API.md §10), and the retry delays.
//!
//! # Layout
//! - here: `veltrix health` (also the container image's `HEALTHCHECK`, see the Dockerfile).
//! - [`ingest`]: `veltrix ingest`, sending batches; [`split`]: cutting its input into batches.
//! - [`tail`]: `veltrix tail`, a live follow that resumes after a dropped connection.
//! - [`read`]: `veltrix replay` and `veltrix features`.

pub mod ingest;
pub mod read;
pub mod split;
pub mod tail;

use clap::Args;
use reqwest::{RequestBuilder, Response, StatusCode};
use std::time::Duration;

/// Where the server is, and how to authenticate: shared by every client command.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Server URL: http://HOST:PORT, or unix:/path/to.sock for the Unix socket.
    #[arg(
        long,
        env = "VX_SERVER",
        default_value = "http://127.0.0.1:7100",
        value_name = "URL"
    )]
    pub server: String,
    /// Bearer token (auth.tokens).
    #[arg(long, env = "VX_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Give up on a connection attempt, or on an answer that stops arriving, after this many
    /// seconds (`health`: on the whole request).
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub timeout: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--server {0:?}: expected http://HOST:PORT or unix:/path/to.sock")]
    BadServer(String),
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
    #[error("cannot connect to {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("{server}: no answer within {seconds} s")]
    Timeout { server: String, seconds: u64 },
    #[error("{server}: {reason}")]
    Request { server: String, reason: String },
    #[error("{server}: not ready ({status}): {message}")]
    NotReady {
        server: String,
        status: u16,
        message: String,
    },
    /// An answer in the error shape of docs/API.md §10 (or, from something else, its status and text).
    #[error("{}", server_error(*status, code, message, detail))]
    Server {
        status: u16,
        code: String,
        message: String,
        /// The error's details (`index`, `line`, `field`, …) as `key=value` pairs.
        detail: String,
    },
    #[error("{0}")]
    Output(String),
}

fn server_error(status: u16, code: &str, message: &str, detail: &str) -> String {
    let mut s = format!("server answered {status} {code}: {message}");
    if !detail.is_empty() {
        s.push_str(" (");
        s.push_str(detail);
        s.push(')');
    }
    s
}

impl ClientError {
    /// Worth trying again: the server pushed back or could not be reached.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connect { .. } | ClientError::Timeout { .. } => true,
            ClientError::Request { .. } => true,
            ClientError::Server { status, .. } => matches!(status, 429 | 503),
            _ => false,
        }
    }

    /// The server's error code, if it answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Server { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A client bound to one server.
pub struct Client {
    http: reqwest::Client,
    base: String,
    server: String,
    token: Option<String>,
    timeout: u64,
}

/// How long requests of a command may take.
#[derive(Clone, Copy, Debug)]
pub enum Timeouts {
    /// The whole request (`health`: one small answer).
    Total,
    /// Connecting, and each wait for more of the answer: a long body that keeps arriving
    /// is never cut off (ingest, replay).
    Idle,
    /// As `Idle`, but waits at least 45 s for more: a live follow is quiet between events
    /// and its heartbeats come every 15 s.
    Live,
}

impl Client {
    pub fn new(args: &ClientArgs) -> Result<Client, ClientError> {
        Client::with(args, Timeouts::Total)
    }

    pub fn with(args: &ClientArgs, timeouts: Timeouts) -> Result<Client, ClientError> {
        let secs = args.timeout.max(1);
        let timeout = Duration::from_secs(secs);
        let builder = reqwest::Client::builder();
        let builder = match timeouts {
            Timeouts::Total => builder.timeout(timeout),
            Timeouts::Idle => builder.connect_timeout(timeout).read_timeout(timeout),
            Timeouts::Live => builder
                .connect_timeout(timeout)
                .read_timeout(timeout.max(Duration::from_secs(45))),
        };
        let (builder, base) = if let Some(path) = args.server.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ClientError::BadServer(args.server.clone()));
            }
            (builder.unix_socket(path), "http://localhost".to_string())
        } else if args.server.starts_with("http://") {
            (builder, args.server.trim_end_matches('/').to_string())
        } else {
            return Err(ClientError::BadServer(args.server.clone()));
        };
        let http = builder
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Client {
            http,
            base,
            server: args.server.clone(),
            token: args.token.clone(),
            timeout: secs,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// A request to `path` (which starts with `/`) with the token, if any.
    pub fn request(&self, method: reqwest::Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Send; a failure to get an answer becomes one clear error.
    pub async fn send(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        req.send().await.map_err(|e| self.failed(&e))
    }

    /// Send, and turn any answer but 2xx into [`ClientError::Server`].
    pub async fn send_ok(&self, req: RequestBuilder) -> Result<Response, ClientError> {
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(error_of(resp).await.0)
        }
    }

    /// One line for a failed request or a body cut off: what failed and the innermost cause
    /// (reqwest's own text names only the outermost layer).
    pub fn failed(&self, e: &reqwest::Error) -> ClientError {
        let mut innermost = None;
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            innermost = Some(s.to_string());
            source = s.source();
        }
        if e.is_timeout() {
            return ClientError::Timeout {
                server: self.server.clone(),
                seconds: self.timeout,
            };
        }
        if e.is_connect() {
            return ClientError::Connect {
                server: self.server.clone(),
                reason: innermost.unwrap_or_else(|| e.to_string()),
            };
        }
        let reason = match innermost {
            Some(i) => format!("{e}: {i}"),
            None => e.to_string(),
        };
        ClientError::Request {
            server: self.server.clone(),
            reason,
        }
    }

    /// `GET /readyz`: `Ok` when the server is alive and ready (bootstrapped, not draining, its
    /// store accepting writes).
    pub async fn health(&self) -> Result<(), ClientError> {
        let resp = self
            .send(self.request(reqwest::Method::GET, "/readyz"))
            .await?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        let (err, _) = error_of(resp).await;
        let message = match err {
            ClientError::Server { message, .. } => message,
            other => other.to_string(),
        };
        Err(ClientError::NotReady {
            server: self.server.clone(),
            status,
            message,
        })
    }
}

/// The most of an error body read: error bodies are small, and a proxy's HTML page need not
/// be read whole.
const ERROR_BODY_MAX: usize = 64 << 10;

/// The error an answer other than 2xx carries, and the wait its `Retry-After` (or
/// `X-Vx-Retry-After-Ms`, which is finer) asks for.
pub async fn error_of(resp: Response) -> (ClientError, Option<Duration>) {
    let status = resp.status();
    let wait = retry_after(&resp);
    let mut body = Vec::new();
    let mut resp = resp;
    while body.len() < ERROR_BODY_MAX {
        match resp.chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    (parse_error(status, &body), wait)
}

fn parse_error(status: StatusCode, body: &[u8]) -> ClientError {
    let reason = status.canonical_reason().unwrap_or("error");
    let parsed = serde_json::from_slice::<serde_json::Value>(body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error"));
    let Some(err) = err.and_then(|e| e.as_object()) else {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        return ClientError::Server {
            status: status.as_u16(),
            code: reason.to_lowercase().replace(' ', "_"),
            message: if text.is_empty() {
                reason.to_string()
            } else {
                text.lines().next().unwrap_or_default().to_string()
            },
            detail: String::new(),
        };
    };
    let text = |k: &str| err.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let detail = err
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "code" | "message"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    ClientError::Server {
        status: status.as_u16(),
        code: text("code").unwrap_or_else(|| reason.to_string()),
        message: text("message").unwrap_or_default(),
        detail,
    }
}

/// The wait a 429 or 503 asks for.
fn retry_after(resp: &Response) -> Option<Duration> {
    let h = resp.headers();
    let header = |name: &str| h.get(name)?.to_str().ok()?.trim().parse::<u64>().ok();
    header("x-vx-retry-after-ms")
        .map(Duration::from_millis)
        .or_else(|| header("retry-after").map(Duration::from_secs))
}

/// Exponential backoff from 100 ms, doubling per attempt, capped at `max`.
pub fn backoff(attempt: u32, max: Duration) -> Duration {
    let ms = 100u64.saturating_mul(1u64 << attempt.min(16));
    Duration::from_millis(ms).min(max)
}

/// A stream or entity name as one percent-encoded path segment (docs/API.md §5: `/` is `%2F`).
pub fn segment(s: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

/// A query string value, percent-encoded.
pub fn query_value(s: &str) -> String {
    segment(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_become_one_line() {
        let body = br#"{"error":{"code":"invalid_event","message":"missing field `type`","index":2,"field":"type"}}"#;
        let e = parse_error(StatusCode::UNPROCESSABLE_ENTITY, body);
        assert_eq!(
            e.to_string(),
            "server answered 422 invalid_event: missing field `type` (field=\"type\", index=2)"
        );
        let e = parse_error(StatusCode::BAD_GATEWAY, b"<html>\nbad gateway\n</html>");
        assert_eq!(e.to_string(), "server answered 502 bad_gateway: <html>");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn backoff_is_bounded() {
        assert_eq!(
            backoff(0, Duration::from_secs(5)),
            Duration::from_millis(100)
        );
        assert_eq!(
            backoff(3, Duration::from_secs(5)),
            Duration::from_millis(800)
        );
        assert_eq!(backoff(60, Duration::from_secs(5)), Duration::from_secs(5));
    }

    #[test]
    fn names_are_one_segment() {
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(segment("match-42"), "match-42");
    }
}
