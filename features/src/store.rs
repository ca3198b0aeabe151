//! [`Features`]: the tables, sharded by entity (xxh3-64 of the entity mod shards, like
//! streams), each shard behind its own lock, with the counters metrics read.
//!
//! Only the writer thread changes them, through the apply interface ([`crate::apply`]); the
//! readers ([`crate::read`]) and the snapshot thread ([`crate::snapshot`]) take a shard's
//! read lock at a time.

use crate::decl::{Decls, FeatureDecl};
use crate::names::Names;
use crate::table::{EntityRef, Shard, ShardCounts};
use parking_lot::{RwLock, RwLockWriteGuard};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The feature tables. Shared by the writer (the only one that changes them), the readers
/// and the snapshot thread.
pub struct Features {
    pub(crate) shards: Box<[RwLock<Shard>]>,
    pub(crate) decls: Decls,
    pub(crate) nshards: u32,
    pub(crate) max_bytes: u64,
    /// What the apply threads all write: on lines of their own, away from the fields every
    /// event reads (the shards, the declarations).
    pub(crate) counts: Counts,
    /// The test fault hook: the next apply fails ([`Features::fail_next_apply`]).
    #[cfg(feature = "testing")]
    fail_next: std::sync::atomic::AtomicBool,
    /// The test fault hook: the next change of this shard fails (`u64::MAX`: none;
    /// [`Features::fail_next_apply_to_shard`]).
    #[cfg(feature = "testing")]
    fail_shard: AtomicU64,
}

/// The tables' shared counters, on cache lines of their own ([`Features::counts`]).
#[repr(align(128))]
pub(crate) struct Counts {
    used: AtomicI64,
    /// Bytes of the records' side allocations (table.rs `EntityMap::spill`).
    spilled: AtomicI64,
    /// The most one new entity can add to any shard's index so far (a segment and a
    /// directory doubling: index.rs `Index::max_step`).
    max_step: AtomicU64,
    /// Bytes of creations planned in the current group, not yet applied (writer only).
    pub(crate) pending: AtomicU64,
    /// Every record with an LSN ≤ this is applied to every shard.
    applied: AtomicU64,
    pub(crate) entities: AtomicI64,
    pub(crate) late: AtomicU64,
    pub(crate) future: AtomicU64,
}

/// Counters of the tables, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureStats {
    pub entities: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    /// Events ignored by windowed aggregates: older than the window, or from the future.
    pub late_events: u64,
    pub future_events: u64,
}

impl Features {
    pub fn new(shards: u32, decls: Vec<FeatureDecl>, max_bytes: u64) -> Features {
        let decls = Decls::new(decls);
        Features {
            shards: (0..shards.max(1))
                .map(|_| RwLock::new(Shard::new(Names::new(&decls))))
                .collect(),
            decls,
            nshards: shards.max(1),
            max_bytes,
            counts: Counts {
                used: AtomicI64::new(0),
                spilled: AtomicI64::new(0),
                max_step: AtomicU64::new(0),
                pending: AtomicU64::new(0),
                applied: AtomicU64::new(0),
                entities: AtomicI64::new(0),
                late: AtomicU64::new(0),
                future: AtomicU64::new(0),
            },
            #[cfg(feature = "testing")]
            fail_next: std::sync::atomic::AtomicBool::new(false),
            #[cfg(feature = "testing")]
            fail_shard: AtomicU64::new(u64::MAX),
        }
    }

    pub(crate) fn empty_shard(&self) -> Shard {
        Shard::new(Names::new(&self.decls))
    }

