//! Public types of the storage engine: configuration here; requests and outcomes
//! ([`write`]), metadata, queries and reports ([`read`]), errors ([`error`]).

mod error;
mod read;
mod write;

pub use error::*;
pub use read::*;
pub use write::*;

use crate::vfs::{RealFs, Vfs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Descriptors of sealed segments and index files kept open for readers, by default.
pub const FILE_CACHE: usize = 256;

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

/// Durability levels of docs/API.md §3, weakest first (the derived order is meaningful).
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

/// `retention.*` (docs/API.md §5): whole sealed segments are removed, oldest first, once older than
/// `max_age` (by their newest append time) or while the log is larger than `max_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

/// Engine configuration (the `storage.*` and dedup keys of docs/CONFIG.md).
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
    /// `features.apply_threads`: threads that apply the feature tables, each owning fixed
    /// shards (at least 1; at most one per shard). Default [`default_apply_threads`].
    pub apply_threads: usize,
    /// A group of fewer record bytes than this is applied to the feature tables where it is
    /// handed over rather than on the apply threads (an engine setting, not a config key:
    /// tests set 0 so that every group reaches the threads).
    pub apply_in_place_bytes: usize,
    /// Whether event-batch records feed the feature tables (single-node mode, the default).
    /// Cluster mode sets it to `false`: the tables are then fed by entity-events records
    /// ([`crate::Store::write_entity_events`]), feature puts and deletes only. Keep it the
    /// same across restarts of a data dir: start-up replays the log with the current value.
    pub features_from_events: bool,
    /// Whether `storage.max_streams` and `storage.max_feature_bytes` refuse writes (507).
    /// Cluster mode sets it to `false`: its records were acknowledged by Kafka before they
    /// reach this store, and every replica must apply a partition alike whatever else it
    /// holds, so past a limit it applies and warns instead of refusing (docs/CLUSTER.md).
    pub refuse_at_limits: bool,
    /// `storage.snapshot_interval`: how often the feature tables are snapshotted.
    pub snapshot_interval: Duration,
    /// Descriptors of sealed segments and index files kept open for readers (an LRU cache);
    /// the active segment and the data dir lock take two more.
    pub open_files: usize,
    /// `storage.index_cache_bytes`: bytes of sealed index files' pages kept in memory for
    /// readers (`crate::index::pages`); 0 keeps none.
    pub index_cache_bytes: u64,
    /// Capacity, in requests, of the channel to the writer thread.
    pub channel_capacity: usize,
    /// Truncate a bad record outside the active tail instead of refusing to start.
    pub repair: bool,
    pub observer: Option<Arc<dyn Observer>>,
    /// The file system under the log: the real disk, or a simulated one in tests.
    pub vfs: Arc<dyn Vfs>,
}

/// Groups whose records take fewer bytes than this are applied to the feature tables where
/// they are handed over (by the writer, after the groups out) rather than on the apply
/// threads: about a hundred events, a few dozen microseconds of apply, about what waking a
/// thread costs (the Redis protocol's `HSET` at depth 1 measured 5% fewer operations a
/// second when every group was handed over).
pub const APPLY_IN_PLACE_BYTES: usize = 16 << 10;

/// `features.apply_threads` when none is set: half the cores this process may run on (its
/// CPU affinity and cgroup quota, as the standard library reads them), at least 1. Half,
/// because the other half decodes requests and answers them (the tokio workers), and the
/// feature store is one part of a request's work among several.
pub fn default_apply_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
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
            apply_threads: default_apply_threads(),
            apply_in_place_bytes: APPLY_IN_PLACE_BYTES,
            features_from_events: true,
            refuse_at_limits: true,
            snapshot_interval: Duration::from_secs(300),
            open_files: FILE_CACHE,
            index_cache_bytes: 64 << 20,
            channel_capacity: 4096,
            repair: false,
            observer: None,
            vfs: Arc::new(RealFs),
        }
    }
}
