//! Cluster mode's writes (docs/CLUSTER.md, "Writes"): admitted by the router like any write
//! (the queued-byte budget and the per-shard marks bound what waits for Kafka), turned into
//! one record per partition ([`vx_cluster::wire`]), produced in one transaction, and
//! answered as single-node mode answers.
//!
//! Truthful answers: a write whose answer depends on what its owner will find — a
//! conditional write (`X-Vx-Expected-Last-Seq`), a stream delete, a feature delete, a `PUT`
//! that removes features, an increment (whose answer is the sum) — waits for its apply
//! outcome whatever durability it asked for, so that a 200 is never given for a write that
//! is then dropped, and a 404, a count or a sum is the owner's. Other writes wait only with
//! `X-Vx-Durability: applied`.

use super::{
    Change, Events, Features, FeaturesWritten, Pending, Reached, Refusal, StreamDeleted, Written,
    not_found, unknown_target,
};
use crate::cluster::{Cluster, Written as Produced};
use crate::failure::Failure;
use std::sync::Arc;
use vx_cluster::outcomes::Outcome;
use vx_cluster::txn::{OutRecord, Topic};
use vx_cluster::wire;
use vx_proto::ErrorCode;
use vx_router::{Reservation, Router};
use vx_storage::WriteError;
use vx_sys::now_ms;

/// The level a write reached, for its answer.
fn level(applied: bool) -> Reached {
    if applied {
        Reached::Applied
    } else {
        Reached::Replicated
    }
}

pub(super) fn write(
    cluster: Arc<Cluster>,
    router: &Router,
    events: Events,
    reservation: Reservation,
) -> Pending<Written> {
    let Events {
        batch,
        asked,
        expected_last_seq,
        auth,
    } = events;
    let count = batch.len() as u64;
    let shards = router.shards_of(&batch);
    let queue_fill = router.fill_of(&shards);
    let append_ms = now_ms();
    let records: Vec<OutRecord> = shards
        .iter()
        .filter_map(|&(shard, _)| {
            wire::encode_events(&batch, Some(shard), append_ms, expected_last_seq, false).map(
                |value| OutRecord {
                    topic: Topic::Streams,
                    partition: shard,
                    value,
                },
            )
        })
        .collect();
    // The runs' order, for `last_seq` in first-appearance order.
    let order: Vec<String> = batch
        .runs()
        .iter()
        .map(|r| batch.stream(r).to_string())
        .collect();
    drop(batch);
    let applied = asked.applied || expected_last_seq.is_some();
    Box::pin(async move {
        let produced = cluster.write(records, applied, auth.as_ref()).await;
        drop(reservation);
        let Produced { position, applied } =
            produced.map_err(|f| Refusal::filled(f, queue_fill))?;
        let mut written = Written {
            accepted: count,
            duplicates: None,
            last_seq: None,
            durability: level(false),
            queue_fill,
            position: Some(position),
            stages: vx_storage::Stages::default(),
        };
        if let Some(outcomes) = applied {
            stored(&mut written, outcomes, &order, expected_last_seq)
                .map_err(|f| Refusal::filled(f, queue_fill))?;
        }
        Ok(written)
    })
}

/// The owners' outcomes of a batch's records, as single-node mode's answer.
fn stored(
    written: &mut Written,
    outcomes: Vec<Outcome>,
    order: &[String],
    expected_last_seq: Option<u64>,
) -> Result<(), Failure> {
    let (mut accepted, mut duplicates) = (0, 0);
    let mut last: Vec<(String, u64)> = Vec::new();
    for o in outcomes {
        match o {
            Outcome::Stored {
                accepted: a,
                duplicates: d,
                last_seq,
            } => {
                accepted += a;
                duplicates += d;
                last.extend(last_seq);
            }
            Outcome::Conflict { stream, last_seq } => {
                return Err(Failure::from(WriteError::Conflict {
                    stream,
                    expected: expected_last_seq.unwrap_or(0),
                    last_seq,
                }));
            }
            other => return Err(owner_failed(&other)),
        }
    }
    last.sort_by_key(|(s, _)| order.iter().position(|o| o == s).unwrap_or(usize::MAX));
    written.accepted = accepted;
    written.duplicates = Some(duplicates);
    written.last_seq = Some(last);
    written.durability = level(true);
    Ok(())
}

/// Refuse a batch with 507 before it is produced, as single-node mode would, from the
/// owners' published usage (docs/CLUSTER.md, "Limits"): a new stream on an owner at
/// `storage.max_streams`, or events with an entity whose owner is at
/// `storage.max_feature_bytes`. What is in flight when an owner reaches a limit still
/// lands: the overshoot is bounded by that, and by one publication interval.
pub(super) async fn limits(
    cluster: &Cluster,
    router: &Router,
    batch: &vx_proto::Batch,
    auth: Option<&axum::http::HeaderValue>,
) -> Result<(), Refusal> {
    let members = cluster.node.members();
    if !members.any_full() {
        return Ok(());
    }
    for run in batch.runs() {
        let stream = batch.stream(run);
        let Some(usage) = members.usage_of(router.shard_of(stream), false) else {
            continue;
        };
        if usage.streams_full()
            && !cluster
                .stream_exists(router, stream, auth)
                .await
                .map_err(Refusal::new)?
        {
            let max = usage.max_streams;
            return Err(Refusal::new(Failure::from(WriteError::TooManyStreams {
                max,
            })));
        }
    }
    let shards = router.store().shards();
    for ev in batch.iter() {
        let Some(entity) = ev.entity else { continue };
        let q = vx_proto::shard::shard_of(entity, shards);
        if let Some(u) = members.usage_of(q, true).filter(|u| u.features_full()) {
            let max = u.max_feature_bytes;
            return Err(Refusal::new(Failure::from(WriteError::FeatureBudget {
                max,
            })));
        }
    }
    Ok(())
}

