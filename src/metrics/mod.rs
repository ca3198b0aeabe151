//! Prometheus metrics (docs/API.md §7): one registry, registered once at start-up. Hot-path handles
//! (per format, per route) are resolved when the registry is built, so a request never looks a
//! label set up; per-shard gauges are read from the router and store at scrape time by a
//! [`Collector`] instead of being updated per request.
//!
//! Names, all prefixed `vx_`:
//! - `vx_events_ingested_total{format}`: events newly stored by `POST /v1/events` (and by
//!   `/v1/traces`, `/v1/logs`: `format` `otlp_traces`, `otlp_logs`).
//! - `vx_events_duplicate_total{format}`: events acknowledged as duplicates.
//! - `vx_ingest_requests_rejected_total{reason,format}`: refused ingest requests; `reason` is
//!   the error code of the answer.
//! - `vx_events_rejected_total{reason,format}`: events of decoded requests refused after
//!   decoding (backpressure, conflict, storage_full, not_ready). A request refused while
//!   decoding is counted only in the request counter: its event count is unknown. Spans and
//!   log records left out of a stored OTLP request (partial success) count here as
//!   `invalid_event`.
//! - `vx_http_request_duration_seconds{route}`: latency by route template.
//! - `vx_ingest_stage_seconds{stage}`: an acknowledged ingest request's time by stage
//!   (`receive`, `decode`, `admission`, `queue`, `write`, `fsync`, `apply`, `answer`; [`stages`]).
//! - `vx_queue_depth{shard}`, `vx_queue_capacity{shard}`, `vx_queue_high_water{shard}`:
//!   admission reservations in events.
//! - `vx_backpressure`: 1 while any shard is at its mark or the byte budget is spent.
//! - `vx_queued_bytes`, `vx_writer_queue_requests`, `vx_storage_poisoned`.
//! - `vx_inflight_bytes`, `vx_inflight_capacity_bytes`: request bodies (and frames batches)
//!   being decoded, held in the `ingest.max_inflight_bytes` budget, and the budget's size.
//! - `vx_fsync_duration_seconds`, `vx_stored_events_total`, `vx_stored_bytes_total`,
//!   `vx_stored_records_total`: from the storage engine's [`vx_storage::Observer`].
//! - `vx_dedup_horizon_seconds{shard}`: how far back dedup reaches (0 when nothing is
//!   remembered).
//! - `vx_bootstrap_duration_seconds`: time from start to ready; `vx_ready`: 1 when ready.
//! - `vx_log_segments`, `vx_log_bytes`, `vx_log_open_files`,
//!   `vx_log_oldest_append_timestamp_seconds`, `vx_retention_deleted_segments_total`,
//!   `vx_retention_deleted_bytes_total`, `vx_segment_seal_duration_seconds`,
//!   `vx_streams_deleted_total`: the log's size, retention and deletes (docs/API.md §5).
//! - `vx_index_cache_bytes`, `vx_index_cache_hits_total`, `vx_index_cache_misses_total`: the
//!   index page cache (`storage.index_cache_bytes`).
//! - `vx_feature_reads_total`: entities read by `GET /v1/features/{entity}` and batch queries;
//!   `vx_feature_writes_total`: feature PUTs and deletes answered 200.
//! - `vx_feature_entities`, `vx_feature_bytes`, `vx_feature_max_bytes`: the feature tables
//!   and their budget (`storage.max_feature_bytes`); `vx_feature_apply_threads`: the threads
//!   applying them (`features.apply_threads`); `vx_feature_late_events_total`,
//!   `vx_feature_future_events_total`: events windowed aggregates ignored (docs/API.md §6).
//! - `vx_snapshot_age_seconds` (since the newest snapshot; 0 before the first),
//!   `vx_snapshots_written_total`, `vx_snapshots_failed_total`, `vx_snapshot_bytes`.
//! - `vx_frames_connections`: open binary-frames connections (handshake done).
//! - `vx_frames_stalls_total`: times a frames connection stopped reading because a target
//!   shard was at its high-water mark or the queued-byte budget was spent (docs/API.md §4); events
//!   and refusals of frames connections are counted under `format="frames"` above.
//! - cluster mode only (docs/CLUSTER.md): `vx_cluster_owned_partitions{topic}`,
//!   `vx_cluster_consumer_lag{topic,shard}`, `vx_cluster_applied_offset{topic,shard}`,
//!   `vx_cluster_rebalances_total`, `vx_cluster_rebuilds_total`,
//!   `vx_cluster_applied_records_total`, `vx_cluster_routed_records_total`,
//!   `vx_cluster_shard_moves_total`, `vx_cluster_shard_move_seconds_total`,
//!   `vx_cluster_last_shard_move_seconds`, `vx_cluster_transactions_total`,
//!   `vx_cluster_failed_transactions_total`, `vx_cluster_transaction_seconds_total`,
//!   `vx_cluster_direct_requests_total`, `vx_cluster_failed_direct_requests_total`,
//!   `vx_cluster_direct_seconds_total`,
//!   `vx_cluster_produced_requests_total`, `vx_cluster_forwarded_requests_total`,
//!   `vx_cluster_ready`.
//! - `vx_connections_open`: open connections of every listener (HTTP, frames and the Redis
//!   protocol, TCP and Unix socket), against `server.max_connections`;
//!   `vx_connections_refused_total{listener}`: connections refused past it (`listener` `http`,
//!   `frames` or `resp`).

