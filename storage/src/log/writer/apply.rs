//! The feature applier: a thread of its own that applies each committed group's records to
//! the feature tables and then answers the group's requests, while the log writer plans,
//! writes and syncs the next group.
//!
//! Why a thread: with declared aggregates, applying a group's events to the tables takes
//! longer than writing and syncing it. On the writer, the fsync of one group and the apply of
//! the one before followed each other; here they overlap.
//!
//! What stays as it was:
//! - An answer still comes after the request's record reached the tables
//!   (read-your-writes), and after the fsync that made it durable: a group is handed over
//!   only once it is durable and visible in the reader index.
//! - Groups are applied in log order, one at a time, as recovery replays them.
//! - A small group (under [`IN_PLACE_BYTES`] of records: a few feature writes, small event
//!   batches) is applied on the writer, after the group out: its apply takes less than
//!   waking this thread would, and the writer's answer comes sooner (the Redis protocol's
//!   `HSET` at depth 1 measured 5% fewer operations a second when every group was handed
//!   over).
//! - One group at most is out: handing over the next waits until it is answered. So the
//!   writer holds one group buffer and this thread the other, and at most one group's
//!   batches wait here beside the writer's.
//! - The budget: each group releases its own reservations once applied
//!   ([`vx_features::Features::release`]). Whatever must see the tables as the log has
//!   them first waits for every group handed over ([`Applier::settle`]): the exact budget
//!   check, a feature write's "found", a reset.
//! - Cluster mode: a group's applied origins are published after its records reached the
//!   tables, so a caller waiting for an offset reads them next.

use super::planned::{Answer, Planned};
use crate::api::*;
use crate::log::state::Published;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use vx_sys::span_int;

/// Groups whose records take fewer bytes than this are applied on the writer: about a
/// hundred events, a few dozen microseconds of apply, about what a thread's wake-up costs.
const IN_PLACE_BYTES: usize = 16 << 10;

/// A durable group, for the feature tables and then its answers.
pub(super) struct Group {
    pub(super) planned: Vec<Planned>,
    /// The group's records (`Planned::rec` ranges point into it).
    pub(super) buf: Vec<u8>,
    pub(super) synced: bool,
    pub(super) fsync_us: u64,
    /// The feature budget its requests reserved.
    pub(super) reserved: u64,
    /// The LSN of its last record.
    pub(super) through: u64,
    /// Cluster mode: the applied origins to publish after it, if they changed.
    pub(super) origins: Option<BTreeMap<(OriginTopic, u32), u64>>,
}

/// The writer's handle on the applier thread.
pub(crate) struct Applier {
    shared: Arc<Published>,
    /// `storage.features_from_events`.
    from_events: bool,
    tx: Option<flume::Sender<Group>>,
    /// Group buffers come back here, emptied, once their group is answered.
    back: flume::Receiver<Vec<u8>>,
    /// The buffer of the group applied last, back.
    spare: Option<Vec<u8>>,
    /// Whether a group is out (handed over, not yet answered).
    out: bool,
    thread: Option<JoinHandle<()>>,
}

impl Applier {
    /// No thread yet: each group is applied where it is handed over, until
    /// [`Applier::start`]. `from_events` is `storage.features_from_events`.
    pub(crate) fn in_place(shared: Arc<Published>, from_events: bool) -> Applier {
        Applier {
            shared,
            from_events,
            tx: None,
            back: flume::bounded(1).1,
            spare: None,
            out: false,
            thread: None,
        }
    }

    /// Start the thread: from now on groups of [`IN_PLACE_BYTES`] or more are applied there.
    pub(crate) fn start(&mut self) -> std::io::Result<()> {
        let (tx, rx) = flume::bounded::<Group>(1);
        let (back_tx, back) = flume::bounded(1);
        let (shared, from_events) = (Arc::clone(&self.shared), self.from_events);
        let thread = std::thread::Builder::new()
            .name("vx-feature-apply".into())
            .spawn(move || {
                for g in rx.iter() {
                    let buf = apply_group(&shared, from_events, g);
                    // The writer may have stopped waiting (it is shutting down).
                    let _ = back_tx.send(buf);
                }
            })?;
        self.tx = Some(tx);
        self.back = back;
        self.thread = Some(thread);
        Ok(())
    }

