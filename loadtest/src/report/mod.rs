//! The report of a run: the table a person reads, and the JSON (`--json`) that carries every
//! histogram in HdrHistogram's V2 deflate form (base64, the form of HdrHistogram's interval
//! logs), so that [`merge`] of several load hosts' reports adds histograms exactly instead of
//! averaging percentiles. docs/LOADTEST.md describes the JSON field by field.

use crate::recorder::{INTERVAL_SIGFIG, LateAcc, Op, OpAcc, RUN_SIGFIG};
use crate::workload::Workload;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The version of the JSON report's shape.
pub const REPORT_FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub tool: String,
    /// One entry per load host (several after `merge`).
    pub hosts: Vec<Host>,
    pub workload: Workload,
    /// Open loop (a `rate` was set) or closed loop.
    pub open_loop: bool,
    /// The measured window, seconds (after `merge`: the longest of the hosts').
    pub measure_s: f64,
    /// Per operation name (`ingest`, `page`, `scan`, `get`, `set`, `del`, `query`).
    pub operations: BTreeMap<String, OpReport>,
    pub late_sends: LateReport,
    /// Error messages of the measured window and how often each was seen.
    pub errors: BTreeMap<String, u64>,
    /// The time series, one entry per sample (1 / `sample_hz` seconds), warm-up included.
    pub intervals: Vec<Interval>,
    /// The fanout scenario's ordering check (absent for other scenarios, and in reports
    /// written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout: Option<FanoutReport>,
}

/// What the followers of a fanout run received, checked once the producers stopped and the
/// followers had `drain_s` to receive the tail. Counts cover the whole run, warm-up included.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FanoutReport {
    /// The followed stream.
    pub stream: String,
    pub followers: u64,
    /// The seq every follower started from: the stream's last seq before the run, plus 1.
    pub from_seq: u64,
    /// The highest seq a producer saw acked; the check runs through it (`from_seq − 1`
    /// when nothing was acked).
    pub last_acked_seq: u64,
    /// Events the producers saw acked.
    pub acked_events: u64,
    /// Seqs of `from_seq..=last_acked_seq` no producer saw acked (a request that timed out
    /// but was stored, or another writer of the stream); their deliveries are not timed
    /// beyond "before ack".
    pub unacked_seqs: u64,
    /// Events received, all followers, the whole run.
    pub delivered: u64,
    /// Deliveries that arrived before the producer had the ack (latency recorded as 0).
    pub before_ack: u64,
    /// Followers that received every seq of `from_seq..=last_acked_seq` once, in order.
    pub complete: u64,
    /// Followers with at least one seq of the range never received (a hole or the tail).
    pub with_gaps: u64,
    pub with_duplicates: u64,
    pub with_out_of_order: u64,
    /// Seqs of the range never received, summed over the followers.
    pub missing_events: u64,
    /// Events received again (or before the follower's start).
    pub duplicate_events: u64,
    /// Events received after a later seq (a hole filled late).
    pub out_of_order_events: u64,
    /// Times a follower's stream broke and was opened again (with `Last-Event-ID`).
    pub reconnects: u64,
    /// `event: retained` notices (events removed by retention before delivery).
    pub retained_notices: u64,
    /// Followers ended by `event: deleted`.
    pub deleted: u64,
    /// The drain time allowed.
    pub drain_s: f64,
    /// How long the last follower took to receive the tail after the producers stopped
    /// (absent: not every follower had it when the drain time ran out).
    pub drained_in_s: Option<f64>,
    /// Every follower complete.
    pub passed: bool,
}

