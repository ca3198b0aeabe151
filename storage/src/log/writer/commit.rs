//! Committing one group: plan every request, append the group's records with one write,
//! sync if the mode or a request asks for it, apply what became durable, answer.

use super::plan::{PlannedRun, Scratch};
use super::{DeleteReply, FeatureReply, Msg, Reply};
use crate::api::*;
use crate::log::state::LogWriter;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vx_proto::Batch;
use vx_sys::{EXPORT_SPANS, now_ms, span_int};

/// Who is waiting for a planned request, and with what.
pub(super) enum Answer {
    Write(Option<Reply>, WriteOutcome),
    Delete(Option<DeleteReply>, DeleteOutcome),
    Feature(Option<FeatureReply>, FeatureOutcome),
}

/// A request planned within a group.
struct Planned {
    answer: Answer,
    guard: Option<Box<dyn Send>>,
    want: Durability,
    batch: Option<Batch>,
    runs: Vec<PlannedRun>,
    tombstone: Option<(u32, String, u64)>,
    /// The request's record in the group buffer (start, end), to apply to the features.
    rec: Option<(usize, usize)>,
    /// Dedup entries to commit once the record is visible: (shard, key, seq).
    ids: Vec<(u32, u128, u64)>,
    /// The caller's span, for writes (disabled otherwise).
    span: tracing::Span,
}

impl Planned {
    fn set_durability(&mut self, d: Durability) {
        match &mut self.answer {
            Answer::Write(_, o) => o.durability = d,
            Answer::Delete(_, o) => o.durability = d,
            Answer::Feature(_, o) => o.durability = d,
        }
    }

    fn owed(&self) -> bool {
        match &self.answer {
            Answer::Write(r, _) => r.is_some(),
            Answer::Delete(r, _) => r.is_some(),
            Answer::Feature(r, _) => r.is_some(),
        }
    }

