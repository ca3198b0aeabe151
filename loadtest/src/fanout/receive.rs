//! What a follower does with the bytes it receives: decode the body ([`crate::http::chunked`]),
//! parse its SSE (`vx_proto::sse`, keeping only the data of named events), check each seq
//! ([`SeqCheck`]) and time each delivery against the [`AckTable`], recording latencies in
//! batches into the follower's shared recorder.
//!
//! A follower holds no read buffer: it reads, synchronously, into its worker thread's
//! [`Scratch`], so that thousands of idle followers cost their parser and checker state only.

use super::seqcheck::SeqCheck;
use crate::acks::{AckState, AckTable};
use crate::http::chunked::{BodyDecoder, ChunkError};
use crate::http::wire::Sock;
use crate::recorder::{LaneRecorder, Op, Outcome};
use parking_lot::Mutex;
use std::time::{Duration, Instant};
use vx_proto::sse::{Event, Id, KeepData, SseError, SseParser};

/// Bytes a follower reads at once, into its worker thread's buffer.
pub const READ_BUF: usize = 16 << 10;
/// Latencies a follower collects before it locks its recorder.
const LATENCY_BATCH: usize = 128;
/// The data of a named event (`deleted`, `retained`) kept for the error message.
const MAX_NAMED_DATA: usize = 512;
/// The data of a named event beyond which the stream is refused (ours are a few dozen bytes).
const MAX_KEPT_DATA: usize = 64 << 10;

/// Why a follower's stream cannot be read on.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("follower: the stream broke: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Chunk(#[from] ChunkError),
    #[error(transparent)]
    Sse(#[from] SseError),
}

/// One opened stream's decoders: the body's framing and its SSE.
pub struct Body {
    pub dec: BodyDecoder,
    sse: SseParser,
}

impl Body {
    pub fn new(dec: BodyDecoder) -> Body {
        Body {
            dec,
            sse: SseParser::new(KeepData::Named, MAX_KEPT_DATA),
        }
    }
}

/// One follower's account of the run.
#[derive(Clone, Debug)]
pub struct FollowerOutcome {
    pub check: SeqCheck,
    /// Whether it connected at the start.
    pub connected: bool,
    /// Events received with no ack recorded yet (latency recorded as 0).
    pub before_ack: u64,
    /// Times its stream broke and it opened it again (with `Last-Event-ID`).
    pub reconnects: u64,
    /// `event: retained` notices received.
    pub retained: u64,
    /// Ended by `event: deleted`.
    pub deleted: bool,
}

/// A latency, and whether the delivery counts in the window (`None`: decide by receipt).
pub type Latency = (Duration, Option<bool>);

/// Latencies collected while parsing one read, recorded under one lock.
struct LatencyBatch<'a> {
    rec: &'a Mutex<LaneRecorder>,
    items: &'a mut Vec<Latency>,
    now: Instant,
}

impl LatencyBatch<'_> {
    fn push(&mut self, latency: Duration, measured: Option<bool>) {
        if self.items.len() >= LATENCY_BATCH {
            self.flush();
        }
        self.items.push((latency, measured));
    }

    fn flush(&mut self) {
        if self.items.is_empty() {
            return;
        }
        let ok = Outcome::Ok {
            events: 1,
            bytes: 0,
        };
        let mut rec = self.rec.lock();
        let by_receipt = rec.measured(self.now);
        for (latency, measured) in self.items.drain(..) {
            rec.record_window(Op::Deliver, &ok, latency, measured.unwrap_or(by_receipt));
        }
    }
}

/// What [`read_now`] reads into and collects latencies in: one per worker thread, so that a
/// wakeup of a follower costs no allocation and no zeroing of a buffer, and a follower at rest
/// holds none.
struct Scratch {
    buf: Vec<u8>,
    latencies: Vec<Latency>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            buf: vec![0; READ_BUF],
            latencies: Vec::with_capacity(LATENCY_BATCH),
        }
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::new());
}

/// What a follower checks and times its events against.
pub struct Sink<'a> {
    pub acks: &'a AckTable,
    pub rec: &'a Mutex<LaneRecorder>,
}

