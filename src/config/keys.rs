//! The scalar config keys by name: one table (key, CLI flag, meaning) plus a getter and a
//! setter per key. The env layer sets keys through [`set`], and `--help` and the docs render
//! defaults through [`get`] on `Config::default()`, so the three can never disagree.

use super::units::{format_duration, format_size, parse_duration, parse_millis, parse_size};
use super::{Config, FsyncSetting, LogFormat};
use std::path::PathBuf;

/// One scalar key.
pub struct Key {
    /// Dotted name, as in the file: `ingest.queue_capacity`.
    pub name: &'static str,
    /// The `veltrix serve` flag that sets it, if any.
    pub flag: Option<&'static str>,
    pub help: &'static str,
}

impl Key {
    /// `VX_<SECTION>_<KEY>`.
    pub fn env(&self) -> String {
        format!("VX_{}", self.name.replace('.', "_").to_ascii_uppercase())
    }
}

const fn key(name: &'static str, flag: Option<&'static str>, help: &'static str) -> Key {
    Key { name, flag, help }
}

/// Every scalar key. List-valued keys (`features`, `auth.tokens`) are file-only: see [`FILE_ONLY`].
pub const KEYS: &[Key] = &[
    key(
        "server.listen",
        Some("--listen"),
        "HTTP address (host:port); port 0 picks a free one",
    ),
    key(
        "server.uds",
        Some("--uds"),
        "also serve HTTP on this Unix socket path",
    ),
    key(
        "server.uds_mode",
        None,
        "permission bits of the Unix socket (octal string)",
    ),
    key(
        "server.frames_listen",
        Some("--frames-listen"),
        "binary frames address, host:port (docs/PROTOCOL.md)",
    ),
    key(
        "server.frames_uds",
        Some("--frames-uds"),
        "binary frames Unix socket (mode server.uds_mode)",
    ),
    key(
        "server.shutdown_timeout",
        None,
        "bound on draining requests at shutdown",
    ),
    key(
        "server.frames_idle_timeout",
        None,
        "close a frames connection idle between frames this long",
    ),
    key(
        "server.max_followers",
        None,
        "live followers (SSE, NDJSON, WebSocket) at once; 503 past it",
    ),
    key(
        "server.header_timeout",
        None,
        "close a connection whose request head takes longer (frames: a stalled write)",
    ),
    key(
        "server.keepalive_timeout",
        None,
        "close an HTTP connection idle after its last answer this long",
    ),
    key(
        "server.max_connections",
        None,
        "open connections of all listeners; new ones refused past it",
    ),
    key(
        "storage.data_dir",
        Some("--data-dir"),
        "data directory (created if missing; locked)",
    ),
    key(
        "storage.shards",
        Some("--shards"),
        "shard count; unset: the recorded count, or 128 for a new data dir",
    ),
    key(
        "storage.fsync",
        Some("--fsync"),
        "always | interval | never",
    ),
    key(
        "storage.fsync_interval_ms",
        None,
        "max ms between fsyncs under fsync: interval",
    ),
    key(
        "storage.segment_bytes",
        None,
        "log segment size before rolling",
    ),
    key(
        "storage.max_streams",
        None,
        "max distinct streams (507 past it)",
    ),
    key(
        "storage.max_feature_bytes",
        None,
        "feature table budget (507 for new entities/features past it)",
    ),
    key(
        "storage.snapshot_interval",
        None,
        "how often the feature tables are snapshotted (and at shutdown)",
    ),
    key(
        "ingest.queue_capacity",
        None,
        "reservation capacity per shard, in events",
    ),
    key(
        "ingest.high_water",
        None,
        "fill of a shard (0..1] at which ingest gets 429",
    ),
    key(
        "ingest.low_water",
        None,
        "fill below which paused streaming connections resume",
    ),
    key(
        "ingest.max_queued_bytes",
        None,
        "bytes admitted but not yet written, all shards",
    ),
    key(
        "ingest.max_inflight_bytes",
        None,
        "bytes of request bodies being decoded",
    ),
    key(
        "ingest.max_body_bytes",
        None,
        "max request body (decompressed)",
    ),
    key("ingest.max_event_bytes", None, "max size of one event"),
    key(
        "ingest.dedup_window",
        None,
        "how long an (stream, id) pair is remembered",
    ),
    key(
        "ingest.dedup_memory",
        None,
        "memory budget of remembered ids, all shards",
    ),
    key(
        "ingest.body_timeout",
        None,
        "drop a request body (or a frame) that sends nothing this long (408)",
    ),
    key(
        "retention.max_age",
        None,
        "delete segments older than this (unset: keep)",
    ),
    key(
        "retention.max_bytes",
        None,
        "delete oldest segments past this size (unset: keep)",
    ),
    key(
        "otlp.stream_attribute",
        None,
        "OTLP in: resource attribute naming the stream of spans and logs",
    ),
    key(
        "telemetry.otlp_endpoint",
        None,
        "OTLP/HTTP trace export: a collector base URL (http://host:4318)",
    ),
    key("log.format", Some("--log-format"), "pretty | json"),
];

