//! The event model of SPEC §2: kinds, numeric values, and a borrowed view of one event.

/// The kind of an event. `#[repr(u8)]` so it packs into one byte of the header and on disk.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Kind {
    #[default]
    Event = 0,
    Counter = 1,
    Gauge = 2,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Event => "event",
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "event" => Some(Kind::Event),
            "counter" => Some(Kind::Counter),
            "gauge" => Some(Kind::Gauge),
            _ => None,
        }
    }

    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Event),
            1 => Some(Kind::Counter),
            2 => Some(Kind::Gauge),
            _ => None,
        }
    }
}

/// A numeric `value`. Integers that were sent as integer literals (and fit an i64) stay
/// integers so that replay returns them as sent; everything else is a finite f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
}

/// Upper bound (exclusive) of an integer `ts`: 2^53, so every ts is exact as a JSON number.
pub const MAX_TS: i64 = 1 << 53;
/// Length limits of SPEC §2, in bytes.
pub const MAX_STREAM_LEN: usize = 256;
pub const MAX_TYPE_LEN: usize = 128;
pub const MAX_ENTITY_LEN: usize = 256;
pub const MAX_ID_LEN: usize = 128;
/// Maximum nesting depth of `data`.
pub const MAX_DATA_DEPTH: usize = 64;

/// One validated event, borrowed from wherever it lives (a packed batch, a log record).
/// `ts` is always resolved (the server's receive time when the producer sent none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EventView<'a> {
    pub stream: &'a str,
    /// `None` for no entity (absent or `""`).
    pub entity: Option<&'a str>,
    pub ty: &'a str,
    pub ts: i64,
    pub kind: Kind,
    pub value: Option<Num>,
    pub id: Option<&'a str>,
    /// Compact JSON text of `data`, exactly as it will be replayed.
    pub data: Option<&'a str>,
}

/// True if `s` contains no control characters (C0, DEL, C1).
pub fn no_control_chars(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

/// `type` rule: 1–128 bytes of `[A-Za-z0-9_.:-]`.
pub fn valid_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TYPE_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// `stream` rule: 1–256 bytes of UTF-8 without control characters.
pub fn valid_stream(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_STREAM_LEN && no_control_chars(s)
}

/// `entity` rule: 0–256 bytes without control characters.
pub fn valid_entity(s: &str) -> bool {
    s.len() <= MAX_ENTITY_LEN && no_control_chars(s)
}

/// `id` rule: a non-empty string ≤ 128 bytes without control characters.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_LEN && no_control_chars(s)
}

/// Names reserved for the built-in features of SPEC §6; counters and gauges may not use them.
pub fn reserved_feature_name(s: &str) -> bool {
    s == "events" || s == "last_ts"
}
