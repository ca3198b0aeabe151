//! The tables' data: per shard, a map from entity to its features, each feature a name id and
//! a state (a plain value, a window's buckets, or a `distinct` sketch).
//!
//! This is the part the next issue replaces for compactness: everything outside the crate
//! reaches it only through [`crate::Features`]'s apply, query and snapshot interfaces.

use crate::decl::{BUCKETS, EVENTS, FeatureValue, LAST_TS};
use crate::hll::{HLL_LEVELS, HLL_M};
use crate::names::Names;

// What the tables' parts count against `storage.max_feature_bytes` lives with the parts, so
// the budget (budget.rs) and every change of the tables count them alike.

/// Bytes an entity costs beyond its key and features (map slot, struct, key allocation).
pub(crate) const ENTITY_COST: u64 = 128;
/// Bytes a feature costs beyond variable parts.
pub(crate) const FEAT_COST: u64 = std::mem::size_of::<Feat>() as u64;
const BUCKET_COST: u64 = std::mem::size_of::<Bucket>() as u64;

/// What a feature's state counts against `storage.max_feature_bytes`: windows and windowed
/// sketches at their largest (60 buckets, the dense 1 KiB sketch) from the start, so that the
/// budget, checked when features are created, bounds the tables whatever the updates do.
pub(crate) fn state_bytes(st: &State) -> u64 {
    match st {
        State::Plain {
            v: FeatureValue::Str(s),
            ..
        } => s.len() as u64,
        State::Plain { .. } => 0,
        State::Win(_) => BUCKETS as u64 * BUCKET_COST,
        State::Hll { regs, .. } if regs.len() == HLL_M => HLL_M as u64,
        State::Hll { .. } => (HLL_M * HLL_LEVELS) as u64,
    }
}

pub(crate) type Buckets = smallvec::SmallVec<[Bucket; 2]>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bucket {
    pub idx: i64,
    pub n: u32,
    /// Sum for sum/avg, minimum for min, maximum for max; unused for count.
    pub a: f64,
}

/// A feature's state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum State {
    /// A plain value (built-ins, counters, gauges, PUTs, `last`), with the `ts` that orders it.
    Plain { v: FeatureValue, ts: i64 },
    /// Buckets of count/sum/min/max/avg, sorted by index, at most [`crate::decl::BUCKETS`];
    /// the first two inline (no allocation to reach for the common few).
    Win(Buckets),
    /// `distinct`: the newest bucket index and the sketch (see [`crate::hll`]).
    Hll { head: i64, regs: Vec<u8> },
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Feat {
    pub name: u32,
    /// Append time of the record that last changed it (for `ttl`).
    pub updated_ms: i64,
    pub st: State,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entity {
    /// The built-ins, which every event updates, kept out of `feats` (no search, no second
    /// allocation to touch): `None` when absent (deleted, or set by nothing yet).
    pub events: Option<i64>,
    pub last_ts: Option<i64>,
    /// The first three inline in the table's slot: one cache line fewer to reach them.
    pub feats: Feats,
    /// Greatest non-future event ts: where windows end (`i64::MIN`: none yet).
    pub wm: i64,
    /// Greatest event ts or direct-write append time applied (`as_of` of a read).
    pub as_of: i64,
}

impl Entity {
    pub(crate) fn new() -> Entity {
        Entity {
            events: None,
            last_ts: None,
            feats: Feats::new(),
            wm: i64::MIN,
            as_of: i64::MIN,
        }
    }

    /// The built-in `name` (`events`, `last_ts`), if `name` is one.
    pub(crate) fn builtin(&mut self, name: &str) -> Option<&mut Option<i64>> {
        match name {
            EVENTS => Some(&mut self.events),
            LAST_TS => Some(&mut self.last_ts),
            _ => None,
        }
    }
}

pub(crate) type Feats = smallvec::SmallVec<[Feat; 3]>;

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

/// An entity name with its xxh3-64, computed once: it picks the shard (docs/API.md §6) and, rotated
/// so that the low bits that pick the shard do not also pick the bucket, the slot in the
/// shard's table.
#[derive(Clone, Copy)]
pub(crate) struct EntityRef<'a> {
    pub name: &'a str,
    hash: u64,
}

