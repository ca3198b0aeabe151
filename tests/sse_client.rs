//! A real third-party SSE client against the real binary (docs/API.md §5): Python's `httpx-sse`
//! (tests/clients/sse_resume.py) follows a stream, drops its connection mid-stream, and
//! resumes with `Last-Event-ID` while events were written in between; it must get every event
//! once, in order.
//!
//! The client runs in a virtualenv under Cargo's test scratch dir, created on first use with
//! pinned versions from PyPI (`python3` with its `venv` module is needed: `.ci/run` installs
//! Debian's `python3-venv` where it is missing). `VX_PYTHON` may name an interpreter that
//! already has `httpx` and `httpx_sse`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::process::Command;

const PINNED: [&str; 2] = ["httpx==0.28.1", "httpx-sse==0.4.3"];

/// An interpreter with the client installed, installing it if needed.
fn python() -> String {
    python_with("VX_PYTHON", "py-sse", &PINNED, "httpx, httpx_sse")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn httpx_sse_resumes_with_last_event_id_after_a_dropped_connection() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "8"])
        .start();
    let lines: Vec<String> = (0..20)
        .map(|i| {
            format!(
                r#"{{"stream":"py","type":"early{i}","ts":{}}}"#,
                1_700_000_000_000i64 + i
            )
        })
        .collect();
    assert_accepted(&s.api.post_lines(&lines).await, 20);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/sse_resume.py");
    let base = s.api.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args([script, &base, "py", "10", "15", "35"])
            .output()
            .expect("run the client")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the client failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.logs()
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<u64> = report["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        (1..=35).collect::<Vec<u64>>(),
        "every event once, in order"
    );
    assert_eq!(report["reconnects"], 1);
    let types = report["types"].as_array().unwrap();
    assert_eq!(types[9], "early9");
    assert_eq!(types[20], "late0", "written while the client was away");
    s.stop_clean();
}
