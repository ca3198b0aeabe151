//! Index files: where each stream's events lie in one sealed segment, written once when the
//! segment is sealed, fsynced, and read with `pread` (never loaded whole, except to verify
//! and fold them at start-up). In the spirit of Kafka's offset and time indexes, but for a
//! log shared by every stream: per stream, sparse *spans* of the segment (a span covers
//! consecutive runs of the stream that lie close together, see [`crate::index::memory`]), per
//! span a few *samples* (places inside the span where a walk to an event can start, see
//! [`crate::index::samples`]), and per stream a *node* linking to the stream's previous index
//! entries, so that memory keeps only the newest node of each stream (see
//! [`crate::index::chain`]).
//!
//! # Layout of `log/<first LSN, 20 digits>.idx` (all integers little-endian)
//!
//! ```text
//! header (80 bytes in version 1, 88 in version 2, 96 in version 3)
//!   0  [u8;4] magic "VXIX"
//!   4  u16    version: 3 (written); 1 and 2 are still read
//!   6  u16    0
//!   8  u64    segment: first LSN of the segment (its name)
//!  16  u64    next_lsn: the LSN after the segment's last record
//!  24  u64    log_len: bytes of the segment
//!  32  i64    min_append_ms  (i64::MAX for a segment without records)
//!  40  i64    max_append_ms  (i64::MIN likewise)
//!  48  u64    ids: events with an id in the segment (sizes the dedup rebuild)
//!  56  u32    entries
//!  60  u32    slots: a power of two ≥ 2 × entries (at least 1)
//!  64  u64    entries_len: bytes of the entries region
//!  72  u64    spans: number of spans
//!  80  u32    origins: rows of the origins table (versions 2 and 3)
//!  84  u32    resets: rows of the resets table (versions 2 and 3)
//!  88  u64    samples: number of samples (version 3)
//! slots (slots × 8 bytes): open addressing over xxh3-64 of the stream name, linear probing
//!   u32 tag      the hash's high 32 bits
//!   u32 entry    offset of the entry in the entries region + 1 (0: empty slot)
//! entries region: one entry per stream present in the segment (events or a tombstone)
//!   0  u16 name_len     8  u64 spans_at (index of its first span)   4 u32 spans_n
//!   2  u16 flags: 1 has events, 2 tombstone
//!  16  u64 first_seq   24 u64 last_seq    32 u64 count   40 u64 bytes (of its events)
//!  48  i64 min_ts      56 i64 max_ts      (own events; i64::MAX / i64::MIN without events)
//!  64  u64 floor       a tombstone's last seq (every seq ≤ floor is deleted), else 0
//!  72  u64 depth       1-based position of this node in the stream's chain (0: no events)
//!  80  ref parent     104 ref jump     128 ref jj (the jump's jump)
//!        a ref is u64 segment (0: none), u64 depth, u64 first_seq
//! 152  agg            i64 min_ts, i64 max_ts over the nodes (jump, this]
//! 168  agg jump_agg   the jump node's own agg
//! 184  name bytes
//! spans region (spans × 48 bytes in version 3, × 40 before), each stream's spans contiguous
//! and in seq order
//!   0  u64 first_seq   8 i64 min_ts   16 i64 max_ts
//!  24  u32 count       28 u32 off: offset in the segment of the stream's first run header
//!  32  u32 len: bytes from off to the end of the span's last run
//!  36  u32 rec_end: bytes from off to the end of that first run's record
//!  40  u32 samples_at: index of the span's first sample in the samples region (version 3)
//!  44  u32 samples_n: the span's samples (version 3)
//! samples region (version 3; samples × 16 bytes), each span's samples contiguous, in seq
//! order, in the order of the spans
//!   0  u32 seq − the span's first_seq (≥ 1: a span's start is never a sample)
//!   4  u32 off: segment offset of the stream's run header (left = 0) or of event seq
//!   8  u32 left: 0 at a run header, else events of the run from seq on (seq's included)
//!  12  u32 after: segment offset of the end of that run's record
//! tables (versions 2 and 3): origins × 16 bytes, then resets × 16 bytes (see [`tables`])
//! footer
//!   u32 crc32c of every byte before it
//! ```
//!
//! Every index file written is version 3, single-node or cluster (its tables then have 0
//! rows). Versions 1 (no tables: what a single-node log wrote before) and 2 (the tables) are
//! read as they are: their spans have no samples, so a walk in them starts at the span's start
//! as it did when they were written. Start-up does not rewrite them; they leave with their
//! segments (retention). [`with_version`] writes the same index in an older version (tests).

