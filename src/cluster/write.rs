//! Writes in cluster mode: admitted by the router like any write (the queued-byte budget
//! and the per-shard marks bound what waits for Kafka), turned into one record per
//! partition ([`vx_cluster::wire`]), produced in one transaction, and answered with their
//! position — or, with `X-Vx-Durability: applied`, with what the owners did.

use super::{Cluster, Written};
use crate::http::AppError;
use axum::http::HeaderValue;
use vx_cluster::outcomes::Outcome;
use vx_cluster::position::Position;
use vx_cluster::txn::{OutRecord, Topic};
use vx_cluster::wire;
use vx_proto::Batch;
use vx_router::Router;
use vx_storage::WriteError;
use vx_sys::now_ms;

/// A write Kafka took: what the answer says.
pub struct Took {
    /// Events in the request (`replicated`), or newly stored ones (`applied`).
    pub accepted: u64,
    /// Only with `applied`.
    pub duplicates: Option<u64>,
    pub last_seq: Option<Vec<(String, u64)>>,
    pub position: Position,
    pub queue_fill: f64,
}

/// A refusal and the queue fill to report with it.
pub type Refused = (AppError, f64);

/// Admit a batch of events and produce it; with `applied`, wait for its owners.
pub async fn events(
    cluster: &Cluster,
    router: &Router,
    mut batch: Batch,
    expected_last_seq: Option<u64>,
    applied: bool,
    auth: Option<&HeaderValue>,
) -> Result<Took, Refused> {
    let events = batch.len() as u64;
    router.store().prepare(&mut batch);
    let shards = router.shards_of(&batch);
    let reservation = router
        .try_admit(&shards, batch.mem_bytes() as u64)
        .map_err(AppError::refused)?;
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
    let written = cluster
        .write(records, applied, auth)
        .await
        .map_err(|e| (e, queue_fill));
    drop(reservation);
    let Written { position, applied } = written?;
    let Some(outcomes) = applied else {
        return Ok(Took {
            accepted: events,
            duplicates: None,
            last_seq: None,
            position,
            queue_fill,
        });
    };
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
                let expected = expected_last_seq.unwrap_or(0);
                return Err((
                    AppError::from(WriteError::Conflict {
                        stream,
                        expected,
                        last_seq,
                    }),
                    queue_fill,
                ));
            }
            other => return Err((owner_failed(&other), queue_fill)),
        }
    }
    last.sort_by_key(|(s, _)| order.iter().position(|o| o == s).unwrap_or(usize::MAX));
    Ok(Took {
        accepted,
        duplicates: Some(duplicates),
        last_seq: Some(last),
        position,
        queue_fill,
    })
}

/// What a stream delete came to.
pub struct Deleted {
    pub position: Position,
    /// With `applied`: the stream's last seq (`None`: it did not exist).
    pub last_seq: Option<Option<u64>>,
}

/// Produce a stream delete to the stream's partition.
pub async fn delete(
    cluster: &Cluster,
    shard: u32,
    stream: &str,
    applied: bool,
    auth: Option<&HeaderValue>,
) -> Result<Deleted, AppError> {
    let record = OutRecord {
        topic: Topic::Streams,
        partition: shard,
        value: wire::encode_delete(stream, now_ms()),
    };
    let Written { position, applied } = cluster.write(vec![record], applied, auth).await?;
    let last_seq = match applied.as_deref() {
        None => None,
        Some([Outcome::Deleted { last_seq }]) => Some(Some(*last_seq)),
        Some([Outcome::NotFound]) => Some(None),
        Some([other]) => return Err(owner_failed(other)),
        Some(_) => return Err(AppError::internal("one outcome per record expected")),
    };
    Ok(Deleted { position, last_seq })
}

/// Produce a feature write to the entity's partition of `T.entities`.
pub async fn feature(
    cluster: &Cluster,
    router: &Router,
    entity: &str,
    value: Vec<u8>,
    applied: bool,
    auth: Option<&HeaderValue>,
) -> Result<(Position, f64), Refused> {
    let shard = vx_proto::shard::shard_of(entity, router.store().shards());
    let shards = [(shard, 1)];
    let reservation = router
        .try_admit(&shards, value.len() as u64)
        .map_err(AppError::refused)?;
    let queue_fill = router.fill_of(&shards);
    let record = OutRecord {
        topic: Topic::Entities,
        partition: shard,
        value,
    };
    let written = cluster.write(vec![record], applied, auth).await;
    drop(reservation);
    let Written { position, applied } = written.map_err(|e| (e, queue_fill))?;
    if let Some(outcomes) = applied
        && let Some(bad) = outcomes.iter().find(|o| **o != Outcome::Features)
    {
        return Err((owner_failed(bad), queue_fill));
    }
    Ok((position, queue_fill))
}

fn owner_failed(o: &Outcome) -> AppError {
    AppError::internal(format!(
        "the write is in Kafka, but its owner did not apply it as expected: {o:?}"
    ))
}
