//! Load lanes: each sends its share of the operations on its own connection, at its scheduled
//! times (open loop) or as answers come back (closed loop), and records every outcome.
//!
//! - An HTTP lane carries one request at a time (HTTP/1.1 has no usable pipelining): ingest,
//!   replay, the features scenario's key-value mix, and fanout's producers (which record the
//!   ack instant of every seq they write for the followers; see [`crate::fanout`]).
//! - A pipelined lane (frames, RESP) keeps up to `pipeline_depth` operations in flight on one
//!   connection: a writer sends, a reader task matches answers (frames by request id, RESP in
//!   order) and frees a slot for each.
//!
//! Open loop: latency runs from the intended send time, so time spent waiting for the
//! connection or a pipeline slot is charged to the server; a 429 is recorded as refused at
//! that time and not retried. Closed loop: latency runs from the actual send; a 429 pauses the
//! lane for the server's `Retry-After` (`X-Vx-Retry-After-Ms` when given).

use crate::acks::{AckTable, parse_ack};
use crate::endpoint::Endpoint;
use crate::http::{HttpConn, Reply, retry_pause, segment};
use crate::ops::{IngestGen, KvGen, KvOp, ReplayGen, ReplayOp, StreamInfo};
use crate::recorder::{LaneRecorder, Op, Outcome};
use crate::resp;
use crate::schedule::Schedule;
use crate::workload::{Durability, Workload};
use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Semaphore;
use tokio::time::{sleep, sleep_until, timeout};

/// Replay scans read pages of this many events (the server's largest `limit`).
const SCAN_PAGE: u32 = 100_000;
/// Wait between attempts to reopen a broken connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// What every lane shares with the run.
#[derive(Clone)]
pub struct LaneCtx {
    pub workload: Arc<Workload>,
    pub endpoint: Endpoint,
    /// `Some` in open loop, with the pacer's permits of this lane.
    pub schedule: Option<Schedule>,
    pub pacer: Option<Arc<Semaphore>>,
    /// The clock all lanes start on (closed loop waits for it too).
    pub start: Instant,
    /// No operation is started at or after this.
    pub end: Instant,
    pub timeout: Duration,
    pub rec: Arc<Mutex<LaneRecorder>>,
}

/// What a lane generates.
pub enum LaneGen {
    Ingest(IngestGen),
    Replay(ReplayGen, Arc<Vec<StreamInfo>>),
    /// Over RESP.
    Kv(KvGen),
    /// The same mix over the feature API (HTTP).
    Features(KvGen),
    /// fanout's producers: ingest of the followed stream, each acked seq's instant recorded.
    Fanout(IngestGen, Arc<AckTable>),
}

impl LaneCtx {
    fn record(&self, op: Op, outcome: &Outcome, started: Instant) {
        let latency = Instant::now().saturating_duration_since(started);
        self.rec.lock().record(op, outcome, latency, started);
    }

    /// Wait for the send time of operation `i`; `None` when the run is over. Returns the
    /// time the operation counts from: intended (open loop) or actual (closed loop).
    async fn next_start(&self, i: u64) -> Option<Instant> {
        match &self.schedule {
            Some(s) => {
                let t = s.intended(i);
                if t >= self.end {
                    return None;
                }
                // The pacer adds this lane's permit at `t` (and closes at the end).
                match &self.pacer {
                    Some(p) => p.acquire().await.ok()?.forget(),
                    None => sleep_until(t.into()).await,
                }
                Some(t)
            }
            None => {
                if i == 0 {
                    sleep_until(self.start.into()).await;
                }
                let now = Instant::now();
                (now < self.end).then_some(now)
            }
        }
    }

    /// Open loop: the operation meant for `start` leaves now.
    fn sent(&self, start: Instant) {
        if self.schedule.is_some() {
            self.rec.lock().sent(start, Instant::now());
        }
    }

    /// Closed loop honours a 429's pause (bounded by the end of the run).
    async fn pause(&self, retry_after: Option<Duration>) {
        if self.schedule.is_none() {
            let until = (Instant::now() + retry_pause(retry_after)).min(self.end);
            sleep_until(until.into()).await;
        }
    }

