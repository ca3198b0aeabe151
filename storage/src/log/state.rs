//! The state the log writer thread owns, and what changes it besides appending: making runs
//! and tombstones visible, sealing the active segment (writing its index file), retention,
//! and the carry file. Recovery ([`crate::log::recovery`]) builds the same state by applying the
//! log through the same functions, so a restart ends where the running process was.
//!
//! # Sealing a segment
//! 1. fsync the segment (under `interval`, what is unsynced);
//! 2. build its index file from the active spans of every stream it touched, linking each
//!    stream's new node into its chain ([`crate::index::chain`]; at most one older node read per
//!    stream), write it to `<lsn>.idx.tmp`, fsync, rename to `<lsn>.idx`;
//! 3. create the next segment (named by the next LSN), fsync the directory: this makes the
//!    rename and the create durable together;
//! 4. publish: the streams' heads move to the new nodes and their active spans are dropped.
//!
//! A failure before 4 leaves everything as it was (a leftover new segment is removed, and
//! at start-up an empty segment that does not continue the log is a stray and removed): the
//! writer keeps appending to the active segment and tries again after the next group.
//!
//! # Retention
//! Whole sealed segments go, oldest first: the streams they orphan (no events left anywhere)
//! are written to the carry file first, then the streams' counters move on, then the segment
//! and its index file are unlinked and the directory fsynced. A crash in between leaves a
//! segment that the carry already accounts for; start-up folds it in again and retention
//! removes it again.

use crate::api::{IoFailure, StorageConfig, WriteError};
use crate::dedup::DedupTable;
use crate::features::Features;
use crate::index::carry::{Carry, CarryEntry};
use crate::index::chain::{self, Head};
use crate::index::idxfile::{
    self, Agg, Entry, F_EVENTS, F_TOMBSTONE, IdxBuilder, IdxContents, SegSummary,
};
use crate::index::memory::{Index, Placed, SealedTs};
use crate::log::segment::{self, DataDir, SegInfo, Segments};
use crate::vfs::{OpenMode, VFile, Vfs};
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;
use vx_proto::shard::shard_of;

/// State shared between the writer and the [`crate::Store`] handles (readers).
pub(crate) struct Published {
    pub index: Index,
    pub segments: Segments,
    pub carry: RwLock<Carry>,
    /// Set by a failed write, fsync or truncation of the log: every later write is refused.
    pub poison: Poison,
    /// Per shard: append time of the oldest remembered id (`i64::MIN`: none).
    pub horizons: Vec<AtomicI64>,
    pub retained_segments: AtomicU64,
    pub retained_bytes: AtomicU64,
    /// The feature tables (changed by the writer only).
    pub features: Arc<Features>,
    /// Retention keeps every record after this LSN: the oldest kept snapshot covers the
    /// feature tables up to it, so state rebuilt from a snapshot never misses a record.
    pub snapshot_floor: AtomicU64,
    /// Followers' notifications of newly visible events and deletes.
    pub watches: crate::read::watch::Watches,
}

impl Published {
    pub fn new(
        shards: u32,
        vfs: Arc<dyn Vfs>,
        log_dir: PathBuf,
        active_seg: u64,
        open_files: usize,
        features: Arc<Features>,
    ) -> Published {
        Published {
            index: Index::new(shards, active_seg),
            segments: Segments::new(vfs, log_dir, open_files),
            carry: RwLock::new(Carry::default()),
            poison: Poison::default(),
            horizons: (0..shards).map(|_| AtomicI64::new(i64::MIN)).collect(),
            retained_segments: AtomicU64::new(0),
            retained_bytes: AtomicU64::new(0),
            features,
            snapshot_floor: AtomicU64::new(0),
            watches: crate::read::watch::Watches::default(),
        }
    }

    pub fn carry_path(&self) -> PathBuf {
        self.segments.log_dir.join(segment::CARRY_FILE)
    }

    pub fn carry_get(&self, stream: &str) -> io::Result<Option<CarryEntry>> {
        let carry = self.carry.read().clone();
        carry.get(stream)
    }
}

/// Whether the store refuses writes until restart, and why: set once the log's file is in a
/// state nobody knows (a write or truncation failed for a reason other than space, or an
/// fsync failed, after which the page cache may have dropped what it could not write).
#[derive(Default)]
pub(crate) struct Poison {
    set: AtomicBool,
    cause: Mutex<Option<IoFailure>>,
}

