//! The report: its table, its JSON and merges of several load hosts.

use super::*;

fn acc(values: &[u64]) -> OpAcc {
    let mut a = OpAcc::new(RUN_SIGFIG);
    for v in values {
        a.ok += 1;
        a.events += 10;
        let _ = a.hist.record(*v);
    }
    a
}

fn report(values: &[u64], refused: u64, t_s: f64) -> Report {
    let mut a = acc(values);
    a.refused = refused;
    let mut ops = BTreeMap::new();
    ops.insert("ingest".to_string(), OpReport::from_acc("ingest", &a, 10.0));
    let mut iv_acc = OpAcc::new(INTERVAL_SIGFIG);
    iv_acc.add(&a);
    let mut iv_ops = BTreeMap::new();
    iv_ops.insert("ingest".to_string(), IntervalOp::from_acc(&iv_acc, 1.0));
    Report {
        format: REPORT_FORMAT,
        tool: "vx-loadtest test".into(),
        hosts: vec![Host {
            hostname: "h".into(),
            started_at: "2026-11-23T00:00:00Z".into(),
            load1_before: Some(0.1),
            cpus: 2,
        }],
        workload: Workload::default(),
        open_loop: false,
        measure_s: 10.0,
        operations: ops,
        late_sends: LateReport::from_acc(&LateAcc::new()),
        errors: BTreeMap::new(),
        intervals: vec![Interval { t_s, ops: iv_ops }],
        fanout: None,
    }
}

#[test]
fn histograms_survive_the_json_round_trip_exactly() {
    let a = acc(&[1, 250, 999, 1000, 1001, 123_456, 3_000_000]);
    let h = decode_histogram(&encode_histogram(&a.hist));
    let h = match h {
        Ok(h) => h,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(h, a.hist);
    assert!(decode_histogram("not base64!").is_err());
    assert!(decode_histogram("aGVsbG8=").is_err());
}

#[test]
fn merge_adds_counts_and_histograms_rather_than_averaging() {
    // Host A: 1000 fast ops (1 ms). Host B: 10 slow ones (100 ms). Averaging the two
    // p99s would say ~50 ms; the merged histogram says the true p99 is 1 ms and the
    // max 100 ms.
    let a = report(&vec![1000; 1000], 3, 1.0);
    let b = report(&[100_000; 10], 4, 1.0);
    let merged = match merge(&[("a".into(), a), ("b".into(), b)]) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    let op = &merged.operations["ingest"];
    assert_eq!((op.ok, op.refused, op.events), (1010, 7, 10_100));
    assert!((op.ops_per_s - 101.0).abs() < 1e-9);
    assert!(
        (op.latency_ms.p99 - 1.0).abs() < 0.01,
        "{:?}",
        op.latency_ms
    );
    assert!(
        (op.latency_ms.max - 100.0).abs() < 0.1,
        "{:?}",
        op.latency_ms
    );
    assert_eq!(merged.hosts.len(), 2);
    // The merged histogram equals one built from all values at once.
    let mut all = vec![1000u64; 1000];
    all.extend([100_000; 10]);
    let direct = acc(&all).hist;
    assert_eq!(decode_histogram(&op.histogram).ok(), Some(direct));
    // Intervals at the same time are merged too.
    assert_eq!(merged.intervals.len(), 1);
    assert_eq!(merged.intervals[0].ops["ingest"].ok, 1010);
    // And a merged report merges again (it is a report like any other).
    let again = merge(&[("m".into(), merged.clone())]);
    assert_eq!(again.ok().map(|r| r.operations["ingest"].ok), Some(1010));
}

#[test]
fn merge_warns_about_other_workloads_and_runs_that_did_not_overlap() {
    let a = report(&[5], 0, 1.0);
    let mut b = report(&[5], 0, 1.0);
    b.workload.endpoints = vec!["http://other:1".into()];
    b.workload.seed = 9;
    let pair = |b: &Report| vec![("a".to_string(), a.clone()), ("b".to_string(), b.clone())];
    // Other endpoints and seeds are what several hosts have: no warning.
    assert!(merge_warnings(&pair(&b)).is_empty());
    let mut c = b.clone();
    c.workload.batch = 100;
    c.workload.rate = Some(5.0);
    let w = merge_warnings(&pair(&c));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("batch, rate"), "{w:?}");
    let mut d = b.clone();
    d.hosts[0].started_at = "2026-11-23T01:00:00Z".into();
    let w = merge_warnings(&pair(&d));
    assert!(w.len() == 1 && w[0].contains("3600 s apart"), "{w:?}");
}

