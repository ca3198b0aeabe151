//! Round trip over the real binary: what is ingested (NDJSON, JSON arrays, single objects) is
//! replayed unchanged in canonical form (docs/API.md §2) with gapless `seq`, in NDJSON and JSON; the
//! stream listing and metadata; replay headers and query parameters; percent-encoded names;
//! the same over the Unix socket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::Value;

const SHARDS: u32 = 128;

fn shard(stream: &str) -> u64 {
    u64::from(vx_proto::shard::shard_of(stream, SHARDS))
}

/// Post `events` in batches of `batch` in send order, rotating NDJSON, JSON arrays and single
/// JSON objects; checks every 200 body against the expected per-stream `last_seq`.
async fn post_all(api: &Api, events: &[Event], batch: usize) {
    let mut next_seq: BTreeMap<&str, u64> = BTreeMap::new();
    for (b, chunk) in events.chunks(batch).enumerate() {
        let mut want = BTreeMap::new();
        for e in chunk {
            let s = next_seq.entry(e.stream.as_str()).or_insert(0);
            *s += 1;
            want.insert(e.stream.clone(), *s);
        }
        match b % 5 {
            4 => {
                // One request per event, as a single JSON object.
                for e in chunk {
                    let r = api.post_events(Some(JSON), e.to_json(), &[]).await;
                    assert_accepted(&r, 1);
                }
                continue;
            }
            0 | 2 => {
                let r = api.post_ndjson(chunk).await;
                let body = assert_accepted(&r, chunk.len() as u64);
                assert_eq!(last_seq_map(&body), want, "last_seq of batch {b}: {r}");
            }
            _ => {
                let r = api.post_json_array(chunk).await;
                let body = assert_accepted(&r, chunk.len() as u64);
                assert_eq!(last_seq_map(&body), want, "last_seq of batch {b}: {r}");
            }
        }
    }
}

/// Events in send order, grouped by stream.
fn by_stream(events: &[Event]) -> BTreeMap<String, Vec<&Event>> {
    let mut m: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for e in events {
        m.entry(e.stream.clone()).or_default().push(e);
    }
    m
}

