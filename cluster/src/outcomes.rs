//! What applying a record did, kept by its partition's owner for a while so that the node
//! that produced it can answer `X-Vx-Durability: applied` (docs/CLUSTER.md, "Writes"), and
//! how far each partition is applied, so that a read with `X-Vx-Min-Position` can wait for it.
//!
//! Bounded: the outcomes of the last [`KEEP`] records per partition; an older one is
//! reported as [`Lookup::Forgotten`] (the caller answers with what it knows: the write is in
//! Kafka, applied, its details no longer kept).

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Outcomes kept per partition.
pub const KEEP: usize = 4096;

/// What one applied record did (the single-node answer of docs/API.md §3, per partition).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Stored: newly stored events, duplicates, and per stream the last seq.
    Stored {
        accepted: u64,
        duplicates: u64,
        last_seq: Vec<(String, u64)>,
    },
    /// A conditional write whose expectation failed: nothing stored.
    Conflict { stream: String, last_seq: u64 },
    /// A stream deleted, at its last seq.
    Deleted { last_seq: u64 },
    /// A delete of a stream that does not exist.
    NotFound,
    /// Entity events: applied to the feature tables.
    Features,
    /// A feature write (`PUT`, feature `DELETE`): features set (`added`: of them, new ones)
    /// and removed, and whether the entity (for a delete of one feature: the feature)
    /// existed, as single-node mode answers.
    Feature {
        set: u64,
        added: u64,
        deleted: u64,
        found: bool,
        /// An increment's outcome (`HINCRBY`): the new value, or why the value was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        incremented: Option<vx_storage::features::Incremented>,
    },
    /// The local store refused it (a bug or a broken disk; the node is not ready).
    Failed { message: String },
}

/// The answer to "what did applying this record do?".
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    Applied(Outcome),
    /// Applied long enough ago that its outcome is no longer kept.
    Forgotten,
    /// Not applied (yet) on this node.
    Pending,
}

#[derive(Default)]
struct Partition {
    /// (offset, outcome), oldest first.
    recent: VecDeque<(u64, Outcome)>,
    /// Every offset ≤ this is applied (or skipped: transaction markers).
    applied_through: Option<u64>,
}

/// The outcomes and applied positions of every partition this node applies.
#[derive(Clone)]
pub struct Outcomes {
    parts: Arc<Mutex<HashMap<(bool, u32), Partition>>>,
    /// Bumped on every change: waiters re-check.
    changed: watch::Sender<u64>,
}

impl Default for Outcomes {
    fn default() -> Self {
        Outcomes {
            parts: Arc::default(),
            changed: watch::channel(0).0,
        }
    }
}

impl Outcomes {
    /// A record of `T` (`entities: false`) or `T.entities` was applied at `offset`.
    pub fn record(&self, entities: bool, partition: u32, offset: u64, outcome: Outcome) {
        {
            let mut parts = self.parts.lock();
            let p = parts.entry((entities, partition)).or_default();
            if p.recent.len() == KEEP {
                p.recent.pop_front();
            }
            p.recent.push_back((offset, outcome));
            p.applied_through = Some(p.applied_through.map_or(offset, |a| a.max(offset)));
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Everything up to `offset` is applied (used when a partition is found caught up).
    pub fn applied_through(&self, entities: bool, partition: u32, offset: u64) {
        {
            let mut parts = self.parts.lock();
            let p = parts.entry((entities, partition)).or_default();
            p.applied_through = Some(p.applied_through.map_or(offset, |a| a.max(offset)));
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The partition is no longer applied here: forget it.
    pub fn forget(&self, entities: bool, partition: u32) {
        self.parts.lock().remove(&(entities, partition));
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub fn lookup(&self, entities: bool, partition: u32, offset: u64) -> Lookup {
        let parts = self.parts.lock();
        let Some(p) = parts.get(&(entities, partition)) else {
            return Lookup::Pending;
        };
        if p.applied_through.is_none_or(|a| a < offset) {
            return Lookup::Pending;
        }
        match p.recent.binary_search_by_key(&offset, |(o, _)| *o) {
            Ok(i) => p
                .recent
                .get(i)
                .map_or(Lookup::Forgotten, |(_, o)| Lookup::Applied(o.clone())),
            Err(_) => Lookup::Forgotten,
        }
    }

    /// Whether everything up to `offset` of the partition is applied here.
    pub fn is_applied(&self, entities: bool, partition: u32, offset: u64) -> bool {
        self.parts
            .lock()
            .get(&(entities, partition))
            .and_then(|p| p.applied_through)
            .is_some_and(|a| a >= offset)
    }

    /// Wait, at most `limit`, until `f` holds; returns whether it does.
    pub async fn wait_for(&self, limit: Duration, f: impl Fn(&Outcomes) -> bool) -> bool {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if f(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return f(self),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn outcomes_are_kept_bounded_and_found_by_offset() {
        let o = Outcomes::default();
        assert_eq!(o.lookup(false, 0, 5), Lookup::Pending);
        for off in 0..(KEEP as u64 + 10) {
            o.record(false, 0, off, Outcome::NotFound);
        }
        assert_eq!(o.lookup(false, 0, 3), Lookup::Forgotten);
        assert_eq!(
            o.lookup(false, 0, KEEP as u64),
            Lookup::Applied(Outcome::NotFound)
        );
        assert_eq!(o.lookup(false, 0, KEEP as u64 + 10), Lookup::Pending);
        assert!(o.is_applied(false, 0, 100));
        assert!(!o.is_applied(true, 0, 0));
        o.forget(false, 0);
        assert_eq!(o.lookup(false, 0, 100), Lookup::Pending);
    }

    #[tokio::test]
    async fn waiters_wake_when_applied() {
        let o = Outcomes::default();
        let w = o.clone();
        let waiter = tokio::spawn(async move {
            w.wait_for(Duration::from_secs(10), |o| o.is_applied(false, 1, 7))
                .await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        o.applied_through(false, 1, 7);
        assert!(waiter.await.unwrap());
        assert!(
            !o.wait_for(Duration::from_millis(10), |o| o.is_applied(false, 1, 8))
                .await
        );
    }
}
