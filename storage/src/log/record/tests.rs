//! Golden bytes and round trips of the format.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::api::{Origin, OriginTopic};
use vx_proto::{EventView, Kind, Num};

fn ev(id: Option<&str>) -> EventView<'_> {
    EventView {
        stream: "s1",
        entity: Some("p1"),
        ty: "hit",
        ts: 42,
        kind: Kind::Counter,
        value: Some(Num::Int(-5)),
        id,
        data: Some("{\"a\":1}"),
    }
}

fn sample() -> Vec<u8> {
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::Events, 7, 1000);
    rb.begin_run(&mut buf, "s1", 10, 2);
    vx_proto::packed::encode_event(&mut buf, &ev(Some("a"))).unwrap();
    vx_proto::packed::encode_event(&mut buf, &ev(None)).unwrap();
    rb.end_run(&mut buf).unwrap();
    rb.begin_run(&mut buf, "s2", 1, 1);
    vx_proto::packed::encode_event(&mut buf, &ev(None)).unwrap();
    rb.end_run(&mut buf).unwrap();
    rb.finish(&mut buf).unwrap();
    buf
}

#[test]
fn record_round_trip() {
    let mut buf = vec![9u8; 3]; // records are appended after existing bytes
    buf.extend_from_slice(&sample());
    let rec = &buf[3..];
    let h = parse_header(rec).unwrap();
    assert_eq!((h.lsn, h.append_ms, h.n, h.len), (7, 1000, 2, rec.len()));
    assert!(crc_ok(&h, rec));
    let runs: Vec<_> = runs(rec, h.n).collect::<Result<_, _>>().unwrap();
    assert_eq!(runs[0].stream, "s1");
    assert_eq!((runs[0].base_seq, runs[0].count, runs[0].at), (10, 2, 32));
    let evs: Vec<_> = vx_proto::packed::events(runs[0].events, "s1")
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(evs, vec![ev(Some("a")), ev(None)]);
    assert_eq!(runs[1].stream, "s2");
    assert_eq!(runs[1].at, runs[0].at + runs[0].len);
    let mut bad = rec.to_vec();
    bad[40] ^= 1;
    assert!(!crc_ok(&h, &bad));
}

#[test]
fn tombstone_round_trip() {
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::Tombstone, 3, 5);
    rb.tombstone(&mut buf, "gone", 41);
    let len = rb.finish(&mut buf).unwrap();
    let h = parse_header(&buf).unwrap();
    assert_eq!((h.ty, h.len, h.n), (RecordType::Tombstone, len, 1));
    assert_eq!(tombstone(&buf).unwrap(), ("gone", 41));
    // Byte by byte: the 32-byte header (type 4, one "run"), then the stream and last seq.
    let mut want = Vec::new();
    want.extend_from_slice(&46u32.to_le_bytes());
    want.extend_from_slice(&buf[4..8]);
    want.extend_from_slice(&[2, 4, 0, 0]);
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&5i64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&4u16.to_le_bytes());
    want.extend_from_slice(b"gone");
    want.extend_from_slice(&41u64.to_le_bytes());
    assert_eq!(buf, want);
    assert_eq!(
        u32::from_le_bytes(buf[4..8].try_into().unwrap()),
        crc32c::crc32c(&buf[8..])
    );
}

