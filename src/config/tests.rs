#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::keys::{self, KEYS};
use super::load::{parse_file, validate};
use super::units::{format_duration, format_size, parse_duration, parse_size};
use super::*;
use std::io::Write;
use std::path::Path;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn defaults_are_the_spec_ones() {
    let (c, warnings) = load(None, &[], &Overrides::default()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.server.listen, "127.0.0.1:7100");
    assert_eq!(c.server.uds_mode, 0o660);
    assert_eq!(c.server.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(c.storage.data_dir, Path::new("./veltrix-data"));
    assert_eq!(
        c.storage.shards, None,
        "None lets the data dir's recorded count apply"
    );
    assert_eq!(c.storage.fsync, FsyncSetting::Always);
    assert_eq!(c.storage.fsync_interval_ms, 100);
    assert_eq!(c.storage.segment_bytes, 128 << 20);
    assert_eq!(c.ingest.queue_capacity, 8192);
    assert_eq!(c.ingest.high_water, 0.9);
    assert_eq!(c.ingest.low_water, 0.75);
    assert_eq!(c.ingest.max_queued_bytes, 512 << 20);
    assert_eq!(c.ingest.max_inflight_bytes, 512 << 20);
    assert_eq!(c.ingest.max_body_bytes, 64 << 20);
    assert_eq!(c.ingest.max_event_bytes, 1 << 20);
    assert_eq!(c.ingest.dedup_window, Duration::from_secs(600));
    assert_eq!(c.ingest.dedup_memory, 64 << 20);
    assert_eq!(c.ingest.body_timeout, Duration::from_secs(30));
    assert_eq!(c.server.frames_idle_timeout, Duration::from_secs(600));
    assert_eq!(c.server.header_timeout, Duration::from_secs(30));
    assert_eq!(c.server.keepalive_timeout, Duration::from_secs(300));
    assert_eq!(c.server.max_connections, 16_384);
    assert_eq!(c.log.format, LogFormat::Pretty);
    assert!(c.features.declare.is_empty() && c.auth.tokens.is_empty());
    let s = c.storage_config();
    assert_eq!(s.shards, None);
    assert_eq!(s.fsync, vx_storage::FsyncMode::Always);
}

#[test]
fn layers_file_then_env_then_flags() {
    let f = file(
        "server:\n  listen: 0.0.0.0:1\n  shutdown_timeout: 5s\n\
         ingest:\n  queue_capacity: 10\n  max_body_bytes: 2MiB\n\
         storage:\n  fsync: never\n  shards: 4\n",
    );
    let e = env(&[
        ("VX_INGEST_QUEUE_CAPACITY", "20"),
        ("VX_SERVER_LISTEN", "127.0.0.1:2"),
        ("VX_STORAGE_FSYNC", "interval"),
    ]);
    let cli = Overrides::keys(&[("server.listen", "127.0.0.1:3")]);
    let (c, _) = load(Some(f.path()), &e, &cli).unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:3", "flag beats env");
    assert_eq!(c.ingest.queue_capacity, 20, "env beats file");
    assert_eq!(c.storage.fsync, FsyncSetting::Interval, "env beats file");
    assert_eq!(c.storage.shards, Some(4), "file beats default");
    assert_eq!(c.server.shutdown_timeout, Duration::from_secs(5));
    assert_eq!(c.ingest.max_body_bytes, 2 << 20);
    assert_eq!(
        c.ingest.high_water, 0.9,
        "untouched keys keep their default"
    );

    let cli = Overrides {
        repair: true,
        ..Overrides::keys(&[
            ("storage.shards", "8"),
            ("storage.fsync", "always"),
            ("log.format", "json"),
        ])
    };
    let (c, _) = load(Some(f.path()), &e, &cli).unwrap();
    assert_eq!(c.storage.shards, Some(8));
    assert_eq!(c.storage.fsync, FsyncSetting::Always);
    assert_eq!(c.log.format, LogFormat::Json);
    assert!(c.repair && c.storage_config().repair);
}

/// The stall timeouts (docs/CONFIG.md): durations in the file and env, env winning, 0 refused.
#[test]
fn body_and_frames_idle_timeouts() {
    let f = file("ingest:\n  body_timeout: 2s\nserver:\n  frames_idle_timeout: 90s\n");
    let (c, _) = load(Some(f.path()), &[], &Overrides::default()).unwrap();
    assert_eq!(c.ingest.body_timeout, Duration::from_secs(2));
    assert_eq!(c.server.frames_idle_timeout, Duration::from_secs(90));
    let e = env(&[
        ("VX_INGEST_BODY_TIMEOUT", "300ms"),
        ("VX_SERVER_FRAMES_IDLE_TIMEOUT", "10m"),
    ]);
    let (c, warnings) = load(Some(f.path()), &e, &Overrides::default()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.ingest.body_timeout, Duration::from_millis(300));
    assert_eq!(c.server.frames_idle_timeout, Duration::from_secs(600));
    for (key, value) in [
        ("VX_INGEST_BODY_TIMEOUT", "0s"),
        ("VX_SERVER_FRAMES_IDLE_TIMEOUT", "0ms"),
    ] {
        let err = load(None, &env(&[(key, value)]), &Overrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("must be more than 0"),
            "{key}: {err}"
        );
    }
    let err = load(
        None,
        &env(&[("VX_INGEST_BODY_TIMEOUT", "30")]),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("VX_INGEST_BODY_TIMEOUT"), "{err}");
}

#[test]
fn otlp_stream_attribute() {
    let (c, _) = load(None, &[], &Overrides::default()).unwrap();
    assert_eq!(c.otlp.stream_attribute, "service.name");
    let f = file("otlp:\n  stream_attribute: k8s.namespace.name\n");
    let (c, _) = load(Some(f.path()), &[], &Overrides::default()).unwrap();
    assert_eq!(c.otlp.stream_attribute, "k8s.namespace.name");
    let e = env(&[("VX_OTLP_STREAM_ATTRIBUTE", "service.namespace")]);
    let (c, warnings) = load(Some(f.path()), &e, &Overrides::default()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.otlp.stream_attribute, "service.namespace");
    let e = env(&[("VX_OTLP_STREAM_ATTRIBUTE", "")]);
    let err = load(None, &e, &Overrides::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("otlp.stream_attribute must not be empty"),
        "{err}"
    );
    let f = file("otlp:\n  stream_atribute: x\n");
    assert!(load(Some(f.path()), &[], &Overrides::default()).is_err());
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let f =
        file("server:\n  listen: 127.0.0.1:1\ningest:\n  high_water: 0.8\n  queue_capacit: 3\n");
    let err = load(Some(f.path()), &[], &Overrides::default()).unwrap_err();
    match &err {
        ConfigError::UnknownKey {
            path, line, key, ..
        } => {
            assert_eq!(path, f.path());
            assert_eq!(*line, 5);
            assert_eq!(key, "ingest.queue_capacit");
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
    assert!(
        msg.contains("line 5") && msg.contains("ingest.queue_capacit"),
        "{msg}"
    );
    assert!(
        msg.contains("queue_capacity"),
        "lists the expected keys: {msg}"
    );
}

#[test]
fn unknown_top_level_and_nested_list_keys() {
    let p = Path::new("c.yaml");
    match parse_file(p, "# comment\nbogus: 1\n").unwrap_err() {
        ConfigError::UnknownKey { line, key, .. } => assert_eq!((line, key.as_str()), (2, "bogus")),
        other => panic!("{other:?}"),
    }
    let text = "features:\n  - name: dmg\n    from: damage\n    agg: sum\n    windw: 5m\n";
    match parse_file(p, text).unwrap_err() {
        ConfigError::UnknownKey { line, key, .. } => {
            assert_eq!((line, key.as_str()), (5, "features.windw"));
        }
        other => panic!("{other:?}"),
    }
    let text = "auth:\n  tokens:\n    - token: abc\n      scopes: [read]\n      scope: x\n";
    match parse_file(p, text).unwrap_err() {
        ConfigError::UnknownKey { line, key, .. } => {
            assert_eq!((line, key.as_str()), (5, "auth.tokens.scope"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn type_errors_name_the_file_and_line() {
    let msg = parse_file(Path::new("x.yaml"), "ingest:\n  queue_capacity: lots\n")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("x.yaml") && msg.contains("line 2"), "{msg}");
    let msg = parse_file(Path::new("x.yaml"), "ingest:\n  dedup_window: 10\n")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("needs a unit"), "{msg}");
}

#[test]
fn empty_file_and_empty_sections_are_defaults() {
    let p = Path::new("c.yaml");
    assert_eq!(parse_file(p, "").unwrap(), Config::default());
    assert_eq!(parse_file(p, "# nothing\n").unwrap(), Config::default());
    assert_eq!(
        parse_file(p, "server:\ningest:\n").unwrap(),
        Config::default()
    );
}

#[test]
fn full_file_parses() {
    let text = r#"
server:
  listen: "127.0.0.1:0"
  uds: /tmp/vx.sock
  uds_mode: "0600"
  shutdown_timeout: 500ms
storage:
  data_dir: /var/lib/veltrix
  fsync: interval
  fsync_interval_ms: 50
  segment_bytes: 64MiB
  max_streams: 1000
  max_feature_bytes: 1GiB
ingest:
  max_queued_bytes: 1048576
  dedup_window: 1h
  dedup_memory: 8 MiB
retention:
  max_age: 30d
  max_bytes: 10GiB
features:
  - {name: damage_5m, from: damage, agg: sum, window: 5m}
  - name: seen
    from: login
    agg: distinct
    ttl: 1d
auth:
  tokens:
    - {token: s3cret, scopes: [ingest, read]}
telemetry:
  otlp_endpoint: http://localhost:4318
log:
  format: json
"#;
    let c = parse_file(Path::new("c.yaml"), text).unwrap();
    validate(&c).unwrap();
    assert_eq!(c.server.uds_mode, 0o600);
    assert_eq!(c.server.shutdown_timeout, Duration::from_millis(500));
    assert_eq!(c.storage.fsync_interval_ms, 50);
    assert_eq!(c.storage.segment_bytes, 64 << 20);
    assert_eq!(c.storage.max_feature_bytes, 1 << 30);
    assert_eq!(c.ingest.max_queued_bytes, 1 << 20);
    assert_eq!(c.ingest.dedup_window, Duration::from_secs(3600));
    assert_eq!(c.ingest.dedup_memory, 8 << 20);
    assert_eq!(c.retention.max_age, Some(Duration::from_secs(30 * 86_400)));
    assert_eq!(c.retention.max_bytes, Some(10 << 30));
    assert_eq!(c.features.declare.len(), 2);
    assert_eq!(c.features.declare[0].agg, Agg::Sum);
    assert_eq!(c.features.declare[0].window, Some(Duration::from_secs(300)));
    assert_eq!(c.features.declare[1].ttl, Some(Duration::from_secs(86_400)));
    assert_eq!(c.auth.tokens[0].scopes, vec![Scope::Ingest, Scope::Read]);
    assert!(!format!("{:?}", c.auth.tokens[0]).contains("s3cret"));
    assert_eq!(c.log.format, LogFormat::Json);
}

#[test]
fn uds_mode_must_be_a_quoted_octal_string() {
    let p = Path::new("c.yaml");
    let msg = parse_file(p, "server:\n  uds_mode: 0660\n")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("quoted octal"), "{msg}");
    assert!(parse_file(p, "server:\n  uds_mode: \"0999\"\n").is_err());
    let mut c = Config::default();
    keys::set(&mut c, "server.uds_mode", "0640").unwrap();
    assert_eq!(c.server.uds_mode, 0o640);
}

#[test]
fn durations_and_sizes() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
    assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
    assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    assert_eq!(
        parse_duration("30d").unwrap(),
        Duration::from_secs(30 * 86_400)
    );
    assert_eq!(parse_duration(" 0 ").unwrap(), Duration::ZERO);
    for bad in ["10", "s", "1.5s", "10y", "-1s", ""] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
    assert_eq!(parse_size("123").unwrap(), 123);
    assert_eq!(parse_size("4KiB").unwrap(), 4096);
    assert_eq!(parse_size("64 MiB").unwrap(), 64 << 20);
    assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
    assert_eq!(parse_size("1TiB").unwrap(), 1 << 40);
    assert!(parse_size("10MB").unwrap_err().0.contains("KiB, MiB"));
    assert!(parse_size("99999999999TiB").is_err());
    assert!(parse_size("x").is_err());
    assert_eq!(format_duration(Duration::from_secs(600)), "10m");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(format_size(64 << 20), "64MiB");
    assert_eq!(format_size(1000), "1000");
}

#[test]
fn env_warnings_and_errors() {
    let e = env(&[
        ("VX_CONFIG", "/nonexistent-is-read-by-the-cli-not-here"),
        ("VX_LOG", "debug"),
        ("VX_INGEST_QUEUE_CAPACITYY", "1"),
        ("VX_AUTH_TOKENS", "x"),
        ("PATH", "/bin"),
    ]);
    let (_, warnings) = load(None, &e, &Overrides::default()).unwrap();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("VX_INGEST_QUEUE_CAPACITYY"))
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("VX_AUTH_TOKENS") && w.contains("file"))
    );

    let err = load(
        None,
        &env(&[("VX_INGEST_HIGH_WATER", "lots")]),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("VX_INGEST_HIGH_WATER"), "{err}");

    // An empty value unsets an optional key.
    let (c, _) = load(
        None,
        &env(&[("VX_STORAGE_SHARDS", ""), ("VX_RETENTION_MAX_AGE", "7d")]),
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.storage.shards, None);
    assert_eq!(c.retention.max_age, Some(Duration::from_secs(7 * 86_400)));
}

#[test]
fn keys_that_once_warned_now_act() {
    // OTLP export is real: no warning, and a bad endpoint is a start-up error naming the key.
    let (c, warnings) = load(
        None,
        &env(&[("VX_TELEMETRY_OTLP_ENDPOINT", "http://127.0.0.1:4318")]),
        &Overrides::default(),
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        c.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
    let err = load(
        None,
        &env(&[("VX_TELEMETRY_OTLP_ENDPOINT", "127.0.0.1:4318")]),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("telemetry.otlp_endpoint"), "{err}");
    // Retention is enforced now: no warning, and it reaches the engine.
    let (c, warnings) = load(
        None,
        &env(&[
            ("VX_RETENTION_MAX_AGE", "7d"),
            ("VX_RETENTION_MAX_BYTES", "10GiB"),
        ]),
        &Overrides::default(),
    )
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let r = c.storage_config().retention;
    assert_eq!(r.max_age, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(r.max_bytes, Some(10 << 30));
    // The frames listeners are real now: no warning.
    let cli = Overrides::keys(&[
        ("server.frames_listen", "127.0.0.1:7101"),
        ("server.frames_uds", "/tmp/vx-frames.sock"),
    ]);
    let (c, warnings) = load(None, &[], &cli).unwrap();
    assert_eq!(c.server.frames_listen.as_deref(), Some("127.0.0.1:7101"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn validation_catches_bad_ranges() {
    let bad = |edit: &dyn Fn(&mut Config), needle: &str| {
        let mut c = Config::default();
        edit(&mut c);
        let msg = validate(&c).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    };
    bad(&|c| c.ingest.low_water = 0.95, "low_water");
    bad(&|c| c.ingest.low_water = 0.0, "low_water");
    bad(&|c| c.ingest.high_water = 1.5, "high_water");
    bad(&|c| c.storage.shards = Some(0), "storage.shards");
    // Past what one log record can hold (a request is one record).
    bad(
        &|c| {
            c.ingest.max_body_bytes = 1_288_490_189; // 1.2 GiB
            c.ingest.max_inflight_bytes = 2 << 30;
        },
        "ingest.max_body_bytes must be at most",
    );
    bad(
        &|c| c.storage.segment_bytes = 3 << 30,
        "storage.segment_bytes must be at most",
    );
    bad(&|c| c.ingest.queue_capacity = 0, "queue_capacity");
    bad(&|c| c.server.max_connections = 0, "server.max_connections");
    bad(
        &|c| c.server.header_timeout = Duration::ZERO,
        "server.header_timeout",
    );
    bad(
        &|c| c.server.keepalive_timeout = Duration::ZERO,
        "server.keepalive_timeout",
    );
    bad(&|c| c.ingest.max_event_bytes = 128 << 20, "max_event_bytes");
    bad(
        &|c| c.ingest.max_inflight_bytes = 1 << 20,
        "max_inflight_bytes",
    );
    bad(
        &|c| {
            c.storage.fsync = FsyncSetting::Interval;
            c.storage.fsync_interval_ms = 0;
        },
        "fsync_interval_ms",
    );
    bad(
        &|c| {
            c.features.declare.push(FeatureDecl {
                name: "events".into(),
                from: "x".into(),
                agg: Agg::Count,
                window: None,
                ttl: None,
                of: Default::default(),
            });
        },
        "built-in",
    );
    bad(
        &|c| {
            c.features.declare.push(FeatureDecl {
                name: "f".into(),
                from: "x".into(),
                agg: Agg::Count,
                window: Some(Duration::from_millis(10)),
                ttl: None,
                of: Default::default(),
            });
        },
        "window",
    );
    bad(
        &|c| {
            c.auth.tokens.push(TokenDecl {
                token: "t".into(),
                scopes: vec![],
            });
        },
        "no scopes",
    );
}

#[test]
fn every_key_round_trips_and_is_documented() {
    let defaults = Config::default();
    let docs = include_str!("../../docs/CONFIG.md");
    let help = keys::help_table();
    let mut envs = std::collections::HashSet::new();
    for k in KEYS {
        let v = keys::get(&defaults, k.name).unwrap_or_else(|| panic!("no getter for {}", k.name));
        let mut c = Config::default();
        keys::set(&mut c, k.name, &v).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        assert_eq!(c, defaults, "{} does not round-trip through {v:?}", k.name);
        assert!(envs.insert(k.env()), "duplicate env {}", k.env());
        assert!(
            docs.contains(&format!("`{}`", k.name)),
            "CONFIG.md lacks {}",
            k.name
        );
        assert!(docs.contains(&k.env()), "CONFIG.md lacks {}", k.env());
        assert!(
            help.contains(k.name) && help.contains(&k.env()),
            "--help lacks {}",
            k.name
        );
    }
    for f in keys::FILE_ONLY {
        assert!(docs.contains(&format!("`{}`", f.name)) && help.contains(f.name));
    }
    assert!(keys::set(&mut Config::default(), "nope.key", "1").is_err());
}

/// docs/CONFIG.md's key table is generated from the declarations: `VX_BLESS_DOCS=1 cargo
/// test -p veltrix --lib config::` rewrites it after a key changes.
#[test]
fn config_md_table_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CONFIG.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let table = keys::docs_table();
    if std::env::var_os("VX_BLESS_DOCS").is_some() {
        let start = docs.find("| key | default |").unwrap();
        let end = docs[start..]
            .find("\n\n")
            .map_or(docs.len(), |e| start + e + 1);
        let blessed = format!("{}{table}{}", &docs[..start], &docs[end..]);
        std::fs::write(&path, blessed).unwrap();
        return;
    }
    assert!(
        docs.contains(&table),
        "docs/CONFIG.md's key table is not the one the declarations (src/config/sections.rs) \
         give; rewrite it with VX_BLESS_DOCS=1:\n{table}"
    );
}

#[test]
fn serve_help_lists_the_keys_with_defaults() {
    let mut cmd = crate::cli::command();
    let serve = cmd.find_subcommand_mut("serve").unwrap();
    let help = serve.render_long_help().to_string();
    for needle in [
        "--listen",
        "--uds",
        "--frames-listen",
        "--frames-uds",
        "--data-dir",
        "--shards",
        "--fsync",
        "--log-format",
        "--config",
        "--repair",
        "ingest.queue_capacity",
        "8192",
        "VX_INGEST_QUEUE_CAPACITY",
        "127.0.0.1:7100",
    ] {
        assert!(help.contains(needle), "serve --help lacks {needle}");
    }
}

proptest::proptest! {
    #[test]
    fn sizes_and_durations_round_trip(n in 0u64..(1 << 50), ms in 0u64..(1 << 40)) {
        proptest::prop_assert_eq!(parse_size(&format_size(n)).unwrap(), n);
        let d = Duration::from_millis(ms);
        proptest::prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
    }
}

/// `cluster.*`: single mode reads none of them; kafka mode needs each, well-formed, from the
/// file, the env or the flags.
#[test]
fn cluster_keys_are_required_and_checked_in_kafka_mode() {
    use super::ClusterMode;
    let kafka = |c: &mut Config| {
        c.cluster.mode = ClusterMode::Kafka;
        c.cluster.kafka_brokers = Some("127.0.0.1:9092,broker-2:9092".into());
        c.cluster.topic = Some("events".into());
        c.cluster.node_id = Some("n1".into());
        c.cluster.advertise = Some("http://10.0.0.1:7100".into());
    };
    let mut c = Config::default();
    c.cluster.topic = Some("not read in single mode!".into());
    validate(&c).unwrap();
    kafka(&mut c);
    validate(&c).unwrap();
    // Every interface works in cluster mode: its listeners are not refused.
    c.server.resp_listen = Some("127.0.0.1:6380".into());
    c.server.frames_listen = Some("127.0.0.1:7101".into());
    validate(&c).unwrap();
    let bad = |edit: &dyn Fn(&mut Config), needle: &str| {
        let mut c = Config::default();
        kafka(&mut c);
        edit(&mut c);
        let msg = validate(&c).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    };
    bad(&|c| c.cluster.kafka_brokers = None, "--kafka-brokers");
    bad(&|c| c.cluster.topic = Some(" ".into()), "--kafka-topic");
    bad(&|c| c.cluster.node_id = None, "--node-id");
    bad(&|c| c.cluster.advertise = None, "cluster.advertise");
    bad(
        &|c| c.cluster.kafka_brokers = Some("host".into()),
        "host:port",
    );
    bad(
        &|c| c.cluster.kafka_brokers = Some("a:1,:2".into()),
        "host:port",
    );
    bad(&|c| c.cluster.topic = Some("a/b".into()), "cluster.topic");
    bad(
        &|c| c.cluster.topic = Some("t".repeat(241)),
        "cluster.topic",
    );
    bad(
        &|c| c.cluster.node_id = Some("node 1".into()),
        "cluster.node_id",
    );
    bad(
        &|c| c.cluster.advertise = Some("10.0.0.1:7100".into()),
        "http://host:port",
    );
    bad(
        &|c| c.cluster.advertise = Some("http://h:1/path".into()),
        "http://host:port",
    );
    bad(
        &|c| c.cluster.max_catchup = Duration::ZERO,
        "cluster.max_catchup",
    );

    let e = env(&[
        ("VX_CLUSTER_MODE", "kafka"),
        ("VX_CLUSTER_KAFKA_BROKERS", "k:9092"),
        ("VX_CLUSTER_TOPIC", "t"),
        ("VX_CLUSTER_NODE_ID", "a"),
        ("VX_CLUSTER_ADVERTISE", "http://a:7100"),
        ("VX_CLUSTER_MAX_CATCHUP", "30s"),
    ]);
    let (c, _) = load(None, &e, &Overrides::default()).unwrap();
    assert_eq!(c.cluster.mode, ClusterMode::Kafka);
    assert_eq!(c.cluster.max_catchup, Duration::from_secs(30));
    let err = load(
        None,
        &env(&[("VX_CLUSTER_MODE", "raft")]),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("single, kafka"), "{err}");
}

/// `features.apply_threads`: unset is half the usable cores (at least 1); set in the file's
/// mapping form of `features` (the declarations under `declare`), by env or by flag, each
/// layer over the one below; 0 is refused; the list form of `features` keeps working beside
/// the env and flag.
#[test]
fn apply_threads_in_every_layer() {
    let (c, _) = load(None, &[], &Overrides::default()).unwrap();
    assert_eq!(c.features.apply_threads, None);
    assert_eq!(
        c.storage_config().apply_threads,
        vx_storage::default_apply_threads()
    );
    assert!(c.storage_config().apply_threads >= 1);

    let f = file(
        "features:\n  apply_threads: 3\n  declare:\n    - {name: dmg_5m, from: dmg, agg: sum, window: 5m}\n",
    );
    let (c, _) = load(Some(f.path()), &[], &Overrides::default()).unwrap();
    assert_eq!(c.features.apply_threads, Some(3));
    assert_eq!(c.features.declare.len(), 1);
    assert_eq!(c.storage_config().apply_threads, 3);
    assert_eq!(c.storage_config().features.len(), 1);

    let e = env(&[("VX_FEATURES_APPLY_THREADS", "5")]);
    let (c, w) = load(Some(f.path()), &e, &Overrides::default()).unwrap();
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.storage_config().apply_threads, 5, "env beats file");
    let cli = Overrides::keys(&[("features.apply_threads", "2")]);
    let (c, _) = load(Some(f.path()), &e, &cli).unwrap();
    assert_eq!(c.storage_config().apply_threads, 2, "flag beats env");

    // The list form, with the key from the env.
    let f = file("features:\n  - {name: dmg_5m, from: dmg, agg: sum, window: 5m}\n");
    let (c, _) = load(Some(f.path()), &e, &Overrides::default()).unwrap();
    assert_eq!(
        (c.features.declare.len(), c.features.apply_threads),
        (1, Some(5))
    );

    let f = file("features:\n  apply_threads: 0\n");
    assert!(matches!(
        load(Some(f.path()), &[], &Overrides::default()),
        Err(ConfigError::Invalid(m)) if m.contains("features.apply_threads")
    ));
    let e = env(&[("VX_FEATURES_APPLY_THREADS", "many")]);
    assert!(matches!(
        load(None, &e, &Overrides::default()),
        Err(ConfigError::Env { var, .. }) if var == "VX_FEATURES_APPLY_THREADS"
    ));
    match parse_file(Path::new("c.yaml"), "features:\n  apply_thread: 2\n").unwrap_err() {
        ConfigError::UnknownKey { line, key, .. } => {
            assert_eq!((line, key.as_str()), (2, "features.apply_thread"));
        }
        other => panic!("{other:?}"),
    }
}
