//! Replay cursors: read one stream's events in `seq` order straight from the log segments
//! (`pread`), with a bounded buffer (a window of the current span, never the whole range).
//!
//! A cursor finds the span holding the next `seq` in the active segment's spans in memory, or
//! else through the stream's chain of sealed nodes ([`crate::index::chain::locate`], O(log n) index
//! reads) and a binary search of that node's spans in its index file. Reading a span starts at
//! the stream's run header; after that run it jumps to the end of its record and then walks
//! whole records, skipping other streams' runs, to the span's end.
//!
//! A walk to a seq past its span's first (`from=N` inside a span) starts instead at the span's
//! best *sample* (the greatest sampled seq ≤ N: a run header of the stream, or an event inside
//! a run, see [`crate::index::samples`]), from memory for the active segment or from the index
//! file (version 3) for a sealed one; for a short read (≤ 32 events) with a smaller first read
//! ([`short_read`]: the events it needs at the span's mean size, at most [`SAMPLE_READ`]): a
//! read of one event reads at most a few KiB wherever it is in the span. A walk
//! from the span's start (a replay that reaches the span in order, or any later span of a
//! page) is as it always was.
//!
//! Retention may remove a segment while a cursor reads: the cursor then moves on to the first
//! retained `seq` (docs/API.md §5: replay starts at the first retained seq). A reset of the
//! stream's shard (cluster mode) ends it, as a delete does: what it would read next was
//! discarded.

use crate::api::{ReadError, ReadQuery};
use crate::index::chain;
use crate::index::idxfile::{self, Entry, IdxHeader, Sample, Span};
use crate::log::record::{self, Decode, HEADER_LEN, RecordType};
use crate::log::segment;
use crate::log::state::Published;
use crate::vfs::VFile;
use std::io;
use std::path::Path;
use std::sync::Arc;
use vx_proto::EventView;
use vx_proto::packed::{self, EVENT_HEADER_LEN};

/// Bytes read from the log at a time, at most. A walk starts with [`FIRST_READ`] and doubles
/// its reads up to this, so a short page (one event) does not read, zero and copy a whole
/// run while a scan still reads in large chunks.
const READ_CHUNK: usize = 256 << 10;
const FIRST_READ: usize = 16 << 10;
/// The first read of a short read's walk that starts at a sample (or before a span's first
/// sample): the walk to the wanted event is at most about 8 KiB (see
/// [`crate::index::samples`]), usually less, so a one-event read is one or two reads of a few
/// pages. A longer page starts with [`FIRST_READ`], as a walk from a span's start does, so it
/// never needs more reads than it did, only fewer bytes.
const SAMPLE_READ: usize = 8 << 10;
/// A read of at most this many events is short (see [`SAMPLE_READ`]).
const SHORT_READ: u64 = 32;

/// The first read of a short walk from the event `from` (a sample, or a span's first event)
/// to `to` and the `remaining` events the read returns from there (at most [`SHORT_READ`]):
/// those events at the span's mean size (its bytes over its events, so other streams'
/// records inside it count too), a quarter more, and room for a run header; at most
/// [`SAMPLE_READ`]. A walk of events larger than the estimate reads on (doubling), so only
/// the bytes copied and zeroed for nothing change: a one-event read of small events copies a
/// few hundred bytes to a few KiB instead of [`SAMPLE_READ`].
fn short_read(span: &Span, from: u64, to: u64, remaining: u64) -> usize {
    const SLACK: u64 = 512;
    let events = to
        .saturating_sub(from)
        .saturating_add(remaining.min(SHORT_READ));
    let mean = u64::from(span.len).div_ceil(u64::from(span.count.max(1)));
    let bytes = events.saturating_mul(mean).saturating_mul(5) / 4 + SLACK;
    usize::try_from(bytes).map_or(SAMPLE_READ, |b| b.min(SAMPLE_READ))
}
/// Spans of a sealed node read at a time; a short read reads [`SHORT_SPAN_CHUNK`]: its index
/// pages are cached (`crate::index::pages`), so reading more spans than it needs is not a
/// `pread` saved but spans parsed for nothing.
const SPAN_CHUNK: u32 = 64;
const SHORT_SPAN_CHUNK: u32 = 2;
/// Bound on how often a cursor starts over after the segments moved under it.
const MAX_RETRIES: u32 = 16;

