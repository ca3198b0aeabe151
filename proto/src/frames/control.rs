//! The small frames, encoded and decoded whole: HELLO and WELCOME (the handshake), ACK and
//! ERROR (the answers to batches), PING and PONG. Their layouts are in docs/PROTOCOL.md; a
//! body must be consumed exactly, so a trailing byte is as malformed as a missing one.

use super::head::{self, HEAD_LEN, Head};
use super::wire::{Reader, clip, put_u8, put_u16, put_u32, put_u64};
use super::{Durability, EncodeError, FrameError, FrameType};

/// Client → server, the first frame after the magic: the versions the client speaks and, where
/// the server has auth on, its bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub min_version: u16,
    pub max_version: u16,
    pub token: Option<String>,
}

/// Server → client: the handshake succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The version both sides speak from now on: the highest both support.
    pub version: u16,
    /// The largest frame body the server accepts (`ingest.max_body_bytes`, capped at `u32`).
    pub max_frame: u32,
    /// Batches the server keeps in flight per connection before it stops reading.
    pub window: u16,
}

/// Server → client: a batch was stored (docs/API.md §3's 200 answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub request_id: u64,
    pub accepted: u64,
    pub duplicates: u64,
    /// The level reached.
    pub durability: Durability,
    /// Fill of the fullest shard the batch touched, in basis points (`X-Vx-Queue-Fill`).
    pub queue_fill: u16,
    /// Per stream in first-appearance order, as in the HTTP answer.
    pub last_seq: Vec<(String, u64)>,
    /// Cluster mode: the batch's position (docs/CLUSTER.md), on the wire only at durability
    /// `replicated` or `applied`, and always there at those levels.
    pub position: Option<String>,
}

/// Server → client: a batch was refused (request id ≠ 0; the connection goes on), or the
/// connection is refused or ended (request id 0; the server closes it after this frame).
/// `code` and the details are those of docs/API.md §3's error body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorFrame {
    pub request_id: u64,
    pub code: String,
    pub message: String,
    pub index: Option<u64>,
    pub field: Option<String>,
    pub limit: Option<String>,
    pub max: Option<u64>,
    pub last_seq: Option<u64>,
    pub retry_after_ms: Option<u64>,
    /// Basis points, as in [`Ack::queue_fill`].
    pub queue_fill: Option<u16>,
}

impl ErrorFrame {
    pub fn new(request_id: u64, code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorFrame {
            request_id,
            code: code.into(),
            message: message.into(),
            ..ErrorFrame::default()
        }
    }

    /// A connection-level error: the connection ends after it.
    pub fn is_fatal(&self) -> bool {
        self.request_id == 0
    }
}

/// Bits of the ERROR frame's details byte; present details follow in this order.
mod detail {
    pub const INDEX: u8 = 1;
    pub const FIELD: u8 = 2;
    pub const LIMIT: u8 = 4;
    pub const MAX: u8 = 8;
    pub const LAST_SEQ: u8 = 16;
    pub const RETRY_AFTER_MS: u8 = 32;
    pub const QUEUE_FILL: u8 = 64;
    pub const KNOWN: u8 = 127;
}

/// A decoded small frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Welcome(Welcome),
    Ack(Ack),
    Error(ErrorFrame),
    Ping(u64),
    Pong(u64),
}

