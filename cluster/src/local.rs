//! The node's local copy: its `vx-storage` store, as the apply loop ([`crate::apply`]) uses
//! it. A consumed record is decoded ([`crate::wire`]) and queued into the store with its
//! origin (topic, partition, offset) and the append time it carries, through the store's
//! ordered [`Store::submit`]; what it stored that carries an entity becomes the records to
//! route to `T.entities`.

use crate::apply::{Applied, Applying, LocalCopy};
use crate::error::LocalError;
use crate::outcomes::Outcome;
use crate::txn::{OutRecord, Topic};
use crate::wire::{self, Body};
use std::collections::BTreeMap;
use tokio::runtime::Handle;
use vx_proto::{Batch, EventView, packed};
use vx_storage::{
    FeatureOp, FeatureWrite, Origin, OriginTopic, ReadQuery, Store, Submit, Submitted, WriteError,
    WriteRequest,
};

/// The local store as a [`LocalCopy`].
pub struct StoreCopy {
    store: Store,
    runtime: Handle,
}

impl StoreCopy {
    pub fn new(store: Store, runtime: Handle) -> StoreCopy {
        StoreCopy { store, runtime }
    }
}

fn origin_topic(t: Topic) -> OriginTopic {
    match t {
        Topic::Streams => OriginTopic::Streams,
        Topic::Entities => OriginTopic::Entities,
    }
}

/// Records for `T.entities` from events stored in `stream` (those with an entity), grouped
/// by the entity's shard, appended to `by_shard`.
fn collect_entities<'a>(
    by_shard: &mut BTreeMap<u32, Batch>,
    shards: u32,
    events: impl Iterator<Item = EventView<'a>>,
) -> Result<(), LocalError> {
    for ev in events {
        let Some(entity) = ev.entity else { continue };
        let q = vx_proto::shard::shard_of(entity, shards);
        by_shard.entry(q).or_default().push(&ev)?;
    }
    Ok(())
}

fn route_records(by_shard: BTreeMap<u32, Batch>, append_ms: i64) -> Vec<OutRecord> {
    by_shard
        .into_iter()
        .filter_map(|(q, b)| {
            wire::encode_events(&b, None, append_ms, None, true).map(|value| OutRecord {
                topic: Topic::Entities,
                partition: q,
                value,
            })
        })
        .collect()
}

fn failed(message: impl Into<String>) -> Applying {
    let outcome = Outcome::Failed {
        message: message.into(),
    };
    Box::pin(async move { alone(outcome) })
}

/// An outcome with no records to route.
fn alone(outcome: Outcome) -> Applied {
    Applied {
        outcome,
        route: Vec::new(),
    }
}

/// The store answered a submission with the answer of another kind of submission.
fn other_kind() -> Outcome {
    Outcome::Failed {
        message: "internal: the store answered another kind".into(),
    }
}

/// The outcome of a write, as the owner reports it.
fn write_outcome(r: Result<vx_storage::WriteOutcome, WriteError>) -> Outcome {
    match r {
        Ok(o) => Outcome::Stored {
            accepted: o.accepted,
            duplicates: o.duplicates,
            last_seq: o.last_seq,
        },
        Err(WriteError::Conflict {
            stream, last_seq, ..
        }) => Outcome::Conflict { stream, last_seq },
        Err(e) => Outcome::Failed {
            message: e.to_string(),
        },
    }
}

impl LocalCopy for StoreCopy {
    fn applied(&self, topic: Topic, partition: u32) -> Option<u64> {
        self.store.applied_offset(origin_topic(topic), partition)
    }

    fn reset(&self, topic: Topic, partition: u32) -> Result<(), LocalError> {
        Ok(self
            .runtime
            .block_on(self.store.reset_shard(origin_topic(topic), partition))?)
    }

