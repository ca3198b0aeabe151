//! Planning one request of a group: dedup, the conditional write, `storage.max_streams`,
//! `seq` assignment, and its record built into the group buffer. Nothing here touches the
//! disk; a group whose write fails is undone from what planning noted ([`Scratch::undo`]).

use crate::api::*;
use crate::apply::Applier;
use crate::index::memory::Placed;
use crate::log::record::{RecordBuilder, RecordType};
use crate::log::state::{LogWriter, WState};
use hashbrown::{HashMap, HashSet};

/// Per-group scratch state, reused across groups.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) buf: Vec<u8>,
    /// Prior writer states, in touch order, to undo the group if its write fails.
    pub(super) undo: Vec<(Box<str>, Option<WState>)>,
    /// Ids assigned in this group, not yet in the dedup tables: their seq and the append
    /// time of their request (which the window counts from, as for the tables: cluster
    /// records carry their own, and how requests fall into groups must not matter).
    pub(super) pending: HashMap<u128, (u64, i64)>,
    /// Ids of the request being planned.
    pub(super) keys: HashSet<u128>,
    /// Origin offsets planned in this group, not yet applied: per (topic, partition), the
    /// largest (see `cluster.rs`).
    pub(super) origins: HashMap<(OriginTopic, u32), u64>,
    /// The feature budget this group's requests reserved, released once it is applied.
    pub(super) reserved: u64,
}

impl Scratch {
    /// A request with `origin` was planned: later ones of the group must be above it.
    pub(super) fn note_origin(&mut self, origin: Option<Origin>) {
        if let Some(o) = origin {
            let at = self
                .origins
                .entry((o.topic, o.partition))
                .or_insert(o.offset);
            *at = (*at).max(o.offset);
        }
    }
}

/// One stream's run of a planned record; offsets are relative to the group buffer until the
/// write places them.
pub(super) struct PlannedRun {
    pub(super) run: usize,
    pub(super) shard: u32,
    pub(super) floor: u64,
    pub(super) placed: Placed,
    /// Group-buffer offsets of the run header and of its record's end.
    pub(super) head_rel: usize,
    pub(super) rec_end_rel: usize,
}

/// What planning one write request produced.
pub(super) struct WritePlan {
    pub(super) rec: Option<(usize, usize)>,
    pub(super) outcome: WriteOutcome,
    pub(super) runs: Vec<PlannedRun>,
    pub(super) ids: Vec<(u32, u128, u64)>,
}

/// A read the writer needs before it can plan a request failed: that request is refused
/// (507), and nothing was written.
fn unreadable(context: &str, e: std::io::Error) -> WriteError {
    WriteError::StorageFull(IoFailure::new(context, e))
}

