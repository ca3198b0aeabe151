//! The span policy of the hot path: the per-request `batch` spans (router) and the per-group
//! `commit` spans (storage's writer) go to the OTLP trace export only, never to the log.

/// Target of the per-request `batch` spans (router) and the per-group `commit` spans (the log
/// writer): they go to the OTLP trace export only, never to the log, so that without an
/// export they are disabled and cost one cached interest check. Enabled for the log as well,
/// creating and recording them cost 17 % of single-event requests/s (docs/BENCHMARKS.md,
/// issue 10).
pub const EXPORT_SPANS: &str = "vx_export";

/// A count as a span field: `tracing` fields recorded as `u64` reach the OTLP export as
/// strings (it maps only `i64` to integer attributes), so span counts are recorded as `i64`.
pub fn span_int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The caller's span (an ingest `batch`) for a span on another thread to follow, when those
/// spans are exported at all; otherwise none, without touching the span registry.
pub fn caller_span() -> tracing::Span {
    if tracing::span_enabled!(target: EXPORT_SPANS, tracing::Level::INFO) {
        tracing::Span::current()
    } else {
        tracing::Span::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_at_i64_max() {
        assert_eq!(span_int(7u64), 7);
        assert_eq!(span_int(u64::MAX), i64::MAX);
    }
}
