//! The feature store (docs/API.md §6): per entity, named values kept current from the log: the
//! built-ins (`events`, `last_ts`), counters and gauges from events, values written directly
//! (PUT/DELETE), and declared aggregates over sliding windows or all time.
//!
//! # Layout
//! - `decl`: feature values, the declarations and their start-up checks.
//! - `store`: [`Features`], the sharded tables and their counters.
//! - `names`, `table`: a shard's name ids and its entity map (the tables' data).
//! - `apply`: the one way the tables change, record by record in log order.
//! - [`parallel`]: the apply threads, each owning fixed shards, and a record cut into their
//!   slices.
//! - `value`, `window`, `hll`: what a record does to a plain value, a windowed or all-time
//!   aggregate, a `distinct` sketch; `incr`: increments applied to the tables; `number`:
//!   stored values read as numbers, and what an increment does to one.
//! - `budget`: `storage.max_feature_bytes`, reserved before a record is written.
//! - `read`: the query API.
//! - [`snapshot`]: the snapshot file format, its writer, loader and checker.
//!
//! # The apply interface
//! The storage engine's writer is the only caller that changes the tables. After a record
//! reached the mode's durability and before its request is answered, it hands the record's
//! contents over as typed values — [`Features::events`] then [`RecordEvents::apply`] per
//! event, [`Features::put`], [`Features::incr`], [`Features::delete`], [`Features::reset_shard`] (cluster mode:
//! one shard's copy discarded) — with the record's [`LogPos`]; after each
//! group it marks the LSN everything is applied through ([`Features::applied_through`]).
//! Recovery replays the same records through the same calls, in the same order, with a
//! [`Replay`] saying what the loaded snapshot covers, so it rebuilds the same state; a read
//! after an ack sees the write.
//!
//! The crate takes typed values rather than storage's record bytes: the record format stays
//! storage's alone (vx-storage decodes, in `feed.rs`), the tables can be replaced behind these
//! calls (issue 19), and storage decides which records feed them (in cluster mode the events
//! of `T.entities`, written as entity-events records, rather than every event batch). The cost
//! is one small loop over a record's runs on storage's side.
//!
//! A record the tables cannot take is an [`ApplyError`], never a log line: the caller must
//! stop trusting the tables (the storage engine poisons itself; docs/FEATURES.md).

mod apply;
mod budget;
mod cost;
mod decl;
mod hll;
mod incr;
mod index;
mod names;
mod number;
mod ordered;
pub mod parallel;
mod prefetch;
mod read;
mod rec;
pub mod snapshot;
mod state;
mod store;
mod table;
mod value;
mod window;

pub use apply::{ApplyError, DirectApplied, LogPos, RecordEvents, Replay};
pub use decl::Reading;
pub use decl::{
    Agg, BUCKETS, DeclError, DistinctOf, EVENTS, FeatureDecl, FeatureValue, LAST_TS, MAX_FUTURE_MS,
    MAX_PUT_NAMES, MAX_STRING_VALUE, MAX_WINDOW, MIN_WINDOW, check_decls, valid_name,
};
pub use number::{IncrRefused, Increment, Incremented, float_of, int_of};
pub use read::{EntityRead, PREFETCH_READS, ReadAt};
pub use store::{FeatureStats, Features};
pub use table::entity_hash;