mod tables;

use crate::log::record::{Decode, Fields};
use crate::vfs::VFile;
use std::io;
pub use tables::Tables;

pub const MAGIC: [u8; 4] = *b"VXIX";
/// Version 1: no tables. Version 2: the origins and resets tables after the spans. Version 3
/// (what is written): spans with their samples, the samples region, the tables.
pub const VERSION_1: u16 = 1;
pub const VERSION_TABLES: u16 = 2;
pub const VERSION_SAMPLES: u16 = 3;
/// The version every new index file has.
pub const VERSION: u16 = VERSION_SAMPLES;
/// The header of a version 1 file; version 2 adds the two table sizes, version 3 the number
/// of samples.
pub const HEADER_LEN: usize = 80;
pub const HEADER_LEN_TABLES: usize = 88;
pub const HEADER_LEN_SAMPLES: usize = 96;
pub const ENTRY_FIXED: usize = 184;
/// A span in versions 1 and 2; version 3 adds `samples_at` and `samples_n`.
pub const SPAN_LEN: usize = 40;
pub const SPAN_LEN_SAMPLES: usize = 48;
/// A sample in the samples region (version 3).
pub const SAMPLE_LEN: usize = 16;
/// A span's samples are read whole up to this many, by binary search beyond. Readers' index
/// pages are cached (`crate::index::pages`): a binary search costs no `pread`s, and parses a
/// few samples where a whole read parses them all.
const SAMPLES_READ_WHOLE: u32 = 8;
const SLOT_LEN: usize = 8;

pub const F_EVENTS: u16 = 1;
pub const F_TOMBSTONE: u16 = 2;

/// A node of a stream's chain: its entry in one sealed segment's index file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeRef {
    /// First LSN of the segment; 0 means "no node" (LSNs start at 1).
    pub seg: u64,
    pub depth: u64,
    pub first_seq: u64,
}

impl NodeRef {
    pub fn is_none(&self) -> bool {
        self.seg == 0
    }
}

/// Min and max `ts` of some events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsRange {
    pub min_ts: i64,
    pub max_ts: i64,
}

impl TsRange {
    pub const EMPTY: TsRange = TsRange {
        min_ts: i64::MAX,
        max_ts: i64::MIN,
    };

    pub fn merge(self, o: TsRange) -> TsRange {
        TsRange {
            min_ts: self.min_ts.min(o.min_ts),
            max_ts: self.max_ts.max(o.max_ts),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.min_ts > self.max_ts
    }
}

/// Where some events of a stream lie in a segment: the runs of the stream from the run header
/// at `off` to `off + len`, with other streams' runs in between (see [`crate::index::memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first_seq: u64,
    pub min_ts: i64,
    pub max_ts: i64,
    pub count: u32,
    pub off: u32,
    pub len: u32,
    /// Bytes from `off` to the end of the first run's record.
    pub rec_end: u32,
    /// The span's samples: in an index file, its first one's index in the samples region; in
    /// memory, in its stream's active samples ([`crate::index::memory::StreamIdx::samples`]).
    /// Both 0 in a file of version 1 or 2.
    pub samples_at: u32,
    pub samples_n: u32,
}

impl Span {
    pub fn last_seq(&self) -> u64 {
        self.first_seq + u64::from(self.count).saturating_sub(1)
    }

    /// The span's end offset in the segment.
    pub fn end(&self) -> u64 {
        u64::from(self.off) + u64::from(self.len)
    }

    /// Whether `s` can be a sample of this span: after its start, inside it.
    pub fn holds_sample(&self, s: &Sample) -> bool {
        s.seq > self.first_seq
            && s.seq <= self.last_seq()
            && s.off > self.off
            && u64::from(s.off) < self.end()
            && s.after > s.off
    }

    fn write(&self, out: &mut Vec<u8>, version: u16) {
        out.extend_from_slice(&self.first_seq.to_le_bytes());
        out.extend_from_slice(&self.min_ts.to_le_bytes());
        out.extend_from_slice(&self.max_ts.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.off.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.rec_end.to_le_bytes());
        if version >= VERSION_SAMPLES {
            out.extend_from_slice(&self.samples_at.to_le_bytes());
            out.extend_from_slice(&self.samples_n.to_le_bytes());
        }
    }

