//! Replay output as frames (docs/API.md §5, `Accept: application/vnd.veltrix.frames`): one EVENT frame
//! per stored event — `u64 seq`, then the event in the binary form of [`super::event`] with its
//! `ts` always present — back to back; the body's end is the end of the replay. Also a small
//! iterator over the complete frames in a buffer, for clients reading such a body.

use super::event::{EventDecoder, WireEvent, encode_event};
use super::head::{self, HEAD_LEN, Head};
use super::wire::put_u64;
use super::{EncodeError, FrameType};
use crate::error::InputError;
use crate::event::EventView;

/// Append the EVENT frame of a stored event.
pub fn encode_event_frame(
    out: &mut Vec<u8>,
    ev: &EventView<'_>,
    seq: u64,
) -> Result<(), EncodeError> {
    let start = head::begin(out, FrameType::Event);
    put_u64(out, seq);
    if let Err(e) = encode_event(out, &WireEvent::from(*ev)) {
        out.truncate(start);
        return Err(e);
    }
    head::finish(out, start)
}

/// Decode an EVENT frame's body into its `seq` and event (validated like ingest).
pub fn decode_event_frame<'a>(
    body: &'a [u8],
    decoder: &'a mut EventDecoder,
) -> Result<(u64, EventView<'a>), InputError> {
    let (seq, event) = body
        .split_first_chunk::<8>()
        .ok_or_else(|| InputError::malformed("an EVENT frame is shorter than its seq"))?;
    // Replayed events always carry their ts, so "now" is never used.
    Ok((u64::from_le_bytes(*seq), decoder.decode(event, 0)?))
}

/// The complete frames at the front of a buffer, in order, as headers and bodies; it stops at
/// the first incomplete one, whose bytes [`FrameIter::rest`] returns.
#[derive(Clone, Debug)]
pub struct FrameIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> FrameIter<'a> {
    pub fn new(buf: &'a [u8]) -> FrameIter<'a> {
        FrameIter { buf, pos: 0 }
    }

    /// The bytes after the last complete frame.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = (Head, &'a [u8]);

    fn next(&mut self) -> Option<(Head, &'a [u8])> {
        let rest = self.rest();
        let head = Head::parse(rest, u32::MAX).ok()??;
        let body = rest.get(HEAD_LEN..head.frame_len())?;
        self.pos += head.frame_len();
        Some((head, body))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::event::{Kind, Num};

    #[test]
    fn event_frames_round_trip_and_iterate() {
        let ev = EventView {
            stream: "s",
            entity: Some("e"),
            ty: "t",
            ts: 9,
            kind: Kind::Gauge,
            value: Some(Num::Float(0.5)),
            id: Some("x"),
            data: Some("{\"a\":1}"),
        };
        let mut out = Vec::new();
        encode_event_frame(&mut out, &ev, 41).unwrap();
        encode_event_frame(&mut out, &ev, 42).unwrap();
        out.extend_from_slice(&[1, 0]);
        let mut it = FrameIter::new(&out);
        let mut dec = EventDecoder::new();
        for want in [41, 42] {
            let (h, body) = it.next().unwrap();
            assert_eq!(h.ty, FrameType::Event as u8);
            let (seq, got) = decode_event_frame(body, &mut dec).unwrap();
            assert_eq!((seq, got), (want, ev));
        }
        assert!(it.next().is_none());
        assert_eq!(it.rest(), [1, 0]);
    }
}
