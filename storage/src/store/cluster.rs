//! What cluster mode adds to [`Store`]: entity events (events for the feature tables only),
//! discarding one shard's local copy (a reset), and the applied origins: per Kafka
//! partition, the largest offset the local store has applied, restored exactly at start-up.

use super::Store;
use crate::api::{Origin, OriginTopic, WriteError};
use crate::log::writer::Msg;
use tokio::sync::oneshot;
use vx_proto::Batch;

impl Store {
    /// Apply `batch`'s events to the feature tables only, as an event batch would in
    /// single-node mode (the built-ins, counters, gauges, declared aggregates): one durable
    /// entity-events record carrying `origin`. No stream is written, no seq assigned, no id
    /// deduplicated. A run's stream is the stream its events were stored in; events without
    /// an entity change nothing. Resolves once the record is applied at the mode's level.
    pub async fn write_entity_events(
        &self,
        batch: Batch,
        origin: Origin,
    ) -> Result<(), WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        self.check_shard(origin.partition)?;
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::EntityEvents {
                batch,
                origin,
                reply: tx,
            })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// Discard the local copy of one shard, durably (a reset record, always fsynced),
    /// to rebuild it from its partition. `Streams`: every stream of the shard is forgotten as
    /// if it never existed (seqs, metadata, listings, carried orphans and tombstones, its ids
    /// in the dedup table); a later write starts it at seq 1; open cursors end, followers see
    /// a delete. `Entities`: the shard of the feature tables is emptied. Either way the
    /// shard's applied origin of that topic is forgotten. The sealed segments holding the old
    /// events stay until retention removes them, but nothing reads them any more.
    pub async fn reset_shard(&self, target: OriginTopic, shard: u32) -> Result<(), WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        self.check_shard(shard)?;
        let (tx, rx) = oneshot::channel();
        self.inner
            .tx
            .send_async(Msg::Reset {
                target,
                shard,
                reply: tx,
            })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.unwrap_or(Err(WriteError::ShuttingDown))
    }

    /// Every partition an origin was applied from, with the largest offset applied, sorted
    /// by (topic, partition). Updated after each group, once its records are visible and in
    /// the feature tables.
    pub fn applied_origins(&self) -> Vec<Origin> {
        self.inner
            .shared
            .origins
            .read()
            .iter()
            .map(|(&(topic, partition), &offset)| Origin {
                topic,
                partition,
                offset,
            })
            .collect()
    }

    /// The largest offset applied of one partition; `None` if none was (or since a reset).
    pub fn applied_offset(&self, topic: OriginTopic, partition: u32) -> Option<u64> {
        self.inner
            .shared
            .origins
            .read()
            .get(&(topic, partition))
            .copied()
    }

    /// A version counter, bumped each time the applied origins change (a group applied
    /// records with origins, a reset forgot one): wait for a change, then look again with
    /// [`Store::applied_offset`]. Subscribe before reading the offset, so that no change
    /// falls in between.
    pub fn watch_origins(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.shared.origins_version.subscribe()
    }

    fn check_shard(&self, shard: u32) -> Result<(), WriteError> {
        if shard < self.inner.shards {
            Ok(())
        } else {
            Err(WriteError::UnknownShard {
                shard,
                shards: self.inner.shards,
            })
        }
    }
}
