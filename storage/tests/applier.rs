//! The apply threads (storage/src/apply/, `features.apply_threads`): groups of large event
//! batches are applied there, each thread the shards it owns, while the writer commits the
//! next group; small ones (feature writes) on the writer. With 1, 2 or 4 threads, whichever
//! applies a group, its answers come after its apply (read-your-writes), groups apply in log
//! order, snapshots taken while they apply restart to the same tables (on another thread
//! count), and a failed apply on any thread poisons the store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;
use vx_proto::{EventView, Kind, Num};
use vx_storage::features::{Agg, DistinctOf, FeatureDecl, FeatureValue, ReadAt, Reading};
use vx_storage::sim::SimFs;
use vx_storage::*;

const WRITERS: usize = 4;
const ROUNDS: u64 = 12;
const ENTITIES: usize = 40;
/// Events of a large batch: its record (about 60 bytes an event) is past what the writer
/// applies itself.
const LARGE: usize = 600;

fn cfg(fs: &SimFs, threads: usize) -> StorageConfig {
    let mut c = sim_cfg(fs);
    c.apply_threads = threads;
    c.features = vec![FeatureDecl {
        name: "hits_1h".into(),
        from: "hit".into(),
        agg: Agg::Count,
        window: Some(Duration::from_secs(3600)),
        ttl: None,
        of: DistinctOf::Value,
    }];
    c
}

fn entity(writer: usize, i: usize) -> String {
    format!("w{writer}-e{i}")
}

/// Every feature of `e`, as text (`None`: unknown entity).
fn features_of(store: &Store, e: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    store
        .features()
        .read(e, None, ReadAt { now_ms: 0 }, &mut |n, v| {
            let v = match v {
                Reading::Value(v) => format!("{v:?}"),
                Reading::Int(i) => i.to_string(),
                Reading::Num(x) => x.to_string(),
            };
            out.insert(n.to_string(), v);
        })?;
    Some(out)
}

fn dump(store: &Store) -> BTreeMap<String, Option<BTreeMap<String, String>>> {
    (0..WRITERS)
        .flat_map(|w| (0..ENTITIES).map(move |i| entity(w, i)))
        .map(|e| {
            let f = features_of(store, &e);
            (e, f)
        })
        .collect()
}

/// One writer's rounds: a large batch over its entities, then a PUT, each checked by a read
/// right after its answer.
fn writer(store: &Store, w: usize) {
    let names: Vec<String> = (0..ENTITIES).map(|i| entity(w, i)).collect();
    let stream = format!("s{w}");
    let data = "d".repeat(32);
    let mut events = vec![0u64; ENTITIES];
    for round in 0..ROUNDS {
        let evs: Vec<EventView<'_>> = (0..LARGE)
            .map(|k| {
                let i = (k * 7 + round as usize) % ENTITIES;
                events[i] += 1;
                EventView {
                    stream: &stream,
                    entity: Some(&names[i]),
                    ty: "hit",
                    ts: 1_000_000 + round as i64,
                    kind: Kind::Counter,
                    value: Some(Num::Int(1)),
                    id: None,
                    data: Some(&data),
                }
            })
            .collect();
        let out = block(store.write(req(&evs))).unwrap();
        assert_eq!(out.accepted, LARGE as u64);
        for (i, e) in names.iter().enumerate() {
            let f = features_of(store, e).expect("an acknowledged entity is there");
            assert_eq!(
                f["events"],
                events[i].to_string(),
                "{e} after round {round}"
            );
        }
        let e = &names[round as usize % ENTITIES];
        block(store.write_features(FeatureWrite {
            entity: e.clone(),
            op: FeatureOp::Put(vec![(
                "round".into(),
                Some(FeatureValue::Int(round as i64)),
            )]),
            durability: None,
            guard: None,
            origin: None,
            append_ms: None,
        }))
        .unwrap();
        let f = features_of(store, e).unwrap();
        assert_eq!(f["round"], format!("{:?}", FeatureValue::Int(round as i64)));
    }
}

