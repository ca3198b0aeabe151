//! Errors for bad input, and the one list of error codes. Every decoder reports one
//! [`InputError`]; every refusal, over HTTP or in a frames ERROR frame, carries one
//! [`ErrorCode`], whose string and HTTP status are defined here and nowhere else.

/// The error codes of docs/API.md §3 (and `internal`, for failures that are none of the client's
/// doing). HTTP bodies and frames ERROR frames are built from these. The frames protocol has
/// no numeric codes: its ERROR frame carries the same string (docs/PROTOCOL.md, ERROR), so the
/// string and the HTTP status are all there is to map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    Malformed,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    NotAcceptable,
    Timeout,
    Conflict,
    TooLarge,
    UnsupportedMediaType,
    InvalidEvent,
    Backpressure,
    NotReady,
    StorageFull,
    Unauthorized,
    Forbidden,
    Internal,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::Malformed,
        ErrorCode::BadRequest,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::NotAcceptable,
        ErrorCode::Timeout,
        ErrorCode::Conflict,
        ErrorCode::TooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::InvalidEvent,
        ErrorCode::Backpressure,
        ErrorCode::NotReady,
        ErrorCode::StorageFull,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::Internal,
    ];

    /// The code on the wire (`"error": {"code": …}`, the ERROR frame's `code`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::NotAcceptable => "not_acceptable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::InvalidEvent => "invalid_event",
            ErrorCode::Backpressure => "backpressure",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::StorageFull => "storage_full",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status of docs/API.md §3's table.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::Malformed | ErrorCode::BadRequest => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::NotAcceptable => 406,
            ErrorCode::Timeout => 408,
            ErrorCode::Conflict => 409,
            ErrorCode::TooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::InvalidEvent => 422,
            ErrorCode::Backpressure => 429,
            ErrorCode::Internal => 500,
            ErrorCode::NotReady => 503,
            ErrorCode::StorageFull => 507,
        }
    }

    /// The code named `s` (an ERROR frame's code as read by a client).
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which row of the docs/API.md §3 status table a bad input belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// 400 `malformed`: not well-formed in the declared format.
    Malformed,
    /// 422 `invalid_event`: well-formed but breaks a rule of docs/API.md §2.
    InvalidEvent,
    /// 413 `too_large`: a size, depth or expansion limit.
    TooLarge,
}

impl ErrorClass {
    pub fn error_code(self) -> ErrorCode {
        match self {
            ErrorClass::Malformed => ErrorCode::Malformed,
            ErrorClass::InvalidEvent => ErrorCode::InvalidEvent,
            ErrorClass::TooLarge => ErrorCode::TooLarge,
        }
    }

    pub fn code(self) -> &'static str {
        self.error_code().as_str()
    }
}

/// A rejected input, with the details the error body carries (docs/API.md §10). Boxed so that the
/// `Result`s of the hot decoding path stay one word wide; fields read through `Deref`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{}", .0.message)]
pub struct InputError(Box<Details>);

/// The details of an [`InputError`].
#[derive(Clone, Debug, PartialEq)]
pub struct Details {
    pub class: ErrorClass,
    pub message: String,
    /// 0-based position of the event in the whole request.
    pub index: Option<u64>,
    /// 1-based line and column in the (decompressed) body.
    pub line: Option<u64>,
    pub column: Option<u64>,
    /// 0-based YAML document.
    pub document: Option<u64>,
    pub field: Option<String>,
    /// Name of the limit that was exceeded (a config key such as `ingest.max_event_bytes`).
    pub limit: Option<String>,
    pub max: Option<u64>,
}

impl std::ops::Deref for InputError {
    type Target = Details;
    fn deref(&self) -> &Details {
        &self.0
    }
}

impl std::ops::DerefMut for InputError {
    fn deref_mut(&mut self) -> &mut Details {
        &mut self.0
    }
}

impl InputError {
    fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        InputError(Box::new(Details {
            class,
            message: message.into(),
            index: None,
            line: None,
            column: None,
            document: None,
            field: None,
            limit: None,
            max: None,
        }))
    }

    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Malformed, message)
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorClass::InvalidEvent, message);
        e.field = Some(field.into());
        e
    }

    /// An event that is not a valid event but not attributable to one field (e.g. not an object).
    pub fn invalid_event(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::InvalidEvent, message)
    }

    pub fn too_large(limit: impl Into<String>, max: u64, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorClass::TooLarge, message);
        e.limit = Some(limit.into());
        e.max = Some(max);
        e
    }

    /// An event whose field does not fit the packed layout (only reachable when a caller skips
    /// the docs/API.md §2 rules, which keep every field within it).
    pub fn from_pack(e: crate::packed::PackError) -> Self {
        let mut out = Self::new(ErrorClass::TooLarge, e.to_string());
        out.field = Some(e.field.to_string());
        out
    }

    pub fn at_index(mut self, index: u64) -> Self {
        self.index.get_or_insert(index);
        self
    }

    pub fn at_line(mut self, line: u64, column: u64) -> Self {
        self.line.get_or_insert(line);
        self.column.get_or_insert(column);
        self
    }

    pub fn at_document(mut self, document: u64) -> Self {
        self.document.get_or_insert(document);
        self
    }
}

#[cfg(test)]
mod code_tests {
    use super::ErrorCode;

    /// The codes and statuses of docs/API.md §10.2's table, spelled out once more.
    #[test]
    fn codes_and_statuses_match_the_spec() {
        let spec = [
            ("malformed", 400),
            ("bad_request", 400),
            ("not_found", 404),
            ("method_not_allowed", 405),
            ("not_acceptable", 406),
            ("timeout", 408),
            ("conflict", 409),
            ("too_large", 413),
            ("unsupported_media_type", 415),
            ("invalid_event", 422),
            ("backpressure", 429),
            ("not_ready", 503),
            ("storage_full", 507),
            ("unauthorized", 401),
            ("forbidden", 403),
            ("internal", 500),
        ];
        assert_eq!(spec.len(), ErrorCode::ALL.len());
        for (code, status) in spec {
            let c = ErrorCode::parse(code);
            assert_eq!(c.map(ErrorCode::as_str), Some(code));
            assert_eq!(c.map(ErrorCode::http_status), Some(status), "{code}");
        }
        assert_eq!(ErrorCode::parse("nope"), None);
    }
}