    fn durability_header(&self) -> Option<&'static str> {
        self.workload.durability.map(Durability::as_str)
    }

    /// The next ingest request of `g`: its events, body bytes, body and headers.
    fn ingest_request(
        &self,
        g: &mut IngestGen,
    ) -> (u64, u64, Vec<u8>, Vec<(&'static str, &'static str)>) {
        let events = g.events_per_request();
        let (body, ty) = g.next_body();
        let bytes = body.len() as u64;
        let mut headers = vec![("content-type", ty)];
        if let Some(d) = self.durability_header() {
            headers.push(("x-vx-durability", d));
        }
        (events, bytes, body, headers)
    }
}

/// Run one HTTP lane to the end of the run.
pub async fn http_lane(ctx: LaneCtx, mut conn: Option<HttpConn>, mut generator: LaneGen) {
    let mut i = 0u64;
    while let Some(start) = ctx.next_start(i).await {
        i += 1;
        let live = match conn.as_mut() {
            Some(c) => c,
            None => match HttpConn::connect(&ctx.endpoint, ctx.workload.token.as_deref()).await {
                Ok(c) => conn.insert(c),
                Err(e) => {
                    ctx.record(op_of(&generator), &Outcome::Error(e), start);
                    sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        ctx.sent(start);
        let (op, result) =
            match timeout(ctx.timeout, http_op(&ctx, live, &mut generator, start)).await {
                Ok(r) => r,
                Err(_) => (
                    op_of(&generator),
                    Err(format!("no answer within {} s", ctx.timeout.as_secs_f64())),
                ),
            };
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                // The connection is in an unknown state: open a new one.
                conn = None;
                Outcome::Error(e)
            }
        };
        ctx.record(op, &outcome, start);
        if let Outcome::Refused { retry_after } = outcome {
            ctx.pause(retry_after).await;
        }
    }
}

fn op_of(g: &LaneGen) -> Op {
    match g {
        LaneGen::Ingest(_) | LaneGen::Fanout(..) => Op::Ingest,
        LaneGen::Replay(..) => Op::Page,
        // The operation last drawn: an error (a timeout) that ends it is counted under it.
        LaneGen::Kv(g) | LaneGen::Features(g) => g.last_op(),
    }
}

/// One operation over HTTP, meant to start at `start`. `Err`: the connection failed.
async fn http_op(
    ctx: &LaneCtx,
    conn: &mut HttpConn,
    generator: &mut LaneGen,
    start: Instant,
) -> (Op, Result<Outcome, String>) {
    match generator {
        LaneGen::Fanout(g, acks) => {
            let (events, bytes, body, headers) = ctx.ingest_request(g);
            // A delivery counts in the window its ingest request counts in.
            let measured = ctx.rec.lock().measured(start);
            let r = conn
                .call("POST", "/v1/events", &headers, Bytes::from(body), true)
                .await
                .map(|reply| {
                    // The ack instant: the answer is in (before parsing it).
                    let at = Instant::now();
                    match reply.status.as_u16() {
                        200 => match reply
                            .body
                            .as_deref()
                            .and_then(|b| parse_ack(b, acks.stream()))
                        {
                            Some((accepted, last)) => {
                                acks.ack(last + 1 - accepted, last, at, measured);
                                Outcome::Ok { events, bytes }
                            }
                            None => Outcome::Error(
                                "an ingest answer without the stream's last_seq".into(),
                            ),
                        },
                        429 => Outcome::Refused {
                            retry_after: reply.retry_after(),
                        },
                        _ => Outcome::Error(reply.failure()),
                    }
                });
            (Op::Ingest, r)
        }
        LaneGen::Ingest(g) => {
            let (events, bytes, body, headers) = ctx.ingest_request(g);
            let r = conn
                .call("POST", "/v1/events", &headers, Bytes::from(body), false)
                .await
                .map(|reply| match reply.status.as_u16() {
                    200 => Outcome::Ok { events, bytes },
                    429 => Outcome::Refused {
                        retry_after: reply.retry_after(),
                    },
                    _ => Outcome::Error(reply.failure()),
                });
            (Op::Ingest, r)
        }
        LaneGen::Replay(g, streams) => match g.next(streams) {
            ReplayOp::Page {
                stream,
                from,
                limit,
            } => {
                let s = &streams[stream];
                (
                    Op::Page,
                    page(conn, &s.name, from, limit).await.map(|(o, _)| o),
                )
            }
            ReplayOp::Scan { stream } => (Op::Scan, scan(conn, &streams[stream]).await),
        },
        LaneGen::Features(g) => {
            let op = g.next_op();
            let req = g.feature_request(&op);
            let (events, bytes) = (op.events(), g.bytes_of(&op));
            let mut headers = Vec::with_capacity(2);
            if let Some(ty) = req.content_type {
                headers.push(("content-type", ty));
            }
            // Writes are admitted like events: the workload's durability, as ingest sends it.
            if let (KvOp::Set(_) | KvOp::Del(_), Some(d)) = (&op, ctx.durability_header()) {
                headers.push(("x-vx-durability", d));
            }
            let r = conn
                .call(req.method, &req.path, &headers, req.body, false)
                .await
                .map(|reply| feature_outcome(&op, &reply, events, bytes));
            (op.op(), r)
        }
        LaneGen::Kv(_) => (
            Op::Get,
            Err("the kv scenario runs over RESP, not HTTP".into()),
        ),
    }
}

/// The outcome of a features request. A 404 `not_found` to a GET or DELETE is a miss, a
/// success as Redis's nil (GET) and 0 (DEL) are: an unknown entity, which a Zipfian mix with
/// deletes meets all the time. A 404 of any other code (or to a PUT or a query, which never
/// answer it) is an error. 429 is backpressure, 507 (the feature budget is full) an error.
pub fn feature_outcome(op: &KvOp, reply: &Reply, events: u64, bytes: u64) -> Outcome {
    match reply.status.as_u16() {
        200 => Outcome::Ok { events, bytes },
        404 if matches!(op, KvOp::Get(_) | KvOp::Del(_)) && is_not_found(reply) => {
            Outcome::Ok { events, bytes }
        }
        429 => Outcome::Refused {
            retry_after: reply.retry_after(),
        },
        _ => Outcome::Error(reply.failure()),
    }
}

/// Whether a reply carries SPEC's `not_found` error code (error bodies are always kept).
fn is_not_found(reply: &Reply) -> bool {
    reply
        .body
        .as_ref()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .is_some_and(|v| v["error"]["code"] == "not_found")
}

/// One replay page; also returns `X-Vx-Next-Seq` and `X-Vx-Last-Seq`.
async fn page(
    conn: &mut HttpConn,
    stream: &str,
    from: u64,
    limit: u32,
) -> Result<(Outcome, Option<(u64, u64)>), String> {
    let path = format!(
        "/v1/streams/{}/events?from={from}&limit={limit}",
        segment(stream)
    );
    let reply = conn
        .call(
            "GET",
            &path,
            &[("accept", "application/x-ndjson")],
            Bytes::new(),
            false,
        )
        .await?;
    Ok(match reply.status.as_u16() {
        200 => {
            let next = reply
                .header_u64("x-vx-next-seq")
                .zip(reply.header_u64("x-vx-last-seq"));
            (
                Outcome::Ok {
                    events: reply.lines,
                    bytes: reply.bytes,
                },
                next,
            )
        }
        429 => (
            Outcome::Refused {
                retry_after: reply.retry_after(),
            },
            None,
        ),
        _ => (Outcome::Error(reply.failure()), None),
    })
}

/// A whole stream, page after page, up to its last seq when the scan began.
async fn scan(conn: &mut HttpConn, s: &StreamInfo) -> Result<Outcome, String> {
    let (mut events, mut bytes) = (0u64, 0u64);
    let mut from = s.first_seq;
    let mut last = None;
    loop {
        let (outcome, next) = page(conn, &s.name, from, SCAN_PAGE).await?;
        match outcome {
            Outcome::Ok {
                events: e,
                bytes: b,
            } => {
                events += e;
                bytes += b;
            }
            other => return Ok(other),
        }
        let Some((next, last_seq)) = next else {
            return Ok(Outcome::Error("a replay page without X-Vx-Next-Seq".into()));
        };
        let last = *last.get_or_insert(last_seq);
        if next > last || next <= from {
            return Ok(Outcome::Ok { events, bytes });
        }
        from = next;
    }
}

/// An operation sent on a pipelined connection and not answered yet.
struct Pending {
    op: Op,
    started: Instant,
    events: u64,
    bytes: u64,
}

/// What the writer and the reader of a pipelined lane share.
struct Pipe {
    pending: Mutex<HashMap<u64, Pending>>,
    /// One permit per operation that may still be put in flight.
    slots: Semaphore,
    /// Closed loop: do not send before this (a 429's pause).
    pause_until: Mutex<Option<Instant>>,
    broken: AtomicBool,
}

/// The sending side of a pipelined protocol.
trait PipeWriter: Send {
    /// The operation it sends (for errors before anything is queued).
    fn op(&self) -> Op;
    /// Encode the next operation into the send buffer; returns its key and what to record.
    fn queue(&mut self) -> Result<(u64, Pending), String>;
    fn flush(&mut self) -> impl Future<Output = Result<(), String>> + Send;
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// The receiving side: the next answer, with the key of the operation it answers.
trait PipeReader: Send + 'static {
    fn next(&mut self) -> impl Future<Output = Result<(u64, Answer), String>> + Send;
}

enum Answer {
    Ok { events: Option<u64> },
    Refused(Option<Duration>),
    Error(String),
}

/// Run one pipelined lane to the end of the run, reconnecting after failures. The
/// generator moves into the connection's writer while it lives.
pub async fn pipelined_lane(ctx: LaneCtx, first: Option<PipeConn>, generator: LaneGen) {
    let depth = ctx.workload.pipeline_depth as usize;
    let durability = ctx.workload.durability.map(|d| match d {
        Durability::None => vx_client::Durability::None,
        Durability::Write => vx_client::Durability::Write,
        Durability::Fsync => vx_client::Durability::Fsync,
    });
    let op = op_of(&generator);
    let mut generator = Some(generator);
    let mut i = 0u64;
    let mut conn = first;
    while Instant::now() < ctx.end {
        let c = match conn.take() {
            Some(c) => c,
            None => match connect_pipe(&ctx.endpoint, ctx.workload.token.as_deref()).await {
                Ok(c) => c,
                Err(e) => {
                    ctx.record(op, &Outcome::Error(e), Instant::now());
                    sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        let pipe = Arc::new(Pipe {
            pending: Mutex::new(HashMap::with_capacity(depth)),
            slots: Semaphore::new(depth),
            pause_until: Mutex::new(None),
            broken: AtomicBool::new(false),
        });
        let finished = match (c, generator.take()) {
            (PipeConn::Frames(mut w, r), Some(LaneGen::Ingest(g))) => {
                w.source = Some(g);
                w.durability = durability;
                let f = run_pipe(&ctx, &pipe, &mut w, r, &mut i).await;
                generator = w.source.take().map(LaneGen::Ingest);
                f
            }
            (PipeConn::Resp(mut w, r), Some(LaneGen::Kv(g))) => {
                w.source = Some(g);
                let f = run_pipe(&ctx, &pipe, &mut w, r, &mut i).await;
                generator = w.source.take().map(LaneGen::Kv);
                f
            }
            _ => {
                let e = format!("{} does not carry this scenario", ctx.endpoint);
                ctx.record(op, &Outcome::Error(e), Instant::now());
                return;
            }
        };
        if finished || generator.is_none() {
            return;
        }
    }
}

/// Drive one connection; `true` when the run is over, `false` when the connection broke.
async fn run_pipe<W: PipeWriter, R: PipeReader>(
    ctx: &LaneCtx,
    pipe: &Arc<Pipe>,
    w: &mut W,
    r: R,
    i: &mut u64,
) -> bool {
    let reader = tokio::spawn(read_pipe(ctx.clone(), pipe.clone(), r));
    let finished = write_pipe(ctx, pipe, w, i).await;
    // Let the answers in flight arrive, then close.
    let _ = w.flush().await;
    let deadline = Instant::now() + ctx.timeout;
    while !pipe.pending.lock().is_empty()
        && !pipe.broken.load(Ordering::Acquire)
        && Instant::now() < deadline
    {
        sleep(Duration::from_millis(2)).await;
    }
    w.close().await;
    reader.abort();
    let _ = reader.await;
    fail_pending(ctx, pipe, "no answer before the connection closed");
    finished && !pipe.broken.load(Ordering::Acquire)
}

/// An operation that was due but never sent: an error, and its index is used up.
fn lost(ctx: &LaneCtx, op: Op, i: &mut u64, why: &str, start: Instant) -> bool {
    *i += 1;
    ctx.record(op, &Outcome::Error(why.to_string()), start);
    false
}

async fn write_pipe<W: PipeWriter>(ctx: &LaneCtx, pipe: &Pipe, w: &mut W, i: &mut u64) -> bool {
    loop {
        if pipe.broken.load(Ordering::Acquire) {
            return false;
        }
        // The next send time is known before waiting, so the buffer goes out first.
        if let Some(s) = &ctx.schedule
            && s.intended(*i) > Instant::now()
            && w.flush().await.is_err()
        {
            return false;
        }
        let Some(start) = ctx.next_start(*i).await else {
            return true;
        };
        // From here the operation is owed: open loop took its pacer permit. If the connection
        // breaks before it is sent, it is counted as an error (and its index used up), so the
        // schedule after a reconnect stays in step with the pacer.
        let op = w.op();
        let pause = pipe.pause_until.lock().take();
        if let Some(until) = pause {
            if let Err(e) = w.flush().await {
                return lost(ctx, op, i, &e, start);
            }
            sleep_until(until.min(ctx.end).into()).await;
        }
        let permit = match pipe.slots.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                if let Err(e) = w.flush().await {
                    return lost(ctx, op, i, &e, start);
                }
                match pipe.slots.acquire().await {
                    Ok(p) => p,
                    Err(_) => return lost(ctx, op, i, "the connection broke", start),
                }
            }
        };
        // Closed loop counts from the moment a slot is free and the operation is queued,
        // and sends nothing once the run is over.
        let start = if ctx.schedule.is_some() {
            start
        } else {
            let now = Instant::now();
            if now >= ctx.end {
                return true;
            }
            now
        };
        permit.forget();
        ctx.sent(start);
        *i += 1;
        match w.queue() {
            Ok((key, mut p)) => {
                p.started = start;
                pipe.pending.lock().insert(key, p);
            }
            Err(e) => {
                pipe.slots.add_permits(1);
                ctx.record(op, &Outcome::Error(e), start);
            }
        }
    }
}

async fn read_pipe<R: PipeReader>(ctx: LaneCtx, pipe: Arc<Pipe>, mut r: R) {
    loop {
        // Wait without limit while nothing is in flight; an answer owed for longer than
        // timeout_s breaks the connection.
        let owed = !pipe.pending.lock().is_empty();
        let wait = if owed {
            ctx.timeout
        } else {
            Duration::from_millis(50)
        };
        let (key, answer) = match timeout(wait, r.next()).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                pipe.broken.store(true, Ordering::Release);
                pipe.slots.close();
                fail_pending(&ctx, &pipe, &e);
                return;
            }
            Err(_) if owed => {
                pipe.broken.store(true, Ordering::Release);
                pipe.slots.close();
                let e = format!("no answer within {} s", ctx.timeout.as_secs_f64());
                fail_pending(&ctx, &pipe, &e);
                return;
            }
            Err(_) => continue,
        };
        let Some(p) = pipe.pending.lock().remove(&key) else {
            continue;
        };
        pipe.slots.add_permits(1);
        let outcome = match answer {
            Answer::Ok { events } => Outcome::Ok {
                events: events.unwrap_or(p.events),
                bytes: p.bytes,
            },
            Answer::Refused(retry_after) => {
                if ctx.schedule.is_none() {
                    *pipe.pause_until.lock() = Some(Instant::now() + retry_pause(retry_after));
                }
                Outcome::Refused { retry_after }
            }
            Answer::Error(e) => Outcome::Error(e),
        };
        ctx.record(p.op, &outcome, p.started);
    }
}

