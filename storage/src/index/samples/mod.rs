//! Samples: where a walk to one event inside a span can start, so that a read of one event
//! (`from=N&limit=1`) reads a few KiB around it instead of the span from its start (a span
//! is up to [`crate::index::memory::SPAN_MAX`], one run can be thousands of events).
//!
//! A span is walked from its start: the stream's run header, its events, then record by
//! record (see [`crate::read::cursor`]). A [`Sample`] is another place a walk can start:
//!
//! - **inside a run** (`left > 0`): the start of event `seq`, with `left` events of the run to
//!   go from it and `after`, the end of the run's record. The events of a run are sampled on a
//!   grid from the run's start: the run's start is the first *mark*, and the first event whose
//!   index since the last mark is ≥ [`SAMPLE_EVENTS`] or whose offset since the last mark is ≥
//!   [`SAMPLE_BYTES`] becomes the next one ([`run_marks`]). Only a run of more than 32 events
//!   or 4 KiB of events can have marks: small requests pay nothing. The writer computes them
//!   from the run's bytes as it copies them, recovery from the records it reads back, with
//!   this one function.
//! - **at a run header** (`left == 0`): a run appended to an existing span whose header lies
//!   ≥ [`SAMPLE_EVENTS`] events or ≥ [`SAMPLE_BYTES`] bytes (other streams' bytes included)
//!   after the span's last sample point (its last sample, or its start) ([`far_from`]).
//!
//! So from the best sample of a span (the greatest seq ≤ the target; the span's start when
//! none) to any event of it a walk covers at most 2 × 32 events and about 2 × 4 KiB plus one
//! event and a run header: one gap of each kind. Samples are only used to *start* a walk; a
//! walk from a span's start (a whole-stream replay, or a page that starts where the last
//! ended) reads as it did without them.
//!
//! Where they live: the active segment's in memory, per stream, beside its spans
//! ([`crate::index::memory::StreamIdx::samples`], counted in the active index budget);
//! a sealed segment's in its index file (version 3, [`crate::index::idxfile`]).

use crate::index::idxfile::{Sample, Span};

/// A run's events are sampled at least every this many events…
pub const SAMPLE_EVENTS: u32 = 32;
/// …and at least every this many bytes (the event that passes it).
pub const SAMPLE_BYTES: u32 = 4096;
/// Bytes one sample costs in memory (what the active index budget counts).
pub const SAMPLE_MEM: usize = std::mem::size_of::<Sample>();

/// A mark inside one run, as the writer or recovery computes it from the run's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunMark {
    /// The event's index in the run (≥ 1: the run's start is its header).
    pub idx: u32,
    /// The event's offset from the run header's start.
    pub off: u32,
}

/// Whether a run of `count` events in `events_len` bytes can have marks at all.
pub fn has_marks(count: u32, events_len: usize) -> bool {
    count > SAMPLE_EVENTS || events_len > SAMPLE_BYTES as usize
}

/// Append to `out` the marks of a run whose `count` events are `events`, which start
/// `head_len` bytes after the run header (see the module docs). Nothing for a run that
/// cannot have any; stops at an event that does not parse (the caller checks the events).
pub fn run_marks(events: &[u8], count: u32, head_len: usize, out: &mut Vec<RunMark>) {
    if !has_marks(count, events.len()) {
        return;
    }
    let (mut mark_i, mut mark_at) = (0u32, 0usize);
    let mut pos = 0usize;
    for i in 0..count {
        if i - mark_i >= SAMPLE_EVENTS || pos - mark_at >= SAMPLE_BYTES as usize {
            let Ok(off) = u32::try_from(head_len + pos) else {
                return;
            };
            out.push(RunMark { idx: i, off });
            (mark_i, mark_at) = (i, pos);
        }
        match events.get(pos..).map(vx_proto::packed::event_len) {
            Some(Ok(n)) if n > 0 && pos + n <= events.len() => pos += n,
            _ => return,
        }
    }
}

/// Whether a run header at `off` whose first event is `seq` is far enough from the span's
/// last sample point `(seq, off)` to be a sample itself.
pub fn far_from(point: (u64, u32), seq: u64, off: u32) -> bool {
    seq.saturating_sub(point.0) >= u64::from(SAMPLE_EVENTS)
        || off.saturating_sub(point.1) >= SAMPLE_BYTES
}

/// A span's last sample point: its last sample (the last of `samples`, which are the span's
/// own), or its start.
pub fn last_point(span: &Span, samples: &[Sample]) -> (u64, u32) {
    samples
        .last()
        .map_or((span.first_seq, span.off), |s| (s.seq, s.off))
}

/// The best of a span's samples (`samples`, in seq order) to walk to `seq` from: the greatest
/// seq ≤ `seq`; `None` to start at the span's start.
pub fn best(samples: &[Sample], seq: u64) -> Option<Sample> {
    let i = samples.partition_point(|s| s.seq <= seq);
    i.checked_sub(1).and_then(|i| samples.get(i).copied())
}

#[cfg(test)]
mod tests;