/// The record of `sample()` byte by byte, as docs/ARCHITECTURE.md describes it.
#[test]
fn golden_bytes() {
    let rec = sample();
    let mut want: Vec<u8> = Vec::new();
    let body_len = rec.len() as u32;
    want.extend_from_slice(&body_len.to_le_bytes());
    want.extend_from_slice(&rec[4..8]); // crc, checked below
    want.extend_from_slice(&[2, 1, 0, 0]);
    want.extend_from_slice(&7u64.to_le_bytes());
    want.extend_from_slice(&1000i64.to_le_bytes());
    want.extend_from_slice(&2u32.to_le_bytes());
    let event = |id: Option<&str>| {
        let mut e = vec![1u8, 1 | 8 | 16 | if id.is_some() { 4 } else { 0 }, 3];
        e.push(id.map_or(0, |i| i.len() as u8));
        e.extend_from_slice(&2u16.to_le_bytes());
        e.extend_from_slice(&7u32.to_le_bytes());
        e.extend_from_slice(&42i64.to_le_bytes());
        e.extend_from_slice(&(-5i64).to_le_bytes());
        e.extend_from_slice(b"hitp1");
        e.extend_from_slice(id.unwrap_or("").as_bytes());
        e.extend_from_slice(b"{\"a\":1}");
        e
    };
    let run = |stream: &str, base: u64, evs: &[Vec<u8>]| {
        let mut r = Vec::new();
        r.extend_from_slice(&(stream.len() as u16).to_le_bytes());
        r.extend_from_slice(stream.as_bytes());
        r.extend_from_slice(&base.to_le_bytes());
        r.extend_from_slice(&(evs.len() as u32).to_le_bytes());
        let body: Vec<u8> = evs.concat();
        r.extend_from_slice(&(body.len() as u32).to_le_bytes());
        r.extend_from_slice(&body);
        r
    };
    want.extend_from_slice(&run("s1", 10, &[event(Some("a")), event(None)]));
    want.extend_from_slice(&run("s2", 1, &[event(None)]));
    assert_eq!(rec, want);
    assert_eq!(
        u32::from_le_bytes(rec[4..8].try_into().unwrap()),
        crc32c::crc32c(&rec[8..])
    );
}

/// Feature increment records byte by byte (the module docs' layout), and what decoding refuses.
#[test]
fn feature_incr_golden_bytes() {
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureIncr, 13, 81);
    rb.feature_incr(&mut buf, "p7", "hp", Increment::Int(-3));
    let len = rb.finish(&mut buf).unwrap();
    assert_eq!(len, buf.len());
    assert_eq!(&buf[8..12], &[2, 7, 0, 0]);
    assert_eq!(&buf[28..32], &1u32.to_le_bytes());
    let mut body = vec![2, 0, b'p', b'7', 2, b'h', b'p', 1];
    body.extend_from_slice(&(-3i64).to_le_bytes());
    assert_eq!(&buf[32..], &body[..]);
    let h = parse_header(&buf).unwrap();
    assert_eq!(h.ty, RecordType::FeatureIncr);
    assert_eq!(
        feature_incr(&buf, h.n).unwrap(),
        ("p7", "hp", Increment::Int(-3))
    );
    assert!(feature_incr(&buf[..buf.len() - 1], 1).is_err());
    assert!(feature_incr(&buf, 2).is_err());

    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureIncr, 14, 82);
    rb.feature_incr(&mut buf, "p7", "r", Increment::Float(0.25));
    rb.finish(&mut buf).unwrap();
    let mut body = vec![2, 0, b'p', b'7', 1, b'r', 2];
    body.extend_from_slice(&0.25f64.to_bits().to_le_bytes());
    assert_eq!(&buf[32..], &body[..]);
    assert_eq!(
        feature_incr(&buf, 1).unwrap(),
        ("p7", "r", Increment::Float(0.25))
    );
    // An unknown tag and a non-finite float are bad records.
    let mut bad = buf.clone();
    bad[38] = 3;
    assert!(feature_incr(&bad, 1).is_err());
    let mut bad = buf.clone();
    bad[39..47].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
    assert!(feature_incr(&bad, 1).is_err());
}