#[test]
fn batch_reads_report_values_per_second_through_merge_and_the_table() {
    let mut r = report(&[5], 0, 1.0);
    r.workload.batch_size = 10;
    // A query's events are its batch_size keys: 3 queries of 10 in a 10 s window.
    let mut q = acc(&[100, 200, 300]);
    q.events = 30;
    r.operations
        .insert("query".into(), OpReport::from_acc("query", &q, 10.0));
    assert_eq!(r.operations["query"].values_per_s, Some(3.0));
    assert_eq!(r.operations["ingest"].values_per_s, None);
    let text = serde_json::to_string(&r).unwrap_or_default();
    assert!(text.contains("\"values_per_s\":3.0"), "{text}");
    assert_eq!(text.matches("values_per_s").count(), 1, "only query has it");
    assert!(
        r.table()
            .contains("values/s: query 3.0 (batch_size 10 × 0.3 ops/s)")
    );
    let merged = match merge(&[("a".into(), r.clone()), ("b".into(), r)]) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(merged.operations["query"].values_per_s, Some(6.0));
    // A report written before the field existed still reads.
    let old = text.replace("\"values_per_s\":3.0,", "");
    assert!(!old.contains("values_per_s"));
    let back = Report::from_json(&old, "old").map(|r| r.operations["query"].values_per_s);
    assert!(matches!(back, Ok(None)), "{back:?}");
}

#[test]
fn the_fanout_check_reads_back_merges_and_fails_the_table() {
    let mut r = report(&[5], 0, 1.0);
    assert!(!r.check_failed());
    let text = serde_json::to_string(&r).unwrap_or_default();
    assert!(!text.contains("fanout"), "only fanout runs carry the check");
    let good = FanoutReport {
        stream: "lt-0".into(),
        followers: 3,
        from_seq: 11,
        last_acked_seq: 20,
        acked_events: 10,
        delivered: 30,
        complete: 3,
        drain_s: 2.0,
        drained_in_s: Some(0.01),
        passed: true,
        ..FanoutReport::default()
    };
    r.fanout = Some(good.clone());
    assert!(!r.check_failed());
    assert!(r.table().contains("fanout check: PASSED"), "{}", r.table());
    let text = serde_json::to_string(&r).unwrap_or_default();
    let back = Report::from_json(&text, "r").map(|r| r.fanout);
    assert_eq!(back.ok().flatten().as_ref(), Some(&good));
    let mut bad = r.clone();
    bad.fanout = Some(FanoutReport {
        complete: 2,
        with_gaps: 1,
        missing_events: 4,
        drained_in_s: None,
        passed: false,
        ..good
    });
    assert!(bad.check_failed());
    let table = bad.table();
    assert!(
        table.contains("fanout check: FAILED (1 of 3 followers incomplete)"),
        "{table}"
    );
    assert!(
        table.contains("4 missing") && table.contains("1 with gaps"),
        "{table}"
    );
    // Merged: counts add, and one failing host fails the whole.
    let merged = match merge(&[("a".into(), r), ("b".into(), bad)]) {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    };
    let f = merged.fanout.unwrap_or_default();
    assert_eq!((f.followers, f.complete, f.missing_events), (6, 5, 4));
    assert!(!f.passed && f.drained_in_s.is_none());
}

#[test]
fn reports_of_another_format_or_with_bad_histograms_are_refused() {
    let mut r = report(&[5], 0, 1.0);
    r.format = 99;
    let text = serde_json::to_string(&r).unwrap_or_default();
    assert!(matches!(
        Report::from_json(&text, "x.json"),
        Err(ReportError::Format(_, 99))
    ));
    let mut r = report(&[5], 0, 1.0);
    if let Some(op) = r.operations.get_mut("ingest") {
        op.histogram = "AAAA".into();
    }
    assert!(matches!(
        merge(&[("x".into(), r)]),
        Err(ReportError::Histogram(..))
    ));
    assert!(matches!(merge(&[]), Err(ReportError::Empty)));
    assert!(Report::from_json("{}", "x").is_err());
}