/// A feature write that sets values, refused when the entity's owner is at its budget.
fn feature_budget(cluster: &Cluster, shard: u32) -> Result<(), Refusal> {
    match cluster.node.members().usage_of(shard, true) {
        Some(u) if u.features_full() => {
            Err(Refusal::new(Failure::from(WriteError::FeatureBudget {
                max: u.max_feature_bytes,
            })))
        }
        _ => Ok(()),
    }
}

pub(super) fn features(
    cluster: Arc<Cluster>,
    router: Router,
    f: Features,
) -> Pending<FeaturesWritten> {
    let shards = router.store().shards();
    let at = now_ms();
    let (records, set, what) = match &f.change {
        Change::Put(set) => {
            let shard = vx_proto::shard::shard_of(&f.entity, shards);
            if set.iter().any(|(_, v)| v.is_some())
                && let Err(r) = feature_budget(&cluster, shard)
            {
                return Box::pin(async move { Err(r) });
            }
            let value = wire::encode_feature_put(&f.entity, set, at);
            let n = set.iter().filter(|(_, v)| v.is_some()).count() as u64;
            (vec![(shard, value)], Some(n), String::new())
        }
        Change::Delete(targets) => {
            let records = targets
                .iter()
                .map(|(entity, name)| {
                    let shard = vx_proto::shard::shard_of(entity, shards);
                    (
                        shard,
                        wire::encode_feature_delete(entity, name.as_deref(), at),
                    )
                })
                .collect();
            (records, None, unknown_target(targets))
        }
        Change::Incr { name, by } => {
            let shard = vx_proto::shard::shard_of(&f.entity, shards);
            if let Err(r) = feature_budget(&cluster, shard) {
                return Box::pin(async move { Err(r) });
            }
            let value = wire::encode_feature_incr(&f.entity, name, *by, at);
            (vec![(shard, value)], Some(1), String::new())
        }
    };
    // A PUT that only sets is answered from what it carries; anything that removes is
    // answered with what the owner removed, and an increment with the sum the owner made.
    let owners = match &f.change {
        Change::Put(set) => set.iter().any(|(_, v)| v.is_none()),
        Change::Delete(_) | Change::Incr { .. } => true,
    };
    let applied = f.asked.applied || owners;
    Box::pin(async move {
        let mut admitted: Vec<(u32, u64)> = Vec::new();
        for (shard, _) in &records {
            match admitted.iter_mut().find(|(s, _)| s == shard) {
                Some((_, n)) => *n += 1,
                None => admitted.push((*shard, 1)),
            }
        }
        let bytes = records.iter().map(|(_, v)| v.len() as u64).sum();
        let reservation = router
            .try_admit(&admitted, bytes)
            .map_err(Refusal::from_router)?;
        let queue_fill = router.fill_of(&admitted);
        let out: Vec<OutRecord> = records
            .into_iter()
            .map(|(partition, value)| OutRecord {
                topic: Topic::Entities,
                partition,
                value,
            })
            .collect();
        let produced = cluster.write(out, applied, f.auth.as_ref()).await;
        drop(reservation);
        let Produced { position, applied } =
            produced.map_err(|e| Refusal::filled(e, queue_fill))?;
        let mut written = FeaturesWritten {
            set: set.unwrap_or(0),
            added: 0,
            deleted: 0,
            found: 0,
            incremented: None,
            durability: level(applied.is_some()),
            position: Some(position),
        };
        let Some(outcomes) = applied else {
            return Ok(written);
        };
        written.set = 0;
        for o in &outcomes {
            let Outcome::Feature {
                set: s,
                added,
                deleted,
                found,
                incremented,
            } = o
            else {
                return Err(Refusal::filled(owner_failed(o), queue_fill));
            };
            written.set += s;
            written.added += added;
            written.deleted += deleted;
            written.found += u64::from(*found);
            written.incremented = written.incremented.or(*incremented);
        }
        if set.is_none() && written.found == 0 {
            return Err(not_found(what));
        }
        Ok(written)
    })
}

pub(super) async fn delete_stream(
    cluster: &Cluster,
    router: &Router,
    stream: &str,
    auth: Option<axum::http::HeaderValue>,
) -> Result<StreamDeleted, Refusal> {
    let record = OutRecord {
        topic: Topic::Streams,
        partition: router.shard_of(stream),
        value: wire::encode_delete(stream, now_ms()),
    };
    // Whether the stream existed is the owner's to say: always wait for it.
    let Produced { position, applied } = cluster
        .write(vec![record], true, auth.as_ref())
        .await
        .map_err(Refusal::new)?;
    match applied.as_deref() {
        Some([Outcome::Deleted { last_seq }]) => Ok(StreamDeleted {
            last_seq: *last_seq,
            durability: level(true),
            position: Some(position),
        }),
        Some([Outcome::NotFound]) => Err(not_found(format!("unknown stream {stream:?}"))),
        Some([other]) => Err(Refusal::new(owner_failed(other))),
        _ => Err(Refusal::new(Failure::new(
            ErrorCode::Internal,
            "one outcome per record expected",
        ))),
    }
}

fn owner_failed(o: &Outcome) -> Failure {
    Failure::new(
        ErrorCode::Internal,
        format!("the write is in Kafka, but its owner did not apply it as expected: {o:?}"),
    )
}
