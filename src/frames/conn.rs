//! One frames connection after the handshake. A single task reads frames, decodes each BATCH
//! incrementally into a packed batch (counting its bytes in the in-flight budget, like an HTTP
//! body), admits it and hands it to the writer, then reads on while earlier batches are being
//! written; answers go out as they complete, in any order, matched by request id.
//!
//! # Order per stream
//! Batches are admitted and handed to the writer by this one task, in the order they arrive:
//! each write is polled once, which puts it in the writer's channel (the router awaits nothing
//! before `Store::write`, and the store nothing before its channel send), before the next frame
//! is decoded. If the channel is full at that moment the request may instead wait to enter it,
//! and a later one could overtake it; so when the channel is half full or more after that poll,
//! the connection lets everything in flight finish before it submits the next batch.
//!
//! # Flow control (docs/API.md §4)
//! A batch whose shards are at their high-water mark (or that the queued-byte budget cannot
//! take) is not refused: the connection stops reading — TCP flow control then stops the
//! client — until those shards have drained below `ingest.low_water`, and tries again. Acks of
//! batches in flight keep flowing meanwhile. Reading also stops while `WINDOW` batches are in
//! flight, and while the in-flight byte budget is spent.
//!
//! # Stalls
//! Only waits for the client are timed: inside a frame (which holds in-flight budget and a
//! decoder) `ingest.body_timeout`, between frames with nothing in flight
//! `server.frames_idle_timeout`, each counted from the start of the wait, so answers that
//! complete meanwhile do not extend a stall. Waits of the server's own (budget, room in the
//! shards, the window) are not timed. Either timeout ends the connection with ERROR `timeout`.
//! Writes of answers are timed too: a client that stops reading them fills the socket buffers,
//! and once it has taken no byte for `server.header_timeout` the connection is closed without
//! further answers (it would not read them), so it cannot block its task forever.
//!
//! # Answers
//! Every BATCH whose header was read gets exactly one ACK or ERROR (request id ≠ 0); a refused
//! batch does not affect the others. A protocol error ends the connection: in-flight batches
//! are answered, then a connection-level ERROR (request id 0) is sent and the connection
//! closed. At shutdown, the connection stops reading, answers what is in flight (a batch that
//! was being read or waiting for room gets `not_ready`), sends ERROR `not_ready` with id 0 and
//! closes: a batch without an answer was never read and is not stored.

use super::{Ctx, Io, handshake};
use crate::failure::Failure;
use crate::write::{Asked, Events, Reached, Refusal, Writes, Written};
use axum::http::HeaderValue;
use bytes::{Buf, BytesMut};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use vx_ingest::InflightPermit;
use vx_proto::Batch;
use vx_proto::ErrorCode;
use vx_proto::frames::{
    self, Ack, BatchDecoder, BatchHead, ErrorFrame, Frame, FrameError, FrameType, HEAD_LEN, Head,
    Progress, fill_to_basis_points,
};
use vx_sys::now_ms;

/// Read size; also the output size at which acks are written without waiting for a pause.
const CHUNK: usize = 64 << 10;

type Write = Pin<Box<dyn Future<Output = Done> + Send>>;

/// A finished write.
struct Done {
    id: u64,
    events: u64,
    /// When the batch was decoded (its admission starts): `vx_ingest_stage_seconds`.
    decoded: std::time::Instant,
    result: Result<Written, Refusal>,
}

/// Where the reader is in the byte stream.
enum Reading {
    /// Expecting a frame header.
    Head,
    /// Inside a BATCH body.
    Batch(Box<Pending>),
    /// Skipping the rest of a refused BATCH.
    Skip(u64),
}

/// A BATCH being decoded.
struct Pending {
    decoder: BatchDecoder,
    batch: Batch,
    permit: InflightPermit,
    /// Bytes decoded but not yet counted in the in-flight budget.
    uncounted: u64,
    /// The request id was checked (not 0, not in flight).
    checked: bool,
}

/// What the buffered input yields next.
enum Step {
    /// Read at least this many bytes in all before decoding again.
    Need(usize),
    /// `WINDOW` batches are in flight: wait for one to finish.
    WindowFull,
    /// A decoded batch, its budget, and bytes of it not yet counted in the budget.
    Batch(BatchHead, Batch, InflightPermit, u64),
    Ping(u64),
    /// This batch (request id) is refused; the connection goes on.
    Reject(u64, Failure),
    /// The connection ends with this error.
    Fatal(Failure),
}

