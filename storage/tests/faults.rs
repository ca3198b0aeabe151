//! Storage faults on the simulated disk (docs/API.md §7): a full disk, failed writes, fsyncs,
//! truncations, directory syncs and creates, each at the moment the engine meets it, and what
//! the engine answers and keeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;
use vx_storage::sim::{Fault, SimFs};
use vx_storage::*;

fn one(stream: &str, id: &str) -> WriteRequest {
    req(&[ev(stream, Some(id), 1, 1)])
}

#[test]
fn a_request_of_duplicates_reaches_the_level_it_reports() {
    let fs = SimFs::new();
    let mut c = sim_cfg(&fs);
    c.fsync = FsyncMode::Interval;
    c.fsync_interval = std::time::Duration::from_secs(3600);
    let (store, _) = Store::open(c).unwrap();
    let out = block(store.write(one("s", "a"))).unwrap();
    assert_eq!(out.durability, Durability::Write);
    let (syncs, _) = fs.syncs();
    // The retry asks for fsync: the original is unsynced, so an fsync must happen first.
    let mut retry = one("s", "a");
    retry.durability = Some(Durability::Fsync);
    let out = block(store.write(retry)).unwrap();
    assert_eq!((out.accepted, out.duplicates), (0, 1));
    assert_eq!(out.durability, Durability::Fsync);
    assert_eq!(fs.syncs().0, syncs + 1, "an fsync covered the original");
    // Nothing is unsynced now: the next such retry needs none.
    let mut retry = one("s", "a");
    retry.durability = Some(Durability::Fsync);
    assert_eq!(
        block(store.write(retry)).unwrap().durability,
        Durability::Fsync
    );
    assert_eq!(fs.syncs().0, syncs + 1);
}

#[test]
fn a_full_disk_refuses_cuts_the_partial_write_and_resumes() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    fs.fail_next(Fault::NoSpace, 1);
    let err = block(store.write(one("s", "2"))).unwrap_err();
    assert!(matches!(err, WriteError::StorageFull(_)), "{err}");
    assert!(!store.is_poisoned());
    // The retry is stored (not a duplicate), right after the first.
    let out = block(store.write(one("s", "2"))).unwrap();
    assert_eq!((out.accepted, out.last_seq[0].1), (1, 2));
    store.shutdown();
    drop(store);
    let (store, report) = Store::open(sim_cfg(&fs)).unwrap();
    assert_eq!(
        report.truncated_bytes, 0,
        "the partial write was cut at once"
    );
    assert_eq!(read(&store, "s", all(10)).len(), 2);
}

#[test]
fn a_failed_truncation_after_a_failed_write_poisons() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    fs.fail_next(Fault::NoSpace, 1);
    fs.fail_next(Fault::Truncate, 1);
    assert!(block(store.write(one("s", "2"))).is_err());
    assert!(store.is_poisoned());
    assert!(matches!(
        block(store.write(one("s", "3"))),
        Err(WriteError::Poisoned(_))
    ));
    store.shutdown();
    drop(store);
    // Restart: the torn partial write is cut as a torn tail; what was acknowledged is there.
    let (store, report) = Store::open(sim_cfg(&fs)).unwrap();
    assert!(report.truncated_bytes > 0);
    assert_eq!(read(&store, "s", all(10)).len(), 1);
    assert_eq!(block(store.write(one("s", "2"))).unwrap().last_seq[0].1, 2);
}

#[test]
fn a_failed_fsync_poisons_and_never_pretends() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    fs.fail_next(Fault::Fsync, 1);
    assert!(matches!(
        block(store.write(one("s", "2"))),
        Err(WriteError::Poisoned(_))
    ));
    assert!(store.is_poisoned());
    assert!(block(store.delete("s", None, None)).is_err());
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    assert_eq!(read(&store, "s", all(10)).len(), 1);
    // "2" was refused, so its retry is stored, not a duplicate.
    assert_eq!(block(store.write(one("s", "2"))).unwrap().accepted, 1);
}

/// The `events` feature of the entity every test event names.
fn events_of(store: &Store) -> Option<i64> {
    let mut n = None;
    let at = features::ReadAt { now_ms: 0 };
    store
        .features()
        .read("p1", Some(&["events"]), at, &mut |_, v| {
            if let features::Reading::Int(i) = v {
                n = Some(i);
            }
        })?;
    n
}

