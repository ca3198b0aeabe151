//! The `fanout` scenario: `followers` Server-Sent-Events followers of one stream (SPEC §5,
//! `GET /v1/streams/{stream}/events?follow=true`) while producers ingest that stream at a fixed
//! rate. It measures the delivery latency of every event to every follower, from the producer's
//! ack of the event to the follower's receipt, and checks that every follower received every
//! seq from its start through the last acked seq, in order, once.
//!
//! The load generator shares the cores with the server it measures, and thousands of followers
//! each receive every event, so the follower side is built to cost little per event and per
//! follower:
//! - One tokio task per follower on its own connection, speaking just enough HTTP/1.1 (a
//!   request, the response head, a chunked body) to follow; no per-follower hyper connection
//!   task and channel.
//! - No buffer per follower: a follower awaits readiness and then, in a synchronous function,
//!   reads into its worker thread's buffer ([`READ_BUF`]), so its memory at rest is its parser
//!   and checker state (a few hundred bytes) and the socket.
//! - The SSE parser ([`SseParser`]) is a byte state machine that keeps only the `id:` and
//!   `event:` values; the `data:` line of an ordinary event is skipped with `memchr`, never
//!   copied or JSON-parsed. The `id:` is the seq.
//! - The producers record each acked seq's ack instant in a preallocated table indexed by
//!   `seq − from` ([`AckTable`]), which every follower reads without a lock.
//! - Latencies go into a few shared recorders ([`DELIVERY_SHARDS`]), locked once per batch of
//!   events, not into a histogram per follower (a 3-digit HdrHistogram is ~190 KB).

use crate::endpoint::Endpoint;
use crate::http::{HttpConn, segment};
use crate::lanes::retry_pause;
use crate::ops::IngestGen;
use crate::recorder::{LaneRecorder, Op, Outcome};
use crate::report::FanoutReport;
use crate::runner::RunError;
use crate::workload::Workload;
use bytes::Bytes;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

/// Bytes a follower reads at once, into its worker thread's buffer.
pub const READ_BUF: usize = 16 << 10;
/// Recorders the followers' deliveries are spread over (follower i records into i % this).
pub const DELIVERY_SHARDS: usize = 16;
/// Followers connecting at once before the run (a burst of thousands of connects would only
/// fill the server's accept queue).
const CONNECT_PARALLEL: usize = 64;
/// Wait before a broken follower reconnects.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// A response head longer than this is refused.
const MAX_HEAD: usize = 64 << 10;
/// An error body is read up to this much (for its SPEC error code).
const MAX_ERROR_BODY: usize = 64 << 10;
/// Missing ranges a follower remembers, so that a late arrival can be told from a duplicate.
const MAX_HOLES: usize = 64;
/// The data of a named event (`deleted`, `retained`) kept for the error message.
const MAX_NAMED_DATA: usize = 512;
/// Latencies a follower collects before it locks its recorder.
const LATENCY_BATCH: usize = 128;

// ---------------------------------------------------------------------------------------------
// The ack table

/// When each seq of the run was acked, written by the producers and read by the followers.
/// A slot holds `(nanoseconds since origin + 1) << 1 | measured`: 0 is "not acked (yet)", and
/// `measured` says whether the request that wrote the event was meant to start inside the
/// measured window (the window a delivery counts in, like its ingest request).
pub struct AckTable {
    stream: String,
    origin: Instant,
    from: u64,
    slots: Box<[AtomicU64]>,
    /// The highest acked seq, 0 when none.
    last: AtomicU64,
    acked: AtomicU64,
}

/// What the table knows of a seq when a follower receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckState {
    Acked {
        at: Instant,
        measured: bool,
    },
    /// Inside the table, not acked yet: the follower got it before the producer got the ack
    /// (the server publishes at visibility), or no producer will (a timed-out request, a
    /// writer other than this run).
    Pending,
    /// Outside the table (before the start, or past every event this run could write).
    Unknown,
}

impl AckTable {
    pub fn new(stream: String, from: u64, capacity: usize) -> AckTable {
        AckTable {
            stream,
            origin: Instant::now(),
            from,
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            last: AtomicU64::new(0),
            acked: AtomicU64::new(0),
        }
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The first seq of the run.
    pub fn from(&self) -> u64 {
        self.from
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.from)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    /// The seqs `first..=last` were acked at `at`.
    pub fn ack(&self, first: u64, last: u64, at: Instant, measured: bool) {
        if first > last {
            return;
        }
        let nanos = u64::try_from(at.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX >> 2)
            .min(u64::MAX >> 2);
        let v = ((nanos + 1) << 1) | u64::from(measured);
        for seq in first..=last {
            if let Some(i) = self.index(seq) {
                self.slots[i].store(v, Ordering::Release);
            }
        }
        self.acked.fetch_add(last - first + 1, Ordering::Relaxed);
        self.last.fetch_max(last, Ordering::Relaxed);
    }

    pub fn state(&self, seq: u64) -> AckState {
        let Some(i) = self.index(seq) else {
            return AckState::Unknown;
        };
        let v = self.slots[i].load(Ordering::Acquire);
        if v == 0 {
            return AckState::Pending;
        }
        AckState::Acked {
            at: self.origin + Duration::from_nanos((v >> 1) - 1),
            measured: v & 1 == 1,
        }
    }

    /// The highest seq a producer saw acked.
    pub fn last_acked(&self) -> Option<u64> {
        let l = self.last.load(Ordering::Relaxed);
        (l >= self.from && l > 0).then_some(l)
    }

    /// Events acked (the sum of the acked requests' new events).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Seqs of `from..=last` that no producer saw acked.
    pub fn unacked_through(&self, last: u64) -> u64 {
        (self.from..=last)
            .filter(|s| !matches!(self.state(*s), AckState::Acked { .. }))
            .count() as u64
    }
}

/// The new events of an ingest answer (SPEC §3) to a request of one stream: `accepted` and
/// the stream's `last_seq`, so its seqs are `last − accepted + 1 ..= last`.
pub fn parse_ack(body: &[u8], stream: &str) -> Option<(u64, u64)> {
    #[derive(serde::Deserialize)]
    struct Ack {
        accepted: u64,
        last_seq: std::collections::HashMap<String, u64>,
    }
    let a: Ack = serde_json::from_slice(body).ok()?;
    let last = a.last_seq.get(stream).copied()?;
    (a.accepted <= last).then_some((a.accepted, last))
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 bodies

/// How a response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Chunked,
    Length(u64),
    /// Neither: the body ends when the server closes.
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Hex digits of a chunk size.
    Size,
    /// A chunk extension, skipped to the end of the line.
    Ext,
    /// The LF after the CR of a size line.
    SizeLf,
    Data,
    /// The CRLF after a chunk's data.
    DataCr,
    DataLf,
    /// A trailer line starts (an empty one ends the body).
    Trailer,
    TrailerSkip,
    TrailerLf,
    Done,
}

/// Decodes a response body incrementally from whatever pieces the socket returns, handing
/// out the body's bytes as slices of its input (nothing is copied).
#[derive(Clone, Debug)]
pub struct BodyDecoder {
    kind: BodyKind,
    state: Chunk,
    /// The chunk size being read (Size), or what is left of the chunk or body (Data, Length).
    n: u64,
    digits: u8,
}

impl BodyDecoder {
    pub fn new(kind: BodyKind) -> BodyDecoder {
        let (state, n) = match kind {
            BodyKind::Length(0) => (Chunk::Done, 0),
            BodyKind::Length(n) => (Chunk::Data, n),
            _ => (Chunk::Size, 0),
        };
        BodyDecoder {
            kind,
            state,
            n,
            digits: 0,
        }
    }

