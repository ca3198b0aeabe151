//! Writes: requests, their outcomes, and where a durable batch came from.

use super::Durability;
use vx_proto::Batch;

/// Where a batch was made durable first, in the order of its source: the storage engine
/// applies batches in this order and remembers the last one it applied (the engine's input
/// seam, `log/source.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourcePos {
    /// The local log: the LSN of the record holding the batch.
    Lsn(u64),
}

/// The Kafka topic a record was consumed from in cluster mode: `T` (one partition per shard,
/// keyed by stream) or `T.entities` (one partition per shard, keyed by entity). On disk it is
/// the origin's `topic` byte (docs/ARCHITECTURE.md, "Record format").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OriginTopic {
    Streams = 0,
    Entities = 1,
}

impl OriginTopic {
    /// The topic of an origin's `topic` byte; `None` for any other value.
    pub fn from_u8(b: u8) -> Option<OriginTopic> {
        match b {
            0 => Some(OriginTopic::Streams),
            1 => Some(OriginTopic::Entities),
            _ => None,
        }
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Where a record came from in cluster mode: a Kafka offset of one partition of one topic.
/// A record written with an origin carries it on disk, and the store remembers, per
/// (topic, partition), the largest offset it applied ([`crate::Store::applied_offset`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    pub topic: OriginTopic,
    /// The partition: partition p is shard p, so it is below the store's shard count.
    pub partition: u32,
    pub offset: u64,
}

impl Origin {
    /// Per (topic, partition) the largest offset applied, as origins sorted by (topic,
    /// partition): what the writer publishes, what an index file records.
    pub fn list(applied: &std::collections::BTreeMap<(OriginTopic, u32), u64>) -> Vec<Origin> {
        applied
            .iter()
            .map(|(&(topic, partition), &offset)| Origin {
                topic,
                partition,
                offset,
            })
            .collect()
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
    /// Cluster mode: the Kafka offset this request was consumed at (`None` in single-node
    /// mode). Refused with [`crate::WriteError::OriginNotAfter`] unless it is above the last
    /// offset applied of its partition.
    pub origin: Option<Origin>,
    /// Cluster mode: the append time to record (ms since the epoch) instead of the writer's
    /// clock — the time the producing node took the request, carried in the Kafka record —
    /// so that every replica of a partition decides dedup windows and retention alike.
    pub append_ms: Option<i64>,
}

/// Events a write stored in one stream: seqs `first_seq ..= first_seq + count - 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRun {
    pub stream: String,
    pub first_seq: u64,
    pub count: u64,
}

/// Result of a stored request: docs/API.md §3's 200 body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    pub accepted: u64,
    pub duplicates: u64,
    /// Per stream, in first-appearance order: highest `seq` newly assigned, or the stored `seq`
    /// of the duplicate when all of the stream's events were duplicates.
    pub last_seq: Vec<(String, u64)>,
    pub durability: Durability,
    /// The newly stored events, per stream in the request's run order (duplicates left out;
    /// empty when every event was a duplicate), so that a caller can read them back.
    pub stored: Vec<StoredRun>,
    /// Where its time went in the engine (unset for an answer before the group's end: a
    /// level below the mode's).
    pub stages: Stages,
}

/// Where a write's time went inside the storage engine, for `vx_ingest_stage_seconds`
/// (docs/OPERATIONS.md): each request of a group gets its group's write, fsync and apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stages {
    /// When it was sent to the writer thread (admission is over).
    pub sent: Option<std::time::Instant>,
    /// In the writer's queue: from `sent` until its group began.
    pub queue: std::time::Duration,
    /// Its group planned and written (the group's one `pwrite`).
    pub write: std::time::Duration,
    /// Its group's fdatasync (zero without one).
    pub fsync: std::time::Duration,
    /// From the sync to the answer: made visible to readers, handed to the apply threads,
    /// applied to the feature tables.
    pub apply: std::time::Duration,
    /// When its answer was sent.
    pub answered: Option<std::time::Instant>,
}

/// A direct feature write (docs/API.md §6 `PUT` / `DELETE /v1/features/...`): one log record.
pub struct FeatureWrite {
    pub entity: String,
    pub op: FeatureOp,
    pub durability: Option<Durability>,
    /// Dropped once the request is applied (or refused): releases the admission reservation.
    pub guard: Option<Box<dyn Send>>,
    /// Cluster mode: the Kafka offset this write was consumed at (see [`WriteRequest::origin`]).
    pub origin: Option<Origin>,
    /// Cluster mode: the append time to record (see [`WriteRequest::append_ms`]).
    pub append_ms: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FeatureOp {
    /// Set values; `None` deletes that feature.
    Put(Vec<(String, Option<crate::features::FeatureValue>)>),
    /// Delete targets in one record, stored whole or not at all, applied in this order: each
    /// an entity and one of its features, or (`None`) all of it. One over HTTP; one per name
    /// or entity for the Redis protocol's `HDEL` and `DEL` of several. The write's `entity`
    /// is the first target's.
    Delete(Vec<(String, Option<String>)>),
    /// Add to feature `name` of the write's entity (the Redis protocol's `HINCRBY` and
    /// `HINCRBYFLOAT`): a record of its own, the sum made when it applies, in log order
    /// (vx-features' `incr.rs`).
    Incr {
        name: String,
        by: crate::features::Increment,
    },
}

/// Bytes of a delete's targets (their entities and names): what it takes while it waits.
pub fn delete_bytes(targets: &[(String, Option<String>)]) -> usize {
    targets
        .iter()
        .map(|(e, n)| e.len() + n.as_ref().map_or(0, String::len))
        .sum()
}

/// What a direct feature write did.
#[derive(Clone, Debug, PartialEq)]
pub struct FeatureOutcome {
    pub set: u64,
    /// Of `set`, the features the entity did not have.
    pub added: u64,
    pub deleted: u64,
    /// The entity (for a delete of one feature: the feature) existed.
    pub found: bool,
    /// An increment's outcome: the new value, or why the value was left as it was.
    pub incremented: Option<crate::features::Incremented>,
    pub durability: Durability,
}

/// A stream deleted (docs/API.md §5 `DELETE /v1/streams/{stream}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The stream's last seq: a later write continues at `last_seq + 1`.
    pub last_seq: u64,
    pub durability: Durability,
}
