//! Logging set-up: `tracing` to stderr, human-readable (`log.format: pretty`, one line per
//! event) or one JSON object per line (`json`, with the message in `message`), and, when
//! `telemetry.otlp_endpoint` is set, the same spans exported over OTLP (src/telemetry.rs).
//! The log filter is an `EnvFilter` directive string from `VX_LOG`, else `RUST_LOG`, else
//! `info`; the export has its own filter (our crates at `info`), so a verbose log never
//! floods the collector and the exporter's own HTTP client is never traced into itself. The
//! hot-path spans (`batch`, `commit`: target [`vx_sys::EXPORT_SPANS`]) go to the export
//! only, so that without one they are disabled (a `VX_LOG` naming `vx_export` puts them in
//! the log too).

use crate::config::LogFormat;
use crate::telemetry::Telemetry;
use std::io::IsTerminal;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The crates whose spans and events are exported: ours, and the hot-path spans.
const EXPORTED: [&str; 6] = [
    "veltrix",
    "vx_router",
    "vx_storage",
    "vx_ingest",
    "vx_proto",
    vx_sys::EXPORT_SPANS,
];

/// Why the logger could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `var` is where the filter came from (`VX_LOG`, `RUST_LOG` or the default).
    #[error("bad log filter {var}={spec:?}: {source}")]
    Filter {
        var: &'static str,
        spec: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("cannot install the logger: {0}")]
    Install(#[source] tracing_subscriber::util::TryInitError),
}

/// Install the global subscriber. Fails on a bad filter directive or if one is installed.
pub fn init(format: LogFormat, telemetry: Option<&Telemetry>) -> Result<(), LoggingError> {
    let (var, spec) = match (std::env::var("VX_LOG"), std::env::var("RUST_LOG")) {
        (Ok(v), _) => ("VX_LOG", v),
        (_, Ok(v)) => ("RUST_LOG", v),
        _ => ("default", "info".to_string()),
    };
    // The hot-path spans are off for the log unless the filter names them.
    let spans_off = format!("{}=off", vx_sys::EXPORT_SPANS);
    let spec_with_default = if spec.contains(vx_sys::EXPORT_SPANS) {
        spec.clone()
    } else if spec.trim().is_empty() {
        spans_off
    } else {
        format!("{spec},{spans_off}")
    };
    let filter = EnvFilter::try_new(&spec_with_default).map_err(|source| LoggingError::Filter {
        var,
        spec: spec.clone(),
        source,
    })?;
    let log: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Pretty => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    let installed = match telemetry {
        // No export: the filter is global, as cheap as `tracing` gets (per-layer filters cost
        // every span enter and exit a filter lookup: measurable on single-event requests).
        None => tracing_subscriber::registry()
            .with(log)
            .with(filter)
            .try_init(),
        Some(telemetry) => {
            let targets = EXPORTED.iter().fold(Targets::new(), |t, name| {
                t.with_target(*name, tracing::Level::INFO)
            });
            let export = tracing_opentelemetry::layer()
                .with_tracer(telemetry.tracer())
                .with_threads(false)
                .with_filter(targets)
                .boxed();
            tracing_subscriber::registry()
                .with(vec![log.with_filter(filter).boxed(), export])
                .try_init()
        }
    };
    installed.map_err(LoggingError::Install)
}