    /// Whether the whole body was read.
    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }

    /// Decode `input`, handing each run of body bytes to `out`. Bytes past the end of the body
    /// are ignored.
    pub fn feed<'a>(
        &mut self,
        mut input: &'a [u8],
        out: &mut impl FnMut(&'a [u8]),
    ) -> Result<(), String> {
        match self.kind {
            BodyKind::UntilClose => {
                if !input.is_empty() {
                    out(input);
                }
                return Ok(());
            }
            BodyKind::Length(_) => {
                if self.state == Chunk::Data && !input.is_empty() {
                    let n = input
                        .len()
                        .min(usize::try_from(self.n).unwrap_or(usize::MAX));
                    out(&input[..n]);
                    self.n -= n as u64;
                    if self.n == 0 {
                        self.state = Chunk::Done;
                    }
                }
                return Ok(());
            }
            BodyKind::Chunked => {}
        }
        while let Some(&b) = input.first() {
            match self.state {
                Chunk::Size => {
                    input = &input[1..];
                    match b {
                        b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                            let v = (b as char).to_digit(16).unwrap_or(0);
                            self.n = self
                                .n
                                .checked_mul(16)
                                .and_then(|n| n.checked_add(u64::from(v)))
                                .ok_or("a chunk size that overflows")?;
                            self.digits = self.digits.saturating_add(1);
                        }
                        b';' | b' ' | b'\t' => self.state = Chunk::Ext,
                        b'\r' => self.state = Chunk::SizeLf,
                        b'\n' => self.end_size_line()?,
                        _ => return Err(format!("a bad chunk size byte {b:#04x}")),
                    }
                }
                Chunk::Ext => match memchr::memchr(b'\n', input) {
                    Some(i) => {
                        input = &input[i + 1..];
                        self.end_size_line()?;
                    }
                    None => input = &[],
                },
                Chunk::SizeLf => {
                    if b != b'\n' {
                        return Err("a chunk size line without LF".into());
                    }
                    input = &input[1..];
                    self.end_size_line()?;
                }
                Chunk::Data => {
                    let n = input
                        .len()
                        .min(usize::try_from(self.n).unwrap_or(usize::MAX));
                    out(&input[..n]);
                    input = &input[n..];
                    self.n -= n as u64;
                    if self.n == 0 {
                        self.state = Chunk::DataCr;
                    }
                }
                Chunk::DataCr => {
                    input = &input[1..];
                    self.state = match b {
                        b'\r' => Chunk::DataLf,
                        b'\n' => Chunk::Size,
                        _ => return Err("a chunk longer than its size".into()),
                    };
                }
                Chunk::DataLf => {
                    if b != b'\n' {
                        return Err("a chunk without CRLF after its data".into());
                    }
                    input = &input[1..];
                    self.state = Chunk::Size;
                }
                Chunk::Trailer => {
                    input = &input[1..];
                    self.state = match b {
                        b'\r' => Chunk::TrailerLf,
                        b'\n' => Chunk::Done,
                        _ => Chunk::TrailerSkip,
                    };
                }
                Chunk::TrailerSkip => match memchr::memchr(b'\n', input) {
                    Some(i) => {
                        input = &input[i + 1..];
                        self.state = Chunk::Trailer;
                    }
                    None => input = &[],
                },
                Chunk::TrailerLf => {
                    if b != b'\n' {
                        return Err("a bad end of the chunked body".into());
                    }
                    input = &input[1..];
                    self.state = Chunk::Done;
                }
                Chunk::Done => return Ok(()),
            }
        }
        Ok(())
    }

    fn end_size_line(&mut self) -> Result<(), String> {
        if self.digits == 0 {
            return Err("a chunk size line without a size".into());
        }
        self.digits = 0;
        if self.n == 0 {
            self.state = Chunk::Trailer;
        } else {
            self.state = Chunk::Data;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Server-Sent Events

/// What a follower is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseItem {
    /// An ordinary event (no `event:` field, or `message`) and its `id:`, the seq.
    Event(u64),
    /// `event: deleted`: the stream was deleted; the server ends the body.
    Deleted,
    /// `event: retained` and its data (`{"from":N,"first_seq":M}`): events were removed by
    /// retention before this follower got them.
    Retained(String),
    /// An event the follower cannot place: its `id:` is not a seq, or it has none.
    Invalid(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// Reading the field name.
    Name,
    /// Just after the colon (one space is stripped).
    ValueFirst(Field),
    Value(Field),
    /// The rest of the line is not needed.
    Skip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Id,
    Event,
    /// The data of a named event, kept for its message.
    NamedData,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Message,
    Deleted,
    Retained,
    Other,
}

/// A small inline buffer: field names and `id:`/`event:` values, never more than 24 bytes
/// that matter (a longer value is no seq and no event name the follower knows).
#[derive(Clone, Copy, Debug, Default)]
struct Small {
    buf: [u8; 24],
    len: u8,
    overflow: bool,
}

impl Small {
    fn push(&mut self, b: u8) {
        if usize::from(self.len) < self.buf.len() {
            self.buf[usize::from(self.len)] = b;
            self.len += 1;
        } else {
            self.overflow = true;
        }
    }

    fn get(&self) -> Option<&[u8]> {
        (!self.overflow).then(|| &self.buf[..usize::from(self.len)])
    }

    fn clear(&mut self) {
        self.len = 0;
        self.overflow = false;
    }
}

/// An incremental SSE parser (the event-stream format of the HTML standard, restricted to
/// what a follower needs): lines end with LF (a CR before it is dropped; a lone CR as a line
/// end is not supported, the server never sends one); `:` starts a comment; an empty line
/// dispatches the block. Only the `id:` and `event:` values are kept, and the data of named
/// events; the data of an ordinary event is skipped unread.
#[derive(Clone, Debug)]
pub struct SseParser {
    line: Line,
    name: Small,
    value: Small,
    id: Option<u64>,
    bad_id: bool,
    data_seen: bool,
    kind: Kind,
    data: Vec<u8>,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new()
    }
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser {
            line: Line::Start,
            name: Small::default(),
            value: Small::default(),
            id: None,
            bad_id: false,
            data_seen: false,
            kind: Kind::Message,
            data: Vec::new(),
        }
    }

    /// Parse `input` (any piece of the body), handing each complete event to `on`.
    pub fn feed(&mut self, mut input: &[u8], on: &mut impl FnMut(SseItem)) {
        while let Some(&b) = input.first() {
            match self.line {
                Line::Start => match b {
                    b'\n' => {
                        input = &input[1..];
                        self.dispatch(on);
                    }
                    b'\r' => input = &input[1..],
                    b':' => self.line = Line::Skip,
                    _ => {
                        self.name.clear();
                        self.line = Line::Name;
                    }
                },
                Line::Name => {
                    input = &input[1..];
                    match b {
                        b':' => self.line = self.field_line(),
                        b'\n' => {
                            // A field without a colon has an empty value.
                            if let Line::ValueFirst(f) = self.field_line() {
                                self.value.clear();
                                self.end_field(f);
                            }
                            self.line = Line::Start;
                        }
                        b'\r' => {}
                        _ => self.name.push(b),
                    }
                }
                Line::ValueFirst(f) => {
                    if b == b' ' {
                        input = &input[1..];
                    }
                    self.value.clear();
                    self.line = Line::Value(f);
                }
                Line::Value(Field::NamedData) => {
                    let (piece, end) = match memchr::memchr(b'\n', input) {
                        Some(i) => (&input[..i], Some(i)),
                        None => (input, None),
                    };
                    let room = MAX_NAMED_DATA.saturating_sub(self.data.len());
                    self.data
                        .extend(piece.iter().copied().filter(|c| *c != b'\r').take(room));
                    match end {
                        Some(i) => {
                            input = &input[i + 1..];
                            self.line = Line::Start;
                        }
                        None => input = &[],
                    }
                }
                Line::Value(f) => {
                    input = &input[1..];
                    match b {
                        b'\n' => {
                            self.end_field(f);
                            self.line = Line::Start;
                        }
                        b'\r' => {}
                        _ => self.value.push(b),
                    }
                }
                Line::Skip => match memchr::memchr(b'\n', input) {
                    Some(i) => {
                        input = &input[i + 1..];
                        self.line = Line::Start;
                    }
                    None => input = &[],
                },
            }
        }
    }

    /// What to do with the value of the field just named.
    fn field_line(&mut self) -> Line {
        match self.name.get() {
            Some(b"id") => Line::ValueFirst(Field::Id),
            Some(b"event") => Line::ValueFirst(Field::Event),
            Some(b"data") => {
                self.data_seen = true;
                if matches!(self.kind, Kind::Deleted | Kind::Retained) {
                    if !self.data.is_empty() {
                        self.data.push(b'\n');
                    }
                    Line::ValueFirst(Field::NamedData)
                } else {
                    // An ordinary event's data: the id says all the follower needs.
                    Line::Skip
                }
            }
            _ => Line::Skip,
        }
    }

    fn end_field(&mut self, f: Field) {
        match f {
            Field::Id => {
                self.id = None;
                self.bad_id = true;
                if let Some(v) = self.value.get()
                    && !v.is_empty()
                    && v.iter().all(u8::is_ascii_digit)
                {
                    // At most 24 digits: may still overflow a u64.
                    let seq = v.iter().try_fold(0u64, |n, d| {
                        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                    });
                    if let Some(seq) = seq {
                        self.id = Some(seq);
                        self.bad_id = false;
                    }
                }
            }
            Field::Event => {
                self.kind = match self.value.get() {
                    Some(b"message") | Some(b"") => Kind::Message,
                    Some(b"deleted") => Kind::Deleted,
                    Some(b"retained") => Kind::Retained,
                    _ => Kind::Other,
                };
            }
            Field::NamedData => {}
        }
    }

    fn dispatch(&mut self, on: &mut impl FnMut(SseItem)) {
        match self.kind {
            Kind::Message => {
                if let Some(seq) = self.id {
                    on(SseItem::Event(seq));
                } else if self.bad_id {
                    on(SseItem::Invalid("an SSE id that is not a seq"));
                } else if self.data_seen {
                    on(SseItem::Invalid("an SSE event without an id"));
                }
            }
            Kind::Deleted => on(SseItem::Deleted),
            Kind::Retained => on(SseItem::Retained(
                String::from_utf8_lossy(&self.data).into_owned(),
            )),
            Kind::Other => {}
        }
        // Each event of the stream carries its own id: one without is an error, not the
        // previous one again (the HTML standard would keep the last id).
        self.id = None;
        self.bad_id = false;
        self.data_seen = false;
        self.kind = Kind::Message;
        self.data = Vec::new();
    }
}

