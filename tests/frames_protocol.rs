//! Binary frames over persistent connections (docs/API.md §9, §4.3;
//! docs/PROTOCOL.md) against the real binary, driven with `vx-client`: the
//! handshake and pipelined batches over TCP and a Unix socket, acks matched by request id, auth
//! in the handshake, connection-level errors (version, magic, oversize length prefix, bad
//! frames), per-batch refusals that leave the other batches alone, per-stream order, frames
//! over HTTP (ingest bodies and replay output), shutdown, and flow control: a pipelined client
//! saturating a tiny queue is slowed down by the server not reading, never refused, and loses
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vx_client::{
    BatchOptions, Client, ClientError, Durability, Kind, Num, Options, Receiver, Reply, WireEvent,
};
use vx_proto::frames::{self, BatchHead, Frame, Hello, MAGIC, encode_batch, parse_frame};

const FRAMES: &str = "application/vnd.veltrix.frames";

/// A test event in binary form: the same event the JSON helpers send.
fn wire(e: &Event) -> WireEvent<'_> {
    WireEvent {
        stream: &e.stream,
        entity: e.entity.as_deref(),
        ty: &e.ty,
        ts: match &e.ts {
            Ts::Ms(ms) | Ts::Rfc3339(_, ms) => Some(*ms),
            Ts::Absent(..) => None,
        },
        kind: e.kind.and_then(Kind::parse).unwrap_or_default(),
        value: e.value.as_deref().map(|v| {
            v.parse::<i64>()
                .map(Num::Int)
                .unwrap_or_else(|_| Num::Float(v.parse().unwrap()))
        }),
        id: e.id.as_deref(),
        data: e.data.as_ref().map(|(sent, _)| sent.as_str()),
    }
}

fn wires(events: &[Event]) -> Vec<WireEvent<'_>> {
    events.iter().map(wire).collect()
}

fn frames_server(tmp: &Path) -> ServerConfig {
    ServerConfig::new(tmp.join("data")).args(["--frames-listen", "127.0.0.1:0"])
}

async fn connect(server: &Server) -> Client {
    Client::connect_tcp(frames_addr(server), &Options::default())
        .await
        .unwrap()
}

/// Varied events (every field rule) for `stream`, numbered from `from`; events without a `ts`
/// get the receive window from `t0` on.
fn varied(rng: &mut Rng, stream: &str, from: u64, n: u64, t0: i64) -> Vec<Event> {
    (from..from + n)
        .map(|i| {
            let mut e = varied_event(rng, stream, i);
            if let Ts::Absent(..) = e.ts {
                e.ts = Ts::Absent(t0, i64::MAX);
            }
            e
        })
        .collect()
}

/// Read replies until the server closes; returns them in arrival order and the way it ended.
async fn read_all(mut rx: Receiver) -> (Vec<Reply>, ClientError) {
    let mut replies = Vec::new();
    loop {
        match rx.next_reply().await {
            Ok(r) => replies.push(r),
            Err(e) => return (replies, e),
        }
    }
}

fn ack(r: &Reply) -> &vx_client::Ack {
    match r {
        Reply::Ack(a) => a,
        other => panic!("expected an ACK, got {other:?}"),
    }
}

fn refused<'a>(r: &'a Reply, code: &str) -> &'a vx_client::ErrorFrame {
    match r {
        Reply::Rejected(e) if e.code == code => e,
        other => panic!("expected an ERROR {code}, got {other:?}"),
    }
}