impl Poison {
    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// The error every write gets once the store is poisoned.
    pub fn error(&self) -> Option<WriteError> {
        if !self.is_set() {
            return None;
        }
        self.cause.lock().clone().map(WriteError::Poisoned)
    }

    /// Refuse writes from now on; the first cause is the one reported.
    pub fn set(&self, cause: IoFailure) {
        tracing::error!(error = %cause, "refusing writes until restart");
        self.cause.lock().get_or_insert(cause);
        self.set.store(true, Ordering::Release);
    }
}

/// What the writer knows of a stream's `seq`s, visible or not yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WState {
    /// Last assigned seq.
    pub last: u64,
    /// Every seq ≤ floor is deleted.
    pub floor: u64,
    /// Tombstoned and not written since.
    pub deleted: bool,
}

impl From<&CarryEntry> for WState {
    fn from(e: &CarryEntry) -> Self {
        WState {
            last: e.last_seq,
            floor: e.floor,
            deleted: e.is_tombstone(),
        }
    }
}

/// A stream of a segment being sealed: shard, name, and its new head with the new node's
/// own aggregate (none when it only has a tombstone there).
type SealedStream = (u32, Box<str>, Option<(Head, Agg)>);

/// Everything the writer thread owns.
pub(crate) struct LogWriter {
    pub shared: Arc<Published>,
    pub cfg: StorageConfig,
    pub vfs: Arc<dyn Vfs>,
    pub log_dir: PathBuf,
    pub shards: u32,
    pub dedup_key: u64,
    pub active: Arc<dyn VFile>,
    /// First LSN of the active segment (its name).
    pub active_first: u64,
    pub active_len: u64,
    /// Min/max append time of the active segment's records.
    pub active_append: Agg,
    /// Events with an id in the active segment.
    pub active_ids: u64,
    pub next_lsn: u64,
    /// Per stream in memory: assigned seqs (including not-yet-visible ones).
    pub streams: HashMap<Box<str>, WState>,
    pub dedup: Vec<DedupTable>,
    /// Streams with runs or a tombstone in the active segment.
    pub touched: HashMap<Box<str>, u32>,
    /// Spans of the active segment's index in memory.
    pub active_spans: usize,
    /// Streams in `streams` that are not deleted; with `carry_orphans`, what
    /// `storage.max_streams` counts.
    pub live: u64,
    /// Orphans in the carry file that are not in memory.
    pub carry_orphans: u64,
    /// Data dir lock and metadata: held as long as the engine lives.
    pub dir: DataDir,
    /// The snapshot thread, which retention asks for a snapshot when the floor holds it back.
    pub snap_tx: Option<flume::Sender<crate::snapshot::SnapMsg>>,
}

impl LogWriter {
    /// A stream's writer state: in memory, or in the carry file (not loaded).
    pub fn state_of(&self, stream: &str) -> io::Result<Option<WState>> {
        if let Some(s) = self.streams.get(stream) {
            return Ok(Some(*s));
        }
        Ok(self.shared.carry_get(stream)?.map(|e| WState::from(&e)))
    }

    /// Bring a stream into memory before its first write or delete: from the carry file
    /// (`from_carry`), or new. Keeps `live` and `carry_orphans` in step. Returns its state.
    pub fn load(&mut self, stream: &str, from_carry: Option<WState>) -> WState {
        if let Some(s) = self.streams.get(stream) {
            return *s;
        }
        let st = match from_carry {
            Some(s) if !s.deleted => {
                // An orphan: it moves from the carry's count to the live one.
                self.carry_orphans = self.carry_orphans.saturating_sub(1);
                self.live += 1;
                s
            }
            Some(s) => s,
            None => WState {
                last: 0,
                floor: 0,
                deleted: true,
            },
        };
        self.streams.insert(stream.into(), st);
        st
    }

    /// Set a stream's writer state, counting it live or not.
    pub fn set_state(&mut self, stream: &str, st: WState) {
        let was_live = self.streams.get(stream).is_some_and(|s| !s.deleted);
        match (was_live, st.deleted) {
            (false, false) => self.live += 1,
            (true, true) => self.live = self.live.saturating_sub(1),
            _ => {}
        }
        if let Some(s) = self.streams.get_mut(stream) {
            *s = st;
        } else {
            self.streams.insert(stream.into(), st);
        }
    }

    /// A run became visible.
    pub fn apply_run(&mut self, shard: u32, stream: &str, floor: u64, p: Placed) {
        if self.shared.index.apply_run(shard, stream, floor, p) {
            self.active_spans += 1;
        }
        self.shared
            .watches
            .published(stream, p.first_seq + u64::from(p.count) - 1);
        if !self.touched.contains_key(stream) {
            self.touched.insert(stream.into(), shard);
        }
    }

