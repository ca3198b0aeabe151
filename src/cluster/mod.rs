//! This node's cluster handle (docs/CLUSTER.md): the `vx-cluster` node, the HTTP client the
//! nodes ask each other with, and how a write's outcome is awaited from the owner of its
//! partition, here or elsewhere. It speaks no HTTP of its own: the write path
//! (`crate::write`) produces through it, and `crate::http::cluster` forwards reads with it.

pub mod read;
pub mod streams;

use crate::failure::Failure;
use axum::http::HeaderValue;
use std::sync::Arc;
use std::time::Duration;
use vx_cluster::ingest::ProduceError;
use vx_cluster::outcomes::{Lookup, Outcome};
use vx_cluster::position::Position;
use vx_cluster::txn::{OutRecord, Topic};
use vx_cluster::{Node, Route};
use vx_proto::ErrorCode;

/// Names the node that forwarded a request (so that the owner never forwards it again).
pub const FORWARDED: &str = "x-vx-forwarded";
/// Names the node that owns the shard and answered (after any forwarding).
pub const NODE: &str = "x-vx-node";
/// The owners' internal route: what applying a record did (served by `crate::http::cluster`).
pub const OUTCOME: &str = "/v1/cluster/outcome";
/// A write's position, also in its body.
pub const POSITION: &str = "x-vx-position";
/// On a read: wait until the shard's owner has applied this position.
pub const MIN_POSITION: &str = "x-vx-min-position";

/// How long a write with `applied` waits for its owners, a read for its minimum position or
/// for a shard that is moving, and a request for Kafka to take it.
pub const WAIT: Duration = Duration::from_secs(10);

/// This node's cluster handle, shared by the HTTP handlers.
pub struct Cluster {
    pub node: Arc<Node>,
    client: reqwest::Client,
    /// Reads forwarded to another node (`vx_cluster_forwarded_requests_total`).
    pub forwarded: std::sync::atomic::AtomicU64,
}

/// What a write came to: its position, and with `applied` what each record did, in the
/// order of the records.
pub struct Written {
    pub position: Position,
    pub applied: Option<Vec<Outcome>>,
}

impl Cluster {
    pub fn new(node: Arc<Node>) -> Result<Cluster, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Cluster {
            node,
            client,
            forwarded: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// This node's name, for `X-Vx-Node`.
    pub fn node_header(&self) -> HeaderValue {
        HeaderValue::from_str(&self.node.settings.node)
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
    }

    /// Produce a write's records in one transaction; with `applied`, wait for each owner's
    /// outcome. `auth` is the client's `Authorization`, passed on to other owners.
    pub async fn write(
        &self,
        records: Vec<OutRecord>,
        applied: bool,
        auth: Option<&HeaderValue>,
    ) -> Result<Written, Failure> {
        let keys: Vec<(Topic, u32)> = records.iter().map(|r| (r.topic, r.partition)).collect();
        let offsets = self
            .node
            .produce(records, WAIT)
            .await
            .map_err(produce_error)?;
        let mut position = Position::new();
        for (&(topic, partition), &offset) in keys.iter().zip(&offsets) {
            position.add(topic, partition, offset);
        }
        if !applied {
            return Ok(Written {
                position,
                applied: None,
            });
        }
        let waits = keys
            .iter()
            .zip(&offsets)
            .map(|(&(topic, partition), &offset)| self.outcome(topic, partition, offset, auth));
        let outcomes = futures_util::future::try_join_all(waits).await?;
        Ok(Written {
            position,
            applied: Some(outcomes),
        })
    }

    /// What applying `offset` of `partition` did, from its owner (here or elsewhere),
    /// waiting for it at most [`WAIT`].
    pub async fn outcome(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        auth: Option<&HeaderValue>,
    ) -> Result<Outcome, Failure> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match self.node.route(topic, partition) {
                Route::Local | Route::CatchingUp => {
                    let outcomes = self.node.outcomes();
                    let entities = topic == Topic::Entities;
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    outcomes
                        .wait_for(left, |o| o.is_applied(entities, partition, offset))
                        .await;
                    match outcomes.lookup(entities, partition, offset) {
                        Lookup::Applied(o) => return Ok(o),
                        Lookup::Forgotten => return Err(forgotten(partition, offset)),
                        // Still pending here; the partition may have moved meanwhile.
                        Lookup::Pending => {}
                    }
                }
                Route::Remote(owner) => {
                    match self
                        .remote_outcome(&owner.url, topic, partition, offset, deadline, auth)
                        .await
                    {
                        Ok(Some(o)) => return Ok(o),
                        Ok(None) => {}
                        Err(e) => return Err(e),
                    }
                }
                Route::Unknown => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(not_applied(partition));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn remote_outcome(
        &self,
        url: &str,
        topic: Topic,
        partition: u32,
        offset: u64,
        deadline: tokio::time::Instant,
        auth: Option<&HeaderValue>,
    ) -> Result<Option<Outcome>, Failure> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let topic_name = match topic {
            Topic::Streams => "streams",
            Topic::Entities => "entities",
        };
        let mut req = self
            .client
            .get(format!(
                "{url}{}?topic={topic_name}&partition={partition}&offset={offset}&wait_ms={}",
                OUTCOME,
                left.as_millis()
            ))
            .header(FORWARDED, self.node_header())
            .timeout(left + Duration::from_secs(2));
        if let Some(a) = auth {
            req = req.header(axum::http::header::AUTHORIZATION, a.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            // The owner is down or moving: ask again (the partition will move).
            Err(e) => {
                tracing::debug!(url, error = %e, "asking an owner for an outcome failed");
                return Ok(None);
            }
        };
        match resp.status().as_u16() {
            200 => {
                resp.json::<Outcome>().await.map(Some).map_err(|e| {
                    Failure::new(ErrorCode::Internal, format!("an owner's outcome: {e}"))
                })
            }
            404 => Err(forgotten(partition, offset)),
            // 503 pending, or not the owner any more: ask again.
            _ => Ok(None),
        }
    }
}

fn produce_error(e: ProduceError) -> Failure {
    match e {
        ProduceError::Full => Failure::backpressure(
            1000,
            "the Kafka producer's queue is full: retry after Retry-After",
        ),
        ProduceError::Unavailable(m) => Failure::new(
            ErrorCode::NotReady,
            format!("Kafka did not take the write: {m}"),
        )
        .retry_after(1000),
        ProduceError::Refused(m) => {
            Failure::new(ErrorCode::TooLarge, format!("Kafka refused the write: {m}"))
        }
    }
}

fn not_applied(partition: u32) -> Failure {
    Failure::new(
        ErrorCode::NotReady,
        format!(
            "the write is in Kafka, but partition {partition}'s owner did not apply it within {} s; \
             it will be applied — read with its X-Vx-Position to see it",
            WAIT.as_secs()
        ),
    )
    .retry_after(1000)
}

fn forgotten(partition: u32, offset: u64) -> Failure {
    Failure::new(
        ErrorCode::Internal,
        format!("partition {partition} applied offset {offset} too long ago to say what it did"),
    )
}