    fn parse(b: &[u8], version: u16) -> Result<Span, Decode> {
        let mut r = Fields::new(b);
        let mut s = Span {
            first_seq: r.u64()?,
            min_ts: r.i64()?,
            max_ts: r.i64()?,
            count: r.u32()?,
            off: r.u32()?,
            len: r.u32()?,
            rec_end: r.u32()?,
            samples_at: 0,
            samples_n: 0,
        };
        if version >= VERSION_SAMPLES {
            s.samples_at = r.u32()?;
            s.samples_n = r.u32()?;
        }
        Ok(s)
    }
}

/// A place inside a span where a walk to an event can start, other than the span's start
/// (see [`crate::index::samples`] for where they are taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The event at `off` (`left > 0`), or the first event of the run whose header is at
    /// `off` (`left == 0`).
    pub seq: u64,
    /// Offset in the segment.
    pub off: u32,
    /// 0: `off` is a run header of the stream. Else `off` is the start of event `seq` inside
    /// a run, and `left` events of that run remain from it on (it included).
    pub left: u32,
    /// Offset in the segment of the end of that run's record (where the next record starts).
    pub after: u32,
}

impl Sample {
    fn write(&self, out: &mut Vec<u8>, span_first: u64) {
        let delta = u32::try_from(self.seq - span_first).unwrap_or(u32::MAX);
        out.extend_from_slice(&delta.to_le_bytes());
        out.extend_from_slice(&self.off.to_le_bytes());
        out.extend_from_slice(&self.left.to_le_bytes());
        out.extend_from_slice(&self.after.to_le_bytes());
    }

    fn parse(b: &[u8], span_first: u64) -> Result<Sample, Decode> {
        let mut r = Fields::new(b);
        Ok(Sample {
            seq: span_first + u64::from(r.u32()?),
            off: r.u32()?,
            left: r.u32()?,
            after: r.u32()?,
        })
    }
}

/// One stream's entry in a sealed segment's index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub flags: u16,
    pub spans_at: u64,
    pub spans_n: u32,
    pub first_seq: u64,
    pub last_seq: u64,
    pub count: u64,
    pub bytes: u64,
    pub own: Option<TsRange>,
    pub floor: u64,
    pub depth: u64,
    pub parent: NodeRef,
    pub jump: NodeRef,
    pub jj: NodeRef,
    pub agg: Option<TsRange>,
    pub jump_agg: Option<TsRange>,
}

impl Entry {
    pub fn has_events(&self) -> bool {
        self.flags & F_EVENTS != 0
    }

    pub fn is_tombstone(&self) -> bool {
        self.flags & F_TOMBSTONE != 0
    }

    /// This entry as a node reference (for a segment `seg`).
    pub fn node(&self, seg: u64) -> NodeRef {
        NodeRef {
            seg,
            depth: self.depth,
            first_seq: self.first_seq,
        }
    }
}

fn put_ref(out: &mut Vec<u8>, r: &NodeRef) {
    out.extend_from_slice(&r.seg.to_le_bytes());
    out.extend_from_slice(&r.depth.to_le_bytes());
    out.extend_from_slice(&r.first_seq.to_le_bytes());
}

fn put_agg(out: &mut Vec<u8>, a: Option<TsRange>) {
    let a = a.unwrap_or(TsRange::EMPTY);
    out.extend_from_slice(&a.min_ts.to_le_bytes());
    out.extend_from_slice(&a.max_ts.to_le_bytes());
}

fn get_ref(r: &mut Fields<'_>) -> Result<NodeRef, Decode> {
    Ok(NodeRef {
        seg: r.u64()?,
        depth: r.u64()?,
        first_seq: r.u64()?,
    })
}

fn get_agg(r: &mut Fields<'_>) -> Result<Option<TsRange>, Decode> {
    let a = TsRange {
        min_ts: r.i64()?,
        max_ts: r.i64()?,
    };
    Ok((!a.is_empty()).then_some(a))
}

fn name_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

/// What an index file says about its segment as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdxHeader {
    pub version: u16,
    pub segment: u64,
    pub next_lsn: u64,
    pub log_len: u64,
    pub min_append_ms: i64,
    pub max_append_ms: i64,
    pub ids: u64,
    pub entries: u32,
    pub slots: u32,
    pub entries_len: u64,
    pub spans: u64,
    /// Rows of the origins and resets tables (0 in version 1).
    pub origins: u32,
    pub resets: u32,
    /// Samples (0 before version 3).
    pub samples: u64,
}

