//! `vx-storage` owns durability and the read path: the node-wide append-only log (segments,
//! record format, checksums, group commit, recovery), per-stream `seq`, the index (spans of
//! the active segment in memory, index files of sealed segments, each stream's chain of
//! nodes), retention and stream deletion, the dedup table, replay cursors over the log, and
//! the feature tables with their snapshots.
//! It knows nothing of HTTP or input formats.
//!
//! # Layout
//! - [`api`]: configuration, requests, outcomes and errors.
//! - [`vfs`]: the I/O seam every file operation goes through, the real backend and the
//!   bounded descriptor cache; [`sim`]: the simulated disk of the crash tests.
//! - `log`: the log: [`record`] (the on-disk record format, byte by byte), `segment` (the data
//!   dir, its files, the segment registry), the writer's state and what changes it (sealing,
//!   retention), group commit, and recovery.
//! - `index`: what memory keeps per stream, [`idxfile`] (the index file of a sealed segment,
//!   byte by byte), `chain` (how a stream's nodes across index files link up) and `carry`
//!   (the carry file of deleted and retained-away streams).
//! - `read`: replay [`Cursor`]s over the log, and [`watch`] (what live followers wait on).
//! - `dedup`: per-shard remembered ids.
//! - [`features`]: the feature tables, changed only by [`features::Features::apply`] from
//!   records; [`snapshot`]: their snapshots, and how start-up rebuilds them.
//! - [`check`]: offline verification of a data dir (`veltrix check`), with the readers above.

pub mod api;
pub mod check;
mod dedup;
pub mod features;
mod index;
mod log;
mod read;
pub mod sim;
pub mod snapshot;
pub mod vfs;

pub use index::idxfile;
pub use log::record;
pub use read::watch;
// The paths features.rs and snapshot.rs use, kept until they move to their own crate.
use log::{recovery, segment, writer};
mod engine {
    pub(crate) use crate::log::state::{LogWriter as Engine, Published as Shared};
}

pub use api::*;
use index::memory::SealedTs;
use log::state::Published;
use log::writer::Msg;
use parking_lot::Mutex;
pub use read::cursor::Cursor;
pub use segment::{CARRY_FILE, DEFAULT_SHARDS, LOCK_FILE, LOG_DIR, META_FILE};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tokio::sync::oneshot;
use vx_proto::Batch;

/// The largest `storage.segment_bytes`: offsets inside a segment are 32-bit in the index
/// (a segment may pass its size by one group of records, up to 1 GiB).
pub const MAX_SEGMENT_BYTES: u64 = 2 << 30;
/// The smallest `storage.segment_bytes`.
pub const MIN_SEGMENT_BYTES: u64 = 512;
/// The largest `ingest.max_body_bytes`: a request is one record of at most 1 GiB.
pub const MAX_BODY_BYTES: u64 = (record::MAX_RECORD_LEN as u64) - (1 << 20);

/// Check the engine's settings against what the formats can hold (SPEC §1 keys).
pub fn check_config(cfg: &StorageConfig) -> Result<(), OpenError> {
    let bad = |key: &str, reason: String| OpenError::Config {
        key: key.to_string(),
        reason,
    };
    if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&cfg.segment_bytes) {
        return Err(bad(
            "storage.segment_bytes",
            format!(
                "{} is outside {MIN_SEGMENT_BYTES}..={MAX_SEGMENT_BYTES} bytes",
                cfg.segment_bytes
            ),
        ));
    }
    if cfg.active_index_bytes < 4096 {
        return Err(bad(
            "storage.active_index_bytes",
            "must be at least 4096 bytes".into(),
        ));
    }
    if cfg.retention.max_bytes == Some(0) {
        return Err(bad(
            "retention.max_bytes",
            "must be more than 0 (unset it to keep everything)".into(),
        ));
    }
    Ok(())
}

/// Handle to the storage engine; cheap to clone and share.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Running>,
}

struct Running {
    tx: flume::Sender<Msg>,
    shared: Arc<Published>,
    shards: u32,
    mode: FsyncMode,
    dedup_key: u64,
    closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    snap_tx: flume::Sender<snapshot::SnapMsg>,
    snap_thread: Mutex<Option<JoinHandle<()>>>,
    snap_status: Arc<snapshot::SnapStatus>,
}

