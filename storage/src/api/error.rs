//! The engine's errors: opening the data dir, writing, reading; an I/O failure keeps its
//! cause.

use std::path::PathBuf;
use std::sync::Arc;

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

/// Why the store refuses every write until restart.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PoisonCause {
    /// A write, truncation or fsync of the log failed for a reason other than space: what the
    /// file holds is unknown.
    #[error("{0}")]
    Io(#[from] IoFailure),
    /// The feature tables did not take a record the log holds: they no longer follow the log,
    /// and a restart rebuilds them from it (docs/FEATURES.md).
    #[error(
        "the feature tables did not take the record at LSN {lsn} ({source}); restart to rebuild them from the log"
    )]
    Features {
        lsn: u64,
        #[source]
        source: Arc<crate::feed::FeedError>,
    },
}

/// Two causes are the same when they say the same (the errors inside have no equality).
impl PartialEq for PoisonCause {
    fn eq(&self, other: &PoisonCause) -> bool {
        match (self, other) {
            (PoisonCause::Io(a), PoisonCause::Io(b)) => a == b,
            (PoisonCause::Features { .. }, PoisonCause::Features { .. }) => {
                self.to_string() == other.to_string()
            }
            _ => false,
        }
    }
}

impl Eq for PoisonCause {}

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
    /// A write, fsync or truncation of the log failed for a reason other than space (EIO, …),
    /// so what reached the disk is unknown; or the feature tables did not take a record. The
    /// store refuses every write until restart.
    #[error("storage refuses writes until restart: {0}")]
    Poisoned(PoisonCause),
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
    /// Cluster mode: a record whose origin offset is not above the last one applied of its
    /// partition. Origins of a partition arrive in offset order, so this one was applied
    /// already (or the caller lost its place); it is refused rather than applied twice.
    #[error(
        "origin offset {offset} of {topic:?} partition {partition} is not after {applied}, the last one applied"
    )]
    OriginNotAfter {
        topic: super::OriginTopic,
        partition: u32,
        offset: u64,
        applied: u64,
    },
    /// A shard (or partition, which is a shard) the store does not have.
    #[error("shard {shard} does not exist: the store has {shards} shards")]
    UnknownShard { shard: u32, shards: u32 },
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

impl ReadError {
    /// A read in [`crate::vfs::cached_only`] mode found bytes not in the page cache: read
    /// again where waiting for the disk is allowed.
    pub fn is_uncached(&self) -> bool {
        matches!(self, ReadError::Io(e) if crate::vfs::would_block(e))
    }
}
