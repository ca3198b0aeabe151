//! The query API: whether an entity (or one of its features) exists, and an entity's
//! features as a read sees them now (`ttl` applied, windows evaluated at the entity's
//! watermark). Rendering them (JSON over HTTP) is the caller's.

use crate::Features;
use crate::decl::{EVENTS, LAST_TS, Reading};
use crate::prefetch::Ahead;
use crate::prefetch::Lines;
use crate::rec::{FeatView, View};
use crate::state::State;
use crate::table::EntityRef;
use smallvec::SmallVec;

/// The most entities one [`Features::prefetch_reads`] loads ahead.
pub const PREFETCH_READS: usize = 32;

/// When a read happens.
#[derive(Clone, Copy, Debug)]
pub struct ReadAt {
    /// The server's clock, for `ttl`.
    pub now_ms: i64,
}

/// What a read found besides the features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityRead {
    /// The greatest event `ts` or direct-write append time applied to the entity (0 if none).
    pub as_of: i64,
}

impl Features {
    /// Whether the entity exists, and whether it has the feature `name` (if given).
    pub fn exists(&self, entity: &str, name: Option<&str>) -> bool {
        let er = EntityRef::new(entity);
        let g = self.shard(er).read();
        let Some(e) = g.entities.get(er) else {
            return false;
        };
        match name {
            None => true,
            Some(EVENTS) => e.events().is_some(),
            Some(LAST_TS) => e.last_ts().is_some(),
            Some(n) => g
                .names
                .id(n)
                .is_some_and(|id| e.feats.iter().any(|f| f.name == id)),
        }
    }

    /// Start loading what reading `entities` will touch (a pipeline of reads: up to
    /// [`PREFETCH_READS`] of them), one stage over all of them before the next: the index
    /// entries, the slots, the side allocations, the states' own bytes (a string, buckets, a
    /// sketch). Once the tables outgrow the caches each stage is a miss that depends on the
    /// one before; across the batch they overlap instead of following each other. Changes
    /// nothing a read sees.
    pub fn prefetch_reads(&self, entities: &[&str]) {
        let ers: SmallVec<[EntityRef<'_>; PREFETCH_READS]> = entities
            .iter()
            .take(PREFETCH_READS)
            .map(|e| EntityRef::new(e))
            .collect();
        // Each stage notes its lines under the locks, then asks for all of them at once
        // (see `Lines`). A read does not know how many states an entity holds: room for two
        // covers the side allocation's header and the first few.
        let mut lines = Lines::new();
        for stage in [Ahead::Index, Ahead::Slot, Ahead::Side, Ahead::States] {
            for er in &ers {
                self.shard(*er).read().prefetch(*er, stage, 2, &mut lines);
            }
            lines.issue();
        }
    }

    /// Hand the entity's features to `visit`, in table order (the built-ins first), or those
    /// of `names` in that order (unknown or empty ones skipped); `None` if the entity is
    /// unknown. `visit` runs under the shard's read lock: it must not call back into the tables.
    pub fn read(
        &self,
        entity: &str,
        names: Option<&[&str]>,
        at: ReadAt,
        visit: &mut dyn FnMut(&str, Reading<'_>),
    ) -> Option<EntityRead> {
        let er = EntityRef::new(entity);
        let g = self.shard(er).read();
        let e = g.entities.get(er)?;
        let builtin = |name: &str, v: Option<i64>, visit: &mut dyn FnMut(&str, Reading<'_>)| {
            if let Some(v) = v {
                visit(name, Reading::Int(v));
            }
        };
        let one = |f: &FeatView<'_>, visit: &mut dyn FnMut(&str, Reading<'_>)| {
            if let (Some(name), Some(v)) = (g.names.name(f.name), self.read_value(f, &e, at)) {
                visit(name, v);
            }
        };
        match names {
            None => {
                builtin(EVENTS, e.events(), visit);
                builtin(LAST_TS, e.last_ts(), visit);
                for f in &e.feats {
                    one(f, visit);
                }
            }
            Some(list) => {
                for n in list {
                    match *n {
                        EVENTS => builtin(EVENTS, e.events(), visit),
                        LAST_TS => builtin(LAST_TS, e.last_ts(), visit),
                        _ => {
                            if let Some(id) = g.names.id(n)
                                && let Some(f) = e.feats.iter().find(|f| f.name == id)
                            {
                                one(f, visit);
                            }
                        }
                    }
                }
            }
        }
        Some(EntityRead {
            as_of: e.as_of.max(0),
        })
    }

    /// One feature's value as a read sees it now; `None` when hidden (ttl) or empty.
    fn read_value<'s>(&self, f: &'s FeatView<'_>, e: &View<'_>, at: ReadAt) -> Option<Reading<'s>> {
        let Some(d) = self.decls.decl_of(f.name) else {
            return match &*f.st {
                State::Plain { v, .. } => Some(Reading::Value(v)),
                _ => None,
            };
        };
        if let Some(Some(ttl)) = self.decls.ttls.get(d)
            && at.now_ms.saturating_sub(f.updated_ms) > *ttl
        {
            return None;
        }
        let decl = self.decls.list.get(d)?;
        let width = self.decls.widths.get(d).copied().flatten();
        crate::window::evaluate(decl, width, &f.st, e.wm)
    }
}

/// The crate's tests' view of an entity: every feature as `name=value;` in table order, and
/// what the read returned.
#[cfg(test)]
pub(crate) fn text_of(f: &Features, entity: &str) -> String {
    let mut out = String::new();
    let read = f.read(entity, None, ReadAt { now_ms: 0 }, &mut |name, v| {
        let v = match v {
            Reading::Value(v) => format!("{v:?}"),
            Reading::Int(i) => i.to_string(),
            Reading::Num(x) => x.to_string(),
        };
        out.push_str(&format!("{name}={v};"));
    });
    format!("{out} {read:?}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::decl::FeatureValue;
    use crate::{Features, LogPos, ReadAt, Reading};

    /// Loading ahead is a hint: present, absent and repeated entities, more than it looks at,
    /// and reads after it see what they saw before.
    #[test]
    fn prefetch_reads_changes_nothing() {
        let f = Features::new(4, vec![], u64::MAX);
        let at = LogPos {
            lsn: 1,
            append_ms: 1,
        };
        let s = Some(FeatureValue::Str("v".repeat(300).into()));
        f.put(
            at,
            "a",
            &[("x", s), ("y", Some(FeatureValue::Int(2)))],
            None,
        )
        .unwrap();
        let read = |e: &str| {
            let mut out = Vec::new();
            let r = f.read(e, None, ReadAt { now_ms: 0 }, &mut |n, v| {
                out.push(format!("{n}={}", matches!(v, Reading::Value(_))));
            });
            (r, out)
        };
        let before = (read("a"), read("b"));
        let many: Vec<&str> = ["a", "b", "a", ""].repeat(40);
        f.prefetch_reads(&many);
        f.prefetch_reads(&[]);
        assert_eq!((read("a"), read("b")), before);
        assert_eq!(before.0.1.len(), 2);
    }
}
