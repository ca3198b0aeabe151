//! The memory budget (`storage.max_feature_bytes`): the reservations the writer makes before
//! it writes a record, so that a write whose apply could take the tables past the budget is
//! refused (507) instead of logged and applied.
//!
//! The tables count their real memory (table.rs); a reservation is an upper bound of what
//! applying the record can add to it: new entities with their shard's table growth, new
//! features, and for every declared aggregate an event updates, that state's largest size.
//! The writer adds up its group's reservations and releases them once the group is applied
//! ([`Features::release`]): a group may be planned while the one before it is still being
//! applied, and each releases only its own.
//!
//! Two kinds of bound: [`Features::reserve_bound`] looks at no entity (it holds however far
//! behind the tables are), the exact ones ([`Features::reserve_events`] past the bound,
//! [`Features::reserve_put`]) look at the entities the record touches, so the tables must
//! have applied every record written before it: the writer waits for that first.

use crate::Features;
use crate::cost::{alloc_size, state_max_bytes};
use crate::decl::{BUCKETS, Decls, FeatureValue};
use crate::hll::{HLL_LEVELS, HLL_M};
use crate::names::NAME_COST;
use crate::rec::{FEAT_MAX, HEAD_MAX, HELD_COST, INLINE, Shell, THIN_HEADER, held};
use crate::state::State;
use crate::table::{EntityMap, EntityRef, SLOT_COST};
use hashbrown::HashMap;
use std::sync::atomic::Ordering;
use vx_proto::{Batch, Kind};

/// The most one more event can add to an aggregate's state that `before` earlier events of
/// the same batch may have grown already: a window's buckets past their allocation (an event
/// adds at most one bucket, and the buckets grow by doubling, at most [`BUCKETS`]); a
/// `distinct` until it is a dense sketch (all time: the 64 bytes of its sketch; until then,
/// an exact set at its largest). Nothing for a state that has room.
fn update_growth(st: &State, before: usize, windowed: bool) -> u64 {
    match st {
        State::Win(b) => {
            let need = (b.len() + before + 1).min(BUCKETS as usize + 1);
            let room = if b.spilled() {
                b.capacity()
            } else {
                b.inline_size()
            };
            if need <= room {
                0
            } else {
                alloc_size(need.next_power_of_two() * std::mem::size_of::<crate::state::Bucket>())
            }
        }
        // All time: an exact set grows by a value, up to its 16, then the 64-byte sketch.
        // Reserved at its largest by the batch's first event that updates it.
        State::Hll { regs, .. } if !windowed && (regs.len() == HLL_M || before > 0) => 0,
        State::Hll { .. } if !windowed => state_max_bytes(false),
        State::Hll { regs, .. } if regs.capacity() >= HLL_M * HLL_LEVELS => 0,
        State::Hll { .. } => alloc_size(HLL_M * HLL_LEVELS),
        State::Plain { .. } => 0,
    }
}

/// What a plain feature named `name` holding `v` adds besides its record's encoding: its
/// name's entry if the name is new to the shard, and a string's bytes.
fn plain_cost(name_len: usize, v: Option<&FeatureValue>) -> u64 {
    let s = match v {
        Some(FeatureValue::Str(s)) => alloc_size(s.len()),
        _ => 0,
    };
    NAME_COST + 2 * name_len as u64 + s
}

/// A key over 22 bytes is allocated outside the slot.
fn key_cost(key: &str) -> u64 {
    if key.len() > 22 {
        alloc_size(key.len())
    } else {
        0
    }
}

impl Features {
    /// Reserve room for what applying `batch` can add, with a bound that reads no entity:
    /// the bytes reserved, or `None` (nothing reserved) if that bound does not fit in the
    /// budget; then only [`Features::reserve_events`] can tell.
    pub fn reserve_bound(&self, batch: &Batch) -> Option<u64> {
        let used = self.used_bytes() + self.counts.pending.load(Ordering::Relaxed);
        let bound = self.events_bound(batch);
        if used.saturating_add(bound) <= self.max_bytes {
            self.counts.pending.fetch_add(bound, Ordering::Relaxed);
            return Some(bound);
        }
        None
    }