// ---------------------------------------------------------------------------------------------
// The ordering check

/// One follower's view of the seqs it received: in order from `from`, gaps (seqs skipped),
/// late arrivals of skipped seqs (out of order) and duplicates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqCheck {
    from: u64,
    /// The next seq in order.
    next: u64,
    received: u64,
    duplicates: u64,
    out_of_order: u64,
    /// Inclusive ranges skipped and not received since, oldest first (empty while all is
    /// well: no allocation for a healthy follower).
    holes: Vec<(u64, u64)>,
    /// Skipped seqs past [`MAX_HOLES`] ranges, counted but not remembered (a late one of them
    /// counts as a duplicate).
    untracked: u64,
}

/// How a follower fared, from the check at the end of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Seqs of `from..=last` never received.
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
}

impl Verdict {
    pub fn complete(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.out_of_order == 0
    }
}

impl SeqCheck {
    pub fn new(from: u64) -> SeqCheck {
        SeqCheck {
            from,
            next: from,
            received: 0,
            duplicates: 0,
            out_of_order: 0,
            holes: Vec::new(),
            untracked: 0,
        }
    }

    /// The seq expected next.
    pub fn next(&self) -> u64 {
        self.next
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// A follower received `seq`.
    pub fn on(&mut self, seq: u64) {
        self.received += 1;
        if seq == self.next {
            self.next += 1;
        } else if seq > self.next {
            if self.holes.len() < MAX_HOLES {
                self.holes.push((self.next, seq - 1));
            } else {
                self.untracked += seq - self.next;
            }
            self.next = seq + 1;
        } else if let Some(i) = self
            .holes
            .iter()
            .position(|(a, b)| (*a..=*b).contains(&seq))
        {
            // A skipped seq arriving late: delivered, but not in order.
            self.out_of_order += 1;
            let (a, b) = self.holes[i];
            match (seq == a, seq == b) {
                (true, true) => {
                    self.holes.remove(i);
                }
                (true, false) => self.holes[i].0 = seq + 1,
                (false, true) => self.holes[i].1 = seq - 1,
                (false, false) => {
                    self.holes[i].1 = seq - 1;
                    self.holes.insert(i + 1, (seq + 1, b));
                }
            }
        } else {
            // Received before, or before the start: sent twice.
            self.duplicates += 1;
        }
    }

    /// The check through `last` (the last acked seq of the run): every seq of `from..=last`
    /// received once, in order.
    pub fn verdict(&self, last: u64) -> Verdict {
        let in_holes: u64 = self
            .holes
            .iter()
            .filter(|(a, _)| *a <= last)
            .map(|(a, b)| (*b).min(last) - a + 1)
            .sum();
        let tail = (last + 1).saturating_sub(self.next);
        Verdict {
            missing: in_holes + self.untracked + tail,
            duplicates: self.duplicates,
            out_of_order: self.out_of_order,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The follower's connection

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    async fn connect(ep: &Endpoint) -> std::io::Result<Sock> {
        match ep {
            Endpoint::Http(addr) => {
                let s = TcpStream::connect(addr.as_str()).await?;
                s.set_nodelay(true)?;
                Ok(Sock::Tcp(s))
            }
            Endpoint::Unix(path) => Ok(Sock::Unix(UnixStream::connect(path).await?)),
            other => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{other} is not an HTTP endpoint"),
            )),
        }
    }

    async fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.write_all(b).await,
            Sock::Unix(s) => s.write_all(b).await,
        }
    }

    async fn read_buf(&mut self, b: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read_buf(b).await,
            Sock::Unix(s) => s.read_buf(b).await,
        }
    }

    async fn readable(&self) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.readable().await,
            Sock::Unix(s) => s.readable().await,
        }
    }

    fn try_read(&self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.try_read(b),
            Sock::Unix(s) => s.try_read(b),
        }
    }
}

