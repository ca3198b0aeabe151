//! The feature tables' side of a durable group: its records handed to vx-features' apply
//! threads (`features.apply_threads`, docs/ARCHITECTURE.md "Threads"), each of which applies
//! what the records do to the shards it owns, in log order ([`crate::feed`]); once every
//! thread has applied the group, the one that applied last runs the group's finish (the
//! writer's: release the budget, publish, answer). Start-up's replay of the log hands its
//! records over the same way, so recovery applies as the running process did.
//!
//! [`Applier`] is the writer's (and start-up's) handle; [`group::LogGroup`] a group of
//! records as the threads apply it.
//!
//! Why the writer does not apply: applying a group's events takes longer than writing and
//! syncing it, so the writer commits the next group meanwhile. A group of under
//! `StorageConfig::apply_in_place_bytes` of records (a few feature writes, small batches) is
//! applied where it is handed over, after the groups out: waking the threads would cost more
//! than its apply.

mod group;

pub(crate) use group::{Finish, Outcome};

use crate::api::StorageConfig;
use crate::features::Features;
use crate::features::parallel::ApplyThreads;
use crate::features::snapshot::ReplayFrom;
use crate::log::state::Published;
use group::LogGroup;
use std::sync::Arc;

/// The apply threads, as the writer and start-up hand them groups.
pub(crate) struct Applier {
    threads: ApplyThreads,
    /// `storage.features_from_events`.
    from_events: bool,
    /// Groups of fewer record bytes are applied where they are handed over.
    in_place_bytes: usize,
    /// Groups give their buffers back here once nobody reads them.
    back_tx: flume::Sender<Vec<u8>>,
    back: flume::Receiver<Vec<u8>>,
}

/// What a group is, besides its records: where to report a refused record at once (the
/// writer's store is poisoned right away; start-up reports through its finish), recovery's
/// replay, and what to do once applied.
pub(crate) struct Handed {
    /// The records, back to back; `recs` are their ranges.
    pub buf: Vec<u8>,
    pub recs: Vec<(usize, usize)>,
    /// Set during recovery only.
    pub replay: Option<Arc<ReplayFrom>>,
    /// The store to poison as soon as a record is refused (the writer's groups).
    pub poison: Option<Arc<Published>>,
    pub finish: Finish,
}

impl Applier {
    /// Start the apply threads over `features` (`storage.features_from_events`,
    /// `apply_threads`, `apply_in_place_bytes` of `cfg`).
    pub(crate) fn start(features: Arc<Features>, cfg: &StorageConfig) -> std::io::Result<Applier> {
        let (back_tx, back) = flume::bounded(crate::features::parallel::MAX_OUT + 1);
        Ok(Applier {
            threads: ApplyThreads::start(features, cfg.apply_threads)?,
            from_events: cfg.features_from_events,
            in_place_bytes: cfg.apply_in_place_bytes,
            back_tx,
            back,
        })
    }

    /// How many threads apply.
    pub(crate) fn threads(&self) -> usize {
        self.threads.parts()
    }

    /// Hand a group over: to the threads, or applied here if it is small (after the groups
    /// out, so in log order either way). Its finish runs once it is applied.
    pub(crate) fn hand_over(&mut self, g: Handed) {
        let small = g.buf.len() < self.in_place_bytes;
        let group = LogGroup::new(g, self.from_events, self.back_tx.clone());
        if small {
            self.threads.apply_here(&group);
        } else {
            self.threads.submit(Arc::new(group));
        }
    }

    /// An empty buffer for the next group: one a finished group gave back, or a new one.
    pub(crate) fn spare(&self) -> Vec<u8> {
        self.back.try_recv().unwrap_or_default()
    }

    /// Wait until every group handed over is applied and finished: the tables are as the
    /// log has them (the exact budget check, a feature write's "found", a reset).
    pub(crate) fn settle(&self) {
        self.threads.settle();
    }

    /// Let the groups out finish, and stop the threads.
    pub(crate) fn stop(&mut self) {
        self.threads.stop();
    }
}