    /// Reserve room for what applying `batch` can add: the bytes reserved, or `None`
    /// (nothing reserved) past the budget. Past [`Features::reserve_bound`] it looks at the
    /// entities the batch touches: every record written before must have been applied.
    pub fn reserve_events(&self, batch: &Batch) -> Option<u64> {
        if let Some(n) = self.reserve_bound(batch) {
            return Some(n);
        }
        let used = self.used_bytes() + self.counts.pending.load(Ordering::Relaxed);
        let cost = self.growth(batch);
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return None;
        }
        self.counts.pending.fetch_add(cost, Ordering::Relaxed);
        Some(cost)
    }

    /// The cheap bound of what applying `batch` can add, whatever the tables hold.
    fn events_bound(&self, batch: &Batch) -> u64 {
        let decls = self.decls.max_per_type as u64;
        // Each event may create its entity (a slot, its key), its counter
        // (a feature and a name) and its declared aggregates, or grow each aggregate's state
        // by at most that state's largest size; and split one index segment (a full-size
        // segment; and per shard once, a doubling of its directory and segment list: at most
        // the largest step of any shard so far). Its record's encoding may leave the slot (an
        // encoding's times are differences from the newest one, so each may grow to its
        // longest: at most 16 times the encoding, and for the records with a side
        // allocation, bounded by `spilled`, which also bounds the rounding of a longer list
        // of states).
        let per_event = 3 * (SLOT_COST + 1)
            + alloc_size(vx_proto::rules::MAX_ENTITY_LEN)
            + alloc_size((THIN_HEADER + HELD_COST) as usize)
            + alloc_size(16 * INLINE + HEAD_MAX + (1 + decls as usize) * FEAT_MAX)
            + (1 + decls) * (2 * HELD_COST + NAME_COST + 2 * 256)
            + decls * state_max_bytes(true);
        let shards = (batch.len() as u64).min(u64::from(self.nshards));
        let splits = (batch.len() as u64).saturating_mul(crate::index::seg_bytes() + 64)
            + shards.saturating_mul(self.max_step_bytes() + 64);
        // Each shard given new entities may also open a chunk of its arena (at most a full
        // one, and the chunk list may grow). The largest step and the spilled bytes are read
        // before the records written ahead of this one are applied, as for the several
        // batches of one group: each batch is bounded as if it alone grew the tables.
        per_event
            .saturating_mul(batch.len() as u64)
            .saturating_add(splits)
            .saturating_add(16 * self.spilled_bytes())
            .saturating_add(shards * (EntityMap::MAX_CHUNK_BYTES + 1024))
    }

    /// What applying the batch's events can add: new entities (with their shards' table
    /// growth), new features, and the growth of declared aggregates' states.
    fn growth(&self, batch: &Batch) -> u64 {
        // Per shard and index segment: entities new to it in this batch (to size its growth
        // once), and one of them (whose tag finds the segment).
        let mut new_entities: HashMap<(u32, usize), (EntityRef<'_>, hashbrown::HashSet<&str>)> =
            HashMap::new();
        // Per entity: features (and held states) created in this batch, and what is reserved
        // for its record's side allocation so far (its bound follows the count).
        let mut added: HashMap<&str, (usize, usize, u64)> = HashMap::new();
        // Events of this batch per existing aggregate state, each of which may add a bucket.
        let mut updates: HashMap<(&str, u32), usize> = HashMap::new();
        let mut cost = 0u64;
        for ev in batch.iter() {
            let Some(entity) = ev.entity else { continue };
            let decls = self.decls.of_type(ev.ty);
            let typed =
                matches!(ev.kind, Kind::Counter | Kind::Gauge) && !self.decls.is_declared(ev.ty);
            let er = EntityRef::new(entity);
            let shard = er.shard(self.nshards);
            let g = self.shard(er).read();
            let ent = g.entities.get(er);
            if ent.is_none()
                && new_entities
                    .entry((shard, g.entities.seg_of(er)))
                    .or_insert_with(|| (er, hashbrown::HashSet::new()))
                    .1
                    .insert(entity)
            {
                cost += key_cost(entity);
            }
            let find = |id: Option<u32>| {
                let id = id?;
                ent.as_ref()?.feats.iter().find(|f| f.name == id)
            };
            let shell = ent.as_ref().map_or(Shell::default(), |e| e.shell);
            let base = ent.as_ref().map_or(0, |e| e.feats.len());
            let base_held = ent
                .as_ref()
                .map_or(0, |e| e.feats.iter().filter(|f| held(&f.st)).count());
            let (n, h, reserved) = added.entry(entity).or_insert((0, 0, shell.bytes));
            if typed && find(g.names.id(ev.ty)).is_none() {
                cost += plain_cost(ev.ty.len(), None);
                *n += 1;
            }
            for &d in decls {
                let id = Decls::id(d);
                let seen = updates.entry((entity, id)).or_insert(0);
                match find(Some(id)) {
                    // Created by this batch: at its largest, once.
                    None if *seen == 0 => {
                        cost += state_max_bytes(true);
                        *n += 1;
                        *h += 1;
                    }
                    None => {}
                    Some(f) => {
                        let windowed = self
                            .decls
                            .widths
                            .get(d as usize)
                            .copied()
                            .flatten()
                            .is_some();
                        cost += update_growth(&f.st, *seen, windowed);
                    }
                }
                *seen += 1;
            }
            let bound = shell.bound(base + *n, base_held + *h);
            cost += bound.saturating_sub(*reserved);
            *reserved = (*reserved).max(bound);
        }
        let mut per_shard: HashMap<u32, usize> = HashMap::new();
        for ((shard, _), (er, names)) in new_entities {
            if let Some(lock) = self.shards.get(shard as usize) {
                cost += lock.read().entities.index_growth(er, names.len());
                *per_shard.entry(shard).or_insert(0) += names.len();
            }
        }
        for (shard, n) in per_shard {
            if let Some(lock) = self.shards.get(shard as usize) {
                cost += lock.read().entities.arena_growth(n);
            }
        }
        cost
    }

    /// Reserve room for a PUT: the bytes reserved, or `None` past the budget. It looks at
    /// the entity: every record written before must have been applied.
    pub fn reserve_put(&self, entity: &str, set: &[(String, Option<FeatureValue>)]) -> Option<u64> {
        let used = self.used_bytes() + self.counts.pending.load(Ordering::Relaxed);
        let er = EntityRef::new(entity);
        let g = self.shard(er).read();
        let ent = g.entities.get(er);
        let mut cost = 0;
        if ent.is_none() {
            cost += g.entities.index_growth(er, 1) + g.entities.arena_growth(1) + key_cost(entity);
        }
        let mut feats = ent.as_ref().map_or(0, |e| e.feats.len());
        let mut states = ent
            .as_ref()
            .map_or(0, |e| e.feats.iter().filter(|f| held(&f.st)).count());
        for (name, v) in set {
            let Some(v) = v else { continue };
            let exists = ent.as_ref().is_some_and(|e| {
                g.names
                    .id(name)
                    .is_some_and(|id| e.feats.iter().any(|f| f.name == id))
            });
            if !exists {
                cost += plain_cost(name.len(), Some(v));
                feats += 1;
            } else if let FeatureValue::Str(s) = v {
                cost += alloc_size(s.len());
            }
            if matches!(v, FeatureValue::Str(_)) {
                states += 1;
            }
        }
        let shell = ent.as_ref().map_or(Shell::default(), |e| e.shell);
        cost += shell.bound(feats, states).saturating_sub(shell.bytes);
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return None;
        }
        self.counts.pending.fetch_add(cost, Ordering::Relaxed);
        Some(cost)
    }

    /// A group's reservations (their sum) are spent: it is applied, or abandoned.
    pub fn release(&self, bytes: u64) {
        // Never below zero, whatever a caller releases.
        let _ = self
            .counts
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(p.saturating_sub(bytes))
            });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::decl::{Agg, FeatureValue, decl};
    use crate::{Features, LogPos};
    use proptest::prelude::*;
    use vx_proto::{Batch, EventView, Kind, Num};

    proptest! {
        /// A PUT the budget lets in never takes the tables past it: new entities, new names,
        /// features past the one a slot holds, strings.
        #[test]
        fn an_admitted_put_stays_within_the_budget(
            puts in prop::collection::vec(
                (0u16..500, prop::collection::vec((0u8..12, 0usize..300), 1..6)), 1..200),
            max in 5_000u64..200_000,
        ) {
            let f = Features::new(4, vec![], max);
            for (lsn, (entity, set)) in puts.iter().enumerate() {
                let entity = format!("entity-{entity}");
                let owned: Vec<(String, Option<FeatureValue>)> = set
                    .iter()
                    .map(|(n, len)| (format!("f{n}"), Some(FeatureValue::Str("x".repeat(*len).into()))))
                    .collect();
                if let Some(n) = f.reserve_put(&entity, &owned) {
                    let set: Vec<(&str, Option<FeatureValue>)> =
                        owned.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                    let at = LogPos { lsn: lsn as u64 + 1, append_ms: 1 };
                    f.put(at, &entity, &set, None).unwrap();
                    prop_assert!(f.used_bytes() <= max, "{} > {max}", f.used_bytes());
                    f.release(n);
                }
            }
        }

        /// A batch the budget lets in never takes the tables past it, whatever it creates or
        /// updates: the reservation is an upper bound of what the apply adds.
        #[test]
        fn an_admitted_batch_stays_within_the_budget(
            batches in prop::collection::vec(
                prop::collection::vec((0u16..3000, 0i64..10_000_000, 0u8..2), 1..200), 1..40),
            max in 20_000u64..400_000,
        ) {
            let f = Features::new(
                4,
                vec![
                    decl("n_5m", Agg::Count, Some(300)),
                    decl("v_1h", Agg::Sum, Some(3600)),
                    decl("d_1d", Agg::Distinct, Some(86_400)),
                ],
                max,
            );
            for (lsn, events) in batches.iter().enumerate() {
                let names: Vec<String> = events.iter().map(|(e, ..)| format!("e{e}")).collect();
                let mut batch = Batch::new();
                for ((_, ts, ty), name) in events.iter().zip(&names) {
                    batch
                        .push(&EventView {
                            stream: "s",
                            entity: Some(name),
                            ty: if *ty == 0 { "hit" } else { "other" },
                            ts: *ts,
                            kind: Kind::Counter,
                            value: Some(Num::Int(1)),
                            id: None,
                            data: None,
                        })
                        .unwrap();
                }
                if let Some(n) = f.reserve_events(&batch) {
                    let at = LogPos { lsn: lsn as u64 + 1, append_ms: 10_000_000 };
                    let mut apply = f.events(at, None).unwrap();
                    for ev in batch.iter() {
                        apply.apply(&ev).unwrap();
                    }
                    prop_assert!(f.used_bytes() <= max, "{} > {max}", f.used_bytes());
                    f.release(n);
                }
            }
        }
    }
}