/// The parts of a response head a follower needs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    body: BodyKind,
    content_type: String,
}

fn parse_head(head: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a response head that is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP/1.x answer: {status_line:?}"))?;
    let (mut chunked, mut length, mut content_type) = (false, None, String::new());
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-length" => length = value.parse::<u64>().ok(),
            "content-type" => content_type = value.to_ascii_lowercase(),
            _ => {}
        }
    }
    let body = match (chunked, length) {
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    };
    Ok(Head {
        status,
        body,
        content_type,
    })
}

/// The follow request: from `from`, or after `last_event_id` when resuming.
fn follow_request(
    host: &str,
    stream: &str,
    token: Option<&str>,
    from: u64,
    last_event_id: Option<u64>,
) -> Vec<u8> {
    let path = format!("/v1/streams/{}/events?follow=true", segment(stream));
    let mut req = match last_event_id {
        Some(_) => format!("GET {path} HTTP/1.1\r\n"),
        None => format!("GET {path}&from={from} HTTP/1.1\r\n"),
    };
    req.push_str(&format!(
        "Host: {host}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
    ));
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

/// Send the follow request and read the response head. 200 `text/event-stream`: the
/// connection, its body decoder and the body bytes read with the head. Otherwise the status
/// and SPEC error code.
async fn open(ep: &Endpoint, req: &[u8]) -> Result<(Sock, BodyDecoder, Vec<u8>), String> {
    let mut sock = Sock::connect(ep)
        .await
        .map_err(|e| format!("cannot connect to {ep}: {e}"))?;
    sock.write_all(req)
        .await
        .map_err(|e| format!("sending the follow request: {e}"))?;
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err("a response head over 64 KiB".into());
        }
        buf.reserve(1024);
        let n = sock
            .read_buf(&mut buf)
            .await
            .map_err(|e| format!("reading the follow answer: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection before answering".into());
        }
    };
    let head = parse_head(&buf[..head_end])?;
    let rest = buf.split_off(head_end);
    let mut dec = BodyDecoder::new(head.body);
    if head.status != 200 {
        // The error body (bounded), for its code.
        let mut body = Vec::new();
        let mut raw = rest;
        loop {
            dec.feed(&raw, &mut |d| {
                let room = MAX_ERROR_BODY.saturating_sub(body.len());
                body.extend_from_slice(&d[..d.len().min(room)]);
            })?;
            if dec.done() || body.len() >= MAX_ERROR_BODY {
                break;
            }
            raw.clear();
            raw.reserve(4096);
            if sock.read_buf(&mut raw).await.unwrap_or(0) == 0 {
                break;
            }
        }
        let code = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        return Err(match code {
            Some(code) => format!("HTTP {} {code}", head.status),
            None => format!("HTTP {}", head.status),
        });
    }
    if !head.content_type.starts_with("text/event-stream") {
        return Err(format!(
            "the follow answer is {:?}, not text/event-stream",
            head.content_type
        ));
    }
    Ok((sock, dec, rest))
}

// ---------------------------------------------------------------------------------------------
// Followers

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
struct FollowCtx {
    endpoints: Vec<Endpoint>,
    host: Vec<String>,
    token: Option<String>,
    acks: Arc<AckTable>,
    shards: Vec<Arc<Mutex<LaneRecorder>>>,
    timeout: Duration,
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

/// How a follower's stream ended.
enum End {
    /// The run is over (Stop), or the follower received everything (Drain).
    Done,
    Deleted,
    Broken(String),
}

/// A latency, and whether the delivery counts in the window (`None`: decide by receipt).
type Latency = (Duration, Option<bool>);

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

/// Parse body bytes received at `now`: decode, parse SSE, check and time each event.
#[allow(clippy::too_many_arguments)] // the follower's parts, borrowed apart
fn parse_received(
    bytes: &[u8],
    now: Instant,
    dec: &mut BodyDecoder,
    sse: &mut SseParser,
    out: &mut FollowerOutcome,
    acks: &AckTable,
    rec: &Mutex<LaneRecorder>,
    latencies: &mut Vec<Latency>,
) -> Result<(), String> {
    let mut batch = LatencyBatch {
        rec,
        items: latencies,
        now,
    };
    let fed = dec.feed(bytes, &mut |data| {
        sse.feed(data, &mut |item| out.on_item(item, acks, &mut batch));
    });
    batch.flush();
    fed
}

impl FollowerOutcome {
    fn new(from: u64) -> FollowerOutcome {
        FollowerOutcome {
            check: SeqCheck::new(from),
            connected: false,
            before_ack: 0,
            reconnects: 0,
            retained: 0,
            deleted: false,
        }
    }

