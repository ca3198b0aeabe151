//! Planning one event write, as named steps ([`LogWriter::plan_write`]): the streams' states,
//! which events are duplicates ([`Dups`]), a request of duplicates only, the conditional write,
//! `storage.max_streams`, the feature budget, and the record: `seq`s assigned and the runs
//! copied into the group buffer ([`LogWriter::build_record`]), undone if the record is
//! refused.

use super::plan::{PlannedRun, Scratch, WritePlan, unreadable};
use crate::api::*;
use crate::apply::Applier;
use crate::index::memory::Placed;
use crate::index::samples;
use crate::log::record::{RecordBuilder, RecordType};
use crate::log::state::{LogWriter, WState};
use hashbrown::HashMap;
use vx_proto::Batch;
use vx_proto::packed::Run;

/// Which of a request's events are duplicates (by id: of the group so far, of the dedup
/// tables, or of the request itself), and what is left per run.
struct Dups {
    /// Per id, in run order: whether its event is a duplicate.
    dup: Vec<bool>,
    /// Per run: events that are not duplicates.
    fresh: Vec<u32>,
    /// Per run: the stored seq of a duplicate in it (its answer when all are).
    dup_seq: Vec<Option<u64>>,
    /// Duplicates in the request.
    count: u64,
}

impl Dups {
    fn fresh_total(&self) -> u64 {
        self.fresh.iter().map(|&f| u64::from(f)).sum()
    }
}

/// A request being planned: it, its streams' states, its duplicates, the group's clock.
struct Planning<'a> {
    req: &'a WriteRequest,
    states: &'a [Option<WState>],
    dups: &'a Dups,
    now: i64,
}

/// The record being built for a request: what the group buffer, the undo log and the
/// pending ids held before it, so that a refused record leaves nothing behind.
struct Mark {
    rec_start: usize,
    undo_len: usize,
    counters: (u64, u64),
}

