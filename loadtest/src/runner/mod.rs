//! A run from start to report: prepare what the scenario reads (replay's streams, over HTTP or
//! RESP, the keys of kv and features, fanout's stream and connected followers),
//! open every connection, start the lanes on one shared clock, sample the time series at
//! `sample_hz` with a progress line, and assemble the [`Report`] once the lanes end (fanout:
//! once the followers have drained and been checked).

use crate::endpoint::Endpoint;
pub use crate::error::RunError;
use crate::fanout::Fanout;
use crate::http::{HttpConn, HttpError, retry_pause, segment};
use crate::lanes::{LaneCtx, LaneGen, PipeConn, connect_pipe, http_lane, pipelined_lane};
use crate::ops::{IngestGen, KvGen, KvOp, ReplayGen, StreamInfo, kv_key};
use crate::recorder::{LaneRecorder, LateAcc, OpAcc, OpAccs, named};
use crate::report::{
    FanoutReport, Host, Interval, IntervalOp, LateReport, OpReport, REPORT_FORMAT, Report,
};
use crate::resp;
use crate::schedule::{Pacer, Schedule};
use crate::workload::{Durability, Scenario, Workload};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

mod prepare;
mod prepare_resp;
use self::prepare::{preload_kv, prepare_features, prepare_replay};
use self::prepare_resp::{prepare_replay_resp, prepare_xadd};

/// Where progress lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// A line per second on stderr (rewritten in place on a terminal).
    Stderr,
    Quiet,
}

