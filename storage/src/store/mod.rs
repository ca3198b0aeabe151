//! [`Store`], the handle to the storage engine: opening it (recovery, the feature tables'
//! bootstrap, the writer and snapshot threads), the write side, and shutdown. The read side
//! (stream metadata, listings, replay cursors, watches) is in [`streams`]; what cluster mode
//! adds (entity events, shard resets, applied origins) in [`cluster`].

mod cluster;

pub use cluster::{OriginRecord, Submit, Submitted, Ticket};
mod streams;

use crate::api::*;
use crate::apply::Applier;
use crate::log::state::{Published, TakeSnapshot};
use crate::log::writer::Msg;
use crate::{check_config, dedup, features, recovery, snapshot};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use tokio::sync::oneshot;
use vx_proto::Batch;

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
    /// Threads applying the feature tables (`features.apply_threads`, as started).
    apply_threads: usize,
    /// `storage.max_streams`, for cluster mode's published usage.
    max_streams: u64,
}

impl Store {
    /// Lock the data dir, recover the log and start the writer thread. Blocking.
    pub fn open(cfg: StorageConfig) -> Result<(Store, RecoveryReport), OpenError> {
        check_config(&cfg)?;
        let capacity = cfg.channel_capacity.max(1);
        let mode = cfg.fsync;
        let snapshot_interval = cfg.snapshot_interval;
        let max_streams = cfg.max_streams;
        let (mut engine, mut report) = recovery::open(cfg.clone(), vx_sys::now_ms())?;
        let mut applier =
            Applier::start(Arc::clone(&engine.shared.features), &cfg).map_err(|source| {
                OpenError::Io {
                    context: "starting the feature apply threads".into(),
                    source,
                }
            })?;
        let (boot, kept) = snapshot::bootstrap(&engine, &mut applier)?;
        tracing::info!(
            snapshot = boot.snapshot.as_ref().map(|p| p.display().to_string()),
            skipped = boot.skipped.len(),
            entities = boot.entities,
            replayed_records = boot.replayed_records,
            recomputed = ?boot.recomputed,
            apply_threads = applier.threads(),
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
        let apply_threads = applier.threads();
        let dedup_key = engine.dedup_key();
        let (tx, rx) = flume::bounded(capacity);
        let thread = std::thread::Builder::new()
            .name("vx-log-writer".into())
            .spawn(move || engine.run(applier, rx))
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
                    apply_threads,
                    max_streams,
                }),
            },
            report,
        ))
    }

    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    /// Threads applying the feature tables (`features.apply_threads`, at most one per shard).
    pub fn apply_threads(&self) -> usize {
        self.inner.apply_threads
    }

    /// `storage.max_streams`.
    pub fn max_streams(&self) -> u64 {
        self.inner.max_streams
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
            .send_async(Msg::Write(
                req,
                tx,
                vx_sys::caller_span(),
                std::time::Instant::now(),
            ))
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// A direct feature write (docs/API.md §6): one durable record, applied before it resolves.
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

    /// Delete a stream (docs/API.md §5): a durable tombstone; `NotFound` if it does not exist.
    /// `origin`: cluster mode's Kafka offset of the delete (`None` in single-node mode).
    pub async fn delete(
        &self,
        stream: &str,
        durability: Option<Durability>,
        origin: Option<Origin>,
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
                origin,
                append_ms: None,
                reply: tx,
            })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
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
        let pages = s.segments.index_pages();
        LogStats {
            segments: all.len() as u64,
            bytes: all.iter().map(|i| i.log_len + i.idx_len).sum(),
            oldest_append_ms: all.iter().map(|i| i.min_append_ms).find(|&m| m != i64::MAX),
            retained_segments: s.retained_segments.load(Ordering::Relaxed),
            retained_bytes: s.retained_bytes.load(Ordering::Relaxed),
            open_files: s.segments.open_files() as u64,
            index_cache_bytes: pages.bytes,
            index_cache_hits: pages.hits,
            index_cache_misses: pages.misses,
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
fn take_snapshot(tx: flume::Sender<snapshot::SnapMsg>) -> TakeSnapshot {
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