impl LogWriter {
    /// Dedup, the conditional check, `storage.max_streams`, the feature budget and `seq`
    /// assignment for one request, and its record appended to the group buffer (none if every
    /// event is a duplicate). Dedup comes first, so that a retry of a write that succeeded is
    /// a duplicate (200), whatever else it asks.
    pub(super) fn plan_write(
        &mut self,
        applier: &Applier,
        req: &WriteRequest,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<WritePlan, WriteError> {
        self.check_origin(req.origin, scratch)?;
        let batch = &req.batch;
        let states = self.states_of(batch)?;
        let dups = self.find_duplicates(batch, &states, now, scratch);
        let p = Planning {
            req,
            states: &states,
            dups: &dups,
            now,
        };
        if dups.fresh_total() == 0 {
            return self.duplicates_only(&p, scratch);
        }
        check_expected(req, &states)?;
        self.check_new_streams(batch, &states, &dups)?;
        if self.cfg.features_from_events
            && !self.reserve_features(applier, batch, scratch)
            && self.over_limit("storage.max_feature_bytes")
        {
            return Err(WriteError::FeatureBudget {
                max: self.cfg.max_feature_bytes,
            });
        }
        self.build_record(&p, scratch)
    }

    /// Each run's stream state: in memory, or in the carry file.
    fn states_of(&self, batch: &Batch) -> Result<Vec<Option<WState>>, WriteError> {
        batch
            .runs()
            .iter()
            .map(|run| {
                self.state_of(batch.stream(run))
                    .map_err(|e| unreadable("reading the carry file", e))
            })
            .collect()
    }

    /// Which events are duplicates, changing nothing. An id whose event was deleted with its
    /// stream (seq ≤ the stream's floor) is not a duplicate any more.
    fn find_duplicates(
        &self,
        batch: &Batch,
        states: &[Option<WState>],
        now: i64,
        scratch: &mut Scratch,
    ) -> Dups {
        let runs = batch.runs();
        scratch.keys.clear();
        let window = i64::try_from(self.cfg.dedup_window.as_millis()).unwrap_or(i64::MAX);
        let mut d = Dups {
            dup: Vec::with_capacity(runs.iter().map(|r| r.ids.len()).sum()),
            fresh: Vec::with_capacity(runs.len()),
            dup_seq: vec![None; runs.len()],
            count: 0,
        };
        for (ri, run) in runs.iter().enumerate() {
            let floor = states.get(ri).copied().flatten().map_or(0, |s| s.floor);
            let mut fresh = run.count;
            for id in &run.ids {
                let seen = scratch
                    .pending
                    .get(&id.key)
                    .filter(|&&(_, at)| at >= now.saturating_sub(window))
                    .map(|&(seq, _)| seq)
                    .or_else(|| {
                        self.dedup
                            .get(run.shard as usize)
                            .and_then(|t| t.get(id.key, now))
                    })
                    .filter(|&seq| seq > floor);
                let is_dup = match seen {
                    Some(seq) => {
                        d.dup_seq[ri] = Some(seq);
                        true
                    }
                    None => !scratch.keys.insert(id.key),
                };
                if is_dup {
                    fresh -= 1;
                    d.count += 1;
                }
                d.dup.push(is_dup);
            }
            d.fresh.push(fresh);
        }
        d
    }

    /// A request whose every event is a duplicate: a success with nothing new. With an
    /// origin, a record of no runs carries it, so that the partition's applied offset moves
    /// past it too.
    fn duplicates_only(
        &mut self,
        p: &Planning<'_>,
        scratch: &mut Scratch,
    ) -> Result<WritePlan, WriteError> {
        let (req, states, dups, now) = (p.req, p.states, p.dups, p.now);
        let batch = &req.batch;
        let last_seq = batch
            .runs()
            .iter()
            .enumerate()
            .map(|(ri, run)| {
                let last = states.get(ri).copied().flatten().map_or(0, |s| s.last);
                let seq = dups.dup_seq.get(ri).copied().flatten().unwrap_or(last);
                (batch.stream(run).to_string(), seq)
            })
            .collect();
        let rec = match req.origin {
            Some(o) => Some(self.origin_only(o, now, scratch)?),
            None => None,
        };
        Ok(WritePlan {
            rec,
            outcome: WriteOutcome {
                accepted: 0,
                duplicates: dups.count,
                last_seq,
                durability: Durability::None,
                stored: Vec::new(),
                stages: Stages::default(),
            },
            runs: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// `storage.max_streams`: streams that would become live (new, or deleted before) on top
    /// of the live and orphaned ones.
    fn check_new_streams(
        &mut self,
        batch: &Batch,
        states: &[Option<WState>],
        dups: &Dups,
    ) -> Result<(), WriteError> {
        let becoming_live = (0..batch.runs().len())
            .filter(|&ri| {
                dups.fresh.get(ri).is_some_and(|&f| f > 0)
                    && states.get(ri).copied().flatten().is_none_or(|s| s.deleted)
            })
            .count() as u64;
        if becoming_live > 0
            && self.streams.live + self.streams.orphans + becoming_live > self.cfg.max_streams
            && self.over_limit("storage.max_streams")
        {
            return Err(WriteError::TooManyStreams {
                max: self.cfg.max_streams,
            });
        }
        Ok(())
    }

    /// The record of a request with new events: `seq`s assigned, the runs copied into the
    /// group buffer (without their duplicates), the ids noted. A record over the log's limit
    /// is refused only once it is built (start-up checks make that unreachable); then nothing
    /// of the request stays behind: not its bytes, not its seqs, not its pending ids.
    fn build_record(
        &mut self,
        p: &Planning<'_>,
        scratch: &mut Scratch,
    ) -> Result<WritePlan, WriteError> {
        let (req, dups) = (p.req, p.dups);
        let mark = Mark {
            rec_start: scratch.buf.len(),
            undo_len: scratch.undo.len(),
            counters: self.streams.counters(),
        };
        let mut plan = WritePlan {
            rec: None,
            outcome: WriteOutcome {
                accepted: dups.fresh_total(),
                duplicates: dups.count,
                last_seq: Vec::with_capacity(req.batch.runs().len()),
                durability: Durability::None,
                stored: Vec::new(),
                stages: Stages::default(),
            },
            runs: Vec::with_capacity(req.batch.runs().len()),
            ids: Vec::new(),
        };
        match self.copy_runs(p, scratch, &mut plan) {
            Ok(len) => {
                for r in &mut plan.runs {
                    r.rec_end_rel = mark.rec_start + len;
                }
                plan.rec = Some((mark.rec_start, mark.rec_start + len));
                self.next_lsn += 1;
                scratch.note_origin(req.origin);
                plan.outcome.stored = stored_runs(&req.batch, &plan.runs);
                Ok(plan)
            }
            Err(e) => {
                self.undo_record(mark, &plan.ids, scratch);
                Err(e)
            }
        }
    }

    /// Forget a record refused after it was begun (see [`LogWriter::build_record`]).
    fn undo_record(&mut self, mark: Mark, ids: &[(u32, u128, u64)], scratch: &mut Scratch) {
        scratch.buf.truncate(mark.rec_start);
        for (stream, prior) in scratch.undo.drain(mark.undo_len..).rev() {
            self.streams.restore(stream, prior);
        }
        self.streams.set_counters(mark.counters);
        for (_, key, _) in ids {
            scratch.pending.remove(key);
        }
    }

    /// Begin the record, and each run with new events: its seqs, its events copied (less its
    /// duplicates), its stream's new state. Returns the record's length.
    fn copy_runs(
        &mut self,
        p: &Planning<'_>,
        scratch: &mut Scratch,
        plan: &mut WritePlan,
    ) -> Result<usize, WriteError> {
        let (req, states, dups, now) = (p.req, p.states, p.dups, p.now);
        let batch = &req.batch;
        let buf = &mut scratch.buf;
        let mut rb =
            RecordBuilder::begin_with(buf, RecordType::Events, self.next_lsn, now, req.origin);
        let mut k = 0;
        for (ri, run) in batch.runs().iter().enumerate() {
            let name = batch.stream(run);
            let run_dups = dups.dup.get(k..k + run.ids.len()).unwrap_or(&[]);
            k += run.ids.len();
            let fresh = dups.fresh.get(ri).copied().unwrap_or(0);
            let state = states.get(ri).copied().flatten();
            if fresh == 0 {
                let last = state.map_or(0, |s| s.last);
                let seq = dups.dup_seq.get(ri).copied().flatten().unwrap_or(last);
                plan.outcome.last_seq.push((name.to_string(), seq));
                continue;
            }
            let prior = self.streams.map.get(name).copied();
            let st = self
                .streams
                .load(name, if prior.is_none() { state } else { None });
            scratch.undo.push((name.into(), prior));
            let base = st.last + 1;
            let head_rel = rb.begin_run(buf, name, base, fresh);
            let events_at = buf.len();
            let pending = &mut scratch.pending;
            let (min_ts, max_ts) = copy_run(buf, run, run_dups, base, now, pending, &mut plan.ids);
            let bytes = (buf.len() - events_at) as u64;
            // Marks from the bytes as written (without the duplicates); only a large run
            // has any, and only then is its events' headers walked.
            let mut marks = Vec::new();
            if let Some(events) = buf.get(events_at..) {
                samples::run_marks(events, fresh, events_at - head_rel, &mut marks);
            }
            rb.end_run(buf)?;
            let last = base + u64::from(fresh) - 1;
            self.streams.set(
                name,
                WState {
                    last,
                    floor: st.floor,
                    deleted: false,
                },
            );
            plan.outcome.last_seq.push((name.to_string(), last));
            plan.runs.push(PlannedRun {
                run: ri,
                shard: run.shard,
                floor: st.floor,
                placed: Placed {
                    first_seq: base,
                    count: fresh,
                    off: 0,
                    len: u32::try_from(buf.len() - head_rel).unwrap_or(u32::MAX),
                    rec_end: 0,
                    min_ts,
                    max_ts,
                    bytes,
                },
                head_rel,
                rec_end_rel: 0,
                marks,
            });
        }
        Ok(rb.finish(buf)?)
    }
}

/// `X-Vx-Expected-Last-Seq`: every run's stream must have that last seq, else 409 with the
/// actual one.
fn check_expected(req: &WriteRequest, states: &[Option<WState>]) -> Result<(), WriteError> {
    let Some(expected) = req.expected_last_seq else {
        return Ok(());
    };
    for (ri, run) in req.batch.runs().iter().enumerate() {
        let last = states.get(ri).copied().flatten().map_or(0, |s| s.last);
        if last != expected {
            return Err(WriteError::Conflict {
                stream: req.batch.stream(run).to_string(),
                expected,
                last_seq: last,
            });
        }
    }
    Ok(())
}

/// The newly stored events of each planned run, for the answer.
fn stored_runs(batch: &Batch, runs: &[PlannedRun]) -> Vec<StoredRun> {
    runs.iter()
        .filter_map(|r| {
            let run = batch.runs().get(r.run)?;
            Some(StoredRun {
                stream: batch.stream(run).to_string(),
                first_seq: r.placed.first_seq,
                count: u64::from(r.placed.count),
            })
        })
        .collect()
}

/// Copy a run's events into the record, without its duplicates, noting each new id's seq
/// (pending in the group, and for the dedup tables once durable); returns the `ts` range of
/// what was copied.
fn copy_run(
    buf: &mut Vec<u8>,
    run: &Run,
    run_dups: &[bool],
    base: u64,
    now: i64,
    pending: &mut HashMap<u128, (u64, i64)>,
    ids: &mut Vec<(u32, u128, u64)>,
) -> (i64, i64) {
    let mut note = |key: u128, seq: u64| {
        pending.insert(key, (seq, now));
        ids.push((run.shard, key, seq));
    };
    if !run_dups.iter().any(|&d| d) {
        buf.extend_from_slice(&run.events);
        for id in &run.ids {
            note(id.key, base + u64::from(id.idx));
        }
        return (run.min_ts, run.max_ts);
    }
    // Without its duplicates: the ts range is that of what is kept.
    let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
    let mut pos = 0usize;
    let mut dropped = 0u64;
    for (id, &is_dup) in run.ids.iter().zip(run_dups) {
        if !is_dup {
            note(id.key, base + u64::from(id.idx) - dropped);
            continue;
        }
        let at = id.at as usize;
        copy_kept(
            buf,
            run.events.get(pos..at).unwrap_or(&[]),
            &mut min_ts,
            &mut max_ts,
        );
        pos = at + id.len as usize;
        dropped += 1;
    }
    copy_kept(
        buf,
        run.events.get(pos..).unwrap_or(&[]),
        &mut min_ts,
        &mut max_ts,
    );
    (min_ts, max_ts)
}

/// Append kept events (whole events, back to back) and widen the ts range by theirs.
fn copy_kept(buf: &mut Vec<u8>, events: &[u8], min_ts: &mut i64, max_ts: &mut i64) {
    let mut pos = 0;
    while let Some(rest) = events.get(pos..) {
        // The event's ts, after its 10-byte header prefix (the event layout).
        let Some(ts) = vx_proto::le::Reader::at(rest, 10).i64() else {
            break;
        };
        *min_ts = (*min_ts).min(ts);
        *max_ts = (*max_ts).max(ts);
        match vx_proto::packed::event_len(rest) {
            Ok(n) if n > 0 => pos += n,
            _ => break,
        }
    }
    buf.extend_from_slice(events);
}
