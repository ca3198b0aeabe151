//! Cluster mode's apply path into the store: requests queued in order from a plain thread
//! ([`Store::submit`]), recorded at the append time their Kafka record carries (so that the
//! dedup window is decided alike by every replica, however late it applies), and read back
//! by origin ([`Store::records_by_origin`]) across segments.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use support::*;
use vx_storage::sim::SimFs;
use vx_storage::*;

use OriginTopic::Streams;

fn submit_write(store: &Store, r: WriteRequest) -> Ticket {
    store.submit(Submit::Write(r)).unwrap()
}

fn outcome(t: Ticket) -> WriteOutcome {
    match block(t) {
        Submitted::Write(r) => r.unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn submitted_requests_apply_in_order_at_their_own_append_time() {
    let fs = SimFs::new();
    let mut cfg = sim_cfg(&fs);
    cfg.dedup_window = std::time::Duration::from_secs(60);
    let (store, _) = Store::open(cfg).unwrap();
    let at = |offset, ms| WriteRequest {
        append_ms: Some(ms),
        ..req_at(
            &[ev("s", Some("same-id"), 1, 1)],
            origin(Streams, 0, offset),
        )
    };
    // Queued back to back without waiting: applied in the order queued.
    let t1 = submit_write(&store, at(1, 1_000_000));
    // 30 s later by the records' clocks: a duplicate, whatever the wall clock says.
    let t2 = submit_write(&store, at(2, 1_030_000));
    // 2 min after the first: out of the window, stored again.
    let t3 = submit_write(&store, at(3, 1_120_000));
    let (o1, o2, o3) = (outcome(t1), outcome(t2), outcome(t3));
    assert_eq!((o1.accepted, o1.duplicates), (1, 0));
    assert_eq!((o2.accepted, o2.duplicates), (0, 1));
    assert_eq!((o3.accepted, o3.duplicates), (1, 0));
    assert_eq!(store.applied_offset(Streams, 0), Some(3));

    // A stream delete and entity events go the same way.
    let del = store
        .submit(Submit::Delete {
            stream: "s".into(),
            origin: origin(Streams, 0, 4),
            append_ms: 1_130_000,
        })
        .unwrap();
    match block(del) {
        Submitted::Delete(Ok(d)) => assert_eq!(d.last_seq, 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.applied_offset(Streams, 0), Some(4));
}

#[test]
fn records_are_read_back_by_origin_across_segments() {
    let fs = SimFs::new();
    let mut cfg = sim_cfg(&fs);
    cfg.segment_bytes = 64 << 10;
    let (store, _) = Store::open(cfg).unwrap();
    let big = "x".repeat(2000);
    for offset in 0..200u64 {
        let mut e = ev("s1", None, offset as i64, offset as i64);
        e.data = None;
        e.ty = if offset % 2 == 0 { "even" } else { "odd" };
        let mut other = ev("s2", None, 0, 0);
        other.data = Some(&big);
        let r = req_at(&[e, other], origin(Streams, 3, offset * 10));
        outcome(submit_write(&store, r));
        // Another partition's records in between must be left out.
        let mut o = ev("t", None, 0, 0);
        o.data = None;
        outcome(submit_write(
            &store,
            req_at(&[o], origin(Streams, 2, offset)),
        ));
    }
    assert!(store.log_stats().segments > 3, "spans several segments");
    let got = store.records_by_origin(Streams, 3, 500, 1200).unwrap();
    let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (50..=120).map(|o| o * 10).collect::<Vec<_>>());
    for r in &got {
        let streams: Vec<&str> = r.runs.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(streams, ["s1", "s2"]);
        let events: Vec<_> = vx_proto::packed::events(&r.runs[0].1, "s1")
            .map(|e| e.unwrap().value)
            .collect();
        assert_eq!(
            events,
            vec![Some(vx_proto::Num::Int((r.offset / 10) as i64))]
        );
    }
    assert!(
        store
            .records_by_origin(Streams, 3, 5000, 6000)
            .unwrap()
            .is_empty()
    );
}
