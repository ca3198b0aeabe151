//! Simulated power loss (docs/API.md §7): random concurrent requests — several streams, ids, retries,
//! conditional writes, deletes, and rolls through tiny segments — go through the real writer on
//! the simulated disk; the power goes out after a random number of disk operations; the disk
//! keeps what was synced plus an arbitrary prefix of the rest (a torn last write included); the
//! store recovers; and then:
//!
//! - every request acknowledged at `fsync` is there, exactly once, at the seqs it was told;
//! - no request is partly there;
//! - each stream's seqs have no gap, and a new write continues after every acknowledged seq;
//! - dedup survives (a retry of a stored request is a duplicate) and so do tombstones;
//!
//! with retention on in some cases (then what retention removed counts as gone, like what a
//! tombstone covers).
//!
//! `VX_POWER_CASES` sets the number of cases (default 2000), `VX_POWER_SEED` replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use support::*;
use vx_proto::{Batch, EventView, Kind, Num};
use vx_storage::sim::SimFs;
use vx_storage::*;

const STREAMS: [&str; 4] = ["a", "b", "c", "d"];

/// One event as sent: its stream and its unique id (a retry resends the same ids).
#[derive(Clone, Debug)]
struct Sent {
    stream: &'static str,
    id: String,
    value: i64,
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        events: Vec<Sent>,
        durability: Option<Durability>,
        expected: Option<u64>,
    },
    Delete {
        stream: &'static str,
        durability: Option<Durability>,
    },
}

