//! The generators: valid, seeded, and what each lane sends.

use super::*;

#[test]
fn ingest_events_are_value_size_bytes_of_valid_json() {
    let w = Workload {
        value_size_b: 128,
        batch: 5,
        streams: 3,
        ids: true,
        ..Workload::default()
    };
    let mut g = match IngestGen::new(&w, 0, "t") {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    let (body, ty) = g.next_body();
    assert_eq!(ty, "application/x-ndjson");
    let text = String::from_utf8(body).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5);
    let mut ids = std::collections::HashSet::new();
    for line in &lines {
        assert_eq!(line.len(), 128, "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        assert_eq!(v["type"], EVENT_TYPE);
        assert!(v["stream"].as_str().is_some_and(|s| s.starts_with("lt-")));
        assert!(ids.insert(v["id"].as_str().unwrap_or_default().to_string()));
    }
    // One stream per request.
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap_or_default();
    let last: serde_json::Value = serde_json::from_str(lines[4]).unwrap_or_default();
    assert_eq!(first["stream"], last["stream"]);
    // JSON arrays carry the same events.
    let mut g = match IngestGen::new(
        &Workload {
            format: Format::Json,
            ..w.clone()
        },
        0,
        "t",
    ) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    let (body, ty) = g.next_body();
    assert_eq!(ty, "application/json");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    assert_eq!(v.as_array().map(Vec::len), Some(5));
    // Frames batches carry the same fields.
    let batch = g.next_batch();
    let wire = batch.wire();
    assert_eq!(wire.len(), 5);
    for ev in &wire {
        assert!(ev.stream.starts_with("lt-"));
        assert!(ev.entity.is_some_and(|e| e.starts_with('k')));
        assert!(ev.id.is_some());
        let data = ev.data.unwrap_or_default();
        assert!(data.starts_with('"') && data.ends_with('"') && data.len() > 2);
    }
    // Without entities (ingest without the feature store), in both encodings.
    let mut g = match IngestGen::new(
        &Workload {
            entities: false,
            ..w
        },
        0,
        "t",
    ) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    let (body, _) = g.next_body();
    let text = String::from_utf8(body).unwrap_or_default();
    for line in text.lines() {
        assert_eq!(line.len(), 128, "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        assert!(v.get("entity").is_none(), "{line}");
    }
    assert!(g.next_batch().wire().iter().all(|ev| ev.entity.is_none()));
}

#[test]
fn the_same_seed_replays_the_same_operations() {
    let w = Workload::default();
    let draw = |lane| {
        let mut g = match KvGen::new(&w, lane) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        (0..100).map(|_| g.next_op()).collect::<Vec<_>>()
    };
    assert_eq!(draw(0), draw(0));
    assert_ne!(draw(0), draw(1));
}

#[test]
fn kv_mix_and_keys_follow_the_workload() {
    let w = Workload {
        read_pct: 70.0,
        write_pct: 25.0,
        delete_pct: 5.0,
        ..Workload::default()
    };
    let mut g = match KvGen::new(&w, 0) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    let mut n = [0u32; 3];
    for _ in 0..100_000 {
        match g.next_op() {
            KvOp::Get(_) => n[0] += 1,
            KvOp::Set(_) => n[1] += 1,
            KvOp::Del(_) => n[2] += 1,
            KvOp::Query(_) => panic!("no batch reads at query_pct 0"),
        }
    }
    assert!((69_000..71_000).contains(&n[0]), "{n:?}");
    assert!((24_000..26_000).contains(&n[1]), "{n:?}");
    assert!((4_500..5_500).contains(&n[2]), "{n:?}");
    assert_eq!(kv_key(42, 16), b"key:000000000042");
}

fn kv_and_features(w: Workload) -> (Workload, Workload) {
    let kv = Workload {
        scenario: crate::endpoint::Scenario::Kv,
        endpoints: vec!["resp://127.0.0.1:6379".into()],
        ..w.clone()
    };
    let features = Workload {
        scenario: crate::endpoint::Scenario::Features,
        endpoints: vec!["http://127.0.0.1:7100".into()],
        ..w
    };
    for w in [&kv, &features] {
        if let Err(e) = w.validate() {
            panic!("{e}");
        }
    }
    (kv, features)
}

fn generator(w: &Workload, lane: u32) -> KvGen {
    match KvGen::new(w, lane) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    }
}

/// The arguments of one RESP command (an array of bulk strings) at the front of `buf`.
fn resp_args(buf: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(buf).to_string();
    let mut lines = text.split("\r\n");
    let n: usize = lines
        .next()
        .and_then(|l| l.strip_prefix('*'))
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    (0..n)
        .map(|_| {
            let _len = lines.next();
            lines.next().unwrap_or_default().as_bytes().to_vec()
        })
        .collect()
}

/// The entities a features request names, in order.
fn feature_entities(r: &FeatureRequest) -> Vec<Vec<u8>> {
    if r.method == "POST" {
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        v["entities"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e.as_str().unwrap_or_default().as_bytes().to_vec())
            .collect()
    } else {
        let seg = r.path.strip_prefix("/v1/features/").unwrap_or_default();
        assert!(!seg.contains('/'), "one path segment: {}", r.path);
        vec![percent_encoding::percent_decode_str(seg).collect()]
    }
}

#[test]
fn features_issue_the_same_operations_on_the_same_keys_as_kv() {
    let (kv, features) = kv_and_features(Workload {
        distribution: crate::workload::Distribution::Zipfian,
        key_space: 5_000,
        read_pct: 60.0,
        write_pct: 20.0,
        delete_pct: 5.0,
        query_pct: 15.0,
        batch_size: 8,
        seed: 77,
        ..Workload::default()
    });
    for lane in 0..4 {
        let (mut a, mut b) = (generator(&kv, lane), generator(&features, lane));
        for _ in 0..2_000 {
            let (op, same) = (a.next_op(), b.next_op());
            assert_eq!(op, same, "lane {lane}");
            assert_eq!(a.last_op(), op.op());
            // What goes on the wire names the same keys, in the same order.
            let mut cmd = Vec::new();
            a.encode_resp(&op, &mut cmd);
            let args = resp_args(&cmd);
            let verb = match op {
                KvOp::Get(_) => "GET",
                KvOp::Set(_) => "SET",
                KvOp::Del(_) => "DEL",
                KvOp::Query(_) => "MGET",
            };
            assert_eq!(args[0], verb.as_bytes());
            let req = b.feature_request(&op);
            let resp_keys = match op {
                KvOp::Set(_) => {
                    assert_eq!(args[2], a.value());
                    args[1..2].to_vec()
                }
                _ => args[1..].to_vec(),
            };
            assert_eq!(resp_keys, feature_entities(&req), "{op:?}");
        }
    }
}

#[test]
fn a_mix_without_batch_reads_draws_what_kv_always_drew() {
    // The generator before query_pct existed: a key, then the roll, nothing else. Runs
    // recorded with it replay the same operations now.
    let w = Workload {
        distribution: crate::workload::Distribution::Zipfian,
        ..Workload::default()
    };
    let mut g = generator(&w, 3);
    let mut rng = lane_rng(w.seed, 3);
    let keys = match KeyDist::new(w.distribution, w.key_space, w.zipf_alpha) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    };
    for _ in 0..10_000 {
        let key = keys.sample(&mut rng);
        let roll = rng.random_range(0.0..100.0);
        let old = if roll < w.read_pct {
            KvOp::Get(key)
        } else if roll < w.read_pct + w.write_pct {
            KvOp::Set(key)
        } else {
            KvOp::Del(key)
        };
        assert_eq!(g.next_op(), old);
    }
}

