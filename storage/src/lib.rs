//! `vx-storage` owns durability and the read path: the node-wide append-only log (segments,
//! record format, checksums, group commit, recovery), per-stream `seq` and run index, the dedup
//! table, and replay cursors over the log. It knows nothing of HTTP or input formats.
//!
//! # Layout
//! - [`api`]: configuration, requests, outcomes and errors.
//! - `record`: the on-disk record format (documented byte by byte there).
//! - `segment`: segment files, naming, rolling, the data-dir lock and metadata.
//! - `recovery`: scanning the log at start-up, truncating a torn tail.
//! - `index`: the reader-facing per-shard stream index and run index.
//! - `dedup`: per-shard tables of remembered ids.
//! - `writer`: the single writer thread (group commit).
//! - `reader`: replay cursors.

pub mod api;
mod dedup;
mod index;
mod reader;
pub mod record;
mod recovery;
mod segment;
mod writer;

pub use api::*;
pub use reader::Cursor;
pub use segment::{DEFAULT_SHARDS, LOCK_FILE, LOG_DIR, META_FILE};

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread::JoinHandle;
use tokio::sync::oneshot;
use writer::{Msg, Shared, Writer};

/// Handle to the storage engine; cheap to clone and share.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    tx: flume::Sender<Msg>,
    shared: Arc<Shared>,
    shards: u32,
    mode: FsyncMode,
    closed: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Store {
    /// Lock the data dir, recover the log and start the writer thread. Blocking.
    pub fn open(cfg: StorageConfig) -> Result<(Store, RecoveryReport), OpenError> {
        let dir = segment::DataDir::open(&cfg.data_dir, cfg.shards)?;
        let shards = dir.meta.shards;
        let shared = Arc::new(Shared {
            index: index::Index::new(shards),
            segments: segment::Segments::default(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(String::new()),
            horizons: (0..shards).map(|_| AtomicI64::new(i64::MIN)).collect(),
        });
        let rec = recovery::recover(
            &dir,
            &cfg,
            &shared.index,
            &shared.segments,
            writer::now_ms(),
        )?;
        for (i, t) in rec.dedup.iter().enumerate() {
            if let (Some(h), Some(oldest)) = (shared.horizons.get(i), t.oldest_ms()) {
                h.store(oldest, Ordering::Relaxed);
            }
        }
        let report = rec.report.clone();
        tracing::info!(
            segments = report.segments,
            records = report.records,
            events = report.events,
            streams = report.streams,
            truncated_bytes = report.truncated_bytes,
            took_ms = report.took.as_millis() as u64,
            "log recovered"
        );
        let (tx, rx) = flume::bounded(cfg.channel_capacity.max(1));
        let mode = cfg.fsync;
        let w = Writer {
            shared: Arc::clone(&shared),
            shards,
            dedup_key: dir.meta.dedup_key,
            log_dir: dir.log_dir(),
            active: rec.active,
            active_path: rec.active_path,
            active_len: rec.active_len,
            active_first: rec.active_first,
            next_lsn: rec.next_lsn,
            streams: rec.streams,
            dedup: rec.dedup,
            cfg,
            _dir: dir,
        };
        let thread = std::thread::Builder::new()
            .name("vx-log-writer".into())
            .spawn(move || w.run(rx))
            .map_err(|source| OpenError::Io {
                context: "starting the log writer thread".into(),
                source,
            })?;
        Ok((
            Store {
                inner: Arc::new(Inner {
                    tx,
                    shared,
                    shards,
                    mode,
                    closed: AtomicBool::new(false),
                    thread: Mutex::new(Some(thread)),
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

    /// Append a request; resolves once it reached its durability level (or failed).
    pub async fn write(&self, req: WriteRequest) -> Result<WriteOutcome, WriteError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(WriteError::ShuttingDown);
        }
        if self.is_poisoned() {
            return Err(WriteError::Poisoned(
                self.inner.shared.poison_reason.lock().clone(),
            ));
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::Write(req, tx))
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// One stream's metadata, if it exists (visible events only).
    pub fn stream(&self, name: &str) -> Option<StreamInfo> {
        self.inner.shared.index.info(self.shard_of(name), name)
    }

    /// Streams sorted bytewise by name, starting after `after`, at most `limit`; the second
    /// value is the name to pass as `after` for the next page, if there are more.
    pub fn list_streams(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<StreamInfo>, Option<String>) {
        let index = &self.inner.shared.index;
        let (names, more) = index.names(prefix, after, limit);
        let infos: Vec<StreamInfo> = names
            .iter()
            .filter_map(|(name, shard)| index.info(*shard, name))
            .collect();
        let next = if more {
            infos.last().map(|i| i.stream.clone())
        } else {
            None
        };
        (infos, next)
    }

    /// Number of streams.
    pub fn stream_count(&self) -> usize {
        self.inner.shared.index.stream_count()
    }

    /// Open a replay cursor; `None` for an unknown stream. Blocking I/O happens in
    /// [`Cursor::next_event`]: call it from a blocking context.
    pub fn read(&self, stream: &str, q: ReadQuery) -> Option<Cursor> {
        Cursor::open(
            Arc::clone(&self.inner.shared),
            self.shard_of(stream),
            stream,
            q,
        )
    }

    /// Requests waiting in the channel to the writer.
    pub fn queue_len(&self) -> usize {
        self.inner.tx.len()
    }

    pub fn queue_capacity(&self) -> usize {
        self.inner.tx.capacity().unwrap_or(0)
    }

    /// True after a failed fsync: the store refuses writes until restart.
    pub fn is_poisoned(&self) -> bool {
        self.inner.shared.poisoned.load(Ordering::Acquire)
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
    }
}
