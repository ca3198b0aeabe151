//! Crash safety under `--fsync always` (docs/API.md §3): producers post batches with unique ids while
//! the server is killed with SIGKILL mid-flight, several times. After each restart every
//! acknowledged event is present exactly once, `seq` is gapless, a request is all-or-nothing
//! across the crash, and retrying the unacknowledged batches stores each event exactly once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;

const CYCLES: usize = 4;
const PRODUCERS: usize = 6;
const EVENTS_PER_BATCH: usize = 10;
/// Acknowledged batches to wait for before each kill (progress, not time).
const ACKS_BEFORE_KILL: u64 = 150;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// 200 on the first attempt.
    Acked,
    /// The connection failed (the server died): stored or not, but never twice.
    Unknown,
    /// 200 when retried after a restart.
    Retried,
}

struct Batch {
    producer: usize,
    events: Vec<Event>,
    outcome: Outcome,
}

fn streams_of(p: usize) -> [String; 2] {
    [format!("crash/p{p}/a"), format!("crash/p{p}/b")]
}

fn make_batch(p: usize, cycle: usize, k: usize) -> Vec<Event> {
    let streams = streams_of(p);
    (0..EVENTS_PER_BATCH)
        .map(|i| {
            let mut e = Event::simple(
                &streams[i % 2],
                "t",
                k as i64,
                Some(format!("c{cycle}-p{p}-b{k:05}-e{i:02}")),
            );
            e.data = Some((format!("{{\"k\": {k}}}"), format!("{{\"k\":{k}}}")));
            e
        })
        .collect()
}

