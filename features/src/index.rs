//! One of a shard's index tables: entity → the position of its slot in the shard's arena.
//!
//! Open addressing with linear probing over 8-byte entries, `tag << 32 | (position + 1)` (0:
//! empty), where the tag is 32 bits of the entity's hash and picks the entry a probe starts
//! at. Written here rather than taken from hashbrown for two properties the feature writer
//! needs: the entry a look-up starts at is known from the hash alone, so it can be prefetched
//! events ahead ([`PosTable::prefetch`]); and the tag is in the entry, so a probe reads a slot
//! (a cache miss in the arena) only for the entity it is after. A table grows by doubling, as
//! hashbrown's do (7/8 full at most; [`crate::cost::grown_capacity`]), rehashing from the
//! tags without touching the slots; a removal shifts the entries after it back (no tombstones).

use crate::cost::{alloc_size, grown_capacity};
use crate::prefetch::Lines;

#[derive(Default)]
pub(crate) struct PosTable {
    e: Box<[u64]>,
    len: usize,
}

/// Entries of a table that holds up to `capacity` (0, or a power of two of at least 4).
fn buckets_for(capacity: usize) -> usize {
    if capacity == 0 {
        0
    } else if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    }
}

/// Bytes of a table with room for `capacity` entities.
pub(crate) fn table_bytes(capacity: usize) -> u64 {
    alloc_size(buckets_for(capacity) * std::mem::size_of::<u64>())
}

fn entry(tag: u32, pos: u32) -> u64 {
    (u64::from(tag) << 32) | (u64::from(pos) + 1)
}

fn tag_of(x: u64) -> u32 {
    (x >> 32) as u32
}

fn pos_of(x: u64) -> u32 {
    (x as u32).wrapping_sub(1)
}

impl PosTable {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entities it holds before it must grow.
    pub(crate) fn capacity(&self) -> usize {
        let b = self.e.len();
        if b < 8 {
            b.saturating_sub(1)
        } else {
            b / 8 * 7
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        table_bytes(self.capacity())
    }

    fn mask(&self) -> usize {
        self.e.len().wrapping_sub(1)
    }

    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask()
    }

    /// Start loading the entry a look-up of `tag` starts at.
    pub(crate) fn prefetch(&self, tag: u32, out: &mut Lines) {
        if !self.e.is_empty() {
            out.add(self.e.as_ptr().wrapping_add(self.home(tag)), 8);
        }
    }

