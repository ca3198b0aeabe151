//! What each load lane records: per operation, the outcomes (successes, 429 refusals and
//! errors apart) and a latency histogram of the successes, for the measured window and for the
//! current sampling interval; and how late its sends left. A lane owns its recorder behind an
//! uncontended mutex; the sampler takes the interval part at every tick.

use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Latencies are recorded in microseconds, from 1 µs to an hour.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Significant digits of the whole-run histograms (0.1% resolution).
pub const RUN_SIGFIG: u8 = 3;
/// Significant digits of the per-interval histograms (1%), which are many.
pub const INTERVAL_SIGFIG: u8 = 2;
/// Distinct error messages kept per lane; more are counted under one "(other errors)".
const MAX_ERROR_KINDS: usize = 32;

/// An operation a scenario performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// One ingest request (HTTP body or frames BATCH) of `batch` events.
    Ingest,
    /// One replay page of `page_events`.
    Page,
    /// A whole stream read, page after page.
    Scan,
    Get,
    /// kv SET, features PUT.
    Set,
    /// kv DEL, features DELETE.
    Del,
    /// A batch read of `batch_size` keys: kv MGET, features POST /v1/features/query.
    Query,
    /// fanout: one event received by one follower; its latency runs from the producer's ack
    /// of the event to the follower's receipt.
    Deliver,
    /// Ingest over RESP: one `XADD` of one event.
    Xadd,
}

/// How many operations there are: the length of the per-operation arrays.
pub const N_OPS: usize = Op::ALL.len();

/// One accumulator per operation, indexed by [`Op`].
pub type OpAccs = [Option<OpAcc>; N_OPS];

impl Op {
    pub const ALL: [Op; 9] = [
        Op::Ingest,
        Op::Page,
        Op::Scan,
        Op::Get,
        Op::Set,
        Op::Del,
        Op::Query,
        Op::Deliver,
        Op::Xadd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Ingest => "ingest",
            Op::Page => "page",
            Op::Scan => "scan",
            Op::Get => "get",
            Op::Set => "set",
            Op::Del => "del",
            Op::Query => "query",
            Op::Deliver => "deliver",
            Op::Xadd => "xadd",
        }
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How one operation ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Answered with success; `events` carried (ingest: sent and acknowledged; replay: read)
    /// and bytes of payload.
    Ok {
        events: u64,
        bytes: u64,
    },
    /// A 429 (or frames `backpressure`): the server pushed back. Not an error.
    Refused {
        retry_after: Option<Duration>,
    },
    Error(String),
}

/// Counts and a latency histogram of one operation.
#[derive(Clone, Debug)]
pub struct OpAcc {
    pub ok: u64,
    pub refused: u64,
    pub errors: u64,
    pub events: u64,
    pub bytes: u64,
    /// Latency of the successes, µs.
    pub hist: Histogram<u64>,
}

/// A latency histogram over [1 µs, 1 h] at `sigfig` significant digits (2 or 3 here).
#[allow(clippy::expect_used)] // constant bounds; no input reaches this
pub fn new_histogram(sigfig: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, sigfig).expect("constant histogram bounds")
}

pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_LATENCY_US)
}

impl OpAcc {
    pub fn new(sigfig: u8) -> OpAcc {
        OpAcc {
            ok: 0,
            refused: 0,
            errors: 0,
            events: 0,
            bytes: 0,
            hist: new_histogram(sigfig),
        }
    }

    fn record(&mut self, outcome: &Outcome, latency: Duration) {
        match outcome {
            Outcome::Ok { events, bytes } => {
                self.ok += 1;
                self.events += events;
                self.bytes += bytes;
                self.hist.saturating_record(micros(latency));
            }
            Outcome::Refused { .. } => self.refused += 1,
            Outcome::Error(_) => self.errors += 1,
        }
    }

