//! The packed representation of a request's events (docs/ARCHITECTURE.md "Batches in the log layout"), which is also
//! the log's event layout: a decoder builds a [`Batch`] once, and the storage engine's writer
//! copies its bytes into the log record as they are.
//!
//! A batch holds one request, grouped by stream: one [`Run`] per stream (in first-appearance
//! order) whose events are encoded back to back in the layout below. The stream is interned
//! per batch (it is the run, and on disk the run header names it once); `seq` is implicit (the
//! writer assigns a run's base `seq`, the i-th event has base + i) and so are arena offsets
//! (an event's variable parts follow its fixed header in a known order). Nothing outlives the
//! batch, so interning can never grow with the number of streams the service has seen.
//!
//! # Event layout (all integers little-endian)
//!
//! ```text
//! fixed header, 18 bytes
//!  0  u8   kind        Kind as #[repr(u8)]: 0 event, 1 counter, 2 gauge
//!  1  u8   flags       1 has value, 2 value is f64 bits (else i64), 4 has id, 8 has data,
//!                      16 has entity (other bits 0)
//!  2  u8   type_len    1..=128
//!  3  u8   id_len      0 without an id, else 1..=128
//!  4  u16  entity_len  0 without an entity, else 1..=256
//!  6  u32  data_len    0 without data
//! 10  i64  ts          ms since the Unix epoch
//! then
//!     u64  value       i64 or f64 bits, if flag 1
//!     type bytes, entity bytes, id bytes, data bytes (compact JSON), in that order
//! ```
//!
//! The fixed part plus the value is 26 bytes (≤ 32, asserted by a test). Type and entity are
//! stored inline in the variable part rather than interned in the header: on disk strings must
//! be inline (docs/API.md §2), and with the log layout as the in-memory layout the writer copies runs
//! instead of re-encoding every event (see docs/ARCHITECTURE.md, "Batches in the log layout").

use crate::event::{EventView, Kind, Num};
use hashbrown::HashTable;

/// Bytes of an event's fixed header (without the optional value).
pub const EVENT_HEADER_LEN: usize = 18;

/// `flags` bits of an encoded event.
pub mod flags {
    pub const VALUE: u8 = 1;
    /// `value` holds f64 bits rather than an i64.
    pub const FLOAT: u8 = 2;
    pub const ID: u8 = 4;
    pub const DATA: u8 = 8;
    pub const ENTITY: u8 = 16;
    pub const ALL: u8 = VALUE | FLOAT | ID | DATA | ENTITY;
}

/// Why encoded event bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// More bytes are needed: at least this many in total from the start of the event.
    Incomplete(usize),
    /// The bytes are not a valid event.
    Bad(&'static str),
}

/// Why an event could not be packed: a length past what its field's width can say. Decoders
/// validate every rule of docs/API.md §2 first, so for their events this never happens; it guards
/// callers that build events by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event field {field} is {len} bytes, more than the event layout allows")]
pub struct PackError {
    pub field: &'static str,
    pub len: usize,
}

/// Append one event in the log layout; returns its encoded size.
pub fn encode_event(out: &mut Vec<u8>, ev: &EventView<'_>) -> Result<usize, PackError> {
    let too_long = |field: &'static str, len: usize| PackError { field, len };
    let type_len = u8::try_from(ev.ty.len()).map_err(|_| too_long("type", ev.ty.len()))?;
    let entity = ev.entity.filter(|e| !e.is_empty());
    let entity_len = entity.map_or(Ok(0), |e| {
        u16::try_from(e.len()).map_err(|_| too_long("entity", e.len()))
    })?;
    let id_len = ev.id.map_or(Ok(0), |id| {
        u8::try_from(id.len()).map_err(|_| too_long("id", id.len()))
    })?;
    let data_len = ev.data.map_or(Ok(0), |d| {
        u32::try_from(d.len()).map_err(|_| too_long("data", d.len()))
    })?;
    let mut f = 0u8;
    let value = match ev.value {
        Some(Num::Int(i)) => {
            f |= flags::VALUE;
            Some(i.to_le_bytes())
        }
        Some(Num::Float(x)) => {
            f |= flags::VALUE | flags::FLOAT;
            Some(x.to_bits().to_le_bytes())
        }
        None => None,
    };
    if ev.id.is_some() {
        f |= flags::ID;
    }
    if ev.data.is_some() {
        f |= flags::DATA;
    }
    if entity.is_some() {
        f |= flags::ENTITY;
    }
    let before = out.len();
    let mut head = [0u8; EVENT_HEADER_LEN];
    head[0] = ev.kind as u8;
    head[1] = f;
    head[2] = type_len;
    head[3] = id_len;
    head[4..6].copy_from_slice(&entity_len.to_le_bytes());
    head[6..10].copy_from_slice(&data_len.to_le_bytes());
    head[10..18].copy_from_slice(&ev.ts.to_le_bytes());
    out.extend_from_slice(&head);
    if let Some(v) = value {
        out.extend_from_slice(&v);
    }
    out.extend_from_slice(ev.ty.as_bytes());
    if let Some(e) = entity {
        out.extend_from_slice(e.as_bytes());
    }
    if let Some(id) = ev.id {
        out.extend_from_slice(id.as_bytes());
    }
    if let Some(d) = ev.data {
        out.extend_from_slice(d.as_bytes());
    }
    Ok(out.len() - before)
}

