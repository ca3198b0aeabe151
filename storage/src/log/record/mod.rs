//! The on-disk record format, version 2. All integers are little-endian.
//!
//! A record is one request (docs/API.md §3 atomicity): either all of it is in the log or none. An
//! event batch's runs are the request's [`vx_proto::Batch`] runs, copied as they are (the event
//! layout is documented in `vx_proto::packed`); only duplicates dropped by the writer make it
//! copy a run event by event.
//!
//! ```text
//! record header (32 bytes)
//!   0   u32  len        bytes of the whole record, header (and origin) included (32 ..= 1 GiB)
//!   4   u32  crc32c     CRC-32C (Castagnoli) of bytes [8, len)
//!   8   u8   version    2
//!   9   u8   type       1 = event batch, 2 = feature put, 3 = feature delete,
//!                       4 = stream tombstone, 5 = reset, 6 = entity events,
//!                       7 = feature increment
//!   10  u16  flags      bit 0: an origin follows the header; every other bit 0
//!   12  u64  lsn        log sequence number: 1, 2, 3 … with no gaps across segments
//!   20  i64  append_ms  server append time, ms since the Unix epoch
//!   28  u32  n          event batch and entity events: number of runs; feature put: number
//!                       of names; feature delete: number of targets (≥ 1); tombstone,
//!                       reset and feature increment: 1
//! origin (16 bytes, only with flag bit 0; cluster mode: where the record was consumed)
//!   32  u8   topic      0 = the streams topic, 1 = the entities topic
//!   33  [u8;3]          0
//!   36  u32  partition  (= the shard)
//!   40  u64  offset     the Kafka offset
//! body: at 32, or at 48 with an origin
//! event batch: n runs, one per stream of the request (n = 0: a request whose events were
//! all duplicates, written only to carry its origin)
//!   u16  stream_len, then the stream's bytes (UTF-8)
//!   u64  base_seq       seq of the run's first event; the i-th event has base_seq + i
//!   u32  count          events in the run (≥ 1)
//!   u32  events_len     bytes of the events that follow (lets readers skip a run)
//!   events              `count` events in the layout of vx_proto::packed
//! tombstone
//!   u16  stream_len, then the stream's bytes
//!   u64  last_seq       the stream's last seq when it was deleted: every seq ≤ it is gone,
//!                       and a later write continues at last_seq + 1
//! feature put (docs/API.md §6 `PUT /v1/features/{entity}`)
//!   u16  entity_len, then the entity's bytes (1..=256)
//!   n ×  u8 name_len (1..=128), the name's bytes, u8 tag, then the value by tag:
//!        0 null (delete that feature; no bytes), 1 i64 (8 bytes), 2 f64 (8 bytes, finite),
//!        3 bool (1 byte: 0 or 1), 4 string (u32 length, then the UTF-8 bytes)
//! feature delete (`DELETE /v1/features/{entity}[/{name}]`: one target; the Redis protocol's
//! `HDEL` of several names and `DEL` of several entities: one target each, all in one record,
//! so that the command is stored whole or not at all), n targets, applied in order:
//!   u16  entity_len     the first target: 1..=256, then the entity's bytes; a later one: 0
//!                       for the entity of the target before it (no bytes follow), else as
//!                       the first
//!   u8   name_len       0: the whole entity; else the feature's name follows
//! (with n = 1 this is the layout of the records written before several targets existed)
//! feature increment (the Redis protocol's `HINCRBY`, `HINCRBYFLOAT`: the sum is made when
//! the record applies, from the value then, in log order)
//!   u16  entity_len, then the entity's bytes (1..=256)
//!   u8   name_len (1..=128), then the feature's name
//!   u8   tag            1 = i64, 2 = f64 (finite)
//!   8 bytes             the increment
//! reset (cluster mode: the local copy of one shard is discarded)
//!   u8   target         0 = the shard's streams, 1 = the shard's feature tables
//!   u32  shard
//! entity events (cluster mode: events applied to the feature tables only)
//!   n runs laid out as an event batch's; a run's stream is the stream the events were
//!   stored in, its base_seq is 0 (the events' seqs are not known to this record; readers
//!   ignore it), and no seq, stream or dedup state follows from it
//! ```
//! Duplicates are not written: only newly stored events are in runs, so `seq` is gapless.

use crate::api::{Origin, OriginTopic};
use crate::features::{FeatureValue, Increment};
use vx_proto::le::Reader;
use vx_proto::packed::DecodeError;

