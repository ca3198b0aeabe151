//! What the tables hold and what may be declared: feature values, the declared aggregates
//! (`features:` in the config file) with their start-up checks (docs/API.md §6), and the
//! declarations indexed for the apply path.

use hashbrown::{HashMap, HashSet};
use std::time::Duration;
use vx_proto::Num;

/// Buckets of a windowed aggregate: the window's resolution is 1/60 of it.
pub const BUCKETS: i64 = 60;
/// How far past its record's append time an event's `ts` may be before windows ignore it.
pub const MAX_FUTURE_MS: i64 = 60_000;
/// Window bounds (docs/API.md §6).
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
pub const MAX_WINDOW: Duration = Duration::from_secs(30 * 86_400);
/// Longest string value a PUT may set.
pub const MAX_STRING_VALUE: usize = 64 << 10;
/// Most names one PUT may set.
pub const MAX_PUT_NAMES: usize = 1024;
/// The built-in features.
pub const EVENTS: &str = "events";
pub const LAST_TS: &str = "last_ts";

/// A feature's value.
#[derive(Clone, Debug, PartialEq)]
pub enum FeatureValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(Box<str>),
}

/// One feature's value as a read sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reading<'a> {
    /// A value as stored: counters, gauges, PUTs, `last`.
    Value(&'a FeatureValue),
    /// An integer the tables computed: the built-ins, `count`, `distinct`'s estimate.
    Int(i64),
    /// An aggregate's number (`sum`, `avg`, `min`, `max`): integral values are integers.
    Num(f64),
}

impl From<Num> for FeatureValue {
    fn from(n: Num) -> Self {
        match n {
            Num::Int(i) => FeatureValue::Int(i),
            Num::Float(f) => FeatureValue::Float(f),
        }
    }
}

/// A declared aggregate's function (`agg` in the config file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Agg {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Last,
    Distinct,
}

impl Agg {
    pub fn as_str(self) -> &'static str {
        match self {
            Agg::Count => "count",
            Agg::Sum => "sum",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Avg => "avg",
            Agg::Last => "last",
            Agg::Distinct => "distinct",
        }
    }
}

/// What `distinct` counts distinct values of (`of` in the config file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DistinctOf {
    /// The event's `value` (events without one are skipped).
    #[default]
    Value,
    /// The event's stream.
    Stream,
    /// The event's `data`, as its compact JSON text (events without data are skipped).
    Data,
}

impl DistinctOf {
    pub fn as_str(self) -> &'static str {
        match self {
            DistinctOf::Value => "value",
            DistinctOf::Stream => "stream",
            DistinctOf::Data => "data",
        }
    }
}

/// One declared aggregate (`features:` in the config file).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FeatureDecl {
    pub name: String,
    /// The event type it aggregates.
    pub from: String,
    pub agg: Agg,
    /// `None`: all time.
    pub window: Option<Duration>,
    /// Hidden on read once not updated for this long (by the server's append time).
    pub ttl: Option<Duration>,
    pub of: DistinctOf,
}

impl FeatureDecl {
    /// Bucket width in ms; `None` for all time.
    pub(crate) fn width_ms(&self) -> Option<i64> {
        self.window.map(|w| {
            let ms = i64::try_from(w.as_millis()).unwrap_or(i64::MAX);
            (ms + BUCKETS - 1) / BUCKETS
        })
    }

    /// What the aggregate's state depends on: a snapshot's state for a declaration with
    /// another fingerprint is recomputed from the log (`ttl` only affects reads).
    pub fn fingerprint(&self) -> u64 {
        let s = format!(
            "{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
            self.name,
            self.from,
            self.agg.as_str(),
            self.window.map(|w| w.as_millis()),
            self.of.as_str()
        );
        xxhash_rust::xxh3::xxh3_64(s.as_bytes())
    }
}

/// Feature names follow the rule of event types (docs/API.md §2): 1–128 bytes of `[A-Za-z0-9_.:-]`.
pub fn valid_name(name: &str) -> bool {
    vx_proto::rules::valid_type(name)
}

/// A declaration start-up refuses (docs/API.md §6); the message names the feature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeclError {
    #[error("feature name {0:?} must be 1-128 bytes of [A-Za-z0-9_.:-]")]
    BadName(String),
    #[error("feature name {0:?} clashes with the built-in feature of that name")]
    Builtin(String),
    #[error("feature {0:?} is declared twice")]
    Twice(String),
    #[error("feature {name:?}: from {from:?} is not a valid event type")]
    BadFrom { name: String, from: String },
    #[error("feature {0:?}: window must be from 1s to 30d (or absent for all time)")]
    Window(String),
    #[error("feature {0:?}: ttl must be more than 0")]
    Ttl(String),
    #[error("feature {0:?}: `of` applies to distinct only")]
    OfNotDistinct(String),
}

