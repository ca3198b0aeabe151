//! A real OpenTelemetry SDK no one here wrote, against the real binary (docs/API.md §7, OTLP in):
//! Python's `opentelemetry-sdk` with `opentelemetry-exporter-otlp-proto-http`
//! (tests/clients/otlp_export.py) exports a trace (a parent span with attributes and an
//! event, a child span with an error status) and logs through the SDK's logging handler, plain
//! and gzip-compressed; the stream named by `service.name` replays them as events.
//!
//! The SDK runs in a virtualenv under Cargo's test scratch dir with pinned versions
//! (tests/common/python.rs); `VX_PYTHON_OTEL` may name an interpreter that already has them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;

const PINNED: [&str; 4] = [
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-exporter-otlp-proto-http==1.45.2",
];

fn python() -> String {
    python_with(
        "VX_PYTHON_OTEL",
        "py-otel",
        &PINNED,
        "opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http",
    )
}

/// Run the exporter script for `service`; its JSON report.
async fn export(python: &str, base: &str, service: &str, compression: &str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/otlp_export.py");
    let (python, base, service, compression) = (
        python.to_string(),
        base.to_string(),
        service.to_string(),
        compression.to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .args([script, &base, &service, &compression])
            .output()
            .expect("run the exporter")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the exporter failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bad report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn check(service: &str, report: &Value, lines: &[Line]) {
    for key in ["span_exports", "log_exports"] {
        let results = report[key].as_array().unwrap();
        assert!(!results.is_empty(), "{report}");
        assert!(results.iter().all(|r| r == "SUCCESS"), "{key}: {report}");
    }
    let trace = report["trace_id"].as_str().unwrap();
    let parent_id = report["parent_span_id"].as_str().unwrap();
    let events: Vec<&Value> = lines.iter().map(|l| &l.value).collect();
    assert_eq!(events.len(), 4, "two spans and two logs: {events:#?}");
    let find = |pred: &dyn Fn(&Value) -> bool| {
        *events
            .iter()
            .find(|e| pred(e))
            .unwrap_or_else(|| panic!("not found in {events:#?}"))
    };

    let parent = find(&|e| e["data"]["name"] == "GET /cart");
    assert_eq!(parent["stream"], service);
    assert_eq!(parent["type"], "GET__cart");
    assert_eq!(parent["entity"], trace);
    assert_eq!(parent["id"], format!("{trace}{parent_id}"));
    let d = &parent["data"];
    assert_eq!(d["span_id"], parent_id);
    assert_eq!(d["kind"], "server");
    assert_eq!(d["attributes"]["http.method"], "GET");
    assert_eq!(d["attributes"]["cart.items"], 3);
    assert_eq!(d["attributes"]["cart.total"], 12.5);
    assert_eq!(d["attributes"]["tags"], json!(["a", "b"]));
    assert_eq!(d["events"][0]["name"], "cache-miss");
    assert_eq!(d["events"][0]["attributes"]["key"], "cart:7");
    assert_eq!(d["resource"]["service.name"], service);
    assert_eq!(d["resource"]["telemetry.sdk.language"], "python");
    assert_eq!(d["scope"]["name"], "veltrix.test");
    let start_ms = d["start_time_unix_nano"].as_u64().unwrap() / 1_000_000;
    assert_eq!(parent["ts"].as_u64(), Some(start_ms));
    assert!(d["duration_ns"].as_u64().is_some());

    let child = find(&|e| e["data"]["name"] == "load cart");
    assert_eq!(child["type"], "load_cart");
    assert_eq!(child["entity"], trace);
    assert_eq!(child["data"]["parent_span_id"], parent_id);
    assert_eq!(child["data"]["span_id"], report["child_span_id"]);
    assert_eq!(child["data"]["kind"], "client");
    assert_eq!(
        child["data"]["status"],
        json!({"code": "error", "message": "db timeout"})
    );

    let inside = find(&|e| e["data"]["body"] == "cart is slow");
    assert!(
        matches!(inside["type"].as_str(), Some("WARN" | "WARNING")),
        "{inside}"
    );
    assert_eq!(inside["entity"], trace, "a log inside a span: its trace");
    assert_eq!(inside["data"]["span_id"], parent_id);
    assert_eq!(inside["data"]["severity_number"], 13);
    assert_eq!(inside["data"]["attributes"]["cart.id"], 7);
    let outside = find(&|e| e["data"]["body"] == "outside any span");
    assert_eq!(outside["type"], "ERROR");
    assert_eq!(outside["entity"], service, "a span-less log: its service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_exports_traces_and_logs_plain_and_gzip() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "4"])
        .start();
    for (service, compression) in [("py-shop", "none"), ("py-shop-gz", "gzip")] {
        let report = export(&python, &s.api.base, service, compression).await;
        let lines = s.api.replay_all(service).await;
        check(service, &report, &lines);
    }
    s.stop_clean();
}
