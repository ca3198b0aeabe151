//! Committing one group: plan every request, append the group's records with one write,
//! sync if the mode or a request asks for it, make what became durable visible, and hand
//! the group to the apply threads, which apply it to the feature tables; its finish answers.

use super::Msg;
use super::answer::{Done, GroupTimes};
use super::plan::Scratch;
use super::planned::{Answer, Planned};
use crate::api::*;
use crate::apply::{Applier, Handed};
use crate::log::source::{Durable, RunAt, SourcePos};
use crate::log::state::LogWriter;
use std::time::{Duration, Instant};
use vx_sys::{EXPORT_SPANS, now_ms, span_int};

/// What undoes a group's planning when its write or fsync fails.
struct Undo {
    first_lsn: u64,
    /// `live` and `carry_orphans` before the group.
    counters: (u64, u64),
}

impl LogWriter {
    /// Commit one group: [`plan`](Self::plan_group) every request, [`append`](Self::append)
    /// the group's records with one write, [`sync`](Self::sync_group) if the mode or a
    /// request asks for it, [`apply`](Self::apply_group) what became durable to the reader
    /// index, and hand the group to the apply threads ([`crate::apply`]), which apply it to
    /// the feature tables, after which its finish (`answer.rs`) answers. A failed append or
    /// sync undoes the group and refuses every request in it.
    pub(super) fn commit_group(
        &mut self,
        applier: &mut Applier,
        group: &mut Vec<Msg>,
        scratch: &mut Scratch,
    ) {
        let now = now_ms();
        let began = Instant::now();
        scratch.buf.clear();
        scratch.undo.clear();
        scratch.pending.clear();
        scratch.origins.clear();
        scratch.reserved = 0;
        let undo = Undo {
            first_lsn: self.next_lsn,
            counters: self.streams.counters(),
        };
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
        let mut planned = self.plan_group(applier, group, now, scratch, &span);
        let records = self.next_lsn - undo.first_lsn;
        let events: u64 = planned
            .iter()
            .map(|p| match &p.answer {
                Answer::Write(_, o) => o.accepted,
                Answer::Delete(..) | Answer::Feature(..) | Answer::Done(_) => 0,
            })
            .sum();
        let need_sync = self.needs_sync(&planned, scratch.buf.is_empty());
        let at = self.active.len;
        if let Err(err) = self.append(&scratch.buf, at, records, events, &mut planned) {
            self.abort_group(undo, scratch);
            refuse(&mut planned, &err);
            return;
        }
        if !scratch.buf.is_empty() {
            self.active.unsynced = true;
        }
        let written = Instant::now();
        let fsync_took = match self.sync_group(need_sync) {
            Ok(took) => took,
            Err(failure) => {
                // Never pretend: the unsynced group is cut off and refused.
                if !scratch.buf.is_empty() {
                    let _ = self.active.file.set_len(at);
                    self.active.len = at;
                }
                self.abort_group(undo, scratch);
                refuse(&mut planned, &WriteError::Poisoned(failure.into()));
                return;
            }
        };
        let fsync_us = u64::try_from(fsync_took.as_micros()).unwrap_or(u64::MAX);
        span.record("records", span_int(records))
            .record("events", span_int(events))
            .record("bytes", span_int(scratch.buf.len()))
            .record("fsync", need_sync)
            .record("fsync_us", span_int(fsync_us));
        self.apply_group(&mut planned, &scratch.buf, at, now);
        let recs = planned.iter().filter_map(|p| p.rec).collect();
        let done = Done {
            planned,
            synced: need_sync,
            fsync_us,
            times: GroupTimes {
                began,
                written,
                synced: written + fsync_took,
            },
            reserved: scratch.reserved,
            through: self.next_lsn.saturating_sub(1),
            origins: self.changed_origins(),
        };
        applier.hand_over(Handed {
            buf: std::mem::replace(&mut scratch.buf, applier.spare()),
            recs,
            replay: None,
            poison: Some(std::sync::Arc::clone(&self.shared)),
            finish: done.into_finish(std::sync::Arc::clone(&self.shared)),
        });
    }

    /// Plan step: each request checked and turned into its record in the group buffer, or
    /// refused at once (`plan_msg.rs`). A request that asked for no durability is answered
    /// here.
    fn plan_group(
        &mut self,
        applier: &Applier,
        group: &mut Vec<Msg>,
        now: i64,
        scratch: &mut Scratch,
        span: &tracing::Span,
    ) -> Vec<Planned> {
        let mut planned: Vec<Planned> = Vec::with_capacity(group.len());
        for msg in group.drain(..) {
            let lsn = self.next_lsn;
            let Some(mut p) = self.plan_msg(applier, msg, now, scratch, span) else {
                continue;
            };
            // The record's LSN, if the request wrote one (a request of duplicates only
            // writes none).
            p.lsn = (self.next_lsn > lsn).then_some(lsn);
            if p.want == Durability::None {
                p.set_durability(Durability::None);
                p.answer(Ok(()));
            }
            planned.push(p);
        }
        planned
    }

    /// Whether the group needs an fsync: every group with records under `always`, and any
    /// group where a request asks for `fsync`. A request whose events were all duplicates
    /// wrote nothing, but `fsync` must still mean an fsync covers the originals: under
    /// `interval` they may be unsynced. A reset is always synced before it is applied.
    fn needs_sync(&self, planned: &[Planned], empty: bool) -> bool {
        let unsynced = self.active.unsynced;
        let wants_fsync = planned
            .iter()
            .any(|p| (p.want == Durability::Fsync && p.owed()) || p.reset.is_some());
        (!empty && self.cfg.fsync == FsyncMode::Always) || (wants_fsync && (!empty || unsynced))
    }

