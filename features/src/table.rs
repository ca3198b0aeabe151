//! The tables' data: per shard, a map from entity to its features, each feature a name id and
//! a state (a plain value, a window's buckets, or a `distinct` sketch), and what they count
//! against `storage.max_feature_bytes`.
//!
//! Everything outside the crate reaches it only through [`crate::Features`]'s apply, query and
//! snapshot interfaces, so its layout can change without touching them (issue 20 is making it
//! more compact step by step; docs/BENCHMARKS.md "Feature memory per entity").

use crate::cost::{alloc_size, key_heap};
use crate::index::Index;
use crate::names::Names;
use crate::prefetch::{Ahead, Lines};
use crate::rec::{Rec, View};
use crate::state::{Entity, Feats};

// What the tables' parts count against `storage.max_feature_bytes` lives with the parts: the
// count is their real memory (docs/FEATURES.md "The budget"), so that `vx_feature_bytes`
// tracks the process's anonymous memory. It is made of:
// - each shard's slots and their index ([`EntityMap::table_bytes`]): the arena's chunks (a
//   slot holds the key and the entity's record, [`crate::rec`]) and the index tables of
//   positions, counted from their capacity;
// - what an entity keeps outside its slot ([`slot_heap`]): a key over 22 bytes, and its
//   record's side allocation (an encoding over 31 bytes, string values, window buckets,
//   sketches), each at the size the allocator hands out for it ([`alloc_size`]);
// - the names of each shard.
// A change of an entity counts its own ([`EntityMut`] when it puts the entity back, the map
// for keys), and [`crate::Features::change`] the index table, the arena and the names; a
// property test checks the kept count against [`Shard::measure`].

/// Bytes of one slot: the key and the entity's record, inline.
pub(crate) const SLOT_COST: u64 = std::mem::size_of::<(Key, Rec)>() as u64;

/// What an entity keeps outside its table slot.
fn slot_heap(key: &Key, rec: &Rec) -> u64 {
    let key = match key {
        Key::Heap(s) => alloc_size(s.len()),
        Key::Inline { .. } => 0,
    };
    key + rec.heap()
}

/// An entity's key: up to 22 bytes inline (most ids), longer ones on the heap. Inline keys
/// are compared without following a pointer, which on the ingest path is a cache miss per
/// event saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    Inline { len: u8, buf: [u8; 22] },
    Heap(Box<str>),
}

impl Key {
    fn new(s: &str) -> Key {
        let b = s.as_bytes();
        if b.len() <= 22 {
            let mut buf = [0u8; 22];
            buf[..b.len()].copy_from_slice(b);
            Key::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Key::Heap(s.into())
        }
    }

    /// The entity name's bytes: UTF-8, since keys are made from `&str`.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, buf } => &buf[..usize::from(*len)],
            Key::Heap(s) => s.as_bytes(),
        }
    }
}

/// The hash of an entity's name that picks its shard and its place in the shard: xxh3-64
/// (docs/API.md §6). Public so that whoever cuts a record into the apply threads' slices
/// hashes each entity once ([`crate::parallel`]).
pub fn entity_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name)
}

/// An entity name with its xxh3-64, computed once: it picks the shard (docs/API.md §6) and, rotated
/// so that the low bits that pick the shard do not also pick the bucket, the slot in the
/// shard's table.
#[derive(Clone, Copy)]
pub(crate) struct EntityRef<'a> {
    pub name: &'a str,
    hash: u64,
}

impl<'a> EntityRef<'a> {
    pub fn new(name: &'a str) -> Self {
        EntityRef {
            name,
            hash: entity_hash(name.as_bytes()),
        }
    }

    /// An entity whose [`entity_hash`] was computed before (by whoever cut its record).
    pub fn hashed(name: &'a str, hash: u64) -> Self {
        debug_assert_eq!(
            hash,
            entity_hash(name.as_bytes()),
            "a wrong hash for {name}"
        );
        EntityRef { name, hash }
    }