/// Why the reading loop ended.
enum End {
    /// The client closed its side; maybe inside a frame.
    Eof,
    Fatal(Failure),
    Shutdown,
    /// The client sent nothing for `after`: inside a frame (`ingest.body_timeout`) or between
    /// frames with nothing in flight (`server.frames_idle_timeout`).
    Timeout {
        mid_frame: bool,
        after: std::time::Duration,
    },
}

struct Conn {
    rd: ReadHalf<Box<dyn Io>>,
    wr: WriteHalf<Box<dyn Io>>,
    buf: BytesMut,
    out: Vec<u8>,
    ctx: Arc<Ctx>,
    writes: Writes,
    /// The HELLO's token as `Authorization`, for the owners asked in cluster mode.
    auth: Option<HeaderValue>,
    stop: CancellationToken,
    reading: Reading,
    inflight: FuturesUnordered<Write>,
    /// Request ids in flight, so that answers stay unambiguous.
    ids: HashSet<u64>,
    /// A write may still be waiting to enter the writer's channel (see the module docs).
    barrier: bool,
    /// The timer of waits for the client (`ingest.body_timeout` inside a frame,
    /// `server.frames_idle_timeout` between frames): one per connection, moved with
    /// `reset` rather than created per read, so a busy connection costs no timer
    /// registrations beyond an atomic deadline update.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// When the current wait for the client began. Cleared when bytes arrive, and while the
    /// connection waits on itself (answers in flight between frames); answers completing
    /// during a stall inside a frame do not extend it.
    waiting_since: Option<Instant>,
}

/// Serve one accepted connection to its end.
pub(super) async fn serve(
    mut io: Box<dyn Io>,
    peer: String,
    ctx: Arc<Ctx>,
    stop: CancellationToken,
) {
    let span = tracing::debug_span!("frames", peer = %peer);
    async move {
        let mut buf = BytesMut::with_capacity(CHUNK);
        let (writes, auth) = match handshake::run(&mut io, &mut buf, &ctx).await {
            Ok(Some(granted)) => granted,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(error = %e, "frames handshake failed");
                return;
            }
        };
        let gauge = ctx.state.metrics().frames().connections.clone();
        gauge.inc();
        let (rd, wr) = tokio::io::split(io);
        let mut conn = Conn {
            rd,
            wr,
            buf,
            out: Vec::with_capacity(CHUNK),
            ctx,
            writes,
            auth,
            stop,
            reading: Reading::Head,
            inflight: FuturesUnordered::new(),
            ids: HashSet::new(),
            barrier: false,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            waiting_since: None,
        };
        match conn.run().await {
            Ok(()) => tracing::debug!("frames connection closed"),
            Err(e) => tracing::debug!(error = %e, "frames connection failed"),
        }
        gauge.dec();
    }
    .instrument(span)
    .await;
}