impl Store {
    /// Lock the data dir, recover the log and start the writer thread. Blocking.
    pub fn open(cfg: StorageConfig) -> Result<(Store, RecoveryReport), OpenError> {
        check_config(&cfg)?;
        let capacity = cfg.channel_capacity.max(1);
        let mode = cfg.fsync;
        let snapshot_interval = cfg.snapshot_interval;
        let (mut engine, mut report) = recovery::open(cfg, vx_sys::now_ms())?;
        let (boot, kept) = snapshot::bootstrap(&engine)?;
        tracing::info!(
            snapshot = boot.snapshot.as_ref().map(|p| p.display().to_string()),
            skipped = boot.skipped.len(),
            entities = boot.entities,
            replayed_records = boot.replayed_records,
            recomputed = ?boot.recomputed,
            took_ms = u64::try_from(boot.took.as_millis()).unwrap_or(u64::MAX),
            "feature tables rebuilt"
        );
        report.features = boot;
        let snap_status = Arc::new(snapshot::SnapStatus::default());
        if let Some(k) = kept.first() {
            snap_status
                .last_created_ms
                .store(k.created_ms, Ordering::Relaxed);
        }
        let (snap_tx, snap_rx) = flume::bounded(16);
        engine.set_snapshots(take_snapshot(snap_tx.clone()));
        let snap_thread = {
            let shared = Arc::clone(&engine.shared);
            let vfs = Arc::clone(&engine.vfs);
            let dir = engine.dir.root.join(snapshot::SNAPSHOT_DIR);
            let status = Arc::clone(&snap_status);
            std::thread::Builder::new()
                .name("vx-snapshot".into())
                .spawn(move || {
                    snapshot::run(shared, vfs, dir, snapshot_interval, kept, status, snap_rx)
                })
                .map_err(|source| OpenError::Io {
                    context: "starting the snapshot thread".into(),
                    source,
                })?
        };
        let shared = Arc::clone(&engine.shared);
        let shards = engine.shards();
        let dedup_key = engine.dedup_key();
        let (tx, rx) = flume::bounded(capacity);
        let thread = std::thread::Builder::new()
            .name("vx-log-writer".into())
            .spawn(move || engine.run(rx))
            .map_err(|source| OpenError::Io {
                context: "starting the log writer thread".into(),
                source,
            })?;
        Ok((
            Store {
                inner: Arc::new(Running {
                    tx,
                    shared,
                    shards,
                    mode,
                    dedup_key,
                    closed: AtomicBool::new(false),
                    thread: Mutex::new(Some(thread)),
                    snap_tx,
                    snap_thread: Mutex::new(Some(snap_thread)),
                    snap_status,
                }),
            },
            report,
        ))
    }

    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    pub fn fsync_mode(&self) -> FsyncMode {
        self.inner.mode
    }

    fn shard_of(&self, stream: &str) -> u32 {
        vx_proto::shard::shard_of(stream, self.inner.shards)
    }

    /// Compute a batch's shards and dedup keys, off the writer thread (the router calls this
    /// before admission, which needs the shards anyway).
    pub fn prepare(&self, batch: &mut Batch) {
        let seed = self.inner.dedup_key;
        batch.prepare(self.inner.shards, |stream, id| dedup::key(seed, stream, id));
    }

