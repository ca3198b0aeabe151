//! Retention, and the carry file it and sealing write.
//!
//! Whole sealed segments go, oldest first: the streams they orphan (no events left anywhere)
//! are written to the carry file first, then the streams' counters move on, then the segment
//! and its index file are unlinked and the directory fsynced. A crash in between leaves a
//! segment that the carry already accounts for; start-up folds it in again and retention
//! removes it again. A segment from before a reset of a shard's streams holds nothing of that
//! shard any more: its entries of the shard's streams are passed over.

use crate::index::carry::{Carry, CarryEntry};
use crate::index::idxfile::IdxContents;
use crate::index::memory::SealedTs;
use crate::log::segment::{self, SegInfo};
use crate::log::state::LogWriter;
use std::io;
use std::sync::atomic::Ordering;
use vx_proto::shard::shard_of;

impl LogWriter {
    /// Rewrite the carry file with `upserts` (see [`crate::index::carry`]); entries of streams whose
    /// state a retained sealed node now holds are dropped.
    pub fn carry_update(&mut self, upserts: &[CarryEntry]) -> io::Result<()> {
        let old = self.shared.carry.read().clone();
        let mut all = old.all()?;
        let mut add: Vec<&CarryEntry> = upserts.iter().collect();
        add.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let mut merged: Vec<CarryEntry> = Vec::with_capacity(all.len() + add.len());
        let mut old_it = all.drain(..).peekable();
        for e in add {
            while old_it.peek().is_some_and(|o| o.name < e.name) {
                merged.extend(old_it.next());
            }
            if old_it.peek().is_some_and(|o| o.name == e.name) {
                old_it.next();
            }
            merged.push(e.clone());
        }
        merged.extend(old_it);
        let index = &self.shared.index;
        let shards = self.shards;
        let upserted: hashbrown::HashSet<&str> = upserts.iter().map(|e| e.name.as_str()).collect();
        merged.retain(|e| {
            // A stream written again since it was carried, whose state a sealed (durable)
            // node holds now, needs its carry entry no more.
            let held = !upserted.contains(e.name.as_str())
                && self
                    .streams
                    .map
                    .get(e.name.as_str())
                    .is_some_and(|w| !w.deleted)
                && index
                    .with(shard_of(&e.name, shards), &e.name, |s| {
                        s.head.is_some_and(|h| h.last_seq >= e.last_seq)
                    })
                    .unwrap_or(false);
            !held
        });
        let new = Carry::write(&*self.vfs, &self.shared.carry_path(), &merged)?;
        *self.shared.carry.write() = new;
        self.streams.recount_orphans(&merged);
        Ok(())
    }

    /// Drop every carry entry of `shard`'s streams (a reset of them), if it has any. The
    /// caller has made the reset record durable first: a crash before this rewrite leaves the
    /// reset in the log, and start-up drops them again.
    pub fn carry_drop_shard(&mut self, shard: u32) -> io::Result<()> {
        let old = self.shared.carry.read().clone();
        let mut all = old.all()?;
        let before = all.len();
        let shards = self.shards;
        all.retain(|e| shard_of(&e.name, shards) != shard);
        if all.len() == before {
            return Ok(());
        }
        let new = Carry::write(&*self.vfs, &self.shared.carry_path(), &all)?;
        *self.shared.carry.write() = new;
        self.streams.recount_orphans(&all);
        Ok(())
    }

    /// Remove sealed segments that retention no longer keeps (see the module docs).
    pub fn retention(&mut self, now_ms: i64) {
        let r = self.cfg.retention;
        if r.max_age.is_none() && r.max_bytes.is_none() {
            return;
        }
        while let Some(oldest) = self.shared.segments.oldest() {
            if oldest.first_lsn == self.active.first || oldest.idx.is_none() {
                break;
            }
            let age_ms = r
                .max_age
                .map(|a| i64::try_from(a.as_millis()).unwrap_or(i64::MAX));
            let too_old = age_ms.is_some_and(|a| oldest.max_append_ms < now_ms.saturating_sub(a));
            let too_big = r
                .max_bytes
                .is_some_and(|b| self.shared.segments.total_bytes() > b);
            if !(too_old || too_big) {
                break;
            }
            // The segment's last LSN is the next segment's first minus one.
            let next_first = self
                .shared
                .segments
                .all()
                .iter()
                .map(|i| i.first_lsn)
                .find(|&f| f > oldest.first_lsn)
                .unwrap_or(self.active.first);
            if !self.snapshot_covers(next_first.saturating_sub(1)) {
                break;
            }
            if let Err(e) = self.remove_segment(oldest, next_first) {
                tracing::warn!(segment = oldest.first_lsn, error = %e, "retention cannot remove a segment; retrying later");
                break;
            }
        }
    }

