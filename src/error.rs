//! The one error type of every interface and its HTTP rendering: docs/API.md §3's single error shape
//! `{"error": {"code", "message", …details}}`. Codes and their statuses come from
//! [`ErrorCode`]; input, write and backpressure failures are mapped once, in
//! [`crate::failure`], for HTTP and frames alike. Handlers only pick the constructor.

use crate::failure::Failure;
use axum::http::StatusCode;
use axum::http::header::{CONNECTION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use vx_proto::{ErrorCode, InputError};
use vx_storage::WriteError;

pub use crate::failure::Details;

#[derive(Debug)]
pub struct AppError {
    /// The code, and through it the status (docs/API.md §3's table, in [`ErrorCode`]).
    pub code: ErrorCode,
    pub message: String,
    /// Boxed: most errors carry none, and handlers pass `Result<_, AppError>` around.
    pub details: Box<Details>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: ErrorObject<'a>,
}

/// The object under `"error"`.
#[derive(Serialize)]
struct ErrorObject<'a> {
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
    /// An error with `code`, its status from docs/API.md §3's table.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        AppError {
            code,
            message: message.into(),
            details: Box::default(),
            headers: Vec::new(),
        }
    }

    /// The HTTP status of the code.
    pub fn status(&self) -> StatusCode {
        // Every status in the table is a valid one; 500 should the table ever hold a typo.
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn with_header(mut self, name: HeaderName, value: impl ToString) -> Self {
        if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
            self.headers.push((name, v));
        }
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Malformed, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::MethodNotAllowed, message)
    }

    pub fn not_acceptable(message: impl Into<String>, supported: &[&str]) -> Self {
        let mut e = Self::new(ErrorCode::NotAcceptable, message);
        e.details.supported = Some(supported.iter().map(|s| s.to_string()).collect());
        e
    }

    pub fn unsupported_media_type(message: impl Into<String>, supported: &[&str]) -> Self {
        let mut e = Self::new(ErrorCode::UnsupportedMediaType, message);
        e.details.supported = Some(supported.iter().map(|s| s.to_string()).collect());
        e
    }

    /// 503 while bootstrapping.
    pub fn starting() -> Self {
        Failure::starting().into()
    }

    /// 503 while shutting down: the client should go elsewhere, so close the connection.
    pub fn draining() -> Self {
        AppError::from(Failure::shutting_down("the service is shutting down"))
            .with_header(CONNECTION, "close")
    }

    /// A refused write ([`Failure::refused`]: one mapping and one logging rule for every
    /// front end), with the queue fill to report; shutting down also closes the connection,
    /// as [`AppError::draining`].
    pub fn refused(e: vx_router::SubmitError) -> (Self, f64) {
        let shutting_down = matches!(
            &e,
            vx_router::SubmitError::Write {
                error: WriteError::ShuttingDown,
                ..
            }
        );
        let (f, fill) = Failure::refused(e);
        if shutting_down {
            (AppError::draining(), fill)
        } else {
            (AppError::from(f), fill)
        }
    }

    pub fn backpressure(retry_after_ms: u64, message: impl Into<String>) -> Self {
        Failure::backpressure(retry_after_ms, message).into()
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
            .with_header(axum::http::header::WWW_AUTHENTICATE, "Bearer")
    }

    /// 401 on the status page's routes: a Basic challenge, so that a browser asks for the
    /// credentials (the token as the password) and sends them on the page's own requests.
    pub fn unauthorized_basic(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthorized, message).with_header(
            axum::http::header::WWW_AUTHENTICATE,
            r#"Basic realm="veltrix", charset="UTF-8""#,
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }

    /// 408: the body stalled for `ingest.body_timeout`.
    pub fn timeout(message: impl Into<String>) -> Self {
        Failure::timeout(vx_ingest::LIMIT_BODY_TIMEOUT, message).into()
    }

    /// A failure that is none of the client's doing and has no code of its own in docs/API.md §10.2
    /// (a read error in the log, a failed encoding).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

impl From<Failure> for AppError {
    fn from(f: Failure) -> Self {
        let mut out = AppError::new(f.code, f.message);
        out.details = f.details;
        if let Some(ms) = f.retry_after_ms {
            out = out.with_header(RETRY_AFTER, retry_after_secs(ms));
            if f.code == ErrorCode::Backpressure {
                out = out.with_header(HeaderName::from_static("x-vx-retry-after-ms"), ms);
            }
        }
        out
    }
}

impl From<InputError> for AppError {
    fn from(e: InputError) -> Self {
        Failure::from(e).into()
    }
}

impl From<WriteError> for AppError {
    fn from(e: WriteError) -> Self {
        match e {
            // Over HTTP the client should go elsewhere: close the connection too.
            WriteError::ShuttingDown => AppError::draining(),
            e => Failure::from(e).into(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let body = Body {
            error: ErrorObject {
                code: self.code.as_str(),
                message: &self.message,
                details: &self.details,
            },
        };
        // Serializing plain strings and integers into a Vec cannot fail; keep a valid body
        // even if it somehow did.
        let json = serde_json::to_vec(&body).unwrap_or_else(|_| {
            format!(r#"{{"error":{{"code":"{}","message":""}}}}"#, self.code).into_bytes()
        });
        let mut resp = (self.status(), json).into_response();
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            h.insert(name, value);
        }
        resp
    }
}
