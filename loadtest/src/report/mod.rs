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

mod merge;
pub use self::merge::{merge, merge_warnings};

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
    Histogram(String, HistogramError),
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

/// Why a report's histogram does not decode.
#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    #[error("empty")]
    Empty,
    #[error("{0}")]
    Base64(#[from] base64::DecodeError),
    // hdrhistogram's error Display is terse; its Debug names the cause.
    #[error("{0:?}")]
    Decode(hdrhistogram::serialization::DeserializeError),
    #[error("{0:?}")]
    Add(hdrhistogram::errors::AdditionError),
}

pub fn decode_histogram(text: &str) -> Result<Histogram<u64>, HistogramError> {
    if text.is_empty() {
        return Err(HistogramError::Empty);
    }
    let bytes = STANDARD.decode(text)?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(HistogramError::Decode)
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
        .map_err(|e| ReportError::Histogram(origin.into(), HistogramError::Add(e)))?;
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

#[cfg(test)]
mod tests;
