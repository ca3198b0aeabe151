//! The single log writer thread: group commit.
//!
//! It blocks for the first queued request, drains whatever else is queued (bounded), and
//! commits the group ([`commit`], one step each): **plan** each request ([`plan`]): check
//! its ids against the dedup tables and against each other *before* anything else (a retry
//! whose ids are all stored is a duplicate, whatever else it asks), then the conditional
//! write and `storage.max_streams`, assign `seq`s and copy the request's runs into one record
//! (event by event only where a duplicate is dropped); **append** all records of the group
//! with one `pwrite`; **sync** with one fdatasync if the mode or any request asks for it;
//! **apply** the group through the engine's input seam ([`crate::log::source`]: the reader
//! index, dedup entries; visibility follows durability); then hand it to the apply threads
//! ([`crate::apply`]), which apply it to the feature tables, after which the group's finish
//! ([`answer`]) **answers** the requests, releasing their reservations, while the writer goes
//! on with the next group.
//! After the group the writer seals the segment if it is full and applies retention (also
//! once a second when idle).
//!
//! A reset (cluster mode: one shard's local copy discarded) is a group of its own, always
//! fsynced: nothing planned before it in a group may see its effect, nothing after it may
//! miss it, and the carry file it rewrites must never be ahead of the log.
//!
//! A failed write truncates the partial bytes and undoes the group's `seq` assignments, so the
//! requests are answered 507 and a retry is not mistaken for a duplicate. Out of space
//! (ENOSPC, EDQUOT) is [`WriteError::StorageFull`]: writes resume when space returns. Any
//! other failure of the write (EIO, …), a failed truncation or a failed fsync poisons the
//! store ([`WriteError::Poisoned`]): what the file holds is unknown, and every later write is
//! refused until restart.

mod answer;
mod cluster;
mod commit;
mod plan;
mod plan_msg;
mod planned;
mod write_plan;

use crate::api::*;
use crate::apply::Applier;
use crate::log::state::LogWriter;
use plan::Scratch;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
// The snapshot thread reads the clock through this path.
pub(crate) use vx_sys::now_ms;

pub(crate) type Reply = oneshot::Sender<Result<WriteOutcome, WriteError>>;
pub(crate) type DeleteReply = oneshot::Sender<Result<DeleteOutcome, WriteError>>;
pub(crate) type FeatureReply = oneshot::Sender<Result<FeatureOutcome, WriteError>>;
/// The answer of a request that returns nothing but success (entity events, a reset).
pub(crate) type UnitReply = oneshot::Sender<Result<(), WriteError>>;

pub(crate) enum Msg {
    /// The span is the caller's (an ingest request's `batch` span): the group's `commit` span
    /// follows from it, and the writer records the group size and fsync time on it. The
    /// instant is when it was sent (its time in the queue counts from there).
    Write(WriteRequest, Reply, tracing::Span, Instant),
    Delete {
        stream: String,
        durability: Option<Durability>,
        origin: Option<Origin>,
        /// Cluster mode: the record's append time (see [`WriteRequest::append_ms`]).
        append_ms: Option<i64>,
        reply: DeleteReply,
    },
    Feature(FeatureWrite, FeatureReply),
    /// Cluster mode: events for the feature tables only (an entity-events record).
    EntityEvents {
        batch: vx_proto::Batch,
        origin: Origin,
        append_ms: Option<i64>,
        reply: UnitReply,
    },
    /// Cluster mode: discard one shard's streams or feature tables (a reset record).
    Reset {
        target: OriginTopic,
        shard: u32,
        reply: UnitReply,
    },
    /// Finish what is queued before this, fsync, and stop.
    Shutdown,
}