    /// The shard among `shards` the entity lives in (docs/API.md §6).
    pub fn shard(&self, shards: u32) -> u32 {
        vx_proto::shard::shard_of_hash(self.hash, shards)
    }

    /// The 32 bits of the hash the index tables use: the high half, which picks neither the
    /// shard (the hash modulo the shard count: with 128 shards its low 7 bits are the same
    /// for every entity of a shard) nor the table (bits 16–20). The entry a look-up starts at
    /// is the tag's low bits.
    fn tag(&self) -> u32 {
        (self.hash >> 32) as u32
    }

    fn is(&self, k: &Key) -> bool {
        k.as_bytes() == self.name.as_bytes()
    }
}

/// Slots per chunk of a shard's arena, once it has [`SMALL_CHUNKS`] smaller ones (4, 8, … 128
/// slots, so that a shard with few entities holds little): the arena grows a chunk at a time
/// and never moves a slot to grow, so no slot is paid for twice and no moment doubles the
/// shard's memory.
const CHUNK: usize = 256;
const SMALL_CHUNKS: usize = 6;
/// Slots in the small chunks together: 4 + 8 + … + 128.
const SMALL_SLOTS: usize = 4 * ((1 << SMALL_CHUNKS) - 1);

/// The chunk of a position and the offset in it.
fn chunk_of(pos: usize) -> (usize, usize) {
    if pos < SMALL_SLOTS {
        let k = (pos / 4 + 1).ilog2() as usize;
        (k, pos - 4 * ((1 << k) - 1))
    } else {
        let rest = pos - SMALL_SLOTS;
        (SMALL_CHUNKS + rest / CHUNK, rest % CHUNK)
    }
}

/// Slots of chunk `k`.
fn chunk_len(k: usize) -> usize {
    if k < SMALL_CHUNKS { 4 << k } else { CHUNK }
}

/// Chunks that hold `n` slots.
fn chunks_for(n: usize) -> usize {
    if n == 0 { 0 } else { chunk_of(n - 1).0 + 1 }
}

/// Bytes of chunk `k`'s allocation.
fn chunk_bytes(k: usize) -> u64 {
    alloc_size(chunk_len(k) * SLOT_COST as usize)
}

/// The entities of a shard. The slots are packed in an arena of chunks (all full but the
/// last; a removal moves the last slot into the hole), and an index ([`crate::index`]: fixed
/// size segments under a directory, split one at a time as they fill) maps each entity to
/// its slot's position by the high half of its hash (the shard takes the hash modulo the
/// shard count: its low bits). An index entry is 8 bytes, a tag and a position, so the room
/// the index keeps free costs 8 bytes an entry instead of a slot.
#[derive(Default)]
pub(crate) struct EntityMap {
    index: Index,
    slots: Vec<Vec<(Key, Rec)>>,
    len: usize,
    /// Bytes of the chunks, kept as they come and go: the count is read on every apply, and a
    /// shard holds dozens of chunks.
    chunk_bytes: u64,
    /// Bytes of the records' side allocations ([`Rec::sizes`]), kept as they change: how
    /// much re-encoding can grow the shard at most (the budget's cheap bound).
    spill: u64,
    /// The entity a change takes its entity into ([`EntityMut`]); between changes it holds
    /// what the last one's store left (plain values, no heap), which the next take clears.
    scratch: Entity,
}

/// The slot at `pos`, if the arena holds one there.
fn slot_at(slots: &[Vec<(Key, Rec)>], pos: u32) -> Option<&(Key, Rec)> {
    let (k, i) = chunk_of(pos as usize);
    slots.get(k)?.get(i)
}

impl EntityMap {
    /// Bytes of the largest chunk of an arena.
    pub const MAX_CHUNK_BYTES: u64 = (CHUNK as u64 * SLOT_COST).next_multiple_of(8192);

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the list of chunks.
    fn list_bytes(&self) -> u64 {
        alloc_size(self.slots.capacity() * std::mem::size_of::<Vec<(Key, Rec)>>())
    }

