//! Point reads (`from=N&limit=1`, and small limits) start their walk at a span's best sample
//! (docs/ARCHITECTURE.md, "Index files" and "Reader index and replay"): they return exactly
//! what a full replay returns at that seq, in the active segment and in sealed ones, for
//! small and large runs, interleaved streams, index files of every version, across restarts
//! and power cuts; and a one-event read reads a few KiB wherever its event is.
//!
//! `VX_POINT_CASES` sets the number of cases of the property test (default 12).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use proptest::prelude::{Just, ProptestConfig, Strategy, any, prop_oneof, proptest};
use std::collections::BTreeMap;
use std::path::Path;
use support::*;
use vx_proto::{EventView, Kind, Num};
use vx_storage::check::{Status, check_with};
use vx_storage::idxfile::{self, IdxContents};
use vx_storage::pages::PAGE;
use vx_storage::sim::SimFs;
use vx_storage::vfs::{OpenMode, Vfs};
use vx_storage::*;

const STREAMS: [&str; 3] = ["a", "b", "c"];
const LOG: &str = "/data/log";

/// One run of a request: its stream, its events, and each event's data bytes.
#[derive(Clone, Debug)]
struct RunSpec {
    stream: usize,
    count: u32,
    data: usize,
}

/// What each stream must hold: per seq, (ts, value); values are unique.
type Model = BTreeMap<&'static str, Vec<(u64, Option<String>, i64, i64)>>;

/// A `"xxx…"` JSON string of `n` + 2 bytes.
fn payload(n: usize) -> String {
    format!("\"{}\"", "x".repeat(n))
}

