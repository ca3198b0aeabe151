//! The reader-facing index in memory: per shard, each stream's bounded metadata and the spans
//! of its events in the active segment, plus a sorted name list for `GET /v1/streams`.
//! Written only by the writer thread (after a record reached the visibility level), read by
//! request handlers under short per-shard read locks.
//!
//! What memory holds per stream does not depend on how much of it is stored: counters, the
//! newest sealed node of its chain ([`crate::index::chain::ChainHead`]), and its spans in the *active*
//! segment only. Sealed segments' spans live in their index files ([`crate::index::idxfile`]).
//!
//! # Spans
//! A span is a stretch of one segment holding consecutive runs of one stream: it starts at
//! the stream's run header (with the end of that run's record noted, so a reader knows where
//! the next record header is) and ends after the stream's last run in it. Runs are appended to
//! the stream's last span while the gap from the span's end is at most [`SPAN_GAP`] and the
//! span stays within [`SPAN_MAX`]: a dense stream costs one span per ~256 KiB of log, a sparse
//! one a span per run, and a reader reads a span with one `pread`, skipping the other streams'
//! runs inside it.
//!
//! # Samples
//! Beside its active spans a stream keeps their samples ([`StreamIdx::samples`], in seq
//! order; each span names its own range of them): places inside a span where a walk to one
//! event can start, so that a point read does not walk the span from its start. Where they
//! are taken is [`crate::index::samples`]; a seal writes them to the index file with the spans.

use crate::api::{StreamInfo, TopStream};
use crate::index::chain::ChainHead;
use crate::index::idxfile::{Sample, Span, TsRange};
use crate::index::samples::{self, RunMark};
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest gap of other streams' bytes a span bridges.
pub const SPAN_GAP: u32 = 16 << 10;
/// Largest span (a single run may be larger; it is then a span of its own).
pub const SPAN_MAX: u32 = 256 << 10;
/// Bytes one span costs in memory (what the active index budget counts).
pub const SPAN_BYTES: usize = std::mem::size_of::<Span>();

/// Whether the min/max `ts` over a stream's retained sealed nodes is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealedTs {
    Known(TsRange),
    /// Retention removed the node that held the min or the max: recomputed on the next read.
    Stale,
}

/// One stream's metadata (visible events only).
#[derive(Debug)]
pub struct StreamIdx {
    pub last_seq: u64,
    /// Every seq ≤ floor was deleted (a tombstone).
    pub floor: u64,
    /// Tombstoned and not written since.
    pub deleted: bool,
    /// First retained seq (meaningful while `events > 0`).
    pub first_seq: u64,
    pub events: u64,
    pub bytes: u64,
    /// Newest sealed node holding events of the stream above its floor.
    pub head: Option<ChainHead>,
    /// Depth of the oldest retained node above the floor (head's depth + 1 when none).
    pub first_depth: u64,
    pub sealed_ts: SealedTs,
    /// Spans in the active segment, in seq order.
    pub active: Vec<Span>,
    /// Samples of the active spans, in seq order (each span's `samples_at`/`samples_n` are
    /// its range here).
    pub samples: Vec<Sample>,
    pub active_agg: TsRange,
    pub active_count: u64,
    pub active_bytes: u64,
    /// A tombstone written in the active segment (its floor), for the segment's index.
    pub active_tombstone: Option<u64>,
}

impl StreamIdx {
    pub fn new(floor: u64) -> Self {
        StreamIdx {
            last_seq: floor,
            floor,
            deleted: false,
            first_seq: floor + 1,
            events: 0,
            bytes: 0,
            head: None,
            first_depth: 1,
            sealed_ts: SealedTs::Known(TsRange::EMPTY),
            active: Vec::new(),
            samples: Vec::new(),
            active_agg: TsRange::EMPTY,
            active_count: 0,
            active_bytes: 0,
            active_tombstone: None,
        }
    }

    /// First seq of the active segment's spans.
    pub fn active_first(&self) -> Option<u64> {
        self.active.first().map(|s| s.first_seq)
    }

    /// The active span holding `seq`, or the first one after it.
    pub fn active_span_at(&self, seq: u64) -> Option<Span> {
        let i = self.active.partition_point(|s| s.last_seq() < seq);
        self.active.get(i).copied()
    }

    /// An active span's own samples.
    pub fn span_samples(&self, span: &Span) -> &[Sample] {
        let at = span.samples_at as usize;
        self.samples
            .get(at..at.saturating_add(span.samples_n as usize))
            .unwrap_or_default()
    }
}