impl IdxHeader {
    fn header_len(&self) -> u64 {
        match self.version {
            VERSION_1 => HEADER_LEN as u64,
            VERSION_TABLES => HEADER_LEN_TABLES as u64,
            _ => HEADER_LEN_SAMPLES as u64,
        }
    }

    /// Bytes of one span in this version.
    pub fn span_len(&self) -> u64 {
        if self.version >= VERSION_SAMPLES {
            SPAN_LEN_SAMPLES as u64
        } else {
            SPAN_LEN as u64
        }
    }

    fn slots_at(&self) -> u64 {
        self.header_len()
    }

    fn entries_at(&self) -> u64 {
        self.slots_at() + u64::from(self.slots) * SLOT_LEN as u64
    }

    fn spans_at(&self) -> u64 {
        self.entries_at() + self.entries_len
    }

    fn samples_at(&self) -> u64 {
        self.spans_at() + self.spans * self.span_len()
    }

    fn tables_at(&self) -> u64 {
        self.samples_at() + self.samples * SAMPLE_LEN as u64
    }

    fn tables_len(&self) -> u64 {
        (u64::from(self.origins) + u64::from(self.resets)) * tables::ROW_LEN as u64
    }

    /// Bytes of the whole file, footer included.
    pub fn file_len(&self) -> u64 {
        self.tables_at() + self.tables_len() + 4
    }

    fn parse(b: &[u8]) -> Result<IdxHeader, Decode> {
        let mut r = Fields::new(b);
        if r.arr::<4>()? != MAGIC {
            return Err(Decode::Bad("not an index file"));
        }
        let version = r.u16()?;
        if !(VERSION_1..=VERSION_SAMPLES).contains(&version) {
            return Err(Decode::Bad("unknown index file version"));
        }
        r.u16()?;
        let mut h = IdxHeader {
            version,
            segment: r.u64()?,
            next_lsn: r.u64()?,
            log_len: r.u64()?,
            min_append_ms: r.i64()?,
            max_append_ms: r.i64()?,
            ids: r.u64()?,
            entries: r.u32()?,
            slots: r.u32()?,
            entries_len: r.u64()?,
            spans: r.u64()?,
            origins: 0,
            resets: 0,
            samples: 0,
        };
        if version >= VERSION_TABLES {
            h.origins = r.u32()?;
            h.resets = r.u32()?;
        }
        if version >= VERSION_SAMPLES {
            h.samples = r.u64()?;
        }
        if !h.slots.is_power_of_two() || u64::from(h.slots) < u64::from(h.entries) {
            return Err(Decode::Bad("index slot table is too small"));
        }
        // Sizes a corrupt header could make overflow the offsets.
        if h.entries_len > 1 << 40 || h.spans > 1 << 40 || h.samples > 1 << 40 {
            return Err(Decode::Bad("index region sizes out of range"));
        }
        Ok(h)
    }
}

/// Builds one index file in memory (the writer knows the segment's streams at seal time).
pub struct IdxBuilder {
    entries: Vec<u8>,
    /// (hash, offset in the entries region) per entry.
    offsets: Vec<(u64, u32)>,
    /// Every span, its samples' place rebased onto the samples region.
    spans: Vec<Span>,
    /// The samples region's bytes.
    samples: Vec<u8>,
    sample_count: u64,
}

impl Default for IdxBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl IdxBuilder {
    pub fn new() -> Self {
        IdxBuilder {
            entries: Vec::new(),
            offsets: Vec::new(),
            spans: Vec::new(),
            samples: Vec::new(),
            sample_count: 0,
        }
    }