/// Parse body bytes received at `now`: decode, parse SSE, check and time each event.
pub fn parse_received(
    bytes: &[u8],
    now: Instant,
    body: &mut Body,
    out: &mut FollowerOutcome,
    sink: &Sink<'_>,
    latencies: &mut Vec<Latency>,
) -> Result<(), ReadError> {
    let mut batch = LatencyBatch {
        rec: sink.rec,
        items: latencies,
        now,
    };
    let Body { dec, sse } = body;
    // The first SSE error stops the parse; the rest of the read is moot.
    let mut parsed = Ok(());
    let fed = dec.feed(bytes, &mut |data| {
        if parsed.is_ok() {
            parsed = sse.feed(data, &mut |e| out.on_event(&e, sink.acks, &mut batch));
        }
    });
    batch.flush();
    fed?;
    Ok(parsed?)
}

impl FollowerOutcome {
    pub fn new(from: u64) -> FollowerOutcome {
        FollowerOutcome {
            check: SeqCheck::new(from),
            connected: false,
            before_ack: 0,
            reconnects: 0,
            retained: 0,
            deleted: false,
        }
    }

    fn on_event(&mut self, e: &Event<'_>, acks: &AckTable, batch: &mut LatencyBatch<'_>) {
        if self.deleted {
            return;
        }
        match e.name {
            _ if e.is_message() => match e.id {
                Some(Id::Seq(seq)) => self.on_seq(seq, acks, batch),
                Some(Id::Invalid) => error(batch.rec, "follower: an SSE id that is not a seq"),
                None if e.has_data => error(batch.rec, "follower: an SSE event without an id"),
                // A heartbeat, a `retry:`.
                None => {}
            },
            Some("deleted") => self.deleted = true,
            Some("retained") => {
                self.retained += 1;
                let data = &e.data[..e.data.len().min(MAX_NAMED_DATA)];
                error(
                    batch.rec,
                    format!(
                        "follower: events removed by retention before delivery ({})",
                        String::from_utf8_lossy(data)
                    ),
                );
            }
            _ => {}
        }
    }

    fn on_seq(&mut self, seq: u64, acks: &AckTable, batch: &mut LatencyBatch<'_>) {
        self.check.on(seq);
        let now = batch.now;
        match acks.state(seq) {
            AckState::Acked { at, measured } if now >= at => {
                batch.push(now - at, Some(measured));
            }
            AckState::Acked { measured, .. } => {
                self.before_ack += 1;
                batch.push(Duration::ZERO, Some(measured));
            }
            AckState::Pending => {
                self.before_ack += 1;
                batch.push(Duration::ZERO, None);
            }
            // Not an event of this run's producers: checked, not timed.
            AckState::Unknown => {}
        }
    }
}

/// Record an error of delivery.
pub fn error(rec: &Mutex<LaneRecorder>, message: impl Into<String>) {
    rec.lock().record(
        Op::Deliver,
        &Outcome::Error(message.into()),
        Duration::ZERO,
        Instant::now(),
    );
}

/// Parse what the socket has now (a few reads at most, so that one busy follower does not
/// hold its worker thread), into the worker thread's [`Scratch`]. `Ok(false)`: the body
/// ended. Synchronous: nothing of it is held across an await.
pub fn read_now(
    sock: &Sock,
    body: &mut Body,
    out: &mut FollowerOutcome,
    sink: &Sink<'_>,
) -> Result<bool, ReadError> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => read_into(&mut scratch, sock, body, out, sink),
        // Not reentered in practice; a fresh buffer keeps it correct if it ever is.
        Err(_) => read_into(&mut Scratch::new(), sock, body, out, sink),
    })
}

fn read_into(
    scratch: &mut Scratch,
    sock: &Sock,
    body: &mut Body,
    out: &mut FollowerOutcome,
    sink: &Sink<'_>,
) -> Result<bool, ReadError> {
    let Scratch { buf, latencies } = scratch;
    for _ in 0..4 {
        match sock.try_read(buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                // One clock read per read: every event in it arrived together.
                let now = Instant::now();
                parse_received(&buf[..n], now, body, out, sink, latencies)?;
                if body.dec.done() || out.deleted {
                    return Ok(false);
                }
                if n < buf.len() {
                    return Ok(true);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    Ok(true)
}
