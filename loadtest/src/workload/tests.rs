//! Workload files, `--set`, defaults and validation.

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
    assert!(err("", &["connections=10000", "pipeline_depth=4096"]).contains("HTTP connections"));
    assert!(
        err("scenario = \"replay\"\nendpoints = \"frames://h:1\"\n", &[])
            .contains("use http://, unix: or resp://")
    );
    // Over RESP: XADD carries one event and no durability; RESP is not mixed with others.
    let xadd = "scenario = \"ingest\"\nendpoints = \"resp://h:1\"\n";
    assert!(err(xadd, &["batch=2"]).contains("one XADD of one event; set batch = 1"));
    assert!(err(xadd, &["durability=\"fsync\""]).contains("XADD has no durability"));
    assert!(
        err(xadd, &["endpoints=[\"resp://h:1\", \"frames://h:2\"]"])
            .contains("give resp:// endpoints only")
    );
    assert!(
        err(
            "scenario = \"replay\"\n",
            &["endpoints=[\"http://h:1\", \"resp://h:2\"]"]
        )
        .contains("give resp:// endpoints only")
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
    assert!(err("scenario = \"features\"\n", &["query_pct=10"]).contains("query_pct must be 100"));
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
fn ingest_and_replay_run_over_resp() {
    for text in [
        "scenario = \"ingest\"\nendpoints = \"resp://127.0.0.1:6379\"\npipeline_depth = 16\n",
        "scenario = \"replay\"\nendpoints = [\"resp://a:1\", \"resp://b:2\"]\npage_events = 1\nrate = 20000\n",
    ] {
        if let Err(e) = Workload::from_toml(text, "t.toml", &[]) {
            panic!("{text}: {e}");
        }
    }
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
    // Point reads: the 1-event page over HTTP and XRANGE N-0 N-0 over RESP are one workload
    // on two protocols, at kv-get's shape (20,000/s open loop, 50 connections).
    let (http, mut resp) = (load("replay-point.toml"), load("xrange-point.toml"));
    assert_eq!(
        (
            http.scenario,
            http.page_events,
            http.rate,
            http.connections,
            http.pipeline_depth,
            http.streams,
            http.preload_events
        ),
        (Scenario::Replay, 1, Some(20_000.0), 50, 1, 16, 100_000)
    );
    assert_eq!(resp.endpoints, ["resp://127.0.0.1:6379"]);
    resp.endpoints = http.endpoints.clone();
    assert_eq!(http, resp, "replay-point.toml and xrange-point.toml");
    let pages = load("replay-pages.toml");
    assert_eq!(
        (pages.streams, pages.preload_events, pages.value_size_b),
        (http.streams, http.preload_events, http.value_size_b)
    );
    let kv_get = load("kv-get.toml");
    assert_eq!(
        (kv_get.rate, kv_get.connections),
        (http.rate, http.connections)
    );
    let xadd = load("xadd.toml");
    assert_eq!(
        (
            xadd.scenario,
            xadd.batch,
            xadd.pipeline_depth,
            xadd.connections,
            xadd.rate,
            xadd.value_size_b
        ),
        (Scenario::Ingest, 1, 16, 4, None, 128)
    );
    assert_eq!(xadd.endpoints, ["resp://127.0.0.1:6379"]);
    assert_ne!(
        xadd.stream_prefix, resp.stream_prefix,
        "XADD * streams apart"
    );
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
