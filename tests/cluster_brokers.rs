//! A broker's loss (docs/CLUSTER.md, "Failure modes"): cluster mode on a three-broker Kafka
//! cluster (replication factor 3, `min.insync.replicas` 2) loses nothing it acknowledged when
//! a broker is killed under load, and takes writes again once the partitions' leaders moved.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::cluster::*;
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vx_cluster::Names;
use vx_cluster::position::Position;
use vx_cluster::testing::Brokers;

/// The nodes' `--kafka-topic`: the streams' partitions, whose leaders are killed.
const TOPIC: &str = "vx-brokers";
/// Concurrent producers, each a task writing through the nodes in turn.
const PRODUCERS: usize = 4;
/// Streams the producers write to (spread over the 8 partitions).
const STREAMS: usize = 12;
/// A producer's pause between two requests: steady load that leaves the two cores to the
/// brokers and nodes (their heartbeats are what is under test, not their throughput).
const PACE: Duration = Duration::from_millis(20);
/// A producer's pause before sending a refused request again.
const BACKOFF: Duration = Duration::from_millis(250);

/// What the producers saw.
#[derive(Default)]
struct Seen {
    /// Ids of acknowledged requests (answered 200), per stream.
    acked: BTreeMap<String, BTreeSet<String>>,
    /// The positions of every acknowledged request, merged: a read with it as its minimum
    /// position sees every acknowledged event.
    position: Position,
    /// When each acknowledged request was sent.
    acked_at: Vec<Instant>,
    /// When each refused request (429 or 503, with `Retry-After`) was sent, its status and
    /// (the start of) its body.
    refused: Vec<(Instant, u16, String)>,
    /// Answers that are neither: each fails the test.
    wrong: Vec<String>,
}

/// Producer `p`'s request `n`: `(stream, id)` of its events. Even requests are 5 events of
/// one stream (one record: the idempotent producer), odd ones 3 events of each of two
/// streams (two partitions or one: a transaction), so that both write paths lose a leader.
fn request(p: usize, n: usize) -> Vec<(String, String)> {
    let first = (p * 5 + n) % STREAMS;
    let parts: Vec<(usize, usize)> = if n.is_multiple_of(2) {
        vec![(first, 5)]
    } else {
        vec![(first, 3), ((first + 5) % STREAMS, 3)]
    };
    let mut out = Vec::new();
    for (s, count) in parts {
        for _ in 0..count {
            let k = out.len();
            out.push((format!("b{s}"), format!("p{p}-{n}-{k}")));
        }
    }
    out
}

fn ndjson_of(events: &[(String, String)]) -> String {
    events
        .iter()
        .enumerate()
        .map(|(k, (stream, id))| {
            format!(
                "{{\"stream\":\"{stream}\",\"type\":\"t\",\"id\":\"{id}\",\"entity\":\"e{}\",\"kind\":\"counter\",\"value\":1}}\n",
                k % 3
            )
        })
        .collect()
}

/// Write producer `p`'s requests through the nodes in turn until `stop`; a refused request
/// is sent again, with the same ids, to the next node (a retry of a request that did get
/// in is a duplicate, dropped by its owner). An event counts as acknowledged only once a
/// request carrying it was answered 200.
async fn produce(p: usize, apis: Vec<Api>, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let events = request(p, n);
        let body = ndjson_of(&events);
        let mut attempt = 0;
        while !stop.load(Ordering::Relaxed) {
            let api = &apis[(p + n + attempt) % apis.len()];
            let sent = Instant::now();
            let r = try_post(api, body.clone()).await;
            let acknowledged = {
                let mut seen = seen.lock().unwrap();
                match r {
                    Ok(r) if r.status == 200 => {
                        for (stream, id) in &events {
                            seen.acked
                                .entry(stream.clone())
                                .or_default()
                                .insert(id.clone());
                        }
                        let position = Position::parse(r.header("x-vx-position").unwrap_or(""))
                            .unwrap_or_else(|e| panic!("{e}: {r}"));
                        for (topic, partition, offset) in position.iter() {
                            seen.position.add(topic, partition, offset);
                        }
                        seen.acked_at.push(sent);
                        true
                    }
                    Ok(r)
                        if matches!(r.status, 429 | 503)
                            && r.header("retry-after").is_some_and(|v| !v.is_empty()) =>
                    {
                        let body: String = r.text().chars().take(160).collect();
                        seen.refused.push((sent, r.status, body));
                        false
                    }
                    Ok(r) => {
                        seen.wrong
                            .push(format!("p{p} request {n} via {}: {r}", api.base));
                        return;
                    }
                    Err(e) => {
                        seen.wrong
                            .push(format!("p{p} request {n} via {}: no answer: {e}", api.base));
                        return;
                    }
                }
            };
            if acknowledged {
                break;
            }
            attempt += 1;
            tokio::time::sleep(BACKOFF).await;
        }
        n += 1;
        tokio::time::sleep(PACE).await;
    }
}