    /// Add one stream's entry with its spans (`e.spans_at`/`spans_n` are filled in here) and
    /// their samples: each span's `samples_at`/`samples_n` say which of `samples` are its
    /// own (in seq order). A sample that does not lie inside its span is left out (it would
    /// only be a bug's; a walk from the span's start needs none).
    pub fn add(&mut self, e: &Entry, spans: &[Span], samples: &[Sample]) -> io::Result<()> {
        let off = u32::try_from(self.entries.len())
            .map_err(|_| io::Error::other("index file entries over 4 GiB"))?;
        let name_len = u16::try_from(e.name.len())
            .map_err(|_| io::Error::other("stream name too long for the index"))?;
        let spans_n = u32::try_from(spans.len())
            .map_err(|_| io::Error::other("too many spans for one stream"))?;
        self.offsets.push((name_hash(&e.name), off));
        let spans_at = self.spans.len() as u64;
        let out = &mut self.entries;
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(&e.flags.to_le_bytes());
        out.extend_from_slice(&spans_n.to_le_bytes());
        out.extend_from_slice(&spans_at.to_le_bytes());
        for v in [e.first_seq, e.last_seq, e.count, e.bytes] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        put_agg(out, e.own);
        out.extend_from_slice(&e.floor.to_le_bytes());
        out.extend_from_slice(&e.depth.to_le_bytes());
        put_ref(out, &e.parent);
        put_ref(out, &e.jump);
        put_ref(out, &e.jj);
        put_agg(out, e.agg);
        put_agg(out, e.jump_agg);
        out.extend_from_slice(e.name.as_bytes());
        let too_many = || io::Error::other("too many samples in one index file");
        for s in spans {
            let at = s.samples_at as usize;
            let own = samples
                .get(at..at.saturating_add(s.samples_n as usize))
                .unwrap_or_default();
            let mut span = *s;
            span.samples_at = u32::try_from(self.sample_count).map_err(|_| too_many())?;
            span.samples_n = 0;
            let mut prev = s.first_seq;
            for x in own {
                if !s.holds_sample(x) || x.seq <= prev {
                    debug_assert!(false, "sample {x:?} outside its span {s:?}");
                    continue;
                }
                prev = x.seq;
                x.write(&mut self.samples, s.first_seq);
                span.samples_n += 1;
            }
            self.sample_count += u64::from(span.samples_n);
            u32::try_from(self.sample_count).map_err(|_| too_many())?;
            self.spans.push(span);
        }
        Ok(())
    }

    /// The finished file's bytes, without tables.
    pub fn finish(self, seg: &SegSummary) -> io::Result<Vec<u8>> {
        self.finish_with(seg, &Tables::default())
    }

    /// The finished file's bytes (version 3).
    pub fn finish_with(self, seg: &SegSummary, tables: &Tables) -> io::Result<Vec<u8>> {
        self.finish_as(seg, tables, VERSION)
    }

    /// The finished file's bytes in `version`: 1 (no tables: they must be empty), 2 (tables)
    /// or 3 (samples and tables). Versions 1 and 2 leave the samples out. Only tests and
    /// [`with_version`] write the older ones.
    pub fn finish_as(self, seg: &SegSummary, tables: &Tables, version: u16) -> io::Result<Vec<u8>> {
        if !(VERSION_1..=VERSION_SAMPLES).contains(&version) {
            return Err(io::Error::other("unknown index file version"));
        }
        if version == VERSION_1 && !tables.is_empty() {
            return Err(io::Error::other("a version 1 index file has no tables"));
        }
        let entries = u32::try_from(self.offsets.len())
            .map_err(|_| io::Error::other("too many index entries"))?;
        let slots = (u32::try_from(self.offsets.len() * 2).unwrap_or(u32::MAX))
            .max(1)
            .checked_next_power_of_two()
            .ok_or_else(|| io::Error::other("index slot table too large"))?;
        let mut table = vec![0u8; slots as usize * SLOT_LEN];
        let mask = u64::from(slots - 1);
        for &(h, off) in &self.offsets {
            let mut i = usize::try_from(h & mask).unwrap_or(0);
            loop {
                let at = i * SLOT_LEN;
                if table[at + 4..at + 8] == [0; 4] {
                    table[at..at + 4].copy_from_slice(&((h >> 32) as u32).to_le_bytes());
                    table[at + 4..at + 8].copy_from_slice(&(off + 1).to_le_bytes());
                    break;
                }
                i = (i + 1) & (slots as usize - 1);
            }
        }
        let too_many = || io::Error::other("too many rows in the index tables");
        let origins = u32::try_from(tables.origins.len()).map_err(|_| too_many())?;
        let resets = u32::try_from(tables.resets.len()).map_err(|_| too_many())?;
        let with_samples = version >= VERSION_SAMPLES;
        let span_len = if with_samples {
            SPAN_LEN_SAMPLES
        } else {
            SPAN_LEN
        };
        let mut out = Vec::with_capacity(
            HEADER_LEN_SAMPLES
                + table.len()
                + self.entries.len()
                + self.spans.len() * span_len
                + if with_samples { self.samples.len() } else { 0 }
                + (tables.origins.len() + tables.resets.len()) * tables::ROW_LEN
                + 4,
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&seg.segment.to_le_bytes());
        out.extend_from_slice(&seg.next_lsn.to_le_bytes());
        out.extend_from_slice(&seg.log_len.to_le_bytes());
        out.extend_from_slice(&seg.min_append_ms.to_le_bytes());
        out.extend_from_slice(&seg.max_append_ms.to_le_bytes());
        out.extend_from_slice(&seg.ids.to_le_bytes());
        out.extend_from_slice(&entries.to_le_bytes());
        out.extend_from_slice(&slots.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.spans.len() as u64).to_le_bytes());
        if version >= VERSION_TABLES {
            out.extend_from_slice(&origins.to_le_bytes());
            out.extend_from_slice(&resets.to_le_bytes());
        }
        if with_samples {
            out.extend_from_slice(&self.sample_count.to_le_bytes());
        }
        out.extend_from_slice(&table);
        out.extend_from_slice(&self.entries);
        for s in &self.spans {
            s.write(&mut out, version);
        }
        if with_samples {
            out.extend_from_slice(&self.samples);
        }
        tables.write(&mut out);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }
}

