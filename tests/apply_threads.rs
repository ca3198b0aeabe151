//! The feature tables on several apply threads (`features.apply_threads`, docs/FEATURES.md
//! "Apply threads"), against the real binary: concurrent writers over many entities of every
//! shard read back exact counters, windows and small `distinct` counts right after each
//! acknowledgement (read-your-writes), concurrent readers never see a request half applied
//! to an entity or a count go back, and after `kill -9` under load a restart on another
//! thread count holds every acknowledged event once, and retries make the counts exact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const DECLS: &str = "features:
  declare:
    - {name: hits_1h, from: hit, agg: count, window: 1h}
    - {name: val_1h, from: hit, agg: sum, window: 1h}
    - {name: streams_1h, from: hit, agg: distinct, of: stream, window: 1h}
    - {name: vals, from: hit, agg: distinct}
";
const WRITERS: usize = 4;
const ENTITIES: usize = 24;
/// Each batch has every entity of its writer twice.
const PER_ENTITY: usize = 2;

fn config(dir: &std::path::Path, threads: usize) -> ServerConfig {
    ServerConfig::new(dir.join("data"))
        .args(["--shards", "16", "--apply-threads", &threads.to_string()])
        .with_config(dir, DECLS)
}

fn entity(w: usize, i: usize) -> String {
    format!("w{w}-e{i}")
}

/// The `j`-th event of an entity (its events are numbered in the order its writer sent them):
/// stream `s{j % 5}`, value `j % 10`, so its first `n` events hold `min(n, 5)` streams and
/// `min(n, 10)` values: the distinct counts stay within the exact range.
fn line(w: usize, i: usize, j: u64, ts: i64) -> String {
    format!(
        r#"{{"stream":"s{}","entity":"{}","type":"hit","kind":"counter","value":{},"ts":{ts},"id":"w{w}-e{i}-{j}"}}"#,
        j % 5,
        entity(w, i),
        j % 10,
    )
}

/// What an entity's features must be after its first `n` events.
fn expected(n: u64) -> Value {
    let sum: u64 = (0..n).map(|j| j % 10).sum();
    json!({
        "events": n,
        "hit": sum,
        "hits_1h": n,
        "val_1h": sum,
        "streams_1h": n.min(5),
        "vals": n.min(10),
    })
}

/// An entity's features as a batch query answered them, without `last_ts` (the clock's).
fn features_of(result: &Value) -> Value {
    let mut f = result["features"].clone();
    if let Some(o) = f.as_object_mut() {
        o.remove("last_ts");
    }
    f
}

/// The features of `entities`, as `{entity: features}` (a batch query).
async fn read(api: &Api, entities: &[String]) -> HashMap<String, Value> {
    let r = api.query_features(&json!({ "entities": entities })).await;
    assert_eq!(r.status, 200, "{r}");
    let v = r.json();
    let mut out = HashMap::new();
    for x in v["results"].as_array().unwrap() {
        if x.is_null() {
            continue;
        }
        out.insert(x["entity"].as_str().unwrap().to_string(), features_of(x));
    }
    out
}

/// One writer's state: per entity, events acknowledged, and the lines of its batch in flight
/// when the server died.
#[derive(Default)]
struct Writer {
    acked: Vec<u64>,
    unknown: Option<Vec<String>>,
}

/// Send batches until `stop` or the server dies; after each acknowledgement, read every entity
/// of the batch and check it exactly.
async fn write(api: Api, w: usize, stop: Arc<AtomicBool>, acks: Arc<AtomicU64>) -> Writer {
    let names: Vec<String> = (0..ENTITIES).map(|i| entity(w, i)).collect();
    let mut st = Writer {
        acked: vec![0; ENTITIES],
        unknown: None,
    };
    let ts = now_ms();
    while !stop.load(Ordering::Relaxed) {
        let lines: Vec<String> = (0..ENTITIES * PER_ENTITY)
            .map(|k| {
                let i = k % ENTITIES;
                line(w, i, st.acked[i] + (k / ENTITIES) as u64, ts)
            })
            .collect();
        match api.try_post_lines(&lines).await {
            Ok(r) if r.status == 200 => {
                assert_accepted(&r, lines.len() as u64);
                for n in &mut st.acked {
                    *n += PER_ENTITY as u64;
                }
                acks.fetch_add(1, Ordering::Relaxed);
                let got = match api.try_query_features(&json!({ "entities": names })).await {
                    Ok(r) if r.status == 200 => r.json(),
                    Ok(r) => panic!("writer {w}: {r}"),
                    Err(_) => return st,
                };
                for (i, x) in got["results"].as_array().unwrap().iter().enumerate() {
                    let f = features_of(x);
                    assert_eq!(f, expected(st.acked[i]), "writer {w}, {}", names[i]);
                }
            }
            Ok(r) => panic!("writer {w}: {r}"),
            Err(_) => {
                st.unknown = Some(lines);
                return st;
            }
        }
    }
    st
}