impl Conn {
    async fn run(&mut self) -> io::Result<()> {
        let end = self.read_loop().await?;
        // A batch cut off by the end gets its answer if its id is known.
        if let Reading::Batch(p) = std::mem::replace(&mut self.reading, Reading::Head)
            && let Some(id) = p.decoder.request_id().filter(|&id| id != 0)
            && p.checked
        {
            let failure = match end {
                End::Shutdown => Failure::shutting_down("the service is shutting down"),
                End::Timeout { after, .. } => Failure::timeout(
                    vx_ingest::LIMIT_BODY_TIMEOUT,
                    format!(
                        "this BATCH frame sent nothing for {} (ingest.body_timeout)",
                        crate::config::units::format_duration(after)
                    ),
                ),
                _ => Failure::new(
                    ErrorCode::Malformed,
                    "the connection ended inside this BATCH frame",
                ),
            };
            self.error(id, failure);
        }
        while let Some(done) = self.inflight.next().await {
            self.complete(done);
            if self.out.len() >= CHUNK {
                self.flush().await?;
            }
        }
        // Unread input at close makes the kernel reset the connection (see `linger`).
        let reset_risk = !matches!(end, End::Eof);
        match end {
            End::Eof => {}
            End::Fatal(f) => self.error(0, f),
            End::Shutdown => self.error(
                0,
                Failure::shutting_down(
                    "the service is shutting down; batches without an answer were not stored",
                ),
            ),
            End::Timeout { mid_frame, after } => {
                let after = crate::config::units::format_duration(after);
                let failure = if mid_frame {
                    Failure::timeout(
                        vx_ingest::LIMIT_BODY_TIMEOUT,
                        format!(
                            "the connection sent nothing for {after} inside a frame (ingest.body_timeout)"
                        ),
                    )
                } else {
                    Failure::timeout(
                        super::LIMIT_IDLE_TIMEOUT,
                        format!("no frame for {after} (server.frames_idle_timeout)"),
                    )
                };
                self.ctx
                    .state
                    .metrics()
                    .rejected(ErrorCode::Timeout, "frames", None);
                self.error(0, failure);
            }
        }
        self.flush().await?;
        self.wr.shutdown().await?;
        if reset_risk {
            super::linger(&mut self.rd).await;
        }
        Ok(())
    }

    /// Read and submit frames until the client closes, a protocol error, or shutdown.
    async fn read_loop(&mut self) -> io::Result<End> {
        loop {
            if self.stop.is_cancelled() {
                return Ok(End::Shutdown);
            }
            self.answer_ready().await?;
            let step = self.step();
            self.count_decoded().await;
            match step {
                Step::Need(need) => {
                    // Room for what the next item needs (at most one event or header) and a
                    // read's worth more; `reserve` reuses the consumed front when it can.
                    self.buf
                        .reserve(need.saturating_sub(self.buf.len()).max(CHUNK));
                    self.flush().await?;
                    // Waiting for the client: inside a frame it holds budget and a decoder,
                    // so `ingest.body_timeout`; between frames, with nothing in flight, the
                    // (longer) idle timeout. While answers are pending it is not idle.
                    let mid_frame = !matches!(self.reading, Reading::Head) || !self.buf.is_empty();
                    let after = if mid_frame {
                        self.ctx.body_timeout
                    } else {
                        self.ctx.idle_timeout
                    };
                    if !mid_frame && !self.inflight.is_empty() {
                        self.waiting_since = None;
                    }
                    let deadline = (mid_frame || self.inflight.is_empty())
                        .then(|| *self.waiting_since.get_or_insert_with(Instant::now))
                        // A deadline past what `Instant` can hold is no deadline.
                        .and_then(|since| since.checked_add(after));
                    if let Some(d) = deadline
                        && self.timer.deadline() != d
                    {
                        self.timer.as_mut().reset(d);
                    }
                    let timed = deadline.is_some();
                    tokio::select! {
                        () = self.stop.cancelled() => return Ok(End::Shutdown),
                        Some(done) = self.inflight.next(), if !self.inflight.is_empty() => {
                            self.complete(done);
                        }
                        n = self.rd.read_buf(&mut self.buf) => {
                            if n? == 0 {
                                return Ok(End::Eof);
                            }
                            self.waiting_since = None;
                        }
                        () = self.timer.as_mut(), if timed => {
                            return Ok(End::Timeout { mid_frame, after });
                        }
                    }
                }
                Step::WindowFull => {
                    self.flush().await?;
                    tokio::select! {
                        () = self.stop.cancelled() => return Ok(End::Shutdown),
                        Some(done) = self.inflight.next() => self.complete(done),
                    }
                }
                Step::Ping(nonce) => self.frame(&Frame::Pong(nonce)),
                Step::Reject(id, f) => {
                    self.ctx.state.metrics().rejected(f.code, "frames", None);
                    self.error(id, f);
                }
                Step::Fatal(e) => return Ok(End::Fatal(e)),
                Step::Batch(head, batch, mut permit, uncounted) => {
                    // Counted before a possible wait for room: the batch is in memory.
                    permit.grow(uncounted).await;
                    if !self.submit(head, batch, permit).await? {
                        return Ok(End::Shutdown);
                    }
                }
            }
            if self.out.len() >= CHUNK {
                self.flush().await?;
            }
        }
    }

