//! Wire decoders: request body bytes → validated events in a [`Batch`], one event at a time,
//! as the bytes arrive (docs/API.md §3: no decoder builds a whole-document tree).
//!
//! # Layout
//! Framing is kept apart from decoding (as in vector's `codecs/decoding`):
//! - [`ndjson`]: splits a body into lines; each non-blank line is one event.
//! - [`json`]: a small byte scanner that finds the extent of the top-level object or of each
//!   element of a top-level array, checking the brackets and commas between them.
//! - [`event`]: decodes the bytes of ONE event object and checks every rule of docs/API.md §2, with
//!   a serde visitor per field (`fields`).
//! - [`compact`]: turns the raw text of `data` into its stored compact form.
//! - [`yaml`]: YAML bodies. The YAML parser pulls its input from an [`std::io::Read`], so YAML
//!   is not a [`Decoder`] fed chunk by chunk: the ingest layer runs [`decode_yaml`] on a
//!   blocking thread and hands it the body through a bounded channel.
//!
//! [`Decoder`] joins a framer to the event parser for a [`Format`] so the ingest layer can drive
//! any of them the same way: `feed` every chunk, then `finish`.
//!
//! # Positions in errors
//! Every error carries `index` (0-based event position in the request) when it concerns an
//! event, and `line`/`column` (1-based, bytes) in the body: the framer knows where an event
//! starts; serde_json's position inside the event is added to that.

pub mod compact;
pub mod event;
mod fields;
pub mod json;
pub mod ndjson;
pub mod yaml;

#[cfg(test)]
mod tests;

use crate::error::InputError;
use crate::packed::Batch;

pub use event::{EventParser, parse_event};
pub use json::JsonDecoder;
pub use ndjson::NdjsonDecoder;
pub use yaml::decode_yaml;

/// Name of the limit reported when one event is over `ingest.max_event_bytes`.
pub const LIMIT_EVENT_BYTES: &str = "ingest.max_event_bytes";
/// Name of the limit reported when a body, or the events decoded from it, are over
/// `ingest.max_body_bytes`.
pub const LIMIT_BODY_BYTES: &str = "ingest.max_body_bytes";
/// Name of the limit reported when `data` nests deeper than [`crate::rules::MAX_DATA_DEPTH`]
/// (a rule of the event, so declared with the rules).
pub use crate::rules::LIMIT_DATA_DEPTH;

/// A body format that can be decoded incrementally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `application/json`: one event object, or an array of them.
    Json,
    /// `application/x-ndjson`, `application/jsonl`: one event object per line.
    Ndjson,
    /// `application/yaml`, `application/x-yaml`, `text/yaml`: a stream of documents, each an
    /// event mapping or a sequence of them. Decoded from a reader by [`decode_yaml`].
    Yaml,
    /// `application/vnd.veltrix.frames`: BATCH frames of docs/PROTOCOL.md, one request in all
    /// ([`crate::frames::FramesDecoder`]).
    Frames,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Ndjson => "ndjson",
            Format::Yaml => "yaml",
            Format::Frames => "frames",
        }
    }
}

/// An incremental decoder for one request body, whatever its format.
///
/// An enum rather than a trait object: the set of formats is closed and known here, and the
/// per-chunk call stays a direct one.
#[derive(Debug)]
pub enum Decoder {
    Json(JsonDecoder),
    Ndjson(NdjsonDecoder),
    Frames(crate::frames::FramesDecoder),
}

impl Decoder {
    /// A decoder for one body. `max_event_bytes` bounds a single event (and so the bytes the
    /// decoder buffers); `now_ms` is the `ts` given to events that carry none. `None` for a
    /// format that is decoded from a reader instead ([`Format::Yaml`]: [`decode_yaml`]).
    pub fn new(format: Format, max_event_bytes: usize, now_ms: i64) -> Option<Decoder> {
        match format {
            Format::Json => Some(Decoder::Json(JsonDecoder::new(max_event_bytes, now_ms))),
            Format::Ndjson => Some(Decoder::Ndjson(NdjsonDecoder::new(max_event_bytes, now_ms))),
            Format::Yaml => None,
            Format::Frames => Some(Decoder::Frames(crate::frames::FramesDecoder::new(
                max_event_bytes,
                now_ms,
            ))),
        }
    }

    /// Decode `chunk`, the next bytes of the body, pushing every event it completes into `out`.
    /// After an error the decoder keeps answering that error.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Batch) -> Result<(), InputError> {
        match self {
            Decoder::Json(d) => d.feed(chunk, out),
            Decoder::Ndjson(d) => d.feed(chunk, out),
            Decoder::Frames(d) => d.feed(chunk, out),
        }
    }

    /// The body has ended: decode what is left, or report the truncation.
    pub fn finish(&mut self, out: &mut Batch) -> Result<(), InputError> {
        match self {
            Decoder::Json(d) => d.finish(out),
            Decoder::Ndjson(d) => d.finish(out),
            Decoder::Frames(d) => d.finish(out),
        }
    }
}

/// What the framers share: the event parser, the request-wide event index, and the error that
/// stopped the decoder (so a later call cannot silently resume mid-body).
#[derive(Debug)]
struct Sink {
    parser: EventParser,
    now_ms: i64,
    max_event_bytes: usize,
    /// Index of the next event in the request.
    index: u64,
    failed: Option<InputError>,
}

impl Sink {
    fn new(max_event_bytes: usize, now_ms: i64) -> Sink {
        Sink {
            parser: EventParser::new(),
            now_ms,
            max_event_bytes,
            index: 0,
            failed: None,
        }
    }

    fn check_failed(&self) -> Result<(), InputError> {
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Remember `err` as the decoder's final answer and return it.
    fn fail(&mut self, err: InputError) -> InputError {
        self.failed = Some(err.clone());
        err
    }

    /// Decode the complete event `bytes`, which starts at `line`/`column` of the body.
    fn event(
        &mut self,
        bytes: &[u8],
        line: u64,
        column: u64,
        out: &mut Batch,
    ) -> Result<(), InputError> {
        match self.parser.parse(bytes, self.now_ms) {
            Ok(ev) => {
                if let Err(e) = out.push(&ev) {
                    let e = InputError::from_pack(e).at_index(self.index);
                    return Err(self.fail(e));
                }
                self.index += 1;
                Ok(())
            }
            Err(e) => {
                let e = rebase(e, line, column).at_index(self.index);
                Err(self.fail(e))
            }
        }
    }

    /// The event being framed is over `ingest.max_event_bytes`.
    fn too_large(&mut self, line: u64, column: u64) -> InputError {
        let max = self.max_event_bytes;
        let e = InputError::too_large(
            LIMIT_EVENT_BYTES,
            max as u64,
            format!(
                "event {} is larger than {max} bytes (ingest.max_event_bytes)",
                self.index
            ),
        )
        .at_index(self.index)
        .at_line(line, column);
        self.fail(e)
    }
}

/// Turn a position relative to an event's bytes (as the event parser reports it) into one
/// relative to the body, given where the event starts; no position means "the event's start".
fn rebase(mut e: InputError, line: u64, column: u64) -> InputError {
    match (e.line, e.column) {
        (Some(l), Some(c)) if l > 1 => {
            e.line = Some(line + l - 1);
            e.column = Some(c.max(1));
        }
        (Some(_), Some(c)) => {
            e.line = Some(line);
            e.column = Some(column + c.max(1) - 1);
        }
        _ => {
            e.line = Some(line);
            e.column = Some(column);
        }
    }
    e
}
