//! The on-disk record format. All integers are little-endian.
//!
//! A record is one request (SPEC §3 atomicity): either all of it is in the log or none.
//!
//! ```text
//! record header (32 bytes)
//!   0   u32  len        bytes of the whole record, header included
//!   4   u32  crc32c     of bytes [8, len)
//!   8   u8   version    1
//!   9   u8   type       1 = event batch (2 feature put, 3 feature delete, 4 stream tombstone
//!                       are reserved for later record types)
//!   10  u16  flags      0 (reserved: codec of the body)
//!   12  u64  lsn        log sequence number: 1, 2, 3 … with no gaps across segments
//!   20  i64  append_ms  server append time, ms since the Unix epoch
//!   28  u32  runs       number of stream runs that follow
//! run (one per stream of the request, events of one stream are contiguous)
//!   u16  stream_len, stream bytes (UTF-8)
//!   u64  base_seq       seq of the run's first event; the i-th event has base_seq + i
//!   u32  count          events in the run
//!   u32  events_len     bytes of the events that follow (lets readers skip a run)
//!   events
//! event
//!   u8   kind           0 event, 1 counter, 2 gauge
//!   u8   flags          1 value, 2 value is f64 (else i64), 4 id, 8 data, 16 entity
//!   i64  ts             ms since the Unix epoch
//!   [u64 value]         i64 or f64 bits, if flag 1
//!   u8   type_len, type bytes
//!   [u16 entity_len, entity bytes]   if flag 16
//!   [u8 id_len, id bytes]            if flag 4
//!   [u32 data_len, data bytes]       if flag 8 (compact JSON)
//! ```
//! Duplicates are not written: only newly stored events are in runs, so `seq` is gapless.

use vx_proto::{EventView, Kind, Num};

pub const HEADER_LEN: usize = 32;
pub const VERSION: u8 = 1;
pub const TYPE_EVENTS: u8 = 1;
/// Largest record recovery will believe in; anything longer is corruption.
pub const MAX_RECORD_LEN: usize = 1 << 30;

const F_VALUE: u8 = 1;
const F_FLOAT: u8 = 2;
const F_ID: u8 = 4;
const F_DATA: u8 = 8;
const F_ENTITY: u8 = 16;

/// Builds one record at the end of a reusable buffer (the buffer is passed to each call so
/// that several records can be built into one group buffer).
pub struct RecordBuilder {
    start: usize,
    runs: u32,
    run_start: usize,
}