    /// Add `other` into this (histograms merged exactly: same bounds).
    pub fn add(&mut self, other: &OpAcc) {
        self.ok += other.ok;
        self.refused += other.refused;
        self.errors += other.errors;
        self.events += other.events;
        self.bytes += other.bytes;
        // Same bounds on both sides; `add` only fails when `other` holds values out of range.
        let _ = self.hist.add(&other.hist);
    }

    pub fn is_empty(&self) -> bool {
        self.ok == 0 && self.refused == 0 && self.errors == 0
    }

    fn reset(&mut self) {
        self.ok = 0;
        self.refused = 0;
        self.errors = 0;
        self.events = 0;
        self.bytes = 0;
        self.hist.reset();
    }
}

/// Sends and how late they left (open loop only).
#[derive(Clone, Debug)]
pub struct LateAcc {
    pub sends: u64,
    pub late: u64,
    /// Lateness of every send, µs.
    pub hist: Histogram<u64>,
}

impl LateAcc {
    pub fn new() -> LateAcc {
        LateAcc {
            sends: 0,
            late: 0,
            hist: new_histogram(RUN_SIGFIG),
        }
    }

    pub fn add(&mut self, other: &LateAcc) {
        self.sends += other.sends;
        self.late += other.late;
        let _ = self.hist.add(&other.hist);
    }
}

impl Default for LateAcc {
    fn default() -> Self {
        LateAcc::new()
    }
}

/// The recorder of one lane.
pub struct LaneRecorder {
    measure_start: Instant,
    measure_end: Instant,
    totals: OpAccs,
    interval: OpAccs,
    late: LateAcc,
    errors: BTreeMap<String, u64>,
}

impl LaneRecorder {
    pub fn new(measure_start: Instant, measure_end: Instant) -> LaneRecorder {
        LaneRecorder {
            measure_start,
            measure_end,
            totals: Default::default(),
            interval: Default::default(),
            late: LateAcc::new(),
            errors: BTreeMap::new(),
        }
    }

    /// Set the measured window of a recorder made before the run's clock was known (the
    /// fanout followers' recorders exist before the producers' clock starts).
    pub fn set_window(&mut self, measure_start: Instant, measure_end: Instant) {
        self.measure_start = measure_start;
        self.measure_end = measure_end;
    }

    /// Whether an operation started at `started` falls in the measured window.
    pub fn measured(&self, started: Instant) -> bool {
        started >= self.measure_start && started < self.measure_end
    }

    /// An operation that started (open loop: was meant to start) at `started` ended with
    /// `outcome` after `latency`. Only operations started inside the measured window count
    /// in the totals; every one counts in the current interval.
    pub fn record(&mut self, op: Op, outcome: &Outcome, latency: Duration, started: Instant) {
        let measured = self.measured(started);
        self.record_window(op, outcome, latency, measured);
    }

    /// [`LaneRecorder::record`] for an operation whose window the caller decided (a fanout
    /// delivery counts when the producer's request of its event was meant to start in the
    /// window, which only the producer knew).
    pub fn record_window(&mut self, op: Op, outcome: &Outcome, latency: Duration, measured: bool) {
        let i = op.index();
        self.interval[i]
            .get_or_insert_with(|| OpAcc::new(INTERVAL_SIGFIG))
            .record(outcome, latency);
        if measured {
            self.totals[i]
                .get_or_insert_with(|| OpAcc::new(RUN_SIGFIG))
                .record(outcome, latency);
            if let Outcome::Error(message) = outcome {
                let key =
                    if self.errors.len() < MAX_ERROR_KINDS || self.errors.contains_key(message) {
                        message.clone()
                    } else {
                        "(other errors)".to_string()
                    };
                *self.errors.entry(key).or_default() += 1;
            }
        }
    }

    /// An open-loop send meant for `intended` left at `sent`.
    pub fn sent(&mut self, intended: Instant, sent: Instant) {
        if !self.measured(intended) {
            return;
        }
        let late = crate::schedule::lateness(intended, sent);
        self.late.sends += 1;
        if crate::schedule::is_late(late) {
            self.late.late += 1;
        }
        // Zero lateness is recorded as the lowest bucket, 1 µs.
        self.late.hist.saturating_record(micros(late));
    }

