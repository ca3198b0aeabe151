//! The feature tables' apply, alone: records of 1000 counter events over 100,000 entities
//! (uniform), with the built-ins and the three windowed aggregates of `bench/ingest-ab.sh`
//! (count 5m, count 1h, distinct streams 1d), and with the built-ins only. Each record is
//! applied shard by shard (`RecordEvents::apply_all`, what the storage engine does) and, for
//! comparison, one event at a time in record order (`RecordEvents::apply`). divan reports
//! events/s; the tables are filled once per benchmark, so every record updates existing
//! entities, as in a steady ingest. Event time moves as at 2M events a second (half a
//! millisecond a record), and the allocator is the server's (mimalloc, `no_thp`).
//!
//! The apply threads (`features.apply_threads`): `threads_*` hand groups of 16 such records,
//! packed as the log holds them, to 1, 2 or 4 threads ([`ApplyThreads`], the storage
//! engine's hand-off): one thread cuts each record from its event headers, each decodes and
//! applies the events of the shards it owns (one thread: every event, as `*_by_shard` but
//! with the decoding), four groups an iteration (the threads are woken by each group and wait
//! for the next, as with the writer).
//! On a machine whose cores are all free, `threads_2` against `threads_1` is what a second
//! apply thread buys.
//!
//! `cargo bench -p vx-features --bench apply`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use std::sync::Arc;
use std::time::Duration;
use vx_features::parallel::testing::{EventGroup, Record};
use vx_features::parallel::{ApplyThreads, Group};
use vx_features::{Agg, DistinctOf, FeatureDecl, Features, LogPos};
use vx_proto::{EventView, Kind, Num};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ENTITIES: usize = 100_000;
const EVENTS: usize = 1000;
const RECORDS: usize = 64;

fn main() {
    divan::main();
}

fn decl3() -> Vec<FeatureDecl> {
    let d = |name: &str, agg, secs: u64, of| FeatureDecl {
        name: name.into(),
        from: "hit".into(),
        agg,
        window: Some(Duration::from_secs(secs)),
        ttl: None,
        of,
    };
    vec![
        d("hits_5m", Agg::Count, 300, DistinctOf::Stream),
        d("hits_1h", Agg::Count, 3600, DistinctOf::Stream),
        d("streams_1d", Agg::Distinct, 86_400, DistinctOf::Stream),
    ]
}

struct Load {
    names: Vec<String>,
    streams: Vec<String>,
    /// Per record, the (entity, stream) index of each event.
    records: Vec<Vec<(usize, usize)>>,
}

fn load() -> Load {
    // A fixed xorshift: the same records in every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    Load {
        names: (0..ENTITIES).map(|i| format!("player-{i}")).collect(),
        streams: (0..16).map(|i| format!("bench-{i}")).collect(),
        records: (0..RECORDS)
            .map(|_| {
                (0..EVENTS)
                    .map(|_| ((next() % ENTITIES as u64) as usize, (next() % 16) as usize))
                    .collect()
            })
            .collect(),
    }
}

fn events<'a>(l: &'a Load, r: &[(usize, usize)], ts: i64) -> Vec<EventView<'a>> {
    r.iter()
        .map(|&(e, s)| EventView {
            stream: &l.streams[s],
            entity: Some(&l.names[e]),
            ty: "hit",
            ts,
            kind: Kind::Counter,
            value: Some(Num::Int(1)),
            id: None,
            data: None,
        })
        .collect()
}

/// Tables holding every entity, and the LSN after the fill.
fn filled(l: &Load, decls: Vec<FeatureDecl>) -> (Features, u64) {
    let f = Features::new(128, decls, u64::MAX);
    let mut lsn = 1;
    for chunk in l.names.chunks(EVENTS) {
        let evs: Vec<EventView<'_>> = chunk
            .iter()
            .map(|n| EventView {
                stream: &l.streams[0],
                entity: Some(n),
                ty: "hit",
                ts: 1_000_000,
                kind: Kind::Counter,
                value: Some(Num::Int(1)),
                id: None,
                data: None,
            })
            .collect();
        let at = LogPos {
            lsn,
            append_ms: 2_000_000,
        };
        f.events(at, None).unwrap().apply_all(&evs).unwrap();
        lsn += 1;
    }
    (f, lsn)
}

fn run(bencher: Bencher, decls: Vec<FeatureDecl>, all: bool) {
    let l = load();
    let (f, mut lsn) = filled(&l, decls);
    let mut i = 0;
    bencher.counter(ItemsCount::new(EVENTS)).bench_local(|| {
        let evs = events(&l, &l.records[i % RECORDS], 1_000_000 + lsn as i64 / 2);
        let at = LogPos {
            lsn,
            append_ms: 2_000_000,
        };
        let mut rec = f.events(at, None).unwrap();
        if all {
            rec.apply_all(&evs).unwrap();
        } else {
            for ev in &evs {
                rec.apply(ev).unwrap();
            }
        }
        lsn += 1;
        i += 1;
        black_box(&f);
    });
}

#[divan::bench]
fn three_aggregates_by_shard(bencher: Bencher) {
    run(bencher, decl3(), true);
}

#[divan::bench]
fn three_aggregates_one_at_a_time(bencher: Bencher) {
    run(bencher, decl3(), false);
}

#[divan::bench]
fn builtins_by_shard(bencher: Bencher) {
    run(bencher, vec![], true);
}

/// Records of a group, and groups an iteration, for the thread benchmarks.
const GROUP_RECORDS: usize = 16;
const GROUPS: usize = 4;

/// The bench records packed as the log holds them (their `ts` moved per record as the
/// others move it).
fn packed(l: &Load) -> Vec<Record> {
    l.records
        .iter()
        .map(|r| {
            let at = LogPos {
                lsn: 0,
                append_ms: 2_000_000,
            };
            Record::new(at, &events(l, r, 0))
        })
        .collect()
}

fn run_threads(bencher: Bencher, decls: Vec<FeatureDecl>, threads: usize) {
    let l = load();
    let (f, mut lsn) = filled(&l, decls);
    let recs = packed(&l);
    let mut pool = ApplyThreads::start(Arc::new(f), threads).unwrap();
    let mut i = 0;
    bencher
        .counter(ItemsCount::new(EVENTS * GROUP_RECORDS * GROUPS))
        .bench_local(|| {
            for _ in 0..GROUPS {
                let group: Vec<Record> = (0..GROUP_RECORDS)
                    .map(|_| {
                        let r = Record {
                            at: LogPos {
                                lsn,
                                append_ms: 2_000_000,
                            },
                            ts_shift: 1_000_000 + lsn as i64 / 2,
                            ..recs[i % RECORDS].clone()
                        };
                        lsn += 1;
                        i += 1;
                        r
                    })
                    .collect();
                pool.submit(Arc::new(EventGroup::new(group)) as Arc<dyn Group>);
            }
            pool.settle();
        });
    pool.stop();
}

#[divan::bench(args = [1, 2, 4])]
fn threads_builtins(bencher: Bencher, threads: usize) {
    run_threads(bencher, vec![], threads);
}

#[divan::bench(args = [1, 2, 4])]
fn threads_three_aggregates(bencher: Bencher, threads: usize) {
    run_threads(bencher, decl3(), threads);
}
