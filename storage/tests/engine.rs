//! Engine-level tests of the storage crate: write, read back, restart, dedup, conditional
//! writes, recovery of a torn tail and refusal of corruption elsewhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use support::{all, block, real_cfg as cfg, req};
use vx_proto::EventView;
use vx_storage::*;

/// The support module's counter event, always of value 3.
fn ev<'a>(stream: &'a str, id: Option<&'a str>, ts: i64) -> EventView<'a> {
    support::ev(stream, id, ts, 3)
}

fn read_all(store: &Store, stream: &str, q: ReadQuery) -> Vec<(u64, String, i64)> {
    let mut c = store.read(stream, q).unwrap();
    let mut out = Vec::new();
    while let Some((seq, e)) = c.next_event().unwrap() {
        out.push((seq, e.id.unwrap_or("").to_string(), e.ts));
    }
    out
}

#[test]
fn write_read_restart_dedup() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = Store::open(cfg(dir.path())).unwrap();
        let out = block(store.write(req(&[
            ev("a", Some("1"), 10),
            ev("b", Some("1"), 11),
            ev("a", Some("2"), 12),
            ev("a", Some("1"), 13), // duplicate inside the request
        ])))
        .unwrap();
        assert_eq!(out.accepted, 3);
        assert_eq!(out.duplicates, 1);
        assert_eq!(out.durability, Durability::Fsync);
        assert_eq!(out.last_seq, vec![("a".into(), 2), ("b".into(), 1)]);
        let out = block(store.write(req(&[ev("a", Some("2"), 14)]))).unwrap();
        assert_eq!((out.accepted, out.duplicates), (0, 1));
        assert_eq!(out.last_seq, vec![("a".into(), 2)]);
        assert_eq!(
            read_all(&store, "a", all(100)),
            vec![(1, "1".into(), 10), (2, "2".into(), 12)]
        );
        let info = store.stream("a").unwrap();
        assert_eq!((info.first_seq, info.last_seq, info.events), (1, 2, 2));
        assert_eq!((info.first_ts, info.last_ts), (Some(10), Some(12)));
        store.shutdown();
    }
    let (store, report) = Store::open(cfg(dir.path())).unwrap();
    assert_eq!((report.records, report.events), (1, 3));
    assert_eq!(read_all(&store, "a", all(100)).len(), 2);
    // Dedup survives a restart, and seq continues.
    let out = block(store.write(req(&[ev("a", Some("1"), 20), ev("a", None, 21)]))).unwrap();
    assert_eq!((out.accepted, out.duplicates), (1, 1));
    assert_eq!(out.last_seq, vec![("a".into(), 3)]);
    let (names, next) = store.list_streams("", None, 1);
    assert_eq!(names[0].stream, "a");
    assert_eq!(next.as_deref(), Some("a"));
    let (names, next) = store.list_streams("", Some("a"), 1);
    assert_eq!(names[0].stream, "b");
    assert_eq!(next, None);
}

#[test]
fn second_open_is_locked_and_shards_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(cfg(dir.path())).unwrap();
    assert!(matches!(
        Store::open(cfg(dir.path())),
        Err(OpenError::Locked { .. })
    ));
    store.shutdown();
    drop(store);
    let mut c = cfg(dir.path());
    c.shards = Some(5);
    assert!(matches!(
        Store::open(c),
        Err(OpenError::ShardMismatch {
            recorded: 4,
            requested: 5,
            ..
        })
    ));
    let mut c = cfg(dir.path());
    c.shards = None;
    let (store, _) = Store::open(c).unwrap();
    assert_eq!(store.shards(), 4);
}

#[test]
fn conditional_write() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(cfg(dir.path())).unwrap();
    let mut r = req(&[ev("s", None, 1)]);
    r.expected_last_seq = Some(0);
    assert_eq!(block(store.write(r)).unwrap().accepted, 1);
    let mut r = req(&[ev("s", None, 1)]);
    r.expected_last_seq = Some(0);
    assert_eq!(
        block(store.write(r)).unwrap_err(),
        WriteError::Conflict {
            stream: "s".into(),
            expected: 0,
            last_seq: 1
        }
    );
    assert_eq!(store.stream("s").unwrap().last_seq, 1);
}

#[test]
fn filters_ranges_and_many_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.segment_bytes = 4096; // many segments
    c.fsync = FsyncMode::Never;
    let (store, _) = Store::open(c.clone()).unwrap();
    let ids: Vec<String> = (0..500).map(|i| format!("id{i}")).collect();
    for chunk in ids.chunks(7) {
        let evs: Vec<_> = chunk
            .iter()
            .map(|id| ev("s", Some(id), id[2..].parse().unwrap()))
            .collect();
        block(store.write(req(&evs))).unwrap();
    }
    let got = read_all(&store, "s", all(100_000));
    assert_eq!(got.len(), 500);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, (seq, _, ts))| *seq == i as u64 + 1 && *ts == i as i64)
    );
    let q = ReadQuery {
        from: Some(100),
        to: Some(300),
        since: Some(150),
        until: Some(160),
        limit: 5,
        ..Default::default()
    };
    let got = read_all(&store, "s", q);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![151, 152, 153, 154, 155]
    );
    let mut cur = store.read("s", all(10)).unwrap();
    assert_eq!(cur.next_seq_after_full_read(), 11);
    assert!(cur.next_event().unwrap().is_some());
    store.shutdown();
    drop(store);
    let (store, report) = Store::open(c).unwrap();
    assert!(report.segments > 2);
    assert_eq!(read_all(&store, "s", all(100_000)).len(), 500);
}

fn segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join(LOG_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

#[test]
fn torn_tail_is_truncated_corruption_elsewhere_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(dir.path());
    c.segment_bytes = 2048;
    {
        let (store, _) = Store::open(c.clone()).unwrap();
        for i in 0..100 {
            let id = format!("{i}");
            block(store.write(req(&[ev("s", Some(&id), i)]))).unwrap();
        }
        store.shutdown();
    }
    let segs = segments(dir.path());
    assert!(segs.len() >= 3);
    // Tear the last record of the active segment.
    let last = segs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(last).unwrap();
    f.set_len(len - 5).unwrap();
    drop(f);
    let (store, report) = Store::open(c.clone()).unwrap();
    assert!(report.truncated_bytes > 0);
    assert_eq!(store.stream("s").unwrap().last_seq, 99);
    // Writes continue after the truncated tail with the next seq.
    let out = block(store.write(req(&[ev("s", Some("99"), 1)]))).unwrap();
    assert_eq!(out.last_seq, vec![("s".into(), 100)]);
    store.shutdown();
    drop(store);
    // Flip a byte in the first segment: refuse to start, naming the file.
    let first = &segs[0];
    let mut bytes = std::fs::read(first).unwrap();
    bytes[40] ^= 0xFF;
    std::fs::write(first, &bytes).unwrap();
    match Store::open(c.clone()) {
        Err(OpenError::Corrupt { file, offset, .. }) => {
            assert_eq!(&file, first);
            assert_eq!(offset, 0);
        }
        Err(other) => panic!("unexpected {other}"),
        Ok(_) => panic!("opened a corrupt log"),
    }
    let mut c = c;
    c.repair = true;
    let (store, _) = Store::open(c).unwrap();
    assert!(store.stream("s").is_none());
    let out = block(store.write(req(&[ev("s", None, 1)]))).unwrap();
    assert_eq!(out.last_seq, vec![("s".into(), 1)]);
}
