#![allow(clippy::unwrap_used)]

use super::testing::{EventGroup, Record};
use super::*;
use crate::decl::{Agg, decl};
use crate::read::text_of;
use crate::{LogPos, entity_hash};
use proptest::prelude::*;
use std::sync::atomic::AtomicBool;
use vx_proto::{EventView, Kind, Num};

#[test]
fn the_parts_own_every_shard_once() {
    for shards in 1..=70u32 {
        for of in 1..=17usize {
            let mut owner = vec![None; shards as usize];
            for index in 0..of {
                let p = Part { index, of };
                for s in p.shards(shards) {
                    assert_eq!(owner[s as usize], None, "{shards} shards, {of} parts");
                    owner[s as usize] = Some(index);
                    assert!(p.owns(s, shards));
                    assert_eq!(Part::owner(s, shards, of), index);
                }
            }
            assert!(owner.iter().all(Option::is_some), "{shards} {of}");
        }
    }
    // A shard past the last (a reset of a shard the tables do not have) has one owner.
    assert_eq!(Part::owner(9, 4, 3), 2);
}

fn tables() -> Features {
    Features::new(
        16,
        vec![
            decl("n_5m", Agg::Count, Some(300)),
            decl("v_1h", Agg::Sum, Some(3600)),
            decl("d_1d", Agg::Distinct, Some(86_400)),
            decl("d_all", Agg::Distinct, None),
            decl("last", Agg::Last, None),
        ],
        u64::MAX,
    )
}

fn dump(f: &Features, entities: usize) -> Vec<String> {
    (0..entities)
        .map(|e| text_of(f, &format!("e{e}")))
        .collect()
}

/// A record at `at` of proptest's events over entities `e0`…
fn record(at: LogPos, raw: &[(Option<usize>, u8, u8, i64, i64)]) -> Record {
    let names: Vec<Option<String>> = raw.iter().map(|r| r.0.map(|e| format!("e{e}"))).collect();
    let streams: Vec<String> = raw.iter().map(|r| format!("s{}", r.4 % 4)).collect();
    let evs: Vec<EventView<'_>> = raw
        .iter()
        .zip(names.iter().zip(&streams))
        .map(|(&(_, ty, kind, ts, v), (e, stream))| EventView {
            stream,
            entity: e.as_deref(),
            ty: ["hit", "other", "gauge"][ty as usize],
            ts,
            kind: [Kind::Counter, Kind::Gauge, Kind::Event][kind as usize],
            value: (kind < 2).then_some(Num::Int(v)),
            id: None,
            data: None,
        })
        .collect();
    Record::new(at, &evs)
}

#[test]
fn a_cut_gives_each_part_its_shards_events_in_record_order() {
    let f = tables();
    let names: Vec<String> = (0..200).map(|i| format!("e{i}")).collect();
    let keys: Vec<Key> = (0..1000u32)
        .map(|i| Key {
            hash: entity_hash(names[(i as usize * 7) % 200].as_bytes()),
            at: i,
            run: 0,
        })
        .collect();
    for parts in [1, 2, 3, 4, 16] {
        let cut = Cut::new(&f, keys.clone(), parts);
        let mut seen = 0;
        for i in 0..parts {
            let p = Part {
                index: i,
                of: parts,
            };
            let slice = cut.part(i);
            seen += slice.len();
            // Its shards only, in shard order, record order within a shard.
            for w in slice.windows(2) {
                let (a, b) = (f.shard_of_hash(w[0].hash), f.shard_of_hash(w[1].hash));
                assert!(a < b || (a == b && w[0].at < w[1].at));
            }
            assert!(slice.iter().all(|k| p.owns(f.shard_of_hash(k.hash), 16)));
            let want = keys
                .iter()
                .filter(|k| p.owns(f.shard_of_hash(k.hash), 16))
                .count();
            assert_eq!(slice.len(), want);
        }
        assert_eq!(seen, keys.len());
    }
}

