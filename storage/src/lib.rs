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
//! - `store`: [`Store`], the handle: open, write, shutdown; its read side (metadata,
//!   listings, cursors, watches).
//! - `read`: replay [`Cursor`]s over the log, and [`watch`] (what live followers wait on).
//! - `dedup`: per-shard remembered ids.
//! - [`features`]: the feature tables (the vx-features crate, re-exported), changed only
//!   through its apply interface, fed by `feed` with each applied record in log order, on
//!   the apply threads (`apply`: a durable group handed over, each thread applying the
//!   shards it owns);
//!   [`snapshot`]: where their snapshots live, the snapshot thread, and start-up's rebuild.
//! - [`check`]: offline verification of a data dir (`veltrix check`), with the readers above.

pub mod api;
mod apply;
pub mod check;
mod dedup;
pub use vx_features as features;
mod feed;
mod index;
mod log;
mod read;
pub mod sim;
pub mod snapshot;
mod store;
pub mod vfs;

pub use index::idxfile;
pub use index::pages;
pub use log::record;
use log::{recovery, segment};
pub use read::watch;

pub use api::*;
pub use feed::FeedError;
pub use read::cursor::Cursor;
pub use segment::{CARRY_FILE, DEFAULT_SHARDS, LOCK_FILE, LOG_DIR, META_FILE};
pub use store::{OriginRecord, SnapshotStats, Store, Submit, Submitted, Ticket};

/// The largest `storage.segment_bytes`: offsets inside a segment are 32-bit in the index
/// (a segment may pass its size by one group of records, up to 1 GiB).
pub const MAX_SEGMENT_BYTES: u64 = 2 << 30;
/// The smallest `storage.segment_bytes`.
pub const MIN_SEGMENT_BYTES: u64 = 512;
/// The largest `ingest.max_body_bytes`: a request is one record of at most 1 GiB.
pub const MAX_BODY_BYTES: u64 = (record::MAX_RECORD_LEN as u64) - (1 << 20);

/// Check the engine's settings against what the formats can hold (docs/CONFIG.md keys).
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
