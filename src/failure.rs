//! One refusal, whatever the transport (docs/API.md §3): an [`ErrorCode`], a message and the details
//! the error shape carries (docs/API.md §10). Bad input ([`InputError`]), failed writes ([`WriteError`]),
//! framing problems ([`FrameError`]), backpressure, timeouts and the service not being ready
//! are mapped to a [`Failure`] here, once; the HTTP layer renders it as the JSON error body
//! (`crate::error::AppError`), a frames connection as an ERROR frame ([`Failure::into_frame`],
//! the only place the server builds one).
//!
//! This lives in the binary's crate because it joins `vx-storage`'s and `vx-proto`'s errors;
//! `vx-proto` (which owns [`ErrorCode`]) depends on neither storage nor this crate.

use serde::Serialize;
use vx_proto::frames::{ErrorFrame, FrameError};
use vx_proto::{ErrorCode, InputError};
use vx_storage::WriteError;

/// How long a client is told to wait when the service is starting or shutting down.
const NOT_READY_RETRY_MS: u64 = 1000;

/// Members of `error` beside `code` and `message`; absent ones are omitted.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Details {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supported: Option<Vec<String>>,
}

/// A refused request or batch.
#[derive(Clone, Debug)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    /// Boxed: most failures carry none.
    pub details: Box<Details>,
    /// When to try again (`backpressure`, `not_ready`): `Retry-After` over HTTP, the
    /// `retry_after_ms` detail in a frame.
    pub retry_after_ms: Option<u64>,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            details: Box::default(),
            retry_after_ms: None,
        }
    }

    pub fn backpressure(retry_after_ms: u64, message: impl Into<String>) -> Failure {
        Failure::new(ErrorCode::Backpressure, message).retry_after(retry_after_ms)
    }

    /// 503 `not_ready` while the store is being opened (recovery).
    pub fn starting() -> Failure {
        Failure::new(
            ErrorCode::NotReady,
            "the service is starting (recovering the log); retry shortly",
        )
        .retry_after(NOT_READY_RETRY_MS)
    }

    /// 503 `not_ready` once a shutdown signal arrived.
    pub fn shutting_down(message: impl Into<String>) -> Failure {
        Failure::new(ErrorCode::NotReady, message).retry_after(NOT_READY_RETRY_MS)
    }

    /// 408 `timeout`: the client sent nothing for `limit` (`ingest.body_timeout`, or
    /// `server.frames_idle_timeout` between frames).
    pub fn timeout(limit: &str, message: impl Into<String>) -> Failure {
        Failure::new(ErrorCode::Timeout, message).limit(limit, None)
    }

    /// The limit that was exceeded (a config key) and its value.
    pub fn limit(mut self, limit: impl Into<String>, max: Option<u64>) -> Failure {
        self.details.limit = Some(limit.into());
        self.details.max = max;
        self
    }

    pub fn retry_after(mut self, ms: u64) -> Failure {
        self.retry_after_ms = Some(ms);
        self
    }

    /// The ERROR frame of batch `request_id` (0: the connection). Line, column and document
    /// are positions in an HTTP body and have no place in a frame.
    pub fn into_frame(self, request_id: u64) -> ErrorFrame {
        let mut out = ErrorFrame::new(request_id, self.code.as_str(), self.message);
        let d = *self.details;
        out.index = d.index;
        out.field = d.field;
        out.limit = d.limit;
        out.max = d.max;
        out.last_seq = d.last_seq;
        out.retry_after_ms = self.retry_after_ms;
        out
    }
}

impl Failure {
    /// The error reply of a Redis-protocol connection (docs/RESP.md "Errors"): the prefix a
    /// Redis client maps to its error class, then `code: message`. `NOAUTH`, `NOPERM`, `OOM`,
    /// `LOADING` and `TRYAGAIN` are Redis's own (clients retry `LOADING` and `TRYAGAIN`);
    /// everything else is `ERR`.
    pub fn into_resp(self) -> (&'static str, String) {
        let prefix = match self.code {
            ErrorCode::Unauthorized => "NOAUTH",
            ErrorCode::Forbidden => "NOPERM",
            ErrorCode::NotReady => "LOADING",
            ErrorCode::Backpressure => "TRYAGAIN",
            ErrorCode::StorageFull
                if self.details.limit.as_deref() == Some("storage.max_feature_bytes") =>
            {
                "OOM"
            }
            _ => "ERR",
        };
        let mut message = format!("{}: {}", self.code.as_str(), self.message);
        if let Some(ms) = self.retry_after_ms {
            message.push_str(&format!(" (retry after {ms} ms)"));
        }
        (prefix, message)
    }
}

