//! Unit tests of the parent module.

#![allow(clippy::unwrap_used)]

use super::*;

fn placed(first_seq: u64, count: u32, off: u32, len: u32) -> Placed {
    Placed {
        first_seq,
        count,
        off,
        len,
        rec_end: len + 10,
        min_ts: first_seq as i64,
        max_ts: first_seq as i64 + 1,
        bytes: u64::from(len),
    }
}

#[test]
fn runs_coalesce_into_spans_and_names_list() {
    let ix = Index::new(2, 1);
    assert_eq!(ix.apply_run(0, "b", 0, placed(1, 3, 0, 100), &[]).spans, 1);
    // Close behind: same span.
    assert_eq!(
        ix.apply_run(0, "b", 0, placed(4, 2, 200, 100), &[]).spans,
        0
    );
    // Far away: a new span.
    let far = placed(6, 1, 200 + SPAN_GAP + 500, 100);
    assert_eq!(ix.apply_run(0, "b", 0, far, &[]).spans, 1);
    ix.apply_run(1, "a", 0, placed(1, 1, 0, 10), &[]);
    ix.apply_run(1, "c", 0, placed(1, 1, 10, 10), &[]);
    let (info, _, _, _) = ix.info(0, "b").unwrap();
    assert_eq!((info.first_seq, info.last_seq, info.events), (1, 6, 6));
    assert_eq!((info.first_ts, info.last_ts), (Some(1), Some(7)));
    let spans = ix.with(0, "b", |s| s.active.clone()).unwrap();
    assert_eq!(spans.len(), 2);
    assert_eq!((spans[0].count, spans[0].len), (5, 300));
    assert_eq!(ix.active_span(0, "b", 5).unwrap().1.first_seq, 1);
    assert_eq!(ix.active_span(0, "b", 5).unwrap().2, None);
    assert_eq!(ix.active_span(0, "b", 6).unwrap().1.first_seq, 6);
    assert!(ix.active_span(0, "b", 7).is_none());
    let (names, more) = ix.names("", None, 2);
    assert_eq!(names.iter().map(|n| &*n.0).collect::<Vec<_>>(), ["a", "b"]);
    assert!(more);
    let (names, more) = ix.names("", Some("b"), 2);
    assert_eq!(names.iter().map(|n| &*n.0).collect::<Vec<_>>(), ["c"]);
    assert!(!more);
}

#[test]
fn a_tombstone_hides_and_a_new_write_continues() {
    let ix = Index::new(1, 1);
    ix.apply_run(0, "s", 0, placed(1, 5, 0, 100), &[]);
    ix.apply_tombstone(0, "s", 5);
    assert!(ix.info(0, "s").is_none());
    assert!(ix.view(0, "s").is_none());
    assert_eq!(ix.listed(), 0);
    ix.apply_run(0, "s", 5, placed(6, 1, 500, 10), &[]);
    let (info, _, _, _) = ix.info(0, "s").unwrap();
    assert_eq!((info.first_seq, info.last_seq, info.events), (6, 6, 1));
    assert_eq!(ix.listed(), 1);
}

#[test]
fn top_keeps_the_largest_and_skips_deleted_and_empty() {
    let ix = Index::new(3, 1);
    for (i, name) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let shard = u32::try_from(i % 3).unwrap();
        let i = u32::try_from(i).unwrap();
        // Events grow with the name, bytes shrink.
        ix.apply_run(
            shard,
            name,
            0,
            placed(1, i + 1, i * 1000, 500 - i * 100),
            &[],
        );
    }
    // Same events as "b" (2): ties go by name.
    ix.apply_run(0, "bb", 0, placed(1, 2, 9000, 1), &[]);
    ix.apply_tombstone(1, "e", 5);
    let (by_events, by_bytes) = ix.top(3);
    let names = |v: &[TopStream]| v.iter().map(|t| t.stream.clone()).collect::<Vec<_>>();
    assert_eq!(names(&by_events), ["d", "c", "b"]);
    assert_eq!(names(&by_bytes), ["a", "b", "c"]);
    assert_eq!((by_events[0].events, by_events[0].last_seq), (4, 4));
    let (by_events, _) = ix.top(10);
    assert_eq!(names(&by_events), ["d", "c", "b", "bb", "a"]);
    assert_eq!(ix.top(0), (Vec::new(), Vec::new()));
}