#[test]
fn batch_reads_take_their_share_and_batch_size_keys() {
    let (_, w) = kv_and_features(Workload {
        key_space: 1_000,
        read_pct: 50.0,
        write_pct: 20.0,
        delete_pct: 5.0,
        query_pct: 25.0,
        batch_size: 7,
        ..Workload::default()
    });
    let mut g = generator(&w, 0);
    let mut n = [0u32; 4];
    for _ in 0..100_000 {
        let op = g.next_op();
        match &op {
            KvOp::Get(_) => n[0] += 1,
            KvOp::Set(_) => n[1] += 1,
            KvOp::Del(_) => n[2] += 1,
            KvOp::Query(keys) => {
                n[3] += 1;
                assert_eq!(keys.len(), 7);
                assert!(keys.iter().all(|k| *k < 1_000));
            }
        }
        assert_eq!(op.events(), if op.op() == Op::Query { 7 } else { 1 });
    }
    assert!((49_000..51_000).contains(&n[0]), "{n:?}");
    assert!((19_000..21_000).contains(&n[1]), "{n:?}");
    assert!((4_500..5_500).contains(&n[2]), "{n:?}");
    assert!((24_000..26_000).contains(&n[3]), "{n:?}");
    // Only batch reads: every operation is one.
    let (_, w) = kv_and_features(Workload {
        read_pct: 0.0,
        write_pct: 0.0,
        delete_pct: 0.0,
        query_pct: 100.0,
        ..Workload::default()
    });
    let mut g = generator(&w, 0);
    assert!((0..1_000).all(|_| matches!(g.next_op(), KvOp::Query(k) if k.len() == 100)));
}