/// Keys that hold lists and can only be set in the file.
pub const FILE_ONLY: &[(&str, &str)] = &[
    (
        "features",
        "declared sliding-window features: [{name, from, agg, window, ttl, of}]",
    ),
    (
        "auth.tokens",
        "bearer tokens: [{token, scopes: [ingest, read, admin]}]",
    ),
];

fn opt_str<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn opt_path(v: &Option<PathBuf>) -> String {
    v.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The current value of `name` as it would be written in an env var ("" for unset).
pub fn get(cfg: &Config, name: &str) -> Option<String> {
    let s = &cfg.server;
    let st = &cfg.storage;
    let i = &cfg.ingest;
    Some(match name {
        "server.listen" => s.listen.clone(),
        "server.uds" => opt_path(&s.uds),
        "server.uds_mode" => format!("{:04o}", s.uds_mode),
        "server.frames_listen" => opt_str(s.frames_listen.as_ref()),
        "server.frames_uds" => opt_path(&s.frames_uds),
        "server.shutdown_timeout" => format_duration(s.shutdown_timeout),
        "server.frames_idle_timeout" => format_duration(s.frames_idle_timeout),
        "server.max_followers" => s.max_followers.to_string(),
        "server.header_timeout" => format_duration(s.header_timeout),
        "server.keepalive_timeout" => format_duration(s.keepalive_timeout),
        "server.max_connections" => s.max_connections.to_string(),
        "storage.data_dir" => st.data_dir.display().to_string(),
        "storage.shards" => opt_str(st.shards),
        "storage.fsync" => st.fsync.as_str().to_string(),
        "storage.fsync_interval_ms" => st.fsync_interval_ms.to_string(),
        "storage.segment_bytes" => format_size(st.segment_bytes),
        "storage.max_streams" => st.max_streams.to_string(),
        "storage.max_feature_bytes" => format_size(st.max_feature_bytes),
        "storage.snapshot_interval" => format_duration(st.snapshot_interval),
        "ingest.queue_capacity" => i.queue_capacity.to_string(),
        "ingest.high_water" => i.high_water.to_string(),
        "ingest.low_water" => i.low_water.to_string(),
        "ingest.max_queued_bytes" => format_size(i.max_queued_bytes),
        "ingest.max_inflight_bytes" => format_size(i.max_inflight_bytes),
        "ingest.max_body_bytes" => format_size(i.max_body_bytes),
        "ingest.max_event_bytes" => format_size(i.max_event_bytes),
        "ingest.dedup_window" => format_duration(i.dedup_window),
        "ingest.dedup_memory" => format_size(i.dedup_memory),
        "ingest.body_timeout" => format_duration(i.body_timeout),
        "retention.max_age" => opt_str(cfg.retention.max_age.map(format_duration)),
        "retention.max_bytes" => opt_str(cfg.retention.max_bytes.map(format_size)),
        "otlp.stream_attribute" => cfg.otlp.stream_attribute.clone(),
        "telemetry.otlp_endpoint" => opt_str(cfg.telemetry.otlp_endpoint.as_ref()),
        "log.format" => cfg.log.format.as_str().to_string(),
        _ => return None,
    })
}

fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a valid number"))
}

