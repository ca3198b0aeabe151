//! The `fanout` scenario: `followers` Server-Sent-Events followers of one stream (docs/API.md §5,
//! `GET /v1/streams/{stream}/events?follow=true`) while producers ingest that stream at a fixed
//! rate. It measures the delivery latency of every event to every follower, from the producer's
//! ack of the event to the follower's receipt, and checks that every follower received every
//! seq from its start through the last acked seq, in order, once.
//!
//! The load generator shares the cores with the server it measures, and thousands of followers
//! each receive every event, so the follower side is built to cost little per event and per
//! follower:
//! - One tokio task per follower on its own connection, speaking vx-loadtest's own small
//!   HTTP/1.1 client ([`crate::http`], which argues why not hyper) to follow ([`http1`]).
//! - No buffer per follower: a follower awaits readiness and then, in a synchronous function,
//!   reads into its worker thread's buffer ([`READ_BUF`]), so its memory at rest is its parser
//!   and checker state (a few hundred bytes) and the socket.
//! - The SSE parser is the shared `vx_proto::sse`, keeping only the data of named events: the
//!   `data:` line of an ordinary event is skipped with `memchr`, never copied or JSON-parsed.
//!   The `id:` is the seq.
//! - The producers record each acked seq's ack instant in a preallocated table indexed by
//!   `seq − from` ([`AckTable`]), which every follower reads without a lock.
//! - Latencies go into a few shared recorders ([`DELIVERY_SHARDS`]), locked once per batch of
//!   events, not into a histogram per follower (a 3-digit HdrHistogram is ~190 KB).
//!
//! # Layout
//! - this module: the run ([`Fanout`]: connect every follower, drain, stop) and its [`tally`].
//! - [`follower`]: one follower's connect, read and reconnect loop.
//! - [`receive`]: decoding, parsing, checking and timing what a follower reads.
//! - [`seqcheck`]: the ordering check of one follower.
//! - [`http1`], [`chunked`]: the follower's minimal HTTP/1.1 client and body framing.
//! - [`stream`]: before the run, the stream's last seq and the open-file limit.

mod follower;
mod http1;
mod receive;
mod seqcheck;
mod stream;
#[cfg(test)]
mod tests;

pub use self::follower::Phase;
pub use self::receive::{FollowerOutcome, READ_BUF};
pub use self::seqcheck::{SeqCheck, Verdict};
pub use crate::acks::AckTable;

use self::follower::{FollowCtx, follower};
use self::http1::OpenError;
use self::stream::{last_seq_or_create, raise_nofile};
use crate::endpoint::Endpoint;
use crate::error::RunError;
use crate::recorder::LaneRecorder;
use crate::report::FanoutReport;
use crate::workload::Workload;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

/// Recorders the followers' deliveries are spread over (follower i records into i % this).
pub const DELIVERY_SHARDS: usize = 16;
/// Followers connecting at once before the run (a burst of thousands of connects would only
/// fill the server's accept queue).
const CONNECT_PARALLEL: usize = 64;

/// A fanout run in progress: the stream, the ack table, the followers and their recorders.
pub struct Fanout {
    stream: String,
    from: u64,
    followers: u32,
    drain: Duration,
    acks: Arc<AckTable>,
    shards: Vec<Arc<Mutex<LaneRecorder>>>,
    tasks: JoinSet<FollowerOutcome>,
    phase: watch::Sender<Phase>,
}

impl Fanout {
    /// Make sure the stream exists and take its last seq; connect every follower from the
    /// next one (all response heads received) before returning, so that the producers start
    /// with every follower live.
    pub async fn start(
        w: &Workload,
        endpoints: &[Endpoint],
        say: &impl Fn(&str),
    ) -> Result<Fanout, RunError> {
        let lanes = u64::from(w.connections) * u64::from(w.pipeline_depth);
        raise_nofile(u64::from(w.followers) + lanes + 64)
            .map_err(|e| RunError::Prepare(e.to_string()))?;
        let stream = w.fanout_stream();
        let ep = endpoints
            .first()
            .ok_or_else(|| RunError::Prepare("no endpoint".into()))?;
        let last = last_seq_or_create(w, ep, &stream).await?;
        let from = last + 1;
        let capacity = usize::try_from(w.fanout_events_bound())
            .map_err(|_| RunError::Prepare("the ack table does not fit in memory".into()))?;
        let acks = Arc::new(AckTable::new(stream.clone(), from, capacity));
        // Windows are set once the run's clock is known (set_window).
        let now = Instant::now();
        let shards: Vec<Arc<Mutex<LaneRecorder>>> = (0..DELIVERY_SHARDS.min(w.followers as usize))
            .map(|_| Arc::new(Mutex::new(LaneRecorder::new(now, now))))
            .collect();
        let ctx = Arc::new(FollowCtx {
            endpoints: endpoints.to_vec(),
            host: endpoints
                .iter()
                .map(|e| match e {
                    Endpoint::Http(a) => a.clone(),
                    _ => "localhost".to_string(),
                })
                .collect(),
            token: w.token.clone(),
            acks: acks.clone(),
            shards: shards.clone(),
            timeout: Duration::from_secs_f64(w.timeout_s),
        });
        let (phase, phase_rx) = watch::channel(Phase::Run);
        let (ready_tx, mut ready_rx) = mpsc::channel(w.followers as usize);
        let gate = Arc::new(Semaphore::new(CONNECT_PARALLEL));
        let mut tasks = JoinSet::new();
        let started = Instant::now();
        for i in 0..w.followers as usize {
            tasks.spawn(follower(
                ctx.clone(),
                i,
                phase_rx.clone(),
                ready_tx.clone(),
                gate.clone(),
            ));
        }
        drop(ready_tx);
        let mut connected = 0u32;
        while connected < w.followers {
            match ready_rx.recv().await {
                Some((_, Ok(()))) => connected += 1,
                Some((i, Err(e))) => {
                    let _ = phase.send(Phase::Stop);
                    let hint = match e {
                        OpenError::Status { status: 503, .. } => {
                            " (server.max_followers reached? it bounds the followers of the server)"
                        }
                        OpenError::Status { status: 406, .. } => {
                            " (the server does not answer text/event-stream: no live follow, docs/API.md §5)"
                        }
                        OpenError::Status { status: 404, .. } => " (was the stream deleted?)",
                        _ => "",
                    };
                    return Err(RunError::Connect(format!(
                        "fanout: follower {i} of {} (with {connected} connected): {e}{hint}",
                        w.followers
                    )));
                }
                None => {
                    return Err(RunError::Connect(
                        "fanout: a follower ended before it connected".into(),
                    ));
                }
            }
        }
        say(&format!(
            "fanout: {} followers of {stream} connected in {:.2} s, from seq {from}",
            w.followers,
            started.elapsed().as_secs_f64()
        ));
        Ok(Fanout {
            stream,
            from,
            followers: w.followers,
            drain: Duration::from_secs_f64(w.drain_s),
            acks,
            shards,
            tasks,
            phase,
        })
    }

