//! The apply interface: the only way the tables change. The writer hands over every record
//! it made durable, in log order, as typed values (an event with its entity, a PUT's values, a
//! delete) together with the record's place in the log ([`LogPos`]); recovery replays the same
//! records through the same calls, with a [`Replay`] saying what the snapshot covers already.
//!
//! What a record does:
//! - every event with an entity: `events` += 1, `last_ts` = max `ts`;
//! - a `counter`: `<type>` += value; a `gauge`: `<type>` = value if its `ts` ≥ the current
//!   value's (ties go to the later record, since records apply in log order);
//! - declared aggregates whose `from` is the event's type update their state
//!   ([`crate::window`], [`crate::hll`]);
//! - a feature put sets values (a PUT wins over everything earlier in the log; the value keeps
//!   the `ts` of the value it replaced, so a later gauge with an older `ts` does not undo it);
//!   `null` deletes; a feature delete removes one feature or the whole entity;
//! - an increment adds to one value, as it is when the record applies ([`crate::incr`]);
//! - a shard reset (cluster mode: the node discards its copy of one shard) empties the shard.
//!
//! A record the tables cannot take is an [`ApplyError`]: the tables no longer follow the log,
//! and the caller must act on it (the storage engine poisons itself, docs/FEATURES.md).

use crate::Features;
use crate::decl::{Agg, Decls, FeatureValue, MAX_FUTURE_MS};
use crate::hll;
use crate::number::Incremented;
use crate::state::{Buckets, Feat, State};
use crate::table::{EntityRef, Shard};
use crate::value::{add_counter, plain_mut, remove_feat, set_gauge};
use std::sync::atomic::Ordering;
use vx_proto::{EventView, Kind};

/// A record's place in the log: what the tables order by and stamp changes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPos {
    /// The record's LSN: records apply in LSN order.
    pub lsn: u64,
    /// The server's clock when the record was appended (`ttl`, future events, a PUT's `as_of`).
    pub append_ms: i64,
}

/// Which parts of a record to apply during recovery: records a shard's snapshot covers are
/// skipped, except for declarations being recomputed (`redo`, by declaration index).
pub struct Replay<'a> {
    /// Per shard: the last LSN its snapshot covers.
    pub covered: &'a [u64],
    /// Per declaration: whether it is recomputed from the log.
    pub redo: &'a [bool],
}

/// What applying a direct write found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DirectApplied {
    pub set: u64,
    /// Of `set`, the features the entity did not have (Redis's `HSET` answer).
    pub added: u64,
    pub deleted: u64,
    /// The entity (or the named feature) existed before a delete.
    pub found: bool,
    /// An increment's outcome (`crate::incr`); `None` for every other change.
    pub incremented: Option<Incremented>,
}

/// The sum of what several changes did (`found`: any of them found its target; an
/// increment is one change of one entity, so at most one of them has an outcome).
impl std::ops::AddAssign for DirectApplied {
    fn add_assign(&mut self, o: DirectApplied) {
        self.set += o.set;
        self.added += o.added;
        self.deleted += o.deleted;
        self.found |= o.found;
        self.incremented = self.incremented.or(o.incremented);
    }
}

/// A record the tables refused: they no longer follow the log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "the record at LSN {lsn} is older than LSN {applied}, which shard {shard} applied already: the feature tables would leave log order"
    )]
    OutOfOrder { lsn: u64, shard: u32, applied: u64 },
    /// A reset of a shard the tables do not have.
    #[error("the record at LSN {lsn} resets shard {shard}, but the tables have {shards} shards")]
    NoShard { lsn: u64, shard: u32, shards: u32 },
    /// Only the test fault hook (`Features::fail_next_apply`, feature `testing`) makes it.
    #[error("the record at LSN {lsn}: apply failure injected by a test")]
    Injected { lsn: u64 },
}

