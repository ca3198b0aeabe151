//! The BATCH frame (docs/PROTOCOL.md, "BATCH"): a 10- or 18-byte header — request id,
//! requested durability, flags, optional expected last seq — then events to the end of the
//! frame. [`BatchDecoder`] decodes it incrementally, one event at a time, straight into a
//! [`Batch`]: a caller never holds more than one event's bytes (at most
//! `ingest.max_event_bytes`) beyond what it has already decoded, whatever the frame's size.

use super::event::{EventDecoder, Extent, WireEvent, encode_event, extent};
use super::head;
use super::wire::{Reader, put_u8, put_u64};
use super::{Durability, EncodeError, FrameType};
use crate::error::InputError;
use crate::packed::Batch;

/// Bits of the BATCH header's flags byte.
const HAS_EXPECTED_LAST_SEQ: u8 = 1;
/// Request id, durability, flags.
const HEAD_MIN: usize = 10;

/// What a BATCH carries besides its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchHead {
    /// Chosen by the client, echoed in the ACK or ERROR; 0 is reserved for connection-level
    /// errors and is refused on a connection (ignored in an HTTP body).
    pub request_id: u64,
    /// `None`: the server mode's default (code 0).
    pub durability: Option<Durability>,
    /// `X-Vx-Expected-Last-Seq`: the batch must hold a single stream.
    pub expected_last_seq: Option<u64>,
}

impl BatchHead {
    pub fn encoded_len(&self) -> usize {
        HEAD_MIN
            + if self.expected_last_seq.is_some() {
                8
            } else {
                0
            }
    }

    fn write(&self, out: &mut Vec<u8>) {
        put_u64(out, self.request_id);
        put_u8(out, self.durability.map_or(0, Durability::code));
        match self.expected_last_seq {
            None => put_u8(out, 0),
            Some(seq) => {
                put_u8(out, HAS_EXPECTED_LAST_SEQ);
                put_u64(out, seq);
            }
        }
    }

    /// The header at the front of `b`, with its length; `Ok(None)` when `b` is too short, with
    /// the number of bytes needed.
    fn parse(b: &[u8]) -> Result<Result<(BatchHead, usize), usize>, InputError> {
        let mut r = Reader::new(b);
        let (Some(request_id), Some(code), Some(fl)) = (r.u64(), r.u8(), r.u8()) else {
            return Ok(Err(HEAD_MIN));
        };
        let durability = match code {
            0 => None,
            c => Some(Durability::from_code(c).ok_or_else(|| {
                InputError::malformed(format!(
                    "unknown durability code {c} in BATCH {request_id} (0 default, 1 none, \
                     2 write, 3 fsync, 4 replicated, 5 applied)"
                ))
            })?),
        };
        if fl & !HAS_EXPECTED_LAST_SEQ != 0 {
            return Err(InputError::malformed(format!(
                "unknown BATCH flag bits 0x{:02x}",
                fl & !HAS_EXPECTED_LAST_SEQ
            )));
        }
        let expected_last_seq = if fl & HAS_EXPECTED_LAST_SEQ != 0 {
            match r.u64() {
                Some(seq) => Some(seq),
                None => return Ok(Err(HEAD_MIN + 8)),
            }
        } else {
            None
        };
        Ok(Ok((
            BatchHead {
                request_id,
                durability,
                expected_last_seq,
            },
            r.pos(),
        )))
    }
}

/// Append a whole BATCH frame. On error nothing is appended.
pub fn encode_batch(
    out: &mut Vec<u8>,
    head: &BatchHead,
    events: &[WireEvent<'_>],
) -> Result<(), EncodeError> {
    let start = head::begin(out, FrameType::Batch);
    head.write(out);
    for ev in events {
        if let Err(e) = encode_event(out, ev) {
            out.truncate(start);
            return Err(e);
        }
    }
    head::finish(out, start)
}

/// What a decoding step achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The frame's body is fully decoded.
    Done,
    /// Not enough bytes yet: the next item needs at least `need` bytes from the first
    /// unconsumed one (never more than `ingest.max_event_bytes` or the BATCH header).
    NeedMore { need: usize },
}

