//! Connections bounded in time and number (`server.header_timeout`,
//! `server.keepalive_timeout`, `server.max_connections`; docs/CONFIG.md): a connection that
//! sends half a request head, or nothing, is closed without an answer; an idle kept-alive one
//! is closed, but not before its own timeout; past the limit, shared by every listener (HTTP,
//! frames, the Redis protocol), a new connection is refused and counted (an HTTP one gets 503
//! `not_ready`); a frames client that stops reading its acks is closed and the server stays
//! healthy.
//!
//! Timeouts are small; the bounds checked are generous, so a slow machine only waits longer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a connection may stay open past its timeout before the test fails.
const BOUND: Duration = Duration::from_secs(10);

fn start(tmp: &std::path::Path, env: &[(&str, &str)]) -> Server {
    env.iter()
        .fold(ServerConfig::new(tmp.join("data")), |c, (k, v)| {
            c.env(*k, *v)
        })
        .start()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(BOUND)).unwrap();
    s
}

/// What the server sends until it closes the connection; fails if it is still open after
/// [`BOUND`]. A reset counts as closed.
fn read_until_closed(s: &mut impl Read) -> String {
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("still open after {BOUND:?} ({e}); read so far: {out:?}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `GET /metrics` on a new connection, retried until one is served (a place may take a
/// moment to free after a close); fails past `deadline`.
fn metrics_once_served(addr: SocketAddr, deadline: Instant) -> String {
    loop {
        let mut s = connect(addr);
        let mut r = BufReader::new(s.try_clone().unwrap());
        let ask = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let answer = s
            .write_all(ask.as_bytes())
            .and_then(|()| read_response(&mut r));
        if let Ok((200, _, body)) = answer {
            return String::from_utf8(body).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no connection served: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `vx_connections_refused_total` for `listener`.
fn refusals(metrics: &str, listener: &str) -> f64 {
    let series = format!("vx_connections_refused_total{{listener=\"{listener}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series}in {metrics}"))
        .parse()
        .unwrap()
}

/// Debian's `redis-cli` against `addr`, once, whatever its exit status (scripts/test installs
/// redis-tools; missing, the test fails).
fn redis_cli_once(addr: SocketAddr, args: &[&str]) -> std::process::Output {
    std::process::Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli is needed (Debian: apt-get install redis-tools; scripts/test does)")
}

fn healthz(addr: SocketAddr) -> String {
    format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n")
}

#[test]
fn half_a_request_head_is_closed_without_an_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), &[("VX_SERVER_HEADER_TIMEOUT", "500ms")]);
    let mut s = connect(server.addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let started = Instant::now();
    assert_eq!(read_until_closed(&mut s), "");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // A complete head on a fresh connection is served as before.
    assert_eq!(raw_get_status(server.addr, "/healthz").unwrap(), 200);
    server.stop_clean();
}

#[test]
fn a_connection_that_sends_nothing_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), &[("VX_SERVER_HEADER_TIMEOUT", "500ms")]);
    let mut s = connect(server.addr);
    assert_eq!(read_until_closed(&mut s), "");
    server.stop_clean();
}

#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_keepalive_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(
        tmp.path(),
        &[
            ("VX_SERVER_HEADER_TIMEOUT", "300ms"),
            ("VX_SERVER_KEEPALIVE_TIMEOUT", "2s"),
        ],
    );
    let addr = server.addr;
    let mut s = connect(addr);
    let mut r = BufReader::new(s.try_clone().unwrap());
    s.write_all(healthz(addr).as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 200);
    // Idle longer than the header timeout: the keep-alive timeout applies, not that one.
    std::thread::sleep(Duration::from_millis(800));
    s.write_all(healthz(addr).as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 200);
    let idle = Instant::now();
    assert_eq!(read_until_closed(&mut r), "");
    assert!(
        idle.elapsed() >= Duration::from_millis(1500),
        "closed after {:?}, before server.keepalive_timeout",
        idle.elapsed()
    );
    server.stop_clean();
}