    /// Whether the kept snapshots cover the feature tables up to `lsn`, taking snapshots (at
    /// most two, the writer waiting) until they do. With a log longer than the snapshot
    /// interval this never waits: the oldest segment is older than both kept snapshots.
    fn snapshot_covers(&mut self, lsn: u64) -> bool {
        for _ in 0..2 {
            if lsn <= self.shared.snapshot_floor.load(Ordering::Acquire) {
                return true;
            }
            let Some(take) = &self.snapshots else {
                return false;
            };
            if let Err(e) = take() {
                tracing::warn!(error = %e, "retention waits: the snapshot it needs failed");
                return false;
            }
        }
        lsn <= self.shared.snapshot_floor.load(Ordering::Acquire)
    }

    /// Remove segment `info`, whose records end before LSN `next_first`.
    fn remove_segment(&mut self, info: SegInfo, next_first: u64) -> io::Result<()> {
        let seg = info.first_lsn;
        let (f, _) = self.shared.segments.idx_uncached(seg)?;
        let mut entries = IdxContents::read(&*f)?.entries()?;
        drop(f);
        // Entries of streams reset since: those streams are new ones of the same name, whose
        // nodes (and counters) all come from later segments.
        entries.retain(|e| !self.reset_after(&e.name, next_first));
        let index = &self.shared.index;
        let shards = self.shards;
        // First the streams this removal orphans, into the carry file.
        let orphans: Vec<CarryEntry> = entries
            .iter()
            .filter(|e| e.has_events())
            .filter_map(|e| {
                index
                    .with(shard_of(&e.name, shards), &e.name, |s| {
                        let gone = e.last_seq > s.floor
                            && !s.deleted
                            && s.events <= e.count
                            && s.active.is_empty();
                        gone.then(|| CarryEntry {
                            name: e.name.clone(),
                            last_seq: s.last_seq,
                            floor: s.floor,
                        })
                    })
                    .flatten()
            })
            .collect();
        if !orphans.is_empty() {
            self.carry_update(&orphans)?;
        }
        let index = &self.shared.index;
        // Then the counters.
        for e in entries.iter().filter(|e| e.has_events()) {
            let shard = shard_of(&e.name, shards);
            let Some(lock) = index.shard(shard) else {
                continue;
            };
            let mut g = lock.write();
            let Some(s) = g.streams.get_mut(e.name.as_str()) else {
                continue;
            };
            if e.last_seq <= s.floor {
                continue;
            }
            s.events = s.events.saturating_sub(e.count);
            s.bytes = s.bytes.saturating_sub(e.bytes);
            s.first_seq = s.first_seq.max(e.last_seq + 1);
            s.first_depth = s.first_depth.max(e.depth + 1);
            if let (SealedTs::Known(a), Some(own)) = (s.sealed_ts, e.own)
                && (own.min_ts <= a.min_ts || own.max_ts >= a.max_ts)
            {
                s.sealed_ts = SealedTs::Stale;
            }
        }
        for o in &orphans {
            index.remove(shard_of(&o.name, shards), &o.name);
            if self
                .streams
                .map
                .remove(o.name.as_str())
                .is_some_and(|w| !w.deleted)
            {
                self.streams.live = self.streams.live.saturating_sub(1);
                self.streams.orphans += 1;
            }
        }
        // Finally the files.
        self.shared.segments.remove(seg);
        let bytes = info.log_len + info.idx_len;
        // The segment before its index file, each removal synced: a crash in between leaves
        // an index file without its segment, which start-up removes as a stray. The other
        // order could leave an old segment without its index, which start-up would rebuild
        // and then find its seqs behind what newer index files say.
        for path in [
            segment::segment_path(&self.log_dir, seg),
            segment::idx_path(&self.log_dir, seg),
        ] {
            if let Err(e) = self.vfs.remove(&path) {
                tracing::warn!(file = %path.display(), error = %e, "cannot remove a retained-away file");
            }
            self.vfs.sync_dir(&self.log_dir)?;
        }
        self.shared
            .retained_segments
            .fetch_add(1, Ordering::Relaxed);
        self.shared
            .retained_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        if let Some(o) = &self.cfg.observer {
            o.retained(bytes);
        }
        tracing::info!(
            segment = seg,
            bytes,
            orphaned = orphans.len(),
            "retention removed a log segment"
        );
        Ok(())
    }
}
