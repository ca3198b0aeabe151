//! Declared aggregates: how an event updates one (sparse buckets of a window, the last value,
//! the `distinct` sketch) and what a read of one sees.
//!
//! A declared aggregate with a window of `W` ms keeps at most 60 buckets of `ceil(W/60)` ms,
//! indexed by event `ts` (sparse: only buckets that saw events exist). The window ends at the
//! entity's watermark, the greatest `ts` of its events that are not from the future, so
//! windows slide on event time, not on the server clock. An event more than a window older
//! than the newest bucket of its aggregate is late and ignored by that aggregate; an event
//! whose `ts` is more than [`MAX_FUTURE_MS`] past its record's append time is from the future:
//! it counts in the built-in features but not in windowed aggregates, and does not move the
//! watermark. All-time aggregates (no window) take every event.

#[cfg(doc)]
use crate::decl::MAX_FUTURE_MS;
use crate::decl::{Agg, BUCKETS, DistinctOf, FeatureDecl, Reading};
use crate::hll;
use crate::state::{Bucket, Buckets, State};
use vx_proto::EventView;

/// Update one declared aggregate with an event: `Some(true)` applied, `Some(false)` late,
/// `None` not applicable (no value where one is needed).
pub(crate) fn aggregate(
    decl: &FeatureDecl,
    width: Option<i64>,
    st: &mut State,
    ev: &EventView<'_>,
) -> Option<bool> {
    let b = width.map_or(0, |w| ev.ts.div_euclid(w));
    match (decl.agg, st) {
        (Agg::Last, State::Plain { v, ts }) => {
            let value = ev.value?;
            if ev.ts >= *ts {
                *v = value.into();
                *ts = ev.ts;
            }
            Some(true)
        }
        (Agg::Distinct, State::Hll { head, regs }) => {
            let h = match decl.of {
                DistinctOf::Value => {
                    let f = ev.value?.as_f64();
                    // 3 and 3.0 are one value; -0.0 and 0.0 too.
                    let f = if f == 0.0 { 0.0 } else { f };
                    xxhash_rust::xxh3::xxh3_64(&f.to_bits().to_le_bytes())
                }
                DistinctOf::Stream => xxhash_rust::xxh3::xxh3_64(ev.stream.as_bytes()),
                DistinctOf::Data => xxhash_rust::xxh3::xxh3_64(ev.data?.as_bytes()),
            };
            if width.is_none() {
                hll::add_all_time(regs, h);
                *head = 0;
                return Some(true);
            }
            Some(hll::add_windowed(head, regs, b, h))
        }
        (_, State::Win(buckets)) => {
            let a = match decl.agg {
                Agg::Count => 0.0,
                _ => ev.value?.as_f64(),
            };
            let head = buckets.last().map_or(i64::MIN, |x| x.idx);
            if head != i64::MIN && b <= head - BUCKETS {
                return Some(false);
            }
            let fold = |bk: &mut Bucket| {
                bk.n = bk.n.saturating_add(1);
                bk.a = match decl.agg {
                    Agg::Min if bk.n > 1 => bk.a.min(a),
                    Agg::Max if bk.n > 1 => bk.a.max(a),
                    Agg::Min | Agg::Max => a,
                    _ => bk.a + a,
                };
            };
            if b == head {
                // Most events fall in the newest bucket: no search through the others, whose
                // lines would each be a miss.
                if let Some(bk) = buckets.last_mut() {
                    fold(bk);
                }
            } else if head == i64::MIN || b > head {
                let mut bk = Bucket {
                    idx: b,
                    n: 0,
                    a: 0.0,
                };
                fold(&mut bk);
                let keep_from = buckets.partition_point(|x| x.idx <= b - BUCKETS);
                buckets.drain(..keep_from);
                grow_one(buckets);
                buckets.push(bk);
            } else {
                match buckets.binary_search_by_key(&b, |x| x.idx) {
                    Ok(i) => {
                        if let Some(bk) = buckets.get_mut(i) {
                            fold(bk);
                        }
                    }
                    Err(i) => {
                        let mut bk = Bucket {
                            idx: b,
                            n: 0,
                            a: 0.0,
                        };
                        fold(&mut bk);
                        grow_one(buckets);
                        buckets.insert(i, bk);
                    }
                }
            }
            Some(true)
        }
        _ => None,
    }
}

/// Room for one more bucket, exactly: a window gains a bucket per bucket width at most, and
/// a doubled allocation would hold up to twice the buckets it needs for the life of the entity
/// (most windows of most entities hold a few).
fn grow_one(buckets: &mut Buckets) {
    if buckets.len() == buckets.capacity() {
        buckets.reserve_exact(1);
    }
}

