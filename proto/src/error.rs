//! Errors for bad input. Every decoder reports one [`InputError`], which the HTTP layer maps
//! to the SPEC's single error shape; the class decides the status code.

/// Which row of the SPEC §3 status table a bad input belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// 400 `malformed`: not well-formed in the declared format.
    Malformed,
    /// 422 `invalid_event`: well-formed but breaks a rule of SPEC §2.
    InvalidEvent,
    /// 413 `too_large`: a size, depth or expansion limit.
    TooLarge,
}

impl ErrorClass {
    pub fn code(self) -> &'static str {
        match self {
            ErrorClass::Malformed => "malformed",
            ErrorClass::InvalidEvent => "invalid_event",
            ErrorClass::TooLarge => "too_large",
        }
    }
}

/// A rejected input, with the details the SPEC's error body carries. Boxed so that the
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
    /// the SPEC §2 rules, which keep every field within it).
    pub fn from_encode(e: crate::packed::EncodeError) -> Self {
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