fn fail_pending(ctx: &LaneCtx, pipe: &Pipe, why: &str) {
    let failed: Vec<Pending> = pipe.pending.lock().drain().map(|(_, p)| p).collect();
    for p in failed {
        ctx.record(p.op, &Outcome::Error(why.to_string()), p.started);
    }
}

/// A connected pipelined connection, split.
pub enum PipeConn {
    Frames(FramesWriter, FramesReader),
    Resp(RespWriter, RespReader),
}

/// Open a frames or RESP connection.
pub async fn connect_pipe(ep: &Endpoint, token: Option<&str>) -> Result<PipeConn, String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot connect to {ep}: {e}");
    let opts = vx_client::Options {
        token: token.map(str::to_string),
        ..vx_client::Options::default()
    };
    match ep {
        Endpoint::Frames(addr) => {
            let c = vx_client::Client::connect_tcp(addr.as_str(), &opts)
                .await
                .map_err(|e| fail(&e))?;
            let (tx, rx) = c.split();
            Ok(PipeConn::Frames(FramesWriter::new(tx), FramesReader { rx }))
        }
        Endpoint::FramesUnix(path) => {
            let c = vx_client::Client::connect_unix(path, &opts)
                .await
                .map_err(|e| fail(&e))?;
            let (tx, rx) = c.split();
            Ok(PipeConn::Frames(FramesWriter::new(tx), FramesReader { rx }))
        }
        Endpoint::Resp(addr) => {
            let tcp = TcpStream::connect(addr.as_str())
                .await
                .map_err(|e| fail(&e))?;
            tcp.set_nodelay(true).map_err(|e| fail(&e))?;
            let (rd, wr) = tcp.into_split();
            Ok(PipeConn::Resp(
                RespWriter {
                    wr,
                    out: Vec::new(),
                    next: 0,
                    source: None,
                },
                RespReader {
                    rd,
                    buf: BytesMut::with_capacity(64 << 10),
                    next: 0,
                },
            ))
        }
        other => Err(format!("{other} does not pipeline")),
    }
}