    /// Decode what the buffer holds, up to the next thing to do.
    fn step(&mut self) -> Step {
        loop {
            match &mut self.reading {
                Reading::Head => {
                    if self.inflight.len() >= self.ctx.window {
                        return Step::WindowFull;
                    }
                    let head = match Head::parse(&self.buf, self.ctx.max_frame) {
                        Ok(Some(h)) => h,
                        Ok(None) => return Step::Need(HEAD_LEN),
                        Err(e) => return Step::Fatal(Failure::from(&e)),
                    };
                    match head.frame_type() {
                        Some(FrameType::Batch) => {
                            self.buf.advance(HEAD_LEN);
                            let limits = self.ctx.state.limits();
                            self.reading = Reading::Batch(Box::new(Pending {
                                decoder: BatchDecoder::new(
                                    head.len,
                                    limits.max_event_bytes,
                                    now_ms(),
                                ),
                                batch: Batch::new(),
                                permit: self.ctx.state.budget().begin(),
                                uncounted: 0,
                                checked: false,
                            }));
                        }
                        Some(FrameType::Ping) if head.len != 8 => {
                            return Step::Fatal(Failure::new(
                                ErrorCode::Malformed,
                                format!("a PING body is 8 bytes, not {}", head.len),
                            ));
                        }
                        Some(FrameType::Ping) => {
                            let Some(body) = self.buf.get(HEAD_LEN..head.frame_len()) else {
                                return Step::Need(head.frame_len());
                            };
                            let parsed = Frame::decode(head.ty, body);
                            self.buf.advance(head.frame_len());
                            match parsed {
                                Ok(Frame::Ping(nonce)) => return Step::Ping(nonce),
                                Ok(_) => {}
                                Err(e) => return Step::Fatal(Failure::from(&e)),
                            }
                        }
                        Some(t) => {
                            return Step::Fatal(Failure::new(
                                ErrorCode::Malformed,
                                format!("a client may not send {} frames here", t.name()),
                            ));
                        }
                        None => {
                            return Step::Fatal(Failure::from(&FrameError::UnknownType(head.ty)));
                        }
                    }
                }
                Reading::Batch(p) => {
                    let (used, res) = p.decoder.decode(&self.buf, &mut p.batch);
                    self.buf.advance(used);
                    p.uncounted += used as u64;
                    if !p.checked
                        && let Some(h) = p.decoder.head()
                    {
                        if h.request_id == 0 {
                            return Step::Fatal(Failure::new(
                                ErrorCode::Malformed,
                                "request id 0 is reserved for connection-level errors",
                            ));
                        }
                        if self.ids.contains(&h.request_id) {
                            return Step::Fatal(Failure::new(
                                ErrorCode::BadRequest,
                                format!(
                                    "request id {} is already in flight on this connection",
                                    h.request_id
                                ),
                            ));
                        }
                        p.checked = true;
                    }
                    match res {
                        Ok(Progress::NeedMore { need }) => return Step::Need(need),
                        Ok(Progress::Done) => {
                            let Reading::Batch(p) =
                                std::mem::replace(&mut self.reading, Reading::Head)
                            else {
                                continue;
                            };
                            let Pending {
                                decoder,
                                batch,
                                permit,
                                uncounted,
                                ..
                            } = *p;
                            // A batch is done only after its header was read: no header
                            // here is a bug of the decoder, never of the client's bytes.
                            let Some(head) = decoder.head().copied() else {
                                return Step::Fatal(Failure::new(
                                    ErrorCode::Internal,
                                    "a decoded batch without its header",
                                ));
                            };
                            return Step::Batch(head, batch, permit, uncounted);
                        }
                        Err(e) => {
                            let id = p.decoder.request_id().filter(|&id| id != 0);
                            let left = p.decoder.left();
                            self.reading = Reading::Skip(left);
                            return match id {
                                Some(id) if !self.ids.contains(&id) => {
                                    Step::Reject(id, Failure::from(e))
                                }
                                // No usable id to answer with: the connection cannot go on.
                                _ => Step::Fatal(Failure::from(e)),
                            };
                        }
                    }
                }
                Reading::Skip(left) => {
                    let n = (*left).min(self.buf.len() as u64);
                    self.buf.advance(n as usize);
                    *left -= n;
                    if *left > 0 {
                        return Step::Need(1);
                    }
                    self.reading = Reading::Head;
                }
            }
        }
    }

