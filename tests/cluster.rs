//! Cluster mode on Kafka (docs/CLUSTER.md) against a real Apache Kafka broker and real
//! `veltrix` processes: ingest on any node, replay from every node, a request across
//! partitions atomic, dedup and conditional writes decided by the owner with `applied`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use tempfile::TempDir;
use vx_cluster::testing::Broker;

const SHARDS: u32 = 8;

/// A node of a test cluster: its data dir and its server.
struct Node {
    server: Option<Server>,
    _dir: TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn node_config(broker: &Broker, topic: &str, id: &str, dir: &TempDir) -> ServerConfig {
    let port = free_port();
    ServerConfig::new(dir.path().join("data"))
        .listen(format!("127.0.0.1:{port}"))
        .args([
            "--cluster",
            "kafka",
            "--kafka-brokers",
            &broker.bootstrap(),
            "--kafka-topic",
            topic,
            "--node-id",
            id,
            "--advertise",
            &format!("http://127.0.0.1:{port}"),
            "--shards",
            &SHARDS.to_string(),
        ])
        .env("VX_CLUSTER_SESSION_TIMEOUT", "3s")
}

fn start_nodes(broker: &Broker, topic: &str, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let dir = tempfile::tempdir().unwrap();
            let cfg = node_config(broker, topic, &format!("n{i}"), &dir);
            let server = cfg.start();
            Node {
                server: Some(server),
                _dir: dir,
            }
        })
        .collect()
}

fn api(n: &Node) -> &Api {
    &n.server.as_ref().unwrap().api
}

/// NDJSON of `n` events of `stream`, ids `{stream}-{i}` for i in `from..from + n`.
fn events(stream: &str, from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| {
            format!(
                "{{\"stream\":\"{stream}\",\"type\":\"t\",\"id\":\"{stream}-{i}\",\"entity\":\"e{}\",\"kind\":\"counter\",\"value\":1}}\n",
                i % 5
            )
        })
        .collect()
}

/// A 200 with a JSON body (cluster mode's answers: `duplicates` and `last_seq` only with
/// `applied`).
fn ok_json(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

async fn post(api: &Api, body: String, headers: &[(&str, &str)]) -> Resp {
    let mut h = vec![("content-type", "application/x-ndjson")];
    h.extend_from_slice(headers);
    api.send(
        reqwest::Method::POST,
        "/v1/events",
        &h,
        Some(reqwest::Body::from(body)),
    )
    .await
}

/// Every id of `stream` as replayed by `api`, in seq order, once `position` is applied.
async fn replay_ids(api: &Api, stream: &str, position: &str) -> (Vec<String>, Resp) {
    let r = api
        .get_with(
            &format!("/v1/streams/{stream}/events?limit=10000"),
            &[("x-vx-min-position", position)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let lines = parse_ndjson(&r);
    let seqs: Vec<u64> = lines.iter().map(Line::seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "gapless seqs"
    );
    (
        lines.iter().map(|l| l.id().unwrap().to_string()).collect(),
        r,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingest_on_any_node_replay_from_every_node() {
    let broker = Broker::start();
    let nodes = start_nodes(&broker, "vx-it", 3);
    // Every node must have settled into the group before the checks below.
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &nodes {
        while api(n).get("/readyz").await.status != 200 {
            assert!(Instant::now() < deadline, "a node never got ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // 6 streams, written through all three nodes.
    let streams: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, s) in streams.iter().enumerate() {
        for round in 0..3 {
            let via = &nodes[(i + round) % 3];
            let r = post(api(via), events(s, round * 10, 10), &[]).await;
            let body = ok_json(&r);
            assert_eq!(body["durability"], "replicated", "{body}");
            assert_eq!(body["accepted"], 10);
            let p = r.header("x-vx-position").unwrap().to_string();
            assert_eq!(body["position"].as_str(), Some(p.as_str()));
            want.entry(s.clone())
                .or_default()
                .extend((round * 10..round * 10 + 10).map(|k| format!("{s}-{k}")));
            let position = p;
            if round == 2 {
                // The last write of the stream: any node serves it once applied.
                for n in &nodes {
                    let (ids, r) = replay_ids(api(n), s, &position).await;
                    assert_eq!(&ids, &want[s], "stream {s} via {:?}", r.header("x-vx-node"));
                    assert!(r.header("x-vx-node").is_some());
                    assert!(r.header("x-vx-shard").is_some());
                }
            }
        }
    }

    // A request across partitions is one transaction; with `applied` it answers like a
    // single node.
    let mut body = events("x-a", 0, 3);
    body.push_str(&events("x-b", 0, 3));
    let r = post(
        api(&nodes[1]),
        body.clone(),
        &[("x-vx-durability", "applied")],
    )
    .await;
    let b = ok_json(&r);
    assert_eq!(b["durability"], "applied", "{b}");
    assert_eq!(
        (b["accepted"].as_u64(), b["duplicates"].as_u64()),
        (Some(6), Some(0))
    );
    assert_eq!(
        last_seq_map(&b),
        BTreeMap::from([("x-a".into(), 3), ("x-b".into(), 3)])
    );
    // The same again: every event a duplicate, decided by the owners.
    let r = post(api(&nodes[2]), body, &[("x-vx-durability", "applied")]).await;
    let b = ok_json(&r);
    assert_eq!(
        (b["accepted"].as_u64(), b["duplicates"].as_u64()),
        (Some(0), Some(6))
    );

    // A conditional write: right expectation stored, wrong one 409 with the actual last seq.
    let one = |id: &str| format!("{{\"stream\":\"cond\",\"type\":\"t\",\"id\":\"{id}\"}}\n");
    let r = post(
        api(&nodes[0]),
        one("c1"),
        &[
            ("x-vx-durability", "applied"),
            ("x-vx-expected-last-seq", "0"),
        ],
    )
    .await;
    ok_json(&r);
    let r = post(
        api(&nodes[1]),
        one("c2"),
        &[
            ("x-vx-durability", "applied"),
            ("x-vx-expected-last-seq", "0"),
        ],
    )
    .await;
    let e = assert_error(&r, 409, "conflict");
    assert_eq!(e.get("last_seq").and_then(Value::as_u64), Some(1), "{e:?}");

    for n in nodes {
        n.server.unwrap().stop_clean();
    }
}