/// Feature put and delete records byte by byte (the module docs' layout).
#[test]
fn feature_records_golden_bytes() {
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeaturePut, 9, 77);
    let set = vec![
        ("a".to_string(), Some(FeatureValue::Int(-2))),
        ("b".to_string(), Some(FeatureValue::Float(0.5))),
        ("c".to_string(), Some(FeatureValue::Bool(true))),
        ("d".to_string(), Some(FeatureValue::Str("xy".into()))),
        ("e".to_string(), None),
    ];
    rb.feature_put(&mut buf, "p7", &set);
    let len = rb.finish(&mut buf).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&(len as u32).to_le_bytes());
    want.extend_from_slice(&buf[4..8]);
    want.extend_from_slice(&[2, 2, 0, 0]);
    want.extend_from_slice(&9u64.to_le_bytes());
    want.extend_from_slice(&77i64.to_le_bytes());
    want.extend_from_slice(&5u32.to_le_bytes());
    want.extend_from_slice(&2u16.to_le_bytes());
    want.extend_from_slice(b"p7");
    want.extend_from_slice(&[1, b'a', 1]);
    want.extend_from_slice(&(-2i64).to_le_bytes());
    want.extend_from_slice(&[1, b'b', 2]);
    want.extend_from_slice(&0.5f64.to_bits().to_le_bytes());
    want.extend_from_slice(&[1, b'c', 3, 1]);
    want.extend_from_slice(&[1, b'd', 4]);
    want.extend_from_slice(&2u32.to_le_bytes());
    want.extend_from_slice(b"xy");
    want.extend_from_slice(&[1, b'e', 0]);
    assert_eq!(buf, want);
    assert_eq!(
        u32::from_le_bytes(buf[4..8].try_into().unwrap()),
        crc32c::crc32c(&buf[8..])
    );
    let h = parse_header(&buf).unwrap();
    let (entity, got) = feature_put(&buf, h.n).unwrap();
    assert_eq!(entity, "p7");
    let names: Vec<&str> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    assert_eq!(got[3].1, Some(FeatureValue::Str("xy".into())));
    assert_eq!(got[4].1, None);

    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureDelete, 10, 78);
    rb.feature_delete(&mut buf, [("p7", Some("hp"))]);
    rb.finish(&mut buf).unwrap();
    assert_eq!(&buf[8..10], &[2, 3]);
    assert_eq!(&buf[28..32], &1u32.to_le_bytes());
    assert_eq!(&buf[32..], &[2, 0, b'p', b'7', 2, b'h', b'p']);
    assert_eq!(feature_delete(&buf, 1).unwrap(), [("p7", Some("hp"))]);
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureDelete, 11, 79);
    rb.feature_delete(&mut buf, [("p7", None)]);
    rb.finish(&mut buf).unwrap();
    assert_eq!(&buf[32..], &[2, 0, b'p', b'7', 0]);
    assert_eq!(feature_delete(&buf, 1).unwrap(), [("p7", None)]);
    // A truncated or padded body is refused, and so is a count the body does not hold.
    assert!(feature_delete(&buf[..buf.len() - 1], 1).is_err());
    assert!(feature_delete(&buf, 0).is_err());
    assert!(feature_delete(&buf, 2).is_err());

    // Several targets (`HDEL p7 a bc`, then `DEL q` in the same record): a target of the
    // entity before it writes entity_len 0 and no entity.
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureDelete, 12, 80);
    let targets = [("p7", Some("a")), ("p7", Some("bc")), ("q", None)];
    rb.feature_delete(&mut buf, targets);
    let len = rb.finish(&mut buf).unwrap();
    assert_eq!(len, buf.len());
    assert_eq!(&buf[8..12], &[2, 3, 0, 0]);
    assert_eq!(&buf[28..32], &3u32.to_le_bytes());
    assert_eq!(
        &buf[32..],
        &[
            2, 0, b'p', b'7', 1, b'a', // p7, a
            0, 0, 2, b'b', b'c', // the same entity, bc
            1, 0, b'q', 0, // q, whole
        ]
    );
    assert_eq!(feature_delete(&buf, 3).unwrap(), targets);
    assert!(feature_delete(&buf, 2).is_err(), "bytes left over");
    assert!(feature_delete(&buf, 4).is_err(), "a target missing");
    // The first target cannot refer to the one before it.
    let mut bad = buf[..32].to_vec();
    bad.extend_from_slice(&[0, 0, 0]);
    assert!(feature_delete(&bad, 1).is_err());
}