    /// Count the bytes just decoded in the in-flight budget, waiting while it is spent (the
    /// socket is not read meanwhile).
    async fn count_decoded(&mut self) {
        if let Reading::Batch(p) = &mut self.reading
            && p.uncounted > 0
        {
            let n = std::mem::take(&mut p.uncounted);
            p.permit.grow(n).await;
        }
    }

    /// Admit `batch` (waiting for room rather than refusing) and hand it to the writer.
    /// `Ok(false)` when shutdown interrupted the wait (the batch is answered `not_ready`).
    async fn submit(
        &mut self,
        head: BatchHead,
        batch: Batch,
        permit: InflightPermit,
    ) -> io::Result<bool> {
        let id = head.request_id;
        let events = batch.len() as u64;
        if head.expected_last_seq.is_some() && batch.runs().len() > 1 {
            self.ctx
                .state
                .metrics()
                .rejected(ErrorCode::BadRequest, "frames", Some(events));
            self.error(
                id,
                Failure::new(
                    ErrorCode::BadRequest,
                    "an expected last seq needs all events of the batch in one stream",
                ),
            );
            return Ok(true);
        }
        if self.barrier {
            self.flush().await?;
            while let Some(done) = self.inflight.next().await {
                self.complete(done);
            }
            self.barrier = false;
        }
        let decoded = std::time::Instant::now();
        let asked = match head
            .durability
            .map(|d| asked(d, self.writes.cluster().is_some()))
        {
            None => Asked::default(),
            Some(Ok(a)) => a,
            Some(Err(f)) => {
                self.ctx
                    .state
                    .metrics()
                    .rejected(f.code, "frames", Some(events));
                self.error(id, f);
                return Ok(true);
            }
        };
        let mut req = Events {
            batch,
            asked,
            expected_last_seq: head.expected_last_seq,
            auth: self.auth.clone(),
        };
        let writes = self.writes.clone();
        let mut write: Write = if req.batch.is_empty() {
            let result = Ok(writes.nothing_written(asked));
            Box::pin(async move {
                Done {
                    id,
                    events,
                    decoded,
                    result,
                }
            })
        } else {
            if let Err(refused) = writes.check_limits(&req.batch, req.auth.as_ref()).await {
                self.complete(Done {
                    id,
                    events,
                    decoded,
                    result: Err(refused),
                });
                return Ok(true);
            }
            let shards = writes.prepare(&mut req.batch);
            let bytes = req.batch.mem_bytes() as u64;
            // Admitted at once, or the connection stalls: it stops reading (TCP flow control
            // slows the client) and keeps answering what is in flight meanwhile.
            let reservation = {
                let admit = writes.router().admit_or_wait(&shards, bytes);
                tokio::pin!(admit);
                match crate::listen::poll_once(admit.as_mut()).await {
                    Poll::Ready(r) => r,
                    Poll::Pending => {
                        self.ctx.state.metrics().frames().stalls.inc();
                        tracing::debug!(request_id = id, "shard full: reading paused");
                        loop {
                            self.flush().await?;
                            tokio::select! {
                                r = &mut admit => break r,
                                Some(done) = self.inflight.next(), if !self.inflight.is_empty() => {
                                    self.complete(done);
                                }
                                () = self.stop.cancelled() => {
                                    self.error(id, Failure::shutting_down(
                                        "the service is shutting down; this batch was not stored",
                                    ));
                                    return Ok(false);
                                }
                            }
                        }
                    }
                }
            };
            let written = writes.write(req, reservation);
            Box::pin(async move {
                Done {
                    id,
                    events,
                    decoded,
                    result: written.await,
                }
            })
        };
        // From admission on, the router's queued-byte budget accounts for the batch.
        drop(permit);
        // The first poll hands the request to the writer (see "Order per stream").
        match crate::listen::poll_once(write.as_mut()).await {
            Poll::Ready(done) => self.complete(done),
            Poll::Pending => {
                let store = self.writes.router().store();
                if store.queue_len().saturating_mul(2) >= store.queue_capacity() {
                    self.barrier = true;
                }
                self.ids.insert(id);
                self.inflight.push(write);
            }
        }
        Ok(true)
    }