impl LogWriter {
    /// A direct feature write's record; returns its range in the group buffer and whether
    /// the entity (or feature) exists before the group (the answer of a `none` delete).
    pub(super) fn plan_feature(
        &mut self,
        applier: &Applier,
        fw: &FeatureWrite,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<((usize, usize), bool), WriteError> {
        self.check_origin(fw.origin, scratch)?;
        // Its budget and "found" read the entity as the log has it.
        applier.settle();
        let features = &self.shared.features;
        let found = match &fw.op {
            FeatureOp::Put(set) => {
                match features.reserve_put(&fw.entity, set) {
                    Some(n) => scratch.reserved += n,
                    None if self.cfg.refuse_at_limits => {
                        return Err(WriteError::FeatureBudget {
                            max: self.cfg.max_feature_bytes,
                        });
                    }
                    None => {}
                }
                features.exists(&fw.entity, None)
            }
            FeatureOp::Delete(targets) => targets
                .iter()
                .any(|(e, name)| features.exists(e, name.as_deref())),
        };
        let buf = &mut scratch.buf;
        let start = buf.len();
        let ty = match fw.op {
            FeatureOp::Put(_) => RecordType::FeaturePut,
            FeatureOp::Delete(_) => RecordType::FeatureDelete,
        };
        let mut rb = RecordBuilder::begin_with(buf, ty, self.next_lsn, now, fw.origin);
        match &fw.op {
            FeatureOp::Put(set) => rb.feature_put(buf, &fw.entity, set),
            FeatureOp::Delete(targets) => {
                rb.feature_delete(buf, targets.iter().map(|(e, n)| (e.as_str(), n.as_deref())))
            }
        }
        let len = match rb.finish(buf) {
            Ok(len) => len,
            Err(e) => {
                buf.truncate(start);
                return Err(e.into());
            }
        };
        self.next_lsn += 1;
        scratch.note_origin(fw.origin);
        Ok(((start, start + len), found))
    }

    /// Dedup, conditional check, `storage.max_streams` and `seq` assignment for one request,
    /// and its record appended to the group buffer (none if every event is a duplicate).
    /// Reserve the feature budget for `batch`'s events (added to the group's); false past the
    /// budget. Past the bound that reads no entity, the exact check reads the entities, so it
    /// waits for the feature tables to apply every group handed over first.
    pub(super) fn reserve_features(
        &mut self,
        applier: &Applier,
        batch: &vx_proto::Batch,
        scratch: &mut Scratch,
    ) -> bool {
        let features = &self.shared.features;
        let reserved = match features.reserve_bound(batch) {
            Some(n) => Some(n),
            None => {
                applier.settle();
                self.shared.features.reserve_events(batch)
            }
        };
        match reserved {
            Some(n) => {
                scratch.reserved += n;
                true
            }
            None => false,
        }
    }

    /// A limit is reached: whether to refuse (single-node), or to apply anyway and say so
    /// (cluster mode, where Kafka acknowledged the record already; rate-limited warning).
    pub(super) fn over_limit(&mut self, key: &'static str) -> bool {
        if self.cfg.refuse_at_limits {
            return true;
        }
        let now = vx_sys::now_ms();
        if now - self.limit_warned_ms >= 60_000 {
            self.limit_warned_ms = now;
            tracing::warn!(
                limit = key,
                "past a storage limit: applying an acknowledged cluster record anyway"
            );
        }
        false
    }

    pub(super) fn plan_write(
        &mut self,
        applier: &Applier,
        req: &WriteRequest,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<WritePlan, WriteError> {
        self.check_origin(req.origin, scratch)?;
        let batch = &req.batch;
        let runs = batch.runs();
        let mut states: Vec<Option<WState>> = Vec::with_capacity(runs.len());
        for run in runs {
            states.push(
                self.state_of(batch.stream(run))
                    .map_err(|e| unreadable("reading the carry file", e))?,
            );
        }
        // Pass 1: which events are duplicates, changing nothing. An id whose event was
        // deleted with its stream (seq ≤ the stream's floor) is not a duplicate any more.
        scratch.keys.clear();
        let total_ids: usize = runs.iter().map(|r| r.ids.len()).sum();
        let mut dup = vec![false; total_ids];
        let mut fresh: Vec<u32> = Vec::with_capacity(runs.len());
        let mut dup_seq: Vec<Option<u64>> = vec![None; runs.len()];
        let mut dups = 0u64;
        let mut k = 0;
        for (ri, run) in runs.iter().enumerate() {
            let floor = states[ri].map_or(0, |s| s.floor);
            let mut f = run.count;
            for id in &run.ids {
                let window = i64::try_from(self.cfg.dedup_window.as_millis()).unwrap_or(i64::MAX);
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
                if let Some(seq) = seen {
                    dup[k] = true;
                    dup_seq[ri] = Some(seq);
                } else if !scratch.keys.insert(id.key) {
                    dup[k] = true;
                }
                if dup[k] {
                    f -= 1;
                    dups += 1;
                }
                k += 1;
            }
            fresh.push(f);
        }
        let total_fresh: u64 = fresh.iter().map(|&f| u64::from(f)).sum();
        if total_fresh == 0 {
            let last_seq = runs
                .iter()
                .enumerate()
                .map(|(ri, run)| {
                    let last = states[ri].map_or(0, |s| s.last);
                    (batch.stream(run).to_string(), dup_seq[ri].unwrap_or(last))
                })
                .collect();
            // A duplicate is a success: with an origin, a record of no runs carries it, so
            // that the partition's applied offset moves past it too.
            let rec = match req.origin {
                Some(o) => Some(self.origin_only(o, now, scratch)?),
                None => None,
            };
            return Ok(WritePlan {
                rec,
                outcome: WriteOutcome {
                    accepted: 0,
                    duplicates: dups,
                    last_seq,
                    durability: Durability::None,
                    stored: Vec::new(),
                    stages: Stages::default(),
                },
                runs: Vec::new(),
                ids: Vec::new(),
            });
        }
        if let Some(expected) = req.expected_last_seq {
            for (ri, run) in runs.iter().enumerate() {
                let last = states[ri].map_or(0, |s| s.last);
                if last != expected {
                    return Err(WriteError::Conflict {
                        stream: batch.stream(run).to_string(),
                        expected,
                        last_seq: last,
                    });
                }
            }
        }
        let becoming_live = runs
            .iter()
            .enumerate()
            .filter(|&(ri, _)| fresh[ri] > 0 && states[ri].is_none_or(|s| s.deleted))
            .count() as u64;
        if becoming_live > 0
            && self.live + self.carry_orphans + becoming_live > self.cfg.max_streams
            && self.over_limit("storage.max_streams")
        {
            return Err(WriteError::TooManyStreams {
                max: self.cfg.max_streams,
            });
        }
        if self.cfg.features_from_events
            && !self.reserve_features(applier, batch, scratch)
            && self.over_limit("storage.max_feature_bytes")
        {
            return Err(WriteError::FeatureBudget {
                max: self.cfg.max_feature_bytes,
            });
        }
        // Pass 2: assign seqs and copy the runs.
        let lsn = self.next_lsn;
        let buf = &mut scratch.buf;
        let rec_start = buf.len();
        let mut rb = RecordBuilder::begin_with(buf, RecordType::Events, lsn, now, req.origin);
        let mut planned_runs = Vec::with_capacity(runs.len());
        let mut ids = Vec::new();
        let mut last_seq = Vec::with_capacity(runs.len());
        // A record over the log's limit is refused only once it is built (start-up checks
        // make that unreachable); then nothing of the request may stay behind: not its bytes
        // in the group buffer, not its seqs, not its pending ids.
        let undo_len = scratch.undo.len();
        let counters = (self.live, self.carry_orphans);
        let build = || -> Result<usize, WriteError> {
            let mut k = 0;
            for (ri, run) in runs.iter().enumerate() {
                let name = batch.stream(run);
                let run_dups = &dup[k..k + run.ids.len()];
                k += run.ids.len();
                if fresh[ri] == 0 {
                    let last = states[ri].map_or(0, |s| s.last);
                    last_seq.push((name.to_string(), dup_seq[ri].unwrap_or(last)));
                    continue;
                }
                let prior = self.streams.get(name).copied();
                let carried = if prior.is_none() { states[ri] } else { None };
                let st = self.load(name, carried);
                scratch.undo.push((name.into(), prior));
                let base = st.last + 1;
                let head_rel = rb.begin_run(buf, name, base, fresh[ri]);
                let events_at = buf.len();
                let (mut min_ts, mut max_ts) = (run.min_ts, run.max_ts);
                if run_dups.iter().any(|&d| d) {
                    // Copy the run without its duplicates; the ts range is that of what is kept.
                    (min_ts, max_ts) = (i64::MAX, i64::MIN);
                    let mut pos = 0usize;
                    let mut dropped = 0u64;
                    for (id, &is_dup) in run.ids.iter().zip(run_dups) {
                        if !is_dup {
                            let seq = base + u64::from(id.idx) - dropped;
                            scratch.pending.insert(id.key, (seq, now));
                            ids.push((run.shard, id.key, seq));
                            continue;
                        }
                        let at = id.at as usize;
                        copy_kept(buf, &run.events[pos..at], &mut min_ts, &mut max_ts);
                        pos = at + id.len as usize;
                        dropped += 1;
                    }
                    copy_kept(buf, &run.events[pos..], &mut min_ts, &mut max_ts);
                } else {
                    buf.extend_from_slice(&run.events);
                    for id in &run.ids {
                        let seq = base + u64::from(id.idx);
                        scratch.pending.insert(id.key, (seq, now));
                        ids.push((run.shard, id.key, seq));
                    }
                }
                let bytes = (buf.len() - events_at) as u64;
                rb.end_run(buf)?;
                let last = base + u64::from(fresh[ri]) - 1;
                self.set_state(
                    name,
                    WState {
                        last,
                        floor: st.floor,
                        deleted: false,
                    },
                );
                last_seq.push((name.to_string(), last));
                planned_runs.push(PlannedRun {
                    run: ri,
                    shard: run.shard,
                    floor: st.floor,
                    placed: Placed {
                        first_seq: base,
                        count: fresh[ri],
                        off: 0,
                        len: u32::try_from(buf.len() - head_rel).unwrap_or(u32::MAX),
                        rec_end: 0,
                        min_ts,
                        max_ts,
                        bytes,
                    },
                    head_rel,
                    rec_end_rel: 0,
                });
            }
            Ok(rb.finish(buf)?)
        };
        let len = match build() {
            Ok(len) => len,
            Err(e) => {
                scratch.buf.truncate(rec_start);
                for (stream, prior) in scratch.undo.drain(undo_len..).rev() {
                    match prior {
                        Some(st) => self.streams.insert(stream, st),
                        None => self.streams.remove(&stream),
                    };
                }
                (self.live, self.carry_orphans) = counters;
                for (_, key, _) in &ids {
                    scratch.pending.remove(key);
                }
                return Err(e);
            }
        };
        for r in &mut planned_runs {
            r.rec_end_rel = rec_start + len;
        }
        self.next_lsn += 1;
        scratch.note_origin(req.origin);
        let stored = planned_runs
            .iter()
            .filter_map(|r| {
                let run = runs.get(r.run)?;
                Some(StoredRun {
                    stream: batch.stream(run).to_string(),
                    first_seq: r.placed.first_seq,
                    count: u64::from(r.placed.count),
                })
            })
            .collect();
        Ok(WritePlan {
            rec: Some((rec_start, rec_start + len)),
            outcome: WriteOutcome {
                accepted: total_fresh,
                duplicates: dups,
                last_seq,
                durability: Durability::None,
                stored,
                stages: Stages::default(),
            },
            runs: planned_runs,
            ids,
        })
    }

    /// A tombstone record for `stream`; returns its shard and last seq.
    pub(super) fn plan_delete(
        &mut self,
        stream: &str,
        origin: Option<Origin>,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(u32, u64), WriteError> {
        self.check_origin(origin, scratch)?;
        let not_found = || WriteError::NotFound {
            stream: stream.to_string(),
        };
        let st = self
            .state_of(stream)
            .map_err(|e| unreadable("reading the carry file", e))?
            .ok_or_else(not_found)?;
        if st.deleted {
            return Err(not_found());
        }
        let prior = self.streams.get(stream).copied();
        self.load(stream, if prior.is_none() { Some(st) } else { None });
        scratch.undo.push((stream.into(), prior));
        let buf = &mut scratch.buf;
        let mut rb =
            RecordBuilder::begin_with(buf, RecordType::Tombstone, self.next_lsn, now, origin);
        rb.tombstone(buf, stream, st.last);
        rb.finish(buf)?;
        self.next_lsn += 1;
        scratch.note_origin(origin);
        self.set_state(
            stream,
            WState {
                last: st.last,
                floor: st.last,
                deleted: true,
            },
        );
        Ok((vx_proto::shard::shard_of(stream, self.shards), st.last))
    }
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