    /// Hand a durable group over, once the one before it is answered; returns an empty
    /// buffer for the next group (the one before's).
    pub(super) fn hand_over(&mut self, g: Group) -> Vec<u8> {
        self.settle();
        let g = match &self.tx {
            Some(tx) if g.buf.len() >= IN_PLACE_BYTES => match tx.send(g) {
                Ok(()) => {
                    self.out = true;
                    return self.spare.take().unwrap_or_default();
                }
                Err(flume::SendError(g)) => {
                    tracing::error!("the feature applier thread is gone; applying on the writer");
                    self.tx.take();
                    g
                }
            },
            // Small, not started, stopped, or the thread is gone: applying here keeps the
            // order, and the answers are still sent.
            _ => g,
        };
        apply_group(&self.shared, self.from_events, g)
    }

    /// Wait until the group handed over is applied and answered.
    pub(super) fn settle(&mut self) {
        if !self.out {
            return;
        }
        self.out = false;
        match self.back.recv() {
            Ok(buf) => self.spare = Some(buf),
            // The thread is gone (it panicked): nothing more will come back.
            Err(_) => self.tx = None,
        }
    }

    /// Let the group out finish, and stop the thread.
    pub(super) fn stop(&mut self) {
        self.settle();
        self.tx = None;
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("the feature applier thread panicked");
        }
    }
}

/// Apply a group's records to the feature tables in log order, release its budget, publish
/// what it applied, and answer its requests. Returns its buffer, emptied.
fn apply_group(shared: &Published, from_events: bool, mut g: Group) -> Vec<u8> {
    let features = &shared.features;
    for p in &mut g.planned {
        if let Some((start, end)) = p.rec
            && let Some(rec) = g.buf.get(start..end)
            && let Err(err) = apply_features(shared, from_events, rec, &mut p.answer)
        {
            p.answer(Err(err));
        }
        p.batch = None;
    }
    features.release(g.reserved);
    features.applied_through(g.through);
    if let Some(origins) = g.origins {
        shared.publish_origins(origins);
    }
    answer_group(&mut g.planned, g.synced, g.fsync_us);
    g.buf.clear();
    g.buf
}

/// Apply a written record to the feature tables (the same path recovery replays it
/// through), and fill in a direct write's outcome. A record the tables do not take poisons
/// the store: the tables no longer follow the log, and only a restart, which rebuilds them
/// from the log, may write again (docs/FEATURES.md).
fn apply_features(
    shared: &Published,
    from_events: bool,
    rec: &[u8],
    answer: &mut Answer,
) -> Result<(), WriteError> {
    let header = crate::log::record::parse_header(rec).map_err(crate::feed::FeedError::from);
    let lsn = header.as_ref().map_or(0, |h| h.lsn);
    let result = header
        .and_then(|h| crate::feed::apply_record(&shared.features, rec, &h, None, from_events));
    match result {
        Ok(a) => {
            if let Answer::Feature(_, o) = answer {
                o.set = a.set;
                o.deleted = a.deleted;
                o.found = a.found;
            }
            Ok(())
        }
        Err(e) => {
            let cause = PoisonCause::Features {
                lsn,
                source: Arc::new(e),
            };
            shared.poison.set(cause.clone());
            Err(WriteError::Poisoned(cause))
        }
    }
}

/// Answer step: every request still owed its answer gets it, at the durability the group
/// reached. The admission reservation is released once the request is applied and before
/// it is answered, so a producer never finds its own finished request still queued.
pub(super) fn answer_group(planned: &mut [Planned], synced: bool, fsync_us: u64) {
    let n_planned = planned.len();
    for p in planned {
        p.guard = None;
        p.span
            .record("group", span_int(n_planned))
            .record("fsync_us", span_int(fsync_us));
        if p.owed() {
            let reached = if synced {
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
}
