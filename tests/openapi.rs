//! `GET /v1/openapi.json` (docs/API.md §7.8) against the real binary, checked by tools no one
//! here wrote:
//! - the served document is docs/openapi.json byte for byte, and answers without a token
//!   while every other route wants one;
//! - schemathesis (PyPI, pinned) generates requests from the document for every operation,
//!   with a token of every scope, and finds no answer that contradicts the document;
//! - a Python client generated from docs/openapi.json by openapi-python-client (PyPI, pinned)
//!   ingests events and replays them (tests/clients/openapi_client.py).
//!
//! Both tools run in a virtualenv under Cargo's test scratch dir, created on first use
//! (`python3` with its `venv` module is needed; scripts/test installs it). `VX_PYTHON_OPENAPI`
//! may name an interpreter that already has both.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

const PINNED: [&str; 3] = [
    "schemathesis==4.32.5",
    "openapi-python-client==0.29.1",
    // What the generated client imports besides httpx and attrs (openapi-python-client's own).
    "python-dateutil==2.9.0.post0",
];

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
const HOOKS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/schemathesis_hooks.py"
);
const CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/clients/openapi_client.py"
);

/// Test cases per operation and phase: every operation is covered in about a minute on two
/// cores, each run the same (`--seed`).
const EXAMPLES: &str = "25";
const SEED: &str = "20261129";

fn python() -> String {
    python_with(
        "VX_PYTHON_OPENAPI",
        "py-openapi",
        &PINNED,
        "schemathesis, openapi_python_client, dateutil",
    )
}

/// `python args…` in `dir` (schemathesis keeps a cache in its working directory), with the
/// interpreter's directory first on `PATH` (openapi-python-client runs the `ruff` installed
/// beside it), within `secs` seconds.
fn run_python(python: &str, dir: &Path, args: &[&str], secs: u64, envs: &[(&str, &str)]) -> Output {
    let bin = Path::new(python).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("timeout");
    cmd.arg(secs.to_string()).arg(python).args(args);
    cmd.env("PATH", path).current_dir(dir);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("run python")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `METHOD /path` of every operation in docs/openapi.json.
fn documented_operations() -> BTreeSet<String> {
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(CHECKED_IN).unwrap()).unwrap();
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    out
}

/// The operations schemathesis' JUnit report has a test case for.
fn tested_operations(report_dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(report_dir).expect("the JUnit report") {
        let xml = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for case in xml.split("<testcase name=\"").skip(1) {
            let name = case.split('"').next().unwrap();
            if name.contains(' ') && name.contains('/') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[tokio::test]
async fn the_served_document_is_the_checked_in_file_and_needs_no_token() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .with_scoped_tokens(tmp.path())
        .start();
    let r = s.api.get("/v1/openapi.json").await;
    assert_eq!(r.status, 200, "no token needed: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let file = std::fs::read(CHECKED_IN).expect("docs/openapi.json");
    assert!(
        r.body.as_ref() == file.as_slice(),
        "docs/openapi.json is not the served document: regenerate it with \
         `VX_BLESS=1 cargo test -p veltrix --lib http::openapi`"
    );
    let doc = r.json();
    assert_eq!(doc["openapi"], "3.1.0");
    // Every other route of the document wants a token here (the health checks aside).
    assert_eq!(s.api.get("/v1/streams").await.status, 401);
    assert_eq!(s.api.get("/healthz").await.status, 200);
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_answer_that_contradicts_the_document() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "4", "--fsync", "never"])
        .with_scoped_tokens(tmp.path())
        .start();
    let url = format!("{}/v1/openapi.json", s.api.base);
    let report_dir = tmp.path().join("report");
    let (report, cwd) = (report_dir.clone(), tmp.path().to_path_buf());
    let out = tokio::task::spawn_blocking(move || {
        let report = report.to_string_lossy().into_owned();
        run_python(
            &python,
            &cwd,
            &[
                "-m",
                "schemathesis.cli",
                "run",
                &url,
                "--header",
                "Authorization: Bearer admin-secret",
                // Every check but two, which ask for what JSON Schema cannot say of this API
                // (docs/API.md §7.8): `positive_data_acceptance` wants every schema-valid
                // request accepted, but lengths here are in bytes (JSON Schema counts
                // characters), a `counter` needs an integer `value`, a `gzip` body must be
                // gzip, `speed` needs `pace`, and `replicated` is a level of cluster mode only;
                // `negative_data_rejection` wants every schema-invalid request refused, but an
                // unknown header is ignored (RFC 9110), and a YAML body's plain scalars are
                // text in string fields (`type: false` is the type "false").
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance,negative_data_rejection",
                "--max-examples",
                EXAMPLES,
                "--seed",
                SEED,
                "--workers",
                "1",
                "--request-timeout",
                "20",
                "--no-color",
                "--report",
                "junit",
                "--report-dir",
                &report,
            ],
            600,
            &[("SCHEMATHESIS_HOOKS", HOOKS)],
        )
    })
    .await
    .unwrap();
    let all = text(&out);
    let summary = all
        .rfind("SUMMARY")
        .map_or(all.as_str(), |i| &all[i..])
        .to_string();
    println!("schemathesis summary:\n{summary}");
    assert!(
        out.status.success(),
        "schemathesis found something (exit {:?}):\n{all}\n--- server log ---\n{}",
        out.status.code(),
        s.logs()
    );
    // Every operation of the document was tested, but the document itself, which
    // schemathesis leaves out when it reads the document from it.
    let mut expected = documented_operations();
    expected.remove("GET /v1/openapi.json");
    assert_eq!(tested_operations(&report_dir), expected, "{summary}");
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_generated_from_the_document_ingests_and_replays() {
    let python = tokio::task::spawn_blocking(python).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let generated = tmp.path().join("generated");
    let out = {
        let (python, generated) = (python.clone(), generated.clone());
        let cwd = tmp.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            run_python(
                &python,
                &cwd,
                &[
                    "-m",
                    "openapi_python_client",
                    "generate",
                    "--path",
                    CHECKED_IN,
                    "--meta",
                    "none",
                    "--output-path",
                    &generated.join("vx_api").to_string_lossy(),
                ],
                300,
                &[],
            )
        })
        .await
        .unwrap()
    };
    assert!(out.status.success(), "generating failed:\n{}", text(&out));
    let s = ServerConfig::new(tmp.path().join("data"))
        .with_scoped_tokens(tmp.path())
        .start();
    let base = s.api.base.clone();
    let cwd = tmp.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        let pythonpath = generated.to_string_lossy().into_owned();
        run_python(
            &python,
            &cwd,
            &[CLIENT, &base, "admin-secret"],
            120,
            &[("PYTHONPATH", &pythonpath)],
        )
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "the generated client failed:\n{}\n--- server log ---\n{}",
        text(&out),
        s.logs()
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["accepted"], 3);
    assert_eq!(report["seqs"], serde_json::json!([1, 2, 3]));
    // What the generated client read back is what the server stores.
    let replayed = s
        .api
        .get_with(
            "/v1/streams/generated/events",
            &[("authorization", "Bearer read-secret")],
        )
        .await;
    assert_eq!(replayed.status, 200);
    assert_eq!(replayed.text().lines().count(), 3);
    assert_eq!(report["types"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(
        report["data"],
        serde_json::json!([{"n": 0}, {"n": 1}, {"n": 2}])
    );
    assert_eq!(report["last_seq"], serde_json::json!({"generated": 3}));
    assert_eq!(report["stream_events"], 3);
    assert_eq!(report["second_page"], serde_json::json!([3]));
    assert_eq!(report["unauthorized"], 401);
    s.stop_clean();
}
