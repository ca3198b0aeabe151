//! Property tests of the frames codec: any valid event round-trips encode → decode → canonical
//! unchanged, and to exactly what the JSON decoder makes of the same event; an HTTP frames body
//! decodes the same whatever its chunking; the incremental batch decoder never asks for more
//! than one event's worth of bytes; and no input bytes can make any frames decoder panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use vx_proto::Batch;
use vx_proto::canonical::write_event;
use vx_proto::frames::{
    Ack, BatchDecoder, BatchHead, Durability, ErrorFrame, EventDecoder, Frame, FramesDecoder,
    HEAD_LEN, Progress, WireEvent, decode_event_frame, encode_batch, encode_event_frame,
    parse_frame,
};
use vx_proto::testing::{Event, NOW, event};

fn canonical(batch: &Batch) -> Vec<Vec<u8>> {
    batch
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, i as u64 + 1);
            out
        })
        .collect()
}

/// A BATCH frame of `events`, each with its `data` as sent (whitespace and escapes).
fn batch_frame(events: &[Event], head: &BatchHead) -> Vec<u8> {
    let data: Vec<Option<String>> = events.iter().map(Event::data_sent).collect();
    let wire: Vec<WireEvent<'_>> = events
        .iter()
        .zip(&data)
        .map(|(e, d)| e.wire(d.as_deref()))
        .collect();
    let mut out = Vec::new();
    encode_batch(&mut out, head, &wire).unwrap();
    out
}