#[test]
fn answers_follow_the_apply_and_a_restart_rebuilds_the_same_tables() {
    for (threads, then) in [(1, 4), (2, 1), (4, 2)] {
        answers_follow_the_apply(threads, then);
    }
}

/// `threads` apply while writers check each answer; a restart on `then` threads rebuilds
/// the same tables.
fn answers_follow_the_apply(threads: usize, then: usize) {
    let fs = SimFs::new();
    let (store, _) = Store::open(cfg(&fs, threads)).unwrap();
    // Snapshots taken while the threads apply: each shard's copy covers what its thread had
    // applied, and the restart below starts from the last of them.
    let writing = std::sync::atomic::AtomicBool::new(true);
    let mut snapshots = 0;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = &store;
                s.spawn(move || writer(store, w))
            })
            .collect();
        s.spawn(|| {
            for h in handles {
                h.join().unwrap();
            }
            writing.store(false, std::sync::atomic::Ordering::Release);
        });
        while writing.load(std::sync::atomic::Ordering::Acquire) {
            store.snapshot_now().unwrap();
            snapshots += 1;
        }
    });
    assert!(snapshots > 0);
    let before = dump(&store);
    for (e, f) in &before {
        let f = f.as_ref().expect("every entity was written");
        assert!(f.contains_key("hits_1h"), "{e}: {f:?}");
    }
    kill(&fs, store);
    let (store, report) = Store::open(cfg(&fs, then)).unwrap();
    assert!(
        report.features.snapshot.is_some(),
        "restarted from a snapshot; skipped: {:?}",
        report.features.skipped
    );
    assert_eq!(dump(&store), before, "{threads} threads, then {then}");
}

/// A large batch whose apply fails on any apply thread is answered as on the writer: the
/// store is poisoned and says why, later writes are refused, and a restart applies the record
/// the log holds. Each thread of 1, 2 and 4 in turn fails (a fault in a shard it owns).
#[test]
fn a_failed_apply_on_any_thread_poisons_the_store() {
    for threads in [1, 2, 4] {
        for part in 0..threads {
            let shard = features::parallel::Part {
                index: part,
                of: threads,
            }
            .shards(4)
            .start;
            a_failed_apply_poisons(threads, shard);
        }
    }
}

fn a_failed_apply_poisons(threads: usize, shard: u32) {
    let fs = SimFs::new();
    let (store, _) = Store::open(cfg(&fs, threads)).unwrap();
    let data = "d".repeat(32);
    let names: Vec<String> = (0..ENTITIES).map(|i| entity(0, i)).collect();
    let large = |ts: i64| {
        let evs: Vec<EventView<'_>> = (0..LARGE)
            .map(|k| EventView {
                stream: "s",
                entity: Some(&names[k % ENTITIES]),
                ty: "hit",
                ts,
                kind: Kind::Counter,
                value: Some(Num::Int(1)),
                id: None,
                data: Some(&data),
            })
            .collect();
        req(&evs)
    };
    block(store.write(large(1))).unwrap();
    store.features().fail_next_apply_to_shard(shard);
    let failed = block(store.write(large(2)));
    assert!(
        matches!(&failed, Err(WriteError::Poisoned(reason)) if reason.to_string().contains("feature tables")),
        "{threads} threads, shard {shard}: {failed:?}"
    );
    assert!(store.is_poisoned());
    assert!(matches!(
        block(store.write(large(3))),
        Err(WriteError::Poisoned(_))
    ));
    // The failing shard's entities still have only the first batch's events (which of the
    // other shards' the failed record reached is of no account).
    let per_entity = (LARGE / ENTITIES) as u64;
    let events = |store: &Store, e: &str| features_of(store, e).map(|f| f["events"].clone());
    let victim = names
        .iter()
        .find(|n| store.features().shard_of(n) == shard)
        .unwrap();
    assert_eq!(events(&store, victim), Some(per_entity.to_string()));
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(cfg(&fs, threads)).unwrap();
    assert!(!store.is_poisoned());
    for n in &names {
        assert_eq!(events(&store, n), Some((2 * per_entity).to_string()));
    }
}
