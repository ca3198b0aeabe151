//! Endpoint addresses of a workload (`http://`, `unix:`, `frames://`, `frames+unix:`,
//! `resp://`), the [`Scenario`]s, and which scenarios each endpoint can carry. The workload
//! ([`crate::workload`]) imports both from here; nothing here imports the workload.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    Ingest,
    Replay,
    Kv,
    Features,
    Fanout,
}

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Ingest => "ingest",
            Scenario::Replay => "replay",
            Scenario::Kv => "kv",
            Scenario::Features => "features",
            Scenario::Fanout => "fanout",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// HTTP/1.1 over TCP to `host:port`.
    Http(String),
    /// HTTP/1.1 over a Unix socket.
    Unix(PathBuf),
    /// Binary frames (docs/PROTOCOL.md) over TCP.
    Frames(String),
    /// Binary frames over a Unix socket.
    FramesUnix(PathBuf),
    /// RESP2 (Redis) over TCP: the kv mix, or Redis stream commands (ingest as `XADD`,
    /// replay as `XRANGE`).
    Resp(String),
}

#[derive(Debug, thiserror::Error)]
#[error(
    "endpoint {text}: {reason} (expected http://HOST:PORT, unix:/PATH, frames://HOST:PORT, frames+unix:/PATH or resp://HOST:PORT)"
)]
pub struct EndpointError {
    text: String,
    reason: &'static str,
}

impl Endpoint {
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let err = |reason| EndpointError {
            text: text.to_string(),
            reason,
        };
        let host_port = |rest: &str| -> Result<String, EndpointError> {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            match rest.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                    if rest.contains('/') {
                        Err(err("no path after HOST:PORT"))
                    } else {
                        Ok(rest.to_string())
                    }
                }
                _ => Err(err("HOST:PORT with a port number is needed")),
            }
        };
        let path = |rest: &str| -> Result<PathBuf, EndpointError> {
            if rest.is_empty() {
                Err(err("a socket path is needed"))
            } else {
                Ok(PathBuf::from(rest))
            }
        };
        if let Some(rest) = text.strip_prefix("http://") {
            Ok(Endpoint::Http(host_port(rest)?))
        } else if let Some(rest) = text.strip_prefix("frames+unix:") {
            Ok(Endpoint::FramesUnix(path(rest)?))
        } else if let Some(rest) = text.strip_prefix("unix:") {
            Ok(Endpoint::Unix(path(rest)?))
        } else if let Some(rest) = text.strip_prefix("frames://") {
            Ok(Endpoint::Frames(host_port(rest)?))
        } else if let Some(rest) = text.strip_prefix("resp://") {
            Ok(Endpoint::Resp(host_port(rest)?))
        } else {
            Err(err("unknown scheme"))
        }
    }

    /// Whether this endpoint speaks what `scenario` sends.
    pub fn serves(&self, scenario: Scenario) -> bool {
        match scenario {
            // Over RESP: one XADD per operation; replay: XRANGE pages.
            Scenario::Ingest => true,
            Scenario::Replay => !matches!(self, Endpoint::Frames(_) | Endpoint::FramesUnix(_)),
            // fanout's followers read SSE over HTTP/1.1; its producers use the same endpoints.
            Scenario::Features | Scenario::Fanout => {
                matches!(self, Endpoint::Http(_) | Endpoint::Unix(_))
            }
            Scenario::Kv => matches!(self, Endpoint::Resp(_)),
        }
    }

    pub fn is_resp(&self) -> bool {
        matches!(self, Endpoint::Resp(_))
    }

    /// HTTP endpoints carry one request at a time per connection; the others pipeline.
    pub fn is_http(&self) -> bool {
        matches!(self, Endpoint::Http(_) | Endpoint::Unix(_))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Http(a) => write!(f, "http://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Frames(a) => write!(f, "frames://{a}"),
            Endpoint::FramesUnix(p) => write!(f, "frames+unix:{}", p.display()),
            Endpoint::Resp(a) => write!(f, "resp://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_parses_and_prints_back() {
        for text in [
            "http://127.0.0.1:7100",
            "unix:/tmp/vx.sock",
            "frames://localhost:7101",
            "frames+unix:/tmp/f.sock",
            "resp://127.0.0.1:6379",
        ] {
            let ep = Endpoint::parse(text).map_err(|e| e.to_string());
            assert_eq!(ep.map(|e| e.to_string()), Ok(text.to_string()));
        }
        assert_eq!(
            Endpoint::parse("http://h:1/").map_err(|e| e.to_string()),
            Ok(Endpoint::Http("h:1".into()))
        );
        for bad in [
            "http://h",
            "http://h:x",
            "http://h:1/v1",
            "unix:",
            "tcp://h:1",
            "",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