impl Frame {
    /// Decode the body of a small frame. BATCH and EVENT frames have decoders of their own
    /// and are [`FrameError::Unexpected`] here.
    pub fn decode(ty: u8, body: &[u8]) -> Result<Frame, FrameError> {
        let Some(ft) = FrameType::from_u8(ty) else {
            return Err(FrameError::UnknownType(ty));
        };
        let mut r = Reader::new(body);
        let short = || FrameError::malformed(ft, "the body is too short");
        let frame = match ft {
            FrameType::Hello => {
                let min_version = r.u16().ok_or_else(short)?;
                let max_version = r.u16().ok_or_else(short)?;
                let token = str16(&mut r, ft, "token")?;
                Frame::Hello(Hello {
                    min_version,
                    max_version,
                    token: (!token.is_empty()).then(|| token.to_string()),
                })
            }
            FrameType::Welcome => Frame::Welcome(Welcome {
                version: r.u16().ok_or_else(short)?,
                max_frame: r.u32().ok_or_else(short)?,
                window: r.u16().ok_or_else(short)?,
            }),
            FrameType::Ack => {
                let request_id = r.u64().ok_or_else(short)?;
                let accepted = r.u64().ok_or_else(short)?;
                let duplicates = r.u64().ok_or_else(short)?;
                let code = r.u8().ok_or_else(short)?;
                let durability = Durability::from_code(code).ok_or_else(|| {
                    FrameError::malformed(ft, format!("unknown durability code {code}"))
                })?;
                let queue_fill = r.u16().ok_or_else(short)?;
                let n = r.u32().ok_or_else(short)?;
                // Each entry takes at least 10 bytes: no count can reserve past the body.
                let mut last_seq = Vec::with_capacity((n as usize).min(r.remaining() / 10));
                for _ in 0..n {
                    let stream = str16(&mut r, ft, "stream")?.to_string();
                    last_seq.push((stream, r.u64().ok_or_else(short)?));
                }
                let position = if durability >= Durability::Replicated {
                    Some(str16(&mut r, ft, "position")?.to_string())
                } else {
                    None
                };
                Frame::Ack(Ack {
                    request_id,
                    accepted,
                    duplicates,
                    durability,
                    queue_fill,
                    last_seq,
                    position,
                })
            }
            FrameType::Error => Frame::Error(decode_error(&mut r)?),
            FrameType::Ping => Frame::Ping(r.u64().ok_or_else(short)?),
            FrameType::Pong => Frame::Pong(r.u64().ok_or_else(short)?),
            FrameType::Batch | FrameType::Event => return Err(FrameError::Unexpected(ft.name())),
        };
        if r.remaining() > 0 {
            return Err(FrameError::malformed(
                ft,
                format!("{} bytes after the end of the body", r.remaining()),
            ));
        }
        Ok(frame)
    }

    /// Append the whole frame, header included.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            Frame::Hello(h) => {
                let token = h.token.as_deref().unwrap_or("");
                let max = usize::from(u16::MAX);
                if token.len() > max {
                    return Err(EncodeError::FieldTooLong {
                        field: "token",
                        len: token.len(),
                        max,
                    });
                }
                let start = head::begin(out, FrameType::Hello);
                put_u16(out, h.min_version);
                put_u16(out, h.max_version);
                put_str16(out, token);
                head::finish(out, start)
            }
            Frame::Welcome(w) => {
                let start = head::begin(out, FrameType::Welcome);
                put_u16(out, w.version);
                put_u32(out, w.max_frame);
                put_u16(out, w.window);
                head::finish(out, start)
            }
            Frame::Ack(a) => {
                let start = head::begin(out, FrameType::Ack);
                put_u64(out, a.request_id);
                put_u64(out, a.accepted);
                put_u64(out, a.duplicates);
                put_u8(out, a.durability.code());
                put_u16(out, a.queue_fill);
                put_u32(out, u32::try_from(a.last_seq.len()).unwrap_or(u32::MAX));
                for (stream, seq) in a.last_seq.iter().take(u32::MAX as usize) {
                    // Stored stream names are at most 256 bytes; clipping never happens.
                    put_str16(out, clip(stream, usize::from(u16::MAX)));
                    put_u64(out, *seq);
                }
                if a.durability >= Durability::Replicated {
                    put_str16(
                        out,
                        clip(a.position.as_deref().unwrap_or(""), usize::from(u16::MAX)),
                    );
                }
                head::finish(out, start)
            }
            Frame::Error(e) => {
                let start = head::begin(out, FrameType::Error);
                encode_error(out, e);
                head::finish(out, start)
            }
            Frame::Ping(n) | Frame::Pong(n) => {
                let ty = if matches!(self, Frame::Ping(_)) {
                    FrameType::Ping
                } else {
                    FrameType::Pong
                };
                let start = head::begin(out, ty);
                put_u64(out, *n);
                head::finish(out, start)
            }
        }
    }
}