/// One run just made visible, at its place in the active segment.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub first_seq: u64,
    pub count: u32,
    /// Offset of the run header in the segment, its length (header and events), and the end
    /// offset of its record.
    pub off: u32,
    pub len: u32,
    pub rec_end: u32,
    pub min_ts: i64,
    pub max_ts: i64,
    /// Bytes of the events.
    pub bytes: u64,
}

/// What applying a run added to the active index (what its memory budget counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Added {
    pub spans: usize,
    pub samples: usize,
}

/// One shard's streams, and the segment their active spans are in.
pub struct ShardIdx {
    pub streams: HashMap<Box<str>, StreamIdx>,
    pub active_seg: u64,
}

pub struct Index {
    shards: Vec<RwLock<ShardIdx>>,
    /// Listed (not deleted) streams in memory, sorted bytewise, with their shard.
    names: RwLock<BTreeMap<Box<str>, u32>>,
    /// Per shard: how many times its streams were reset (cluster mode). A cursor notes it
    /// when it opens and ends once it changes, so it never reads on into discarded events.
    resets: Vec<AtomicU64>,
}

/// What a reader needs to start reading a stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamView {
    pub first_seq: u64,
    pub last_seq: u64,
    pub head: Option<ChainHead>,
}

impl Index {
    pub fn new(shards: u32, active_seg: u64) -> Self {
        Index {
            shards: (0..shards)
                .map(|_| {
                    RwLock::new(ShardIdx {
                        streams: HashMap::new(),
                        active_seg,
                    })
                })
                .collect(),
            names: RwLock::new(BTreeMap::new()),
            resets: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// How many times `shard`'s streams were reset since start.
    pub fn resets(&self, shard: u32) -> u64 {
        self.resets
            .get(shard as usize)
            .map_or(0, |r| r.load(Ordering::Acquire))
    }

    /// Forget every stream of `shard` (a reset): returns each one's name and the number of
    /// active spans and samples it held. The reset count moves first, under the shard's lock,
    /// so a cursor that reads a stream's metadata after this sees it changed.
    pub fn reset_shard(&self, shard: u32) -> Vec<(Box<str>, Added)> {
        let Some(lock) = self.shard(shard) else {
            return Vec::new();
        };
        let mut g = lock.write();
        if let Some(r) = self.resets.get(shard as usize) {
            r.fetch_add(1, Ordering::AcqRel);
        }
        let gone: Vec<(Box<str>, Added)> = g
            .streams
            .drain()
            .map(|(name, s)| {
                let held = Added {
                    spans: s.active.len(),
                    samples: s.samples.len(),
                };
                (name, held)
            })
            .collect();
        drop(g);
        let mut names = self.names.write();
        for (name, _) in &gone {
            names.remove(&**name);
        }
        gone
    }

    pub fn shard(&self, shard: u32) -> Option<&RwLock<ShardIdx>> {
        self.shards.get(shard as usize)
    }

    /// Make `stream` exist (with `floor` if it is new) and listed; runs `f` on it.
    pub fn upsert<R>(
        &self,
        shard: u32,
        stream: &str,
        floor: u64,
        f: impl FnOnce(&mut StreamIdx) -> R,
    ) -> Option<R> {
        let mut g = self.shard(shard)?.write();
        let s = match g.streams.get_mut(stream) {
            Some(s) => s,
            None => g
                .streams
                .entry(stream.into())
                .or_insert_with(|| StreamIdx::new(floor)),
        };
        let was_deleted = s.deleted;
        let r = f(s);
        let listed = !s.deleted;
        drop(g);
        if listed {
            self.names.write().entry(stream.into()).or_insert(shard);
        } else if !was_deleted {
            self.names.write().remove(stream);
        }
        Some(r)
    }

    /// Record a run that became visible, with its marks (see [`crate::index::samples`]);
    /// returns the spans and samples it added.
    pub fn apply_run(
        &self,
        shard: u32,
        stream: &str,
        floor: u64,
        p: Placed,
        marks: &[RunMark],
    ) -> Added {
        self.upsert(shard, stream, floor, |s| {
            s.deleted = false;
            if s.events == 0 {
                s.first_seq = p.first_seq;
            }
            s.last_seq = s.last_seq.max(p.first_seq + u64::from(p.count) - 1);
            s.events += u64::from(p.count);
            s.bytes += p.bytes;
            s.active_count += u64::from(p.count);
            s.active_bytes += p.bytes;
            s.active_agg = s.active_agg.merge(TsRange {
                min_ts: p.min_ts,
                max_ts: p.max_ts,
            });
            let mut added = Added::default();
            let had = s.samples.len();
            let after = p.off.saturating_add(p.rec_end);
            let appended = match s.active.last_mut() {
                Some(last) => {
                    let end = last.off.saturating_add(last.len);
                    let fits = p.off >= end
                        && p.off - end <= SPAN_GAP
                        && p.off.saturating_add(p.len) - last.off <= SPAN_MAX
                        && last.last_seq() + 1 == p.first_seq;
                    if fits {
                        last.len = p.off + p.len - last.off;
                        last.count += p.count;
                        last.min_ts = last.min_ts.min(p.min_ts);
                        last.max_ts = last.max_ts.max(p.max_ts);
                        // The last span's samples are the last ones.
                        let own = s
                            .samples
                            .get(last.samples_at as usize..)
                            .unwrap_or_default();
                        if samples::far_from(samples::last_point(last, own), p.first_seq, p.off) {
                            s.samples.push(Sample {
                                seq: p.first_seq,
                                off: p.off,
                                left: 0,
                                after,
                            });
                        }
                    }
                    fits
                }
                None => false,
            };
            if !appended {
                s.active.push(Span {
                    first_seq: p.first_seq,
                    min_ts: p.min_ts,
                    max_ts: p.max_ts,
                    count: p.count,
                    off: p.off,
                    len: p.len,
                    rec_end: p.rec_end,
                    samples_at: u32::try_from(had).unwrap_or(u32::MAX),
                    samples_n: 0,
                });
                added.spans = 1;
            }
            for m in marks.iter().filter(|m| m.idx > 0 && m.idx < p.count) {
                s.samples.push(Sample {
                    seq: p.first_seq + u64::from(m.idx),
                    off: p.off.saturating_add(m.off),
                    left: p.count - m.idx,
                    after,
                });
            }
            added.samples = s.samples.len() - had;
            if let Some(last) = s.active.last_mut() {
                let n = s.samples.len().saturating_sub(last.samples_at as usize);
                last.samples_n = u32::try_from(n).unwrap_or(u32::MAX);
            }
            added
        })
        .unwrap_or_default()
    }

    /// A tombstone became visible: every seq ≤ `last_seq` is gone.
    pub fn apply_tombstone(&self, shard: u32, stream: &str, last_seq: u64) {
        self.upsert(shard, stream, last_seq, |s| {
            s.deleted = true;
            s.floor = last_seq;
            s.last_seq = s.last_seq.max(last_seq);
            s.first_seq = last_seq + 1;
            s.events = 0;
            s.bytes = 0;
            s.first_depth = s.head.map_or(1, |h| h.node.depth + 1);
            s.sealed_ts = SealedTs::Known(TsRange::EMPTY);
            s.active.clear();
            s.samples.clear();
            s.active_agg = TsRange::EMPTY;
            s.active_count = 0;
            s.active_bytes = 0;
            s.active_tombstone = Some(last_seq);
        });
    }

    /// Forget a stream (moved to the carry file).
    pub fn remove(&self, shard: u32, stream: &str) {
        if let Some(lock) = self.shard(shard) {
            lock.write().streams.remove(stream);
        }
        self.names.write().remove(stream);
    }

    /// Run `f` on a stream under its shard's read lock.
    pub fn with<R>(&self, shard: u32, stream: &str, f: impl FnOnce(&StreamIdx) -> R) -> Option<R> {
        let g = self.shard(shard)?.read();
        g.streams.get(stream).map(f)
    }

    /// A listed stream's view for a reader; `None` if unknown or deleted.
    pub fn view(&self, shard: u32, stream: &str) -> Option<StreamView> {
        self.with(shard, stream, |s| {
            (!s.deleted).then_some(StreamView {
                first_seq: if s.events == 0 {
                    s.last_seq + 1
                } else {
                    s.first_seq
                },
                last_seq: s.last_seq,
                head: s.head,
            })
        })
        .flatten()
    }

    /// The active span holding `seq` (or the first after it), the active segment, and the
    /// span's best sample to start a walk to `seq` from (see [`crate::index::samples`]);
    /// `None` when `seq` is before the active segment's spans or past them.
    pub fn active_span(
        &self,
        shard: u32,
        stream: &str,
        seq: u64,
    ) -> Option<(u64, Span, Option<Sample>)> {
        let g = self.shard(shard)?.read();
        let s = g.streams.get(stream)?;
        if s.active_first().is_none_or(|f| seq < f) {
            return None;
        }
        s.active_span_at(seq).map(|sp| {
            let sample = if seq > sp.first_seq {
                samples::best(s.span_samples(&sp), seq)
            } else {
                None
            };
            (g.active_seg, sp, sample)
        })
    }

    /// The metadata of docs/API.md §5 for a listed stream. `sealed_ts` is `Stale` when the caller
    /// must recompute the retained sealed min/max (see [`Index::set_sealed_ts`]).
    pub fn info(
        &self,
        shard: u32,
        stream: &str,
    ) -> Option<(StreamInfo, SealedTs, Option<ChainHead>, u64)> {
        self.with(shard, stream, |s| {
            if s.deleted {
                return None;
            }
            let ts = match s.sealed_ts {
                SealedTs::Known(a) => a.merge(s.active_agg),
                SealedTs::Stale => s.active_agg,
            };
            let nonempty = s.events > 0 && !ts.is_empty();
            Some((
                StreamInfo {
                    stream: stream.to_string(),
                    shard,
                    first_seq: if s.events == 0 {
                        s.last_seq + 1
                    } else {
                        s.first_seq
                    },
                    last_seq: s.last_seq,
                    events: s.events,
                    bytes: s.bytes,
                    first_ts: nonempty.then_some(ts.min_ts),
                    last_ts: nonempty.then_some(ts.max_ts),
                },
                s.sealed_ts,
                s.head,
                s.first_depth,
            ))
        })
        .flatten()
    }

    /// Cache a recomputed sealed min/max, if the stream's chain did not change meanwhile.
    pub fn set_sealed_ts(
        &self,
        shard: u32,
        stream: &str,
        head: Option<ChainHead>,
        first_depth: u64,
        agg: TsRange,
    ) {
        if let Some(lock) = self.shard(shard) {
            let mut g = lock.write();
            if let Some(s) = g.streams.get_mut(stream)
                && s.head == head
                && s.first_depth == first_depth
                && s.sealed_ts == SealedTs::Stale
            {
                s.sealed_ts = SealedTs::Known(agg);
            }
        }
    }

    /// Listed names with `prefix`, after `after`, in bytewise order; at most `limit`, and
    /// whether more follow.
    pub fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<(Box<str>, u32)>, bool) {
        use std::ops::Bound;
        let g = self.names.read();
        let start: Bound<&str> = match after {
            Some(a) if a >= prefix => Bound::Excluded(a),
            _ => Bound::Included(prefix),
        };
        let mut out = Vec::with_capacity(limit.min(1024));
        let mut more = false;
        for (name, &shard) in g.range::<str, _>((start, Bound::Unbounded)) {
            if !name.starts_with(prefix) {
                break;
            }
            if out.len() == limit {
                more = true;
                break;
            }
            out.push((name.clone(), shard));
        }
        (out, more)
    }

    /// The `n` listed streams with the most retained events and the `n` with the most retained
    /// bytes (each sorted descending, ties by name), for the status page. One pass over every
    /// shard, one shard's read lock at a time (a writer waits at most one shard's scan); memory
    /// is two lists of at most `n`, whatever the number of streams.
    pub fn top(&self, n: usize) -> (Vec<TopStream>, Vec<TopStream>) {
        let mut by_events = Vec::with_capacity(n.min(1024) + 1);
        let mut by_bytes = Vec::with_capacity(n.min(1024) + 1);
        for (shard, lock) in (0u32..).zip(&self.shards) {
            let g = lock.read();
            for (name, s) in &g.streams {
                if s.deleted || s.events == 0 {
                    continue;
                }
                let entry = || TopStream {
                    stream: name.to_string(),
                    shard,
                    events: s.events,
                    bytes: s.bytes,
                    last_seq: s.last_seq,
                };
                keep_top(&mut by_events, n, s.events, name, |t| t.events, entry);
                keep_top(&mut by_bytes, n, s.bytes, name, |t| t.bytes, entry);
            }
        }
        (by_events, by_bytes)
    }

    /// Listed streams in memory.
    pub fn listed(&self) -> usize {
        self.names.read().len()
    }
}

/// Insert into `top` (sorted by `key` descending, then name ascending, at most `n` long) if
/// the candidate ranks among the first `n`; the entry is built only then.
fn keep_top(
    top: &mut Vec<TopStream>,
    n: usize,
    key: u64,
    name: &str,
    key_of: impl Fn(&TopStream) -> u64,
    entry: impl FnOnce() -> TopStream,
) {
    let ranks_before =
        |t: &TopStream| (key, std::cmp::Reverse(name)) > (key_of(t), std::cmp::Reverse(&*t.stream));
    let at = top.iter().position(ranks_before).unwrap_or(top.len());
    if at < n {
        top.insert(at, entry());
        top.truncate(n);
    }
}

#[cfg(test)]
mod tests;