//!
//! # Layout
//! - here: the label sets, the [`Metrics`] registry and its hot-path handles, the exposition.
//! - [`timed`]: [`Timed`], the latency histogram on atomics that the status page reads too.
//! - [`stages`]: `vx_ingest_stage_seconds`, an ingest request's time by stage.
//! - [`observer`]: the storage engine's hooks ([`StorageObserver`]).
//! - [`totals`]: the counters since start that the status page derives rates from.
//! - [`scrape`]: gauges read from the router, the store, the live hub and the byte budget at
//!   scrape time.
//! - [`exposition`]: OpenMetrics text turned into Prometheus text.

mod exposition;
mod observer;
mod scrape;
mod stages;
mod timed;
mod totals;

pub use observer::StorageObserver;
pub use stages::{Measured, STAGES, StageTimes};
pub use timed::{Sums, Timed};
pub use totals::{Rejected, Totals};

use crate::listen::{ConnectionHandles, LISTENERS, ListenerLabels};
use exposition::openmetrics_to_prometheus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use scrape::{BudgetCollector, ClusterCollector, HubCollector, RouterCollector};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use timed::{fsync_bounds, route_bounds};

/// The ingest formats, as metric labels. `unknown`: refused before the format was known.
/// `otlp_traces`, `otlp_logs`: spans and log records of `POST /v1/traces` and `/v1/logs`;
/// `resp`: the Redis protocol's `XADD`.
pub const FORMATS: [&str; 8] = [
    "json",
    "ndjson",
    "yaml",
    "frames",
    "otlp_traces",
    "otlp_logs",
    "resp",
    "unknown",
];