    /// Replace every shard's contents (start-up, from a snapshot).
    pub(crate) fn install_shards(&self, shards: Vec<Shard>, entities: u64) {
        let mut used = 0u64;
        let mut spilled = 0u64;
        for (lock, sh) in self.shards.iter().zip(shards) {
            used += sh.bytes;
            spilled += sh.entities.spill();
            self.counts
                .max_step
                .fetch_max(sh.entities.max_step(), Ordering::Relaxed);
            *lock.write() = sh;
        }
        self.counts
            .used
            .store(i64::try_from(used).unwrap_or(i64::MAX), Ordering::Relaxed);
        self.counts.spilled.store(
            i64::try_from(spilled).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        self.counts.entities.store(
            i64::try_from(entities).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn shard_of(&self, entity: &str) -> u32 {
        EntityRef::new(entity).shard(self.nshards)
    }

    /// The shard of an entity whose hash is computed already.
    pub(crate) fn shard(&self, e: EntityRef<'_>) -> &RwLock<Shard> {
        // In range: `shard_of_hash(_, n)` is below `n`, the number of shards.
        &self.shards[e.shard(self.nshards) as usize]
    }

    pub fn shards(&self) -> u32 {
        self.nshards
    }

    pub fn decls(&self) -> &[FeatureDecl] {
        &self.decls.list
    }

    pub fn is_declared(&self, name: &str) -> bool {
        self.decls.is_declared(name)
    }

    pub fn stats(&self) -> FeatureStats {
        FeatureStats {
            entities: u64::try_from(self.counts.entities.load(Ordering::Relaxed)).unwrap_or(0),
            bytes: self.used_bytes(),
            max_bytes: self.max_bytes,
            late_events: self.counts.late.load(Ordering::Relaxed),
            future_events: self.counts.future.load(Ordering::Relaxed),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        u64::try_from(self.counts.used.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Every record up to `lsn` is applied (the writer, after a group; recovery, at its end):
    /// what a snapshot copy taken now covers at least. Never moves back: groups finish in
    /// log order ([`crate::parallel`]), but the calls that say so may cross.
    pub fn applied_through(&self, lsn: u64) {
        self.counts.applied.fetch_max(lsn, Ordering::AcqRel);
    }

    /// The shard whose entities hash to `hash` ([`crate::entity_hash`]).
    pub fn shard_of_hash(&self, hash: u64) -> u32 {
        vx_proto::shard::shard_of_hash(hash, self.nshards)
    }

    pub(crate) fn applied(&self) -> u64 {
        self.counts.applied.load(Ordering::Acquire)
    }

    /// Change entity `e` (and nothing else of its shard) under the shard's write lock, and add
    /// what that changed of the shard's bytes to the tables' count.
    pub(crate) fn change<R>(
        &self,
        e: EntityRef<'_>,
        f: impl FnOnce(&mut Shard) -> Result<R, crate::ApplyError>,
    ) -> Result<R, crate::ApplyError> {
        let mut g = self.shard(e).write();
        let before = g.counts();
        let out = g.counted(f);
        self.unlock_counted(g, before);
        out
    }

    /// Release a shard changed under its write lock, taken when its counts were `before`:
    /// the tables' counts follow the shard's.
    pub(crate) fn unlock_counted(&self, g: RwLockWriteGuard<'_, Shard>, before: ShardCounts) {
        let after = g.counts();
        // Written only when it grows: a write of a line every apply thread reads would make
        // each of them miss it at its next shard.
        let step = g.entities.max_step();
        if step > self.counts.max_step.load(Ordering::Relaxed) {
            self.counts.max_step.fetch_max(step, Ordering::Relaxed);
        }
        drop(g);
        self.add_counts(after, before);
    }

    /// A shard's counts ([`Shard::counts`]) went from `before` to `after`: the tables'
    /// follow.
    pub(crate) fn add_counts(&self, after: ShardCounts, before: ShardCounts) {
        let d = |a: u64, b: u64| {
            i64::try_from(a).unwrap_or(i64::MAX) - i64::try_from(b).unwrap_or(i64::MAX)
        };
        let c = &self.counts;
        for (counter, a, b) in [
            (&c.used, after.bytes, before.bytes),
            (&c.spilled, after.spill, before.spill),
            (&c.entities, after.entities, before.entities),
        ] {
            if a != b {
                counter.fetch_add(d(a, b), Ordering::Relaxed);
            }
        }
    }

    /// Bytes of the records' side allocations.
    pub(crate) fn spilled_bytes(&self) -> u64 {
        u64::try_from(self.counts.spilled.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// The most one new entity can add to any shard's index.
    pub(crate) fn max_step_bytes(&self) -> u64 {
        self.counts.max_step.load(Ordering::Relaxed)
    }

    /// Test support: make the next apply (of any record) fail with
    /// [`crate::ApplyError::Injected`], as a bug or a refused record would.
    #[cfg(feature = "testing")]
    pub fn fail_next_apply(&self) {
        self.fail_next.store(true, Ordering::Release);
    }

    /// Test support: make the next change of shard `shard` fail with
    /// [`crate::ApplyError::Injected`]: with several apply threads, the one that owns it.
    #[cfg(feature = "testing")]
    pub fn fail_next_apply_to_shard(&self, shard: u32) {
        self.fail_shard.store(u64::from(shard), Ordering::Release);
    }

    /// The fault the test hook injected, if any (never without the `testing` feature).
    pub(crate) fn injected_fault(&self, at: crate::LogPos) -> Result<(), crate::ApplyError> {
        #[cfg(feature = "testing")]
        if self.fail_next.swap(false, Ordering::AcqRel) {
            return Err(crate::ApplyError::Injected { lsn: at.lsn });
        }
        let _ = at;
        Ok(())
    }

    /// The fault the test hook injected for a change of shard `shard`, if any (never
    /// without the `testing` feature).
    #[inline]
    pub(crate) fn injected_fault_in(
        &self,
        shard: u32,
        at: crate::LogPos,
    ) -> Result<(), crate::ApplyError> {
        #[cfg(feature = "testing")]
        if self.fail_shard.load(Ordering::Acquire) == u64::from(shard)
            && self
                .fail_shard
                .compare_exchange(
                    u64::from(shard),
                    u64::MAX,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Err(crate::ApplyError::Injected { lsn: at.lsn });
        }
        let _ = (shard, at);
        Ok(())
    }
}
