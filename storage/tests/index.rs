//! The index across many sealed segments: replay from any position through index files and
//! stream chains, restart that reads index files instead of the log, rebuilding a missing or
//! damaged index, stray files of interrupted rolls, and a bounded number of descriptors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use support::*;
use vx_storage::sim::SimFs;
use vx_storage::vfs::{OpenMode, Vfs};
use vx_storage::*;

/// A deterministic pseudo-random sequence.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Expected events per stream: (seq, id, ts, value).
type Model = BTreeMap<String, Got>;

/// Write `n` events over `streams` streams in requests of 1–40 events (some streams are
/// written rarely, so they have nodes in far-apart segments).
fn fill(store: &Store, rng: &mut Rng, n: usize, streams: usize, model: &mut Model) {
    let mut written = 0;
    let names: Vec<String> = (0..streams).map(|i| format!("s{i}")).collect();
    while written < n {
        let size = 1 + rng.below(40) as usize;
        let mut evs = Vec::new();
        let mut ids = Vec::new();
        for k in 0..size {
            // Stream 0 gets one event in 50; the rest share what is left.
            let s = if rng.below(50) == 0 {
                0
            } else {
                1 + rng.below(streams as u64 - 1) as usize
            };
            ids.push((s, format!("e{}-{k}", written + k)));
        }
        for (i, (s, id)) in ids.iter().enumerate() {
            let ts = 1_000_000 + (written + i) as i64 - 3 * rng.below(5) as i64;
            evs.push((names[*s].clone(), id.clone(), ts, (written + i) as i64));
        }
        let views: Vec<_> = evs
            .iter()
            .map(|(s, id, ts, v)| ev(s, Some(id), *ts, *v))
            .collect();
        let out = block(store.write(req(&views))).unwrap();
        assert_eq!(out.accepted as usize, size);
        for (s, id, ts, v) in evs {
            let list = model.entry(s).or_default();
            let seq = list.len() as u64 + 1;
            list.push((seq, Some(id), ts, v));
        }
        written += size;
    }
}

fn check(store: &Store, model: &Model, rng: &mut Rng) {
    for (stream, want) in model {
        let info = store.stream(stream).unwrap();
        assert_eq!(
            (info.first_seq, info.last_seq, info.events),
            (1, want.len() as u64, want.len() as u64),
            "{stream}"
        );
        let min = want.iter().map(|e| e.2).min();
        let max = want.iter().map(|e| e.2).max();
        assert_eq!((info.first_ts, info.last_ts), (min, max), "{stream}");
        assert_eq!(read(store, stream, all(1_000_000)), *want, "{stream}");
        for _ in 0..20 {
            let at = 1 + rng.below(want.len() as u64);
            let got = read(store, stream, from(at, 37));
            let end = (at as usize - 1 + 37).min(want.len());
            assert_eq!(got, want[at as usize - 1..end], "{stream} from {at}");
        }
        // Time filters skip whole spans and nodes but return exactly the events in range.
        let (since, until) = (1_000_000 + 500, 1_000_000 + 900);
        let q = ReadQuery {
            since: Some(since),
            until: Some(until),
            limit: 1_000_000,
            ..Default::default()
        };
        let want_t: Got = want
            .iter()
            .filter(|e| e.2 >= since && e.2 < until)
            .cloned()
            .collect();
        assert_eq!(read(store, stream, q), want_t, "{stream} by time");
    }
}

#[test]
fn replay_from_every_position_across_sealed_segments_and_restart() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 4096;
    c.fsync = FsyncMode::Never;
    let mut rng = Rng(0x5eed);
    let mut model = Model::new();
    let (store, _) = Store::open(c.clone()).unwrap();
    fill(&store, &mut rng, 3000, 6, &mut model);
    let stats = store.log_stats();
    assert!(stats.segments > 20, "{stats:?}");
    check(&store, &model, &mut rng);
    store.shutdown();
    drop(store);

    // Restart reads the index files; only the active segment (and those holding ids within
    // the dedup window) are scanned.
    let mut quick = c.clone();
    quick.dedup_window = std::time::Duration::ZERO;
    let (store, report) = Store::open(quick).unwrap();
    assert_eq!(report.index_files + 1, report.segments, "{report:?}");
    assert_eq!(report.scanned_segments, 1, "{report:?}");
    check(&store, &model, &mut rng);
    // Writing on continues every chain.
    fill(&store, &mut rng, 1500, 6, &mut model);
    check(&store, &model, &mut rng);
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    check(&store, &model, &mut rng);
}

