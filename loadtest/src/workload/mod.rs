//! The workload file: every key, its default and its meaning ([`KEYS`], which `--help` prints),
//! `--set key=value` overrides, and the checks that refuse a workload before anything is sent.

use crate::endpoint::{Endpoint, EndpointError};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// What a run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    Ingest,
    Replay,
    Kv,
    Features,
    Fanout,
}

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Ingest => "ingest",
            Scenario::Replay => "replay",
            Scenario::Kv => "kv",
            Scenario::Features => "features",
            Scenario::Fanout => "fanout",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Uniform,
    Zipfian,
}

/// The body format of HTTP ingest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Ndjson,
    Json,
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
            batch_size: 100,
            preload_keys: None,
            batch: 1,
            streams: 1,
            stream_prefix: "lt-".into(),
            format: Format::Ndjson,
            durability: None,
            ids: false,
            entities: true,
            page_events: 256,
            scan_pct: 0.0,
            preload_events: 0,
            followers: 100,
            drain_s: 2.0,
        }
    }
}

/// A key of the workload file: its name, its default as written in TOML, and what it means.
pub struct Key {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Every key, in the order `--help` lists them. A unit test checks this against [`Workload`].
pub const KEYS: &[Key] = &[
    Key {
        name: "scenario",
        default: "\"ingest\"",
        help: "ingest | replay | kv (a key-value mix against Redis, over RESP) | features (the same mix against Veltrix's feature API, over HTTP) | fanout (followers of one stream over SSE while producers ingest it at rate; delivery latency and an ordering check)",
    },
    Key {
        name: "endpoints",
        default: "[\"http://127.0.0.1:7100\"]",
        help: "one or more of http://HOST:PORT, unix:/PATH, frames://HOST:PORT, frames+unix:/PATH, resp://HOST:PORT; connections are spread over them in turn",
    },
    Key {
        name: "connections",
        default: "4",
        help: "connections opened (per endpoint list, round-robin), 1 to 10000; with HTTP endpoints connections × pipeline_depth is at most 100000; fanout: the producers' connections (followers have their own, one each)",
    },
    Key {
        name: "pipeline_depth",
        default: "1",
        help: "requests in flight per connection; frames and RESP pipeline on one connection, HTTP/1.1 has no pipelining, so an http or unix endpoint opens this many connections per connection (features refuses more than 1: set connections to the concurrency instead)",
    },
    Key {
        name: "rate",
        default: "absent",
        help: "operations (requests) per second over all connections, open loop: sends are scheduled at this rate whatever the server does and latency is measured from the scheduled time; absent: closed loop, each slot sends when its previous answer arrives; at most 10000000; fanout needs it (ingest requests/s, so events/s = rate × batch)",
    },
    Key {
        name: "warmup_s",
        default: "2",
        help: "seconds of load before measuring (not in the histograms; fanout: nor are the deliveries of events written during it, though the ordering check covers them)",
    },
    Key {
        name: "measure_s",
        default: "10",
        help: "seconds measured",
    },
    Key {
        name: "sample_hz",
        default: "1",
        help: "time-series samples per second (the JSON report's intervals and the plot)",
    },
    Key {
        name: "seed",
        default: "1",
        help: "seed of every random choice (keys, streams, positions); the same seed replays the same operations",
    },
    Key {
        name: "timeout_s",
        default: "10",
        help: "an operation without an answer after this long is an error (the connection is reopened); fanout: also the limit for a follower's connection and response headers",
    },
    Key {
        name: "token",
        default: "absent",
        help: "bearer token for a server with auth.tokens (ingest or read scope as the scenario needs; features: read for GET and queries, ingest for PUT and DELETE; fanout: both, ingest for the producers and read for the followers)",
    },
    Key {
        name: "key_space",
        default: "100000",
        help: "distinct keys: kv keys, features entities, ingest entities",
    },
    Key {
        name: "key_size_b",
        default: "16",
        help: "bytes of a kv key or features entity (\"key:\" and zero-padded digits, as redis-benchmark writes them)",
    },
    Key {
        name: "value_size_b",
        default: "128",
        help: "kv: bytes of a SET value; features: bytes of the string feature v a PUT writes (the same bytes); ingest and fanout: bytes of each event's JSON (padded with a data string)",
    },
    Key {
        name: "distribution",
        default: "\"uniform\"",
        help: "uniform | zipfian: how keys (kv, features), entities and streams (ingest, replay) are picked",
    },
    Key {
        name: "zipf_alpha",
        default: "0.99",
        help: "the Zipfian exponent (rank 1, key 0, is the most frequent)",
    },
    Key {
        name: "read_pct",
        default: "70",
        help: "kv and features: percent of GETs",
    },
    Key {
        name: "write_pct",
        default: "25",
        help: "kv and features: percent of SETs (features: PUT)",
    },
    Key {
        name: "delete_pct",
        default: "5",
        help: "kv and features: percent of DELs (features: DELETE)",
    },
    Key {
        name: "query_pct",
        default: "0",
        help: "kv and features: percent of batch reads of batch_size keys (kv: MGET; features: POST /v1/features/query); read_pct + write_pct + delete_pct + query_pct add up to 100",
    },
    Key {
        name: "batch_size",
        default: "100",
        help: "kv and features: keys per batch read, 1 to 10000 (the feature query's maximum)",
    },
    Key {
        name: "preload_keys",
        default: "key_space",
        help: "kv and features: keys 0..N SET (features: PUT) before the warm-up, so GETs hit (0: none)",
    },
    Key {
        name: "batch",
        default: "1",
        help: "ingest and fanout: events per request (HTTP body or frames BATCH)",
    },
    Key {
        name: "streams",
        default: "1",
        help: "ingest and replay: streams written or read, named stream_prefix + 0..streams-1; each request picks one (fanout follows one stream: 1)",
    },
    Key {
        name: "stream_prefix",
        default: "\"lt-\"",
        help: "ingest and replay: prefix of the stream names; fanout follows and writes the stream stream_prefix + \"0\"",
    },
    Key {
        name: "format",
        default: "\"ndjson\"",
        help: "ingest over HTTP: ndjson | json (an array)",
    },
    Key {
        name: "durability",
        default: "absent",
        help: "ingest, fanout and features writes (PUT, DELETE): none | write | fsync, sent as X-Vx-Durability (frames: in the BATCH); absent: the server's mode",
    },
    Key {
        name: "ids",
        default: "false",
        help: "ingest and fanout: give every event a unique id (exercises dedup)",
    },
    Key {
        name: "entities",
        default: "true",
        help: "ingest and fanout: give every event an entity drawn from key_space (the feature store's path); false: no entity, ingest without features",
    },
    Key {
        name: "page_events",
        default: "256",
        help: "replay: events per page read (limit=), from a uniformly random position",
    },
    Key {
        name: "scan_pct",
        default: "0",
        help: "replay: percent of operations that read a whole stream (in pages of 100000) instead of one page",
    },
    Key {
        name: "preload_events",
        default: "0",
        help: "replay: before the warm-up, fill each of the streams to at least this many events (0: read the streams that exist)",
    },
    Key {
        name: "followers",
        default: "100",
        help: "fanout: SSE followers of the stream (GET /v1/streams/{stream}/events?follow=true), each on its own connection, all connected before the producers start; 1 to 100000",
    },
    Key {
        name: "drain_s",
        default: "2",
        help: "fanout: after the producers stop, seconds the followers have to receive the tail (through the last acked seq) before the ordering check; 0 to 3600",
    },
];

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
                        Scenario::Ingest => "use http://, unix:, frames:// or frames+unix:",
                        Scenario::Replay | Scenario::Features | Scenario::Fanout =>
                            "use http:// or unix:",
                        _ => "use resp://",
                    }
                ));
            }
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
        // Checked for every scenario (like batch), so a kv file and its features counterpart
        // are refused alike; 10000 is the feature query's limit (SPEC §6).
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