/// Replay every stream as NDJSON and as a JSON array and compare with what was sent.
async fn check_all(api: &Api, streams: &BTreeMap<String, Vec<&Event>>) {
    for (stream, evs) in streams {
        let n = evs.len() as u64;
        let (r, lines) = api.replay(stream, "").await;
        assert_eq!(r.status, 200, "{r}");
        check_stream(stream, &lines, evs);
        assert_eq!(r.header_u64("x-vx-last-seq"), n, "{stream}");
        assert_eq!(r.header_u64("x-vx-first-seq"), 1, "{stream}");
        assert_eq!(r.header_u64("x-vx-next-seq"), n + 1, "{stream}");
        assert_eq!(r.header_u64("x-vx-shard"), shard(stream), "{stream}");

        let r = api
            .get_with(
                &format!("/v1/streams/{}/events", enc(stream)),
                &[("accept", JSON)],
            )
            .await;
        assert_eq!(r.status, 200, "{r}");
        let ct = r.header("content-type").unwrap_or("");
        assert!(ct.starts_with(JSON), "JSON replay content type {ct:?}");
        let arr = r.json();
        let arr = arr.as_array().expect("JSON replay is an array");
        assert_eq!(arr.len(), evs.len(), "{stream}: JSON replay length");
        for (i, (got, ev)) in arr.iter().zip(evs).enumerate() {
            if let Err(e) = ev.check(got, None, i as u64 + 1) {
                panic!("JSON replay of {stream:?}, event {i}: {e}");
            }
        }
        assert_eq!(r.header_u64("x-vx-last-seq"), n);
        assert_eq!(r.header_u64("x-vx-next-seq"), n + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_events_across_a_hundred_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    let mut rng = Rng::new(1);
    let mut counts = vec![0u64; 100];
    let mut events = Vec::with_capacity(10_000);
    let before = now_ms();
    for _ in 0..10_000 {
        let s = rng.below(100) as usize;
        counts[s] += 1;
        let stream = format!("rt-{s:03}");
        events.push(varied_event(&mut rng, &stream, counts[s]));
    }
    post_all(api, &events, 100).await;
    let after = now_ms();
    // Events sent without `ts` get the receive time: anywhere in the sending window.
    for e in &mut events {
        if let Ts::Absent(..) = e.ts {
            e.ts = Ts::Absent(before, after);
        }
    }
    let streams = by_stream(&events);
    assert_eq!(streams.len(), 100);
    check_all(api, &streams).await;

    // Metadata agrees with what was replayed.
    for (stream, evs) in &streams {
        let r = api.stream_info(stream).await;
        assert_eq!(r.status, 200, "{r}");
        assert_eq!(r.header_u64("x-vx-shard"), shard(stream), "{r}");
        let info = r.json();
        assert_eq!(info["stream"], stream.as_str(), "{r}");
        assert_eq!(info["first_seq"], 1, "{r}");
        assert_eq!(info["last_seq"], evs.len() as u64, "{r}");
        assert_eq!(info["events"], evs.len() as u64, "{r}");
        assert!(info["bytes"].as_u64().is_some_and(|b| b > 0), "{r}");
        let known: Vec<i64> = evs.iter().filter_map(|e| e.expected_ts()).collect();
        let first_ts = info["first_ts"].as_i64().expect("first_ts");
        let last_ts = info["last_ts"].as_i64().expect("last_ts");
        if known.len() == evs.len() {
            assert_eq!(first_ts, *known.iter().min().unwrap(), "{r}");
            assert_eq!(last_ts, *known.iter().max().unwrap(), "{r}");
        } else {
            assert!(first_ts <= *known.iter().min().unwrap_or(&i64::MAX), "{r}");
            assert!(last_ts >= *known.iter().max().unwrap_or(&i64::MIN), "{r}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listing_pages_by_prefix_limit_and_after() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    // 25 streams under "list/a-", 120 under "list/b-", one with a name that sorts between.
    let mut names: Vec<String> = (0..25).map(|i| format!("list/a-{i:03}")).collect();
    names.extend((0..120).map(|i| format!("list/b-{i:03}")));
    names.push("list/a-\u{e9}".to_string());
    let events: Vec<Event> = names
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            (0..2).map(move |k| Event::simple(s, "t", 1000 + i as i64 * 10 + k, None))
        })
        .collect();
    for chunk in events.chunks(50) {
        assert_accepted(&api.post_ndjson(chunk).await, chunk.len() as u64);
    }

    // Page through "list/a-" 10 at a time.
    let mut want: Vec<String> = names
        .iter()
        .filter(|n| n.starts_with("list/a-"))
        .cloned()
        .collect();
    want.sort(); // bytewise: String's Ord is bytewise
    let mut got = Vec::new();
    let mut after: Option<String> = None;
    for page in 0.. {
        assert!(page < 10, "listing did not end");
        let mut path = format!("/v1/streams?prefix={}&limit=10", enc("list/a-"));
        if let Some(a) = &after {
            path.push_str(&format!("&after={}", enc(a)));
        }
        let r = api.get(&path).await;
        assert_eq!(r.status, 200, "{r}");
        let v = r.json();
        let items = v["streams"].as_array().expect("streams array");
        assert!(items.len() <= 10, "{r}");
        for it in items {
            let name = it["stream"].as_str().expect("stream name").to_string();
            assert_eq!(it["first_seq"], 1, "{it}");
            assert_eq!(it["last_seq"], 2, "{it}");
            assert_eq!(it["events"], 2, "{it}");
            assert!(it["bytes"].as_u64().is_some_and(|b| b > 0), "{it}");
            let i = names.iter().position(|n| *n == name).expect("known name") as i64;
            assert_eq!(it["first_ts"], 1000 + i * 10, "{it}");
            assert_eq!(it["last_ts"], 1001 + i * 10, "{it}");
            got.push(name);
        }
        match &v["next"] {
            Value::Null => break,
            Value::String(n) => {
                assert_eq!(
                    Some(n),
                    got.last(),
                    "next is the last name of the page: {r}"
                );
                after = Some(n.clone());
            }
            other => panic!("next must be a name or null, got {other}"),
        }
    }
    assert_eq!(got, want, "paged listing of prefix list/a-");

    // Default limit is 100.
    let r = api
        .get(&format!("/v1/streams?prefix={}", enc("list/b-")))
        .await;
    assert_eq!(r.status, 200, "{r}");
    let v = r.json();
    let items = v["streams"].as_array().unwrap();
    assert_eq!(items.len(), 100, "default limit");
    assert_eq!(v["next"], "list/b-099");
    let r = api
        .get(&format!(
            "/v1/streams?prefix={}&after={}",
            enc("list/b-"),
            enc("list/b-099")
        ))
        .await;
    let v = r.json();
    let rest: Vec<&str> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream"].as_str().unwrap())
        .collect();
    let want_rest: Vec<String> = (100..120).map(|i| format!("list/b-{i:03}")).collect();
    assert_eq!(rest, want_rest);
    assert_eq!(v["next"], Value::Null);

    // No prefix: everything, sorted bytewise.
    let r = api.get("/v1/streams?limit=10000").await;
    let v = r.json();
    let all: Vec<String> = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(all, sorted);
    assert_eq!(v["next"], Value::Null);

    // A prefix nothing has.
    let r = api.get("/v1/streams?prefix=zzz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"streams": [], "next": null}));

    // Unknown stream.
    assert_error(&api.stream_info("list/none").await, 404, "not_found");
    let (r, _) = api.replay("list/none", "").await;
    assert_error(&r, 404, "not_found");
}

/// seqs of a replay.
fn seqs(lines: &[Line]) -> Vec<u64> {
    lines.iter().map(Line::seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_query_parameters() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    // Event i (seq i+1): ts 1000 + 10 i, type a/b/c by i % 3, entity p1/p2/none by i % 4.
    let stream = "q/one";
    let events: Vec<Event> = (0..50)
        .map(|i| {
            let mut e = Event::simple(stream, ["a", "b", "c"][i % 3], 1000 + 10 * i as i64, None);
            e.entity = match i % 4 {
                0 | 1 => Some("p1".into()),
                2 => Some("p2".into()),
                _ => None,
            };
            e
        })
        .collect();
    assert_accepted(&api.post_ndjson(&events).await, 50);
    let all: Vec<u64> = (1..=50).collect();
    let pick = |f: &dyn Fn(usize) -> bool| -> Vec<u64> {
        (0..50).filter(|&i| f(i)).map(|i| i as u64 + 1).collect()
    };

    struct Case {
        query: String,
        want: Vec<u64>,
        /// `X-Vx-Next-Seq`, or `None` where filters make it absent.
        next: Option<u64>,
    }
    let cases = vec![
        Case {
            query: "".into(),
            want: all.clone(),
            next: Some(51),
        },
        Case {
            query: "from=10".into(),
            want: (10..=50).collect(),
            next: Some(51),
        },
        Case {
            query: "from=0".into(),
            want: all.clone(),
            next: Some(51),
        },
        Case {
            query: "from=10&to=20".into(),
            want: (10..=20).collect(),
            next: Some(21),
        },
        Case {
            query: "to=5".into(),
            want: (1..=5).collect(),
            next: Some(6),
        },
        Case {
            query: "limit=5".into(),
            want: (1..=5).collect(),
            next: Some(6),
        },
        Case {
            query: "from=6&limit=5".into(),
            want: (6..=10).collect(),
            next: Some(11),
        },
        Case {
            query: "from=49&limit=5".into(),
            want: vec![49, 50],
            next: Some(51),
        },
        Case {
            query: "from=60".into(),
            want: vec![],
            next: Some(60),
        },
        Case {
            query: "limit=100000".into(),
            want: all.clone(),
            next: Some(51),
        },
        Case {
            query: "since=1100&until=1200".into(),
            want: (11..=20).collect(),
            next: None,
        },
        Case {
            query: format!(
                "since={}&until={}",
                enc(&rfc3339(1100, 0, "")),
                enc(&rfc3339(1200, 60, ""))
            ),
            want: (11..=20).collect(),
            next: None,
        },
        Case {
            query: "since=1455".into(),
            want: (47..=50).collect(),
            next: None,
        },
        Case {
            query: "until=1001".into(),
            want: vec![1],
            next: None,
        },
        Case {
            query: "types=a".into(),
            want: pick(&|i| i % 3 == 0),
            next: None,
        },
        Case {
            query: format!("types={}", enc("a,c")),
            want: pick(&|i| i % 3 != 1),
            next: None,
        },
        Case {
            query: "types=zz".into(),
            want: vec![],
            next: None,
        },
        Case {
            query: "entity=p1".into(),
            want: pick(&|i| i % 4 < 2),
            next: None,
        },
        Case {
            query: "entity=p2".into(),
            want: pick(&|i| i % 4 == 2),
            next: None,
        },
        Case {
            query: "entity=p1&types=b&from=5&limit=3".into(),
            want: pick(&|i| i >= 4 && i % 4 < 2 && i % 3 == 1)
                .into_iter()
                .take(3)
                .collect(),
            next: None,
        },
        Case {
            query: "types=c&since=1200&to=40".into(),
            want: pick(&|i| i % 3 == 2 && (20..40).contains(&i)),
            next: None,
        },
    ];
    for c in cases {
        let (r, lines) = api.replay(stream, &c.query).await;
        assert_eq!(r.status, 200, "?{}: {r}", c.query);
        assert_eq!(seqs(&lines), c.want, "?{}", c.query);
        for l in &lines {
            let i = (l.seq() - 1) as usize;
            events[i].check(&l.value, Some(&l.raw), l.seq()).unwrap();
        }
        assert_eq!(r.header_u64("x-vx-last-seq"), 50, "?{}", c.query);
        assert_eq!(r.header_u64("x-vx-first-seq"), 1, "?{}", c.query);
        match c.next {
            Some(n) => assert_eq!(r.header_u64("x-vx-next-seq"), n, "?{}", c.query),
            None => assert_eq!(
                r.header("x-vx-next-seq"),
                None,
                "?{}: no X-Vx-Next-Seq with filters",
                c.query
            ),
        }
    }

    // Accept variants that mean NDJSON.
    for accept in ["*/*", NDJSON, "application/x-ndjson; charset=utf-8"] {
        let r = api
            .get_with(
                &format!("/v1/streams/{}/events?limit=3", enc(stream)),
                &[("accept", accept)],
            )
            .await;
        assert_eq!(r.status, 200, "Accept: {accept}: {r}");
        assert_eq!(seqs(&parse_ndjson(&r)), vec![1, 2, 3], "Accept: {accept}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_names_are_percent_encoded_path_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    let names = [
        "a/b/c",
        "/leading/slash",
        "ünïcødé-流-🎮",
        "with space",
        "q?x#y%z&w=1",
        "dot.and:colon",
        "x".repeat(256).leak(),
    ];
    let mut all = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let evs: Vec<Event> = (0..3)
            .map(|k| Event::simple(name, "t", 100 * i as i64 + k, Some(format!("{i}-{k}"))))
            .collect();
        let body = assert_accepted(&api.post_json_array(&evs).await, 3);
        assert_eq!(last_seq_map(&body).get(*name), Some(&3), "{body}");
        all.extend(evs);
    }
    for (stream, evs) in by_stream(&all) {
        let (r, lines) = api.replay(&stream, "").await;
        assert_eq!(r.status, 200, "{stream:?}: {r}");
        check_stream(&stream, &lines, &evs);
        assert_eq!(r.header_u64("x-vx-shard"), shard(&stream));
        let r = api.stream_info(&stream).await;
        assert_eq!(r.status, 200, "{stream:?}: {r}");
        assert_eq!(r.json()["stream"], stream.as_str());
    }
    let r = api.get("/v1/streams?limit=10000").await;
    let listed: Vec<String> = r.json()["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(listed, want);
    // "a/b/c" is one segment: the unencoded path is another route, not this stream.
    let r = api.get("/v1/streams/a/b/c/events").await;
    assert_eq!(
        r.status, 404,
        "unencoded / must not reach stream a/b/c: {r}"
    );
    // An encoded prefix with "/" filters the listing.
    let r = api.get(&format!("/v1/streams?prefix={}", enc("a/"))).await;
    assert_eq!(r.json()["streams"][0]["stream"], "a/b/c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unix_socket_ingest_and_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("vx.sock");
    let server = ServerConfig::new(tmp.path().join("data"))
        .uds(&sock)
        .start();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(
        mode & 0o777,
        0o660,
        "socket mode (server.uds_mode default 0660)"
    );
    let uds = server.uds();

    let mut rng = Rng::new(7);
    let mut events = Vec::new();
    let mut counts = [0u64; 5];
    for _ in 0..500 {
        let s = rng.below(5) as usize;
        counts[s] += 1;
        events.push(varied_event(&mut rng, &format!("uds/{s}"), counts[s]));
    }
    for e in &mut events {
        if let Ts::Absent(..) = e.ts {
            // Not needed for this check: give every event a ts.
            e.ts = Ts::Ms(5);
        }
    }
    post_all(uds, &events, 50).await;
    let streams = by_stream(&events);
    check_all(uds, &streams).await;
    // The same data is visible over TCP.
    check_all(&server.api, &streams).await;
    let r = uds.get("/readyz").await;
    assert_eq!(r.status, 200);
    let r = uds.get("/v1/streams?prefix=uds%2F").await;
    assert_eq!(r.json()["streams"].as_array().unwrap().len(), 5, "{r}");
}
