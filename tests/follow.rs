//! Live replay against the real binary (docs/API.md §5): SSE follow catching up and going live with
//! no gap or duplicate under concurrent ingest and retention, `Last-Event-ID` resume, a slow
//! follower that falls out of the live buffer and back to storage, 1000 followers of one
//! stream, filters, the WebSocket route, paced replay, delete and shutdown ending followers,
//! `server.max_followers`, and the errors of the live query.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);

fn server_config(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::new(dir.join("data")).args(["--shards", "8"])
}

fn server(dir: &std::path::Path) -> Server {
    server_config(dir).start()
}

/// [`server`] with `yaml` as its config file.
fn server_with(dir: &std::path::Path, yaml: &str) -> Server {
    server_config(dir).with_config(dir, yaml).start()
}

/// `n` events of `stream` with ts `ts0 + i * step`, type `hit` (even) or `miss` (odd), entity
/// `p<i % 3>`, padded to about `pad` bytes.
fn lines(stream: &str, from: u64, n: u64, ts0: i64, step: i64, pad: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| {
            let ty = if i % 2 == 0 { "hit" } else { "miss" };
            format!(
                r#"{{"stream":"{stream}","entity":"p{}","type":"{ty}","ts":{},"data":{{"n":{i},"pad":"{}"}}}}"#,
                i % 3,
                ts0 + i as i64 * step,
                "x".repeat(pad)
            )
        })
        .collect()
}

/// Write `n` events in requests of `per` events; returns the last seq.
async fn write(api: &Api, stream: &str, from: u64, n: u64, per: u64, pad: usize) -> u64 {
    let mut last = 0;
    let mut i = from;
    while i < from + n {
        let k = per.min(from + n - i);
        let r = api
            .post_lines(&lines(stream, i, k, 1_700_000_000_000, 1, pad))
            .await;
        let body = assert_accepted(&r, k);
        last = body["last_seq"][stream].as_u64().unwrap();
        i += k;
    }
    last
}

