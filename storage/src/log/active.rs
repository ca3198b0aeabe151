//! The active segment as the writer holds it: the only file appended to, its name, how far
//! it reaches, its records' append times, the ids and the index spans and samples it holds in
//! memory, and the streams it touched (what its index file will list when it is sealed), and
//! whether what is written of it is synced.

use crate::index::idxfile::TsRange;
use crate::vfs::VFile;
use hashbrown::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub(crate) struct Active {
    pub(crate) file: Arc<dyn VFile>,
    /// Its first LSN (its name).
    pub(crate) first: u64,
    pub(crate) len: u64,
    /// Min/max append time of its records.
    pub(crate) append: TsRange,
    /// Events with an id in it.
    pub(crate) ids: u64,
    /// Spans of its index in memory, and their samples.
    pub(crate) spans: usize,
    pub(crate) samples: usize,
    /// Streams with runs or a tombstone in it.
    pub(crate) touched: HashMap<Box<str>, u32>,
    /// Bytes written since its last fdatasync.
    pub(crate) unsynced: bool,
    /// When it was last synced (or the sync last tried).
    pub(crate) last_sync: Instant,
}

impl Active {
    /// `file`, whose first LSN is `first`, as read back from its start: nothing in it yet.
    pub(crate) fn new(file: Arc<dyn VFile>, first: u64) -> Active {
        Active {
            file,
            first,
            len: 0,
            append: TsRange::EMPTY,
            ids: 0,
            spans: 0,
            samples: 0,
            touched: HashMap::new(),
            unsynced: false,
            last_sync: Instant::now(),
        }
    }

    /// Bytes of its index in memory, as the active index budget counts them.
    pub(crate) fn index_bytes(&self) -> usize {
        self.spans * crate::index::memory::SPAN_BYTES
            + self.samples * crate::index::samples::SAMPLE_MEM
    }

    /// A run or tombstone of `stream` (shard `shard`) is in it.
    pub(crate) fn touch(&mut self, stream: &str, shard: u32) {
        if !self.touched.contains_key(stream) {
            self.touched.insert(stream.into(), shard);
        }
    }
}