/// The encoded size of the event at the start of `b`, from its fixed header alone.
pub fn event_len(b: &[u8]) -> Result<usize, DecodeError> {
    let head: &[u8; EVENT_HEADER_LEN] = b
        .get(..EVENT_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(DecodeError::Incomplete(EVENT_HEADER_LEN))?;
    let f = head[1];
    if f & !flags::ALL != 0 {
        return Err(DecodeError::Bad("unknown event flags"));
    }
    let value = if f & flags::VALUE != 0 { 8 } else { 0 };
    let entity = usize::from(u16::from_le_bytes([head[4], head[5]]));
    let data = u32::from_le_bytes([head[6], head[7], head[8], head[9]]);
    let data = usize::try_from(data).map_err(|_| DecodeError::Bad("data length overflow"))?;
    Ok(EVENT_HEADER_LEN + value + usize::from(head[2]) + entity + usize::from(head[3]) + data)
}

/// The entity bytes (`None` without an entity) and the encoded size of the event at the start
/// of `b`, from its fixed header alone: what cutting a record into the feature apply threads'
/// slices needs of each event, without decoding (or checking the UTF-8 of) the rest.
pub fn entity_of(b: &[u8]) -> Result<(Option<&[u8]>, usize), DecodeError> {
    let len = event_len(b)?;
    let ev = b.get(..len).ok_or(DecodeError::Incomplete(len))?;
    if ev[1] & flags::ENTITY == 0 {
        return Ok((None, len));
    }
    let value = if ev[1] & flags::VALUE != 0 { 8 } else { 0 };
    let at = EVENT_HEADER_LEN + value + usize::from(ev[2]);
    let n = usize::from(u16::from_le_bytes([ev[4], ev[5]]));
    let entity = ev.get(at..at + n).ok_or(DecodeError::Bad("short event"))?;
    Ok((Some(entity), len))
}

/// Decode the event at the start of `b` (its stream is known from its run). Returns the event
/// and the bytes it used. Never allocates; any bytes give an event or an error.
pub fn decode_event<'a>(
    b: &'a [u8],
    stream: &'a str,
) -> Result<(EventView<'a>, usize), DecodeError> {
    let len = event_len(b)?;
    let ev = b.get(..len).ok_or(DecodeError::Incomplete(len))?;
    let kind = Kind::from_u8(ev[0]).ok_or(DecodeError::Bad("unknown event kind"))?;
    let f = ev[1];
    let ts = i64::from_le_bytes(array(ev, 10)?);
    let mut pos = EVENT_HEADER_LEN;
    let value = if f & flags::VALUE != 0 {
        let bits = u64::from_le_bytes(array(ev, pos)?);
        pos += 8;
        Some(if f & flags::FLOAT != 0 {
            Num::Float(f64::from_bits(bits))
        } else {
            Num::Int(i64::from_le_bytes(bits.to_le_bytes()))
        })
    } else {
        None
    };
    let mut text = |n: usize| -> Result<&'a str, DecodeError> {
        let s = ev
            .get(pos..pos + n)
            .ok_or(DecodeError::Bad("short event"))?;
        pos += n;
        std::str::from_utf8(s).map_err(|_| DecodeError::Bad("invalid UTF-8"))
    };
    let ty = text(usize::from(ev[2]))?;
    let entity_len = usize::from(u16::from_le_bytes([ev[4], ev[5]]));
    let entity = if f & flags::ENTITY != 0 {
        Some(text(entity_len)?)
    } else if entity_len == 0 {
        None
    } else {
        return Err(DecodeError::Bad("entity length without the entity flag"));
    };
    let id_len = usize::from(ev[3]);
    let id = if f & flags::ID != 0 {
        Some(text(id_len)?)
    } else if id_len == 0 {
        None
    } else {
        return Err(DecodeError::Bad("id length without the id flag"));
    };
    let data_len = u32::from_le_bytes([ev[6], ev[7], ev[8], ev[9]]) as usize;
    let data = if f & flags::DATA != 0 {
        Some(text(data_len)?)
    } else if data_len == 0 {
        None
    } else {
        return Err(DecodeError::Bad("data length without the data flag"));
    };
    Ok((
        EventView {
            stream,
            entity,
            ty,
            ts,
            kind,
            value,
            id,
            data,
        },
        len,
    ))
}