    /// Append step: the group's records with one write at `at`, the end of the active
    /// segment. A failure cuts off whatever reached the file; out of space the store stays
    /// writable, any other failure poisons it (see the module docs of [`super`]).
    fn append(
        &mut self,
        buf: &[u8],
        at: u64,
        records: u64,
        events: u64,
        planned: &mut [Planned],
    ) -> Result<(), WriteError> {
        // Index offsets within a segment are 32-bit: a segment that cannot be rolled (its
        // seal keeps failing) stops taking writes before it outgrows them.
        if at.saturating_add(buf.len() as u64) > u64::from(u32::MAX) {
            let full = IoFailure::new(
                format!("log segment {}", self.active.first),
                std::io::Error::new(
                    std::io::ErrorKind::FileTooLarge,
                    "it cannot be rolled and has reached the 4GiB a segment can index",
                ),
            );
            tracing::error!(error = %full, "refusing a group");
            return Err(WriteError::StorageFull(full));
        }
        if buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.active.file.write_all_at(buf, at) {
            let failure = IoFailure::new(format!("write to log segment {}", self.active.first), e);
            tracing::error!(error = %failure, "a group's write failed");
            // Cut off whatever part of the group reached the file; if even that fails, the
            // file's tail is unknown and nothing more may be appended. A failure other than
            // space (EIO, …) leaves the file's state unknown too.
            if let Err(t) = self.active.file.set_len(at) {
                self.shared.poison.set(IoFailure::new(
                    format!("{failure}; truncating the partial write"),
                    t,
                ));
            } else if !failure.is_out_of_space() {
                self.shared.poison.set(failure.clone());
            }
            return Err(self.poisoned().unwrap_or(WriteError::StorageFull(failure)));
        }
        self.active.len += buf.len() as u64;
        if let Some(o) = &self.cfg.observer {
            o.appended(records, events, buf.len() as u64);
        }
        // Requests that asked for `write` below the visibility level (mode `always`) are
        // answered now; the rest wait until they are applied, so an acknowledged write is
        // always visible to the reader who acknowledged it (read-your-writes).
        let visible_at = self.cfg.fsync.durability();
        for p in planned {
            if p.want == Durability::Write && p.want < visible_at {
                p.set_durability(Durability::Write);
                p.answer(Ok(()));
            }
        }
        Ok(())
    }

    /// Sync step: fdatasync when the group needs it; how long it took.
    fn sync_group(&mut self, need_sync: bool) -> Result<Duration, IoFailure> {
        if need_sync {
            self.sync()
        } else {
            Ok(Duration::ZERO)
        }
    }

    /// Apply step: what is durable becomes visible, through the engine's input seam
    /// ([`LogWriter::apply`]) — the same entry recovery applies the log through. The feature
    /// tables follow on the apply threads.
    fn apply_group(&mut self, planned: &mut [Planned], buf: &[u8], at: u64, now: i64) {
        if !buf.is_empty() {
            self.appended(self.active.len, now);
        }
        for p in planned.iter_mut() {
            if let (Some((target, shard)), Some(_)) = (p.reset, p.lsn)
                && let Err(err) = self.reset_carry(target, shard)
            {
                // Memory forgets the shard all the same (below), so that readers never see
                // it again; the store is poisoned and a restart finishes the reset.
                p.answer(Err(err));
            }
            if let Some(lsn) = p.lsn {
                let runs = p.batch.as_ref().map(|batch| {
                    p.runs.iter().filter_map(move |r| {
                        let run = batch.runs().get(r.run)?;
                        let mut placed = r.placed;
                        let off = at + r.head_rel as u64;
                        let rec_end = (r.rec_end_rel - r.head_rel) as u64;
                        // Segments stay below 4 GiB (storage.segment_bytes is checked at
                        // start-up).
                        placed.off = u32::try_from(off).unwrap_or(u32::MAX);
                        placed.rec_end = u32::try_from(rec_end).unwrap_or(u32::MAX);
                        Some(RunAt {
                            shard: r.shard,
                            stream: batch.stream(run),
                            floor: r.floor,
                            placed,
                            marks: &r.marks,
                        })
                    })
                });
                let append_ms = p.append_ms.unwrap_or(now);
                self.apply(
                    Durable {
                        pos: SourcePos::Lsn(lsn),
                        append_ms,
                        runs: runs.into_iter().flatten(),
                        tombstone: p
                            .tombstone
                            .as_ref()
                            .map(|(shard, s, last)| (*shard, s.as_str(), *last)),
                        ids: &p.ids,
                        id_count: p.ids.len() as u64,
                        origin: p.origin,
                        reset: p.reset,
                    },
                    append_ms,
                );
            }
        }
        self.publish_horizons();
    }

    /// Forget a group whose write or fsync failed: `seq` assignments, counters and LSNs.
    fn abort_group(&mut self, undo: Undo, scratch: &mut Scratch) {
        self.shared.features.release(scratch.reserved);
        self.next_lsn = undo.first_lsn;
        self.streams.set_counters(undo.counters);
        for (stream, prior) in scratch.undo.drain(..).rev() {
            self.streams.restore(stream, prior);
        }
    }
}

/// Every request of a group that could not be stored gets the error.
fn refuse(planned: &mut [Planned], err: &WriteError) {
    for p in planned {
        p.answer(Err(err.clone()));
    }
}