/// The frames writer; it owns an ingest generator while connected.
pub struct FramesWriter {
    tx: vx_client::Sender,
    source: Option<IngestGen>,
    durability: Option<vx_client::Durability>,
}

impl FramesWriter {
    fn new(tx: vx_client::Sender) -> FramesWriter {
        FramesWriter {
            tx,
            source: None,
            durability: None,
        }
    }
}

impl PipeWriter for FramesWriter {
    fn op(&self) -> Op {
        Op::Ingest
    }

    fn queue(&mut self) -> Result<(u64, Pending), String> {
        let g = self
            .source
            .as_mut()
            .ok_or_else(|| "frames carry the ingest scenario only".to_string())?;
        let batch = g.next_batch();
        let wire = batch.wire();
        let opts = vx_client::BatchOptions {
            durability: self.durability,
            expected_last_seq: None,
        };
        let id = self
            .tx
            .queue_batch(&wire, opts)
            .map_err(|e| e.to_string())?;
        Ok((
            id,
            Pending {
                op: Op::Ingest,
                started: Instant::now(),
                events: batch.len() as u64,
                bytes: 0,
            },
        ))
    }

    async fn flush(&mut self) -> Result<(), String> {
        self.tx.flush().await.map_err(|e| e.to_string())
    }

    async fn close(&mut self) {
        let _ = self.tx.close().await;
    }
}

