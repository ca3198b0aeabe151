//! The log: the node-wide append-only sequence of records that everything else is derived
//! from.
//!
//! - [`record`]: the on-disk record format (byte by byte there) and its decoders.
//! - [`segment`]: the data dir, its lock and metadata, file names, the segment registry;
//!   `active`: the active segment as the writer holds it; `streams`: the streams' `seq`s as
//!   the writer assigns them; `origins`: cluster mode's applied offsets and shard resets.
//! - [`state`]: the writer's state, and what changes it besides appending: making runs and
//!   tombstones visible; `seal`: sealing the active segment; `retention`: retention and the
//!   carry file.
//! - [`writer`]: the writer thread and group commit.
//! - [`source`]: the engine's input seam: a durable record at its source position, applied.
//! - [`recovery`]: start-up, which rebuilds the writer's state from the data dir.

mod active;
mod origins;
pub mod record;
pub(crate) mod recovery;
mod retention;
mod seal;
pub(crate) mod segment;
pub(crate) mod source;
pub(crate) mod state;
mod streams;
pub(crate) mod writer;