    /// Bytes of the arena: its chunks (as kept) and the list of them.
    fn arena_bytes(&self) -> u64 {
        self.chunk_bytes + self.list_bytes()
    }

    /// Bytes of the index and the arena, counted from scratch (what [`Shard::measure`] checks
    /// the kept count against).
    pub fn table_bytes(&self) -> u64 {
        self.index.measure()
            + (0..self.slots.len()).map(chunk_bytes).sum::<u64>()
            + self.list_bytes()
    }

    /// Bytes a change of an entity can change besides the entity: the index and the arena
    /// (as kept: read on every change).
    pub fn index_bytes(&self) -> u64 {
        self.index.bytes() + self.arena_bytes()
    }

    /// The index segment an entity is in (entities new to one segment grow it together).
    pub fn seg_of(&self, e: EntityRef<'_>) -> usize {
        self.index.seg_of(e.tag())
    }

    /// What adding `n` entities to `e`'s index segment can add to the index.
    pub fn index_growth(&self, e: EntityRef<'_>, n: usize) -> u64 {
        self.index.growth(e.tag(), n)
    }

    /// The most one new entity can add to the index.
    pub fn max_step(&self) -> u64 {
        self.index.max_step()
    }

    /// What adding `n` entities to the shard adds to its arena.
    pub fn arena_growth(&self, n: usize) -> u64 {
        let chunks = chunks_for(self.len + n);
        let new: u64 = (self.slots.len()..chunks).map(chunk_bytes).sum();
        // A Vec grows to twice its capacity (at least 4 here) or what it needs.
        let cap = self.slots.capacity();
        let list = if chunks > cap {
            let grown = chunks.max(2 * cap).max(4);
            alloc_size(grown * std::mem::size_of::<Vec<(Key, Rec)>>())
        } else {
            0
        };
        new + list
    }

    /// Room for `n` more entities (a snapshot's load, into an empty shard).
    pub fn reserve(&mut self, n: usize) {
        self.index.reserve(n);
        self.slots.reserve(chunks_for(self.len + n));
    }

    /// The position of entity `e`'s slot.
    fn position(&self, e: EntityRef<'_>) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(e.tag(), |p| slot_at(slots, p).is_some_and(|(k, _)| e.is(k)))
    }

    fn slot_mut(&mut self, pos: u32) -> Option<&mut (Key, Rec)> {
        let (k, i) = chunk_of(pos as usize);
        self.slots.get_mut(k)?.get_mut(i)
    }