/// The index file `bytes` (verified as [`IdxContents::read`] does) written again in `version`
/// (1 or 2 leave the samples out; 1 needs empty tables): what an index file of an older
/// version would hold for the same segment. For tests of old files and for tools.
pub fn with_version(bytes: &[u8], version: u16) -> io::Result<Vec<u8>> {
    let c = IdxContents::from_bytes(bytes.to_vec())?;
    let h = c.header;
    let mut b = IdxBuilder::new();
    for e in c.entries()? {
        let spans = c.spans(&e)?;
        let mut samples = Vec::new();
        let mut own = Vec::with_capacity(spans.len());
        for s in &spans {
            let mut s2 = *s;
            s2.samples_at = u32::try_from(samples.len()).map_err(io::Error::other)?;
            samples.extend(c.samples(s)?);
            own.push(s2);
        }
        b.add(&e, &own, &samples)?;
    }
    let seg = SegSummary {
        segment: h.segment,
        next_lsn: h.next_lsn,
        log_len: h.log_len,
        min_append_ms: h.min_append_ms,
        max_append_ms: h.max_append_ms,
        ids: h.ids,
    };
    b.finish_as(&seg, &c.tables()?, version)
}

/// What the index header records about the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegSummary {
    pub segment: u64,
    pub next_lsn: u64,
    pub log_len: u64,
    pub min_append_ms: i64,
    pub max_append_ms: i64,
    pub ids: u64,
}

fn bad(e: Decode) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        match e {
            Decode::Bad(w) => w.to_string(),
            Decode::Incomplete(_) => "index file is truncated".to_string(),
        },
    )
}

fn parse_entry(b: &[u8]) -> Result<(Entry, usize), Decode> {
    let mut r = Fields::new(b);
    let name_len = usize::from(r.u16()?);
    let flags = r.u16()?;
    let spans_n = r.u32()?;
    let spans_at = r.u64()?;
    let first_seq = r.u64()?;
    let last_seq = r.u64()?;
    let count = r.u64()?;
    let bytes = r.u64()?;
    let own = get_agg(&mut r)?;
    let floor = r.u64()?;
    let depth = r.u64()?;
    let parent = get_ref(&mut r)?;
    let jump = get_ref(&mut r)?;
    let jj = get_ref(&mut r)?;
    let agg = get_agg(&mut r)?;
    let jump_agg = get_agg(&mut r)?;
    let name = r.str(name_len)?.to_string();
    Ok((
        Entry {
            name,
            flags,
            spans_at,
            spans_n,
            first_seq,
            last_seq,
            count,
            bytes,
            own,
            floor,
            depth,
            parent,
            jump,
            jj,
            agg,
            jump_agg,
        },
        r.pos(),
    ))
}

/// A verified index file read whole (start-up folds every one of them).
pub struct IdxContents {
    pub header: IdxHeader,
    bytes: Vec<u8>,
}

impl IdxContents {
    /// Read, check the checksum and the header. `Err` names what is wrong.
    pub fn read(file: &dyn VFile) -> io::Result<IdxContents> {
        Self::from_bytes(file.read_all()?)
    }

