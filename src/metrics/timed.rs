//! [`Timed`], a latency histogram on atomics, and [`Sums`], one reading of it: the exposition
//! encodes the same counts the status page reads.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

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
pub(super) fn route_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_25, 2.0, 16)
}

/// Bucket upper bounds of `vx_fsync_duration_seconds`: 50 µs × 2ⁿ.
pub(super) fn fsync_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 18)
}

impl Timed {
    pub(super) fn new(bounds: Arc<[f64]>) -> Self {
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

/// A histogram's count, sum and bucket counts (see [`Timed`]): two readings give the mean and
/// the quantiles over the interval between them.
#[derive(Clone, Debug, Default, serde::Serialize, utoipa::ToSchema)]
pub struct Sums {
    pub count: u64,
    pub sum_seconds: f64,
    pub buckets: Vec<u64>,
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