fn array<const N: usize>(b: &[u8], at: usize) -> Result<[u8; N], DecodeError> {
    b.get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(DecodeError::Bad("short event"))
}

/// An event of a run that carries an `id`: where it is, so the writer can check it against
/// the dedup table and, for a duplicate, copy the run without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRef {
    /// Position of the event in its run (0-based).
    pub idx: u32,
    /// Offset of the event in the run's bytes.
    pub at: u32,
    /// Encoded length of the event.
    pub len: u32,
    /// The keyed dedup hash of `(stream, id)`, set by [`Batch::prepare`] (0 before).
    pub key: u128,
}

/// One stream's events of a batch, encoded back to back in the log layout. Only a [`Batch`]
/// makes runs, so a run's name span is always within its batch's name buffer.
#[derive(Clone, Debug)]
pub struct Run {
    /// The stream name's span in the batch's name buffer.
    name: (u32, u32),
    /// Shard of the stream, set by [`Batch::prepare`].
    pub shard: u32,
    pub count: u32,
    pub events: Vec<u8>,
    /// Events with an `id`, in order.
    pub ids: Vec<IdRef>,
    /// Min and max `ts` of the run's events.
    pub min_ts: i64,
    pub max_ts: i64,
}

/// One request's events, grouped by stream in the log layout. See the module docs.
#[derive(Default)]
pub struct Batch {
    runs: Vec<Run>,
    names: String,
    /// Stream name → index in `runs`.
    lookup: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
    /// For each event in request order, the index of its run: enough to iterate the batch in
    /// request order (4 bytes an event).
    order: Vec<u32>,
    /// Encoded bytes of all runs.
    event_bytes: usize,
    /// [`Batch::prepare`] ran (for the shard count `prepared_for`).
    prepared_for: Option<u32>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("events", &self.order.len())
            .field("streams", &self.runs.len())
            .field("bytes", &self.mem_bytes())
            .finish()
    }
}

