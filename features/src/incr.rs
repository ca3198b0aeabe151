//! Increments (the Redis protocol's `HINCRBY` and `HINCRBYFLOAT`, docs/RESP.md) applied to the
//! tables; what an increment does to a value is [`crate::number`]'s.
//!
//! An increment is a change of its own, in a record of its own, applied here in log order
//! like every other change: the new value is computed from the value the tables hold when
//! the record applies, never from a value a client read before. So two increments of one
//! feature, from any two connections (or nodes), both count whatever their timing, and
//! recovery replays them to the same value. An increment the value cannot take (not a
//! number, an overflow) changes nothing; its outcome says why, and replay finds the same.

use crate::Features;
use crate::apply::{ApplyError, DirectApplied, LogPos, Replay};
use crate::decl::{EVENTS, FeatureValue, LAST_TS};
use crate::number::{IncrRefused, Increment, Incremented};
use crate::state::State;
use crate::table::{EntityRef, Shard};
use crate::value::plain_mut;

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
