//! Backpressure (docs/API.md §3, §4): with a tiny per-shard queue, a flood of concurrent producers
//! gets 429 `backpressure` with `Retry-After` and `X-Vx-Retry-After-Ms`, never anything but
//! 200 or 429; every acknowledged event is stored exactly once and no refused one at all;
//! reads, health and metrics keep answering; the service recovers when the flood stops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;

/// Events per shard; the high-water mark is 0.9 of it, i.e. 90 events.
const CAPACITY: u64 = 100;
const STREAMS: usize = 8;

#[derive(Default)]
struct Tally {
    acked: Vec<(String, String)>, // (stream, id)
    ok: u64,
    refused: u64,
}

/// One producer: `requests` sequential posts of `events` events over two streams, as fast as
/// it can (no back-off: the point is to overload).
async fn producer(api: Api, round: usize, task: usize, requests: usize, events: usize) -> Tally {
    let mut t = Tally::default();
    for j in 0..requests {
        let streams = [
            format!("bp/{}", task % STREAMS),
            format!("bp/{}", (task + 1) % STREAMS),
        ];
        let evs: Vec<Event> = (0..events)
            .map(|k| {
                let mut e = Event::simple(
                    &streams[k % 2],
                    "t",
                    j as i64,
                    Some(format!("r{round}-t{task}-j{j:04}-e{k:03}")),
                );
                e.data = Some(("{\"pad\": \"0123456789abcdef\"}".into(), String::new()));
                e
            })
            .collect();
        let r = if j % 2 == 0 {
            api.post_ndjson(&evs).await
        } else {
            api.post_json_array(&evs).await
        };
        match r.status {
            200 => {
                assert_accepted(&r, events as u64);
                t.ok += 1;
                t.acked
                    .extend(evs.into_iter().map(|e| (e.stream, e.id.unwrap())));
            }
            429 => {
                check_429(&r);
                t.refused += 1;
            }
            _ => panic!("only 200 or 429 under overload, got {r}"),
        }
    }
    t
}

fn check_429(r: &Resp) {
    assert_error(r, 429, "backpressure");
    let secs = r.header_u64("retry-after");
    let ms = r.header_u64("x-vx-retry-after-ms");
    assert!(secs >= 1, "Retry-After must be at least 1: {r}");
    assert!(ms >= 1, "X-Vx-Retry-After-Ms must be positive: {r}");
    assert_eq!(
        secs,
        ms.div_ceil(1000).max(1),
        "Retry-After is the ms rounded up: {r}"
    );
    let fill = check_queue_fill(r);
    assert!(
        fill >= 0.9,
        "a 429 reports the fill of the shard that is at its 0.9 mark: {r}"
    );
}

/// Keeps reading while the flood runs: health, readiness, metrics and replay must answer.
async fn reader(api: Api, done: Arc<AtomicBool>, reads: Arc<AtomicU64>) {
    while !done.load(Ordering::Relaxed) {
        for path in ["/healthz", "/readyz", "/metrics", "/v1/streams?limit=5"] {
            let r = api.get(path).await;
            assert_eq!(r.status, 200, "{path} during overload: {r}");
        }
        let (r, _) = api.replay("bp/0", "limit=10").await;
        assert!(
            r.status == 200 || r.status == 404,
            "replay during overload: {r}"
        );
        reads.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flood_is_refused_with_429_and_every_ack_is_stored_once() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_QUEUE_CAPACITY", CAPACITY.to_string())
        .args(["--fsync", "always", "--shards", "2"])
        .start();
    let api = server.api.clone();

    let mut acked: Vec<(String, String)> = Vec::new();
    let mut refused = 0;
    // A machine fast enough to drain the first flood gets a heavier one.
    for round in 0..3 {
        let tasks = 16 << round;
        let events = 20 << round;
        let done = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let rd = tokio::spawn(reader(api.clone(), done.clone(), reads.clone()));
        let handles: Vec<_> = (0..tasks)
            .map(|task| tokio::spawn(producer(api.clone(), round, task, 200, events)))
            .collect();
        let mut ok = 0;
        for h in handles {
            let t = h.await.expect("producer task");
            acked.extend(t.acked);
            refused += t.refused;
            ok += t.ok;
        }
        done.store(true, Ordering::Relaxed);
        rd.await.expect("reader task");
        eprintln!(
            "round {round}: {tasks} producers x 200 requests of {events} events: \
             {ok} accepted, {refused} refused so far, {} read rounds",
            reads.load(Ordering::Relaxed)
        );
        assert!(ok > 0, "some requests must get through an overload");
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "no 429 even under the heaviest flood");

    // Recovery: with the flood over, a normal request is admitted — even one larger than
    // the whole queue, since admission only needs the shard below its mark.
    let big: Vec<Event> = (0..(3 * CAPACITY as usize))
        .map(|k| Event::simple("bp/after", "t", k as i64, Some(format!("after-{k}"))))
        .collect();
    let mut admitted = false;
    for _ in 0..100 {
        let r = api.post_ndjson(&big).await;
        match r.status {
            200 => {
                assert_accepted(&r, big.len() as u64);
                admitted = true;
                break;
            }
            429 => {
                // Reservations are released as acks go out; allow the last ones to land.
                let ms = r.header_u64("x-vx-retry-after-ms").min(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            _ => panic!("{r}"),
        }
    }
    assert!(admitted, "the service did not recover after the flood");

    // Exactly the acknowledged events are stored, each once, gapless, in each producer's order.
    let mut want: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    for (s, id) in &acked {
        assert!(want.entry(s.clone()).or_default().insert(id.clone()));
    }
    for s in 0..STREAMS {
        let stream = format!("bp/{s}");
        let lines = api.replay_all(&stream).await;
        let mut seen = HashSet::new();
        let mut last_of_task: BTreeMap<String, String> = BTreeMap::new();
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(l.seq(), i as u64 + 1, "{stream}: seq gap at {i}");
            let id = l.id().expect("every flood event has an id").to_string();
            assert!(seen.insert(id.clone()), "{stream}: {id} stored twice");
            // ids are r{round}-t{task}-j{j}-e{k}: per producer, increasing in send order.
            let (task, rest) = id.rsplit_once("-j").unwrap();
            if let Some(prev) = last_of_task.insert(task.to_string(), rest.to_string()) {
                assert!(
                    prev.as_str() < rest,
                    "{stream}: {task} out of order: {prev} then {rest}"
                );
            }
        }
        let empty = HashSet::new();
        let w = want.get(&stream).unwrap_or(&empty);
        let missing: Vec<_> = w.difference(&seen).take(5).collect();
        let extra: Vec<_> = seen.difference(w).take(5).collect();
        assert!(
            missing.is_empty(),
            "{stream}: acknowledged but not stored: {missing:?}"
        );
        assert!(
            extra.is_empty(),
            "{stream}: stored but refused with 429: {extra:?}"
        );
    }
    assert_eq!(api.replay_all("bp/after").await.len(), big.len());
    server.stop_clean();
}
