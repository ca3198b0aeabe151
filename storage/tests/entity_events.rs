//! Cluster mode's feature path: with `features_from_events` off, event batches no longer
//! feed the feature tables; entity-events records (`Store::write_entity_events`) feed them
//! exactly as event batches do in single-node mode, without touching streams; a reset of a
//! shard's feature tables empties that shard only. All of it survives restarts, kills and
//! snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::*;
use vx_proto::{Batch, EventView, Kind, Num};
use vx_storage::features::{Agg, DistinctOf, FeatureDecl, ReadAt};
use vx_storage::sim::SimFs;
use vx_storage::*;

use OriginTopic::Entities;

const SHARDS: u32 = 4;

fn decls() -> Vec<FeatureDecl> {
    let d = |name: &str, agg, window: Option<u64>| FeatureDecl {
        name: name.into(),
        from: "dmg".into(),
        agg,
        window: window.map(|h| Duration::from_secs(h * 3600)),
        ttl: None,
        of: DistinctOf::Value,
    };
    vec![
        d("tot", Agg::Sum, None),
        d("cnt", Agg::Count, Some(24)),
        d("uniq", Agg::Distinct, Some(24)),
    ]
}

fn entities() -> Vec<String> {
    (0..24).map(|i| format!("e{i}")).collect()
}

/// A fixed "now" for the events' ts: every batch of a round is the same, whenever built.
fn now() -> i64 {
    static NOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *NOW.get_or_init(vx_sys::now_ms)
}

/// A batch of counters, gauges and plain events over the entities and a few streams.
fn batch(round: u64) -> Batch {
    batch_of(round, &entities())
}

/// [`batch`] over the entities `es` only.
fn batch_of(round: u64, es: &[String]) -> Batch {
    let now = now();
    let mut b = Batch::new();
    let streams = ["s0", "s1", "s2"];
    let tys = ["dmg", "hp", "login"];
    let kinds = [Kind::Counter, Kind::Gauge, Kind::Event];
    let mut pushed = Vec::new();
    for i in 0..30u64 {
        let k = (round * 31 + i * 7) as usize;
        pushed.push((streams[k % 3], es[k % es.len()].clone(), k % 3, k));
    }
    // A batch groups events into one run per stream.
    pushed.sort_by_key(|p| p.0);
    for (stream, entity, t, k) in &pushed {
        b.push(&EventView {
            stream,
            entity: Some(entity),
            ty: tys[*t],
            ts: now - (*k as i64 % 1000),
            kind: kinds[*t],
            value: (kinds[*t] != Kind::Event).then_some(Num::Int(*k as i64 % 50)),
            id: None,
            data: None,
        })
        .unwrap();
    }
    b
}

fn cfg(fs: &SimFs, from_events: bool) -> StorageConfig {
    let mut c = sim_cfg(fs);
    c.features = decls();
    c.features_from_events = from_events;
    c.segment_bytes = 4096;
    c
}

/// Every entity's features, as text.
fn dump(store: &Store) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for e in entities() {
        let mut feats = Vec::new();
        let found = store.features().read(
            &e,
            None,
            ReadAt {
                now_ms: vx_sys::now_ms(),
            },
            &mut |n, v| {
                feats.push(format!("{n}={v:?}"));
            },
        );
        if found.is_some() {
            out.insert(e, feats);
        }
    }
    out
}