    /// An index file's bytes, checked as [`IdxContents::read`] checks them.
    pub fn from_bytes(bytes: Vec<u8>) -> io::Result<IdxContents> {
        let body_len = bytes
            .len()
            .checked_sub(4)
            .ok_or_else(|| bad(Decode::Bad("index file is truncated")))?;
        let crc = u32::from_le_bytes(
            bytes[body_len..]
                .try_into()
                .map_err(|_| bad(Decode::Bad("index file is truncated")))?,
        );
        if crc32c::crc32c(&bytes[..body_len]) != crc {
            return Err(bad(Decode::Bad("index file checksum mismatch")));
        }
        let header = IdxHeader::parse(&bytes).map_err(bad)?;
        if header.file_len() != bytes.len() as u64 {
            return Err(bad(Decode::Bad(
                "index file length does not match its header",
            )));
        }
        Ok(IdxContents { header, bytes })
    }

    /// The header of an index file's bytes (as just built).
    pub fn header_of(bytes: &[u8]) -> io::Result<IdxHeader> {
        IdxHeader::parse(bytes).map_err(bad)
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let at = usize::try_from(self.header.entries_at()).map_err(io::Error::other)?;
        let len = usize::try_from(self.header.entries_len).map_err(io::Error::other)?;
        let region = self
            .bytes
            .get(at..at + len)
            .ok_or_else(|| bad(Decode::Bad("index entries past the end")))?;
        let mut out = Vec::with_capacity(self.header.entries as usize);
        let mut pos = 0;
        while pos < region.len() {
            let (e, n) = parse_entry(&region[pos..]).map_err(bad)?;
            out.push(e);
            pos += n;
        }
        if out.len() != self.header.entries as usize {
            return Err(bad(Decode::Bad(
                "index entry count does not match its header",
            )));
        }
        Ok(out)
    }

    /// The origins and resets tables (empty in a version 1 file).
    pub fn tables(&self) -> io::Result<Tables> {
        let at = usize::try_from(self.header.tables_at()).map_err(io::Error::other)?;
        let len = usize::try_from(self.header.tables_len()).map_err(io::Error::other)?;
        let region = self
            .bytes
            .get(at..at + len)
            .ok_or_else(|| bad(Decode::Bad("index tables past the end")))?;
        Tables::parse(region, self.header.origins, self.header.resets).map_err(bad)
    }

    /// The spans of one entry.
    pub fn spans(&self, e: &Entry) -> io::Result<Vec<Span>> {
        let span_len = self.header.span_len();
        let base = self.header.spans_at() + e.spans_at * span_len;
        if e.spans_at.saturating_add(u64::from(e.spans_n)) > self.header.spans {
            return Err(bad(Decode::Bad("span past the end")));
        }
        let mut out = Vec::with_capacity(e.spans_n as usize);
        for i in 0..u64::from(e.spans_n) {
            let at = usize::try_from(base + i * span_len).map_err(io::Error::other)?;
            let b = self
                .bytes
                .get(at..at + span_len as usize)
                .ok_or_else(|| bad(Decode::Bad("span past the end")))?;
            out.push(Span::parse(b, self.header.version).map_err(bad)?);
        }
        Ok(out)
    }

    /// The samples of one span (none before version 3).
    pub fn samples(&self, span: &Span) -> io::Result<Vec<Sample>> {
        if span.samples_n == 0 {
            return Ok(Vec::new());
        }
        let end = u64::from(span.samples_at) + u64::from(span.samples_n);
        if end > self.header.samples {
            return Err(bad(Decode::Bad("sample past the end")));
        }
        let at = usize::try_from(
            self.header.samples_at() + u64::from(span.samples_at) * SAMPLE_LEN as u64,
        )
        .map_err(io::Error::other)?;
        let len = span.samples_n as usize * SAMPLE_LEN;
        let region = self
            .bytes
            .get(at..at + len)
            .ok_or_else(|| bad(Decode::Bad("sample past the end")))?;
        region
            .chunks_exact(SAMPLE_LEN)
            .map(|c| Sample::parse(c, span.first_seq).map_err(bad))
            .collect()
    }
}

/// Read the header of an index file (80, 88 or 96 bytes, as its version says).
pub fn read_header(file: &dyn VFile) -> io::Result<IdxHeader> {
    let mut b = [0u8; HEADER_LEN_SAMPLES];
    let n = file.read_full_at(&mut b, 0)?;
    let b = b.get(..n).unwrap_or_default();
    IdxHeader::parse(b).map_err(bad)
}