/// An empty value unsets an optional key.
fn opt<T>(v: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, String> {
    if v.trim().is_empty() {
        Ok(None)
    } else {
        parse(v).map(Some)
    }
}

/// Set `name` from its text form. Errors say what was expected; the caller adds where the
/// value came from.
pub fn set(cfg: &mut Config, name: &str, v: &str) -> Result<(), String> {
    let path = |v: &str| -> Result<PathBuf, String> { Ok(PathBuf::from(v)) };
    let string = |v: &str| -> Result<String, String> { Ok(v.to_string()) };
    match name {
        "server.listen" => cfg.server.listen = v.to_string(),
        "server.uds" => cfg.server.uds = opt(v, path)?,
        "server.uds_mode" => cfg.server.uds_mode = super::load::parse_octal_mode(v)?,
        "server.frames_listen" => cfg.server.frames_listen = opt(v, string)?,
        "server.frames_uds" => cfg.server.frames_uds = opt(v, path)?,
        "server.shutdown_timeout" => cfg.server.shutdown_timeout = parse_duration(v)?,
        "server.frames_idle_timeout" => cfg.server.frames_idle_timeout = parse_duration(v)?,
        "server.max_followers" => cfg.server.max_followers = num(v)?,
        "server.header_timeout" => cfg.server.header_timeout = parse_duration(v)?,
        "server.keepalive_timeout" => cfg.server.keepalive_timeout = parse_duration(v)?,
        "server.max_connections" => cfg.server.max_connections = num(v)?,
        "storage.data_dir" => cfg.storage.data_dir = PathBuf::from(v),
        "storage.shards" => cfg.storage.shards = opt(v, num)?,
        "storage.fsync" => {
            cfg.storage.fsync = FsyncSetting::parse(v.trim())
                .ok_or_else(|| format!("{v:?} is not one of always, interval, never"))?;
        }
        "storage.fsync_interval_ms" => cfg.storage.fsync_interval_ms = parse_millis(v)?,
        "storage.segment_bytes" => cfg.storage.segment_bytes = parse_size(v)?,
        "storage.max_streams" => cfg.storage.max_streams = num(v)?,
        "storage.max_feature_bytes" => cfg.storage.max_feature_bytes = parse_size(v)?,
        "storage.snapshot_interval" => cfg.storage.snapshot_interval = parse_duration(v)?,
        "ingest.queue_capacity" => cfg.ingest.queue_capacity = num(v)?,
        "ingest.high_water" => cfg.ingest.high_water = num(v)?,
        "ingest.low_water" => cfg.ingest.low_water = num(v)?,
        "ingest.max_queued_bytes" => cfg.ingest.max_queued_bytes = parse_size(v)?,
        "ingest.max_inflight_bytes" => cfg.ingest.max_inflight_bytes = parse_size(v)?,
        "ingest.max_body_bytes" => cfg.ingest.max_body_bytes = parse_size(v)?,
        "ingest.max_event_bytes" => cfg.ingest.max_event_bytes = parse_size(v)?,
        "ingest.dedup_window" => cfg.ingest.dedup_window = parse_duration(v)?,
        "ingest.dedup_memory" => cfg.ingest.dedup_memory = parse_size(v)?,
        "ingest.body_timeout" => cfg.ingest.body_timeout = parse_duration(v)?,
        "retention.max_age" => cfg.retention.max_age = opt(v, parse_duration)?,
        "retention.max_bytes" => cfg.retention.max_bytes = opt(v, parse_size)?,
        "otlp.stream_attribute" => cfg.otlp.stream_attribute = v.to_string(),
        "telemetry.otlp_endpoint" => cfg.telemetry.otlp_endpoint = opt(v, string)?,
        "log.format" => {
            cfg.log.format = LogFormat::parse(v.trim())
                .ok_or_else(|| format!("{v:?} is not one of pretty, json"))?;
        }
        _ => return Err(format!("unknown key {name}")),
    }
    Ok(())
}

/// The key table as plain text, for `veltrix serve --help`.
pub fn help_table() -> String {
    let defaults = Config::default();
    let mut out = String::from(
        "Configuration keys (file < env VX_<SECTION>_<KEY> < flag; file via --config or VX_CONFIG):\n",
    );
    for k in KEYS {
        let default = get(&defaults, k.name).unwrap_or_default();
        let default = if default.is_empty() {
            "unset".to_string()
        } else {
            default
        };
        let flag = k.flag.map(|f| format!(" [{f}]")).unwrap_or_default();
        out.push_str(&format!(
            "  {:<27} default {:<15} {}{flag}\n      {}\n",
            k.name,
            default,
            k.env(),
            k.help
        ));
    }
    for (name, help) in FILE_ONLY {
        out.push_str(&format!(
            "  {name:<27} default []  (file only)\n      {help}\n"
        ));
    }
    out.push_str("Log filter: env VX_LOG (or RUST_LOG), e.g. VX_LOG=info,veltrix=debug.\n");
    out
}
