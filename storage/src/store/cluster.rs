//! What cluster mode adds to [`Store`]: entity events (events for the feature tables only),
//! discarding one shard's local copy (a reset), and the applied origins: per Kafka
//! partition, the largest offset the local store has applied, restored exactly at start-up.

use super::Store;
use crate::api::{
    DeleteOutcome, FeatureOutcome, FeatureWrite, Origin, OriginTopic, WriteError, WriteOutcome,
    WriteRequest,
};
use crate::log::writer::Msg;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::oneshot;
use vx_proto::Batch;

/// One request of cluster mode's apply loop, for [`Store::submit`].
pub enum Submit {
    Write(WriteRequest),
    Feature(FeatureWrite),
    Delete {
        stream: String,
        origin: Origin,
        append_ms: i64,
    },
    EntityEvents {
        batch: Batch,
        origin: Origin,
        append_ms: i64,
    },
}

/// What a [`Submit`] came to.
#[derive(Debug)]
pub enum Submitted {
    Write(Result<WriteOutcome, WriteError>),
    Feature(Result<FeatureOutcome, WriteError>),
    Delete(Result<DeleteOutcome, WriteError>),
    EntityEvents(Result<(), WriteError>),
}

/// A record applied from a Kafka partition, read back from the log: its offset and what it
/// stored, per stream (the events in the layout of `vx_proto::packed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginRecord {
    pub offset: u64,
    /// The record's append time (for cluster records, the one their Kafka record carried).
    pub append_ms: i64,
    pub runs: Vec<(String, Vec<u8>)>,
}

/// The answer to a submitted request, resolving once it is applied (or refused).
pub type Ticket = Pin<Box<dyn Future<Output = Submitted> + Send>>;

impl Store {
    /// Queue a request for the writer now, blocking while its channel is full, and return
    /// what resolves once it is applied: for the apply loop of cluster mode, which must
    /// queue the records of a partition in offset order without waiting for each (the
    /// writer takes its channel in order). Call it from a thread of its own, never from an
    /// async task.
    pub fn submit(&self, request: Submit) -> Result<Ticket, WriteError> {
        if let Some(e) = self.refuse_early() {
            return Err(e);
        }
        let shut = |_| WriteError::ShuttingDown;
        Ok(match request {
            Submit::Write(mut req) => {
                if !req.batch.is_prepared_for(self.inner.shards) {
                    self.prepare(&mut req.batch);
                }
                let (tx, rx) = oneshot::channel();
                self.inner
                    .tx
                    .send(Msg::Write(
                        req,
                        tx,
                        tracing::Span::none(),
                        std::time::Instant::now(),
                    ))
                    .map_err(shut)?;
                Box::pin(async move {
                    Submitted::Write(rx.await.unwrap_or(Err(WriteError::ShuttingDown)))
                })
            }
            Submit::Feature(fw) => {
                let (tx, rx) = oneshot::channel();
                self.inner.tx.send(Msg::Feature(fw, tx)).map_err(shut)?;
                Box::pin(async move {
                    Submitted::Feature(rx.await.unwrap_or(Err(WriteError::ShuttingDown)))
                })
            }
            Submit::Delete {
                stream,
                origin,
                append_ms,
            } => {
                let (tx, rx) = oneshot::channel();
                self.inner
                    .tx
                    .send(Msg::Delete {
                        stream,
                        durability: None,
                        origin: Some(origin),
                        append_ms: Some(append_ms),
                        reply: tx,
                    })
                    .map_err(shut)?;
                Box::pin(async move {
                    Submitted::Delete(rx.await.unwrap_or(Err(WriteError::ShuttingDown)))
                })
            }
            Submit::EntityEvents {
                batch,
                origin,
                append_ms,
            } => {
                self.check_shard(origin.partition)?;
                let (tx, rx) = oneshot::channel();
                self.inner
                    .tx
                    .send(Msg::EntityEvents {
                        batch,
                        origin,
                        append_ms: Some(append_ms),
                        reply: tx,
                    })
                    .map_err(shut)?;
                Box::pin(async move {
                    Submitted::EntityEvents(rx.await.unwrap_or(Err(WriteError::ShuttingDown)))
                })
            }
        })
    }

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
                append_ms: None,
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
        Origin::list(&self.inner.shared.origins.read())
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

    /// The event records applied from `topic`'s `partition` at offsets `from ..= through`,
    /// read back from the log in offset order (blocking). For cluster mode's apply loop,
    /// which routes what a record stored and, after a crash between storing and routing,
    /// must route it from what the log holds. Segments are read newest first, each from its
    /// start, until one holds an offset at or below `from`: the records wanted are usually
    /// in the active segment.
    pub fn records_by_origin(
        &self,
        topic: OriginTopic,
        partition: u32,
        from: u64,
        through: u64,
    ) -> Result<Vec<OriginRecord>, crate::api::ReadError> {
        use crate::log::record::{self, RecordType};
        use crate::log::recovery::{Walk, read_records};
        let segments = &self.inner.shared.segments;
        let mut found: Vec<OriginRecord> = Vec::new();
        let mut all = segments.all();
        all.sort_by_key(|s| std::cmp::Reverse(s.first_lsn));
        for seg in all {
            let file = segments.log_file(seg.first_lsn)?;
            let path = crate::log::segment::segment_path(&segments.log_dir, seg.first_lsn);
            let mut reached = false;
            let mut bad: Option<(u64, String)> = None;
            let walked = read_records(&*file, &path, seg.log_len, &mut |off, item| {
                let (h, rec) = match item {
                    Walk::Record(h, rec) => (h, rec),
                    Walk::Bad(why) => {
                        bad = Some((off, why.to_string()));
                        return false;
                    }
                };
                let Ok(Some(o)) = record::origin(&h, rec) else {
                    return true;
                };
                if o.topic != topic || o.partition != partition {
                    return true;
                }
                reached |= o.offset <= from;
                if h.ty != RecordType::Events || o.offset < from || o.offset > through {
                    return true;
                }
                let mut runs = Vec::new();
                for r in record::runs(rec, h.n) {
                    match r {
                        Ok(r) => runs.push((r.stream.to_string(), r.events.to_vec())),
                        Err(e) => {
                            bad = Some((off, format!("{e:?}")));
                            return false;
                        }
                    }
                }
                found.push(OriginRecord {
                    offset: o.offset,
                    append_ms: h.append_ms,
                    runs,
                });
                true
            });
            if let Err(e) = walked {
                return Err(crate::api::ReadError::Corrupt {
                    file: path,
                    offset: 0,
                    reason: e.to_string(),
                });
            }
            if let Some((offset, reason)) = bad {
                return Err(crate::api::ReadError::Corrupt {
                    file: path,
                    offset,
                    reason,
                });
            }
            if reached {
                break;
            }
        }
        found.sort_by_key(|r| r.offset);
        found.dedup_by_key(|r| r.offset);
        Ok(found)
    }
}