impl Failure {
    /// A refused write as every front end (HTTP, frames, RESP, cluster mode) reports it, and
    /// the queue fill to report beside it. A write error the client did not cause and cannot
    /// expect (anything but a conflict and the feature budget) is logged here, once.
    pub fn refused(e: vx_router::SubmitError) -> (Failure, f64) {
        match e {
            vx_router::SubmitError::Backpressure {
                retry_after_ms,
                queue_fill,
                message,
            } => (Failure::backpressure(retry_after_ms, message), queue_fill),
            vx_router::SubmitError::Write { error, queue_fill } => {
                if !matches!(
                    error,
                    WriteError::Conflict { .. }
                        | WriteError::FeatureBudget { .. }
                        | WriteError::ShuttingDown
                ) {
                    tracing::warn!(error = %error, "write failed");
                }
                (Failure::from(error), queue_fill)
            }
        }
    }
}

impl From<vx_router::SubmitError> for Failure {
    fn from(e: vx_router::SubmitError) -> Failure {
        Failure::refused(e).0
    }
}

impl From<InputError> for Failure {
    fn from(mut e: InputError) -> Failure {
        let mut f = Failure::new(e.class.error_code(), std::mem::take(&mut e.message));
        f.details = Box::new(Details {
            index: e.index,
            line: e.line,
            column: e.column,
            document: e.document,
            field: e.field.take(),
            limit: e.limit.take(),
            max: e.max,
            ..Details::default()
        });
        f
    }
}

impl From<WriteError> for Failure {
    fn from(e: WriteError) -> Failure {
        let message = e.to_string();
        match e {
            WriteError::Conflict { last_seq, .. } => {
                let mut f = Failure::new(ErrorCode::Conflict, message);
                f.details.last_seq = Some(last_seq);
                f
            }
            WriteError::StorageFull(_) | WriteError::Poisoned(_) => {
                Failure::new(ErrorCode::StorageFull, message)
            }
            WriteError::TooManyStreams { max } => Failure::new(ErrorCode::StorageFull, message)
                .limit("storage.max_streams", Some(max)),
            WriteError::FeatureBudget { max } => Failure::new(ErrorCode::StorageFull, message)
                .limit("storage.max_feature_bytes", Some(max)),
            WriteError::TooLarge(_) => {
                Failure::new(ErrorCode::TooLarge, message).limit(vx_ingest::LIMIT_BODY_BYTES, None)
            }
            WriteError::NotFound { .. } => Failure::new(ErrorCode::NotFound, message),
            WriteError::ShuttingDown => Failure::shutting_down(message),
            // Cluster mode only (a record consumed twice, a partition or shard out of range);
            // no request of the HTTP or frames API can cause them.
            WriteError::OriginNotAfter { .. } => Failure::new(ErrorCode::Conflict, message),
            WriteError::UnknownShard { .. } => Failure::new(ErrorCode::BadRequest, message),
        }
    }
}

