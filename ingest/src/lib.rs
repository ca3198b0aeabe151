//! `vx-ingest` turns an HTTP request body into a validated [`Batch`]: it picks the decoder from
//! the `Content-Type`, enforces the body size limit as bytes arrive, and holds the global
//! in-flight byte budget while a body is being decoded (docs/API.md §3, §4). It knows nothing of
//! HTTP types beyond a stream of byte chunks, nor of how shards store data.
//!
//! # Layout
//! - [`media`]: `Content-Type` → [`Format`], and the list of supported types for 415 answers.
//! - [`budget`]: [`InflightBudget`], the `ingest.max_inflight_bytes` semaphore, and the
//!   [`InflightPermit`] a decoded batch carries until it is admitted or refused.
//! - [`body`]: [`decode_body`], which reads a body chunk by chunk and decodes it incrementally.
//! - `reader`: the chunk reader under every body decoder: body limit, budget, timeout.
//! - [`encoding`]: `Content-Encoding` (gzip, zstd): bodies decompressed as they arrive.
//! - [`yaml`]: YAML bodies, decoded on a bounded pool of blocking threads.

pub mod body;
pub mod budget;
pub mod encoding;
pub mod media;
mod reader;
pub mod yaml;

use vx_proto::InputError;

pub use body::{decode_body, decode_encoded_body, decode_encoded_body_timed, read_encoded_body};
pub use budget::{InflightBudget, InflightPermit};
pub use encoding::{Encoding, SUPPORTED_ENCODINGS, UnsupportedEncoding, encoding_for};
pub use media::{SUPPORTED_TYPES, UnsupportedMediaType, format_for};
pub use vx_proto::Batch;
pub use vx_proto::decode::Format;

/// Name of the limit reported when a body is over `ingest.max_body_bytes` (one name for
/// every decoder, so it is vx-proto's).
pub use vx_proto::decode::LIMIT_BODY_BYTES;
/// The 413 of a body over `ingest.max_body_bytes`.
pub(crate) fn body_too_large(max: u64) -> InputError {
    InputError::too_large(
        LIMIT_BODY_BYTES,
        max,
        format!("request body is larger than {max} bytes (ingest.max_body_bytes)"),
    )
}

/// Name of the limit reported when a body (or a frame) stalls (408 `timeout`).
pub const LIMIT_BODY_TIMEOUT: &str = "ingest.body_timeout";

/// Per-request limits (the `ingest.*` keys of docs/CONFIG.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `ingest.max_body_bytes`: the largest body, counted as it arrives.
    pub max_body_bytes: u64,
    /// `ingest.max_event_bytes`: the largest single event; also bounds what a decoder buffers.
    pub max_event_bytes: usize,
    /// `ingest.body_timeout`: the longest wait for the next chunk of a body. A client that
    /// stalls mid-body would otherwise hold its share of the in-flight budget forever.
    pub body_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 64 << 20,
            max_event_bytes: 1 << 20,
            body_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// Why a body could not be turned into a batch.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The body is bad: malformed, an invalid event, or over a limit (400 / 422 / 413 by
    /// [`InputError::class`]).
    #[error(transparent)]
    Input(#[from] InputError),
    /// Reading the body failed (the client went away, or a transport limit cut it off). No
    /// event of the request is stored; whether anyone is left to answer is the caller's call.
    #[error("reading the request body failed: {0}")]
    Body(String),
    /// The body sent nothing for `ingest.body_timeout` (408 `timeout`); its budget is
    /// released with the error.
    #[error("the request body sent nothing for {0:?} (ingest.body_timeout)")]
    Timeout(std::time::Duration),
    /// A decoder stopped for a reason of the server's own (500).
    #[error("{0}")]
    Internal(String),
}
