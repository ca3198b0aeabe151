//! The followers against scripted servers, and the SSE of a chunked body read in any pieces.

use super::follower::{FollowCtx, Phase, follower};
use super::*;
use crate::http::chunked::{BodyDecoder, BodyKind};
use crate::recorder::Op;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vx_proto::sse::{Id, KeepData, SseParser};

#[test]
fn sse_over_a_chunked_body_split_anywhere() {
    // The server's chunk boundaries fall anywhere in the SSE text.
    let mut events = Vec::new();
    for seq in 1..=200u64 {
        events.extend_from_slice(
            format!(
                "id: {seq}\ndata: {{\"seq\":{seq},\"pad\":\"{}\"}}\n\n",
                "x".repeat(100)
            )
            .as_bytes(),
        );
    }
    let mut body = Vec::new();
    for chunk in events.chunks(333) {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(chunk);
        body.extend_from_slice(b"\r\n");
    }
    for size in [1, 2, 5, 64, 1000, READ_BUF] {
        let mut dec = BodyDecoder::new(BodyKind::Chunked);
        let mut sse = SseParser::new(KeepData::Named, 1 << 10);
        let mut seqs = Vec::new();
        for piece in body.chunks(size) {
            let r = dec.feed(piece, &mut |d| {
                let parsed = sse.feed(d, &mut |e| {
                    if let Some(Id::Seq(s)) = e.id {
                        seqs.push(s);
                    }
                });
                assert_eq!(parsed, Ok(()));
            });
            assert_eq!(r, Ok(()));
        }
        assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "reads of {size}");
    }
}

/// A scripted server: answers each connection's request with the next of `answers`
/// (written in the given pieces, a pause between them; then closed if the answer says so,
/// else held open), and keeps the requests it got.
async fn script(
    answers: Vec<(Vec<Vec<u8>>, bool)>,
) -> (Endpoint, tokio::task::JoinHandle<Vec<String>>) {
    let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let task = tokio::spawn(async move {
        let mut requests = Vec::new();
        let mut held = Vec::new();
        for (pieces, close) in answers {
            let Ok((mut s, _)) = listener.accept().await else {
                break;
            };
            let mut req = Vec::new();
            while memchr::memmem::find(&req, b"\r\n\r\n").is_none() {
                let mut b = [0u8; 1024];
                match s.read(&mut b).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&b[..n]),
                }
            }
            requests.push(String::from_utf8_lossy(&req).into_owned());
            for p in pieces {
                let _ = s.write_all(&p).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !close {
                held.push(s);
            }
        }
        requests
    });
    (Endpoint::Http(addr), task)
}

fn chunk(text: &str) -> Vec<u8> {
    format!("{:x}\r\n{text}\r\n", text.len()).into_bytes()
}

const OK_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

fn ctx(ep: Endpoint, acks: Arc<AckTable>) -> Arc<FollowCtx> {
    let now = Instant::now();
    Arc::new(FollowCtx {
        host: vec!["h".into()],
        endpoints: vec![ep],
        token: None,
        acks,
        shards: vec![Arc::new(Mutex::new(LaneRecorder::new(
            now,
            now + Duration::from_secs(3600),
        )))],
        timeout: Duration::from_secs(5),
    })
}

