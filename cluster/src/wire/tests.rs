//! Golden bytes, round trips and damaged records of the cluster record format.

#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;
use vx_proto::{EventView, Kind, Num};
use vx_storage::features::FeatureValue;

fn ev<'a>(stream: &'a str, ty: &'a str, entity: Option<&'a str>, ts: i64) -> EventView<'a> {
    EventView {
        stream,
        entity,
        ty,
        ts,
        kind: Kind::Event,
        value: None,
        id: None,
        data: None,
    }
}

/// The bytes of an events record, pinned: a change of the format must change VERSION.
#[test]
fn golden_bytes_of_an_events_record() {
    let mut b = Batch::new();
    b.push(&EventView {
        kind: Kind::Counter,
        value: Some(Num::Int(3)),
        id: Some("i"),
        ..ev("s", "t", Some("e"), 5)
    })
    .unwrap();
    let v = encode_events(&b, None, 0x0102, Some(7), false).unwrap();
    let mut want = vec![
        1, 1, 1, 0, // version, kind events, flag expected, reserved
        1, 0, 0, 0, // one run
        0x02, 0x01, 0, 0, 0, 0, 0, 0, // append_ms
        7, 0, 0, 0, 0, 0, 0, 0, // expected last seq
        1, 0, b's', // stream
        1, 0, 0, 0, // count
    ];
    let mut event = Vec::new();
    vx_proto::packed::encode_event(&mut event, &b.iter().next().unwrap()).unwrap();
    want.extend_from_slice(&(event.len() as u32).to_le_bytes());
    want.extend_from_slice(&event);
    assert_eq!(v, want);
    assert_eq!(
        encode_delete("ab", -1),
        vec![
            1, 2, 0, 0, 1, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0,
            2, 0, b'a', b'b'
        ]
    );
}

#[test]
fn events_round_trip_per_shard() {
    let mut b = Batch::new();
    for (i, s) in ["a", "b", "c", "a"].iter().enumerate() {
        b.push(&ev(s, "t", Some("ent"), i as i64)).unwrap();
    }
    b.prepare(4, |_, _| 0);
    let mut total = 0;
    for shard in 0..4 {
        let Some(v) = encode_events(&b, Some(shard), 9, None, false) else {
            continue;
        };
        let rec = decode(&v).unwrap();
        assert_eq!(rec.append_ms, 9);
        let Body::Events {
            batch,
            expected_last_seq: None,
        } = rec.body
        else {
            panic!("{:?}", rec.body);
        };
        for run in batch.runs() {
            assert_eq!(vx_proto::shard::shard_of(batch.stream(run), 4), shard);
        }
        total += batch.len();
    }
    assert_eq!(total, 4);
    let v = encode_events(&b, None, 1, None, true).unwrap();
    assert!(matches!(decode(&v).unwrap().body, Body::EntityEvents { batch } if batch.len() == 4));
    match decode(&encode_delete("gone", 3)).unwrap().body {
        Body::Delete { stream } => assert_eq!(stream, "gone"),
        other => panic!("{other:?}"),
    }
}

