//! `vx-proto` owns the event model of Veltrix (docs/API.md §2): what an event is, the rules that make
//! it valid, its packed in-memory form, its canonical JSON output, the wire decoders that turn
//! request bytes into packed events one at a time, and the error type for bad input.
//! It knows nothing of sockets, threads or files.
//!
//! # Layout
//! - [`event`]: kinds, numbers, [`EventView`].
//! - [`rules`]: the field rules of docs/API.md §2, which every decoder checks through.
//! - [`packed`]: [`Batch`], one request's events grouped by stream in the log's event layout.
//! - [`decode`]: incremental NDJSON, JSON and YAML decoders feeding a [`Batch`].
//! - [`frames`]: the binary frames protocol (docs/PROTOCOL.md): framing, batch and event
//!   codecs, the HTTP frames body decoder, replay output frames.
//! - [`canonical`]: the canonical JSON form used for replay.
//! - [`canonical_yaml`]: the same content as YAML documents, for replay in YAML.
//! - [`shard`]: the stream → shard hash shared by routing and storage.
//! - [`le`]: the little-endian reader and writers of every binary format (frames, and
//!   storage's records, index files and carry file).
//! - [`sse`]: the incremental, bounded Server-Sent Events parser of every follow client.
//! - [`resp`]: the Redis protocol of the feature listener: the bounded command parser and the
//!   reply writer.
//! - [`error`]: [`InputError`] and its classes.

pub mod canonical;
pub mod canonical_yaml;
pub mod decode;
pub mod error;
pub mod event;
pub mod frames;
pub mod le;
pub mod packed;
pub mod resp;
pub mod rules;
pub mod shard;
pub mod sse;
#[cfg(feature = "testing")]
pub mod testing;
pub mod xadd;

pub use error::{ErrorClass, ErrorCode, InputError};
pub use event::{EventView, Kind, Num};
pub use packed::{Batch, Run};