/// A framing problem on a frames connection (a length prefix over the limit, an unknown or
/// unexpected frame type, a malformed small frame): the connection ends with this error.
impl From<&FrameError> for Failure {
    fn from(e: &FrameError) -> Failure {
        match e {
            FrameError::TooLarge { max, .. } => Failure::new(ErrorCode::TooLarge, e.to_string())
                .limit(vx_ingest::LIMIT_BODY_BYTES, Some(*max)),
            FrameError::UnknownType(_)
            | FrameError::Unexpected(_)
            | FrameError::Malformed { .. } => Failure::new(ErrorCode::Malformed, e.to_string()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Both transports get the same code and details from the same failure.
    #[test]
    fn write_errors_map_once_for_both_transports() {
        let cases = [
            (
                WriteError::Conflict {
                    stream: "s".into(),
                    expected: 1,
                    last_seq: 3,
                },
                "conflict",
                409,
            ),
            (
                WriteError::StorageFull(vx_storage::IoFailure::new(
                    "disk",
                    std::io::ErrorKind::StorageFull.into(),
                )),
                "storage_full",
                507,
            ),
            (
                WriteError::Poisoned(
                    vx_storage::IoFailure::new("fsync", std::io::ErrorKind::Other.into()).into(),
                ),
                "storage_full",
                507,
            ),
            (WriteError::TooManyStreams { max: 9 }, "storage_full", 507),
            (WriteError::FeatureBudget { max: 9 }, "storage_full", 507),
            (
                WriteError::TooLarge(vx_storage::record::TooLarge { len: 1 << 31 }),
                "too_large",
                413,
            ),
            (
                WriteError::NotFound { stream: "s".into() },
                "not_found",
                404,
            ),
            (WriteError::ShuttingDown, "not_ready", 503),
        ];
        for (e, code, status) in cases {
            // A refused write maps the same, whichever front end reports it.
            let refused = || vx_router::SubmitError::Write {
                error: e.clone(),
                queue_fill: 0.5,
            };
            let (f, fill) = Failure::refused(refused());
            assert_eq!((f.code.as_str(), fill), (code, 0.5));
            let (http, fill) = crate::error::AppError::refused(refused());
            assert_eq!((http.status().as_u16(), fill), (status, 0.5));
            let f = Failure::from(e.clone());
            assert_eq!((f.code.as_str(), f.code.http_status()), (code, status));
            let http = crate::error::AppError::from(e);
            assert_eq!((http.code.as_str(), http.status().as_u16()), (code, status));
            let frame = f.clone().into_frame(7);
            assert_eq!((frame.request_id, frame.code.as_str()), (7, code));
            assert_eq!(frame.last_seq, f.details.last_seq);
            assert_eq!(frame.max, f.details.max);
            assert_eq!(frame.limit, f.details.limit);
        }
        let f = Failure::from(WriteError::TooManyStreams { max: 9 });
        assert_eq!(f.details.limit.as_deref(), Some("storage.max_streams"));
        let f = Failure::from(WriteError::TooLarge(vx_storage::record::TooLarge {
            len: 1,
        }));
        assert_eq!(f.details.limit.as_deref(), Some("ingest.max_body_bytes"));
        let f = Failure::from(WriteError::ShuttingDown);
        assert_eq!(f.retry_after_ms, Some(1000));
        let frame = Failure::backpressure(1500, "full").into_frame(2);
        assert_eq!(
            (frame.code.as_str(), frame.retry_after_ms),
            ("backpressure", Some(1500))
        );
    }

    #[test]
    fn input_errors_keep_their_details() {
        let mut e = InputError::invalid_event("bad type");
        e.index = Some(4);
        e.field = Some("type".into());
        e.line = Some(5);
        let f = Failure::from(e);
        assert_eq!(f.code, ErrorCode::InvalidEvent);
        assert_eq!((f.details.index, f.details.line), (Some(4), Some(5)));
        let frame = f.into_frame(1);
        assert_eq!(frame.code, "invalid_event");
        assert_eq!(frame.field.as_deref(), Some("type"));
    }

    #[test]
    fn framing_errors_end_the_connection_with_their_code() {
        let f = Failure::from(&FrameError::TooLarge { len: 10, max: 5 });
        assert_eq!(f.code, ErrorCode::TooLarge);
        assert_eq!(
            (f.details.limit.as_deref(), f.details.max),
            (Some("ingest.max_body_bytes"), Some(5))
        );
        for e in [FrameError::UnknownType(0x42), FrameError::Unexpected("ACK")] {
            assert_eq!(Failure::from(&e).code, ErrorCode::Malformed);
        }
        let frame = Failure::timeout("ingest.body_timeout", "stalled").into_frame(0);
        assert_eq!(
            (frame.code.as_str(), frame.limit.as_deref()),
            ("timeout", Some("ingest.body_timeout"))
        );
    }
}
