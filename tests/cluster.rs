//! Cluster mode on Kafka (docs/CLUSTER.md) against a real Apache Kafka broker and real
//! `veltrix` processes: ingest on any node, replay from every node, a request across
//! partitions atomic, dedup and conditional writes decided by the owner with `applied`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::cluster::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vx_cluster::testing::Broker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingest_on_any_node_replay_from_every_node() {
    let broker = Broker::start();
    let nodes = start_nodes(&broker.bootstrap(), "vx-it", 3);
    // Every node must have settled into the group before the checks below.
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &nodes {
        while api(n).get("/readyz").await.status != 200 {
            assert!(Instant::now() < deadline, "a node never got ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Each node says what it owns; together they own every partition once, and each lists
    // all three members. A node is ready once it joined, and the group may still be handing
    // it partitions (cooperative rebalancing takes two rounds) and its view of the members
    // may lag: wait for the group to settle.
    let all: Vec<u64> = (0..u64::from(SHARDS)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut owned = Vec::new();
        let mut members = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let st = api(n).get("/v1/status").await.json();
            let c = &st["cluster"];
            assert_eq!(c["node"], format!("n{i}"), "{st}");
            members.push(c["members"].as_array().unwrap().len());
            owned.extend(
                c["streams"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["partition"].as_u64().unwrap()),
            );
        }
        owned.sort_unstable();
        if owned == all && members == [3, 3, 3] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "partitions owned: {owned:?}; members each node lists: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
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

    // A live follow through every node: the owner's SSE stream, forwarded as it comes.
    let client = live_client();
    ok_json(
        &post(
            api(&nodes[0]),
            events("live", 0, 4),
            &[("x-vx-durability", "applied")],
        )
        .await,
    );
    let mut follows = Vec::new();
    for n in &nodes {
        let f = Follow::sse(&client, api(n), "live", "follow=true&from=1", &[]).await;
        assert_eq!(f.status, 200);
        follows.push(f);
    }
    for (k, n) in nodes.iter().enumerate().skip(1) {
        ok_json(&post(api(n), events("live", k * 4, 4), &[]).await);
    }
    for f in &mut follows {
        let seqs = f.until_seq(1, 12, Duration::from_secs(20)).await;
        assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
    }
    drop(follows);
    // And over WebSocket, on a node that does not own the stream.
    let owner = api(&nodes[0])
        .get("/v1/streams/live")
        .await
        .header("x-vx-node")
        .unwrap()
        .to_string();
    let other = (0..3)
        .find(|i| format!("n{i}") != owner)
        .map(|i| &nodes[i])
        .unwrap();
    let url = format!(
        "{}/v1/streams/live/ws?from=1&limit=12",
        api(other).base.replace("http://", "ws://")
    );
    let (mut ws, resp) = tokio_tungstenite::connect_async(url).await.unwrap();
    assert_eq!(
        resp.headers().get("x-vx-node").unwrap().to_str().unwrap(),
        owner
    );
    use futures_util::StreamExt;
    let mut seqs = Vec::new();
    while let Some(Ok(m)) = ws.next().await {
        if let tokio_tungstenite::tungstenite::Message::Text(t) = m {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            seqs.push(v["seq"].as_u64().unwrap());
        }
    }
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());

    for n in nodes {
        n.server.unwrap().stop_clean();
    }
}

/// Acknowledged ids per stream, and the position of each stream's last acknowledged write.
#[derive(Default)]
struct Acked {
    ids: BTreeMap<String, Vec<String>>,
    last: BTreeMap<String, String>,
}

/// Write `rounds` requests of 5 events to each of `streams` through the nodes in turn,
/// skipping a node that does not answer; retry each refused request up to 20 times (same
/// ids: a retry of a write that did get in is a duplicate).
async fn load(apis: &[Api], streams: &[String], from: usize, rounds: usize, acked: &mut Acked) {
    for round in from..from + rounds {
        for (i, s) in streams.iter().enumerate() {
            let body = events(s, round * 5, 5);
            for attempt in 0..20 {
                let api = &apis[(round + i + attempt) % apis.len()];
                let r = try_post(api, body.clone()).await;
                match r {
                    Ok(r) if r.status == 200 => {
                        acked
                            .ids
                            .entry(s.clone())
                            .or_default()
                            .extend((round * 5..round * 5 + 5).map(|k| format!("{s}-{k}")));
                        acked
                            .last
                            .insert(s.clone(), r.header("x-vx-position").unwrap().to_string());
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    }
}

/// Every node in `apis` replays each stream with every acknowledged id exactly once.
async fn check_replays(apis: &[Api], acked: &Acked) {
    for (s, want) in &acked.ids {
        for api in apis {
            let (ids, _) = replay_ids(api, s, &acked.last[s]).await;
            let mut seen = std::collections::BTreeSet::new();
            for id in &ids {
                assert!(seen.insert(id.clone()), "{s}: {id} twice");
            }
            for id in want {
                assert!(
                    seen.contains(id),
                    "{s}: acknowledged {id} lost (got {})",
                    ids.len()
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_loses_nothing_acknowledged_and_rejoins_from_its_copy() {
    let broker = Broker::start();
    let mut nodes = start_nodes(&broker.bootstrap(), "vx-loss", 3);
    for n in &nodes {
        wait_ready(api(n)).await;
    }
    let streams: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let apis: Vec<Api> = nodes.iter().map(|n| api(n).clone()).collect();
    let mut acked = Acked::default();
    load(&apis, &streams, 0, 4, &mut acked).await;

    // A follower of a stream the doomed node owns, through another node.
    let mut doomed_stream = None;
    for s in &streams {
        let r = api(&nodes[0]).get(&format!("/v1/streams/{s}")).await;
        if r.header("x-vx-node") == Some("n2") {
            doomed_stream = Some(s.clone());
            break;
        }
    }
    let followed = doomed_stream.expect("n2 owns one of 8 streams");
    let client = live_client();
    let mut follow = Follow::sse(
        &client,
        api(&nodes[0]),
        &followed,
        "follow=true&from=1",
        &[],
    )
    .await;
    assert_eq!(follow.status, 200);
    let mut got: Vec<u64> = Vec::new();
    let before = acked.ids[&followed].len() as u64;
    got.extend(follow.until_seq(1, before, Duration::from_secs(20)).await);

    // kill -9 of a node, with writes going on through every node (the dead one's fail).
    let writer = {
        let apis = apis.clone();
        let streams = streams.clone();
        tokio::spawn(async move {
            let mut acked = Acked::default();
            load(&apis, &streams, 4, 6, &mut acked).await;
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    nodes[2].server.take().unwrap().kill9();
    let more = writer.await.unwrap();
    for (s, ids) in more.ids {
        acked.ids.entry(s).or_default().extend(ids);
    }
    acked.last.extend(more.last);
    let live = &apis[..2];
    check_replays(live, &acked).await;
    // The dead node's record stays in the members topic, but it owns nothing now: listings
    // ask the owners only.
    let listed = apis[0].get("/v1/streams?limit=100").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(listed.json()["streams"].as_array().unwrap().len() >= streams.len());

    // The follower's connection broke with its owner; it reconnects with Last-Event-ID (to
    // any node: 503 while the shard moves) and resumes with no gap and no duplicate.
    let total = acked.ids[&followed].len() as u64;
    loop {
        while let Some(f) = if follow.ended {
            None
        } else {
            follow.event(Duration::from_secs(30)).await
        } {
            let id = f.id.unwrap();
            assert_eq!(id, got.len() as u64 + 1, "gap or duplicate at {id}");
            got.push(id);
            if id == total {
                break;
            }
        }
        if got.len() as u64 == total {
            break;
        }
        let last = got.len().to_string();
        follow = Follow::sse(
            &client,
            &apis[1],
            &followed,
            "follow=true",
            &[("last-event-id", &last)],
        )
        .await;
        if follow.status != 200 {
            assert_eq!(follow.status, 503);
            follow.ended = true;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    drop(follow);

    // Restarted on its data dir: it rejoins and continues from its local copy and the
    // offsets recorded in it, without discarding anything.
    let server = nodes[2].cfg.start();
    nodes[2].server = Some(server);
    wait_ready(api(&nodes[2])).await;
    load(&apis, &streams, 10, 2, &mut acked).await;
    check_replays(&apis, &acked).await;
    let logs = nodes[2].server.as_ref().unwrap().logs();
    assert!(
        !logs.contains("discarding the local copy"),
        "a restart within cluster.max_catchup resumes, it does not rebuild:\n{logs}"
    );

    // Stopped, written past, restarted with a catch-up bound no replay meets: the local
    // copies it gets back are discarded and rebuilt from the topic, with the same result.
    nodes[2].server.take().unwrap().stop_clean();
    load(&apis[..2], &streams, 12, 40, &mut acked).await;
    let cfg = nodes[2].cfg.clone().env("VX_CLUSTER_MAX_CATCHUP", "1ms");
    nodes[2].server = Some(cfg.start());
    wait_ready(api(&nodes[2])).await;
    // Give it back partitions: stop another node so that some move to it.
    nodes[1].server.take().unwrap().stop_clean();
    let live = [apis[0].clone(), apis[2].clone()];
    check_replays(&live, &acked).await;
    let logs = nodes[2].server.as_ref().unwrap().logs();
    assert!(
        logs.contains("discarding the local copy"),
        "past cluster.max_catchup a shard is rebuilt:\n{logs}"
    );
    for n in nodes {
        if let Some(s) = n.server {
            s.stop_clean();
        }
    }
}

/// Events for features: counters of entities spread over every shard, written through
/// many streams (so that each entity's events come from several stream partitions), some
/// sent twice (ids: duplicates must not count).
fn feature_requests() -> Vec<String> {
    let mut out = Vec::new();
    for r in 0..12 {
        let mut body = String::new();
        for i in 0..20 {
            let n = r * 20 + i;
            body.push_str(&format!(
                "{{\"stream\":\"f{}\",\"type\":\"hit\",\"id\":\"h{n}\",\"entity\":\"p{}\",\"kind\":\"counter\",\"value\":{},\"ts\":{}}}\n",
                n % 7,
                n % 11,
                n % 4 + 1,
                1_700_000_000_000i64 + n as i64,
            ));
        }
        out.push(body.clone());
        if r % 3 == 0 {
            out.push(body);
        }
    }
    out
}

/// `GET /v1/features/{entity}`'s `features`, or `None` for a 404.
async fn features_of(api: &Api, entity: &str, headers: &[(&str, &str)]) -> Option<Value> {
    let r = api
        .get_with(&format!("/v1/features/{entity}"), headers)
        .await;
    match r.status {
        404 => None,
        200 => Some(r.json()["features"].clone()),
        s => panic!("GET features of {entity}: {s} {}", r.text()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn features_equal_what_one_node_computes() {
    let broker = Broker::start();
    let nodes = start_nodes(&broker.bootstrap(), "vx-feat", 3);
    for n in &nodes {
        wait_ready(api(n)).await;
    }
    let single_dir = tempfile::tempdir().unwrap();
    let single = ServerConfig::new(single_dir.path().join("data"))
        .args(["--shards", &SHARDS.to_string()])
        .start();
    for (i, body) in feature_requests().into_iter().enumerate() {
        ok_json(&post(&single.api, body.clone(), &[]).await);
        ok_json(&post(api(&nodes[i % 3]), body, &[("x-vx-durability", "applied")]).await);
    }
    // A direct write and a delete, then read-your-writes with their position.
    let put = |api: &Api| {
        let api = api.clone();
        async move {
            api.send(
                reqwest::Method::PUT,
                "/v1/features/p3",
                &[("content-type", "application/json")],
                Some(reqwest::Body::from(r#"{"tier":"gold","score":7}"#)),
            )
            .await
        }
    };
    ok_json(&put(&single.api).await);
    let r = put(api(&nodes[0])).await;
    let pos = r.header("x-vx-position").unwrap().to_string();
    ok_json(&r);
    for n in &nodes {
        let f = features_of(api(n), "p3", &[("x-vx-min-position", &pos)])
            .await
            .unwrap();
        assert_eq!(f["tier"], "gold", "{f}");
    }

    // Events reach an entity's tables after their stream's owner routed them: eventually
    // every node answers for every entity exactly what the single node has.
    let deadline = Instant::now() + Duration::from_secs(60);
    for e in (0..11).map(|i| format!("p{i}")) {
        let want = features_of(&single.api, &e, &[]).await;
        assert!(want.is_some());
        for n in &nodes {
            loop {
                let got = features_of(api(n), &e, &[]).await;
                if got == want {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "entity {e}: cluster {got:?} vs single node {want:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // The batch query spans the owners.
    let q = r#"{"entities":["p0","p5","nobody","p10"]}"#;
    let one = single
        .api
        .send(
            reqwest::Method::POST,
            "/v1/features/query",
            &[("content-type", "application/json")],
            Some(reqwest::Body::from(q)),
        )
        .await
        .json();
    let clustered = api(&nodes[1])
        .send(
            reqwest::Method::POST,
            "/v1/features/query",
            &[("content-type", "application/json")],
            Some(reqwest::Body::from(q)),
        )
        .await
        .json();
    assert_eq!(one, clustered);
    // Listing spans the owners too.
    let list = |api: &Api| {
        let api = api.clone();
        async move {
            let v = api.get("/v1/streams?limit=3").await.json();
            (v["streams"].as_array().unwrap().len(), v["next"].clone())
        }
    };
    assert_eq!(list(&single.api).await, list(api(&nodes[2])).await);
    single.stop_clean();
    for n in nodes {
        n.server.unwrap().stop_clean();
    }
}

/// A node restarted on its data dir answers a read that waits for a position its local
/// copy already holds at once, even when nothing is written after it: the partition's tail
/// is a transaction's commit marker (a request spanning two partitions), which the node
/// never applies as a record. Before the node noted what its copy held when it was given a
/// partition, such a read waited for a record that never came (503 after 10 s: the
/// intermittent stall of the broker-loss test, tests/cluster_brokers.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_serves_a_position_its_copy_holds() {
    let broker = Broker::start();
    let mut nodes = start_nodes(&broker.bootstrap(), "vx-held", 1);
    wait_ready(api(&nodes[0])).await;
    // Two streams on two partitions: the request is one transaction, whose commit writes a
    // marker after its record in each partition.
    let first = "held-0".to_string();
    let other = (1..)
        .map(|i| format!("held-{i}"))
        .find(|s| vx_proto::shard::shard_of(s, SHARDS) != vx_proto::shard::shard_of(&first, SHARDS))
        .unwrap();
    let body = format!("{}{}", events(&first, 0, 3), events(&other, 0, 3));
    let r = post(api(&nodes[0]), body, &[]).await;
    ok_json(&r);
    let position = r.header("x-vx-position").unwrap().to_string();
    let (ids, _) = replay_ids(api(&nodes[0]), &first, &position).await;
    assert_eq!(ids.len(), 3);

    nodes[0].server.take().unwrap().stop_clean();
    nodes[0].server = Some(nodes[0].cfg.start());
    wait_ready(api(&nodes[0])).await;
    for stream in [&first, &other] {
        let asked = Instant::now();
        let r = api(&nodes[0])
            .get_with(
                &format!("/v1/streams/{stream}/events"),
                &[("x-vx-min-position", &position)],
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(parse_ndjson(&r).len(), 3);
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{stream}: the read waited {:?} for a position the copy held",
            asked.elapsed()
        );
    }
}