    /// The entity as a read sees it.
    pub fn get(&self, e: EntityRef<'_>) -> Option<View<'_>> {
        slot_at(&self.slots, self.position(e)?).map(|(_, r)| r.view())
    }

    /// Note the index entry a look-up of `e` starts at, to load.
    pub fn prefetch_index(&self, e: EntityRef<'_>, out: &mut Lines) {
        self.index.prefetch(e.tag(), out);
    }

    /// Note the slot of `e`, its index entry read (loaded by now): the first entry with its
    /// tag, without reading slots to compare keys (a rare wrong guess only costs a useless
    /// load).
    pub fn prefetch_slot(&self, e: EntityRef<'_>, out: &mut Lines) {
        if let Some(p) = self.index.find(e.tag(), |_| true)
            && let Some(s) = slot_at(&self.slots, p)
        {
            out.add(s, SLOT_COST as usize);
        }
    }

    /// The entity's record, as it is.
    pub fn rec(&self, e: EntityRef<'_>) -> Option<&Rec> {
        slot_at(&self.slots, self.position(e)?).map(|(_, r)| r)
    }

    /// The entity, to change; what it keeps outside its slot is counted in `bytes` when the
    /// change ends.
    pub fn get_mut<'a>(
        &'a mut self,
        e: EntityRef<'_>,
        bytes: &'a mut u64,
    ) -> Option<EntityMut<'a>> {
        let (k, i) = chunk_of(self.position(e)? as usize);
        let (_, r) = self.slots.get_mut(k)?.get_mut(i)?;
        Some(EntityMut::new(r, bytes, &mut self.spill, &mut self.scratch))
    }

    /// Bytes of the records' side allocations.
    pub fn spill(&self) -> u64 {
        self.spill
    }

    pub fn contains_key(&self, e: EntityRef<'_>) -> bool {
        self.position(e).is_some()
    }

    /// The entity, created if missing (its key counted in `bytes`).
    pub fn get_or_insert<'a>(&'a mut self, e: EntityRef<'_>, bytes: &'a mut u64) -> EntityMut<'a> {
        let pos = match self.position(e) {
            Some(pos) => pos,
            None => {
                *bytes += key_heap(e.name);
                self.push_new(e, Rec::new())
            }
        };
        let (k, i) = chunk_of(pos as usize);
        match self.slots.get_mut(k).and_then(|c| c.get_mut(i)) {
            Some((_, r)) => EntityMut::new(r, bytes, &mut self.spill, &mut self.scratch),
            None => unreachable!("an entity just found or inserted has a slot"),
        }
    }

    /// A new entity `e` (not in the map) in the next slot; that slot's position.
    fn push_new(&mut self, e: EntityRef<'_>, rec: Rec) -> u32 {
        let pos = u32::try_from(self.len).unwrap_or(u32::MAX);
        self.index.insert(e.tag(), pos);
        let (k, _) = chunk_of(self.len);
        if k == self.slots.len() {
            self.slots.push(Vec::with_capacity(chunk_len(k)));
            self.chunk_bytes += chunk_bytes(k);
        }
        if let Some(c) = self.slots.last_mut() {
            c.push((Key::new(e.name), rec));
        }
        self.len += 1;
        pos
    }

    /// Put `value` in entity `e`'s slot (a snapshot's entity; the shard is recounted after).
    pub fn insert(&mut self, e: EntityRef<'_>, value: Entity) {
        let mut uncounted = 0;
        let mut slot = self.get_or_insert(e, &mut uncounted);
        *slot = value;
    }

    /// Put a restored record in entity `e`'s slot (a snapshot's entity; the shard is recounted
    /// after).
    pub fn insert_rec(&mut self, e: EntityRef<'_>, rec: Rec) {
        let added = rec.sizes().1;
        match self.position(e).and_then(|p| self.slot_mut(p)) {
            Some((_, r)) => {
                let gone = std::mem::replace(r, rec).sizes().1;
                self.spill = self.spill.saturating_sub(gone);
            }
            None => {
                self.push_new(e, rec);
            }
        }
        self.spill += added;
    }

    /// Remove entity `e`: the entity, and the bytes it kept outside its slot (key included).
    pub fn remove(&mut self, e: EntityRef<'_>) -> Option<(Entity, u64)> {
        let pos = self.position(e)?;
        self.index.remove(e.tag(), pos);
        // Take the last slot out, and put it in the hole unless it is the one removed.
        let last_chunk = self.slots.last_mut()?;
        let last = last_chunk.pop()?;
        if last_chunk.is_empty() {
            self.slots.pop();
            self.chunk_bytes -= chunk_bytes(self.slots.len());
        }
        self.len -= 1;
        let last_pos = u32::try_from(self.len).unwrap_or(u32::MAX);
        let (key, mut rec) = if pos == last_pos {
            last
        } else {
            let moved = EntityRef::new(std::str::from_utf8(last.0.as_bytes()).unwrap_or(""));
            self.index.repoint(moved.tag(), last_pos, pos);
            let slot = self.slot_mut(pos)?;
            std::mem::replace(slot, last)
        };
        let freed = slot_heap(&key, &rec);
        self.spill = self.spill.saturating_sub(rec.sizes().1);
        Some((rec.take(), freed))
    }

    /// Change every entity with `f` (the shard is recounted after).
    pub fn for_each_mut(&mut self, mut f: impl FnMut(&mut Entity)) {
        self.spill = 0;
        for (_, r) in self.slots.iter_mut().flatten() {
            let mut e = r.take();
            f(&mut e);
            r.store(&mut e);
            self.spill += r.sizes().1;
        }
    }

    /// Every entity with its key, in slot order (measuring, snapshots).
    pub(crate) fn slots(&self) -> impl Iterator<Item = &(Key, Rec)> {
        self.slots.iter().flatten()
    }
}