/// The whole small frame at the front of `buf` and its length in bytes, or `Ok(None)` while
/// it is incomplete. A header announcing more than `max` body bytes is refused at once.
pub fn parse_frame(buf: &[u8], max: u32) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(h) = Head::parse(buf, max)? else {
        return Ok(None);
    };
    let Some(body) = buf.get(HEAD_LEN..h.frame_len()) else {
        return Ok(None);
    };
    Ok(Some((Frame::decode(h.ty, body)?, h.frame_len())))
}

fn decode_error(r: &mut Reader<'_>) -> Result<ErrorFrame, FrameError> {
    let ft = FrameType::Error;
    let short = || FrameError::malformed(ft, "the body is too short");
    let request_id = r.u64().ok_or_else(short)?;
    let len = usize::from(r.u8().ok_or_else(short)?);
    let code = utf8(r.bytes(len).ok_or_else(short)?, ft, "code")?.to_string();
    let message = str16(r, ft, "message")?.to_string();
    let bits = r.u8().ok_or_else(short)?;
    if bits & !detail::KNOWN != 0 {
        return Err(FrameError::malformed(
            ft,
            format!("unknown detail bits 0x{:02x}", bits & !detail::KNOWN),
        ));
    }
    let mut e = ErrorFrame::new(request_id, code, message);
    let has = |bit: u8| bits & bit != 0;
    if has(detail::INDEX) {
        e.index = Some(r.u64().ok_or_else(short)?);
    }
    if has(detail::FIELD) {
        e.field = Some(str16(r, ft, "field")?.to_string());
    }
    if has(detail::LIMIT) {
        e.limit = Some(str16(r, ft, "limit")?.to_string());
    }
    if has(detail::MAX) {
        e.max = Some(r.u64().ok_or_else(short)?);
    }
    if has(detail::LAST_SEQ) {
        e.last_seq = Some(r.u64().ok_or_else(short)?);
    }
    if has(detail::RETRY_AFTER_MS) {
        e.retry_after_ms = Some(r.u64().ok_or_else(short)?);
    }
    if has(detail::QUEUE_FILL) {
        e.queue_fill = Some(r.u16().ok_or_else(short)?);
    }
    Ok(e)
}

fn encode_error(out: &mut Vec<u8>, e: &ErrorFrame) {
    // Codes are the short names of docs/API.md §10.2; messages and details are clipped rather than refused,
    // so that an error can always be reported.
    let code = clip(&e.code, usize::from(u8::MAX));
    put_u64(out, e.request_id);
    put_u8(out, code.len() as u8);
    out.extend_from_slice(code.as_bytes());
    put_str16(out, clip(&e.message, usize::from(u16::MAX)));
    let mut bits = 0;
    let mut set = |present: bool, bit: u8| {
        if present {
            bits |= bit;
        }
    };
    set(e.index.is_some(), detail::INDEX);
    set(e.field.is_some(), detail::FIELD);
    set(e.limit.is_some(), detail::LIMIT);
    set(e.max.is_some(), detail::MAX);
    set(e.last_seq.is_some(), detail::LAST_SEQ);
    set(e.retry_after_ms.is_some(), detail::RETRY_AFTER_MS);
    set(e.queue_fill.is_some(), detail::QUEUE_FILL);
    put_u8(out, bits);
    if let Some(v) = e.index {
        put_u64(out, v);
    }
    if let Some(f) = &e.field {
        put_str16(out, clip(f, usize::from(u16::MAX)));
    }
    if let Some(l) = &e.limit {
        put_str16(out, clip(l, usize::from(u16::MAX)));
    }
    for v in [e.max, e.last_seq, e.retry_after_ms].into_iter().flatten() {
        put_u64(out, v);
    }
    if let Some(q) = e.queue_fill {
        put_u16(out, q);
    }
}

/// A `u16`-length-prefixed string; the caller made sure it fits.
fn put_str16(out: &mut Vec<u8>, s: &str) {
    put_u16(out, s.len() as u16);
    out.extend_from_slice(s.as_bytes());
}

