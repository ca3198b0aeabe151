//! The single log writer thread: group commit.
//!
//! It blocks for the first queued request, drains whatever else is queued (bounded), and for
//! the group: per request, checks ids against the dedup tables and against each other *before*
//! anything else (a retry whose ids are all stored is a duplicate, whatever else it asks), then
//! the conditional write and `storage.max_streams`, assigns `seq`s and copies the request's
//! runs into one record (event by event only where a duplicate is dropped); all records of the
//! group go out with one `pwrite` and, if the mode or any request asks for it, one fdatasync;
//! then the group is applied to the reader index (visibility follows durability), dedup entries
//! are committed, requests are answered and reservations released. After the group the writer
//! seals the segment if it is full and applies retention (also once a second when idle).
//!
//! A failed write truncates the partial bytes and undoes the group's `seq` assignments, so the
//! requests are answered 507 and a retry is not mistaken for a duplicate. Out of space
//! (ENOSPC, EDQUOT) is [`WriteError::StorageFull`]: writes resume when space returns. Any
//! other failure of the write (EIO, …), a failed truncation or a failed fsync poisons the
//! store ([`WriteError::Poisoned`]): what the file holds is unknown, and every later write is
//! refused until restart.

use crate::api::*;
use crate::index::memory::Placed;
use crate::log::record::{RecordBuilder, RecordType};
use crate::log::state::{LogWriter, WState};
use hashbrown::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use vx_proto::Batch;
// The snapshot thread reads the clock through this path.
pub(crate) use vx_sys::now_ms;
use vx_sys::{EXPORT_SPANS, span_int};

pub(crate) type Reply = oneshot::Sender<Result<WriteOutcome, WriteError>>;
pub(crate) type DeleteReply = oneshot::Sender<Result<DeleteOutcome, WriteError>>;
pub(crate) type FeatureReply = oneshot::Sender<Result<FeatureOutcome, WriteError>>;

pub(crate) enum Msg {
    /// The span is the caller's (an ingest request's `batch` span): the group's `commit` span
    /// follows from it, and the writer records the group size and fsync time on it.
    Write(WriteRequest, Reply, tracing::Span),
    Delete {
        stream: String,
        durability: Option<Durability>,
        reply: DeleteReply,
    },
    Feature(FeatureWrite, FeatureReply),
    /// Finish what is queued before this, fsync, and stop.
    Shutdown,
}

/// Bounds of one group: what one write carries at most.
const GROUP_MAX_REQUESTS: usize = 1024;
const GROUP_MAX_BYTES: usize = 32 << 20;
/// How often retention looks at the oldest segment when nothing else wakes the writer.
const RETENTION_TICK: Duration = Duration::from_secs(1);
/// How long the writer waits before trying again to seal after a failure.
const SEAL_BACKOFF: Duration = Duration::from_secs(1);

/// Who is waiting for a planned request, and with what.
enum Answer {
    Write(Option<Reply>, WriteOutcome),
    Delete(Option<DeleteReply>, DeleteOutcome),
    Feature(Option<FeatureReply>, FeatureOutcome),
}

