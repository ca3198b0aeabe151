//! Prometheus metrics (SPEC §7): one registry, registered once at start-up. Hot-path handles
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
//! - `vx_queue_depth{shard}`, `vx_queue_capacity{shard}`, `vx_queue_high_water{shard}`:
//!   admission reservations in events.
//! - `vx_backpressure`: 1 while any shard is at its mark or the byte budget is spent.
//! - `vx_queued_bytes`, `vx_writer_queue_requests`, `vx_storage_poisoned`.
//! - `vx_inflight_bytes`, `vx_inflight_capacity_bytes`: request bodies (and frames batches)
//!   being decoded, held in the `ingest.max_inflight_bytes` budget, and the budget's size.
//! - `vx_fsync_duration_seconds`, `vx_stored_events_total`, `vx_stored_bytes_total`,
//!   `vx_stored_records_total`: from the storage engine's [`Observer`].
//! - `vx_dedup_horizon_seconds{shard}`: how far back dedup reaches (0 when nothing is
//!   remembered).
//! - `vx_bootstrap_duration_seconds`: time from start to ready; `vx_ready`: 1 when ready.
//! - `vx_log_segments`, `vx_log_bytes`, `vx_log_open_files`,
//!   `vx_log_oldest_append_timestamp_seconds`, `vx_retention_deleted_segments_total`,
//!   `vx_retention_deleted_bytes_total`, `vx_segment_seal_duration_seconds`,
//!   `vx_streams_deleted_total`: the log's size, retention and deletes (SPEC §5).
//! - `vx_feature_reads_total`: entities read by `GET /v1/features/{entity}` and batch queries;
//!   `vx_feature_writes_total`: feature PUTs and deletes answered 200.
//! - `vx_feature_entities`, `vx_feature_bytes`, `vx_feature_max_bytes`: the feature tables
//!   and their budget (`storage.max_feature_bytes`); `vx_feature_late_events_total`,
//!   `vx_feature_future_events_total`: events windowed aggregates ignored (SPEC §6).
//! - `vx_snapshot_age_seconds` (since the newest snapshot; 0 before the first),
//!   `vx_snapshots_written_total`, `vx_snapshots_failed_total`, `vx_snapshot_bytes`.
//! - `vx_frames_connections`: open binary-frames connections (handshake done).
//! - `vx_frames_stalls_total`: times a frames connection stopped reading because a target
//!   shard was at its high-water mark or the queued-byte budget was spent (SPEC §4); events
//!   and refusals of frames connections are counted under `format="frames"` above.
//! - `vx_connections_open`: open connections of every listener (HTTP and frames, TCP and
//!   Unix socket), against `server.max_connections`; `vx_connections_refused_total{listener}`:
//!   connections refused past it (`listener` `http` or `frames`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use vx_storage::Observer;
use vx_sys::now_ms;

/// The ingest formats, as metric labels. `unknown`: refused before the format was known.
/// `otlp_traces`, `otlp_logs`: spans and log records of `POST /v1/traces` and `/v1/logs`.
pub const FORMATS: [&str; 7] = [
    "json",
    "ndjson",
    "yaml",
    "frames",
    "otlp_traces",
    "otlp_logs",
    "unknown",
];

/// Route templates whose latency is recorded (the matched route, never the raw path).
pub const ROUTES: [&str; 14] = [
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
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FormatLabels {
    format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    reason: &'static str,
    format: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

/// Pre-resolved counters of one ingest format.
#[derive(Clone, Debug)]
pub struct FormatHandles {
    pub label: &'static str,
    pub ingested: Counter,
    pub duplicates: Counter,
}

/// A latency histogram on atomics: the exposition encodes it (`EncodeMetric`), and the status
/// page reads the same sum and bucket counts ([`Timed::sums`]) to compute interval means and
/// quantiles from two readings (prometheus-client's `Histogram` exposes neither, and takes a
/// lock per observation). The sum in whole nanoseconds (u64 lasts centuries of latency).
/// Buckets as the exposition's, not cumulative: `buckets[i]` counts observations ≤
/// `bounds[i]` and above the bound before; the last, above every bound (`+Inf`). The count is
/// their sum, so a scrape never sees a count that disagrees with its buckets.
#[derive(Clone, Debug)]
pub struct Timed {
    bounds: Arc<[f64]>,
    nanos: Arc<AtomicU64>,
    buckets: Arc<[AtomicU64]>,
}

/// Bucket upper bounds of request latency (`vx_http_request_duration_seconds`): 250 µs × 2ⁿ.
fn route_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_25, 2.0, 16)
}

