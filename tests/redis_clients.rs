//! Four Redis clients no one here wrote, each a small program of tests/clients/ run against the
//! real binary's Redis-protocol listener (docs/RESP.md) with the scoped tokens of tests/common:
//! redis-py (PyPI, `redis_py_suite.py`), go-redis (the Go module proxy, `go/`), Jedis (Maven
//! Central, `jedis/`) and ioredis (npm, `ioredis/`), at the versions pinned there. Each program
//! runs the same scenario — in RESP2 and RESP3 where the library speaks both (ioredis: RESP2) —
//! asserts what its library returns, and exits non-zero at the first mismatch:
//!
//! - connect with the password option (`AUTH`, or `HELLO … AUTH`) and a client name (`CLIENT
//!   SETNAME` or `HELLO … SETNAME`, plus the library's `CLIENT SETINFO`), db 0; `CLIENT GETNAME`,
//!   `CLIENT ID`, `SELECT 0` (and `SELECT 1` refused), `PING`, `ECHO`;
//! - `HSET` (`02134` reads back `02134`), `HGET`, `HMGET`, `HGETALL`, `HEXISTS`, `EXISTS`, `HDEL`,
//!   `DEL`, `HINCRBY`, `HINCRBYFLOAT` (and `HINCRBY` of a string refused);
//! - the counters and gauge of events this test writes over HTTP, read with `HGET`/`HGETALL` as
//!   the bulk strings `"42"` and `"2.5"` (typed clients such as Jedis cast them to strings);
//! - a pipeline of 1000 commands;
//! - `XADD` (and the counter it feeds), `XRANGE`, `XREVRANGE`, `XREAD`, `XREAD BLOCK` woken by
//!   another connection's `XADD` and one that times out, `XLEN`, `XINFO STREAM`;
//! - errors as the library's error type: an unknown command, `XGROUP CREATE` and `XREADGROUP`
//!   ("consumer groups are not offered"), the connection usable after them;
//! - auth: no token (`NOAUTH`), then the `AUTH` command; a wrong token (`WRONGPASS`); the read
//!   token reads and cannot write (`NOPERM`); the ingest token writes and cannot read.
//!
//! Then this test reads over HTTP what each program wrote. The builds and installs are cached
//! under Cargo's scratch dir (tests/common/programs.rs); `scripts/test` installs the toolchains,
//! and a missing one fails the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::programs::*;
use common::*;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::process::Command;

/// How long one program may run (it takes seconds; a hung client must not hang the suite).
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// A server with the Redis-protocol listener and the scoped tokens, and the entity
/// `<prefix>hero` fed over HTTP: counters `kills` 40 + 2 and a gauge `speed` 2.5.
async fn server_with_hero(dir: &std::path::Path, prefix: &str) -> Server {
    let s = ServerConfig::new(dir.join("data"))
        .args(["--resp-listen", "127.0.0.1:0"])
        .with_scoped_tokens(dir)
        .start();
    let events = [
        json!({"stream": format!("{prefix}feed"), "type": "kills", "entity": format!("{prefix}hero"),
               "kind": "counter", "value": 40, "ts": 1_700_000_000_000_i64}),
        json!({"stream": format!("{prefix}feed"), "type": "kills", "entity": format!("{prefix}hero"),
               "kind": "counter", "value": 2, "ts": 1_700_000_000_001_i64}),
        json!({"stream": format!("{prefix}feed"), "type": "speed", "entity": format!("{prefix}hero"),
               "kind": "gauge", "value": 2.5, "ts": 1_700_000_000_002_i64}),
    ];
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let auth = format!("Bearer {INGEST_TOKEN}");
    let r = s
        .api
        .post_events(Some(NDJSON), body, &[("authorization", &auth)])
        .await;
    assert_accepted(&r, 3);
    s
}