pub const HEADER_LEN: usize = 32;
/// Bytes of a record's origin, right after the header when flag [`F_ORIGIN`] is set.
pub const ORIGIN_LEN: usize = 16;
/// Header flag: an origin follows the header.
pub const F_ORIGIN: u16 = 1;
pub const VERSION: u8 = 2;
/// Largest record recovery will believe in; anything longer is corruption. Config checks at
/// start-up keep every request's record below it (`ingest.max_body_bytes`).
pub const MAX_RECORD_LEN: usize = 1 << 30;

/// The record types of version 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    Events = 1,
    FeaturePut = 2,
    FeatureDelete = 3,
    Tombstone = 4,
    /// Cluster mode: one shard's streams or feature tables discarded.
    Reset = 5,
    /// Cluster mode: events for the feature tables only.
    EntityEvents = 6,
    /// An increment of one feature (the Redis protocol's `HINCRBY`, `HINCRBYFLOAT`).
    FeatureIncr = 7,
}

impl RecordType {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Events),
            2 => Some(Self::FeaturePut),
            3 => Some(Self::FeatureDelete),
            4 => Some(Self::Tombstone),
            5 => Some(Self::Reset),
            6 => Some(Self::EntityEvents),
            7 => Some(Self::FeatureIncr),
            _ => None,
        }
    }
}

/// Why bytes are not a valid record or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decode {
    /// More bytes are needed (at least this many in total from the start of the item).
    Incomplete(usize),
    /// The bytes are not a valid item.
    Bad(&'static str),
}

impl Decode {
    /// What is wrong, in words.
    pub fn reason(&self) -> &'static str {
        match self {
            Decode::Bad(w) => w,
            Decode::Incomplete(_) => "truncated",
        }
    }
}

/// Why a record whose checksum holds cannot be applied: recovery and `veltrix check` judge a
/// record's body the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRecord {
    #[error("{}", .0.reason())]
    Decode(Decode),
    #[error("run length does not match its events")]
    RunLength,
    #[error("run of stream {stream:?} starts at seq {base}, expected {expected}")]
    SeqGap {
        stream: String,
        base: u64,
        expected: u64,
    },
}

impl From<Decode> for BadRecord {
    fn from(e: Decode) -> Self {
        BadRecord::Decode(e)
    }
}

impl From<DecodeError> for Decode {
    fn from(e: DecodeError) -> Self {
        match e {
            DecodeError::Incomplete(n) => Decode::Incomplete(n),
            DecodeError::Bad(w) => Decode::Bad(w),
        }
    }
}

/// A record that would be longer than the format allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a record of {len} bytes is longer than the log's limit of {MAX_RECORD_LEN} bytes")]
pub struct TooLarge {
    pub len: usize,
}

/// Builds one record at the end of a reusable buffer (several records of a group are built
/// into one buffer and written with one `pwrite`).
pub struct RecordBuilder {
    start: usize,
    n: u32,
    run_start: usize,
}

impl RecordBuilder {
    /// Begin a record without an origin (single-node mode: flags 0).
    pub fn begin(buf: &mut Vec<u8>, ty: RecordType, lsn: u64, append_ms: i64) -> Self {
        Self::begin_with(buf, ty, lsn, append_ms, None)
    }