pub struct Cursor {
    shared: Option<Arc<Published>>,
    stream: Box<str>,
    shard: u32,
    /// The shard's reset count when the cursor opened ([`crate::index::memory::Index::resets`]).
    resets: u64,
    first_seq: u64,
    last_seq: u64,
    start_seq: u64,
    /// Next seq to look at.
    next_seq: u64,
    /// Last seq of the range (inclusive).
    end_seq: u64,
    remaining: u64,
    q: ReadQuery,
    node: Option<Node>,
    walk: Option<SpanWalk>,
    /// The buffer of the last finished walk, reused by the next (no allocation per span).
    spare: Vec<u8>,
}

/// The sealed node being read, and a chunk of its spans.
struct Node {
    seg: u64,
    entry: Entry,
    file: Arc<dyn VFile>,
    header: IdxHeader,
    /// Spans read from the node: all of them (decoded, from the index cache), or a chunk
    /// starting at its `chunk_at`-th.
    chunk: Arc<[Span]>,
    chunk_at: u32,
}

impl Node {
    /// Whether the chunk is every span of the node: no search can find another.
    fn has_all(&self) -> bool {
        self.chunk_at == 0 && self.chunk.len() == self.entry.spans_n as usize
    }
}

/// A span to read, where it is, and where to start: at `sample`, or at its start. `sampled`:
/// its samples are known (the active segment's, or an index file of version 3), so an event
/// before its first sample is as close to its start as one after a sample is to that sample.
struct Found {
    seg: u64,
    span: Span,
    sample: Option<Sample>,
    sampled: bool,
}

/// Where the cursor is inside a span.
enum At {
    /// At the stream's run header at the span's start.
    RunHeader,
    /// Inside the stream's run: `left` events to go, ending at `run_end`; then jump to
    /// `after` (the end of the record).
    Events {
        left: u32,
        after: u64,
    },
    /// At a record header.
    Record,
    /// Inside a record at its next run header, with `left` runs to go before `rec_end`.
    Runs {
        left: u32,
        rec_end: u64,
    },
    Done,
}

/// Reading one span.
struct SpanWalk {
    span: Span,
    file: Arc<dyn VFile>,
    /// The segment and the log's directory: the file's name, for errors.
    seg: u64,
    log_dir: Arc<Path>,
    /// File offsets: the span's end, the end of its first record, the next byte to read.
    end: u64,
    first_rec_end: u64,
    pos: u64,
    /// Seq of the next event of the stream.
    seq: u64,
    at: At,
    buf: Vec<u8>,
    buf_off: u64,
    /// Size of the next read.
    chunk: usize,
}

impl SpanWalk {
    fn corrupt(&self, at: u64, reason: impl Into<String>) -> ReadError {
        ReadError::Corrupt {
            file: segment::segment_path(&self.log_dir, self.seg),
            offset: at,
            reason: reason.into(),
        }
    }

    /// Start at sample `s` instead of the span's start (see [`crate::index::samples`]).
    fn start_at(&mut self, s: &Sample) {
        self.pos = u64::from(s.off);
        self.seq = s.seq;
        let after = u64::from(s.after);
        self.at = if s.left == 0 {
            // As at the span's start: the run header, then the end of its record.
            self.first_rec_end = after;
            At::RunHeader
        } else {
            At::Events {
                left: s.left,
                after: after.min(self.end),
            }
        };
    }

    /// Go on at the record that starts at `pos`, if the span has one there.
    fn skip_to(&mut self, pos: u64) {
        self.pos = pos;
        self.at = if pos >= self.end {
            At::Done
        } else {
            At::Record
        };
    }