/// Bytes a run costs beyond its events, as budgets count it.
const RUN_OVERHEAD: usize = std::mem::size_of::<Run>();

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Bytes this batch occupies in memory (events, names, per-run and per-id bookkeeping):
    /// what budgets count.
    pub fn mem_bytes(&self) -> usize {
        self.event_bytes
            + self.names.len()
            + self.runs.len() * RUN_OVERHEAD
            + self.order.len() * 4
            + self
                .runs
                .iter()
                .map(|r| r.ids.len() * std::mem::size_of::<IdRef>())
                .sum::<usize>()
    }

    /// The runs, one per stream, in first-appearance order.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// A run's stream name. `run` must be one of this batch's [`Batch::runs`]: another
    /// batch's run is a caller's bug, which panics here (when its span is past this batch's
    /// names) rather than passing its events off as those of a stream named `""`.
    pub fn stream(&self, run: &Run) -> &str {
        name_in(&self.names, run.name)
    }

    fn run_index(&mut self, stream: &str) -> usize {
        let hash = std::hash::BuildHasher::hash_one(&self.hasher, stream);
        let (names, runs) = (&self.names, &self.runs);
        let name_of = |i: u32| name_in(names, runs[i as usize].name);
        if let Some(&i) = self.lookup.find(hash, |&i| name_of(i) == stream) {
            return i as usize;
        }
        let i = self.runs.len();
        // Streams are ≤ 256 bytes (validated) and a batch's names are bounded by the body
        // limit, so these fit; saturate rather than wrap if a caller breaks that.
        let start = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        let len = u32::try_from(stream.len()).unwrap_or(u32::MAX);
        self.names.push_str(stream);
        self.runs.push(Run {
            name: (start, len),
            shard: 0,
            count: 0,
            events: Vec::new(),
            ids: Vec::new(),
            min_ts: i64::MAX,
            max_ts: i64::MIN,
        });
        let (names, runs, hasher) = (&self.names, &self.runs, &self.hasher);
        self.lookup
            .insert_unique(hash, u32::try_from(i).unwrap_or(u32::MAX), |&j| {
                std::hash::BuildHasher::hash_one(hasher, name_in(names, runs[j as usize].name))
            });
        i
    }

    /// Append one validated event. The caller (a decoder) has checked every rule of docs/API.md §2,
    /// which keeps every length within the layout; an event that breaks them is refused.
    pub fn push(&mut self, ev: &EventView<'_>) -> Result<(), PackError> {
        self.prepared_for = None;
        let i = self.run_index(ev.stream);
        let run = &mut self.runs[i];
        let at = run.events.len();
        let len = encode_event(&mut run.events, ev)?;
        let too_long = |len: usize| PackError { field: "run", len };
        if ev.id.is_some() {
            run.ids.push(IdRef {
                idx: run.count,
                at: u32::try_from(at).map_err(|_| too_long(at))?,
                len: u32::try_from(len).map_err(|_| too_long(len))?,
                key: 0,
            });
        }
        run.count += 1;
        run.min_ts = run.min_ts.min(ev.ts);
        run.max_ts = run.max_ts.max(ev.ts);
        self.event_bytes += len;
        self.order.push(u32::try_from(i).unwrap_or(u32::MAX));
        Ok(())
    }

    /// Compute, once and off the writer thread, what the storage engine needs besides the
    /// bytes: each run's shard, and each id's keyed dedup hash (`key(stream, id)`).
    pub fn prepare(&mut self, shards: u32, key: impl Fn(&str, &str) -> u128) {
        self.prepared_for = Some(shards);
        let names = &self.names;
        for run in &mut self.runs {
            let stream = name_in(names, run.name);
            run.shard = crate::shard::shard_of(stream, shards);
            for id in &mut run.ids {
                let at = id.at as usize;
                let bytes = run.events.get(at..at + id.len as usize).unwrap_or(&[]);
                if let Ok((ev, _)) = decode_event(bytes, stream)
                    && let Some(s) = ev.id
                {
                    id.key = key(stream, s);
                }
            }
        }
    }

    /// Whether [`Batch::prepare`] ran for `shards` shards.
    pub fn is_prepared_for(&self, shards: u32) -> bool {
        self.prepared_for == Some(shards)
    }

    /// The events in request order, as borrowed views.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            batch: self,
            next: 0,
            pos: vec![0; self.runs.len()],
        }
    }
}

/// The stream name at `span` (start, length) of a batch's name buffer. Every span a batch
/// holds was cut from its own buffer, at `char` boundaries (whole names), so this cannot fail
/// for them.
fn name_in(names: &str, (start, len): (u32, u32)) -> &str {
    &names[start as usize..(start + len) as usize]
}

/// Iterator over a batch's events in request order.
pub struct BatchIter<'a> {
    batch: &'a Batch,
    next: usize,
    /// Read position in each run.
    pos: Vec<usize>,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = EventView<'a>;

    fn next(&mut self) -> Option<EventView<'a>> {
        let b = self.batch;
        let r = *b.order.get(self.next)? as usize;
        self.next += 1;
        let run = b.runs.get(r)?;
        let pos = self.pos.get_mut(r)?;
        let (ev, n) = decode_event(run.events.get(*pos..)?, b.stream(run)).ok()?;
        *pos += n;
        Some(ev)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.batch.order.len() - self.next;
        (n, Some(n))
    }
}

/// Iterate the events encoded back to back in `bytes` (one run's events).
pub fn events<'a>(
    bytes: &'a [u8],
    stream: &'a str,
) -> impl Iterator<Item = Result<EventView<'a>, DecodeError>> + 'a {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let rest = bytes.get(pos..).filter(|r| !r.is_empty())?;
        Some(match decode_event(rest, stream) {
            Ok((ev, n)) => {
                pos += n;
                Ok(ev)
            }
            Err(e) => {
                pos = bytes.len();
                Err(match e {
                    DecodeError::Incomplete(_) => DecodeError::Bad("event extends past its run"),
                    bad => bad,
                })
            }
        })
    })
}

