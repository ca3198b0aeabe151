//! Sealing the active segment: its index file written, the next segment started.
//!
//! 1. fsync the segment (under `interval`, what is unsynced);
//! 2. build its index file (version 3) from the active spans and samples of every stream it
//!    touched, linking each stream's new node into its chain ([`crate::index::chain`]; at most
//!    one older node read per stream), with the tables of applied origins and shard resets as
//!    of the segment's end (cluster mode; [`crate::index::idxfile::Tables`]), write it to
//!    `<lsn>.idx.tmp`, fsync, rename to `<lsn>.idx`;
//! 3. create the next segment (named by the next LSN), fsync the directory: this makes the
//!    rename and the create durable together;
//! 4. publish: the streams' heads move to the new nodes and their active spans and samples are
//!    dropped.
//!
//! A failure before 4 leaves everything as it was (a leftover new segment is removed, and
//! at start-up an empty segment that does not continue the log is a stray and removed): the
//! writer keeps appending to the active segment and tries again after the next group.
//!

use crate::index::carry::CarryEntry;
use crate::index::chain::{self, ChainHead};
use crate::index::idxfile::{
    self, Entry, F_EVENTS, F_TOMBSTONE, IdxBuilder, SegSummary, Tables, TsRange,
};
use crate::index::memory::SealedTs;
use crate::log::segment::{self, SegInfo};
use crate::log::state::LogWriter;
use crate::vfs::OpenMode;
use std::io;
use std::time::Instant;
use vx_proto::shard::shard_of;

/// A stream of a segment being sealed: shard, name, and its new head with the new node's
/// own aggregate (none when it only has a tombstone there).
type SealedStream = (u32, Box<str>, Option<(ChainHead, TsRange)>);

impl LogWriter {
    /// Write the active segment's index file and, with `roll`, start the next segment (see the
    /// module docs). The caller has synced the segment.
    pub fn seal(&mut self, roll: bool) -> io::Result<()> {
        let started = Instant::now();
        let seg = self.active.first;
        let mut names: Vec<(Box<str>, u32)> = self
            .active
            .touched
            .iter()
            .map(|(n, &s)| (n.clone(), s))
            .collect();
        names.sort_unstable();
        let mut b = IdxBuilder::new();
        // Per stream: its shard, name, new head and the aggregate of the new node.
        let mut heads: Vec<SealedStream> = Vec::with_capacity(names.len());
        for (name, shard) in &names {
            let snap = self.shared.index.with(*shard, name, |s| {
                (
                    s.active.clone(),
                    s.samples.clone(),
                    s.active_count,
                    s.active_bytes,
                    s.active_agg,
                    s.active_tombstone,
                    s.head,
                )
            });
            let Some((spans, samples, count, bytes, agg, tomb, head)) = snap else {
                continue;
            };
            let mut e = Entry {
                name: name.to_string(),
                floor: tomb.unwrap_or(0),
                flags: if tomb.is_some() { F_TOMBSTONE } else { 0 },
                ..Entry::default()
            };
            let mut new_head = None;
            if let (Some(first), Some(last)) = (spans.first(), spans.last()) {
                e.flags |= F_EVENTS;
                e.first_seq = first.first_seq;
                e.last_seq = last.last_seq();
                e.count = count;
                e.bytes = bytes;
                e.own = Some(agg);
                let segments = &self.shared.segments;
                let links = chain::link(head.as_ref(), agg, &mut |r| segments.entry(r, name))?;
                links.fill(&mut e);
                new_head = Some((ChainHead::from_entry(seg, &e), agg));
            }
            b.add(&e, &spans, &samples)?;
            heads.push((*shard, name.clone(), new_head));
        }
        let summary = SegSummary {
            segment: seg,
            next_lsn: self.next_lsn,
            log_len: self.active.len,
            min_append_ms: self.active.append.min_ts,
            max_append_ms: self.active.append.max_ts,
            ids: self.active.ids,
        };
        let tables = Tables {
            origins: self.origins.list(),
            resets: self.origins.resets_list(),
        };
        let bytes = b.finish_with(&summary, &tables)?;
        let idx = segment::idx_path(&self.log_dir, seg);
        let tmp = idx.with_extension("idx.tmp");
        let written = (|| -> io::Result<()> {
            if self.vfs.exists(&tmp)? {
                self.vfs.remove(&tmp)?;
            }
            let f = self.vfs.open(&tmp, OpenMode::CreateNew)?;
            f.write_all_at(&bytes, 0)?;
            f.sync_data()?;
            self.vfs.rename(&tmp, &idx)
        })();
        if let Err(e) = written {
            let _ = self.vfs.remove(&tmp);
            return Err(e);
        }
        let next_path = segment::segment_path(&self.log_dir, self.next_lsn);
        let next = if roll {
            match self.vfs.open(&next_path, OpenMode::CreateNew) {
                Ok(f) => Some(f),
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        if let Err(e) = self.vfs.sync_dir(&self.log_dir) {
            if next.is_some() {
                let _ = self.vfs.remove(&next_path);
            }
            return Err(e);
        }
        // Published: readers move to the index file.
        let header = idxfile::IdxContents::header_of(&bytes)?;
        self.shared.segments.update(seg, |s| {
            s.idx = Some(header);
            s.idx_len = bytes.len() as u64;
            s.log_len = self.active.len;
            s.min_append_ms = self.active.append.min_ts;
            s.max_append_ms = self.active.append.max_ts;
        });
        for (shard, name, head) in &heads {
            let Some(lock) = self.shared.index.shard(*shard) else {
                continue;
            };
            let mut g = lock.write();
            if let Some(s) = g.streams.get_mut(&**name) {
                if let Some((h, agg)) = head {
                    s.head = Some(*h);
                    if let SealedTs::Known(a) = s.sealed_ts {
                        s.sealed_ts = SealedTs::Known(a.merge(*agg));
                    }
                }
                s.active = Vec::new();
                s.samples = Vec::new();
                s.active_agg = TsRange::EMPTY;
                s.active_count = 0;
                s.active_bytes = 0;
                s.active_tombstone = None;
            }
        }
        self.active.touched.clear();
        self.active.spans = 0;
        self.active.samples = 0;
        if let Some(f) = next {
            self.shared.segments.insert(SegInfo {
                first_lsn: self.next_lsn,
                log_len: 0,
                idx_len: 0,
                min_append_ms: i64::MAX,
                max_append_ms: i64::MIN,
                idx: None,
            });
            self.start_segment(f, self.next_lsn);
        }
        if let Some(o) = &self.cfg.observer {
            o.sealed(started.elapsed());
        }
        tracing::debug!(segment = seg, streams = heads.len(), "sealed log segment");
        // Deleted streams whose tombstone is now in a sealed segment leave memory.
        let gone: Vec<CarryEntry> = heads
            .iter()
            .filter_map(|(_, name, _)| {
                let st = self.streams.map.get(&**name)?;
                st.deleted.then(|| CarryEntry {
                    name: name.to_string(),
                    last_seq: st.last,
                    floor: st.floor,
                })
            })
            .collect();
        if !gone.is_empty() {
            match self.carry_update(&gone) {
                Ok(()) => {
                    for e in &gone {
                        self.shared
                            .index
                            .remove(shard_of(&e.name, self.shards), &e.name);
                        self.streams.map.remove(e.name.as_str());
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot write the carry file; deleted streams stay in memory")
                }
            }
        }
        Ok(())
    }
}
