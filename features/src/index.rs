//! A shard's index: entity → the position of its slot in the shard's arena, in fixed-size
//! segments found through a directory (extendible hashing), so that growing never rehashes
//! more than one segment.
//!
//! A segment ([`PosTable`]) is open addressing with linear probing over 8-byte entries,
//! `tag << 32 | (position + 1)` (0: empty), where the tag is 32 bits of the entity's hash and
//! picks the entry a probe starts at (its low bits). Written here rather than taken from
//! hashbrown for two properties the feature writer needs: the entry a look-up starts at is
//! known from the hash alone, so it can be prefetched events ahead ([`Index::prefetch`]); and
//! the tag is in the entry, so a probe reads a slot (a cache miss in the arena) only for the
//! entity it is after. A removal shifts the entries after it back (no tombstones).
//!
//! The directory ([`Index`]) maps the tag's top `depth` bits to a segment; a segment of local
//! depth `d` holds the tags whose top `d` bits are its. A shard starts with one small segment
//! that doubles (7/8 full at most) up to [`SEG_BUCKETS`]; past that, a full segment is
//! **split**: its entries whose next bit is 1 move to a new segment, and the directory doubles
//! first if the segment's depth was the directory's. So an insert costs at most one
//! segment's rehash (512 entries, a few microseconds) and, rarely, a copy of the directory
//! (4 bytes a segment): whatever the shard holds, no growth stops the writer or a reader of
//! the shard for longer (issue 30: at 10M entities a table of the fixed 32 per shard doubled
//! tens of thousands of entries under the shard's lock).

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
    /// An empty table of `buckets` entries (a power of two).
    fn with_buckets(buckets: usize) -> PosTable {
        let mut e = vec![0u64; buckets].into_boxed_slice();
        // Written once now (with a value the compiler cannot see is zero, so it stays): a
        // zeroed allocation may be fresh pages that the kernel maps to its shared zero page
        // until written, and an entry read there (a probe) and then written faults twice, the
        // second time interrupting every CPU to flush its TLB.
        e.fill(std::hint::black_box(0));
        PosTable { e, len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entries it has room for, free or not.
    fn buckets(&self) -> usize {
        self.e.len()
    }

    /// Every entry held.
    fn entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.e.iter().copied().filter(|&x| x != 0)
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

    /// Add `pos` under `tag` (not there yet), growing first if the table is full (a table of
    /// its own; in a shard's index, [`Index::insert`] grows or splits it).
    #[cfg(test)]
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
        let old = std::mem::replace(&mut self.e, PosTable::with_buckets(buckets_for(capacity)).e);
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

/// Entries of a full-size segment: 4 KiB, 448 entities before it splits. Splitting one moves
/// at most this many entries.
pub(crate) const SEG_BUCKETS: usize = 512;
/// The most tag bits the directory uses (a directory of 2^16 segments, 29M entities in a
/// shard, 3.7G over 128 shards); a segment that would need more (only tags that share their
/// top 16 bits, which a hash does not make by chance) grows past [`SEG_BUCKETS`] instead of
/// splitting, so a flood of such tags costs long probes, as in any one hash table, and at
/// most a 256 KiB directory.
const MAX_DEPTH: u32 = 16;
/// Entities a full-size segment holds before it splits (7/8 of its entries).
const SEG_CAPACITY: usize = SEG_BUCKETS / 8 * 7;
/// Bytes of a full-size segment.
pub(crate) fn seg_bytes() -> u64 {
    alloc_size(SEG_BUCKETS * std::mem::size_of::<u64>())
}

/// One segment: its table and its local depth (the top bits of the tags it holds).
#[derive(Default)]
struct Seg {
    t: PosTable,
    depth: u32,
}

/// A shard's index: the directory and its segments (see the module docs).
pub(crate) struct Index {
    /// `2^depth` segment numbers, by the tag's top `depth` bits.
    dir: Vec<u32>,
    depth: u32,
    segs: Vec<Seg>,
    /// Bytes of the directory, the segment list and the segments, kept as they change.
    bytes: u64,
}

/// An empty index allocates nothing: its first insert makes its first segment.
impl Default for Index {
    fn default() -> Self {
        Index {
            dir: Vec::new(),
            depth: 0,
            segs: Vec::new(),
            bytes: 0,
        }
    }
}

impl Index {
    /// The segment the tag's look-up goes to.
    pub(crate) fn seg_of(&self, tag: u32) -> usize {
        let at = if self.depth == 0 {
            0
        } else {
            (tag >> (32 - self.depth)) as usize
        };
        self.dir.get(at).map_or(0, |&s| s as usize)
    }

    fn seg(&self, tag: u32) -> Option<&PosTable> {
        self.segs.get(self.seg_of(tag)).map(|s| &s.t)
    }

    /// Entities it holds.
    pub(crate) fn len(&self) -> usize {
        self.segs.iter().map(|s| s.t.len()).sum()
    }

    /// Its bytes, as kept.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Its bytes counted from scratch (what the kept count must equal).
    pub(crate) fn measure(&self) -> u64 {
        alloc_size(self.dir.capacity() * std::mem::size_of::<u32>())
            + alloc_size(self.segs.capacity() * std::mem::size_of::<Seg>())
            + self.segs.iter().map(|s| s.t.bytes()).sum::<u64>()
    }

    /// Start loading the entry a look-up of `tag` starts at.
    pub(crate) fn prefetch(&self, tag: u32, out: &mut Lines) {
        if let Some(t) = self.seg(tag) {
            t.prefetch(tag, out);
        }
    }

    /// The first position with tag `tag` that `is` accepts.
    pub(crate) fn find(&self, tag: u32, is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.seg(tag)?.find(tag, is)
    }

    /// Point the entry of `pos` under `tag` at `to` (the arena moved its slot).
    pub(crate) fn repoint(&mut self, tag: u32, pos: u32, to: u32) {
        let s = self.seg_of(tag);
        if let Some(seg) = self.segs.get_mut(s) {
            seg.t.repoint(tag, pos, to);
        }
    }

    /// Remove the entry of `pos` under `tag`; false if there is none. Segments never merge
    /// (as tables never shrank).
    pub(crate) fn remove(&mut self, tag: u32, pos: u32) -> bool {
        let s = self.seg_of(tag);
        self.segs
            .get_mut(s)
            .is_some_and(|seg| seg.t.remove(tag, pos))
    }

    /// Add `pos` under `tag` (not there yet): into its segment, after growing or splitting it
    /// if it is full.
    pub(crate) fn insert(&mut self, tag: u32, pos: u32) {
        if self.segs.is_empty() {
            self.segs.push(Seg::default());
            self.dir.push(0);
            self.bytes = self.measure();
        }
        loop {
            let s = self.seg_of(tag);
            let Some(seg) = self.segs.get_mut(s) else {
                return;
            };
            if seg.t.len() < seg.t.capacity() {
                seg.t.put(entry(tag, pos));
                seg.t.len += 1;
                return;
            }
            let grows = seg.t.buckets() < SEG_BUCKETS || seg.depth >= MAX_DEPTH;
            if grows {
                let before = seg.t.bytes();
                let cap = grown_capacity(seg.t.capacity(), seg.t.len() + 1);
                seg.t.grow_to(cap);
                self.bytes = (self.bytes + seg.t.bytes()).saturating_sub(before);
            } else {
                self.split(s);
            }
        }
    }

    /// Split full segment `s` on the tag bit after its depth, doubling the directory first
    /// if the segment's depth was the directory's.
    fn split(&mut self, s: usize) {
        let before = self.measure_list();
        let Some(d) = self.segs.get(s).map(|seg| seg.depth) else {
            return;
        };
        if d == self.depth {
            // Each directory entry becomes two: the tag's next bit picks one of them.
            self.dir = self.dir.iter().flat_map(|&x| [x, x]).collect();
            self.depth += 1;
        }
        let new = u32::try_from(self.segs.len()).unwrap_or(u32::MAX);
        let bit = 31 - d;
        let mut low = PosTable::with_buckets(SEG_BUCKETS);
        let mut high = PosTable::with_buckets(SEG_BUCKETS);
        if let Some(seg) = self.segs.get_mut(s) {
            for x in seg.t.entries() {
                let t = if (tag_of(x) >> bit) & 1 == 1 {
                    &mut high
                } else {
                    &mut low
                };
                t.put(x);
                t.len += 1;
            }
            let old = std::mem::replace(&mut seg.t, low);
            seg.depth = d + 1;
            self.bytes = (self.bytes + seg.t.bytes()).saturating_sub(old.bytes());
        }
        self.bytes += high.bytes();
        self.segs.push(Seg {
            t: high,
            depth: d + 1,
        });
        // The entries of `s` whose bit after the first `d` is 1 now go to the new segment.
        let shift = self.depth - d - 1;
        for (i, x) in self.dir.iter_mut().enumerate() {
            if *x as usize == s && (i >> shift) & 1 == 1 {
                *x = new;
            }
        }
        self.bytes = (self.bytes + self.measure_list()).saturating_sub(before);
    }

    /// Bytes of the directory and the segment list.
    fn measure_list(&self) -> u64 {
        alloc_size(self.dir.capacity() * std::mem::size_of::<u32>())
            + alloc_size(self.segs.capacity() * std::mem::size_of::<Seg>())
    }

    /// Room for `n` more entities, made at once when it holds none yet (a snapshot's load):
    /// enough full-size segments, a quarter free. Once it holds entities, inserts make room.
    pub(crate) fn reserve(&mut self, n: usize) {
        if self.len() > 0 || n == 0 {
            return;
        }
        if n <= SEG_CAPACITY {
            let mut seg = Seg::default();
            seg.t.reserve(n);
            self.segs = vec![seg];
            self.dir = vec![0];
            self.depth = 0;
            self.bytes = self.measure();
            return;
        }
        let segs = (n + n / 3).div_ceil(SEG_CAPACITY).next_power_of_two();
        let depth = segs.ilog2().min(MAX_DEPTH);
        self.depth = depth;
        self.dir = (0..1u32 << depth).collect();
        self.segs = (0..1usize << depth)
            .map(|_| Seg {
                t: PosTable::with_buckets(SEG_BUCKETS),
                depth,
            })
            .collect();
        self.bytes = self.measure();
    }

    /// The most adding `n` entities under `tag` can add: its segment's growth and the splits
    /// they may take, each a full-size segment and the directory's doubling (an upper bound;
    /// the budget's exact check).
    pub(crate) fn growth(&self, tag: u32, n: usize) -> u64 {
        let Some(seg) = self.segs.get(self.seg_of(tag)) else {
            // The first segment, and the directory and list that find it.
            return table_bytes(grown_capacity(0, n)).max(seg_bytes())
                + alloc_size(std::mem::size_of::<u32>())
                + alloc_size(std::mem::size_of::<Seg>());
        };
        let (len, cap) = (seg.t.len(), seg.t.capacity());
        if len + n <= cap {
            return 0;
        }
        if seg.t.buckets() < SEG_BUCKETS {
            let grown = grown_capacity(cap, len + n);
            if table_bytes(grown) <= seg_bytes() {
                return table_bytes(grown);
            }
        }
        let splits = (len + n).div_ceil(SEG_CAPACITY / 2) as u64;
        splits * (seg_bytes() + 2 * self.measure_list())
    }

    /// The most one insert can add: a full-size segment, and a doubling of the directory and
    /// the segment list (the budget's cheap bound).
    pub(crate) fn max_step(&self) -> u64 {
        seg_bytes() + 2 * self.measure_list()
    }

    /// Buckets of the largest segment: at most [`SEG_BUCKETS`] (but for tags that share
    /// their top [`MAX_DEPTH`] bits).
    #[cfg(test)]
    pub(crate) fn largest_segment(&self) -> usize {
        self.segs.iter().map(|s| s.t.buckets()).max().unwrap_or(0)
    }

    /// The mean distance of the entries from where their look-ups start, over the segments.
    #[cfg(test)]
    pub(crate) fn mean_displacement(&self) -> f64 {
        let n = self.len().max(1) as f64;
        self.segs
            .iter()
            .map(|s| s.t.mean_displacement() * s.t.len() as f64)
            .sum::<f64>()
            / n
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

    fn spread(i: u32) -> u32 {
        (xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) >> 32) as u32
    }

    proptest! {
        /// The index against a map, through enough inserts to split segments, removals and
        /// moves: every entry is found, the kept bytes are the measured ones, and no segment
        /// passes its fixed size.
        #[test]
        fn the_index_finds_what_a_map_holds(ops in prop::collection::vec((0u8..4, 0u32..4000), 1..3000)) {
            let mut ix = Index::default();
            let mut m: HashMap<u32, u32> = HashMap::new(); // pos -> tag
            let mut next = 0u32;
            for (op, pick) in ops {
                match op {
                    0 | 1 => {
                        let tag = spread(next);
                        ix.insert(tag, next);
                        m.insert(next, tag);
                        next += 1;
                    }
                    2 => {
                        if let Some(&p) = m.keys().nth(pick as usize % m.len().max(1)) {
                            let tg = m.remove(&p).unwrap();
                            prop_assert!(ix.remove(tg, p));
                            prop_assert!(!ix.remove(tg, p));
                        }
                    }
                    _ => {
                        if let Some(&p) = m.keys().nth(pick as usize % m.len().max(1)) {
                            let tg = m.remove(&p).unwrap();
                            ix.repoint(tg, p, next);
                            m.insert(next, tg);
                            next += 1;
                        }
                    }
                }
            }
            prop_assert_eq!(ix.len(), m.len());
            prop_assert_eq!(ix.bytes(), ix.measure());
            prop_assert!(ix.largest_segment() <= SEG_BUCKETS);
            for (&p, &tg) in &m {
                prop_assert_eq!(ix.find(tg, |q| q == p), Some(p));
            }
        }
    }

    /// Tags that share their top bits cannot be split apart: past the directory's depth the
    /// segment grows instead, and everything is still found.
    #[test]
    fn one_tag_many_times_grows_past_the_depth() {
        let mut ix = Index::default();
        for p in 0..2000 {
            ix.insert(0xABCD_0000, p);
        }
        assert!(ix.depth <= MAX_DEPTH);
        assert!(ix.largest_segment() > SEG_BUCKETS);
        assert_eq!(ix.bytes(), ix.measure());
        for p in 0..2000 {
            assert_eq!(ix.find(0xABCD_0000, |q| q == p), Some(p));
        }
    }

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
