//! What an operator sees of the storage engine (docs/API.md §5, §7), against the real binary:
//! `DELETE /v1/streams/{stream}` (a durable tombstone), retention by size and by age, the
//! metrics that show them, corruption inside the active segment (refused with file and offset,
//! `--repair` says what it drops), and many segments under a low descriptor limit.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;

async fn delete(api: &Api, stream: &str, headers: &[(&str, &str)]) -> Resp {
    api.send(
        Method::DELETE,
        &format!("/v1/streams/{}", enc(stream)),
        headers,
        None,
    )
    .await
}

async fn metrics(api: &Api) -> String {
    api.get("/metrics").await.text()
}

/// Poll `f` until it holds (retention runs on a timer): generous, never a speed assertion.
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_is_durable_and_seq_continues() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data"));
    let server = cfg.start();
    let api = &server.api;
    assert_accepted(
        &api.post_ndjson(&padded_events("gone/1", 0, 5, 10)).await,
        5,
    );
    assert_accepted(&api.post_ndjson(&padded_events("kept", 0, 3, 10)).await, 3);

    let r = delete(api, "gone/1", &[("x-vx-durability", "fsync")]).await;
    assert_eq!(r.status, 200, "{r}");
    let body = r.json();
    assert_eq!(body["stream"], "gone/1");
    assert_eq!(body["last_seq"], 5);
    assert_eq!(body["durability"], "fsync");
    assert!(r.header("x-vx-shard").is_some(), "{r}");
    // 404 at once, everywhere; a second delete is a 404 too.
    assert_error(&api.stream_info("gone/1").await, 404, "not_found");
    let (r, _) = api.replay("gone/1", "").await;
    assert_error(&r, 404, "not_found");
    assert_error(&delete(api, "gone/1", &[]).await, 404, "not_found");
    assert_error(&delete(api, "never", &[]).await, 404, "not_found");
    assert_error(
        &delete(api, "kept", &[("x-vx-durability", "sometimes")]).await,
        400,
        "bad_request",
    );
    let list = api.get("/v1/streams").await.json();
    let names: Vec<&str> = list["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kept"]);
    assert!(metric_sum(&metrics(api).await, "vx_streams_deleted_total") >= 1.0);
    // The ids of a deleted stream are forgotten with it: the same request is stored anew.
    server.stop_clean();

    // After a restart: still gone, and writing again continues after the old last seq.
    let server = cfg.start();
    let api = &server.api;
    assert_error(&api.stream_info("gone/1").await, 404, "not_found");
    assert_eq!(api.stream_info("kept").await.json()["events"], 3);
    let body = assert_accepted(
        &api.post_ndjson(&padded_events("gone/1", 0, 2, 10)).await,
        2,
    );
    assert_eq!(last_seq_map(&body)["gone/1"], 7);
    let info = api.stream_info("gone/1").await.json();
    assert_eq!(
        (&info["first_seq"], &info["last_seq"], &info["events"]),
        (&6.into(), &7.into(), &2.into())
    );
    let (r, lines) = api.replay("gone/1", "").await;
    assert_eq!(r.header_u64("x-vx-first-seq"), 6);
    assert_eq!(lines.iter().map(Line::seq).collect::<Vec<_>>(), [6, 7]);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_needs_the_admin_scope() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .with_scoped_tokens(tmp.path())
        .start();
    let api = &server.api;
    let r = api
        .post_events(
            Some(NDJSON),
            ndjson(&padded_events("s", 0, 1, 1)),
            &[("authorization", "Bearer ingest-secret")],
        )
        .await;
    assert_accepted(&r, 1);
    assert_error(&delete(api, "s", &[]).await, 401, "unauthorized");
    for token in ["ingest-secret", "read-secret"] {
        let auth = format!("Bearer {token}");
        let r = delete(api, "s", &[("authorization", &auth)]).await;
        assert_error(&r, 403, "forbidden");
    }
    let r = delete(api, "s", &[("authorization", "Bearer admin-secret")]).await;
    assert_eq!(r.status, 200, "{r}");
    server.stop_clean();
}