/// Any cut or flipped byte is an error, never a panic.
#[test]
fn damaged_records_are_errors() {
    let mut b = Batch::new();
    b.push(&ev("s", "t", None, 1)).unwrap();
    b.push(&ev("s2", "t", Some("x"), 2)).unwrap();
    let v = encode_events(&b, None, 1, None, false).unwrap();
    for cut in 0..v.len() {
        assert!(decode(&v[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = v.clone();
    longer.push(0);
    assert!(decode(&longer).is_err());
    for i in 0..v.len() {
        for bit in 0..8 {
            let mut w = v.clone();
            w[i] ^= 1 << bit;
            let _ = decode(&w);
        }
    }
    assert!(matches!(decode(&[2]), Err(WireError::Version(2))));
}

#[test]
fn feature_increments_round_trip_and_are_pinned() {
    let v = encode_feature_incr("ent", "hp", Increment::Int(-3), 7);
    assert_eq!(&v[..8], &[1, 6, 0, 0, 1, 0, 0, 0]);
    let mut body = vec![3, 0, b'e', b'n', b't', 2, b'h', b'p', 1];
    body.extend_from_slice(&(-3i64).to_le_bytes());
    assert_eq!(&v[24..], &body[..]);
    for by in [Increment::Int(-3), Increment::Float(0.25)] {
        let v = encode_feature_incr("ent", "hp", by, 7);
        match decode(&v).unwrap().body {
            Body::FeatureIncr {
                entity,
                name,
                by: got,
            } => {
                assert_eq!((entity.as_str(), name.as_str(), got), ("ent", "hp", by));
            }
            other => panic!("{other:?}"),
        }
        assert!(decode(&v[..v.len() - 1]).is_err());
    }
    // A non-finite float, an unknown tag, an empty name: refused.
    let mut v = encode_feature_incr("ent", "hp", Increment::Float(1.0), 7);
    let at = v.len() - 8;
    v[at..].copy_from_slice(&f64::INFINITY.to_bits().to_le_bytes());
    assert!(decode(&v).is_err());
    v[at - 1] = 9;
    assert!(decode(&v).is_err());
    let mut v = encode_feature_incr("ent", "hp", Increment::Int(1), 7);
    v[29] = 0;
    assert!(decode(&v).is_err());
}

#[test]
fn feature_writes_round_trip_and_are_pinned() {
    let set = vec![
        ("a".to_string(), Some(FeatureValue::Int(-2))),
        ("b".to_string(), Some(FeatureValue::Float(0.5))),
        ("c".to_string(), Some(FeatureValue::Bool(true))),
        ("d".to_string(), Some(FeatureValue::Str("xy".into()))),
        ("e".to_string(), None),
    ];
    let v = encode_feature_put("ent", &set, 7);
    assert_eq!(&v[..8], &[1, 4, 0, 0, 5, 0, 0, 0]);
    assert_eq!(&v[24..29], &[3, 0, b'e', b'n', b't']);
    assert_eq!(&v[29..32], &[1, b'a', 1]);
    match decode(&v).unwrap().body {
        Body::FeaturePut { entity, set: got } => {
            assert_eq!(entity, "ent");
            assert_eq!(got, set);
        }
        other => panic!("{other:?}"),
    }
    let d = encode_feature_delete("ent", Some("a"), 7);
    assert_eq!(&d[24..], &[3, 0, b'e', b'n', b't', 1, b'a']);
    match decode(&d).unwrap().body {
        Body::FeatureDelete { entity, name } => {
            assert_eq!((entity.as_str(), name.as_deref()), ("ent", Some("a")));
        }
        other => panic!("{other:?}"),
    }
    match decode(&encode_feature_delete("ent", None, 7)).unwrap().body {
        Body::FeatureDelete { name: None, .. } => {}
        other => panic!("{other:?}"),
    }
    for cut in 0..v.len() {
        assert!(decode(&v[..cut]).is_err(), "cut at {cut}");
    }
}

proptest::proptest! {
    /// Any valid events, grouped by shard into records, decode back to the same events.
    #[test]
    fn valid_events_round_trip(
        evs in proptest::collection::vec(vx_proto::testing::event(2), 1..20),
        expected in proptest::option::of(0u64..1000),
        append_ms in proptest::num::i64::ANY,
    ) {
        let data: Vec<Option<String>> = evs.iter().map(|e| e.data_compact()).collect();
        let mut b = Batch::new();
        for (e, d) in evs.iter().zip(&data) {
            b.push(&e.stored(vx_proto::testing::NOW, d.as_deref())).unwrap();
        }
        b.prepare(4, |_, _| 0);
        let mut back: Vec<String> = Vec::new();
        for shard in 0..4 {
            let Some(v) = encode_events(&b, Some(shard), append_ms, expected, false) else {
                continue;
            };
            let rec = decode(&v).unwrap();
            proptest::prop_assert_eq!(rec.append_ms, append_ms);
            let Body::Events { batch, expected_last_seq } = rec.body else {
                panic!("not events");
            };
            proptest::prop_assert_eq!(expected_last_seq, expected);
            back.extend(batch.iter().map(|ev| format!("{ev:?}")));
        }
        let mut want: Vec<String> = b.iter().map(|ev| format!("{ev:?}")).collect();
        want.sort();
        back.sort();
        proptest::prop_assert_eq!(back, want);
    }

    /// Any bytes decode to a record or an error, never a panic.
    #[test]
    fn any_bytes_are_safe(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let _ = decode(&bytes);
    }
}