/// Read random writers' entities until `stop`: each read is some prefix of the entity's
/// events (never half a request: a request's events of one entity are applied under one lock
/// of its shard), and never fewer events than a read before it.
async fn watch(api: Api, r: usize, stop: Arc<AtomicBool>) {
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut k = r;
    while !stop.load(Ordering::Relaxed) {
        let w = k % WRITERS;
        k += 1;
        let names: Vec<String> = (0..ENTITIES).map(|i| entity(w, i)).collect();
        let Ok(resp) = api.try_query_features(&json!({ "entities": names })).await else {
            return;
        };
        if resp.status != 200 {
            return;
        }
        for x in resp.json()["results"].as_array().unwrap() {
            if x.is_null() {
                continue;
            }
            let name = x["entity"].as_str().unwrap().to_string();
            let f = features_of(x);
            let n = f["events"].as_u64().unwrap();
            assert_eq!(n % PER_ENTITY as u64, 0, "{name}: half a request: {f}");
            assert_eq!(f, expected(n), "{name}");
            let before = seen.insert(name.clone(), n).unwrap_or(0);
            assert!(n >= before, "{name}: {n} events after {before}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_readers_see_exact_features_also_after_kill9() {
    let tmp = tempfile::tempdir().unwrap();
    let server = config(tmp.path(), 4).start();
    let addr = server.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            tokio::spawn(write(
                Api::tcp(addr),
                w,
                Arc::clone(&stop),
                Arc::clone(&acks),
            ))
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|r| tokio::spawn(watch(Api::tcp(addr), r, Arc::clone(&stop))))
        .collect();
    // Progress, not time: kill once enough has been acknowledged.
    let deadline = Instant::now() + Duration::from_secs(90);
    while acks.load(Ordering::Relaxed) < 400 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(acks.load(Ordering::Relaxed) >= 400, "too slow to load");
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    let mut states = Vec::new();
    for t in writers {
        states.push(t.await.unwrap());
    }
    for t in readers {
        t.await.unwrap();
    }

    // Another thread count: the log applies the same way.
    let server = config(tmp.path(), 2).start();
    let api = &server.api;
    for (w, st) in states.iter().enumerate() {
        let names: Vec<String> = (0..ENTITIES).map(|i| entity(w, i)).collect();
        let got = read(api, &names).await;
        for (i, name) in names.iter().enumerate() {
            let f = &got[name];
            let n = f["events"].as_u64().unwrap();
            let maybe = if st.unknown.is_some() { PER_ENTITY } else { 0 } as u64;
            assert!(
                (st.acked[i]..=st.acked[i] + maybe).contains(&n),
                "{name}: acked {}, found {n}",
                st.acked[i]
            );
            assert_eq!(f, &expected(n), "{name}");
        }
        // The batch in flight, retried with the same ids: stored once either way.
        if let Some(lines) = &st.unknown {
            let r = api.post_lines(lines).await;
            assert_ok(&r);
        }
        let got = read(api, &names).await;
        let extra = if st.unknown.is_some() { PER_ENTITY } else { 0 } as u64;
        for (i, name) in names.iter().enumerate() {
            assert_eq!(
                got[name],
                expected(st.acked[i] + extra),
                "{name} after the retry"
            );
        }
    }
    let metrics = api.get("/metrics").await.text();
    assert!(
        metrics.lines().any(|l| l
            .strip_prefix("vx_feature_apply_threads ")
            .and_then(|v| v.parse::<f64>().ok())
            == Some(2.0)),
        "the thread count is reported"
    );
}