    /// Answer the writes that finished, now, between frames: a reader with whole batches
    /// buffered would otherwise answer them only when it next waits for bytes, after decoding
    /// the batches behind (the frames' `answer` stage, `vx_ingest_stage_seconds`, measured
    /// 1.55 ms a request with 8 connections of 4 batches in flight, docs/BENCHMARKS.md).
    async fn answer_ready(&mut self) -> io::Result<()> {
        let mut any = false;
        while let Some(Some(done)) = futures_util::FutureExt::now_or_never(self.inflight.next()) {
            self.complete(done);
            any = true;
        }
        if any {
            self.flush().await?;
        }
        Ok(())
    }

    /// Encode the answer to a finished write.
    fn complete(&mut self, done: Done) {
        self.ids.remove(&done.id);
        let metrics = self.ctx.state.metrics();
        match done.result {
            Ok(w) => {
                let measured = crate::metrics::Measured {
                    receive: None,
                    decode: None,
                    decoded: done.decoded,
                    done: std::time::Instant::now(),
                };
                metrics.stages.observe(&measured, &w.stages);
                let handles = metrics.format("frames");
                handles.ingested.inc_by(w.accepted);
                handles.duplicates.inc_by(w.duplicates.unwrap_or(0));
                self.frame(&Frame::Ack(Ack {
                    request_id: done.id,
                    accepted: w.accepted,
                    duplicates: w.duplicates.unwrap_or(0),
                    durability: wire_durability(w.durability),
                    queue_fill: fill_to_basis_points(w.queue_fill),
                    last_seq: w.last_seq.unwrap_or_default(),
                    position: w.position.map(|p| p.to_string()),
                }));
            }
            Err(refused) => {
                let fill = refused.queue_fill;
                let failure = refused.failure;
                metrics.rejected(failure.code, "frames", Some(done.events));
                let mut frame = failure.into_frame(done.id);
                frame.queue_fill = Some(fill_to_basis_points(fill));
                self.error_frame(frame);
            }
        }
    }

    /// Answer batch `request_id` (0: the connection) with `f`.
    fn error(&mut self, request_id: u64, f: Failure) {
        self.error_frame(f.into_frame(request_id));
    }

    fn error_frame(&mut self, e: ErrorFrame) {
        if e.request_id != 0 {
            tracing::debug!(request_id = e.request_id, code = %e.code, "batch refused");
        }
        self.frame(&Frame::Error(e));
    }

    fn frame(&mut self, f: &Frame) {
        // Only a HELLO token can be too long to encode; the server never sends one.
        if let Err(e) = f.encode(&mut self.out) {
            tracing::warn!(error = %e, "cannot encode a frame");
        }
    }

    /// Write the answers out. A client that takes nothing for `server.header_timeout` has
    /// stopped reading: the connection fails (`TimedOut`) rather than hold its task forever.
    async fn flush(&mut self) -> io::Result<()> {
        let limit = self.ctx.write_timeout;
        let stalled = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no answer for server.header_timeout",
            )
        };
        let mut written = 0;
        while written < self.out.len() {
            let write = self.wr.write(&self.out[written..]);
            match tokio::time::timeout(limit, write).await {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => written += n,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(stalled()),
            }
        }
        self.out.clear();
        tokio::time::timeout(limit, self.wr.flush())
            .await
            .map_err(|_| stalled())?
    }
}

/// A BATCH's level as the write path asks it: one rule with `X-Vx-Durability`.
fn asked(d: frames::Durability, clustered: bool) -> Result<Asked, Failure> {
    crate::write::asked(Some(d.as_str()), clustered)
}

/// The level a write reached, on the wire.
fn wire_durability(reached: Reached) -> frames::Durability {
    match reached {
        Reached::Local(vx_storage::Durability::None) => frames::Durability::None,
        Reached::Local(vx_storage::Durability::Write) => frames::Durability::Write,
        Reached::Local(vx_storage::Durability::Fsync) => frames::Durability::Fsync,
        Reached::Replicated => frames::Durability::Replicated,
        Reached::Applied => frames::Durability::Applied,
    }
}
