//! The status page (docs/API.md §7 `GET /`) and the JSON it polls, `GET /v1/status`, against the real
//! binary with tokens configured (docs/API.md §8):
//! - over plain HTTP: the Basic challenge on the page, Bearer on the API, 200 with Basic or
//!   Bearer credentials carrying a `read` token, 403 without the scope; the document's shape,
//!   its bounded top lists, and an embedded page that names no other origin;
//! - in headless Chromium (tests/clients/status_page.js, see tests/common/browser.rs): the
//!   browser logs in through the Basic prompt, the numbers move while this test ingests,
//!   following a stream shows a newly written event, no console error, no failed request.
//!   It saves a screenshot; `VX_UPDATE_SCREENSHOT=1` copies it to docs/status-page.png.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const INGEST: (&str, &str) = ("authorization", "Bearer ingest-secret");

fn basic(token: &str) -> String {
    // base64 of "operator:<token>", by hand: the test crate has no base64 dependency.
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("operator:{token}").into_bytes();
    let mut out = String::new();
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

async fn post(api: &Api, lines: &[String]) {
    let mut body = lines.join("\n");
    body.push('\n');
    let r = api
        .post_events(Some("application/x-ndjson"), body, &[INGEST])
        .await;
    assert_eq!(r.status, 200, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_json_and_page_auth_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .args(["--shards", "16"])
        .with_scoped_tokens(tmp.path())
        .start();
    let api = &s.api;
    assert_eq!(basic("read-secret"), "Basic b3BlcmF0b3I6cmVhZC1zZWNyZXQ=");

    // The page challenges with Basic, the API with Bearer.
    for path in ["/", "/ui/app.js", "/ui/app.css"] {
        let r = api.get(path).await;
        assert_error(&r, 401, "unauthorized");
        assert_eq!(
            r.header("www-authenticate"),
            Some(r#"Basic realm="veltrix", charset="UTF-8""#)
        );
    }
    let r = api.get("/v1/status").await;
    assert_error(&r, 401, "unauthorized");
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let reader = basic("read-secret");
    let r = api.get_with("/", &[("authorization", &reader)]).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    let html = r.text();
    assert!(html.contains("/ui/app.js") && html.contains("/ui/app.css"));
    for asset in ["/ui/app.js", "/ui/app.css"] {
        let r = api.get_with(asset, &[("authorization", &reader)]).await;
        assert_eq!(r.status, 200, "{asset}: {r}");
        // Nothing embedded names another origin.
        let text = r.text();
        assert!(
            !text.contains("http://") && !text.contains("https://") && !text.contains("//cdn"),
            "{asset} names an external URL"
        );
    }
    assert!(!html.contains("http://") && !html.contains("https://"));
    // A known token without `read` is refused, Basic or Bearer; an unknown one re-challenges.
    let r = api
        .get_with("/", &[("authorization", &basic("ingest-secret"))])
        .await;
    assert_error(&r, 403, "forbidden");
    let r = api
        .get_with("/v1/status", &[("authorization", "Bearer ingest-secret")])
        .await;
    assert_error(&r, 403, "forbidden");
    let r = api
        .get_with("/", &[("authorization", &basic("guess"))])
        .await;
    assert_error(&r, 401, "unauthorized");
    assert!(r.header("www-authenticate").unwrap().starts_with("Basic "));
    // The admin scope grants read.
    let r = api
        .get_with("/v1/status", &[("authorization", &basic("admin-secret"))])
        .await;
    assert_eq!(r.status, 200, "{r}");

    // 15 streams of 1..=15 events: the top lists hold the 10 largest, largest first.
    for i in 1..=15usize {
        let lines: Vec<String> = (0..i)
            .map(|j| format!(r#"{{"stream":"st-{i:02}","type":"t","data":{{"j":{j}}}}}"#))
            .collect();
        post(api, &lines).await;
    }
    // The top lists are recomputed at most once a second (an earlier request cached empty
    // ones); the counters are live.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let v = loop {
        let r = api
            .get_with("/v1/status", &[("authorization", "Bearer read-secret")])
            .await;
        assert_eq!(r.status, 200, "{r}");
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let v = r.json();
        if v["streams"]["top"]["by_events"].as_array().unwrap().len() == 10 {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "stale top lists: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(v["phase"], "ready");
    assert_eq!(v["ready"], true);
    assert!(v["time_ms"].as_i64().unwrap() > 0);
    assert_eq!(v["ingest"]["events"], 120);
    assert_eq!(v["ingest"]["by_format"]["ndjson"], 120);
    assert_eq!(v["ingest"]["stored_events"], 120);
    assert!(v["ingest"]["stored_bytes"].as_u64().unwrap() > 0);
    let q = &v["queues"];
    assert_eq!(q["shards"], 16);
    assert_eq!(q["depth"].as_array().unwrap().len(), 16);
    assert!(q["high_water"].as_u64().unwrap() <= q["capacity"].as_u64().unwrap());
    assert_eq!(q["backpressure"], false);
    assert_eq!(q["storage_poisoned"], false);
    assert!(v["fsync"]["count"].as_u64().unwrap() > 0);
    let ingest = &v["requests"]["/v1/events"];
    assert_eq!(ingest["count"], 15);
    let buckets = ingest["buckets"].as_array().unwrap();
    let bounds = v["latency_bounds"]["requests"].as_array().unwrap();
    assert_eq!(buckets.len(), bounds.len() + 1);
    assert_eq!(buckets.iter().map(|b| b.as_u64().unwrap()).sum::<u64>(), 15);
    assert_eq!(
        v["fsync"]["buckets"].as_array().unwrap().len(),
        v["latency_bounds"]["fsync"].as_array().unwrap().len() + 1
    );
    for t in ["sse", "ndjson", "websocket"] {
        assert_eq!(v["followers"]["by_transport"][t], 0);
    }
    assert_eq!(v["streams"]["count"], 15);
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|t| t["stream"].as_str().unwrap().to_string())
            .collect()
    };
    let top = &v["streams"]["top"];
    let expected: Vec<String> = (6..=15).rev().map(|i| format!("st-{i:02}")).collect();
    assert_eq!(names(&top["by_events"]), expected);
    assert_eq!(names(&top["by_bytes"]), expected);
    assert_eq!(top["by_events"][0]["events"], 15);
    assert_eq!(top["by_events"][0]["last_seq"], 15);

    // Refusals show up by reason (a 422 for a bad event).
    let r = api
        .post_events(
            Some("application/x-ndjson"),
            "{\"stream\":\"x\"}\n",
            &[INGEST],
        )
        .await;
    assert_eq!(r.status, 422, "{r}");
    let v = api
        .get_with("/v1/status", &[("authorization", "Bearer read-secret")])
        .await
        .json();
    let rej = v["rejections"].as_array().unwrap();
    assert_eq!(rej.len(), 1, "{rej:?}");
    assert_eq!(rej[0]["requests"], 1);
    let r = api
        .get_with("/v1/status?x=1", &[("authorization", "Bearer read-secret")])
        .await;
    assert_error(&r, 400, "bad_request");
    s.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_headless_chromium() {
    let chromium = chromium_path();
    let modules = tokio::task::spawn_blocking(browser::playwright_modules)
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let s = ServerConfig::new(tmp.path().join("data"))
        .with_scoped_tokens(tmp.path())
        .start();
    let api = s.api.clone();
    // Streams the picker lists before the page loads, with markup in their content.
    for i in 0..5 {
        post(
            &api,
            &[format!(
                r#"{{"stream":"orders-{i}","type":"created","entity":"<b>c{i}</b>","data":{{"html":"<img src=x>"}}}}"#
            )],
        )
        .await;
    }
    post(
        &api,
        &[r#"{"stream":"live","type":"boot","data":{"n":0}}"#.to_string()],
    )
    .await;

    // Keep ingesting until the browser is done.
    let done = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (api, done) = (api.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                n += 1;
                let lines: Vec<String> = (0..5)
                    .map(|k| {
                        let stream = if k == 0 {
                            "live".to_string()
                        } else {
                            format!("orders-{}", (n + k) % 5)
                        };
                        format!(
                            r#"{{"stream":"{stream}","type":"tick","entity":"p-{k}","value":{n},"data":{{"n":{n},"k":{k}}}}}"#
                        )
                    })
                    .collect();
                post(&api, &lines).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            n
        })
    };

    let marker = format!("marker-{}-{}", std::process::id(), vx_now_ns());
    let shot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let config = serde_json::json!({
        "base": api.base,
        "chromium": chromium,
        "userDataDir": tmp.path().join("chromium-profile"),
        "screenshot": shot,
        "readToken": "read-secret",
        "ingestToken": "ingest-secret",
        "stream": "live",
        "marker": marker,
        "timeoutMs": 60_000,
    })
    .to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/status_page.js");
    let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || {
        browser::run_node(script, &config, &modules, Duration::from_secs(300))
    })
    .await
    .unwrap();
    done.store(true, Ordering::Relaxed);
    let fed = feeder.await.unwrap();
    assert!(
        ok,
        "the browser script failed\nstdout: {stdout}\nstderr: {stderr}\n--- server log ---\n{}",
        s.logs()
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("browser report: {report}");
    assert_eq!(report["problems"], serde_json::json!([]));
    assert_eq!(report["injected"], 0);
    assert_eq!(report["counts"]["heatCells"], 128);
    assert!(
        report["counts"]["moved"].as_u64() > report["counts"]["first"].as_u64(),
        "{report}"
    );
    assert!(fed > 0);
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG"));
    if std::env::var_os("VX_UPDATE_SCREENSHOT").is_some() {
        let to = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/status-page.png");
        std::fs::write(to, &png).unwrap();
    }
    s.stop_clean();
}

fn chromium_path() -> String {
    browser::chromium().to_string_lossy().into_owned()
}

fn vx_now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