    /// A tombstone became visible.
    pub fn apply_tombstone(&mut self, shard: u32, stream: &str, last_seq: u64) {
        let dropped = self
            .shared
            .index
            .with(shard, stream, |s| s.active.len())
            .unwrap_or(0);
        self.active_spans = self.active_spans.saturating_sub(dropped);
        self.shared.index.apply_tombstone(shard, stream, last_seq);
        self.shared.watches.deleted(stream, last_seq);
        if !self.touched.contains_key(stream) {
            self.touched.insert(stream.into(), shard);
        }
    }

    /// The active segment's spans passed the memory budget or its size the segment size.
    pub fn wants_roll(&self) -> bool {
        self.active_len >= self.cfg.segment_bytes
            || (self.active_spans * crate::index::memory::SPAN_BYTES) as u64
                >= self.cfg.active_index_bytes
    }

    /// Point every shard's active spans at segment `seg`.
    pub fn set_active_seg(&self, seg: u64) {
        for shard in 0..self.shards {
            if let Some(lock) = self.shared.index.shard(shard) {
                lock.write().active_seg = seg;
            }
        }
    }

    /// Write the active segment's index file and, with `roll`, start the next segment (see the
    /// module docs). The caller has synced the segment.
    pub fn seal(&mut self, roll: bool) -> io::Result<()> {
        let started = Instant::now();
        let seg = self.active_first;
        let mut names: Vec<(Box<str>, u32)> =
            self.touched.iter().map(|(n, &s)| (n.clone(), s)).collect();
        names.sort_unstable();
        let mut b = IdxBuilder::new();
        // Per stream: its shard, name, new head and the aggregate of the new node.
        let mut heads: Vec<SealedStream> = Vec::with_capacity(names.len());
        for (name, shard) in &names {
            let snap = self.shared.index.with(*shard, name, |s| {
                (
                    s.active.clone(),
                    s.active_count,
                    s.active_bytes,
                    s.active_agg,
                    s.active_tombstone,
                    s.head,
                )
            });
            let Some((spans, count, bytes, agg, tomb, head)) = snap else {
                continue;
            };
            let mut e = Entry {
                name: name.to_string(),
                floor: tomb.unwrap_or(0),
                flags: if tomb.is_some() { F_TOMBSTONE } else { 0 },
                ..Entry::default()
            };
            let mut new_head = None;
            if let (Some(first), Some(last)) = (spans.first(), spans.last()) {
                e.flags |= F_EVENTS;
                e.first_seq = first.first_seq;
                e.last_seq = last.last_seq();
                e.count = count;
                e.bytes = bytes;
                e.own = Some(agg);
                let segments = &self.shared.segments;
                let links = chain::link(head.as_ref(), agg, &mut |r| segments.entry(r, name))?;
                links.fill(&mut e);
                new_head = Some((Head::from_entry(seg, &e), agg));
            }
            b.add(&e, &spans)?;
            heads.push((*shard, name.clone(), new_head));
        }
        let summary = SegSummary {
            segment: seg,
            next_lsn: self.next_lsn,
            log_len: self.active_len,
            min_append_ms: self.active_append.min_ts,
            max_append_ms: self.active_append.max_ts,
            ids: self.active_ids,
        };
        let bytes = b.finish(&summary)?;
        let idx = segment::idx_path(&self.log_dir, seg);
        let tmp = idx.with_extension("idx.tmp");
        let written = (|| -> io::Result<()> {
            if self.vfs.exists(&tmp)? {
                self.vfs.remove(&tmp)?;
            }
            let f = self.vfs.open(&tmp, OpenMode::CreateNew)?;
            f.write_all_at(&bytes, 0)?;
            f.sync_data()?;
            self.vfs.rename(&tmp, &idx)
        })();
        if let Err(e) = written {
            let _ = self.vfs.remove(&tmp);
            return Err(e);
        }
        let next_path = segment::segment_path(&self.log_dir, self.next_lsn);
        let next = if roll {
            match self.vfs.open(&next_path, OpenMode::CreateNew) {
                Ok(f) => Some(f),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Err(e) = self.vfs.sync_dir(&self.log_dir) {
            if next.is_some() {
                let _ = self.vfs.remove(&next_path);
            }
            return Err(e);
        }
        // Published: readers move to the index file.
        let header = idxfile::IdxContents::header_of(&bytes)?;
        self.shared.segments.update(seg, |s| {
            s.idx = Some(header);
            s.idx_len = bytes.len() as u64;
            s.log_len = self.active_len;
            s.min_append_ms = self.active_append.min_ts;
            s.max_append_ms = self.active_append.max_ts;
        });
        for (shard, name, head) in &heads {
            let Some(lock) = self.shared.index.shard(*shard) else {
                continue;
            };
            let mut g = lock.write();
            if let Some(s) = g.streams.get_mut(&**name) {
                if let Some((h, agg)) = head {
                    s.head = Some(*h);
                    if let SealedTs::Known(a) = s.sealed_ts {
                        s.sealed_ts = SealedTs::Known(a.merge(*agg));
                    }
                }
                s.active = Vec::new();
                s.active_agg = Agg::EMPTY;
                s.active_count = 0;
                s.active_bytes = 0;
                s.active_tombstone = None;
            }
        }
        self.touched.clear();
        self.active_spans = 0;
        if let Some(f) = next {
            self.shared.segments.insert(SegInfo {
                first_lsn: self.next_lsn,
                log_len: 0,
                idx_len: 0,
                min_append_ms: i64::MAX,
                max_append_ms: i64::MIN,
                idx: None,
            });
            self.set_active_seg(self.next_lsn);
            self.active = f;
            self.active_first = self.next_lsn;
            self.active_len = 0;
            self.active_append = Agg::EMPTY;
            self.active_ids = 0;
        }
        if let Some(o) = &self.cfg.observer {
            o.sealed(started.elapsed());
        }
        tracing::debug!(segment = seg, streams = heads.len(), "sealed log segment");
        // Deleted streams whose tombstone is now in a sealed segment leave memory.
        let gone: Vec<CarryEntry> = heads
            .iter()
            .filter_map(|(_, name, _)| {
                let st = self.streams.get(&**name)?;
                st.deleted.then(|| CarryEntry {
                    name: name.to_string(),
                    last_seq: st.last,
                    floor: st.floor,
                })
            })
            .collect();
        if !gone.is_empty() {
            match self.carry_update(&gone) {
                Ok(()) => {
                    for e in &gone {
                        self.shared
                            .index
                            .remove(shard_of(&e.name, self.shards), &e.name);
                        self.streams.remove(e.name.as_str());
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write the carry file; deleted streams stay in memory")
                }
            }
        }
        Ok(())
    }

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
        self.carry_orphans = merged
            .iter()
            .filter(|e| !e.is_tombstone() && !self.streams.contains_key(e.name.as_str()))
            .count() as u64;
        Ok(())
    }

    /// Remove sealed segments that retention no longer keeps (see the module docs).
    pub fn retention(&mut self, now_ms: i64) {
        let r = self.cfg.retention;
        if r.max_age.is_none() && r.max_bytes.is_none() {
            return;
        }
        while let Some(oldest) = self.shared.segments.oldest() {
            if oldest.first_lsn == self.active_first || oldest.idx.is_none() {
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
                .unwrap_or(self.active_first);
            if !self.snapshot_covers(next_first.saturating_sub(1)) {
                break;
            }
            if let Err(e) = self.remove_segment(oldest) {
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
            let Some(tx) = &self.snap_tx else {
                return false;
            };
            let (reply, rx) = std::sync::mpsc::channel();
            if tx.send(crate::snapshot::SnapMsg::Now(reply)).is_err() {
                return false;
            }
            match rx.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "retention waits: the snapshot it needs failed");
                    return false;
                }
                Err(_) => return false,
            }
        }
        lsn <= self.shared.snapshot_floor.load(Ordering::Acquire)
    }

    fn remove_segment(&mut self, info: SegInfo) -> io::Result<()> {
        let seg = info.first_lsn;
        let (f, _) = self.shared.segments.idx(seg)?;
        let entries = IdxContents::read(&*f)?.entries()?;
        drop(f);
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
                .remove(o.name.as_str())
                .is_some_and(|w| !w.deleted)
            {
                self.live = self.live.saturating_sub(1);
                self.carry_orphans += 1;
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

    /// Publish the dedup horizons for metrics.
    pub fn publish_horizons(&self) {
        for (i, t) in self.dedup.iter().enumerate() {
            if let Some(h) = self.shared.horizons.get(i) {
                h.store(t.oldest_ms().unwrap_or(i64::MIN), Ordering::Relaxed);
            }
        }
    }
}
