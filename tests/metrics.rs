//! `GET /metrics` (docs/API.md §7): Prometheus text with `vx_` names for what was ingested and
//! rejected, queue depth and capacity per shard, fsync and request latency; accepted by
//! `promtool check metrics` (`scripts/test` installs promtool where it is missing; without it
//! this test fails saying so rather than skipping the check).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

/// One sample: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            types.insert(
                it.next().unwrap().to_string(),
                it.next().unwrap().to_string(),
            );
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split(',')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.trim_matches('"').to_string())
            })
            .collect();
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value: value.parse().unwrap_or(f64::NAN),
        });
    }
    (types, samples)
}

fn sum(samples: &[Sample], name: &str, label: Option<(&str, &str)>) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k).is_some_and(|x| x == v)))
        .map(|s| s.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_name_what_happened_and_pass_promtool() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "4"])
        .env("VX_INGEST_QUEUE_CAPACITY", "1000")
        .start();
    let api = &server.api;

    let evs: Vec<Event> = (0..30)
        .map(|i| Event::simple(&format!("m/{}", i % 3), "t", i, Some(format!("m{i}"))))
        .collect();
    assert_accepted(&api.post_ndjson(&evs[..20]).await, 20);
    assert_accepted(&api.post_json_array(&evs[20..]).await, 10);
    assert_ok(&api.post_ndjson(&evs[..5]).await); // 5 duplicates
    let bad = r#"{"stream":"m/x","type":"t","strem":1}"#;
    assert_error(
        &api.post_events(Some(JSON), bad, &[]).await,
        422,
        "invalid_event",
    );
    assert_error(
        &api.post_events(Some("text/plain"), "x", &[]).await,
        415,
        "unsupported_media_type",
    );
    assert_error(
        &api.post_events(Some(NDJSON), "{", &[]).await,
        400,
        "malformed",
    );
    let (r, _) = api.replay("m/0", "").await;
    assert_eq!(r.status, 200);

    // Reservations are released as the writer finishes a request, which may be just after
    // its answer went out: scrape until the idle queues read empty (bounded).
    let mut tries = 0;
    let (text, types, samples) = loop {
        let r = api.get("/metrics").await;
        assert_eq!(r.status, 200, "{r}");
        let ct = r.header("content-type").unwrap_or("");
        assert!(
            ct.starts_with("text/plain") || ct.starts_with("application/openmetrics-text"),
            "metrics content type {ct:?}"
        );
        let text = r.text();
        let (types, samples) = parse(&text);
        tries += 1;
        if sum(&samples, "vx_queue_depth", None) == 0.0 || tries == 100 {
            break (text, types, samples);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    for name in types.keys() {
        assert!(
            name.starts_with("vx_"),
            "metric {name} does not start with vx_"
        );
    }
    // A counter's family is `x` in OpenMetrics and `x_total` in the Prometheus text format.
    let has_type = |name: &str, ty: &str| {
        let total = format!("{name}_total");
        let got = types.get(name).or_else(|| {
            if ty == "counter" {
                types.get(&total)
            } else {
                None
            }
        });
        assert_eq!(
            got.map(String::as_str),
            Some(ty),
            "# TYPE of {name}:\n{text}"
        );
    };

    has_type("vx_events_ingested", "counter");
    assert_eq!(
        sum(&samples, "vx_events_ingested_total", None),
        30.0,
        "{text}"
    );
    assert_eq!(
        sum(
            &samples,
            "vx_events_ingested_total",
            Some(("format", "ndjson"))
        ),
        20.0
    );
    assert_eq!(
        sum(
            &samples,
            "vx_events_ingested_total",
            Some(("format", "json"))
        ),
        10.0
    );
    has_type("vx_events_duplicate", "counter");
    assert_eq!(
        sum(&samples, "vx_events_duplicate_total", None),
        5.0,
        "{text}"
    );

    has_type("vx_ingest_requests_rejected", "counter");
    for reason in ["invalid_event", "unsupported_media_type", "malformed"] {
        assert_eq!(
            sum(
                &samples,
                "vx_ingest_requests_rejected_total",
                Some(("reason", reason))
            ),
            1.0,
            "rejected {reason}:\n{text}"
        );
    }

    for (name, want) in [
        ("vx_queue_depth", None),
        ("vx_queue_capacity", Some(1000.0)),
    ] {
        has_type(name, "gauge");
        let per_shard: Vec<&Sample> = samples.iter().filter(|s| s.name == name).collect();
        let shards: Vec<&str> = per_shard
            .iter()
            .map(|s| s.labels["shard"].as_str())
            .collect();
        assert_eq!(shards, ["0", "1", "2", "3"], "{name} per shard:\n{text}");
        if let Some(w) = want {
            assert!(per_shard.iter().all(|s| s.value == w), "{name}:\n{text}");
        }
    }
    assert_eq!(
        sum(&samples, "vx_queue_depth", None),
        0.0,
        "idle queues drain to empty"
    );
    has_type("vx_backpressure", "gauge");
    assert_eq!(sum(&samples, "vx_backpressure", None), 0.0);
    has_type("vx_dedup_horizon_seconds", "gauge");

    has_type("vx_fsync_duration_seconds", "histogram");
    assert!(
        sum(&samples, "vx_fsync_duration_seconds_count", None) >= 1.0,
        "{text}"
    );
    // Each of the three stored requests went through every stage, once each, and the stages
    // add up to no more than the request's whole time.
    has_type("vx_ingest_stage_seconds", "histogram");
    let mut stage_sum = 0.0;
    for stage in [
        "receive",
        "decode",
        "admission",
        "queue",
        "write",
        "fsync",
        "apply",
        "answer",
    ] {
        let n = sum(
            &samples,
            "vx_ingest_stage_seconds_count",
            Some(("stage", stage)),
        );
        assert_eq!(n, 3.0, "stage {stage}:\n{text}");
        stage_sum += sum(
            &samples,
            "vx_ingest_stage_seconds_sum",
            Some(("stage", stage)),
        );
    }
    assert!(stage_sum > 0.0, "{text}");
    assert!(
        stage_sum
            <= sum(
                &samples,
                "vx_http_request_duration_seconds_sum",
                Some(("route", "/v1/events"))
            ),
        "{text}"
    );
    has_type("vx_http_request_duration_seconds", "histogram");
    let ingest_count = sum(
        &samples,
        "vx_http_request_duration_seconds_count",
        Some(("route", "/v1/events")),
    );
    assert!(
        ingest_count >= 6.0,
        "latency of the 6 ingest requests:\n{text}"
    );
    let replay_count = sum(
        &samples,
        "vx_http_request_duration_seconds_count",
        Some(("route", "/v1/streams/{stream}/events")),
    );
    assert!(
        replay_count >= 1.0,
        "replay latency by route template:\n{text}"
    );
    assert!(
        !text.contains("route=\"/v1/streams/m"),
        "routes are templates, never raw paths:\n{text}"
    );
    has_type("vx_stored_events", "counter");
    assert_eq!(
        sum(&samples, "vx_stored_events_total", None),
        30.0,
        "{text}"
    );
    has_type("vx_bootstrap_duration_seconds", "gauge");
    has_type("vx_ready", "gauge");
    assert_eq!(sum(&samples, "vx_ready", None), 1.0);

    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is needed (scripts/test installs it; on Debian: apt-get install prometheus)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