async fn metrics(api: &Api) -> String {
    api.get("/metrics").await.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_then_live_without_gap_or_duplicate_under_concurrent_ingest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    write(&api, "m", 0, 2000, 100, 20).await;
    let client = live_client();
    // Followers join at different points while a producer writes 3000 more in small requests.
    let producer = {
        let api = api.clone();
        tokio::spawn(async move { write(&api, "m", 2000, 3000, 7, 20).await })
    };
    let mut followers = Vec::new();
    for k in 0..4u64 {
        let client = client.clone();
        let api = api.clone();
        followers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(40 * k)).await;
            let from = 1 + k * 500;
            let mut f =
                Follow::sse(&client, &api, "m", &format!("follow=true&from={from}"), &[]).await;
            assert_eq!(f.status, 200);
            assert_eq!(
                f.headers["content-type"].to_str().unwrap(),
                "text/event-stream"
            );
            assert_eq!(f.header_u64("x-vx-first-seq"), 1);
            assert!(f.header_u64("x-vx-last-seq") >= 2000);
            f.until_seq(from, 5000, WAIT).await.len()
        }));
    }
    assert_eq!(producer.await.unwrap(), 5000);
    for (k, f) in followers.into_iter().enumerate() {
        assert_eq!(f.await.unwrap() as u64, 5000 - k as u64 * 500);
    }
    // The data is the stored event: the follower's event 1234 is the paged replay's.
    let mut f = Follow::sse(&client, &api, "m", "follow=true&from=1234", &[]).await;
    let live: Value = f.event(WAIT).await.unwrap().json();
    let (_, paged) = api.replay("m", "from=1234&limit=1").await;
    assert_eq!(live, paged[0].value);
    let m = metrics(&api).await;
    assert!(
        metric_sum(&m, "vx_follower_events_live_total") > 0.0,
        "some events went live:\n{m}"
    );
    assert_eq!(metric_sum(&m, "vx_followers"), 1.0);
    drop(f);
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_followers_keep_going_while_retention_removes_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server_with(
        tmp.path(),
        "storage:\n  segment_bytes: 64KiB\nretention:\n  max_bytes: 256KiB\n",
    );
    let api = s.api.clone();
    let client = live_client();
    let last = write(&api, "r", 0, 500, 50, 200).await;
    // One follower live from the end, one catching up from the start while segments go.
    let mut live = Follow::sse(
        &client,
        &api,
        "r",
        &format!("follow=true&from={}", last + 1),
        &[],
    )
    .await;
    let mut behind = Follow::sse(&client, &api, "r", "follow=true", &[]).await;
    let end = write(&api, "r", 500, 4000, 50, 200).await;
    assert_eq!(
        live.until_seq(last + 1, end, WAIT).await.len() as u64,
        end - last
    );
    // The catching-up one gets everything still stored; whatever retention took before it
    // read it is announced (`event: retained`), never skipped silently.
    let mut next = 1;
    while next <= end {
        let f = behind.event(WAIT).await.expect("the follow goes on");
        match f.event.as_deref() {
            Some("retained") => {
                let n = f.json();
                assert_eq!(n["from"], next, "{n}");
                next = n["first_seq"].as_u64().unwrap();
            }
            None => {
                assert_eq!(f.id, Some(next));
                next += 1;
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    let info = api.stream_info("r").await.json();
    assert!(
        info["first_seq"].as_u64().unwrap() > 1,
        "retention ran: {info}"
    );
    // A resume at a position retention removed is told so first.
    let mut resumed =
        Follow::sse(&client, &api, "r", "follow=true", &[("last-event-id", "0")]).await;
    let notice = resumed.event(WAIT).await.unwrap();
    assert_eq!(notice.event.as_deref(), Some("retained"));
    let first = notice.json()["first_seq"].as_u64().unwrap();
    assert_eq!(notice.json()["from"], 1);
    assert!(first > 1);
    assert_eq!(resumed.event(WAIT).await.unwrap().id, Some(first));
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_resumes_after_the_last_event_received() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    write(&api, "g", 0, 30, 10, 0).await;
    let client = live_client();
    let mut f = Follow::sse(&client, &api, "g", "follow=true&from=1", &[]).await;
    f.until_seq(1, 12, WAIT).await;
    drop(f); // the connection drops
    write(&api, "g", 30, 10, 10, 0).await;
    // A reconnecting EventSource repeats its URL and sends the last id it saw: the header wins.
    let mut f = Follow::sse(
        &client,
        &api,
        "g",
        "follow=true&from=1",
        &[("last-event-id", "12")],
    )
    .await;
    assert_eq!(f.until_seq(13, 40, WAIT).await.len(), 28);
    // A bad Last-Event-ID is a 400 in the one error shape.
    let r = api
        .get_with(
            "/v1/streams/g/events?follow=true",
            &[("accept", "text/event-stream"), ("last-event-id", "abc")],
        )
        .await;
    assert_error(&r, 400, "bad_request");
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_follower_falls_back_to_storage_and_still_gets_every_event() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    let client = live_client();
    write(&api, "hot", 0, 1, 1, 0).await;
    let mut fast = Follow::sse(&client, &api, "hot", "follow=true&from=1", &[]).await;
    // The slow one reads its head and then nothing while the stream grows far past the live
    // buffer (16384 events) and the sockets' buffers.
    let mut slow = Follow::sse(&client, &api, "hot", "follow=true&from=1", &[]).await;
    assert_eq!((fast.status, slow.status), (200, 200));
    let n = 40_000;
    let writer = {
        let api = api.clone();
        tokio::spawn(async move { write(&api, "hot", 1, n - 1, 1000, 300).await })
    };
    assert_eq!(fast.until_seq(1, n, WAIT).await.len() as u64, n);
    assert_eq!(writer.await.unwrap(), n);
    let m = metrics(&api).await;
    assert!(
        metric_sum(&m, "vx_follower_lag_max_events") > 0.0,
        "the slow one lags:\n{m}"
    );
    assert_eq!(slow.until_seq(1, n, WAIT).await.len() as u64, n);
    let m = metrics(&api).await;
    assert!(
        metric_sum(&m, "vx_follower_fallbacks_total") >= 1.0,
        "the slow follower left the live buffer for storage:\n{m}"
    );
    // It caught up and is live again: a new event reaches it.
    write(&api, "hot", n, 1, 1, 0).await;
    assert_eq!(slow.event(WAIT).await.unwrap().id, Some(n + 1));
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_followers_of_one_stream_all_receive_every_event() {
    // The test process holds a socket per follower.
    let _ = vx_sys::raise_nofile_limit();
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    let start = write(&api, "match", 0, 1, 1, 0).await + 1;
    let client = live_client();
    let n = 300u64;
    let mut tasks = Vec::new();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(1000);
    for _ in 0..1000 {
        let (client, api, ready) = (client.clone(), api.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let mut f = Follow::sse(
                &client,
                &api,
                "match",
                &format!("follow=true&from={start}"),
                &[],
            )
            .await;
            assert_eq!(f.status, 200);
            ready.send(()).await.unwrap();
            f.until_seq(start, start + n - 1, Duration::from_secs(60))
                .await
                .len() as u64
        }));
    }
    for _ in 0..1000 {
        ready_rx.recv().await.unwrap();
    }
    let m = metrics(&api).await;
    assert_eq!(metric_sum(&m, "vx_followers"), 1000.0);
    assert_eq!(
        metric_sum(&m, "vx_followed_streams"),
        1.0,
        "one topic, one reader of the log"
    );
    write(&api, "match", 1, n, 5, 50).await;
    for t in tasks {
        assert_eq!(t.await.unwrap(), n);
    }
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_apply_to_catch_up_and_live_events() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    write(&api, "f", 0, 30, 10, 0).await;
    let client = live_client();
    let mut f = Follow::sse(&client, &api, "f", "follow=true&types=hit&entity=p0", &[]).await;
    write(&api, "f", 30, 30, 10, 0).await;
    // Events i with i even (hit) and i % 3 == 0 (p0): i = 0, 6, …, 54; seq = i + 1.
    for i in (0..60).step_by(6) {
        let e = f.event(WAIT).await.unwrap();
        assert_eq!(e.id, Some(i + 1));
        let j = e.json();
        assert_eq!(
            (j["type"].as_str(), j["entity"].as_str()),
            (Some("hit"), Some("p0"))
        );
    }
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_stream_ends_its_followers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    write(&api, "d", 0, 5, 5, 0).await;
    let client = live_client();
    let mut sse = Follow::sse(&client, &api, "d", "follow=true", &[]).await;
    let mut nd = Follow::open(&client, &api, "/v1/streams/d/events?follow=true", &[]).await;
    assert_eq!(
        nd.headers["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    sse.until_seq(1, 5, WAIT).await;
    for seq in 1..=5 {
        assert_eq!(nd.line(WAIT).await.unwrap()["seq"], seq);
    }
    assert_eq!(
        api.send(reqwest::Method::DELETE, "/v1/streams/d", &[], None)
            .await
            .status,
        200
    );
    let last = sse.event(WAIT).await.unwrap();
    assert_eq!(last.event.as_deref(), Some("deleted"));
    assert_eq!(
        last.json(),
        serde_json::json!({"stream": "d", "last_seq": 5})
    );
    assert!(
        sse.event(WAIT).await.is_none(),
        "the body ends after `deleted`"
    );
    assert!(!sse.failed);
    assert!(nd.line(WAIT).await.is_none());
    assert!(!nd.failed, "a delete ends an NDJSON follow cleanly");
    // Following a deleted (unknown) stream is a 404.
    let r = api
        .get_with(
            "/v1/streams/d/events?follow=true",
            &[("accept", "text/event-stream")],
        )
        .await;
    assert_error(&r, 404, "not_found");
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_route_catches_up_goes_live_and_closes_on_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    write(&api, "w", 0, 10, 10, 0).await;
    let url = format!("ws://{}/v1/streams/w/ws?from=4", s.addr);
    let (mut ws, resp) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    assert!(resp.headers().get("x-vx-shard").is_some());
    write(&api, "w", 10, 5, 5, 0).await;
    for seq in 4..=15u64 {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let Message::Text(text) = msg else {
            panic!("expected a text message, got {msg:?}")
        };
        let v: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(v["seq"], seq);
        assert_eq!(v["stream"], "w");
    }
    api.send(reqwest::Method::DELETE, "/v1/streams/w", &[], None)
        .await;
    let msg = tokio::time::timeout(WAIT, ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Message::Close(Some(close)) = msg else {
        panic!("expected a close frame, got {msg:?}")
    };
    assert_eq!(u16::from(close.code), 1000);
    assert_eq!(close.reason.as_str(), "deleted");
    let _ = ws.close(None).await;
    // An unknown stream is refused before the upgrade, in the one error shape.
    let url = format!("ws://{}/v1/streams/nope/ws", s.addr);
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 404),
        other => panic!("expected a 404, got {other:?}"),
    }
    // Without an upgrade the route is a 400.
    assert_error(&api.get("/v1/streams/w/ws").await, 400, "bad_request");
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_replay_spaces_events_by_their_ts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server(tmp.path());
    let api = s.api.clone();
    // 11 events 200 ms apart in event time (and one out of order, sent at once after its
    // predecessor): at speed 4, 2 s of event time take 500 ms.
    let mut ls = Vec::new();
    for i in 0..11i64 {
        let ts = if i == 5 {
            1_000_000
        } else {
            1_000_000 + i * 200
        };
        ls.push(format!(r#"{{"stream":"pace","type":"tick","ts":{ts}}}"#));
    }
    assert_accepted(&api.post_lines(&ls).await, 11);
    let client = live_client();
    let started = Instant::now();
    let mut f = Follow::open(
        &client,
        &api,
        "/v1/streams/pace/events?pace=original&speed=4",
        &[],
    )
    .await;
    let mut arrivals = Vec::new();
    while let Some(v) = f.line(WAIT).await {
        arrivals.push((v["ts"].as_i64().unwrap(), started.elapsed()));
    }
    assert!(!f.failed);
    assert_eq!(arrivals.len(), 11);
    let t0 = arrivals[0].1;
    for (i, (ts, at)) in arrivals.iter().enumerate() {
        // Never early (the schedule only ever delays); late by at most a generous margin.
        let want = Duration::from_millis(
            (ts.max(&arrivals[i.saturating_sub(1)].0) - 1_000_000) as u64 / 4,
        );
        let got = at.saturating_sub(t0);
        assert!(
            got + Duration::from_millis(30) >= want,
            "event {i} at {got:?}, due {want:?}"
        );
        assert!(
            got <= want + Duration::from_secs(2),
            "event {i} at {got:?}, due {want:?}"
        );
    }
    // With follow, live events go as they come, whatever their ts.
    let mut f = Follow::sse(
        &client,
        &api,
        "pace",
        "follow=true&pace=original&speed=100",
        &[],
    )
    .await;
    f.until_seq(1, 11, WAIT).await;
    let far = r#"{"stream":"pace","type":"tick","ts":1003600000}"#.to_string();
    let sent = Instant::now();
    assert_accepted(&api.post_lines(&[far]).await, 1);
    assert_eq!(f.event(WAIT).await.unwrap().id, Some(12));
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "an hour of event time is not waited for"
    );
    // speed out of range, an unknown pace, speed without pace: 400.
    for q in [
        "pace=original&speed=0.05",
        "pace=original&speed=101",
        "pace=fast",
        "speed=2",
    ] {
        let r = api.get(&format!("/v1/streams/pace/events?{q}")).await;
        assert_error(&r, 400, "bad_request");
    }
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_followers_shutdown_and_bad_live_queries() {
    let tmp = tempfile::tempdir().unwrap();
    let s = server_with(tmp.path(), "server:\n  max_followers: 2\n");
    let api = s.api.clone();
    write(&api, "x", 0, 3, 3, 0).await;
    let client = live_client();
    let mut a = Follow::sse(&client, &api, "x", "follow=true", &[]).await;
    let url = format!("ws://{}/v1/streams/x/ws", s.addr);
    let (mut b, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    a.until_seq(1, 3, WAIT).await;
    let r = api
        .get_with(
            "/v1/streams/x/events?follow=true",
            &[("accept", "text/event-stream")],
        )
        .await;
    let e = assert_error(&r, 503, "not_ready");
    assert_eq!(e["limit"], "server.max_followers");
    assert_eq!(e["max"], 2);
    assert!(r.header("retry-after").is_some());
    // A bounded replay (no follow) is not a follower.
    let r = api
        .get_with("/v1/streams/x/events", &[("accept", "text/event-stream")])
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text().matches("id: ").count(), 3);
    let m = metrics(&api).await;
    assert_eq!(metric_sum(&m, "vx_followers"), 2.0);
    assert_eq!(metric_sum(&m, "vx_followers_rejected_total"), 1.0);
    // follow with a format that cannot go on forever: 406.
    let r = api
        .get_with(
            "/v1/streams/x/events?follow=true",
            &[("accept", "application/json")],
        )
        .await;
    assert_error(&r, 406, "not_acceptable");
    assert_error(
        &api.get("/v1/streams/x/events?follow=maybe").await,
        400,
        "bad_request",
    );
    // SIGTERM ends the followers at once: the SSE body ends cleanly, the socket gets 1001.
    let started = Instant::now();
    s.proc.signal("TERM");
    a.until_end(WAIT).await;
    let mut closed = None;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(WAIT, b.next()).await {
        if let Message::Close(c) = msg {
            closed = c;
            break;
        }
    }
    let _ = b.send(Message::Close(None)).await;
    assert_eq!(closed.map(|c| u16::from(c.code)), Some(1001));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not held to server.shutdown_timeout"
    );
    let mut s = s;
    let status = s.proc.wait_exit(WAIT).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", s.proc.logs.text());
}