/// Decode a frame's body, fed in pieces cut at `cuts`, keeping the unconsumed tail like a
/// socket reader; also checks that the decoder never needs more than one event's bytes.
fn decode_batch(frame: &[u8], cuts: &[usize], max_event: usize) -> (BatchHead, Batch) {
    let body = &frame[HEAD_LEN..];
    let mut d = BatchDecoder::new(body.len() as u32, max_event, NOW);
    let mut batch = Batch::new();
    let mut buf = Vec::new();
    let mut fed = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    points.push(body.len());
    points.sort_unstable();
    for p in points {
        buf.extend_from_slice(&body[fed..p.max(fed)]);
        fed = p.max(fed);
        let (used, res) = d.decode(&buf, &mut batch);
        buf.drain(..used);
        match res.unwrap() {
            Progress::Done => {
                assert!(buf.is_empty() && fed == body.len());
                return (*d.head().unwrap(), batch);
            }
            Progress::NeedMore { need } => {
                assert!(need > buf.len(), "asks for bytes it has");
                assert!(need <= max_event.max(18), "need {need} over one event");
            }
        }
    }
    panic!("the body did not complete");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_events_round_trip_to_what_json_gives(
        events in prop::collection::vec(event(5), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        id in any::<u64>(),
        durability in prop::option::of(prop_oneof![
            Just(Durability::None), Just(Durability::Write), Just(Durability::Fsync)
        ]),
        expected in prop::option::of(any::<u64>()),
    ) {
        let head = BatchHead { request_id: id, durability, expected_last_seq: expected };
        let frame = batch_frame(&events, &head);
        let (got_head, batch) = decode_batch(&frame, &cuts, 1 << 20);
        prop_assert_eq!(got_head, head);

        // The same events as JSON objects: the same `data` text, `ts` as sent (an RFC 3339
        // one where the frame carries its milliseconds).
        let mut via_json = Batch::new();
        for e in &events {
            vx_proto::decode::parse_event(&e.to_json(false), NOW, &mut via_json).unwrap();
        }
        prop_assert_eq!(canonical(&batch), canonical(&via_json));

        // Replay frames carry the stored events back unchanged.
        let mut out = Vec::new();
        for (i, ev) in batch.iter().enumerate() {
            encode_event_frame(&mut out, &ev, i as u64 + 1).unwrap();
        }
        let mut dec = EventDecoder::new();
        let mut replayed = Vec::new();
        for (h, body) in vx_proto::frames::FrameIter::new(&out) {
            prop_assert_eq!(h.ty, 0x10);
            let (seq, ev) = decode_event_frame(body, &mut dec).unwrap();
            let mut c = Vec::new();
            write_event(&mut c, &ev, seq);
            replayed.push(c);
        }
        prop_assert_eq!(replayed, canonical(&batch));
    }

    #[test]
    fn http_bodies_decode_the_same_in_any_chunks(
        frames in prop::collection::vec(prop::collection::vec(event(5), 0..4), 0..4),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut body = Vec::new();
        for f in &frames {
            body.extend(batch_frame(f, &BatchHead::default()));
        }
        let whole = {
            let mut d = FramesDecoder::new(1 << 20, NOW);
            let mut b = Batch::new();
            d.feed(&body, &mut b).unwrap();
            d.finish(&mut b).unwrap();
            b
        };
        prop_assert_eq!(whole.len(), frames.iter().map(Vec::len).sum::<usize>());
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        points.sort_unstable();
        let mut d = FramesDecoder::new(1 << 20, NOW);
        let mut b = Batch::new();
        let mut at = 0;
        for p in points {
            d.feed(&body[at..p], &mut b).unwrap();
            at = p;
        }
        d.feed(&body[at..], &mut b).unwrap();
        d.finish(&mut b).unwrap();
        prop_assert_eq!(canonical(&b), canonical(&whole));
    }

    #[test]
    fn garbage_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
        cut in any::<usize>(),
        max_event in 1usize..400,
    ) {
        let mut b = Batch::new();
        let mut d = FramesDecoder::new(max_event, NOW);
        let c = cut % (bytes.len() + 1);
        if d.feed(&bytes[..c], &mut b).is_ok() && d.feed(&bytes[c..], &mut b).is_ok() {
            let _ = d.finish(&mut b);
        }
        let mut bd = BatchDecoder::new(bytes.len() as u32, max_event, NOW);
        let _ = bd.decode(&bytes, &mut b);
        let _ = parse_frame(&bytes, 1 << 20);
        let _ = EventDecoder::new().decode(&bytes, NOW);
        let mut dec = EventDecoder::new();
        let _ = decode_event_frame(&bytes, &mut dec);
    }

    #[test]
    fn mutated_frames_decode_or_fail_cleanly(
        events in prop::collection::vec(event(5), 1..4),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut frame = batch_frame(&events, &BatchHead { request_id: 3, ..BatchHead::default() });
        for (at, x) in flips {
            let i = HEAD_LEN + at % (frame.len() - HEAD_LEN);
            frame[i] ^= x;
        }
        let body = &frame[HEAD_LEN..];
        let mut d = BatchDecoder::new(body.len() as u32, 1 << 20, NOW);
        let mut b = Batch::new();
        let (used, res) = d.decode(body, &mut b);
        prop_assert!(used <= body.len());
        if let Ok(Progress::NeedMore { .. }) = res {
            prop_assert!(false, "a whole body cannot need more");
        }
        if res.is_err() {
            prop_assert_eq!(d.left() as usize, body.len() - used);
        }
    }

    #[test]
    fn acks_and_errors_round_trip(
        id in any::<u64>(), a in any::<u64>(), dups in any::<u64>(), fill in any::<u16>(),
        streams in prop::collection::vec(("\\PC{1,20}", any::<u64>()), 0..5),
        code in "[a-z_]{1,20}", message in "\\PC{0,80}",
        details in (
            prop::option::of(any::<u64>()), prop::option::of("\\PC{0,20}"),
            prop::option::of("[a-z._]{1,30}"), prop::option::of(any::<u64>()),
            prop::option::of(any::<u64>()), prop::option::of(any::<u64>()),
            prop::option::of(any::<u16>()),
        ),
    ) {
        let frames = [
            Frame::Ack(Ack {
                request_id: id, accepted: a, duplicates: dups, durability: Durability::Write,
                queue_fill: fill, last_seq: streams, position: None,
            }),
            Frame::Error(ErrorFrame {
                request_id: id, code, message,
                index: details.0, field: details.1, limit: details.2, max: details.3,
                last_seq: details.4, retry_after_ms: details.5, queue_fill: details.6,
            }),
        ];
        for f in frames {
            let mut out = Vec::new();
            f.encode(&mut out).unwrap();
            let (back, used) = parse_frame(&out, u32::MAX).unwrap().unwrap();
            prop_assert_eq!(used, out.len());
            prop_assert_eq!(back, f);
        }
    }
}