/// One stream's run of a planned record; offsets are relative to the group buffer until the
/// write places them.
struct PlannedRun {
    run: usize,
    shard: u32,
    floor: u64,
    placed: Placed,
    /// Group-buffer offsets of the run header and of its record's end.
    head_rel: usize,
    rec_end_rel: usize,
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

/// Per-group scratch state, reused across groups.
#[derive(Default)]
struct Scratch {
    buf: Vec<u8>,
    /// Prior writer states, in touch order, to undo the group if its write fails.
    undo: Vec<(Box<str>, Option<WState>)>,
    /// Ids assigned in this group, not yet in the dedup tables.
    pending: HashMap<u128, u64>,
    /// Ids of the request being planned.
    keys: HashSet<u128>,
}

/// What planning one write request produced.
struct WritePlan {
    rec: Option<(usize, usize)>,
    outcome: WriteOutcome,
    runs: Vec<PlannedRun>,
    ids: Vec<(u32, u128, u64)>,
}

/// A read the writer needs before it can plan a request failed: that request is refused
/// (507), and nothing was written.
fn unreadable(context: &str, e: std::io::Error) -> WriteError {
    WriteError::StorageFull(IoFailure::new(context, e))
}

impl LogWriter {
    pub fn run(mut self, rx: flume::Receiver<Msg>) {
        let mode = self.cfg.fsync;
        let mut unsynced = false;
        let mut last_sync = Instant::now();
        let mut last_retention = Instant::now();
        let mut seal_after = Instant::now();
        let mut scratch = Scratch {
            buf: Vec::with_capacity(1 << 20),
            ..Scratch::default()
        };
        let mut group: Vec<Msg> = Vec::new();
        self.retention(now_ms());
        loop {
            let mut deadline = last_retention + RETENTION_TICK;
            if unsynced && mode == FsyncMode::Interval {
                deadline = deadline.min(last_sync + self.cfg.fsync_interval);
            }
            let first = match rx.recv_deadline(deadline) {
                Ok(m) => Some(m),
                Err(flume::RecvTimeoutError::Timeout) => None,
                Err(flume::RecvTimeoutError::Disconnected) => break,
            };
            let mut stop = false;
            match first {
                None => {}
                Some(Msg::Shutdown) => stop = true,
                Some(m) => group.push(m),
            }
            let mut bytes: usize = group.iter().map(msg_bytes).sum();
            while !stop
                && !group.is_empty()
                && group.len() < GROUP_MAX_REQUESTS
                && bytes < GROUP_MAX_BYTES
            {
                match rx.try_recv() {
                    Ok(Msg::Shutdown) => stop = true,
                    Ok(m) => {
                        bytes += msg_bytes(&m);
                        group.push(m);
                    }
                    Err(_) => break,
                }
            }
            if !group.is_empty() {
                self.commit_group(&mut group, &mut scratch, &mut unsynced, &mut last_sync);
            }
            if mode == FsyncMode::Interval
                && unsynced
                && last_sync.elapsed() >= self.cfg.fsync_interval
            {
                // A failure poisons the store and logs why; no request waits on this sync.
                let _ = self.sync(&mut unsynced, &mut last_sync);
            }
            if self.wants_roll() && Instant::now() >= seal_after && !self.is_poisoned() {
                if self.roll(&mut unsynced, &mut last_sync).is_err() {
                    seal_after = Instant::now() + SEAL_BACKOFF;
                }
                self.retention(now_ms());
                last_retention = Instant::now();
            }
            if last_retention.elapsed() >= RETENTION_TICK {
                self.retention(now_ms());
                last_retention = Instant::now();
            }
            if scratch.buf.capacity() > GROUP_MAX_BYTES * 2 {
                scratch.buf = Vec::with_capacity(1 << 20);
            }
            if stop {
                break;
            }
        }
        if unsynced {
            // A failure poisons the store and logs why; no request waits on this sync.
            let _ = self.sync(&mut unsynced, &mut last_sync);
        }
        // Anything still queued arrived after shutdown began.
        while let Ok(msg) = rx.try_recv() {
            match msg {
                Msg::Write(_, reply, _) => {
                    let _ = reply.send(Err(WriteError::ShuttingDown));
                }
                Msg::Delete { reply, .. } => {
                    let _ = reply.send(Err(WriteError::ShuttingDown));
                }
                Msg::Feature(_, reply) => {
                    let _ = reply.send(Err(WriteError::ShuttingDown));
                }
                Msg::Shutdown => {}
            }
        }
        tracing::info!(lsn = self.next_lsn - 1, "log writer stopped");
    }

    fn is_poisoned(&self) -> bool {
        self.shared.poison.is_set()
    }

    fn poisoned(&self) -> Option<WriteError> {
        self.shared.poison.error()
    }

    /// fdatasync the active segment; how long it took, or why it failed (the store is then
    /// poisoned).
    fn sync(
        &mut self,
        unsynced: &mut bool,
        last_sync: &mut Instant,
    ) -> Result<Duration, IoFailure> {
        let t = Instant::now();
        let res = self.active.sync_data();
        let took = t.elapsed();
        if let Some(o) = &self.cfg.observer {
            o.fsync(took);
        }
        *last_sync = Instant::now();
        match res {
            Ok(()) => {
                *unsynced = false;
                Ok(took)
            }
            Err(e) => {
                let failure =
                    IoFailure::new(format!("fdatasync of log segment {}", self.active_first), e);
                self.shared.poison.set(failure.clone());
                Err(failure)
            }
        }
    }