#[derive(Clone, Debug)]
enum Answer {
    Wrote(WriteOutcome),
    Deleted(DeleteOutcome),
    Refused(#[allow(dead_code)] WriteError),
}

struct Model {
    ops: Vec<(Op, Answer)>,
    /// Per stream: the last seq an answer told of, and the count of deletes answered so far
    /// (a retry never crosses a delete: the deleted stream's ids are forgotten with it).
    last_seq: HashMap<&'static str, u64>,
    /// Per stream: the highest seq an answer at `fsync` told of (a new write must go past it).
    durable_seq: HashMap<&'static str, u64>,
    epoch: HashMap<&'static str, u64>,
    /// Acknowledged writes a retry may resend: (op index, epochs of its streams then).
    stored: Vec<(usize, Vec<(&'static str, u64)>)>,
    next_value: i64,
}

fn batch(events: &[Sent]) -> Batch {
    let mut b = Batch::new();
    for e in events {
        b.push(&EventView {
            stream: e.stream,
            entity: Some("p"),
            ty: "t",
            ts: e.value,
            kind: Kind::Counter,
            value: Some(Num::Int(e.value)),
            id: Some(&e.id),
            data: None,
        })
        .unwrap();
    }
    b
}

impl Model {
    fn new_op(&mut self, rng: &mut Rng, durable: bool) -> Op {
        let level = |rng: &mut Rng| {
            if durable || rng.chance(70) {
                Some(Durability::Fsync)
            } else {
                None
            }
        };
        if rng.chance(8) {
            let stream = STREAMS[rng.below(STREAMS.len() as u64) as usize];
            return Op::Delete {
                stream,
                durability: level(rng),
            };
        }
        if rng.chance(15) && !self.stored.is_empty() {
            let (i, epochs) = &self.stored[rng.below(self.stored.len() as u64) as usize];
            if epochs.iter().all(|(s, e)| self.epoch.get(s) == Some(e)) {
                let Op::Write { events, .. } = &self.ops[*i].0 else {
                    unreachable!()
                };
                return Op::Write {
                    events: events.clone(),
                    durability: level(rng),
                    expected: None,
                };
            }
        }
        let most = if rng.chance(20) { 40 } else { 4 };
        let n = 1 + rng.below(most);
        let single = rng.chance(60);
        let first = STREAMS[rng.below(STREAMS.len() as u64) as usize];
        let mut events = Vec::new();
        for _ in 0..n {
            let pick = rng.below(STREAMS.len() as u64) as usize;
            let stream = if single { first } else { STREAMS[pick] };
            self.next_value += 1;
            events.push(Sent {
                stream,
                id: format!("v{}", self.next_value),
                value: self.next_value,
            });
        }
        let expected = (single && rng.chance(30)).then(|| {
            let known = self.last_seq.get(first).copied().unwrap_or(0);
            if rng.chance(70) {
                known
            } else {
                known + rng.below(3)
            }
        });
        Op::Write {
            events,
            durability: level(rng),
            expected,
        }
    }

    fn answered(&mut self, op: Op, answer: Answer) {
        let at = self.ops.len();
        match (&op, &answer) {
            (Op::Write { events, .. }, Answer::Wrote(out)) => {
                for (s, seq) in &out.last_seq {
                    let s = STREAMS.iter().find(|x| **x == s.as_str()).unwrap();
                    let e = self.last_seq.entry(s).or_insert(0);
                    *e = (*e).max(*seq);
                    if out.durability == Durability::Fsync {
                        let e = self.durable_seq.entry(s).or_insert(0);
                        *e = (*e).max(*seq);
                    }
                }
                let mut epochs: Vec<(&'static str, u64)> = events
                    .iter()
                    .map(|e| (e.stream, self.epoch.get(e.stream).copied().unwrap_or(0)))
                    .collect();
                epochs.dedup();
                self.stored.push((at, epochs));
            }
            (Op::Delete { stream, .. }, Answer::Deleted(out)) => {
                *self.epoch.entry(stream).or_insert(0) += 1;
                let e = self.last_seq.entry(stream).or_insert(0);
                *e = (*e).max(out.last_seq);
                if out.durability == Durability::Fsync {
                    let e = self.durable_seq.entry(stream).or_insert(0);
                    *e = (*e).max(out.last_seq);
                }
            }
            _ => {}
        }
        self.ops.push((op, answer));
    }
}

/// What one stream holds after recovery: `None` if it is deleted (or never was).
struct Recovered {
    info: Option<StreamInfo>,
    /// seq → (id, value)
    events: BTreeMap<u64, (String, i64)>,
}

/// Each stream's metadata and events, read consistently: retention (on in some cases) may
/// remove segments meanwhile, which ends a read with `Retained`; then read again.
fn recover(store: &Store) -> HashMap<&'static str, Recovered> {
    STREAMS
        .iter()
        .map(|s| {
            for _ in 0..100 {
                let info = store.stream(s);
                let Some(mut c) = store.read(s, all(1_000_000)) else {
                    return (
                        *s,
                        Recovered {
                            info,
                            events: BTreeMap::new(),
                        },
                    );
                };
                let mut events = BTreeMap::new();
                let done = loop {
                    match c.next_event() {
                        Ok(Some((seq, e))) => {
                            let Some(Num::Int(v)) = e.value else {
                                panic!("{e:?}")
                            };
                            events.insert(seq, (e.id.unwrap().to_string(), v));
                        }
                        Ok(None) => break true,
                        Err(ReadError::Retained { .. }) => break false,
                        Err(e) => panic!("reading {s}: {e}"),
                    }
                };
                if done && store.stream(s) == info {
                    return (*s, Recovered { info, events });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            panic!("{s}: no consistent read while retention runs");
        })
        .collect()
}

fn run_case(seed: u64) -> Result<(), String> {
    let mut rng = Rng(seed);
    let fs = SimFs::new();
    let mut cfg = sim_cfg(&fs);
    cfg.shards = Some(1 + rng.below(4) as u32);
    cfg.segment_bytes = 512 + rng.below(3000);
    let durable = rng.chance(60);
    if durable {
        cfg.fsync = FsyncMode::Always;
    } else {
        cfg.fsync = FsyncMode::Interval;
        cfg.fsync_interval = Duration::from_millis(1 + rng.below(5));
    }
    // Retention in some cases: it removes whole old segments, so a stream's first seq moves
    // up (the checks treat everything below it as gone, as for a tombstone), and recovery
    // must accept streams whose earlier segments are gone.
    match rng.below(10) {
        0 | 1 => cfg.retention.max_bytes = Some(2000 + rng.below(20_000)),
        2 => cfg.retention.max_age = Some(Duration::from_millis(rng.below(20))),
        _ => {}
    }
    if std::env::var("VX_POWER_SEED").is_ok() {
        eprintln!(
            "segment_bytes {} shards {:?} fsync {:?} retention {:?}",
            cfg.segment_bytes, cfg.shards, cfg.fsync, cfg.retention
        );
    }
    let (store, _) = Store::open(cfg.clone()).map_err(|e| format!("first open: {e}"))?;
    fs.freeze_after(1 + rng.below(400));
    let mut model = Model {
        ops: Vec::new(),
        last_seq: HashMap::new(),
        durable_seq: HashMap::new(),
        epoch: HashMap::new(),
        stored: Vec::new(),
        next_value: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let store = std::sync::Arc::new(store);
    for _round in 0..(5 + rng.below(25)) {
        let ops: Vec<Op> = (0..1 + rng.below(6))
            .map(|_| model.new_op(&mut rng, durable))
            .collect();
        let answers = rt.block_on(async {
            let tasks: Vec<_> = ops
                .iter()
                .cloned()
                .map(|op| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        match op {
                            Op::Write {
                                events,
                                durability,
                                expected,
                                ..
                            } => match store
                                .write(WriteRequest {
                                    batch: batch(&events),
                                    durability,
                                    expected_last_seq: expected,
                                    guard: None,
                                    origin: None,
                                    append_ms: None,
                                })
                                .await
                            {
                                Ok(out) => Answer::Wrote(out),
                                Err(e) => Answer::Refused(e),
                            },
                            Op::Delete { stream, durability } => {
                                match store.delete(stream, durability, None).await {
                                    Ok(out) => Answer::Deleted(out),
                                    Err(e) => Answer::Refused(e),
                                }
                            }
                        }
                    })
                })
                .collect();
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.unwrap());
            }
            answers
        });
        for (op, answer) in ops.into_iter().zip(answers) {
            model.answered(op, answer);
        }
        if fs.is_frozen() {
            break;
        }
    }
    fs.freeze();
    store.shutdown();
    drop(store);
    fs.power_cut(&mut |n| rng.below(n));

