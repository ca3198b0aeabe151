//! Reads and reports: stream metadata, replay queries, log statistics, what start-up found.

use std::time::Duration;

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

/// Per-stream metadata of docs/API.md §5 (`GET /v1/streams/{stream}`).
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
    /// The index page cache: bytes held, and page lookups answered from it or read.
    pub index_cache_bytes: u64,
    pub index_cache_hits: u64,
    pub index_cache_misses: u64,
}

/// A replay query (docs/API.md §5); the engine applies every filter.
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