    /// Seal the active segment and start the next one.
    fn roll(&mut self, unsynced: &mut bool, last_sync: &mut Instant) -> Result<(), ()> {
        if *unsynced && self.sync(unsynced, last_sync).is_err() {
            return Err(());
        }
        self.seal(true).map_err(|e| {
            tracing::error!(segment = self.active_first, error = %e, "cannot seal the log segment; appending to it and retrying");
        })
    }

    fn commit_group(
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

    /// A direct feature write's record; returns its range in the group buffer and whether
    /// the entity (or feature) exists before the group (the answer of a `none` delete).
    fn plan_feature(
        &mut self,
        fw: &FeatureWrite,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<((usize, usize), bool), WriteError> {
        let features = &self.shared.features;
        let found = match &fw.op {
            FeatureOp::Put(set) => {
                if !features.reserve_put(&fw.entity, set) {
                    return Err(WriteError::FeatureBudget {
                        max: self.cfg.max_feature_bytes,
                    });
                }
                features.exists(&fw.entity, None)
            }
            FeatureOp::Delete(name) => features.exists(&fw.entity, name.as_deref()),
        };
        let buf = &mut scratch.buf;
        let start = buf.len();
        let ty = match fw.op {
            FeatureOp::Put(_) => RecordType::FeaturePut,
            FeatureOp::Delete(_) => RecordType::FeatureDelete,
        };
        let mut rb = RecordBuilder::begin(buf, ty, self.next_lsn, now);
        match &fw.op {
            FeatureOp::Put(set) => rb.feature_put(buf, &fw.entity, set),
            FeatureOp::Delete(name) => rb.feature_delete(buf, &fw.entity, name.as_deref()),
        }
        let len = match rb.finish(buf) {
            Ok(len) => len,
            Err(e) => {
                buf.truncate(start);
                return Err(e.into());
            }
        };
        self.next_lsn += 1;
        Ok(((start, start + len), found))
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

    /// Dedup, conditional check, `storage.max_streams` and `seq` assignment for one request,
    /// and its record appended to the group buffer (none if every event is a duplicate).
    fn plan_write(
        &mut self,
        req: &WriteRequest,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<WritePlan, WriteError> {
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
                let seen = scratch
                    .pending
                    .get(&id.key)
                    .copied()
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
            return Ok(WritePlan {
                rec: None,
                outcome: WriteOutcome {
                    accepted: 0,
                    duplicates: dups,
                    last_seq,
                    durability: Durability::None,
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
        {
            return Err(WriteError::TooManyStreams {
                max: self.cfg.max_streams,
            });
        }
        if !self.shared.features.reserve_events(batch) {
            return Err(WriteError::FeatureBudget {
                max: self.cfg.max_feature_bytes,
            });
        }
        // Pass 2: assign seqs and copy the runs.
        let lsn = self.next_lsn;
        let buf = &mut scratch.buf;
        let rec_start = buf.len();
        let mut rb = RecordBuilder::begin(buf, RecordType::Events, lsn, now);
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
                            scratch.pending.insert(id.key, seq);
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
                        scratch.pending.insert(id.key, seq);
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
        Ok(WritePlan {
            rec: Some((rec_start, rec_start + len)),
            outcome: WriteOutcome {
                accepted: total_fresh,
                duplicates: dups,
                last_seq,
                durability: Durability::None,
            },
            runs: planned_runs,
            ids,
        })
    }

    /// A tombstone record for `stream`; returns its shard and last seq.
    fn plan_delete(
        &mut self,
        stream: &str,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(u32, u64), WriteError> {
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
        let mut rb = RecordBuilder::begin(buf, RecordType::Tombstone, self.next_lsn, now);
        rb.tombstone(buf, stream, st.last);
        rb.finish(buf)?;
        self.next_lsn += 1;
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

fn msg_bytes(m: &Msg) -> usize {
    match m {
        Msg::Write(req, ..) => req.batch.mem_bytes(),
        Msg::Delete { stream, .. } => stream.len(),
        Msg::Feature(fw, _) => match &fw.op {
            FeatureOp::Put(set) => set.iter().map(|(n, _)| n.len() + 16).sum(),
            FeatureOp::Delete(_) => fw.entity.len(),
        },
        Msg::Shutdown => 0,
    }
}
