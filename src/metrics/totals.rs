//! The counters since start that the status page shows, read from the same handles the
//! exposition encodes.

use super::{FORMATS, FormatHandles, Metrics, RejectLabels, Sums, route_bounds};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;

impl Metrics {
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
