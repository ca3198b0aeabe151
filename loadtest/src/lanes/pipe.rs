//! The pipelined lane: up to `pipeline_depth` operations in flight on one frames or RESP
//! connection, a writer and a reader task sharing the table of pending operations.

use super::pipe_io::PipeConn;
use super::pipe_types::{Answer, Pending, PipeReader, PipeWriter};
use super::*;

/// What the writer and the reader of a pipelined lane share.
pub(super) struct Pipe {
    pending: Mutex<HashMap<u64, Pending>>,
    /// One permit per operation that may still be put in flight.
    slots: Semaphore,
    /// Closed loop: do not send before this (a 429's pause).
    pause_until: Mutex<Option<Instant>>,
    broken: AtomicBool,
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
    let op = op_on(&generator, &ctx.endpoint);
    let mut generator = Some(generator);
    let mut i = 0u64;
    let mut conn = first;
    while Instant::now() < ctx.end {
        let c = match conn.take() {
            Some(c) => c,
            None => match connect_pipe(&ctx.endpoint, ctx.workload.token.as_deref()).await {
                Ok(c) => c,
                Err(e) => {
                    ctx.record(op, &Outcome::Error(e.to_string()), Instant::now());
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
            (
                PipeConn::Resp(mut w, mut r),
                Some(g @ (LaneGen::Kv(_) | LaneGen::Ingest(_) | LaneGen::Replay(..))),
            ) => {
                if !matches!(g, LaneGen::Kv(_)) {
                    r.streams();
                }
                w.source = Some(g);
                let f = run_pipe(&ctx, &pipe, &mut w, r, &mut i).await;
                generator = w.source.take();
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
    // Open loop: the connection broke near the end, behind its schedule, and the run ended
    // before another was open. What was due before the end and never sent is an error, so
    // every scheduled operation is still accounted for once.
    if let Some(s) = &ctx.schedule {
        loop {
            let due = s.intended(i);
            if due >= ctx.end {
                break;
            }
            lost(&ctx, op, &mut i, "the connection broke", due);
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
        // Open loop: the operation's intended time, once the pacer lets it go. Closed loop: it
        // starts when its slot is taken (below), and the clock is read once, there: reading it
        // before and again after the wait for a slot was a tenth of the tool's time at a
        // million RESP operations a second.
        let intended = if ctx.schedule.is_some() {
            let Some(t) = ctx.next_start(*i).await else {
                return true;
            };
            Some(t)
        } else {
            ctx.closed_start(*i).await;
            None
        };
        let owed_since = || intended.unwrap_or_else(Instant::now);
        // From here the operation is owed: open loop took its pacer permit. If the connection
        // breaks before it is sent, it is counted as an error (and its index used up), so the
        // schedule after a reconnect stays in step with the pacer.
        let op = w.op();
        let pause = pipe.pause_until.lock().take();
        if let Some(until) = pause {
            if let Err(e) = w.flush().await {
                return lost(ctx, op, i, &e.to_string(), owed_since());
            }
            sleep_until(until.min(ctx.end).into()).await;
        }
        let permit = match pipe.slots.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                if let Err(e) = w.flush().await {
                    return lost(ctx, op, i, &e.to_string(), owed_since());
                }
                match pipe.slots.acquire().await {
                    Ok(p) => p,
                    Err(_) => return lost(ctx, op, i, "the connection broke", owed_since()),
                }
            }
        };
        // Closed loop sends nothing once the run is over.
        let start = match intended {
            Some(t) => t,
            None => {
                let now = Instant::now();
                if now >= ctx.end {
                    return true;
                }
                now
            }
        };
        permit.forget();
        ctx.sent(start);
        *i += 1;
        match w.queue(start) {
            Ok((key, p)) => {
                pipe.pending.lock().insert(key, p);
            }
            Err(e) => {
                pipe.slots.add_permits(1);
                ctx.record(op, &Outcome::Error(e.to_string()), start);
            }
        }
    }
}

async fn read_pipe<R: PipeReader>(ctx: LaneCtx, pipe: Arc<Pipe>, mut r: R) {
    // When the last read from the socket returned: the end of every answer it brought.
    let mut now = Instant::now();
    loop {
        let ready = match r.ready() {
            Ok(a) => a,
            Err(e) => return broken(&ctx, &pipe, &e.to_string()),
        };
        let (key, answer) = match ready {
            Some(a) => a,
            None => {
                // Wait without limit while nothing is in flight; an answer owed for longer
                // than timeout_s breaks the connection.
                let owed = !pipe.pending.lock().is_empty();
                let wait = if owed {
                    ctx.timeout
                } else {
                    Duration::from_millis(50)
                };
                // The deadline counts from the last read, not from a clock read per wait.
                let got = timeout_at((now + wait).into(), r.next()).await;
                now = Instant::now();
                match got {
                    Ok(Ok(a)) => a,
                    Ok(Err(e)) => return broken(&ctx, &pipe, &e.to_string()),
                    Err(_) if owed => {
                        let e = format!("no answer within {} s", ctx.timeout.as_secs_f64());
                        return broken(&ctx, &pipe, &e);
                    }
                    Err(_) => continue,
                }
            }
        };
        let Some(p) = pipe.pending.lock().remove(&key) else {
            continue;
        };
        pipe.slots.add_permits(1);
        let outcome = match answer {
            Answer::Ok { events, bytes } => Outcome::Ok {
                events: events.unwrap_or(p.events),
                bytes: bytes.unwrap_or(p.bytes),
            },
            Answer::Refused(retry_after) => {
                if ctx.schedule.is_none() {
                    *pipe.pause_until.lock() = Some(now + retry_pause(retry_after));
                }
                Outcome::Refused { retry_after }
            }
            Answer::Error(e) => Outcome::Error(e),
        };
        ctx.record_at(p.op, &outcome, p.started, now);
    }
}

/// The connection cannot go on: the writer stops, and what is in flight fails with `why`.
fn broken(ctx: &LaneCtx, pipe: &Pipe, why: &str) {
    pipe.broken.store(true, Ordering::Release);
    pipe.slots.close();
    fail_pending(ctx, pipe, why);
}

fn fail_pending(ctx: &LaneCtx, pipe: &Pipe, why: &str) {
    let failed: Vec<Pending> = pipe.pending.lock().drain().map(|(_, p)| p).collect();
    for p in failed {
        ctx.record(p.op, &Outcome::Error(why.to_string()), p.started);
    }
}
