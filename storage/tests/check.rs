//! `vx_storage::check`: a data dir written by the engine checks clean, also while the store
//! holds its lock; an incomplete record at the active segment's end is a tail, not corruption;
//! a flipped byte in a sealed segment, in the active segment before valid records, and in an
//! index file is corruption named by file (and, for records, the record's offset).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use support::*;
use vx_storage::check::{self, Kind, Status};
use vx_storage::*;

fn fill(dir: &Path, requests: usize) {
    let mut cfg = real_cfg(dir);
    cfg.segment_bytes = 4096;
    let (store, _) = Store::open(cfg).unwrap();
    for i in 0..requests {
        let id = format!("id-{i}");
        block(store.write(req(&[
            ev("s", Some(&id), 1000 + i as i64, 1),
            ev("t", None, 5, 2),
        ])))
        .unwrap();
    }
    store.shutdown();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(LOG_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0xff;
    std::fs::write(path, b).unwrap();
}

/// The offset of the record holding byte `at` (records start with their u32 length).
fn record_start(bytes: &[u8], at: usize) -> u64 {
    let mut off = 0;
    loop {
        let len = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap()) as usize;
        if at < off + len {
            return off as u64;
        }
        off += len;
    }
}

fn corrupt_at(report: &check::Report, path: &Path) -> Option<u64> {
    report
        .files
        .iter()
        .find(|f| f.path == path)
        .and_then(|f| match f.status {
            Status::Corrupt { offset, .. } => Some(offset),
            _ => None,
        })
}

#[test]
fn a_written_dir_checks_clean_even_while_locked() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 60);
    let report = check::check(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:#?}");
    assert_eq!(report.events, 120);
    assert!(
        report
            .files
            .iter()
            .any(|f| f.kind == Kind::Index && f.status == Status::Ok)
    );
    assert!(segments(dir.path()).len() >= 3);

    // A store holding the LOCK does not stop the check.
    let mut cfg = real_cfg(dir.path());
    cfg.segment_bytes = 4096;
    let (store, _) = Store::open(cfg).unwrap();
    assert!(check::check(dir.path()).unwrap().is_ok());
    store.shutdown();
}

#[test]
fn an_incomplete_last_record_is_a_tail_not_corruption() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 10);
    let active = segments(dir.path()).pop().unwrap();
    let len = std::fs::metadata(&active).unwrap().len();
    // The first half of a record a writer is still writing: a header promising more.
    let mut b = std::fs::read(&active).unwrap();
    let first_len = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
    let partial = b[..first_len / 2].to_vec();
    b.extend_from_slice(&partial);
    std::fs::write(&active, b).unwrap();
    let report = check::check(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:#?}");
    let f = report.files.iter().find(|f| f.path == active).unwrap();
    assert!(
        matches!(f.status, Status::Tail { offset, .. } if offset == len),
        "{f:?}"
    );
}

#[test]
fn flipped_bytes_are_corruption_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 60);
    let segs = segments(dir.path());

    // A sealed segment.
    let sealed = &segs[0];
    let bytes = std::fs::read(sealed).unwrap();
    let at = bytes.len() / 2;
    flip(sealed, at);
    let report = check::check(dir.path()).unwrap();
    assert!(!report.is_ok());
    assert_eq!(corrupt_at(&report, sealed), Some(record_start(&bytes, at)));
    flip(sealed, at);
    assert!(check::check(dir.path()).unwrap().is_ok());

    // The active segment, with valid records after the damage: not a torn tail.
    let active = segs.last().unwrap();
    let bytes = std::fs::read(active).unwrap();
    let first_len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    assert!(
        first_len < bytes.len(),
        "the active segment needs two records"
    );
    flip(active, first_len / 2);
    let report = check::check(dir.path()).unwrap();
    assert_eq!(corrupt_at(&report, active), Some(0));
    flip(active, first_len / 2);

    // An index file.
    let idx = sealed.with_extension("idx");
    flip(&idx, 10);
    let report = check::check(dir.path()).unwrap();
    assert!(corrupt_at(&report, &idx).is_some(), "{report:#?}");
}

#[test]
fn not_a_data_dir_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = check::check(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(err, check::CheckError::NotADataDir(_)), "{err}");
}

/// Cluster mode's records check clean: origins, entity events, a record that only carries
/// an origin, and a reset after which the shard's streams start at seq 1 again (not a gap).
#[test]
fn a_cluster_data_dir_checks_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = real_cfg(tmp.path());
    cfg.segment_bytes = 4096;
    cfg.features_from_events = false;
    let (store, _) = Store::open(cfg).unwrap();
    let s = streams_in("c", 1, 4, 1).remove(0);
    let streams = OriginTopic::Streams;
    for i in 0..60u64 {
        let id = format!("id-{i}");
        block(store.write(req_at(&[ev(&s, Some(&id), 1, 1)], origin(streams, 1, i)))).unwrap();
    }
    // Duplicates only: a record with the origin and no runs.
    block(store.write(req_at(
        &[ev(&s, Some("id-0"), 1, 1)],
        origin(streams, 1, 60),
    )))
    .unwrap();
    let mut b = vx_proto::Batch::new();
    b.push(&ev(&s, None, 1, 1)).unwrap();
    block(store.write_entity_events(b, origin(OriginTopic::Entities, 0, 0))).unwrap();
    block(store.reset_shard(streams, 1)).unwrap();
    for i in 0..5u64 {
        block(store.write(req_at(&[ev(&s, None, 1, 1)], origin(streams, 1, i)))).unwrap();
    }
    store.shutdown();
    let report = check::check(tmp.path()).unwrap();
    assert!(report.is_ok(), "{:?}", report.corrupt().collect::<Vec<_>>());
    assert_eq!(report.events, 65);
}