/// Every event of `stream` replayed as frames must equal the NDJSON replay, byte for byte once
/// rendered canonically.
async fn check_frames_replay(api: &Api, stream: &str, lines: &[Line]) {
    let r = api
        .get_with(
            &format!("/v1/streams/{}/events?limit=100000", enc(stream)),
            &[("accept", FRAMES)],
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.header("content-type"), Some(FRAMES));
    let mut got = Vec::new();
    vx_client::for_each_replayed(&r.body, |seq, ev| {
        let mut out = Vec::new();
        vx_proto::canonical::write_event(&mut out, &ev, seq);
        got.push(String::from_utf8(out).unwrap());
    })
    .unwrap();
    let want: Vec<&str> = lines.iter().map(|l| l.raw.as_str()).collect();
    assert_eq!(got, want, "frames replay of {stream:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batches_over_tcp_and_uds_are_acked_stored_and_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("frames.sock");
    // A socket file left by a process that is gone: removed at start-up, like --uds.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let server = frames_server(tmp.path())
        .args(["--frames-uds", sock.to_str().unwrap()])
        .start();
    let api = server.api.clone();
    let mut rng = Rng::new(42);
    let t0 = now_ms();

    // TCP: three batches over two streams, then a ping.
    let mut client = connect(&server).await;
    let s = client.session();
    assert_eq!((s.version, s.max_frame, s.window), (1, 64 << 20, 64));
    let mut sent: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    let mut ids = Vec::new();
    for b in 0..3 {
        let evs: Vec<Event> = ["f/tcp-a", "f/tcp-b"]
            .iter()
            .flat_map(|st| varied(&mut rng, st, b * 10, 10, t0))
            .collect();
        ids.push(client.send_batch(&wires(&evs), None).await.unwrap());
        for e in evs {
            sent.entry(e.stream.clone()).or_default().push(e);
        }
    }
    let mut answered = HashSet::new();
    for _ in 0..3 {
        let reply = client.next_reply().await.unwrap();
        let a = ack(&reply);
        assert_eq!((a.accepted, a.duplicates), (20, 0), "{a:?}");
        assert_eq!(a.durability, Durability::Fsync);
        assert_eq!(a.last_seq.len(), 2, "{a:?}");
        answered.insert(a.request_id);
    }
    assert_eq!(answered, ids.iter().copied().collect::<HashSet<u64>>());
    let (mut tx, mut rx) = client.split();
    tx.ping(42).await.unwrap();
    assert_eq!(rx.next_reply().await.unwrap(), Reply::Pong(42));

    // The Unix socket, with a durability request.
    let mut uds = Client::connect_unix(&sock, &Options::default())
        .await
        .unwrap();
    let evs = varied(&mut rng, "f/uds", 0, 25, t0);
    let id = uds
        .send_batch(&wires(&evs), Some(Durability::Write))
        .await
        .unwrap();
    let reply = uds.next_reply().await.unwrap();
    let a = ack(&reply);
    assert_eq!((a.request_id, a.accepted), (id, 25));
    assert!(a.durability >= Durability::Write);
    assert_eq!(a.last_seq, vec![("f/uds".to_string(), 25)]);
    sent.insert("f/uds".into(), evs);

    // Frames over HTTP: one request made of BATCH frames.
    let evs = varied(&mut rng, "f/http", 0, 12, t0);
    let w = wires(&evs);
    let mut body = vx_client::http_body(&w[..5]).unwrap();
    body.extend(vx_client::http_body(&w[5..]).unwrap());
    let r = api.post_events(Some(FRAMES), body, &[]).await;
    assert_eq!(last_seq_map(&assert_accepted(&r, 12))["f/http"], 12);
    sent.insert("f/http".into(), evs);
    // Durability in a frame (it belongs in the header), and a bad event at request index 6.
    let mut body = Vec::new();
    let head = BatchHead {
        durability: Some(frames::Durability::Fsync),
        ..BatchHead::default()
    };
    let one = [Event::simple("f/http-bad", "t", 1, None)];
    encode_batch(&mut body, &head, &wires(&one)).unwrap();
    let r = api.post_events(Some(FRAMES), body, &[]).await;
    assert_error(&r, 400, "malformed");
    let mut bad: Vec<Event> = (0..8)
        .map(|i| Event::simple("f/http-bad", "t", i, None))
        .collect();
    bad[6].ty = "no spaces".into();
    let mut body = vx_client::http_body(&wires(&bad[..4])).unwrap();
    body.extend(vx_client::http_body(&wires(&bad[4..])).unwrap());
    let r = api.post_events(Some(FRAMES), body, &[]).await;
    let err = assert_error(&r, 422, "invalid_event");
    assert_eq!(
        (err["index"].as_u64(), err["field"].as_str()),
        (Some(6), Some("type"))
    );
    assert_eq!(api.stream_info("f/http-bad").await.status, 404);

    // Everything replays as sent, as NDJSON and as frames.
    for (stream, evs) in &sent {
        let lines = api.replay_all(stream).await;
        let refs: Vec<&Event> = evs.iter().collect();
        check_stream(stream, &lines, &refs);
        check_frames_replay(&api, stream, &lines).await;
    }

    // Shutdown: an open connection is told, then closed; the socket file goes away.
    let reader = tokio::spawn(read_all(rx));
    let logs = tokio::task::spawn_blocking(move || server.stop_clean())
        .await
        .unwrap();
    let (replies, end) = reader.await.unwrap();
    assert!(replies.is_empty(), "{replies:?}");
    match end {
        ClientError::Server(e) => assert_eq!(e.code, "not_ready", "{e:?}"),
        other => panic!("expected a not_ready connection error, got {other}\n{logs}"),
    }
    drop(tx);
    assert!(!sock.exists(), "frames socket removed at shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_handshake_checks_bearer_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_server(tmp.path())
        .with_scoped_tokens(tmp.path())
        .start();
    let addr = frames_addr(&server);
    for (token, code) in [
        (None, "unauthorized"),
        (Some("ingest-secreT"), "unauthorized"),
        (Some("read-secret"), "forbidden"),
    ] {
        let opts = Options {
            token: token.map(str::to_string),
            ..Options::default()
        };
        match Client::connect_tcp(addr, &opts).await {
            Err(ClientError::Server(e)) => {
                assert_eq!(
                    (e.code.as_str(), e.request_id),
                    (code, 0),
                    "{token:?}: {e:?}"
                );
            }
            Err(e) => panic!("{token:?}: {e}"),
            Ok(_) => panic!("{token:?}: the handshake succeeded"),
        }
    }
    for token in ["ingest-secret", "admin-secret"] {
        let opts = Options {
            token: Some(token.into()),
            ..Options::default()
        };
        let mut c = Client::connect_tcp(addr, &opts).await.unwrap();
        let evs = [Event::simple("auth/s", "t", 1, None)];
        c.send_batch(&wires(&evs), None).await.unwrap();
        assert_eq!(ack(&c.next_reply().await.unwrap()).accepted, 1);
    }
    server.stop_clean();
}

/// Raw bytes to the frames port; everything the server sends until it closes.
async fn raw_exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(REQUEST_TIMEOUT, s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .unwrap();
    out
}

/// The connection-level ERROR a refused handshake answers with.
fn handshake_error(answer: &[u8]) -> vx_client::ErrorFrame {
    assert_eq!(answer.get(..4), Some(&MAGIC[..]), "{answer:?}");
    match parse_frame(&answer[4..], u32::MAX).unwrap() {
        Some((Frame::Error(e), n)) => {
            assert_eq!(n, answer.len() - 4, "nothing after the error");
            assert_eq!(e.request_id, 0);
            e
        }
        other => panic!("expected an ERROR frame, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn protocol_errors_end_the_connection_with_an_error_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_server(tmp.path())
        .env("VX_INGEST_MAX_BODY_BYTES", "65536")
        .env("VX_INGEST_MAX_EVENT_BYTES", "4096")
        .start();
    let addr = frames_addr(&server);

    // No common version.
    let mut hello = MAGIC.to_vec();
    Frame::Hello(Hello {
        min_version: 2,
        max_version: 3,
        token: None,
    })
    .encode(&mut hello)
    .unwrap();
    let e = handshake_error(&raw_exchange(addr, &hello).await);
    assert_eq!((e.code.as_str(), e.max), ("bad_request", Some(1)), "{e:?}");
    // Not a frames client at all.
    let e = handshake_error(&raw_exchange(addr, b"GET / HTTP/1.1\r\n\r\n").await);
    assert_eq!(e.code, "malformed");

    // After a good batch: a length prefix over the limit is refused from the prefix alone
    // (none of its body is ever sent), after the batch in flight is answered.
    let c = connect(&server).await;
    assert_eq!(c.session().max_frame, 65536);
    let (mut tx, rx) = c.split();
    let evs = [Event::simple("pe/s", "t", 1, None)];
    let id = tx.send_batch(&wires(&evs), None).await.unwrap();
    tx.send_raw(&[0x01, 0x00, 0x01, 0x00, 0x03]).await.unwrap();
    let (replies, end) = read_all(rx).await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(ack(&replies[0]).request_id, id);
    match end {
        ClientError::Server(e) => {
            assert_eq!(e.code, "too_large");
            assert_eq!(e.limit.as_deref(), Some("ingest.max_body_bytes"));
            assert_eq!(e.max, Some(65536));
        }
        other => panic!("expected too_large, got {other}"),
    }

    // Frames a client may not send, and request id 0.
    let mut ack_frame = Vec::new();
    Frame::Ack(vx_client::Ack {
        request_id: 1,
        accepted: 0,
        duplicates: 0,
        durability: Durability::Write,
        queue_fill: 0,
        last_seq: Vec::new(),
        position: None,
    })
    .encode(&mut ack_frame)
    .unwrap();
    let mut zero = Vec::new();
    encode_batch(&mut zero, &BatchHead::default(), &wires(&evs)).unwrap();
    for bad in [ack_frame, vec![0, 0, 0, 0, 0x7f], zero] {
        let (mut tx, rx) = connect(&server).await.split();
        tx.send_raw(&bad).await.unwrap();
        let (replies, end) = read_all(rx).await;
        assert!(replies.is_empty(), "{replies:?}");
        assert!(
            matches!(&end, ClientError::Server(e) if e.code == "malformed"),
            "{end}"
        );
    }
    // None of it stored anything beyond the one good batch.
    assert_eq!(api_events(&server.api, "pe/s").await, 1);
    server.stop_clean();
}

async fn api_events(api: &Api, stream: &str) -> usize {
    api.replay_all(stream).await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_batches_do_not_affect_the_others_and_acks_match_by_id() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_server(tmp.path()).start();
    let (mut tx, rx) = connect(&server).await.split();
    let reader = tokio::spawn(read_all(rx));

    let batch = |from: i64| -> Vec<Event> {
        (from..from + 5)
            .map(|i| Event::simple("r/a", "t", i, Some(format!("r-{i}"))))
            .collect()
    };
    let b1 = batch(0);
    let mut b2 = batch(5);
    b2[1].ty = "not valid".into();
    let b3 = batch(10);
    let b6 = batch(15);
    let two_streams = vec![
        Event::simple("r/a", "t", 1, None),
        Event::simple("r/b", "t", 1, None),
    ];
    let fresh = vec![Event::simple("r/a", "t", 99, Some("fresh".into()))];
    let plain = BatchOptions::default();
    let expect = |seq| BatchOptions {
        durability: None,
        expected_last_seq: Some(seq),
    };
    // All of it in one write: the server reads and answers pipelined batches.
    let none: &[Event] = &[];
    let plan: Vec<(&[Event], BatchOptions)> = vec![
        (b1.as_slice(), plain),
        (b2.as_slice(), plain),
        (b3.as_slice(), plain),
        (fresh.as_slice(), expect(0)),
        (two_streams.as_slice(), expect(3)),
        (b6.as_slice(), plain),
        (none, plain),
        (b1.as_slice(), plain),
        // The retry of a stored conditional write is a duplicate, not a conflict.
        (&b1[..1], expect(0)),
    ];
    let mut ids = Vec::new();
    for (evs, opts) in &plan {
        ids.push(tx.queue_batch(&wires(evs), *opts).unwrap());
    }
    tx.close().await.unwrap();
    let (replies, end) = reader.await.unwrap();
    assert!(matches!(end, ClientError::Closed), "{end}");

    let order: Vec<u64> = replies.iter().filter_map(Reply::request_id).collect();
    let by_id: BTreeMap<u64, &Reply> = replies
        .iter()
        .map(|r| (r.request_id().unwrap(), r))
        .collect();
    assert_eq!(
        by_id.len(),
        replies.len(),
        "one answer per batch: {order:?}"
    );
    assert_eq!(by_id.keys().copied().collect::<Vec<_>>(), ids);
    if order != ids {
        eprintln!("answers arrived out of send order: {order:?}");
    }
    let r = |i: usize| by_id[&ids[i]];
    assert_eq!(ack(r(0)).last_seq, vec![("r/a".to_string(), 5)]);
    let e = refused(r(1), "invalid_event");
    assert_eq!((e.index, e.field.as_deref()), (Some(1), Some("type")));
    assert_eq!(ack(r(2)).last_seq, vec![("r/a".to_string(), 10)]);
    assert_eq!(refused(r(3), "conflict").last_seq, Some(10));
    refused(r(4), "bad_request");
    assert_eq!(ack(r(5)).last_seq, vec![("r/a".to_string(), 15)]);
    assert_eq!(ack(r(6)).accepted, 0);
    let dup = ack(r(7));
    assert_eq!((dup.accepted, dup.duplicates), (0, 5));
    let retry = ack(r(8));
    assert_eq!((retry.accepted, retry.duplicates), (0, 1));
    assert_eq!(retry.last_seq, vec![("r/a".to_string(), 1)]);

    let lines = server.api.replay_all("r/a").await;
    let stored: Vec<&Event> = b1.iter().chain(&b3).chain(&b6).collect();
    check_stream("r/a", &lines, &stored);
    assert_eq!(server.api.stream_info("r/b").await.status, 404);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_batches_keep_send_order_per_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let server = frames_server(tmp.path()).args(["--shards", "4"]).start();
    const CONNS: usize = 3;
    const BATCHES: usize = 80;
    let mut tasks = Vec::new();
    for c in 0..CONNS {
        let (mut tx, rx) = connect(&server).await.split();
        let reader = tokio::spawn(read_all(rx));
        tasks.push(tokio::spawn(async move {
            let levels = [
                None,
                Some(Durability::None),
                Some(Durability::Write),
                Some(Durability::Fsync),
            ];
            for b in 0..BATCHES {
                // Batches of one or both of the connection's streams.
                let evs: Vec<Event> = (0..8)
                    .filter(|i| b % 3 != 0 || i % 2 == 0)
                    .map(|i| {
                        let stream = format!("ord/{c}-{}", i % 2);
                        Event::simple(&stream, "t", (b * 8 + i) as i64, Some(format!("{b}:{i}")))
                    })
                    .collect();
                tx.send_batch(&wires(&evs), levels[b % 4]).await.unwrap();
            }
            tx.close().await.unwrap();
            let (replies, end) = reader.await.unwrap();
            assert!(matches!(end, ClientError::Closed), "{end}");
            assert_eq!(replies.len(), BATCHES);
            replies.iter().for_each(|r| {
                ack(r);
            });
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for c in 0..CONNS {
        for half in 0..2 {
            let stream = format!("ord/{c}-{half}");
            let lines = server.api.replay_all(&stream).await;
            let ts: Vec<i64> = lines
                .iter()
                .map(|l| l.value["ts"].as_i64().unwrap())
                .collect();
            let mut sorted = ts.clone();
            sorted.sort_unstable();
            assert_eq!(ts, sorted, "{stream}: stored in send order");
            let seqs: Vec<u64> = lines.iter().map(Line::seq).collect();
            assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
        }
    }
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn saturating_a_tiny_queue_stalls_reading_then_recovers_losing_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // 16 events per shard, mark 14; every batch is larger than that, so a shard holding one
    // batch refuses the next until it is written (fsync'ed).
    let server = frames_server(tmp.path())
        .args(["--fsync", "always", "--shards", "2"])
        .env("VX_INGEST_QUEUE_CAPACITY", "16")
        .start();
    const CONNS: u64 = 4;
    const BATCHES: u64 = 40;
    const EVENTS: u64 = 24;
    let max_outstanding = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CONNS {
        let (mut tx, mut rx) = connect(&server).await.split();
        let sent = Arc::new(AtomicU64::new(0));
        let outstanding = Arc::clone(&max_outstanding);
        let sent_r = Arc::clone(&sent);
        let reader = tokio::spawn(async move {
            let mut acked = Vec::new();
            loop {
                match rx.next_reply().await {
                    Ok(r) => {
                        let a = ack(&r).clone();
                        assert_eq!((a.accepted, a.duplicates), (EVENTS, 0), "{a:?}");
                        acked.push(a.request_id);
                        let behind = sent_r.load(Ordering::SeqCst) - acked.len() as u64;
                        outstanding.fetch_max(behind, Ordering::SeqCst);
                    }
                    Err(ClientError::Closed) => return acked,
                    Err(e) => panic!("connection {c}: {e}"),
                }
            }
        });
        tasks.push(tokio::spawn(async move {
            let mut ids = BTreeMap::new();
            for b in 0..BATCHES {
                let stream = format!("sat/{c}-{}", b % 2);
                let evs: Vec<Event> = (0..EVENTS)
                    .map(|i| Event::simple(&stream, "t", i as i64, Some(format!("{b}/{i}"))))
                    .collect();
                sent.fetch_add(1, Ordering::SeqCst);
                let id = tx.send_batch(&wires(&evs), None).await.unwrap();
                ids.insert(id, evs);
            }
            tx.close().await.unwrap();
            let acked = reader.await.unwrap();
            assert_eq!(acked.len() as u64, BATCHES, "every batch acked");
            ids
        }));
    }
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in tasks {
        for (_, evs) in t.await.unwrap() {
            for e in evs {
                sent.entry(e.stream).or_default().push(e.id.unwrap());
            }
        }
    }

    // The server stopped reading instead of refusing: stalls counted, no refusal at all.
    let metrics = server.api.get("/metrics").await.text();
    let stalls = metric_sum(&metrics, "vx_frames_stalls_total");
    assert!(stalls > 0.0, "no stall recorded:\n{metrics}");
    let refused = metrics
        .lines()
        .filter(|l| l.starts_with("vx_ingest_requests_rejected_total") && l.contains("frames"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>();
    assert_eq!(refused, 0.0, "{metrics}");
    assert!(max_outstanding.load(Ordering::SeqCst) > 0);
    eprintln!(
        "stalls: {stalls}, most batches unanswered at once: {}",
        max_outstanding.load(Ordering::SeqCst)
    );

    // Nothing lost, nothing twice, per stream in order.
    for (stream, ids) in &sent {
        let lines = server.api.replay_all(stream).await;
        let got: Vec<String> = lines.iter().map(|l| l.id().unwrap().to_string()).collect();
        assert_eq!(&got, ids, "{stream}");
        let seqs: Vec<u64> = lines.iter().map(Line::seq).collect();
        assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    }

    // Recovered: a new connection's batch goes straight through.
    let mut c = connect(&server).await;
    let evs = [Event::simple("sat/after", "t", 1, None)];
    c.send_batch(&wires(&evs), None).await.unwrap();
    assert_eq!(ack(&c.next_reply().await.unwrap()).accepted, 1);
    server.stop_clean();
}

/// A rough end-to-end comparison of ingest throughput, printed, not asserted (timings on a
/// shared machine are noise): the same 161-byte events as NDJSON over HTTP, as frames bodies
/// over HTTP, and as pipelined frames over persistent connections. Bodies are encoded before
/// the clock starts, so the numbers are the server's; each is the best of three rounds. Run in
/// release mode:
/// `cargo test --release -p veltrix --test frames_protocol -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "timing, run by hand in release mode"]
async fn frames_vs_ndjson_throughput() {
    const CONNS: usize = 4;
    const REQUESTS: usize = 100;
    const BATCH: usize = 1000;
    let total = (CONNS * REQUESTS * BATCH) as f64;
    let fields = |prefix: &str, i: usize| {
        (
            format!("{prefix}/match-{}", i % 64),
            format!("player-{}", i % 1000),
            format!("evt-{i}"),
        )
    };
    for fsync in ["never", "always"] {
        let tmp = tempfile::tempdir().unwrap();
        let server = frames_server(tmp.path()).args(["--fsync", fsync]).start();
        let modes = ["ndjson-http", "frames-http", "frames-conn"];
        let mut best = [(0.0f64, 0.0f64); 3];
        for (round, m) in (0..3).flat_map(|r| (0..modes.len()).map(move |m| (r, m))) {
            let mode = modes[m];
            // Fresh streams and ids each round, so nothing is a duplicate.
            let prefix = format!("{mode}{round}");
            // Per connection, per request: the encoded body or frame.
            let bodies: Vec<Vec<Vec<u8>>> = (0..CONNS)
                .map(|c| {
                    (0..REQUESTS)
                        .map(|r| {
                            let owned: Vec<_> = (0..BATCH)
                                .map(|k| fields(&prefix, (c * REQUESTS + r) * BATCH + k))
                                .collect();
                            let data = "{\"weapon\":\"bow\",\"crit\":true}";
                            if mode == "ndjson-http" {
                                let mut body = String::new();
                                for (k, (stream, entity, id)) in owned.iter().enumerate() {
                                    body.push_str(&format!(
                                        "{{\"stream\":\"{stream}\",\"entity\":\"{entity}\",\
                                         \"type\":\"damage\",\"ts\":{},\"kind\":\"counter\",\
                                         \"value\":{},\"id\":\"{id}\",\"data\":{data}}}\n",
                                        1_732_000_000_000i64 + k as i64,
                                        k % 100
                                    ));
                                }
                                return body.into_bytes();
                            }
                            let evs: Vec<WireEvent<'_>> = owned
                                .iter()
                                .enumerate()
                                .map(|(k, (stream, entity, id))| WireEvent {
                                    stream,
                                    entity: Some(entity),
                                    ty: "damage",
                                    ts: Some(1_732_000_000_000 + k as i64),
                                    kind: Kind::Counter,
                                    value: Some(Num::Int((k % 100) as i64)),
                                    id: Some(id),
                                    data: Some(data),
                                })
                                .collect();
                            let head = BatchHead {
                                request_id: r as u64 + 1,
                                ..BatchHead::default()
                            };
                            let mut out = Vec::new();
                            encode_batch(&mut out, &head, &evs).unwrap();
                            out
                        })
                        .collect()
                })
                .collect();
            let bytes: usize = bodies.iter().flatten().map(Vec::len).sum();
            let addr = frames_addr(&server);
            let start = std::time::Instant::now();
            let mut tasks = Vec::new();
            for conn in bodies {
                let api = server.api.clone();
                tasks.push(tokio::spawn(async move {
                    match mode {
                        "frames-conn" => {
                            let c = Client::connect_tcp(addr, &Options::default())
                                .await
                                .unwrap();
                            let (mut tx, mut rx) = c.split();
                            let reader = tokio::spawn(async move {
                                for _ in 0..REQUESTS {
                                    assert_eq!(ack(&rx.next_reply().await.unwrap()).accepted, 1000);
                                }
                            });
                            for frame in &conn {
                                tx.send_raw(frame).await.unwrap();
                            }
                            reader.await.unwrap();
                        }
                        _ => {
                            let ct = if mode == "ndjson-http" {
                                NDJSON
                            } else {
                                FRAMES
                            };
                            for body in conn {
                                let r = api.post_events(Some(ct), body, &[]).await;
                                assert_accepted(&r, BATCH as u64);
                            }
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            if total / secs > best[m].0 {
                best[m] = (total / secs, bytes as f64 / secs / 1e6);
            }
            if round == 2 {
                eprintln!(
                    "fsync {fsync:6} {mode:12}: {:8.0} events/s, {:6.1} MB/s on the wire \
                     ({:.0} bytes/event)",
                    best[m].0,
                    best[m].1,
                    bytes as f64 / total
                );
            }
        }
        server.stop_clean();
    }
}