/// Incremental decoder of one BATCH frame's body; see the module docs.
#[derive(Debug)]
pub struct BatchDecoder {
    /// Bytes of the body not consumed yet.
    left: u64,
    head: Option<BatchHead>,
    /// Known as soon as its 8 bytes are, so that a bad header can still be answered.
    request_id: Option<u64>,
    max_event_bytes: usize,
    now_ms: i64,
    /// Request-wide index of the next event, for errors.
    index: u64,
    events: EventDecoder,
}

impl BatchDecoder {
    /// A decoder for a body of `body_len` bytes whose first event is event 0 of its request.
    pub fn new(body_len: u32, max_event_bytes: usize, now_ms: i64) -> BatchDecoder {
        BatchDecoder {
            left: u64::from(body_len),
            head: None,
            request_id: None,
            max_event_bytes,
            now_ms,
            index: 0,
            events: EventDecoder::new(),
        }
    }

    /// Start on another frame's body, keeping the buffers; its first event is event
    /// `first_index` of the request.
    pub fn restart(&mut self, body_len: u32, now_ms: i64, first_index: u64) {
        self.left = u64::from(body_len);
        self.head = None;
        self.request_id = None;
        self.now_ms = now_ms;
        self.index = first_index;
    }

    pub fn head(&self) -> Option<&BatchHead> {
        self.head.as_ref()
    }

    pub fn request_id(&self) -> Option<u64> {
        self.request_id
    }

    /// Bytes of the body not consumed yet: after an error, what a reader skips to reach the
    /// next frame.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// Request-wide index of the next event (the number decoded so far, plus the first index).
    pub fn next_index(&self) -> u64 {
        self.index
    }