#[test]
fn feature_requests_are_those_of_spec_6() {
    let (_, w) = kv_and_features(Workload {
        value_size_b: 128,
        ..Workload::default()
    });
    let g = generator(&w, 0);
    let get = g.feature_request(&KvOp::Get(42));
    assert_eq!(
        (get.method, get.path.as_str(), get.content_type),
        ("GET", "/v1/features/key%3A000000000042", None)
    );
    assert!(get.body.is_empty());
    let del = g.feature_request(&KvOp::Del(42));
    assert_eq!((del.method, del.path), ("DELETE", get.path.clone()));
    let put = g.feature_request(&KvOp::Set(42));
    assert_eq!(
        (put.method, &put.path, put.content_type),
        ("PUT", &get.path, Some("application/json"))
    );
    // The value is kv's SET value: JSON-safe, exactly value_size_b bytes.
    let v: serde_json::Value = serde_json::from_slice(&put.body).unwrap_or_default();
    let value = v[FEATURE].as_str().unwrap_or_default();
    assert_eq!(value.len(), 128);
    assert_eq!(value.as_bytes(), g.value());
    assert_eq!(v.as_object().map(|o| o.len()), Some(1));
    assert_eq!(g.bytes_of(&KvOp::Set(1)), 128);
    assert_eq!(g.bytes_of(&KvOp::Get(1)), 0);
    let q = g.feature_request(&KvOp::Query(vec![3, 1, 3]));
    assert_eq!(
        (q.method, q.path.as_str(), q.content_type),
        ("POST", "/v1/features/query", Some("application/json"))
    );
    let v: serde_json::Value = serde_json::from_slice(&q.body).unwrap_or_default();
    assert_eq!(
        v,
        serde_json::json!({
            "entities": ["key:000000000003", "key:000000000001", "key:000000000003"],
            "names": ["v"],
        })
    );
    assert_eq!(g.entity(42).as_bytes(), kv_key(42, 16));
}

#[test]
fn pages_start_inside_the_retained_range() {
    let w = Workload {
        page_events: 256,
        ..Workload::default()
    };
    let streams = vec![
        StreamInfo {
            name: "a".into(),
            first_seq: 100,
            last_seq: 1000,
        },
        StreamInfo {
            name: "b".into(),
            first_seq: 1,
            last_seq: 10,
        },
    ];
    let mut g = match ReplayGen::new(&w, 0, streams.len()) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    };
    for _ in 0..10_000 {
        match g.next(&streams) {
            ReplayOp::Page {
                stream: 0, from, ..
            } => assert!((100..=745).contains(&from)),
            ReplayOp::Page {
                stream: 1, from, ..
            } => assert_eq!(from, 1),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn hash_kv_reads_and_writes_the_field_the_features_scenario_uses() {
    let w = Workload {
        scenario: crate::endpoint::Scenario::Kv,
        kv_type: crate::workload::KvType::Hash,
        distribution: crate::workload::Distribution::Zipfian,
        seed: 5,
        endpoints: vec!["resp://127.0.0.1:6379".into()],
        ..Workload::default()
    };
    if let Err(e) = w.validate() {
        panic!("{e}");
    }
    let mut g = generator(&w, 0);
    let (mut gets, mut sets, mut dels) = (0, 0, 0);
    for _ in 0..1_000 {
        let op = g.next_op();
        let mut cmd = Vec::new();
        g.encode_resp(&op, &mut cmd);
        let args = resp_args(&cmd);
        match op {
            KvOp::Get(k) => {
                gets += 1;
                assert_eq!(
                    args,
                    [b"HGET".to_vec(), g.key(k), FEATURE.as_bytes().to_vec()]
                );
            }
            KvOp::Set(k) => {
                sets += 1;
                assert_eq!(
                    args,
                    [
                        b"HSET".to_vec(),
                        g.key(k),
                        FEATURE.as_bytes().to_vec(),
                        g.value().to_vec()
                    ]
                );
            }
            KvOp::Del(k) => {
                dels += 1;
                assert_eq!(args, [b"DEL".to_vec(), g.key(k)]);
            }
            KvOp::Query(_) => panic!("a batch read without query_pct"),
        }
    }
    assert!(gets > 0 && sets > 0 && dels > 0);
    let with_query = Workload {
        query_pct: 5.0,
        delete_pct: 0.0,
        ..w
    };
    assert!(with_query.validate().is_err());
}

#[test]
fn keys_written_in_place_are_the_formatted_keys() {
    // The RESP writer puts a key straight into its buffer; the features scenario formats it.
    // Both must name the same entity, at any size, including indexes wider than the size.
    for size in [0, 3, 4, 5, 8, 16, 40] {
        for k in [0, 1, 9, 10, 99, 12_345, 999_999_999_999, u64::MAX] {
            let mut out = b"x".to_vec();
            put_key(k, size, &mut out);
            assert_eq!(
                &out[1..],
                key_string(k, size).as_bytes(),
                "k {k} size {size}"
            );
            assert_eq!(key_len(k, size), out.len() - 1, "k {k} size {size}");
            assert_eq!(kv_key(k, size), &out[1..]);
        }
    }
}