/// An entity taken out of its slot to change; put back, with what it keeps outside its slot
/// counted, when dropped.
pub(crate) struct EntityMut<'a> {
    rec: &'a mut Rec,
    bytes: &'a mut u64,
    spill: &'a mut u64,
    was: u64,
    was_spill: u64,
    /// The map's scratch entity, holding this one.
    e: &'a mut Entity,
}

impl<'a> EntityMut<'a> {
    fn new(rec: &'a mut Rec, bytes: &'a mut u64, spill: &'a mut u64, e: &'a mut Entity) -> Self {
        let (was, was_spill) = rec.sizes();
        rec.take_into(e);
        EntityMut {
            rec,
            bytes,
            spill,
            was,
            was_spill,
            e,
        }
    }
}

impl std::ops::Deref for EntityMut<'_> {
    type Target = Entity;
    fn deref(&self) -> &Entity {
        self.e
    }
}

impl std::ops::DerefMut for EntityMut<'_> {
    fn deref_mut(&mut self) -> &mut Entity {
        self.e
    }
}

impl Drop for EntityMut<'_> {
    fn drop(&mut self) {
        self.rec.store(self.e);
        // What the store left (its plain values) is cleared by the next take; a feature list
        // that outgrew its inline room is freed, so the scratch holds no memory the budget
        // does not count.
        if self.e.feats.spilled() {
            self.e.feats = Feats::new();
        }
        let (heap, spill) = self.rec.sizes();
        *self.bytes = (*self.bytes + heap).saturating_sub(self.was);
        *self.spill = (*self.spill + spill).saturating_sub(self.was_spill);
    }
}

/// A shard's bytes, the bytes of its encodings held outside their slots, and its entities:
/// read when its write lock is taken and when it is released, so that the tables' shared
/// counters change once per release rather than once per change (they are one cache line
/// every apply thread writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShardCounts {
    pub bytes: u64,
    pub spill: u64,
    pub entities: u64,
}

/// One shard of the tables.
pub(crate) struct Shard {
    pub entities: EntityMap,
    pub names: Names,
    /// LSN of the last record applied to this shard.
    pub lsn: u64,
    /// Bytes this shard holds, as [`crate::Features::used_bytes`] counts them.
    pub bytes: u64,
}

impl Shard {
    pub(crate) fn new(names: Names) -> Shard {
        Shard {
            entities: EntityMap::default(),
            names,
            lsn: 0,
            bytes: 0,
        }
    }

    /// The entities, the names and the byte count, borrowed apart (a change touches all
    /// three: it adds what it changed of its entity's [`entity_heap`] and [`key_heap`] to the
    /// count; [`crate::Features::change`] adds the table's and the names' change).
    pub(crate) fn parts(&mut self) -> (&mut EntityMap, &mut Names, &mut u64) {
        (&mut self.entities, &mut self.names, &mut self.bytes)
    }

    /// Note in `out` the lines of entity `e` that look-ahead `stage` loads (`states`: how
    /// many held states to expect in its side allocation): for the writer's look-ahead and a
    /// pipeline of reads alike.
    pub(crate) fn prefetch(&self, e: EntityRef<'_>, stage: Ahead, states: usize, out: &mut Lines) {
        match stage {
            Ahead::Index => self.entities.prefetch_index(e, out),
            Ahead::Slot => self.entities.prefetch_slot(e, out),
            Ahead::Side => {
                if let Some(r) = self.entities.rec(e) {
                    r.prefetch_side(states, out);
                }
            }
            Ahead::States => {
                if let Some(r) = self.entities.rec(e) {
                    r.prefetch_states(out);
                }
            }
        }
    }

