//! Sealed segments at start-up: their index files folded into the streams' state, and the
//! dedup tables refilled from the newest of them.

use super::{Bad, Pass, Recovery, Walk, read_records};
use crate::api::OpenError;
use crate::dedup::{self, DedupTable};
use crate::index::idxfile::{IdxContents, TsRange};
use crate::index::memory::SealedTs;
use crate::log::record::{self, RecordType};
use crate::log::segment::{self, io_err};
use crate::log::state::WState;
use crate::vfs::OpenMode;
use vx_proto::shard::shard_of;

impl Recovery<'_> {
    /// Fold a sealed segment's index file into the streams' state; false if the index is
    /// missing or does not match the segment (it is then rebuilt).
    pub(super) fn fold_index(&mut self, lsn: u64, len: u64) -> Result<bool, OpenError> {
        let path = segment::idx_path(&self.log_dir(), lsn);
        let contents = self
            .engine
            .vfs
            .open(&path, OpenMode::Read)
            .and_then(|f| IdxContents::read(&*f));
        let contents = match contents {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "invalid index file");
                return Ok(false);
            }
        };
        let h = contents.header;
        if h.segment != lsn || h.log_len != len || h.next_lsn < lsn {
            tracing::warn!(file = %path.display(), "index file does not match its segment");
            return Ok(false);
        }
        let tables = match contents.tables() {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "invalid index file");
                return Ok(false);
            }
        };
        let entries = contents
            .entries()
            .map_err(io_err(format!("reading {}", path.display())))?;
        // Resets the file records that start know of yet. One in this segment forgets what
        // came before it (this file's entries are all from after it). One before this
        // segment was in a segment retention removed (with everything before it, so what was
        // folded so far is from after it) or in one rebuilt from its records (whose scan
        // applied it): only its LSN is noted.
        for &(shard, reset_lsn) in &tables.resets {
            let Some(known) = self.engine.origins.resets.get_mut(shard as usize) else {
                continue;
            };
            if reset_lsn <= *known {
                continue;
            }
            if reset_lsn >= lsn {
                self.engine.forget_streams(shard, reset_lsn);
            } else {
                *known = reset_lsn;
            }
        }
        self.engine.origins.applied = tables
            .origins
            .iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect();
        self.engine.origins.changed = true;
        for e in &entries {
            let shard = shard_of(&e.name, self.engine.shards);
            let ws = self.load(&e.name)?;
            let mut st = ws;
            self.engine
                .shared
                .index
                .upsert(shard, &e.name, ws.floor, |s| {
                    s.last_seq = s.last_seq.max(ws.last);
                    if e.is_tombstone() && e.floor >= s.floor {
                        s.floor = e.floor;
                        s.last_seq = s.last_seq.max(e.floor);
                        s.deleted = true;
                        s.events = 0;
                        s.bytes = 0;
                        s.first_seq = e.floor + 1;
                        s.sealed_ts = SealedTs::Known(TsRange::EMPTY);
                        s.first_depth = s.head.map_or(1, |h| h.node.depth + 1);
                    }
                    if e.has_events() {
                        if e.last_seq > s.floor {
                            if s.events == 0 {
                                s.first_seq = e.first_seq;
                                s.first_depth = e.depth;
                            }
                            s.events += e.count;
                            s.bytes += e.bytes;
                            s.deleted = false;
                            s.last_seq = s.last_seq.max(e.last_seq);
                            if let (SealedTs::Known(a), Some(own)) = (s.sealed_ts, e.own) {
                                s.sealed_ts = SealedTs::Known(a.merge(own));
                            }
                        }
                        s.head = Some(crate::index::chain::ChainHead::from_entry(lsn, e));
                    }
                    st = WState {
                        last: s.last_seq,
                        floor: s.floor,
                        deleted: s.deleted,
                    };
                });
            self.engine.streams.set(&e.name, st);
        }
        self.engine.shared.segments.update(lsn, |s| {
            s.idx = Some(h);
            s.idx_len = h.file_len();
            s.min_append_ms = h.min_append_ms;
            s.max_append_ms = h.max_append_ms;
        });
        self.engine.next_lsn = h.next_lsn;
        self.report.index_files += 1;
        Ok(true)
    }

    /// The writer state of a stream that the retained index files or the carry file know of.
    pub(super) fn known(&mut self, name: &str) -> Result<Option<WState>, OpenError> {
        if let Some(s) = self.engine.streams.map.get(name) {
            return Ok(Some(*s));
        }
        Ok(self
            .engine
            .shared
            .carry_get(name)
            .map_err(io_err("reading the carry file"))?
            .map(|e| WState::from(&e)))
    }

    /// A stream's writer state, loaded from the carry file the first time it is seen.
    pub(super) fn load(&mut self, name: &str) -> Result<WState, OpenError> {
        // `LogWriter::load` keeps a state it has already; otherwise it takes the carried one.
        let carried = self.known(name)?;
        Ok(self.engine.streams.load(name, carried))
    }

    /// Refill the dedup tables from the newest sealed segments within the window (`kept`:
    /// every segment, the active one last).
    pub(super) fn dedup_window(&mut self, kept: &[(u64, u64)]) -> Result<Pass, OpenError> {
        let sealed = &kept[..kept.len().saturating_sub(1)];
        let capacity = self
            .engine
            .dedup
            .iter()
            .map(DedupTable::capacity)
            .sum::<usize>() as u64;
        let oldest = self.now_ms.saturating_sub(self.window_ms);
        let mut chosen: Vec<(u64, u64)> = Vec::new();
        let mut ids = 0u64;
        for &(lsn, len) in sealed.iter().rev() {
            let Some(info) = self.engine.shared.segments.get(lsn) else {
                continue;
            };
            let Some(h) = info.idx else { continue };
            if h.max_append_ms < oldest || ids >= capacity {
                break;
            }
            if h.ids > 0 {
                chosen.push((lsn, len));
            }
            ids += h.ids;
        }
        let log_dir = self.log_dir();
        for &(lsn, len) in chosen.iter().rev() {
            let path = segment::segment_path(&log_dir, lsn);
            let f = self
                .engine
                .vfs
                .open(&path, OpenMode::Read)
                .map_err(io_err(format!("opening {}", path.display())))?;
            let mut bad = None;
            let seed = self.engine.dedup_key;
            let (now, shards) = (self.now_ms, self.engine.shards);
            let resets = &self.engine.origins.resets;
            let dedup = &mut self.engine.dedup;
            read_records(&*f, &path, len, &mut |off, item| {
                let (h, rec) = match item {
                    Walk::Record(h, rec) if record::crc_ok(&h, rec) => (h, rec),
                    Walk::Record(..) => {
                        bad = Some(Bad {
                            offset: off,
                            reason: "checksum mismatch".into(),
                        });
                        return false;
                    }
                    Walk::Bad(why) => {
                        bad = Some(Bad {
                            offset: off,
                            reason: why.into(),
                        });
                        return false;
                    }
                };
                if h.ty == RecordType::Events {
                    for run in record::runs(rec, h.n).flatten() {
                        let shard = shard_of(run.stream, shards);
                        // Ids of a stream from before its shard's reset are forgotten.
                        if resets.get(shard as usize).is_some_and(|&r| r > h.lsn) {
                            continue;
                        }
                        let Some(t) = dedup.get_mut(shard as usize) else {
                            continue;
                        };
                        for (i, ev) in vx_proto::packed::events(run.events, run.stream).enumerate()
                        {
                            if let Ok(ev) = ev
                                && let Some(id) = ev.id
                            {
                                let key = dedup::key(seed, run.stream, id);
                                t.insert_newer(key, run.base_seq + i as u64, h.append_ms, now);
                            }
                        }
                    }
                }
                true
            })?;
            if let Some(b) = bad {
                // `kept` is sorted by LSN: the segments after this one.
                let later = &kept[kept.partition_point(|&(l, _)| l <= lsn)..];
                return self.corrupt_or_repair(&(lsn, len), b.offset, b.reason, later, true);
            }
            self.report.scanned_segments += 1;
        }
        Ok(Pass::Done)
    }
}