    /// Begin a record, with its origin after the header if it has one (flag [`F_ORIGIN`]).
    pub fn begin_with(
        buf: &mut Vec<u8>,
        ty: RecordType,
        lsn: u64,
        append_ms: i64,
        origin: Option<Origin>,
    ) -> Self {
        let start = buf.len();
        buf.extend_from_slice(&[0u8; 8]);
        buf.push(VERSION);
        buf.push(ty as u8);
        let flags = if origin.is_some() { F_ORIGIN } else { 0 };
        buf.extend_from_slice(&flags.to_le_bytes());
        buf.extend_from_slice(&lsn.to_le_bytes());
        buf.extend_from_slice(&append_ms.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        if let Some(o) = origin {
            buf.push(o.topic.as_u8());
            buf.extend_from_slice(&[0u8; 3]);
            buf.extend_from_slice(&o.partition.to_le_bytes());
            buf.extend_from_slice(&o.offset.to_le_bytes());
        }
        RecordBuilder {
            start,
            n: 0,
            run_start: 0,
        }
    }

    /// Offset of this record's first byte in the buffer.
    pub fn start(&self) -> usize {
        self.start
    }

    fn stream(buf: &mut Vec<u8>, stream: &str) {
        // Streams are 1–256 bytes (docs/API.md §2, checked by every decoder).
        let len = u16::try_from(stream.len()).unwrap_or(u16::MAX);
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(&stream.as_bytes()[..usize::from(len).min(stream.len())]);
    }

    /// Start a run; the caller appends its events, then calls [`RecordBuilder::end_run`].
    /// Returns the offset of the run header in the buffer.
    pub fn begin_run(
        &mut self,
        buf: &mut Vec<u8>,
        stream: &str,
        base_seq: u64,
        count: u32,
    ) -> usize {
        let at = buf.len();
        Self::stream(buf, stream);
        buf.extend_from_slice(&base_seq.to_le_bytes());
        buf.extend_from_slice(&count.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        self.run_start = buf.len();
        self.n += 1;
        at
    }

    /// Close the current run (fills in its byte length).
    pub fn end_run(&mut self, buf: &mut [u8]) -> Result<(), TooLarge> {
        let len = buf.len() - self.run_start;
        let len32 = u32::try_from(len).map_err(|_| TooLarge { len })?;
        let at = self.run_start - 4;
        buf[at..at + 4].copy_from_slice(&len32.to_le_bytes());
        Ok(())
    }

    /// A tombstone record's body.
    pub fn tombstone(&mut self, buf: &mut Vec<u8>, stream: &str, last_seq: u64) {
        Self::stream(buf, stream);
        buf.extend_from_slice(&last_seq.to_le_bytes());
        self.n = 1;
    }

    /// A reset record's body: what is discarded, of which shard.
    pub fn reset(&mut self, buf: &mut Vec<u8>, target: OriginTopic, shard: u32) {
        buf.push(target.as_u8());
        buf.extend_from_slice(&shard.to_le_bytes());
        self.n = 1;
    }

    /// A feature put record's body: the entity and its (name, value or delete) pairs.
    pub fn feature_put(
        &mut self,
        buf: &mut Vec<u8>,
        entity: &str,
        set: &[(String, Option<FeatureValue>)],
    ) {
        entity_bytes(buf, entity);
        for (name, v) in set {
            name_bytes(buf, name);
            match v {
                None => buf.push(0),
                Some(FeatureValue::Int(i)) => {
                    buf.push(1);
                    buf.extend_from_slice(&i.to_le_bytes());
                }
                Some(FeatureValue::Float(f)) => {
                    buf.push(2);
                    buf.extend_from_slice(&f.to_bits().to_le_bytes());
                }
                Some(FeatureValue::Bool(b)) => {
                    buf.push(3);
                    buf.push(u8::from(*b));
                }
                Some(FeatureValue::Str(s)) => {
                    buf.push(4);
                    let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
                    buf.extend_from_slice(&len.to_le_bytes());
                    buf.extend_from_slice(&s.as_bytes()[..len as usize]);
                }
            }
        }
        self.n = u32::try_from(set.len()).unwrap_or(u32::MAX);
    }

    /// A feature increment record's body: the entity, the name, the increment.
    pub fn feature_incr(&mut self, buf: &mut Vec<u8>, entity: &str, name: &str, by: Increment) {
        entity_bytes(buf, entity);
        name_bytes(buf, name);
        match by {
            Increment::Int(i) => {
                buf.push(1);
                buf.extend_from_slice(&i.to_le_bytes());
            }
            Increment::Float(f) => {
                buf.push(2);
                buf.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        self.n = 1;
    }

    /// A feature delete record's body: its targets (an entity, and one feature or `None` for
    /// all of them), in the order they apply. A target of the entity before it is written
    /// without the entity again.
    pub fn feature_delete<'t>(
        &mut self,
        buf: &mut Vec<u8>,
        targets: impl IntoIterator<Item = (&'t str, Option<&'t str>)>,
    ) {
        let mut prev: Option<&str> = None;
        let mut n = 0u32;
        for (entity, name) in targets {
            if prev == Some(entity) {
                buf.extend_from_slice(&0u16.to_le_bytes());
            } else {
                entity_bytes(buf, entity);
            }
            match name {
                Some(n) => name_bytes(buf, n),
                None => buf.push(0),
            }
            prev = Some(entity);
            n = n.saturating_add(1);
        }
        self.n = n;
    }

    /// Seal the record: fill in length, count and checksum. Returns the record length.
    pub fn finish(self, buf: &mut [u8]) -> Result<usize, TooLarge> {
        let len = buf.len() - self.start;
        if len > MAX_RECORD_LEN {
            return Err(TooLarge { len });
        }
        let len32 = u32::try_from(len).map_err(|_| TooLarge { len })?;
        let s = self.start;
        buf[s..s + 4].copy_from_slice(&len32.to_le_bytes());
        buf[s + 28..s + 32].copy_from_slice(&self.n.to_le_bytes());
        let crc = crc32c::crc32c(&buf[s + 8..]);
        buf[s + 4..s + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(len)
    }
}

// Entities are 1–256 bytes and names 1–128 (checked by the HTTP layer before a write).
fn entity_bytes(buf: &mut Vec<u8>, entity: &str) {
    let len = u16::try_from(entity.len()).unwrap_or(u16::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&entity.as_bytes()[..usize::from(len).min(entity.len())]);
}

fn name_bytes(buf: &mut Vec<u8>, name: &str) {
    let len = u8::try_from(name.len()).unwrap_or(u8::MAX);
    buf.push(len);
    buf.extend_from_slice(&name.as_bytes()[..usize::from(len).min(name.len())]);
}

/// Fields of a record, index file or carry file, read with vx-proto's little-endian
/// [`Reader`]: a short read is [`Decode::Incomplete`] with the length it needed.
pub(crate) struct Fields<'a>(Reader<'a>);

impl<'a> Fields<'a> {
    pub fn new(b: &'a [u8]) -> Fields<'a> {
        Fields(Reader::new(b))
    }

    /// Fields of `b` from `pos` on (a record's body after its header).
    pub fn at(b: &'a [u8], pos: usize) -> Fields<'a> {
        Fields(Reader::at(b, pos))
    }

    /// Bytes read so far, from the start of the slice.
    pub fn pos(&self) -> usize {
        self.0.pos()
    }

    fn need<T>(
        &mut self,
        n: usize,
        read: impl FnOnce(&mut Reader<'a>) -> Option<T>,
    ) -> Result<T, Decode> {
        let end = self
            .0
            .pos()
            .checked_add(n)
            .ok_or(Decode::Bad("length overflow"))?;
        read(&mut self.0).ok_or(Decode::Incomplete(end))
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Decode> {
        self.need(n, |r| r.bytes(n))
    }
    pub fn arr<const N: usize>(&mut self) -> Result<[u8; N], Decode> {
        self.need(N, Reader::array)
    }
    pub fn u8(&mut self) -> Result<u8, Decode> {
        self.need(1, Reader::u8)
    }
    pub fn u16(&mut self) -> Result<u16, Decode> {
        self.need(2, Reader::u16)
    }
    pub fn u32(&mut self) -> Result<u32, Decode> {
        self.need(4, Reader::u32)
    }
    pub fn u64(&mut self) -> Result<u64, Decode> {
        self.need(8, Reader::u64)
    }
    pub fn i64(&mut self) -> Result<i64, Decode> {
        self.need(8, Reader::i64)
    }
    pub fn str(&mut self, n: usize) -> Result<&'a str, Decode> {
        std::str::from_utf8(self.take(n)?).map_err(|_| Decode::Bad("invalid UTF-8"))
    }
}

/// A parsed record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: usize,
    pub crc: u32,
    pub ty: RecordType,
    /// Flag [`F_ORIGIN`]: an origin follows the header ([`origin`] reads it).
    pub has_origin: bool,
    pub lsn: u64,
    pub append_ms: i64,
    pub n: u32,
}

impl Header {
    /// Offset of the body in the record: after the header, and after the origin if any.
    pub fn body_at(&self) -> usize {
        if self.has_origin {
            HEADER_LEN + ORIGIN_LEN
        } else {
            HEADER_LEN
        }
    }
}

pub fn parse_header(b: &[u8]) -> Result<Header, Decode> {
    let mut r = Fields::new(b);
    let len = usize::try_from(r.u32()?).map_err(|_| Decode::Bad("record length"))?;
    let crc = r.u32()?;
    let version = r.u8()?;
    let ty = r.u8()?;
    let flags = r.u16()?;
    let lsn = r.u64()?;
    let append_ms = r.i64()?;
    let n = r.u32()?;
    if !(HEADER_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(Decode::Bad("record length out of range"));
    }
    if version != VERSION {
        return Err(Decode::Bad("unknown record version"));
    }
    let ty = RecordType::from_u8(ty).ok_or(Decode::Bad("unknown record type"))?;
    if flags & !F_ORIGIN != 0 {
        return Err(Decode::Bad("unknown record flags"));
    }
    let has_origin = flags & F_ORIGIN != 0;
    if has_origin && len < HEADER_LEN + ORIGIN_LEN {
        return Err(Decode::Bad("record length out of range"));
    }
    Ok(Header {
        len,
        crc,
        ty,
        has_origin,
        lsn,
        append_ms,
        n,
    })
}

/// The origin of a record (`rec` is the whole record), if its header says it has one.
pub fn origin(h: &Header, rec: &[u8]) -> Result<Option<Origin>, Decode> {
    if !h.has_origin {
        return Ok(None);
    }
    let mut r = Fields::at(rec, HEADER_LEN);
    let topic = OriginTopic::from_u8(r.u8()?).ok_or(Decode::Bad("unknown origin topic"))?;
    if r.arr::<3>()? != [0; 3] {
        return Err(Decode::Bad("origin padding is not zero"));
    }
    Ok(Some(Origin {
        topic,
        partition: r.u32()?,
        offset: r.u64()?,
    }))
}

/// Where the body of a record starts, from its own flags (`rec` is a parsed record).
fn body_start(rec: &[u8]) -> usize {
    match rec.get(10..12) {
        Some(f) if u16::from_le_bytes([f[0], f[1]]) & F_ORIGIN != 0 => HEADER_LEN + ORIGIN_LEN,
        _ => HEADER_LEN,
    }
}

/// Checks a whole record's checksum (`rec` is exactly `len` bytes).
pub fn crc_ok(h: &Header, rec: &[u8]) -> bool {
    rec.len() == h.len
        && rec
            .get(8..)
            .is_some_and(|body| crc32c::crc32c(body) == h.crc)
}

/// The header of one run, parsed from the bytes at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHead<'a> {
    pub stream: &'a str,
    pub base_seq: u64,
    pub count: u32,
    /// Bytes of the run header (the events start here, relative to the run).
    pub head_len: usize,
    pub events_len: usize,
}

impl RunHead<'_> {
    /// Bytes of the whole run, header and events.
    #[expect(clippy::len_without_is_empty, reason = "a run is never empty")]
    pub fn len(&self) -> usize {
        self.head_len + self.events_len
    }
}

/// Parse a run header at the start of `b`.
pub fn parse_run(b: &[u8]) -> Result<RunHead<'_>, Decode> {
    let mut r = Fields::new(b);
    let sl = usize::from(r.u16()?);
    let stream = r.str(sl)?;
    let base_seq = r.u64()?;
    let count = r.u32()?;
    let events_len = usize::try_from(r.u32()?).map_err(|_| Decode::Bad("run length"))?;
    Ok(RunHead {
        stream,
        base_seq,
        count,
        head_len: r.pos(),
        events_len,
    })
}

/// One run of a record, borrowed from the record bytes.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub stream: &'a str,
    pub base_seq: u64,
    pub count: u32,
    /// Offset of the run header within the record.
    pub at: usize,
    /// Bytes of the whole run (header and events).
    pub len: usize,
    pub events: &'a [u8],
}

/// Iterate the runs of a checksum-verified event-batch or entity-events record.
pub fn runs(rec: &[u8], n: u32) -> impl Iterator<Item = Result<Run<'_>, Decode>> {
    let mut pos = body_start(rec);
    let mut left = n;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let one = || -> Result<Run<'_>, Decode> {
            let rest = rec.get(pos..).ok_or(Decode::Bad("run past the record"))?;
            let h = parse_run(rest)?;
            let events = rest
                .get(h.head_len..h.len())
                .ok_or(Decode::Bad("run extends past the record"))?;
            Ok(Run {
                stream: h.stream,
                base_seq: h.base_seq,
                count: h.count,
                at: pos,
                len: h.len(),
                events,
            })
        };
        let res = one().map_err(|e| match e {
            // Inside a verified record, running out of bytes is corruption.
            Decode::Incomplete(_) => Decode::Bad("run extends past the record"),
            bad => bad,
        });
        match &res {
            Ok(run) => pos += run.len,
            Err(_) => left = 0,
        }
        Some(res)
    })
}