/// Find a stream's entry with a few `pread`s (probe the slot table, then read the entry).
pub fn lookup(file: &dyn VFile, h: &IdxHeader, name: &str) -> io::Result<Option<Entry>> {
    let hash = name_hash(name);
    let tag = (hash >> 32) as u32;
    let slots = u64::from(h.slots);
    let mut i = hash & (slots - 1);
    let mut probes = 0u64;
    // Slots are read 8 at a time: most lookups need one read.
    let mut block = [0u8; 8 * SLOT_LEN];
    let mut block_at = u64::MAX;
    while probes < slots {
        let blk = i / 8;
        if blk != block_at {
            let n = (slots - blk * 8).min(8) as usize * SLOT_LEN;
            file.read_exact_at(&mut block[..n], h.slots_at() + blk * 8 * SLOT_LEN as u64)?;
            block_at = blk;
        }
        let at = (i % 8) as usize * SLOT_LEN;
        let mut slot = Fields::at(&block, at);
        let (slot_tag, off) = (slot.u32().map_err(bad)?, slot.u32().map_err(bad)?);
        if off == 0 {
            return Ok(None);
        }
        if slot_tag == tag {
            let mut buf = vec![0u8; ENTRY_FIXED + name.len()];
            let n = file.read_full_at(&mut buf, h.entries_at() + u64::from(off - 1))?;
            if let Ok((e, _)) = parse_entry(&buf[..n])
                && e.name == name
            {
                return Ok(Some(e));
            }
        }
        i = (i + 1) & (slots - 1);
        probes += 1;
    }
    Ok(None)
}

/// Read `n` spans of an entry starting at its `i`-th.
pub fn read_spans(
    file: &dyn VFile,
    h: &IdxHeader,
    e: &Entry,
    i: u32,
    n: u32,
) -> io::Result<Vec<Span>> {
    let n = n.min(e.spans_n.saturating_sub(i));
    let span_len = h.span_len();
    let mut buf = vec![0u8; n as usize * span_len as usize];
    let at = h.spans_at() + (e.spans_at + u64::from(i)) * span_len;
    file.read_exact_at(&mut buf, at)?;
    buf.chunks_exact(span_len as usize)
        .map(|c| Span::parse(c, h.version).map_err(bad))
        .collect()
}

/// Read `n` samples of `span` starting at its `i`-th.
pub fn read_samples(
    file: &dyn VFile,
    h: &IdxHeader,
    span: &Span,
    i: u32,
    n: u32,
) -> io::Result<Vec<Sample>> {
    let n = n.min(span.samples_n.saturating_sub(i));
    if n == 0 || h.version < VERSION_SAMPLES {
        return Ok(Vec::new());
    }
    let first = u64::from(span.samples_at) + u64::from(i);
    if first + u64::from(n) > h.samples {
        return Err(bad(Decode::Bad("sample past the end")));
    }
    let mut buf = vec![0u8; n as usize * SAMPLE_LEN];
    file.read_exact_at(&mut buf, h.samples_at() + first * SAMPLE_LEN as u64)?;
    buf.chunks_exact(SAMPLE_LEN)
        .map(|c| Sample::parse(c, span.first_seq).map_err(bad))
        .collect()
}

/// The sample of `span` a walk to `seq` starts from: the one with the greatest seq ≤ `seq`
/// (`None`: start at the span's start). One read of the span's samples when it has at most
/// 8, else a binary search reading one sample a step.
pub fn best_sample(
    file: &dyn VFile,
    h: &IdxHeader,
    span: &Span,
    seq: u64,
) -> io::Result<Option<Sample>> {
    if h.version < VERSION_SAMPLES || span.samples_n == 0 || seq <= span.first_seq {
        return Ok(None);
    }
    if span.samples_n <= SAMPLES_READ_WHOLE {
        let all = read_samples(file, h, span, 0, span.samples_n)?;
        let i = all.partition_point(|s| s.seq <= seq);
        return Ok(i.checked_sub(1).and_then(|i| all.get(i).copied()));
    }
    let (mut lo, mut hi) = (0u32, span.samples_n);
    let mut best = None;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let s = read_samples(file, h, span, mid, 1)?;
        match s.first() {
            Some(s) if s.seq <= seq => {
                best = Some(*s);
                lo = mid + 1;
            }
            _ => hi = mid,
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests;
