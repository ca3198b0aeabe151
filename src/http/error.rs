//! The one error type of the HTTP layer and its rendering: SPEC §3's single error shape
//! `{"error": {"code", "message", …details}}`. Every failure is mapped to a status and code
//! here, once; handlers only pick the constructor.

use axum::http::StatusCode;
use axum::http::header::{CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use vx_proto::{ErrorClass, InputError};
use vx_storage::WriteError;

/// Members of `error` beside `code` and `message`; absent ones are omitted.
#[derive(Debug, Default, Serialize, PartialEq)]
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

#[derive(Debug)]
pub struct AppError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Boxed: most errors carry none, and handlers pass `Result<_, AppError>` around.
    pub details: Box<Details>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(flatten)]
    details: &'a Details,
}

/// `Retry-After` in whole seconds (at least 1) for a delay in milliseconds.
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

impl AppError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        AppError {
            status,
            code,
            message: message.into(),
            details: Box::default(),
            headers: Vec::new(),
        }
    }

    pub fn with_header(mut self, name: HeaderName, value: impl ToString) -> Self {
        if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
            self.headers.push((name, v));
        }
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            message,
        )
    }

    pub fn not_acceptable(message: impl Into<String>, supported: &[&str]) -> Self {
        let mut e = Self::new(StatusCode::NOT_ACCEPTABLE, "not_acceptable", message);
        e.details.supported = Some(supported.iter().map(|s| s.to_string()).collect());
        e
    }

    pub fn unsupported_media_type(message: impl Into<String>, supported: &[&str]) -> Self {
        let mut e = Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
        );
        e.details.supported = Some(supported.iter().map(|s| s.to_string()).collect());
        e
    }

    /// 503 while bootstrapping.
    pub fn starting() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the service is starting (recovering the log); retry shortly",
        )
        .with_header(RETRY_AFTER, 1)
    }

    /// 503 while shutting down: the client should go elsewhere, so close the connection.
    pub fn draining() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "the service is shutting down",
        )
        .with_header(RETRY_AFTER, 1)
        .with_header(CONNECTION, "close")
    }

    pub fn backpressure(retry_after_ms: u64, message: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "backpressure", message)
            .with_header(RETRY_AFTER, retry_after_secs(retry_after_ms))
            .with_header(
                HeaderName::from_static("x-vx-retry-after-ms"),
                retry_after_ms,
            )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
            .with_header(axum::http::header::WWW_AUTHENTICATE, "Bearer")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 408: the body stalled for `ingest.body_timeout`.
    pub fn timeout(message: impl Into<String>) -> Self {
        let mut out = Self::new(StatusCode::REQUEST_TIMEOUT, "timeout", message);
        out.details.limit = Some("ingest.body_timeout".into());
        out
    }

    /// A failure that is none of the client's doing and has no code of its own in the SPEC
    /// (a read error in the log, a failed encoding).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl From<InputError> for AppError {
    fn from(mut e: InputError) -> Self {
        let (status, code) = match e.class {
            ErrorClass::Malformed => (StatusCode::BAD_REQUEST, "malformed"),
            ErrorClass::InvalidEvent => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_event"),
            ErrorClass::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        };
        let mut out = AppError::new(status, code, std::mem::take(&mut e.message));
        out.details = Box::new(Details {
            index: e.index,
            line: e.line,
            column: e.column,
            document: e.document,
            field: e.field.take(),
            limit: e.limit.take(),
            max: e.max,
            ..Details::default()
        });
        out
    }
}

impl From<WriteError> for AppError {
    fn from(e: WriteError) -> Self {
        let message = e.to_string();
        match e {
            WriteError::Conflict { last_seq, .. } => {
                let mut out = AppError::new(StatusCode::CONFLICT, "conflict", message);
                out.details.last_seq = Some(last_seq);
                out
            }
            WriteError::StorageFull(_) | WriteError::Poisoned(_) => {
                AppError::new(StatusCode::INSUFFICIENT_STORAGE, "storage_full", message)
            }
            WriteError::TooManyStreams { max } => {
                let mut out =
                    AppError::new(StatusCode::INSUFFICIENT_STORAGE, "storage_full", message);
                out.details.limit = Some("storage.max_streams".into());
                out.details.max = Some(max);
                out
            }
            WriteError::TooLarge(_) => {
                let mut out = AppError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message);
                out.details.limit = Some("ingest.max_body_bytes".into());
                out
            }
            WriteError::NotFound { .. } => AppError::not_found(message),
            WriteError::ShuttingDown => AppError::draining(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let body = Body {
            error: Inner {
                code: self.code,
                message: &self.message,
                details: &self.details,
            },
        };
        // Serializing plain strings and integers into a Vec cannot fail; keep a valid body
        // even if it somehow did.
        let json = serde_json::to_vec(&body).unwrap_or_else(|_| {
            format!(r#"{{"error":{{"code":"{}","message":""}}}}"#, self.code).into_bytes()
        });
        let mut resp = (self.status, json).into_response();
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            h.insert(name, value);
        }
        resp
    }
}