    let (store, report) = Store::open(cfg.clone()).map_err(|e| format!("reopen: {e}"))?;
    let got = recover(&store);
    check(&model, &got).map_err(|e| format!("{e}\nrecovery: {report:?}"))?;
    // Dedup survives: a retry of any stored request of a live stream is all duplicates.
    for (i, _) in model.stored.iter().rev().take(3) {
        let (Op::Write { events, .. }, Answer::Wrote(out)) = &model.ops[*i] else {
            continue;
        };
        if out.durability != Durability::Fsync || out.accepted == 0 {
            continue;
        }
        let live = events
            .iter()
            .all(|e| got[e.stream].events.values().any(|(id, _)| *id == e.id));
        if !live {
            continue;
        }
        let again = block(store.write(WriteRequest {
            batch: batch(events),
            durability: None,
            expected_last_seq: None,
            guard: None,
            origin: None,
            append_ms: None,
        }))
        .map_err(|e| format!("retry after recovery: {e}"))?;
        if again.accepted != 0 {
            let infos: Vec<_> = STREAMS.iter().map(|s| (s, &got[s].info)).collect();
            let hist: Vec<String> = model
                .ops
                .iter()
                .enumerate()
                .filter(|(_, (op, _))| match op {
                    Op::Delete { .. } => true,
                    Op::Write { events: evs, .. } => {
                        evs.iter().any(|e| events.iter().any(|x| x.id == e.id))
                    }
                })
                .map(|(j, x)| format!("{j}: {x:?}"))
                .collect();
            return Err(format!(
                "op {i}: a retry after recovery was stored again: {again:?}\nstreams: {infos:?}\n{}\nrecovery: {report:?}",
                hist.join("\n")
            ));
        }
    }
    // Seq continues after everything acknowledged, deleted streams included.
    for s in STREAMS {
        let floor = model.durable_seq.get(s).copied().unwrap_or(0);
        let out = block(store.write(WriteRequest {
            batch: batch(&[Sent {
                stream: s,
                id: format!("after-{s}"),
                value: 0,
            }]),
            durability: None,
            expected_last_seq: None,
            guard: None,
            origin: None,
            append_ms: None,
        }))
        .map_err(|e| format!("write after recovery: {e}"))?;
        let seq = out.last_seq[0].1;
        let expect = got[s].info.as_ref().map_or(0, |i| i.last_seq);
        if seq <= floor {
            return Err(format!(
                "{s}: new seq {seq} reuses acknowledged seq ≤ {floor}"
            ));
        }
        if got[s].info.is_some() && seq != expect + 1 {
            return Err(format!("{s}: new seq {seq} after last_seq {expect}"));
        }
    }
    store.shutdown();
    Ok(())
}

fn check(model: &Model, got: &HashMap<&'static str, Recovered>) -> Result<(), String> {
    // Where each id is now.
    let mut at: HashMap<&str, Vec<(&'static str, u64, i64)>> = HashMap::new();
    for (s, r) in got {
        // No gap: first_seq..=last_seq all present, and counted.
        if let Some(info) = &r.info {
            let seqs: Vec<u64> = r.events.keys().copied().collect();
            let want: Vec<u64> = (info.first_seq..=info.last_seq).collect();
            if seqs != want || info.events != seqs.len() as u64 {
                return Err(format!("{s}: seqs {seqs:?} but metadata {info:?}"));
            }
        } else if !r.events.is_empty() {
            return Err(format!(
                "{s}: not listed but reads {} events",
                r.events.len()
            ));
        }
        for (seq, (id, v)) in &r.events {
            at.entry(id.as_str()).or_default().push((s, *seq, *v));
        }
    }
    for (id, places) in &at {
        if places.len() > 1 {
            return Err(format!("{id} is stored {} times: {places:?}", places.len()));
        }
    }
    // Gone below this seq: a surviving tombstone, or retention.
    let gone_below = |s: &str| got[s].info.as_ref().map_or(u64::MAX, |i| i.first_seq);
    for (i, (op, answer)) in model.ops.iter().enumerate() {
        match (op, answer) {
            (Op::Write { events, .. }, answer) => {
                let here = |e: &Sent| {
                    at.get(e.id.as_str())
                        .map(|p| p[0])
                        .filter(|p| p.0 == e.stream && p.2 == e.value)
                };
                // Acknowledged at fsync: every event there, at the seqs the answer gave, unless
                // a tombstone that survived covers them (a request is one record: a tombstone
                // covers all of a stream's events of it or none).
                if let Answer::Wrote(out) = answer
                    && out.durability == Durability::Fsync
                {
                    for (s, last) in &out.last_seq {
                        if *last < gone_below(s) {
                            continue;
                        }
                        let mine: Vec<Option<u64>> = events
                            .iter()
                            .filter(|e| e.stream == s.as_str())
                            .map(|e| here(e).map(|p| p.1))
                            .collect();
                        if mine.contains(&None) {
                            return Err(format!(
                                "op {i}: acknowledged at fsync ({out:?}) but events of {s} are missing: {mine:?}"
                            ));
                        }
                        let n = mine.len() as u64;
                        let told: Vec<Option<u64>> = ((last + 1 - n)..=*last).map(Some).collect();
                        if out.duplicates == 0 && mine != told {
                            return Err(format!(
                                "op {i}: {s} told seqs up to {last} but they are at {mine:?}"
                            ));
                        }
                    }
                }
                // No request partly there: of the streams no surviving tombstone touched, its
                // events are all present or all absent.
                let present: Vec<bool> = events
                    .iter()
                    .filter(|e| gone_below(e.stream) == 1)
                    .map(|e| here(e).is_some())
                    .collect();
                if present.contains(&true) && present.contains(&false) {
                    return Err(format!("op {i}: partly stored: {present:?} ({answer:?})"));
                }
            }
            (Op::Delete { stream, .. }, Answer::Deleted(out))
                if out.durability == Durability::Fsync && gone_below(stream) <= out.last_seq =>
            {
                return Err(format!(
                    "op {i}: delete of {stream} up to {} acknowledged at fsync, but {:?} survives",
                    out.last_seq, got[stream].info
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn acknowledged_requests_survive_power_loss() {
    if let Ok(seed) = std::env::var("VX_POWER_SEED") {
        let seed: u64 = seed.parse().unwrap();
        if let Err(e) = run_case(seed) {
            panic!("seed {seed}: {e}");
        }
        return;
    }
    let cases: u64 = std::env::var("VX_POWER_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    for seed in 0..cases {
        if let Err(e) = run_case(seed) {
            panic!("seed {seed} (VX_POWER_SEED={seed} to replay): {e}");
        }
    }
}
