//! The reader-facing index: per shard, each stream's metadata and its run index (where each
//! run of its events lives in the log), plus a sorted name list for `GET /v1/streams`.
//! Written only by the writer thread (after a record reached the visibility level), read by
//! request handlers; readers never block the writer for long (short read locks).

use crate::api::StreamInfo;
use hashbrown::HashMap;
use parking_lot::RwLock;
use std::collections::BTreeMap;

/// Where one run of a stream's events lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLoc {
    pub first_seq: u64,
    pub count: u32,
    /// Bytes of the run's events.
    pub events_len: u32,
    /// First LSN of the segment holding the run.
    pub segment: u64,
    /// File offset of the run's first event.
    pub offset: u64,
    /// Min and max `ts` of the run's events, so time filters skip whole runs.
    pub min_ts: i64,
    pub max_ts: i64,
}

#[derive(Default, Debug)]
pub struct StreamIdx {
    pub runs: Vec<RunLoc>,
    pub events: u64,
    pub bytes: u64,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
}

impl StreamIdx {
    pub fn first_seq(&self) -> u64 {
        self.runs.first().map_or(0, |r| r.first_seq)
    }

    pub fn last_seq(&self) -> u64 {
        self.runs
            .last()
            .map_or(0, |r| r.first_seq + u64::from(r.count) - 1)
    }

    /// The run holding `seq`, or the first run after it.
    pub fn run_at(&self, seq: u64) -> Option<RunLoc> {
        let i = self
            .runs
            .partition_point(|r| r.first_seq + u64::from(r.count) <= seq);
        self.runs.get(i).copied()
    }
}

pub struct Index {
    shards: Vec<RwLock<HashMap<Box<str>, StreamIdx>>>,
    names: RwLock<BTreeMap<Box<str>, u32>>,
}

impl Index {
    pub fn new(shards: u32) -> Self {
        Index {
            shards: (0..shards).map(|_| RwLock::new(HashMap::new())).collect(),
            names: RwLock::new(BTreeMap::new()),
        }
    }

    /// Record a run that became visible.
    pub fn apply(&self, shard: u32, stream: &str, run: RunLoc, bytes: u64) {
        let Some(lock) = self.shards.get(shard as usize) else {
            return;
        };
        let mut g = lock.write();
        let idx = match g.get_mut(stream) {
            Some(idx) => idx,
            None => {
                self.names.write().insert(stream.into(), shard);
                g.entry(stream.into()).or_default()
            }
        };
        idx.runs.push(run);
        idx.events += u64::from(run.count);
        idx.bytes += bytes;
        idx.first_ts = Some(idx.first_ts.map_or(run.min_ts, |t| t.min(run.min_ts)));
        idx.last_ts = Some(idx.last_ts.map_or(run.max_ts, |t| t.max(run.max_ts)));
    }

    /// Run `f` on a stream's index under its shard's read lock.
    pub fn with<R>(&self, shard: u32, stream: &str, f: impl FnOnce(&StreamIdx) -> R) -> Option<R> {
        let g = self.shards.get(shard as usize)?.read();
        g.get(stream).map(f)
    }

    pub fn info(&self, shard: u32, stream: &str) -> Option<StreamInfo> {
        self.with(shard, stream, |s| StreamInfo {
            stream: stream.to_string(),
            shard,
            first_seq: s.first_seq(),
            last_seq: s.last_seq(),
            events: s.events,
            bytes: s.bytes,
            first_ts: s.first_ts,
            last_ts: s.last_ts,
        })
    }

    /// Names with `prefix`, after `after`, in bytewise order; at most `limit` plus whether more
    /// follow.
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

    pub fn stream_count(&self) -> usize {
        self.names.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(first_seq: u64, count: u32) -> RunLoc {
        RunLoc {
            first_seq,
            count,
            events_len: 10,
            segment: 1,
            offset: 0,
            min_ts: first_seq as i64,
            max_ts: first_seq as i64 + 1,
        }
    }

    #[test]
    fn runs_and_names() {
        let ix = Index::new(2);
        ix.apply(0, "b", run(1, 3), 30);
        ix.apply(0, "b", run(4, 2), 20);
        ix.apply(1, "a", run(1, 1), 10);
        ix.apply(1, "c", run(1, 1), 10);
        let info = ix.info(0, "b").unwrap_or_else(|| panic!("missing"));
        assert_eq!(
            (info.first_seq, info.last_seq, info.events, info.bytes),
            (1, 5, 5, 50)
        );
        assert_eq!(
            ix.with(0, "b", |s| s.run_at(4).map(|r| r.first_seq))
                .flatten(),
            Some(4)
        );
        assert_eq!(
            ix.with(0, "b", |s| s.run_at(3).map(|r| r.first_seq))
                .flatten(),
            Some(1)
        );
        assert_eq!(ix.with(0, "b", |s| s.run_at(6)).flatten(), None);
        let (names, more) = ix.names("", None, 2);
        assert_eq!(
            names.iter().map(|n| &*n.0).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
        assert!(more);
        let (names, more) = ix.names("", Some("b"), 2);
        assert_eq!(names.iter().map(|n| &*n.0).collect::<Vec<_>>(), vec!["c"]);
        assert!(!more);
        let (names, _) = ix.names("b", None, 10);
        assert_eq!(names.len(), 1);
    }
}