proptest! {
    /// Applied by 1, 2 or 4 threads in groups of records, the tables come out exactly as one
    /// thread applying every record in order leaves them: every feature, the bytes counted,
    /// the entities, the late events.
    #[test]
    fn threads_apply_as_one(
        groups in prop::collection::vec(
            prop::collection::vec(
                prop::collection::vec(
                    (prop::option::weighted(0.9, 0usize..120), 0u8..3, 0u8..3, 0i64..4_000_000, 0i64..40),
                    0..120),
                1..4),
            1..5),
    ) {
        let one = tables();
        let mut lsn = 0;
        let mut all: Vec<Vec<Record>> = Vec::new();
        for g in &groups {
            let mut recs = Vec::new();
            for r in g {
                lsn += 1;
                recs.push(record(LogPos { lsn, append_ms: 4_000_000 }, r));
            }
            all.push(recs);
        }
        // One thread, record by record, in the record's order (runs are by stream, so the
        // events are given in the order the batch keeps them).
        for r in all.iter().flatten() {
            let g = EventGroup::new(vec![r.clone()]);
            g.apply(&one, Part::WHOLE);
            prop_assert!(g.error.lock().is_none());
        }
        for threads in [1, 2, 4] {
            let many = Arc::new(tables());
            let mut pool = ApplyThreads::start(Arc::clone(&many), threads).unwrap();
            prop_assert_eq!(pool.parts(), threads);
            let mut handed = Vec::new();
            for recs in &all {
                let g = Arc::new(EventGroup::new(recs.clone()));
                pool.submit(Arc::clone(&g) as Arc<dyn Group>);
                handed.push(g);
            }
            pool.settle();
            for g in &handed {
                prop_assert_eq!(g.finished.load(Ordering::Acquire), 1);
                prop_assert!(g.error.lock().is_none());
            }
            prop_assert_eq!(dump(&many, 120), dump(&one, 120));
            prop_assert_eq!(many.stats(), one.stats());
            pool.stop();
        }
    }
}

/// What ran, in order: (group, `Some(part)` applied or `None` finished).
type Log = Arc<Mutex<Vec<(u64, Option<usize>)>>>;

/// A group that records the order its parts and finishes run in, and can panic.
struct Probe {
    n: u64,
    log: Log,
    panic_in: Option<usize>,
    panicked: AtomicBool,
}

impl Group for Probe {
    fn apply(&self, _: &Features, part: Part) {
        if self.panic_in == Some(part.index) {
            panic!("part {} of group {} fails", part.index, self.n);
        }
        // Parts of a group apply at once; a slow one holds its group back.
        std::thread::sleep(std::time::Duration::from_micros(50 * part.index as u64));
        self.log.lock().push((self.n, Some(part.index)));
    }

    fn finish(&self, _: &Features) {
        self.log.lock().push((self.n, None));
    }

    fn panicked(&self, _: &Features, why: &str) {
        assert!(why.contains("fails"), "{why}");
        self.panicked.store(true, Ordering::Release);
    }
}

/// Every part of a group applies before it finishes, groups finish in the order handed over,
/// and a part that panics is reported while its group still finishes.
#[test]
fn groups_finish_in_order_after_every_part() {
    let f = Arc::new(tables());
    let mut pool = ApplyThreads::start(f, 4).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut probes = Vec::new();
    for n in 0..40 {
        let p = Arc::new(Probe {
            n,
            log: Arc::clone(&log),
            panic_in: (n % 7 == 3).then_some((n % 4) as usize),
            panicked: AtomicBool::new(false),
        });
        pool.submit(Arc::clone(&p) as Arc<dyn Group>);
        probes.push(p);
    }
    pool.settle();
    let log = log.lock().clone();
    let finishes: Vec<u64> = log
        .iter()
        .filter(|(_, p)| p.is_none())
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(finishes, (0..40).collect::<Vec<_>>());
    for p in &probes {
        let at = log.iter().position(|&e| e == (p.n, None)).unwrap();
        let parts = log[..at]
            .iter()
            .filter(|(n, i)| *n == p.n && i.is_some())
            .count();
        let want = if p.panic_in.is_some() { 3 } else { 4 };
        assert_eq!(parts, want, "group {}", p.n);
        assert_eq!(p.panicked.load(Ordering::Acquire), p.panic_in.is_some());
    }
    pool.stop();
}

/// A group applied here, whole, comes after every group handed over.
#[test]
fn a_group_applied_here_comes_after_those_handed_over() {
    let f = Arc::new(tables());
    let mut pool = ApplyThreads::start(f, 2).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let probe = |n| Probe {
        n,
        log: Arc::clone(&log),
        panic_in: None,
        panicked: AtomicBool::new(false),
    };
    for n in 0..5 {
        pool.submit(Arc::new(probe(n)));
    }
    pool.apply_here(&probe(5));
    let log = log.lock().clone();
    assert_eq!(log.last(), Some(&(5, None)));
    assert_eq!(log.iter().filter(|(_, p)| p.is_none()).count(), 6);
}