#[test]
fn past_max_connections_a_new_connection_gets_503_and_is_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), &[("VX_SERVER_MAX_CONNECTIONS", "3")]);
    let addr = server.addr;
    // Fill the places (the harness may hold one already): each held connection is served.
    let mut held = Vec::new();
    let (status, headers, body) = loop {
        assert!(held.len() <= 3, "more than 3 connections served");
        let mut s = connect(addr);
        let mut r = BufReader::new(s.try_clone().unwrap());
        // Read before writing: a refusal comes at once, unasked.
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let refused_at_once = matches!(s.peek(&mut [0u8; 1]), Ok(1));
        s.set_read_timeout(Some(BOUND)).unwrap();
        if refused_at_once {
            break read_response(&mut r).unwrap();
        }
        s.write_all(healthz(addr).as_bytes()).unwrap();
        match read_response(&mut r) {
            Ok((200, _, _)) => held.push(s),
            Ok(refused) => break refused,
            // Refused, and the answer lost to the reset of unread input: try again.
            Err(_) => {}
        }
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    assert_eq!(status, 503);
    assert_eq!(header("retry-after").as_deref(), Some("1"));
    assert_eq!(header("connection").as_deref(), Some("close"));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "not_ready", "{v}");
    assert_eq!(v["error"]["limit"], "server.max_connections", "{v}");
    assert_eq!(v["error"]["max"], 3, "{v}");

    // Closing one makes room for a new one (once the server has seen the close).
    drop(held.pop());
    let metrics = metrics_once_served(addr, Instant::now() + BOUND);
    assert!(refusals(&metrics, "http") >= 1.0, "{metrics}");
    assert!(metrics.contains("vx_connections_open "), "{metrics}");
    drop(held);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frames_client_that_never_reads_its_acks_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .args(["--frames-listen", "127.0.0.1:0", "--fsync", "never"])
        .env("VX_SERVER_HEADER_TIMEOUT", "500ms")
        .start();
    // A small receive buffer, so that unread acks fill it soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(frames_addr(&server)).await.unwrap();
    let (rd, wr) = stream.into_split();
    let client =
        vx_client::Client::handshake(Box::new(rd), Box::new(wr), &vx_client::Options::default())
            .await
            .unwrap();
    let (mut tx, rx) = client.split();
    let evs = plain_events("unread", 1);
    // Send until the server, blocked on acks nobody reads, gives up on the connection: the
    // sends then fail (a reset), or block for good if it were still open.
    let sending = async {
        loop {
            if tx.send_batch(&evs[..], None).await.is_err() {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), sending)
        .await
        .expect("the server still reads from a client that reads nothing");
    drop(rx);
    // The server is healthy: HTTP answers, and another frames client is served.
    assert_eq!(server.api.get("/healthz").await.status, 200);
    let (mut tx, mut rx) = frames_client(&server).await.split();
    tx.send_batch(&plain_events("after", 3)[..], None)
        .await
        .unwrap();
    assert!(matches!(
        rx.next_reply().await.unwrap(),
        vx_client::Reply::Ack(_)
    ));
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_limit_is_shared_by_every_listener() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .args([
            "--frames-listen",
            "127.0.0.1:0",
            "--resp-listen",
            "127.0.0.1:0",
        ])
        .env("VX_SERVER_MAX_CONNECTIONS", "2")
        .start();
    let (addr, frames, resp) = (server.addr, frames_addr(&server), resp_addr(&server));
    let deadline = Instant::now() + BOUND;
    // One frames and one HTTP connection fill the two places (retried while the harness's
    // readiness probe may still hold one).
    let _producer = loop {
        match vx_client::Client::connect_tcp(frames, &vx_client::Options::default()).await {
            Ok(c) => break c,
            Err(e) => assert!(Instant::now() < deadline, "no frames connection: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let http = tokio::task::spawn_blocking(move || {
        loop {
            let mut s = connect(addr);
            let mut r = BufReader::new(s.try_clone().unwrap());
            let served = s
                .write_all(healthz(addr).as_bytes())
                .and_then(|()| read_response(&mut r));
            if let Ok((200, _, _)) = served {
                return s;
            }
            assert!(Instant::now() < deadline, "no http connection: {served:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    // Full: a third connection is refused on every listener.
    assert!(
        vx_client::Client::connect_tcp(frames, &vx_client::Options::default())
            .await
            .is_err(),
        "a frames connection past the limit was served"
    );
    let refused = tokio::task::spawn_blocking(move || {
        let s = connect(addr);
        read_until_closed(&mut BufReader::new(s))
    })
    .await
    .unwrap();
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    // A Redis client is closed without an answer.
    let cli = redis_cli_once(resp, &["PING"]);
    assert!(
        !cli.status.success(),
        "a Redis connection past the limit: {cli:?}"
    );
    drop(http);
    let metrics = tokio::task::spawn_blocking(move || metrics_once_served(addr, deadline + BOUND))
        .await
        .unwrap();
    for listener in ["http", "frames", "resp"] {
        assert!(refusals(&metrics, listener) >= 1.0, "{metrics}");
    }
    // With a place free, the Redis client is served.
    loop {
        let cli = redis_cli_once(resp, &["PING"]);
        if cli.status.success() && cli.stdout == b"PONG\n" {
            break;
        }
        assert!(Instant::now() < deadline + 2 * BOUND, "not served: {cli:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    server.stop_clean();
}
