//! A record's events applied shard by shard ([`RecordEvents::apply_all`]): storage's feed.rs
//! hands over all the events of a record at once, and they are applied in shard order, in
//! record order within each shard, each shard's write lock taken once for the record.
//!
//! Why: applied one at a time, an event took its shard's lock five times (four look-ahead
//! stages and the change), and each locked instruction waited for the stores before it, to
//! entities that had missed the cache. A profile of ingest with three windowed aggregates had
//! more of the apply's cycles on the lock words than on any table.
//!
//! What does not change: the events of one entity are all in one shard, so each entity still
//! sees its events in record order, and records still apply in log order, so the tables come
//! out the same (the model tests in storage check recovery against history). Shards are
//! independent: counts per shard, names per shard.
//!
//! The look-ahead ([`Ahead`]) runs [`STEP`] events at a time through the shards' locks already
//! taken: a shard is locked when the look-ahead first reaches one of its events, in ascending
//! shard order, and released once the apply has moved past it. So a few shards are locked at a
//! time, each for about as long as its events and the look-ahead's 32 take to apply (about ten
//! microseconds), and readers of other shards never wait. Locks are only ever taken in
//! ascending order and readers hold one at a time, so no wait can go round in a circle.

use crate::Features;
use crate::apply::{ApplyError, RecordEvents};
use crate::prefetch::{Ahead, Lines};
use crate::table::{EntityRef, Shard, ShardCounts};
use parking_lot::RwLockWriteGuard;
use std::collections::VecDeque;
use vx_proto::EventView;

/// Events are applied in steps of `STEP`; an event enters each stage of the look-ahead this
/// many steps before the step that applies it: far enough for each stage's loads to arrive
/// before the next stage reads them, near enough that what is loaded is still in the cache.
/// A step notes the lines of its stages, then asks for all of them at once ([`Lines`]).
const STEP: usize = 8;
const STAGES: [(usize, Ahead); 4] = [
    (4, Ahead::Index),
    (3, Ahead::Slot),
    (2, Ahead::Side),
    (1, Ahead::States),
];

/// The write locks taken for a record, in shard order, each with its shard's counts when it
/// was taken (the tables' counts follow once it is released).
struct Held<'a> {
    features: &'a Features,
    locks: VecDeque<(u32, RwLockWriteGuard<'a, Shard>, ShardCounts)>,
}

impl<'a> Held<'a> {
    /// Shard `s`, locked if it is past the last one locked (the caller locks in ascending
    /// order); `None` if it is neither held nor past them.
    fn shard(&mut self, s: u32) -> Option<&mut Shard> {
        if self.locks.back().is_none_or(|(last, ..)| *last < s) {
            let g = self.features.shards.get(s as usize)?.write();
            let counts = g.counts();
            self.locks.push_back((s, g, counts));
        }
        self.locks
            .iter_mut()
            .rev()
            .find(|(held, ..)| *held == s)
            .map(|(_, g, _)| &mut **g)
    }