fn str16<'a>(
    r: &mut Reader<'a>,
    ft: FrameType,
    field: &'static str,
) -> Result<&'a str, FrameError> {
    let short = || FrameError::malformed(ft, format!("{field} is cut off"));
    let len = usize::from(r.u16().ok_or_else(short)?);
    utf8(r.bytes(len).ok_or_else(short)?, ft, field)
}

fn utf8<'a>(b: &'a [u8], ft: FrameType, field: &'static str) -> Result<&'a str, FrameError> {
    std::str::from_utf8(b).map_err(|_| FrameError::malformed(ft, format!("{field} is not UTF-8")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn round_trip(f: Frame) {
        let mut out = Vec::new();
        f.encode(&mut out).unwrap();
        let (back, used) = parse_frame(&out, u32::MAX).unwrap().unwrap();
        assert_eq!(back, f);
        assert_eq!(used, out.len());
        // Every proper prefix is incomplete, never an error.
        for cut in 0..out.len() {
            assert_eq!(parse_frame(&out[..cut], u32::MAX), Ok(None), "{cut}");
        }
    }

    #[test]
    fn every_small_frame_round_trips() {
        round_trip(Frame::Hello(Hello {
            min_version: 1,
            max_version: 3,
            token: Some("sécret".into()),
        }));
        round_trip(Frame::Hello(Hello {
            min_version: 1,
            max_version: 1,
            token: None,
        }));
        round_trip(Frame::Welcome(Welcome {
            version: 1,
            max_frame: 64 << 20,
            window: 64,
        }));
        round_trip(Frame::Ack(Ack {
            request_id: 7,
            accepted: 3,
            duplicates: 1,
            durability: Durability::Fsync,
            queue_fill: 1234,
            last_seq: vec![("a".into(), 3), ("b/ü".into(), 9)],
            position: None,
        }));
        round_trip(Frame::Ack(Ack {
            request_id: 8,
            accepted: 2,
            duplicates: 0,
            durability: Durability::Applied,
            queue_fill: 0,
            last_seq: vec![("a".into(), 5)],
            position: Some("1:3@17".into()),
        }));
        round_trip(Frame::Error(ErrorFrame::new(
            0,
            "not_ready",
            "shutting down",
        )));
        round_trip(Frame::Error(ErrorFrame {
            request_id: 9,
            code: "too_large".into(),
            message: "m".into(),
            index: Some(4),
            field: Some("data".into()),
            limit: Some("ingest.max_event_bytes".into()),
            max: Some(1 << 20),
            last_seq: Some(5),
            retry_after_ms: Some(250),
            queue_fill: Some(10_000),
        }));
        round_trip(Frame::Ping(u64::MAX));
        round_trip(Frame::Pong(0));
    }

    #[test]
    fn bad_bodies_are_malformed() {
        // Trailing byte after a PING's nonce.
        let mut out = Vec::new();
        Frame::Ping(1).encode(&mut out).unwrap();
        out[0] += 1;
        out.push(0);
        assert!(matches!(
            parse_frame(&out, 100),
            Err(FrameError::Malformed { frame: "PING", .. })
        ));
        // An ACK that claims more streams than its body holds.
        let body = [[0u8; 24].as_slice(), &[3, 0, 0], &[9, 0, 0, 0]].concat();
        assert!(matches!(
            Frame::decode(FrameType::Ack as u8, &body),
            Err(FrameError::Malformed { frame: "ACK", .. })
        ));
        assert_eq!(Frame::decode(0x7f, &[]), Err(FrameError::UnknownType(0x7f)));
        assert_eq!(
            Frame::decode(FrameType::Batch as u8, &[]),
            Err(FrameError::Unexpected("BATCH"))
        );
        // A token that is not UTF-8.
        let body = [1, 0, 1, 0, 1, 0, 0xff];
        assert!(matches!(
            Frame::decode(FrameType::Hello as u8, &body),
            Err(FrameError::Malformed { frame: "HELLO", .. })
        ));
    }
}
