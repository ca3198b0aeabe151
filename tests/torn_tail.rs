//! Recovery from damaged log files (docs/API.md §7): a torn tail of the last segment — garbage
//! appended, or a record cut short — is truncated with a warning naming the file, and every
//! record before it survives; a bad record in an earlier segment stops start-up with an error
//! naming file and offset, and `--repair` truncates the log there and starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::*;

/// The smallest segment size the server accepts; records here are about 25 KB.
const SEGMENT: u64 = 65536;

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// A warning line that names the file.
fn warned_about(logs: &str, file: &str) -> bool {
    logs.lines().any(|l| {
        let l = strip_ansi(l);
        l.contains(file) && l.to_lowercase().contains("warn")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn torn_tail_of_the_last_segment_is_truncated_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data).args(["--fsync", "always"]);
    let server = cfg.start();
    let mut sent = Vec::new();
    for r in 0..50 {
        let evs = padded_events("tt", r * 5, 5, 20);
        assert_accepted(&server.api.post_ndjson(&evs).await, 5);
        sent.extend(evs);
    }
    server.stop_clean();
    let last = segments(&data).pop().expect("a segment");
    let name = file_name(&last);
    assert_eq!(
        name.len(),
        "00000000000000000001.log".len(),
        "segment name {name}"
    );

    // 1. Garbage after the last record.
    let mut rng = Rng::new(3);
    let garbage: Vec<u8> = (0..300).map(|_| rng.next() as u8).collect();
    OpenOptions::new()
        .append(true)
        .open(&last)
        .unwrap()
        .write_all(&garbage)
        .unwrap();
    let server = cfg.start();
    let lines = server.api.replay_all("tt").await;
    check_stream("tt", &lines, &sent.iter().collect::<Vec<_>>());
    assert!(
        warned_about(&server.logs(), &name),
        "no warning naming {name}:\n{}",
        server.logs()
    );
    // Writing goes on after the last good record (not after the garbage).
    let more = padded_events("tt", 250, 5, 20);
    let body = assert_accepted(&server.api.post_ndjson(&more).await, 5);
    assert_eq!(last_seq_map(&body).get("tt"), Some(&255));
    sent.extend(more);
    let last = segments(&data).pop().unwrap();
    let running_len = len(&last);
    server.stop_clean();
    let name = file_name(&last);
    // Whether shutdown appended anything decides which record the cut below tears.
    let marker = len(&last) != running_len;
    eprintln!("shutdown appended to the log: {marker}");

    // 2. The last record cut short.
    let full = len(&last);
    OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(full - 7)
        .unwrap();
    let server = cfg.start();
    let lines = server.api.replay_all("tt").await;
    if marker {
        assert!(
            lines.len() == 250 || lines.len() == 255,
            "{} events",
            lines.len()
        );
    } else {
        assert_eq!(
            lines.len(),
            250,
            "the torn request is gone, all before it are there"
        );
    }
    check_stream(
        "tt",
        &lines,
        &sent[..lines.len()].iter().collect::<Vec<_>>(),
    );
    assert!(
        warned_about(&server.logs(), &name),
        "no warning naming {name}:\n{}",
        server.logs()
    );
    let n = lines.len();
    sent.truncate(n);
    let more = padded_events("tt", 1000, 3, 20);
    let body = assert_accepted(&server.api.post_ndjson(&more).await, 3);
    assert_eq!(last_seq_map(&body).get("tt"), Some(&(n as u64 + 3)));
    sent.extend(more);
    server.stop_clean();

    // 3. A clean log starts without a warning and has everything.
    let server = cfg.start();
    let lines = server.api.replay_all("tt").await;
    check_stream("tt", &lines, &sent.iter().collect::<Vec<_>>());
    assert!(
        !warned_about(&server.logs(), &name),
        "a clean log must start without a truncation warning:\n{}",
        server.logs()
    );
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corruption_before_the_last_segment_stops_start_up_until_repair() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = ServerConfig::new(&data).env("VX_STORAGE_SEGMENT_BYTES", SEGMENT.to_string());
    let server = cfg.start();
    let mut sent = Vec::new();
    for r in 0..20 {
        let evs = padded_events("cx", r * 50, 50, 400);
        assert_accepted(&server.api.post_ndjson(&evs).await, 50);
        sent.extend(evs);
    }
    server.stop_clean();
    let segs = segments(&data);
    assert!(
        segs.len() >= 4,
        "storage.segment_bytes={SEGMENT} must roll segments: {segs:?}"
    );
    for s in &segs[..segs.len() - 1] {
        assert!(len(s) < 2 * SEGMENT, "{s:?} is far past the segment size");
    }

    // Flip one byte in the middle of the second segment.
    let victim = &segs[1];
    let name = file_name(victim);
    let mut bytes = std::fs::read(victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(victim, &bytes).unwrap();

    let (status, out) = cfg.run_to_exit(Duration::from_secs(30));
    let status = status.unwrap_or_else(|| panic!("started over a corrupt segment:\n{out}"));
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&name) && out.to_lowercase().contains("offset"),
        "the error must name the file {name} and the offset:\n{out}"
    );
    // Still refused on a second try: nothing was changed behind our back.
    assert_eq!(std::fs::read(victim).unwrap(), bytes);
    let (status, _) = cfg.run_to_exit(Duration::from_secs(30));
    assert!(status.is_some_and(|s| !s.success()));

    // --repair cuts the log at the bad record and starts.
    let server = cfg.clone().arg("--repair").start();
    assert!(
        server.logs().contains(&name),
        "--repair must say what it truncates:\n{}",
        server.logs()
    );
    let lines = server.api.replay_all("cx").await;
    let n = lines.len();
    assert!(n >= 50, "the first segment's records survive: {n} events");
    assert!(
        n < sent.len(),
        "records at and after the bad one are gone: {n} events"
    );
    assert_eq!(n % 50, 0, "requests are whole: {n} events");
    check_stream("cx", &lines, &sent[..n].iter().collect::<Vec<_>>());
    sent.truncate(n);
    let more = padded_events("cx", 5000, 5, 10);
    let body = assert_accepted(&server.api.post_ndjson(&more).await, 5);
    assert_eq!(last_seq_map(&body).get("cx"), Some(&(n as u64 + 5)));
    sent.extend(more);
    server.stop_clean();

    // The repair is durable: a plain start works and sees the same log.
    let server = cfg.start();
    let lines = server.api.replay_all("cx").await;
    check_stream("cx", &lines, &sent.iter().collect::<Vec<_>>());
    server.stop_clean();
}
