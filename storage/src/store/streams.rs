//! The read side of [`Store`]: one stream's metadata, listings, the largest streams, replay
//! cursors and watches. Blocking where it says so (index and carry files are read).

use super::Store;
use crate::api::{ReadQuery, StreamInfo, TopStream};
use crate::index::carry::CarryEntry;
use crate::index::memory::SealedTs;
use crate::index::{chain, idxfile};
use crate::read::cursor::Cursor;
use crate::read::watch;
use std::sync::Arc;

impl Store {
    /// The samples of `stream`'s spans in the active segment, in seq order (see
    /// [`crate::index::memory`]): for tests that what recovery rebuilds is what the writer
    /// made.
    #[doc(hidden)]
    pub fn active_samples(&self, stream: &str) -> Vec<idxfile::Sample> {
        self.inner
            .shared
            .index
            .with(self.shard_of(stream), stream, |s| s.samples.clone())
            .unwrap_or_default()
    }

    /// One listed stream's metadata (visible events only): in memory, or an orphan in the
    /// carry file (all its events retained away). Blocking (may read index files).
    pub fn stream(&self, name: &str) -> Option<StreamInfo> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(name);
        // Retention may remove the oldest node between reading the metadata and reading the
        // chain; the metadata is then re-read (it moved past that node), a bounded few times.
        for attempt in 0..8 {
            let Some((mut info, sealed, head, first_depth)) = shared.index.info(shard, name) else {
                break;
            };
            let (SealedTs::Stale, Some(h)) = (sealed, head) else {
                return Some(info);
            };
            let read = &mut |r| shared.segments.entry(r, name);
            match chain::aggregate(&h, first_depth, read) {
                Ok(agg) => {
                    shared
                        .index
                        .set_sealed_ts(shard, name, head, first_depth, agg);
                    let merged = agg.merge(idxfile::TsRange {
                        min_ts: info.first_ts.unwrap_or(i64::MAX),
                        max_ts: info.last_ts.unwrap_or(i64::MIN),
                    });
                    if info.events > 0 && !merged.is_empty() {
                        info.first_ts = Some(merged.min_ts);
                        info.last_ts = Some(merged.max_ts);
                    }
                    return Some(info);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempt < 7 => continue,
                Err(e) => {
                    tracing::warn!(stream = name, error = %e, "cannot read the stream's ts range");
                    return Some(info);
                }
            }
        }
        if shared.index.with(shard, name, |_| ()).is_some() {
            return None; // deleted
        }
        match shared.carry_get(name) {
            Ok(Some(e)) if !e.is_tombstone() => Some(orphan(&e, shard)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(stream = name, error = %e, "cannot read the carry file");
                None
            }
        }
    }

    /// Streams sorted bytewise by name, starting after `after`, at most `limit`; the second
    /// value is the name to pass as `after` for the next page, if there are more. Blocking.
    pub fn list_streams(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<StreamInfo>, Option<String>) {
        let shared = &self.inner.shared;
        let (mem, _) = shared.index.names(prefix, after, limit.saturating_add(1));
        let carry = shared.carry.read().clone();
        let mut carried: Vec<StreamInfo> = Vec::new();
        if carry.orphans() > 0 {
            let (start, exclusive) = match after {
                Some(a) if a >= prefix => (a, true),
                _ => (prefix, false),
            };
            let scanned = carry.scan(start, exclusive, |e| {
                if !e.name.starts_with(prefix) {
                    return false;
                }
                let shard = self.shard_of(&e.name);
                if !e.is_tombstone() && shared.index.with(shard, &e.name, |_| ()).is_none() {
                    carried.push(orphan(e, shard));
                }
                carried.len() <= limit
            });
            if let Err(e) = scanned {
                tracing::warn!(error = %e, "cannot read the carry file");
            }
        }
        let mut out: Vec<StreamInfo> = Vec::with_capacity(limit.min(1024));
        let mut carried = carried.into_iter().peekable();
        let mut mem = mem.into_iter().peekable();
        while out.len() <= limit {
            let take_mem = match (mem.peek(), carried.peek()) {
                (Some((m, _)), Some(c)) => **m < *c.stream,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_mem {
                if let Some((name, _)) = mem.next()
                    && let Some(info) = self.stream(&name)
                {
                    out.push(info);
                }
            } else if let Some(c) = carried.next() {
                out.push(c);
            }
        }
        let next = if out.len() > limit {
            out.truncate(limit);
            out.last().map(|i| i.stream.clone())
        } else {
            None
        };
        (out, next)
    }

    /// The `n` streams with the most retained events, and the `n` with the most retained bytes
    /// (streams whose events are all retained away have none and are left out). Memory only,
    /// but one pass over every stream: call it off the async workers, and not per request of
    /// a hot path.
    pub fn top_streams(&self, n: usize) -> (Vec<TopStream>, Vec<TopStream>) {
        self.inner.shared.index.top(n)
    }

    /// Number of listed streams (with events, or all retained away).
    pub fn stream_count(&self) -> usize {
        let shared = &self.inner.shared;
        shared.index.listed() + usize::try_from(shared.carry.read().orphans()).unwrap_or(0)
    }

    /// Open a replay cursor; `None` for an unknown or deleted stream. Blocking I/O happens in
    /// [`Cursor::next_event`]: call it from a blocking context.
    pub fn read(&self, stream: &str, q: ReadQuery) -> Option<Cursor> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(stream);
        // Before the metadata: a reset after this ends the cursor.
        let resets = shared.index.resets(shard);
        if let Some(view) = shared.index.view(shard, stream) {
            return Some(Cursor::open(
                Arc::clone(shared),
                shard,
                resets,
                stream,
                view.first_seq,
                view.last_seq,
                q,
            ));
        }
        self.stream(stream)
            .map(|info| Cursor::empty(stream, shard, info.last_seq, q))
    }

    /// Be told when events of `stream` become visible or it is deleted (live followers). The
    /// receiver starts at the stream's current last visible seq (0 if it was never written).
    /// Blocking only for a stream whose metadata is in the carry file.
    pub fn watch(&self, stream: &str) -> tokio::sync::watch::Receiver<watch::Visible> {
        let shared = &self.inner.shared;
        let shard = self.shard_of(stream);
        // The carry file is read before the lock (the writer takes it too); a stream it
        // holds is not in the index, and a write moves it there before it is published.
        let carried = match shared.index.with(shard, stream, |_| ()) {
            Some(()) => 0,
            None => self.stream(stream).map_or(0, |i| i.last_seq),
        };
        shared.watches.subscribe(stream, || {
            shared
                .index
                .with(shard, stream, |s| s.last_seq)
                .unwrap_or(carried)
        })
    }
}

/// The metadata of a stream whose events were all retained away.
fn orphan(e: &CarryEntry, shard: u32) -> StreamInfo {
    StreamInfo {
        stream: e.name.clone(),
        shard,
        first_seq: e.last_seq + 1,
        last_seq: e.last_seq,
        events: 0,
        bytes: 0,
        first_ts: None,
        last_ts: None,
    }
}