/// The body of a tombstone record: the stream and its last seq.
pub fn tombstone(rec: &[u8]) -> Result<(&str, u64), Decode> {
    let mut r = Fields::at(rec, body_start(rec));
    let sl = usize::from(r.u16()?);
    let stream = r.str(sl)?;
    let last_seq = r.u64()?;
    if r.pos() != rec.len() {
        return Err(Decode::Bad("tombstone record length"));
    }
    Ok((stream, last_seq))
}

/// A decoded feature put: the entity and its (name, value or delete) pairs.
pub type FeaturePut<'a> = (&'a str, Vec<(&'a str, Option<FeatureValue>)>);

/// The body of a feature put record.
pub fn feature_put(rec: &[u8], n: u32) -> Result<FeaturePut<'_>, Decode> {
    let mut r = Fields::at(rec, body_start(rec));
    let el = usize::from(r.u16()?);
    let entity = r.str(el)?;
    let mut set = Vec::with_capacity((n as usize).min(1024));
    for _ in 0..n {
        let nl = usize::from(r.u8()?);
        let name = r.str(nl)?;
        let v = match r.u8()? {
            0 => None,
            1 => Some(FeatureValue::Int(r.i64()?)),
            2 => {
                let f = f64::from_bits(r.u64()?);
                if !f.is_finite() {
                    return Err(Decode::Bad("non-finite feature value"));
                }
                Some(FeatureValue::Float(f))
            }
            3 => match r.u8()? {
                0 => Some(FeatureValue::Bool(false)),
                1 => Some(FeatureValue::Bool(true)),
                _ => return Err(Decode::Bad("feature bool")),
            },
            4 => {
                let sl = r.u32()? as usize;
                Some(FeatureValue::Str(r.str(sl)?.into()))
            }
            _ => return Err(Decode::Bad("unknown feature value tag")),
        };
        set.push((name, v));
    }
    if r.pos() != rec.len() {
        return Err(Decode::Bad("feature put record length"));
    }
    Ok((entity, set))
}

