//! What the writer knows of the streams' `seq`s, visible or not yet: per stream in memory,
//! its last assigned `seq`, its delete floor and whether it is deleted; and the counts
//! `storage.max_streams` checks (live streams, and orphans of the carry file not in memory).
//! Streams not in memory are in the carry file ([`crate::log::state::LogWriter::state_of`]).

use crate::index::carry::CarryEntry;
use hashbrown::HashMap;

/// What the writer knows of a stream's `seq`s, visible or not yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WState {
    /// Last assigned seq.
    pub last: u64,
    /// Every seq ≤ floor is deleted.
    pub floor: u64,
    /// Tombstoned and not written since.
    pub deleted: bool,
}

impl From<&CarryEntry> for WState {
    fn from(e: &CarryEntry) -> Self {
        WState {
            last: e.last_seq,
            floor: e.floor,
            deleted: e.is_tombstone(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Streams {
    /// Per stream in memory: assigned seqs (including not-yet-visible ones).
    pub(crate) map: HashMap<Box<str>, WState>,
    /// Streams in `map` that are not deleted; with `orphans`, what `storage.max_streams`
    /// counts.
    pub(crate) live: u64,
    /// Orphans in the carry file that are not in memory.
    pub(crate) orphans: u64,
}

impl Streams {
    /// Bring a stream into memory before its first write or delete: from the carry file
    /// (`from_carry`), or new. Keeps `live` and `orphans` in step. Returns its state.
    pub(crate) fn load(&mut self, stream: &str, from_carry: Option<WState>) -> WState {
        if let Some(s) = self.map.get(stream) {
            return *s;
        }
        let st = match from_carry {
            Some(s) if !s.deleted => {
                // An orphan: it moves from the carry's count to the live one.
                self.orphans = self.orphans.saturating_sub(1);
                self.live += 1;
                s
            }
            Some(s) => s,
            None => WState {
                last: 0,
                floor: 0,
                deleted: true,
            },
        };
        self.map.insert(stream.into(), st);
        st
    }

    /// Set a stream's state, counting it live or not.
    pub(crate) fn set(&mut self, stream: &str, st: WState) {
        let was_live = self.map.get(stream).is_some_and(|s| !s.deleted);
        match (was_live, st.deleted) {
            (false, false) => self.live += 1,
            (true, true) => self.live = self.live.saturating_sub(1),
            _ => {}
        }
        if let Some(s) = self.map.get_mut(stream) {
            *s = st;
        } else {
            self.map.insert(stream.into(), st);
        }
    }

    /// Put a stream back as it was before a refused group or record (`None`: not in memory).
    pub(crate) fn restore(&mut self, stream: Box<str>, prior: Option<WState>) {
        match prior {
            Some(st) => {
                self.map.insert(stream, st);
            }
            None => {
                self.map.remove(&stream);
            }
        }
    }

    /// `live` and `orphans`, to restore after a refused group or record.
    pub(crate) fn counters(&self) -> (u64, u64) {
        (self.live, self.orphans)
    }

    pub(crate) fn set_counters(&mut self, (live, orphans): (u64, u64)) {
        (self.live, self.orphans) = (live, orphans);
    }

    /// Count the live streams and the carry file's orphans again, from the streams in
    /// memory and `carried` (every carry entry), after recovery moved streams around.
    pub(crate) fn recount(&mut self, carried: &[CarryEntry]) {
        self.live = self.map.values().filter(|s| !s.deleted).count() as u64;
        self.recount_orphans(carried);
    }

    /// Count the orphans again from `carried` (every carry entry).
    pub(crate) fn recount_orphans(&mut self, carried: &[CarryEntry]) {
        self.orphans = carried
            .iter()
            .filter(|e| !e.is_tombstone() && !self.map.contains_key(e.name.as_str()))
            .count() as u64;
    }
}
