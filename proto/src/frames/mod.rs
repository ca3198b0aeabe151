//! The binary frames protocol of docs/PROTOCOL.md: a versioned, length-prefixed framing for
//! persistent producer connections (`--frames-listen`, `--frames-uds`), for HTTP bodies of
//! type `application/vnd.veltrix.frames`, and for replay output in that type. This module is
//! sans-I/O: it turns bytes into frames and events and back, and never touches a socket.
//!
//! # Layout
//! Framing is kept apart from decoding:
//! - `wire`: little-endian primitives (a bounds-checked reader, writers).
//! - [`head`]: the 5-byte frame header; the maximum frame size is enforced here, from the
//!   length prefix, before anything is buffered for the body.
//! - [`control`]: the small frames — HELLO, WELCOME, ACK, ERROR, PING, PONG — decoded whole.
//! - [`event`]: one event's binary form, its encoder, and its decoder, which checks every rule
//!   of docs/API.md §2 exactly as the JSON decoders do.
//! - [`batch`]: the BATCH frame: its header and [`BatchDecoder`], which decodes events one at a
//!   time straight into a [`crate::Batch`] as bytes arrive.
//! - [`body`]: [`FramesDecoder`], an HTTP request body made of BATCH frames.
//! - [`replay`]: EVENT frames, the replay output.
//!
//! # Not enough bytes yet
//! Every decoder here reports "need more input" as a value ([`Progress::NeedMore`], `Ok(None)`)
//! carrying how many bytes it needs, never as an error, and consumes only whole items, so a
//! caller keeps the unconsumed tail and appends to it.

pub mod batch;
pub mod body;
pub mod control;
pub mod event;
pub mod head;
pub mod replay;
use crate::le as wire;

pub use batch::{BatchDecoder, BatchHead, Progress, encode_batch};
pub use body::FramesDecoder;
pub use control::{Ack, ErrorFrame, Frame, Hello, Welcome, parse_frame};
pub use event::{EventDecoder, WireEvent, encode_event};
pub use head::{HEAD_LEN, Head};
pub use replay::{FrameIter, decode_event_frame, encode_event_frame};

/// The first four bytes each side sends on a connection.
pub const MAGIC: [u8; 4] = *b"VXFR";
/// Protocol versions this implementation speaks.
pub const MIN_VERSION: u16 = 1;
pub const MAX_VERSION: u16 = 1;
/// The media type of frames over HTTP, for ingest bodies and replay output.
pub const CONTENT_TYPE: &str = "application/vnd.veltrix.frames";

/// The type byte of a frame.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameType {
    Hello = 0x01,
    Welcome = 0x02,
    Batch = 0x03,
    Ack = 0x04,
    Error = 0x05,
    Ping = 0x06,
    Pong = 0x07,
    Event = 0x10,
}

impl FrameType {
    pub fn from_u8(b: u8) -> Option<FrameType> {
        Some(match b {
            0x01 => FrameType::Hello,
            0x02 => FrameType::Welcome,
            0x03 => FrameType::Batch,
            0x04 => FrameType::Ack,
            0x05 => FrameType::Error,
            0x06 => FrameType::Ping,
            0x07 => FrameType::Pong,
            0x10 => FrameType::Event,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            FrameType::Hello => "HELLO",
            FrameType::Welcome => "WELCOME",
            FrameType::Batch => "BATCH",
            FrameType::Ack => "ACK",
            FrameType::Error => "ERROR",
            FrameType::Ping => "PING",
            FrameType::Pong => "PONG",
            FrameType::Event => "EVENT",
        }
    }
}

/// A durability level on the wire (docs/API.md §3), weakest first. In a BATCH, code 0 stands for
/// "the server mode's default" and is represented as `None` by the decoders. `Replicated` and
/// `Applied` are cluster mode's (docs/CLUSTER.md): Kafka took the batch, or its owners
/// applied it; an ACK at either level carries the batch's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Durability {
    None = 1,
    Write = 2,
    Fsync = 3,
    Replicated = 4,
    Applied = 5,
}

impl Durability {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(b: u8) -> Option<Durability> {
        match b {
            1 => Some(Durability::None),
            2 => Some(Durability::Write),
            3 => Some(Durability::Fsync),
            4 => Some(Durability::Replicated),
            5 => Some(Durability::Applied),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Write => "write",
            Durability::Fsync => "fsync",
            Durability::Replicated => "replicated",
            Durability::Applied => "applied",
        }
    }
}

/// A frame that cannot be accepted: what [`head`] and [`control`] report. Events inside a
/// BATCH are reported as [`crate::InputError`]s instead, like every other ingest format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length prefix is over the maximum: refused before the body is read.
    #[error("a frame of {len} bytes is larger than the maximum of {max} bytes")]
    TooLarge { len: u64, max: u64 },
    #[error("unknown frame type 0x{0:02x}")]
    UnknownType(u8),
    /// A known type where it is not allowed (a BATCH from the server, an ACK from a client).
    #[error("unexpected {0} frame")]
    Unexpected(&'static str),
    #[error("malformed {frame} frame: {reason}")]
    Malformed { frame: &'static str, reason: String },
}

impl FrameError {
    pub(crate) fn malformed(frame: FrameType, reason: impl Into<String>) -> FrameError {
        FrameError::Malformed {
            frame: frame.name(),
            reason: reason.into(),
        }
    }
}

/// Something cannot be encoded: a field longer than its length prefix can say, or a frame
/// over the size limit. Encoding into a `Vec` cannot fail otherwise.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("field {field} is {len} bytes, more than the {max} its length prefix allows")]
    FieldTooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("a frame of {len} bytes is larger than the maximum of {max} bytes")]
    FrameTooLarge { len: u64, max: u64 },
}

/// Queue fill (0.0–1.0) as basis points (0–10000), its wire form.
pub fn fill_to_basis_points(fill: f64) -> u16 {
    if fill.is_finite() {
        (fill.clamp(0.0, 1.0) * 10_000.0).round() as u16
    } else {
        0
    }
}

/// Basis points (clamped to 10000) as a fill between 0.0 and 1.0.
pub fn basis_points_to_fill(bp: u16) -> f64 {
    f64::from(bp.min(10_000)) / 10_000.0
}
