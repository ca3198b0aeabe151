//! A run from start to report: prepare what the scenario reads (replay's streams, the keys of
//! kv and features, fanout's stream and connected followers),
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
            let s = prepare_replay(&w, &endpoints[0], &say).await?;
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

/// Fill the replay streams if asked, then list them.
async fn prepare_replay(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<Vec<StreamInfo>, RunError> {
    let prep = |e: String| RunError::Prepare(e);
    let mut conn = HttpConn::connect(ep, w.token.as_deref()).await?;
    if w.preload_events > 0 {
        let mut g = IngestGen::new(w, u32::MAX, "preload")?;
        let mut written = 0u64;
        for s in 0..w.streams {
            let name = format!("{}{s}", w.stream_prefix);
            let have = stream_events(&mut conn, &name).await?;
            let mut need = w.preload_events.saturating_sub(have);
            while need > 0 {
                let n = need.min(1000) as u32;
                let body = g.ndjson_for(&name, n);
                let reply = conn
                    .call(
                        "POST",
                        "/v1/events",
                        &[("content-type", "application/x-ndjson")],
                        Bytes::from(body),
                        false,
                    )
                    .await
                    .map_err(|e| prep(e.to_string()))?;
                match reply.status.as_u16() {
                    200 => {
                        need -= u64::from(n);
                        written += u64::from(n);
                    }
                    429 => {
                        tokio::time::sleep(retry_pause(reply.retry_after())).await;
                    }
                    _ => return Err(prep(format!("preloading {name}: {}", reply.failure()))),
                }
            }
        }
        if written > 0 {
            say(&format!("replay: preloaded {written} events"));
        }
    }
    let mut streams = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path = format!(
            // 200 entries stay well inside the 64 KiB a kept body may have.
            "/v1/streams?limit=200&prefix={}",
            segment(&w.stream_prefix)
        );
        if let Some(a) = &after {
            path.push_str(&format!("&after={}", segment(a)));
        }
        let reply = conn
            .call("GET", &path, &[], Bytes::new(), true)
            .await
            .map_err(|e| prep(e.to_string()))?;
        if !reply.status.is_success() {
            return Err(prep(format!("listing streams: {}", reply.failure())));
        }
        let v: serde_json::Value = reply
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .ok_or_else(|| prep("the stream list is not the JSON of SPEC §5".into()))?;
        for s in v["streams"].as_array().into_iter().flatten() {
            let (Some(name), Some(first), Some(last), Some(events)) = (
                s["stream"].as_str(),
                s["first_seq"].as_u64(),
                s["last_seq"].as_u64(),
                s["events"].as_u64(),
            ) else {
                continue;
            };
            let wanted = w.preload_events == 0
                || name
                    .strip_prefix(w.stream_prefix.as_str())
                    .and_then(|i| i.parse::<u64>().ok())
                    .is_some_and(|i| i < w.streams);
            if events > 0 && last >= first && wanted {
                streams.push(StreamInfo {
                    name: name.to_string(),
                    first_seq: first,
                    last_seq: last,
                });
            }
        }
        match v["next"].as_str() {
            Some(n) if streams.len() < 1_000_000 => after = Some(n.to_string()),
            _ => break,
        }
    }
    if streams.is_empty() {
        return Err(prep(format!(
            "no stream with events under the prefix {:?} at {ep}; set preload_events, or run an ingest workload first",
            w.stream_prefix
        )));
    }
    Ok(streams)
}

/// Retained events of a stream (0 if unknown).
async fn stream_events(conn: &mut HttpConn, name: &str) -> Result<u64, RunError> {
    let reply = conn
        .call(
            "GET",
            &format!("/v1/streams/{}", segment(name)),
            &[],
            Bytes::new(),
            true,
        )
        .await?;
    match reply.status.as_u16() {
        404 => Ok(0),
        200 => reply
            .body
            .as_ref()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
            .and_then(|v| v["events"].as_u64())
            .ok_or_else(|| {
                RunError::Prepare(format!("the metadata of {name} is not what SPEC §5 says"))
            }),
        _ => Err(RunError::Prepare(format!(
            "reading {name}: {}",
            reply.failure()
        ))),
    }
}

