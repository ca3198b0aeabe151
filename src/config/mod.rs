//! The service configuration (docs/CONFIG.md): one struct tree holding every key with its embedded
//! default, loaded in layers — defaults < YAML file < `VX_<SECTION>_<KEY>` env vars < CLI flags —
//! and validated once before anything starts.
//!
//! - [`sections`]: every scalar key declared once (field, default, text form, flag, help,
//!   docs), in the form [`declare`] defines; the section structs are generated from it.
//! - [`units`]: durations and sizes as written in the file and env vars; [`codec`]: the text
//!   form of each kind of value.
//! - [`keys`]: the declared keys by name — get/set, the `veltrix serve` flags, `--help`'s
//!   table and `docs/CONFIG.md`'s.
//! - [`load`](mod@load): reading the file (with file/line/key errors), the env and flag layers
//!   and validation.

pub mod codec;
pub mod declare;
pub mod keys;
pub mod load;
pub mod sections;
pub mod units;

#[cfg(test)]
mod tests;

use serde::Deserialize;
use std::time::Duration;

pub use load::{ConfigError, Overrides, load};
pub use sections::{
    ClusterConfig, IngestConfig, LogConfig, OtlpConfig, RetentionConfig, ServerConfig,
    StorageSection, TelemetryConfig,
};

/// The whole configuration. Every section has a default, so an empty file is valid.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageSection,
    pub ingest: IngestConfig,
    pub retention: RetentionConfig,
    /// Declared sliding-window features (docs/API.md §6; file only) and the feature store's
    /// keys.
    pub features: FeaturesSection,
    pub auth: AuthConfig,
    /// OTLP in (`POST /v1/traces`, `/v1/logs`).
    pub otlp: OtlpConfig,
    pub telemetry: TelemetryConfig,
    /// Cluster mode on Kafka (docs/CLUSTER.md).
    pub cluster: ClusterConfig,
    pub log: LogConfig,
    /// `--repair`: a start-up mode, not a key; never read from the file or env.
    #[serde(skip)]
    pub repair: bool,
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

/// The shard count of a new data dir when none is given (docs/CONFIG.md `storage.shards`).
pub const DEFAULT_SHARDS: u32 = 128;

pub use vx_storage::features::{Agg, DistinctOf};

/// `features`: the declarations (a list, file only) and the feature store's keys
/// (`features.apply_threads`, declared with the other keys in [`sections`]). In the file,
/// either the list of declarations, as before there were keys, or a mapping of the keys and
/// the list under `declare`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeaturesSection {
    /// `features.apply_threads`: `None` is half the usable cores.
    pub apply_threads: Option<usize>,
    pub declare: Vec<FeatureDecl>,
}

impl<'de> Deserialize<'de> for FeaturesSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        /// The mapping form.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Keyed {
            #[serde(default)]
            apply_threads: Option<usize>,
            #[serde(default)]
            declare: Vec<FeatureDecl>,
        }
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = FeaturesSection;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a list of feature declarations, or a mapping of `apply_threads` and `declare`",
                )
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                a: A,
            ) -> Result<Self::Value, A::Error> {
                Ok(FeaturesSection {
                    apply_threads: None,
                    declare: Vec::deserialize(SeqAccessDeserializer::new(a))?,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                a: A,
            ) -> Result<Self::Value, A::Error> {
                let k = Keyed::deserialize(MapAccessDeserializer::new(a))?;
                Ok(FeaturesSection {
                    apply_threads: k.apply_threads,
                    declare: k.declare,
                })
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(FeaturesSection::default())
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(FeaturesSection::default())
            }
        }
        d.deserialize_any(Form)
    }
}

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

/// `cluster.mode`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClusterMode {
    /// One node with its own log.
    #[default]
    Single,
    /// Shards are the partitions of a Kafka topic (docs/CLUSTER.md).
    Kafka,
}

impl ClusterMode {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "single" => Some(Self::Single),
            "kafka" => Some(Self::Kafka),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Kafka => "kafka",
        }
    }
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
        s.index_cache_bytes = self.storage.index_cache_bytes;
        s.features = self
            .features
            .declare
            .iter()
            .map(FeatureDecl::to_storage)
            .collect();
        if let Some(n) = self.features.apply_threads {
            s.apply_threads = n;
        }
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
