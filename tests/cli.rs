//! The command line for people at a terminal (docs/API.md §7 "CLI"), run as the real binary against a
//! real server: `ingest` of every text format from files and stdin (checked by replaying over
//! HTTP), retries on 429 honouring `Retry-After`, `tail` across a server restart (no gap, no
//! duplicate), `replay` ranges, `features`, the Unix socket, tokens, `check` on a live data dir
//! and on damaged copies, and one-line errors with a non-zero exit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;

/// A CLI command must end well within this (each is a few requests).
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished CLI run printed.
struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Out {
    fn ok(&self) -> &str {
        assert_eq!(
            self.code,
            Some(0),
            "veltrix failed\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// A failure: exit code 1 and exactly one line on stderr, starting `error: `.
    fn failed(&self) -> &str {
        assert_eq!(self.code, Some(1), "expected exit 1: {}", self.stderr);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one line on stderr: {:?}",
            self.stderr
        );
        assert!(lines[0].starts_with("error: "), "{:?}", lines[0]);
        lines[0]
    }
}

fn cli(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_veltrix"));
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("VX_") {
            cmd.env_remove(k);
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// Run the CLI to its exit (bounded), with `stdin` as its input.
fn run_with(mut cmd: Command, stdin: Option<&str>) -> Out {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("spawn veltrix");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_string();
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let read = |r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(r).read_to_string(&mut s);
            s
        })
    };
    use std::io::Read;
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let status = wait_exit(&mut child, "veltrix did not exit");
    Out {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Wait (bounded by `CLI_TIMEOUT`) for a command to exit; kill it and fail with `what` if not.
fn wait_exit(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + CLI_TIMEOUT;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} within {CLI_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Out {
    run_with(cli(args), None)
}

fn events(stream: &str, from: usize, n: usize) -> Vec<Event> {
    (from..from + n)
        .map(|i| {
            let mut e = Event::simple(stream, "t", 1_000 + i as i64, Some(format!("id-{i}")));
            e.data = Some((format!("{{\"i\": {i}}}"), format!("{{\"i\":{i}}}")));
            e
        })
        .collect()
}

fn yaml(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| format!("---\n{}\n", e.to_json()))
        .collect()
}

/// `veltrix ingest` succeeded with `summary` in its last line, and `stream` now holds `evs`.
async fn stored_as_summarised(
    server: &Server,
    out: &Out,
    summary: &str,
    stream: &str,
    evs: &[Event],
) {
    let said = out.ok();
    assert!(said.contains(summary), "{said}");
    let lines = server.api.replay_all(stream).await;
    check_stream(stream, &lines, &evs.iter().collect::<Vec<_>>());
}

fn server_url(s: &Server) -> String {
    format!("http://{}", s.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_every_format_from_files_and_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(dir.path().join("data")).start();
    let url = server_url(&server);
    let cases: [(&str, &str, usize); 3] = [
        ("ndjson", "a.ndjson", 25),
        ("json", "b.json", 30),
        ("yaml", "c.yml", 12),
    ];
    for (format, file, n) in cases {
        let stream = format!("file-{format}");
        let evs = events(&stream, 0, n);
        let text = match format {
            "ndjson" => ndjson(&evs),
            "json" => json_array(&evs),
            _ => yaml(&evs),
        };
        let path = dir.path().join(file);
        std::fs::write(&path, &text).unwrap();
        // Small batches: the input is cut into several requests, in order.
        let out = run(&[
            "ingest",
            "--server",
            &url,
            "--batch",
            "7",
            path.to_str().unwrap(),
        ]);
        let requests = n.div_ceil(7);
        let summary = format!("sent {n} events in {requests} requests: {n} accepted, 0 duplicates");
        stored_as_summarised(&server, &out, &summary, &stream, &evs).await;

        // The same input from stdin (--format), again: every event is a duplicate (ids).
        let out = run_with(
            cli(&["ingest", "--server", &url, "--format", format, "-"]),
            Some(&text),
        );
        assert!(
            out.ok().contains(&format!("0 accepted, {n} duplicates")),
            "{}",
            out.stdout
        );
        assert_eq!(server.api.replay_all(&stream).await.len(), n);
    }
    // Binary frames (docs/PROTOCOL.md): BATCH frames back to back, sent whole, two per request.
    let evs = events("frames", 0, 6);
    let mut body = Vec::new();
    for chunk in evs.chunks(2) {
        let wires: Vec<vx_proto::frames::WireEvent<'_>> = chunk
            .iter()
            .map(|e| vx_proto::frames::WireEvent {
                stream: &e.stream,
                entity: None,
                ty: &e.ty,
                ts: e.expected_ts(),
                kind: vx_proto::Kind::Event,
                value: None,
                id: e.id.as_deref(),
                data: e.data.as_ref().map(|d| d.1.as_str()),
            })
            .collect();
        let head = vx_proto::frames::BatchHead::default();
        vx_proto::frames::encode_batch(&mut body, &head, &wires).unwrap();
    }
    let path = dir.path().join("d.vxf");
    std::fs::write(&path, &body).unwrap();
    let out = run(&[
        "ingest",
        "--server",
        &url,
        "--batch",
        "2",
        path.to_str().unwrap(),
    ]);
    let summary = "sent 6 events in 2 requests: 6 accepted";
    stored_as_summarised(&server, &out, summary, "frames", &evs).await;

    // NDJSON from stdin by default, under a byte cap that makes one event per request.
    let evs = events("stdin", 0, 5);
    let out = run_with(
        cli(&["ingest", "--server", &url, "--max-bytes", "100", "-"]),
        Some(&ndjson(&evs)),
    );
    stored_as_summarised(&server, &out, "sent 5 events in 5 requests", "stdin", &evs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_stops_at_a_rejected_event_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(dir.path().join("data")).start();
    let url = server_url(&server);
    let mut text = ndjson(&events("rej", 0, 4));
    text.push_str("{\"stream\": \"rej\"}\n");
    text.push_str(&ndjson(&events("rej", 4, 3)));
    let out = run_with(
        cli(&["ingest", "--server", &url, "--batch", "2", "-"]),
        Some(&text),
    );
    let line = out.failed();
    assert!(line.contains("422 invalid_event"), "{line}");
    assert!(line.contains("event 5 of the input"), "{line}");
    assert!(line.contains("4 events were accepted before it"), "{line}");
    assert_eq!(server.api.replay_all("rej").await.len(), 4);

    // The same from a stdin that stays open: the rejection still ends the run.
    let mut cmd = cli(&["ingest", "--server", &url, "--batch", "2", "-"]);
    cmd.stdin(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn veltrix ingest");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let status = wait_exit(&mut child, "ingest waited for more input after a rejection");
    assert_eq!(status.code(), Some(1));
    drop(stdin);
}

/// A test-owned server: the first `POST /v1/events` gets 429 with `Retry-After: 1`, the next
/// ones 200. Returns its address, the number of posts, and when each arrived.
async fn pushback_server() -> (
    std::net::SocketAddr,
    Arc<AtomicU64>,
    Arc<std::sync::Mutex<Vec<Instant>>>,
) {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let posts = Arc::new(AtomicU64::new(0));
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (p, t) = (Arc::clone(&posts), Arc::clone(&times));
    let app = axum::Router::new().route(
        "/v1/events",
        axum::routing::post(move |body: String| {
            let (p, t) = (Arc::clone(&p), Arc::clone(&t));
            async move {
                t.lock().unwrap().push(Instant::now());
                if p.fetch_add(1, Ordering::SeqCst) == 0 {
                    return (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "1")],
                        r#"{"error":{"code":"backpressure","message":"shard 3 is full"}}"#
                            .to_string(),
                    )
                        .into_response();
                }
                let n = body.lines().filter(|l| !l.trim().is_empty()).count();
                format!(r#"{{"accepted":{n},"duplicates":0}}"#).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, posts, times)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_retries_a_429_after_retry_after() {
    let (addr, posts, times) = pushback_server().await;
    let url = format!("http://{addr}");
    let text = ndjson(&events("r", 0, 3));
    let out = tokio::task::spawn_blocking(move || {
        run_with(cli(&["ingest", "--server", &url, "-"]), Some(&text))
    })
    .await
    .unwrap();
    let summary = out.ok();
    assert!(
        summary.contains("sent 3 events in 1 request: 3 accepted"),
        "{summary}"
    );
    assert!(summary.contains("1 retry,"), "{summary}");
    assert_eq!(posts.load(Ordering::SeqCst), 2);
    let t = times.lock().unwrap().clone();
    // Not sooner than the server asked (a lower bound only: never flaky).
    assert!(
        t[1] - t[0] >= Duration::from_secs(1),
        "retried after {:?}",
        t[1] - t[0]
    );

    // With no retries left, the 429 is the error, on one line.
    let (addr, _, _) = pushback_server().await;
    let url = format!("http://{addr}");
    let text = ndjson(&events("r", 0, 3));
    let out = tokio::task::spawn_blocking(move || {
        run_with(
            cli(&["ingest", "--server", &url, "--retries", "0", "-"]),
            Some(&text),
        )
    })
    .await
    .unwrap();
    let line = out.failed();
    assert!(line.contains("429 backpressure: shard 3 is full"), "{line}");
    assert!(line.contains("0 events were accepted before it"), "{line}");
}

/// Lines a child writes to stdout, as they come.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn seqs_until(rx: &std::sync::mpsc::Receiver<String>, got: &mut Vec<serde_json::Value>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => got.push(serde_json::from_str(&line).unwrap()),
            Err(_) => panic!("tail printed {} of {n} events: {got:?}", got.len()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_live_and_resumes_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(dir.path().join("data"));
    let server = cfg.start();
    let addr = server.addr;
    let url = server_url(&server);
    let evs = events("live", 0, 9);
    assert_accepted(&server.api.post_ndjson(&evs[..3]).await, 3);

    let mut tail = cli(&["tail", "--server", &url, "live", "--from", "2"])
        .spawn()
        .expect("spawn veltrix tail");
    let rx = lines_of(&mut tail);
    let mut got = Vec::new();
    seqs_until(&rx, &mut got, 2);
    // Events ingested after it started.
    assert_accepted(&server.api.post_ndjson(&evs[3..6]).await, 3);
    seqs_until(&rx, &mut got, 5);

    // The server goes away and comes back on the same port and data dir.
    server.kill9();
    let server = cfg.clone().listen(addr.to_string()).start();
    assert_accepted(&server.api.post_ndjson(&evs[6..]).await, 3);
    seqs_until(&rx, &mut got, 8);
    let _ = tail.kill();
    let _ = tail.wait();
    // Whatever else it printed before it was killed.
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        got.push(serde_json::from_str(&line).unwrap());
    }
    let seqs: Vec<u64> = got.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (2..=9).collect::<Vec<u64>>(), "no gap, no duplicate");
    for (v, e) in got.iter().zip(&evs[1..]) {
        e.check(v, None, v["seq"].as_u64().unwrap()).unwrap();
    }
    let mut err = String::new();
    use std::io::Read;
    tail.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("reconnecting after seq 6"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_ends_when_the_stream_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(dir.path().join("data")).start();
    let url = server_url(&server);
    assert_accepted(&server.api.post_ndjson(&events("gone", 0, 2)).await, 2);
    let mut tail = cli(&["tail", "--server", &url, "gone", "--from", "1"])
        .spawn()
        .expect("spawn veltrix tail");
    let rx = lines_of(&mut tail);
    let mut got = Vec::new();
    seqs_until(&rx, &mut got, 2);
    let r = server
        .api
        .send(reqwest::Method::DELETE, "/v1/streams/gone", &[], None)
        .await;
    assert_eq!(r.status, 200, "{r}");
    let status = wait_exit(&mut tail, "tail did not end after the delete");
    assert_eq!(status.code(), Some(0));
    let mut err = String::new();
    use std::io::Read;
    tail.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("the stream was deleted (its last seq was 2)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_ranges_features_and_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(dir.path().join("data")).start();
    let url = server_url(&server);
    let evs = events("a/b", 0, 20);
    assert_accepted(&server.api.post_ndjson(&evs).await, 20);

    let out = run(&[
        "replay", "--server", &url, "a/b", "--from", "5", "--to", "12",
    ]);
    let lines: Vec<serde_json::Value> = out
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 8);
    for (v, e) in lines.iter().zip(&evs[4..]) {
        e.check(v, None, v["seq"].as_u64().unwrap()).unwrap();
    }
    assert_eq!(lines[0]["seq"], 5);
    let out = run(&[
        "replay", "--server", &url, "a/b", "--to", "3", "--format", "json",
    ]);
    let arr: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(arr.as_array().unwrap().len(), 3);
    let out = run(&["replay", "--server", &url, "a/b"]);
    assert_eq!(out.ok().lines().count(), 20);

    let body = r#"{"stream":"m","entity":"player-7","type":"damage","kind":"counter","value":12}
{"stream":"m","entity":"player-7","type":"damage","kind":"counter","value":30}"#;
    server
        .api
        .post_lines(&body.lines().map(str::to_string).collect::<Vec<_>>())
        .await;
    let out = run(&["features", "--server", &url, "player-7"]);
    let v: serde_json::Value = serde_json::from_str(out.ok()).unwrap();
    assert_eq!(v["entity"], "player-7");
    assert_eq!(v["features"]["damage"], 42);
    assert_eq!(v["features"]["events"], 2);

    let line = run(&["features", "--server", &url, "nobody"])
        .failed()
        .to_string();
    assert!(line.contains("404 not_found"), "{line}");
    let line = run(&["replay", "--server", &url, "nope"])
        .failed()
        .to_string();
    assert!(
        line.contains("404 not_found") && line.contains("nope"),
        "{line}"
    );
    let line = run(&["tail", "--server", &url, "nope"])
        .failed()
        .to_string();
    assert!(line.contains("404 not_found"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vx.sock");
    let server = ServerConfig::new(dir.path().join("data"))
        .uds(&sock)
        .with_scoped_tokens(dir.path())
        .start();
    let unix = format!("unix:{}", sock.display());
    let file = dir.path().join("e.ndjson");
    std::fs::write(&file, ndjson(&events("u", 0, 4))).unwrap();
    let file = file.to_str().unwrap();

    // Without a token: 401, one line, nothing stored.
    let line = run(&["ingest", "--server", &unix, file])
        .failed()
        .to_string();
    assert!(line.contains("401 unauthorized"), "{line}");
    // With the right scopes (flag, or env), over the Unix socket.
    run(&[
        "ingest",
        "--server",
        &unix,
        "--token",
        "ingest-secret",
        file,
    ])
    .ok();
    let mut cmd = cli(&["replay", "u"]);
    cmd.env("VX_SERVER", &unix).env("VX_TOKEN", "read-secret");
    let out = run_with(cmd, None);
    assert_eq!(out.ok().lines().count(), 4);
    let line = run(&["replay", "--server", &unix, "--token", "ingest-secret", "u"])
        .failed()
        .to_string();
    assert!(line.contains("403 forbidden"), "{line}");
    let out = run(&["health", "--server", &unix]);
    assert!(out.ok().contains("ready"));
    drop(server);
}

#[test]
fn errors_are_one_line() {
    // Nothing listens there (a port just released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{port}");
    for args in [
        vec!["replay", "--server", &url, "s"],
        vec!["features", "--server", &url, "e"],
        vec!["tail", "--server", &url, "s"],
        vec!["health", "--server", &url],
    ] {
        let line = run(&args).failed().to_string();
        assert!(
            line.starts_with(&format!("error: cannot connect to {url}")),
            "{line}"
        );
    }
    let line = run_with(
        cli(&["ingest", "--server", &url, "-"]),
        Some("{\"stream\":\"s\",\"type\":\"t\"}\n"),
    )
    .failed()
    .to_string();
    assert!(line.contains("cannot connect to"), "{line}");
    let line = run(&["ingest", "--server", &url, "/no/such/file.ndjson"])
        .failed()
        .to_string();
    assert!(line.contains("cannot open /no/such/file.ndjson"), "{line}");
    let line = run(&["replay", "--server", "ftp://x", "s"])
        .failed()
        .to_string();
    assert!(line.contains("expected http://HOST:PORT"), "{line}");
    let line = run(&["check", "/no/such/dir"]).failed().to_string();
    assert!(line.contains("not a data dir"), "{line}");
}

/// The offset of the record that holds byte `at` of a segment (records are length-prefixed).
fn record_start(segment: &[u8], at: usize) -> usize {
    let mut off = 0;
    loop {
        let len = u32::from_le_bytes(segment[off..off + 4].try_into().unwrap()) as usize;
        if at < off + len {
            return off;
        }
        off += len;
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x5a;
    std::fs::write(path, b).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_a_live_data_dir_and_damaged_copies() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Small segments, so that several are sealed (with index files).
    let cfg = ServerConfig::new(&data).env("VX_STORAGE_SEGMENT_BYTES", "64KiB");
    let server = cfg.start();
    for i in 0..30 {
        let evs = padded_events("c", i * 10, 10, 1000);
        assert_accepted(&server.api.post_ndjson(&evs).await, 10);
    }
    server
        .api
        .post_lines(&[
            r#"{"stream":"m","entity":"p1","type":"hp","kind":"gauge","value":3}"#.to_string(),
        ])
        .await;

    // While the server holds the LOCK: passes, and the server goes on.
    let data_s = data.to_str().unwrap().to_string();
    let out = run(&["check", &data_s]);
    let report = out.ok();
    assert!(report.contains("no corruption found"), "{report}");
    assert!(report.contains("segment (active)"), "{report}");
    assert!(report.lines().any(|l| l.starts_with("index")), "{report}");
    assert_accepted(&server.api.post_ndjson(&events("c", 300, 10)).await, 10);

    // A clean stop writes a snapshot.
    server.stop_clean();
    let out = run(&["check", &data_s]);
    let report = out.ok().to_string();
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("snapshot") && l.contains(": ok")),
        "{report}"
    );

    // A flipped byte in a sealed segment: the file and the record's offset.
    let copy = dir.path().join("copy1");
    copy_dir(&data, &copy);
    let segs = segments(&copy);
    assert!(segs.len() >= 3, "{segs:?}");
    let seg = &segs[0];
    let bytes = std::fs::read(seg).unwrap();
    let at = bytes.len() / 2;
    flip(seg, at);
    let out = run(&["check", copy.to_str().unwrap()]);
    let line = out.failed().to_string();
    let offset = record_start(&bytes, at);
    assert!(
        line.contains(&format!("{} is corrupt at offset {offset}", seg.display())),
        "{line}"
    );
    assert!(out.stdout.contains("CORRUPT"), "{}", out.stdout);

    // A flipped byte in a snapshot's meta archive (right after its 64-byte header).
    let copy = dir.path().join("copy2");
    copy_dir(&data, &copy);
    let snaps: Vec<_> = std::fs::read_dir(copy.join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vxs"))
        .collect();
    assert!(!snaps.is_empty());
    flip(&snaps[0], 64);
    let out = run(&["check", copy.to_str().unwrap()]);
    let line = out.failed().to_string();
    assert!(
        line.contains(&format!("{} is corrupt at offset 64", snaps[0].display())),
        "{line}"
    );
}
