//! The service configuration (SPEC §1): one struct tree holding every key with its embedded
//! default, loaded in layers — defaults < YAML file < `VX_<SECTION>_<KEY>` env vars < CLI flags —
//! and validated once before anything starts.
//!
//! - [`units`]: durations and sizes as written in the file and env vars.
//! - [`keys`]: the table of scalar keys (name, flag, help) and their get/set by name, which
//!   drives the env layer, `veltrix serve --help` and `docs/CONFIG.md`.
//! - [`load`](mod@load): reading the file (with file/line/key errors), the env layer and validation.

pub mod keys;
pub mod load;
pub mod units;

#[cfg(test)]
mod tests;

use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

pub use load::{ConfigError, Overrides, load};

const MIB: u64 = 1 << 20;

/// The whole configuration. Every section has a default, so an empty file is valid.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageSection,
    pub ingest: IngestConfig,
    pub retention: RetentionConfig,
    /// Declared sliding-window features (SPEC §6); file only.
    pub features: Vec<FeatureDecl>,
    pub auth: AuthConfig,
    /// OTLP in (`POST /v1/traces`, `/v1/logs`).
    pub otlp: OtlpConfig,
    pub telemetry: TelemetryConfig,
    pub log: LogConfig,
    /// `--repair`: a start-up mode, not a key; never read from the file or env.
    #[serde(skip)]
    pub repair: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port`; resolved when binding, so `localhost:7100` works too.
    pub listen: String,
    pub uds: Option<PathBuf>,
    /// Octal permission bits of the Unix socket, written as a string (`"0660"`) because YAML
    /// 1.2 reads an unquoted `0660` as the decimal 660.
    #[serde(deserialize_with = "load::octal_mode")]
    pub uds_mode: u32,
    pub frames_listen: Option<String>,
    pub frames_uds: Option<PathBuf>,
    /// Bound on draining in-flight requests at shutdown.
    #[serde(deserialize_with = "units::duration")]
    pub shutdown_timeout: Duration,
    /// A frames connection that sends nothing between frames for this long is closed.
    #[serde(deserialize_with = "units::duration")]
    pub frames_idle_timeout: Duration,
    /// Live followers (SSE, NDJSON and WebSocket) at once; past it a new one gets 503.
    pub max_followers: usize,
    /// How long a request head may take from its first byte (or from the accept) to its end;
    /// also bounds each write to a frames client that stopped reading.
    #[serde(deserialize_with = "units::duration")]
    pub header_timeout: Duration,
    /// An HTTP connection with no request in flight and no byte received for this long
    /// after its last answer is closed.
    #[serde(deserialize_with = "units::duration")]
    pub keepalive_timeout: Duration,
    /// Open connections of all listeners together; past it new ones are refused.
    pub max_connections: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:7100".into(),
            uds: None,
            uds_mode: 0o660,
            frames_listen: None,
            frames_uds: None,
            shutdown_timeout: Duration::from_secs(30),
            frames_idle_timeout: Duration::from_secs(600),
            max_followers: 10_000,
            header_timeout: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(300),
            max_connections: 16_384,
        }
    }
}

/// `storage.fsync`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FsyncSetting {
    Always,
    Interval,
    Never,
}

impl FsyncSetting {
    pub fn parse(s: &str) -> Option<Self> {
        vx_storage::FsyncMode::parse(s).map(Self::from_mode)
    }

    fn from_mode(m: vx_storage::FsyncMode) -> Self {
        match m {
            vx_storage::FsyncMode::Always => Self::Always,
            vx_storage::FsyncMode::Interval => Self::Interval,
            vx_storage::FsyncMode::Never => Self::Never,
        }
    }

    pub fn mode(self) -> vx_storage::FsyncMode {
        match self {
            Self::Always => vx_storage::FsyncMode::Always,
            Self::Interval => vx_storage::FsyncMode::Interval,
            Self::Never => vx_storage::FsyncMode::Never,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.mode().as_str()
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    pub data_dir: PathBuf,
    /// `None`: the count recorded in the data dir, or 128 for a new one. Only an explicit
    /// value can conflict with the recorded count.
    pub shards: Option<u32>,
    pub fsync: FsyncSetting,
    /// Upper bound on the time between fsyncs under `fsync: interval`.
    #[serde(deserialize_with = "units::millis")]
    pub fsync_interval_ms: u64,
    #[serde(deserialize_with = "units::size")]
    pub segment_bytes: u64,
    pub max_streams: u64,
    /// Budget of the feature tables: past it, writes creating entities or features get 507.
    #[serde(deserialize_with = "units::size")]
    pub max_feature_bytes: u64,
    /// How often the feature tables are snapshotted (also at shutdown).
    #[serde(deserialize_with = "units::duration")]
    pub snapshot_interval: Duration,
}

/// The shard count of a new data dir when none is given (SPEC §1).
pub const DEFAULT_SHARDS: u32 = 128;

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            data_dir: PathBuf::from("./veltrix-data"),
            shards: None,
            fsync: FsyncSetting::Always,
            fsync_interval_ms: 100,
            segment_bytes: 128 * MIB,
            max_streams: 1_000_000,
            max_feature_bytes: 1024 * MIB,
            snapshot_interval: Duration::from_secs(300),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// Reservation counter per shard, in events.
    pub queue_capacity: u32,
    pub high_water: f64,
    pub low_water: f64,
    #[serde(deserialize_with = "units::size")]
    pub max_queued_bytes: u64,
    #[serde(deserialize_with = "units::size")]
    pub max_inflight_bytes: u64,
    #[serde(deserialize_with = "units::size")]
    pub max_body_bytes: u64,
    #[serde(deserialize_with = "units::size")]
    pub max_event_bytes: u64,
    #[serde(deserialize_with = "units::duration")]
    pub dedup_window: Duration,
    #[serde(deserialize_with = "units::size")]
    pub dedup_memory: u64,
    /// A request body (or a frame mid-way) that receives nothing for this long is dropped.
    #[serde(deserialize_with = "units::duration")]
    pub body_timeout: Duration,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            queue_capacity: 8192,
            high_water: 0.9,
            low_water: 0.75,
            max_queued_bytes: 512 * MIB,
            max_inflight_bytes: 512 * MIB,
            max_body_bytes: 64 * MIB,
            max_event_bytes: MIB,
            dedup_window: Duration::from_secs(600),
            dedup_memory: 64 * MIB,
            body_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Age (on append time) past which whole segments are deleted; `None`: keep forever.
    #[serde(deserialize_with = "units::opt_duration")]
    pub max_age: Option<Duration>,
    /// Total log size past which the oldest segments are deleted; `None`: no bound.
    #[serde(deserialize_with = "units::opt_size")]
    pub max_bytes: Option<u64>,
}

pub use vx_storage::features::{Agg, DistinctOf};

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FeatureDecl {
    pub name: String,
    /// The event `type` it aggregates.
    pub from: String,
    pub agg: Agg,
    /// Sliding window, 1 s to 30 d; `None`: all time.
    #[serde(default, deserialize_with = "units::opt_duration")]
    pub window: Option<Duration>,
    #[serde(default, deserialize_with = "units::opt_duration")]
    pub ttl: Option<Duration>,
    /// `distinct` only: what it counts distinct values of (default `value`).
    #[serde(default)]
    pub of: DistinctOf,
}

impl FeatureDecl {
    /// The storage engine's form of the declaration.
    pub fn to_storage(&self) -> vx_storage::features::FeatureDecl {
        vx_storage::features::FeatureDecl {
            name: self.name.clone(),
            from: self.from.clone(),
            agg: self.agg,
            window: self.window,
            ttl: self.ttl,
            of: self.of,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Bearer tokens; empty: auth off. File only, so tokens never sit in the environment.
    pub tokens: Vec<TokenDecl>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Ingest,
    Read,
    Admin,
}

#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TokenDecl {
    pub token: String,
    pub scopes: Vec<Scope>,
}

impl std::fmt::Debug for TokenDecl {
    /// Tokens are secrets: never print them (config dumps end up in logs).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenDecl")
            .field("token", &"<redacted>")
            .field("scopes", &self.scopes)
            .finish()
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// The resource attribute whose value names an OTLP item's stream (`service.name`:
    /// one stream per service). Resources without it go to `unknown_service`, as in OTel.
    pub stream_attribute: String,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            stream_attribute: "service.name".to_string(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    pub otlp_endpoint: Option<String>,
}

/// `log.format`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable, one line per event.
    #[default]
    Pretty,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pretty" => Some(Self::Pretty),
            "json" => Some(Self::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pretty => "pretty",
            Self::Json => "json",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
}

impl Config {
    /// The storage engine's configuration derived from this one.
    pub fn storage_config(&self) -> vx_storage::StorageConfig {
        let mut s = vx_storage::StorageConfig::new(self.storage.data_dir.clone());
        s.shards = self.storage.shards;
        s.fsync = self.storage.fsync.mode();
        s.fsync_interval = Duration::from_millis(self.storage.fsync_interval_ms);
        s.segment_bytes = self.storage.segment_bytes;
        s.dedup_window = self.ingest.dedup_window;
        s.dedup_memory = self.ingest.dedup_memory;
        s.max_streams = self.storage.max_streams;
        s.max_feature_bytes = self.storage.max_feature_bytes;
        s.snapshot_interval = self.storage.snapshot_interval;
        s.features = self.features.iter().map(FeatureDecl::to_storage).collect();
        s.retention = vx_storage::Retention {
            max_age: self.retention.max_age,
            max_bytes: self.retention.max_bytes,
        };
        s.repair = self.repair;
        s
    }

    /// The router's admission configuration, once the store knows the shard count.
    pub fn admission_config(&self, shards: u32) -> vx_router::AdmissionConfig {
        vx_router::AdmissionConfig {
            shards,
            queue_capacity: self.ingest.queue_capacity,
            high_water: self.ingest.high_water,
            low_water: self.ingest.low_water,
            max_queued_bytes: self.ingest.max_queued_bytes,
        }
    }
}
