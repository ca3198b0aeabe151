//! Cluster mode's origins: every record written with an origin carries it, the store keeps
//! per (topic, partition) the largest offset applied, refuses one that is not above it, and
//! restores the table exactly after a clean stop, a `kill -9`, a torn tail and retention
//! removing the segments that held a partition's last record.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};
use support::*;
use vx_storage::sim::SimFs;
use vx_storage::vfs::{OpenMode, Vfs};
use vx_storage::*;

use OriginTopic::{Entities, Streams};

#[test]
fn offsets_move_on_in_order_and_a_replayed_offset_is_refused() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    let mut versions = store.watch_origins();
    let v0 = *versions.borrow_and_update();
    assert_eq!(store.applied_origins(), vec![]);
    let out = block(store.write(req_at(
        &[
            ev("a", Some("1"), 1, 1),
            ev("b", None, 1, 1),
            ev("a", None, 2, 2),
        ],
        origin(Streams, 1, 5),
    )))
    .unwrap();
    // Runs in the request's order, newly stored events only.
    let stored: Vec<(String, u64, u64)> = out
        .stored
        .iter()
        .map(|r| (r.stream.clone(), r.first_seq, r.count))
        .collect();
    assert_eq!(stored, vec![("a".into(), 1, 2), ("b".into(), 1, 1)]);
    assert_eq!(store.applied_offset(Streams, 1), Some(5));
    assert!(versions.has_changed().unwrap());
    assert!(*versions.borrow_and_update() > v0);
    // The same offset again, or an older one: refused, nothing stored.
    for offset in [5, 4] {
        let err = block(store.write(req_at(&[ev("a", None, 3, 3)], origin(Streams, 1, offset))))
            .unwrap_err();
        assert_eq!(
            err,
            WriteError::OriginNotAfter {
                topic: Streams,
                partition: 1,
                offset,
                applied: 5
            }
        );
    }
    assert_eq!(store.stream("a").unwrap().last_seq, 2);
    // A partition the store does not have (it has 4 shards).
    assert!(matches!(
        block(store.write(req_at(&[ev("a", None, 3, 3)], origin(Streams, 4, 1)))),
        Err(WriteError::UnknownShard {
            shard: 4,
            shards: 4
        })
    ));
    // A request of duplicates only is a success: its offset is applied too.
    let dup =
        block(store.write(req_at(&[ev("a", Some("1"), 1, 1)], origin(Streams, 1, 9)))).unwrap();
    assert_eq!((dup.accepted, dup.duplicates, dup.stored.len()), (0, 1, 0));
    assert_eq!(store.applied_offset(Streams, 1), Some(9));
    // Deletes and feature writes carry origins too; the topics are apart.
    block(store.delete("b", None, Some(origin(Streams, 1, 10)))).unwrap();
    block(store.write_features(FeatureWrite {
        entity: "p1".into(),
        op: FeatureOp::Put(vec![("hp".into(), Some(features::FeatureValue::Int(3)))]),
        durability: None,
        guard: None,
        origin: Some(origin(Entities, 1, 10)),
        append_ms: None,
    }))
    .unwrap();
    assert_eq!(
        store.applied_origins(),
        vec![origin(Streams, 1, 10), origin(Entities, 1, 10)]
    );
    // A refused request moves nothing: a conflict keeps the partition where it was.
    let mut conflict = req_at(&[ev("a", None, 3, 3)], origin(Streams, 1, 11));
    conflict.expected_last_seq = Some(1);
    assert!(matches!(
        block(store.write(conflict)),
        Err(WriteError::Conflict { .. })
    ));
    assert_eq!(store.applied_offset(Streams, 1), Some(10));
    // Offsets of one group are checked against each other too.
    let (x, y) = block(async {
        tokio::join!(
            store.write(req_at(&[ev("c", None, 1, 1)], origin(Streams, 2, 7))),
            store.write(req_at(&[ev("c", None, 1, 1)], origin(Streams, 2, 7)))
        )
    });
    assert!(x.is_ok() != y.is_ok(), "{x:?} {y:?}");
    assert_eq!(store.applied_offset(Streams, 2), Some(7));
    store.shutdown();
}