/// A record the feature tables do not take poisons the store (docs/FEATURES.md): its request
/// and every later write are refused, no snapshot keeps tables that miss a record, and a
/// restart rebuilds the tables from the log, that record included.
#[test]
fn a_failed_feature_apply_poisons_and_a_restart_rebuilds_the_tables() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    store.features().fail_next_apply();
    assert!(matches!(
        block(store.write(one("s", "2"))),
        Err(WriteError::Poisoned(reason)) if reason.to_string().contains("feature tables")
    ));
    assert!(store.is_poisoned());
    assert!(matches!(
        block(store.write(one("s", "3"))),
        Err(WriteError::Poisoned(_))
    ));
    let delete = FeatureWrite {
        entity: "p1".into(),
        op: FeatureOp::Delete(vec![("p1".into(), None)]),
        durability: None,
        guard: None,
        origin: None,
        append_ms: None,
    };
    assert!(matches!(
        block(store.write_features(delete)),
        Err(WriteError::Poisoned(_))
    ));
    assert!(
        store.snapshot_now().is_err(),
        "no snapshot of drifted tables"
    );
    assert_eq!(events_of(&store), Some(1), "the tables missed the record");
    store.shutdown();
    drop(store);
    let (store, report) = Store::open(sim_cfg(&fs)).unwrap();
    assert!(report.features.snapshot.is_none());
    assert!(!store.is_poisoned());
    // "2" reached the log before its apply failed: the restart applies it.
    assert_eq!(read(&store, "s", all(10)).len(), 2);
    assert_eq!(events_of(&store), Some(2));
    assert_eq!(block(store.write(one("s", "2"))).unwrap().duplicates, 1);
}

#[test]
fn failed_rolls_keep_appending_and_never_stop_a_start() {
    for fault in [Fault::SyncDir, Fault::Create, Fault::Write, Fault::Fsync] {
        let fs = SimFs::new();
        let mut c = sim_cfg(&fs);
        c.segment_bytes = 2048;
        let (store, _) = Store::open(c.clone()).unwrap();
        let mut stored = 0;
        for i in 0..200 {
            if i == 20 {
                // The next roll's directory sync, segment create, index write or fsync fails.
                fs.fail_next(fault, 1);
            }
            match block(store.write(one("s", &format!("{i}")))) {
                Ok(_) => stored += 1,
                Err(e) => {
                    // Only a failed write or fsync of a group refuses requests.
                    assert!(
                        matches!(fault, Fault::Write | Fault::Fsync),
                        "{fault:?}: {e}"
                    );
                    if store.is_poisoned() {
                        break;
                    }
                }
            }
        }
        store.shutdown();
        drop(store);
        let (store, _) = Store::open(c).unwrap();
        let got = read(&store, "s", all(1000));
        assert_eq!(got.len(), stored, "{fault:?}");
        assert!(got.iter().enumerate().all(|(i, e)| e.0 == i as u64 + 1));
    }
}

#[test]
fn out_of_space_is_storage_full_and_writes_resume_when_space_returns() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    fs.fail_next(Fault::NoSpace, 2);
    for _ in 0..2 {
        let err = block(store.write(one("s", "2"))).unwrap_err();
        let WriteError::StorageFull(cause) = &err else {
            panic!("{err}");
        };
        assert!(cause.is_out_of_space(), "{cause}");
        assert_eq!(cause.kind(), std::io::ErrorKind::StorageFull);
        assert!(err.to_string().contains("storage full"), "{err}");
        assert!(!store.is_poisoned());
    }
    // Space is back: the write is stored, right after the first.
    let out = block(store.write(one("s", "2"))).unwrap();
    assert_eq!((out.accepted, out.last_seq[0].1), (1, 2));
    assert_eq!(read(&store, "s", all(10)).len(), 2);
}

#[test]
fn an_io_error_on_write_poisons_and_later_writes_get_the_poisoned_error() {
    let fs = SimFs::new();
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    block(store.write(one("s", "1"))).unwrap();
    fs.fail_next(Fault::Write, 1);
    let err = block(store.write(one("s", "2"))).unwrap_err();
    let WriteError::Poisoned(PoisonCause::Io(cause)) = &err else {
        panic!("EIO is not storage full: {err}");
    };
    assert!(!cause.is_out_of_space());
    assert!(cause.context.contains("write to log segment"), "{cause}");
    assert!(store.is_poisoned());
    // The disk works again, but what the file holds is unknown: refused until restart, with
    // the first cause.
    for later in [
        block(store.write(one("s", "3"))),
        block(store.write(one("t", "1"))),
    ] {
        assert_eq!(later.unwrap_err(), err);
    }
    assert!(matches!(
        block(store.delete("s", None, None)),
        Err(WriteError::Poisoned(_))
    ));
    store.shutdown();
    drop(store);
    let (store, _) = Store::open(sim_cfg(&fs)).unwrap();
    assert_eq!(read(&store, "s", all(10)).len(), 1);
    assert_eq!(block(store.write(one("s", "2"))).unwrap().last_seq[0].1, 2);
}