impl RecordBuilder {
    pub fn begin(buf: &mut Vec<u8>, lsn: u64, append_ms: i64) -> Self {
        let start = buf.len();
        buf.extend_from_slice(&[0u8; 8]);
        buf.push(VERSION);
        buf.push(TYPE_EVENTS);
        buf.extend_from_slice(&0u16.to_le_bytes());
        buf.extend_from_slice(&lsn.to_le_bytes());
        buf.extend_from_slice(&append_ms.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        RecordBuilder {
            start,
            runs: 0,
            run_start: 0,
        }
    }

    /// Start a run; returns the offset of its first event relative to the record start.
    pub fn begin_run(
        &mut self,
        buf: &mut Vec<u8>,
        stream: &str,
        base_seq: u64,
        count: u32,
    ) -> usize {
        buf.extend_from_slice(&(stream.len() as u16).to_le_bytes());
        buf.extend_from_slice(stream.as_bytes());
        buf.extend_from_slice(&base_seq.to_le_bytes());
        buf.extend_from_slice(&count.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        self.run_start = buf.len();
        self.runs += 1;
        self.run_start - self.start
    }

    /// Close the current run (fills in its byte length).
    pub fn end_run(&mut self, buf: &mut [u8]) {
        let len = (buf.len() - self.run_start) as u32;
        let at = self.run_start - 4;
        buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Seal the record: fill in length, run count and checksum. Returns the record length.
    pub fn finish(self, buf: &mut [u8]) -> usize {
        let len = buf.len() - self.start;
        let s = self.start;
        buf[s..s + 4].copy_from_slice(&(len as u32).to_le_bytes());
        buf[s + 28..s + 32].copy_from_slice(&self.runs.to_le_bytes());
        let crc = crc32c::crc32c(&buf[s + 8..]);
        buf[s + 4..s + 8].copy_from_slice(&crc.to_le_bytes());
        len
    }
}

/// Append one event; returns its encoded size.
pub fn encode_event(b: &mut Vec<u8>, ev: &EventView<'_>) -> usize {
    let before = b.len();
    let mut f = 0u8;
    let value = match ev.value {
        Some(Num::Int(i)) => {
            f |= F_VALUE;
            Some(i as u64)
        }
        Some(Num::Float(x)) => {
            f |= F_VALUE | F_FLOAT;
            Some(x.to_bits())
        }
        None => None,
    };
    if ev.id.is_some() {
        f |= F_ID;
    }
    if ev.data.is_some() {
        f |= F_DATA;
    }
    if ev.entity.is_some() {
        f |= F_ENTITY;
    }
    b.push(ev.kind as u8);
    b.push(f);
    b.extend_from_slice(&ev.ts.to_le_bytes());
    if let Some(v) = value {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.push(ev.ty.len() as u8);
    b.extend_from_slice(ev.ty.as_bytes());
    if let Some(e) = ev.entity {
        b.extend_from_slice(&(e.len() as u16).to_le_bytes());
        b.extend_from_slice(e.as_bytes());
    }
    if let Some(id) = ev.id {
        b.push(id.len() as u8);
        b.extend_from_slice(id.as_bytes());
    }
    if let Some(d) = ev.data {
        b.extend_from_slice(&(d.len() as u32).to_le_bytes());
        b.extend_from_slice(d.as_bytes());
    }
    b.len() - before
}

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decode {
    /// More bytes are needed (at least this many in total from the start of the item).
    Incomplete(usize),
    /// The bytes are not a valid item.
    Bad(&'static str),
}

/// A little cursor over a byte slice.
struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Decode> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(Decode::Bad("length overflow"))?;
        let s = self.b.get(self.pos..end).ok_or(Decode::Incomplete(end))?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, Decode> {
        Ok(self.take(1)?[0])
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], Decode> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn str(&mut self, n: usize) -> Result<&'a str, Decode> {
        std::str::from_utf8(self.take(n)?).map_err(|_| Decode::Bad("invalid UTF-8"))
    }
}

/// Decode one event from the start of `b` (whose stream is known from its run). Returns the
/// event and the bytes it used.
pub fn decode_event<'a>(b: &'a [u8], stream: &'a str) -> Result<(EventView<'a>, usize), Decode> {
    let mut r = Rd { b, pos: 0 };
    let kind = Kind::from_u8(r.u8()?).ok_or(Decode::Bad("unknown event kind"))?;
    let f = r.u8()?;
    let ts = i64::from_le_bytes(r.arr()?);
    let value = if f & F_VALUE != 0 {
        let bits = u64::from_le_bytes(r.arr()?);
        Some(if f & F_FLOAT != 0 {
            Num::Float(f64::from_bits(bits))
        } else {
            Num::Int(bits as i64)
        })
    } else {
        None
    };
    let tl = usize::from(r.u8()?);
    let ty = r.str(tl)?;
    let entity = if f & F_ENTITY != 0 {
        let n = usize::from(u16::from_le_bytes(r.arr()?));
        Some(r.str(n)?)
    } else {
        None
    };
    let id = if f & F_ID != 0 {
        let n = usize::from(r.u8()?);
        Some(r.str(n)?)
    } else {
        None
    };
    let data = if f & F_DATA != 0 {
        let n = u32::from_le_bytes(r.arr()?) as usize;
        Some(r.str(n)?)
    } else {
        None
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
        r.pos,
    ))
}

/// A parsed record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: usize,
    pub crc: u32,
    pub version: u8,
    pub kind: u8,
    pub lsn: u64,
    pub append_ms: i64,
    pub runs: u32,
}

pub fn parse_header(b: &[u8]) -> Result<Header, Decode> {
    let mut r = Rd { b, pos: 0 };
    let len = u32::from_le_bytes(r.arr()?) as usize;
    let crc = u32::from_le_bytes(r.arr()?);
    let version = r.u8()?;
    let kind = r.u8()?;
    let _flags = u16::from_le_bytes(r.arr()?);
    let lsn = u64::from_le_bytes(r.arr()?);
    let append_ms = i64::from_le_bytes(r.arr()?);
    let runs = u32::from_le_bytes(r.arr()?);
    if !(HEADER_LEN..=MAX_RECORD_LEN).contains(&len) {
        return Err(Decode::Bad("record length out of range"));
    }
    if version != VERSION {
        return Err(Decode::Bad("unknown record version"));
    }
    if kind != TYPE_EVENTS {
        return Err(Decode::Bad("unknown record type"));
    }
    Ok(Header {
        len,
        crc,
        version,
        kind,
        lsn,
        append_ms,
        runs,
    })
}