/// Bucket upper bounds of `vx_fsync_duration_seconds`: 50 µs × 2ⁿ.
fn fsync_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 18)
}

impl Timed {
    fn new(bounds: Arc<[f64]>) -> Self {
        Timed {
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            bounds,
            nanos: Arc::default(),
        }
    }

    pub fn observe(&self, took: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let secs = took.as_secs_f64();
        self.nanos
            .fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        // The first bound ≥ the value (Prometheus' `le`); past the last, the +Inf bucket.
        let i = self.bounds.partition_point(|b| *b < secs);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Relaxed);
        }
    }

    pub fn bounds(&self) -> &Arc<[f64]> {
        &self.bounds
    }

    pub fn sums(&self) -> Sums {
        use std::sync::atomic::Ordering::Relaxed;
        let buckets: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        Sums {
            count: buckets.iter().sum(),
            sum_seconds: self.nanos.load(Relaxed) as f64 / 1e9,
            buckets,
        }
    }
}

impl TypedMetric for Timed {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Timed {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let s = self.sums();
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(s.buckets)
            .collect();
        encoder.encode_histogram::<NoLabelSet>(s.sum_seconds, s.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Storage engine hooks, called from the writer thread: atomics only.
#[derive(Debug)]
pub struct StorageObserver {
    fsync: Timed,
    events: Counter,
    bytes: Counter,
    records: Counter,
    seal: Histogram,
}

impl Observer for StorageObserver {
    fn fsync(&self, took: Duration) {
        self.fsync.observe(took);
    }

    fn appended(&self, records: u64, events: u64, bytes: u64) {
        self.records.inc_by(records);
        self.events.inc_by(events);
        self.bytes.inc_by(bytes);
    }

    fn sealed(&self, took: Duration) {
        self.seal.observe(took.as_secs_f64());
    }
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
}

/// Counters of the binary-frames listeners.
#[derive(Clone, Debug, Default)]
pub struct FramesHandles {
    pub connections: Gauge,
    pub stalls: Counter,
}

/// Connections of every listener, against `server.max_connections`.
#[derive(Clone, Debug, Default)]
pub struct ConnectionHandles {
    pub open: Gauge,
    refused: Family<ListenerLabels, Counter>,
}

impl ConnectionHandles {
    /// Count a connection of `listener` refused past the limit.
    pub fn refused(&self, listener: &'static str) {
        self.refused
            .get_or_create(&ListenerLabels { listener })
            .inc();
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Build and register everything. `engine` is filled in once the store is open; until
    /// then the per-shard collectors report nothing. `budget` is read at scrape time.
    pub fn new(
        engine: Arc<OnceLock<vx_router::Router>>,
        budget: vx_ingest::InflightBudget,
        hub: Arc<crate::live::Hub>,
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
            "Open connections of every listener (HTTP and frames), against server.max_connections",
            connections.open.clone(),
        );
        registry.register(
            "vx_connections_refused",
            "Connections refused because server.max_connections were open, by listener",
            connections.refused.clone(),
        );
        // Refusals are what an alert watches: the series exist at 0 from the start.
        for listener in crate::listen::LISTENERS {
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

        registry.register_collector(Box::new(BudgetCollector(budget)));
        registry.register_collector(Box::new(HubCollector(hub)));
        registry.register_collector(Box::new(EngineCollector { engine }));

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

    /// The process-wide counters the status page shows (src/status.rs), read from the same
    /// handles the exposition encodes: atomics and one short read lock per reject label set.
    pub fn totals(&self) -> Totals {
        let sum = |f: fn(&FormatHandles) -> &Counter| {
            self.formats.iter().map(|h| f(h).get()).sum::<u64>()
        };
        let mut rejected = Vec::new();
        for code in vx_proto::ErrorCode::ALL {
            let (mut requests, mut events) = (0, 0);
            for format in FORMATS {
                let labels = RejectLabels {
                    reason: code.as_str(),
                    format,
                };
                requests += self.rejected_requests.get(&labels).map_or(0, |c| c.get());
                events += self.rejected_events.get(&labels).map_or(0, |c| c.get());
            }
            if requests > 0 || events > 0 {
                rejected.push(Rejected {
                    reason: code.as_str(),
                    requests,
                    events,
                });
            }
        }
        let o = &self.observer;
        Totals {
            ingested: sum(|h| &h.ingested),
            duplicates: sum(|h| &h.duplicates),
            ingested_by_format: self
                .formats
                .iter()
                .map(|h| (h.label, h.ingested.get()))
                .collect(),
            rejected,
            stored_events: o.events.get(),
            stored_bytes: o.bytes.get(),
            stored_records: o.records.get(),
            fsync: o.fsync.sums(),
            routes: self
                .routes
                .iter()
                .map(|(route, h)| (*route, h.sums()))
                .collect(),
            request_bounds: self
                .routes
                .first()
                .map_or_else(|| route_bounds().collect(), |(_, h)| Arc::clone(h.bounds())),
            fsync_bounds: Arc::clone(o.fsync.bounds()),
            frames_connections: self.frames.connections.get(),
        }
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

/// Counters since start, for the status page: it derives rates and interval means from two
/// readings, as a Prometheus query would.
#[derive(Clone, Debug)]
pub struct Totals {
    /// `vx_events_ingested_total` and `vx_events_duplicate_total`, summed over formats.
    pub ingested: u64,
    pub duplicates: u64,
    pub ingested_by_format: Vec<(&'static str, u64)>,
    /// Reasons with any refusal, in [`vx_proto::ErrorCode::ALL`] order.
    pub rejected: Vec<Rejected>,
    /// `vx_stored_events_total`, `vx_stored_bytes_total`, `vx_stored_records_total`.
    pub stored_events: u64,
    pub stored_bytes: u64,
    pub stored_records: u64,
    pub fsync: Sums,
    /// Request latency by route template, in [`ROUTES`] order.
    pub routes: Vec<(&'static str, Sums)>,
    /// Bucket upper bounds of the request and fsync latencies, in seconds.
    pub request_bounds: Arc<[f64]>,
    pub fsync_bounds: Arc<[f64]>,
    pub frames_connections: i64,
}

/// Refusals of one reason, summed over formats.
#[derive(Clone, Copy, Debug)]
pub struct Rejected {
    pub reason: &'static str,
    pub requests: u64,
    pub events: u64,
}

/// A histogram's count, sum and bucket counts (see [`Timed`]): two readings give the mean and
/// the quantiles over the interval between them.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sums {
    pub count: u64,
    pub sum_seconds: f64,
    pub buckets: Vec<u64>,
}

/// OpenMetrics names a counter family `x` and its sample `x_total`; the Prometheus text
/// format wants `# HELP`/`# TYPE` on the sample name, and has no `# EOF`. Everything else
/// prometheus-client writes (no exemplars, no `_created`, no units) is the same in both.
fn openmetrics_to_prometheus(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len() + 64);
    for line in om.lines() {
        if line == "# EOF" {
            continue;
        }
        let header = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((prefix, rest)) = header {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(prefix);
                out.push_str(name);
                out.push_str("_total ");
                out.push_str(tail);
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Per-shard and queue gauges, read from the router and store at scrape time.
struct EngineCollector {
    engine: Arc<OnceLock<vx_router::Router>>,
}

impl std::fmt::Debug for EngineCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EngineCollector")
    }
}

fn gauge_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    shards: u32,
    value: impl Fn(u32) -> f64,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for shard in 0..shards {
        let labels = [("shard", shard)];
        let sample = metric.encode_family(&labels)?;
        ConstGauge::new(value(shard)).encode(sample)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, g.metric_type())?;
    g.encode(metric)
}

/// Live followers and their fan-out, read at scrape time (followers never touch a metric).
struct HubCollector(Arc<crate::live::Hub>);

impl std::fmt::Debug for HubCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HubCollector")
    }
}

impl Collector for HubCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let hub = &self.0;
        let snap = hub.snapshot();
        {
            let mut metric = encoder.encode_descriptor(
                "vx_followers",
                "Live followers (follow=true and WebSocket), by transport",
                None,
                MetricType::Gauge,
            )?;
            for t in crate::live::Transport::ALL {
                let labels = [("transport", t.as_str())];
                let sample = metric.encode_family(&labels)?;
                ConstGauge::new(snap.followers[t as usize] as f64).encode(sample)?;
            }
        }
        let gauges = [
            (
                "vx_follower_lag_max_events",
                "Largest follower lag: events of its stream published live but not yet sent to it",
                snap.lag_max,
            ),
            (
                "vx_follower_lag_events",
                "Sum over followers of their lag in events",
                snap.lag_sum,
            ),
            (
                "vx_followers_reading_storage",
                "Followers catching up from storage (at the start, or after lagging out of the live buffer)",
                snap.from_storage,
            ),
            (
                "vx_followed_streams",
                "Streams with live followers (each has one reader of the log and one buffer)",
                snap.topics,
            ),
            (
                "vx_follow_buffer_bytes",
                "Bytes of encoded events held in the followed streams' live buffers",
                snap.ring_bytes,
            ),
        ];
        for (name, help, v) in gauges {
            gauge(&mut encoder, name, help, v as f64)?;
        }
        let counters = [
            (
                "vx_followers_rejected",
                "Followers refused with 503 at server.max_followers",
                hub.stats.rejected.load(Relaxed),
            ),
            (
                "vx_follower_fallbacks",
                "Times a follower fell out of its stream's live buffer and went back to reading storage",
                hub.stats.fallbacks.load(Relaxed),
            ),
            (
                "vx_follower_events_live",
                "Events sent to followers from the shared live buffer",
                hub.stats.events_live.load(Relaxed),
            ),
            (
                "vx_follower_events_storage",
                "Events sent to followers and paced replays from storage",
                hub.stats.events_storage.load(Relaxed),
            ),
            (
                "vx_follow_publications",
                "Batches of newly visible events published to followers (each wakes a stream's followers once)",
                hub.stats.publications.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            let c = ConstCounter::new(v);
            let metric = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(metric)?;
        }
        Ok(())
    }
}

/// The in-flight byte budget, read at scrape time: a request never touches a metric for it.
/// Reported before the store is open too (bodies are not read then, so it stays at 0).
#[derive(Debug)]
struct BudgetCollector(vx_ingest::InflightBudget);

impl Collector for BudgetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut encoder,
            "vx_inflight_bytes",
            "Bytes of request bodies and frames batches being decoded, held in ingest.max_inflight_bytes",
            self.0.held() as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_inflight_capacity_bytes",
            "Size of the in-flight byte budget (ingest.max_inflight_bytes)",
            self.0.total() as f64,
        )
    }
}

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(router) = self.engine.get() else {
            return Ok(());
        };
        let store = router.store();
        let shards = store.shards();
        let cap = router.capacity() as f64;
        let mark = router.high_water_events() as f64;
        gauge_family(
            &mut encoder,
            "vx_queue_depth",
            "Events admitted on the shard and not yet applied",
            shards,
            |s| router.depth(s) as f64,
        )?;
        gauge_family(
            &mut encoder,
            "vx_queue_capacity",
            "Reservation capacity of the shard, in events (ingest.queue_capacity)",
            shards,
            |_| cap,
        )?;
        gauge_family(
            &mut encoder,
            "vx_queue_high_water",
            "Depth at which the shard refuses new requests (429), in events",
            shards,
            |_| mark,
        )?;
        let now = now_ms();
        gauge_family(
            &mut encoder,
            "vx_dedup_horizon_seconds",
            "How far back the shard's dedup table reaches",
            shards,
            |s| {
                store
                    .dedup_horizon_ms(s)
                    .map_or(0.0, |h| (now.saturating_sub(h)).max(0) as f64 / 1000.0)
            },
        )?;
        gauge(
            &mut encoder,
            "vx_backpressure",
            "1 while any shard is at its high-water mark or the byte budget is spent",
            if router.backpressured() { 1.0 } else { 0.0 },
        )?;
        gauge(
            &mut encoder,
            "vx_queued_bytes",
            "Bytes of admitted, not yet written events",
            router.queued_bytes() as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_writer_queue_requests",
            "Requests waiting in the channel to the log writer",
            store.queue_len() as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_storage_poisoned",
            "1 after a failed fsync: the store refuses writes until restart",
            if store.is_poisoned() { 1.0 } else { 0.0 },
        )?;
        let log = store.log_stats();
        gauge(
            &mut encoder,
            "vx_log_segments",
            "Log segments on disk (sealed and active)",
            log.segments as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_log_bytes",
            "Bytes of the log on disk: segments and their index files",
            log.bytes as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_log_open_files",
            "Descriptors of sealed segments and index files held open for readers (bounded cache)",
            log.open_files as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_log_oldest_append_timestamp_seconds",
            "Append time of the oldest retained record, Unix seconds (0 when the log is empty)",
            log.oldest_append_ms.map_or(0.0, |ms| ms as f64 / 1000.0),
        )?;
        counter(
            &mut encoder,
            "vx_retention_deleted_segments",
            "Sealed segments removed by retention since start",
            log.retained_segments,
        )?;
        counter(
            &mut encoder,
            "vx_retention_deleted_bytes",
            "Bytes (segments and index files) removed by retention since start",
            log.retained_bytes,
        )?;
        let fs = store.features().stats();
        gauge(
            &mut encoder,
            "vx_feature_entities",
            "Entities in the feature tables",
            fs.entities as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_feature_bytes",
            "Bytes the feature tables hold, as storage.max_feature_bytes counts them",
            fs.bytes as f64,
        )?;
        gauge(
            &mut encoder,
            "vx_feature_max_bytes",
            "The feature table budget (storage.max_feature_bytes)",
            fs.max_bytes as f64,
        )?;
        counter(
            &mut encoder,
            "vx_feature_late_events",
            "Events older than a windowed aggregate's window, ignored by it",
            fs.late_events,
        )?;
        counter(
            &mut encoder,
            "vx_feature_future_events",
            "Events more than a minute past their append time, ignored by windowed aggregates",
            fs.future_events,
        )?;
        let snap = store.snapshot_stats();
        gauge(
            &mut encoder,
            "vx_snapshot_age_seconds",
            "Seconds since the newest feature snapshot was written (0 before the first)",
            snap.last_created_ms
                .map_or(0.0, |ms| (now.saturating_sub(ms)).max(0) as f64 / 1000.0),
        )?;
        gauge(
            &mut encoder,
            "vx_snapshot_bytes",
            "Size of the newest snapshot written since start",
            snap.last_bytes as f64,
        )?;
        counter(
            &mut encoder,
            "vx_snapshots_written",
            "Feature snapshots written since start",
            snap.written,
        )?;
        counter(
            &mut encoder,
            "vx_snapshots_failed",
            "Feature snapshots that failed since start",
            snap.failed,
        )
    }
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let c = prometheus_client::metrics::counter::ConstCounter::new(value);
    let metric = encoder.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(metric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_keeps_count_sum_and_buckets_like_the_exposition() {
        let t = Timed::new(route_bounds().collect());
        let ms = |m: f64| Duration::from_secs_f64(m / 1000.0);
        // ≤ 0.25 ms (the first bound itself included), ≤ 0.5 ms, above the last bound.
        for took in [ms(0.1), ms(0.25), ms(0.3), Duration::from_secs(60)] {
            t.observe(took);
        }
        let s = t.sums();
        assert_eq!(s.count, 4);
        assert!(
            (s.sum_seconds - 60.000_65).abs() < 1e-6,
            "{}",
            s.sum_seconds
        );
        assert_eq!(s.buckets.len(), t.bounds().len() + 1);
        assert_eq!((s.buckets[0], s.buckets[1]), (2, 1));
        assert_eq!(s.buckets.last(), Some(&1));
        assert_eq!(s.buckets.iter().sum::<u64>(), 4);
    }
}
