//! Cluster-mode nodes for the tests on Kafka (tests/cluster*.rs): real `veltrix` processes
//! beside real brokers (`bootstrap`: the brokers' `host:port` list), and the requests those
//! tests share.

use super::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use tempfile::TempDir;

pub const SHARDS: u32 = 8;

/// A node of a test cluster: its data dir, its configuration (to restart it) and its server.
pub struct Node {
    pub cfg: ServerConfig,
    pub server: Option<Server>,
    pub _dir: TempDir,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn node_config(bootstrap: &str, topic: &str, id: &str, dir: &TempDir) -> ServerConfig {
    let port = free_port();
    ServerConfig::new(dir.path().join("data"))
        .listen(format!("127.0.0.1:{port}"))
        .args([
            "--cluster",
            "kafka",
            "--kafka-brokers",
            bootstrap,
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

pub fn start_nodes(bootstrap: &str, topic: &str, n: usize) -> Vec<Node> {
    start_nodes_with(bootstrap, topic, n, &[])
}

/// [`start_nodes`], each node with `extra` arguments too (listeners on `127.0.0.1:0`).
pub fn start_nodes_with(bootstrap: &str, topic: &str, n: usize, extra: &[&str]) -> Vec<Node> {
    start_nodes_edited(bootstrap, topic, n, |cfg| cfg.args(extra.to_vec()))
}

/// [`start_nodes`], each node's configuration changed by `edit` first.
pub fn start_nodes_edited(
    bootstrap: &str,
    topic: &str,
    n: usize,
    edit: impl Fn(ServerConfig) -> ServerConfig,
) -> Vec<Node> {
    (0..n)
        .map(|i| {
            let dir = tempfile::tempdir().unwrap();
            let cfg = edit(node_config(bootstrap, topic, &format!("n{i}"), &dir));
            let server = cfg.start();
            Node {
                cfg,
                server: Some(server),
                _dir: dir,
            }
        })
        .collect()
}

pub fn api(n: &Node) -> &Api {
    &n.server.as_ref().unwrap().api
}

/// NDJSON of `n` events of `stream`, ids `{stream}-{i}` for i in `from..from + n`.
pub fn events(stream: &str, from: usize, n: usize) -> String {
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
pub fn ok_json(r: &Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

pub async fn post(api: &Api, body: String, headers: &[(&str, &str)]) -> Resp {
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

/// [`post`] without its panic: the transport's error too (a node may be down or killed).
pub async fn try_post(api: &Api, body: String) -> Result<Resp, reqwest::Error> {
    api.try_send(
        reqwest::Method::POST,
        "/v1/events",
        &[("content-type", "application/x-ndjson")],
        Some(reqwest::Body::from(body)),
    )
    .await
}

/// Every id of `stream` as replayed by `api`, in seq order, once `position` is applied
/// (retrying a 503 as its `Retry-After` says: the shard may be moving).
pub async fn replay_ids(api: &Api, stream: &str, position: &str) -> (Vec<String>, Resp) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let r = loop {
        let r = api
            .get_with(
                &format!("/v1/streams/{stream}/events?limit=10000"),
                &[("x-vx-min-position", position)],
            )
            .await;
        if r.status != 503 || Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
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

/// Wait (at most 90 s) until the node answers `/readyz` with 200: joined and caught up.
pub async fn wait_ready(api: &Api) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while api
        .try_send(reqwest::Method::GET, "/readyz", &[], None)
        .await
        .map(|r| r.status)
        .unwrap_or(0)
        != 200
    {
        assert!(Instant::now() < deadline, "a node never got ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Wait (at most 30 s) until every partition of `T` and `T.entities` is claimed, in the
/// nodes' `/v1/status`, by exactly one node; panics naming the partitions that are not.
pub async fn one_owner_each(apis: &[Api]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut claims: BTreeMap<(&str, u64), Vec<String>> = BTreeMap::new();
        for topic in ["streams", "entities"] {
            for p in 0..u64::from(SHARDS) {
                claims.insert((topic, p), Vec::new());
            }
        }
        for api in apis {
            let status = api.get("/v1/status").await.json();
            let c = &status["cluster"];
            for topic in ["streams", "entities"] {
                for p in c[topic].as_array().unwrap() {
                    let part = p["partition"].as_u64().unwrap();
                    let node = c["node"].as_str().unwrap().to_string();
                    claims
                        .entry((topic, part))
                        .or_default()
                        .push(format!("{node} ({})", p["state"]));
                }
            }
        }
        let wrong: Vec<_> = claims
            .iter()
            .filter(|(_, owners)| owners.len() != 1)
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "partitions without exactly one owner after 30 s: {wrong:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every node ready, and the group settled: each partition has exactly one owner (a node is
/// ready once it joined, while cooperative rebalancing may still be moving partitions).
pub async fn settle(nodes: &[Node]) {
    for n in nodes {
        wait_ready(api(n)).await;
    }
    let apis: Vec<Api> = nodes.iter().map(|n| api(n).clone()).collect();
    one_owner_each(&apis).await;
}