#[tokio::test]
async fn a_follower_checks_its_stream_resumes_after_a_break_and_ends_on_deleted() {
    // First connection: events 5 and 6 (the head and the first event in one write, the
    // next split mid-line), then the connection drops. Second: resumed after 6, events 7
    // and 8, then the stream is deleted.
    let first = vec![
        format!(
            "{OK_HEAD}{}",
            String::from_utf8_lossy(&chunk("retry: 1000\n\nid: 5\ndata: {}\n\n"))
        )
        .into_bytes(),
        chunk("id: 6\nda"),
        chunk("ta: {\"seq\":6}\n\n: heartbeat\n\n"),
    ];
    let second = vec![
        OK_HEAD.as_bytes().to_vec(),
        chunk("id: 7\ndata: {}\n\nid: 8\ndata: {}\n\n"),
        chunk("event: deleted\ndata: {}\n\n"),
        b"0\r\n\r\n".to_vec(),
    ];
    let (ep, server) = script(vec![(first, true), (second, false)]).await;
    let acks = Arc::new(AckTable::new("s".into(), 5, 10));
    // 5 and 6 acked before they arrive; 7 and 8 never (received "before ack").
    acks.ack(5, 6, Instant::now(), true);
    let c = ctx(ep, acks.clone());
    let (_phase_tx, phase) = watch::channel(Phase::Run);
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(follower(
        c.clone(),
        0,
        phase,
        tx,
        Arc::new(Semaphore::new(1)),
    ));
    assert_eq!(
        rx.recv().await.map(|(i, r)| (i, r.is_ok())),
        Some((0, true))
    );
    let out = match tokio::time::timeout(Duration::from_secs(10), task).await {
        Ok(Ok(o)) => o,
        other => panic!("{other:?}"),
    };
    assert!(out.connected && out.deleted);
    assert_eq!(out.reconnects, 1);
    assert_eq!(out.check.verdict(8), Verdict::default());
    assert_eq!(out.before_ack, 2);
    let requests = server.await.unwrap_or_default();
    assert!(
        requests[0].contains("follow=true&from=5 "),
        "{}",
        requests[0]
    );
    assert!(
        requests[1].contains("Last-Event-ID: 6\r\n"),
        "{}",
        requests[1]
    );
    // Four deliveries timed, two errors (the break, the deletion).
    let mut totals = Default::default();
    let mut errors = std::collections::BTreeMap::new();
    c.shards[0].lock().add_totals(
        &mut totals,
        &mut crate::recorder::LateAcc::new(),
        &mut errors,
    );
    let deliver = crate::recorder::named(totals).find(|(op, _)| *op == Op::Deliver);
    let Some((_, d)) = deliver else {
        panic!("no deliveries recorded")
    };
    assert_eq!((d.ok, d.errors), (4, 2), "{errors:?}");
    assert!(errors.keys().any(|e| e.contains("deleted")), "{errors:?}");
}

#[tokio::test]
async fn a_follower_is_small() {
    // A follower's memory at rest is its task's future (plus the socket's kernel buffers):
    // thousands of them must stay cheap. The read buffer is per worker thread, not here.
    let c = ctx(
        Endpoint::Http("127.0.0.1:1".into()),
        Arc::new(AckTable::new("s".into(), 1, 1)),
    );
    let (_phase_tx, phase) = watch::channel(Phase::Run);
    let (tx, _rx) = mpsc::channel(1);
    let f = follower(c, 0, phase, tx, Arc::new(Semaphore::new(1)));
    let size = std::mem::size_of_val(&f);
    eprintln!("follower future: {size} bytes");
    assert!(size < 4096, "a follower's future is {size} bytes");
}

#[tokio::test]
async fn a_refused_follower_says_why_and_a_drained_one_ends() {
    let body = r#"{"error":{"code":"not_ready","message":"too many followers"}}"#;
    let refused = vec![
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    ];
    let (ep, _server) = script(vec![(refused, false)]).await;
    let c = ctx(ep, Arc::new(AckTable::new("s".into(), 1, 10)));
    let (_phase_tx, phase) = watch::channel(Phase::Run);
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(follower(c, 3, phase, tx, Arc::new(Semaphore::new(1))));
    let got = rx
        .recv()
        .await
        .map(|(i, r)| (i, r.err().map(|e| e.to_string())));
    assert_eq!(got, Some((3, Some("HTTP 503 not_ready".to_string()))));
    assert!(matches!(task.await, Ok(o) if !o.connected));

    // A follower that has received through the drain target ends by itself.
    let (ep, _server) = script(vec![(
        vec![
            OK_HEAD.as_bytes().to_vec(),
            chunk("id: 1\ndata: {}\n\nid: 2\ndata: {}\n\n"),
        ],
        false,
    )])
    .await;
    let acks = Arc::new(AckTable::new("s".into(), 1, 10));
    let c = ctx(ep, acks.clone());
    let (phase_tx, phase) = watch::channel(Phase::Run);
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(follower(c, 0, phase, tx, Arc::new(Semaphore::new(1))));
    assert!(matches!(rx.recv().await, Some((0, Ok(())))));
    acks.ack(1, 2, Instant::now(), true);
    let _ = phase_tx.send(Phase::Drain(2));
    let out = match tokio::time::timeout(Duration::from_secs(5), task).await {
        Ok(Ok(o)) => o,
        other => panic!("{other:?}"),
    };
    assert_eq!(out.check.verdict(2), Verdict::default());
    let report = tally("s", 2, &acks, 2, &[out], 2.0, Some(0.01));
    // The second follower's outcome is missing: it counts as incomplete.
    assert_eq!((report.complete, report.with_gaps), (1, 1));
    assert_eq!(report.missing_events, 2);
    assert!(!report.passed);
}
