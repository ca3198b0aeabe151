//! An HTTP request body of type `application/vnd.veltrix.frames`: BATCH frames back to back,
//! with no magic and no handshake, all of whose events form ONE request (atomic, indexed from
//! 0 across the frames). The request's durability and expected last seq come from the HTTP
//! headers, so each frame's durability code must be 0 and its flags must not carry an expected
//! last seq; request ids are ignored. An empty body is a request with no events.
//!
//! Decoding is incremental like the other formats: complete events are decoded straight from
//! the chunk they arrived in; only an item split across chunks is copied, into a buffer that
//! holds at most one event (`ingest.max_event_bytes`) or one header.

use super::batch::{BatchDecoder, Progress};
use super::head::{HEAD_LEN, Head};
use super::{FrameError, FrameType};
use crate::error::InputError;
use crate::packed::Batch;

/// What the body decoder reads next.
#[derive(Debug)]
enum ReadingFrame {
    /// Expecting a frame header.
    Head,
    /// Inside a BATCH body.
    Body,
}

/// Incremental decoder of a frames body; see the module docs.
#[derive(Debug)]
pub struct FramesDecoder {
    state: ReadingFrame,
    batch: BatchDecoder,
    /// Bytes of an item split across chunks.
    pending: Vec<u8>,
    /// Bytes the pending item needs in all (meaningful while `pending` is not empty).
    need: usize,
    now_ms: i64,
    frames: u64,
    failed: Option<InputError>,
}

impl FramesDecoder {
    pub fn new(max_event_bytes: usize, now_ms: i64) -> FramesDecoder {
        FramesDecoder {
            state: ReadingFrame::Head,
            batch: BatchDecoder::new(0, max_event_bytes, now_ms),
            pending: Vec::new(),
            need: 0,
            now_ms,
            frames: 0,
            failed: None,
        }
    }