    /// Make `need` bytes at `self.pos` available in the buffer; returns their start.
    fn ensure(&mut self, need: usize) -> Result<usize, ReadError> {
        let pos = self.pos;
        if pos >= self.buf_off && (pos - self.buf_off) as usize + need <= self.buf.len() {
            return Ok((pos - self.buf_off) as usize);
        }
        let left = usize::try_from(self.end.saturating_sub(pos)).unwrap_or(usize::MAX);
        if need > left {
            return Err(self.corrupt(pos, "an item extends past its span"));
        }
        let want = need.max(self.chunk).min(left);
        self.chunk = (self.chunk * 2).min(READ_CHUNK);
        self.buf.clear();
        self.buf.resize(want, 0);
        self.file.read_exact_at(&mut self.buf, pos)?;
        self.buf_off = pos;
        Ok(0)
    }

    fn run_header(&mut self) -> Result<record::RunHead<'_>, ReadError> {
        // A run header is at most 2 + 256 + 16 bytes; read what the span has of that.
        let max = (2 + vx_proto::rules::MAX_STREAM_LEN + 16) as u64;
        let need = usize::try_from(max.min(self.end - self.pos)).unwrap_or(0);
        let at = self.ensure(need)?;
        let pos = self.pos;
        record::parse_run(&self.buf[at..at + need]).map_err(|e| self.corrupt(pos, decode(e)))
    }

    /// The next event of the stream in this span, as (seq, buffer position, length).
    fn next(&mut self, stream: &str) -> Result<Option<(u64, usize, usize)>, ReadError> {
        loop {
            match self.at {
                At::Done => return Ok(None),
                At::RunHeader => {
                    let h = self.run_header()?;
                    let (head_len, count, base, events_len, is_ours) = (
                        h.head_len,
                        h.count,
                        h.base_seq,
                        h.events_len,
                        h.stream == stream,
                    );
                    if !is_ours {
                        return Err(
                            self.corrupt(self.pos, "the span does not start at the stream's run")
                        );
                    }
                    if base != self.seq {
                        return Err(self.corrupt(
                            self.pos,
                            format!("run seq {base} where {} was expected", self.seq),
                        ));
                    }
                    // After the span's first run, the next record starts where its record
                    // ends (other streams' runs of that record are not needed).
                    let after = self
                        .first_rec_end
                        .max(self.pos + (head_len + events_len) as u64);
                    self.pos += head_len as u64;
                    self.at = At::Events { left: count, after };
                }
                At::Events { left: 0, after } => {
                    self.skip_to(after);
                }
                At::Events { left, after } => {
                    let at = self.ensure(EVENT_HEADER_LEN)?;
                    let pos = self.pos;
                    let n = packed::event_len(&self.buf[at..])
                        .map_err(|e| self.corrupt(pos, decode(e.into())))?;
                    let at = self.ensure(n)?;
                    self.pos += n as u64;
                    self.at = At::Events {
                        left: left - 1,
                        after,
                    };
                    let seq = self.seq;
                    self.seq += 1;
                    return Ok(Some((seq, at, n)));
                }
                At::Record => {
                    let at = self.ensure(HEADER_LEN)?;
                    let pos = self.pos;
                    let h = record::parse_header(&self.buf[at..at + HEADER_LEN])
                        .map_err(|e| self.corrupt(pos, decode(e)))?;
                    let rec_end = self.pos + h.len as u64;
                    if h.ty != RecordType::Events {
                        self.skip_to(rec_end);
                        continue;
                    }
                    self.pos += h.body_at() as u64;
                    self.at = At::Runs { left: h.n, rec_end };
                }
                At::Runs { left: 0, rec_end } => {
                    self.skip_to(rec_end);
                }
                At::Runs { left, rec_end } => {
                    if self.pos >= self.end {
                        self.at = At::Done;
                        continue;
                    }
                    let h = self.run_header()?;
                    let (head_len, len, count, base, is_ours) =
                        (h.head_len, h.len(), h.count, h.base_seq, h.stream == stream);
                    if is_ours {
                        if base != self.seq {
                            return Err(self.corrupt(
                                self.pos,
                                format!("run seq {base} where {} was expected", self.seq),
                            ));
                        }
                        self.pos += head_len as u64;
                        self.at = At::Events {
                            left: count,
                            after: rec_end.min(self.end),
                        };
                    } else {
                        self.pos += len as u64;
                        self.at = At::Runs {
                            left: left - 1,
                            rec_end,
                        };
                    }
                }
            }
        }
    }
}

