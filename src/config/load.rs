//! Loading the configuration in layers (defaults < file < env < CLI) and validating it.

use super::keys::{self, FILE_ONLY, KEYS, KeyFlags};
use super::units::BadValue;
use super::{Config, FsyncSetting};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Values given as `veltrix serve` flags: the top layer. A key not given keeps a lower
/// layer's value (in particular `--shards`: only an explicit count can conflict with the one
/// recorded in the data dir).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `(key, value)` of the key flags given.
    pub flags: KeyFlags,
    /// `--repair`: a start-up mode, not a key.
    pub repair: bool,
}

impl Overrides {
    /// The flags of `pairs` (`(key, value)`), without `--repair`.
    pub fn keys(pairs: &[(&'static str, &str)]) -> Overrides {
        let flags = pairs.iter().map(|&(k, v)| (k, v.to_string())).collect();
        Overrides {
            flags: KeyFlags(flags),
            repair: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {}, line {line}: unknown key `{key}` (expected one of: {expected})", path.display())]
    UnknownKey {
        path: PathBuf,
        line: u64,
        key: String,
        expected: String,
    },
    #[error("config file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("env {var}: {source}")]
    Env { var: String, source: BadValue },
    #[error("flag {flag}: {source}")]
    Flag { flag: String, source: BadValue },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Env vars that belong to the process rather than to a key.
const NON_KEY_ENV: &[&str] = &["VX_CONFIG", "VX_LOG", "VX_SERVER", "VX_TOKEN"];

/// The `VX_*` variables of this process, lossily decoded (a non-UTF-8 value then fails to
/// parse with a clear message instead of panicking in `std::env::vars`).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.to_string_lossy().into_owned();
            k.starts_with("VX_")
                .then(|| (k, v.to_string_lossy().into_owned()))
        })
        .collect()
}

/// Build the configuration from its layers. Returns it with warnings to log once logging is up
/// (logging itself depends on `log.format`).
pub fn load(
    file: Option<&Path>,
    env: &[(String, String)],
    cli: &Overrides,
) -> Result<(Config, Vec<String>), ConfigError> {
    let mut warnings = Vec::new();
    let mut cfg = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            parse_file(path, &text)?
        }
        None => Config::default(),
    };

    let mut env: Vec<&(String, String)> =
        env.iter().filter(|(k, _)| k.starts_with("VX_")).collect();
    env.sort();
    for (var, value) in env {
        if NON_KEY_ENV.contains(&var.as_str()) {
            continue;
        }
        match KEYS.iter().find(|k| k.env() == *var) {
            Some(k) => keys::set(&mut cfg, k.name, value).map_err(|source| ConfigError::Env {
                var: var.clone(),
                source,
            })?,
            None => match FILE_ONLY.iter().find(|f| keys::env_name(f.name) == *var) {
                Some(f) => warnings.push(format!(
                    "ignoring env {var}: {} is a list and can only be set in the config file",
                    f.name
                )),
                None => warnings.push(format!("ignoring unknown env var {var}")),
            },
        }
    }

    apply_cli(&mut cfg, cli)?;
    validate(&cfg)?;
    Ok((cfg, warnings))
}

fn apply_cli(cfg: &mut Config, cli: &Overrides) -> Result<(), ConfigError> {
    for (name, value) in &cli.flags.0 {
        keys::set(cfg, name, value).map_err(|source| ConfigError::Flag {
            flag: keys::find(name)
                .and_then(|k| k.flag.as_ref())
                .map_or_else(|| name.to_string(), |f| f.long.to_string()),
            source,
        })?;
    }
    cfg.repair = cli.repair;
    Ok(())
}

/// Parse the YAML text of the config file at `path`.
pub fn parse_file(path: &Path, text: &str) -> Result<Config, ConfigError> {
    serde_saphyr::from_str::<Config>(text).map_err(|e| match e.without_snippet() {
        serde_saphyr::Error::SerdeUnknownField {
            field,
            expected,
            location,
        } => {
            let known_line = Some(location.line()).filter(|l| *l > 0);
            let line = known_line
                .or_else(|| find_key_line(text, field))
                .unwrap_or(0);
            let key = match line_parents(text, line) {
                parents if parents.is_empty() => field.clone(),
                parents => format!("{}.{field}", parents.join(".")),
            };
            ConfigError::UnknownKey {
                path: path.to_path_buf(),
                line,
                key,
                expected: expected.join(", "),
            }
        }
        other => {
            // Without the snippet, which names the input `<input>`: the path says more.
            let message = other.to_string();
            let first = message.lines().next().unwrap_or_default();
            ConfigError::File {
                path: path.to_path_buf(),
                message: first.strip_prefix("error: ").unwrap_or(first).to_string(),
            }
        }
    })
}