    fn refuse_early(&self) -> Option<WriteError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Some(WriteError::ShuttingDown);
        }
        self.inner.shared.poison.error()
    }

    /// Append a request (prepared here unless [`Store::prepare`] ran); resolves once it
    /// reached its durability level (or failed).
    pub async fn write(&self, mut req: WriteRequest) -> Result<WriteOutcome, WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        if !req.batch.is_prepared_for(self.inner.shards) {
            self.prepare(&mut req.batch);
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::Write(req, tx, vx_sys::caller_span()))
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// A direct feature write (SPEC §6): one durable record, applied before it resolves.
    pub async fn write_features(&self, fw: FeatureWrite) -> Result<FeatureOutcome, WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::Feature(fw, tx))
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// The feature tables, for reads.
    pub fn features(&self) -> &features::Features {
        &self.inner.shared.features
    }

    /// Delete a stream (SPEC §5): a durable tombstone; `NotFound` if it does not exist.
    pub async fn delete(
        &self,
        stream: &str,
        durability: Option<Durability>,
    ) -> Result<DeleteOutcome, WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::Delete {
                stream: stream.to_string(),
                durability,
                reply: tx,
            })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// One listed stream's metadata (visible events only): in memory, or an orphan in the
    /// carry file (all its events retained away). Blocking (may read index files).
    pub fn stream(&self, name: &str) -> Option<StreamInfo> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(name);
        // Retention may remove the oldest node between reading the metadata and reading the
        // chain; the metadata is then re-read (it moved past that node), a bounded few times.
        for attempt in 0..8 {
            let Some((mut info, sealed, head, first_depth)) = shared.index.info(shard, name) else {
                break;
            };
            let (SealedTs::Stale, Some(h)) = (sealed, head) else {
                return Some(info);
            };
            let read = &mut |r| shared.segments.entry(r, name);
            match index::chain::aggregate(&h, first_depth, read) {
                Ok(agg) => {
                    shared
                        .index
                        .set_sealed_ts(shard, name, head, first_depth, agg);
                    let merged = agg.merge(idxfile::TsRange {
                        min_ts: info.first_ts.unwrap_or(i64::MAX),
                        max_ts: info.last_ts.unwrap_or(i64::MIN),
                    });
                    if info.events > 0 && !merged.is_empty() {
                        info.first_ts = Some(merged.min_ts);
                        info.last_ts = Some(merged.max_ts);
                    }
                    return Some(info);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 7 => continue,
                Err(e) => {
                    tracing::warn!(stream = name, error = %e, "cannot read the stream's ts range");
                    return Some(info);
                }
            }
        }
        if shared.index.with(shard, name, |_| ()).is_some() {
            return None; // deleted
        }
        match shared.carry_get(name) {
            Ok(Some(e)) if !e.is_tombstone() => Some(orphan(&e, shard)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(stream = name, error = %e, "cannot read the carry file");
                None
            }
        }
    }

    /// Streams sorted bytewise by name, starting after `after`, at most `limit`; the second
    /// value is the name to pass as `after` for the next page, if there are more. Blocking.
    pub fn list_streams(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<StreamInfo>, Option<String>) {
        let shared = &self.inner.shared;
        let (mem, _) = shared.index.names(prefix, after, limit.saturating_add(1));
        let carry = shared.carry.read().clone();
        let mut carried: Vec<StreamInfo> = Vec::new();
        if carry.orphans() > 0 {
            let (start, exclusive) = match after {
                Some(a) if a >= prefix => (a, true),
                _ => (prefix, false),
            };
            let scanned = carry.scan(start, exclusive, |e| {
                if !e.name.starts_with(prefix) {
                    return false;
                }
                let shard = self.shard_of(&e.name);
                if !e.is_tombstone() && shared.index.with(shard, &e.name, |_| ()).is_none() {
                    carried.push(orphan(e, shard));
                }
                carried.len() <= limit
            });
            if let Err(e) = scanned {
                tracing::warn!(error = %e, "cannot read the carry file");
            }
        }
        let mut out: Vec<StreamInfo> = Vec::with_capacity(limit.min(1024));
        let mut carried = carried.into_iter().peekable();
        let mut mem = mem.into_iter().peekable();
        while out.len() <= limit {
            let take_mem = match (mem.peek(), carried.peek()) {
                (Some((m, _)), Some(c)) => **m < *c.stream,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_mem {
                if let Some((name, _)) = mem.next()
                    && let Some(info) = self.stream(&name)
                {
                    out.push(info);
                }
            } else if let Some(c) = carried.next() {
                out.push(c);
            }
        }
        let next = if out.len() > limit {
            out.truncate(limit);
            out.last().map(|i| i.stream.clone())
        } else {
            None
        };
        (out, next)
    }

    /// The `n` streams with the most retained events, and the `n` with the most retained bytes
    /// (streams whose events are all retained away have none and are left out). Memory only,
    /// but one pass over every stream: call it off the async workers, and not per request of
    /// a hot path.
    pub fn top_streams(&self, n: usize) -> (Vec<TopStream>, Vec<TopStream>) {
        self.inner.shared.index.top(n)
    }

    /// Number of listed streams (with events, or all retained away).
    pub fn stream_count(&self) -> usize {
        let shared = &self.inner.shared;
        shared.index.listed() + usize::try_from(shared.carry.read().orphans()).unwrap_or(0)
    }

    /// Open a replay cursor; `None` for an unknown or deleted stream. Blocking I/O happens in
    /// [`Cursor::next_event`]: call it from a blocking context.
    pub fn read(&self, stream: &str, q: ReadQuery) -> Option<Cursor> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(stream);
        if let Some(view) = shared.index.view(shard, stream) {
            return Some(Cursor::open(
                Arc::clone(shared),
                shard,
                stream,
                view.first_seq,
                view.last_seq,
                q,
            ));
        }
        self.stream(stream)
            .map(|info| Cursor::empty(stream, shard, info.last_seq, q))
    }

    /// Be told when events of `stream` become visible or it is deleted (live followers). The
    /// receiver starts at the stream's current last visible seq (0 if it was never written).
    /// Blocking only for a stream whose metadata is in the carry file.
    pub fn watch(&self, stream: &str) -> tokio::sync::watch::Receiver<watch::Visible> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(stream);
        // The carry file is read before the lock (the writer takes it too); a stream it
        // holds is not in the index, and a write moves it there before it is published.
        let carried = match shared.index.with(shard, stream, |_| ()) {
            Some(()) => 0,
            None => self.stream(stream).map_or(0, |i| i.last_seq),
        };
        shared.watches.subscribe(stream, || {
            shared
                .index
                .with(shard, stream, |s| s.last_seq)
                .unwrap_or(carried)
        })
    }

    /// Requests waiting in the channel to the writer.
    pub fn queue_len(&self) -> usize {
        self.inner.tx.len()
    }

    pub fn queue_capacity(&self) -> usize {
        self.inner.tx.capacity().unwrap_or(0)
    }

    /// True after a failed fsync, or a write or truncation of the log that failed for a reason
    /// other than space: the store refuses writes until restart.
    pub fn is_poisoned(&self) -> bool {
        self.inner.shared.poison.is_set()
    }

    /// Oldest append time the dedup table of `shard` still remembers, in ms since the epoch.
    pub fn dedup_horizon_ms(&self, shard: u32) -> Option<i64> {
        let v = self
            .inner
            .shared
            .horizons
            .get(shard as usize)?
            .load(Ordering::Relaxed);
        (v != i64::MIN).then_some(v)
    }

    /// The log's size, what retention removed, and the oldest retained append time.
    pub fn log_stats(&self) -> LogStats {
        let s = &self.inner.shared;
        let all = s.segments.all();
        LogStats {
            segments: all.len() as u64,
            bytes: all.iter().map(|i| i.log_len + i.idx_len).sum(),
            oldest_append_ms: all.iter().map(|i| i.min_append_ms).find(|&m| m != i64::MAX),
            retained_segments: s.retained_segments.load(Ordering::Relaxed),
            retained_bytes: s.retained_bytes.load(Ordering::Relaxed),
            open_files: s.segments.open_files() as u64,
        }
    }

    /// Stop accepting writes, drain the channel, fsync, and join the writer thread. Blocking;
    /// idempotent.
    pub fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let Some(handle) = self.inner.thread.lock().take() else {
            return;
        };
        let _ = self.inner.tx.send(Msg::Shutdown);
        if handle.join().is_err() {
            tracing::error!("the log writer thread panicked");
        }
        // The writer has applied everything: the last snapshot covers the whole log.
        if let Some(h) = self.inner.snap_thread.lock().take() {
            let _ = self.inner.snap_tx.send(snapshot::SnapMsg::Stop);
            if h.join().is_err() {
                tracing::error!("the snapshot thread panicked");
            }
        }
    }

    /// Take a snapshot of the feature tables now and wait for it. Blocking.
    pub fn snapshot_now(&self) -> std::io::Result<snapshot::SnapInfo> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.inner
            .snap_tx
            .send(snapshot::SnapMsg::Now(tx))
            .map_err(|_| std::io::Error::other("the snapshot thread has stopped"))?;
        rx.recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the snapshot thread has stopped")))
    }

    /// When the newest snapshot was written (ms since the epoch), and how many were written
    /// and failed since start.
    pub fn snapshot_stats(&self) -> SnapshotStats {
        let s = &self.inner.snap_status;
        let last = s.last_created_ms.load(Ordering::Relaxed);
        SnapshotStats {
            last_created_ms: (last != 0).then_some(last),
            written: s.written.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            last_bytes: s.last_bytes.load(Ordering::Relaxed),
        }
    }
}

/// How retention asks the snapshot thread for a snapshot: it waits at most a minute.
fn take_snapshot(tx: flume::Sender<snapshot::SnapMsg>) -> log::state::TakeSnapshot {
    Box::new(move || {
        let (reply, rx) = std::sync::mpsc::channel();
        tx.send(snapshot::SnapMsg::Now(reply))
            .map_err(|_| std::io::Error::other("the snapshot thread has stopped"))?;
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(done) => done.map(|_| ()),
            Err(e) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, e)),
        }
    })
}

/// Snapshot counters (metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub last_created_ms: Option<i64>,
    pub written: u64,
    pub failed: u64,
    pub last_bytes: u64,
}

/// The metadata of a stream whose events were all retained away.
fn orphan(e: &index::carry::CarryEntry, shard: u32) -> StreamInfo {
    StreamInfo {
        stream: e.name.clone(),
        shard,
        first_seq: e.last_seq + 1,
        last_seq: e.last_seq,
        events: 0,
        bytes: 0,
        first_ts: None,
        last_ts: None,
    }
}
