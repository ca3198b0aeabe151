//! The workload file: every key, its default and its meaning ([`KEYS`], which `--help` prints),
//! `--set key=value` overrides, and the checks that refuse a workload before anything is sent.

pub use crate::endpoint::Scenario;
use crate::endpoint::{Endpoint, EndpointError};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

mod keys;
pub use self::keys::{KEYS, Key, keys_help};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Uniform,
    Zipfian,
    /// Ingest entities 0, 1, 2, … in order across all connections (each once per pass over
    /// `key_space`: a fill of N new entities in N events); anything else picks uniformly.
    Sequential,
}

/// How ingest names the entities of its events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntityNames {
    /// `k` and the index.
    Short,
    /// The features and kv keys (`key:` and the zero-padded index, `key_size_b` bytes), so
    /// that the features and kv scenarios read what ingest made.
    Keys,
}

/// The body format of HTTP ingest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Ndjson,
    Json,
}

/// How a kv key holds its value over RESP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvType {
    /// `GET`, `SET`, `DEL`, `MGET`.
    String,
    /// A hash with one field `v`: `HGET key v`, `HSET key v value`, `DEL`.
    Hash,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    None,
    Write,
    Fsync,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::None => "none",
            Durability::Write => "write",
            Durability::Fsync => "fsync",
        }
    }
}

/// One workload, as the TOML file says it with the defaults of [`KEYS`] filled in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Workload {
    pub scenario: Scenario,
    #[serde(deserialize_with = "one_or_many")]
    pub endpoints: Vec<String>,
    pub connections: u32,
    pub pipeline_depth: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    pub warmup_s: f64,
    pub measure_s: f64,
    pub sample_hz: f64,
    pub seed: u64,
    pub timeout_s: f64,
    /// A secret: read from the workload, never written into a report.
    #[serde(skip_serializing)]
    pub token: Option<String>,
    pub key_space: u64,
    pub key_size_b: usize,
    pub value_size_b: usize,
    pub distribution: Distribution,
    pub zipf_alpha: f64,
    pub read_pct: f64,
    pub write_pct: f64,
    pub delete_pct: f64,
    pub query_pct: f64,
    pub kv_type: KvType,
    pub batch_size: u32,
    pub preload_keys: Option<u64>,
    pub batch: u32,
    pub streams: u64,
    pub stream_prefix: String,
    pub format: Format,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    pub ids: bool,
    pub entities: bool,
    pub entity_names: EntityNames,
    pub counter: bool,
    pub page_events: u32,
    pub scan_pct: f64,
    pub preload_events: u64,
    pub followers: u32,
    pub drain_s: f64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            scenario: Scenario::Ingest,
            endpoints: vec!["http://127.0.0.1:7100".into()],
            connections: 4,
            pipeline_depth: 1,
            rate: None,
            warmup_s: 2.0,
            measure_s: 10.0,
            sample_hz: 1.0,
            seed: 1,
            timeout_s: 10.0,
            token: None,
            key_space: 100_000,
            key_size_b: 16,
            value_size_b: 128,
            distribution: Distribution::Uniform,
            zipf_alpha: 0.99,
            read_pct: 70.0,
            write_pct: 25.0,
            delete_pct: 5.0,
            query_pct: 0.0,
            kv_type: KvType::String,
            batch_size: 100,
            preload_keys: None,
            batch: 1,
            streams: 1,
            stream_prefix: "lt-".into(),
            format: Format::Ndjson,
            durability: None,
            ids: false,
            entities: true,
            entity_names: EntityNames::Short,
            counter: false,
            page_events: 256,
            scan_pct: 0.0,
            preload_events: 0,
            followers: 100,
            drain_s: 2.0,
        }
    }
}

/// fanout: the most events a run may write (its ack table holds 8 bytes for each: 512 MiB).
pub const MAX_FANOUT_EVENTS: u64 = 1 << 26;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("--set {0}: expected key=value")]
    SetSyntax(String),
    #[error("--set {key}: {message}")]
    Set { key: String, message: String },
    #[error("{0}")]
    Endpoint(#[from] EndpointError),
    #[error("{0}")]
    Invalid(String),
}

