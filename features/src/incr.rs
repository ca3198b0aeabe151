//! Increments (the Redis protocol's `HINCRBY` and `HINCRBYFLOAT`, docs/RESP.md) and the one
//! reading of a stored value as a number that increments and `counter` events share.
//!
//! An increment is a change of its own, in a record of its own, applied here in log order
//! like every other change: the new value is computed from the value the tables hold when
//! the record applies, never from a value a client read before. So two increments of one
//! feature, from any two connections (or nodes), both count whatever their timing, and
//! recovery replays them to the same value. An increment the value cannot take (not a
//! number, an overflow) changes nothing; its outcome says why, and replay finds the same.
//!
//! # Numbers in stored values (Redis's rules)
//! - As an integer: an integer; a float with no fraction that an f64 holds exactly (it reads
//!   back without a fraction); a string in Redis's canonical integer form (`-12`, `0`; not
//!   `+5`, `05`, `1e3` or ` 5`).
//! - As a float: any number; a string that is a finite decimal number (`2.5`, `+5`, `1e3`,
//!   `.5`; not `inf` or `NaN`).
//! - Booleans are not numbers.

use crate::Features;
use crate::apply::{ApplyError, DirectApplied, LogPos, Replay};
use crate::decl::{EVENTS, FeatureValue, LAST_TS};
use crate::state::State;
use crate::table::{EntityRef, Shard};
use crate::value::plain_mut;

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
    fn not_a_number(self) -> IncrRefused {
        match self {
            Increment::Int(_) => IncrRefused::NotInteger,
            Increment::Float(_) => IncrRefused::NotFloat,
        }
    }
}

impl Incremented {
    fn of(v: &FeatureValue, by: Increment) -> Incremented {
        match v {
            FeatureValue::Int(i) => Incremented::Int(*i),
            FeatureValue::Float(f) => Incremented::Float(*f),
            FeatureValue::Bool(_) | FeatureValue::Str(_) => Incremented::Refused(by.not_a_number()),
        }
    }
}

impl Features {
    /// Apply an increment of feature `name` of `entity` (module docs); `replay` is set
    /// during recovery only. The outcome's `incremented` says what it did (`None`: `name`
    /// is a declared aggregate, which increments never touch, as PUTs never do).
    pub fn incr(
        &self,
        at: LogPos,
        entity: &str,
        name: &str,
        by: Increment,
        replay: Option<&Replay<'_>>,
    ) -> Result<DirectApplied, ApplyError> {
        self.injected_fault(at)?;
        let er = EntityRef::new(entity);
        if self.redo_only(er, at.lsn, replay) {
            return Ok(DirectApplied::default());
        }
        self.change(er, |sh| self.incr_to(sh, er, name, by, at))
    }