/// A record with an origin, byte by byte: flag bit 0 in the header, the 16 origin bytes
/// (topic, three zero bytes, partition, offset) right after it, inside `len` and the CRC, and
/// the body after them. Here a tombstone consumed from the streams topic.
#[test]
fn origin_golden_bytes() {
    let origin = Origin {
        topic: OriginTopic::Streams,
        partition: 3,
        offset: 0x0102_0304_0506_0708,
    };
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin_with(&mut buf, RecordType::Tombstone, 3, 5, Some(origin));
    rb.tombstone(&mut buf, "gone", 41);
    let len = rb.finish(&mut buf).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&62u32.to_le_bytes());
    want.extend_from_slice(&buf[4..8]);
    want.extend_from_slice(&[2, 4, 1, 0]); // version, type, flags = 1 (origin follows)
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&5i64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&[0, 0, 0, 0]); // topic 0 (streams), padding
    want.extend_from_slice(&3u32.to_le_bytes());
    want.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
    want.extend_from_slice(&4u16.to_le_bytes());
    want.extend_from_slice(b"gone");
    want.extend_from_slice(&41u64.to_le_bytes());
    assert_eq!(buf, want);
    assert_eq!(len, 62);
    assert_eq!(
        u32::from_le_bytes(buf[4..8].try_into().unwrap()),
        crc32c::crc32c(&buf[8..])
    );
    let h = parse_header(&buf).unwrap();
    assert!(h.has_origin && crc_ok(&h, &buf));
    assert_eq!(h.body_at(), 48);
    assert_eq!(origin_of(&h, &buf), Some(origin));
    assert_eq!(tombstone(&buf).unwrap(), ("gone", 41));
    // Without the flag the same body starts at 32; a record without an origin has none.
    let mut plain = Vec::new();
    let mut rb = RecordBuilder::begin(&mut plain, RecordType::Tombstone, 3, 5);
    rb.tombstone(&mut plain, "gone", 41);
    rb.finish(&mut plain).unwrap();
    let h = parse_header(&plain).unwrap();
    assert!(!h.has_origin);
    assert_eq!(origin_of(&h, &plain), None);
}

fn origin_of(h: &Header, rec: &[u8]) -> Option<Origin> {
    origin(h, rec).unwrap()
}

/// Any flag bit but bit 0 is a bad record; so is bit 0 on a record too short for an origin,
/// and an origin with an unknown topic or non-zero padding.
#[test]
fn other_flags_and_bad_origins_are_refused() {
    let o = Origin {
        topic: OriginTopic::Entities,
        partition: 1,
        offset: 9,
    };
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin_with(&mut buf, RecordType::Reset, 1, 0, Some(o));
    rb.reset(&mut buf, OriginTopic::Entities, 1);
    rb.finish(&mut buf).unwrap();
    for bit in 1..16 {
        let mut bad = buf.clone();
        bad[10..12].copy_from_slice(&(1u16 | (1 << bit)).to_le_bytes());
        assert_eq!(
            parse_header(&bad),
            Err(Decode::Bad("unknown record flags")),
            "bit {bit}"
        );
    }
    let mut short = buf.clone();
    short[0..4].copy_from_slice(&40u32.to_le_bytes());
    assert!(parse_header(&short).is_err());
    let h = parse_header(&buf).unwrap();
    let mut topic = buf.clone();
    topic[32] = 2;
    assert!(origin(&h, &topic).is_err());
    let mut pad = buf.clone();
    pad[34] = 1;
    assert!(origin(&h, &pad).is_err());
    assert_eq!(origin(&h, &buf).unwrap(), Some(o));
}

