//! Cluster mode's shard reset (`Store::reset_shard(OriginTopic::Streams, shard)`): every
//! stream of the shard is forgotten as if it never existed — metadata, listings, seqs,
//! carried tombstones and orphans, its ids, its partition's applied offset — durably, across
//! restarts, crashes right after the reset, seals and retention; open cursors end and
//! followers see a delete; other shards are untouched. And the property cluster mode relies
//! on: a reset shard fed the same writes again equals a fresh store fed only them.
//!
//! `VX_RESET_CASES` sets the number of property cases (default 40), `VX_RESET_SEED` replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::*;
use vx_storage::sim::SimFs;
use vx_storage::*;

use OriginTopic::Streams;

const SHARDS: u32 = 4;

/// Everything readers see of one shard's streams (of `names`): metadata (or none) and events.
type ShardView = BTreeMap<String, Option<(StreamInfo, Got)>>;

fn view(store: &Store, names: &[String]) -> ShardView {
    names
        .iter()
        .map(|n| {
            let v = store
                .stream(n)
                .map(|info| (info, read(store, n, all(100_000))));
            (n.clone(), v)
        })
        .collect()
}

/// The listed streams among `names`.
fn listed(store: &Store, names: &[String]) -> Vec<String> {
    let (all, _) = store.list_streams("", None, 100_000);
    all.into_iter()
        .map(|i| i.stream)
        .filter(|s| names.contains(s))
        .collect()
}

fn cfg(fs: &SimFs) -> StorageConfig {
    let mut c = sim_cfg(fs);
    c.segment_bytes = 2048;
    c.fsync = FsyncMode::Never;
    c
}

/// Write `n` events with ids `{tag}{i}` to `stream`, one request each.
fn fill(store: &Store, stream: &str, tag: &str, n: usize) {
    for i in 0..n {
        let id = format!("{tag}{i}");
        block(store.write(req(&[ev(stream, Some(&id), i as i64, i as i64)]))).unwrap();
    }
}

#[test]
fn a_reset_forgets_the_shards_streams_and_nothing_else() {
    let fs = SimFs::new();
    let c = cfg(&fs);
    let (store, _) = Store::open(c.clone()).unwrap();
    let xs = streams_in("x", 1, SHARDS, 3);
    let ys = streams_in("y", 2, SHARDS, 2);
    for s in xs.iter().chain(&ys) {
        fill(&store, s, "id", 20);
    }
    // A deleted stream of the shard whose tombstone is sealed: it is in the carry file.
    block(store.delete(&xs[2], None, None)).unwrap();
    for s in &ys {
        fill(&store, s, "more", 20);
    }
    block(store.write(req_at(&[ev(&xs[0], None, 1, 1)], origin(Streams, 1, 50)))).unwrap();
    block(store.write(req_at(&[ev(&ys[0], None, 1, 1)], origin(Streams, 2, 60)))).unwrap();
    let ys_before = view(&store, &ys);
    let mut cursor = store.read(&xs[0], all(1000)).unwrap();
    assert!(cursor.next_event().unwrap().is_some());
    let mut watch = store.watch(&xs[0]);
    let seen = *watch.borrow_and_update();
    assert_eq!(seen.last_seq, 21);

    block(store.reset_shard(Streams, 1)).unwrap();

    assert!(
        cursor.next_event().unwrap().is_none(),
        "an open cursor ends"
    );
    let now = *watch.borrow_and_update();
    assert_eq!((now.deletes, now.last_seq), (seen.deletes + 1, 0));
    let check = |store: &Store| {
        for s in &xs {
            assert!(store.stream(s).is_none(), "{s}");
            assert!(store.read(s, all(10)).is_none(), "{s}");
        }
        assert!(listed(store, &xs).is_empty());
        assert_eq!(view(store, &ys), ys_before, "other shards untouched");
        assert_eq!(store.applied_offset(Streams, 1), None);
        assert_eq!(store.applied_offset(Streams, 2), Some(60));
    };
    check(&store);
    // Restarted, killed: the same.
    store.shutdown();
    let (store, _) = Store::open(c.clone()).unwrap();
    check(&store);
    kill(&fs, store);
    let (store, _) = Store::open(c.clone()).unwrap();
    check(&store);
    // Written again, every stream starts at seq 1, the deleted one too, and an id stored
    // before the reset is new again.
    for s in &xs {
        let out = block(store.write(req(&[ev(s, Some("id0"), 5, 5)]))).unwrap();
        assert_eq!((out.accepted, out.last_seq[0].1), (1, 1), "{s}");
    }
    assert_eq!(listed(&store, &xs).len(), 3);
    assert_eq!(
        read(&store, &xs[0], all(10)),
        vec![(1, Some("id0".into()), 5, 5)]
    );
    store.shutdown();
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(
        read(&store, &xs[2], all(10)),
        vec![(1, Some("id0".into()), 5, 5)]
    );
    assert_eq!(view(&store, &ys), ys_before);
    store.shutdown();
}