fn log_files(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("log"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_by_size_removes_old_segments_and_replay_starts_after_them() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data)
        .env("VX_STORAGE_SEGMENT_BYTES", "64KiB")
        .env("VX_RETENTION_MAX_BYTES", "256KiB");
    let server = cfg.start();
    let api = &server.api;
    // "early" lives only in the first segment; "late" fills about 1.2 MB.
    assert_accepted(
        &api.post_ndjson(&padded_events("early", 0, 10, 100)).await,
        10,
    );
    for r in 0..60 {
        assert_accepted(
            &api.post_ndjson(&padded_events("late", r * 50, 50, 400))
                .await,
            50,
        );
    }
    eventually("retention removed segments", async || {
        metric_sum(&metrics(api).await, "vx_retention_deleted_segments_total") >= 10.0
    })
    .await;
    let m = metrics(api).await;
    assert!(
        metric_sum(&m, "vx_retention_deleted_bytes_total") > 500_000.0,
        "{m}"
    );
    assert!(
        metric_sum(&m, "vx_log_bytes") <= (256 + 2 * 64) as f64 * 1024.0,
        "{m}"
    );
    assert!(
        metric_sum(&m, "vx_log_oldest_append_timestamp_seconds") > 1.0e9,
        "{m}"
    );
    // The first files are gone from the disk, index files with their segments.
    let files = log_files(&data);
    assert!(
        !files.iter().any(|f| f.starts_with("00000000000000000001.")),
        "{files:?}"
    );
    let info = api.stream_info("late").await.json();
    let first = info["first_seq"].as_u64().unwrap();
    assert!(first > 1, "{info}");
    assert_eq!(info["last_seq"], 3000);
    assert_eq!(info["events"].as_u64().unwrap(), 3000 - first + 1);
    // Retention may still be removing segments (it runs once a second): the replay starts at
    // the first retained seq when it runs, at or after the one the metadata showed.
    let (r, lines) = api.replay("late", "from=1&limit=5").await;
    let replay_first = r.header_u64("x-vx-first-seq");
    assert!(replay_first >= first, "{replay_first} < {first}");
    assert_eq!(lines[0].seq(), replay_first);
    // All of "early" is gone: listed with no events, until written again.
    let early = api.stream_info("early").await.json();
    assert_eq!(early["events"], 0, "{early}");
    assert_eq!(early["last_seq"], 10);
    assert!(early["first_ts"].is_null(), "{early}");
    server.stop_clean();

    let server = cfg.start();
    let api = &server.api;
    assert_eq!(api.stream_info("early").await.json()["events"], 0);
    let body = assert_accepted(
        &api.post_ndjson(&padded_events("early", 100, 1, 1)).await,
        1,
    );
    assert_eq!(last_seq_map(&body)["early"], 11);
    let (r, _) = api.replay("late", "").await;
    assert!(r.header_u64("x-vx-first-seq") >= first);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_by_age_removes_sealed_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data)
        .env("VX_STORAGE_SEGMENT_BYTES", "64KiB")
        .env("VX_RETENTION_MAX_AGE", "2s");
    let server = cfg.start();
    let api = &server.api;
    for r in 0..12 {
        assert_accepted(
            &api.post_ndjson(&padded_events("aged", r * 50, 50, 400))
                .await,
            50,
        );
    }
    // Retention may have begun already (it checks every second): at least the last few
    // segments are still there.
    let before = segments(&data).len();
    assert!(before >= 2, "{before} segments");
    // Only sealed segments go: the active one stays, whatever its age.
    eventually("sealed segments aged out", async || {
        segments(&data).len() == 1
    })
    .await;
    let info = api.stream_info("aged").await.json();
    assert_eq!(info["last_seq"], 600);
    assert!(info["first_seq"].as_u64().unwrap() > 1, "{info}");
    let (_, lines) = api.replay("aged", "").await;
    assert_eq!(lines.len() as u64, info["events"].as_u64().unwrap());
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bad_record_inside_the_active_segment_is_not_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data).args(["--fsync", "always"]);
    let server = cfg.start();
    let mut sent = Vec::new();
    for r in 0..40 {
        let evs = padded_events("mid", r * 5, 5, 50);
        assert_accepted(&server.api.post_ndjson(&evs).await, 5);
        sent.extend(evs);
    }
    server.stop_clean();
    let segs = segments(&data);
    assert_eq!(segs.len(), 1, "one active segment: {segs:?}");
    let active = &segs[0];
    let name = active.file_name().unwrap().to_string_lossy().into_owned();
    let mut bytes = std::fs::read(active).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(active, &bytes).unwrap();

    // Acknowledged records follow the bad one: start-up refuses, naming file and offset, and
    // changes nothing.
    let (status, out) = cfg.run_to_exit(Duration::from_secs(30));
    let status = status.unwrap_or_else(|| panic!("started over a corrupt record:\n{out}"));
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&name) && out.to_lowercase().contains("offset"),
        "{out}"
    );
    assert!(
        out.contains("--repair"),
        "the error must say how to repair: {out}"
    );
    assert_eq!(std::fs::read(active).unwrap(), bytes);

    // --repair says what it drops, then starts with every request before the bad one.
    let server = cfg.clone().arg("--repair").start();
    let logs = server.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains(&name) && l.contains("drop")),
        "--repair must say what it drops:\n{logs}"
    );
    let lines = server.api.replay_all("mid").await;
    let n = lines.len();
    assert!(n > 0 && n < sent.len() && n % 5 == 0, "{n} events");
    check_stream("mid", &lines, &sent[..n].iter().collect::<Vec<_>>());
    server.stop_clean();
    let server = cfg.start();
    assert_eq!(server.api.replay_all("mid").await.len(), n);
    server.stop_clean();
}

/// Segments far past the descriptor limit: sealed segments are opened on demand through a
/// bounded cache, so start-up and a full replay work under `ulimit -n 256`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_segments_under_a_low_descriptor_limit() {
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("prlimit (util-linux) is needed for this test");
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data)
        .env("VX_STORAGE_SEGMENT_BYTES", "64KiB")
        .wrapped(["prlimit", "--nofile=256:256", "--"]);
    let server = cfg.start();
    let mut r = 0;
    while segments(&data).len() < 600 {
        let evs = padded_events("many", r * 40, 40, 1600);
        assert_accepted(&server.api.post_ndjson(&evs).await, 40);
        r += 1;
    }
    server.stop_clean();

    // The restart reads 600 index files; a full replay walks every segment, and the
    // descriptors held stay within a quarter of the limit.
    let server = cfg.start();
    let lines = server.api.replay_all("many").await;
    assert_eq!(lines.len(), r * 40);
    assert!(
        lines
            .iter()
            .enumerate()
            .all(|(i, l)| l.seq() == i as u64 + 1)
    );
    let m = metrics(&server.api).await;
    let open = metric_sum(&m, "vx_log_open_files");
    assert!(
        open <= 64.0,
        "{open} descriptors cached under a limit of 256"
    );
    assert!(metric_sum(&m, "vx_log_segments") >= 600.0, "{m}");
    server.stop_clean();
}