/// Checks a whole record's checksum (`rec` is exactly `len` bytes).
pub fn crc_ok(h: &Header, rec: &[u8]) -> bool {
    rec.len() == h.len
        && rec
            .get(8..)
            .is_some_and(|body| crc32c::crc32c(body) == h.crc)
}

/// One run of a record, borrowed from the record bytes.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    pub stream: &'a str,
    pub base_seq: u64,
    pub count: u32,
    /// Offset of the run's first event within the record.
    pub events_at: usize,
    pub events: &'a [u8],
}

/// Iterate the runs of a checksum-verified record.
pub fn runs(rec: &[u8], n: u32) -> impl Iterator<Item = Result<Run<'_>, Decode>> {
    let mut r = Rd {
        b: rec,
        pos: HEADER_LEN,
    };
    let mut left = n;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left -= 1;
        let mut one = || -> Result<Run<'_>, Decode> {
            let sl = usize::from(u16::from_le_bytes(r.arr()?));
            let stream = r.str(sl)?;
            let base_seq = u64::from_le_bytes(r.arr()?);
            let count = u32::from_le_bytes(r.arr()?);
            let el = u32::from_le_bytes(r.arr()?) as usize;
            let events_at = r.pos;
            let events = r.take(el)?;
            Ok(Run {
                stream,
                base_seq,
                count,
                events_at,
                events,
            })
        };
        let res = one().map_err(|e| match e {
            // Inside a verified record, running out of bytes is corruption.
            Decode::Incomplete(_) => Decode::Bad("run extends past the record"),
            bad => bad,
        });
        if res.is_err() {
            left = 0;
        }
        Some(res)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ev<'a>(stream: &'a str, id: Option<&'a str>) -> EventView<'a> {
        EventView {
            stream,
            entity: Some("p1"),
            ty: "hit",
            ts: 42,
            kind: Kind::Counter,
            value: Some(Num::Int(-5)),
            id,
            data: Some("{\"a\":1}"),
        }
    }

    #[test]
    fn record_round_trip() {
        let mut buf = vec![9u8; 3]; // records are appended after existing bytes
        let mut rb = RecordBuilder::begin(&mut buf, 7, 1000);
        rb.begin_run(&mut buf, "s1", 10, 2);
        encode_event(&mut buf, &ev("s1", Some("a")));
        encode_event(&mut buf, &ev("s1", None));
        rb.end_run(&mut buf);
        rb.begin_run(&mut buf, "s2", 1, 1);
        encode_event(&mut buf, &ev("s2", None));
        rb.end_run(&mut buf);
        let len = rb.finish(&mut buf);
        let rec = &buf[3..];
        assert_eq!(rec.len(), len);
        let h = parse_header(rec).unwrap();
        assert_eq!((h.lsn, h.append_ms, h.runs, h.len), (7, 1000, 2, len));
        assert!(crc_ok(&h, rec));
        let runs: Vec<_> = runs(rec, h.runs).collect::<Result<_, _>>().unwrap();
        assert_eq!(runs[0].stream, "s1");
        assert_eq!((runs[0].base_seq, runs[0].count), (10, 2));
        let (e0, n0) = decode_event(runs[0].events, "s1").unwrap();
        assert_eq!(e0, ev("s1", Some("a")));
        let (e1, _) = decode_event(&runs[0].events[n0..], "s1").unwrap();
        assert_eq!(e1, ev("s1", None));
        assert_eq!(runs[1].stream, "s2");
        let mut bad = rec.to_vec();
        bad[40] ^= 1;
        assert!(!crc_ok(&h, &bad));
    }

    #[test]
    fn truncated_event_is_incomplete() {
        let mut b = Vec::new();
        encode_event(&mut b, &ev("s", Some("x")));
        for cut in 0..b.len() {
            assert!(matches!(
                decode_event(&b[..cut], "s"),
                Err(Decode::Incomplete(_))
            ));
        }
        assert!(decode_event(&b, "s").is_ok());
    }
}