    /// Move the current interval's counts into `into` (per op) and start a new interval.
    pub fn take_interval(&mut self, into: &mut OpAccs) {
        for (acc, target) in self.interval.iter_mut().zip(into.iter_mut()) {
            if let Some(acc) = acc
                && !acc.is_empty()
            {
                target
                    .get_or_insert_with(|| OpAcc::new(INTERVAL_SIGFIG))
                    .add(acc);
                acc.reset();
            }
        }
    }

    /// Add this lane's totals, lateness and errors into the run's.
    pub fn add_totals(
        &self,
        totals: &mut OpAccs,
        late: &mut LateAcc,
        errors: &mut BTreeMap<String, u64>,
    ) {
        for (acc, target) in self.totals.iter().zip(totals.iter_mut()) {
            if let Some(acc) = acc {
                target
                    .get_or_insert_with(|| OpAcc::new(RUN_SIGFIG))
                    .add(acc);
            }
        }
        late.add(&self.late);
        for (k, v) in &self.errors {
            *errors.entry(k.clone()).or_default() += v;
        }
    }
}

/// The operations in `accs` that saw anything, by name.
pub fn named(accs: OpAccs) -> impl Iterator<Item = (Op, OpAcc)> {
    Op::ALL
        .into_iter()
        .zip(accs)
        .filter_map(|(op, acc)| acc.map(|a| (op, a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_operations_started_in_the_window_count_in_the_totals() {
        let t0 = Instant::now();
        let start = t0 + Duration::from_secs(1);
        let end = t0 + Duration::from_secs(2);
        let mut r = LaneRecorder::new(start, end);
        let ok = Outcome::Ok {
            events: 10,
            bytes: 100,
        };
        let ms = Duration::from_millis(1);
        r.record(Op::Ingest, &ok, ms, t0); // warm-up
        r.record(Op::Ingest, &ok, ms * 2, start);
        r.record(
            Op::Ingest,
            &Outcome::Refused { retry_after: None },
            ms,
            start,
        );
        r.record(Op::Ingest, &Outcome::Error("boom".into()), ms, start);
        r.record(Op::Ingest, &ok, ms, end); // after the window
        let mut totals = Default::default();
        let mut late = LateAcc::new();
        let mut errors = BTreeMap::new();
        r.add_totals(&mut totals, &mut late, &mut errors);
        let t = named(totals).next().map(|(_, a)| a);
        let t = match t {
            Some(t) => t,
            None => panic!("no totals"),
        };
        assert_eq!(
            (t.ok, t.refused, t.errors, t.events, t.bytes),
            (1, 1, 1, 10, 100)
        );
        assert_eq!(t.hist.len(), 1);
        assert!(t.hist.value_at_quantile(0.5).abs_diff(2000) <= 2);
        assert_eq!(errors.get("boom"), Some(&1));

        // The interval saw all five, and is empty once taken.
        let mut iv = Default::default();
        r.take_interval(&mut iv);
        let (_, a) = named(iv).next().unwrap_or((Op::Get, OpAcc::new(2)));
        assert_eq!((a.ok, a.refused, a.errors), (3, 1, 1));
        let mut again: OpAccs = Default::default();
        r.take_interval(&mut again);
        assert!(again.iter().all(Option::is_none));
    }

    #[test]
    fn late_sends_are_counted_inside_the_window_only() {
        let t0 = Instant::now();
        let mut r = LaneRecorder::new(t0, t0 + Duration::from_secs(1));
        r.sent(t0, t0 + Duration::from_micros(200));
        r.sent(t0, t0 + Duration::from_millis(5));
        r.sent(t0 + Duration::from_secs(2), t0 + Duration::from_secs(3));
        let mut late = LateAcc::new();
        r.add_totals(&mut Default::default(), &mut late, &mut BTreeMap::new());
        assert_eq!((late.sends, late.late), (2, 1));
        assert!(late.hist.max().abs_diff(5000) <= 5);
    }
}
