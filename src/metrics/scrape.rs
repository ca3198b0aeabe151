//! Gauges and counters read at scrape time from what already counts them (the router and the
//! store, the live hub, the in-flight byte budget), so that no request touches a metric for
//! them: [`Collector`]s registered once by [`super::Metrics::new`].

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::sync::{Arc, OnceLock};
use vx_sys::now_ms;

/// Per-shard and queue gauges, read from the router and store at scrape time.
pub(super) struct RouterCollector {
    pub(super) router: Arc<OnceLock<vx_router::Router>>,
}

impl std::fmt::Debug for RouterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouterCollector")
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
pub(super) struct HubCollector(pub(super) Arc<crate::live::Hub>);

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
pub(super) struct BudgetCollector(pub(super) vx_ingest::InflightBudget);

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

impl Collector for RouterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(router) = self.router.get() else {
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
            "vx_index_cache_bytes",
            "Bytes of sealed index files' pages held in memory for readers (storage.index_cache_bytes)",
            log.index_cache_bytes as f64,
        )?;
        counter(
            &mut encoder,
            "vx_index_cache_hits",
            "Index page lookups of readers answered from memory",
            log.index_cache_hits,
        )?;
        counter(
            &mut encoder,
            "vx_index_cache_misses",
            "Index page lookups of readers that read the page from its file",
            log.index_cache_misses,
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
        gauge(
            &mut encoder,
            "vx_feature_apply_threads",
            "Threads applying the feature tables (features.apply_threads)",
            store.apply_threads() as f64,
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
    let c = ConstCounter::new(value);
    let metric = encoder.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(metric)
}

/// Cluster mode: ownership, apply and produce counters of this node, read at scrape time.
/// Nothing is reported in single-node mode.
pub(super) struct ClusterCollector(
    pub(super) Arc<OnceLock<Arc<crate::cluster::Cluster>>>,
    pub(super) Arc<OnceLock<vx_router::Router>>,
);

impl std::fmt::Debug for ClusterCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterCollector")
    }
}

impl Collector for ClusterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        use vx_cluster::txn::Topic;
        let Some(cluster) = self.0.get() else {
            return Ok(());
        };
        let node = &cluster.node;
        let own = node.ownership();
        let topic_name = |t: Topic| match t {
            Topic::Streams => "streams",
            Topic::Entities => "entities",
        };
        {
            let mut metric = encoder.encode_descriptor(
                "vx_cluster_owned_partitions",
                "Partitions this node applies and serves, by topic (streams: T; entities: T.entities)",
                None,
                MetricType::Gauge,
            )?;
            for t in [Topic::Streams, Topic::Entities] {
                let labels = [("topic", topic_name(t))];
                let sample = metric.encode_family(&labels)?;
                ConstGauge::new(own.owned(t).len() as f64).encode(sample)?;
            }
        }
        {
            let lag = own.lag.read().clone();
            let mut metric = encoder.encode_descriptor(
                "vx_cluster_consumer_lag",
                "Offsets of an owned partition not yet applied, by topic and shard",
                None,
                MetricType::Gauge,
            )?;
            for ((t, p), l) in lag {
                let shard = p.to_string();
                let labels = [("topic", topic_name(t)), ("shard", shard.as_str())];
                let sample = metric.encode_family(&labels)?;
                ConstGauge::new(l as f64).encode(sample)?;
            }
        }
        if let Some(router) = self.1.get() {
            let origins = router.store().applied_origins();
            let mut metric = encoder.encode_descriptor(
                "vx_cluster_applied_offset",
                "The last Kafka offset of each partition the local store has applied, by topic and shard",
                None,
                MetricType::Gauge,
            )?;
            for o in origins {
                let t = match o.topic {
                    vx_storage::OriginTopic::Streams => "streams",
                    vx_storage::OriginTopic::Entities => "entities",
                };
                let shard = o.partition.to_string();
                let labels = [("topic", t), ("shard", shard.as_str())];
                let sample = metric.encode_family(&labels)?;
                ConstGauge::new(o.offset as f64).encode(sample)?;
            }
        }
        let stats = node.producer_stats();
        let counters = [
            (
                "vx_cluster_rebalances",
                "Changes of this node's assignment in the consumer group",
                own.rebalances.load(Relaxed),
            ),
            (
                "vx_cluster_rebuilds",
                "Shards whose local copy was discarded and rebuilt from the topic",
                own.rebuilds.load(Relaxed),
            ),
            (
                "vx_cluster_applied_records",
                "Kafka records applied to the local store",
                own.applied.load(Relaxed),
            ),
            (
                "vx_cluster_routed_records",
                "Entity records routed to T.entities (consume-transform-produce)",
                own.routed.load(Relaxed),
            ),
            (
                "vx_cluster_shard_moves",
                "Partitions given to this node that caught up and were served here",
                own.moves.load(Relaxed),
            ),
            (
                "vx_cluster_transactions",
                "Kafka transactions of the ingest producer (each holds the requests grouped into it)",
                stats.transactions.load(Relaxed),
            ),
            (
                "vx_cluster_failed_transactions",
                "Kafka transactions of the ingest producer that failed (their requests got 503)",
                stats.failed_transactions.load(Relaxed),
            ),
            (
                "vx_cluster_produced_requests",
                "Requests Kafka took through this node",
                stats.requests.load(Relaxed),
            ),
            (
                "vx_cluster_direct_requests",
                "Requests of one record, produced without a transaction (idempotent producer)",
                stats.direct.load(Relaxed),
            ),
            (
                "vx_cluster_failed_direct_requests",
                "Requests of one record Kafka did not acknowledge (answered 503)",
                stats.failed_direct.load(Relaxed),
            ),
            (
                "vx_cluster_forwarded_requests",
                "Reads this node forwarded to the shard's owner",
                cluster.forwarded.load(Relaxed),
            ),
        ];
        for (name, help, v) in counters {
            let c = ConstCounter::new(v);
            let metric = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(metric)?;
        }
        let seconds = [
            (
                "vx_cluster_transaction_seconds",
                "Time spent in the ingest producer's transactions (begin to commit), summed",
                stats.commit_us.load(Relaxed) as f64 / 1e6,
            ),
            (
                "vx_cluster_direct_seconds",
                "Time from producing a one-record request to Kafka's acknowledgement, summed over vx_cluster_direct_requests_total",
                stats.direct_us.load(Relaxed) as f64 / 1e6,
            ),
            (
                "vx_cluster_shard_move_seconds",
                "Time from being given a partition to serving it, summed over vx_cluster_shard_moves_total",
                own.moves_ms.load(Relaxed) as f64 / 1e3,
            ),
        ];
        for (name, help, v) in seconds {
            let c = ConstCounter::new(v);
            let metric = encoder.encode_descriptor(name, help, None, c.metric_type())?;
            c.encode(metric)?;
        }
        gauge(
            &mut encoder,
            "vx_cluster_last_shard_move_seconds",
            "How long the last partition given to this node took to catch up",
            own.last_move_ms.load(Relaxed) as f64 / 1e3,
        )?;
        gauge(
            &mut encoder,
            "vx_cluster_ready",
            "1 when this node has joined the group and caught up with every partition it owns",
            if node.ready() { 1.0 } else { 0.0 },
        )
    }
}
