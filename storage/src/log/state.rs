//! The state the log writer thread owns, and what changes it besides appending: making runs
//! and tombstones visible; sealing ([`crate::log::seal`]) and retention
//! ([`crate::log::retention`]) change it too. Recovery ([`crate::log::recovery`]) builds the
//! same state by applying the log through the same entry ([`crate::log::source`]), so a
//! restart ends where the running process was; the writer thread then owns it alone.

use crate::api::{OriginTopic, PoisonCause, SourcePos, StorageConfig, WriteError};
use crate::dedup::DedupTable;
use crate::features::Features;
use crate::index::carry::{Carry, CarryEntry};
use crate::index::memory::{Index, Placed};
use crate::index::samples::RunMark;
use crate::log::active::Active;
pub(crate) use crate::log::origins::Origins;
use crate::log::segment::{self, DataDir, ReadCaches, Segments};
pub(crate) use crate::log::streams::{Streams, WState};
use crate::vfs::{VFile, Vfs};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

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
    /// Cluster mode: per (topic, partition), the largest origin offset applied, published
    /// after each group (once its records also reached the feature tables).
    pub origins: RwLock<BTreeMap<(OriginTopic, u32), u64>>,
    /// Bumped each time `origins` changes (an applied origin, a reset): what
    /// [`crate::Store::watch_origins`] hands out.
    pub origins_version: tokio::sync::watch::Sender<u64>,
}

impl Published {
    /// Readers see `origins` as the applied origins; waiters are woken.
    pub fn publish_origins(&self, origins: BTreeMap<(OriginTopic, u32), u64>) {
        *self.origins.write() = origins;
        self.origins_version.send_modify(|v| *v += 1);
    }

    pub fn new(
        shards: u32,
        vfs: Arc<dyn Vfs>,
        log_dir: PathBuf,
        active_seg: u64,
        caches: ReadCaches,
        features: Arc<Features>,
    ) -> Published {
        Published {
            index: Index::new(shards, active_seg),
            segments: Segments::new(vfs, log_dir, caches),
            carry: RwLock::new(Carry::default()),
            poison: Poison::default(),
            horizons: (0..shards).map(|_| AtomicI64::new(i64::MIN)).collect(),
            retained_segments: AtomicU64::new(0),
            retained_bytes: AtomicU64::new(0),
            features,
            snapshot_floor: AtomicU64::new(0),
            watches: crate::read::watch::Watches::default(),
            origins: RwLock::new(BTreeMap::new()),
            origins_version: tokio::sync::watch::Sender::new(0),
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
    cause: Mutex<Option<PoisonCause>>,
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
    pub fn set(&self, cause: impl Into<PoisonCause>) {
        let cause = cause.into();
        tracing::error!(error = %cause, "refusing writes until restart");
        self.cause.lock().get_or_insert(cause);
        self.set.store(true, Ordering::Release);
    }
}

/// Takes a snapshot of the feature tables and waits for it (built by the store, which owns
/// the snapshot thread; the log does not know how snapshots are taken).
pub(crate) type TakeSnapshot = Box<dyn Fn() -> io::Result<()> + Send>;

/// Everything the writer thread owns: its fields are the log's own (`pub(super)`); only what
/// start-up reads before the writer runs (the feature tables' bootstrap in snapshot.rs) is
/// visible to the rest of the crate.
pub(crate) struct LogWriter {
    pub(crate) shared: Arc<Published>,
    pub(super) cfg: StorageConfig,
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) log_dir: PathBuf,
    pub(super) shards: u32,
    pub(super) dedup_key: u64,
    /// The active segment (`log/active.rs`).
    pub(crate) active: Active,
    pub(crate) next_lsn: u64,
    /// The newest source position applied ([`crate::log::source`]).
    pub(super) applied: SourcePos,
    /// The streams' `seq`s as the writer assigns them (`log/streams.rs`).
    pub(crate) streams: Streams,
    pub(super) dedup: Vec<DedupTable>,
    /// Data dir lock and metadata: held as long as the engine lives.
    pub(crate) dir: DataDir,
    /// Asks the snapshot thread for a snapshot and waits for it: retention does when the
    /// snapshot floor holds it back.
    pub(super) snapshots: Option<TakeSnapshot>,
    /// When a cluster record past a storage limit was last warned about (ms).
    pub(super) limit_warned_ms: i64,
    /// Cluster mode: the applied origins and the resets of shards' streams
    /// (`log/origins.rs`).
    pub(crate) origins: Origins,
}

impl LogWriter {
    pub(crate) fn shards(&self) -> u32 {
        self.shards
    }

    /// The seed of the dedup keys, recorded in the data dir's metadata.
    pub(crate) fn dedup_key(&self) -> u64 {
        self.dedup_key
    }

    /// Let retention ask for snapshots (see [`TakeSnapshot`]).
    pub(crate) fn set_snapshots(&mut self, take: TakeSnapshot) {
        self.snapshots = Some(take);
    }