    /// Decode what `input` (the next bytes of the body; anything past the body's end is left
    /// alone) completes, pushing events into `out`. Returns the bytes consumed — whole items
    /// only, also when it fails — and the outcome. After an error the body is not decodable;
    /// its remaining [`left`](Self::left) bytes can be skipped.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut Batch,
    ) -> (usize, Result<Progress, InputError>) {
        let window = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(input.len());
        let input = &input[..window];
        let mut pos = 0;
        if self.head.is_none() {
            if let Some(id) = input.get(..8).and_then(|b| b.try_into().ok()) {
                self.request_id = Some(u64::from_le_bytes(id));
            }
            match BatchHead::parse(input) {
                Err(e) => return (0, Err(e)),
                Ok(Err(need)) if (need as u64) > self.left => {
                    let e = InputError::malformed(format!(
                        "a BATCH frame of {} bytes is shorter than its {need}-byte header",
                        self.left
                    ));
                    return (0, Err(e));
                }
                Ok(Err(need)) => return (0, Ok(Progress::NeedMore { need })),
                Ok(Ok((h, n))) => {
                    self.head = Some(h);
                    pos = n;
                    self.left -= n as u64;
                }
            }
        }
        loop {
            if self.left == 0 {
                return (pos, Ok(Progress::Done));
            }
            let rest = &input[pos..];
            let n = match extent(rest, self.left, self.max_event_bytes, self.index) {
                Err(e) => return (pos, Err(e)),
                Ok(Extent::Incomplete(need)) => return (pos, Ok(Progress::NeedMore { need })),
                Ok(Extent::Complete(n)) => n,
            };
            let bytes = &rest[..n];
            match self.events.decode(bytes, self.now_ms) {
                Ok(ev) => {
                    if let Err(e) = out.push(&ev) {
                        return (pos, Err(InputError::from_pack(e).at_index(self.index)));
                    }
                }
                Err(e) => return (pos, Err(e.at_index(self.index))),
            }
            self.index += 1;
            pos += n;
            self.left -= n as u64;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ErrorClass;
    use crate::event::Kind;
    use crate::frames::HEAD_LEN;

    fn events() -> Vec<WireEvent<'static>> {
        (0..3)
            .map(|i| WireEvent {
                stream: ["a", "b", "a"][i],
                entity: None,
                ty: "t",
                ts: Some(i as i64),
                kind: Kind::Event,
                value: None,
                id: None,
                data: Some("{\"k\":1}"),
            })
            .collect()
    }

    fn frame(head: &BatchHead) -> Vec<u8> {
        let mut out = Vec::new();
        encode_batch(&mut out, head, &events()).unwrap();
        out
    }

    #[test]
    fn decodes_byte_by_byte_like_at_once() {
        let head = BatchHead {
            request_id: 9,
            durability: Some(Durability::Write),
            expected_last_seq: Some(4),
        };
        let f = frame(&head);
        let body = &f[HEAD_LEN..];
        let mut whole = Batch::new();
        let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, 0);
        assert_eq!(d.decode(body, &mut whole), (body.len(), Ok(Progress::Done)));
        assert_eq!(d.head(), Some(&head));
        assert_eq!(whole.len(), 3);

        // Fed one byte more at a time, keeping the unconsumed tail like a socket reader does.
        let mut batch = Batch::new();
        let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, 0);
        let mut buf = Vec::new();
        let mut done = false;
        for &b in body {
            buf.push(b);
            let (used, res) = d.decode(&buf, &mut batch);
            buf.drain(..used);
            match res.unwrap() {
                Progress::Done => done = true,
                Progress::NeedMore { need } => assert!(need > buf.len()),
            }
        }
        assert!(done && buf.is_empty());
        assert!(batch.iter().eq(whole.iter()));
    }

    #[test]
    fn errors_keep_the_request_id_and_what_is_left() {
        let f = frame(&BatchHead {
            request_id: 5,
            ..BatchHead::default()
        });
        let mut body = f[HEAD_LEN..].to_vec();
        // Break the second event's type.
        let second = HEAD_MIN + (body.len() - HEAD_MIN) / 3;
        let ty_at = second + 2 + 8 + 2 + 1 + 1;
        body[ty_at] = b' ';
        let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, 0);
        let mut out = Batch::new();
        let (used, res) = d.decode(&body, &mut out);
        let e = res.unwrap_err();
        assert_eq!((e.class, e.index), (ErrorClass::InvalidEvent, Some(1)));
        assert_eq!(used, second);
        assert_eq!(d.left() as usize, body.len() - second);
        assert_eq!(d.request_id(), Some(5));

        // A bad durability code: the id is known although the header is not.
        let mut body = f[HEAD_LEN..].to_vec();
        body[8] = 9;
        let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, 0);
        let (used, res) = d.decode(&body, &mut out);
        assert_eq!((used, res.unwrap_err().class), (0, ErrorClass::Malformed));
        assert_eq!(d.request_id(), Some(5));

        // A body shorter than a header is malformed, not "need more".
        let mut d = BatchDecoder::new(4, 1 << 20, 0);
        assert!(d.decode(&[0; 4], &mut out).1.is_err());
        // An empty batch is done after its header.
        let mut empty = Vec::new();
        encode_batch(&mut empty, &BatchHead::default(), &[]).unwrap();
        let mut d = BatchDecoder::new(HEAD_MIN as u32, 1 << 20, 0);
        assert_eq!(
            d.decode(&empty[HEAD_LEN..], &mut out),
            (HEAD_MIN, Ok(Progress::Done))
        );
    }

    #[test]
    fn never_reads_past_the_body() {
        let f = frame(&BatchHead::default());
        let mut input = f[HEAD_LEN..].to_vec();
        let len = input.len();
        input.extend_from_slice(&[0xff; 40]);
        let mut d = BatchDecoder::new(len as u32, 1 << 20, 0);
        let mut out = Batch::new();
        assert_eq!(d.decode(&input, &mut out), (len, Ok(Progress::Done)));
    }
}