/// SET keys 0..kv_preload, pipelined 1000 at a time.
async fn preload_kv(w: &Workload, ep: &Endpoint, say: &impl Fn(&str)) -> Result<(), RunError> {
    let n = w.kv_preload();
    if n == 0 {
        return Ok(());
    }
    let Endpoint::Resp(addr) = ep else {
        return Err(RunError::Prepare(format!("{ep} is no RESP endpoint")));
    };
    let fail = |e: std::io::Error| RunError::Prepare(format!("preloading keys at {ep}: {e}"));
    let mut tcp = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .map_err(fail)?;
    let value = vec![b'x'; w.value_size_b];
    let mut out = Vec::new();
    let mut buf = bytes::BytesMut::with_capacity(64 << 10);
    let started = Instant::now();
    let mut k = 0u64;
    while k < n {
        let chunk = (n - k).min(1000);
        out.clear();
        for j in k..k + chunk {
            resp::encode(&[b"SET", &kv_key(j, w.key_size_b), &value], &mut out);
        }
        tcp.write_all(&out).await.map_err(fail)?;
        let mut answered = 0;
        while answered < chunk {
            match resp::parse(&buf).map_err(|e| RunError::Prepare(e.to_string()))? {
                Some((resp::Reply::Error(e), _)) => {
                    return Err(RunError::Prepare(format!("preloading keys at {ep}: {e}")));
                }
                Some((_, used)) => {
                    let _ = buf.split_to(used);
                    answered += 1;
                }
                None => {
                    buf.reserve(64 << 10);
                    if tcp.read_buf(&mut buf).await.map_err(fail)? == 0 {
                        return Err(RunError::Prepare(format!(
                            "preloading keys at {ep}: the server closed the connection"
                        )));
                    }
                }
            }
        }
        k += chunk;
    }
    say(&format!(
        "kv: preloaded {n} keys in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Connections the features preload PUTs over at once (at most `connections`): each PUT waits
/// for its durable write, so the preload needs many in flight to fill the server's group
/// commits, and a bound so that a preload never opens more than a load lane would.
const PRELOAD_PARALLEL: u32 = 64;

/// Check that the server has the feature API, then PUT the entities 0..kv_preload once each,
/// over up to [`PRELOAD_PARALLEL`] connections carrying one request at a time.
async fn prepare_features(
    w: &Workload,
    ep: &Endpoint,
    say: &impl Fn(&str),
) -> Result<(), RunError> {
    let prep = RunError::Prepare;
    let timeout = Duration::from_secs_f64(w.timeout_s);
    let g = Arc::new(KvGen::new(w, u32::MAX)?);
    let mut first = HttpConn::connect(ep, w.token.as_deref()).await?;
    // A server without the feature API answers every path under /v1/features with 404
    // not_found, which the lanes would count as GET misses: a run of "successes" that
    // measured nothing. Refuse it here instead.
    let probe = g.feature_request(&KvOp::Query(vec![0]));
    let reply = tokio::time::timeout(
        timeout,
        first.call(
            probe.method,
            &probe.path,
            &[("content-type", "application/json")],
            probe.body,
            false,
        ),
    )
    .await
    .map_err(|_| {
        prep(format!(
            "{ep}: no answer to POST /v1/features/query within {} s",
            w.timeout_s
        ))
    })?
    .map_err(|e| prep(format!("{ep}: POST /v1/features/query: {e}")))?;
    if reply.status.as_u16() == 404 {
        return Err(prep(format!(
            "{ep} has no feature API (POST /v1/features/query answered {}); the features scenario needs a server with SPEC §6's routes",
            reply.failure()
        )));
    }
    let n = w.kv_preload();
    if n == 0 {
        return Ok(());
    }
    let parallel = u64::from(w.connections.min(PRELOAD_PARALLEL)).min(n);
    let mut conns = vec![first];
    for _ in 1..parallel {
        conns.push(HttpConn::connect(ep, w.token.as_deref()).await?);
    }
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for conn in conns {
        tasks.spawn(put_entities(
            conn,
            g.clone(),
            next.clone(),
            n,
            w.durability,
            timeout,
        ));
    }
    // The first failure ends the preload; dropping the set aborts the other connections.
    while let Some(joined) = tasks.join_next().await {
        let done = joined.map_err(PutError::from).and_then(|r| r);
        if let Err(e) = done {
            return Err(prep(format!("preloading entities at {ep}: {e}")));
        }
    }
    say(&format!(
        "features: preloaded {n} entities in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// Why preloading entities stopped.
#[derive(Debug, thiserror::Error)]
enum PutError {
    #[error("PUT {entity}: no answer within {secs} s")]
    Timeout { entity: String, secs: f64 },
    #[error("PUT {entity}: {failure}")]
    Refused { entity: String, failure: String },
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// PUT entities on one connection, taking the next index from `next` until `n`; a 429 waits
/// the pause the server asks and sends the same PUT again.
async fn put_entities(
    mut conn: HttpConn,
    g: Arc<KvGen>,
    next: Arc<AtomicU64>,
    n: u64,
    durability: Option<Durability>,
    timeout: Duration,
) -> Result<(), PutError> {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(d) = durability {
        headers.push(("x-vx-durability", d.as_str()));
    }
    let headers = headers.as_slice();
    loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= n {
            return Ok(());
        }
        let req = g.feature_request(&KvOp::Set(k));
        loop {
            let reply = tokio::time::timeout(
                timeout,
                conn.call(req.method, &req.path, headers, req.body.clone(), false),
            )
            .await
            .map_err(|_| PutError::Timeout {
                entity: g.entity(k),
                secs: timeout.as_secs_f64(),
            })??;
            match reply.status.as_u16() {
                200 => break,
                429 => tokio::time::sleep(retry_pause(reply.retry_after())).await,
                _ => {
                    return Err(PutError::Refused {
                        entity: g.entity(k),
                        failure: reply.failure(),
                    });
                }
            }
        }
    }
}