    /// A stream's writer state: in memory, or in the carry file (not loaded).
    pub fn state_of(&self, stream: &str) -> io::Result<Option<WState>> {
        if let Some(s) = self.streams.map.get(stream) {
            return Ok(Some(*s));
        }
        Ok(self.shared.carry_get(stream)?.map(|e| WState::from(&e)))
    }

    /// A run became visible, with its marks (see [`crate::index::samples`]).
    pub fn apply_run(
        &mut self,
        shard: u32,
        stream: &str,
        floor: u64,
        p: Placed,
        marks: &[RunMark],
    ) {
        let added = self.shared.index.apply_run(shard, stream, floor, p, marks);
        self.active.spans += added.spans;
        self.active.samples += added.samples;
        self.shared
            .watches
            .published(stream, p.first_seq + u64::from(p.count) - 1);
        self.active.touch(stream, shard);
    }

    /// A tombstone became visible.
    pub fn apply_tombstone(&mut self, shard: u32, stream: &str, last_seq: u64) {
        let (spans, samples) = self
            .shared
            .index
            .with(shard, stream, |s| (s.active.len(), s.samples.len()))
            .unwrap_or((0, 0));
        self.active.spans = self.active.spans.saturating_sub(spans);
        self.active.samples = self.active.samples.saturating_sub(samples);
        self.shared.index.apply_tombstone(shard, stream, last_seq);
        self.shared.watches.deleted(stream, last_seq);
        self.active.touch(stream, shard);
    }

    /// The active segment's spans and samples passed the memory budget or its size the
    /// segment size.
    pub fn wants_roll(&self) -> bool {
        self.active.len >= self.cfg.segment_bytes
            || self.active.index_bytes() as u64 >= self.cfg.active_index_bytes
    }

    /// `file` (segment `first_lsn`, empty or about to be read back) becomes the active
    /// segment: sealing starts the next one this way, recovery each one it reads.
    pub fn start_segment(&mut self, file: Arc<dyn VFile>, first_lsn: u64) {
        self.set_active_seg(first_lsn);
        let touched = std::mem::take(&mut self.active.touched);
        let (spans, samples) = (self.active.spans, self.active.samples);
        self.active = Active {
            touched,
            spans,
            samples,
            ..Active::new(file, first_lsn)
        };
    }

    /// The active segment was cut back to `len` bytes (recovery, a torn tail).
    pub fn truncated(&mut self, len: u64) {
        self.active.len = len;
        self.shared
            .segments
            .update(self.active.first, |s| s.log_len = len);
    }

    /// Point every shard's active spans at segment `seg`.
    pub fn set_active_seg(&self, seg: u64) {
        for shard in 0..self.shards {
            if let Some(lock) = self.shared.index.shard(shard) {
                lock.write().active_seg = seg;
            }
        }
    }

    /// Every shard's streams are forgotten as if they never existed (a reset record at
    /// `lsn`, applied): their writer state, the reader index (open cursors end at their next
    /// event), the active segment's spans, dedup, and their followers are told. What the
    /// carry file holds of them was dropped before (it is on disk: see
    /// [`LogWriter::carry_drop_shard`]).
    pub fn forget_streams(&mut self, shard: u32, lsn: u64) {
        let gone = self.shared.index.reset_shard(shard);
        let spans: usize = gone.iter().map(|(_, n)| n.spans).sum();
        let samples: usize = gone.iter().map(|(_, n)| n.samples).sum();
        self.active.spans = self.active.spans.saturating_sub(spans);
        self.active.samples = self.active.samples.saturating_sub(samples);
        let shards = self.shards;
        let mut live = self.streams.live;
        self.streams.map.retain(|name, st| {
            let keep = vx_proto::shard::shard_of(name, shards) != shard;
            if !keep && !st.deleted {
                live = live.saturating_sub(1);
            }
            keep
        });
        self.streams.live = live;
        self.active.touched.retain(|_, s| *s != shard);
        if let Some(t) = self.dedup.get_mut(shard as usize) {
            t.clear();
        }
        self.origins.reset(shard, lsn);
        self.shared.watches.reset_shard(shard, shards);
    }

    /// Whether the streams of `stream`'s shard were reset after every record of a segment
    /// whose next LSN (the next segment's first) is `next_lsn`: that segment's entry of the
    /// stream belongs to a stream of the same name that no longer exists.
    pub fn reset_after(&self, stream: &str, next_lsn: u64) -> bool {
        let shard = vx_proto::shard::shard_of(stream, self.shards);
        self.origins.reset_after(shard, next_lsn)
    }

    /// Readers see the applied origins of every group applied so far; waiters are woken.
    pub fn publish_origins(&mut self) {
        if let Some(origins) = self.changed_origins() {
            self.shared.publish_origins(origins);
        }
    }

    /// The applied origins, if they changed since they were last taken.
    pub(super) fn changed_origins(&mut self) -> Option<BTreeMap<(OriginTopic, u32), u64>> {
        self.origins.take_changed()
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