/// Fallback when the parser gives no location: the first line whose key is `key`.
fn find_key_line(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .position(|l| line_key(l).is_some_and(|(_, k)| k == key))
        .and_then(|i| u64::try_from(i + 1).ok())
}

/// `(indent, key)` of a block-mapping line such as `  queue_capacity: 3` or `- name: x`.
fn line_key(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start().len();
    let mut rest = line.trim_start();
    let mut indent = indent;
    while let Some(r) = rest.strip_prefix("- ") {
        indent += rest.len() - r.trim_start().len();
        rest = r.trim_start();
    }
    if rest.starts_with('#') {
        return None;
    }
    let (key, _) = rest.split_once(':')?;
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
    (!key.is_empty() && !key.contains(' ')).then_some((indent, key))
}

/// The keys of the enclosing block mappings of the 1-based `line`, outermost first
/// (`["ingest"]` for a key under `ingest:`). Best effort: block style only.
fn line_parents(text: &str, line: u64) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(idx) = usize::try_from(line).ok().and_then(|l| l.checked_sub(1)) else {
        return Vec::new();
    };
    let Some(mut indent) = lines
        .get(idx)
        .map(|l| line_key(l).map_or(l.len() - l.trim_start().len(), |(i, _)| i))
    else {
        return Vec::new();
    };
    let mut parents = Vec::new();
    for l in lines.iter().take(idx).rev() {
        if indent == 0 {
            break;
        }
        let Some((i, k)) = line_key(l) else { continue };
        let own = l.len() - l.trim_start().len();
        // A `- key:` item line at the same depth as our key belongs to the same list item.
        if i < indent && own < indent {
            parents.push(k.to_string());
            indent = own;
        }
    }
    parents.reverse();
    parents
}

const MAX_SHARDS: u32 = 65_536;

/// Range checks that no single key can express.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    let bad = |m: String| Err(ConfigError::Invalid(m));
    let i = &cfg.ingest;
    if cfg.server.listen.trim().is_empty() {
        return bad("server.listen must not be empty".into());
    }
    if let Some(endpoint) = &cfg.telemetry.otlp_endpoint {
        crate::telemetry::traces_url(endpoint).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    }
    if !(i.low_water > 0.0 && i.low_water < i.high_water && i.high_water <= 1.0) {
        return bad(format!(
            "need 0 < ingest.low_water < ingest.high_water <= 1, got low_water {} and high_water {}",
            i.low_water, i.high_water
        ));
    }
    if cfg.otlp.stream_attribute.is_empty() {
        return bad("otlp.stream_attribute must not be empty".into());
    }
    if i.queue_capacity == 0 {
        return bad("ingest.queue_capacity must be at least 1".into());
    }
    if let Some(n) = cfg.storage.shards
        && !(1..=MAX_SHARDS).contains(&n)
    {
        return bad(format!(
            "storage.shards must be between 1 and {MAX_SHARDS}, got {n}"
        ));
    }
    for (name, v) in [
        ("ingest.max_queued_bytes", i.max_queued_bytes),
        ("ingest.max_inflight_bytes", i.max_inflight_bytes),
        ("ingest.max_body_bytes", i.max_body_bytes),
        ("ingest.max_event_bytes", i.max_event_bytes),
        ("ingest.dedup_memory", i.dedup_memory),
        ("storage.max_streams", cfg.storage.max_streams),
        ("server.max_followers", cfg.server.max_followers as u64),
        ("server.max_connections", cfg.server.max_connections),
    ] {
        if v == 0 {
            return bad(format!("{name} must be at least 1"));
        }
    }
    if i.max_event_bytes > i.max_body_bytes {
        return bad(format!(
            "ingest.max_event_bytes ({}) must not exceed ingest.max_body_bytes ({})",
            i.max_event_bytes, i.max_body_bytes
        ));
    }
    if i.max_inflight_bytes < i.max_body_bytes {
        // A body of the maximum size could never get its decoding budget.
        return bad(format!(
            "ingest.max_inflight_bytes ({}) must be at least ingest.max_body_bytes ({})",
            i.max_inflight_bytes, i.max_body_bytes
        ));
    }
    for (name, d) in [
        ("ingest.body_timeout", i.body_timeout),
        ("server.frames_idle_timeout", cfg.server.frames_idle_timeout),
        ("server.header_timeout", cfg.server.header_timeout),
        ("server.keepalive_timeout", cfg.server.keepalive_timeout),
    ] {
        if d.is_zero() {
            return bad(format!("{name} must be more than 0"));
        }
    }
    if cfg.storage.segment_bytes < 64 << 10 {
        return bad(format!(
            "storage.segment_bytes must be at least 64KiB, got {}",
            cfg.storage.segment_bytes
        ));
    }
    if cfg.storage.segment_bytes > vx_storage::MAX_SEGMENT_BYTES {
        return bad(format!(
            "storage.segment_bytes must be at most {} (the index file's offsets are 32-bit), got {}",
            vx_storage::MAX_SEGMENT_BYTES,
            cfg.storage.segment_bytes
        ));
    }
    if i.max_body_bytes > vx_storage::MAX_BODY_BYTES {
        // A request is one log record, whose length field is 32-bit with a 1 GiB cap.
        return bad(format!(
            "ingest.max_body_bytes must be at most {} (a request is one log record, at most 1GiB), got {}",
            vx_storage::MAX_BODY_BYTES,
            i.max_body_bytes
        ));
    }
    if cfg.storage.fsync == FsyncSetting::Interval && cfg.storage.fsync_interval_ms == 0 {
        return bad("storage.fsync_interval_ms must be at least 1 with fsync: interval".into());
    }
    if cfg.server.uds_mode > 0o777 {
        return bad(format!(
            "server.uds_mode {:o} has bits beyond 0777",
            cfg.server.uds_mode
        ));
    }
    validate_features(cfg)?;
    validate_cluster(cfg)?;
    validate_tokens(cfg)
}

