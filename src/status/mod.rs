//! The status snapshot behind `GET /v1/status` (and so the status page at `/`): one compact,
//! bounded JSON document built from what the service already keeps — the metrics' counters
//! ([`crate::metrics::Metrics::totals`]), the router's queue gauges, the live hub's snapshot and
//! the store's log stats and largest streams. No per-stream metrics: the streams part is the
//! [`TOP_STREAMS`] largest by events and by bytes.
//!
//! Counters are totals since start, as in `/metrics`: the page derives rates and interval
//! means from two readings (Δcount/Δt, Δsum/Δcount), so the server keeps no history and any
//! number of viewers cost the same per request. The one scan that grows with the number of
//! streams (the top lists) runs at most once per [`TOP_MAX_AGE`] whatever the number of viewers,
//! off the async workers.

use crate::metrics::Sums;
use crate::state::{AppState, Phase};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

pub mod top;

pub use top::{TOP_MAX_AGE, TOP_STREAMS, TopCache, TopLists};

/// The document. Field names are the public contract (docs/OPERATIONS.md); add, never rename.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Status {
    pub version: &'static str,
    /// `starting`, `ready` or `draining`.
    pub phase: &'static str,
    /// What `/readyz` answers: ready and the store accepts writes.
    pub ready: bool,
    /// Server time of the reading, ms since the epoch: the page's Δt for rates.
    pub time_ms: i64,
    pub ingest: Ingest,
    /// Refusals since start by reason (error code), only reasons that happened.
    pub rejections: Vec<Rejection>,
    /// `null` until the store is open.
    pub queues: Option<Queues>,
    pub inflight: Inflight,
    pub fsync: Sums,
    /// Request latency by route template (count, sum of seconds and bucket counts since start).
    pub requests: BTreeMap<&'static str, Sums>,
    /// The upper bounds (seconds) of the `buckets` of `requests` and of `fsync`; each `buckets`
    /// array has one more entry, for values above the last bound.
    pub latency_bounds: LatencyBounds,
    pub followers: Followers,
    pub frames_connections: i64,
    /// `null` until the store is open.
    pub log: Option<Log>,
    /// `null` until the store is open.
    pub streams: Option<Streams>,
    /// Cluster mode: this node's role and partitions; `null` in single-node mode.
    pub cluster: Option<Cluster>,
}

