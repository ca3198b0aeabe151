//! The event field rules of docs/API.md §2, once: the limits, the string rules of `stream`, `type`,
//! `entity` and `id`, the `ts` and `kind` rules, the `value` rules that depend on `kind`, the
//! names reserved for built-in features and the depth of `data`. Every decoder (JSON and NDJSON
//! through their serde visitors, YAML, binary frames) and the OTLP mapping check fields here,
//! so a producer gets the same answer, in the same words, for the same event in any format.
//!
//! A broken rule is a [`RuleError`]: its text is the message without the field name, which
//! each decoder attaches where it knows it ([`RuleError::on`]), since serde_json adds its own
//! position to the message of a visitor's error.

use std::fmt;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::InputError;
use crate::event::{Kind, Num};

/// Upper bound (exclusive) of an integer `ts`: 2^53, so every ts is exact as a JSON number.
pub const MAX_TS: i64 = 1 << 53;
/// Length limits of docs/API.md §2, in bytes.
pub const MAX_STREAM_LEN: usize = 256;
pub const MAX_TYPE_LEN: usize = 128;
pub const MAX_ENTITY_LEN: usize = 256;
pub const MAX_ID_LEN: usize = 128;
/// Maximum nesting depth of `data`.
pub const MAX_DATA_DEPTH: usize = 64;
/// Name of the limit reported when `data` nests deeper than [`MAX_DATA_DEPTH`].
pub const LIMIT_DATA_DEPTH: &str = "data depth";

/// Why a field's value breaks its rule; the text is the message without the field's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {max} bytes, got {len}")]
    TooLong { max: usize, len: usize },
    /// The value, cut to a readable length.
    #[error("may only contain the characters A-Z a-z 0-9 _ . : -, got {0:?}")]
    TypeCharacters(String),
    #[error("must not contain control characters")]
    ControlCharacters,
    #[error("must not be negative, got {0}")]
    TsNegative(i64),
    /// The value as written (a YAML integer may be too large for any integer type).
    #[error("must be below 2^53 milliseconds, got {0}")]
    TsTooLate(String),
    #[error("must be whole milliseconds (an integer) or an RFC 3339 string, got {0}")]
    TsNotWhole(String),
    /// A value of a type `ts` never takes, described.
    #[error("must be integer milliseconds or an RFC 3339 string, got {0}")]
    TsNotATime(String),
    #[error(
        "must be integer milliseconds or an RFC 3339 timestamp; {shown:?} is neither ({reason})"
    )]
    TsNotRfc3339 { shown: String, reason: String },
    #[error("{0:?} is outside 1970-01-01T00:00:00Z up to 2^53 ms")]
    TsOutOfRange(String),
    #[error("must be one of \"event\", \"counter\", \"gauge\", got {0:?}")]
    UnknownKind(String),
    /// The number as written or shown.
    #[error("must be a finite number, got {0}")]
    NotFinite(String),
    /// A number literal too large for any number type, as written.
    #[error("number out of range: {0}")]
    NumberOutOfRange(String),
    /// A value of another type where a number belongs, described.
    #[error("must be a number, got {0}")]
    NotANumber(String),
}

impl RuleError {
    /// The error a producer gets: the field named in the details and first in the message.
    pub fn on(self, field: &str) -> InputError {
        InputError::invalid(field, format!("field \"{field}\": {self}"))
    }
}

/// The string fields and their rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextRule {
    /// 1–256 bytes of UTF-8 without control characters.
    Stream,
    /// 1–128 bytes of `[A-Za-z0-9_.:-]`.
    Type,
    /// 0–256 bytes without control characters; `null` or `""` is no entity.
    Entity,
    /// 1–128 bytes without control characters; may be `null`.
    Id,
}

impl TextRule {
    pub fn field(self) -> &'static str {
        match self {
            TextRule::Stream => "stream",
            TextRule::Type => "type",
            TextRule::Entity => "entity",
            TextRule::Id => "id",
        }
    }

    fn max_len(self) -> usize {
        match self {
            TextRule::Stream => MAX_STREAM_LEN,
            TextRule::Type => MAX_TYPE_LEN,
            TextRule::Entity => MAX_ENTITY_LEN,
            TextRule::Id => MAX_ID_LEN,
        }
    }

    /// Whether `null` stands for an absent value.
    pub fn nullable(self) -> bool {
        matches!(self, TextRule::Entity | TextRule::Id)
    }

    pub fn check(self, s: &str) -> Result<(), RuleError> {
        if s.is_empty() && self != TextRule::Entity {
            return Err(RuleError::Empty);
        }
        let max = self.max_len();
        if s.len() > max {
            return Err(RuleError::TooLong { max, len: s.len() });
        }
        if self == TextRule::Type {
            if !s.bytes().all(type_byte) {
                return Err(RuleError::TypeCharacters(short(s).to_string()));
            }
        } else {
            // Printable ASCII, the common case, is checked a word at a time.
            let printable_ascii = s.bytes().all(|b| (0x20..0x7f).contains(&b));
            if !printable_ascii && !no_control_chars(s) {
                return Err(RuleError::ControlCharacters);
            }
        }
        Ok(())
    }
}

