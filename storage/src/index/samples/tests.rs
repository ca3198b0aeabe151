//! The sampling rule: the grid inside a run, samples at run headers, and the bound on the
//! walk from the best sample to any event of a span.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::index::memory::{Index, Placed};
use proptest::prelude::*;

/// Events of the given encoded lengths (each ≥ 19), back to back in the event layout: kind 0,
/// data only (`event_len` reads the header alone).
fn events(lens: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    for &len in lens {
        let mut ev = vec![0u8; len];
        ev[1] = vx_proto::packed::flags::DATA;
        ev[2] = 1; // type_len
        let data = u32::try_from(len - 19).unwrap();
        ev[6..10].copy_from_slice(&data.to_le_bytes());
        out.extend_from_slice(&ev);
    }
    out
}

fn marks(lens: &[usize], head_len: usize) -> Vec<RunMark> {
    let mut out = Vec::new();
    run_marks(
        &events(lens),
        u32::try_from(lens.len()).unwrap(),
        head_len,
        &mut out,
    );
    out
}

#[test]
fn a_small_run_has_no_marks() {
    assert!(marks(&[50; 32], 20).is_empty());
    // 32 events of 128 bytes: 4096 bytes, the last one starts at 3968.
    assert!(marks(&[128; 32], 20).is_empty());
    assert!(marks(&[4000, 96], 20).is_empty());
    assert!(!has_marks(32, 4096));
    assert!(has_marks(33, 100));
    assert!(has_marks(2, 4097));
}

#[test]
fn marks_every_32_events() {
    let m = marks(&[50; 100], 20);
    let want: Vec<RunMark> = [32u32, 64, 96]
        .into_iter()
        .map(|idx| RunMark {
            idx,
            off: 20 + idx * 50,
        })
        .collect();
    assert_eq!(m, want);
    // 33 events: one mark, at the last one.
    assert_eq!(
        marks(&[50; 33], 7),
        vec![RunMark {
            idx: 32,
            off: 7 + 1600
        }]
    );
}

#[test]
fn marks_every_4_kib() {
    // Events of 500 bytes: the first one at or past 4096 bytes since the last mark.
    let m = marks(&[500; 20], 30);
    assert_eq!(
        m,
        vec![
            RunMark {
                idx: 9,
                off: 30 + 4500
            },
            RunMark {
                idx: 18,
                off: 30 + 9000
            }
        ]
    );
    // A huge event: the next one is a mark; so is the one after the next 4 KiB.
    let m = marks(&[100, 10_000, 100, 100, 5000, 100], 0);
    let idx: Vec<u32> = m.iter().map(|m| m.idx).collect();
    assert_eq!(idx, [2, 5]);
}

#[test]
fn a_run_header_far_from_the_last_point_is_a_sample() {
    let ix = Index::new(1, 1);
    let run = |first_seq: u64, count: u32, off: u32, len: u32| Placed {
        first_seq,
        count,
        off,
        len,
        rec_end: len + 10,
        min_ts: 0,
        max_ts: 0,
        bytes: u64::from(len) - 20,
    };
    // Runs of 5 events, 200 bytes apart: no run header is 4 KiB from the span's start, the
    // 7th run (seq 31) is under 32 events from it, the 8th (seq 36) is not.
    let mut added = 0;
    for i in 0..8u32 {
        let a = ix.apply_run(0, "s", 0, run(1 + u64::from(i) * 5, 5, i * 200, 150), &[]);
        added += a.samples;
    }
    assert_eq!(added, 1);
    let samples = ix.with(0, "s", |s| s.samples.clone()).unwrap();
    assert_eq!(
        samples,
        vec![Sample {
            seq: 36,
            off: 1400,
            left: 0,
            after: 1400 + 160
        }]
    );
    // Bytes count too, other streams' included: 4 KiB after the last point.
    let far = run(41, 1, 1400 + 4096, 100);
    assert_eq!(ix.apply_run(0, "s", 0, far, &[]).samples, 1);
    let (_, span, best) = ix.active_span(0, "s", 40).unwrap();
    assert_eq!((span.first_seq, span.count, span.samples_n), (1, 41, 2));
    assert_eq!(best.map(|s| s.seq), Some(36));
    assert_eq!(ix.active_span(0, "s", 35).unwrap().2, None);
    assert_eq!(
        ix.active_span(0, "s", 41).unwrap().2.map(|s| s.off),
        Some(5496)
    );
    // A new span starts over: its start is its first point.
    let new_span = run(42, 1, 1400 + 4096 + 100 + SPAN_GAP_PAST, 100);
    let a = ix.apply_run(0, "s", 0, new_span, &[]);
    assert_eq!((a.spans, a.samples), (1, 0));
    // A tombstone drops them with the spans.
    ix.apply_tombstone(0, "s", 42);
    assert!(ix.with(0, "s", |s| s.samples.is_empty()).unwrap());
}