/// The reset is durable when it is answered, and a crash right after it (before or after
/// the writer dropped the shard's carry entries) leaves it done.
#[test]
fn a_crash_right_after_the_reset() {
    for freeze in [None, Some(2)] {
        let fs = SimFs::new();
        let c = cfg(&fs);
        let (store, _) = Store::open(c.clone()).unwrap();
        let xs = streams_in("x", 3, SHARDS, 2);
        let ys = streams_in("y", 0, SHARDS, 1);
        fill(&store, &xs[0], "a", 30);
        fill(&store, &xs[1], "a", 5);
        block(store.delete(&xs[1], None, None)).unwrap();
        fill(&store, &ys[0], "a", 30); // seals the tombstone: a carry entry of shard 3
        // Reopened, the writer is idle: the operations counted below are the reset's.
        store.shutdown();
        let (store, _) = Store::open(c.clone()).unwrap();
        let ys_before = view(&store, &ys);
        let answer = match freeze {
            // The record and its fsync go through, then the power: the carry rewrite fails.
            Some(ops) => {
                fs.freeze_after(ops);
                block(store.reset_shard(Streams, 3))
            }
            None => block(store.reset_shard(Streams, 3)),
        };
        assert_eq!(answer.is_ok(), freeze.is_none(), "{answer:?}");
        power_loss(&fs, store);
        let (store, _) = Store::open(c.clone()).unwrap();
        assert_eq!(
            (store.stream(&xs[0]), store.stream(&xs[1])),
            (None, None),
            "freeze {freeze:?}"
        );
        assert_eq!(view(&store, &ys), ys_before);
        // The deleted stream's carried last seq is gone with it.
        let out = block(store.write(req(&[ev(&xs[1], None, 1, 1)]))).unwrap();
        assert_eq!(out.last_seq[0].1, 1, "freeze {freeze:?}");
        store.shutdown();
        // A second restart finds the same (the carry file was rewritten at start-up).
        let (store, _) = Store::open(c).unwrap();
        assert_eq!(store.stream(&xs[1]).unwrap().last_seq, 1);
        assert!(store.stream(&xs[0]).is_none());
        store.shutdown();
    }
}

/// A reset whose segment is sealed (start-up folds the resets table of the index files),
/// then retention removing the segments from before it, whose entries of the shard's streams
/// belong to streams that no longer exist: the new streams of the same names keep their own
/// counters, none is orphaned, and nothing old comes back.
#[test]
fn a_reset_across_seals_and_retention() {
    let fs = SimFs::new();
    let mut c = cfg(&fs);
    c.segment_bytes = 1024;
    let (store, _) = Store::open(c.clone()).unwrap();
    let xs = streams_in("x", 2, SHARDS, 2);
    let ys = streams_in("y", 1, SHARDS, 1);
    fill(&store, &xs[0], "old", 60);
    fill(&store, &xs[1], "old", 3); // an orphan once retained, were it not forgotten
    let log = std::path::Path::new("/data/log");
    let segments = |fs: &SimFs| -> Vec<(String, u64)> {
        fs.files(log)
            .into_iter()
            .filter(|(n, _)| n.ends_with(".log") || n.ends_with(".idx"))
            .collect()
    };
    block(store.reset_shard(Streams, 2)).unwrap();
    // The segment holding the reset: the active one.
    let reset_seg = segments(&fs)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".log"))
        .max()
        .unwrap();
    fill(&store, &xs[0], "new", 4);
    fill(&store, &ys[0], "y", 40); // the reset's segment is sealed
    let xs_after = view(&store, &xs);
    assert_eq!(xs_after[&xs[0]].as_ref().unwrap().0.events, 4);
    assert!(xs_after[&xs[1]].is_none());
    store.shutdown();
    let (store, report) = Store::open(c.clone()).unwrap();
    assert!(report.index_files > 3, "{report:?}");
    assert_eq!(view(&store, &xs), xs_after, "folded from the index files");
    store.shutdown();
    // Retention down to the reset's segment: everything before it goes, nothing after.
    let files = segments(&fs);
    let total: u64 = files.iter().map(|(_, b)| b).sum();
    let before: u64 = files
        .iter()
        .filter(|(n, _)| n[..20] < reset_seg[..20])
        .map(|(_, b)| b)
        .sum();
    assert!(before > 0);
    let mut r = c.clone();
    r.retention.max_bytes = Some(total - before);
    let (store, _) = Store::open(r.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while segments(&fs).iter().any(|(n, _)| n[..20] < reset_seg[..20]) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!segments(&fs).iter().any(|(n, _)| n[..20] < reset_seg[..20]));
    assert!(segments(&fs).iter().any(|(n, _)| *n == reset_seg));
    assert_eq!(view(&store, &xs), xs_after, "neither orphaned nor shrunk");
    store.shutdown();
    let (store, _) = Store::open(r).unwrap();
    assert_eq!(view(&store, &xs), xs_after);
    let out = block(store.write(req(&[ev(&xs[0], Some("old0"), 1, 1)]))).unwrap();
    assert_eq!((out.accepted, out.last_seq[0].1), (1, 5));
    store.shutdown();
}

