//! Cluster mode's positions as the writer applies them: per (topic, partition) the largest
//! origin offset applied (what the index files record, and readers see once published), and
//! per shard the LSN of the last reset of its streams. Single-node mode leaves both empty.

use crate::api::{Origin, OriginTopic};
use std::collections::BTreeMap;

#[derive(Default)]
pub(crate) struct Origins {
    /// Per (topic, partition), the largest origin offset applied ([`crate::log::source`]).
    pub(crate) applied: BTreeMap<(OriginTopic, u32), u64>,
    /// `applied` changed since it was last taken ([`Origins::take_changed`]).
    pub(crate) changed: bool,
    /// Per shard: the LSN of the last reset of its streams (0: never). Records before it
    /// hold nothing of the shard that counts any more (retention, the dedup refill).
    pub(crate) resets: Vec<u64>,
}

impl Origins {
    /// No origin applied, no shard of `shards` reset.
    pub(crate) fn new(shards: u32) -> Origins {
        Origins {
            resets: vec![0; shards as usize],
            ..Origins::default()
        }
    }

    /// An origin was applied: its partition's offset moves on (never back).
    pub(crate) fn applied(&mut self, o: Origin) {
        let at = self
            .applied
            .entry((o.topic, o.partition))
            .or_insert(o.offset);
        *at = (*at).max(o.offset);
        self.changed = true;
    }

    /// A reset forgets what its shard applied of its topic.
    pub(crate) fn forgotten(&mut self, topic: OriginTopic, partition: u32) {
        if self.applied.remove(&(topic, partition)).is_some() {
            self.changed = true;
        }
    }

    /// The streams of `shard` were reset at `lsn`.
    pub(crate) fn reset(&mut self, shard: u32, lsn: u64) {
        if let Some(r) = self.resets.get_mut(shard as usize) {
            *r = (*r).max(lsn);
        }
    }

    /// Whether `shard`'s streams were reset at or after `next_lsn`.
    pub(crate) fn reset_after(&self, shard: u32, next_lsn: u64) -> bool {
        self.resets
            .get(shard as usize)
            .is_some_and(|&r| r >= next_lsn)
    }

    /// The applied origins as a list (what an index file records).
    pub(crate) fn list(&self) -> Vec<Origin> {
        Origin::list(&self.applied)
    }

    /// The shards whose streams were ever reset, with the LSN of the last reset.
    pub(crate) fn resets_list(&self) -> Vec<(u32, u64)> {
        (0u32..)
            .zip(&self.resets)
            .filter(|&(_, &lsn)| lsn > 0)
            .map(|(shard, &lsn)| (shard, lsn))
            .collect()
    }

    /// The applied origins, if they changed since they were last taken.
    pub(crate) fn take_changed(&mut self) -> Option<BTreeMap<(OriginTopic, u32), u64>> {
        std::mem::take(&mut self.changed).then(|| self.applied.clone())
    }
}
