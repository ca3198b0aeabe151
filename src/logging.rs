//! Logging set-up: `tracing` to stderr, human-readable (`log.format: pretty`, one line per
//! event) or one JSON object per line (`json`, with the message in `message`). The filter is
//! an `EnvFilter` directive string from `VX_LOG`, else `RUST_LOG`, else `info`.

use crate::config::LogFormat;
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Install the global subscriber. Fails on a bad filter directive or if one is installed.
pub fn init(format: LogFormat) -> Result<(), String> {
    let (var, spec) = match (std::env::var("VX_LOG"), std::env::var("RUST_LOG")) {
        (Ok(v), _) => ("VX_LOG", v),
        (_, Ok(v)) => ("RUST_LOG", v),
        _ => ("default", "info".to_string()),
    };
    let filter =
        EnvFilter::try_new(&spec).map_err(|e| format!("bad log filter {var}={spec:?}: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Pretty => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    result.map_err(|e| format!("cannot install the logger: {e}"))
}