/// The events of (stream, seq-like value, data) triples, as the tests write them: a counter of
/// that value, at that `ts`.
fn views_of<'a>(owned: &'a [(&'a str, i64, String)]) -> Vec<EventView<'a>> {
    owned
        .iter()
        .map(|(s, v, d)| EventView {
            stream: s,
            entity: None,
            ty: "t",
            ts: *v,
            kind: Kind::Counter,
            value: Some(Num::Int(*v)),
            id: None,
            data: Some(d),
        })
        .collect()
}

/// Write one request of `runs`; the model gets its events at the seqs the answer gives.
fn write(store: &Store, runs: &[RunSpec], next: &mut i64, model: &mut Model) {
    let mut owned: Vec<(&'static str, i64, String)> = Vec::new();
    for r in runs {
        let data = payload(r.data);
        for _ in 0..r.count {
            *next += 1;
            owned.push((STREAMS[r.stream], *next, data.clone()));
        }
    }
    let views = views_of(&owned);
    block(store.write(req(&views))).unwrap();
    for (s, v, _) in owned {
        let list = model.entry(s).or_default();
        list.push((list.len() as u64 + 1, None, v, v));
    }
}

/// Every seq's point read equals the model (and the full replay), and so do reads of small
/// limits from a few seqs.
fn check_reads(store: &Store, model: &Model, rng: &mut Rng) {
    for (stream, want) in model {
        assert_eq!(
            read(store, stream, all(1_000_000)),
            *want,
            "{stream}: full replay"
        );
        for (i, e) in want.iter().enumerate() {
            let got = read(store, stream, from(i as u64 + 1, 1));
            assert_eq!(
                got,
                std::slice::from_ref(e),
                "{stream}: point read at {}",
                i + 1
            );
        }
        for _ in 0..20 {
            let at = 1 + rng.below(want.len() as u64) as usize;
            let limit = [2usize, 3, 7, 33, 256][rng.below(5) as usize];
            let got = read(store, stream, from(at as u64, limit as u64));
            let end = (at - 1 + limit).min(want.len());
            assert_eq!(got, want[at - 1..end], "{stream}: {limit} from {at}");
        }
    }
}

/// `veltrix check` finds nothing wrong (samples included).
fn check_clean(fs: &SimFs) {
    let report = check_with(fs, Path::new("/data")).unwrap();
    for f in &report.files {
        assert!(
            !matches!(f.status, Status::Corrupt { .. }),
            "{}: {:?}",
            f.path.display(),
            f.status
        );
    }
}

/// The index files of the log, by name.
fn index_files(fs: &SimFs) -> Vec<String> {
    fs.files(Path::new(LOG))
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.ends_with(".idx"))
        .collect()
}

fn read_file(fs: &SimFs, name: &str) -> Vec<u8> {
    fs.open(&Path::new(LOG).join(name), OpenMode::Read)
        .unwrap()
        .read_all()
        .unwrap()
}

fn replace_file(fs: &SimFs, name: &str, bytes: &[u8]) {
    let f = fs
        .open(&Path::new(LOG).join(name), OpenMode::Write)
        .unwrap();
    f.set_len(0).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
}

/// Rewrite index files in an older version (as a build before version 3 wrote them):
/// `pick` chooses per file (`None`: keep it).
fn downgrade(fs: &SimFs, mut pick: impl FnMut() -> Option<u16>) -> usize {
    let mut n = 0;
    for name in index_files(fs) {
        if let Some(v) = pick() {
            let old = idxfile::with_version(&read_file(fs, &name), v).unwrap();
            replace_file(fs, &name, &old);
            n += 1;
        }
    }
    n
}

fn run_spec() -> impl Strategy<Value = RunSpec> {
    let small = (1u32..5, 0usize..60);
    let medium = (5u32..120, 0usize..400);
    let large = (120u32..1500, 0usize..80);
    let wide = (1u32..12, 2000usize..6000);
    (
        0..STREAMS.len(),
        prop_oneof![6 => small, 3 => medium, 1 => large, 1 => wide],
    )
        .prop_map(|(stream, (count, data))| RunSpec {
            stream,
            count,
            data,
        })
}

fn requests() -> impl Strategy<Value = Vec<Vec<RunSpec>>> {
    proptest::collection::vec(proptest::collection::vec(run_spec(), 1..4), 1..25)
}

fn cases() -> u32 {
    std::env::var("VX_POINT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]

    /// Random streams, run sizes, event sizes and interleavings, with small segments (seals):
    /// every seq's point read equals the full replay's event there, live, after a restart
    /// that rewrote some index files in versions 1 and 2, and after more writes on top.
    #[test]
    fn a_point_read_equals_the_full_replay_at_every_seq(
        first in requests(),
        second in requests(),
        segment_bytes in prop_oneof![Just(4096u64), Just(32 << 10), Just(256 << 10), Just(8 << 20)],
        old in 0u64..4,
        seed in any::<u64>(),
    ) {
        let fs = SimFs::new();
        let mut c = sim_cfg(&fs);
        c.segment_bytes = segment_bytes;
        c.fsync = FsyncMode::Never;
        let mut rng = Rng(seed);
        let mut model = Model::new();
        let mut next = 0;
        let (store, _) = Store::open(c.clone()).unwrap();
        for r in &first {
            write(&store, r, &mut next, &mut model);
        }
        check_reads(&store, &model, &mut rng);
        store.shutdown();
        drop(store);
        // Some (or all, or none) of the index files as an earlier build wrote them.
        downgrade(&fs, || match old {
            0 => None,
            1 => Some(1),
            2 => Some(2),
            _ => [None, Some(1), Some(2)][rng.below(3) as usize],
        });
        check_clean(&fs);
        let (store, _) = Store::open(c.clone()).unwrap();
        check_reads(&store, &model, &mut rng);
        for r in &second {
            write(&store, r, &mut next, &mut model);
        }
        check_reads(&store, &model, &mut rng);
        store.shutdown();
        drop(store);
        check_clean(&fs);
    }
}

/// Wait (a bounded while) for the writer to have sealed `n` segments.
fn wait_for_segments(store: &Store, n: u64) {
    for _ in 0..500 {
        if store.log_stats().segments >= n {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no roll: {:?}", store.log_stats());
}

/// The bytes and reads a closure costs on the simulated disk.
fn cost(fs: &SimFs, f: impl FnOnce()) -> (u64, u64) {
    let (r0, b0) = fs.reads();
    f();
    let (r1, b1) = fs.reads();
    (r1 - r0, b1 - b0)
}

/// A one-event read at any seq of a 1000-event run (270 KB, a span of its own) and of a
/// 10,000-event run (more than 128 samples: found by binary search in the index file) reads a
/// few KiB (at most 8 KiB of the log, sized to the events the walk needs, and the index
/// reads; 16 KiB at the span's first seq, where a walk starts as a replay does), in the active
/// segment and in a sealed one, before and after a restart; a walk from the span's start would
/// read half the run on average.
#[test]
fn a_one_event_read_reads_a_few_kib_wherever_it_is() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 1 << 20;
    let mut model = Model::new();
    let mut next = 0;
    let (store, _) = Store::open(c.clone()).unwrap();
    let big = [RunSpec {
        stream: 0,
        count: 1000,
        data: 250,
    }];
    let many = [RunSpec {
        stream: 1,
        count: 10_000,
        data: 5,
    }];
    write(&store, &big, &mut next, &mut model);
    write(&store, &many, &mut next, &mut model);
    let mut rng = Rng(17);
    let probe = |store: &Store, model: &Model, rng: &mut Rng, what: &str| {
        let mut worst = (0, 0);
        let mut warm = std::collections::BTreeMap::new();
        for (stream, want) in model.iter().filter(|(s, _)| ["a", "b"].contains(s)) {
            for i in 0..300 {
                let seq = if i == 0 {
                    1
                } else {
                    1 + rng.below(want.len() as u64)
                };
                let one = || {
                    let got = read(store, stream, from(seq, 1));
                    assert_eq!(got, [want[seq as usize - 1].clone()]);
                };
                let (reads, bytes) = cost(&fs, one);
                // At the span's start (seq 1 here) a walk starts as a replay does, with a
                // first read of 16 KiB; anywhere else from a sample, with at most 8 KiB. Index pages
                // are read whole (4 KiB) the first time a read needs them, then kept
                // (`index::pages`): a few pages on a cold cache.
                let most = if seq == 1 { 18 << 10 } else { 12 << 10 };
                assert!(
                    bytes <= most + 4 * PAGE && reads <= 24,
                    "{what}: {stream} at {seq}: {reads} reads, {bytes} bytes"
                );
                // Read again, every index page it needs is in memory: the log alone is read.
                let (again, again_bytes) = cost(&fs, one);
                assert!(
                    again_bytes <= most && again <= 2,
                    "{what}: {stream} at {seq} again: {again} reads, {again_bytes} bytes"
                );
                worst = (worst.0.max(reads), worst.1.max(bytes));
                if seq > 1 {
                    warm.entry(stream.to_string())
                        .or_insert_with(Vec::new)
                        .push((again, again_bytes));
                }
            }
        }
        eprintln!("{what}: at most {} reads, {} bytes", worst.0, worst.1);
        // The first read is sized to the events the walk needs ([`short_read`] in the
        // cursor): "b"'s ~30-byte events cost a few hundred bytes to ~1.5 KiB, "a"'s
        // ~270-byte events up to 8 KiB.
        // Events of one size: the estimate holds, and one `pread` is enough.
        for (stream, costs) in &warm {
            let mean = costs.iter().map(|c| c.1).sum::<u64>() / costs.len() as u64;
            let more = costs.iter().filter(|c| c.0 > 1).count();
            eprintln!(
                "{what}: {stream} reads {mean} bytes on average, {more} needed a second read"
            );
            assert_eq!(more, 0, "{what}: {stream}");
        }
        let b = &warm["b"];
        let mean_b = b.iter().map(|c| c.1).sum::<u64>() / b.len() as u64;
        assert!(mean_b <= 1536, "{what}: b reads {mean_b} bytes on average");
    };
    probe(&store, &model, &mut rng, "active");
    // The same runs read from the span's start cost half a run on average: the bound above
    // is what the samples buy.
    let (_, from_start) = cost(&fs, || {
        let mut c = store.read("a", all(1000)).unwrap();
        while c.next_event().unwrap().is_some() {}
    });
    assert!(from_start > 250_000, "{from_start}");
    // Roll: both runs are now in a sealed segment, found through its index file.
    let push = [RunSpec {
        stream: 2,
        count: 300,
        data: 3000,
    }];
    write(&store, &push, &mut next, &mut model);
    wait_for_segments(&store, 2);
    assert!(store.active_samples("a").is_empty());
    probe(&store, &model, &mut rng, "sealed");
    // The sealed reads went through the index page cache, which `/metrics` reports.
    let log = store.log_stats();
    assert!(log.index_cache_hits > log.index_cache_misses, "{log:?}");
    assert!(log.index_cache_bytes > 0 && log.index_cache_bytes <= c.index_cache_bytes);
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    probe(&store, &model, &mut rng, "sealed, after a restart");
}

/// Start-up rebuilds the active segment's samples from its records exactly as the writer
/// made them (after a clean stop and after a `kill -9`), and an index file rebuilt from its
/// segment is byte for byte the one the seal wrote.
#[test]
fn samples_rebuilt_at_start_up_equal_the_writers() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 64 << 20;
    c.fsync = FsyncMode::Never;
    let mut model = Model::new();
    let mut next = 0;
    let mut rng = Rng(99);
    let (store, _) = Store::open(c.clone()).unwrap();
    let mut write_some = |store: &Store, model: &mut Model, rng: &mut Rng| {
        for _ in 0..40 {
            let runs: Vec<RunSpec> = (0..1 + rng.below(3))
                .map(|_| RunSpec {
                    stream: rng.below(3) as usize,
                    count: [1, 3, 40, 200][rng.below(4) as usize],
                    data: [10, 100, 900][rng.below(3) as usize],
                })
                .collect();
            write(store, &runs, &mut next, model);
        }
    };
    write_some(&store, &mut model, &mut rng);
    let samples = |store: &Store| -> Vec<Vec<idxfile::Sample>> {
        STREAMS.iter().map(|s| store.active_samples(s)).collect()
    };
    let before = samples(&store);
    assert!(before.iter().any(|s| s.len() > 3), "{before:?}");
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(samples(&store), before);
    check_reads(&store, &model, &mut rng);
    write_some(&store, &mut model, &mut rng);
    let before = samples(&store);
    kill(&fs, store);
    let (store, _) = Store::open(c.clone()).unwrap();
    assert_eq!(samples(&store), before);
    check_reads(&store, &model, &mut rng);
    store.shutdown();
    drop(store);

    // Small segments from here on: index files.
    c.segment_bytes = 64 << 10;
    let (store, _) = Store::open(c.clone()).unwrap();
    write_some(&store, &mut model, &mut rng);
    store.shutdown();
    drop(store);

    // Remove every index file but the newest: start-up rebuilds them from their segments.
    let names = index_files(&fs);
    assert!(names.len() > 4, "{names:?}");
    let written: Vec<Vec<u8>> = names.iter().map(|n| read_file(&fs, n)).collect();
    let with_samples = written
        .iter()
        .filter(|b| IdxContents::from_bytes(b.to_vec()).unwrap().header.samples > 0)
        .count();
    assert!(with_samples > 2);
    for n in &names[..names.len() - 1] {
        fs.remove(&Path::new(LOG).join(n)).unwrap();
    }
    let (store, report) = Store::open(c).unwrap();
    assert_eq!(report.scanned_segments as usize, names.len(), "{report:?}");
    for (n, want) in names.iter().zip(&written) {
        assert!(read_file(&fs, n) == *want, "{n} rebuilt differently");
    }
    check_reads(&store, &model, &mut rng);
    store.shutdown();
}

/// The power goes out while a seal writes the index file (at each of its steps, with what
/// reached the disk chosen at random): after recovery every acknowledged event reads back by
/// point read and by full replay, the samples of the rebuilt or surviving index included.
#[test]
fn a_power_cut_while_an_index_file_is_written_loses_no_acknowledged_event() {
    let plan: Vec<Vec<RunSpec>> = {
        let mut rng = Rng(5);
        (0..60)
            .map(|_| {
                (0..1 + rng.below(2))
                    .map(|_| RunSpec {
                        stream: rng.below(2) as usize,
                        count: [2, 50, 150][rng.below(3) as usize],
                        data: [20, 200][rng.below(2) as usize],
                    })
                    .collect()
            })
            .collect()
    };
    let cfg = |fs: &SimFs| {
        let mut c = sim_cfg(fs);
        c.segment_bytes = 48 << 10;
        c.fsync = FsyncMode::Always;
        c
    };
    // Which request's group rolls the segment (a dry run: the same requests, the same bytes).
    // One record per request, LSNs from 1: a segment named L starts with request L − 1
    // (0-based), so request L − 2 rolled the one before it.
    let rolls: Vec<usize> = {
        let fs = SimFs::new();
        let (store, _) = Store::open(cfg(&fs)).unwrap();
        let (mut model, mut next) = (Model::new(), 0);
        for r in &plan {
            write(&store, r, &mut next, &mut model);
        }
        store.shutdown();
        fs.files(Path::new(LOG))
            .into_iter()
            .filter_map(|(n, _)| n.strip_suffix(".log")?.parse::<usize>().ok())
            .filter(|&lsn| lsn > 1)
            .map(|lsn| lsn - 2)
            .collect()
    };
    assert!(rolls.len() >= 2, "{rolls:?}");
    let at = rolls[1];
    // How often the cut left a temporary index file, the new index file without the next
    // segment, and the next segment: the test must reach each.
    #[derive(Default, Debug)]
    struct Left {
        tmp: u32,
        idx_only: u32,
        rolled: u32,
    }
    let mut left = Left::default();
    for ops in 1..=10u64 {
        for seed in 0..4u64 {
            let fs = SimFs::new();
            let c = cfg(&fs);
            let (store, _) = Store::open(c.clone()).unwrap();
            let (mut acked, mut next) = (Model::new(), 0);
            for r in &plan[..at] {
                write(&store, r, &mut next, &mut acked);
            }
            // The roll's request, with the power going `ops` disk operations into it.
            let segments_before = store.log_stats().segments;
            fs.freeze_after(ops);
            let mut pending = acked.clone();
            let mut n = next;
            let views_ok = {
                let mut owned = Vec::new();
                for r in &plan[at] {
                    for _ in 0..r.count {
                        n += 1;
                        owned.push((STREAMS[r.stream], n, payload(r.data)));
                    }
                }
                let views = views_of(&owned);
                let ok = block(store.write(req(&views))).is_ok();
                for (s, v, _) in owned {
                    let list = pending.entry(s).or_default();
                    list.push((list.len() as u64 + 1, None, v, v));
                }
                ok
            };
            if views_ok {
                acked = pending.clone();
            }
            // The seal runs on the writer after the request is answered: wait until the cut
            // came or the seal finished, so that the cut lands `ops` operations in whatever
            // the machine's timing (freezing now could cut the seal short at any point).
            for _ in 0..500 {
                if fs.is_frozen() || store.log_stats().segments > segments_before {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let mut rng = Rng(seed * 1000 + ops);
            fs.freeze();
            store.shutdown();
            drop(store);
            fs.power_cut(&mut |k| rng.below(k));
            // What the cut left of the seal (counted below).
            let names: Vec<String> = fs
                .files(Path::new(LOG))
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            let next_seg = format!("{:020}.log", at + 2);
            let sealing = format!("{:020}.idx", rolls[0] + 2);
            if names.iter().any(|n| n.ends_with(".idx.tmp")) {
                left.tmp += 1;
            }
            if names.contains(&sealing) && !names.contains(&next_seg) {
                left.idx_only += 1;
            }
            if names.contains(&next_seg) {
                left.rolled += 1;
            }
            let (store, _) = Store::open(c.clone()).unwrap_or_else(|e| {
                panic!("ops {ops} seed {seed}: start-up failed: {e}");
            });
            // What survived: every acknowledged event, and of the roll's request all or
            // nothing.
            let got: Model = STREAMS
                .iter()
                .filter(|s| acked.contains_key(*s) || pending.contains_key(*s))
                .map(|s| (*s, read(&store, s, all(1_000_000))))
                .collect();
            let whole = got
                .iter()
                .all(|(s, g)| g.as_slice() == pending.get(s).map_or(&[][..], |v| v.as_slice()));
            let before = got
                .iter()
                .all(|(s, g)| g.as_slice() == acked.get(s).map_or(&[][..], |v| v.as_slice()));
            assert!(
                whole || (before && !views_ok),
                "ops {ops} seed {seed}: acknowledged {views_ok}"
            );
            check_reads(&store, &got, &mut rng);
            store.shutdown();
            drop(store);
            check_clean(&fs);
        }
    }
    assert!(
        left.tmp > 0 && left.idx_only > 0 && left.rolled > 0,
        "{left:?}"
    );
}

/// `veltrix check` reads each sample against its segment: one that points a few bytes off
/// (its file's checksum made right again) is reported, naming the stream and the sample.
#[test]
fn check_finds_a_sample_that_points_elsewhere() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 64 << 10;
    let (mut model, mut next) = (Model::new(), 0);
    let (store, _) = Store::open(c).unwrap();
    for _ in 0..4 {
        let runs = [RunSpec {
            stream: 0,
            count: 300,
            data: 100,
        }];
        write(&store, &runs, &mut next, &mut model);
    }
    store.shutdown();
    drop(store);
    check_clean(&fs);
    let name = index_files(&fs)
        .into_iter()
        .find(|n| {
            IdxContents::from_bytes(read_file(&fs, n))
                .unwrap()
                .header
                .samples
                > 0
        })
        .unwrap();
    let mut bytes = read_file(&fs, &name);
    let h = IdxContents::from_bytes(bytes.clone()).unwrap().header;
    let samples_at = 96 + h.slots as usize * 8 + h.entries_len as usize + h.spans as usize * 48;
    // The first sample's `off`, 19 bytes on.
    let at = samples_at + 4;
    let off = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    bytes[at..at + 4].copy_from_slice(&(off + 19).to_le_bytes());
    let body = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    replace_file(&fs, &name, &bytes);
    let report = check_with(&fs, Path::new("/data")).unwrap();
    let bad: Vec<_> = report.corrupt().collect();
    assert_eq!(bad.len(), 1, "{:?}", report.files);
    assert!(bad[0].path.ends_with(&name));
    let Status::Corrupt { reason, .. } = &bad[0].status else {
        unreachable!()
    };
    assert!(
        reason.contains("\"a\"") && reason.contains("sample"),
        "{reason}"
    );
}