    fn on_item(&mut self, item: SseItem, acks: &AckTable, batch: &mut LatencyBatch<'_>) {
        if self.deleted {
            return;
        }
        match item {
            SseItem::Event(seq) => {
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
            SseItem::Deleted => self.deleted = true,
            SseItem::Retained(data) => {
                self.retained += 1;
                error(
                    batch.rec,
                    format!("follower: events removed by retention before delivery ({data})"),
                );
            }
            SseItem::Invalid(what) => error(batch.rec, format!("follower: {what}")),
        }
    }
}

fn error(rec: &Mutex<LaneRecorder>, message: String) {
    rec.lock().record(
        Op::Deliver,
        &Outcome::Error(message),
        Duration::ZERO,
        Instant::now(),
    );
}

/// Parse what the socket has now (a few reads at most, so that one busy follower does not
/// hold its worker thread), into the worker thread's [`Scratch`]. `Ok(false)`: the body
/// ended. Synchronous: nothing of it is held across an await.
fn read_now(
    sock: &Sock,
    dec: &mut BodyDecoder,
    sse: &mut SseParser,
    out: &mut FollowerOutcome,
    acks: &AckTable,
    rec: &Mutex<LaneRecorder>,
) -> Result<bool, String> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => read_into(&mut scratch, sock, dec, sse, out, acks, rec),
        // Not reentered in practice; a fresh buffer keeps it correct if it ever is.
        Err(_) => read_into(&mut Scratch::new(), sock, dec, sse, out, acks, rec),
    })
}

fn read_into(
    scratch: &mut Scratch,
    sock: &Sock,
    dec: &mut BodyDecoder,
    sse: &mut SseParser,
    out: &mut FollowerOutcome,
    acks: &AckTable,
    rec: &Mutex<LaneRecorder>,
) -> Result<bool, String> {
    let Scratch { buf, latencies } = scratch;
    for _ in 0..4 {
        match sock.try_read(buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                // One clock read per read: every event in it arrived together.
                let now = Instant::now();
                parse_received(&buf[..n], now, dec, sse, out, acks, rec, latencies)?;
                if dec.done() || out.deleted {
                    return Ok(false);
                }
                if n < buf.len() {
                    return Ok(true);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(true),
            Err(e) => return Err(format!("follower: the stream broke: {e}")),
        }
    }
    Ok(true)
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
    dec: &mut BodyDecoder,
    sse: &mut SseParser,
    out: &mut FollowerOutcome,
    ctx: &FollowCtx,
    rec: &Mutex<LaneRecorder>,
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
        match read_now(sock, dec, sse, out, &ctx.acks, rec) {
            Ok(true) => {}
            Ok(false) if out.deleted => return End::Deleted,
            Ok(false) => return End::Broken("follower: the server ended the stream".into()),
            Err(e) => return End::Broken(e),
        }
    }
}