/// Keep the load on for 10 s after a kill, and longer (60 s at most) until a request sent
/// after it was acknowledged: requests in flight at the kill may wait for Kafka up to their
/// bound, and the test asks whether writes go on, not how fast on two busy cores.
async fn load_after(seen: &Mutex<Seen>, killed: Instant) {
    tokio::time::sleep(Duration::from_secs(10)).await;
    while killed.elapsed() < Duration::from_secs(60)
        && !seen.lock().unwrap().acked_at.iter().any(|&t| t >= killed)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kill -9` of a broker under load from several producers, then of the broker leading most
/// of the topic's partitions: every acknowledged event is replayed exactly once by every
/// node, and writes go on (refused with 429 or 503 and `Retry-After` at most, while leaders
/// move). Afterwards each partition has one owner again: a node the group dropped while it
/// could not reach the coordinator knows it lost its partitions.
///
/// The first broker killed is restarted, and back in sync on every partition, before the
/// second is killed: with replication factor 3 and `min.insync.replicas` 2, two brokers
/// lost at once leave one replica, too few for any write with `acks=all` — Kafka's own
/// refusal, not what is tested here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_brokers_loss_loses_nothing_acknowledged() {
    let began = Instant::now();
    let mut brokers = Brokers::start(3);
    println!("brokers up after {:?}", began.elapsed());
    let nodes = start_nodes(&brokers.bootstrap(), TOPIC, 3);
    for n in &nodes {
        wait_ready(api(n)).await;
    }
    println!("nodes ready after {:?}", began.elapsed());
    let group = Names::new(TOPIC).group;
    let apis: Vec<Api> = nodes.iter().map(|n| api(n).clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let loaded = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| tokio::spawn(produce(p, apis.clone(), stop.clone(), seen.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A broker that leads some partitions, but not most of them.
    let leaders = brokers.leaders(TOPIC);
    let busiest = brokers.leader_of_most(TOPIC);
    let leads = |id: i32| leaders.iter().filter(|&&(_, l)| l == id).count();
    let first = brokers
        .ids()
        .filter(|&id| id != busiest)
        .max_by_key(|&id| leads(id))
        .unwrap();
    println!(
        "leaders {leaders:?}, group coordinator {}: killing broker {first}",
        brokers.coordinator(&group)
    );
    let first_killed = Instant::now();
    brokers.kill9(first);
    load_after(&seen, first_killed).await;

    let restarted = tokio::task::block_in_place(|| {
        brokers.restart(first);
        brokers.wait_in_sync(Duration::from_secs(90));
        Instant::now()
    });
    println!(
        "broker {first} restarted and in sync {:?} after its kill",
        restarted - first_killed
    );
    let leaders = brokers.leaders(TOPIC);
    let second = brokers.leader_of_most(TOPIC);
    println!(
        "leaders {leaders:?}, group coordinator {}: killing broker {second}",
        brokers.coordinator(&group)
    );
    let second_killed = Instant::now();
    brokers.kill9(second);
    load_after(&seen, second_killed).await;
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.unwrap();
    }
    let stopped = Instant::now();
    let seen = Arc::try_unwrap(seen)
        .unwrap_or_else(|_| panic!("the producers ended"))
        .into_inner()
        .unwrap();

    // Every answer was a 200, or a 429 or 503 with Retry-After.
    assert!(seen.wrong.is_empty(), "wrong answers: {:#?}", seen.wrong);
    let phases = [
        ("before the first kill".to_string(), loaded, first_killed),
        (format!("broker {first} dead"), first_killed, restarted),
        ("all three up".to_string(), restarted, second_killed),
        (format!("broker {second} dead"), second_killed, stopped),
    ];
    for (what, from, to) in phases {
        let ok = seen
            .acked_at
            .iter()
            .filter(|&&t| t >= from && t < to)
            .count();
        let refused: Vec<&(Instant, u16, String)> = seen
            .refused
            .iter()
            .filter(|(t, _, _)| *t >= from && *t < to)
            .collect();
        println!(
            "{what} ({:?}): {ok} requests acknowledged, {} refused, first: {:?}",
            to - from,
            refused.len(),
            refused
                .iter()
                .take(2)
                .map(|(_, status, body)| format!("{status} {body}"))
                .collect::<Vec<_>>()
        );
    }
    // Writes went on after each kill: requests sent after it were acknowledged.
    for (what, from, to) in [
        ("the first kill", first_killed, restarted),
        ("the second kill", second_killed, stopped),
    ] {
        let first_ack = seen
            .acked_at
            .iter()
            .filter(|&&t| t >= from && t < to)
            .min()
            .unwrap_or_else(|| panic!("no request sent after {what} was acknowledged"));
        println!(
            "after {what}: the first acknowledged request was sent {:?} later",
            *first_ack - from
        );
    }
    let mut times = seen.acked_at.clone();
    times.sort_unstable();
    let gap = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let acked: usize = seen.acked.values().map(BTreeSet::len).sum();
    println!(
        "{acked} events acknowledged; longest stretch without an acknowledged request: {gap:?}"
    );

    // Each partition has one owner again: a node that lost one knows it (or reads through
    // it would wait for, or serve, a copy no longer applied).
    one_owner_each(&apis).await;

    // Every node replays every acknowledged event of every stream exactly once (gapless
    // seqs: `replay_ids` checks them), once it has applied every acknowledged position.
    let position = seen.position.to_string();
    for (stream, want) in &seen.acked {
        for api in &apis {
            let (ids, r) = replay_ids(api, stream, &position).await;
            assert!(ids.len() < 10_000, "{stream}: more than one page to replay");
            let mut once = BTreeSet::new();
            for id in &ids {
                assert!(
                    once.insert(id.as_str()),
                    "{stream}: {id} replayed twice by {} (owner {:?})",
                    api.base,
                    r.header("x-vx-node")
                );
            }
            let lost: Vec<&String> = want
                .iter()
                .filter(|id| !once.contains(id.as_str()))
                .collect();
            assert!(
                lost.is_empty(),
                "{stream}: {} acknowledged events not replayed by {} (owner {:?}), of {}: {:?}",
                lost.len(),
                api.base,
                r.header("x-vx-node"),
                want.len(),
                &lost[..lost.len().min(20)]
            );
        }
    }
    println!("replayed from every node; {:?} in all", began.elapsed());
}
