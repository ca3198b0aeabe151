//! Retention (docs/API.md §5) and stream deletion: whole old sealed segments go, replay starts at the
//! first retained seq, a stream whose events are all gone stays listed with `events: 0`, a
//! deleted stream is gone at once and after restart and continues its seq when written again,
//! and all of it survives restarts (the carry file).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};
use support::*;
use vx_storage::sim::SimFs;
use vx_storage::*;

fn write_n(store: &Store, stream: &str, n: usize, tag: &str, ts0: i64) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(10) {
        let ids: Vec<String> = chunk.iter().map(|i| format!("{tag}{i}")).collect();
        let evs: Vec<_> = chunk
            .iter()
            .zip(&ids)
            .map(|(&i, id)| ev(stream, Some(id), ts0 - i as i64, i as i64))
            .collect();
        block(store.write(req(&evs))).unwrap();
    }
}

/// Retention runs on the writer thread after the writes that trigger it are answered: wait
/// until it has nothing left to remove.
fn settle(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut before = store.log_stats();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = store.log_stats();
        if now == before || Instant::now() > deadline {
            return;
        }
        before = now;
    }
}

fn cfg(fs: &SimFs, max_bytes: u64) -> StorageConfig {
    let mut c = sim_cfg(fs);
    c.segment_bytes = 4096;
    c.fsync = FsyncMode::Never;
    c.retention.max_bytes = Some(max_bytes);
    c
}

#[test]
fn max_bytes_removes_old_segments_and_orphans_stay_listed() {
    let fs = SimFs::new();
    let c = cfg(&fs, 40_000);
    let (store, _) = Store::open(c.clone()).unwrap();
    // "early" only lives in the first segments; "late" keeps being written. Its ts fall, so
    // its min ts is always in its newest events and its max in its oldest.
    write_n(&store, "early", 20, "e", 5_000);
    write_n(&store, "late", 2_000, "l", 1_000_000);
    settle(&store);
    let stats = store.log_stats();
    assert!(stats.retained_segments > 10, "{stats:?}");
    assert!(stats.bytes <= 40_000 + 8192, "{stats:?}");
    let late = store.stream("late").unwrap();
    assert!(late.first_seq > 1);
    assert_eq!(late.last_seq, 2_000);
    assert_eq!(late.events, late.last_seq - late.first_seq + 1);
    // The max ts of what is retained, recomputed after the segments holding it went.
    assert_eq!(late.last_ts, Some(1_000_000 - (late.first_seq as i64 - 1)));
    assert_eq!(late.first_ts, Some(1_000_000 - 1_999));
    let got = read(&store, "late", all(1_000_000));
    assert_eq!(got.first().unwrap().0, late.first_seq);
    assert_eq!(got.len() as u64, late.events);
    // Replay from before the first retained seq starts at it.
    assert_eq!(read(&store, "late", from(1, 5))[0].0, late.first_seq);
    // All of "early" is gone: it stays listed, empty.
    let early = store.stream("early").unwrap();
    assert_eq!(
        (
            early.events,
            early.first_seq,
            early.last_seq,
            early.first_ts
        ),
        (0, 21, 20, None)
    );
    assert!(read(&store, "early", all(10)).is_empty());
    let (list, _) = store.list_streams("", None, 10);
    let names: Vec<&str> = list.iter().map(|s| s.stream.as_str()).collect();
    assert_eq!(names, ["early", "late"]);
    assert_eq!(store.stream_count(), 2);
    store.shutdown();
    drop(store);

    let (store, _) = Store::open(c.clone()).unwrap();
    let again = store.stream("early").unwrap();
    assert_eq!((again.events, again.last_seq), (0, 20));
    assert_eq!(store.stream("late").unwrap(), late);
    // Written again, the orphan continues its seq.
    let out = block(store.write(req(&[ev("early", Some("new"), 1, 1)]))).unwrap();
    assert_eq!(out.last_seq, vec![("early".to_string(), 21)]);
    let early = store.stream("early").unwrap();
    assert_eq!((early.first_seq, early.events), (21, 1));
    // A stream limit counts orphans: nothing new fits past it.
    store.shutdown();
    drop(store);
    let mut tight = c;
    tight.max_streams = 2;
    let (store, _) = Store::open(tight).unwrap();
    assert_eq!(
        block(store.write(req(&[ev("third", None, 1, 1)]))).unwrap_err(),
        WriteError::TooManyStreams { max: 2 }
    );
}

