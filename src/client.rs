//! The client side of the CLI (SPEC §7): commands that talk to a running server over HTTP, on
//! TCP (`--server http://HOST:PORT`) or the Unix socket (`--server unix:/path`), with an
//! optional bearer token. Each prints one clear line on failure and exits non-zero.
//!
//! `veltrix health` is here; it is also the container image's `HEALTHCHECK` (Dockerfile).

use clap::Args;
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
    /// Give up on a request after this many seconds.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub timeout: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--server {0:?}: expected http://HOST:PORT or unix:/path/to.sock")]
    BadServer(String),
    #[error("cannot build the HTTP client: {0}")]
    Build(String),
    #[error("{server}: {reason}")]
    Request { server: String, reason: String },
    #[error("{server}: not ready ({status}): {message}")]
    NotReady {
        server: String,
        status: u16,
        message: String,
    },
}

/// A client bound to one server.
pub struct Client {
    http: reqwest::Client,
    base: String,
    server: String,
    token: Option<String>,
}

impl Client {
    pub fn new(args: &ClientArgs) -> Result<Client, ClientError> {
        let timeout = Duration::from_secs(args.timeout.max(1));
        let builder = reqwest::Client::builder().timeout(timeout);
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
        })
    }

    fn failed(&self, e: reqwest::Error) -> ClientError {
        // reqwest's own text names only the outermost layer; the cause says why.
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            reason = format!("{reason}: {s}");
            source = s.source();
        }
        ClientError::Request {
            server: self.server.clone(),
            reason,
        }
    }

    /// `GET /readyz`: `Ok` when the server is alive and ready (bootstrapped, not draining, its
    /// store accepting writes).
    pub async fn health(&self) -> Result<(), ClientError> {
        let mut req = self.http.get(format!("{}/readyz", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| self.failed(e))?;
        let status = resp.status().as_u16();
        if status == 200 {
            return Ok(());
        }
        let body = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or(body);
        Err(ClientError::NotReady {
            server: self.server.clone(),
            status,
            message,
        })
    }
}