fn decode(e: Decode) -> String {
    match e {
        Decode::Bad(w) => w.to_string(),
        Decode::Incomplete(_) => "truncated".to_string(),
    }
}

impl Cursor {
    /// A cursor over `stream` as its metadata was read after the shard's reset count was
    /// `resets`.
    pub(crate) fn open(
        shared: Arc<Published>,
        shard: u32,
        resets: u64,
        stream: &str,
        first_seq: u64,
        last_seq: u64,
        q: ReadQuery,
    ) -> Cursor {
        let start_seq = q.from.unwrap_or(first_seq).max(first_seq);
        let end_seq = q.to.map_or(last_seq, |to| to.min(last_seq));
        Cursor {
            shared: Some(shared),
            stream: stream.into(),
            shard,
            resets,
            first_seq,
            last_seq,
            start_seq,
            next_seq: start_seq,
            end_seq,
            remaining: q.limit,
            q,
            node: None,
            walk: None,
            spare: Vec::new(),
        }
    }

    /// A cursor over a stream with no retained events: nothing to read.
    pub(crate) fn empty(stream: &str, shard: u32, last_seq: u64, q: ReadQuery) -> Cursor {
        let start_seq = q.from.unwrap_or(last_seq + 1).max(last_seq + 1);
        Cursor {
            shared: None,
            stream: stream.into(),
            shard,
            resets: 0,
            first_seq: last_seq + 1,
            last_seq,
            start_seq,
            next_seq: start_seq,
            end_seq: last_seq,
            remaining: 0,
            q,
            node: None,
            walk: None,
            spare: Vec::new(),
        }
    }

    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub fn start_seq(&self) -> u64 {
        self.start_seq
    }

    /// The next seq this cursor would look at: after [`Cursor::next_event`] returned `None`
    /// at the end of the range, one past the range; with filters, past every event scanned.
    pub fn position(&self) -> u64 {
        self.next_seq
    }

    /// True when no filter other than the seq range and limit applies (then the range is
    /// contiguous and `X-Vx-Next-Seq` is meaningful).
    pub fn unfiltered(&self) -> bool {
        !self.q.filtered()
    }

    /// The seq to ask for next after an unfiltered read that runs to its end:
    /// `start + min(limit, events in range)`.
    pub fn next_seq_after_full_read(&self) -> u64 {
        let in_range = (self.end_seq + 1).saturating_sub(self.start_seq);
        self.start_seq + in_range.min(self.q.limit)
    }

    fn matches(&self, ev: &EventView<'_>) -> bool {
        self.q
            .keeps(ev.ts, ev.ty.as_bytes(), ev.entity.map(str::as_bytes))
    }

    /// Whole spans or nodes whose ts range lies outside `since`/`until` are skipped unread.
    fn outside(&self, min_ts: i64, max_ts: i64) -> bool {
        self.q.since.is_some_and(|s| max_ts < s) || self.q.until.is_some_and(|u| min_ts >= u)
    }