#[test]
fn entity_events_feed_the_tables_as_event_batches_do_in_single_node_mode() {
    let (single_fs, fs) = (SimFs::new(), SimFs::new());
    let (single, _) = Store::open(cfg(&single_fs, true)).unwrap();
    let c = cfg(&fs, false);
    let (store, _) = Store::open(c.clone()).unwrap();
    for round in 0..6 {
        block(single.write(req_from(batch(round)))).unwrap();
        // Cluster mode: the write stores the events, the entity events feed the tables.
        let out = block(store.write(req_from(batch(round)))).unwrap();
        assert_eq!(out.accepted, 30);
        if round == 0 {
            assert!(
                dump(&store).is_empty(),
                "event batches do not feed the tables"
            );
        }
        block(store.write_entity_events(batch(round), origin(Entities, 0, round))).unwrap();
    }
    let want = dump(&single);
    assert!(want.len() > 10);
    assert_eq!(dump(&store), want);
    assert_eq!(store.applied_offset(Entities, 0), Some(5));
    // No stream, seq or dedup state comes from entity events.
    let mut ghost = Batch::new();
    ghost
        .push(&EventView {
            stream: "ghost",
            entity: Some("e1"),
            ty: "login",
            ts: vx_sys::now_ms(),
            kind: Kind::Event,
            value: None,
            id: Some("x"),
            data: None,
        })
        .unwrap();
    block(store.write_entity_events(ghost, origin(Entities, 0, 6))).unwrap();
    assert!(store.stream("ghost").is_none());
    assert_eq!(
        store.stream("s0").unwrap().last_seq,
        single.stream("s0").unwrap().last_seq
    );
    // A replayed offset is refused, and changes nothing.
    let before = dump(&store);
    assert!(matches!(
        block(store.write_entity_events(batch(9), origin(Entities, 0, 6))),
        Err(WriteError::OriginNotAfter { applied: 6, .. })
    ));
    assert_eq!(dump(&store), before);
    // Restarts rebuild the same tables from the log, with and without a snapshot.
    store.shutdown();
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(dump(&store), before);
    kill(&fs, store);
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(dump(&store), before);
    store.snapshot_now().unwrap();
    block(store.write_entity_events(batch(7), origin(Entities, 0, 7))).unwrap();
    let before = dump(&store);
    kill(&fs, store);
    let (store, report) = Store::open(c).unwrap();
    assert!(report.features.snapshot.is_some() && report.features.replayed_records > 0);
    assert_eq!(dump(&store), before);
    store.shutdown();
    single.shutdown();
}

/// A reset of a shard's feature tables empties that shard only and forgets its partition's
/// offset; restarts (replaying the reset after a snapshot, or a snapshot taken after it)
/// agree; and the partition consumed again from its start rebuilds what was there.
#[test]
fn a_reset_of_the_feature_tables_empties_one_shard() {
    let fs = SimFs::new();
    let c = cfg(&fs, false);
    let (store, _) = Store::open(c.clone()).unwrap();
    // The entities topic is keyed by entity: partition p holds the entities of shard p.
    let shard_of = |e: &str| vx_proto::shard::shard_of(e, SHARDS);
    let of_shard = |p: u32| -> Vec<String> {
        entities()
            .into_iter()
            .filter(|e| shard_of(e) == p)
            .collect()
    };
    let target = shard_of("e0");
    assert_eq!(
        store.features().shard_of("e0"),
        target,
        "the stream hash over the entity"
    );
    for round in 0..4 {
        for p in 0..SHARDS {
            let b = batch_of(round, &of_shard(p));
            block(store.write_entity_events(b, origin(Entities, p, round))).unwrap();
        }
    }
    let full = dump(&store);
    let offsets = |s: &Store| {
        (0..SHARDS)
            .map(|p| s.applied_offset(Entities, p))
            .collect::<Vec<_>>()
    };
    // A snapshot from before the reset: start-up replays the reset after it.
    store.snapshot_now().unwrap();
    block(store.reset_shard(Entities, target)).unwrap();
    let want: BTreeMap<String, Vec<String>> = full
        .iter()
        .filter(|(e, _)| shard_of(e) != target)
        .map(|(e, f)| (e.clone(), f.clone()))
        .collect();
    assert!(want.len() < full.len() && !want.is_empty());
    assert_eq!(dump(&store), want);
    let mut want_offsets = vec![Some(3); SHARDS as usize];
    want_offsets[target as usize] = None;
    assert_eq!(offsets(&store), want_offsets);
    kill(&fs, store);
    let (store, report) = Store::open(c.clone()).unwrap();
    assert!(report.features.snapshot.is_some());
    assert_eq!(dump(&store), want);
    assert_eq!(offsets(&store), want_offsets);
    // Rebuilt from the partition: its events again, from the start.
    for round in 0..4 {
        let b = batch_of(round, &of_shard(target));
        block(store.write_entity_events(b, origin(Entities, target, round))).unwrap();
    }
    assert_eq!(dump(&store), full);
    assert_eq!(offsets(&store), vec![Some(3); SHARDS as usize]);
    // A snapshot taken after the reset, then a restart.
    store.snapshot_now().unwrap();
    store.shutdown();
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(dump(&store), full);
    store.shutdown();
}

fn req_from(batch: Batch) -> WriteRequest {
    WriteRequest {
        batch,
        durability: None,
        expected_last_seq: None,
        guard: None,
        origin: None,
        append_ms: None,
    }
}