/// Single-node mode (no origins) writes no origin flag and no table rows: its index files are
/// version 3 (the samples' version, written by both modes) with empty tables.
#[test]
fn without_origins_nothing_of_cluster_mode_is_on_disk() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 1024;
    let (store, _) = Store::open(c.clone()).unwrap();
    for i in 0..40 {
        block(store.write(req(&[ev("a", None, i, i)]))).unwrap();
    }
    store.shutdown();
    let log = std::path::Path::new("/data/log");
    let idx: Vec<String> = fs
        .files(log)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".idx"))
        .collect();
    assert!(!idx.is_empty());
    for name in idx {
        let bytes = fs
            .open(&log.join(name), OpenMode::Read)
            .unwrap()
            .read_all()
            .unwrap();
        assert_eq!(&bytes[4..6], &[3, 0], "index file version 3");
        let c = vx_storage::idxfile::IdxContents::from_bytes(bytes).unwrap();
        assert_eq!((c.header.origins, c.header.resets), (0, 0));
        assert!(c.tables().unwrap().is_empty());
    }
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(store.applied_origins(), vec![]);
    store.shutdown();
}

fn write_partitions(store: &Store, rounds: u64, from: u64) {
    for i in from..from + rounds {
        for p in 0..4u32 {
            let stream = format!("p{p}-{}", i % 3);
            block(store.write(req_at(
                &[ev(&stream, Some(&format!("{i}")), i as i64, 1)],
                origin(Streams, p, 100 + i),
            )))
            .unwrap();
        }
        block(store.write_features(FeatureWrite {
            entity: format!("e{}", i % 5),
            op: FeatureOp::Delete(vec![(format!("e{}", i % 5), None)]),
            durability: None,
            guard: None,
            origin: Some(origin(Entities, (i % 4) as u32, i)),
            append_ms: None,
        }))
        .unwrap();
    }
}

/// The table survives a clean stop, a `kill -9`, and a torn tail (the torn record's offset
/// is not applied, every complete one is), with segments sealed in between (index files
/// version 2) and the active segment scanned after them.
#[test]
fn offsets_survive_a_clean_stop_a_kill_and_a_torn_tail() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 2048;
    c.fsync = FsyncMode::Never;
    let (store, _) = Store::open(c.clone()).unwrap();
    write_partitions(&store, 30, 0);
    let before = store.applied_origins();
    assert_eq!(before.len(), 8);
    store.shutdown();
    let (store, report) = Store::open(c.clone()).unwrap();
    assert!(report.index_files > 2, "{report:?}");
    assert_eq!(store.applied_origins(), before);
    write_partitions(&store, 7, 30);
    let before = store.applied_origins();
    kill(&fs, store);
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(store.applied_origins(), before);
    // A torn tail: half a record after the last complete one.
    let last_ok = store.applied_offset(Streams, 3).unwrap();
    block(store.write(req_at(
        &[ev("p3-0", None, 1, 1)],
        origin(Streams, 3, last_ok + 1),
    )))
    .unwrap();
    store.shutdown();
    let log = std::path::Path::new("/data/log");
    let (active, len) = fs
        .files(log)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".log"))
        .max()
        .unwrap();
    let f = fs.open(&log.join(&active), OpenMode::Write).unwrap();
    let tail = f.read_all().unwrap();
    // Cut the last record in half: the file ends inside it.
    let cut = len - 20;
    f.set_len(cut).unwrap();
    f.sync_data().unwrap();
    assert!(tail.len() as u64 == len);
    let (store, report) = Store::open(c).unwrap();
    assert!(report.truncated_bytes > 0, "{report:?}");
    assert_eq!(store.applied_offset(Streams, 3), Some(last_ok));
    assert_eq!(store.applied_origins(), before);
    store.shutdown();
}

/// Retention removes the segments that held a partition's only records: its offset stays,
/// since every index file holds the whole table.
#[test]
fn offsets_outlive_the_segments_retention_removes() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 1024;
    c.fsync = FsyncMode::Never;
    c.retention.max_bytes = Some(8192);
    let (store, _) = Store::open(c.clone()).unwrap();
    block(store.write(req_at(&[ev("once", None, 1, 1)], origin(Streams, 2, 41)))).unwrap();
    block(store.write_features(FeatureWrite {
        entity: "e".into(),
        op: FeatureOp::Delete(vec![("e".into(), None)]),
        durability: None,
        guard: None,
        origin: Some(origin(Entities, 0, 7)),
        append_ms: None,
    }))
    .unwrap();
    for i in 0..300u64 {
        block(store.write(req_at(
            &[ev("busy", None, i as i64, 1)],
            origin(Streams, 1, i),
        )))
        .unwrap();
    }
    // Retention runs after the writes that trigger it: wait for the first segment to go.
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stream("once").is_some_and(|s| s.events > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(store.stream("once").unwrap().events, 0, "retained away");
    let want = vec![
        origin(Streams, 1, 299),
        origin(Streams, 2, 41),
        origin(Entities, 0, 7),
    ];
    assert_eq!(store.applied_origins(), want);
    store.shutdown();
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(store.applied_origins(), want);
    kill(&fs, store);
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(store.applied_origins(), want);
    store.shutdown();
}