/// Run `w` and return its report.
pub async fn run(w: Workload, progress: Progress) -> Result<Report, RunError> {
    w.validate()?;
    let w = Arc::new(w);
    let endpoints = w.parsed_endpoints()?;
    let host = host_info();
    let say = |m: &str| {
        if progress == Progress::Stderr {
            eprintln!("{m}");
        }
    };

    let streams = match w.scenario {
        Scenario::Replay => {
            let s = if endpoints[0].is_resp() {
                prepare_replay_resp(&w, &endpoints[0], &say).await?
            } else {
                prepare_replay(&w, &endpoints[0], &say).await?
            };
            say(&format!(
                "replay: {} stream(s), {} events",
                s.len(),
                s.iter().map(|s| s.last_seq + 1 - s.first_seq).sum::<u64>()
            ));
            Some(Arc::new(s))
        }
        Scenario::Kv => {
            preload_kv(&w, &endpoints[0], &say).await?;
            None
        }
        Scenario::Ingest if endpoints[0].is_resp() => {
            prepare_xadd(&w, &endpoints[0], &say).await?;
            None
        }
        Scenario::Features => {
            prepare_features(&w, &endpoints[0], &say).await?;
            None
        }
        _ => None,
    };
    // Followers connect before the producers' connections and clock: every one is live when
    // the first event is written.
    let fanout = match w.scenario {
        Scenario::Fanout => Some(Fanout::start(&w, &endpoints, &say).await?),
        _ => None,
    };

    // One lane per HTTP connection; one per pipelined connection.
    let mut plans: Vec<Endpoint> = Vec::new();
    for c in 0..w.connections as usize {
        let ep = &endpoints[c % endpoints.len()];
        let copies = if ep.is_http() { w.pipeline_depth } else { 1 };
        plans.extend((0..copies).map(|_| ep.clone()));
    }
    let lanes = plans.len() as u32;
    let run_tag = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );

    // Connect everything before the clock starts: a refused connection fails the run now.
    enum Conn {
        Http(HttpConn),
        Pipe(Box<PipeConn>),
    }
    let mut conns = Vec::with_capacity(plans.len());
    for ep in &plans {
        conns.push(if ep.is_http() {
            Conn::Http(HttpConn::connect(ep, w.token.as_deref()).await?)
        } else {
            Conn::Pipe(Box::new(
                connect_pipe(ep, w.token.as_deref())
                    .await
                    .map_err(|e| RunError::Connect(e.to_string()))?,
            ))
        });
    }

    let load_start = Instant::now() + Duration::from_millis(20);
    let measure_start = load_start + Duration::from_secs_f64(w.warmup_s);
    let end = measure_start + Duration::from_secs_f64(w.measure_s);
    let timeout = Duration::from_secs_f64(w.timeout_s);
    let schedules: Option<Vec<Schedule>> = w.rate.map(|r| {
        (0..lanes)
            .map(|l| Schedule::open(load_start, r, lanes, l))
            .collect()
    });
    let pacer = match &schedules {
        Some(s) => Some(
            Pacer::start(s.clone(), end)
                .map_err(|e| RunError::Prepare(format!("cannot start the pacer thread: {e}")))?,
        ),
        None => None,
    };
    let mut recorders = Vec::with_capacity(plans.len());
    let mut tasks = JoinSet::new();
    for (lane, (ep, conn)) in plans.into_iter().zip(conns).enumerate() {
        let lane = lane as u32;
        let rec = Arc::new(Mutex::new(LaneRecorder::new(measure_start, end)));
        recorders.push(rec.clone());
        let generator = match (w.scenario, &fanout) {
            (Scenario::Fanout, Some(f)) => {
                LaneGen::Fanout(IngestGen::new(&w, lane, &run_tag)?, f.acks())
            }
            (Scenario::Ingest, _) => LaneGen::Ingest(IngestGen::new(&w, lane, &run_tag)?),
            (Scenario::Replay, _) => {
                // prepare_replay listed them above; without, the lanes would have nothing to read.
                let Some(s) = streams.clone() else {
                    return Err(RunError::Prepare("replay: no streams were listed".into()));
                };
                LaneGen::Replay(ReplayGen::new(&w, lane, s.len())?, s)
            }
            (Scenario::Features, _) => LaneGen::Features(KvGen::new(&w, lane)?),
            _ => LaneGen::Kv(KvGen::new(&w, lane)?),
        };
        let ctx = LaneCtx {
            workload: w.clone(),
            endpoint: ep,
            schedule: schedules.as_ref().map(|s| s[lane as usize]),
            pacer: pacer.as_ref().and_then(|p| p.lane(lane as usize)),
            start: load_start,
            end,
            timeout,
            rec,
        };
        match conn {
            Conn::Http(c) => tasks.spawn(http_lane(ctx, Some(c), generator)),
            Conn::Pipe(c) => tasks.spawn(pipelined_lane(ctx, Some(*c), generator)),
        };
    }
    // fanout: the followers' deliveries are sampled with the lanes; one task waits for the
    // producers, drains and checks the followers, so sampling goes on through the drain.
    let fanout_report: Arc<Mutex<Option<FanoutReport>>> = Arc::default();
    if let Some(f) = fanout {
        f.set_window(measure_start, end);
        recorders.extend(f.recorders().iter().cloned());
        let producers = std::mem::take(&mut tasks);
        tasks.spawn(f.finish(producers, fanout_report.clone()));
    }

    // Sample until every lane is done.
    let tick = Duration::from_secs_f64(1.0 / w.sample_hz);
    let per_line = (w.sample_hz.round() as usize).max(1);
    let mut intervals = Vec::new();
    let mut line: OpAccs = Default::default();
    let mut line_ticks = 0usize;
    let tty = std::io::stderr().is_terminal();
    let mut next_tick = load_start + tick;
    let mut done = false;
    while !done {
        tokio::select! {
            joined = tasks.join_next() => {
                if joined.is_none() {
                    done = true;
                } else {
                    continue;
                }
            }
            _ = tokio::time::sleep_until(next_tick.into()) => {}
        }
        let now = Instant::now();
        let seconds = if done {
            now.saturating_duration_since(next_tick - tick)
                .as_secs_f64()
        } else {
            tick.as_secs_f64()
        };
        let t_s = signed_secs(if done { now } else { next_tick }, measure_start);
        next_tick += tick;
        let mut accs: OpAccs = Default::default();
        for r in &recorders {
            r.lock().take_interval(&mut accs);
        }
        for (acc, l) in accs.iter().zip(line.iter_mut()) {
            if let Some(a) = acc {
                l.get_or_insert_with(|| OpAcc::new(crate::recorder::INTERVAL_SIGFIG))
                    .add(a);
            }
        }
        line_ticks += 1;
        if progress == Progress::Stderr && line_ticks >= per_line && !done {
            let secs = tick.as_secs_f64() * line_ticks as f64;
            let text = progress_line(t_s, w.warmup_s, secs, std::mem::take(&mut line));
            if tty {
                eprint!("\r\x1b[2K{text}");
            } else {
                eprintln!("{text}");
            }
            line_ticks = 0;
        }
        let ops: BTreeMap<String, IntervalOp> = named(accs)
            .map(|(op, a)| {
                (
                    op.name().to_string(),
                    IntervalOp::from_acc(&a, seconds.max(1e-3)),
                )
            })
            .collect();
        if !ops.is_empty() || !done {
            intervals.push(Interval { t_s, ops });
        }
    }
    if progress == Progress::Stderr && tty {
        eprintln!();
    }

    let mut totals: OpAccs = Default::default();
    let mut late = LateAcc::new();
    let mut errors = BTreeMap::new();
    for r in &recorders {
        r.lock().add_totals(&mut totals, &mut late, &mut errors);
    }
    Ok(Report {
        format: REPORT_FORMAT,
        tool: format!("vx-loadtest {}", env!("CARGO_PKG_VERSION")),
        hosts: vec![host],
        workload: (*w).clone(),
        open_loop: w.rate.is_some(),
        measure_s: w.measure_s,
        operations: named(totals)
            .map(|(op, a)| {
                (
                    op.name().to_string(),
                    OpReport::from_acc(op.name(), &a, w.measure_s),
                )
            })
            .collect(),
        late_sends: LateReport::from_acc(&late),
        errors,
        intervals,
        fanout: fanout_report.lock().take(),
    })
}

fn signed_secs(t: Instant, origin: Instant) -> f64 {
    if t >= origin {
        (t - origin).as_secs_f64()
    } else {
        -(origin - t).as_secs_f64()
    }
}

fn progress_line(t_s: f64, warmup_s: f64, secs: f64, accs: OpAccs) -> String {
    let phase = if t_s <= 0.0 { "warm-up" } else { "measure" };
    let elapsed = t_s + warmup_s;
    let mut out = format!("[{elapsed:>7.1}s {phase}]");
    let mut any = false;
    for (op, a) in named(accs) {
        any = true;
        let p = crate::report::Percentiles::of(&a.hist);
        out.push_str(&format!(
            " {} {:.0} ops/s p50 {:.2} ms p99 {:.2} ms errors {} 429s {} |",
            op.name(),
            a.ok as f64 / secs,
            p.p50,
            p.p99,
            a.errors,
            a.refused
        ));
    }
    if !any {
        out.push_str(" (no answers this second)");
    }
    out.trim_end_matches(" |").to_string()
}

fn host_info() -> Host {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let load1_before = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()));
    let started_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    Host {
        hostname,
        started_at,
        load1_before,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}
