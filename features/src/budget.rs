//! The memory budget (`storage.max_feature_bytes`): what each part of the tables counts, and
//! the reservations the writer makes before it writes a record that would create entities or
//! features, so that a write past the budget is refused (507) instead of logged and applied.
//!
//! Windows and windowed sketches count at their largest from the start, so the budget,
//! checked when features are created, bounds the tables whatever later updates do.

use crate::Features;
use crate::decl::{Decls, FeatureValue};
use crate::hll::{HLL_LEVELS, HLL_M};
use crate::names::NAME_COST;
use crate::table::{ENTITY_COST, EntityRef, FEAT_COST};
use hashbrown::HashSet;
use std::sync::atomic::Ordering;
use vx_proto::{Batch, Kind};

/// The most a declared aggregate can count: its feature and a dense windowed sketch (more
/// than 60 buckets).
const WINDOW_MAX: u64 = FEAT_COST + (HLL_M * HLL_LEVELS) as u64;

impl Features {
    /// Reserve room for what `batch` would create; false (nothing reserved) past the budget.
    pub fn reserve_events(&self, batch: &Batch) -> bool {
        let used = self.used_bytes() + self.pending.load(Ordering::Relaxed);
        // Cheap bound first: every event creating its entity and every feature it can touch.
        let per_event = ENTITY_COST
            + vx_proto::rules::MAX_ENTITY_LEN as u64
            + (3 + self.decls.max_per_type as u64) * (FEAT_COST + NAME_COST + 256)
            + (self.decls.max_per_type as u64) * (HLL_M * HLL_LEVELS) as u64;
        let bound = per_event.saturating_mul(batch.len() as u64);
        if used.saturating_add(bound) <= self.max_bytes {
            self.pending.fetch_add(bound, Ordering::Relaxed);
            return true;
        }
        let cost = self.creation_cost(batch);
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return false;
        }
        self.pending.fetch_add(cost, Ordering::Relaxed);
        true
    }

    /// What the batch's events would create: entities and features that do not exist yet.
    fn creation_cost(&self, batch: &Batch) -> u64 {
        let mut new_entities: HashSet<&str> = HashSet::new();
        let mut cost = 0u64;
        for ev in batch.iter() {
            let Some(entity) = ev.entity else { continue };
            let decls = self.decls.of_type(ev.ty);
            let typed = matches!(ev.kind, Kind::Counter | Kind::Gauge);
            let er = EntityRef::new(entity);
            let g = self.shard(er).read();
            match g.entities.get(er) {
                None => {
                    if new_entities.insert(entity) {
                        cost += ENTITY_COST + 2 * entity.len() as u64 + 2 * FEAT_COST;
                    }
                    cost += decls.len() as u64 * WINDOW_MAX;
                    if typed {
                        cost += FEAT_COST + NAME_COST + ev.ty.len() as u64;
                    }
                }
                Some(e) => {
                    if typed {
                        let has = g
                            .names
                            .id(ev.ty)
                            .is_some_and(|id| e.feats.iter().any(|f| f.name == id));
                        if !has {
                            cost += FEAT_COST + NAME_COST + ev.ty.len() as u64;
                        }
                    }
                    for &d in decls {
                        if !e.feats.iter().any(|f| f.name == Decls::id(d)) {
                            cost += WINDOW_MAX;
                        }
                    }
                }
            }
        }
        cost
    }

    /// Reserve room for a PUT; false past the budget.
    pub fn reserve_put(&self, entity: &str, set: &[(String, Option<FeatureValue>)]) -> bool {
        let used = self.used_bytes() + self.pending.load(Ordering::Relaxed);
        let er = EntityRef::new(entity);
        let g = self.shard(er).read();
        let ent = g.entities.get(er);
        let mut cost = if ent.is_none() {
            ENTITY_COST + 2 * entity.len() as u64
        } else {
            0
        };
        for (name, v) in set {
            let Some(v) = v else { continue };
            let exists = ent.is_some_and(|e| {
                g.names
                    .id(name)
                    .is_some_and(|id| e.feats.iter().any(|f| f.name == id))
            });
            let extra = match v {
                FeatureValue::Str(s) => s.len() as u64,
                _ => 0,
            };
            if !exists {
                cost += FEAT_COST + NAME_COST + 2 * name.len() as u64 + extra;
            }
        }
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return false;
        }
        self.pending.fetch_add(cost, Ordering::Relaxed);
        true
    }

    /// The group is applied (or abandoned): its reservations are spent.
    pub fn end_group(&self) {
        self.pending.store(0, Ordering::Relaxed);
    }
}
