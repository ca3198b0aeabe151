//! Start-up and restart: JSON logs still name the bound address; a clean SIGTERM exits 0 and
//! loses nothing; `seq` and dedup continue across restarts; the data-dir lock and the recorded
//! shard count are enforced; a stale Unix socket is replaced, anything else at its path is
//! refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

/// A start-up error must come quickly ("at once"), not after a long wait.
const FAIL_TIMEOUT: Duration = Duration::from_secs(20);

fn batch(stream: &str, from: usize, n: usize, with_ids: bool) -> Vec<Event> {
    (from..from + n)
        .map(|i| {
            let mut e = Event::simple(
                stream,
                "t",
                1_000 + i as i64,
                with_ids.then(|| format!("{stream}/id-{i}")),
            );
            e.data = Some((format!("{{\"i\": {i}}}"), format!("{{\"i\":{i}}}")));
            e
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_then_restart_keeps_everything_and_continues_seq() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data"));
    let server = cfg.start();
    let mut sent: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for s in 0..20 {
        let stream = format!("r/{s}");
        for part in 0..5 {
            let evs = batch(&stream, part * 10, 10, s % 2 == 0);
            assert_accepted(&server.api.post_ndjson(&evs).await, 10);
            sent.entry(stream.clone()).or_default().extend(evs);
        }
    }
    assert!(
        tmp.path().join("data/LOCK").exists(),
        "data dir has a LOCK file"
    );
    assert!(
        tmp.path().join("data/meta.json").exists(),
        "data dir has meta.json"
    );
    server.stop_clean();

    let server = cfg.start();
    for (stream, evs) in &sent {
        let lines = server.api.replay_all(stream).await;
        check_stream(stream, &lines, &evs.iter().collect::<Vec<_>>());
        let info = server.api.stream_info(stream).await.json();
        assert_eq!(info["last_seq"], 50, "{info}");
        assert_eq!(info["events"], 50, "{info}");
    }
    // New events continue at last + 1 in every stream.
    for (stream, evs) in sent.iter_mut() {
        let more = batch(stream, 50, 3, true);
        let body = assert_accepted(&server.api.post_json_array(&more).await, 3);
        assert_eq!(
            last_seq_map(&body).get(stream.as_str()),
            Some(&53),
            "{body}"
        );
        evs.extend(more);
    }
    let (r, lines) = server.api.replay("r/3", "from=50").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        lines.iter().map(Line::seq).collect::<Vec<_>>(),
        vec![50, 51, 52, 53]
    );

    // And once more, to be sure the second generation of the log is readable too.
    server.stop_clean();
    let server = cfg.start();
    for (stream, evs) in &sent {
        let lines = server.api.replay_all(stream).await;
        check_stream(stream, &lines, &evs.iter().collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dedup_by_id_survives_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data"));
    let server = cfg.start();
    let a = batch("d/a", 0, 20, true);
    let b = batch("d/b", 0, 5, true);
    let both: Vec<Event> = a.iter().chain(&b).cloned().collect();
    assert_accepted(&server.api.post_ndjson(&both).await, 25);

    // A repeat inside one request is a duplicate too.
    let twice = vec![
        batch("d/c", 0, 1, true)[0].clone(),
        batch("d/c", 0, 1, true)[0].clone(),
    ];
    let body = assert_ok(&server.api.post_json_array(&twice).await);
    assert_eq!(
        (body["accepted"].as_u64(), body["duplicates"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(last_seq_map(&body).get("d/c"), Some(&1));
    server.stop_clean();

    let server = cfg.start();
    // The same ids again: all duplicates, no new seq; last_seq is the stored seq.
    let r = server.api.post_ndjson(&both).await;
    let body = assert_ok(&r);
    assert_eq!(body["accepted"], 0, "{r}");
    assert_eq!(body["duplicates"], 25, "{r}");
    let ls = last_seq_map(&body);
    assert_eq!(ls.get("d/a"), Some(&20), "{r}");
    assert_eq!(ls.get("d/b"), Some(&5), "{r}");
    let r = server.api.post_json_array(&twice[..1]).await;
    let body = assert_ok(&r);
    assert_eq!(
        (body["accepted"].as_u64(), body["duplicates"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(last_seq_map(&body).get("d/c"), Some(&1), "{r}");

    // Old and new ids mixed: only the new ones are stored, continuing the seq.
    let mut mixed = batch("d/a", 15, 10, true); // ids 15..19 old, 20..24 new
    mixed.push(batch("d/b", 0, 1, true)[0].clone()); // old
    let r = server.api.post_ndjson(&mixed).await;
    let body = assert_ok(&r);
    assert_eq!(body["accepted"], 5, "{r}");
    assert_eq!(body["duplicates"], 6, "{r}");
    assert_eq!(last_seq_map(&body).get("d/a"), Some(&25), "{r}");
    assert_eq!(
        last_seq_map(&body).get("d/b"),
        Some(&1),
        "all-duplicate stream: {r}"
    );

    let want_a: Vec<Event> = batch("d/a", 0, 25, true);
    let lines = server.api.replay_all("d/a").await;
    check_stream("d/a", &lines, &want_a.iter().collect::<Vec<_>>());
    let lines = server.api.replay_all("d/b").await;
    check_stream("d/b", &lines, &b.iter().collect::<Vec<_>>());
    let lines = server.api.replay_all("d/c").await;
    assert_eq!(lines.len(), 1);

    // Events without ids are never deduplicated.
    let anon = batch("d/anon", 0, 3, false);
    assert_accepted(&server.api.post_ndjson(&anon).await, 3);
    server.stop_clean();
    let server = cfg.start();
    assert_accepted(&server.api.post_ndjson(&anon).await, 3);
    assert_eq!(server.api.replay_all("d/anon").await.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn second_process_on_the_same_data_dir_fails_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data"));
    let server = cfg.start();
    assert_accepted(&server.api.post_ndjson(&batch("l/1", 0, 3, true)).await, 3);

    let (status, out) = cfg.run_to_exit(FAIL_TIMEOUT);
    let status = status.unwrap_or_else(|| {
        panic!("a second process on a locked data dir kept running\n--- its log ---\n{out}")
    });
    assert!(
        !status.success(),
        "second process must fail, exited {status}\n{out}"
    );
    assert!(
        out.to_lowercase().contains("lock"),
        "the error must mention the lock:\n{out}"
    );
    // The first one is unaffected.
    let (r, lines) = server.api.replay("l/1", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(lines.len(), 3);
    assert_accepted(&server.api.post_ndjson(&batch("l/1", 3, 1, true)).await, 1);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_different_shard_count_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = ServerConfig::new(tmp.path().join("data"));
    let server = cfg.start();
    assert_accepted(&server.api.post_ndjson(&batch("s/1", 0, 4, true)).await, 4);
    server.stop_clean();
    let meta = std::fs::read_to_string(tmp.path().join("data/meta.json")).unwrap();
    assert!(meta.contains("128"), "meta.json records 128 shards: {meta}");

    let (status, out) = cfg
        .clone()
        .args(["--shards", "7"])
        .run_to_exit(FAIL_TIMEOUT);
    let status =
        status.unwrap_or_else(|| panic!("--shards 7 on a 128-shard dir kept running\n{out}"));
    assert!(
        !status.success(),
        "--shards 7 must fail, exited {status}\n{out}"
    );
    assert!(
        out.contains("128") && out.contains('7') && out.to_lowercase().contains("shard"),
        "the error must name both shard counts:\n{out}"
    );

    // The same count explicitly, and none at all, both work and see the data.
    let server = cfg.clone().args(["--shards", "128"]).start();
    assert_eq!(server.api.replay_all("s/1").await.len(), 4);
    server.stop_clean();
    let server = cfg.start();
    let (r, _) = server.api.replay("s/1", "").await;
    assert_eq!(
        r.header_u64("x-vx-shard"),
        u64::from(vx_proto::shard::shard_of("s/1", 128))
    );
    server.stop_clean();

    // A new dir takes the count it is given, and keeps it.
    let cfg7 = ServerConfig::new(tmp.path().join("data7"));
    let server = cfg7.clone().args(["--shards", "7"]).start();
    assert_accepted(&server.api.post_ndjson(&batch("s/1", 0, 1, true)).await, 1);
    let (r, _) = server.api.replay("s/1", "").await;
    assert_eq!(
        r.header_u64("x-vx-shard"),
        u64::from(vx_proto::shard::shard_of("s/1", 7))
    );
    server.stop_clean();
    let server = cfg7.start();
    let (r, _) = server.api.replay("s/1", "").await;
    assert_eq!(
        r.header_u64("x-vx-shard"),
        u64::from(vx_proto::shard::shard_of("s/1", 7))
    );
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_unix_socket_is_replaced_other_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("vx.sock");
    let cfg = ServerConfig::new(tmp.path().join("data")).uds(&sock);
    let server = cfg.start();
    assert_accepted(
        &server.uds().post_ndjson(&batch("u/1", 0, 2, true)).await,
        2,
    );
    // kill -9 leaves the socket file behind, with nobody listening.
    server.kill9();
    assert!(sock.exists(), "socket file left behind by kill -9");
    let server = cfg.start();
    assert_eq!(server.uds().replay_all("u/1").await.len(), 2);
    server.stop_clean();

    // A regular file at the socket path is not ours to remove.
    let file = tmp.path().join("not-a-socket");
    std::fs::write(&file, b"precious").unwrap();
    let (status, out) = ServerConfig::new(tmp.path().join("data"))
        .uds(&file)
        .run_to_exit(FAIL_TIMEOUT);
    let status = status.unwrap_or_else(|| panic!("server started over a regular file\n{out}"));
    assert!(!status.success(), "{out}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"precious",
        "the file must be left alone"
    );
    assert!(
        out.contains("not-a-socket"),
        "the error must name the path:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_logs_carry_the_address_in_the_message() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .args(["--log-format", "json"])
        .start();
    let logs = server.logs();
    let listening = logs
        .lines()
        .find(|l| l.contains("listening on"))
        .expect("a listening line");
    let v: serde_json::Value = serde_json::from_str(listening)
        .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {listening}"));
    let text = v.to_string();
    assert!(
        text.contains(&format!("listening on {}", server.addr)),
        "the message names the bound address {}: {listening}",
        server.addr
    );
    for line in logs.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object()),
            "every log line is a JSON object: {line}"
        );
    }
    server.stop_clean();
}