/// A reset record byte by byte: target (0 streams, 1 feature tables) and shard; the record is
/// exactly 37 bytes (53 with an origin), anything else is bad.
#[test]
fn reset_golden_bytes() {
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin(&mut buf, RecordType::Reset, 12, 34);
    rb.reset(&mut buf, OriginTopic::Entities, 0x0A0B_0C0D);
    let len = rb.finish(&mut buf).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&37u32.to_le_bytes());
    want.extend_from_slice(&buf[4..8]);
    want.extend_from_slice(&[2, 5, 0, 0]);
    want.extend_from_slice(&12u64.to_le_bytes());
    want.extend_from_slice(&34i64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&[1, 0x0D, 0x0C, 0x0B, 0x0A]);
    assert_eq!(buf, want);
    assert_eq!(len, 37);
    assert_eq!(
        u32::from_le_bytes(buf[4..8].try_into().unwrap()),
        crc32c::crc32c(&buf[8..])
    );
    assert_eq!(reset(&buf).unwrap(), (OriginTopic::Entities, 0x0A0B_0C0D));
    assert!(reset(&buf[..36]).is_err());
    let mut bad = buf.clone();
    bad[32] = 7;
    assert!(reset(&bad).is_err());
}

/// An entity-events record: an event batch's runs (base_seq 0) after the header and origin.
#[test]
fn entity_events_golden_bytes() {
    let o = Origin {
        topic: OriginTopic::Entities,
        partition: 2,
        offset: 77,
    };
    let mut buf = Vec::new();
    let mut rb = RecordBuilder::begin_with(&mut buf, RecordType::EntityEvents, 8, 9, Some(o));
    rb.begin_run(&mut buf, "s1", 0, 1);
    vx_proto::packed::encode_event(&mut buf, &ev(None)).unwrap();
    rb.end_run(&mut buf).unwrap();
    rb.finish(&mut buf).unwrap();
    let mut event = Vec::new();
    vx_proto::packed::encode_event(&mut event, &ev(None)).unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&((48 + 2 + 2 + 16 + event.len()) as u32).to_le_bytes());
    want.extend_from_slice(&buf[4..8]);
    want.extend_from_slice(&[2, 6, 1, 0]);
    want.extend_from_slice(&8u64.to_le_bytes());
    want.extend_from_slice(&9i64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&[1, 0, 0, 0]);
    want.extend_from_slice(&2u32.to_le_bytes());
    want.extend_from_slice(&77u64.to_le_bytes());
    want.extend_from_slice(&2u16.to_le_bytes());
    want.extend_from_slice(b"s1");
    want.extend_from_slice(&0u64.to_le_bytes());
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&(event.len() as u32).to_le_bytes());
    want.extend_from_slice(&event);
    assert_eq!(buf, want);
    let h = parse_header(&buf).unwrap();
    assert_eq!((h.ty, h.n), (RecordType::EntityEvents, 1));
    let runs: Vec<_> = runs(&buf, h.n).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        (runs[0].stream, runs[0].base_seq, runs[0].at),
        ("s1", 0, 48)
    );
}

proptest::proptest! {
    /// Any targets (runs of one entity among them) come back as written, and any body bytes
    /// under any count decode to an error or to targets, never a panic or an allocation the
    /// bytes do not pay for.
    #[test]
    fn feature_delete_targets_round_trip(
        targets in proptest::collection::vec(
            (0usize..4, proptest::option::of("[a-z]{1,4}")),
            1..12,
        ),
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        n in proptest::prelude::any::<u32>(),
    ) {
        let entities = ["p7", "q", "player-12", "é"];
        let targets: Vec<(&str, Option<&str>)> =
            targets.iter().map(|(e, n)| (entities[*e], n.as_deref())).collect();
        let mut buf = Vec::new();
        let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeatureDelete, 1, 2);
        rb.feature_delete(&mut buf, targets.iter().copied());
        rb.finish(&mut buf).unwrap();
        let h = parse_header(&buf).unwrap();
        proptest::prop_assert_eq!(h.n as usize, targets.len());
        proptest::prop_assert_eq!(feature_delete(&buf, h.n).unwrap(), targets);

        let mut rec = buf[..HEADER_LEN].to_vec();
        rec.extend_from_slice(&body);
        if let Ok(got) = feature_delete(&rec, n) {
            proptest::prop_assert_eq!(got.len(), n as usize);
        }
    }
}