/// Run `program` against `s` with the scenario's arguments (host, port, prefix, the admin, read
/// and ingest tokens); the key prefixes of its report. Fails with its output if it fails.
async fn run_scenario(mut program: Command, s: &Server, prefix: &str) -> Vec<String> {
    let addr = resp_addr(s);
    program
        .args([&addr.ip().to_string(), &addr.port().to_string(), prefix])
        .args([ADMIN_TOKEN, READ_TOKEN, INGEST_TOKEN])
        .kill_on_drop(true);
    let out = tokio::time::timeout(RUN_TIMEOUT, program.output())
        .await
        .unwrap_or_else(|_| panic!("{prefix}: the client program ran past {RUN_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("{prefix}: cannot start the client program: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{prefix}: the client program failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{prefix}: no JSON report in {stdout:?}"));
    let prefixes: Vec<String> = report["prefixes"]
        .as_array()
        .unwrap_or_else(|| panic!("{prefix}: no prefixes in {report}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    assert!(!prefixes.is_empty(), "{prefix}: {report}");
    prefixes
}

/// `GET /v1/features/{entity}` with the admin token: the status and the features.
async fn features_of(s: &Server, entity: &str) -> (u16, Value) {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let path = format!("/v1/features/{}", enc(entity));
    let r = s.api.get_with(&path, &[("authorization", &auth)]).await;
    let features = if r.status == 200 {
        r.json()["features"].clone()
    } else {
        Value::Null
    };
    (r.status, features)
}

/// Every event of `stream`, replayed over HTTP with the admin token.
async fn replay_of(s: &Server, stream: &str) -> Vec<Value> {
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let path = format!("/v1/streams/{}/events", enc(stream));
    let r = s.api.get_with(&path, &[("authorization", &auth)]).await;
    assert_eq!(r.status, 200, "replay of {stream}: {r}");
    parse_ndjson(&r).into_iter().map(|l| l.value).collect()
}

/// What one run of the scenario (keys under `p`) wrote, read over HTTP: the same tables and
/// streams, values as they were given.
async fn check_over_http(s: &Server, p: &str) {
    let (status, player) = features_of(s, &format!("{p}player")).await;
    assert_eq!(status, 200, "{p}player");
    for (name, value) in [
        ("zip", "02134"),
        ("name", "zed"),
        ("damage", "43"),
        ("ratio", "0.25"),
    ] {
        assert_eq!(player[name], value, "{p}player {name}: {player}");
    }
    assert!(player.get("level").is_none(), "{p}player: {player}");
    let (_, counter) = features_of(s, &format!("{p}counter")).await;
    assert_eq!(
        (&counter["hits"], &counter["score"]),
        (&json!(3), &json!(2.5)),
        "HINCRBY and HINCRBYFLOAT make numbers: {counter}"
    );
    assert_eq!(
        features_of(s, &format!("{p}p1")).await.1["hits"],
        7,
        "XADD's counter"
    );
    assert_eq!(features_of(s, &format!("{p}gone")).await.0, 404, "DEL");
    assert_eq!(features_of(s, &format!("{p}secured")).await.1["x"], "1");
    assert_eq!(features_of(s, &format!("{p}bulk-49")).await.1["f9"], "499");

    let events = replay_of(s, &format!("{p}match")).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["type"], "damage");
    assert_eq!(events[0]["entity"], format!("{p}p1"));
    assert_eq!(events[0]["data"], json!({"weapon": "bow"}));
    assert_eq!(
        (&events[1]["kind"], &events[1]["value"]),
        (&json!("counter"), &json!(7))
    );
    let live = replay_of(s, &format!("{p}live")).await;
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0]["data"], json!({"k": "v"}));
}

/// Build the program with `build` (blocking), then run it against a fresh server.
async fn scenario(prefix: &'static str, build: fn() -> std::process::Command) {
    let program = tokio::task::spawn_blocking(build).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = server_with_hero(tmp.path(), prefix).await;
    let prefixes = run_scenario(Command::from(program), &s, prefix).await;
    for p in &prefixes {
        assert!(p.starts_with(prefix), "{p}");
        check_over_http(&s, p).await;
    }
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_runs_the_client_scenario() {
    scenario("py-", || {
        let python = python_with("VX_PYTHON_REDIS", "py-redis", &REDIS_PY, "redis");
        let mut c = std::process::Command::new(python);
        c.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/redis_py_suite.py"
        ));
        c
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_redis_runs_the_client_scenario() {
    scenario("go-", go_redis_command).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_runs_the_client_scenario() {
    scenario("jedis-", jedis_command).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ioredis_runs_the_client_scenario() {
    scenario("io-", ioredis_command).await;
}

#[test]
fn go_versions_compare_part_by_part() {
    assert!(version_at_least("1.26.8", "1.26.0"));
    assert!(version_at_least("1.27", "1.26.0"));
    assert!(version_at_least("1.26rc1", "1.26"));
    assert!(!version_at_least("1.19.8", "1.26.0"));
    assert!(!version_at_least("1.9", "1.26"));
}