/// What a cluster node is doing (docs/CLUSTER.md).
#[derive(Serialize, utoipa::ToSchema)]
pub struct Cluster {
    pub node: String,
    pub topic: String,
    /// Joined, and every owned partition caught up (what `/readyz` waits for).
    pub ready: bool,
    /// Partitions of `T` this node applies and serves, with their state.
    pub streams: Vec<OwnedPartition>,
    /// Partitions of `T.entities` (the feature tables) this node applies and serves.
    pub entities: Vec<OwnedPartition>,
    /// Every node the members topic names, with its URL.
    pub members: Vec<Member>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct OwnedPartition {
    pub partition: u32,
    /// `live`, or `catching_up`.
    pub state: &'static str,
    /// Offsets not applied yet.
    pub lag: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Member {
    pub node: String,
    pub url: String,
}

fn cluster(state: &AppState) -> Option<Cluster> {
    use vx_cluster::apply::PartitionState;
    use vx_cluster::txn::Topic;
    let c = state.cluster()?;
    let node = &c.node;
    let own = node.ownership();
    let lag = own.lag.read().clone();
    let parts = |topic: Topic| {
        own.states()
            .into_iter()
            .filter(|((t, _), _)| *t == topic)
            .map(|((t, p), s)| OwnedPartition {
                partition: p,
                state: match s {
                    PartitionState::Live => "live",
                    PartitionState::CatchingUp { .. } => "catching_up",
                },
                lag: lag.get(&(t, p)).copied().unwrap_or(0),
            })
            .collect()
    };
    Some(Cluster {
        node: node.settings.node.clone(),
        topic: node.names.streams.clone(),
        ready: node.ready(),
        streams: parts(Topic::Streams),
        entities: parts(Topic::Entities),
        members: node
            .members()
            .nodes()
            .into_iter()
            .map(|o| Member {
                node: o.node,
                url: o.url,
            })
            .collect(),
    })
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct LatencyBounds {
    #[serde(serialize_with = "floats")]
    #[schema(value_type = Vec<f64>)]
    pub requests: Arc<[f64]>,
    #[serde(serialize_with = "floats")]
    #[schema(value_type = Vec<f64>)]
    pub fsync: Arc<[f64]>,
}

fn floats<S: serde::Serializer>(v: &Arc<[f64]>, s: S) -> Result<S::Ok, S::Error> {
    v.as_ref().serialize(s)
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Ingest {
    /// Events newly stored by ingest (all formats), and duplicates acknowledged.
    pub events: u64,
    pub duplicates: u64,
    pub by_format: BTreeMap<&'static str, u64>,
    /// What the log writer wrote: events, their bytes, records (requests).
    pub stored_events: u64,
    pub stored_bytes: u64,
    pub stored_records: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Rejection {
    pub reason: &'static str,
    pub requests: u64,
    pub events: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Queues {
    pub shards: u32,
    /// Per-shard reservation capacity and refusal mark, in events.
    pub capacity: u64,
    pub high_water: u64,
    /// Events admitted and not yet applied, one entry per shard (`shards` long).
    pub depth: Vec<u64>,
    pub queued_bytes: u64,
    pub writer_queue_requests: usize,
    /// Any shard at its mark, or the byte budget spent: new ingest gets 429.
    pub backpressure: bool,
    /// A failed fsync: writes are refused until restart.
    pub storage_poisoned: bool,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Inflight {
    pub bytes: u64,
    pub capacity: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Followers {
    /// By transport: `sse`, `ndjson`, `websocket`.
    pub by_transport: BTreeMap<&'static str, u64>,
    /// Streams with live followers.
    pub streams: u64,
    pub lag_max_events: u64,
    pub reading_storage: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Log {
    pub segments: u64,
    pub bytes: u64,
    pub oldest_append_ms: Option<i64>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct Streams {
    /// Listed streams.
    pub count: usize,
    /// At most [`TOP_STREAMS`] each, largest first.
    #[serde(serialize_with = "shared")]
    #[schema(value_type = TopLists)]
    pub top: Arc<TopLists>,
}

fn shared<S: serde::Serializer>(top: &Arc<TopLists>, s: S) -> Result<S::Ok, S::Error> {
    top.as_ref().serialize(s)
}

/// Read everything once. Cheap: atomics, short locks, and the cached top lists.
pub async fn snapshot(state: &AppState) -> Status {
    let totals = state.metrics().totals();
    let hub = state.hub().snapshot();
    let engine = state.router();
    let queues = engine.map(|router| {
        let store = router.store();
        let shards = store.shards();
        Queues {
            shards,
            capacity: router.capacity(),
            high_water: router.high_water_events(),
            depth: (0..shards).map(|s| router.depth(s)).collect(),
            queued_bytes: router.queued_bytes(),
            writer_queue_requests: store.queue_len(),
            backpressure: router.backpressured(),
            storage_poisoned: store.is_poisoned(),
        }
    });
    let log = engine.map(|router| {
        let l = router.store().log_stats();
        Log {
            segments: l.segments,
            bytes: l.bytes,
            oldest_append_ms: l.oldest_append_ms,
        }
    });
    let streams = match engine {
        Some(router) => Some(Streams {
            count: router.store().stream_count(),
            top: state.top_cache().get(router.store()).await,
        }),
        None => None,
    };
    Status {
        version: env!("CARGO_PKG_VERSION"),
        phase: match state.phase() {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Draining => "draining",
        },
        ready: state.is_ready(),
        time_ms: vx_sys::now_ms(),
        ingest: Ingest {
            events: totals.ingested,
            duplicates: totals.duplicates,
            by_format: totals.ingested_by_format.into_iter().collect(),
            stored_events: totals.stored_events,
            stored_bytes: totals.stored_bytes,
            stored_records: totals.stored_records,
        },
        rejections: totals
            .rejected
            .into_iter()
            .map(|r| Rejection {
                reason: r.reason,
                requests: r.requests,
                events: r.events,
            })
            .collect(),
        queues,
        inflight: Inflight {
            bytes: state.budget().held(),
            capacity: state.budget().total(),
        },
        fsync: totals.fsync,
        requests: totals.routes.into_iter().collect(),
        latency_bounds: LatencyBounds {
            requests: totals.request_bounds,
            fsync: totals.fsync_bounds,
        },
        followers: Followers {
            by_transport: crate::live::Transport::ALL
                .into_iter()
                .map(|t| (t.as_str(), hub.followers[t as usize]))
                .collect(),
            streams: hub.topics,
            lag_max_events: hub.lag_max,
            reading_storage: hub.from_storage,
        },
        frames_connections: totals.frames_connections,
        log,
        streams,
        cluster: cluster(state),
    }
}