#[test]
fn a_missing_or_damaged_index_file_is_rebuilt() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 4096;
    c.fsync = FsyncMode::Never;
    let mut rng = Rng(7);
    let mut model = Model::new();
    let (store, _) = Store::open(c.clone()).unwrap();
    fill(&store, &mut rng, 1000, 4, &mut model);
    store.shutdown();
    drop(store);
    let log = Path::new("/data/log");
    let idx: Vec<String> = fs
        .files(log)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".idx"))
        .collect();
    assert!(idx.len() > 5);
    fs.remove(&log.join(&idx[1])).unwrap();
    let f = fs.open(&log.join(&idx[3]), OpenMode::Write).unwrap();
    f.write_all_at(b"garbage", 100).unwrap();
    let (store, report) = Store::open(c.clone()).unwrap();
    assert_eq!(report.index_files + 3, report.segments, "{report:?}");
    check(&store, &model, &mut rng);
    store.shutdown();
    drop(store);
    // Both were written again.
    let (_, report) = Store::open(c).unwrap();
    assert_eq!(report.index_files + 1, report.segments, "{report:?}");
}

#[test]
fn strays_of_interrupted_rolls_and_writes_never_stop_a_start() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 4096;
    let mut rng = Rng(11);
    let mut model = Model::new();
    let (store, _) = Store::open(c.clone()).unwrap();
    fill(&store, &mut rng, 400, 3, &mut model);
    store.shutdown();
    drop(store);
    let log = Path::new("/data/log");
    let segs: Vec<String> = fs
        .files(log)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".log"))
        .collect();
    let last: u64 = segs.last().unwrap()[..20].parse().unwrap();
    // An empty segment named past the log's end, one in the middle, a temporary file, and an
    // index file without a segment.
    for name in [
        format!("{:020}.log", last + 1000),
        format!("{:020}.log", last - 1),
        "00000000000000000777.idx".to_string(),
        "streams.carry.tmp".to_string(),
    ] {
        fs.open(&log.join(name), OpenMode::CreateNew).unwrap();
    }
    let (store, report) = Store::open(c).unwrap();
    assert_eq!(report.removed_strays, 4, "{report:?}");
    check(&store, &model, &mut rng);
    let names: Vec<String> = fs.files(log).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("777") || n.ends_with(".tmp"))
    );
}

#[test]
fn descriptors_stay_bounded_with_many_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = real_cfg(dir.path());
    c.segment_bytes = 512;
    c.fsync = FsyncMode::Never;
    let mut rng = Rng(3);
    let mut model = Model::new();
    let (store, _) = Store::open(c.clone()).unwrap();
    fill(&store, &mut rng, 8000, 3, &mut model);
    let stats = store.log_stats();
    assert!(stats.segments > 300, "{stats:?}");
    check(&store, &model, &mut rng);
    assert!(store.log_stats().open_files <= 256);
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    check(&store, &model, &mut rng);
    assert!(store.log_stats().open_files <= 256);
}

/// `meta.json` as docs/ARCHITECTURE.md describes it, and a format 1 data dir (an earlier
/// development version) refused with a message instead of misread.
#[test]
fn meta_json_and_format_1_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(real_cfg(tmp.path())).unwrap();
    store.shutdown();
    drop(store);
    let text = std::fs::read_to_string(tmp.path().join("meta.json")).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&str> = meta
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 5, "{text}");
    assert_eq!(meta["format"], 2);
    assert_eq!(meta["shards"], 4);
    assert_eq!(meta["hash"], "xxh3-64");
    assert_eq!(meta["writers"], 1);
    assert!(meta["dedup_key"].is_u64(), "{text}");

    let old = tempfile::tempdir().unwrap();
    std::fs::write(
        old.path().join("meta.json"),
        r#"{"format":1,"shards":4,"hash":"xxh3-64","writers":1,"dedup_key":7}"#,
    )
    .unwrap();
    let err = Store::open(real_cfg(old.path()))
        .err()
        .expect("format 1 refused");
    assert!(err.to_string().contains("format 1"), "{err}");
}
