//! Smoke tests of `vx-loadtest` (the real binary) against the real Veltrix server started
//! in-process on `127.0.0.1:0` and temporary Unix sockets, and against a real `redis-server`
//! for the kv scenario and the stream commands (ingest as `XADD`, replay as `XRANGE`). They assert that each scenario runs to completion, counts what the
//! server stored, and writes a valid report; never a speed. The features and kv scenarios are
//! also checked against each other: the same seed leaves the same keys in both stores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use veltrix::config::{Config, FsyncSetting, Scope, TokenDecl};
use veltrix::server::Server;
use vx_loadtest::report::{Report, decode_histogram};

const BIN: &str = env!("CARGO_BIN_EXE_vx-loadtest");

/// A Veltrix server serving HTTP and frames on TCP and Unix sockets, stopped on drop.
struct Veltrix {
    /// The token the harness's own reads send, when auth is on.
    token: Option<String>,
    http: SocketAddr,
    frames: SocketAddr,
    /// The Redis-protocol listener, when the test turned it on.
    resp: Option<SocketAddr>,
    dir: tempfile::TempDir,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Veltrix {
    fn start() -> Veltrix {
        Veltrix::start_with(|_| {})
    }

    fn start_with(tweak: impl FnOnce(&mut Config)) -> Veltrix {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.server.listen = "127.0.0.1:0".into();
        cfg.server.uds = Some(dir.path().join("http.sock"));
        cfg.server.frames_listen = Some("127.0.0.1:0".into());
        cfg.server.frames_uds = Some(dir.path().join("frames.sock"));
        cfg.storage.data_dir = dir.path().join("data");
        cfg.storage.shards = Some(4);
        cfg.storage.fsync = FsyncSetting::Always;
        tweak(&mut cfg);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime.block_on(Server::bind(cfg)).unwrap();
        let http = server.local_addr();
        let frames = server.frames_addr().unwrap();
        let resp = server.resp_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(server.run(async {
            let _ = rx.await;
        }));
        let v = Veltrix {
            token: None,
            http,
            frames,
            resp,
            dir,
            stop: Some(tx),
            runtime: Some(runtime),
        };
        // A cluster node is ready once it joined its group and caught up.
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(v.http, "/readyz", None).0 != 200 {
            assert!(
                Instant::now() < deadline,
                "the server is not ready after 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        v
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Events stored in the streams named `prefix…` once `expected` are visible (an ack at
    /// `write` durability comes before the fsync that makes the events visible to readers under
    /// `fsync always`), or after 5 s; never more than were acknowledged.
    fn stored_eventually(&self, prefix: &str, expected: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let n = self.stored(prefix);
            if n == expected || Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Events stored in the streams named `prefix…`.
    fn stored(&self, prefix: &str) -> u64 {
        let (status, body) = get(
            self.http,
            &format!("/v1/streams?prefix={prefix}&limit=10000"),
            self.token.as_deref(),
        );
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["events"].as_u64().unwrap())
            .sum()
    }
}

impl Drop for Veltrix {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

/// A bare HTTP GET: status and body.
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    request(addr, "GET", path, token, None)
}

/// A bare HTTP request, with a JSON body if given: status and body.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    json: Option<&str>,
) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    // HTTP/1.0: the answer is never chunked, the body is the rest of the stream.
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let body = json.map_or(String::new(), |b| {
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        )
    });
    let end = if json.is_some() { "" } else { "\r\n" };
    let req = format!("{method} {path} HTTP/1.0\r\nHost: x\r\n{auth}{body}{end}");
    if s.write_all(req.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

fn write_workload(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Run a workload with `--json`; assert it completed and return its report.
fn run_report(workload: &Path, sets: &[&str], json: &Path) -> Report {
    let mut args = vec!["run", workload.to_str().unwrap(), "-q"];
    for s in sets {
        args.extend(["--set", s]);
    }
    args.extend(["--json", json.to_str().unwrap()]);
    let out = run(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{workload:?} {sets:?}: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("p99.9 ms"), "no table:\n{stdout}");
    let text = std::fs::read_to_string(json).unwrap();
    Report::from_json(&text, "report").unwrap()
}

/// Every operation of the report: successes counted, no errors, a histogram holding exactly
/// the successes; and a time series.
fn check_report(r: &Report, op: &str) -> u64 {
    let o = r
        .operations
        .get(op)
        .unwrap_or_else(|| panic!("no {op} in {:?}", r.operations.keys()));
    assert!(o.ok > 0, "{op}: nothing succeeded");
    assert_eq!(o.errors, 0, "{op}: errors {:?}", r.errors);
    let h = decode_histogram(&o.histogram).unwrap();
    assert_eq!(h.len(), o.ok, "{op}: the histogram holds every success");
    assert!(o.latency_ms.p50 > 0.0 && o.latency_ms.p50 <= o.latency_ms.max);
    assert!(!r.intervals.is_empty());
    o.events
}

#[test]
fn ingest_over_every_transport_stores_exactly_what_the_report_counts() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let http = format!("endpoints=\"http://{}\"", v.http);
    let unix = format!("endpoints=\"unix:{}\"", v.socket("http.sock").display());
    let frames = format!("endpoints=\"frames://{}\"", v.frames);
    let frames_unix = format!(
        "endpoints=\"frames+unix:{}\"",
        v.socket("frames.sock").display()
    );
    let wl = write_workload(
        tmp.path(),
        "ingest.toml",
        "scenario = \"ingest\"\nbatch = 10\nstreams = 3\nconnections = 2\nwarmup_s = 0\nmeasure_s = 1\n",
    );
    // Without a warm-up every operation falls in the measured window, so the server holds
    // exactly the events the report counts.
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("http-", vec![&http, "stream_prefix=\"http-\""]),
        (
            "unix-",
            vec![
                &unix,
                "stream_prefix=\"unix-\"",
                "rate=200",
                "format=\"json\"",
                "durability=\"fsync\"",
                "ids=true",
            ],
        ),
        (
            "frames-",
            vec![&frames, "stream_prefix=\"frames-\"", "pipeline_depth=4"],
        ),
        (
            "fu-",
            vec![
                &frames_unix,
                "stream_prefix=\"fu-\"",
                "rate=300",
                "pipeline_depth=2",
                "durability=\"write\"",
            ],
        ),
    ];
    for (prefix, sets) in cases {
        let json = tmp.path().join(format!("{prefix}.json"));
        let r = run_report(&wl, &sets, &json);
        let events = check_report(&r, "ingest");
        assert_eq!(events, r.operations["ingest"].ok * 10, "{prefix}");
        assert_eq!(
            v.stored_eventually(prefix, events),
            events,
            "{prefix}: stored vs counted"
        );
        if r.open_loop {
            // Every scheduled send of the window was made, on time or counted late.
            let rate = r.workload.rate.unwrap();
            let expected = (rate * r.measure_s) as u64;
            assert!(
                r.late_sends.sends.abs_diff(expected) <= 2,
                "{prefix}: {:?}",
                r.late_sends
            );
            assert_eq!(r.operations["ingest"].ok, r.late_sends.sends, "{prefix}");
        } else {
            assert_eq!(r.late_sends.sends, 0);
        }
    }
}

#[test]
fn refusals_are_counted_apart_from_errors_and_store_nothing() {
    // One shard of 100 events at a 90% mark: two 50-event requests in flight fill it, so
    // eight connections sending at once are refused often.
    let v = Veltrix::start_with(|cfg| {
        cfg.storage.shards = Some(1);
        cfg.ingest.queue_capacity = 100;
    });
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "busy.toml",
        &format!(
            "endpoints = \"http://{}\"\nbatch = 50\nconnections = 8\nwarmup_s = 0\nmeasure_s = 1.5\n",
            v.http
        ),
    );
    for (prefix, rate) in [("open-", "rate=4000"), ("closed-", "seed=3")] {
        let json = tmp.path().join(format!("{prefix}.json"));
        let stream = format!("stream_prefix=\"{prefix}\"");
        let r = run_report(&wl, &[&stream, rate], &json);
        let o = &r.operations["ingest"];
        assert!(o.refused > 0, "{prefix}: no 429 at all: {o:?}");
        assert_eq!(
            o.errors, 0,
            "{prefix}: a 429 is not an error: {:?}",
            r.errors
        );
        assert!(o.ok > 0, "{prefix}: {o:?}");
        // Refused requests stored nothing: the server holds exactly the successes.
        assert_eq!(v.stored_eventually(prefix, o.events), o.events, "{prefix}");
        assert!(
            String::from_utf8_lossy(&std::fs::read(&json).unwrap()).contains("\"refused\""),
            "{prefix}"
        );
    }
}

#[test]
fn the_token_reaches_every_transport_and_a_refused_one_is_an_error() {
    let mut v = Veltrix::start_with(|cfg| {
        cfg.auth.tokens = vec![TokenDecl {
            token: "s3cret".into(),
            scopes: vec![Scope::Ingest, Scope::Read],
        }];
    });
    v.token = Some("s3cret".into());
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "auth.toml",
        "batch = 5\nconnections = 1\nwarmup_s = 0\nmeasure_s = 0.3\nrate = 50\n",
    );
    let http = format!("endpoints=\"http://{}\"", v.http);
    let frames = format!("endpoints=\"frames://{}\"", v.frames);
    for (prefix, ep) in [("auth-http-", &http), ("auth-frames-", &frames)] {
        let json = tmp.path().join(format!("{prefix}.json"));
        let stream = format!("stream_prefix=\"{prefix}\"");
        let r = run_report(&wl, &[ep, &stream, "token=\"s3cret\""], &json);
        let text = std::fs::read_to_string(&json).unwrap();
        assert!(!text.contains("s3cret"), "the report carries the token");
        let events = check_report(&r, "ingest");
        assert_eq!(v.stored_eventually(prefix, events), events, "{prefix}");
    }
    // Features: GETs and queries need read, PUTs (the preload too) and DELETEs ingest; the
    // workload's durability goes with the writes.
    let features = write_workload(
        tmp.path(),
        "auth-features.toml",
        &format!(
            "scenario = \"features\"\nendpoints = \"http://{}\"\nkey_space = 20\nread_pct = 40\nwrite_pct = 30\ndelete_pct = 10\nquery_pct = 20\nbatch_size = 5\ndurability = \"none\"\nconnections = 2\nwarmup_s = 0\nmeasure_s = 0.3\nrate = 100\ntoken = \"s3cret\"\n",
            v.http
        ),
    );
    let json = tmp.path().join("auth-features.json");
    let r = run_report(&features, &[], &json);
    for op in ["get", "set", "query"] {
        check_report(&r, op);
    }
    assert!(feature_value(&v, "key:000000000019").is_some(), "preloaded");

    // A wrong token: every request over HTTP is an error (401), named in the report, and the
    // run exits 2 (nothing succeeded); nothing is stored.
    let json = tmp.path().join("bad.json");
    let out = run(&[
        "run",
        wl.to_str().unwrap(),
        "-q",
        "--set",
        &http,
        "--set",
        "stream_prefix=\"auth-bad-\"",
        "--set",
        "token=\"wrong\"",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = Report::from_json(&std::fs::read_to_string(&json).unwrap(), "bad").unwrap();
    let o = &r.operations["ingest"];
    assert_eq!(o.ok, 0);
    assert!(o.errors > 0);
    assert!(
        r.errors.keys().any(|e| e.contains("401 unauthorized")),
        "{:?}",
        r.errors
    );
    assert_eq!(v.stored("auth-bad-"), 0);
}

/// replay-point.toml (smaller): 1-event pages over HTTP, open loop, each reading exactly one
/// event.
#[test]
fn replay_point_reads_one_event_per_page() {
    let v = Veltrix::start();
    let dir = tempfile::tempdir().unwrap();
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let ep = format!("endpoints=\"http://{}\"", v.http);
    let r = run_report(
        &workloads.join("replay-point.toml"),
        &[
            &ep,
            "streams=2",
            "preload_events=500",
            "rate=1000",
            "connections=8",
            "warmup_s=0.2",
            "measure_s=1",
        ],
        &dir.path().join("point.json"),
    );
    assert_eq!(v.stored("lt-"), 1000);
    let events = check_report(&r, "page");
    assert_eq!(events, r.operations["page"].ok, "one event per page");
    assert!(r.open_loop);
    assert!(r.late_sends.sends > 0);
}

#[test]
fn replay_pages_and_scans_read_the_preloaded_streams() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "replay.toml",
        &format!(
            "scenario = \"replay\"\nendpoints = [\"http://{}\"]\nstreams = 2\npreload_events = 500\npage_events = 64\nscan_pct = 20\nconnections = 2\nwarmup_s = 0.2\nmeasure_s = 1\nstream_prefix = \"rp-\"\n",
            v.http
        ),
    );
    let json = tmp.path().join("replay.json");
    let r = run_report(&wl, &[], &json);
    assert_eq!(v.stored("rp-"), 1000, "preload fills each stream to 500");
    let page_events = check_report(&r, "page");
    // Every page is full: positions are drawn so that a whole page fits.
    assert_eq!(page_events, r.operations["page"].ok * 64);
    let scan_events = check_report(&r, "scan");
    assert_eq!(scan_events, r.operations["scan"].ok * 500);
    // A second run finds the streams full and writes nothing more.
    let r = run_report(&wl, &["measure_s=0.3", "scan_pct=0"], &json);
    check_report(&r, "page");
    assert_eq!(v.stored("rp-"), 1000);

    // Over the Unix socket too.
    let unix = format!("endpoints=\"unix:{}\"", v.socket("http.sock").display());
    let r = run_report(&wl, &[&unix, "measure_s=0.3", "scan_pct=0"], &json);
    check_report(&r, "page");

    // More streams than one page of the stream list holds: all are found and read.
    let many = [
        "stream_prefix=\"many-\"",
        "streams=400",
        "preload_events=2",
        "page_events=2",
        "scan_pct=0",
        "measure_s=0.5",
    ];
    let r = run_report(&wl, &many, &json);
    assert_eq!(v.stored("many-"), 800);
    assert_eq!(check_report(&r, "page"), r.operations["page"].ok * 2);
}

/// The real `redis-server` for the kv scenario, on a free port with its data in a temporary
/// directory; killed on drop. (`mini_resp_server` below serves only the reconnect test, which
/// needs a server that drops connections on purpose.)
struct Resp {
    child: std::process::Child,
    port: u16,
    /// Its data dir, removed on drop.
    _dir: tempfile::TempDir,
}

impl Resp {
    fn start() -> Resp {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let dir = tempfile::tempdir().unwrap();
        // A missing redis-server fails the test rather than quietly measuring something else:
        // scripts/test installs it.
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir", dir.path().to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is needed for the kv scenario (scripts/test installs it; on Debian: apt-get install redis-server)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Resp {
            child,
            port,
            _dir: dir,
        }
    }

    fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Resp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET, SET, DEL and MGET of RESP2 over a shared map, a thread per connection, each connection
/// dropped after `close_after` commands: a server that misbehaves on purpose.
fn mini_resp_server(close_after: usize) -> u16 {
    use std::collections::HashMap;
    use std::io::BufRead;
    use std::sync::{Arc, Mutex};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let map: Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let map = map.clone();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let mut rd = std::io::BufReader::new(conn);
                let mut line = String::new();
                let mut read_line = |rd: &mut std::io::BufReader<TcpStream>| -> Option<String> {
                    line.clear();
                    (rd.read_line(&mut line).ok()? > 0).then(|| line.trim_end().to_string())
                };
                let mut served = 0usize;
                while let Some(head) = read_line(&mut rd) {
                    if served >= close_after {
                        return;
                    }
                    served += 1;
                    let n: usize = head.trim_start_matches('*').parse().unwrap();
                    let mut args = Vec::new();
                    for _ in 0..n {
                        let len: usize = read_line(&mut rd)
                            .unwrap()
                            .trim_start_matches('$')
                            .parse()
                            .unwrap();
                        let mut arg = vec![0; len + 2];
                        rd.read_exact(&mut arg).unwrap();
                        arg.truncate(len);
                        args.push(arg);
                    }
                    let mut m = map.lock().unwrap();
                    let reply = match args[0].as_slice() {
                        b"GET" => match m.get(&args[1]) {
                            Some(v) => {
                                let mut r = format!("${}\r\n", v.len()).into_bytes();
                                r.extend_from_slice(v);
                                r.extend_from_slice(b"\r\n");
                                r
                            }
                            None => b"$-1\r\n".to_vec(),
                        },
                        b"SET" => {
                            m.insert(args[1].clone(), args[2].clone());
                            b"+OK\r\n".to_vec()
                        }
                        b"DEL" => {
                            format!(":{}\r\n", u8::from(m.remove(&args[1]).is_some())).into_bytes()
                        }
                        b"MGET" => {
                            let mut r = format!("*{}\r\n", args.len() - 1).into_bytes();
                            for k in &args[1..] {
                                match m.get(k) {
                                    Some(v) => {
                                        r.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
                                        r.extend_from_slice(v);
                                        r.extend_from_slice(b"\r\n");
                                    }
                                    None => r.extend_from_slice(b"$-1\r\n"),
                                }
                            }
                            r
                        }
                        _ => b"-ERR unknown command\r\n".to_vec(),
                    };
                    drop(m);
                    if out.write_all(&reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn kv_runs_the_mix_over_resp() {
    let server = Resp::start();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let json = dir.path().join("kv.json");
    let svg = dir.path().join("kv.svg");
    let endpoint = format!("endpoints=\"resp://127.0.0.1:{port}\"");
    let out = run(&[
        "run",
        workloads.join("kv-70-25-5.toml").to_str().unwrap(),
        "-q",
        "--set",
        &endpoint,
        "--set",
        "key_space=2000",
        "--set",
        "connections=4",
        "--set",
        "pipeline_depth=8",
        "--set",
        "warmup_s=0.2",
        "--set",
        "measure_s=1",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = Report::from_json(&std::fs::read_to_string(&json).unwrap(), "kv").unwrap();
    let (get, set, del) = (
        check_report(&r, "get"),
        check_report(&r, "set"),
        check_report(&r, "del"),
    );
    let total = (get + set + del) as f64;
    // 70/25/5 within a generous margin (a second of a few thousand operations).
    assert!(
        (get as f64 / total - 0.70).abs() < 0.05,
        "{get} {set} {del}"
    );
    assert!(
        (set as f64 / total - 0.25).abs() < 0.05,
        "{get} {set} {del}"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("get p99"),
        "not the plot"
    );
}

#[test]
fn lanes_reconnect_when_the_server_drops_them_and_the_run_still_ends() {
    // Every connection is dropped after 40 commands, with up to 8 in flight: pipelined lanes
    // lose answers, count them as errors, reconnect, and stay in step with the schedule.
    let port = mini_resp_server(40);
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "drop.toml",
        &format!(
            "scenario = \"kv\"\nendpoints = \"resp://127.0.0.1:{port}\"\nkey_space = 100\npreload_keys = 0\nconnections = 2\npipeline_depth = 8\nwarmup_s = 0\nmeasure_s = 1\ntimeout_s = 2\n"
        ),
    );
    for mode in ["rate=2000", "seed=5"] {
        let json = tmp.path().join("drop.json");
        let mut child = Command::new(BIN)
            .args(["run", wl.to_str().unwrap(), "-q", "--set", mode, "--json"])
            .arg(&json)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{mode}: the run did not end after its connections broke");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "{mode}: {status:?}");
        let r = Report::from_json(&std::fs::read_to_string(&json).unwrap(), "drop").unwrap();
        let (ok, errors): (u64, u64) = r
            .operations
            .values()
            .fold((0, 0), |(a, b), o| (a + o.ok, b + o.errors));
        assert!(ok > 40, "{mode}: reconnected lanes go on: {ok}");
        assert!(errors > 0, "{mode}: lost answers are errors");
        if r.open_loop {
            // Every scheduled operation is accounted for exactly once: answered, or an error
            // (lost in flight, or due while the connection was down).
            let accounted: u64 = r
                .operations
                .values()
                .map(|o| o.ok + o.errors + o.refused)
                .sum();
            let scheduled = (r.workload.rate.unwrap() * r.measure_s) as u64;
            assert!(
                accounted.abs_diff(scheduled) <= 2,
                "{mode}: {accounted} of {scheduled}"
            );
            assert!(r.late_sends.sends <= accounted);
        }
    }
}

#[test]
fn merge_adds_the_reports_of_two_hosts() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "w.toml",
        &format!(
            "endpoints = \"http://{}\"\nbatch = 5\nconnections = 1\nwarmup_s = 0\nmeasure_s = 0.5\nrate = 100\n",
            v.http
        ),
    );
    let (a, b, m) = (
        tmp.path().join("a.json"),
        tmp.path().join("b.json"),
        tmp.path().join("m.json"),
    );
    let ra = run_report(&wl, &[], &a);
    let rb = run_report(&wl, &["seed=2"], &b);
    let out = run(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
        m.to_str().unwrap(),
        "--plot",
        tmp.path().join("m.svg").to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 hosts merged"));
    let rm = Report::from_json(&std::fs::read_to_string(&m).unwrap(), "m").unwrap();
    let (oa, ob, om) = (
        &ra.operations["ingest"],
        &rb.operations["ingest"],
        &rm.operations["ingest"],
    );
    assert_eq!(om.ok, oa.ok + ob.ok);
    assert_eq!(om.events, oa.events + ob.events);
    let mut direct = decode_histogram(&oa.histogram).unwrap();
    direct
        .add(decode_histogram(&ob.histogram).unwrap())
        .unwrap();
    assert_eq!(decode_histogram(&om.histogram).unwrap(), direct);
    assert_eq!(
        rm.late_sends.sends,
        ra.late_sends.sends + rb.late_sends.sends
    );
    assert_eq!(rm.hosts.len(), 2);

    // A file that is not a report is refused, with exit 1.
    let out = run(&["merge", wl.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a vx-loadtest report"));
}

#[test]
fn the_command_line_explains_itself_and_refuses_what_cannot_run() {
    let out = run(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for key in vx_loadtest::workload::KEYS {
        assert!(help.contains(key.name), "--help misses {}", key.name);
    }
    let tmp = tempfile::tempdir().unwrap();
    let refuse = |text: &str, sets: &[&str], says: &str| {
        let wl = write_workload(tmp.path(), "bad.toml", text);
        let mut args = vec!["run", wl.to_str().unwrap(), "-q"];
        for s in sets {
            args.extend(["--set", s]);
        }
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text} {sets:?}: {err}");
        assert!(err.contains(says), "{text} {sets:?}: {err}");
    };
    refuse("ratee = 1\n", &[], "ratee");
    refuse("", &["batch=0"], "batch");
    // fanout's producers write at a fixed rate: there is no closed-loop fanout.
    refuse("scenario = \"fanout\"\n", &[], "needs a rate");
    // HTTP/1.1 cannot keep kv's pipeline depth on one connection.
    refuse(
        "scenario = \"features\"\n",
        &["pipeline_depth=2"],
        "set pipeline_depth = 1",
    );
    // Nothing listens there: the run fails at once, naming the endpoint.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    refuse(
        &format!("endpoints = \"http://{closed}\"\n"),
        &[],
        "cannot connect",
    );
    let out = run(&["run", tmp.path().join("missing.toml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
}

/// The feature `v` of `entity` at the server; `None` for an unknown entity (404).
fn feature_value(v: &Veltrix, entity: &str) -> Option<String> {
    let path = format!("/v1/features/{}", entity.replace(':', "%3A"));
    let (status, body) = get(v.http, &path, v.token.as_deref());
    match status {
        404 => None,
        200 => {
            let j: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(j["entity"], entity, "{body}");
            Some(j["features"]["v"].as_str().unwrap().to_string())
        }
        other => panic!("GET {path}: {other} {body}"),
    }
}

/// GET `key` over RESP; `None` for nil.
fn resp_get(port: u16, key: &[u8]) -> Option<Vec<u8>> {
    use vx_loadtest::resp;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut cmd = Vec::new();
    resp::encode(&[b"GET", key], &mut cmd);
    s.write_all(&cmd).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match resp::parse(&buf).unwrap() {
            Some((resp::Reply::Bulk(None), _)) => return None,
            // The value ends before the reply's last CRLF.
            Some((resp::Reply::Bulk(Some(len)), used)) => {
                return Some(buf[used - 2 - len..used - 2].to_vec());
            }
            Some((other, _)) => panic!("GET answered {other:?}"),
            None => {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the RESP server closed the connection");
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// One RESP command and its reply, parsed whole.
fn resp_call(port: u16, args: &[&[u8]]) -> vx_loadtest::resp::Value {
    use vx_loadtest::resp;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut cmd = Vec::new();
    resp::encode(args, &mut cmd);
    s.write_all(&cmd).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((v, _)) = resp::parse_value(&buf).unwrap() {
            return v;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the RESP server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The entries of `XRANGE stream start end`: each id and its fields as (name, value) pairs.
fn xrange(port: u16, stream: &str, start: &str, end: &str) -> Vec<(String, Vec<(String, String)>)> {
    let reply = resp_call(
        port,
        &[
            b"XRANGE",
            stream.as_bytes(),
            start.as_bytes(),
            end.as_bytes(),
        ],
    );
    let text =
        |v: &vx_loadtest::resp::Value| String::from_utf8_lossy(v.bytes().unwrap()).to_string();
    reply
        .items()
        .unwrap_or_else(|| panic!("XRANGE {stream} answered {reply:?}"))
        .iter()
        .map(|e| {
            let e = e.items().unwrap();
            let fields = e[1].items().unwrap();
            (
                text(&e[0]),
                fields
                    .chunks(2)
                    .map(|kv| (text(&kv[0]), text(&kv[1])))
                    .collect(),
            )
        })
        .collect()
}

fn xlen(port: u16, stream: &str) -> i64 {
    match resp_call(port, &[b"XLEN", stream.as_bytes()]) {
        vx_loadtest::resp::Value::Int(n) => n,
        other => panic!("XLEN {stream}: {other:?}"),
    }
}

/// Point reads (xrange-point.toml, smaller) and scans over RESP at `port`: the fill writes
/// `<seq>-0` ids from 1 on whichever the server, every point read returns exactly the entry
/// asked for, a scan reads a whole stream. Returns the events of entry 1-0 of `lt-0`.
fn stream_reads_over_resp(port: u16, dir: &Path) -> Vec<(String, String)> {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let ep = format!("endpoints=\"resp://127.0.0.1:{port}\"");
    let json = dir.join("xrange.json");
    let small = [
        ep.as_str(),
        "streams=4",
        "preload_events=3000",
        "rate=2000",
        "connections=8",
        "warmup_s=0.2",
        "measure_s=1",
    ];
    let r = run_report(&workloads.join("xrange-point.toml"), &small, &json);
    check_report(&r, "page");
    let page = &r.operations["page"];
    // No error: every entry answered had the id asked for (the lane counts any other as an
    // error); one event per success: every point read found its entry.
    assert_eq!(page.events, page.ok, "{:?}", r.errors);
    assert_eq!(r.operations.len(), 1, "{:?}", r.operations.keys());
    for s in 0..4 {
        let name = format!("lt-{s}");
        assert_eq!(xlen(port, &name), 3000);
        let first = xrange(port, &name, "-", "+");
        assert_eq!(first.len(), 3000);
        for (i, (id, fields)) in first.iter().enumerate() {
            assert_eq!(id, &format!("{}-0", i + 1));
            assert!(fields.contains(&("type".into(), "lt".into())), "{fields:?}");
        }
    }
    // Again: the streams are full, nothing is written, the same entries are read.
    let before = xrange(port, "lt-0", "1-0", "1-0");
    let r = run_report(&workloads.join("xrange-point.toml"), &small, &json);
    check_report(&r, "page");
    assert_eq!(xlen(port, "lt-0"), 3000);
    assert_eq!(xrange(port, "lt-0", "1-0", "1-0"), before);

    // Pages of 100 and whole-stream scans (25,000 entries: three XRANGEs of 10,000), closed
    // loop, two in flight per connection.
    let wl = write_workload(
        dir,
        "scan.toml",
        &format!(
            "scenario = \"replay\"\nendpoints = \"resp://127.0.0.1:{port}\"\nstreams = 1\nstream_prefix = \"scan-\"\npreload_events = 25000\npage_events = 100\nscan_pct = 20\nconnections = 2\npipeline_depth = 2\nwarmup_s = 0\nmeasure_s = 1\n"
        ),
    );
    let r = run_report(&wl, &[], &json);
    assert_eq!(check_report(&r, "page"), r.operations["page"].ok * 100);
    assert_eq!(check_report(&r, "scan"), r.operations["scan"].ok * 25_000);
    let (_, fields) = before.into_iter().next().unwrap();
    fields
}

/// XADD (xadd.toml, for a second): one event per operation, each stored; the streams hold
/// exactly the successes (no warm-up). Returns the events stored.
fn xadds_over_resp(port: u16, dir: &Path) -> u64 {
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let ep = format!("endpoints=\"resp://127.0.0.1:{port}\"");
    let json = dir.join("xadd.json");
    let r = run_report(
        &workloads.join("xadd.toml"),
        &[&ep, "warmup_s=0", "measure_s=1", "connections=2"],
        &json,
    );
    let events = check_report(&r, "xadd");
    let x = &r.operations["xadd"];
    assert_eq!(events, x.ok, "one event per XADD");
    assert_eq!(r.operations.len(), 1, "{:?}", r.operations.keys());
    assert_eq!(x.refused, 0);
    events
}

#[test]
fn stream_workloads_run_over_resp_against_redis() {
    let redis = Resp::start();
    let dir = tempfile::tempdir().unwrap();
    let fields = stream_reads_over_resp(redis.port(), dir.path());
    // The events the fill wrote: type, entity, data, 128 bytes of fields and values.
    let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(names, ["type", "entity", "data"]);
    assert_eq!(
        fields.iter().map(|(f, v)| f.len() + v.len()).sum::<usize>(),
        128
    );

    let stored = xadds_over_resp(redis.port(), dir.path());
    let total: i64 = (0..16)
        .map(|s| xlen(redis.port(), &format!("xadd-{s}")))
        .sum();
    assert_eq!(
        total as u64, stored,
        "Redis holds every XADD the report counts"
    );

    // A Redis stream written with XADD * has time-based ids, which point reads cannot name:
    // the run refuses it rather than reading nothing.
    let out = run(&[
        "run",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("workloads/xrange-point.toml")
            .to_str()
            .unwrap(),
        "-q",
        "--set",
        &format!("endpoints=\"resp://127.0.0.1:{}\"", redis.port()),
        "--set",
        "stream_prefix=\"xadd-\"",
        "--set",
        "preload_events=0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not the ids <seq>-0"), "{err}");
}

/// The same workloads against Veltrix's Redis-protocol listener (its stream commands: SPEC
/// §6, XADD and XRANGE). The fill writes the same events as on Redis (same fields, same ids).
#[test]
fn stream_workloads_run_over_resp_against_veltrix() {
    let v = Veltrix::start_with(|c| c.server.resp_listen = Some("127.0.0.1:0".into()));
    let port = v.resp.unwrap().port();
    let len = resp_call(port, &[b"XLEN", b"probe"]);
    assert!(
        !matches!(len, vx_loadtest::resp::Value::Error(_)),
        "Veltrix's RESP listener answers XLEN with {len:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let fields = stream_reads_over_resp(port, dir.path());
    let redis = Resp::start();
    let on_redis = stream_reads_over_resp(redis.port(), dir.path());
    for name in ["type", "entity", "data"] {
        let of = |f: &[(String, String)]| f.iter().find(|(n, _)| n == name).cloned();
        assert_eq!(of(&fields), of(&on_redis), "{name}: the same event on both");
    }
    let stored = xadds_over_resp(port, dir.path());
    assert_eq!(v.stored_eventually("xadd-", stored), stored);
}

/// The keys a one-connection kv or features run leaves set: its lane's operations replayed in
/// order, as many as it made (the run must have had no error or refusal, so that every drawn
/// operation was carried out).
fn keys_left_set(r: &Report) -> std::collections::BTreeSet<u64> {
    use vx_loadtest::ops::{KvGen, KvOp};
    assert_eq!(r.workload.connections, 1);
    assert!(
        r.operations
            .values()
            .all(|o| o.errors == 0 && o.refused == 0),
        "{:?}",
        r.errors
    );
    let n: u64 = r.operations.values().map(|o| o.ok).sum();
    let mut g = KvGen::new(&r.workload, 0).unwrap();
    let mut set = std::collections::BTreeSet::new();
    for _ in 0..n {
        match g.next_op() {
            KvOp::Set(k) => {
                set.insert(k);
            }
            KvOp::Del(k) => {
                set.remove(&k);
            }
            KvOp::Get(_) | KvOp::Query(_) => {}
        }
    }
    set
}

#[test]
fn features_store_what_the_report_counts_and_the_same_keys_as_kv() {
    let v = Veltrix::start();
    let redis = Resp::start();
    let tmp = tempfile::tempdir().unwrap();
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    // One connection, open loop, no warm-up: a run is exactly the first rate × measure_s
    // operations of lane 0's generator, in order, so what each store holds afterwards can be
    // computed. No preload, and deletes: GETs and DELETEs of unknown entities (404) are misses,
    // not errors.
    let common = [
        "key_space=40",
        "preload_keys=0",
        "connections=1",
        "rate=150",
        "warmup_s=0",
        "measure_s=1",
        "read_pct=40",
        "write_pct=40",
        "delete_pct=20",
        "seed=11",
    ];
    let http = format!("endpoints=\"http://{}\"", v.http);
    let resp = format!("endpoints=\"resp://127.0.0.1:{}\"", redis.port());
    let mut left = Vec::new();
    for (file, ep) in [("features-70-25-5.toml", &http), ("kv-70-25-5.toml", &resp)] {
        let mut sets = common.to_vec();
        sets.push(ep);
        let json = tmp.path().join(format!("{file}.json"));
        let r = run_report(&workloads.join(file), &sets, &json);
        for op in ["get", "set", "del"] {
            check_report(&r, op);
        }
        let ops: u64 = r.operations.values().map(|o| o.ok).sum();
        assert_eq!(ops, 150, "{file}: every scheduled operation");
        let expected = keys_left_set(&r);
        assert!(!expected.is_empty(), "{file}");
        for k in 0..40 {
            let key = vx_loadtest::ops::kv_key(k, 16);
            let held = if r.workload.scenario == vx_loadtest::workload::Scenario::Features {
                feature_value(&v, std::str::from_utf8(&key).unwrap()).map(String::into_bytes)
            } else {
                resp_get(redis.port(), &key)
            };
            assert_eq!(held.is_some(), expected.contains(&k), "{file}: key {k}");
            if let Some(value) = held {
                assert_eq!(value, vec![b'x'; 128], "{file}: key {k}");
            }
        }
        left.push(expected);
    }
    // The same seed drew the same operations on the same keys: both stores hold the same keys.
    assert_eq!(left[0], left[1]);
}

#[test]
fn features_preload_every_entity_and_batch_reads_count_their_values() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let json = tmp.path().join("q.json");
    // Over the Unix socket: the preload PUTs entities 0..300 (preload_keys defaults to
    // key_space), then 100% batch reads of 10 entities.
    let unix = format!("endpoints=\"unix:{}\"", v.socket("http.sock").display());
    let r = run_report(
        &workloads.join("features-query.toml"),
        &[
            &unix,
            "key_space=300",
            "batch_size=10",
            "connections=4",
            "warmup_s=0.2",
            "measure_s=1",
        ],
        &json,
    );
    assert_eq!(
        r.operations.keys().collect::<Vec<_>>(),
        ["query"],
        "only batch reads"
    );
    let q = &r.operations["query"];
    assert_eq!(check_report(&r, "query"), q.ok * 10);
    let values = q.values_per_s.expect("values_per_s of query");
    assert!(
        (values - (q.ok * 10) as f64 / r.measure_s).abs() < 1e-6,
        "{values} vs {} queries",
        q.ok
    );
    assert!(r.table().contains("values/s: query"), "{}", r.table());
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.contains("\"values_per_s\""));
    // Every entity was PUT once, with kv's value; reads changed nothing.
    let value = "x".repeat(128);
    for k in 0..300 {
        let key = vx_loadtest::ops::key_string(k, 16);
        assert_eq!(
            feature_value(&v, &key).as_deref(),
            Some(value.as_str()),
            "{key}"
        );
    }
    assert_eq!(feature_value(&v, "key:000000000300"), None);
    // What a batch read asks, answered by the server in request order.
    let (status, body) = request(
        v.http,
        "POST",
        "/v1/features/query",
        None,
        Some(r#"{"entities":["key:000000000007","key:000000000300"],"names":["v"]}"#),
    );
    assert_eq!(status, 200, "{body}");
    let j: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["results"][0]["entity"], "key:000000000007");
    assert_eq!(j["results"][0]["features"]["v"], value.as_str());
    assert!(j["results"][1].is_null(), "{body}");

    // GETs at a fixed rate over TCP, open loop: every scheduled GET is made and hits.
    let http = format!("endpoints=\"http://{}\"", v.http);
    let r = run_report(
        &workloads.join("features-get.toml"),
        &[
            &http,
            "key_space=300",
            "preload_keys=0",
            "rate=300",
            "connections=5",
            "warmup_s=0",
            "measure_s=0.5",
        ],
        &json,
    );
    check_report(&r, "get");
    let g = &r.operations["get"];
    assert!(g.ok.abs_diff(150) <= 2, "{g:?}");
    assert_eq!(g.ok, r.late_sends.sends);
    assert_eq!(g.values_per_s, None);
}

#[test]
fn kv_batch_reads_are_mgets_of_batch_size_keys() {
    let server = Resp::start();
    let tmp = tempfile::tempdir().unwrap();
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
    let json = tmp.path().join("kvq.json");
    let endpoint = format!("endpoints=\"resp://127.0.0.1:{}\"", server.port());
    let r = run_report(
        &workloads.join("kv-query.toml"),
        &[
            &endpoint,
            "key_space=300",
            "batch_size=10",
            "connections=2",
            "pipeline_depth=4",
            "warmup_s=0",
            "measure_s=0.5",
        ],
        &json,
    );
    let q = &r.operations["query"];
    assert_eq!(check_report(&r, "query"), q.ok * 10);
    assert_eq!(r.operations.len(), 1);
    let values = q.values_per_s.expect("values_per_s of query");
    assert!((values - (q.ok * 10) as f64 / r.measure_s).abs() < 1e-6);
    // The preload SET every key.
    assert_eq!(
        resp_get(server.port(), &vx_loadtest::ops::kv_key(299, 16)),
        Some(vec![b'x'; 128])
    );
}

/// The fanout report of a run: its ingest and deliveries checked, every follower complete.
fn check_fanout(r: &Report, followers: u64) -> vx_loadtest::report::FanoutReport {
    let ingested = check_report(r, "ingest");
    let delivered = check_report(r, "deliver");
    let f = r.fanout.clone().expect("a fanout run reports its check");
    assert!(f.passed, "{f:#?}\n{:?}", r.errors);
    assert_eq!(f.followers, followers);
    assert_eq!(
        (
            f.complete,
            f.with_gaps,
            f.with_duplicates,
            f.with_out_of_order
        ),
        (followers, 0, 0, 0),
        "{f:#?}"
    );
    assert_eq!(
        (f.missing_events, f.duplicate_events, f.out_of_order_events),
        (0, 0, 0)
    );
    assert_eq!((f.reconnects, f.retained_notices, f.deleted), (0, 0, 0));
    // Every acked event reached every follower, and only those: no request was lost.
    assert_eq!(f.unacked_seqs, 0, "{f:#?}");
    assert_eq!(f.last_acked_seq + 1 - f.from_seq, f.acked_events);
    assert_eq!(f.delivered, followers * f.acked_events);
    assert!(
        f.drained_in_s.is_some(),
        "every follower had the tail: {f:#?}"
    );
    // The measured deliveries are the measured events times the followers (events received
    // before their ack near the window's edges are placed by their receipt time).
    let expected = followers * ingested;
    assert!(
        delivered.abs_diff(expected) <= expected / 50 + followers,
        "{delivered} deliveries for {ingested} events × {followers} followers"
    );
    f
}

#[test]
fn fanout_followers_receive_every_event_in_order() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "fanout.toml",
        &format!(
            "scenario = \"fanout\"\nendpoints = \"http://{}\"\nfollowers = 20\nconnections = 4\nrate = 200\nwarmup_s = 0.5\nmeasure_s = 2\ndrain_s = 2\nstream_prefix = \"fan-\"\n",
            v.http
        ),
    );
    let json = tmp.path().join("fanout.json");
    let r = run_report(&wl, &[], &json);
    let f = check_fanout(&r, 20);
    // A new stream: one event created it, the followers started after it.
    assert_eq!((f.stream.as_str(), f.from_seq), ("fan-0", 2));
    assert_eq!(
        v.stored_eventually("fan-", f.last_acked_seq),
        f.last_acked_seq
    );
    let deliver = &r.operations["deliver"];
    assert!(deliver.latency_ms.max > 0.0 && deliver.events == deliver.ok);
    assert!(r.intervals.iter().any(|i| i.ops.contains_key("deliver")));
    let text = std::fs::read_to_string(&json).unwrap();
    assert!(text.contains("\"fanout\"") && text.contains("\"passed\": true"));

    // Again on the same stream, over the Unix socket, 5 events per request, no warm-up: the
    // followers start after what the first run wrote.
    let unix = format!("endpoints=\"unix:{}\"", v.socket("http.sock").display());
    let r = run_report(
        &wl,
        &[
            &unix,
            "batch=5",
            "rate=40",
            "warmup_s=0",
            "measure_s=1",
            "followers=7",
        ],
        &json,
    );
    let g = check_fanout(&r, 7);
    assert_eq!(g.from_seq, f.last_acked_seq + 1);
    assert_eq!(g.acked_events, r.operations["ingest"].events);
    assert_eq!(v.stored("fan-"), g.last_acked_seq);

    // The table says so, and the run exits 0.
    let out = run(&["run", wl.to_str().unwrap(), "-q", "--set", "measure_s=0.5"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("fanout check: PASSED"), "{stdout}");
    assert!(stdout.contains("deliver"), "{stdout}");
}

#[test]
fn fanout_fails_its_check_and_exits_3_when_the_stream_is_deleted_under_it() {
    let v = Veltrix::start();
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "fanout.toml",
        &format!(
            "scenario = \"fanout\"\nendpoints = \"http://{}\"\nfollowers = 5\nconnections = 2\nrate = 100\nwarmup_s = 0\nmeasure_s = 2\ndrain_s = 0.5\nstream_prefix = \"gone-\"\n",
            v.http
        ),
    );
    let json = tmp.path().join("gone.json");
    let child = Command::new(BIN)
        .args(["run", wl.to_str().unwrap(), "-q", "--json"])
        .arg(&json)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the producers write (so every follower is connected), the stream is deleted: every
    // follower gets `event: deleted` and ends, while the producers write the stream again (its
    // seqs go on).
    let deadline = Instant::now() + Duration::from_secs(10);
    while v.stored("gone-") < 20 {
        assert!(Instant::now() < deadline, "the producers never wrote");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = request(v.http, "DELETE", "/v1/streams/gone-0", None, None);
    assert!((200..300).contains(&status), "{status} {body}");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("fanout check: FAILED (5 of 5 followers incomplete)"),
        "{stdout}"
    );
    let r = Report::from_json(&std::fs::read_to_string(&json).unwrap(), "gone").unwrap();
    let f = r.fanout.unwrap();
    assert!(!f.passed);
    assert_eq!((f.deleted, f.complete, f.with_gaps), (5, 0, 5), "{f:#?}");
    assert!(f.missing_events > 0 && f.delivered > 0, "{f:#?}");
    assert!(
        r.errors.keys().any(|e| e.contains("deleted")),
        "{:?}",
        r.errors
    );
}

#[test]
fn fanout_followers_over_the_server_limit_fail_the_run_at_the_start() {
    let v = Veltrix::start_with(|cfg| cfg.server.max_followers = 5);
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "fanout.toml",
        &format!(
            "scenario = \"fanout\"\nendpoints = \"http://{}\"\nfollowers = 8\nrate = 50\nwarmup_s = 0\nmeasure_s = 0.5\nstream_prefix = \"full-\"\n",
            v.http
        ),
    );
    let out = run(&["run", wl.to_str().unwrap(), "-q"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("HTTP 503") && err.contains("max_followers"),
        "{err}"
    );
    // Nothing was written but the event that created the stream.
    assert_eq!(v.stored("full-"), 1);
}

#[test]
fn fanout_followers_and_producers_send_the_token() {
    let v = Veltrix::start_with(|cfg| {
        cfg.auth.tokens = vec![TokenDecl {
            token: "s3cret".into(),
            scopes: vec![Scope::Ingest, Scope::Read],
        }];
    });
    let tmp = tempfile::tempdir().unwrap();
    let wl = write_workload(
        tmp.path(),
        "fanout.toml",
        &format!(
            "scenario = \"fanout\"\nendpoints = \"http://{}\"\nfollowers = 3\nconnections = 1\nrate = 50\nwarmup_s = 0\nmeasure_s = 0.5\nstream_prefix = \"auth-fan-\"\n",
            v.http
        ),
    );
    let json = tmp.path().join("auth.json");
    let r = run_report(&wl, &["token=\"s3cret\""], &json);
    check_fanout(&r, 3);
    assert!(!std::fs::read_to_string(&json).unwrap().contains("s3cret"));
    // A wrong token: the run stops at its first request (reading the stream), before any
    // follower or producer starts.
    let out = run(&[
        "run",
        wl.to_str().unwrap(),
        "-q",
        "--set",
        "token=\"wrong\"",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("401"), "{err}");
}

/// A free TCP port on loopback (a cluster node must know its address before it binds).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The frames lane against a three-node cluster on a real Kafka broker (docs/CLUSTER.md):
/// the run completes against every node's frames listener, and the cluster stores exactly
/// the events the report counts, once each.
#[test]
fn the_frames_lane_runs_against_a_three_node_cluster() {
    let broker = vx_cluster::testing::Broker::start();
    let nodes: Vec<Veltrix> = (0..3)
        .map(|i| {
            Veltrix::start_with(|c| {
                let port = free_port();
                c.server.listen = format!("127.0.0.1:{port}");
                c.cluster.mode = veltrix::config::ClusterMode::Kafka;
                c.cluster.kafka_brokers = Some(broker.bootstrap());
                c.cluster.topic = Some("lt-frames".into());
                c.cluster.node_id = Some(format!("n{i}"));
                c.cluster.advertise = Some(format!("http://127.0.0.1:{port}"));
                c.cluster.session_timeout = Duration::from_secs(3);
            })
        })
        .collect();
    for n in &nodes {
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(n.http, "/readyz", None).0 != 200 {
            assert!(Instant::now() < deadline, "a node is not ready after 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let endpoints: Vec<String> = nodes
        .iter()
        .map(|n| format!("\"frames://{}\"", n.frames))
        .collect();
    let endpoints = format!("endpoints=[{}]", endpoints.join(","));
    let wl = write_workload(
        tmp.path(),
        "frames.toml",
        "scenario = \"ingest\"\nbatch = 50\nstreams = 8\nconnections = 3\npipeline_depth = 4\n\
         ids = true\nwarmup_s = 0\nmeasure_s = 2\nstream_prefix = \"cf-\"\n",
    );
    let r = run_report(&wl, &[&endpoints], &tmp.path().join("frames.json"));
    let events = check_report(&r, "ingest");
    assert_eq!(events, r.operations["ingest"].ok * 50);
    // Acknowledged is in Kafka; the owners apply it soon after. Every node lists the whole
    // cluster's streams.
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in &nodes {
        let mut stored = n.stored("cf-");
        while stored != events && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            stored = n.stored("cf-");
        }
        assert_eq!(
            stored, events,
            "stored vs acknowledged, listed by {}",
            n.http
        );
    }
}