/// The offset and entity (`None` without one) of each event encoded back to back in `bytes`
/// (one run's events), read from the event headers alone ([`entity_of`]): what cutting a
/// record into the feature apply threads' slices reads. An event that does not decode ends
/// it, with the error.
pub fn entities(
    bytes: &[u8],
) -> impl Iterator<Item = Result<(usize, Option<&[u8]>), DecodeError>> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let rest = bytes.get(pos..).filter(|r| !r.is_empty())?;
        Some(match entity_of(rest) {
            Ok((entity, n)) => {
                let at = pos;
                pos += n;
                Ok((at, entity))
            }
            Err(e) => {
                pos = bytes.len();
                Err(match e {
                    DecodeError::Incomplete(_) => DecodeError::Bad("event extends past its run"),
                    bad => bad,
                })
            }
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn e1() -> EventView<'static> {
        EventView {
            stream: "s1",
            entity: Some("p7"),
            ty: "damage",
            ts: 5,
            kind: Kind::Counter,
            value: Some(Num::Int(-3)),
            id: Some("a"),
            data: Some(r#"{"w":"bow"}"#),
        }
    }

    fn e2() -> EventView<'static> {
        EventView {
            stream: "s2",
            entity: None,
            ty: "damage",
            ts: 6,
            kind: Kind::Gauge,
            value: Some(Num::Float(1.5)),
            id: None,
            data: None,
        }
    }

    #[test]
    fn the_fixed_header_and_value_fit_32_bytes() {
        const { assert!(EVENT_HEADER_LEN + 8 <= 32) };
        assert_eq!(std::mem::size_of::<Kind>(), 1);
    }

    #[test]
    fn round_trip_grouped_by_stream_iterated_in_request_order() {
        let mut b = Batch::new();
        b.push(&e1()).unwrap();
        b.push(&e2()).unwrap();
        b.push(&e1()).unwrap();
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got, vec![e1(), e2(), e1()]);
        let runs = b.runs();
        assert_eq!(runs.len(), 2);
        assert_eq!((b.stream(&runs[0]), runs[0].count), ("s1", 2));
        assert_eq!((b.stream(&runs[1]), runs[1].count), ("s2", 1));
        assert_eq!(runs[0].ids.len(), 2);
        assert_eq!((runs[0].min_ts, runs[0].max_ts), (5, 5));
        let evs: Vec<_> = events(&runs[0].events, "s1")
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(evs, vec![e1(), e1()]);
        b.prepare(8, |s, id| {
            u128::from(s.len() as u64 * 1000 + id.len() as u64)
        });
        assert_eq!(b.runs()[0].ids[0].key, 2001);
        assert_eq!(b.runs()[0].shard, crate::shard::shard_of("s1", 8));
    }

    #[test]
    fn golden_bytes_of_one_event() {
        let mut out = Vec::new();
        let n = encode_event(&mut out, &e1()).unwrap();
        let mut want = vec![1u8, 1 | 4 | 8 | 16, 6, 1, 2, 0, 11, 0, 0, 0];
        want.extend_from_slice(&5i64.to_le_bytes());
        want.extend_from_slice(&(-3i64).to_le_bytes());
        want.extend_from_slice(b"damagep7a{\"w\":\"bow\"}");
        assert_eq!(out, want);
        assert_eq!(n, want.len());
    }

    #[test]
    fn every_prefix_is_incomplete_and_no_bytes_panic() {
        let mut b = Vec::new();
        encode_event(&mut b, &e1()).unwrap();
        for cut in 0..b.len() {
            assert!(matches!(
                decode_event(&b[..cut], "s"),
                Err(DecodeError::Incomplete(_))
            ));
        }
        assert!(decode_event(&b, "s").is_ok());
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut bad = b.clone();
                bad[i] ^= 1 << bit;
                let _ = decode_event(&bad, "s");
                let _ = entity_of(&bad);
            }
        }
    }

    /// The entity and length read from the header alone are the decoded event's, with and
    /// without an entity, a value, an id and data.
    #[test]
    fn entity_of_agrees_with_decoding() {
        let mut no_value = e1();
        no_value.value = None;
        for ev in [e1(), e2(), no_value] {
            let mut b = Vec::new();
            let n = encode_event(&mut b, &ev).unwrap();
            b.extend_from_slice(b"next event");
            let (entity, len) = entity_of(&b).unwrap();
            assert_eq!(entity, ev.entity.map(str::as_bytes));
            assert_eq!(len, n);
            for cut in 0..n {
                assert!(entity_of(&b[..cut]).is_err());
            }
        }
        // A run's events, their offsets and entities; a cut-off last one ends it in error.
        let mut run = Vec::new();
        let n1 = encode_event(&mut run, &e1()).unwrap();
        encode_event(&mut run, &e2()).unwrap();
        let got: Vec<_> = entities(&run).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![(0, Some(&b"p7"[..])), (n1, None)]);
        let mut last = entities(&run[..run.len() - 1]).last().unwrap();
        assert!(matches!(last, Err(DecodeError::Bad(_))), "{last:?}");
        last = entities(&[]).last().unwrap_or(Ok((0, None)));
        assert!(last.is_ok());
    }
}