/// What a read of declared aggregate `decl` sees in state `st` of an entity whose watermark
/// is `wm`; `None` when it is empty.
pub(crate) fn evaluate<'s>(
    decl: &FeatureDecl,
    width: Option<i64>,
    st: &'s State,
    wm: i64,
) -> Option<Reading<'s>> {
    let lo = |width: i64| wm.div_euclid(width) - BUCKETS;
    match (st, decl.agg) {
        (State::Plain { v, ts }, Agg::Last) => {
            if *ts == i64::MIN {
                return None;
            }
            if let Some(w) = width
                && ts.div_euclid(w) <= lo(w)
            {
                return None;
            }
            Some(Reading::Value(v))
        }
        (State::Win(buckets), agg) => {
            let live = buckets
                .iter()
                .filter(|b| width.is_none_or(|w| b.idx > lo(w)));
            let (mut n, mut a, mut any) = (0u64, 0f64, false);
            let mut m: Option<f64> = None;
            for b in live {
                n += u64::from(b.n);
                any |= b.n > 0;
                match agg {
                    Agg::Min => m = Some(m.map_or(b.a, |x| x.min(b.a))),
                    Agg::Max => m = Some(m.map_or(b.a, |x| x.max(b.a))),
                    _ => a += b.a,
                }
            }
            match agg {
                Agg::Count => Some(Reading::Int(i64::try_from(n).unwrap_or(i64::MAX))),
                Agg::Sum => Some(Reading::Num(a)),
                Agg::Avg if any && n > 0 => Some(Reading::Num(a / n as f64)),
                Agg::Min | Agg::Max if any => m.map(Reading::Num),
                _ => None,
            }
        }
        (State::Hll { head, regs }, Agg::Distinct) => {
            let n = match width {
                None => hll::count(regs, false, 0, 0),
                Some(_) if *head == i64::MIN => 0.0,
                Some(w) => {
                    let shift = wm.div_euclid(w).saturating_sub(*head).max(0);
                    hll::count(regs, true, *head, shift)
                }
            };
            Some(Reading::Int(n.round() as i64))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::decl::decl;
    use crate::hll::{count, valid};
    use crate::state::Buckets;
    use vx_proto::{Kind, Num};

    #[test]
    fn distinct_is_exact_while_small_and_within_its_error_after() {
        let all_time = decl("d", Agg::Distinct, None);
        let windowed = decl("w", Agg::Distinct, Some(60));
        for n in [1u64, 5, 16, 17, 50, 1000, 20_000] {
            let mut a = State::Hll {
                head: i64::MIN,
                regs: crate::hll::empty(),
            };
            let mut w = a.clone();
            for i in 0..n {
                let ev = EventView {
                    stream: "s",
                    entity: Some("e"),
                    ty: "hit",
                    ts: 7_000 + (i % 3) as i64 * 1000,
                    kind: Kind::Event,
                    value: Some(Num::Int(i as i64)),
                    id: None,
                    data: None,
                };
                aggregate(&all_time, None, &mut a, &ev);
                aggregate(&windowed, windowed.width_ms(), &mut w, &ev);
            }
            let (State::Hll { regs: ra, .. }, State::Hll { head, regs: rw }) = (&a, &w) else {
                panic!()
            };
            let all = count(ra, false, 0, 0);
            let win = count(rw, true, *head, 0);
            assert!(valid(rw, true) && valid(ra, false));
            assert_eq!(
                all, win,
                "a window holding everything is the all-time state"
            );
            if n <= 16 {
                assert_eq!(all, n as f64, "exact while small");
            }
            let err = (all - n as f64).abs() / n as f64;
            assert!(err < 0.4, "n {n}: estimate {all}");
            // A window later, nothing is left.
            assert_eq!(count(rw, true, *head, 60), 0.0);
        }
    }

    #[test]
    fn window_buckets_slide_and_drop_late_events() {
        let d = decl("s", Agg::Sum, Some(60)); // 1 s buckets
        let w = d.width_ms();
        assert_eq!(w, Some(1000));
        let mut st = State::Win(Buckets::new());
        let ev = |ts: i64, v: i64| EventView {
            stream: "s",
            entity: Some("e"),
            ty: "hit",
            ts,
            kind: Kind::Event,
            value: Some(Num::Int(v)),
            id: None,
            data: None,
        };
        assert_eq!(aggregate(&d, w, &mut st, &ev(0, 1)), Some(true));
        assert_eq!(aggregate(&d, w, &mut st, &ev(59_999, 2)), Some(true));
        assert_eq!(aggregate(&d, w, &mut st, &ev(120_000, 4)), Some(true));
        // Bucket 0 and 59 are a window behind bucket 120: gone.
        let State::Win(b) = &st else { panic!() };
        assert_eq!(b.len(), 1);
        assert_eq!(aggregate(&d, w, &mut st, &ev(1_000, 8)), Some(false));
        assert_eq!(aggregate(&d, w, &mut st, &ev(61_000, 8)), Some(true));
        let State::Win(b) = &st else { panic!() };
        assert_eq!(b.iter().map(|x| x.idx).collect::<Vec<_>>(), [61, 120]);
        assert!(b.len() <= BUCKETS as usize);
    }
}
