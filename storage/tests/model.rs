//! Model test: random sequences of writes (with repeated ids, several streams, conditional
//! writes) and restarts, checked against a plain in-memory model of docs/API.md §2/§3 semantics:
//! gapless per-stream `seq`, dedup by (stream, id) including inside one request, dedup before
//! the conditional check, 409 leaving nothing behind, and everything surviving a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use vx_proto::{Batch, EventView, Kind, Num};
use vx_storage::*;

#[derive(Debug, Clone)]
enum Op {
    /// Events as (stream index, optional id, value); optional expected last seq of stream 0.
    Write(Vec<(u8, Option<u8>, i64)>, Option<u64>),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (
            prop::collection::vec((0u8..3, prop::option::of(0u8..12), any::<i64>()), 0..12),
            prop::option::of(0u64..6)
        )
            .prop_map(|(evs, exp)| Op::Write(evs, exp)),
        1 => Just(Op::Restart),
    ]
}

#[derive(Default)]
struct Model {
    streams: HashMap<String, Vec<(Option<String>, i64)>>,
    ids: HashMap<(String, String), u64>,
}

fn name(i: u8) -> String {
    format!("stream/{i}")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn storage_matches_model(ops in prop::collection::vec(op(), 1..25)) {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = StorageConfig::new(dir.path());
        cfg.shards = Some(3);
        cfg.fsync = FsyncMode::Never;
        cfg.segment_bytes = 1024;
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let (mut store, _) = Store::open(cfg.clone()).unwrap();
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Restart => {
                    store.shutdown();
                    drop(store);
                    store = Store::open(cfg.clone()).unwrap().0;
                }
                Op::Write(evs, expected) => {
                    // Conditional writes only make sense for single-stream requests.
                    let single = evs.iter().map(|e| e.0).collect::<HashSet<_>>().len() == 1;
                    let expected = expected.filter(|_| single);
                    let mut b = Batch::new();
                    let names: Vec<String> = evs.iter().map(|e| name(e.0)).collect();
                    let ids: Vec<Option<String>> = evs.iter().map(|e| e.1.map(|i| format!("id{i}"))).collect();
                    for (i, e) in evs.iter().enumerate() {
                        b.push(&EventView {
                            stream: &names[i],
                            entity: None,
                            ty: "t",
                            ts: 0,
                            kind: Kind::Event,
                            value: Some(Num::Int(e.2)),
                            id: ids[i].as_deref(),
                            data: None,
                        })
                        .unwrap();
                    }
                    let res = rt.block_on(store.write(WriteRequest {
                        batch: b,
                        durability: None,
                        expected_last_seq: expected,
                        guard: None,
                        origin: None,
                        append_ms: None,
                    }));
                    // The model's answer. A request whose events are all duplicates is a
                    // duplicate (200) even when its expected last seq no longer holds: it is
                    // the retry of a write that succeeded.
                    let mut seen = HashSet::new();
                    let all_dup = !evs.is_empty()
                        && (0..evs.len()).all(|i| {
                            ids[i].as_ref().is_some_and(|id| {
                                let key = (names[i].clone(), id.clone());
                                model.ids.contains_key(&key) || !seen.insert(key)
                            })
                        });
                    let conflict = expected.filter(|_| !all_dup).and_then(|x| {
                        let last = model.streams.get(&names[0]).map_or(0, |v| v.len() as u64);
                        (last != x).then_some(last)
                    });
                    match (res, conflict) {
                        (Err(WriteError::Conflict { last_seq, .. }), Some(m)) => prop_assert_eq!(last_seq, m),
                        (Ok(out), None) => {
                            let mut accepted = 0;
                            let mut dups = 0;
                            for (i, e) in evs.iter().enumerate() {
                                let s = model.streams.entry(names[i].clone()).or_default();
                                if let Some(id) = &ids[i] {
                                    let key = (names[i].clone(), id.clone());
                                    if model.ids.contains_key(&key) {
                                        dups += 1;
                                        continue;
                                    }
                                    model.ids.insert(key, s.len() as u64 + 1);
                                }
                                s.push((ids[i].clone(), e.2));
                                accepted += 1;
                            }
                            prop_assert_eq!((out.accepted, out.duplicates), (accepted, dups));
                        }
                        (other, m) => prop_assert!(false, "store said {:?}, model said conflict {:?}", other, m),
                    }
                }
            }
        }
        // Everything in the model is in the store, in order, with gapless seqs.
        for (stream, events) in &model.streams {
            if events.is_empty() {
                prop_assert!(store.stream(stream).is_none());
                continue;
            }
            let mut cur = store.read(stream, ReadQuery { limit: 1000, ..Default::default() }).unwrap();
            let mut got = Vec::new();
            while let Some((seq, e)) = cur.next_event().unwrap() {
                got.push((seq, e.id.map(str::to_string), e.value));
            }
            let want: Vec<_> = events
                .iter()
                .enumerate()
                .map(|(i, (id, v))| (i as u64 + 1, id.clone(), Some(Num::Int(*v))))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
