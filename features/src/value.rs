//! Plain values: counters, gauges and direct writes, and a feature's removal.

use crate::decl::FeatureValue;
use crate::names::Names;
use crate::number::{as_float, as_int};
use crate::state::{Entity, Feat, State};
use vx_proto::Num;

/// Remove feature `id` of the entity and its name's reference; false if it has no such
/// feature.
pub(crate) fn remove_feat(e: &mut Entity, names: &mut Names, id: u32) -> bool {
    let Some(p) = e.feats.iter().position(|f| f.name == id) else {
        return false;
    };
    e.feats.swap_remove(p);
    names.release(id);
    true
}

/// The plain state of feature `id` (`name`), created if missing. `id` is `u32::MAX` when the
/// name has no id yet in this shard.
pub(crate) fn plain_mut<'e>(
    e: &'e mut Entity,
    names: &mut Names,
    id: u32,
    name: &str,
    append_ms: i64,
) -> &'e mut State {
    let pos = if id == u32::MAX {
        None
    } else {
        e.feats.iter().position(|f| f.name == id)
    };
    let pos = match pos {
        Some(p) => {
            if let Some(f) = e.feats.get_mut(p) {
                f.updated_ms = append_ms;
            }
            p
        }
        None => {
            let (id, _) = names.acquire(name);
            e.feats.push(Feat {
                name: id,
                updated_ms: append_ms,
                st: State::Plain {
                    v: FeatureValue::Int(0),
                    ts: i64::MIN,
                },
            });
            e.feats.len() - 1
        }
    };
    // `pos` is in range: found or just pushed.
    &mut e.feats[pos].st
}

pub(crate) fn add_counter(st: &mut State, delta: Num, ts: i64) {
    let d = match delta {
        Num::Int(i) => i,
        // Decoders accept counters only as integers (a float with zero fraction included).
        Num::Float(f) => f as i64,
    };
    match st {
        State::Plain {
            v: FeatureValue::Int(c),
            ts: t,
        } => {
            *c = c.saturating_add(d);
            *t = (*t).max(ts);
        }
        State::Plain {
            v: FeatureValue::Float(c),
            ts: t,
        } => {
            *c += d as f64;
            *t = (*t).max(ts);
        }
        State::Plain { v, ts: t } => {
            // A PUT left a string or a bool. A string that reads as a number (`HSET … 5`)
            // counts on, by the rules increments read it with; anything else starts over.
            *v = match (as_int(v), as_float(v)) {
                (Some(i), _) => FeatureValue::Int(i.saturating_add(d)),
                (None, Some(f)) => FeatureValue::Float(f + d as f64),
                (None, None) => FeatureValue::Int(d),
            };
            *t = (*t).max(ts);
        }
        other => {
            *other = State::Plain {
                v: FeatureValue::Int(d),
                ts,
            }
        }
    }
}

pub(crate) fn set_gauge(st: &mut State, value: Num, ts: i64) {
    match st {
        State::Plain { v, ts: t } => {
            if ts >= *t {
                *v = value.into();
                *t = ts;
            }
        }
        other => {
            *other = State::Plain {
                v: value.into(),
                ts,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(v: FeatureValue, d: i64) -> FeatureValue {
        let mut st = State::Plain { v, ts: 5 };
        add_counter(&mut st, Num::Int(d), 7);
        match st {
            State::Plain { v, ts } => {
                assert_eq!(ts, 7);
                v
            }
            _ => unreachable!("a plain value stays plain"),
        }
    }

    #[test]
    fn a_counter_counts_on_from_a_string_that_is_a_number() {
        let s = |t: &str| FeatureValue::Str(t.into());
        assert_eq!(counted(s("5"), 3), FeatureValue::Int(8));
        assert_eq!(counted(s("2.5"), 1), FeatureValue::Float(3.5));
        assert_eq!(counted(s("zed"), 3), FeatureValue::Int(3));
        assert_eq!(counted(FeatureValue::Bool(true), 3), FeatureValue::Int(3));
        assert_eq!(
            counted(FeatureValue::Int(i64::MAX), 1),
            FeatureValue::Int(i64::MAX)
        );
    }
}