    /// Decode `chunk`, the next bytes of the body, pushing every event it completes into `out`.
    /// After an error the decoder keeps answering that error.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Batch) -> Result<(), InputError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.feed_inner(chunk, out).inspect_err(|e| {
            self.failed = Some(e.clone());
        })
    }

    fn feed_inner(&mut self, chunk: &[u8], out: &mut Batch) -> Result<(), InputError> {
        let mut rest = chunk;
        // Complete the item split across chunks, taking no more of this chunk than it needs.
        while !self.pending.is_empty() {
            let take = self.need.saturating_sub(self.pending.len()).min(rest.len());
            let (head, tail) = rest.split_at(take);
            self.pending.extend_from_slice(head);
            rest = tail;
            if self.pending.len() < self.need {
                return Ok(());
            }
            let pending = std::mem::take(&mut self.pending);
            let used = self.run(&pending, out)?;
            self.pending = pending;
            self.pending.drain(..used);
        }
        let used = self.run(rest, out)?;
        self.pending.extend_from_slice(&rest[used..]);
        Ok(())
    }

    /// The body has ended: it must end between frames.
    pub fn finish(&mut self, _out: &mut Batch) -> Result<(), InputError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.pending.is_empty() && matches!(self.state, ReadingFrame::Head) {
            return Ok(());
        }
        let e = InputError::malformed(format!(
            "the body ends inside frame {} (truncated)",
            self.frames
        ))
        .at_index(self.batch.next_index());
        self.failed = Some(e.clone());
        Err(e)
    }

    /// Decode whole items from `input`; returns the bytes consumed and records what the next
    /// item needs.
    fn run(&mut self, input: &[u8], out: &mut Batch) -> Result<usize, InputError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                ReadingFrame::Head => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    // No size limit beyond u32 here: the body limit bounds what is read, and
                    // nothing is buffered by a frame's length.
                    let head = match Head::parse(rest, u32::MAX) {
                        Ok(Some(h)) => h,
                        Ok(None) => {
                            self.need = HEAD_LEN;
                            return Ok(pos);
                        }
                        Err(e) => return Err(self.frame_error(e)),
                    };
                    if head.ty != FrameType::Batch as u8 {
                        let what = head
                            .frame_type()
                            .map_or_else(|| format!("0x{:02x}", head.ty), |t| t.name().into());
                        return Err(InputError::malformed(format!(
                            "frame {} is of type {what}; an HTTP body holds only BATCH frames",
                            self.frames
                        ))
                        .at_index(self.batch.next_index()));
                    }
                    let first = self.batch.next_index();
                    self.batch.restart(head.len, self.now_ms, first);
                    self.state = ReadingFrame::Body;
                    pos += HEAD_LEN;
                }
                ReadingFrame::Body => {
                    let had_head = self.batch.head().is_some();
                    let (used, res) = self.batch.decode(rest, out);
                    pos += used;
                    if !had_head
                        && let Some(h) = self.batch.head()
                        && (h.durability.is_some() || h.expected_last_seq.is_some())
                    {
                        return Err(InputError::malformed(format!(
                            "frame {}: in an HTTP body, durability and expected last seq go in \
                             the X-Vx-Durability and X-Vx-Expected-Last-Seq headers; the \
                             frame's durability code must be 0 and its flags 0",
                            self.frames
                        )));
                    }
                    match res? {
                        Progress::Done => {
                            self.frames += 1;
                            self.state = ReadingFrame::Head;
                        }
                        Progress::NeedMore { need } => {
                            self.need = need;
                            return Ok(pos);
                        }
                    }
                }
            }
        }
    }

    fn frame_error(&self, e: FrameError) -> InputError {
        InputError::malformed(format!("frame {}: {e}", self.frames))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ErrorClass;
    use crate::event::Kind;
    use crate::frames::{BatchHead, Durability, WireEvent, encode_batch};

    fn ev(stream: &str) -> WireEvent<'_> {
        WireEvent {
            stream,
            entity: Some("p"),
            ty: "t",
            ts: Some(1),
            kind: Kind::Event,
            value: None,
            id: Some("i"),
            data: Some("[1, 2]"),
        }
    }

    fn body() -> Vec<u8> {
        let mut out = Vec::new();
        encode_batch(&mut out, &BatchHead::default(), &[ev("a"), ev("b")]).unwrap();
        encode_batch(&mut out, &BatchHead::default(), &[]).unwrap();
        encode_batch(&mut out, &BatchHead::default(), &[ev("c")]).unwrap();
        out
    }

    fn decode_in(chunks: &[&[u8]]) -> Result<Batch, InputError> {
        let mut d = FramesDecoder::new(1 << 20, 0);
        let mut b = Batch::new();
        for c in chunks {
            d.feed(c, &mut b)?;
        }
        d.finish(&mut b)?;
        Ok(b)
    }

    #[test]
    fn any_chunking_gives_the_same_events() {
        let body = body();
        let whole = decode_in(&[&body]).unwrap();
        assert_eq!(whole.len(), 3);
        let streams: Vec<_> = whole.iter().map(|e| e.stream).collect();
        assert_eq!(streams, ["a", "b", "c"]);
        for size in 1..body.len() {
            let chunks: Vec<&[u8]> = body.chunks(size).collect();
            let b = decode_in(&chunks).unwrap();
            assert!(b.iter().eq(whole.iter()), "chunk size {size}");
        }
        assert_eq!(decode_in(&[]).unwrap().len(), 0);
    }

    #[test]
    fn truncation_other_frames_and_header_fields_are_malformed() {
        let body = body();
        for cut in 1..body.len() {
            let Err(e) = decode_in(&[&body[..cut]]) else {
                // Cuts between frames are complete bodies.
                continue;
            };
            assert_eq!(e.class, ErrorClass::Malformed, "{cut}");
        }
        let mut ping = Vec::new();
        crate::frames::Frame::Ping(1).encode(&mut ping).unwrap();
        assert_eq!(
            decode_in(&[&ping]).unwrap_err().class,
            ErrorClass::Malformed
        );
        let mut fsync = Vec::new();
        let head = BatchHead {
            durability: Some(Durability::Fsync),
            ..BatchHead::default()
        };
        encode_batch(&mut fsync, &head, &[ev("a")]).unwrap();
        let e = decode_in(&[&fsync]).unwrap_err();
        assert!(e.message.contains("X-Vx-Durability"), "{}", e.message);
    }

    #[test]
    fn indexes_count_across_frames() {
        let mut body = Vec::new();
        encode_batch(&mut body, &BatchHead::default(), &[ev("a"), ev("b")]).unwrap();
        encode_batch(&mut body, &BatchHead::default(), &[ev("c"), ev("")]).unwrap();
        let e = decode_in(&[&body]).unwrap_err();
        assert_eq!((e.class, e.index), (ErrorClass::InvalidEvent, Some(3)));
        assert_eq!(e.field.as_deref(), Some("stream"));
    }

    #[test]
    fn an_oversized_event_is_refused_from_its_length() {
        let mut body = Vec::new();
        let big = "x".repeat(300);
        let data = format!("\"{big}\"");
        let e = WireEvent {
            data: Some(&data),
            ..ev("a")
        };
        encode_batch(&mut body, &BatchHead::default(), &[e]).unwrap();
        let mut d = FramesDecoder::new(100, 0);
        let mut b = Batch::new();
        // Only the beginning of the event has arrived, and it is refused already.
        let err = d.feed(&body[..40], &mut b).unwrap_err();
        assert_eq!(err.class, ErrorClass::TooLarge);
        assert_eq!(err.limit.as_deref(), Some("ingest.max_event_bytes"));
    }
}