/// The events of one record: applied one at a time in record order ([`RecordEvents::apply`]),
/// or all at once, shard by shard ([`RecordEvents::apply_all`]).
pub struct RecordEvents<'a> {
    pub(crate) features: &'a Features,
    pub(crate) at: LogPos,
    pub(crate) replay: Option<&'a Replay<'a>>,
    prev_ty: &'a str,
    decls: &'a [u32],
    /// The look-ahead's own look-up of the type's declarations.
    ahead_ty: &'a str,
    /// Declarations over `ahead_ty` (0: its entities are their slots).
    ahead_decls: usize,
}

impl<'a> RecordEvents<'a> {
    /// Apply one event of the record (events without an entity change nothing).
    pub fn apply(&mut self, ev: &EventView<'a>) -> Result<(), ApplyError> {
        let Some(entity) = ev.entity else {
            return Ok(());
        };
        let decls = self.decls_of(ev.ty);
        self.features
            .apply_event(entity, ev, decls, self.at, self.replay)
    }

    /// The declarations over events of type `ty` (runs are mostly of one type: looked up on
    /// a change).
    pub(crate) fn decls_of(&mut self, ty: &'a str) -> &'a [u32] {
        if ty != self.prev_ty {
            self.prev_ty = ty;
            self.decls = self.features.decls.of_type(ty);
        }
        self.decls
    }

    /// How many declarations there are over events of type `ty`, for the look-ahead (its own
    /// look-up: it runs ahead of the apply, over other types).
    pub(crate) fn ahead_decls(&mut self, ty: &'a str) -> usize {
        if ty != self.ahead_ty {
            self.ahead_ty = ty;
            self.ahead_decls = self.features.decls.of_type(ty).len();
        }
        self.ahead_decls
    }
}

impl Features {
    /// Start applying an events record at `at`; `replay` is set during recovery only.
    pub fn events<'a>(
        &'a self,
        at: LogPos,
        replay: Option<&'a Replay<'a>>,
    ) -> Result<RecordEvents<'a>, ApplyError> {
        self.injected_fault(at)?;
        Ok(RecordEvents {
            features: self,
            at,
            replay,
            prev_ty: "",
            decls: &[],
            ahead_ty: "",
            ahead_decls: 0,
        })
    }

    /// Apply a feature put (`None` values delete); `replay` is set during recovery only.
    pub fn put(
        &self,
        at: LogPos,
        entity: &str,
        set: &[(&str, Option<FeatureValue>)],
        replay: Option<&Replay<'_>>,
    ) -> Result<DirectApplied, ApplyError> {
        self.injected_fault(at)?;
        let er = EntityRef::new(entity);
        // PUTs never touch declared aggregates (refused before they are written).
        if self.redo_only(er, at.lsn, replay) {
            return Ok(DirectApplied::default());
        }
        self.change(er, |sh| self.put_to(sh, er, set, at))
    }

    /// Apply a feature delete's targets of one entity (each one feature, or `None` for the
    /// whole entity), in order, under one lock of its shard: a read sees all of them done or
    /// none. What it did is summed (`found`: any target existed).
    pub fn delete(
        &self,
        at: LogPos,
        entity: &str,
        names: &[Option<&str>],
        replay: Option<&Replay<'_>>,
    ) -> Result<DirectApplied, ApplyError> {
        self.injected_fault(at)?;
        let er = EntityRef::new(entity);
        let redo_only = self.redo_only(er, at.lsn, replay);
        self.change(er, |sh| {
            let mut sum = DirectApplied::default();
            for &name in names {
                sum += self.delete_from(sh, er, name, at.lsn, replay, redo_only)?;
            }
            Ok(sum)
        })
    }

    /// Empty shard `shard` (a reset record at `at`): every entity of it is forgotten, as if
    /// no record had touched it. During recovery, a shard whose snapshot covers the reset
    /// holds what came after it already; only the declarations being recomputed start over
    /// here, since the records before the reset fed them too.
    pub fn reset_shard(
        &self,
        at: LogPos,
        shard: u32,
        replay: Option<&Replay<'_>>,
    ) -> Result<(), ApplyError> {
        self.injected_fault(at)?;
        let Some(lock) = self.shards.get(shard as usize) else {
            return Err(ApplyError::NoShard {
                lsn: at.lsn,
                shard,
                shards: self.nshards,
            });
        };
        let covered = replay
            .and_then(|r| r.covered.get(shard as usize))
            .is_some_and(|&c| at.lsn <= c);
        let mut g = lock.write();
        let before = g.counts();
        if covered {
            let redo = replay.map_or(&[][..], |r| r.redo);
            let redone = |id: u32| {
                self.decls
                    .decl_of(id)
                    .is_some_and(|d| redo.get(d) == Some(&true))
            };
            g.entities
                .for_each_mut(|e| e.feats.retain(|f| !redone(f.name)));
            g.recount();
        } else {
            if at.lsn < g.lsn {
                return Err(ApplyError::OutOfOrder {
                    lsn: at.lsn,
                    shard,
                    applied: g.lsn,
                });
            }
            *g = self.empty_shard();
            g.lsn = at.lsn;
        }
        let after = g.counts();
        drop(g);
        self.add_counts(after, before);
        Ok(())
    }

    /// Move entity `er`'s shard to the record at `lsn`. Records apply in log order: one
    /// before what the shard holds means the caller lost its place (records of one LSN apply
    /// to a shard once per event, hence `<`).
    pub(crate) fn advance(
        &self,
        er: EntityRef<'_>,
        sh: &mut Shard,
        lsn: u64,
    ) -> Result<(), ApplyError> {
        if lsn < sh.lsn {
            return Err(ApplyError::OutOfOrder {
                lsn,
                shard: er.shard(self.nshards),
                applied: sh.lsn,
            });
        }
        sh.lsn = lsn;
        Ok(())
    }

    /// Whether only redone declarations apply to entity `e` for a record at `lsn`: during
    /// recovery, when its shard's snapshot covers the record.
    pub(crate) fn redo_only(
        &self,
        e: EntityRef<'_>,
        lsn: u64,
        replay: Option<&Replay<'_>>,
    ) -> bool {
        let s = e.shard(self.nshards) as usize;
        replay
            .and_then(|r| r.covered.get(s))
            .is_some_and(|&c| lsn <= c)
    }

    fn apply_event(
        &self,
        entity: &str,
        ev: &EventView<'_>,
        decls: &[u32],
        at: LogPos,
        replay: Option<&Replay<'_>>,
    ) -> Result<(), ApplyError> {
        let er = EntityRef::new(entity);
        let Some(redo) = self.redo_of(er, decls, at, replay) else {
            return Ok(());
        };
        self.change(er, |sh| self.apply_event_to(sh, er, ev, decls, at, redo))
    }

    /// What of an event of entity `er` at `at`, with declarations `decls`, to apply: `None`
    /// nothing (recovery, its shard's snapshot covers the record and none of `decls` is
    /// redone), `Some(Some(redo))` only the redone declarations, `Some(None)` all of it.
    pub(crate) fn redo_of<'r>(
        &self,
        er: EntityRef<'_>,
        decls: &[u32],
        at: LogPos,
        replay: Option<&Replay<'r>>,
    ) -> Option<Option<&'r [bool]>> {
        let redo = replay
            .filter(|_| self.redo_only(er, at.lsn, replay))
            .map(|r| r.redo);
        if let Some(redo) = redo
            && !decls.iter().any(|&d| redo.get(d as usize) == Some(&true))
        {
            return None;
        }
        Some(redo)
    }

    pub(crate) fn apply_event_to(
        &self,
        sh: &mut Shard,
        er: EntityRef<'_>,
        ev: &EventView<'_>,
        decls: &[u32],
        at: LogPos,
        redo: Option<&[bool]>,
    ) -> Result<(), ApplyError> {
        let append_ms = at.append_ms;
        self.injected_fault_in(er.shard(self.nshards), at)?;
        if redo.is_none() {
            self.advance(er, sh, at.lsn)?;
        }
        let (entities, names, bytes) = sh.parts();
        let future = ev.ts > append_ms.saturating_add(MAX_FUTURE_MS);
        let mut ent = if redo.is_some() {
            // Recomputing a declaration over records the snapshot covers: only entities that
            // still exist are touched (a later delete removed the others).
            match entities.get_mut(er, bytes) {
                Some(e) => e,
                None => return Ok(()),
            }
        } else {
            let mut e = entities.get_or_insert(er, bytes);
            e.as_of = e.as_of.max(ev.ts);
            if !future {
                e.wm = e.wm.max(ev.ts);
            }
            let events = e.events().unwrap_or(0).saturating_add(1);
            e.set_events(Some(events));
            let last = e.last_ts().map_or(ev.ts, |t| t.max(ev.ts));
            e.set_last_ts(Some(last));
            // Counters and gauges, unless a declaration owns the name.
            if let (Kind::Counter | Kind::Gauge, Some(value)) = (ev.kind, ev.value)
                && !self.decls.is_declared(ev.ty)
            {
                let id = names.id(ev.ty).unwrap_or(u32::MAX);
                let st = plain_mut(&mut e, names, id, ev.ty, append_ms);
                if ev.kind == Kind::Counter {
                    add_counter(st, value, ev.ts);
                } else {
                    set_gauge(st, value, ev.ts);
                }
            }
            e
        };
        for &d in decls {
            if redo.is_some_and(|r| r.get(d as usize) != Some(&true)) {
                continue;
            }
            let Some(decl) = self.decls.list.get(d as usize) else {
                continue;
            };
            let width = self.decls.widths.get(d as usize).copied().flatten();
            if width.is_some() && future {
                self.counts.future.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let id = Decls::id(d);
            let pos = match ent.feats.iter().position(|f| f.name == id) {
                Some(p) => p,
                None => {
                    let st = match decl.agg {
                        Agg::Last => State::Plain {
                            v: FeatureValue::Int(0),
                            ts: i64::MIN,
                        },
                        Agg::Distinct => State::Hll {
                            head: i64::MIN,
                            regs: hll::empty(),
                        },
                        _ => State::Win(Buckets::new()),
                    };
                    ent.feats.push(Feat {
                        name: id,
                        updated_ms: append_ms,
                        st,
                    });
                    ent.feats.len() - 1
                }
            };
            let Some(f) = ent.feats.get_mut(pos) else {
                continue;
            };
            let applied = crate::window::aggregate(decl, width, &mut f.st, ev);
            match applied {
                Some(true) => f.updated_ms = append_ms,
                Some(false) => {
                    self.counts.late.fetch_add(1, Ordering::Relaxed);
                }
                None => {}
            }
        }
        Ok(())
    }

    fn put_to(
        &self,
        sh: &mut Shard,
        er: EntityRef<'_>,
        set: &[(&str, Option<FeatureValue>)],
        at: LogPos,
    ) -> Result<DirectApplied, ApplyError> {
        self.injected_fault_in(er.shard(self.nshards), at)?;
        self.advance(er, sh, at.lsn)?;
        let append_ms = at.append_ms;
        let mut out = DirectApplied::default();
        let (entities, names, bytes) = sh.parts();
        out.found = entities.contains_key(er);
        if set.iter().all(|(_, v)| v.is_none()) && !out.found {
            // Only deletes of an unknown entity: nothing to create.
            return Ok(out);
        }
        let mut e = entities.get_or_insert(er, bytes);
        e.as_of = e.as_of.max(append_ms);
        for (name, v) in set {
            if self.decls.is_declared(name) {
                continue;
            }
            if let Some(b) = e.builtin(name) {
                // The built-ins are integers (the HTTP layer refuses anything else).
                match v {
                    None => {
                        out.deleted += u64::from(b.is_some());
                        e.set_builtin(name, None);
                    }
                    Some(FeatureValue::Int(i)) => {
                        out.added += u64::from(b.is_none());
                        e.set_builtin(name, Some(*i));
                        out.set += 1;
                    }
                    Some(_) => {}
                }
                continue;
            }
            match v {
                None => {
                    if let Some(id) = names.id(name)
                        && remove_feat(&mut e, names, id)
                    {
                        out.deleted += 1;
                    }
                }
                Some(v) => {
                    let id = names.id(name).unwrap_or(u32::MAX);
                    let had = id != u32::MAX && e.feats.iter().any(|f| f.name == id);
                    out.added += u64::from(!had);
                    let st = plain_mut(&mut e, names, id, name, append_ms);
                    let ts = match st {
                        State::Plain { ts, .. } => *ts,
                        _ => i64::MIN,
                    };
                    *st = State::Plain { v: v.clone(), ts };
                    out.set += 1;
                }
            }
        }
        Ok(out)
    }

    fn delete_from(
        &self,
        sh: &mut Shard,
        er: EntityRef<'_>,
        name: Option<&str>,
        lsn: u64,
        replay: Option<&Replay<'_>>,
        redo_only: bool,
    ) -> Result<DirectApplied, ApplyError> {
        if !redo_only {
            self.advance(er, sh, lsn)?;
        }
        let mut out = DirectApplied::default();
        let (entities, names, bytes) = sh.parts();
        let redo = |id: u32| {
            self.decls
                .decl_of(id)
                .is_some_and(|d| replay.is_some_and(|r| r.redo.get(d) == Some(&true)))
        };
        if name.is_none() && !redo_only {
            if let Some((e, freed)) = entities.remove(er) {
                out.found = true;
                out.deleted = e.feats.len() as u64;
                *bytes = bytes.saturating_sub(freed);
                for f in e.feats {
                    names.release(f.name);
                }
            }
            return Ok(out);
        }
        let Some(mut e) = entities.get_mut(er, bytes) else {
            return Ok(out);
        };
        match name {
            None => {
                // Recomputing: the delete resets the redone declarations of the entity.
                e.feats.retain(|f| !redo(f.name));
            }
            Some(n) => {
                if !redo_only && let Some(b) = e.builtin(n) {
                    out.found = b.is_some();
                    out.deleted = u64::from(b.is_some());
                    e.set_builtin(n, None);
                    return Ok(out);
                }
                let Some(id) = names.id(n) else {
                    return Ok(out);
                };
                if redo_only && !redo(id) {
                    return Ok(out);
                }
                if remove_feat(&mut e, names, id) {
                    out.found = true;
                    out.deleted = 1;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::decl::decl;
    use vx_proto::Num;

    fn at(lsn: u64) -> LogPos {
        LogPos {
            lsn,
            append_ms: 1_000,
        }
    }

    fn hit<'a>(entity: &'a str, value: i64) -> EventView<'a> {
        EventView {
            stream: "s",
            entity: Some(entity),
            ty: "hit",
            ts: 500,
            kind: Kind::Counter,
            value: Some(Num::Int(value)),
            id: None,
            data: None,
        }
    }

    /// A record from before what a shard applied is refused, not applied twice: the caller
    /// lost its place in the log. Events of one record touch an entity repeatedly.
    #[test]
    fn records_apply_in_log_order_only() {
        let f = Features::new(1, vec![decl("total", Agg::Sum, None)], u64::MAX);
        let mut events = f.events(at(5), None).unwrap();
        events.apply(&hit("p", 1)).unwrap();
        events.apply(&hit("p", 2)).unwrap();
        let set = [("x", Some(FeatureValue::Int(1)))];
        assert_eq!(
            f.put(at(4), "p", &set, None),
            Err(ApplyError::OutOfOrder {
                lsn: 4,
                shard: 0,
                applied: 5
            })
        );
        let mut events = f.events(at(3), None).unwrap();
        assert!(matches!(
            events.apply(&hit("q", 1)),
            Err(ApplyError::OutOfOrder { lsn: 3, .. })
        ));
        assert!(matches!(
            f.delete(at(2), "p", &[None], None),
            Err(ApplyError::OutOfOrder { lsn: 2, .. })
        ));
        assert!(f.exists("p", Some("total")) && !f.exists("p", Some("x")));
        let got = f.delete(at(6), "p", &[Some("hit")], None).unwrap();
        assert_eq!((got.found, got.deleted), (true, 1));
    }

    /// During recovery, records the shard's snapshot covers only redo the recomputed
    /// declarations, whatever their order relative to the shard's LSN.
    #[test]
    fn covered_records_only_redo_declarations() {
        let f = Features::new(1, vec![decl("total", Agg::Sum, None)], u64::MAX);
        f.events(at(9), None).unwrap().apply(&hit("p", 1)).unwrap();
        let replay = Replay {
            covered: &[9],
            redo: &[true],
        };
        let mut events = f.events(at(3), Some(&replay)).unwrap();
        events.apply(&hit("p", 10)).unwrap();
        let mut total = None;
        f.read(
            "p",
            Some(&["total", "events"]),
            crate::ReadAt { now_ms: 0 },
            &mut |n, v| {
                if let (true, crate::Reading::Num(x)) = (n == "total", v) {
                    total = Some(x);
                }
            },
        )
        .unwrap();
        assert_eq!(total, Some(11.0));
    }

    /// A reset empties one shard (entities, bytes, counts) and leaves the others; records
    /// before what the shard applied are refused, a shard that does not exist too.
    #[test]
    fn reset_empties_one_shard_only() {
        let f = Features::new(4, vec![decl("total", Agg::Sum, None)], u64::MAX);
        let names: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
        let mut events = f.events(at(5), None).unwrap();
        for n in &names {
            events.apply(&hit(n, 1)).unwrap();
        }
        let target = f.shard_of(&names[0]);
        let (kept, gone): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| f.shard_of(n) != target);
        let bytes_kept: u64 = (0..4)
            .filter(|&s| s != target)
            .map(|s| f.shards[s as usize].read().bytes)
            .sum();
        f.reset_shard(at(6), target, None).unwrap();
        assert!(gone.iter().all(|n| !f.exists(n, None)));
        assert!(kept.iter().all(|n| f.exists(n, Some("total"))));
        assert_eq!(f.stats().entities, kept.len() as u64);
        assert_eq!(f.used_bytes(), bytes_kept);
        assert!(matches!(
            f.reset_shard(at(4), target, None),
            Err(ApplyError::OutOfOrder { lsn: 4, .. })
        ));
        assert!(matches!(
            f.reset_shard(at(7), 4, None),
            Err(ApplyError::NoShard { shard: 4, .. })
        ));
        // Written again after the reset, an entity starts from nothing.
        f.events(at(8), None)
            .unwrap()
            .apply(&hit(gone[0], 3))
            .unwrap();
        let mut total = None;
        f.read(
            gone[0],
            Some(&["total"]),
            crate::ReadAt { now_ms: 0 },
            &mut |_, v| {
                if let crate::Reading::Num(x) = v {
                    total = Some(x);
                }
            },
        )
        .unwrap();
        assert_eq!(total, Some(3.0));
    }

    /// During recovery, a reset the shard's snapshot covers keeps what the snapshot holds
    /// and restarts only the recomputed declarations.
    #[test]
    fn a_covered_reset_restarts_only_redone_declarations() {
        let f = Features::new(1, vec![decl("total", Agg::Sum, None)], u64::MAX);
        f.events(at(9), None).unwrap().apply(&hit("p", 1)).unwrap();
        let replay = Replay {
            covered: &[9],
            redo: &[true],
        };
        f.events(at(3), Some(&replay))
            .unwrap()
            .apply(&hit("p", 10))
            .unwrap();
        f.reset_shard(at(4), 0, Some(&replay)).unwrap();
        // The records after the reset are redone too, the one at 9 included.
        for (lsn, v) in [(5, 100), (9, 1)] {
            f.events(at(lsn), Some(&replay))
                .unwrap()
                .apply(&hit("p", v))
                .unwrap();
        }
        let mut total = None;
        f.read(
            "p",
            Some(&["total"]),
            crate::ReadAt { now_ms: 0 },
            &mut |_, v| {
                if let crate::Reading::Num(x) = v {
                    total = Some(x);
                }
            },
        )
        .unwrap();
        assert_eq!(total, Some(101.0), "10 from before the reset is gone");
        assert!(f.exists("p", Some("hit")), "what the snapshot holds stays");
    }
}