#[test]
fn max_age_removes_segments_on_its_own() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.segment_bytes = 4096;
    c.retention.max_age = Some(Duration::from_millis(200));
    let (store, _) = Store::open(c.clone()).unwrap();
    write_n(&store, "s", 300, "a", 1);
    let before = store.log_stats();
    assert!(before.segments > 3);
    // Nothing more is written: the writer's once-a-second check removes what ages out.
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.log_stats().segments > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = store.log_stats();
    assert_eq!(after.segments, 1, "{after:?}");
    assert!(after.retained_segments >= before.segments - 1);
    let s = store.stream("s").unwrap();
    assert!(s.first_seq > 1);
    assert!(s.events > 0, "the active segment holds some of it: {s:?}");
    // Restart: no index file or carry entry knows the stream any more, and its events in the
    // active segment start past seq 1. That is retention, not corruption.
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(store.stream("s").unwrap(), s);
    let got = read(&store, "s", all(1000));
    assert_eq!(got.len() as u64, s.events);
    assert_eq!(got[0].0, s.first_seq);
    let out = block(store.write(req(&[ev("s", Some("next"), 1, 1)]))).unwrap();
    assert_eq!(out.last_seq, vec![("s".to_string(), 301)]);
}

#[test]
fn delete_tombstones_at_once_and_after_restart_and_continues_seq() {
    let fs = SimFs::new();
    let c = cfg(&fs, 1 << 30);
    let (store, _) = Store::open(c.clone()).unwrap();
    write_n(&store, "gone", 50, "g", 1_000);
    write_n(&store, "kept", 50, "k", 1_000);
    assert_eq!(
        block(store.delete("nope", None, None)).unwrap_err(),
        WriteError::NotFound {
            stream: "nope".into()
        }
    );
    let out = block(store.delete("gone", None, None)).unwrap();
    assert_eq!(out.last_seq, 50);
    assert!(store.stream("gone").is_none());
    assert!(store.read("gone", all(10)).is_none());
    assert_eq!(
        block(store.delete("gone", None, None)).unwrap_err(),
        WriteError::NotFound {
            stream: "gone".into()
        }
    );
    let (list, _) = store.list_streams("", None, 10);
    assert_eq!(list.len(), 1);
    // A conditional write sees the old last seq.
    let mut r = req(&[ev("gone", None, 1, 1)]);
    r.expected_last_seq = Some(0);
    assert!(matches!(
        block(store.write(r)),
        Err(WriteError::Conflict { last_seq: 50, .. })
    ));
    store.shutdown();
    drop(store);

    let (store, _) = Store::open(c.clone()).unwrap();
    assert!(store.stream("gone").is_none());
    // Roll past the tombstone's segment (it moves to the carry file), then restart again.
    write_n(&store, "kept", 500, "k2-", 2_000);
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c.clone()).unwrap();
    assert!(store.stream("gone").is_none());
    // The ids of deleted events are forgotten with them: "g0" is stored anew.
    let out = block(store.write(req(&[ev("gone", Some("g0"), 7, 7)]))).unwrap();
    assert_eq!((out.accepted, out.duplicates), (1, 0));
    assert_eq!(out.last_seq, vec![("gone".to_string(), 51)]);
    let out = block(store.write(req(&[ev("gone", Some("g0"), 7, 7)]))).unwrap();
    assert_eq!((out.accepted, out.duplicates), (0, 1));
    let info = store.stream("gone").unwrap();
    assert_eq!((info.first_seq, info.last_seq, info.events), (51, 51, 1));
    assert_eq!(
        read(&store, "gone", all(100)),
        vec![(51, Some("g0".into()), 7, 7)]
    );
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    let info = store.stream("gone").unwrap();
    assert_eq!((info.first_seq, info.last_seq, info.events), (51, 51, 1));
    assert_eq!(read(&store, "gone", all(100)).len(), 1);
}