/// The body of a feature increment record: the entity, the feature's name, the increment.
pub fn feature_incr(rec: &[u8], n: u32) -> Result<(&str, &str, Increment), Decode> {
    if n != 1 {
        return Err(Decode::Bad("feature increment record count"));
    }
    let mut r = Fields::at(rec, body_start(rec));
    let el = usize::from(r.u16()?);
    let entity = r.str(el)?;
    let nl = usize::from(r.u8()?);
    if nl == 0 {
        return Err(Decode::Bad("feature increment without a name"));
    }
    let name = r.str(nl)?;
    let by = match r.u8()? {
        1 => Increment::Int(r.i64()?),
        2 => {
            let f = f64::from_bits(r.u64()?);
            if !f.is_finite() {
                return Err(Decode::Bad("non-finite feature increment"));
            }
            Increment::Float(f)
        }
        _ => return Err(Decode::Bad("unknown feature increment tag")),
    };
    if r.pos() != rec.len() {
        return Err(Decode::Bad("feature increment record length"));
    }
    Ok((entity, name, by))
}

/// One target of a feature delete record: an entity, and one of its features (`None`: all
/// of them).
pub type DeleteTarget<'a> = (&'a str, Option<&'a str>);

/// The body of a feature delete record of `n` targets (the header's `n`), in order.
pub fn feature_delete(rec: &[u8], n: u32) -> Result<Vec<DeleteTarget<'_>>, Decode> {
    if n == 0 {
        return Err(Decode::Bad("feature delete record without a target"));
    }
    let mut r = Fields::at(rec, body_start(rec));
    // `n` is the header's claim: each target takes at least 3 bytes of the record.
    let mut out = Vec::with_capacity((n as usize).min(rec.len() / 3));
    let mut prev: Option<&str> = None;
    for _ in 0..n {
        let el = usize::from(r.u16()?);
        let entity = match (el, prev) {
            (0, Some(p)) => p,
            (0, None) => return Err(Decode::Bad("feature delete record's first entity empty")),
            _ => r.str(el)?,
        };
        let nl = usize::from(r.u8()?);
        let name = if nl == 0 { None } else { Some(r.str(nl)?) };
        out.push((entity, name));
        prev = Some(entity);
    }
    if r.pos() != rec.len() {
        return Err(Decode::Bad("feature delete record length"));
    }
    Ok(out)
}

/// The body of a reset record: what is discarded, of which shard.
pub fn reset(rec: &[u8]) -> Result<(OriginTopic, u32), Decode> {
    let mut r = Fields::at(rec, body_start(rec));
    let target = OriginTopic::from_u8(r.u8()?).ok_or(Decode::Bad("unknown reset target"))?;
    let shard = r.u32()?;
    if r.pos() != rec.len() {
        return Err(Decode::Bad("reset record length"));
    }
    Ok((target, shard))
}

#[cfg(test)]
mod tests;