impl FanoutReport {
    /// Add another host's check (several load hosts following the same stream).
    fn add(&mut self, o: &FanoutReport) {
        self.followers += o.followers;
        self.from_seq = self.from_seq.min(o.from_seq);
        self.last_acked_seq = self.last_acked_seq.max(o.last_acked_seq);
        self.acked_events += o.acked_events;
        self.unacked_seqs += o.unacked_seqs;
        self.delivered += o.delivered;
        self.before_ack += o.before_ack;
        self.complete += o.complete;
        self.with_gaps += o.with_gaps;
        self.with_duplicates += o.with_duplicates;
        self.with_out_of_order += o.with_out_of_order;
        self.missing_events += o.missing_events;
        self.duplicate_events += o.duplicate_events;
        self.out_of_order_events += o.out_of_order_events;
        self.reconnects += o.reconnects;
        self.retained_notices += o.retained_notices;
        self.deleted += o.deleted;
        self.drained_in_s = self.drained_in_s.zip(o.drained_in_s).map(|(a, b)| a.max(b));
        self.passed = self.passed && o.passed;
    }

    /// The lines of the table.
    fn lines(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "fanout: {} followers of {} from seq {} through {} ({} events acked): {} complete, {} with gaps, {} with duplicates, {} out of order",
            self.followers,
            self.stream,
            self.from_seq,
            self.last_acked_seq,
            self.acked_events,
            self.complete,
            self.with_gaps,
            self.with_duplicates,
            self.with_out_of_order
        );
        let drained = match self.drained_in_s {
            Some(s) => format!("all had the tail {s:.3} s after the producers stopped"),
            None => format!("not all had the tail within drain_s = {} s", self.drain_s),
        };
        let _ = writeln!(
            out,
            "fanout: {} delivered, {} missing, {} duplicates, {} out of order, {} before their ack (latency 0), {} unacked seqs, {} reconnects, {} retained notices, {} ended by deletion; {drained}",
            self.delivered,
            self.missing_events,
            self.duplicate_events,
            self.out_of_order_events,
            self.before_ack,
            self.unacked_seqs,
            self.reconnects,
            self.retained_notices,
            self.deleted
        );
        let _ = writeln!(
            out,
            "fanout check: {}",
            if self.passed {
                "PASSED (every follower received every event once, in order)".to_string()
            } else {
                format!(
                    "FAILED ({} of {} followers incomplete)",
                    self.followers.saturating_sub(self.complete),
                    self.followers
                )
            }
        );
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// The 1-minute load average when the run started (the machine's state, for honesty).
    pub load1_before: Option<f64>,
    pub cpus: usize,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Percentiles {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: h.mean() / 1000.0,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpReport {
    /// Answered with success.
    pub ok: u64,
    /// Refused with 429 `backpressure` (not errors).
    pub refused: u64,
    pub errors: u64,
    /// Events carried by the successes (ingest: stored or duplicate; replay: read; kv and
    /// features: 1 per operation, `batch_size` per query).
    pub events: u64,
    pub bytes: u64,
    /// Successes per second of the measured window.
    pub ops_per_s: f64,
    pub events_per_s: f64,
    /// Batch reads (`query`) only: values read per second, `batch_size` × successful queries ÷
    /// `measure_s`, the figure to set beside GET's `ops_per_s`. Absent for other operations
    /// (and in reports written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_per_s: Option<f64>,
    /// Of the successes; open loop: from the intended send time.
    pub latency_ms: Percentiles,
    /// HdrHistogram V2 deflate, base64; values in microseconds.
    pub histogram: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LateReport {
    /// Open-loop sends in the measured window (0 in closed loop).
    pub sends: u64,
    /// Sends that left more than `late_after_ms` after their intended time.
    pub late: u64,
    pub late_after_ms: f64,
    pub lateness_ms: Percentiles,
    pub histogram: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Interval {
    /// End of the interval, seconds since the measured window began (negative: warm-up).
    pub t_s: f64,
    pub ops: BTreeMap<String, IntervalOp>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntervalOp {
    pub ok: u64,
    pub refused: u64,
    pub errors: u64,
    pub events: u64,
    pub ops_per_s: f64,
    pub latency_ms: Percentiles,
    /// 2 significant digits (the whole-run histograms have 3).
    pub histogram: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}: not a vx-loadtest report: {1}")]
    Json(String, serde_json::Error),
    #[error("{0}: report format {1}, this vx-loadtest reads format {REPORT_FORMAT}")]
    Format(String, u32),
    #[error("{0}: a histogram does not decode: {1}")]
    Histogram(String, String),
    #[error("nothing to merge")]
    Empty,
}

pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    // Serializing into a Vec cannot fail for a histogram this crate built.
    match V2DeflateSerializer::new().serialize(h, &mut buf) {
        Ok(_) => STANDARD.encode(buf),
        Err(_) => String::new(),
    }
}

pub fn decode_histogram(text: &str) -> Result<Histogram<u64>, String> {
    if text.is_empty() {
        return Err("empty".into());
    }
    let bytes = STANDARD.decode(text).map_err(|e| e.to_string())?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("{e:?}"))
}

impl OpReport {
    /// The report of operation `name` (its name says whether it reads values in batches).
    pub fn from_acc(name: &str, acc: &OpAcc, measure_s: f64) -> OpReport {
        OpReport {
            ok: acc.ok,
            refused: acc.refused,
            errors: acc.errors,
            events: acc.events,
            bytes: acc.bytes,
            ops_per_s: acc.ok as f64 / measure_s,
            events_per_s: acc.events as f64 / measure_s,
            // A successful query counts its batch_size keys as events (whether each was
            // found or not, as MGET answers nil), so its values are its events.
            values_per_s: (name == Op::Query.name()).then(|| acc.events as f64 / measure_s),
            latency_ms: Percentiles::of(&acc.hist),
            histogram: encode_histogram(&acc.hist),
        }
    }

    fn to_acc(&self, origin: &str) -> Result<OpAcc, ReportError> {
        let mut acc = acc_of(&self.histogram, origin, RUN_SIGFIG)?;
        acc.ok = self.ok;
        acc.refused = self.refused;
        acc.errors = self.errors;
        acc.events = self.events;
        acc.bytes = self.bytes;
        Ok(acc)
    }
}

/// An accumulator holding a report's serialized histogram (counts left at zero).
fn acc_of(histogram: &str, origin: &str, sigfig: u8) -> Result<OpAcc, ReportError> {
    let mut acc = OpAcc::new(sigfig);
    let h = decode_histogram(histogram).map_err(|e| ReportError::Histogram(origin.into(), e))?;
    acc.hist
        .add(&h)
        .map_err(|e| ReportError::Histogram(origin.into(), format!("{e:?}")))?;
    Ok(acc)
}

impl IntervalOp {
    pub fn from_acc(acc: &OpAcc, seconds: f64) -> IntervalOp {
        IntervalOp {
            ok: acc.ok,
            refused: acc.refused,
            errors: acc.errors,
            events: acc.events,
            ops_per_s: acc.ok as f64 / seconds,
            latency_ms: Percentiles::of(&acc.hist),
            histogram: encode_histogram(&acc.hist),
        }
    }

    fn to_acc(&self, origin: &str) -> Result<OpAcc, ReportError> {
        let mut acc = acc_of(&self.histogram, origin, INTERVAL_SIGFIG)?;
        acc.ok = self.ok;
        acc.refused = self.refused;
        acc.errors = self.errors;
        acc.events = self.events;
        Ok(acc)
    }
}

impl LateReport {
    pub fn from_acc(acc: &LateAcc) -> LateReport {
        LateReport {
            sends: acc.sends,
            late: acc.late,
            late_after_ms: crate::schedule::LATE_AFTER.as_secs_f64() * 1000.0,
            lateness_ms: Percentiles::of(&acc.hist),
            histogram: encode_histogram(&acc.hist),
        }
    }
}

impl Report {
    pub fn from_json(text: &str, origin: &str) -> Result<Report, ReportError> {
        let r: Report =
            serde_json::from_str(text).map_err(|e| ReportError::Json(origin.into(), e))?;
        if r.format != REPORT_FORMAT {
            return Err(ReportError::Format(origin.into(), r.format));
        }
        Ok(r)
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let w = &self.workload;
        let _ = writeln!(
            out,
            "{} · {} · {} · {} connection(s) × depth {} · measured {:.1} s{}",
            w.scenario.as_str(),
            w.endpoints.join(", "),
            w.loop_label(),
            w.connections,
            w.pipeline_depth,
            self.measure_s,
            if self.hosts.len() > 1 {
                format!(" · {} hosts merged", self.hosts.len())
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "{:<8} {:>10} {:>11} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "op",
            "ok",
            "ops/s",
            "events/s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "429s",
            "errors"
        );
        for (name, op) in &self.operations {
            let l = op.latency_ms;
            let _ = writeln!(
                out,
                "{:<8} {:>10} {:>11.1} {:>12.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9} {:>8}",
                name,
                op.ok,
                op.ops_per_s,
                op.events_per_s,
                l.p50,
                l.p90,
                l.p99,
                l.p999,
                l.max,
                op.refused,
                op.errors
            );
        }
        if self.operations.is_empty() {
            let _ = writeln!(out, "(no operation completed in the measured window)");
        }
        for (name, op) in &self.operations {
            if let Some(v) = op.values_per_s {
                let _ = writeln!(
                    out,
                    "values/s: {name} {v:.1} (batch_size {} × {:.1} ops/s)",
                    w.batch_size, op.ops_per_s
                );
            }
        }
        if self.open_loop {
            let l = &self.late_sends;
            let pct = if l.sends == 0 {
                0.0
            } else {
                100.0 * l.late as f64 / l.sends as f64
            };
            let _ = writeln!(
                out,
                "late sends: {} of {} ({pct:.2}%) left more than {} ms after their intended time; lateness p99 {:.3} ms, max {:.3} ms",
                l.late, l.sends, l.late_after_ms, l.lateness_ms.p99, l.lateness_ms.max
            );
        }
        for (message, n) in &self.errors {
            let _ = writeln!(out, "error ×{n}: {message}");
        }
        if let Some(f) = &self.fanout {
            f.lines(&mut out);
        }
        out
    }

    /// Whether the run's own check failed (fanout: a follower missed, repeated or reordered
    /// an event).
    pub fn check_failed(&self) -> bool {
        self.fanout.as_ref().is_some_and(|f| !f.passed)
    }
}

/// Combine the reports of load hosts that ran the same workload at the same time: counts add,
/// histograms merge exactly, throughputs add (over the longest measured window), intervals
/// align by their time.
pub fn merge(reports: &[(String, Report)]) -> Result<Report, ReportError> {
    let (_, first) = reports.first().ok_or(ReportError::Empty)?;
    let mut hosts = first.hosts.clone();
    let measure_s = reports
        .iter()
        .map(|(_, r)| r.measure_s)
        .fold(0.0f64, f64::max);
    let mut ops: BTreeMap<String, OpAcc> = BTreeMap::new();
    let mut late = LateAcc::new();
    let mut errors = first.errors.clone();
    let mut intervals: BTreeMap<i64, (f64, BTreeMap<String, OpAcc>)> = BTreeMap::new();
    let interval_s = 1.0 / first.workload.sample_hz;
    let mut fanout = first.fanout.clone();
    for (i, (origin, r)) in reports.iter().enumerate() {
        if i > 0 {
            hosts.extend(r.hosts.iter().cloned());
            for (k, v) in &r.errors {
                *errors.entry(k.clone()).or_default() += v;
            }
            match (&mut fanout, &r.fanout) {
                (Some(f), Some(o)) => f.add(o),
                (None, Some(o)) => fanout = Some(o.clone()),
                _ => {}
            }
        }
        for (name, op) in &r.operations {
            let acc = op.to_acc(origin)?;
            ops.entry(name.clone())
                .or_insert_with(|| OpAcc::new(RUN_SIGFIG))
                .add(&acc);
        }
        if !r.late_sends.histogram.is_empty() {
            let h = decode_histogram(&r.late_sends.histogram)
                .map_err(|e| ReportError::Histogram(origin.clone(), e))?;
            let mut acc = LateAcc::new();
            acc.sends = r.late_sends.sends;
            acc.late = r.late_sends.late;
            acc.hist
                .add(&h)
                .map_err(|e| ReportError::Histogram(origin.clone(), format!("{e:?}")))?;
            late.add(&acc);
        }
        for iv in &r.intervals {
            // Align on the sample grid of the first report.
            let slot = (iv.t_s / interval_s).round() as i64;
            let entry = intervals
                .entry(slot)
                .or_insert_with(|| (iv.t_s, BTreeMap::new()));
            for (name, op) in &iv.ops {
                let acc = op.to_acc(origin)?;
                entry
                    .1
                    .entry(name.clone())
                    .or_insert_with(|| OpAcc::new(INTERVAL_SIGFIG))
                    .add(&acc);
            }
        }
    }
    let measure = measure_s.max(f64::MIN_POSITIVE);
    Ok(Report {
        format: REPORT_FORMAT,
        tool: first.tool.clone(),
        hosts,
        workload: first.workload.clone(),
        open_loop: first.open_loop,
        measure_s,
        operations: ops
            .iter()
            .map(|(k, a)| (k.clone(), OpReport::from_acc(k, a, measure)))
            .collect(),
        late_sends: LateReport::from_acc(&late),
        errors,
        intervals: intervals
            .into_values()
            .map(|(t_s, ops)| Interval {
                t_s,
                ops: ops
                    .iter()
                    .map(|(k, a)| (k.clone(), IntervalOp::from_acc(a, interval_s)))
                    .collect(),
            })
            .collect(),
        fanout,
    })
}

/// What makes a merge of `reports` doubtful: workloads that differ in more than their
/// endpoints and seed (each host may aim at its own server and draw its own keys), or runs that
/// did not overlap in time. `merge` still merges; the command line prints these as warnings.
pub fn merge_warnings(reports: &[(String, Report)]) -> Vec<String> {
    let mut out = Vec::new();
    let Some((first_name, first)) = reports.first() else {
        return out;
    };
    let comparable = |w: &Workload| -> Option<toml::Table> {
        let mut w = w.clone();
        w.endpoints.clear();
        w.seed = 0;
        toml::Table::try_from(&w).ok()
    };
    let base = comparable(&first.workload);
    for (name, r) in &reports[1..] {
        let other = comparable(&r.workload);
        if let (Some(a), Some(b)) = (&base, &other) {
            let mut keys: Vec<&String> = a
                .keys()
                .chain(b.keys())
                .filter(|k| a.get(*k) != b.get(*k))
                .collect();
            keys.sort();
            keys.dedup();
            if !keys.is_empty() {
                let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
                out.push(format!(
                    "{name} ran another workload than {first_name} (differs in {}): the merged figures mix them",
                    keys.join(", ")
                ));
            }
        }
        let start = |r: &Report| {
            r.hosts.first().and_then(|h| {
                time::OffsetDateTime::parse(
                    &h.started_at,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
        };
        if let (Some(a), Some(b)) = (start(first), start(r)) {
            let apart = (a - b).abs().as_seconds_f64();
            let span = first.workload.warmup_s + first.measure_s.max(r.measure_s);
            if apart > span {
                out.push(format!(
                    "{name} started {apart:.0} s apart from {first_name}, longer than a run: the hosts did not load the server at the same time, so adding their throughputs overstates it"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(values: &[u64]) -> OpAcc {
        let mut a = OpAcc::new(RUN_SIGFIG);
        for v in values {
            a.ok += 1;
            a.events += 10;
            let _ = a.hist.record(*v);
        }
        a
    }

    fn report(values: &[u64], refused: u64, t_s: f64) -> Report {
        let mut a = acc(values);
        a.refused = refused;
        let mut ops = BTreeMap::new();
        ops.insert("ingest".to_string(), OpReport::from_acc("ingest", &a, 10.0));
        let mut iv_acc = OpAcc::new(INTERVAL_SIGFIG);
        iv_acc.add(&a);
        let mut iv_ops = BTreeMap::new();
        iv_ops.insert("ingest".to_string(), IntervalOp::from_acc(&iv_acc, 1.0));
        Report {
            format: REPORT_FORMAT,
            tool: "vx-loadtest test".into(),
            hosts: vec![Host {
                hostname: "h".into(),
                started_at: "2026-11-23T00:00:00Z".into(),
                load1_before: Some(0.1),
                cpus: 2,
            }],
            workload: Workload::default(),
            open_loop: false,
            measure_s: 10.0,
            operations: ops,
            late_sends: LateReport::from_acc(&LateAcc::new()),
            errors: BTreeMap::new(),
            intervals: vec![Interval { t_s, ops: iv_ops }],
            fanout: None,
        }
    }

    #[test]
    fn histograms_survive_the_json_round_trip_exactly() {
        let a = acc(&[1, 250, 999, 1000, 1001, 123_456, 3_000_000]);
        let h = decode_histogram(&encode_histogram(&a.hist));
        let h = match h {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(h, a.hist);
        assert!(decode_histogram("not base64!").is_err());
        assert!(decode_histogram("aGVsbG8=").is_err());
    }

    #[test]
    fn merge_adds_counts_and_histograms_rather_than_averaging() {
        // Host A: 1000 fast ops (1 ms). Host B: 10 slow ones (100 ms). Averaging the two
        // p99s would say ~50 ms; the merged histogram says the true p99 is 1 ms and the
        // max 100 ms.
        let a = report(&vec![1000; 1000], 3, 1.0);
        let b = report(&[100_000; 10], 4, 1.0);
        let merged = match merge(&[("a".into(), a), ("b".into(), b)]) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let op = &merged.operations["ingest"];
        assert_eq!((op.ok, op.refused, op.events), (1010, 7, 10_100));
        assert!((op.ops_per_s - 101.0).abs() < 1e-9);
        assert!(
            (op.latency_ms.p99 - 1.0).abs() < 0.01,
            "{:?}",
            op.latency_ms
        );
        assert!(
            (op.latency_ms.max - 100.0).abs() < 0.1,
            "{:?}",
            op.latency_ms
        );
        assert_eq!(merged.hosts.len(), 2);
        // The merged histogram equals one built from all values at once.
        let mut all = vec![1000u64; 1000];
        all.extend([100_000; 10]);
        let direct = acc(&all).hist;
        assert_eq!(decode_histogram(&op.histogram).ok(), Some(direct));
        // Intervals at the same time are merged too.
        assert_eq!(merged.intervals.len(), 1);
        assert_eq!(merged.intervals[0].ops["ingest"].ok, 1010);
        // And a merged report merges again (it is a report like any other).
        let again = merge(&[("m".into(), merged.clone())]);
        assert_eq!(again.ok().map(|r| r.operations["ingest"].ok), Some(1010));
    }

    #[test]
    fn merge_warns_about_other_workloads_and_runs_that_did_not_overlap() {
        let a = report(&[5], 0, 1.0);
        let mut b = report(&[5], 0, 1.0);
        b.workload.endpoints = vec!["http://other:1".into()];
        b.workload.seed = 9;
        let pair = |b: &Report| vec![("a".to_string(), a.clone()), ("b".to_string(), b.clone())];
        // Other endpoints and seeds are what several hosts have: no warning.
        assert!(merge_warnings(&pair(&b)).is_empty());
        let mut c = b.clone();
        c.workload.batch = 100;
        c.workload.rate = Some(5.0);
        let w = merge_warnings(&pair(&c));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("batch, rate"), "{w:?}");
        let mut d = b.clone();
        d.hosts[0].started_at = "2026-11-23T01:00:00Z".into();
        let w = merge_warnings(&pair(&d));
        assert!(w.len() == 1 && w[0].contains("3600 s apart"), "{w:?}");
    }

    #[test]
    fn batch_reads_report_values_per_second_through_merge_and_the_table() {
        let mut r = report(&[5], 0, 1.0);
        r.workload.batch_size = 10;
        // A query's events are its batch_size keys: 3 queries of 10 in a 10 s window.
        let mut q = acc(&[100, 200, 300]);
        q.events = 30;
        r.operations
            .insert("query".into(), OpReport::from_acc("query", &q, 10.0));
        assert_eq!(r.operations["query"].values_per_s, Some(3.0));
        assert_eq!(r.operations["ingest"].values_per_s, None);
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert!(text.contains("\"values_per_s\":3.0"), "{text}");
        assert_eq!(text.matches("values_per_s").count(), 1, "only query has it");
        assert!(
            r.table()
                .contains("values/s: query 3.0 (batch_size 10 × 0.3 ops/s)")
        );
        let merged = match merge(&[("a".into(), r.clone()), ("b".into(), r)]) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(merged.operations["query"].values_per_s, Some(6.0));
        // A report written before the field existed still reads.
        let old = text.replace("\"values_per_s\":3.0,", "");
        assert!(!old.contains("values_per_s"));
        let back = Report::from_json(&old, "old").map(|r| r.operations["query"].values_per_s);
        assert!(matches!(back, Ok(None)), "{back:?}");
    }

    #[test]
    fn the_fanout_check_reads_back_merges_and_fails_the_table() {
        let mut r = report(&[5], 0, 1.0);
        assert!(!r.check_failed());
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert!(!text.contains("fanout"), "only fanout runs carry the check");
        let good = FanoutReport {
            stream: "lt-0".into(),
            followers: 3,
            from_seq: 11,
            last_acked_seq: 20,
            acked_events: 10,
            delivered: 30,
            complete: 3,
            drain_s: 2.0,
            drained_in_s: Some(0.01),
            passed: true,
            ..FanoutReport::default()
        };
        r.fanout = Some(good.clone());
        assert!(!r.check_failed());
        assert!(r.table().contains("fanout check: PASSED"), "{}", r.table());
        let text = serde_json::to_string(&r).unwrap_or_default();
        let back = Report::from_json(&text, "r").map(|r| r.fanout);
        assert_eq!(back.ok().flatten().as_ref(), Some(&good));
        let mut bad = r.clone();
        bad.fanout = Some(FanoutReport {
            complete: 2,
            with_gaps: 1,
            missing_events: 4,
            drained_in_s: None,
            passed: false,
            ..good
        });
        assert!(bad.check_failed());
        let table = bad.table();
        assert!(
            table.contains("fanout check: FAILED (1 of 3 followers incomplete)"),
            "{table}"
        );
        assert!(
            table.contains("4 missing") && table.contains("1 with gaps"),
            "{table}"
        );
        // Merged: counts add, and one failing host fails the whole.
        let merged = match merge(&[("a".into(), r), ("b".into(), bad)]) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        let f = merged.fanout.unwrap_or_default();
        assert_eq!((f.followers, f.complete, f.missing_events), (6, 5, 4));
        assert!(!f.passed && f.drained_in_s.is_none());
    }

    #[test]
    fn reports_of_another_format_or_with_bad_histograms_are_refused() {
        let mut r = report(&[5], 0, 1.0);
        r.format = 99;
        let text = serde_json::to_string(&r).unwrap_or_default();
        assert!(matches!(
            Report::from_json(&text, "x.json"),
            Err(ReportError::Format(_, 99))
        ));
        let mut r = report(&[5], 0, 1.0);
        if let Some(op) = r.operations.get_mut("ingest") {
            op.histogram = "AAAA".into();
        }
        assert!(matches!(
            merge(&[("x".into(), r)]),
            Err(ReportError::Histogram(..))
        ));
        assert!(matches!(merge(&[]), Err(ReportError::Empty)));
        assert!(Report::from_json("{}", "x").is_err());
    }
}