impl Workload {
    /// Read a workload file and apply `--set` overrides (`key=value`, the value in TOML
    /// syntax; a bare word is taken as a string).
    pub fn load(path: &Path, sets: &[String]) -> Result<Workload, WorkloadError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Workload::from_toml(&text, &path.display().to_string(), sets)
    }

    pub fn from_toml(text: &str, origin: &str, sets: &[String]) -> Result<Workload, WorkloadError> {
        let mut table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| WorkloadError::Parse {
                    path: origin.to_string(),
                    message: e.to_string(),
                })?;
        for set in sets {
            let (key, value) = set
                .split_once('=')
                .ok_or_else(|| WorkloadError::SetSyntax(set.clone()))?;
            let key = key.trim();
            if !KEYS.iter().any(|k| k.name == key) {
                return Err(WorkloadError::Set {
                    key: key.into(),
                    message: "unknown key (vx-loadtest run --help lists them)".into(),
                });
            }
            table.insert(key.to_string(), parse_value(value.trim()));
        }
        let workload: Workload =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| WorkloadError::Parse {
                    path: origin.to_string(),
                    message: e.message().to_string(),
                })?;
        workload.validate()?;
        Ok(workload)
    }

    /// Refuse what cannot run, before anything is sent.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Invalid(m));
        if self.endpoints.is_empty() {
            return bad("endpoints: at least one is needed".into());
        }
        for e in &self.endpoints {
            let ep = Endpoint::parse(e)?;
            if !ep.serves(self.scenario) {
                return bad(format!(
                    "endpoint {e} cannot carry the {} scenario ({})",
                    self.scenario.as_str(),
                    match self.scenario {
                        Scenario::Ingest =>
                            "use http://, unix:, frames://, frames+unix: or resp://",
                        Scenario::Replay => "use http://, unix: or resp://",
                        Scenario::Features | Scenario::Fanout => "use http:// or unix:",
                        _ => "use resp://",
                    }
                ));
            }
        }
        if matches!(self.scenario, Scenario::Ingest | Scenario::Replay) {
            self.validate_streams_over_resp()?;
        }
        if self.connections == 0 || self.connections > 10_000 {
            return bad(format!(
                "connections: {} is not in 1..=10000",
                self.connections
            ));
        }
        if self.pipeline_depth == 0 || self.pipeline_depth > 4096 {
            return bad(format!(
                "pipeline_depth: {} is not in 1..=4096",
                self.pipeline_depth
            ));
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0 && rate <= 10_000_000.0)
        {
            return bad(format!(
                "rate: {rate} must be a number of operations/s above 0 and at most 10000000"
            ));
        }
        // HTTP endpoints open a connection per pipeline slot.
        let lanes = u64::from(self.connections) * u64::from(self.pipeline_depth);
        if self
            .endpoints
            .iter()
            .any(|e| e.starts_with("http://") || e.starts_with("unix:"))
            && lanes > 100_000
        {
            return bad(format!(
                "connections × pipeline_depth: {lanes} HTTP connections (at most 100000)"
            ));
        }
        for (name, v, max) in [
            ("warmup_s", self.warmup_s, 86_400.0),
            ("measure_s", self.measure_s, 86_400.0),
            ("timeout_s", self.timeout_s, 3_600.0),
        ] {
            if !(v.is_finite() && (0.0..=max).contains(&v)) {
                return bad(format!("{name}: {v} is not in 0..={max}"));
            }
        }
        if self.measure_s <= 0.0 {
            return bad("measure_s must be above 0".into());
        }
        if self.timeout_s <= 0.0 {
            return bad("timeout_s must be above 0".into());
        }
        if !(self.sample_hz.is_finite() && (0.1..=100.0).contains(&self.sample_hz)) {
            return bad(format!("sample_hz: {} is not in 0.1..=100", self.sample_hz));
        }
        if (self.warmup_s + self.measure_s) * self.sample_hz > 1_000_000.0 {
            return bad("(warmup_s + measure_s) × sample_hz: over a million samples".into());
        }
        if self.key_space == 0 {
            return bad("key_space must be at least 1".into());
        }
        if self.streams == 0 || self.streams > 10_000_000 {
            return bad(format!("streams: {} is not in 1..=10000000", self.streams));
        }
        if self.distribution == Distribution::Zipfian
            && !(self.zipf_alpha.is_finite() && self.zipf_alpha > 0.0)
        {
            return bad(format!("zipf_alpha: {} must be above 0", self.zipf_alpha));
        }
        if self.batch == 0 || self.batch > 1_000_000 {
            return bad(format!("batch: {} is not in 1..=1000000", self.batch));
        }
        if self.value_size_b > 64 << 20 {
            return bad("value_size_b: at most 64 MiB".into());
        }
        // kv's pipeline_depth keeps that many requests in flight on one connection; HTTP/1.1
        // cannot, and opening depth × connections instead (as ingest and replay do) would
        // compare features on more connections than kv: the same figure would mean two things.
        if self.scenario == Scenario::Features && self.pipeline_depth > 1 {
            return bad(format!(
                "pipeline_depth: {} cannot apply to features: HTTP/1.1 carries one request at a time per connection, so kv's depth (requests in flight on one connection) has no counterpart; set pipeline_depth = 1 and connections = {} for the same concurrency",
                self.pipeline_depth,
                u64::from(self.connections) * u64::from(self.pipeline_depth)
            ));
        }
        if matches!(self.scenario, Scenario::Kv | Scenario::Features) {
            let digits = self.key_space.saturating_sub(1).max(1).ilog10() as usize + 1;
            if self.key_size_b < 4 + digits || self.key_size_b > 4096 {
                return bad(format!(
                    "key_size_b: {} cannot hold \"key:\" and {digits} digits (or is over 4096)",
                    self.key_size_b
                ));
            }
            let pcts = [
                self.read_pct,
                self.write_pct,
                self.delete_pct,
                self.query_pct,
            ];
            if pcts.iter().any(|p| !(p.is_finite() && *p >= 0.0))
                || (pcts.iter().sum::<f64>() - 100.0).abs() > 1e-6
            {
                return bad(format!(
                    "read_pct + write_pct + delete_pct + query_pct must be 100 (they are {} + {} + {} + {})",
                    self.read_pct, self.write_pct, self.delete_pct, self.query_pct
                ));
            }
        }
        if self.kv_type == KvType::Hash && self.query_pct > 0.0 {
            return bad(
                "kv_type = \"hash\" has no batch read (no multi-key HGET): set query_pct to 0"
                    .into(),
            );
        }
        // Checked for every scenario (like batch), so a kv file and its features counterpart
        // are refused alike; 10000 is the feature query's limit (docs/API.md §6).
        if self.batch_size == 0 || self.batch_size > 10_000 {
            return bad(format!(
                "batch_size: {} is not in 1..=10000",
                self.batch_size
            ));
        }
        if self.scenario == Scenario::Replay {
            if self.page_events == 0 || self.page_events > 100_000 {
                return bad(format!(
                    "page_events: {} is not in 1..=100000",
                    self.page_events
                ));
            }
            if !(self.scan_pct.is_finite() && (0.0..=100.0).contains(&self.scan_pct)) {
                return bad(format!("scan_pct: {} is not in 0..=100", self.scan_pct));
            }
        }
        if self.scenario == Scenario::Fanout {
            self.validate_fanout()?;
        }
        if self.stream_prefix.is_empty() || self.stream_prefix.len() > 200 {
            return bad("stream_prefix: 1 to 200 bytes".into());
        }
        if self
            .stream_prefix
            .chars()
            .any(|c| c.is_control() || c == '"' || c == '\\')
        {
            return bad("stream_prefix: no control characters, quotes or backslashes".into());
        }
        Ok(())
    }

    /// Ingest and replay over RESP (Redis stream commands): all endpoints RESP, one event per
    /// XADD, no durability to send.
    fn validate_streams_over_resp(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Invalid(m));
        let resp = self
            .endpoints
            .iter()
            .filter(|e| e.starts_with("resp://"))
            .count();
        if resp == 0 {
            return Ok(());
        }
        if resp < self.endpoints.len() {
            return bad(format!(
                "endpoints: {} over resp:// is Redis stream commands (XADD, XRANGE), another workload than over the other schemes: give resp:// endpoints only, or none",
                self.scenario.as_str()
            ));
        }
        if self.scenario == Scenario::Ingest {
            if self.batch != 1 {
                return bad(format!(
                    "batch: {} — over resp:// each operation is one XADD of one event; set batch = 1 (pipeline_depth keeps several in flight)",
                    self.batch
                ));
            }
            if let Some(d) = self.durability {
                return bad(format!(
                    "durability: {} cannot be sent over resp:// (XADD has no durability argument): leave it out; the server's mode decides (Veltrix: --fsync; Redis: appendfsync)",
                    d.as_str()
                ));
            }
        }
        Ok(())
    }

    fn validate_fanout(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::Invalid(m));
        // The producers record the ack of every event in a table sized from the rate and the
        // run's length: a closed loop has no bound.
        if self.rate.is_none() {
            return bad(
                "fanout needs a rate (ingest requests/s, open loop): the producers write at a fixed rate while the followers read"
                    .into(),
            );
        }
        if self.streams != 1 {
            return bad(format!(
                "streams: {} — fanout follows one stream ({}0); set streams = 1",
                self.streams, self.stream_prefix
            ));
        }
        if self.followers == 0 || self.followers > 100_000 {
            return bad(format!(
                "followers: {} is not in 1..=100000",
                self.followers
            ));
        }
        if !(self.drain_s.is_finite() && (0.0..=3600.0).contains(&self.drain_s)) {
            return bad(format!("drain_s: {} is not in 0..=3600", self.drain_s));
        }
        let events = self.fanout_events_bound();
        if events > MAX_FANOUT_EVENTS {
            return bad(format!(
                "fanout: rate × batch × (warmup_s + measure_s) allows {events} events, over {MAX_FANOUT_EVENTS} (the producers keep an 8-byte ack time per event); shorten the run or lower the rate"
            ));
        }
        Ok(())
    }

    /// fanout: the most events the producers can write in a run (every open-loop send of
    /// every lane, each of `batch` events), the size of the ack table.
    pub fn fanout_events_bound(&self) -> u64 {
        let lanes = u64::from(self.connections) * u64::from(self.pipeline_depth);
        let rate = self.rate.unwrap_or(0.0);
        let requests = (rate * (self.warmup_s + self.measure_s)).ceil();
        let requests = if requests.is_finite() && requests < 1e15 {
            requests as u64
        } else {
            u64::MAX / 2
        };
        requests
            .saturating_add(lanes + 1)
            .saturating_mul(u64::from(self.batch))
    }

    /// fanout: the stream the followers follow and the producers write.
    pub fn fanout_stream(&self) -> String {
        format!("{}0", self.stream_prefix)
    }

    /// "open loop at R ops/s" or "closed loop", for titles.
    pub fn loop_label(&self) -> String {
        match self.rate {
            Some(r) => format!("open loop at {r} ops/s"),
            None => "closed loop".into(),
        }
    }

    /// The keys 0..n that kv SETs (features PUTs) before the run.
    pub fn kv_preload(&self) -> u64 {
        self.preload_keys
            .unwrap_or(self.key_space)
            .min(self.key_space)
    }

    /// The parsed endpoints (validated by [`Workload::validate`]).
    pub fn parsed_endpoints(&self) -> Result<Vec<Endpoint>, EndpointError> {
        self.endpoints.iter().map(|e| Endpoint::parse(e)).collect()
    }
}

/// A `--set` value: TOML if it parses as one, else the text as a string.
fn parse_value(text: &str) -> toml::Value {
    let doc = format!("v = {text}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(text.into())),
        Err(_) => toml::Value::String(text.into()),
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

#[cfg(test)]
mod tests;