pub struct FramesReader {
    rx: vx_client::Receiver,
}

impl PipeReader for FramesReader {
    async fn next(&mut self) -> Result<(u64, Answer), String> {
        loop {
            match self.rx.next_reply().await.map_err(|e| e.to_string())? {
                vx_client::Reply::Ack(a) => {
                    return Ok((
                        a.request_id,
                        Answer::Ok {
                            events: Some(a.accepted + a.duplicates),
                        },
                    ));
                }
                vx_client::Reply::Rejected(e) if e.code == "backpressure" => {
                    return Ok((
                        e.request_id,
                        Answer::Refused(e.retry_after_ms.map(Duration::from_millis)),
                    ));
                }
                vx_client::Reply::Rejected(e) => {
                    return Ok((e.request_id, Answer::Error(format!("frames {}", e.code))));
                }
                vx_client::Reply::Pong(_) => continue,
            }
        }
    }
}

/// The RESP writer; it owns a kv generator while connected.
pub struct RespWriter {
    wr: OwnedWriteHalf,
    out: Vec<u8>,
    next: u64,
    source: Option<KvGen>,
}

impl PipeWriter for RespWriter {
    fn op(&self) -> Op {
        Op::Get
    }

    fn queue(&mut self) -> Result<(u64, Pending), String> {
        let g = self
            .source
            .as_mut()
            .ok_or_else(|| "RESP carries the kv scenario only".to_string())?;
        let op = g.next_op();
        g.encode_resp(&op, &mut self.out);
        let n = self.next;
        self.next += 1;
        Ok((
            n,
            Pending {
                op: op.op(),
                started: Instant::now(),
                events: op.events(),
                bytes: g.bytes_of(&op),
            },
        ))
    }