fn validate_features(cfg: &Config) -> Result<(), ConfigError> {
    if cfg.features.apply_threads == Some(0) {
        return Err(ConfigError::Invalid(
            "features.apply_threads must be at least 1".into(),
        ));
    }
    let decls: Vec<_> = cfg
        .features
        .declare
        .iter()
        .map(|f| f.to_storage())
        .collect();
    vx_storage::features::check_decls(&decls).map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if cfg.storage.snapshot_interval < Duration::from_secs(1) {
        return Err(ConfigError::Invalid(format!(
            "storage.snapshot_interval must be at least 1s, got {:?}",
            cfg.storage.snapshot_interval
        )));
    }
    Ok(())
}

/// `cluster.*`: with `cluster.mode: kafka`, every key it needs, each well-formed.
fn validate_cluster(cfg: &Config) -> Result<(), ConfigError> {
    let c = &cfg.cluster;
    if c.mode == super::ClusterMode::Single {
        return Ok(());
    }
    let bad = |m: String| Err(ConfigError::Invalid(m));
    let required = |key: &str, v: &Option<String>| -> Result<String, ConfigError> {
        match v.as_deref().map(str::trim) {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(ConfigError::Invalid(format!(
                "cluster.mode kafka needs cluster.{key} (flag --{})",
                match key {
                    "kafka_brokers" => "kafka-brokers",
                    "topic" => "kafka-topic",
                    "node_id" => "node-id",
                    other => other,
                }
            ))),
        }
    };
    let brokers = required("kafka_brokers", &c.kafka_brokers)?;
    for b in brokers.split(',') {
        let ok = b
            .trim()
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if !ok {
            return bad(format!(
                "cluster.kafka_brokers: {b:?} is not host:port (a comma-separated list of them)"
            ));
        }
    }
    let name_ok = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    let topic = required("topic", &c.topic)?;
    // Kafka allows 249 bytes; `.entities` and `.members` are appended.
    if !name_ok(&topic, 240) || topic == "." || topic == ".." {
        return bad(format!(
            "cluster.topic {topic:?} must be 1-240 bytes of [A-Za-z0-9._-]"
        ));
    }
    let node = required("node_id", &c.node_id)?;
    if !name_ok(&node, 64) {
        return bad(format!(
            "cluster.node_id {node:?} must be 1-64 bytes of [A-Za-z0-9._-]"
        ));
    }
    let url = required("advertise", &c.advertise)?;
    let host = url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'));
    if host.is_none() {
        return bad(format!(
            "cluster.advertise {url:?} must be a base URL http://host:port"
        ));
    }
    if c.max_catchup.is_zero() {
        return bad("cluster.max_catchup must be more than 0".into());
    }
    if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&c.session_timeout) {
        return bad(format!(
            "cluster.session_timeout must be between 1s and 5m, got {}",
            super::units::format_duration(c.session_timeout)
        ));
    }
    Ok(())
}

fn validate_tokens(cfg: &Config) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for (n, t) in cfg.auth.tokens.iter().enumerate() {
        if t.token.trim().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "auth.tokens[{n}]: empty token"
            )));
        }
        if t.scopes.is_empty() {
            return Err(ConfigError::Invalid(format!("auth.tokens[{n}]: no scopes")));
        }
        if !seen.insert(t.token.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "auth.tokens[{n}]: duplicate token"
            )));
        }
    }
    Ok(())
}