/// Check the declared aggregates (start-up errors of docs/API.md §6).
pub fn check_decls(decls: &[FeatureDecl]) -> Result<(), DeclError> {
    let mut seen = HashSet::new();
    for d in decls {
        let name = || d.name.clone();
        if !valid_name(&d.name) {
            return Err(DeclError::BadName(name()));
        }
        if d.name == EVENTS || d.name == LAST_TS {
            return Err(DeclError::Builtin(name()));
        }
        if !seen.insert(d.name.as_str()) {
            return Err(DeclError::Twice(name()));
        }
        if !valid_name(&d.from) {
            return Err(DeclError::BadFrom {
                name: name(),
                from: d.from.clone(),
            });
        }
        if let Some(w) = d.window
            && !(MIN_WINDOW..=MAX_WINDOW).contains(&w)
        {
            return Err(DeclError::Window(name()));
        }
        if d.ttl.is_some_and(|t| t.is_zero()) {
            return Err(DeclError::Ttl(name()));
        }
        if d.agg != Agg::Distinct && d.of != DistinctOf::Value {
            return Err(DeclError::OfNotDistinct(name()));
        }
    }
    Ok(())
}

/// The declarations, indexed for the apply path and reads.
pub(crate) struct Decls {
    pub list: Vec<FeatureDecl>,
    pub widths: Vec<Option<i64>>,
    pub ttls: Vec<Option<i64>>,
    pub by_from: HashMap<Box<str>, Vec<u32>>,
    by_name: HashMap<Box<str>, u32>,
    /// Most declarations sharing one `from`.
    pub max_per_type: usize,
}

impl Decls {
    pub fn new(list: Vec<FeatureDecl>) -> Decls {
        let mut by_from: HashMap<Box<str>, Vec<u32>> = HashMap::new();
        let mut by_name = HashMap::new();
        for (i, d) in list.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            by_from.entry(d.from.as_str().into()).or_default().push(i);
            by_name.insert(d.name.as_str().into(), i);
        }
        Decls {
            widths: list.iter().map(FeatureDecl::width_ms).collect(),
            ttls: list
                .iter()
                .map(|d| {
                    d.ttl
                        .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
                })
                .collect(),
            max_per_type: by_from.values().map(Vec::len).max().unwrap_or(0),
            by_from,
            by_name,
            list,
        }
    }

    /// The name id of declaration `i` in every shard's name table.
    pub fn id(i: u32) -> u32 {
        i + 2
    }

    pub fn decl_of(&self, id: u32) -> Option<usize> {
        let i = id.checked_sub(2)? as usize;
        (i < self.list.len()).then_some(i)
    }

    pub fn is_declared(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The declarations aggregating events of type `ty`, by index.
    pub fn of_type(&self, ty: &str) -> &[u32] {
        self.by_from.get(ty).map_or(&[][..], |v| &v[..])
    }
}

/// A declaration over events of type `hit`, for the crate's tests.
#[cfg(test)]
pub(crate) fn decl(name: &str, agg: Agg, window_secs: Option<u64>) -> FeatureDecl {
    FeatureDecl {
        name: name.into(),
        from: "hit".into(),
        agg,
        window: window_secs.map(Duration::from_secs),
        ttl: None,
        of: DistinctOf::Value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_checked() {
        assert!(check_decls(&[decl("ok", Agg::Sum, Some(300))]).is_ok());
        assert_eq!(
            check_decls(&[decl("events", Agg::Sum, None)]),
            Err(DeclError::Builtin("events".into()))
        );
        assert!(check_decls(&[decl("a", Agg::Sum, None), decl("a", Agg::Max, None)]).is_err());
        assert!(
            check_decls(&[FeatureDecl {
                window: Some(Duration::from_millis(500)),
                ..decl("a", Agg::Sum, None)
            }])
            .is_err()
        );
        assert!(check_decls(&[decl("a", Agg::Sum, Some(31 * 86_400))]).is_err());
        assert!(
            check_decls(&[FeatureDecl {
                of: DistinctOf::Stream,
                ..decl("a", Agg::Sum, None)
            }])
            .is_err()
        );
    }

    /// The messages are the config file's errors: they must read as before the typed error.
    #[test]
    fn messages_name_the_feature() {
        assert_eq!(
            DeclError::Window("w".into()).to_string(),
            "feature \"w\": window must be from 1s to 30d (or absent for all time)"
        );
        assert_eq!(
            DeclError::BadFrom {
                name: "a".into(),
                from: "b c".into()
            }
            .to_string(),
            "feature \"a\": from \"b c\" is not a valid event type"
        );
    }
}