const SPAN_GAP_PAST: u32 = crate::index::memory::SPAN_GAP + 1;

/// One run of the simulated segment: its events' lengths, and the bytes of other streams
/// before it.
#[derive(Clone, Debug)]
struct SimRun {
    lens: Vec<usize>,
    gap: u32,
    head_len: u32,
}

fn sim_run() -> impl Strategy<Value = SimRun> {
    let len = prop_oneof![
        8 => 19usize..200,
        3 => 200usize..2000,
        1 => 2000usize..9000,
    ];
    let lens = prop_oneof![
        6 => proptest::collection::vec(len.clone(), 1usize..6),
        3 => proptest::collection::vec(len.clone(), 6usize..80),
        1 => proptest::collection::vec(len, 80usize..1200),
    ];
    let gap = prop_oneof![
        4 => Just(0u32),
        4 => 0u32..3000,
        2 => 3000u32..20_000,
    ];
    (lens, gap, 19u32..275).prop_map(|(lens, gap, head_len)| SimRun {
        lens,
        gap,
        head_len,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Runs of random sizes and gaps placed into spans as the writer places them: every sample
    /// points at its event (or run header), and the walk from the best sample (or the span's
    /// start) to any event is under 64 events and 2 × 4 KiB plus a run header.
    #[test]
    fn the_walk_from_the_best_sample_is_bounded(runs in proptest::collection::vec(sim_run(), 1..40)) {
        let ix = Index::new(1, 1);
        // Per event: (seq, offset); per run: (first seq, header offset).
        let mut at: Vec<(u64, u32)> = Vec::new();
        let mut heads: Vec<(u64, u32)> = Vec::new();
        let (mut off, mut seq) = (0u32, 1u64);
        for r in &runs {
            off += r.gap;
            let evs = events(&r.lens);
            let count = u32::try_from(r.lens.len()).unwrap();
            let mut m = Vec::new();
            run_marks(&evs, count, r.head_len as usize, &mut m);
            let len = r.head_len + u32::try_from(evs.len()).unwrap();
            heads.push((seq, off));
            let mut pos = off + r.head_len;
            for (k, &l) in r.lens.iter().enumerate() {
                at.push((seq + k as u64, pos));
                pos += u32::try_from(l).unwrap();
            }
            let p = Placed {
                first_seq: seq,
                count,
                off,
                len,
                rec_end: len + 32,
                min_ts: 0,
                max_ts: 0,
                bytes: evs.len() as u64,
            };
            ix.apply_run(0, "s", 0, p, &m);
            off += len + 32 + 32;
            seq += u64::from(count);
        }
        let off_of = |s: u64| at[usize::try_from(s - 1).unwrap()].1;
        let samples = ix.with(0, "s", |s| s.samples.clone()).unwrap();
        for x in &samples {
            if x.left == 0 {
                prop_assert!(heads.contains(&(x.seq, x.off)), "{x:?}");
            } else {
                prop_assert_eq!(off_of(x.seq), x.off);
            }
        }
        for target in 1..seq {
            let (_, span, best) = ix.active_span(0, "s", target).unwrap();
            prop_assert!(span.first_seq <= target && target <= span.last_seq());
            let (from_seq, from_off) = best.map_or((span.first_seq, span.off), |s| (s.seq, s.off));
            prop_assert!(from_seq <= target);
            let events = target - from_seq;
            let bytes = off_of(target) - from_off;
            prop_assert!(events < 2 * u64::from(SAMPLE_EVENTS), "{events} events to {target}");
            prop_assert!(bytes < 2 * SAMPLE_BYTES + 275, "{bytes} bytes to {target}");
        }
    }
}