    fn submit(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        value: &[u8],
        route: bool,
    ) -> Result<Applying, LocalError> {
        let record = match wire::decode(value) {
            Ok(r) => r,
            // A record nobody can apply: said as such, never skipped silently.
            Err(e) => return Ok(failed(format!("offset {offset}: {e}"))),
        };
        let origin = Origin {
            topic: origin_topic(topic),
            partition,
            offset,
        };
        let append_ms = record.append_ms;
        let shards = self.store.shards();
        let submit = |s| self.store.submit(s).map_err(LocalError::from);
        match (topic, record.body) {
            (
                Topic::Streams,
                Body::Events {
                    batch,
                    expected_last_seq,
                },
            ) => {
                // What to route if nothing turns out to be a duplicate: the request's own
                // events with an entity. Otherwise the stored ones are read back.
                let mut by_shard = BTreeMap::new();
                if route {
                    collect_entities(&mut by_shard, shards, batch.iter())?;
                }
                let ticket = submit(Submit::Write(WriteRequest {
                    batch,
                    durability: None,
                    expected_last_seq,
                    guard: None,
                    origin: Some(origin),
                    append_ms: Some(append_ms),
                }))?;
                let store = self.store.clone();
                Ok(Box::pin(async move {
                    let Submitted::Write(r) = ticket.await else {
                        return alone(other_kind());
                    };
                    let stored = r.as_ref().ok().map(|o| (o.duplicates, o.stored.clone()));
                    let outcome = write_outcome(r);
                    let mut route_out = Vec::new();
                    if route && let Some((dups, stored)) = stored {
                        if dups > 0 {
                            by_shard.clear();
                            if let Err(e) = read_back(&store, shards, &stored, &mut by_shard) {
                                tracing::error!(partition, offset, error = %e, "cannot read back stored events to route them");
                            }
                        }
                        route_out = route_records(by_shard, append_ms);
                    }
                    Applied {
                        outcome,
                        route: route_out,
                    }
                }))
            }
            (Topic::Streams, Body::Delete { stream }) => {
                let ticket = submit(Submit::Delete {
                    stream,
                    origin,
                    append_ms,
                })?;
                Ok(Box::pin(async move {
                    let outcome = match ticket.await {
                        Submitted::Delete(Ok(d)) => Outcome::Deleted {
                            last_seq: d.last_seq,
                        },
                        Submitted::Delete(Err(WriteError::NotFound { .. })) => Outcome::NotFound,
                        Submitted::Delete(Err(e)) => Outcome::Failed {
                            message: e.to_string(),
                        },
                        _ => other_kind(),
                    };
                    alone(outcome)
                }))
            }
            (Topic::Entities, Body::EntityEvents { batch }) => {
                let ticket = submit(Submit::EntityEvents {
                    batch,
                    origin,
                    append_ms,
                })?;
                Ok(Box::pin(async move {
                    let outcome = match ticket.await {
                        Submitted::EntityEvents(Ok(())) => Outcome::Features,
                        Submitted::EntityEvents(Err(e)) => Outcome::Failed {
                            message: e.to_string(),
                        },
                        _ => other_kind(),
                    };
                    alone(outcome)
                }))
            }
            (
                Topic::Entities,
                body @ (Body::FeaturePut { .. }
                | Body::FeatureDelete { .. }
                | Body::FeatureIncr { .. }),
            ) => {
                let (entity, op) = match body {
                    Body::FeaturePut { entity, set } => (entity, FeatureOp::Put(set)),
                    Body::FeatureDelete { entity, name } => {
                        let op = FeatureOp::Delete(vec![(entity.clone(), name)]);
                        (entity, op)
                    }
                    Body::FeatureIncr { entity, name, by } => {
                        (entity, FeatureOp::Incr { name, by })
                    }
                    _ => return Ok(failed("internal: not a feature write")),
                };
                let ticket = submit(Submit::Feature(FeatureWrite {
                    entity,
                    op,
                    durability: None,
                    guard: None,
                    origin: Some(origin),
                    append_ms: Some(append_ms),
                }))?;
                Ok(Box::pin(async move {
                    let outcome = match ticket.await {
                        Submitted::Feature(Ok(o)) => Outcome::Feature {
                            set: o.set,
                            added: o.added,
                            deleted: o.deleted,
                            found: o.found,
                            incremented: o.incremented,
                        },
                        Submitted::Feature(Err(e)) => Outcome::Failed {
                            message: e.to_string(),
                        },
                        _ => other_kind(),
                    };
                    alone(outcome)
                }))
            }
            (t, body) => Ok(failed(format!(
                "offset {offset}: a {} record in {t:?}",
                match body {
                    Body::Events { .. } => "events",
                    Body::Delete { .. } => "stream delete",
                    Body::EntityEvents { .. } => "entity events",
                    Body::FeaturePut { .. } => "feature put",
                    Body::FeatureDelete { .. } => "feature delete",
                    Body::FeatureIncr { .. } => "feature increment",
                }
            ))),
        }
    }

    fn stored_since(
        &self,
        partition: u32,
        from: u64,
        through: u64,
    ) -> Result<Vec<OutRecord>, LocalError> {
        let shards = self.store.shards();
        let records =
            self.store
                .records_by_origin(OriginTopic::Streams, partition, from, through)?;
        let mut out = Vec::new();
        for r in records {
            let mut by_shard = BTreeMap::new();
            for (stream, events) in &r.runs {
                let evs = packed::events(events, stream)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(LocalError::Decode)?;
                collect_entities(&mut by_shard, shards, evs.into_iter())?;
            }
            // At the time the first routing would have used: the record's own.
            out.extend(route_records(by_shard, r.append_ms));
        }
        Ok(out)
    }
}

/// Read back the events a write stored (those of `stored`), into entity records.
fn read_back(
    store: &Store,
    shards: u32,
    stored: &[vx_storage::StoredRun],
    by_shard: &mut BTreeMap<u32, Batch>,
) -> Result<(), LocalError> {
    for run in stored {
        let q = ReadQuery {
            from: Some(run.first_seq),
            to: Some(run.first_seq + run.count - 1),
            limit: run.count,
            ..ReadQuery::default()
        };
        let Some(mut cursor) = store.read(&run.stream, q) else {
            return Err(LocalError::Vanished(run.stream.clone()));
        };
        let mut evs: Vec<Vec<u8>> = Vec::new();
        while let Some((_, ev)) = cursor.next_event()? {
            let mut buf = Vec::new();
            packed::encode_event(&mut buf, &ev)?;
            evs.push(buf);
        }
        let views = evs
            .iter()
            .map(|b| packed::decode_event(b, &run.stream).map(|(ev, _)| ev))
            .collect::<Result<Vec<_>, _>>()
            .map_err(LocalError::Decode)?;
        collect_entities(by_shard, shards, views.into_iter())?;
    }
    Ok(())
}