    pub fn acks(&self) -> Arc<AckTable> {
        self.acks.clone()
    }

    /// The followers' delivery recorders, for the sampler and the totals.
    pub fn recorders(&self) -> &[Arc<Mutex<LaneRecorder>>] {
        &self.shards
    }

    pub fn set_window(&self, measure_start: Instant, measure_end: Instant) {
        for s in &self.shards {
            s.lock().set_window(measure_start, measure_end);
        }
    }

    /// Wait for the producers, give the followers `drain_s` to receive through the last acked
    /// seq, stop them and check what each received. The report goes to `out`.
    pub async fn finish(
        mut self,
        mut producers: JoinSet<()>,
        out: Arc<Mutex<Option<FanoutReport>>>,
    ) {
        while producers.join_next().await.is_some() {}
        let last = self.acks.last_acked().unwrap_or(self.from - 1);
        let _ = self.phase.send(Phase::Drain(last));
        let drain_start = Instant::now();
        let deadline = drain_start + self.drain;
        let mut outcomes = Vec::with_capacity(self.followers as usize);
        let mut drained_in = None;
        loop {
            tokio::select! {
                joined = self.tasks.join_next() => match joined {
                    Some(Ok(o)) => outcomes.push(o),
                    Some(Err(_)) => {}
                    None => {
                        drained_in = Some(drain_start.elapsed());
                        break;
                    }
                },
                () = tokio::time::sleep_until(deadline.into()) => break,
            }
        }
        if drained_in.is_none() {
            // The drain time is over: followers that have not received the tail stop now.
            let _ = self.phase.send(Phase::Stop);
            let grace = tokio::time::sleep(Duration::from_secs(2));
            tokio::pin!(grace);
            loop {
                tokio::select! {
                    joined = self.tasks.join_next() => match joined {
                        Some(Ok(o)) => outcomes.push(o),
                        Some(Err(_)) => {}
                        None => break,
                    },
                    () = &mut grace => {
                        self.tasks.abort_all();
                        break;
                    }
                }
            }
        }
        let report = tally(
            &self.stream,
            self.followers,
            &self.acks,
            last,
            &outcomes,
            self.drain.as_secs_f64(),
            drained_in.map(|d| d.as_secs_f64()),
        );
        *out.lock() = Some(report);
    }
}

/// The check of every follower through `last`. A follower whose outcome was lost (it did not
/// stop in time) counts as incomplete, with the whole range missing.
pub fn tally(
    stream: &str,
    followers: u32,
    acks: &AckTable,
    last: u64,
    outcomes: &[FollowerOutcome],
    drain_s: f64,
    drained_in_s: Option<f64>,
) -> FanoutReport {
    let from = acks.from();
    let mut r = FanoutReport {
        stream: stream.to_string(),
        followers: u64::from(followers),
        from_seq: from,
        last_acked_seq: last,
        acked_events: acks.acked(),
        unacked_seqs: acks.unacked_through(last),
        drain_s,
        drained_in_s,
        ..FanoutReport::default()
    };
    for o in outcomes {
        let v = o.check.verdict(last);
        r.delivered += o.check.received();
        r.before_ack += o.before_ack;
        r.reconnects += o.reconnects;
        r.retained_notices += o.retained;
        r.deleted += u64::from(o.deleted);
        r.missing_events += v.missing;
        r.duplicate_events += v.duplicates;
        r.out_of_order_events += v.out_of_order;
        r.with_gaps += u64::from(v.missing > 0);
        r.with_duplicates += u64::from(v.duplicates > 0);
        r.with_out_of_order += u64::from(v.out_of_order > 0);
        r.complete += u64::from(v.complete());
    }
    let lost = u64::from(followers).saturating_sub(outcomes.len() as u64);
    r.with_gaps += lost;
    r.missing_events += lost * (last + 1).saturating_sub(from);
    r.passed = r.complete == r.followers;
    r
}