/// A byte a `type` may hold: `[A-Za-z0-9_.:-]`.
pub fn type_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-')
}

/// True if `s` contains no control characters (C0, DEL, C1).
pub fn no_control_chars(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// `type` rule: 1–128 bytes of `[A-Za-z0-9_.:-]`.
pub fn valid_type(s: &str) -> bool {
    TextRule::Type.check(s).is_ok()
}

/// `stream` rule: 1–256 bytes of UTF-8 without control characters.
pub fn valid_stream(s: &str) -> bool {
    TextRule::Stream.check(s).is_ok()
}

/// `entity` rule: 0–256 bytes without control characters.
pub fn valid_entity(s: &str) -> bool {
    TextRule::Entity.check(s).is_ok()
}

/// `id` rule: a non-empty string ≤ 128 bytes without control characters.
pub fn valid_id(s: &str) -> bool {
    TextRule::Id.check(s).is_ok()
}

/// `ts` from an unsigned integer.
pub fn ts_from_u64(v: u64) -> Result<i64, RuleError> {
    i64::try_from(v)
        .ok()
        .filter(|&t| t < MAX_TS)
        .ok_or_else(|| RuleError::TsTooLate(v.to_string()))
}

/// `ts` from a signed integer.
pub fn ts_from_i64(v: i64) -> Result<i64, RuleError> {
    match u64::try_from(v) {
        Ok(u) => ts_from_u64(u),
        Err(_) => Err(RuleError::TsNegative(v)),
    }
}

/// A number that is not whole milliseconds, as `ts`.
pub fn ts_not_whole(v: impl fmt::Display) -> RuleError {
    RuleError::TsNotWhole(v.to_string())
}

/// `ts` from an RFC 3339 string, truncated to the millisecond.
pub fn ts_from_rfc3339(v: &str) -> Result<i64, RuleError> {
    let t = OffsetDateTime::parse(v, &Rfc3339).map_err(|e| RuleError::TsNotRfc3339 {
        shown: short(v).to_string(),
        reason: e.to_string(),
    })?;
    // Truncation to the millisecond: floor, which equals truncation for ts ≥ 0.
    let ms = t.unix_timestamp_nanos().div_euclid(1_000_000);
    if (0..i128::from(MAX_TS)).contains(&ms) {
        Ok(ms as i64)
    } else {
        Err(RuleError::TsOutOfRange(short(v).to_string()))
    }
}

/// `kind` from its name.
pub fn kind_from_str(v: &str) -> Result<Kind, RuleError> {
    Kind::parse(v).ok_or_else(|| RuleError::UnknownKind(short(v).to_string()))
}

/// The `value` rules of docs/API.md §2, which depend on `kind`: a counter needs an integer delta
/// (an integral float becomes one), a gauge a number. Every number a decoder produces is
/// finite already (serde_json reports overflow as an error, the others refuse non-finite
/// numbers with [`RuleError::NotFinite`]).
pub fn check_value(kind: Kind, value: Option<Num>) -> Result<Option<Num>, InputError> {
    // i64::MIN and the first float past i64::MAX, both exact as f64.
    const I64_LOW: f64 = -9_223_372_036_854_775_808.0;
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    match (kind, value) {
        (Kind::Counter, None) => Err(InputError::invalid(
            "value",
            "missing required field \"value\": a counter needs an integer delta",
        )),
        (Kind::Counter, Some(Num::Float(x))) => {
            if x.fract() == 0.0 && (I64_LOW..I64_END).contains(&x) {
                // Exact: x is integral and within i64's range.
                Ok(Some(Num::Int(x as i64)))
            } else {
                Err(InputError::invalid(
                    "value",
                    format!("field \"value\": a counter's value must be an integer (i64), got {x}"),
                ))
            }
        }
        (Kind::Gauge, None) => Err(InputError::invalid(
            "value",
            "missing required field \"value\": a gauge needs a finite number",
        )),
        (_, v) => Ok(v),
    }
}

/// Names reserved for the built-in features of docs/API.md §6; counters and gauges may not use them.
pub fn reserved_feature_name(s: &str) -> bool {
    s == "events" || s == "last_ts"
}

/// A counter or gauge may not take the name of a built-in feature (docs/API.md §2, §6).
pub fn check_reserved(kind: Kind, ty: &str) -> Result<(), InputError> {
    if kind != Kind::Event && reserved_feature_name(ty) {
        return Err(InputError::invalid(
            "type",
            format!(
                "field \"type\": a {} may not be named \"{ty}\", which is reserved for a \
                 built-in feature",
                kind.as_str()
            ),
        ));
    }
    Ok(())
}

/// `data` nests deeper than [`MAX_DATA_DEPTH`] levels (413, the depth limit).
pub fn data_too_deep() -> InputError {
    let mut e = InputError::too_large(
        LIMIT_DATA_DEPTH,
        MAX_DATA_DEPTH as u64,
        format!("field \"data\" is nested deeper than {MAX_DATA_DEPTH} levels"),
    );
    e.field = Some("data".into());
    e
}

/// `s` for an error message, cut to a readable length.
pub fn short(s: &str) -> &str {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s;
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
