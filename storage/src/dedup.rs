//! One shard's table of remembered `(stream, id)` pairs (docs/API.md §2 idempotency): 128-bit keyed
//! hashes with the seq they were stored at, forgotten oldest-first once they leave
//! `ingest.dedup_window` or the shard's share of `ingest.dedup_memory` is used up.
//! Owned by the writer thread; the horizon is published for metrics.

use hashbrown::HashMap;
use std::collections::VecDeque;

/// Approximate bytes one remembered id costs: map slot (key, seq, time, control byte and load
/// factor slack) plus its place in the age queue.
pub const ENTRY_BYTES: u64 = 80;

/// The keyed 128-bit hash of a `(stream, id)` pair. `0xFF` never occurs in UTF-8, so it
/// separates the two unambiguously.
pub fn key(dedup_key: u64, stream: &str, id: &str) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::with_seed(dedup_key);
    h.update(stream.as_bytes());
    h.update(&[0xFF]);
    h.update(id.as_bytes());
    h.digest128()
}

pub struct DedupTable {
    map: HashMap<u128, (u64, i64), foldhash::fast::FixedState>,
    order: VecDeque<(u128, i64)>,
    max_entries: usize,
    window_ms: i64,
}

impl DedupTable {
    pub fn new(memory_bytes: u64, window_ms: i64) -> Self {
        DedupTable {
            map: HashMap::default(),
            order: VecDeque::new(),
            max_entries: (memory_bytes / ENTRY_BYTES).max(1) as usize,
            window_ms,
        }
    }

    /// The seq of a remembered pair stored within the window before `now_ms`.
    pub fn get(&self, key: u128, now_ms: i64) -> Option<u64> {
        self.map
            .get(&key)
            .filter(|&&(_, at)| at >= now_ms.saturating_sub(self.window_ms))
            .map(|&(seq, _)| seq)
    }

    pub fn insert(&mut self, key: u128, seq: u64, append_ms: i64, now_ms: i64) {
        self.map.insert(key, (seq, append_ms));
        self.order.push_back((key, append_ms));
        self.evict(now_ms);
    }

    /// Remember `key` at `seq` unless a later occurrence is remembered already. A stream's seqs
    /// grow in log order, so the highest seq is the occurrence that counts: after a delete, the
    /// same id stored again replaces the one the tombstone removed, whatever order recovery
    /// reads the segments in.
    pub fn insert_newer(&mut self, key: u128, seq: u64, append_ms: i64, now_ms: i64) {
        if self.map.get(&key).is_none_or(|&(s, _)| s < seq) {
            self.insert(key, seq, append_ms, now_ms);
        }
    }

    /// Forget what fell out of the window, then the oldest while over the memory budget.
    pub fn evict(&mut self, now_ms: i64) {
        let oldest_allowed = now_ms.saturating_sub(self.window_ms);
        while let Some(&(k, at)) = self.order.front() {
            if at >= oldest_allowed && self.order.len() <= self.max_entries {
                break;
            }
            self.order.pop_front();
            // A key re-stored after it expired has a newer time: keep that entry.
            if self.map.get(&k).is_some_and(|&(_, t)| t == at) {
                self.map.remove(&k);
            }
        }
    }

    /// Forget every id (the shard's streams were reset).
    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// How many ids the table remembers at most.
    pub fn capacity(&self) -> usize {
        self.max_entries
    }

    /// Append time of the oldest remembered id: how far back dedup reaches.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.order.front().map(|&(_, at)| at)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_budget() {
        let mut t = DedupTable::new(ENTRY_BYTES * 2, 1000);
        let (a, b, c) = (key(1, "s", "a"), key(1, "s", "b"), key(1, "s", "c"));
        assert_ne!(key(1, "s", "a"), key(2, "s", "a"));
        assert_ne!(key(1, "sa", "b"), key(1, "s", "ab"));
        t.insert(a, 1, 100, 100);
        t.insert(b, 2, 200, 200);
        assert_eq!(t.get(a, 300), Some(1));
        t.insert(c, 3, 300, 300); // over budget: a goes
        assert_eq!(t.get(a, 300), None);
        assert_eq!(t.get(b, 300), Some(2));
        assert_eq!(t.oldest_ms(), Some(200));
        assert_eq!(t.get(b, 1201), None); // out of the window
        t.evict(1250);
        assert_eq!(t.len(), 1);
    }
}
