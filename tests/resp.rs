//! The Redis-protocol listener (docs/RESP.md) against the real binary, driven by clients no one
//! here wrote: redis-py from PyPI (tests/clients/resp_client.py, in a virtualenv under Cargo's
//! scratch dir; `VX_PYTHON_REDIS` may name an interpreter that has `redis`) and Debian's
//! `redis-cli` (scripts/test installs `redis-tools` where it is missing). Raw sockets check what
//! the clients cannot show: the exact bytes of values (bulk strings in RESP2 and RESP3),
//! protocol errors, inline commands, a client that never reads, the idle timeout, and that an
//! acknowledged `HSET` survives `kill -9`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

fn resp_server(dir: &std::path::Path) -> ServerConfig {
    ServerConfig::new(dir.join("data")).args(["--resp-listen", "127.0.0.1:0"])
}

/// Run the redis-py scenario against `addr`; its JSON report.
/// The redis-py scenario against `addr`; its JSON report.
async fn redis_py_at(addr: SocketAddr, scenario: &str) -> serde_json::Value {
    redis_py(vec![
        addr.ip().to_string(),
        addr.port().to_string(),
        scenario.to_string(),
    ])
    .await
}

/// Send `input` on a fresh connection and read until the server has answered `want` bytes or
/// closed.
fn raw(addr: SocketAddr, input: &[u8], want: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(input).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.len() < want {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_runs_every_command_in_both_protocols_and_http_sees_the_same_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path()).start();
    let addr = resp_addr(&s);
    let report = redis_py_at(addr, "open").await;
    assert_eq!(report["resp2-done"], true);
    assert_eq!(report["resp3-done"], true);

    // What RESP wrote, HTTP reads: the same tables. HSET keeps the string it was given; the
    // increments made numbers.
    let r = s.api.features("resp3-player-7", None).await;
    assert_eq!(r.status, 200, "{r}");
    let body = r.json();
    assert_eq!(body["features"]["damage"], "43");
    assert_eq!(body["features"]["ratio"], "0.25");
    assert_eq!(body["features"]["name"], "zed");
    assert!(body["features"].get("level").is_none());
    assert_eq!(s.api.features("resp2-gone", None).await.status, 404);
    let r = s.api.features("resp2-values", None).await;
    assert_eq!(r.json()["features"]["zip"], "02134", "{r}");
    assert_eq!(r.json()["features"]["events"], 12, "{r}");
    let r = s.api.features("resp2-bin", None).await;
    assert_eq!(r.json()["features"]["nul"], "a\u{0}b", "{r}");
    let r = s.api.features("resp3-incr", None).await;
    let f = &r.json()["features"];
    assert_eq!(
        (&f["n"], &f["f"], &f["s"]),
        (&json!(3), &json!(2.5), &json!(6)),
        "{r}"
    );
    assert_eq!(
        (&f["zip"], &f["word"]),
        (&json!(2134.5), &json!("zed")),
        "{r}"
    );

    // A counter set over RESP (a string that reads as a number) keeps counting when events
    // add to it, and RESP reads what events and HTTP wrote.
    let ev = r#"{"stream":"s","type":"hits","kind":"counter","value":3,"entity":"resp2-counter","ts":1700000000000}"#;
    assert_accepted(&s.api.post_lines(&[ev.to_string()]).await, 1);
    let r = s
        .api
        .put_features(
            "from-http",
            &serde_json::json!({"flag": true, "score": 1.5}),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    let cli = |args: &[&str]| redis_cli(addr, args);
    assert_eq!(cli(&["HGET", "resp2-counter", "hits"]), "8\n");
    assert_eq!(cli(&["HGET", "resp2-counter", "events"]), "1\n");
    // Every value is a bulk string, in RESP2 and RESP3: a boolean is its word.
    assert_eq!(cli(&["HGET", "from-http", "flag"]), "true\n");
    assert_eq!(
        cli(&["--no-raw", "HGET", "from-http", "flag"]),
        "\"true\"\n"
    );
    assert_eq!(
        cli(&["--no-raw", "-3", "HGET", "from-http", "flag"]),
        "\"true\"\n"
    );
    assert_eq!(
        cli(&["--no-raw", "-3", "HGETALL", "resp2-counter"]),
        "1# \"events\" => \"1\"\n2# \"last_ts\" => \"1700000000000\"\n3# \"hits\" => \"8\"\n"
    );
    assert_eq!(cli(&["HGET", "from-http", "score"]), "1.5\n");
    assert_eq!(
        cli(&["HINCRBYFLOAT", "from-http", "score", "0.25"]),
        "1.75\n"
    );
    assert_eq!(
        cli(&["--no-raw", "HINCRBY", "from-http", "n", "2"]),
        "(integer) 2\n"
    );
    assert_eq!(cli(&["HSET", "cli", "a", "1", "b", "two"]), "2\n");
    assert_eq!(cli(&["HGETALL", "cli"]), "a\n1\nb\ntwo\n");
    assert_eq!(cli(&["HMGET", "cli", "b", "zz"]), "two\n\n");
    assert_eq!(cli(&["EXISTS", "cli", "nobody"]), "1\n");
    assert_eq!(cli(&["HDEL", "cli", "a"]), "1\n");
    assert_eq!(cli(&["DEL", "cli"]), "1\n");
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert!(cli(&["INFO", "keyspace"]).contains("db0:keys="));
    let err = cli(&["GET", "x"]);
    assert!(err.contains("unknown command"), "{err}");
    // redis-cli's pipe mode: commands in the protocol, counted replies.
    let mut input = Vec::new();
    for i in 0..1000 {
        vx_proto::resp::encode_command(
            &[
                b"HSET",
                format!("piped-{i}").as_bytes(),
                b"n",
                i.to_string().as_bytes(),
            ],
            &mut input,
        );
    }
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 1000"), "{text}");
    let r = s.api.features("piped-999", None).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json()["features"]["n"], "999");

    // Concurrent increments (the redis-py scenario's) survive kill -9: the log replays them.
    for p in ["resp2-", "resp3-"] {
        let want = report[format!("{p}incr")]["hits"].as_u64().unwrap();
        let e = report[format!("{p}incr")]["entity"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(cli(&["HGET", &e, "hits"]), format!("{want}\n"));
    }
    let cfg = s.cfg.clone();
    s.kill9();
    let s = cfg.start();
    let addr = resp_addr(&s);
    for p in ["resp2-", "resp3-"] {
        let want = report[format!("{p}incr")]["hits"].as_u64().unwrap();
        let e = report[format!("{p}incr")]["entity"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(redis_cli(addr, &["HGET", &e, "hits"]), format!("{want}\n"));
        assert_eq!(
            redis_cli(addr, &["HGET", &e, "score"]),
            format!("{}\n", want / 2)
        );
    }
    assert_eq!(redis_cli(addr, &["HGET", "resp2-incr", "zip"]), "2134.5\n");
    assert_eq!(redis_cli(addr, &["HGET", "resp2-incr", "word"]), "zed\n");
}

/// The exact bytes of values and of the connect-time commands, in RESP2 and after `HELLO 3`:
/// every hash value a bulk string (a counter's 42 is `$2 42`), counts and `CLIENT ID`
/// integers, as Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_bulk_strings_in_both_protocols() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path()).start();
    let addr = resp_addr(&s);
    let ev = r#"{"stream":"s","type":"kills","kind":"counter","value":42,"entity":"p","ts":1700000000000}"#;
    assert_accepted(&s.api.post_lines(&[ev.to_string()]).await, 1);
    let r = s
        .api
        .put_features("p", &json!({"r": 0.25, "b": false, "big": 1e21}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    let reads = b"HGET p kills\r\nHMGET p kills r b big nope\r\nHSET p zip 02134\r\n\
                  HGET p zip\r\nHEXISTS p zip\r\nEXISTS p\r\nHINCRBY p kills 1\r\n\
                  HINCRBYFLOAT p r 0.5\r\nHDEL p zip\r\n";
    let want2 = "$2\r\n42\r\n\
                 *5\r\n$2\r\n42\r\n$4\r\n0.25\r\n$5\r\nfalse\r\n$22\r\n1000000000000000000000\r\n$-1\r\n\
                 :1\r\n$5\r\n02134\r\n:1\r\n:1\r\n:43\r\n$4\r\n0.75\r\n:1\r\n";
    let got = tokio::task::spawn_blocking(move || raw(addr, reads, want2.len()))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&got), want2);
    // RESP3: the same bulk strings; HGETALL a map of them. (QUIT closes the connection,
    // which ends the read.)
    let input = b"HELLO 3 SETNAME h1\r\nCLIENT GETNAME\r\nHGET p kills\r\nHGETALL p\r\n\
                  CLIENT SETNAME me\r\nCLIENT GETNAME\r\nSELECT 0\r\nSELECT 1\r\nECHO hi\r\n\
                  HELLO 3 SETNAME a\x01b\r\nCLIENT GETNAME\r\nQUIT\r\n";
    let got = tokio::task::spawn_blocking(move || raw(addr, input, 1 << 20))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&got);
    let after_hello = text
        .split_once("*0\r\n")
        .map(|(_, t)| t)
        .unwrap_or_default();
    let want3 = "$2\r\nh1\r\n$2\r\n43\r\n%6\r\n$6\r\nevents\r\n$1\r\n1\r\n\
                 $7\r\nlast_ts\r\n$13\r\n1700000000000\r\n$5\r\nkills\r\n$2\r\n43\r\n\
                 $1\r\nb\r\n$5\r\nfalse\r\n$3\r\nbig\r\n$22\r\n1000000000000000000000\r\n\
                 $1\r\nr\r\n$4\r\n0.75\r\n+OK\r\n$2\r\nme\r\n+OK\r\n-ERR DB index is out of range\r\n$2\r\nhi\r\n\
                 -ERR Client names cannot contain spaces, newlines or special characters.\r\n\
                 $2\r\nme\r\n+OK\r\n";
    assert_eq!(after_hello, want3, "{text}");
    assert!(text.starts_with("%7\r\n$6\r\nserver\r\n"), "{text}");
    // CLIENT ID: an integer, one per connection.
    let a = raw(addr, b"CLIENT ID\r\n", 4);
    let b = raw(addr, b"CLIENT ID\r\n", 4);
    assert!(
        a.starts_with(b":") && b.starts_with(b":") && a != b,
        "{a:?} {b:?}"
    );
}