/// Post sequentially until the server dies. Returns (events, outcome) per batch in send order.
async fn producer(
    api: Api,
    p: usize,
    cycle: usize,
    killing: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
) -> Vec<(Vec<Event>, Outcome)> {
    let mut out = Vec::new();
    for k in 0.. {
        let events = make_batch(p, cycle, k);
        let body = if k % 3 == 0 {
            json_array(&events)
        } else {
            ndjson(&events)
        };
        let ct = if k % 3 == 0 { JSON } else { NDJSON };
        let r = api
            .try_send(
                reqwest::Method::POST,
                "/v1/events",
                &[("content-type", ct)],
                Some(body.into()),
            )
            .await;
        match r {
            Ok(r) if r.status == 200 => {
                let v = assert_accepted(&r, EVENTS_PER_BATCH as u64);
                assert_eq!(v["durability"], "fsync", "{r}");
                out.push((events, Outcome::Acked));
                acks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(r) => panic!("producer {p}: unexpected answer {r}"),
            Err(e) => {
                assert!(
                    killing.load(Ordering::SeqCst),
                    "producer {p}: request failed while the server was up: {e:?}"
                );
                out.push((events, Outcome::Unknown));
                return out;
            }
        }
    }
    unreachable!()
}

/// Check the stored state against every batch ever sent. `settled`: every batch has been
/// acknowledged (first try or retry), so everything must be present.
async fn verify(api: &Api, batches: &[Batch], settled: bool) {
    // id → (batch index, outcome)
    let mut owner: HashMap<&str, usize> = HashMap::new();
    for (b, batch) in batches.iter().enumerate() {
        for e in &batch.events {
            owner.insert(e.id.as_deref().unwrap(), b);
        }
    }
    let mut present: HashSet<String> = HashSet::new();
    let mut stored_per_batch: BTreeMap<usize, usize> = BTreeMap::new();
    for p in 0..PRODUCERS {
        for stream in streams_of(p) {
            let lines = api.replay_all(&stream).await;
            let mut last_acked_batch = None;
            for (i, l) in lines.iter().enumerate() {
                assert_eq!(l.seq(), i as u64 + 1, "{stream}: seq gap at position {i}");
                let id = l.id().expect("id").to_string();
                let b = *owner
                    .get(id.as_str())
                    .unwrap_or_else(|| panic!("{stream}: {id} was never sent"));
                let batch = &batches[b];
                let ev = batch
                    .events
                    .iter()
                    .find(|e| e.id.as_deref() == Some(&id))
                    .unwrap();
                ev.check(&l.value, Some(&l.raw), l.seq()).unwrap();
                assert!(present.insert(id.clone()), "{stream}: {id} stored twice");
                *stored_per_batch.entry(b).or_default() += 1;
                // Batches acknowledged on the first try are stored in send order.
                if batch.outcome == Outcome::Acked {
                    if let Some(prev) = last_acked_batch {
                        assert!(prev <= b, "{stream}: batch {b} stored after batch {prev}");
                    }
                    last_acked_batch = Some(b);
                }
            }
        }
    }
    for (b, batch) in batches.iter().enumerate() {
        let n = stored_per_batch.get(&b).copied().unwrap_or(0);
        match batch.outcome {
            Outcome::Acked | Outcome::Retried => assert_eq!(
                n, EVENTS_PER_BATCH,
                "acknowledged batch {b} of producer {} has {n} of {EVENTS_PER_BATCH} events",
                batch.producer
            ),
            Outcome::Unknown => {
                assert!(!settled);
                assert!(
                    n == 0 || n == EVENTS_PER_BATCH,
                    "batch {b} is torn across the crash: {n} of {EVENTS_PER_BATCH} stored"
                );
            }
        }
    }
}

/// Post every batch whose fate is unknown again; it must dedup to exactly once.
async fn retry_unknown(api: &Api, batches: &mut [Batch]) {
    let (mut stored, mut lost) = (0, 0);
    for batch in batches.iter_mut().filter(|b| b.outcome == Outcome::Unknown) {
        let r = api.post_ndjson(&batch.events).await;
        let v = assert_ok(&r);
        let (acc, dup) = (
            v["accepted"].as_u64().unwrap(),
            v["duplicates"].as_u64().unwrap(),
        );
        let n = EVENTS_PER_BATCH as u64;
        assert!(
            (acc, dup) == (n, 0) || (acc, dup) == (0, n),
            "a retried batch is either wholly new or wholly duplicate: {r}"
        );
        if dup == n {
            stored += 1;
        } else {
            lost += 1;
        }
        batch.outcome = Outcome::Retried;
    }
    eprintln!("retried in-flight batches: {stored} had been stored, {lost} had not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_mid_flight_loses_no_acknowledged_event() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data")).args(["--fsync", "always"]);
    let mut batches: Vec<Batch> = Vec::new();

    for cycle in 0..CYCLES {
        let server = cfg.start();
        let api = server.api.clone();
        if cycle > 0 {
            verify(&api, &batches, false).await;
            retry_unknown(&api, &mut batches).await;
            verify(&api, &batches, true).await;
        }
        let killing = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(AtomicU64::new(0));
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                tokio::spawn(producer(
                    api.clone(),
                    p,
                    cycle,
                    killing.clone(),
                    acks.clone(),
                ))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        while acks.load(Ordering::Relaxed) < ACKS_BEFORE_KILL {
            assert!(Instant::now() < deadline, "producers made no progress");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        killing.store(true, Ordering::SeqCst);
        server.kill9();
        let mut unknown = 0;
        for (p, h) in handles.into_iter().enumerate() {
            for (events, outcome) in h.await.expect("producer task") {
                unknown += usize::from(outcome == Outcome::Unknown);
                batches.push(Batch {
                    producer: p,
                    events,
                    outcome,
                });
            }
        }
        eprintln!(
            "cycle {cycle}: {} batches so far, {unknown} in flight at the kill",
            batches.len()
        );
    }

    // Recover once more: verify, retry what was in flight, and everything is there once.
    let server = cfg.start();
    verify(&server.api, &batches, false).await;
    retry_unknown(&server.api, &mut batches).await;
    verify(&server.api, &batches, true).await;
    server.stop_clean();
    let server = cfg.start();
    verify(&server.api, &batches, true).await;
    // Retrying once more changes nothing: all duplicates.
    for batch in batches.iter().step_by(7) {
        let v = assert_ok(&server.api.post_ndjson(&batch.events).await);
        assert_eq!(v["duplicates"], EVENTS_PER_BATCH as u64, "{v}");
    }
    verify(&server.api, &batches, true).await;
    server.stop_clean();
}