/// Index files rebuilt from their segments after retention removed the reset's segment: a
/// newer index file listing the reset (from before its own segment) must not forget the new
/// streams the rebuilt ones hold.
#[test]
fn rebuilt_index_files_after_the_resets_segment_was_retained_away() {
    use vx_storage::vfs::{OpenMode, Vfs};
    let fs = SimFs::new();
    let mut c = cfg(&fs);
    c.segment_bytes = 1024;
    let (store, _) = Store::open(c.clone()).unwrap();
    let xs = streams_in("x", 2, SHARDS, 1);
    let ys = streams_in("y", 1, SHARDS, 1);
    fill(&store, &xs[0], "old", 30);
    block(store.reset_shard(Streams, 2)).unwrap();
    let log = std::path::Path::new("/data/log");
    let files = |fs: &SimFs, ext: &str| -> Vec<(String, u64)> {
        let mut v: Vec<_> = fs
            .files(log)
            .into_iter()
            .filter(|(n, _)| n.ends_with(ext))
            .collect();
        v.sort();
        v
    };
    let reset_seg = files(&fs, ".log").pop().unwrap().0;
    fill(&store, &ys[0], "a", 20); // the reset's segment is sealed
    fill(&store, &xs[0], "new", 4);
    fill(&store, &ys[0], "b", 40); // and the new stream's too, several times over
    let want = view(&store, &xs);
    assert_eq!(want[&xs[0]].as_ref().unwrap().0.events, 4);
    store.shutdown();
    // Retention up to and including the reset's segment.
    let all: Vec<(String, u64)> = fs.files(log);
    let total: u64 = all
        .iter()
        .filter(|(n, _)| !n.ends_with(".carry"))
        .map(|(_, b)| b)
        .sum();
    let gone: u64 = all
        .iter()
        .filter(|(n, _)| !n.ends_with(".carry") && n[..20] <= reset_seg[..20])
        .map(|(_, b)| b)
        .sum();
    let mut r = c.clone();
    r.retention.max_bytes = Some(total - gone);
    let (store, _) = Store::open(r.clone()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while files(&fs, ".log")
        .first()
        .is_some_and(|(n, _)| n[..20] <= reset_seg[..20])
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(files(&fs, ".log")[0].0[..20] > reset_seg[..20]);
    assert_eq!(view(&store, &xs), want);
    store.shutdown();
    // Every index file but the newest damaged: start-up rebuilds them from their records.
    let idx = files(&fs, ".idx");
    assert!(idx.len() > 2);
    for (name, _) in &idx[..idx.len() - 1] {
        let f = fs.open(&log.join(name), OpenMode::Write).unwrap();
        let mut b = f.read_all().unwrap();
        b[20] ^= 0xff;
        f.write_all_at(&b, 0).unwrap();
        f.sync_data().unwrap();
    }
    let (store, report) = Store::open(r).unwrap();
    assert!(report.scanned_segments as usize >= idx.len(), "{report:?}");
    assert_eq!(view(&store, &xs), want);
    store.shutdown();
}

/// Ids stored before a reset are new after it, also after restarts that refill the dedup
/// tables from the log: with the reset in the active segment (the scan clears the table)
/// and in a sealed one (the refill leaves out what is older than the reset).
#[test]
fn ids_from_before_a_reset_are_new_after_restarts() {
    let fs = SimFs::new();
    let c = cfg(&fs);
    let (store, _) = Store::open(c.clone()).unwrap();
    let x = streams_in("x", 0, SHARDS, 1).remove(0);
    let y = streams_in("y", 1, SHARDS, 1).remove(0);
    fill(&store, &x, "i", 60); // several sealed segments within the dedup window
    block(store.reset_shard(Streams, 0)).unwrap();
    store.shutdown();
    let (store, _) = Store::open(c.clone()).unwrap();
    let out = block(store.write(req(&[ev(&x, Some("i1"), 1, 1)]))).unwrap();
    assert_eq!(
        (out.accepted, out.last_seq[0].1),
        (1, 1),
        "reset in the active segment"
    );
    fill(&store, &y, "y", 60); // the reset's segment is sealed now
    kill(&fs, store);
    let (store, _) = Store::open(c).unwrap();
    let out = block(store.write(req(&[ev(&x, Some("i2"), 1, 1)]))).unwrap();
    assert_eq!(
        (out.accepted, out.last_seq[0].1),
        (1, 2),
        "reset in a sealed segment"
    );
    // What was stored after the reset is remembered as usual.
    let out = block(store.write(req(&[ev(&x, Some("i1"), 1, 1)]))).unwrap();
    assert_eq!((out.accepted, out.duplicates), (0, 1));
    store.shutdown();
}

/// One request of the property test: writes to streams of one shard (consumed from that
/// shard's partition) or a delete.
#[derive(Clone, Debug)]
enum Op {
    /// (stream index within the shard, id, value) per event; a conditional last seq.
    Write(u32, Vec<(usize, Option<u64>, i64)>, Option<u64>),
    Delete(u32, usize),
}

impl Op {
    fn shard(&self) -> u32 {
        match self {
            Op::Write(s, ..) | Op::Delete(s, _) => *s,
        }
    }
}

fn gen_ops(rng: &mut Rng, n: usize) -> Vec<Op> {
    (0..n)
        .map(|_| {
            let shard = rng.below(u64::from(SHARDS)) as u32;
            if rng.chance(8) {
                return Op::Delete(shard, rng.below(3) as usize);
            }
            let most = if rng.chance(10) { 30 } else { 4 };
            let k = 1 + rng.below(most);
            let one = rng.below(3) as usize;
            let evs = (0..k)
                .map(|_| {
                    let s = if rng.chance(70) {
                        one
                    } else {
                        rng.below(3) as usize
                    };
                    let id = if rng.chance(60) {
                        Some(rng.below(40))
                    } else {
                        None
                    };
                    (s, id, rng.below(1000) as i64)
                })
                .collect();
            let expected = if rng.chance(10) {
                Some(rng.below(6))
            } else {
                None
            };
            Op::Write(shard, evs, expected)
        })
        .collect()
}

fn names(shard: u32) -> Vec<String> {
    streams_in(&format!("s{shard}-"), shard, SHARDS, 3)
}

/// What a request answered, comparable across stores.
type Answer = Result<(u64, u64, Vec<(String, u64)>), WriteError>;

/// Apply `op` with its origin (the shard's partition, at `offset`).
fn apply(store: &Store, op: &Op, offset: u64) -> Answer {
    let at = origin(Streams, op.shard(), offset);
    let names = names(op.shard());
    match op {
        Op::Write(_, evs, expected) => {
            let ids: Vec<Option<String>> =
                evs.iter().map(|e| e.1.map(|i| format!("i{i}"))).collect();
            let views: Vec<_> = evs
                .iter()
                .zip(&ids)
                .map(|(e, id)| ev(&names[e.0], id.as_deref(), e.2, e.2))
                .collect();
            let mut r = req_at(&views, at);
            let single = evs.iter().all(|e| e.0 == evs[0].0);
            r.expected_last_seq = expected.filter(|_| single);
            block(store.write(r)).map(|o| (o.accepted, o.duplicates, o.last_seq))
        }
        Op::Delete(_, s) => block(store.delete(&names[*s], None, Some(at)))
            .map(|o| (0, 0, vec![(names[*s].clone(), o.last_seq)])),
    }
}

/// Restart `store` one way or another (or not at all).
fn maybe_restart(fs: &SimFs, c: &StorageConfig, store: Store, rng: &mut Rng) -> Store {
    match rng.below(3) {
        0 => store,
        1 => {
            store.shutdown();
            Store::open(c.clone()).unwrap().0
        }
        _ => {
            kill(fs, store);
            Store::open(c.clone()).unwrap().0
        }
    }
}

fn all_views(store: &Store) -> Vec<ShardView> {
    (0..SHARDS).map(|s| view(store, &names(s))).collect()
}

/// A reset shard fed the same writes again (from the partition's start: the offsets it
/// forgot) equals a fresh store fed only those writes; the other shards are as they were.
#[test]
fn a_reset_shard_replayed_equals_a_fresh_one() {
    let cases: u64 = std::env::var("VX_RESET_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let seeds: Vec<u64> = match std::env::var("VX_RESET_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..cases).map(|i| 0x5EED_0000 + i).collect(),
    };
    for seed in seeds {
        let mut rng = Rng(seed);
        let n = 20 + rng.below(60) as usize;
        let ops = gen_ops(&mut rng, n);
        let target = rng.below(u64::from(SHARDS)) as u32;
        let fs = SimFs::new();
        let mut c = cfg(&fs);
        c.segment_bytes = 512 + rng.below(3000);
        let (mut store, _) = Store::open(c.clone()).unwrap();
        // Offsets per partition: the op's index in the partition's sequence.
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        let mut offsets = Vec::new();
        for op in &ops {
            let o = next.entry(op.shard()).or_insert(0);
            offsets.push(*o);
            *o += 1;
        }
        let cut = rng.below(ops.len() as u64) as usize;
        for (op, &o) in ops.iter().zip(&offsets).take(cut) {
            let _ = apply(&store, op, o);
        }
        store = maybe_restart(&fs, &c, store, &mut rng);
        for (op, &o) in ops.iter().zip(&offsets).skip(cut) {
            let _ = apply(&store, op, o);
        }
        let before = all_views(&store);
        let applied_before = store.applied_origins();
        block(store.reset_shard(Streams, target)).unwrap();
        store = maybe_restart(&fs, &c, store, &mut rng);
        assert!(
            view(&store, &names(target)).values().all(Option::is_none),
            "seed {seed}"
        );
        // The partition again from its start, into the reset store and a fresh one.
        let fresh_fs = SimFs::new();
        let (fresh, _) = Store::open(cfg(&fresh_fs)).unwrap();
        let replay: Vec<(&Op, u64)> = ops
            .iter()
            .zip(offsets.iter().copied())
            .filter(|(op, _)| op.shard() == target)
            .collect();
        let half = replay.len() / 2;
        for (i, &(op, o)) in replay.iter().enumerate() {
            if i == half {
                store = maybe_restart(&fs, &c, store, &mut rng);
            }
            let (a, b) = (apply(&store, op, o), apply(&fresh, op, o));
            assert_eq!(a, b, "seed {seed}: {op:?}");
        }
        store = maybe_restart(&fs, &c, store, &mut rng);
        let after = all_views(&store);
        for s in 0..SHARDS {
            if s == target {
                assert_eq!(
                    after[s as usize],
                    view(&fresh, &names(s)),
                    "seed {seed}: shard {s}"
                );
            } else {
                assert_eq!(
                    after[s as usize], before[s as usize],
                    "seed {seed}: shard {s}"
                );
            }
        }
        let applied: Vec<Origin> = store.applied_origins();
        let want: Vec<Origin> = applied_before
            .iter()
            .filter(|o| o.partition != target)
            .copied()
            .chain(fresh.applied_origins())
            .collect();
        let mut want = want;
        want.sort_by_key(|o| (o.topic, o.partition));
        assert_eq!(applied, want, "seed {seed}");
        // Deleted streams too: a write continues each stream the same way in both.
        for n in names(target) {
            let a = block(store.write(req(&[ev(&n, None, 1, 1)]))).map(|o| o.last_seq);
            let b = block(fresh.write(req(&[ev(&n, None, 1, 1)]))).map(|o| o.last_seq);
            assert_eq!(a, b, "seed {seed}: {n}");
        }
        store.shutdown();
        fresh.shutdown();
    }
}
