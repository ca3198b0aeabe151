//! The packed in-memory representation of a request's events (SPEC §2 "Representation").
//!
//! A [`Batch`] holds one request: a fixed 32-byte [`PackedHeader`] per event, a byte arena
//! with the variable parts (`id`, `data`), and a batch-local symbol table that interns
//! stream, entity and type names. Arena offsets are implicit (events' variable parts follow
//! each other in order), and `seq` is implicit too: the storage engine assigns it.
//!
//! Interning is per batch: the table is dropped with the batch, so it can never grow with the
//! number of streams or entities the service has seen. On disk, strings are inline.

use crate::event::{EventView, Kind, Num};
use hashbrown::HashTable;

/// An interned name, an index into the batch's symbol table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(pub u32);

impl Sym {
    /// "No entity".
    pub const NONE: Sym = Sym(u32::MAX);
}

/// `flags` bits of a [`PackedHeader`].
pub mod flags {
    pub const HAS_VALUE: u8 = 1;
    /// `value` holds f64 bits rather than an i64.
    pub const VALUE_FLOAT: u8 = 2;
    pub const HAS_ID: u8 = 4;
    pub const HAS_DATA: u8 = 8;
}

/// The fixed header of one packed event: 32 bytes, asserted by a test.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PackedHeader {
    pub ts: i64,
    /// i64 or f64 bits, see [`flags::VALUE_FLOAT`].
    pub value: u64,
    pub stream: Sym,
    pub entity: Sym,
    pub ty: Sym,
    pub kind: Kind,
    pub flags: u8,
    _pad: [u8; 2],
}

impl PackedHeader {
    pub fn value(&self) -> Option<Num> {
        if self.flags & flags::HAS_VALUE == 0 {
            None
        } else if self.flags & flags::VALUE_FLOAT != 0 {
            Some(Num::Float(f64::from_bits(self.value)))
        } else {
            Some(Num::Int(self.value as i64))
        }
    }
}

/// Per-stream totals of a batch, in first-appearance order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamCount {
    pub stream: Sym,
    pub events: u32,
}

/// One request's events, packed. See the module docs.
#[derive(Default)]
pub struct Batch {
    headers: Vec<PackedHeader>,
    arena: Vec<u8>,
    /// Interned names: `names[start..start+len]` for each symbol.
    names: String,
    spans: Vec<(u32, u32)>,
    lookup: HashTable<u32>,
    hasher: foldhash::fast::FixedState,
    /// For each symbol, the index into `streams` if it is a stream name.
    stream_slot: Vec<u32>,
    streams: Vec<StreamCount>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("events", &self.headers.len())
            .field("streams", &self.streams.len())
            .field("bytes", &self.mem_bytes())
            .finish()
    }
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.headers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.headers.is_empty()
    }

    /// Bytes this batch occupies in memory (headers, arena, names): what budgets count.
    pub fn mem_bytes(&self) -> usize {
        self.headers.len() * std::mem::size_of::<PackedHeader>()
            + self.arena.len()
            + self.names.len()
            + self.spans.len() * 8
    }

    pub fn headers(&self) -> &[PackedHeader] {
        &self.headers
    }

    /// The distinct streams of the batch with their event counts, in first-appearance order.
    pub fn streams(&self) -> &[StreamCount] {
        &self.streams
    }

    /// Position of a stream symbol in [`Batch::streams`].
    pub fn stream_slot(&self, sym: Sym) -> Option<usize> {
        match self.stream_slot.get(sym.0 as usize) {
            Some(&slot) if slot != u32::MAX => Some(slot as usize),
            _ => None,
        }
    }

    pub fn name(&self, sym: Sym) -> &str {
        match self.spans.get(sym.0 as usize) {
            Some(&(start, len)) => self
                .names
                .get(start as usize..(start + len) as usize)
                .unwrap_or(""),
            None => "",
        }
    }

    /// Intern `s` in this batch's symbol table.
    pub fn intern(&mut self, s: &str) -> Sym {
        let hash = std::hash::BuildHasher::hash_one(&self.hasher, s);
        let names = &self.names;
        let spans = &self.spans;
        let found = self.lookup.find(hash, |&i| {
            let (start, len) = spans[i as usize];
            &names[start as usize..(start + len) as usize] == s
        });
        if let Some(&i) = found {
            return Sym(i);
        }
        let i = self.spans.len() as u32;
        self.spans.push((self.names.len() as u32, s.len() as u32));
        self.names.push_str(s);
        self.stream_slot.push(u32::MAX);
        let hasher = &self.hasher;
        let names = &self.names;
        let spans = &self.spans;
        self.lookup.insert_unique(hash, i, |&j| {
            let (start, len) = spans[j as usize];
            std::hash::BuildHasher::hash_one(hasher, &names[start as usize..(start + len) as usize])
        });
        Sym(i)
    }

    /// Append one validated event. The caller (a decoder) has checked every rule of SPEC §2.
    pub fn push(&mut self, ev: &EventView<'_>) {
        let stream = self.intern(ev.stream);
        let entity = match ev.entity {
            Some(e) if !e.is_empty() => self.intern(e),
            _ => Sym::NONE,
        };
        let ty = self.intern(ev.ty);
        let mut fl = 0u8;
        let value = match ev.value {
            None => 0,
            Some(Num::Int(i)) => {
                fl |= flags::HAS_VALUE;
                i as u64
            }
            Some(Num::Float(f)) => {
                fl |= flags::HAS_VALUE | flags::VALUE_FLOAT;
                f.to_bits()
            }
        };
        if let Some(id) = ev.id {
            fl |= flags::HAS_ID;
            // ids are ≤ 128 bytes (validated), so one length byte suffices.
            self.arena.push(id.len().min(255) as u8);
            self.arena
                .extend_from_slice(&id.as_bytes()[..id.len().min(255)]);
        }
        if let Some(data) = ev.data {
            fl |= flags::HAS_DATA;
            self.arena
                .extend_from_slice(&(data.len() as u32).to_le_bytes());
            self.arena.extend_from_slice(data.as_bytes());
        }
        self.headers.push(PackedHeader {
            ts: ev.ts,
            value,
            stream,
            entity,
            ty,
            kind: ev.kind,
            flags: fl,
            _pad: [0; 2],
        });
        let slot = &mut self.stream_slot[stream.0 as usize];
        if *slot == u32::MAX {
            *slot = self.streams.len() as u32;
            self.streams.push(StreamCount { stream, events: 0 });
        }
        if let Some(sc) = self.streams.get_mut(*slot as usize) {
            sc.events += 1;
        }
    }

    /// The events in order, as borrowed views.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            batch: self,
            next: 0,
            pos: 0,
        }
    }
}

