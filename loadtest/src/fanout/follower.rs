//! One follower's life: connect (at most [`CONNECT_PARALLEL`](super) at once before the run),
//! read its stream until the run is done with it, and on a break open it again after the last
//! seq received, with `Last-Event-ID`.

use super::http1::{OpenError, follow_request, open};
use super::receive::{Body, FollowerOutcome, Sink, error, parse_received, read_now};
use super::seqcheck::SeqCheck;
use crate::acks::AckTable;
use crate::endpoint::Endpoint;
use crate::http::wire::Sock;
use crate::recorder::LaneRecorder;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc, watch};

/// Wait before a broken follower reconnects.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// Where the run is, as the followers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Producers are writing.
    Run,
    /// Producers are done; a follower that has received through this seq is complete.
    Drain(u64),
    /// The drain time is over: every follower ends now.
    Stop,
}

/// What every follower shares.
pub struct FollowCtx {
    pub endpoints: Vec<Endpoint>,
    pub host: Vec<String>,
    pub token: Option<String>,
    pub acks: Arc<AckTable>,
    pub shards: Vec<Arc<Mutex<LaneRecorder>>>,
    pub timeout: Duration,
}

/// A follower's first connection, as the run's start hears of it.
pub type Ready = (usize, Result<(), OpenError>);

/// How a follower's stream ended.
enum End {
    /// The run is over (Stop), or the follower received everything (Drain).
    Done,
    Deleted,
    /// The message recorded as the delivery error.
    Broken(String),
}

/// Whether the follower is finished: the run stopped, or it received through the drain
/// target.
fn finished(phase: &watch::Receiver<Phase>, check: &SeqCheck) -> bool {
    match *phase.borrow() {
        Phase::Stop => true,
        Phase::Drain(last) => check.next() > last,
        Phase::Run => false,
    }
}

/// Until the phase is Stop (or the run is gone).
async fn until_stop(phase: &mut watch::Receiver<Phase>) {
    loop {
        if *phase.borrow_and_update() == Phase::Stop {
            return;
        }
        if phase.changed().await.is_err() {
            return;
        }
    }
}

/// Read one opened stream until the run is done with it.
async fn follow_stream(
    sock: &Sock,
    body: &mut Body,
    out: &mut FollowerOutcome,
    sink: &Sink<'_>,
    phase: &mut watch::Receiver<Phase>,
) -> End {
    loop {
        if finished(phase, &out.check) {
            return End::Done;
        }
        tokio::select! {
            r = sock.readable() => {
                if let Err(e) = r {
                    return End::Broken(format!("follower: the stream broke: {e}"));
                }
            }
            changed = phase.changed() => {
                if changed.is_err() {
                    return End::Done;
                }
                continue;
            }
        }
        match read_now(sock, body, out, sink) {
            Ok(true) => {}
            Ok(false) if out.deleted => return End::Deleted,
            Ok(false) => return End::Broken("follower: the server ended the stream".into()),
            Err(e) => return End::Broken(e.to_string()),
        }
    }
}

/// One follower, from its first connection to the end of the run. Its first connection's
/// result goes to `ready`; a failure there ends it (the run then stops before it starts).
/// Later, a broken stream is an error and is opened again after the last seq received, with
/// `Last-Event-ID`.
pub async fn follower(
    ctx: Arc<FollowCtx>,
    index: usize,
    mut phase: watch::Receiver<Phase>,
    ready: mpsc::Sender<Ready>,
    gate: Arc<Semaphore>,
) -> FollowerOutcome {
    let ep = &ctx.endpoints[index % ctx.endpoints.len()];
    let host = &ctx.host[index % ctx.host.len()];
    let rec = ctx.shards[index % ctx.shards.len()].clone();
    let sink = Sink {
        acks: &ctx.acks,
        rec: &rec,
    };
    let from = ctx.acks.from();
    let mut out = FollowerOutcome::new(from);
    let mut ready = Some(ready);
    loop {
        // Resume after the last seq received (from the start if none was).
        let resume = (out.check.next() > from).then(|| out.check.next() - 1);
        let req = follow_request(host, ctx.acks.stream(), ctx.token.as_deref(), from, resume);
        let permit = match &ready {
            Some(_) => gate.clone().acquire_owned().await.ok(),
            None => None,
        };
        let opened = tokio::select! {
            r = tokio::time::timeout(ctx.timeout, open(ep, &req)) => r.unwrap_or_else(|_| {
                Err(OpenError::Timeout(ctx.timeout.as_secs_f64()))
            }),
            () = until_stop(&mut phase) => return out,
        };
        drop(permit);
        let (sock, dec, rest) = match opened {
            Ok(o) => o,
            Err(e) => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send((index, Err(e))).await;
                    return out;
                }
                error(&rec, format!("follower: {e}"));
                tokio::select! {
                    () = tokio::time::sleep(RECONNECT_PAUSE) => continue,
                    () = until_stop(&mut phase) => return out,
                }
            }
        };
        if let Some(tx) = ready.take() {
            out.connected = true;
            let _ = tx.send((index, Ok(()))).await;
        }
        let mut body = Body::new(dec);
        // The body bytes that came with the head.
        let fed = parse_received(
            &rest,
            Instant::now(),
            &mut body,
            &mut out,
            &sink,
            &mut Vec::new(),
        );
        drop(rest);
        let end = match fed {
            Err(e) => End::Broken(format!("follower: {e}")),
            Ok(()) if out.deleted => End::Deleted,
            Ok(()) => follow_stream(&sock, &mut body, &mut out, &sink, &mut phase).await,
        };
        match end {
            End::Done => return out,
            End::Deleted => {
                error(&rec, "follower: the stream was deleted");
                return out;
            }
            End::Broken(e) => {
                error(&rec, e);
                out.reconnects += 1;
                drop(sock);
                tokio::select! {
                    () = tokio::time::sleep(RECONNECT_PAUSE) => {}
                    () = until_stop(&mut phase) => return out,
                }
            }
        }
    }
}
