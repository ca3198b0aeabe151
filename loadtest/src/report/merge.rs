//! `vx-loadtest merge`: the reports of several load hosts that ran the same workload at the
//! same time combined into one (counts add, histograms merge exactly), and what makes such a
//! merge doubtful.

use super::*;

/// Combine the reports of load hosts that ran the same workload at the same time: counts add,
/// histograms merge exactly, throughputs add (over the longest measured window), intervals
/// align by their time.
pub fn merge(reports: &[(String, Report)]) -> Result<Report, ReportError> {
    let (_, first) = reports.first().ok_or(ReportError::Empty)?;
    let mut hosts = first.hosts.clone();
    let measure_s = reports
        .iter()
        .map(|(_, r)| r.measure_s)
        .fold(0.0f64, f64::max);
    let mut ops: BTreeMap<String, OpAcc> = BTreeMap::new();
    let mut late = LateAcc::new();
    let mut errors = first.errors.clone();
    let mut intervals: BTreeMap<i64, (f64, BTreeMap<String, OpAcc>)> = BTreeMap::new();
    let interval_s = 1.0 / first.workload.sample_hz;
    let mut fanout = first.fanout.clone();
    for (i, (origin, r)) in reports.iter().enumerate() {
        if i > 0 {
            hosts.extend(r.hosts.iter().cloned());
            for (k, v) in &r.errors {
                *errors.entry(k.clone()).or_default() += v;
            }
            match (&mut fanout, &r.fanout) {
                (Some(f), Some(o)) => f.add(o),
                (None, Some(o)) => fanout = Some(o.clone()),
                _ => {}
            }
        }
        for (name, op) in &r.operations {
            let acc = op.to_acc(origin)?;
            ops.entry(name.clone())
                .or_insert_with(|| OpAcc::new(RUN_SIGFIG))
                .add(&acc);
        }
        if !r.late_sends.histogram.is_empty() {
            let h = decode_histogram(&r.late_sends.histogram)
                .map_err(|e| ReportError::Histogram(origin.clone(), e))?;
            let mut acc = LateAcc::new();
            acc.sends = r.late_sends.sends;
            acc.late = r.late_sends.late;
            acc.hist
                .add(&h)
                .map_err(|e| ReportError::Histogram(origin.clone(), HistogramError::Add(e)))?;
            late.add(&acc);
        }
        for iv in &r.intervals {
            // Align on the sample grid of the first report.
            let slot = (iv.t_s / interval_s).round() as i64;
            let entry = intervals
                .entry(slot)
                .or_insert_with(|| (iv.t_s, BTreeMap::new()));
            for (name, op) in &iv.ops {
                let acc = op.to_acc(origin)?;
                entry
                    .1
                    .entry(name.clone())
                    .or_insert_with(|| OpAcc::new(INTERVAL_SIGFIG))
                    .add(&acc);
            }
        }
    }
    let measure = measure_s.max(f64::MIN_POSITIVE);
    Ok(Report {
        format: REPORT_FORMAT,
        tool: first.tool.clone(),
        hosts,
        workload: first.workload.clone(),
        open_loop: first.open_loop,
        measure_s,
        operations: ops
            .iter()
            .map(|(k, a)| (k.clone(), OpReport::from_acc(k, a, measure)))
            .collect(),
        late_sends: LateReport::from_acc(&late),
        errors,
        intervals: intervals
            .into_values()
            .map(|(t_s, ops)| Interval {
                t_s,
                ops: ops
                    .iter()
                    .map(|(k, a)| (k.clone(), IntervalOp::from_acc(a, interval_s)))
                    .collect(),
            })
            .collect(),
        fanout,
    })
}

/// What makes a merge of `reports` doubtful: workloads that differ in more than their
/// endpoints and seed (each host may aim at its own server and draw its own keys), or runs that
/// did not overlap in time. `merge` still merges; the command line prints these as warnings.
pub fn merge_warnings(reports: &[(String, Report)]) -> Vec<String> {
    let mut out = Vec::new();
    let Some((first_name, first)) = reports.first() else {
        return out;
    };
    let comparable = |w: &Workload| -> Option<toml::Table> {
        let mut w = w.clone();
        w.endpoints.clear();
        w.seed = 0;
        toml::Table::try_from(&w).ok()
    };
    let base = comparable(&first.workload);
    for (name, r) in &reports[1..] {
        let other = comparable(&r.workload);
        if let (Some(a), Some(b)) = (&base, &other) {
            let mut keys: Vec<&String> = a
                .keys()
                .chain(b.keys())
                .filter(|k| a.get(*k) != b.get(*k))
                .collect();
            keys.sort();
            keys.dedup();
            if !keys.is_empty() {
                let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
                out.push(format!(
                    "{name} ran another workload than {first_name} (differs in {}): the merged figures mix them",
                    keys.join(", ")
                ));
            }
        }
        let start = |r: &Report| {
            r.hosts.first().and_then(|h| {
                time::OffsetDateTime::parse(
                    &h.started_at,
                    &time::format_description::well_known::Rfc3339,
                )
                .ok()
            })
        };
        if let (Some(a), Some(b)) = (start(first), start(r)) {
            let apart = (a - b).abs().as_seconds_f64();
            let span = first.workload.warmup_s + first.measure_s.max(r.measure_s);
            if apart > span {
                out.push(format!(
                    "{name} started {apart:.0} s apart from {first_name}, longer than a run: the hosts did not load the server at the same time, so adding their throughputs overstates it"
                ));
            }
        }
    }
    out
}
