//! Public types of the storage engine: configuration, requests, outcomes, errors.

use crate::vfs::{RealFs, Vfs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vx_proto::Batch;

/// Descriptors of sealed segments and index files kept open for readers, by default.
pub const FILE_CACHE: usize = 256;

/// Where a batch was made durable first, in the order of its source: the storage engine
/// applies batches in this order and remembers the last one it applied (the engine's input
/// seam, `log/source.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourcePos {
    /// The local log: the LSN of the record holding the batch.
    Lsn(u64),
}

/// `storage.fsync`: when the writer fsyncs, and so the default durability of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncMode {
    /// Every group is fdatasync'ed before it is acknowledged (default durability `fsync`).
    Always,
    /// Acknowledge after the write; fsync at least every `fsync_interval` (durability `write`).
    Interval,
    /// Acknowledge after the write; leave syncing to the OS (durability `write`).
    Never,
}

impl FsyncMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "always" => Some(Self::Always),
            "interval" => Some(Self::Interval),
            "never" => Some(Self::Never),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Interval => "interval",
            Self::Never => "never",
        }
    }

    /// The durability a request reaches by default, and the level at which records become
    /// visible to readers.
    pub fn durability(self) -> Durability {
        match self {
            Self::Always => Durability::Fsync,
            Self::Interval | Self::Never => Durability::Write,
        }
    }
}

/// Durability levels of SPEC §3, weakest first (the derived order is meaningful).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Durability {
    /// Acknowledged once `seq`s are assigned, before the write.
    None,
    /// Acknowledged after the write to the OS.
    Write,
    /// Acknowledged after an fdatasync that covers the record.
    Fsync,
}

impl Durability {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(Self::None),
            "write" => Some(Self::Write),
            "fsync" => Some(Self::Fsync),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Write => "write",
            Self::Fsync => "fsync",
        }
    }
}

/// Hooks through which the engine reports what it does, so the binary can keep metrics
/// without the engine knowing about Prometheus. Called from the writer thread: keep them cheap.
pub trait Observer: Send + Sync {
    fn fsync(&self, _took: Duration) {}
    /// A group was written: records, events stored, bytes written.
    fn appended(&self, _records: u64, _events: u64, _bytes: u64) {}
    /// A segment was sealed (its index file written) after `took`.
    fn sealed(&self, _took: Duration) {}
    /// Retention removed a segment of `bytes` (log and index file).
    fn retained(&self, _bytes: u64) {}
}

/// `retention.*` (SPEC §5): whole sealed segments are removed, oldest first, once older than
/// `max_age` (by their newest append time) or while the log is larger than `max_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

/// Engine configuration (the `storage.*` and dedup keys of SPEC §1).
#[derive(Clone)]
pub struct StorageConfig {
    pub data_dir: PathBuf,
    /// `None`: the count recorded in the data dir, or 128 for a new one.
    pub shards: Option<u32>,
    pub fsync: FsyncMode,
    pub fsync_interval: Duration,
    /// A segment is rolled once it reaches this size.
    pub segment_bytes: u64,
    /// A segment is also rolled once its in-memory index (spans) reaches this many bytes, so
    /// that the active segment's index stays bounded whatever the request sizes.
    pub active_index_bytes: u64,
    pub retention: Retention,
    pub dedup_window: Duration,
    pub dedup_memory: u64,
    pub max_streams: u64,
    /// Declared aggregates (`features`).
    pub features: Vec<crate::features::FeatureDecl>,
    /// `storage.max_feature_bytes`: past it, writes creating entities or features are refused.
    pub max_feature_bytes: u64,
    /// `storage.snapshot_interval`: how often the feature tables are snapshotted.
    pub snapshot_interval: Duration,
    /// Descriptors of sealed segments and index files kept open for readers (an LRU cache);
    /// the active segment and the data dir lock take two more.
    pub open_files: usize,
    /// Capacity, in requests, of the channel to the writer thread.
    pub channel_capacity: usize,
    /// Truncate a bad record outside the active tail instead of refusing to start.
    pub repair: bool,
    pub observer: Option<Arc<dyn Observer>>,
    /// The file system under the log: the real disk, or a simulated one in tests.
    pub vfs: Arc<dyn Vfs>,
}

