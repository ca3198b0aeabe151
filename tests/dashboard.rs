//! `deploy/grafana/veltrix.json` is a valid dashboard over metrics the server really exports:
//! every `vx_*` name in its queries is a sample name of the real binary's `/metrics`. And
//! docs/OPERATIONS.md lists every metric family the binary exports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../deploy/grafana/veltrix.json");
const OPERATIONS: &str = include_str!("../docs/OPERATIONS.md");

/// The `vx_*` names in `text`.
fn names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("vx_") {
        let start = i + at;
        let mut end = start;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        out.insert(text[start..end].to_string());
        i = end;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_docs_match_what_metrics_exports() {
    let dash: serde_json::Value = serde_json::from_str(DASHBOARD).expect("valid JSON");
    assert_eq!(dash["uid"], "veltrix");
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10);
    let mut used = BTreeSet::new();
    for p in panels {
        let targets = p["targets"]
            .as_array()
            .expect("every panel queries something");
        for t in targets {
            used.extend(names(t["expr"].as_str().expect("a PromQL expr")));
        }
    }

    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "2"])
        .start();
    // A rejection, so the per-reason family has a sample.
    let r = s
        .api
        .send(
            reqwest::Method::POST,
            "/v1/events",
            &[("content-type", "text/csv")],
            Some("x".into()),
        )
        .await;
    assert_eq!(r.status, 415);
    let text = s.api.get("/metrics").await.text();
    let exported: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next().map(str::to_string))
        .collect();
    let missing: Vec<&String> = used.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard uses {missing:?}, which /metrics does not export"
    );
    assert!(used.len() >= 20, "{used:?}");

    // Every family (`# TYPE` line; counters by their `_total` sample name) is documented.
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (name, kind) = (it.next()?, it.next()?);
            Some(if kind == "counter" && !name.ends_with("_total") {
                format!("{name}_total")
            } else {
                name.to_string()
            })
        })
        .collect();
    assert!(families.len() >= 40, "{families:?}");
    let documented = names(OPERATIONS);
    let undocumented: Vec<&String> = families
        .iter()
        .filter(|n| !documented.contains(*n))
        .collect();
    assert!(
        undocumented.is_empty(),
        "docs/OPERATIONS.md does not list {undocumented:?}"
    );
    s.stop_clean();
}
