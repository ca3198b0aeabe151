//! Redis's stream commands on the Redis-protocol listener (docs/RESP.md, "Streams") against
//! the real binary, driven by redis-py (tests/clients/resp_client.py, scenarios `streams` and
//! `streams-auth`) and Debian's `redis-cli`; raw sockets for what the clients cannot show: a
//! blocked `XREAD`'s bounds (`server.max_followers`, a client that goes away, a deleted
//! stream, the commands pipelined behind it), the bound of one reply, a client that never
//! reads a large `XRANGE`, and an acknowledged `XADD` surviving `kill -9`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn resp_server(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::new(dir.join("data")).args(["--resp-listen", "127.0.0.1:0"])
}

/// A RESP connection with a read timeout.
fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Read until `want` bytes have come (or the connection closed or timed out).
fn read_n(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while got.len() < want {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    vx_proto::resp::encode_command(args, &mut out);
    out
}

/// Read until what came ends with `suffix` (or the connection closed or timed out).
fn read_until(s: &mut TcpStream, suffix: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while !got.ends_with(suffix) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

/// The server's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb << 10
}

async fn resp_followers(s: &Server) -> f64 {
    let text = s.api.get("/metrics").await.text();
    text.lines()
        .find_map(|l| l.strip_prefix("vx_followers{transport=\"resp\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_drives_every_stream_command_in_both_protocols() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path()).start();
    let addr = resp_addr(&s);
    // Events written over HTTP, which the scenario reads back as fields.
    let http = [
        r#"{"stream":"from-http","entity":"p9","type":"hit","ts":1700000000000,"kind":"gauge","value":1.5,"id":"h1","data":{"weapon":"axe","n":3,"o":{"a":[1,2]},"type":"shadow"}}"#,
        r#"{"stream":"from-http-array","type":"list","ts":1700000000001,"data":[1,2]}"#,
    ];
    for ev in http {
        assert_accepted(&s.api.post_lines(&[ev.to_string()]).await, 1);
    }
    let report = redis_py(vec![
        addr.ip().to_string(),
        addr.port().to_string(),
        "streams".to_string(),
        s.addr.port().to_string(),
    ])
    .await;
    assert_eq!(report["st2-done"], true, "{report}");
    assert_eq!(report["st3-done"], true, "{report}");

    // What XADD wrote, HTTP replays: the same event, its id kept, the other fields in data.
    let lines = s.api.replay_all("st2-match").await;
    assert_eq!(
        lines[0].value,
        serde_json::json!({"stream": "st2-match", "entity": "st2-p1", "type": "damage",
            "ts": 1732000000123_i64, "kind": "counter", "value": 12, "id": "evt-1",
            "data": {"weapon": "bow", "note": "say \"hi\""}, "seq": 1}),
    );
    // Four events: three by XADD (the duplicate stored once), one by HTTP.
    assert_eq!(lines.len(), 4);
    let metrics = s.api.get("/metrics").await.text();
    assert!(
        metrics.contains("vx_events_ingested_total{format=\"resp\"} "),
        "XADDs are counted under format=\"resp\""
    );
    assert_eq!(resp_followers(&s).await, 0.0, "no blocked XREAD left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_commands_use_the_bearer_tokens_and_their_scopes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .with_scoped_tokens(tmp.path())
        .start();
    let addr = resp_addr(&s);
    let report = redis_py(vec![
        addr.ip().to_string(),
        addr.port().to_string(),
        "streams-auth".to_string(),
    ])
    .await;
    assert_eq!(report["done"], true, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_drives_the_stream_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path()).start();
    let addr = resp_addr(&s);
    let cli = |args: &[&str]| redis_cli(addr, args);
    assert_eq!(
        cli(&["XADD", "cli", "*", "type", "hit", "ts", "1000", "a", "1"]),
        "1-0\n"
    );
    assert_eq!(
        cli(&["XADD", "cli", "*", "type", "miss", "ts", "2000"]),
        "2-0\n"
    );
    assert_eq!(
        cli(&["XRANGE", "cli", "-", "+"]),
        "1-0\ntype\nhit\nts\n1000\na\n1\n2-0\ntype\nmiss\nts\n2000\n"
    );
    assert_eq!(
        cli(&["XREVRANGE", "cli", "+", "-", "COUNT", "1"]),
        "2-0\ntype\nmiss\nts\n2000\n"
    );
    assert_eq!(
        cli(&["XRANGE", "cli", "(1-0", "+"]),
        cli(&["XRANGE", "cli", "2", "2-0"])
    );
    assert_eq!(cli(&["XLEN", "cli"]), "2\n");
    assert_eq!(cli(&["XLEN", "nobody"]), "0\n");
    let info = cli(&["XINFO", "STREAM", "cli"]);
    assert!(
        info.starts_with("length\n2\n") && info.contains("last-entry\n2-0\ntype\nmiss\n"),
        "{info}"
    );
    assert!(cli(&["XINFO", "STREAM", "nobody"]).contains("no such key"));
    assert_eq!(
        cli(&["XREAD", "COUNT", "1", "STREAMS", "cli", "0"]),
        "cli\n1-0\ntype\nhit\nts\n1000\na\n1\n"
    );
    assert_eq!(cli(&["XREAD", "STREAMS", "cli", "$"]), "\n");
    let groups = cli(&["XGROUP", "CREATE", "cli", "g", "$"]);
    assert!(
        groups.contains("consumer groups are not offered"),
        "{groups}"
    );
    let cmd = cli(&["COMMAND", "INFO", "XADD"]);
    assert!(
        cmd.starts_with("xadd\n-5\nwrite\ndenyoom\nfast\n1\n1\n1\n"),
        "{cmd}"
    );

    // XREAD BLOCK 0, woken by an HTTP write to the stream.
    let child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args(["XREAD", "BLOCK", "0", "STREAMS", "cli", "$"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        resp_followers(&s).await,
        1.0,
        "the blocked XREAD is a follower"
    );
    let ev = r#"{"stream":"cli","type":"late","ts":3000,"entity":"e","data":{"k":"v"}}"#;
    assert_accepted(&s.api.post_lines(&[ev.to_string()]).await, 1);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cli\n3-0\ntype\nlate\nentity\ne\nts\n3000\nk\nv\n"
    );
    assert_eq!(resp_followers(&s).await, 0.0);
}

/// A blocked `XREAD` holds a place against `server.max_followers` (an error past it, given
/// back when it is answered or its client goes away); the commands pipelined behind it wait
/// for it; a deleted stream answers it with a null array; other connections are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_xread_is_bounded_like_a_follower() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .with_config(tmp.path(), "server:\n  max_followers: 1\n")
        .start();
    let addr = resp_addr(&s);
    assert_eq!(redis_cli(addr, &["XADD", "b", "*", "a", "1"]), "1-0\n");

    // One blocked XREAD (and a PING behind it) holds the only place.
    let mut first = connect(addr);
    let mut input = command(&[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"b", b"$"]);
    input.extend_from_slice(b"PING\r\n");
    first.write_all(&input).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(resp_followers(&s).await, 1.0);
    // A second is refused at once; a read that finds entries needs no place.
    let mut second = connect(addr);
    second
        .write_all(&command(&[
            b"XREAD", b"BLOCK", b"0", b"STREAMS", b"b", b"$",
        ]))
        .unwrap();
    let got = String::from_utf8(read_n(&mut second, 30)).unwrap();
    assert!(
        got.starts_with("-ERR not_ready: ") && got.contains("server.max_followers"),
        "{got}"
    );
    second
        .write_all(&command(&[
            b"XREAD", b"BLOCK", b"0", b"STREAMS", b"b", b"0",
        ]))
        .unwrap();
    let got = read_n(&mut second, 10);
    assert!(got.starts_with(b"*1\r\n*2\r\n$1\r\nb\r\n"), "{got:?}");
    // Other connections are served meanwhile.
    assert_eq!(redis_cli(addr, &["PING"]), "PONG\n");

    // The stream is deleted: the blocked read answers a null array, then the PING.
    let r = s
        .api
        .send(reqwest::Method::DELETE, "/v1/streams/b", &[], None)
        .await;
    assert_eq!(r.status, 200, "{r}");
    let got = read_n(&mut first, 12);
    assert_eq!(got, b"*-1\r\n+PONG\r\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(resp_followers(&s).await, 0.0);

    // A client that goes away while blocked gives its place back.
    let mut gone = connect(addr);
    gone.write_all(&command(&[
        b"XREAD", b"BLOCK", b"0", b"STREAMS", b"c", b"$",
    ]))
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(resp_followers(&s).await, 1.0);
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(10);
    while resp_followers(&s).await != 0.0 {
        assert!(Instant::now() < deadline, "the place was not given back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // BLOCK with a timeout: a null array after it (RESP3: `_`).
    let mut third = connect(addr);
    let mut input = b"HELLO 3\r\n".to_vec();
    input.extend_from_slice(&command(&[
        b"XREAD", b"BLOCK", b"200", b"STREAMS", b"c", b"$",
    ]));
    input.extend_from_slice(b"PING\r\n");
    let started = Instant::now();
    third.write_all(&input).unwrap();
    let got = read_until(&mut third, b"+PONG\r\n");
    assert!(started.elapsed() >= Duration::from_millis(190));
    let text = String::from_utf8_lossy(&got);
    assert!(text.ends_with("_\r\n+PONG\r\n"), "{text}");
}

/// One reply stops after the entry that takes it past 16 MiB; a client that pipelines large
/// `XRANGE`s and never reads stops being read, is closed after `server.header_timeout`, and
/// costs the server a bounded amount of memory while others are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_ranges_are_bounded_and_a_client_that_never_reads_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .env("VX_SERVER_HEADER_TIMEOUT", "2s")
        .start();
    let addr = resp_addr(&s);
    // 400 events of 60 KB: 24 MB.
    let pad = "x".repeat(60_000);
    for chunk in 0..8 {
        let lines: Vec<String> = (0..50)
            .map(|i| {
                format!(
                    r#"{{"stream":"big","type":"blob","ts":{},"data":{{"pad":"{pad}"}}}}"#,
                    chunk * 50 + i
                )
            })
            .collect();
        assert_accepted(&s.api.post_lines(&lines).await, 50);
    }
    assert_eq!(redis_cli(addr, &["XLEN", "big"]), "400\n");

    // One reply: the entries up to the one past 16 MiB, then the next page from its last id.
    let page = tokio::task::spawn_blocking(move || redis_cli(addr, &["XRANGE", "big", "-", "+"]))
        .await
        .unwrap();
    let is_id = |l: &&str| l.ends_with("-0") && l.split('-').all(|p| p.parse::<u64>().is_ok());
    let ids: Vec<&str> = page.lines().filter(is_id).collect();
    let (first_page, last_id) = (ids.len(), ids[ids.len() - 1].to_string());
    assert!(
        (250..400).contains(&first_page),
        "{first_page} entries in one reply"
    );
    assert_eq!(last_id, format!("{first_page}-0"));
    let rest = redis_cli(
        addr,
        &["XRANGE", "big", &format!("({last_id}"), "+", "COUNT", "1"],
    );
    assert!(
        rest.starts_with(&format!("{}-0\n", first_page + 1)),
        "{}",
        &rest[..20]
    );

    // A client that pipelines XRANGEs and never reads.
    let pid = s.proc.pid();
    let before = rss(pid);
    let greedy = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let one = b"XRANGE big - + COUNT 1000\r\n";
        let started = Instant::now();
        let mut sent = 0usize;
        loop {
            match c.write(one) {
                Ok(n) => sent += n,
                Err(_) => return (true, sent),
            }
            if started.elapsed() > Duration::from_secs(30) {
                return (false, sent);
            }
        }
    });
    let mut peak = before;
    let started = Instant::now();
    while !greedy.is_finished() && started.elapsed() < Duration::from_secs(40) {
        peak = peak.max(rss(pid));
        // Others are served meanwhile.
        assert_eq!(
            tokio::task::spawn_blocking(move || redis_cli(addr, &["XLEN", "big"]))
                .await
                .unwrap(),
            "400\n"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (closed, sent) = greedy.join().unwrap();
    assert!(
        closed,
        "the server kept reading from a client that never reads"
    );
    assert!(
        sent < 64 << 20,
        "{sent} bytes taken from a client that never reads"
    );
    assert!(
        peak < before + (256 << 20),
        "the server grew from {before} to {peak} bytes for a client that never reads"
    );
    assert_eq!(redis_cli(addr, &["PING"]), "PONG\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_xadd_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = resp_server(tmp.path()).args(["--fsync", "always"]);
    let s = cfg.start();
    let addr = resp_addr(&s);
    let mut input = Vec::new();
    for i in 0..200 {
        let i = i.to_string();
        input.extend_from_slice(&command(&[b"XADD", b"dur", b"*", b"i", i.as_bytes()]));
    }
    let want: Vec<u8> = (1..=200)
        .flat_map(|n| {
            let id = format!("{n}-0");
            format!("${}\r\n{id}\r\n", id.len()).into_bytes()
        })
        .collect();
    let len = want.len();
    let got = tokio::task::spawn_blocking(move || {
        let mut c = connect(addr);
        c.write_all(&input).unwrap();
        read_n(&mut c, len)
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    s.kill9();
    let s = cfg.start();
    let addr = resp_addr(&s);
    assert_eq!(redis_cli(addr, &["XLEN", "dur"]), "200\n");
    let last = redis_cli(addr, &["XREVRANGE", "dur", "+", "-", "COUNT", "1"]);
    assert!(last.starts_with("200-0\ntype\nxadd\nts\n"), "{last}");
    assert!(last.ends_with("i\n199\n"), "{last}");
}