impl Msg {
    /// Answer a request that will not be planned.
    fn refuse(self, err: WriteError) {
        match self {
            Msg::Write(_, reply, ..) => {
                let _ = reply.send(Err(err));
            }
            Msg::Delete { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            Msg::Feature(_, reply) => {
                let _ = reply.send(Err(err));
            }
            Msg::EntityEvents { reply, .. } | Msg::Reset { reply, .. } => {
                let _ = reply.send(Err(err));
            }
            Msg::Shutdown => {}
        }
    }
}

/// Bounds of one group: what one write carries at most.
const GROUP_MAX_REQUESTS: usize = 1024;
const GROUP_MAX_BYTES: usize = 32 << 20;
/// How often retention looks at the oldest segment when nothing else wakes the writer.
const RETENTION_TICK: Duration = Duration::from_secs(1);
/// How long the writer waits before trying again to seal after a failure.
const SEAL_BACKOFF: Duration = Duration::from_secs(1);

impl LogWriter {
    /// The writer thread: groups from `rx` until shutdown; `applier` applies each durable
    /// group to the feature tables and answers it.
    pub fn run(mut self, mut applier: Applier, rx: flume::Receiver<Msg>) {
        let mode = self.cfg.fsync;
        let mut last_retention = Instant::now();
        let mut seal_after = Instant::now();
        let mut scratch = Scratch {
            buf: Vec::with_capacity(1 << 20),
            ..Scratch::default()
        };
        let mut group: Vec<Msg> = Vec::new();
        // A reset drained after other requests: it starts the next group, alone.
        let mut held: Option<Msg> = None;
        self.retention(now_ms());
        loop {
            let mut deadline = last_retention + RETENTION_TICK;
            if self.active.unsynced && mode == FsyncMode::Interval {
                deadline = deadline.min(self.active.last_sync + self.cfg.fsync_interval);
            }
            let first = match held.take() {
                Some(m) => Some(m),
                None => match rx.recv_deadline(deadline) {
                    Ok(m) => Some(m),
                    Err(flume::RecvTimeoutError::Timeout) => None,
                    Err(flume::RecvTimeoutError::Disconnected) => break,
                },
            };
            let mut stop = false;
            match first {
                None => {}
                Some(Msg::Shutdown) => stop = true,
                Some(m) => group.push(m),
            }
            let alone = matches!(group.first(), Some(Msg::Reset { .. }));
            let mut bytes: usize = group.iter().map(msg_bytes).sum();
            while !stop
                && !alone
                && !group.is_empty()
                && group.len() < GROUP_MAX_REQUESTS
                && bytes < GROUP_MAX_BYTES
            {
                match rx.try_recv() {
                    Ok(Msg::Shutdown) => stop = true,
                    Ok(m @ Msg::Reset { .. }) => {
                        held = Some(m);
                        break;
                    }
                    Ok(m) => {
                        bytes += msg_bytes(&m);
                        group.push(m);
                    }
                    Err(_) => break,
                }
            }
            if !group.is_empty() {
                self.commit_group(&mut applier, &mut group, &mut scratch);
            }
            if mode == FsyncMode::Interval
                && self.active.unsynced
                && self.active.last_sync.elapsed() >= self.cfg.fsync_interval
            {
                // A failure poisons the store and logs why; no request waits on this sync.
                let _ = self.sync();
            }
            if self.wants_roll() && Instant::now() >= seal_after && !self.is_poisoned() {
                if self.roll().is_err() {
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
        // Every group handed over is applied and answered before the writer stops, and so
        // before the store's last snapshot.
        applier.stop();
        if self.active.unsynced {
            // A failure poisons the store and logs why; no request waits on this sync.
            let _ = self.sync();
        }
        // Anything still queued arrived after shutdown began.
        for msg in held.into_iter().chain(rx.try_iter()) {
            msg.refuse(WriteError::ShuttingDown);
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
    fn sync(&mut self) -> Result<Duration, IoFailure> {
        let t = Instant::now();
        let res = self.active.file.sync_data();
        let took = t.elapsed();
        if let Some(o) = &self.cfg.observer {
            o.fsync(took);
        }
        self.active.last_sync = Instant::now();
        match res {
            Ok(()) => {
                self.active.unsynced = false;
                Ok(took)
            }
            Err(e) => {
                let failure =
                    IoFailure::new(format!("fdatasync of log segment {}", self.active.first), e);
                self.shared.poison.set(failure.clone());
                Err(failure)
            }
        }
    }

    /// Seal the active segment and start the next one.
    fn roll(&mut self) -> Result<(), ()> {
        if self.active.unsynced && self.sync().is_err() {
            return Err(());
        }
        self.seal(true).map_err(|e| {
            tracing::error!(segment = self.active.first, error = %e, "cannot seal the log segment; appending to it and retrying");
        })
    }
}

fn msg_bytes(m: &Msg) -> usize {
    match m {
        Msg::Write(req, ..) => req.batch.mem_bytes(),
        Msg::Delete { stream, .. } => stream.len(),
        Msg::Feature(fw, _) => match &fw.op {
            FeatureOp::Put(set) => set.iter().map(|(n, _)| n.len() + 16).sum(),
            FeatureOp::Delete(targets) => crate::api::delete_bytes(targets),
            FeatureOp::Incr { name, .. } => fw.entity.len() + name.len() + 16,
        },
        Msg::EntityEvents { batch, .. } => batch.mem_bytes(),
        Msg::Reset { .. } | Msg::Shutdown => 0,
    }
}