/// The `--help` text of the workload keys.
pub fn keys_help() -> String {
    let mut out = String::from(
        "WORKLOAD KEYS (TOML; any key can be given or overridden with --set key=value):\n",
    );
    for k in KEYS {
        out.push_str(&format!("  {:<15} default {}\n", k.name, k.default));
        for line in wrap(k.help, 76) {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_documented_key_and_every_key_is_a_field() {
        let mut w = Workload {
            rate: Some(1.0),
            token: Some("t".into()),
            durability: Some(Durability::Fsync),
            preload_keys: Some(1),
            ..Workload::default()
        };
        w.endpoints = vec!["http://127.0.0.1:1".into()];
        let table = toml::Table::try_from(&w).map_err(|e| e.to_string());
        let table = match table {
            Ok(t) => t,
            Err(e) => panic!("serialize: {e}"),
        };
        let mut fields: Vec<&str> = table.keys().map(String::as_str).collect();
        // The token is never serialized (reports must not carry it), but it is a key.
        assert!(!fields.contains(&"token"));
        fields.push("token");
        let keys: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        for f in &fields {
            assert!(keys.contains(f), "field {f} is not in KEYS");
        }
        for k in &keys {
            assert!(fields.contains(k), "KEYS names {k}, which is no field");
        }
    }

    #[test]
    fn defaults_fill_what_the_file_leaves_out_and_set_overrides() {
        let w = Workload::from_toml(
            "scenario = \"kv\"\nendpoints = \"resp://127.0.0.1:6379\"\n",
            "t.toml",
            &[
                "rate=5000".into(),
                "distribution=zipfian".into(),
                "measure_s=3".into(),
            ],
        );
        let w = match w {
            Ok(w) => w,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(w.scenario, Scenario::Kv);
        assert_eq!(w.endpoints, vec!["resp://127.0.0.1:6379".to_string()]);
        assert_eq!(w.rate, Some(5000.0));
        assert_eq!(w.distribution, Distribution::Zipfian);
        assert_eq!(w.measure_s, 3.0);
        assert_eq!(w.connections, 4);
        assert_eq!(w.kv_preload(), 100_000);
    }

    #[test]
    fn unknown_keys_bad_values_and_mismatched_endpoints_are_refused() {
        let err = |text: &str, sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            match Workload::from_toml(text, "t.toml", &sets) {
                Ok(w) => panic!("accepted {w:?}"),
                Err(e) => e.to_string(),
            }
        };
        assert!(err("rat = 5\n", &[]).contains("rat"));
        assert!(err("", &["nope=1"]).contains("unknown key"));
        assert!(err("", &["rate"]).contains("key=value"));
        assert!(err("", &["rate=-1"]).contains("rate"));
        assert!(err("", &["rate=1e12"]).contains("rate"));
        assert!(
            err("", &["connections=10000", "pipeline_depth=4096"]).contains("HTTP connections")
        );
        assert!(
            err("scenario = \"replay\"\nendpoints = \"resp://h:1\"\n", &[])
                .contains("cannot carry")
        );
        assert!(
            err(
                "scenario = \"kv\"\nendpoints = \"resp://h:1\"\nread_pct = 50\n",
                &[]
            )
            .contains("100")
        );
        assert!(
            err("scenario = \"features\"\nendpoints = \"resp://h:1\"\n", &[])
                .contains("use http:// or unix:")
        );
        assert!(
            err("scenario = \"features\"\n", &["pipeline_depth=4"])
                .contains("set pipeline_depth = 1 and connections = 16")
        );
        assert!(
            err("scenario = \"features\"\n", &["query_pct=10"]).contains("query_pct must be 100")
        );
        assert!(
            err(
                "scenario = \"kv\"\nendpoints = \"resp://h:1\"\n",
                &["batch_size=10001"]
            )
            .contains("batch_size")
        );
        assert!(err("scenario = \"features\"\n", &["batch_size=0"]).contains("batch_size"));
        assert!(
            err(
                "scenario = \"features\"\n",
                &["key_space=1000000", "key_size_b=8"]
            )
            .contains("key_size_b")
        );
        assert!(err("scenario = \"fanout\"\n", &[]).contains("needs a rate"));
        assert!(err("scenario = \"fanout\"\nrate = 10\n", &["streams=2"]).contains("one stream"));
        assert!(err("scenario = \"fanout\"\nrate = 10\n", &["followers=0"]).contains("followers"));
        assert!(err("scenario = \"fanout\"\nrate = 10\n", &["drain_s=-1"]).contains("drain_s"));
        assert!(err("scenario = \"fanout\"\nrate = 1e6\nbatch = 1000\n", &[]).contains("ack time"));
        assert!(
            err(
                "scenario = \"fanout\"\nrate = 10\nendpoints = \"frames://h:1\"\n",
                &[]
            )
            .contains("use http:// or unix:")
        );
        assert!(err("endpoints = \"ftp://x\"\n", &[]).contains("ftp://x"));
    }

    #[test]
    fn features_takes_kv_keys_over_http_and_a_mix_with_batch_reads() {
        let w = Workload::from_toml(
            "scenario = \"features\"\nendpoints = [\"http://127.0.0.1:7100\", \"unix:/tmp/vx.sock\"]\n",
            "t.toml",
            &[
                "read_pct=50".into(),
                "write_pct=10".into(),
                "delete_pct=0".into(),
                "query_pct=40".into(),
                "batch_size=10000".into(),
            ],
        );
        let w = match w {
            Ok(w) => w,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(w.scenario, Scenario::Features);
        assert_eq!((w.query_pct, w.batch_size), (40.0, 10_000));
        assert_eq!(w.kv_preload(), 100_000);
        // The defaults mix is kv's: no batch reads, 100 keys each when asked.
        let d = Workload::default();
        assert_eq!((d.query_pct, d.batch_size), (0.0, 100));
    }

    fn load(name: &str) -> Workload {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("workloads")
            .join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(text.starts_with("# "), "{name} opens with what it models");
        match Workload::load(&path, &[]) {
            Ok(w) => w,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn every_workload_file_loads_and_features_files_are_kv_files_over_http() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        names.sort();
        for name in &names {
            load(name);
        }
        // Each pair differs in its scenario and endpoint only, so a comparison of the two
        // is one of the stores, not of the workloads.
        for (kv, features) in [
            ("kv-70-25-5.toml", "features-70-25-5.toml"),
            ("kv-get.toml", "features-get.toml"),
            ("kv-query.toml", "features-query.toml"),
        ] {
            assert!(names.iter().any(|n| n == features), "{features}");
            let (a, mut b) = (load(kv), load(features));
            assert_eq!((a.scenario, b.scenario), (Scenario::Kv, Scenario::Features));
            assert_eq!(a.endpoints, ["resp://127.0.0.1:6379"]);
            assert_eq!(b.endpoints, ["http://127.0.0.1:7100"]);
            b.scenario = a.scenario;
            b.endpoints = a.endpoints.clone();
            assert_eq!(a, b, "{kv} and {features}");
        }
        let get = load("features-get.toml");
        assert_eq!(
            (get.read_pct, get.rate, get.connections),
            (100.0, Some(20_000.0), 50)
        );
        // The match shape: 45 groups × 80 events/s, one event per request, 720 followers.
        let fanout = load("fanout-match.toml");
        assert_eq!(fanout.scenario, Scenario::Fanout);
        assert_eq!(
            (
                fanout.followers,
                fanout.connections,
                fanout.rate,
                fanout.batch
            ),
            (720, 45, Some(3600.0), 1)
        );
        assert_eq!(
            fanout.rate.map(|r| r / f64::from(fanout.connections)),
            Some(80.0)
        );
        assert_eq!(fanout.fanout_stream(), "match-0");
        let query = load("features-query.toml");
        assert_eq!(
            (query.query_pct, query.batch_size, query.rate),
            (100.0, 100, None)
        );
    }

    #[test]
    fn help_lists_every_key() {
        let help = keys_help();
        for k in KEYS {
            assert!(help.contains(k.name), "{}", k.name);
        }
    }
}