/// Route templates whose latency is recorded (the matched route, never the raw path).
pub const ROUTES: [&str; 15] = [
    "/v1/events",
    "/v1/traces",
    "/v1/logs",
    "/v1/streams",
    "/v1/streams/{stream}",
    "/v1/streams/{stream}/events",
    "/v1/streams/{stream}/ws",
    "/v1/features/query",
    "/v1/features/{entity}",
    "/v1/features/{entity}/{name}",
    "/healthz",
    "/readyz",
    "/metrics",
    "/v1/status",
    crate::http::openapi::path::PATH,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FormatLabels {
    pub(crate) format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RejectLabels {
    pub(crate) reason: &'static str,
    pub(crate) format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteLabels {
    pub(crate) route: &'static str,
}

/// Pre-resolved counters of one ingest format.
#[derive(Clone, Debug)]
pub struct FormatHandles {
    pub label: &'static str,
    pub ingested: Counter,
    pub duplicates: Counter,
}

/// All metrics of the process.
pub struct Metrics {
    registry: Registry,
    formats: Vec<FormatHandles>,
    /// Handles of labels not in [`FORMATS`].
    unknown_format: FormatHandles,
    rejected_requests: Family<RejectLabels, Counter>,
    rejected_events: Family<RejectLabels, Counter>,
    routes: Vec<(&'static str, Timed)>,
    bootstrap: Gauge<f64, AtomicU64>,
    ready: Gauge,
    observer: Arc<StorageObserver>,
    frames: FramesHandles,
    connections: ConnectionHandles,
    /// `DELETE /v1/streams/{stream}` answered 200.
    pub streams_deleted: Counter,
    /// Entities read (point and batch).
    pub feature_reads: Counter,
    /// Direct feature writes answered 200.
    pub feature_writes: Counter,
    /// `vx_ingest_stage_seconds{stage}`.
    pub stages: StageTimes,
}

/// Counters of the binary-frames listeners.
#[derive(Clone, Debug, Default)]
pub struct FramesHandles {
    pub connections: Gauge,
    pub stalls: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Build and register everything. `router` is filled in once the store is open; until
    /// then the per-shard collectors report nothing. `budget` is read at scrape time.
    pub fn new(
        router: Arc<OnceLock<vx_router::Router>>,
        budget: vx_ingest::InflightBudget,
        hub: Arc<crate::live::Hub>,
        cluster: Arc<OnceLock<Arc<crate::cluster::Cluster>>>,
    ) -> Metrics {
        let mut registry = Registry::default();

        let ingested = Family::<FormatLabels, Counter>::default();
        let duplicates = Family::<FormatLabels, Counter>::default();
        registry.register(
            "vx_events_ingested",
            "Events newly stored by ingest (HTTP and frames), by format",
            ingested.clone(),
        );
        registry.register(
            "vx_events_duplicate",
            "Events acknowledged as duplicates of stored ones",
            duplicates.clone(),
        );
        let handles = |label: &'static str| {
            let l = FormatLabels { format: label };
            FormatHandles {
                label,
                ingested: ingested.get_or_create_owned(&l),
                duplicates: duplicates.get_or_create_owned(&l),
            }
        };
        let formats = FORMATS.iter().map(|&label| handles(label)).collect();
        let unknown_format = handles("unknown");

        let rejected_requests = Family::<RejectLabels, Counter>::default();
        let rejected_events = Family::<RejectLabels, Counter>::default();
        registry.register(
            "vx_ingest_requests_rejected",
            "Ingest requests refused, by reason (error code) and format",
            rejected_requests.clone(),
        );
        registry.register(
            "vx_events_rejected",
            "Events of decoded ingest requests refused after decoding, by reason and format",
            rejected_events.clone(),
        );
        // Backpressure is the refusal alerts watch: its series exist at 0 from the start, so
        // `rate()` and `increase()` see a baseline rather than a missing series.
        for format in FORMATS {
            let l = RejectLabels {
                reason: vx_proto::ErrorCode::Backpressure.as_str(),
                format,
            };
            let _ = rejected_requests.get_or_create(&l);
            let _ = rejected_events.get_or_create(&l);
        }

        let request_bounds: Arc<[f64]> = route_bounds().collect();
        let route_family = {
            let bounds = Arc::clone(&request_bounds);
            Family::<RouteLabels, Timed, _>::new_with_constructor(move || {
                Timed::new(Arc::clone(&bounds))
            })
        };
        registry.register(
            "vx_http_request_duration_seconds",
            "HTTP request latency by route template (until the response head)",
            route_family.clone(),
        );
        let routes = ROUTES
            .iter()
            .map(|&route| {
                (
                    route,
                    route_family.get_or_create_owned(&RouteLabels { route }),
                )
            })
            .collect();

        let observer = Arc::new(StorageObserver {
            fsync: Timed::new(fsync_bounds().collect()),
            events: Counter::default(),
            bytes: Counter::default(),
            records: Counter::default(),
            seal: Histogram::new(exponential_buckets(0.000_1, 2.0, 18)),
        });
        registry.register(
            "vx_segment_seal_duration_seconds",
            "Time to seal a log segment (write and sync its index file)",
            observer.seal.clone(),
        );
        registry.register(
            "vx_fsync_duration_seconds",
            "Latency of the log writer's fdatasync calls",
            observer.fsync.clone(),
        );
        registry.register(
            "vx_stored_events",
            "Events written to the log",
            observer.events.clone(),
        );
        registry.register(
            "vx_stored_bytes",
            "Bytes written to the log",
            observer.bytes.clone(),
        );
        registry.register(
            "vx_stored_records",
            "Records (requests) written to the log",
            observer.records.clone(),
        );

        let bootstrap = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "vx_bootstrap_duration_seconds",
            "Time from process start to ready (recovery of the log included)",
            bootstrap.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "vx_ready",
            "1 when the service is bootstrapped and not draining",
            ready.clone(),
        );

        let frames = FramesHandles::default();
        registry.register(
            "vx_frames_connections",
            "Open binary-frames connections",
            frames.connections.clone(),
        );
        registry.register(
            "vx_frames_stalls",
            "Times a binary-frames connection stopped reading until its shards drained",
            frames.stalls.clone(),
        );

        let connections = ConnectionHandles::default();
        registry.register(
            "vx_connections_open",
            "Open connections of every listener (HTTP, frames, Redis protocol), against server.max_connections",
            connections.open.clone(),
        );
        registry.register(
            "vx_connections_refused",
            "Connections refused because server.max_connections were open, by listener",
            connections.refused.clone(),
        );
        // Refusals are what an alert watches: the series exist at 0 from the start.
        for listener in LISTENERS {
            let _ = connections
                .refused
                .get_or_create(&ListenerLabels { listener });
        }

        let streams_deleted = Counter::default();
        registry.register(
            "vx_streams_deleted",
            "Streams deleted (tombstoned) by DELETE /v1/streams/{stream}",
            streams_deleted.clone(),
        );

        let feature_reads = Counter::default();
        registry.register(
            "vx_feature_reads",
            "Entities read by GET /v1/features/{entity} and POST /v1/features/query",
            feature_reads.clone(),
        );
        let feature_writes = Counter::default();
        registry.register(
            "vx_feature_writes",
            "Feature PUTs and deletes answered 200",
            feature_writes.clone(),
        );
        let stages = StageTimes::register(&mut registry);

        registry.register_collector(Box::new(BudgetCollector(budget)));
        registry.register_collector(Box::new(HubCollector(hub)));
        registry.register_collector(Box::new(ClusterCollector(cluster, Arc::clone(&router))));
        registry.register_collector(Box::new(RouterCollector { router }));

        Metrics {
            registry,
            formats,
            unknown_format,
            rejected_requests,
            rejected_events,
            routes,
            bootstrap,
            ready,
            observer,
            frames,
            connections,
            streams_deleted,
            feature_reads,
            feature_writes,
            stages,
        }
    }

    pub fn frames(&self) -> &FramesHandles {
        &self.frames
    }

    pub fn connections(&self) -> &ConnectionHandles {
        &self.connections
    }

    /// Handles of the format labelled `label` (`unknown` for labels not in [`FORMATS`]).
    pub fn format(&self, label: &str) -> &FormatHandles {
        self.formats
            .iter()
            .find(|f| f.label == label)
            .unwrap_or(&self.unknown_format)
    }

    /// A refused ingest request (per request, not per event: a label lookup is fine here).
    /// The reason label is the answer's error code.
    pub fn rejected(&self, reason: vx_proto::ErrorCode, format: &'static str, events: Option<u64>) {
        let labels = RejectLabels {
            reason: reason.as_str(),
            format,
        };
        self.rejected_requests.get_or_create(&labels).inc();
        if let Some(n) = events {
            self.rejected_events.get_or_create(&labels).inc_by(n);
        }
    }

    /// Items of a stored request that were left out of it (OTLP's partial success): counted
    /// under `vx_events_rejected_total` only, as the request itself was not refused.
    pub fn rejected_items(&self, reason: vx_proto::ErrorCode, format: &'static str, n: u64) {
        let labels = RejectLabels {
            reason: reason.as_str(),
            format,
        };
        self.rejected_events.get_or_create(&labels).inc_by(n);
    }

    /// The latency histogram of a route template, if it is one of [`ROUTES`].
    pub fn route(&self, template: &str) -> Option<&Timed> {
        self.routes
            .iter()
            .find(|(r, _)| *r == template)
            .map(|(_, h)| h)
    }

    pub fn set_bootstrap(&self, took: Duration) {
        self.bootstrap.set(took.as_secs_f64());
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    pub fn observer(&self) -> Arc<StorageObserver> {
        Arc::clone(&self.observer)
    }

    /// The OpenMetrics text exposition (`application/openmetrics-text; version=1.0.0`).
    pub fn encode_openmetrics(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(16 << 10);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The Prometheus text exposition (`text/plain; version=0.0.4`), for scrapers and tools
    /// that do not ask for OpenMetrics (`promtool check metrics` among them).
    pub fn encode_prometheus(&self) -> Result<String, std::fmt::Error> {
        self.encode_openmetrics()
            .map(|om| openmetrics_to_prometheus(&om))
    }
}
