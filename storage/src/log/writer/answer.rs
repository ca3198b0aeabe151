//! A committed group's last step, once the apply threads have applied it to the feature
//! tables ([`crate::apply`]): fill in what direct writes found, release the group's feature
//! budget, publish what it applied, and **answer** its requests.
//!
//! What holds, whichever thread runs it:
//! - An answer comes after the request's record reached the tables (read-your-writes), and
//!   after the fsync that made it durable: a group is handed over only once it is durable
//!   and visible in the reader index.
//! - Groups finish in log order (vx-features' `parallel`), as recovery replays them.
//! - The budget: each group releases its own reservations once applied
//!   ([`crate::features::Features::release`]). Whatever must see the tables as the log has
//!   them first waits for every group handed over (`Applier::settle`): the exact budget
//!   check, a feature write's "found", a reset.
//! - Cluster mode: a group's applied origins are published after its records reached the
//!   tables, so a caller waiting for an offset reads them next.

use super::planned::{Answer, Planned};
use crate::api::*;
use crate::apply::{Finish, Outcome};
use crate::log::state::Published;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vx_sys::span_int;

/// When a group began (planning), was written, and was synced (as written without a sync).
#[derive(Clone, Copy)]
pub(super) struct GroupTimes {
    pub(super) began: Instant,
    pub(super) written: Instant,
    pub(super) synced: Instant,
}

impl GroupTimes {
    /// A write's stages, answered at `now` (it was sent at `sent`).
    fn stages(&self, sent: Option<Instant>, now: Instant) -> Stages {
        Stages {
            sent,
            queue: sent.map_or(Duration::ZERO, |s| self.began.saturating_duration_since(s)),
            write: self.written.saturating_duration_since(self.began),
            fsync: self.synced.saturating_duration_since(self.written),
            apply: now.saturating_duration_since(self.synced),
            answered: Some(now),
        }
    }
}

/// A durable group's requests and what its finish does besides answering them.
pub(super) struct Done {
    pub(super) planned: Vec<Planned>,
    pub(super) synced: bool,
    pub(super) fsync_us: u64,
    pub(super) times: GroupTimes,
    /// The feature budget its requests reserved.
    pub(super) reserved: u64,
    /// The LSN of its last record.
    pub(super) through: u64,
    /// Cluster mode: the applied origins to publish after it, if they changed.
    pub(super) origins: Option<BTreeMap<(OriginTopic, u32), u64>>,
}

impl Done {
    /// The finish of the group: run once the apply threads applied its records, with their
    /// outcomes in record order (the order of the requests that wrote one).
    pub(super) fn into_finish(mut self, shared: Arc<Published>) -> Finish {
        Box::new(move |outcomes: Vec<Outcome>| {
            let mut outcomes = outcomes.into_iter();
            let now = Instant::now();
            for p in &mut self.planned {
                if p.rec.is_some() {
                    let o = outcomes.next().unwrap_or_default();
                    p.applied(o);
                }
                p.batch = None;
                if let Answer::Write(_, out) = &mut p.answer {
                    out.stages = self.times.stages(p.sent, now);
                }
            }
            let features = &shared.features;
            features.release(self.reserved);
            features.applied_through(self.through);
            if let Some(origins) = self.origins {
                shared.publish_origins(origins);
            }
            answer_group(&mut self.planned, self.synced, self.fsync_us);
        })
    }
}

impl Planned {
    /// Its record was applied to the feature tables (or refused: the store is poisoned
    /// already, the tables no longer follow the log, and only a restart, which rebuilds them
    /// from the log, may write again; docs/FEATURES.md).
    fn applied(&mut self, o: Outcome) {
        if let Some((lsn, source)) = o.error {
            self.answer(Err(WriteError::Poisoned(PoisonCause::Features {
                lsn,
                source,
            })));
            return;
        }
        if let Answer::Feature(_, out) = &mut self.answer {
            out.set = o.applied.set;
            out.added = o.applied.added;
            out.deleted = o.applied.deleted;
            out.found = o.applied.found;
            out.incremented = o.applied.incremented;
        }
    }
}

/// Answer step: every request still owed its answer gets it, at the durability the group
/// reached. The admission reservation is released once the request is applied and before
/// it is answered, so a producer never finds its own finished request still queued.
fn answer_group(planned: &mut [Planned], synced: bool, fsync_us: u64) {
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