/// One follower, from its first connection to the end of the run. Its first connection's
/// result goes to `ready`; a failure there ends it (the run then stops before it starts).
/// Later, a broken stream is an error and is opened again after the last seq received, with
/// `Last-Event-ID`.
async fn follower(
    ctx: Arc<FollowCtx>,
    index: usize,
    mut phase: watch::Receiver<Phase>,
    ready: mpsc::Sender<(usize, Result<(), String>)>,
    gate: Arc<Semaphore>,
) -> FollowerOutcome {
    let ep = &ctx.endpoints[index % ctx.endpoints.len()];
    let host = &ctx.host[index % ctx.host.len()];
    let rec = ctx.shards[index % ctx.shards.len()].clone();
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
                Err(format!(
                    "no answer to the follow request within {} s",
                    ctx.timeout.as_secs_f64()
                ))
            }),
            () = until_stop(&mut phase) => return out,
        };
        drop(permit);
        let (sock, mut dec, rest) = match opened {
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
        let mut sse = SseParser::new();
        // The body bytes that came with the head.
        let fed = parse_received(
            &rest,
            Instant::now(),
            &mut dec,
            &mut sse,
            &mut out,
            &ctx.acks,
            &rec,
            &mut Vec::new(),
        );
        drop(rest);
        let end = match fed {
            Err(e) => End::Broken(format!("follower: {e}")),
            Ok(()) if out.deleted => End::Deleted,
            Ok(()) => {
                follow_stream(&sock, &mut dec, &mut sse, &mut out, &ctx, &rec, &mut phase).await
            }
        };
        match end {
            End::Done => return out,
            End::Deleted => {
                error(&rec, "follower: the stream was deleted".into());
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

// ---------------------------------------------------------------------------------------------
// The run

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
        raise_nofile(u64::from(w.followers) + lanes + 64).map_err(RunError::Prepare)?;
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
                    let hint = if e.starts_with("HTTP 503") {
                        " (server.max_followers reached? it bounds the followers of the server)"
                    } else if e.starts_with("HTTP 406") {
                        " (the server does not answer text/event-stream: no live follow, SPEC §5)"
                    } else if e.starts_with("HTTP 404") {
                        " (was the stream deleted?)"
                    } else {
                        ""
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

/// The stream's last seq (SPEC §5 `GET /v1/streams/{stream}`); an unknown stream gets one
/// event first, so that it exists and has a seq to follow from.
async fn last_seq_or_create(w: &Workload, ep: &Endpoint, stream: &str) -> Result<u64, RunError> {
    let prep = |e: String| RunError::Prepare(format!("fanout: {stream} at {ep}: {e}"));
    let timeout = Duration::from_secs_f64(w.timeout_s);
    let mut conn = HttpConn::connect(ep, w.token.as_deref())
        .await
        .map_err(RunError::Connect)?;
    let path = format!("/v1/streams/{}", segment(stream));
    let reply = tokio::time::timeout(timeout, conn.call("GET", &path, &[], Bytes::new(), true))
        .await
        .map_err(|_| prep("no answer to GET".into()))?
        .map_err(prep)?;
    match reply.status.as_u16() {
        200 => {
            return reply
                .body
                .as_ref()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
                .and_then(|v| v["last_seq"].as_u64())
                .ok_or_else(|| prep("the stream's metadata has no last_seq (SPEC §5)".into()));
        }
        404 => {}
        _ => return Err(prep(format!("GET {path}: {}", reply.failure()))),
    }
    // With ids, the event's id must be new: a rerun's first event is not a retry of this one.
    let tag = format!(
        "fanout-start-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let mut g = IngestGen::new(w, u32::MAX, &tag)?;
    let body = Bytes::from(g.ndjson_for(stream, 1));
    let mut headers = vec![("content-type", "application/x-ndjson")];
    if let Some(d) = w.durability {
        headers.push(("x-vx-durability", d.as_str()));
    }
    loop {
        let reply = tokio::time::timeout(
            timeout,
            conn.call("POST", "/v1/events", &headers, body.clone(), true),
        )
        .await
        .map_err(|_| prep("no answer to the first event's POST".into()))?
        .map_err(prep)?;
        match reply.status.as_u16() {
            200 => {
                return reply
                    .body
                    .as_ref()
                    .and_then(|b| parse_ack(b, stream))
                    .map(|(_, last)| last)
                    .ok_or_else(|| prep("the ingest answer has no last_seq (SPEC §3)".into()));
            }
            429 => tokio::time::sleep(retry_pause(reply.retry_after())).await,
            _ => {
                return Err(prep(format!(
                    "writing its first event: {}",
                    reply.failure()
                )));
            }
        }
    }
}

/// Followers and connections need a descriptor each: raise the soft limit to the hard one
/// when it is short (as the server does), and say what to do when even that is too low.
fn raise_nofile(needed: u64) -> Result<(), String> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    let soft = lim.current.unwrap_or(u64::MAX);
    if soft >= needed {
        return Ok(());
    }
    let hard = lim.maximum.unwrap_or(u64::MAX);
    if hard < needed {
        return Err(format!(
            "fanout needs about {needed} open files (followers + connections + 64) but the hard limit is {hard}: raise it (ulimit -Hn, LimitNOFILE=) or spread the followers over several load hosts"
        ));
    }
    lim.current = lim.maximum;
    setrlimit(Resource::Nofile, lim).map_err(|e| {
        format!("fanout needs about {needed} open files; raising the soft limit {soft} to {hard} failed: {e} (ulimit -n {needed})")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of `input` into two pieces, and byte by byte.
    fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
        let mut all: Vec<Vec<&[u8]>> = (0..=input.len())
            .map(|i| vec![&input[..i], &input[i..]])
            .collect();
        all.push(input.chunks(1).collect());
        all.push(input.chunks(7).collect());
        all
    }

    fn decode(kind: BodyKind, pieces: &[&[u8]]) -> Result<(Vec<u8>, bool), String> {
        let mut d = BodyDecoder::new(kind);
        let mut out = Vec::new();
        for p in pieces {
            d.feed(p, &mut |s| out.extend_from_slice(s))?;
        }
        Ok((out, d.done()))
    }

    #[test]
    fn chunked_bodies_decode_from_any_split() {
        let body =
            b"5\r\nhello\r\n1;ext=1\r\n \r\nB\r\nworld, etc.\r\n0\r\nX-Trailer: 1\r\n\r\nextra";
        for pieces in splits(body) {
            assert_eq!(
                decode(BodyKind::Chunked, &pieces),
                Ok((b"hello world, etc.".to_vec(), true))
            );
        }
        // An unfinished body is not done; a body cut in a chunk is not either.
        assert_eq!(
            decode(BodyKind::Chunked, &[b"3\r\nabc\r\n"]),
            Ok((b"abc".to_vec(), false))
        );
        assert_eq!(
            decode(BodyKind::Chunked, &[b"0\r\n\r\n"]),
            Ok((Vec::new(), true))
        );
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"3\r\nabcd\r\n",
            b"ffffffffffffffffff\r\n",
        ] {
            assert!(decode(BodyKind::Chunked, &[bad]).is_err(), "{bad:?}");
        }
        assert_eq!(
            decode(BodyKind::Length(4), &[b"ab", b"cdef"]),
            Ok((b"abcd".to_vec(), true))
        );
        assert_eq!(decode(BodyKind::Length(0), &[b"x"]), Ok((Vec::new(), true)));
        assert_eq!(
            decode(BodyKind::UntilClose, &[b"ab", b"cd"]),
            Ok((b"abcd".to_vec(), false))
        );
    }

    fn parse(pieces: &[&[u8]]) -> Vec<SseItem> {
        let mut p = SseParser::new();
        let mut items = Vec::new();
        for piece in pieces {
            p.feed(piece, &mut |i| items.push(i));
        }
        items
    }

    /// The body a follower reads: a retry line, heartbeats, events, named events.
    const SSE: &[u8] = b"retry: 3000\n\n: heartbeat\n\nid: 41\ndata: {\"stream\":\"s\",\"seq\":41,\"data\":\"a: b\\nid: 7\"}\n\n\
id:42\r\ndata: {\"seq\":42}\r\n\r\n\
: heartbeat\n\n\
event: message\nid: 43\ndata: x\n\n\
event: retained\ndata: {\"from\":44,\"first_seq\":50}\n\n\
id: 50\ndata: {}\n\n\
event: other\nid: 51\ndata: y\n\n\
unknown-field-longer-than-the-small-buffer-of-the-parser: 1\nid: 52\ndata\n\n\
id: x9\ndata: z\n\n\
data: no id\n\n\
id: 99999999999999999999999\ndata: overflows\n\n\
event: deleted\ndata: {\"stream\":\"s\"}\n\n";

    #[test]
    fn sse_events_are_their_ids_from_any_split_and_the_rest_is_skipped() {
        let expected = vec![
            SseItem::Event(41),
            SseItem::Event(42),
            SseItem::Event(43),
            SseItem::Retained("{\"from\":44,\"first_seq\":50}".into()),
            SseItem::Event(50),
            SseItem::Event(52),
            SseItem::Invalid("an SSE id that is not a seq"),
            SseItem::Invalid("an SSE event without an id"),
            SseItem::Invalid("an SSE id that is not a seq"),
            SseItem::Deleted,
        ];
        for pieces in splits(SSE) {
            assert_eq!(parse(&pieces), expected);
        }
    }

    #[test]
    fn sse_over_a_chunked_body_split_anywhere() {
        // The server's chunk boundaries fall anywhere in the SSE text.
        let mut events = Vec::new();
        for seq in 1..=200u64 {
            events.extend_from_slice(
                format!(
                    "id: {seq}\ndata: {{\"seq\":{seq},\"pad\":\"{}\"}}\n\n",
                    "x".repeat(100)
                )
                .as_bytes(),
            );
        }
        let mut body = Vec::new();
        for chunk in events.chunks(333) {
            body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend_from_slice(chunk);
            body.extend_from_slice(b"\r\n");
        }
        for size in [1, 2, 5, 64, 1000, READ_BUF] {
            let mut dec = BodyDecoder::new(BodyKind::Chunked);
            let mut sse = SseParser::new();
            let mut seqs = Vec::new();
            for piece in body.chunks(size) {
                let r = dec.feed(piece, &mut |d| {
                    sse.feed(d, &mut |i| {
                        if let SseItem::Event(s) = i {
                            seqs.push(s);
                        }
                    })
                });
                assert_eq!(r, Ok(()));
            }
            assert_eq!(seqs, (1..=200).collect::<Vec<_>>(), "reads of {size}");
        }
    }

    fn check(seqs: &[u64], from: u64, last: u64) -> Verdict {
        let mut c = SeqCheck::new(from);
        for s in seqs {
            c.on(*s);
        }
        c.verdict(last)
    }

    #[test]
    fn the_ordering_check_tells_gaps_duplicates_and_late_arrivals_apart() {
        let v = |missing, duplicates, out_of_order| Verdict {
            missing,
            duplicates,
            out_of_order,
        };
        assert_eq!(check(&[5, 6, 7, 8], 5, 8), v(0, 0, 0));
        assert!(check(&[5, 6, 7, 8], 5, 8).complete());
        // Events past the last acked seq (a request whose answer was lost) are fine.
        assert_eq!(check(&[5, 6, 7, 8, 9], 5, 8), v(0, 0, 0));
        // Nothing acked: nothing to receive.
        assert_eq!(check(&[], 5, 4), v(0, 0, 0));
        // The tail not received.
        assert_eq!(check(&[5, 6], 5, 8), v(2, 0, 0));
        assert_eq!(check(&[], 5, 8), v(4, 0, 0));
        // A hole, and a start that is not the start.
        assert_eq!(check(&[5, 8], 5, 8), v(2, 0, 0));
        assert_eq!(check(&[7, 8], 5, 8), v(2, 0, 0));
        // Duplicates: again, and before the start.
        assert_eq!(check(&[5, 6, 6, 7, 5, 8], 5, 8), v(0, 2, 0));
        assert_eq!(check(&[4, 5, 6, 7, 8], 5, 8), v(0, 1, 0));
        // Late arrivals fill their holes but are out of order; the middle of a hole too.
        assert_eq!(check(&[5, 7, 6, 8], 5, 8), v(0, 0, 1));
        assert_eq!(check(&[5, 10, 7, 6, 9], 5, 10), v(1, 0, 3));
        assert_eq!(check(&[5, 10, 7, 7], 5, 10), v(3, 1, 1));
        // A hole past the last acked seq does not count.
        assert_eq!(check(&[5, 6, 9], 5, 6), v(0, 0, 0));
        assert_eq!(check(&[5, 6, 9], 5, 7), v(1, 0, 0));
        // Holes beyond what is remembered are still counted as missing.
        let seqs: Vec<u64> = (0..200).map(|i| 1 + 2 * i).collect();
        assert_eq!(check(&seqs, 1, 399), v(199, 0, 0));
    }

    #[test]
    fn the_ack_table_knows_each_seq_its_window_and_what_was_never_acked() {
        let t = AckTable::new("s".into(), 10, 100);
        assert_eq!(t.last_acked(), None);
        let at = Instant::now();
        t.ack(10, 12, at, true);
        t.ack(14, 14, at + Duration::from_millis(3), false);
        t.ack(500, 501, at, true); // past the table: counted, not stored
        assert_eq!(t.last_acked(), Some(501));
        assert_eq!(t.acked(), 6);
        match t.state(11) {
            AckState::Acked { at: a, measured } => {
                assert!(a.max(at) - a.min(at) < Duration::from_micros(1));
                assert!(measured);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            t.state(14),
            AckState::Acked {
                measured: false,
                ..
            }
        ));
        assert_eq!(t.state(13), AckState::Pending);
        assert_eq!(t.state(9), AckState::Unknown);
        assert_eq!(t.state(110), AckState::Unknown);
        assert_eq!(t.unacked_through(14), 1);
        assert_eq!(
            parse_ack(
                br#"{"accepted":3,"duplicates":0,"last_seq":{"s":12},"durability":"fsync"}"#,
                "s"
            ),
            Some((3, 12))
        );
        assert_eq!(parse_ack(br#"{"accepted":3,"last_seq":{}}"#, "s"), None);
        assert_eq!(
            parse_ack(br#"{"accepted":3,"last_seq":{"s":2}}"#, "s"),
            None
        );
        assert_eq!(parse_ack(b"not json", "s"), None);
    }

    #[test]
    fn response_heads_and_requests() {
        let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: chunked\r\nX-Vx-First-Seq: 1\r\n\r\n");
        assert_eq!(
            h,
            Ok(Head {
                status: 200,
                body: BodyKind::Chunked,
                content_type: "text/event-stream".into()
            })
        );
        let h = parse_head(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 12\r\n\r\n");
        assert_eq!(
            h.map(|h| (h.status, h.body)),
            Ok((503, BodyKind::Length(12)))
        );
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
        let req = String::from_utf8(follow_request("h:1", "a/b c", Some("t"), 7, None))
            .unwrap_or_default();
        assert!(req.starts_with(
            "GET /v1/streams/a%2Fb%20c/events?follow=true&from=7 HTTP/1.1\r\nHost: h:1\r\n"
        ));
        assert!(req.contains("Accept: text/event-stream\r\n"));
        assert!(req.contains("Authorization: Bearer t\r\n") && req.ends_with("\r\n\r\n"));
        let req =
            String::from_utf8(follow_request("h:1", "s", None, 7, Some(9))).unwrap_or_default();
        assert!(req.starts_with("GET /v1/streams/s/events?follow=true HTTP/1.1\r\n"));
        assert!(req.contains("Last-Event-ID: 9\r\n") && !req.contains("Authorization"));
    }

    /// A scripted server: answers each connection's request with the next of `answers`
    /// (written in the given pieces, a pause between them; then closed if the answer says so,
    /// else held open), and keeps the requests it got.
    async fn script(
        answers: Vec<(Vec<Vec<u8>>, bool)>,
    ) -> (Endpoint, tokio::task::JoinHandle<Vec<String>>) {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let task = tokio::spawn(async move {
            let mut requests = Vec::new();
            let mut held = Vec::new();
            for (pieces, close) in answers {
                let Ok((mut s, _)) = listener.accept().await else {
                    break;
                };
                let mut req = Vec::new();
                while memchr::memmem::find(&req, b"\r\n\r\n").is_none() {
                    let mut b = [0u8; 1024];
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                requests.push(String::from_utf8_lossy(&req).into_owned());
                for p in pieces {
                    let _ = s.write_all(&p).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if !close {
                    held.push(s);
                }
            }
            requests
        });
        (Endpoint::Http(addr), task)
    }

    fn chunk(text: &str) -> Vec<u8> {
        format!("{:x}\r\n{text}\r\n", text.len()).into_bytes()
    }

    const OK_HEAD: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

    fn ctx(ep: Endpoint, acks: Arc<AckTable>) -> Arc<FollowCtx> {
        let now = Instant::now();
        Arc::new(FollowCtx {
            host: vec!["h".into()],
            endpoints: vec![ep],
            token: None,
            acks,
            shards: vec![Arc::new(Mutex::new(LaneRecorder::new(
                now,
                now + Duration::from_secs(3600),
            )))],
            timeout: Duration::from_secs(5),
        })
    }

    #[tokio::test]
    async fn a_follower_checks_its_stream_resumes_after_a_break_and_ends_on_deleted() {
        // First connection: events 5 and 6 (the head and the first event in one write, the
        // next split mid-line), then the connection drops. Second: resumed after 6, events 7
        // and 8, then the stream is deleted.
        let first = vec![
            format!(
                "{OK_HEAD}{}",
                String::from_utf8_lossy(&chunk("retry: 1000\n\nid: 5\ndata: {}\n\n"))
            )
            .into_bytes(),
            chunk("id: 6\nda"),
            chunk("ta: {\"seq\":6}\n\n: heartbeat\n\n"),
        ];
        let second = vec![
            OK_HEAD.as_bytes().to_vec(),
            chunk("id: 7\ndata: {}\n\nid: 8\ndata: {}\n\n"),
            chunk("event: deleted\ndata: {}\n\n"),
            b"0\r\n\r\n".to_vec(),
        ];
        let (ep, server) = script(vec![(first, true), (second, false)]).await;
        let acks = Arc::new(AckTable::new("s".into(), 5, 10));
        // 5 and 6 acked before they arrive; 7 and 8 never (received "before ack").
        acks.ack(5, 6, Instant::now(), true);
        let c = ctx(ep, acks.clone());
        let (_phase_tx, phase) = watch::channel(Phase::Run);
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(follower(
            c.clone(),
            0,
            phase,
            tx,
            Arc::new(Semaphore::new(1)),
        ));
        assert_eq!(
            rx.recv().await.map(|(i, r)| (i, r.is_ok())),
            Some((0, true))
        );
        let out = match tokio::time::timeout(Duration::from_secs(10), task).await {
            Ok(Ok(o)) => o,
            other => panic!("{other:?}"),
        };
        assert!(out.connected && out.deleted);
        assert_eq!(out.reconnects, 1);
        assert_eq!(out.check.verdict(8), Verdict::default());
        assert_eq!(out.before_ack, 2);
        let requests = server.await.unwrap_or_default();
        assert!(
            requests[0].contains("follow=true&from=5 "),
            "{}",
            requests[0]
        );
        assert!(
            requests[1].contains("Last-Event-ID: 6\r\n"),
            "{}",
            requests[1]
        );
        // Four deliveries timed, two errors (the break, the deletion).
        let mut totals = Default::default();
        let mut errors = std::collections::BTreeMap::new();
        c.shards[0].lock().add_totals(
            &mut totals,
            &mut crate::recorder::LateAcc::new(),
            &mut errors,
        );
        let deliver = crate::recorder::named(totals).find(|(op, _)| *op == Op::Deliver);
        let Some((_, d)) = deliver else {
            panic!("no deliveries recorded")
        };
        assert_eq!((d.ok, d.errors), (4, 2), "{errors:?}");
        assert!(errors.keys().any(|e| e.contains("deleted")), "{errors:?}");
    }

    #[tokio::test]
    async fn a_follower_is_small() {
        // A follower's memory at rest is its task's future (plus the socket's kernel buffers):
        // thousands of them must stay cheap. The read buffer is per worker thread, not here.
        let c = ctx(
            Endpoint::Http("127.0.0.1:1".into()),
            Arc::new(AckTable::new("s".into(), 1, 1)),
        );
        let (_phase_tx, phase) = watch::channel(Phase::Run);
        let (tx, _rx) = mpsc::channel(1);
        let f = follower(c, 0, phase, tx, Arc::new(Semaphore::new(1)));
        let size = std::mem::size_of_val(&f);
        eprintln!("follower future: {size} bytes");
        assert!(size < 4096, "a follower's future is {size} bytes");
    }

    #[tokio::test]
    async fn a_refused_follower_says_why_and_a_drained_one_ends() {
        let body = r#"{"error":{"code":"not_ready","message":"too many followers"}}"#;
        let refused = vec![
            format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        ];
        let (ep, _server) = script(vec![(refused, false)]).await;
        let c = ctx(ep, Arc::new(AckTable::new("s".into(), 1, 10)));
        let (_phase_tx, phase) = watch::channel(Phase::Run);
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(follower(c, 3, phase, tx, Arc::new(Semaphore::new(1))));
        let got = rx.recv().await.map(|(i, r)| (i, r.err()));
        assert_eq!(got, Some((3, Some("HTTP 503 not_ready".to_string()))));
        assert!(matches!(task.await, Ok(o) if !o.connected));

        // A follower that has received through the drain target ends by itself.
        let (ep, _server) = script(vec![(
            vec![
                OK_HEAD.as_bytes().to_vec(),
                chunk("id: 1\ndata: {}\n\nid: 2\ndata: {}\n\n"),
            ],
            false,
        )])
        .await;
        let acks = Arc::new(AckTable::new("s".into(), 1, 10));
        let c = ctx(ep, acks.clone());
        let (phase_tx, phase) = watch::channel(Phase::Run);
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(follower(c, 0, phase, tx, Arc::new(Semaphore::new(1))));
        assert!(matches!(rx.recv().await, Some((0, Ok(())))));
        acks.ack(1, 2, Instant::now(), true);
        let _ = phase_tx.send(Phase::Drain(2));
        let out = match tokio::time::timeout(Duration::from_secs(5), task).await {
            Ok(Ok(o)) => o,
            other => panic!("{other:?}"),
        };
        assert_eq!(out.check.verdict(2), Verdict::default());
        let report = tally("s", 2, &acks, 2, &[out], 2.0, Some(0.01));
        // The second follower's outcome is missing: it counts as incomplete.
        assert_eq!((report.complete, report.with_gaps), (1, 1));
        assert_eq!(report.missing_events, 2);
        assert!(!report.passed);
    }
}