/// A record applied is one whose offset a waiter sees: wait on the version, then look.
#[test]
fn a_waiter_sees_the_offset_once_applied() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            block(async {
                let mut rx = store.watch_origins();
                while store.applied_offset(Streams, 0) < Some(3) {
                    rx.changed().await.unwrap();
                }
                // Applied means visible: the record's events are readable now.
                store.stream("w").unwrap().last_seq
            })
        })
    };
    for i in 1..=3 {
        block(store.write(req_at(&[ev("w", None, i, i)], origin(Streams, 0, i as u64)))).unwrap();
    }
    assert_eq!(waiter.join().unwrap(), 3);
    store.shutdown();
}

/// Power cuts at random points (the disk keeps what was synced plus an arbitrary prefix of
/// the rest, the first lost write possibly torn), with rolls and shard resets among the
/// writes: after recovery each partition's applied offset is exactly the offset of the last
/// of its records that survived (each record's event carries its offset as its value), and
/// never below one acknowledged at `fsync`. `VX_ORIGIN_CASES` sets the number of cases
/// (default 150), `VX_ORIGIN_SEED` replays one.
#[test]
fn offsets_after_power_cuts_are_those_of_the_records_that_survived() {
    let cases: u64 = std::env::var("VX_ORIGIN_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let seeds: Vec<u64> = match std::env::var("VX_ORIGIN_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..cases).map(|i| 0x0F16_0000 + i).collect(),
    };
    for seed in seeds {
        let mut rng = Rng(seed);
        let fs = SimFs::new();
        let mut c = sim_cfg(&fs);
        c.segment_bytes = 512 + rng.below(3000);
        c.fsync = if rng.chance(50) {
            FsyncMode::Always
        } else {
            FsyncMode::Interval
        };
        c.fsync_interval = Duration::from_millis(1 + rng.below(5));
        let streams: Vec<String> = (0..4).map(|p| streams_in("s", p, 4, 1).remove(0)).collect();
        let (store, _) = Store::open(c.clone()).unwrap();
        fs.freeze_after(1 + rng.below(300));
        // Per partition: the next offset, the last offset acknowledged at fsync since the
        // last acknowledged reset, and whether a reset was asked for since (its outcome unknown
        // when it failed).
        let mut next = [0u64; 4];
        let mut acked: [Option<u64>; 4] = [None; 4];
        let mut unsure = [false; 4];
        for _ in 0..200 {
            let p = rng.below(4) as usize;
            if rng.chance(5) {
                let res = block(store.reset_shard(Streams, p as u32));
                next[p] = 0;
                if res.is_ok() {
                    acked[p] = None;
                    unsure[p] = false;
                } else {
                    unsure[p] = true;
                }
            } else {
                let o = next[p];
                next[p] += 1;
                let mut r = req_at(
                    &[ev(&streams[p], None, 1, o as i64)],
                    origin(Streams, p as u32, o),
                );
                r.durability = Some(Durability::Fsync);
                if let Ok(out) = block(store.write(r))
                    && out.durability == Durability::Fsync
                {
                    acked[p] = Some(o);
                }
            }
            if fs.is_frozen() {
                break;
            }
        }
        fs.freeze();
        store.shutdown();
        drop(store);
        fs.power_cut(&mut |n| rng.below(n));
        let (store, _) = Store::open(c.clone()).unwrap();
        for p in 0..4usize {
            let last = store
                .read(&streams[p], all(1_000))
                .map(|_| read(&store, &streams[p], all(1_000)))
                .unwrap_or_default()
                .last()
                .map(|e| e.3 as u64);
            let applied = store.applied_offset(Streams, p as u32);
            assert_eq!(applied, last, "seed {seed}: partition {p}");
            if !unsure[p] {
                assert!(
                    applied >= acked[p],
                    "seed {seed}: partition {p}: {applied:?} < {:?}",
                    acked[p]
                );
            }
        }
        store.shutdown();
    }
}