    /// Run `f`, a change of entity `e` (and nothing else of the shard), and add what it
    /// changed of the parts the entity shares (its table, the names) to the shard's bytes;
    /// the entity's own change is counted by `f` (see [`EntityMut`]).
    pub(crate) fn counted<R>(&mut self, f: impl FnOnce(&mut Shard) -> R) -> R {
        let was = self.shared_bytes();
        let out = f(self);
        self.bytes = (self.bytes + self.shared_bytes()).saturating_sub(was);
        out
    }

    /// The bytes of the parts a change of an entity may touch besides the entity: the index,
    /// the arena and the names.
    pub(crate) fn shared_bytes(&self) -> u64 {
        self.entities.index_bytes() + self.names.bytes()
    }

    /// What the tables' counters follow of the shard ([`crate::Features::add_counts`]).
    pub(crate) fn counts(&self) -> ShardCounts {
        ShardCounts {
            bytes: self.bytes,
            spill: self.entities.spill(),
            entities: self.entities.len() as u64,
        }
    }

    /// Count the shard's bytes from scratch: its table, what its entities keep outside their
    /// slots, and its names. The incremental count of every change must come to the same.
    pub(crate) fn recount(&mut self) {
        self.bytes = self.measure();
    }

    /// The shard's bytes counted from scratch.
    pub(crate) fn measure(&self) -> u64 {
        self.entities.table_bytes()
            + self
                .entities
                .slots()
                .map(|(k, r)| slot_heap(k, r))
                .sum::<u64>()
            + self.names.bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Features;
    use crate::decl::{Agg, FeatureValue, decl};
    use crate::state::State;
    use crate::{LogPos, ReadAt};
    use proptest::prelude::*;
    use vx_proto::{EventView, Kind, Num};

    /// A slot is most of what an entity costs (an index entry is 4 bytes): the key up to 22
    /// bytes and a record of up to 31 encoded bytes (the built-ins, the watermarks and a
    /// counter or two) inline.
    #[test]
    fn a_slot_stays_small() {
        assert_eq!(std::mem::size_of::<State>(), 40);
        assert_eq!(std::mem::size_of::<Rec>(), 40);
        assert_eq!(SLOT_COST, 64);
    }

    #[test]
    fn arena_positions_fill_the_chunks_in_order() {
        let mut next = (0, 0);
        for pos in 0..5000 {
            assert_eq!(chunk_of(pos), next, "{pos}");
            next = if next.1 + 1 == chunk_len(next.0) {
                (next.0 + 1, 0)
            } else {
                (next.0, next.1 + 1)
            };
        }
        assert_eq!(chunks_for(0), 0);
        assert_eq!(chunks_for(4), 1);
        assert_eq!(chunks_for(5), 2);
        assert_eq!(chunks_for(SMALL_SLOTS + 1), SMALL_CHUNKS + 1);
    }

    #[test]
    fn removal_keeps_every_other_entity_findable() {
        let mut m = EntityMap::default();
        let names: Vec<String> = (0..2000).map(|i| format!("e{i}")).collect();
        let mut bytes = 0;
        for n in &names {
            m.get_or_insert(EntityRef::new(n), &mut bytes).as_of = n.len() as i64;
        }
        for n in names.iter().step_by(3) {
            assert!(m.remove(EntityRef::new(n)).is_some());
            assert!(m.remove(EntityRef::new(n)).is_none());
        }
        for (i, n) in names.iter().enumerate() {
            let got = m.get(EntityRef::new(n)).map(|e| e.as_of);
            assert_eq!(got, (i % 3 != 0).then_some(n.len() as i64), "{n}");
        }
        assert_eq!(m.len(), m.slots().count());
        for n in &names {
            m.remove(EntityRef::new(n));
        }
        assert_eq!((m.len(), m.slots.len()), (0, 0));
    }

    /// The entities of one shard (whose hashes share their low bits: the hash modulo 128
    /// picks the shard) spread over the index's segments: look-ups stay short.
    #[test]
    fn one_shards_entities_spread_over_the_index() {
        let mut m = EntityMap::default();
        let names: Vec<String> = (0..400_000)
            .map(|i| format!("key:{i:012}"))
            .filter(|n| EntityRef::new(n).shard(128) == 5)
            .collect();
        for n in &names {
            m.get_or_insert(EntityRef::new(n), &mut 0);
        }
        // Linear probing at 7/8 full averages 3.5; at 7/16 to 7/8, below that.
        let d = m.index.mean_displacement();
        assert!(d < 4.0, "{d}");
        for n in &names {
            assert!(m.contains_key(EntityRef::new(n)));
        }
    }

    /// Growth is incremental at any size: from a small table doubling up to one segment, then
    /// one segment split at a time, so no insert rehashes more than one segment (or copies
    /// more than the directory); the kept byte count is the measured one throughout.
    #[test]
    fn the_index_grows_a_segment_at_a_time() {
        let mut m = EntityMap::default();
        let seg = crate::index::seg_bytes();
        let mut largest_step = 0;
        for i in 0..300_000u32 {
            let name = format!("new-{i}");
            let before = m.index.bytes();
            m.get_or_insert(EntityRef::new(&name), &mut 0);
            let step = m.index.bytes().saturating_sub(before);
            largest_step = largest_step.max(step);
            assert!(step <= m.max_step(), "insert {i} added {step}");
            if i % 9973 == 0 {
                assert_eq!(m.index.bytes(), m.index.measure(), "at {i}");
            }
        }
        assert_eq!(m.index.bytes(), m.index.measure());
        assert!(m.index.largest_segment() <= crate::index::SEG_BUCKETS);
        // A split adds a segment (and now and then the directory's and the segment list's
        // doubling: a few KiB, 4 bytes and 32 bytes a segment).
        assert!(
            largest_step >= seg && largest_step <= m.max_step(),
            "{largest_step}"
        );
        // The largest step is a small share of what the index holds: growth never copies
        // a sizable part of the shard.
        assert!(m.max_step() * 20 < m.index.bytes(), "{}", m.max_step());
        // About 2/3 full on average: 8 bytes an entry at 7/16 to 7/8.
        let per_entity = m.index.bytes() as f64 / m.len() as f64;
        assert!((9.0..20.0).contains(&per_entity), "{per_entity}");
        // Reserved for a load: the same entities fit without a split.
        let mut r = EntityMap::default();
        r.reserve(300_000);
        let reserved = r.index.bytes();
        for i in 0..300_000u32 {
            r.get_or_insert(EntityRef::new(&format!("new-{i}")), &mut 0);
        }
        assert_eq!(r.index.bytes(), reserved, "no growth after the reservation");
    }

    #[test]
    fn allocation_sizes_follow_the_allocator_and_the_table() {
        use crate::cost::grown_capacity;
        assert_eq!(alloc_size(0), 0);
        assert_eq!(alloc_size(1), 8);
        assert_eq!(alloc_size(64), 64);
        assert_eq!(alloc_size(65), 80);
        assert_eq!(alloc_size(129), 160);
        assert_eq!(alloc_size((128 << 10) + 1), (128 << 10) + 4096);
        // hashbrown: 3 items in 4 buckets, 7 in 8, then 7/8 of a power of two.
        assert_eq!(grown_capacity(0, 1), 3);
        assert_eq!(grown_capacity(3, 4), 7);
        assert_eq!(grown_capacity(7, 8), 14);
        assert_eq!(grown_capacity(14, 15), 28);
        assert_eq!(grown_capacity(28, 20), 28);
        // An entity's growth bound covers what inserting it adds.
        let mut m = EntityMap::default();
        for i in 0..5000 {
            let name = format!("e{i}");
            let e = EntityRef::new(&name);
            let bound = m.index_growth(e, 1);
            let before = m.index.bytes();
            m.get_or_insert(e, &mut 0);
            assert!(m.index.bytes() - before <= bound, "at {i}");
        }
        assert_eq!(m.len(), 5000);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Event {
            entity: u8,
            ty: u8,
            value: i64,
            ts: i64,
        },
        Put {
            entity: u8,
            name: u8,
            text: Option<usize>,
        },
        DeleteFeature {
            entity: u8,
            name: u8,
        },
        DeleteEntity {
            entity: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (any::<u8>(), 0u8..3, -5i64..5, 0i64..4_000_000)
                .prop_map(|(entity, ty, value, ts)| Op::Event { entity, ty, value, ts }),
            2 => (any::<u8>(), 0u8..8, prop::option::of(0usize..200))
                .prop_map(|(entity, name, text)| Op::Put { entity, name, text }),
            1 => (any::<u8>(), 0u8..8).prop_map(|(entity, name)| Op::DeleteFeature { entity, name }),
            1 => any::<u8>().prop_map(|entity| Op::DeleteEntity { entity }),
        ]
    }

    fn entity_name(i: u8) -> String {
        // Some keys longer than the 22 bytes a slot holds inline.
        if i.is_multiple_of(7) {
            format!("a-rather-long-entity-name-{i}")
        } else {
            format!("e{i}")
        }
    }

    proptest! {
        /// Whatever changes the tables, the count every change keeps equals the tables' bytes
        /// counted from scratch: one rule, measured before and after each change.
        #[test]
        fn the_kept_count_is_the_measured_one(ops in prop::collection::vec(op(), 1..300)) {
            let f = Features::new(
                4,
                vec![
                    decl("n_5m", Agg::Count, Some(300)),
                    decl("v_1h", Agg::Sum, Some(3600)),
                    decl("d_1d", Agg::Distinct, Some(86_400)),
                    decl("d_all", Agg::Distinct, None),
                ],
                u64::MAX,
            );
            let types = ["hit", "miss", "hp"];
            for (i, op) in ops.iter().enumerate() {
                let at = LogPos { lsn: i as u64 + 1, append_ms: 5_000_000 };
                match op {
                    Op::Event { entity, ty, value, ts } => {
                        let e = entity_name(*entity);
                        let ev = EventView {
                            stream: "s",
                            entity: Some(&e),
                            ty: types[*ty as usize],
                            ts: *ts,
                            kind: if *ty == 2 { Kind::Gauge } else { Kind::Counter },
                            value: Some(Num::Int(*value)),
                            id: None,
                            data: None,
                        };
                        f.events(at, None).unwrap().apply(&ev).unwrap();
                    }
                    Op::Put { entity, name, text } => {
                        let v = match text {
                            Some(n) => FeatureValue::Str("x".repeat(*n).into()),
                            None => FeatureValue::Int(7),
                        };
                        let n = format!("f{name}");
                        f.put(at, &entity_name(*entity), &[(n.as_str(), Some(v))], None).unwrap();
                    }
                    Op::DeleteFeature { entity, name } => {
                        let n = format!("f{name}");
                        f.delete(at, &entity_name(*entity), &[Some(&n)], None).unwrap();
                    }
                    Op::DeleteEntity { entity } => {
                        f.delete(at, &entity_name(*entity), &[None], None).unwrap();
                    }
                }
                let mut total = 0;
                for sh in f.shards.iter() {
                    let g = sh.read();
                    prop_assert_eq!(g.bytes, g.measure(), "after {:?}", op);
                    total += g.bytes;
                }
                prop_assert_eq!(f.used_bytes(), total);
            }
            let _ = f.read("e1", None, ReadAt { now_ms: 0 }, &mut |_, _| {});
        }
    }
}