    async fn flush(&mut self) -> Result<(), String> {
        if !self.out.is_empty() {
            self.wr
                .write_all(&self.out)
                .await
                .map_err(|e| e.to_string())?;
            self.out.clear();
        }
        Ok(())
    }

    async fn close(&mut self) {
        let _ = self.wr.shutdown().await;
    }
}

pub struct RespReader {
    rd: OwnedReadHalf,
    buf: BytesMut,
    next: u64,
}

impl PipeReader for RespReader {
    async fn next(&mut self) -> Result<(u64, Answer), String> {
        loop {
            if let Some((reply, n)) = resp::parse(&self.buf).map_err(|e| e.to_string())? {
                let _ = self.buf.split_to(n);
                let key = self.next;
                self.next += 1;
                let answer = match reply {
                    resp::Reply::Error(e) => Answer::Error(format!(
                        "RESP {}",
                        e.split_whitespace().next().unwrap_or("error")
                    )),
                    _ => Answer::Ok { events: None },
                };
                return Ok((key, answer));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(64 << 10);
            }
            if self
                .rd
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| e.to_string())?
                == 0
            {
                return Err("the server closed the connection".into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::StatusCode;
    use hyper::header::{HeaderMap, HeaderValue};

    fn reply(status: u16, body: &str, headers: &[(&'static str, &'static str)]) -> Reply {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(*k, HeaderValue::from_static(v));
        }
        Reply {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::IM_A_TEAPOT),
            headers: map,
            bytes: body.len() as u64,
            lines: 0,
            body: Some(Bytes::from(body.to_string())),
        }
    }

    #[test]
    fn feature_misses_are_successes_and_the_rest_is_as_in_ingest() {
        let ok = Outcome::Ok {
            events: 1,
            bytes: 0,
        };
        let not_found = r#"{"error":{"code":"not_found","message":"unknown entity"}}"#;
        let get = KvOp::Get(1);
        assert_eq!(feature_outcome(&get, &reply(200, "{}", &[]), 1, 0), ok);
        // An unknown entity is a miss, like Redis's nil and DEL's 0.
        assert_eq!(feature_outcome(&get, &reply(404, not_found, &[]), 1, 0), ok);
        assert_eq!(
            feature_outcome(&KvOp::Del(1), &reply(404, not_found, &[]), 1, 0),
            ok
        );
        // A 404 that is not SPEC's not_found, or to a PUT or a query, is an error.
        assert!(matches!(
            feature_outcome(&get, &reply(404, "gone", &[]), 1, 0),
            Outcome::Error(_)
        ));
        assert_eq!(
            feature_outcome(&KvOp::Set(1), &reply(404, not_found, &[]), 1, 128),
            Outcome::Error("HTTP 404 not_found".into())
        );
        assert!(matches!(
            feature_outcome(&KvOp::Query(vec![1]), &reply(404, not_found, &[]), 1, 0),
            Outcome::Error(_)
        ));
        assert_eq!(
            feature_outcome(
                &KvOp::Set(1),
                &reply(
                    429,
                    "",
                    &[("x-vx-retry-after-ms", "25"), ("retry-after", "1")]
                ),
                1,
                128
            ),
            Outcome::Refused {
                retry_after: Some(Duration::from_millis(25))
            }
        );
        let full = r#"{"error":{"code":"storage_full","message":"feature budget"}}"#;
        assert_eq!(
            feature_outcome(&KvOp::Set(1), &reply(507, full, &[]), 1, 128),
            Outcome::Error("HTTP 507 storage_full".into())
        );
        assert_eq!(
            feature_outcome(&KvOp::Query(vec![1, 2]), &reply(200, "{}", &[]), 2, 0),
            Outcome::Ok {
                events: 2,
                bytes: 0
            }
        );
    }
}
