//! The engine's input seam: what the storage engine applies, and where it came from.
//!
//! Whatever makes a batch durable first, the engine's state changes the same way: a durable
//! record's runs (with their `seq`s), its tombstone, its ids, its origin and a reset are
//! applied by [`LogWriter::apply`], in the order of their [`SourcePos`]. There is one
//! source, the local log: the group commit applies each record it just wrote and synced, and
//! recovery applies the active segment's records as it reads them back, both through this
//! entry. Cluster mode writes what it consumes from its Kafka partitions into the same local
//! log, each record carrying its [`Origin`]; applying it moves its partition's applied
//! offset, the offset a restarted node resumes consuming after (see docs/ARCHITECTURE.md,
//! "The engine's input seam").

pub use crate::api::SourcePos;
use crate::api::{Origin, OriginTopic};
use crate::index::idxfile::TsRange;
use crate::index::memory::Placed;
use crate::index::samples::RunMark;
use crate::log::state::LogWriter;

/// One stream's run of a durable record, placed in the active segment with its `seq`s.
pub(crate) struct RunAt<'a> {
    pub shard: u32,
    pub stream: &'a str,
    /// Every seq ≤ floor of the stream is deleted.
    pub floor: u64,
    pub placed: Placed,
    /// Its marks: where its events are sampled (see [`crate::index::samples`]; none for a
    /// run of at most 32 events and 4 KiB).
    pub marks: &'a [RunMark],
}

/// A durable record as the engine applies it.
pub(crate) struct Durable<'a, R> {
    pub pos: SourcePos,
    /// When it was appended (ms since the epoch): the dedup window counts from here.
    pub append_ms: i64,
    pub runs: R,
    /// A deleted stream: (shard, stream, its last seq).
    pub tombstone: Option<(u32, &'a str, u64)>,
    /// Ids to remember for dedup: (shard, key, seq).
    pub ids: &'a [(u32, u128, u64)],
    /// Events with an id in the record, remembered or not (recovery forgets those older
    /// than the dedup window).
    pub id_count: u64,
    /// Cluster mode: where the record was consumed (its partition's offset moves on).
    pub origin: Option<Origin>,
    /// Cluster mode: the record discards one shard's streams or feature tables.
    pub reset: Option<(OriginTopic, u32)>,
}

impl<'a, R> Durable<'a, R> {
    /// A record with nothing to apply but its place (the caller fills in what it has).
    pub fn at(pos: SourcePos, append_ms: i64, runs: R) -> Self {
        Durable {
            pos,
            append_ms,
            runs,
            tombstone: None,
            ids: &[],
            id_count: 0,
            origin: None,
            reset: None,
        }
    }
}

impl LogWriter {
    /// Apply a durable record: a reset forgets its shard's streams (and the shard's applied
    /// origin of its topic); its runs and tombstone become visible to readers and followers,
    /// its ids are remembered, its origin's partition moves on. The `seq`s were assigned
    /// before (by the planning of the group, or in the record read back); nothing here can
    /// fail (what a reset changes on disk, the carry file, was changed before).
    pub(crate) fn apply<'a>(
        &mut self,
        input: Durable<'a, impl IntoIterator<Item = RunAt<'a>>>,
        now: i64,
    ) {
        debug_assert!(input.pos > self.applied, "applied out of order");
        if let Some((target, shard)) = input.reset {
            let SourcePos::Lsn(lsn) = input.pos;
            if target == OriginTopic::Streams {
                self.forget_streams(shard, lsn);
            }
            self.origins.forgotten(target, shard);
        }
        for r in input.runs {
            self.apply_run(r.shard, r.stream, r.floor, r.placed, r.marks);
        }
        if let Some((shard, stream, last_seq)) = input.tombstone {
            self.apply_tombstone(shard, stream, last_seq);
        }
        for &(shard, key, seq) in input.ids {
            if let Some(t) = self.dedup.get_mut(shard as usize) {
                t.insert_newer(key, seq, input.append_ms, now);
            }
        }
        self.active.ids += input.id_count;
        if let Some(o) = input.origin {
            self.origins.applied(o);
        }
        self.applied = input.pos;
    }

    /// The active segment now ends at `end`, its newest record appended at `append_ms`:
    /// readers and retention see its new length and append times.
    pub(crate) fn appended(&mut self, end: u64, append_ms: i64) {
        self.active.len = end;
        self.active.append = self.active.append.merge(TsRange {
            min_ts: append_ms,
            max_ts: append_ms,
        });
        let (len, append) = (self.active.len, self.active.append);
        self.shared.segments.update(self.active.first, |s| {
            s.log_len = len;
            s.min_append_ms = append.min_ts;
            s.max_append_ms = append.max_ts;
        });
    }
}
