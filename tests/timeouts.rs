//! Stalled clients (docs/CONFIG.md `ingest.body_timeout`,
//! `server.frames_idle_timeout`; docs/API.md §3 408):
//! a request body that stops arriving is dropped with 408 `timeout` and its share of the
//! in-flight budget goes back to the others; a frames connection that stalls inside a frame,
//! or sits idle between frames, is closed with an ERROR frame `timeout`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::AsyncWriteExt;
use vx_client::{ClientError, Reply};

/// Bytes of the in-flight budget that bodies hold right now.
async fn inflight_bytes(server: &Server) -> u64 {
    let m = server.api.get("/metrics").await.text();
    metric_sum(&m, "vx_inflight_bytes") as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_body_gets_408_and_releases_its_budget() {
    let tmp = tempfile::tempdir().unwrap();
    // The whole in-flight budget is one body: a stalled body that holds most of it stops
    // every other body from being read until it is dropped.
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_BODY_TIMEOUT", "500ms")
        .env("VX_INGEST_MAX_BODY_BYTES", "64KiB")
        .env("VX_INGEST_MAX_INFLIGHT_BYTES", "64KiB")
        .env("VX_INGEST_MAX_EVENT_BYTES", "4KiB")
        .start();
    let line = "{\"stream\":\"stall\",\"type\":\"t\"}\n";
    let sent: String = line.repeat(60_000 / line.len());
    let mut stalled = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: {}\r\n\r\n",
        sent.len() + 4000
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(sent.as_bytes()).await.unwrap();
    let started = Instant::now();
    // The stalled body holds budget once the server has read what was sent (bounded wait).
    let held = loop {
        let held = inflight_bytes(&server).await;
        if held > 0 || started.elapsed() > Duration::from_secs(10) {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(held > 0, "the stalled body holds no budget");

    // Another producer's 8 KB body needs budget the stalled one holds: it is read once the
    // stalled body is dropped.
    let other = ndjson(
        &(0..200)
            .map(|i| Event::simple("other", "t", i, None))
            .collect::<Vec<_>>(),
    );
    let ok = server.api.post_events(Some(NDJSON), other, &[]).await;
    assert_accepted(&ok, 200);

    let answer = read_to_close(&mut stalled).await;
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "dropped before the timeout"
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"timeout\""), "{answer}");
    assert!(
        answer.to_lowercase().contains("connection: close"),
        "{answer}"
    );
    // Nothing of the stalled request was stored, and every byte of its budget is back: the
    // permit goes with the error, before the 408 is written.
    let (r, _) = server.api.replay("stall", "").await;
    assert_error(&r, 404, "not_found");
    assert_eq!(inflight_bytes(&server).await, 0);
    // A body that needs (nearly) the whole budget is read and stored.
    let mut whole = Vec::new();
    let mut len = 0;
    while len < 62 << 10 {
        let e = Event::simple("whole", "t", whole.len() as i64, None);
        len += e.to_json().len() + 1;
        whole.push(e);
    }
    let n = whole.len() as u64;
    let ok = server
        .api
        .post_events(Some(NDJSON), ndjson(&whole), &[])
        .await;
    assert_accepted(&ok, n);
    assert_eq!(inflight_bytes(&server).await, 0);
    let m = server.api.get("/metrics").await.text();
    assert!(
        m.lines()
            .any(|l| l.starts_with("vx_ingest_requests_rejected_total")
                && l.contains("reason=\"timeout\"")),
        "{m}"
    );
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_body_that_keeps_arriving_slowly_is_not_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_BODY_TIMEOUT", "1s")
        .start();
    // 2.4 s in all, but never 1 s without a byte: the timeout is per wait, not per body.
    let lines: Vec<String> = (0..8)
        .map(|i| format!("{{\"stream\":\"slow\",\"type\":\"t\",\"id\":\"{i}\"}}\n"))
        .collect();
    let len: usize = lines.iter().map(String::len).sum();
    let mut s = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    for l in &lines {
        s.write_all(l.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"accepted\":8"), "{answer}");
    server.stop_clean();
}

fn frames_cfg(tmp: &std::path::Path) -> ServerConfig {
    ServerConfig::new(tmp.join("data"))
        .args(["--frames-listen", "127.0.0.1:0"])
        .env("VX_INGEST_BODY_TIMEOUT", "500ms")
        .env("VX_SERVER_FRAMES_IDLE_TIMEOUT", "1s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frames_connection_stalled_inside_a_frame_is_closed_with_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_cfg(tmp.path()).start();
    let (mut tx, mut rx) = frames_client(&server).await.split();
    let evs = plain_events("fstall", 50);
    let frame = batch_frame(7, &evs);
    tx.send_raw(&frame[..frame.len() / 2]).await.unwrap();
    let started = Instant::now();
    let mut replies = Vec::new();
    let end = loop {
        match rx.next_reply().await {
            Ok(r) => replies.push(r),
            Err(e) => break e,
        }
    };
    assert!(started.elapsed() >= Duration::from_millis(500));
    // The cut-off batch is answered, then the connection is closed.
    assert!(
        matches!(replies.as_slice(), [Reply::Rejected(e)]
            if e.request_id == 7 && e.code == "timeout" && e.limit.as_deref() == Some("ingest.body_timeout")),
        "{replies:?}"
    );
    match end {
        ClientError::Server(e) => {
            assert_eq!((e.request_id, e.code.as_str()), (0, "timeout"));
            assert!(e.message.contains("ingest.body_timeout"), "{}", e.message);
            assert_eq!(e.limit.as_deref(), Some("ingest.body_timeout"));
        }
        other => panic!("expected ERROR timeout, got {other}"),
    }
    let (r, _) = server.api.replay("fstall", "").await;
    assert_error(&r, 404, "not_found");
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_frames_connection_is_closed_after_the_idle_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_cfg(tmp.path()).start();
    // Busy, then idle: each batch is answered; silence past 1 s closes the connection.
    let (mut tx, mut rx) = frames_client(&server).await.split();
    for _ in 0..3 {
        let evs = plain_events("fidle", 1);
        tx.send_batch(&evs[..], None).await.unwrap();
        assert!(matches!(rx.next_reply().await.unwrap(), Reply::Ack(_)));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let started = Instant::now();
    match rx.next_reply().await {
        Err(ClientError::Server(e)) => {
            assert_eq!((e.request_id, e.code.as_str()), (0, "timeout"));
            assert!(
                e.message.contains("server.frames_idle_timeout"),
                "{}",
                e.message
            );
            assert_eq!(e.limit.as_deref(), Some("server.frames_idle_timeout"));
        }
        other => panic!("expected ERROR timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(500));
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frame_that_keeps_arriving_slowly_is_not_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_cfg(tmp.path()).start();
    let (mut tx, mut rx) = frames_client(&server).await.split();
    let evs = plain_events("fslow", 20);
    let frame = batch_frame(9, &evs);
    // 6 pieces 200 ms apart: 1 s inside one frame, but never 500 ms (the body timeout)
    // without a byte. The timeout is per wait, as for HTTP bodies.
    for piece in frame.chunks(frame.len().div_ceil(6)) {
        tx.send_raw(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match rx.next_reply().await.unwrap() {
        Reply::Ack(a) => assert_eq!((a.request_id, a.accepted), (9, 20)),
        other => panic!("expected ACK, got {other:?}"),
    }
    server.stop_clean();
}