    /// Send the answer if it is still owed. A refused request releases its reservation at
    /// once; an accepted one keeps it until it is applied.
    fn answer(&mut self, res: Result<(), WriteError>) {
        if res.is_err() {
            self.guard = None;
        }
        match &mut self.answer {
            Answer::Write(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
            Answer::Delete(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
            Answer::Feature(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
        }
    }
}

impl LogWriter {
    pub(super) fn commit_group(
        &mut self,
        group: &mut Vec<Msg>,
        scratch: &mut Scratch,
        unsynced: &mut bool,
        last_sync: &mut Instant,
    ) {
        let mode = self.cfg.fsync;
        let visible_at = mode.durability();
        let now = now_ms();
        scratch.buf.clear();
        scratch.undo.clear();
        scratch.pending.clear();
        let counters = (self.live, self.carry_orphans);
        let first_lsn = self.next_lsn;
        // One span per group, not per request: a group commit serves many requests, so it
        // is linked to each request's span (follows-from) rather than a child of one.
        let span = tracing::info_span!(
            target: EXPORT_SPANS,
            "commit",
            requests = span_int(group.len()),
            records = tracing::field::Empty,
            events = tracing::field::Empty,
            bytes = tracing::field::Empty,
            fsync = tracing::field::Empty,
            fsync_us = tracing::field::Empty,
        );
        let _entered = span.enter();
        let mut planned: Vec<Planned> = Vec::with_capacity(group.len());
        for msg in group.drain(..) {
            let p = match msg {
                Msg::Write(req, reply, caller) => {
                    span.follows_from(&caller);
                    if let Some(err) = self.poisoned() {
                        let _ = reply.send(Err(err));
                        continue;
                    }
                    let want = req.durability.unwrap_or(visible_at);
                    match self.plan_write(&req, now, scratch) {
                        Ok(plan) => Planned {
                            answer: Answer::Write(Some(reply), plan.outcome),
                            guard: req.guard,
                            want,
                            batch: Some(req.batch),
                            runs: plan.runs,
                            tombstone: None,
                            rec: plan.rec,
                            ids: plan.ids,
                            span: caller,
                        },
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            continue;
                        }
                    }
                }
                Msg::Delete {
                    stream,
                    durability,
                    reply,
                } => {
                    if let Some(err) = self.poisoned() {
                        let _ = reply.send(Err(err));
                        continue;
                    }
                    let want = durability.unwrap_or(visible_at);
                    match self.plan_delete(&stream, now, scratch) {
                        Ok((shard, last_seq)) => Planned {
                            answer: Answer::Delete(
                                Some(reply),
                                DeleteOutcome {
                                    last_seq,
                                    durability: Durability::None,
                                },
                            ),
                            guard: None,
                            want,
                            batch: None,
                            runs: Vec::new(),
                            tombstone: Some((shard, stream, last_seq)),
                            rec: None,
                            ids: Vec::new(),
                            span: tracing::Span::none(),
                        },
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            continue;
                        }
                    }
                }
                Msg::Feature(fw, reply) => {
                    if let Some(err) = self.poisoned() {
                        let _ = reply.send(Err(err));
                        continue;
                    }
                    let want = fw.durability.unwrap_or(visible_at);
                    match self.plan_feature(&fw, now, scratch) {
                        Ok((rec, found)) => Planned {
                            answer: Answer::Feature(
                                Some(reply),
                                FeatureOutcome {
                                    set: 0,
                                    deleted: 0,
                                    found,
                                    durability: Durability::None,
                                },
                            ),
                            guard: fw.guard,
                            want,
                            batch: None,
                            runs: Vec::new(),
                            tombstone: None,
                            rec: Some(rec),
                            ids: Vec::new(),
                            span: tracing::Span::none(),
                        },
                        Err(e) => {
                            let _ = reply.send(Err(e));
                            continue;
                        }
                    }
                }
                Msg::Shutdown => continue,
            };
            let mut p = p;
            if p.want == Durability::None {
                p.set_durability(Durability::None);
                p.answer(Ok(()));
            }
            planned.push(p);
        }
        let records = self.next_lsn - first_lsn;
        let events: u64 = planned
            .iter()
            .map(|p| match &p.answer {
                Answer::Write(_, o) => o.accepted,
                Answer::Delete(..) | Answer::Feature(..) => 0,
            })
            .sum();
        let buf = &scratch.buf;
        // A request whose events were all duplicates wrote nothing, but `fsync` must still
        // mean an fsync covers the originals: under `interval` they may be unsynced.
        let wants_fsync = planned
            .iter()
            .any(|p| p.want == Durability::Fsync && p.owed());
        let need_sync = (!buf.is_empty() && mode == FsyncMode::Always)
            || (wants_fsync && (!buf.is_empty() || *unsynced));
        let at = self.active_len;
        // Index offsets within a segment are 32-bit: a segment that cannot be rolled (its
        // seal keeps failing) stops taking writes before it outgrows them.
        if at.saturating_add(buf.len() as u64) > u64::from(u32::MAX) {
            let full = IoFailure::new(
                format!("log segment {}", self.active_first),
                std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    "it cannot be rolled and has reached the 4GiB a segment can index",
                ),
            );
            tracing::error!(error = %full, "refusing a group");
            self.abort_group(first_lsn, counters, scratch);
            for p in &mut planned {
                p.answer(Err(WriteError::StorageFull(full.clone())));
            }
            return;
        }
        if !buf.is_empty() {
            if let Err(e) = self.active.write_all_at(buf, at) {
                let failure =
                    IoFailure::new(format!("write to log segment {}", self.active_first), e);
                tracing::error!(error = %failure, "a group's write failed");
                // Cut off whatever part of the group reached the file; if even that fails,
                // the file's tail is unknown and nothing more may be appended. A failure
                // other than space (EIO, …) leaves the file's state unknown too.
                if let Err(t) = self.active.set_len(at) {
                    self.shared.poison.set(IoFailure::new(
                        format!("{failure}; truncating the partial write"),
                        t,
                    ));
                } else if !failure.is_out_of_space() {
                    self.shared.poison.set(failure.clone());
                }
                self.abort_group(first_lsn, counters, scratch);
                let err = self.poisoned().unwrap_or(WriteError::StorageFull(failure));
                for p in &mut planned {
                    p.answer(Err(err.clone()));
                }
                return;
            }
            self.active_len += buf.len() as u64;
            *unsynced = true;
            if let Some(o) = &self.cfg.observer {
                o.appended(records, events, buf.len() as u64);
            }
            // Requests that asked for `write` below the visibility level (mode `always`) are
            // answered now; the rest wait until they are applied, so an acknowledged write is
            // always visible to the reader who acknowledged it (read-your-writes).
            for p in &mut planned {
                if p.want == Durability::Write && p.want < visible_at {
                    p.set_durability(Durability::Write);
                    p.answer(Ok(()));
                }
            }
        }
        let synced = if need_sync {
            self.sync(unsynced, last_sync)
        } else {
            Ok(Duration::ZERO)
        };
        let fsync_took = match synced {
            Ok(took) => took,
            Err(failure) => {
                // Never pretend: the unsynced group is cut off and refused.
                if !buf.is_empty() {
                    let _ = self.active.set_len(at);
                    self.active_len = at;
                }
                self.abort_group(first_lsn, counters, scratch);
                let err = WriteError::Poisoned(failure);
                for p in &mut planned {
                    p.answer(Err(err.clone()));
                }
                return;
            }
        };
        let fsync_us = u64::try_from(fsync_took.as_micros()).unwrap_or(u64::MAX);
        span.record("records", span_int(records))
            .record("events", span_int(events))
            .record("bytes", span_int(buf.len()))
            .record("fsync", need_sync)
            .record("fsync_us", span_int(fsync_us));
        // Visible: place runs at their file offsets and publish them.
        if !buf.is_empty() {
            self.active_append = self.active_append.merge(crate::index::idxfile::Agg {
                min_ts: now,
                max_ts: now,
            });
            self.shared.segments.update(self.active_first, |s| {
                s.log_len = self.active_len;
                s.min_append_ms = s.min_append_ms.min(now);
                s.max_append_ms = s.max_append_ms.max(now);
            });
        }
        let n_planned = planned.len();
        for p in &mut planned {
            if let Some(batch) = &p.batch {
                for r in &p.runs {
                    let Some(run) = batch.runs().get(r.run) else {
                        continue;
                    };
                    let mut placed = r.placed;
                    let off = at + r.head_rel as u64;
                    let rec_end = (r.rec_end_rel - r.head_rel) as u64;
                    // Segments stay below 4 GiB (storage.segment_bytes is checked at start-up).
                    placed.off = u32::try_from(off).unwrap_or(u32::MAX);
                    placed.rec_end = u32::try_from(rec_end).unwrap_or(u32::MAX);
                    self.apply_run(r.shard, batch.stream(run), r.floor, placed);
                }
            }
            if let Some((shard, stream, last_seq)) = &p.tombstone {
                self.apply_tombstone(*shard, stream, *last_seq);
            }
            if let Some((start, end)) = p.rec
                && let Some(rec) = buf.get(start..end)
            {
                self.apply_features(rec, &mut p.answer);
            }
            self.active_ids += p.ids.len() as u64;
            for &(shard, key, seq) in &p.ids {
                if let Some(t) = self.dedup.get_mut(shard as usize) {
                    t.insert(key, seq, now, now);
                }
            }
            // Release the admission reservation once the request is applied and before it
            // is answered, so a producer never finds its own finished request still queued.
            p.guard = None;
            p.batch = None;
            p.span
                .record("group", span_int(n_planned))
                .record("fsync_us", span_int(fsync_us));
            if p.owed() {
                let reached = if need_sync {
                    Durability::Fsync
                } else if p.want == Durability::Fsync {
                    // Only a duplicate-only request in a group that needed no sync gets here:
                    // nothing was unsynced, so its originals are covered by an earlier fsync.
                    Durability::Fsync
                } else {
                    Durability::Write
                };
                p.set_durability(reached);
                p.answer(Ok(()));
            }
        }
        let features = &self.shared.features;
        features.end_group();
        features
            .applied
            .store(self.next_lsn.saturating_sub(1), Ordering::Release);
        self.publish_horizons();
    }
    /// Apply a written record to the feature tables (the same function recovery replays it
    /// through), and fill in a direct write's outcome.
    fn apply_features(&self, rec: &[u8], answer: &mut Answer) {
        let applied = crate::log::record::parse_header(rec)
            .map_err(|e| format!("{e:?}"))
            .and_then(|h| {
                self.shared
                    .features
                    .apply(rec, &h, None)
                    .map_err(|e| format!("{e:?}"))
            });
        match applied {
            Ok(a) => {
                if let Answer::Feature(_, o) = answer {
                    o.set = a.set;
                    o.deleted = a.deleted;
                    o.found = a.found;
                }
            }
            // The writer built the record itself: this is a bug, not bad input.
            Err(e) => tracing::error!(error = %e, "cannot apply a record to the feature tables"),
        }
    }
    /// Forget a group whose write or fsync failed: `seq` assignments, counters and LSNs.
    fn abort_group(&mut self, first_lsn: u64, counters: (u64, u64), scratch: &mut Scratch) {
        self.shared.features.end_group();
        self.next_lsn = first_lsn;
        (self.live, self.carry_orphans) = counters;
        for (stream, prior) in scratch.undo.drain(..).rev() {
            match prior {
                Some(st) => {
                    self.streams.insert(stream, st);
                }
                None => {
                    self.streams.remove(&stream);
                }
            }
        }
    }
}