impl StorageConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        StorageConfig {
            data_dir: data_dir.into(),
            shards: None,
            fsync: FsyncMode::Always,
            fsync_interval: Duration::from_millis(100),
            segment_bytes: 128 << 20,
            active_index_bytes: 16 << 20,
            retention: Retention::default(),
            dedup_window: Duration::from_secs(600),
            dedup_memory: 64 << 20,
            max_streams: 1_000_000,
            features: Vec::new(),
            max_feature_bytes: 4 << 30,
            snapshot_interval: Duration::from_secs(300),
            open_files: FILE_CACHE,
            channel_capacity: 4096,
            repair: false,
            observer: None,
            vfs: Arc::new(RealFs),
        }
    }
}

/// One request to append: all of its events are stored in one record, or none is.
pub struct WriteRequest {
    pub batch: Batch,
    /// Requested level (`X-Vx-Durability`); `None` means the mode's default.
    pub durability: Option<Durability>,
    /// `X-Vx-Expected-Last-Seq`: only valid when the batch holds a single stream.
    pub expected_last_seq: Option<u64>,
    /// Dropped once the request is applied (or refused): releases the admission reservation.
    pub guard: Option<Box<dyn Send>>,
}

/// Result of a stored request: SPEC §3's 200 body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    pub accepted: u64,
    pub duplicates: u64,
    /// Per stream, in first-appearance order: highest `seq` newly assigned, or the stored `seq`
    /// of the duplicate when all of the stream's events were duplicates.
    pub last_seq: Vec<(String, u64)>,
    pub durability: Durability,
}

/// An I/O error of the log's writer, with what it was doing: the error keeps its kind, so a
/// full disk is told apart from a failing one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{context}: {source}")]
pub struct IoFailure {
    pub context: String,
    #[source]
    pub source: Arc<std::io::Error>,
}

impl IoFailure {
    pub fn new(context: impl Into<String>, source: std::io::Error) -> IoFailure {
        IoFailure {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    pub fn kind(&self) -> std::io::ErrorKind {
        self.source.kind()
    }

    /// The disk or the quota is full (ENOSPC, EDQUOT): writes can resume once space returns.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    }
}

/// Two failures are the same when they say the same and have the same kind (`io::Error` has
/// no equality of its own).
impl PartialEq for IoFailure {
    fn eq(&self, other: &IoFailure) -> bool {
        self.context == other.context
            && self.kind() == other.kind()
            && self.source.to_string() == other.source.to_string()
    }
}

impl Eq for IoFailure {}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("expected last seq {expected} of stream {stream:?}, but it is {last_seq}")]
    Conflict {
        stream: String,
        expected: u64,
        last_seq: u64,
    },
    /// No space for the write (ENOSPC, EDQUOT), or a segment that cannot be rolled has grown
    /// to what its index can address: this request was refused and its partial bytes cut off.
    /// Writes resume when space returns.
    #[error("storage full: {0}; writes resume when space returns")]
    StorageFull(IoFailure),
    /// A write, fsync or truncation of the log failed for a reason other than space (EIO, …):
    /// what reached the disk is unknown, so the store refuses every write until restart.
    #[error("storage refuses writes until restart: {0}")]
    Poisoned(IoFailure),
    #[error("stream limit reached: storage.max_streams is {max}")]
    TooManyStreams { max: u64 },
    #[error("feature table limit reached: storage.max_feature_bytes is {max}")]
    FeatureBudget { max: u64 },
    /// A record over the log's limit; config checks at start-up make it unreachable.
    #[error("{0}")]
    TooLarge(#[from] crate::log::record::TooLarge),
    /// `DELETE` of a stream that does not exist (or is deleted already).
    #[error("unknown stream {stream:?}")]
    NotFound { stream: String },
    #[error("the storage engine is shutting down")]
    ShuttingDown,
}

/// A direct feature write (SPEC §6 `PUT` / `DELETE /v1/features/...`): one log record.
pub struct FeatureWrite {
    pub entity: String,
    pub op: FeatureOp,
    pub durability: Option<Durability>,
    /// Dropped once the request is applied (or refused): releases the admission reservation.
    pub guard: Option<Box<dyn Send>>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FeatureOp {
    /// Set values; `None` deletes that feature.
    Put(Vec<(String, Option<crate::features::FeatureValue>)>),
    /// Delete one feature, or (`None`) the whole entity.
    Delete(Option<String>),
}

/// What a direct feature write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureOutcome {
    pub set: u64,
    pub deleted: u64,
    /// The entity (for a delete of one feature: the feature) existed.
    pub found: bool,
    pub durability: Durability,
}

/// A stream deleted (SPEC §5 `DELETE /v1/streams/{stream}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The stream's last seq: a later write continues at `last_seq + 1`.
    pub last_seq: u64,
    pub durability: Durability,
}

