//! Load lanes: each sends its share of the operations on its own connection, at its scheduled
//! times (open loop) or as answers come back (closed loop), and records every outcome.
//!
//! - An HTTP lane carries one request at a time (HTTP/1.1 has no usable pipelining): ingest,
//!   replay, the features scenario's key-value mix, and fanout's producers (which record the
//!   ack instant of every seq they write for the followers; see [`crate::fanout`]).
//! - A pipelined lane (frames, RESP) keeps up to `pipeline_depth` operations in flight on one
//!   connection: a writer sends, a reader task matches answers (frames by request id, RESP in
//!   order) and frees a slot for each. Over RESP: the kv mix, ingest as one `XADD` per
//!   operation, replay as `XRANGE` pages (a scan: all its pages sent at once, one operation).
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
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Semaphore;
use tokio::time::{sleep, sleep_until, timeout, timeout_at};

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
    /// HTTP bodies or frames BATCHes; over RESP, one `XADD` per operation.
    Ingest(IngestGen),
    /// Pages and scans: HTTP GETs of NDJSON, or `XRANGE`s over RESP.
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
        self.record_at(op, outcome, started, Instant::now());
    }

    /// [`LaneCtx::record`] of an operation that ended at `now`, read once for all the answers
    /// one read of a pipeline brought.
    fn record_at(&self, op: Op, outcome: &Outcome, started: Instant, now: Instant) {
        let latency = now.saturating_duration_since(started);
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
                self.closed_start(i).await;
                let now = Instant::now();
                (now < self.end).then_some(now)
            }
        }
    }

    /// Closed loop: the first operation waits for the run's clock to start.
    async fn closed_start(&self, i: u64) {
        if i == 0 {
            sleep_until(self.start.into()).await;
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

/// [`op_of`] on `endpoint`: ingest over RESP is `xadd`.
fn op_on(g: &LaneGen, endpoint: &Endpoint) -> Op {
    match (g, endpoint) {
        (LaneGen::Ingest(_), Endpoint::Resp(_)) => Op::Xadd,
        _ => op_of(g),
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

mod http;
mod pipe;
mod pipe_io;
mod pipe_types;

pub use self::http::{feature_outcome, http_lane};
pub use self::pipe::pipelined_lane;
pub use self::pipe_io::{
    FramesReader, FramesWriter, PipeConn, RespReader, RespWriter, connect_pipe,
};
pub use self::pipe_types::PipeError;