/// While the server is starting (here: joining a cluster whose Kafka never answers), `INFO`
/// says `loading:1`, which clients such as ioredis wait out, and the data commands answer
/// `-LOADING`; redis-py connects (with a client name) and sees both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_says_loading_until_the_server_is_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = dead.local_addr().unwrap().to_string();
    drop(dead);
    let cfg = resp_server(tmp.path()).args([
        "--cluster",
        "kafka",
        "--kafka-brokers",
        &brokers,
        "--kafka-topic",
        "t",
        "--node-id",
        "n0",
        "--advertise",
        "http://127.0.0.1:1",
    ]);
    let proc = cfg.spawn();
    let addr = resp_addr_of(&proc);
    let got = tokio::task::spawn_blocking(move || raw(addr, b"INFO persistence\r\n", 33))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        "$26\r\n# Persistence\r\nloading:1\r\n\r\n"
    );
    let report = redis_py_at(addr, "loading").await;
    assert_eq!(report["done"], true);
    drop(proc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_uses_the_bearer_tokens_and_their_scopes() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .with_scoped_tokens(tmp.path())
        .start();
    let report = redis_py_at(resp_addr(&s), "auth").await;
    assert_eq!(report["done"], true);
    // Before AUTH, an unknown command is answered as Redis does: authenticate first.
    let want = b"-NOAUTH unauthorized: Authentication required (AUTH with a bearer token)\r\n";
    assert_eq!(raw(resp_addr(&s), b"GET x\r\n", want.len()), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_feature_budget_gets_oom_and_stores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .env("VX_STORAGE_MAX_FEATURE_BYTES", "1MiB")
        .start();
    let report = redis_py_at(resp_addr(&s), "budget").await;
    let refused = report["refused"].as_str().unwrap();
    assert!(report["stored"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(s.api.features(refused, None).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_inline_commands_and_timeouts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path())
        .env("VX_SERVER_RESP_IDLE_TIMEOUT", "1s")
        .env("VX_SERVER_HEADER_TIMEOUT", "2s")
        .start();
    let addr = resp_addr(&s);
    // Inline commands, as typed into nc; a blank line does nothing.
    let got = raw(addr, b"PING\r\n\r\nHSET inl a 5\r\nHGET inl a\r\n", 18);
    assert_eq!(got, b"+PONG\r\n:1\r\n$1\r\n5\r\n");
    // Not RESP: an error, then the connection is closed (read returns 0).
    let got = raw(addr, b"*1\r\n:5\r\n", 1 << 20);
    assert_eq!(got, b"-ERR Protocol error: expected '$', got ':'\r\n");
    let got = raw(addr, b"*99999999\r\n", 1 << 20);
    assert_eq!(got, b"-ERR Protocol error: invalid multibulk length\r\n");
    let got = raw(addr, b"*1\r\n$99999999\r\n", 1 << 20);
    assert_eq!(got, b"-ERR Protocol error: invalid bulk length\r\n");
    // Idle between commands for server.resp_idle_timeout: told, then closed.
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("-ERR timeout") && text.contains("server.resp_idle_timeout"),
        "{text}"
    );

    // A client that pipelines and never reads: the server stops reading once its replies
    // fill the socket buffers, closes the connection after server.header_timeout, and goes on
    // serving others.
    let mut greedy = TcpStream::connect(addr).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut one = Vec::new();
    vx_proto::resp::encode_command(&[b"PING", &[b'x'; 1000]], &mut one);
    let started = Instant::now();
    let mut sent = 0usize;
    let closed = loop {
        match greedy.write(&one) {
            Ok(n) => sent += n,
            Err(_) => break true,
        }
        if started.elapsed() > Duration::from_secs(30) {
            break false;
        }
    };
    assert!(
        closed,
        "the server kept reading from a client that never reads"
    );
    assert!(
        sent < 512 << 20,
        "{sent} bytes taken from a client that never reads"
    );
    assert_eq!(raw(addr, b"PING\r\n", 7), b"+PONG\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_hset_survives_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = resp_server(tmp.path()).args(["--fsync", "always"]);
    let s = cfg.start();
    let addr = resp_addr(&s);
    let mut input = Vec::new();
    for i in 0..500 {
        vx_proto::resp::encode_command(
            &[
                b"HSET",
                format!("dur-{}", i % 50).as_bytes(),
                format!("f{i}").as_bytes(),
                b"7",
            ],
            &mut input,
        );
    }
    let got = raw(addr, &input, 500 * 4);
    assert_eq!(got, b":1\r\n".repeat(500));
    s.kill9();
    let s = cfg.start();
    let addr = resp_addr(&s);
    let got = raw(
        addr,
        b"HGET dur-49 f499\r\nHMGET dur-0 f0 f450 f451\r\n",
        100,
    );
    assert_eq!(got, b"$1\r\n7\r\n*3\r\n$1\r\n7\r\n$1\r\n7\r\n$-1\r\n");
}

/// `HDEL` of several names and `DEL` of several entities are atomic as in Redis: one feature
/// DELETE record for the whole command (counted in `vx_stored_records_total`), every target
/// applied, a declared aggregate among the names reset; and after `kill -9` the log gives
/// back the same tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdel_and_del_of_several_are_one_record() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = resp_server(tmp.path())
        .args(["--fsync", "always"])
        .with_config(
            tmp.path(),
            "features:\n  - {name: hits_5m, from: hit, agg: count, window: 5m}\n",
        );
    let s = cfg.start();
    let addr = resp_addr(&s);
    let cli = |args: &[&str]| redis_cli(addr, args);
    let records = || async {
        metric_sum(
            &s.api.get("/metrics").await.text(),
            "vx_stored_records_total",
        )
    };

    assert_eq!(
        cli(&["HSET", "p", "a", "1", "b", "2", "c", "3", "d", "4"]),
        "4\n"
    );
    let before = records().await;
    assert_eq!(cli(&["HDEL", "p", "a", "b", "nope", "c", "a"]), "3\n");
    assert_eq!(records().await - before, 1.0, "one record for the command");
    assert_eq!(cli(&["HGETALL", "p"]), "d\n4\n");
    let r = s.api.features("p", None).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json()["features"], serde_json::json!({"d": "4"}));

    // An aggregate fed by events, deleted with a plain feature: one record, both gone.
    let now = vx_sys::now_ms();
    let ev = format!(
        r#"{{"stream":"s","type":"hit","kind":"counter","value":1,"entity":"q","ts":{now}}}"#
    );
    assert_accepted(&s.api.post_lines(&[ev.clone(), ev]).await, 2);
    assert_eq!(cli(&["HSET", "q", "x", "1"]), "1\n");
    assert_eq!(cli(&["HGET", "q", "hits_5m"]), "2\n");
    let before = records().await;
    assert_eq!(cli(&["HDEL", "q", "hits_5m", "x"]), "2\n");
    assert_eq!(
        records().await - before,
        1.0,
        "one delete record for both names"
    );
    assert_eq!(cli(&["HEXISTS", "q", "hits_5m"]), "0\n");
    assert_eq!(cli(&["HEXISTS", "q", "x"]), "0\n");

    // DEL of several entities: one record for all of them.
    for e in ["d1", "d2", "d3", "d4"] {
        assert_eq!(cli(&["HSET", e, "v", "1"]), "1\n");
    }
    let before = records().await;
    assert_eq!(cli(&["DEL", "d1", "nobody", "d2", "d3", "d1"]), "3\n");
    assert_eq!(records().await - before, 1.0, "one record for the command");
    assert_eq!(cli(&["EXISTS", "d1", "d2", "d3", "d4"]), "1\n");

    // The records replay to the same tables.
    s.kill9();
    let s = cfg.start();
    let addr = resp_addr(&s);
    let cli = |args: &[&str]| redis_cli(addr, args);
    assert_eq!(cli(&["HGETALL", "p"]), "d\n4\n");
    assert_eq!(cli(&["HEXISTS", "q", "hits_5m"]), "0\n");
    assert_eq!(cli(&["HEXISTS", "q", "x"]), "0\n");
    assert_eq!(cli(&["EXISTS", "d1", "d2", "d3", "d4"]), "1\n");
    assert_eq!(cli(&["HGET", "d4", "v"]), "1\n");
}

/// The reads of a pipeline are added to `vx_feature_reads_total` once per batch, not per
/// command: every read is still counted exactly once, whether it hits, misses, or shares a
/// batch with a write; and what a read sees is still every write before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_of_reads_is_counted_once_each() {
    let tmp = tempfile::tempdir().unwrap();
    let s = resp_server(tmp.path()).start();
    let addr = resp_addr(&s);
    let reads = || async {
        metric_sum(
            &s.api.get("/metrics").await.text(),
            "vx_feature_reads_total",
        )
    };
    assert_eq!(redis_cli(addr, &["HSET", "e1", "v", "7"]), "1\n");
    let before = reads().await;
    // 40 HGETs, an HSET in the middle, then an HMGET, HEXISTS, HGETALL and EXISTS: 44 reads.
    let mut input = Vec::new();
    for i in 0..40 {
        let e = if i % 2 == 0 { "e1" } else { "missing" };
        input.extend_from_slice(
            format!("*3\r\n$4\r\nHGET\r\n${}\r\n{e}\r\n$1\r\nv\r\n", e.len()).as_bytes(),
        );
        if i == 20 {
            input.extend_from_slice(b"*4\r\n$4\r\nHSET\r\n$2\r\ne1\r\n$1\r\nv\r\n$1\r\n8\r\n");
        }
    }
    input.extend_from_slice(b"*3\r\n$5\r\nHMGET\r\n$2\r\ne1\r\n$1\r\nv\r\n");
    input.extend_from_slice(b"*3\r\n$7\r\nHEXISTS\r\n$2\r\ne1\r\n$1\r\nv\r\n");
    input.extend_from_slice(b"*2\r\n$7\r\nHGETALL\r\n$2\r\ne1\r\n");
    input.extend_from_slice(b"*2\r\n$6\r\nEXISTS\r\n$2\r\ne1\r\n");
    let mut want = Vec::new();
    for i in 0..40 {
        want.extend_from_slice(match (i % 2, i <= 20) {
            (0, true) => &b"$1\r\n7\r\n"[..],
            (0, false) => b"$1\r\n8\r\n",
            _ => b"$-1\r\n",
        });
        if i == 20 {
            want.extend_from_slice(b":0\r\n");
        }
    }
    // Values answer as bulk strings; HEXISTS and EXISTS as integers.
    want.extend_from_slice(b"*1\r\n$1\r\n8\r\n:1\r\n*2\r\n$1\r\nv\r\n$1\r\n8\r\n:1\r\n");
    let len = want.len();
    let got = tokio::task::spawn_blocking(move || raw(addr, &input, len))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    assert_eq!(reads().await - before, 44.0);
}
