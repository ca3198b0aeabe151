#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn hash(v: u64) -> u64 {
    xxhash_rust::xxh3::xxh3_64(&v.to_le_bytes())
}

/// Up to 16 values are counted exactly, all time and over any window suffix; the 17th
/// (within the window) turns the state into the sketch, which a window that slides past every
/// entry empties back into an exact set.
#[test]
fn sixteen_values_are_exact_and_the_seventeenth_is_a_sketch() {
    let mut all = empty();
    for v in 0..16u64 {
        add_all_time(&mut all, hash(v));
        add_all_time(&mut all, hash(v));
        assert_eq!(count(&all, false, 0, 0), (v + 1) as f64);
        assert!(valid(&all, false));
    }
    assert_eq!(all.len(), 1 + 16 * 8);
    add_all_time(&mut all, hash(99));
    assert_eq!(all.len(), HLL_M, "the sketch");
    assert!(valid(&all, false));

    let (mut head, mut w) = (i64::MIN, empty());
    for v in 0..16u64 {
        assert!(add_windowed(&mut head, &mut w, 1000 + v as i64, hash(v)));
    }
    assert!(valid(&w, true));
    assert_eq!(count(&w, true, head, 0), 16.0);
    // A window suffix: only the values seen in its buckets.
    assert_eq!(count(&w, true, head, BUCKETS - 5), 5.0);
    // A value seen again moves to its newest bucket.
    assert!(add_windowed(&mut head, &mut w, 1015, hash(0)));
    assert_eq!(count(&w, true, head, BUCKETS - 1), 2.0);
    // The 17th: a sketch (sparse), whose estimate of 17 values is within a few.
    assert!(add_windowed(&mut head, &mut w, 1015, hash(16)));
    assert!(!w.is_empty() && w[0] != 0xFF && valid(&w, true));
    let est = count(&w, true, head, 0);
    assert!((est - 17.0).abs() <= 4.0, "{est}");
    // A window later, nothing: exact again, and counting exactly.
    assert!(add_windowed(&mut head, &mut w, 1015 + BUCKETS, hash(1)));
    assert_eq!(w.len(), 1 + 9, "{w:?}");
    assert_eq!(count(&w, true, head, 0), 1.0);
    // Late: a window behind the newest bucket.
    assert!(!add_windowed(&mut head, &mut w, 1015, hash(2)));
}

/// The layouts refuse what they cannot be.
#[test]
fn invalid_states_are_refused() {
    assert!(valid(&[], false) && valid(&[], true));
    assert!(
        !valid(&[0xFF], false),
        "an exact set with no value is empty"
    );
    assert!(!valid(&[0xFF, 1, 2, 3], false));
    let mut dup = vec![0xFF];
    dup.extend_from_slice(&7u64.to_le_bytes());
    dup.extend_from_slice(&7u64.to_le_bytes());
    assert!(!valid(&dup, false), "a value twice");
    let mut untagged = vec![0xFF];
    untagged.extend_from_slice(&7u64.to_le_bytes());
    untagged.push(0);
    assert!(
        !valid(&untagged, true),
        "a windowed value without its bucket"
    );
    assert!(!valid(&[17u8; HLL_M], false), "a register past level 16");
    let mut many = vec![0xFF];
    for v in 0..17u64 {
        many.extend_from_slice(&v.to_le_bytes());
    }
    assert!(!valid(&many, false));
}

proptest! {
    /// Against exact counts: any stream of values over any buckets. All time, the count is
    /// exact while there are at most 16 values. Windowed, the state is exact while the values
    /// in its window never passed 16 since the window was last empty, and then counts every
    /// window suffix exactly; past that, within three quarters of the count (at least 3): a
    /// bound no measured estimate came near (docs/FEATURES.md gives the distribution: the
    /// median error 6–9%, 99% within 45%, the worst of 18,000 66%).
    #[test]
    fn counts_are_exact_while_small_and_bounded_after(
        adds in prop::collection::vec((0u64..60, 0i64..150), 1..400),
        shifts in prop::collection::vec(0i64..70, 1..4),
    ) {
        let (mut head, mut w) = (i64::MIN, empty());
        let mut all = empty();
        // Per value, the newest bucket it was added in (the exact model), and whether the
        // state must still be exact.
        let mut newest: BTreeMap<u64, i64> = BTreeMap::new();
        let mut exact = true;
        let mut every: std::collections::BTreeSet<u64> = Default::default();
        let in_window = |newest: &BTreeMap<u64, i64>, head: i64| {
            newest.values().filter(|&&b| b > head - BUCKETS).count()
        };
        for &(v, b) in &adds {
            add_all_time(&mut all, hash(v));
            every.insert(v);
            let before = head;
            if add_windowed(&mut head, &mut w, b, hash(v)) {
                if before != i64::MIN && in_window(&newest, head) == 0 {
                    exact = true;
                }
                let e = newest.entry(v).or_insert(b);
                *e = (*e).max(b);
                if in_window(&newest, head) > EXACT_MAX {
                    exact = false;
                }
            } else {
                prop_assert!(b <= head - BUCKETS);
            }
            prop_assert!(valid(&w, true) && valid(&all, false));
            prop_assert_eq!(w.first().is_none_or(|&x| x == 0xFF), exact, "{:?}", w);
        }
        let n = every.len() as f64;
        let got = count(&all, false, 0, 0);
        if every.len() <= EXACT_MAX {
            prop_assert_eq!(got, n);
        } else {
            prop_assert!((got - n).abs() <= (0.75 * n).max(3.0), "all time: {} for {}", got, n);
        }
        for &shift in &shifts {
            let from = head + shift - BUCKETS + 1;
            let want = newest.values().filter(|&&b| b >= from).count() as f64;
            let got = count(&w, true, head, shift);
            if exact {
                prop_assert_eq!(got, want, "shift {}", shift);
            } else {
                prop_assert!((got - want).abs() <= (0.75 * want).max(3.0), "shift {}: {} for {}", shift, got, want);
            }
        }
    }
}

/// The error past 16 values, measured: for each count, 2000 sets of distinct values, all time
/// (the same registers as a window holding them all). docs/FEATURES.md quotes the printed
/// figures (`cargo test -p vx-features measured_error -- --nocapture`); the bound held here is
/// the documented one: 99% of estimates within 45% of the count, and the median error under
/// 10%. (The inputs are fixed, so the figures are the same every run.)
#[test]
fn measured_error() {
    for n in [17u64, 24, 32, 64, 100, 160, 300, 1000, 10_000] {
        let mut errs: Vec<f64> = (0..2000u64)
            .map(|set| {
                let mut all = empty();
                for v in 0..n {
                    add_all_time(&mut all, hash(set << 32 | v));
                }
                (count(&all, false, 0, 0) - n as f64).abs() / n as f64
            })
            .collect();
        errs.sort_by(f64::total_cmp);
        let at = |q: f64| errs[((errs.len() - 1) as f64 * q) as usize];
        eprintln!(
            "n {n:>6}: median {:.1}%, p90 {:.1}%, p99 {:.1}%, max {:.1}%",
            at(0.5) * 100.0,
            at(0.9) * 100.0,
            at(0.99) * 100.0,
            at(1.0) * 100.0
        );
        assert!(at(0.99) <= 0.45, "n {n}");
        assert!(at(0.5) < 0.10, "n {n}");
    }
}