    /// Release the shards before `s`: the apply is past them.
    fn release_before(&mut self, s: u32) {
        while self.locks.front().is_some_and(|(held, ..)| *held < s) {
            if let Some((_, g, before)) = self.locks.pop_front() {
                self.features.unlock_counted(g, before);
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        while let Some((_, g, before)) = self.locks.pop_front() {
            self.features.unlock_counted(g, before);
        }
    }
}

impl<'a> RecordEvents<'a> {
    /// Apply all the events of the record (`evs`, in record order): shard by shard, as the
    /// module says. On an error the tables no longer follow the log (the caller poisons the
    /// store): which of the record's other events were applied is then of no account.
    pub fn apply_all(&mut self, evs: &[EventView<'a>]) -> Result<(), ApplyError> {
        let f = self.features;
        let (order, _) = by_shard(
            evs.iter()
                .enumerate()
                .filter_map(|(i, ev)| {
                    let er = EntityRef::new(ev.entity?);
                    Some((er.shard(f.nshards), u32::try_from(i).ok()?, er))
                })
                .collect(),
            f.nshards as usize,
            |e| e.0 as usize,
        );
        self.apply_ordered(&order, evs)
    }

    /// Apply events already in shard order (record order within a shard), each with an
    /// entity whose [`crate::entity_hash`] is beside it in `hashes`: an apply thread's slice
    /// of a record ([`crate::parallel`]), cut by whoever cut the record. Applied as
    /// [`RecordEvents::apply_all`] applies them once it has sorted them.
    pub fn apply_sorted(
        &mut self,
        evs: &[EventView<'a>],
        hashes: &[u64],
    ) -> Result<(), ApplyError> {
        let f = self.features;
        let order: Vec<(u32, u32, EntityRef<'a>)> = evs
            .iter()
            .zip(hashes)
            .enumerate()
            .filter_map(|(i, (ev, &h))| {
                let er = EntityRef::hashed(ev.entity?, h);
                Some((er.shard(f.nshards), u32::try_from(i).ok()?, er))
            })
            .collect();
        debug_assert!(
            order.windows(2).all(|w| w[0].0 <= w[1].0),
            "not in shard order"
        );
        self.apply_ordered(&order, evs)
    }

    /// Apply `order` (shard, index in `evs`, entity), in shard order: the locks, the
    /// look-ahead and the changes, as the module says.
    fn apply_ordered(
        &mut self,
        order: &[(u32, u32, EntityRef<'a>)],
        evs: &[EventView<'a>],
    ) -> Result<(), ApplyError> {
        let f = self.features;
        let mut held = Held {
            features: f,
            locks: VecDeque::new(),
        };
        let mut lines = Lines::new();
        // Shards are locked in ascending order, so in the order of `order`: through the
        // farthest event the look-ahead reaches, before its stages run from far to near.
        let reach = (STAGES[0].0 + 1) * STEP;
        let mut locked = 0;
        for start in (0..order.len()).step_by(STEP) {
            let to = (start + reach).min(order.len());
            for &(s, ..) in order.get(locked..to).unwrap_or(&[]) {
                held.shard(s);
            }
            locked = locked.max(to);
            for (ahead, stage) in STAGES {
                let from = (start + ahead * STEP).min(order.len());
                let to = (from + STEP).min(order.len());
                for &(s, i, er) in order.get(from..to).unwrap_or(&[]) {
                    let Some(ev) = evs.get(i as usize) else {
                        continue;
                    };
                    let states = match stage {
                        Ahead::Index | Ahead::Slot => 0,
                        // An entity with only plain features is its slot.
                        Ahead::Side | Ahead::States => match self.ahead_decls(ev.ty) {
                            0 => continue,
                            n => n,
                        },
                    };
                    if let Some(sh) = held.shard(s) {
                        sh.prefetch(er, stage, states, &mut lines);
                    }
                }
            }
            lines.issue();
            let end = (start + STEP).min(order.len());
            for &(s, i, er) in order.get(start..end).unwrap_or(&[]) {
                let Some(ev) = evs.get(i as usize) else {
                    continue;
                };
                held.release_before(s);
                let decls = self.decls_of(ev.ty);
                let Some(redo) = f.redo_of(er, decls, self.at, self.replay) else {
                    continue;
                };
                let Some(sh) = held.shard(s) else {
                    continue;
                };
                sh.counted(|sh| f.apply_event_to(sh, er, ev, decls, self.at, redo))?;
            }
        }
        Ok(())
    }
}

/// `items` in shard order (`shard_of` each, below `shards`) and, within a shard, in the order
/// they come; with where each shard starts (`shards + 1` offsets, the last one the end). A
/// counting sort, one pass to count and one to place, where a comparison sort of a 1000-event
/// record took about 6% of the apply. A record's events here, and a record cut into the apply
/// threads' slices ([`crate::parallel::Cut`]).
pub(crate) fn by_shard<T: Copy>(
    items: Vec<T>,
    shards: usize,
    shard_of: impl Fn(&T) -> usize,
) -> (Vec<T>, Vec<u32>) {
    let mut starts = vec![0u32; shards + 1];
    for it in &items {
        if let Some(n) = starts.get_mut(shard_of(it)) {
            *n += 1;
        }
    }
    let mut sum = 0u32;
    for n in &mut starts {
        (*n, sum) = (sum, sum + *n);
    }
    let mut next = starts.clone();
    let mut out = items.clone();
    for it in items {
        if let Some(at) = next.get_mut(shard_of(&it))
            && let Some(slot) = out.get_mut(*at as usize)
        {
            *slot = it;
            *at += 1;
        }
    }
    (out, starts)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::decl::{Agg, decl};
    use crate::read::text_of;
    use crate::{Features, LogPos};
    use proptest::prelude::*;
    use vx_proto::{EventView, Kind, Num};

    fn tables() -> Features {
        Features::new(
            8,
            vec![
                decl("n_5m", Agg::Count, Some(300)),
                decl("v_1h", Agg::Sum, Some(3600)),
                decl("d_1d", Agg::Distinct, Some(86_400)),
                decl("last", Agg::Last, None),
            ],
            u64::MAX,
        )
    }

    fn dump(f: &Features, entities: usize) -> Vec<String> {
        (0..entities)
            .map(|e| text_of(f, &format!("e{e}")))
            .collect()
    }

    proptest! {
        /// Applied shard by shard, a record's events leave the tables exactly as applied one
        /// at a time in record order: every feature, the bytes counted, the entities and the
        /// late events. Records of up to a few hundred events over entities of every shard,
        /// some without an entity, several types, counters, gauges and plain events, late ones.
        #[test]
        fn shard_order_applies_as_record_order(
            records in prop::collection::vec(
                prop::collection::vec(
                    (prop::option::weighted(0.9, 0usize..300), 0u8..3, 0u8..3, 0i64..4_000_000, 0i64..100, 0u8..4),
                    0..300),
                1..6),
        ) {
            let (one, all) = (tables(), tables());
            let names: Vec<String> = (0..300).map(|e| format!("e{e}")).collect();
            let streams = ["s0", "s1", "s2", "s3"];
            for (lsn, rec) in records.iter().enumerate() {
                let evs: Vec<EventView<'_>> = rec
                    .iter()
                    .map(|&(e, ty, kind, ts, v, s)| EventView {
                        stream: streams[s as usize],
                        entity: e.map(|e| names[e].as_str()),
                        ty: ["hit", "other", "gauge"][ty as usize],
                        ts,
                        kind: [Kind::Counter, Kind::Gauge, Kind::Event][kind as usize],
                        value: (kind < 2).then_some(Num::Int(v)),
                        id: None,
                        data: None,
                    })
                    .collect();
                let at = LogPos { lsn: lsn as u64 + 1, append_ms: 4_000_000 };
                let mut a = one.events(at, None).unwrap();
                for ev in &evs {
                    a.apply(ev).unwrap();
                }
                all.events(at, None).unwrap().apply_all(&evs).unwrap();
            }
            prop_assert_eq!(dump(&all, 300), dump(&one, 300));
            prop_assert_eq!(all.stats(), one.stats());
        }
    }
}