    fn incr_to(
        &self,
        sh: &mut Shard,
        er: EntityRef<'_>,
        name: &str,
        by: Increment,
        at: LogPos,
    ) -> Result<DirectApplied, ApplyError> {
        self.injected_fault_in(er.shard(self.nshards), at)?;
        self.advance(er, sh, at.lsn)?;
        let (entities, names, bytes) = sh.parts();
        let mut out = DirectApplied {
            found: entities.contains_key(er),
            ..DirectApplied::default()
        };
        if self.decls.is_declared(name) {
            return Ok(out);
        }
        let builtin = name == EVENTS || name == LAST_TS;
        if builtin && matches!(by, Increment::Float(_)) {
            // The built-ins hold integers: refused before anything is created.
            out.incremented = Some(Incremented::Refused(IncrRefused::NotInteger));
            return Ok(out);
        }
        // A missing feature always takes the increment: the entity is created only then.
        let mut e = entities.get_or_insert(er, bytes);
        let id = names.id(name).unwrap_or(u32::MAX);
        let (had, next) = if let Some(b) = e.builtin(name) {
            (b.is_some(), by.add_to(b.map(FeatureValue::Int).as_ref()))
        } else {
            match e.feats.iter().find(|f| id != u32::MAX && f.name == id) {
                None => (false, by.add_to(None)),
                Some(f) => match &f.st {
                    State::Plain { v, .. } => (true, by.add_to(Some(v))),
                    _ => (true, Err(by.not_a_number())),
                },
            }
        };
        let v = match next {
            Ok(v) => v,
            Err(why) => {
                out.incremented = Some(Incremented::Refused(why));
                return Ok(out);
            }
        };
        out.incremented = Some(Incremented::of(&v, by));
        out.set = 1;
        out.added = u64::from(!had);
        e.as_of = e.as_of.max(at.append_ms);
        if builtin {
            if let FeatureValue::Int(i) = v {
                e.set_builtin(name, Some(i));
            }
            return Ok(out);
        }
        // As a PUT's value, it keeps the `ts` of the value it replaced (a later gauge with an
        // older `ts` does not undo it).
        let st = plain_mut(&mut e, names, id, name, at.append_ms);
        let ts = match st {
            State::Plain { ts, .. } => *ts,
            _ => i64::MIN,
        };
        *st = State::Plain { v, ts };
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Reading;

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

    fn at(lsn: u64) -> LogPos {
        LogPos {
            lsn,
            append_ms: 1_000 + lsn as i64,
        }
    }

    fn read(f: &Features, name: &str) -> Option<FeatureValue> {
        let mut got = None;
        f.read(
            "p",
            Some(&[name]),
            crate::ReadAt { now_ms: 10_000 },
            &mut |_, v| {
                got = Some(match v {
                    Reading::Value(v) => v.clone(),
                    Reading::Int(i) => FeatureValue::Int(i),
                    Reading::Num(x) => FeatureValue::Float(x),
                });
            },
        );
        got
    }

    #[test]
    fn increments_apply_in_log_order_and_refusals_change_nothing() {
        let f = Features::new(4, Vec::new(), u64::MAX);
        let a = f.incr(at(1), "p", "n", Increment::Int(2), None).unwrap();
        assert_eq!(a.incremented, Some(Incremented::Int(2)));
        assert_eq!((a.set, a.added, a.found), (1, 1, false));
        let a = f.incr(at(2), "p", "n", Increment::Int(5), None).unwrap();
        assert_eq!(a.incremented, Some(Incremented::Int(7)));
        assert_eq!((a.set, a.added, a.found), (1, 0, true));
        let a = f
            .incr(at(3), "p", "n", Increment::Float(0.5), None)
            .unwrap();
        assert_eq!(a.incremented, Some(Incremented::Float(7.5)));
        // Not an integer any more: refused, the value kept.
        let a = f.incr(at(4), "p", "n", Increment::Int(1), None).unwrap();
        assert_eq!(
            a.incremented,
            Some(Incremented::Refused(IncrRefused::NotInteger))
        );
        assert_eq!(a.set, 0);
        assert_eq!(read(&f, "n"), Some(FeatureValue::Float(7.5)));
        // A string that reads as a number counts; one that does not is left alone.
        f.put(
            at(5),
            "p",
            &[("s", Some(FeatureValue::Str("5".into())))],
            None,
        )
        .unwrap();
        let a = f.incr(at(6), "p", "s", Increment::Int(1), None).unwrap();
        assert_eq!(a.incremented, Some(Incremented::Int(6)));
        f.put(
            at(7),
            "p",
            &[("z", Some(FeatureValue::Str("zed".into())))],
            None,
        )
        .unwrap();
        let a = f
            .incr(at(8), "p", "z", Increment::Float(1.0), None)
            .unwrap();
        assert_eq!(
            a.incremented,
            Some(Incremented::Refused(IncrRefused::NotFloat))
        );
        assert_eq!(read(&f, "z"), Some(FeatureValue::Str("zed".into())));
        // The built-ins hold integers.
        let a = f.incr(at(9), "p", EVENTS, Increment::Int(4), None).unwrap();
        assert_eq!(a.incremented, Some(Incremented::Int(4)));
        let a = f
            .incr(at(10), "p", EVENTS, Increment::Float(1.0), None)
            .unwrap();
        assert_eq!(
            a.incremented,
            Some(Incremented::Refused(IncrRefused::NotInteger))
        );
        // A refused increment of an unknown entity's built-in creates nothing.
        let a = f
            .incr(at(11), "q", LAST_TS, Increment::Float(1.0), None)
            .unwrap();
        assert!(!a.found);
        assert!(!f.exists("q", None));
        // Out of log order: refused like any record.
        assert!(f.incr(at(3), "p", "n", Increment::Int(1), None).is_err());
    }
}