/// [`EntityRef::table_hash`] of a stored key, when the table grows.
fn table_hash(name: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name).rotate_right(29)
}

impl<'a> EntityRef<'a> {
    pub fn new(name: &'a str) -> Self {
        EntityRef {
            name,
            hash: xxhash_rust::xxh3::xxh3_64(name.as_bytes()),
        }
    }

    /// The shard among `shards` the entity lives in (docs/API.md §6).
    pub fn shard(&self, shards: u32) -> u32 {
        vx_proto::shard::shard_of_hash(self.hash, shards)
    }

    fn table_hash(&self) -> u64 {
        self.hash.rotate_right(29)
    }

    fn is(&self, k: &Key) -> bool {
        k.as_bytes() == self.name.as_bytes()
    }
}

/// The entities of a shard.
#[derive(Default)]
pub(crate) struct EntityMap {
    table: hashbrown::HashTable<(Key, Entity)>,
}

fn rehash(k: &Key) -> u64 {
    table_hash(k.as_bytes())
}

impl EntityMap {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn reserve(&mut self, n: usize) {
        self.table.reserve(n, |(k, _)| rehash(k));
    }

    pub fn get(&self, e: EntityRef<'_>) -> Option<&Entity> {
        self.table
            .find(e.table_hash(), |(k, _)| e.is(k))
            .map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, e: EntityRef<'_>) -> Option<&mut Entity> {
        self.table
            .find_mut(e.table_hash(), |(k, _)| e.is(k))
            .map(|(_, v)| v)
    }

    pub fn contains_key(&self, e: EntityRef<'_>) -> bool {
        self.get(e).is_some()
    }

    /// The entity, created if missing; and whether it was.
    pub fn get_or_insert(&mut self, e: EntityRef<'_>) -> (&mut Entity, bool) {
        match self
            .table
            .entry(e.table_hash(), |(k, _)| e.is(k), |(k, _)| rehash(k))
        {
            hashbrown::hash_table::Entry::Occupied(o) => (&mut o.into_mut().1, false),
            hashbrown::hash_table::Entry::Vacant(v) => (
                &mut v.insert((Key::new(e.name), Entity::new())).into_mut().1,
                true,
            ),
        }
    }

    pub fn insert(&mut self, e: EntityRef<'_>, value: Entity) {
        let (slot, _) = self.get_or_insert(e);
        *slot = value;
    }

    pub fn remove(&mut self, e: EntityRef<'_>) -> Option<Entity> {
        match self.table.find_entry(e.table_hash(), |(k, _)| e.is(k)) {
            Ok(o) => Some(o.remove().0.1),
            Err(_) => None,
        }
    }

    /// Every entity with its name's bytes (UTF-8).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entity)> {
        self.table.iter().map(|(k, e)| (k.as_bytes(), e))
    }

    /// Every entity, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&[u8], &mut Entity)> {
        self.table.iter_mut().map(|(k, e)| (k.as_bytes(), e))
    }
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

    /// The entities, the names and the byte count, borrowed apart (a change touches all three).
    pub(crate) fn parts(&mut self) -> (&mut EntityMap, &mut Names, &mut u64) {
        (&mut self.entities, &mut self.names, &mut self.bytes)
    }

    /// Intern `name` with one more reference (a feature loaded from a snapshot).
    pub(crate) fn names_acquire(&mut self, name: &str) -> u32 {
        let (id, added) = self.names.acquire(name);
        self.bytes += added;
        id
    }

    /// Add an entity loaded from a snapshot.
    pub(crate) fn insert_entity(&mut self, key: &str, e: Entity) {
        self.bytes += ENTITY_COST + 2 * key.len() as u64;
        for f in &e.feats {
            self.bytes += FEAT_COST + state_bytes(&f.st);
        }
        self.entities.insert(EntityRef::new(key), e);
    }
}