/// What start-up found and did.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub segments: u64,
    pub records: u64,
    pub events: u64,
    pub streams: u64,
    /// Bytes cut off the active segment's torn tail (warned about).
    pub truncated_bytes: u64,
    /// Index files read, and segments scanned record by record (the active one, those whose
    /// index was missing, and those holding ids within the dedup window).
    pub index_files: u64,
    pub scanned_segments: u64,
    /// Stray files of an interrupted roll or write that were removed.
    pub removed_strays: u64,
    pub took: Duration,
    /// The feature tables: the snapshot loaded and the log replayed after it.
    pub features: crate::snapshot::FeatureBoot,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {path} is locked by another process")]
    Locked { path: PathBuf },
    #[error("data dir {path} was created with {recorded} shards, but {requested} were requested")]
    ShardMismatch {
        path: PathBuf,
        recorded: u32,
        requested: u32,
    },
    #[error(
        "corrupt record in {file} at offset {offset}: {reason} (start with --repair to truncate it, losing {loses})"
    )]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
        loses: String,
    },
    #[error("bad metadata in {path}: {reason}")]
    Meta { path: PathBuf, reason: String },
    #[error("{key}: {reason}")]
    Config { key: String, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Per-stream metadata of SPEC §5 (`GET /v1/streams/{stream}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub stream: String,
    pub shard: u32,
    pub first_seq: u64,
    pub last_seq: u64,
    pub events: u64,
    pub bytes: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

/// A stream among the largest, as the status page lists them (and serializes them, in this
/// field order): counters only, no ts range (that may need index files).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TopStream {
    pub stream: String,
    /// Retained events and their bytes.
    pub events: u64,
    pub bytes: u64,
    pub last_seq: u64,
    pub shard: u32,
}

/// What retention and the log look like now (for metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub segments: u64,
    pub bytes: u64,
    /// Append time of the oldest retained record, ms since the epoch.
    pub oldest_append_ms: Option<i64>,
    /// Sealed segments, and their bytes (log and index file), removed by retention since start.
    pub retained_segments: u64,
    pub retained_bytes: u64,
    /// Descriptors of sealed segments and index files open for readers.
    pub open_files: u64,
}

/// A replay query (SPEC §5); the engine applies every filter.
#[derive(Clone, Debug, Default)]
pub struct ReadQuery {
    pub from: Option<u64>,
    pub to: Option<u64>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub types: Option<Vec<String>>,
    pub entity: Option<String>,
    pub limit: u64,
}

impl ReadQuery {
    /// Any of the exact filters (`since`, `until`, `types`, `entity`) is set.
    pub fn filtered(&self) -> bool {
        self.since.is_some()
            || self.until.is_some()
            || self.types.is_some()
            || self.entity.is_some()
    }

    /// Whether an event with this `ts`, type and entity passes the exact filters (the seq
    /// range and the limit are the reader's). One definition for replay cursors and for live
    /// followers, which filter encoded events by their bytes.
    pub fn keeps(&self, ts: i64, ty: &[u8], entity: Option<&[u8]>) -> bool {
        if self.since.is_some_and(|s| ts < s) || self.until.is_some_and(|u| ts >= u) {
            return false;
        }
        if let Some(types) = &self.types
            && !types.iter().any(|t| t.as_bytes() == ty)
        {
            return false;
        }
        if let Some(want) = &self.entity
            && entity.unwrap_or_default() != want.as_bytes()
        {
            return false;
        }
        true
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("reading the log: {0}")]
    Io(#[from] std::io::Error),
    /// Retention removed events of the range while it was being read; asking again from
    /// `next_seq` starts at `first_seq`.
    #[error(
        "events of stream {stream:?} from seq {next_seq} were removed (retention or a delete) while being read; the first retained seq is now {first_seq}"
    )]
    Retained {
        stream: String,
        next_seq: u64,
        first_seq: u64,
    },
}