#[test]
fn deleted_streams_leave_memory_and_retention_frees_their_space() {
    let fs = SimFs::new();
    let c = cfg(&fs, 30_000);
    let (store, _) = Store::open(c.clone()).unwrap();
    for i in 0..20 {
        write_n(&store, &format!("m{i:02}"), 10, "x", 1);
        block(store.delete(&format!("m{i:02}"), None, None)).unwrap();
    }
    write_n(&store, "bulk", 1_500, "b", 1);
    assert_eq!(store.stream_count(), 1);
    let stats = store.log_stats();
    assert!(stats.retained_segments > 0, "{stats:?}");
    for i in 0..20 {
        assert!(store.stream(&format!("m{i:02}")).is_none());
    }
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(store.stream_count(), 1);
    let out = block(store.write(req(&[ev("m07", None, 1, 1)]))).unwrap();
    assert_eq!(out.last_seq, vec![("m07".to_string(), 11)]);
}

/// A read that retention overtakes ends with `Retained` instead of skipping a gap the client
/// could not see.
#[test]
fn a_read_overtaken_by_retention_ends_instead_of_skipping() {
    let fs = SimFs::new();
    let c = cfg(&fs, 20_000);
    let (store, _) = Store::open(c).unwrap();
    write_n(&store, "s", 400, "a", 1_000_000);
    let first = store.stream("s").unwrap().first_seq;
    let mut cursor = store.read("s", all(1_000_000)).unwrap();
    let (seq, _) = cursor.next_event().unwrap().unwrap();
    assert_eq!(seq, first);
    // Everything the cursor has yet to read is retained away.
    write_n(&store, "s", 1000, "b", 1_000_000);
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stream("s").unwrap().first_seq <= 400 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut last = seq;
    let err = loop {
        match cursor.next_event() {
            Ok(Some((seq, _))) => {
                assert_eq!(seq, last + 1, "no gap");
                last = seq;
            }
            Ok(None) => panic!("the read ended at {last} without an error"),
            Err(e) => break e,
        }
    };
    match err {
        ReadError::Retained {
            next_seq,
            first_seq,
            ..
        } => {
            assert_eq!(next_seq, last + 1);
            assert!(first_seq > next_seq);
        }
        e => panic!("{e}"),
    }
}

/// A damaged carry file stops start-up; `--repair` moves it aside and says what that loses.
#[test]
fn a_damaged_carry_file_stops_start_up_until_repair() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = real_cfg(tmp.path());
    c.segment_bytes = 4096;
    c.fsync = FsyncMode::Never;
    c.retention.max_bytes = Some(20_000);
    let (store, _) = Store::open(c.clone()).unwrap();
    write_n(&store, "early", 20, "e", 1);
    write_n(&store, "late", 1000, "l", 1);
    settle(&store);
    assert_eq!(store.stream("early").unwrap().events, 0);
    store.shutdown();
    drop(store);
    let carry = tmp.path().join("log").join("streams.carry");
    let mut bytes = std::fs::read(&carry).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&carry, &bytes).unwrap();

    let err = Store::open(c.clone())
        .err()
        .expect("a damaged carry file is refused");
    assert!(err.to_string().contains("streams.carry"), "{err}");
    assert!(err.to_string().contains("--repair"), "{err}");
    c.repair = true;
    let (store, _) = Store::open(c).unwrap();
    assert!(store.stream("early").is_none());
    assert_eq!(store.stream("late").unwrap().last_seq, 1000);
    assert!(
        tmp.path()
            .join("log")
            .join("streams.carry.damaged")
            .exists()
    );
}
