//! The event model of docs/API.md §2: kinds, numeric values, and a borrowed view of one event. The
//! rules a valid event keeps are [`crate::rules`].

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