    /// The span holding `next_seq` (or the first after it), with its segment and the sample
    /// to start the walk to `next_seq` from (none: from the span's start).
    fn next_span(&mut self, shared: &Published) -> Result<Option<Found>, ReadError> {
        let mut retries = 0;
        loop {
            if self.next_seq > self.end_seq {
                return Ok(None);
            }
            let Some(view) = shared.index.view(self.shard, &self.stream) else {
                return Ok(None); // deleted meanwhile
            };
            if view.first_seq > self.next_seq {
                // Retention removed events this response was to hold (it started before
                // them): end it as failed rather than skip a gap the client cannot see.
                return Err(ReadError::Retained {
                    stream: self.stream.to_string(),
                    next_seq: self.next_seq,
                    first_seq: view.first_seq,
                });
            }
            if self.next_seq > self.end_seq {
                return Ok(None);
            }
            if let Some((seg, span, sample)) =
                shared
                    .index
                    .active_span(self.shard, &self.stream, self.next_seq)
            {
                return Ok(Some(Found {
                    seg,
                    span,
                    sample,
                    sampled: true,
                }));
            }
            let before = self.next_seq;
            match self.sealed_span(shared, view.head) {
                Ok(Some(found)) => return Ok(Some(found)),
                Ok(None) if self.next_seq > before => continue, // skipped ahead: progress
                Ok(None) => {}
                Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                    // A segment went (retention) or the active one was sealed: start over.
                    self.node = None;
                }
                Err(e) => return Err(e),
            }
            retries += 1;
            if retries > MAX_RETRIES {
                return Ok(None);
            }
        }
    }

    /// The span holding `next_seq` among the sealed nodes, with its best sample; `None` to
    /// look again.
    fn sealed_span(
        &mut self,
        shared: &Published,
        head: Option<chain::ChainHead>,
    ) -> Result<Option<Found>, ReadError> {
        let covers = |n: &Node, seq: u64| n.entry.first_seq <= seq && seq <= n.entry.last_seq;
        if !self.node.as_ref().is_some_and(|n| covers(n, self.next_seq)) {
            self.node = None;
            let Some(head) = head else {
                return Ok(None);
            };
            let stream = self.stream.clone();
            let located = chain::locate(&head, self.next_seq, &mut |r| {
                shared.segments.entry(r, &stream)
            })?;
            let Some((at, entry)) = located else {
                return Ok(None);
            };
            if entry.last_seq < self.next_seq {
                // Between this node and the active spans: a seal moved them; look again.
                return Ok(None);
            }
            if entry.first_seq > self.next_seq {
                self.next_seq = entry.first_seq;
            }
            if let Some(own) = entry.own
                && self.outside(own.min_ts, own.max_ts)
            {
                self.next_seq = entry.last_seq + 1;
                return Ok(None);
            }
            let (file, header) = shared.segments.idx(at.seg)?;
            let all = shared
                .segments
                .node_spans(at.seg, &*file, &header, &entry)?;
            self.node = Some(Node {
                seg: at.seg,
                entry,
                file,
                header,
                chunk: all.unwrap_or_else(|| Arc::new([])),
                chunk_at: 0,
            });
        }
        let Some(node) = self.node.as_mut() else {
            return Ok(None);
        };
        let seq = self.next_seq;
        let in_chunk = node.has_all()
            || node
                .chunk
                .first()
                .is_some_and(|f| f.first_seq <= seq || node.chunk_at == 0)
                && node.chunk.last().is_some_and(|l| l.last_seq() >= seq);
        if !in_chunk {
            // Binary search the node's spans for the first one ending at or after `seq`.
            let (mut lo, mut hi) = (0u32, node.entry.spans_n);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let s = idxfile::read_spans(&*node.file, &node.header, &node.entry, mid, 1)?;
                match s.first() {
                    Some(s) if s.last_seq() < seq => lo = mid + 1,
                    _ => hi = mid,
                }
            }
            let n = if self.remaining <= SHORT_READ {
                SHORT_SPAN_CHUNK
            } else {
                SPAN_CHUNK
            };
            node.chunk = idxfile::read_spans(&*node.file, &node.header, &node.entry, lo, n)?.into();
            node.chunk_at = lo;
        }
        let i = node.chunk.partition_point(|s| s.last_seq() < seq);
        match node.chunk.get(i) {
            Some(&span) => {
                let sample =
                    shared
                        .segments
                        .best_sample(node.seg, &*node.file, &node.header, &span, seq)?;
                Ok(Some(Found {
                    seg: node.seg,
                    span,
                    sample,
                    sampled: node.header.version >= idxfile::VERSION_SAMPLES,
                }))
            }
            None => {
                // Past this node's spans: the next node holds the rest.
                self.next_seq = self.next_seq.max(node.entry.last_seq + 1);
                self.node = None;
                Ok(None)
            }
        }
    }

    /// Next matching event with its seq; `None` at the end of the range or the limit.
    pub fn next_event(&mut self) -> Result<Option<(u64, EventView<'_>)>, ReadError> {
        let Some(shared) = self.shared.clone() else {
            return Ok(None);
        };
        loop {
            if self.remaining == 0 || self.next_seq > self.end_seq {
                return Ok(None);
            }
            if shared.index.resets(self.shard) != self.resets {
                // The shard was reset: every event this cursor could still return is gone.
                self.remaining = 0;
                self.walk = None;
                return Ok(None);
            }
            if self.walk.is_none() {
                let Some(Found {
                    seg,
                    span,
                    sample,
                    sampled,
                }) = self.next_span(&shared)?
                else {
                    return Ok(None);
                };
                if self.outside(span.min_ts, span.max_ts) {
                    self.next_seq = self.next_seq.max(span.last_seq() + 1);
                    continue;
                }
                let file = match shared.segments.log_file(seg) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        // Retained away just now: the next lookup starts at the first
                        // retained seq.
                        self.node = None;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let off = u64::from(span.off);
                let end = off + u64::from(span.len);
                let mut walk = SpanWalk {
                    span,
                    file,
                    seg,
                    log_dir: Arc::clone(&shared.segments.log_dir),
                    end,
                    first_rec_end: off + u64::from(span.rec_end),
                    pos: off,
                    seq: span.first_seq,
                    at: At::RunHeader,
                    // Emptied: stale bytes of another span must never look buffered.
                    buf: {
                        let mut b = std::mem::take(&mut self.spare);
                        b.clear();
                        b
                    },
                    buf_off: 0,
                    chunk: FIRST_READ,
                };
                // A sample that does not lie inside its span (only a damaged index would
                // have one) is not used: the walk from the span's start needs none.
                let short = self.remaining <= SHORT_READ;
                if let Some(s) = sample.filter(|s| span.holds_sample(s) && s.seq <= self.next_seq) {
                    walk.start_at(&s);
                    if short {
                        walk.chunk = short_read(&span, s.seq, self.next_seq, self.remaining);
                    }
                } else if sampled && short && self.next_seq > span.first_seq {
                    // Before the span's first sample: as close to its start as a sample
                    // would be.
                    walk.chunk = short_read(&span, span.first_seq, self.next_seq, self.remaining);
                }
                self.walk = Some(walk);
            }
            let Some(walk) = self.walk.as_mut() else {
                continue;
            };
            let Some((seq, at, n)) = walk.next(&self.stream)? else {
                let last = walk.span.last_seq();
                if let Some(done) = self.walk.take() {
                    self.spare = done.buf;
                }
                self.next_seq = self.next_seq.max(last + 1);
                continue;
            };
            if seq < self.next_seq {
                continue; // before `from` inside the span
            }
            self.next_seq = seq + 1;
            let matched = {
                let walk = self
                    .walk
                    .as_ref()
                    .ok_or_else(|| ReadError::Io(io::ErrorKind::Other.into()))?;
                let (ev, _) = packed::decode_event(&walk.buf[at..at + n], &self.stream)
                    .map_err(|e| walk.corrupt(walk.buf_off + at as u64, decode(e.into())))?;
                self.matches(&ev)
            };
            if !matched {
                continue;
            }
            self.remaining -= 1;
            let walk = self
                .walk
                .as_ref()
                .ok_or_else(|| ReadError::Io(io::ErrorKind::Other.into()))?;
            let (ev, _) = packed::decode_event(&walk.buf[at..at + n], &self.stream)
                .map_err(|e| walk.corrupt(walk.buf_off + at as u64, decode(e.into())))?;
            return Ok(Some((seq, ev)));
        }
    }
}
