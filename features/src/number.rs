//! Stored values read as numbers, and what an increment does to one: the one reading that
//! increments (`HINCRBY`, `HINCRBYFLOAT`: [`crate::incr`] applies them) and `counter` events
//! ([`crate::value`]) share. Pure: no tables, no log.
//!
//! # Numbers in stored values (Redis's rules)
//! - As an integer: an integer; a float with no fraction that an f64 holds exactly (it reads
//!   back without a fraction); a string in Redis's canonical integer form (`-12`, `0`; not
//!   `+5`, `05`, `1e3` or ` 5`).
//! - As a float: any number; a string that is a finite decimal number (`2.5`, `+5`, `1e3`,
//!   `.5`; not `inf` or `NaN`).
//! - Booleans are not numbers.

use crate::decl::FeatureValue;

/// What an increment adds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Increment {
    /// `HINCRBY`: the value must read as an integer, and stays one.
    Int(i64),
    /// `HINCRBYFLOAT`: the value must read as a number, and becomes a float. Finite.
    Float(f64),
}

/// What applying an increment did: the feature's new value, or why it was left as it was.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Incremented {
    Int(i64),
    Float(f64),
    Refused(IncrRefused),
}

/// Why an increment changed nothing.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error,
)]
#[serde(rename_all = "snake_case")]
pub enum IncrRefused {
    #[error("the value is not an integer")]
    NotInteger,
    #[error("the value is not a number")]
    NotFloat,
    #[error("the sum would overflow a 64-bit integer")]
    Overflow,
    #[error("the sum would not be a finite number")]
    NotFinite,
}

/// Largest integer an f64 holds exactly, with every integer below it.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `s` in Redis's canonical integer form (its `string2ll`), if it is one and fits an i64.
pub fn int_of(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = match digits.as_bytes() {
        // `0`, but not `-0`.
        [b'0'] => digits.len() == s.len(),
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if canonical { s.parse().ok() } else { None }
}

/// `s` as a finite decimal number, if it is one.
pub fn float_of(s: &str) -> Option<f64> {
    // Rust's parser also takes `inf`, `infinity` and `NaN`: not numbers here, as in Redis.
    let f: f64 = s.parse().ok()?;
    f.is_finite().then_some(f)
}

/// A stored value read as an integer (the module's rules).
pub(crate) fn as_int(v: &FeatureValue) -> Option<i64> {
    match v {
        FeatureValue::Int(i) => Some(*i),
        FeatureValue::Float(f) if f.fract() == 0.0 && f.abs() < EXACT => Some(*f as i64),
        FeatureValue::Str(s) => int_of(s),
        FeatureValue::Float(_) | FeatureValue::Bool(_) => None,
    }
}

/// A stored value read as a float (the module's rules).
pub(crate) fn as_float(v: &FeatureValue) -> Option<f64> {
    match v {
        FeatureValue::Int(i) => Some(*i as f64),
        FeatureValue::Float(f) => Some(*f),
        FeatureValue::Str(s) => float_of(s),
        FeatureValue::Bool(_) => None,
    }
}

impl Increment {
    /// The value after this increment of `current` (`None`: the feature is missing, and
    /// counts from 0).
    pub fn add_to(self, current: Option<&FeatureValue>) -> Result<FeatureValue, IncrRefused> {
        match self {
            Increment::Int(d) => {
                let base = match current {
                    None => 0,
                    Some(v) => as_int(v).ok_or(IncrRefused::NotInteger)?,
                };
                base.checked_add(d)
                    .map(FeatureValue::Int)
                    .ok_or(IncrRefused::Overflow)
            }
            Increment::Float(d) => {
                let base = match current {
                    None => 0.0,
                    Some(v) => as_float(v).ok_or(IncrRefused::NotFloat)?,
                };
                let sum = base + d;
                if sum.is_finite() {
                    Ok(FeatureValue::Float(sum))
                } else {
                    Err(IncrRefused::NotFinite)
                }
            }
        }
    }

    /// What a value that is no number refuses.
    pub(crate) fn not_a_number(self) -> IncrRefused {
        match self {
            Increment::Int(_) => IncrRefused::NotInteger,
            Increment::Float(_) => IncrRefused::NotFloat,
        }
    }
}

impl Incremented {
    pub(crate) fn of(v: &FeatureValue, by: Increment) -> Incremented {
        match v {
            FeatureValue::Int(i) => Incremented::Int(*i),
            FeatureValue::Float(f) => Incremented::Float(*f),
            FeatureValue::Bool(_) | FeatureValue::Str(_) => Incremented::Refused(by.not_a_number()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn redis_integers_only() {
        for (s, want) in [
            ("0", Some(0)),
            ("-12", Some(-12)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("+5", None),
            ("05", None),
            ("02134", None),
            ("1e3", None),
            (" 5", None),
            ("5 ", None),
            ("", None),
            ("-", None),
            ("2.0", None),
        ] {
            assert_eq!(int_of(s), want, "{s:?}");
        }
        assert_eq!(float_of("1e3"), Some(1000.0));
        assert_eq!(float_of("+5"), Some(5.0));
        assert_eq!(float_of(".5"), Some(0.5));
        for s in ["inf", "-infinity", "NaN", "1e999", " 1", "", "0x10", "1,5"] {
            assert_eq!(float_of(s), None, "{s:?}");
        }
    }

    #[test]
    fn what_an_increment_adds_to() {
        let int = Increment::Int(3);
        let float = Increment::Float(0.5);
        let s = |t: &str| FeatureValue::Str(t.into());
        assert_eq!(int.add_to(None), Ok(FeatureValue::Int(3)));
        assert_eq!(
            int.add_to(Some(&FeatureValue::Int(4))),
            Ok(FeatureValue::Int(7))
        );
        assert_eq!(int.add_to(Some(&s("5"))), Ok(FeatureValue::Int(8)));
        assert_eq!(
            int.add_to(Some(&FeatureValue::Float(2.0))),
            Ok(FeatureValue::Int(5))
        );
        for v in [
            FeatureValue::Float(2.5),
            FeatureValue::Bool(true),
            s("02134"),
            s("1e3"),
            s("zed"),
        ] {
            assert_eq!(int.add_to(Some(&v)), Err(IncrRefused::NotInteger), "{v:?}");
        }
        assert_eq!(
            Increment::Int(1).add_to(Some(&FeatureValue::Int(i64::MAX))),
            Err(IncrRefused::Overflow)
        );
        assert_eq!(float.add_to(None), Ok(FeatureValue::Float(0.5)));
        assert_eq!(
            float.add_to(Some(&s("1e3"))),
            Ok(FeatureValue::Float(1000.5))
        );
        assert_eq!(
            float.add_to(Some(&s("02134"))),
            Ok(FeatureValue::Float(2134.5))
        );
        assert_eq!(
            float.add_to(Some(&FeatureValue::Int(2))),
            Ok(FeatureValue::Float(2.5))
        );
        assert_eq!(float.add_to(Some(&s("x"))), Err(IncrRefused::NotFloat));
        assert_eq!(
            Increment::Float(f64::MAX).add_to(Some(&FeatureValue::Float(f64::MAX))),
            Err(IncrRefused::NotFinite)
        );
    }
}