    /// The index of the first entry on `tag`'s probe that `hit` accepts.
    fn probe(&self, tag: u32, mut hit: impl FnMut(u64) -> bool) -> Option<usize> {
        if self.e.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(tag);
        // Ends: at most 7/8 of the entries are taken, so a probe meets an empty one.
        loop {
            let x = *self.e.get(i)?;
            if x == 0 {
                return None;
            }
            if hit(x) {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The first position with tag `tag` that `is` accepts.
    pub(crate) fn find(&self, tag: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let i = self.probe(tag, |x| tag_of(x) == tag && is(pos_of(x)))?;
        self.e.get(i).map(|&x| pos_of(x))
    }

    /// Add `pos` under `tag` (not there yet), growing first if the table is full.
    pub(crate) fn insert(&mut self, tag: u32, pos: u32) {
        if self.len + 1 > self.capacity() {
            self.grow_to(grown_capacity(self.capacity(), self.len + 1));
        }
        self.put(entry(tag, pos));
        self.len += 1;
    }

    fn put(&mut self, x: u64) {
        let mask = self.mask();
        let mut i = self.home(tag_of(x));
        while let Some(slot) = self.e.get_mut(i) {
            if *slot == 0 {
                *slot = x;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Room for `n` more entities.
    pub(crate) fn reserve(&mut self, n: usize) {
        if self.len + n > self.capacity() {
            self.grow_to(grown_capacity(self.capacity(), self.len + n));
        }
    }

    fn grow_to(&mut self, capacity: usize) {
        let mut e = vec![0u64; buckets_for(capacity)].into_boxed_slice();
        // Written once now (with a value the compiler cannot see is zero, so it stays): a
        // zeroed allocation may be fresh pages that the kernel maps to its shared zero page
        // until written, and an entry read there (a probe) and then written faults twice, the
        // second time interrupting every CPU to flush its TLB.
        e.fill(std::hint::black_box(0));
        let old = std::mem::replace(&mut self.e, e);
        for x in old.iter().copied().filter(|&x| x != 0) {
            self.put(x);
        }
    }

    /// The index of the entry holding `pos` under `tag`.
    fn slot_of(&self, tag: u32, pos: u32) -> Option<usize> {
        let want = entry(tag, pos);
        self.probe(tag, |x| x == want)
    }

    /// Point the entry of `pos` under `tag` at `to` (the arena moved its slot).
    pub(crate) fn repoint(&mut self, tag: u32, pos: u32, to: u32) {
        if let Some(i) = self.slot_of(tag, pos)
            && let Some(x) = self.e.get_mut(i)
        {
            *x = entry(tag, to);
        }
    }

    /// Remove the entry of `pos` under `tag`; false if there is none. The entries after it
    /// that probed past it move back, so every look-up still finds its entry.
    pub(crate) fn remove(&mut self, tag: u32, pos: u32) -> bool {
        let Some(mut hole) = self.slot_of(tag, pos) else {
            return false;
        };
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let x = self.e.get(j).copied().unwrap_or(0);
            if x == 0 {
                break;
            }
            let h = self.home(tag_of(x));
            // The entry at j may fill the hole unless its home lies in (hole, j], cyclically.
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                if let Some(y) = self.e.get_mut(hole) {
                    *y = x;
                }
                hole = j;
            }
        }
        if let Some(y) = self.e.get_mut(hole) {
            *y = 0;
        }
        self.len -= 1;
        true
    }
}

#[cfg(test)]
impl PosTable {
    /// The mean distance of the entries from where their look-ups start (probe length − 1).
    pub(crate) fn mean_displacement(&self) -> f64 {
        let mask = self.mask();
        let total: usize = self
            .e
            .iter()
            .enumerate()
            .filter(|(_, x)| **x != 0)
            .map(|(i, x)| (i.wrapping_sub(self.home(tag_of(*x)))) & mask)
            .sum();
        total as f64 / self.len.max(1) as f64
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a map, through inserts, removals and moves, with tags crowded into few
        /// values so probes run long and wrap around.
        #[test]
        fn finds_what_a_map_holds(ops in prop::collection::vec((0u8..3, 0u32..64, 0u32..8), 1..400)) {
            let mut t = PosTable::default();
            let mut m: HashMap<u32, u32> = HashMap::new(); // pos -> tag
            let mut next = 0u32;
            for (op, pick, tag) in ops {
                let tag = tag.wrapping_mul(0x9E37_79B9) | (tag << 1);
                match op {
                    0 => {
                        t.insert(tag, next);
                        m.insert(next, tag);
                        next += 1;
                    }
                    1 => {
                        let key = m.keys().copied().nth(pick as usize % m.len().max(1));
                        if let Some(p) = key {
                            let tg = m.remove(&p).unwrap();
                            prop_assert!(t.remove(tg, p));
                            prop_assert!(!t.remove(tg, p));
                        }
                    }
                    _ => {
                        let key = m.keys().copied().nth(pick as usize % m.len().max(1));
                        if let Some(p) = key {
                            let tg = m.remove(&p).unwrap();
                            t.repoint(tg, p, next);
                            m.insert(next, tg);
                            next += 1;
                        }
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                prop_assert!(t.len() <= t.capacity());
                for (&p, &tg) in &m {
                    prop_assert_eq!(t.find(tg, |q| q == p), Some(p));
                }
            }
        }
    }
}