/// Iterator over a batch's events; walks the arena since offsets are implicit.
pub struct BatchIter<'a> {
    batch: &'a Batch,
    next: usize,
    pos: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = EventView<'a>;

    fn next(&mut self) -> Option<EventView<'a>> {
        let b = self.batch;
        let h = b.headers.get(self.next)?;
        self.next += 1;
        let arena = &b.arena;
        let mut id = None;
        if h.flags & flags::HAS_ID != 0 {
            let len = usize::from(*arena.get(self.pos)?);
            let bytes = arena.get(self.pos + 1..self.pos + 1 + len)?;
            id = std::str::from_utf8(bytes).ok();
            self.pos += 1 + len;
        }
        let mut data = None;
        if h.flags & flags::HAS_DATA != 0 {
            let len_bytes: [u8; 4] = arena.get(self.pos..self.pos + 4)?.try_into().ok()?;
            let len = u32::from_le_bytes(len_bytes) as usize;
            let bytes = arena.get(self.pos + 4..self.pos + 4 + len)?;
            data = std::str::from_utf8(bytes).ok();
            self.pos += 4 + len;
        }
        Some(EventView {
            stream: b.name(h.stream),
            entity: if h.entity == Sym::NONE {
                None
            } else {
                Some(b.name(h.entity))
            },
            ty: b.name(h.ty),
            ts: h.ts,
            kind: h.kind,
            value: h.value(),
            id,
            data,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.batch.headers.len() - self.next;
        (n, Some(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_at_most_32_bytes() {
        assert!(std::mem::size_of::<PackedHeader>() <= 32);
        assert_eq!(std::mem::size_of::<PackedHeader>(), 32);
        assert_eq!(std::mem::size_of::<Kind>(), 1);
    }

    #[test]
    fn round_trip_and_interning() {
        let mut b = Batch::new();
        let e1 = EventView {
            stream: "s1",
            entity: Some("p7"),
            ty: "damage",
            ts: 5,
            kind: Kind::Counter,
            value: Some(Num::Int(-3)),
            id: Some("a"),
            data: Some(r#"{"w":"bow"}"#),
        };
        let e2 = EventView {
            stream: "s2",
            entity: None,
            ty: "damage",
            ts: 6,
            kind: Kind::Gauge,
            value: Some(Num::Float(1.5)),
            id: None,
            data: None,
        };
        b.push(&e1);
        b.push(&e2);
        b.push(&e1);
        let got: Vec<_> = b.iter().collect();
        assert_eq!(got, vec![e1, e2, e1]);
        assert_eq!(
            b.streams(),
            &[
                StreamCount {
                    stream: Sym(0),
                    events: 2
                },
                StreamCount {
                    stream: Sym(3),
                    events: 1
                },
            ]
        );
        assert_eq!(b.name(Sym(0)), "s1");
        // "damage" is interned once.
        assert_eq!(b.headers()[0].ty, b.headers()[1].ty);
    }
}
