//! The feature tables (SPEC §6): per entity, named values kept current from the log.
//!
//! Features are sharded by entity (xxh3-64 of the entity mod shards, like streams), each shard
//! behind its own lock. Only the writer thread changes them, and only from log records, after
//! the record reached the mode's durability and before its request is answered
//! ([`Features::apply`]): a read after an ack sees the write, and recovery, which replays the
//! same records through the same function in the same order, rebuilds the same state.
//!
//! What a record does:
//! - every event with an entity: `events` += 1, `last_ts` = max `ts`;
//! - a `counter`: `<type>` += value; a `gauge`: `<type>` = value if its `ts` ≥ the current
//!   value's (ties go to the later record, since records apply in log order);
//! - declared aggregates whose `from` is the event's type update their state (below);
//! - a feature put sets values (a PUT wins over everything earlier in the log; the value keeps
//!   the `ts` of the value it replaced, so a later gauge with an older `ts` does not undo it);
//!   `null` deletes; a feature delete removes one feature or the whole entity.
//!
//! # Windows
//! A declared aggregate with a window of `W` ms keeps at most 60 buckets of `ceil(W/60)` ms,
//! indexed by event `ts` (sparse: only buckets that saw events exist). The window ends at the
//! entity's watermark, the greatest `ts` of its events that are not from the future, so
//! windows slide on event time, not on the server clock. An event more than a window older
//! than the newest bucket of its aggregate is late and ignored by that aggregate; an event
//! whose `ts` is more than [`MAX_FUTURE_MS`] past its record's append time is from the future:
//! it counts in the built-in features but not in windowed aggregates, and does not move the
//! watermark. All-time aggregates (no window) take every event.
//!
//! `distinct` is a HyperLogLog of 64 registers (standard error 1.04/√64 ≈ 13%; below ~160
//! distinct values linear counting is used, within a few percent). Windowed, each register
//! keeps, per level 1..=16, the bucket that last reached that level, so the estimate over any
//! window suffix is exact HLL over that window (1 KiB per entity and feature); all time it is
//! the plain 64-byte sketch.

use crate::record::{self, Decode, Header, RecordType};
use foldhash::fast::FixedState;
use hashbrown::{HashMap, HashSet};
use parking_lot::RwLock;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;
use vx_proto::{Batch, EventView, Kind, Num};

/// Buckets of a windowed aggregate: the window's resolution is 1/60 of it.
pub const BUCKETS: i64 = 60;
/// How far past its record's append time an event's `ts` may be before windows ignore it.
pub const MAX_FUTURE_MS: i64 = 60_000;
/// Window bounds (SPEC §6).
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
pub const MAX_WINDOW: Duration = Duration::from_secs(30 * 86_400);
/// Longest string value a PUT may set.
pub const MAX_STRING_VALUE: usize = 64 << 10;
/// Most names one PUT may set.
pub const MAX_PUT_NAMES: usize = 1024;
/// The built-in features.
pub const EVENTS: &str = "events";
pub const LAST_TS: &str = "last_ts";

const HLL_BITS: u32 = 6;
const HLL_M: usize = 1 << HLL_BITS;
const HLL_LEVELS: usize = 16;

/// A feature's value.
#[derive(Clone, Debug, PartialEq)]
pub enum FeatureValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(Box<str>),
}

impl From<Num> for FeatureValue {
    fn from(n: Num) -> Self {
        match n {
            Num::Int(i) => FeatureValue::Int(i),
            Num::Float(f) => FeatureValue::Float(f),
        }
    }
}

/// A declared aggregate's function (`agg` in the config file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Agg {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Last,
    Distinct,
}

impl Agg {
    pub fn as_str(self) -> &'static str {
        match self {
            Agg::Count => "count",
            Agg::Sum => "sum",
            Agg::Min => "min",
            Agg::Max => "max",
            Agg::Avg => "avg",
            Agg::Last => "last",
            Agg::Distinct => "distinct",
        }
    }
}

/// What `distinct` counts distinct values of (`of` in the config file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DistinctOf {
    /// The event's `value` (events without one are skipped).
    #[default]
    Value,
    /// The event's stream.
    Stream,
    /// The event's `data`, as its compact JSON text (events without data are skipped).
    Data,
}

impl DistinctOf {
    pub fn as_str(self) -> &'static str {
        match self {
            DistinctOf::Value => "value",
            DistinctOf::Stream => "stream",
            DistinctOf::Data => "data",
        }
    }
}

/// One declared aggregate (`features:` in the config file).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FeatureDecl {
    pub name: String,
    /// The event type it aggregates.
    pub from: String,
    pub agg: Agg,
    /// `None`: all time.
    pub window: Option<Duration>,
    /// Hidden on read once not updated for this long (by the server's append time).
    pub ttl: Option<Duration>,
    pub of: DistinctOf,
}

impl FeatureDecl {
    /// Bucket width in ms; `None` for all time.
    fn width_ms(&self) -> Option<i64> {
        self.window.map(|w| {
            let ms = i64::try_from(w.as_millis()).unwrap_or(i64::MAX);
            (ms + BUCKETS - 1) / BUCKETS
        })
    }

    /// What the aggregate's state depends on: a snapshot's state for a declaration with
    /// another fingerprint is recomputed from the log (`ttl` only affects reads).
    pub fn fingerprint(&self) -> u64 {
        let s = format!(
            "{}\u{0}{}\u{0}{}\u{0}{:?}\u{0}{}",
            self.name,
            self.from,
            self.agg.as_str(),
            self.window.map(|w| w.as_millis()),
            self.of.as_str()
        );
        xxhash_rust::xxh3::xxh3_64(s.as_bytes())
    }
}

/// Feature names follow the rule of event types (SPEC §2): 1–128 bytes of `[A-Za-z0-9_.:-]`.
pub fn valid_name(name: &str) -> bool {
    vx_proto::rules::valid_type(name)
}

/// Check the declared aggregates (start-up errors of SPEC §6).
pub fn check_decls(decls: &[FeatureDecl]) -> Result<(), String> {
    let mut seen = HashSet::new();
    for d in decls {
        if !valid_name(&d.name) {
            return Err(format!(
                "feature name {:?} must be 1-128 bytes of [A-Za-z0-9_.:-]",
                d.name
            ));
        }
        if d.name == EVENTS || d.name == LAST_TS {
            return Err(format!(
                "feature name {:?} clashes with the built-in feature of that name",
                d.name
            ));
        }
        if !seen.insert(d.name.as_str()) {
            return Err(format!("feature {:?} is declared twice", d.name));
        }
        if !valid_name(&d.from) {
            return Err(format!(
                "feature {:?}: from {:?} is not a valid event type",
                d.name, d.from
            ));
        }
        if let Some(w) = d.window
            && !(MIN_WINDOW..=MAX_WINDOW).contains(&w)
        {
            return Err(format!(
                "feature {:?}: window must be from 1s to 30d (or absent for all time)",
                d.name
            ));
        }
        if d.ttl.is_some_and(|t| t.is_zero()) {
            return Err(format!("feature {:?}: ttl must be more than 0", d.name));
        }
        if d.agg != Agg::Distinct && d.of != DistinctOf::Value {
            return Err(format!(
                "feature {:?}: `of` applies to distinct only",
                d.name
            ));
        }
    }
    Ok(())
}

/// The declarations, indexed for the writer.
pub(crate) struct Decls {
    pub list: Vec<FeatureDecl>,
    widths: Vec<Option<i64>>,
    ttls: Vec<Option<i64>>,
    by_from: HashMap<Box<str>, Vec<u32>>,
    by_name: HashMap<Box<str>, u32>,
    /// Most declarations sharing one `from`.
    max_per_type: usize,
}

impl Decls {
    fn new(list: Vec<FeatureDecl>) -> Decls {
        let mut by_from: HashMap<Box<str>, Vec<u32>> = HashMap::new();
        let mut by_name = HashMap::new();
        for (i, d) in list.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            by_from.entry(d.from.as_str().into()).or_default().push(i);
            by_name.insert(d.name.as_str().into(), i);
        }
        Decls {
            widths: list.iter().map(FeatureDecl::width_ms).collect(),
            ttls: list
                .iter()
                .map(|d| {
                    d.ttl
                        .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX))
                })
                .collect(),
            max_per_type: by_from.values().map(Vec::len).max().unwrap_or(0),
            by_from,
            by_name,
            list,
        }
    }

    /// The name id of declaration `i` in every shard's name table.
    fn id(i: u32) -> u32 {
        i + 2
    }

    fn decl_of(&self, id: u32) -> Option<usize> {
        let i = id.checked_sub(2)? as usize;
        (i < self.list.len()).then_some(i)
    }

    pub fn is_declared(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }
}

/// A shard's feature names: ids 0 and 1 are the built-ins, 2.. the declarations (permanent),
/// the rest are interned on first use and freed when the last feature of that name goes.
pub(crate) struct Names {
    ids: HashMap<Box<str>, u32, FixedState>,
    list: Vec<(Box<str>, u32)>,
    free: Vec<u32>,
    fixed: u32,
}

const PERMANENT: u32 = u32::MAX;
/// Bytes a name table entry costs, beyond the name's bytes.
const NAME_COST: u64 = 48;

impl Names {
    fn new(decls: &Decls) -> Names {
        let mut n = Names {
            ids: HashMap::with_hasher(FixedState::default()),
            list: Vec::new(),
            free: Vec::new(),
            fixed: 0,
        };
        for name in [EVENTS, LAST_TS]
            .into_iter()
            .chain(decls.list.iter().map(|d| d.name.as_str()))
        {
            let id = n.list.len() as u32;
            n.ids.insert(name.into(), id);
            n.list.push((name.into(), PERMANENT));
        }
        n.fixed = n.list.len() as u32;
        n
    }

    pub fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, id: u32) -> &str {
        self.list.get(id as usize).map_or("", |(n, _)| n)
    }

    /// The id of `name`, interned if new, with one more reference; and the bytes it added.
    fn acquire(&mut self, name: &str) -> (u32, u64) {
        if let Some(&id) = self.ids.get(name) {
            if let Some(e) = self.list.get_mut(id as usize)
                && e.1 != PERMANENT
            {
                e.1 += 1;
            }
            return (id, 0);
        }
        let entry = (Box::<str>::from(name), 1);
        let id = match self.free.pop() {
            Some(id) => {
                if let Some(e) = self.list.get_mut(id as usize) {
                    *e = entry;
                }
                id
            }
            None => {
                self.list.push(entry);
                (self.list.len() - 1) as u32
            }
        };
        self.ids.insert(name.into(), id);
        (id, NAME_COST + 2 * name.len() as u64)
    }

    /// Drop one reference; returns the bytes freed.
    fn release(&mut self, id: u32) -> u64 {
        let Some(e) = self.list.get_mut(id as usize) else {
            return 0;
        };
        if e.1 == PERMANENT || e.1 == 0 {
            return 0;
        }
        e.1 -= 1;
        if e.1 > 0 {
            return 0;
        }
        let name = std::mem::take(&mut e.0);
        self.ids.remove(&name);
        self.free.push(id);
        NAME_COST + 2 * name.len() as u64
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
    /// Buckets of count/sum/min/max/avg, sorted by index, at most [`BUCKETS`]; the first two
    /// inline (no allocation to reach for the common few).
    Win(Buckets),
    /// `distinct`: the newest bucket index and the sketch (see the module docs).
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
    fn builtin(&mut self, name: &str) -> Option<&mut Option<i64>> {
        match name {
            EVENTS => Some(&mut self.events),
            LAST_TS => Some(&mut self.last_ts),
            _ => None,
        }
    }
}

pub(crate) type Feats = smallvec::SmallVec<[Feat; 3]>;

/// Bytes an entity costs beyond its key and features (map slot, struct, key allocation).
const ENTITY_COST: u64 = 128;
/// Bytes a feature costs beyond variable parts.
const FEAT_COST: u64 = std::mem::size_of::<Feat>() as u64;
const BUCKET_COST: u64 = std::mem::size_of::<Bucket>() as u64;
/// The most a declared aggregate can count: its feature and a dense windowed sketch (more
/// than 60 buckets).
const WINDOW_MAX: u64 = FEAT_COST + (HLL_M * HLL_LEVELS) as u64;

/// What a feature's state counts against `storage.max_feature_bytes`: windows and windowed
/// sketches at their largest (60 buckets, the dense 1 KiB sketch) from the start, so that the
/// budget, checked when features are created, bounds the tables whatever the updates do.
fn state_bytes(st: &State) -> u64 {
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

    fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, buf } => &buf[..usize::from(*len)],
            Key::Heap(s) => s.as_bytes(),
        }
    }

    /// Keys are made from `&str`, so they are always UTF-8.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

/// An entity name with its xxh3-64, computed once: it picks the shard (SPEC §6) and, rotated
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
            hash: xxhash_rust::xxh3::xxh3_64(name.as_bytes()),
        }
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
    EntityRef::new(k.as_str()).table_hash()
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

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Entity)> {
        self.table.iter().map(|(k, e)| (k.as_str(), e))
    }
}

/// One shard of the tables.
pub(crate) struct FShard {
    pub entities: EntityMap,
    pub names: Names,
    /// LSN of the last record applied to this shard.
    pub lsn: u64,
    /// Bytes this shard holds, as [`Features::used_bytes`] counts them.
    pub bytes: u64,
}

impl FShard {
    pub(crate) fn names_len(&self) -> usize {
        self.names.list.len()
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

/// Which parts of a record to apply during recovery: records a shard's snapshot covers are
/// skipped, except for declarations being recomputed (`redo`, by declaration index).
pub(crate) struct Replay<'a> {
    pub covered: &'a [u64],
    pub redo: &'a [bool],
}

/// What applying a direct write found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectApplied {
    pub set: u64,
    pub deleted: u64,
    /// The entity (or the named feature) existed before a delete.
    pub found: bool,
}

/// The feature tables. Shared by the writer (the only one that changes them), the readers
/// and the snapshot thread.
pub struct Features {
    pub(crate) shards: Box<[RwLock<FShard>]>,
    pub(crate) decls: Decls,
    nshards: u32,
    max_bytes: u64,
    used: AtomicI64,
    /// Bytes of creations planned in the current group, not yet applied (writer only).
    pending: AtomicU64,
    /// Every record with an LSN ≤ this is applied to every shard.
    pub(crate) applied: AtomicU64,
    entities: AtomicI64,
    late: AtomicU64,
    future: AtomicU64,
}

/// A feature-store read's output settings.
#[derive(Clone, Copy, Debug)]
pub struct ReadAt {
    /// The server's clock, for `ttl`.
    pub now_ms: i64,
}

/// Counters of the tables, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureStats {
    pub entities: u64,
    pub bytes: u64,
    pub max_bytes: u64,
    /// Events ignored by windowed aggregates: older than the window, or from the future.
    pub late_events: u64,
    pub future_events: u64,
}

impl Features {
    pub fn new(shards: u32, decls: Vec<FeatureDecl>, max_bytes: u64) -> Features {
        let decls = Decls::new(decls);
        Features {
            shards: (0..shards.max(1))
                .map(|_| {
                    RwLock::new(FShard {
                        entities: EntityMap::default(),
                        names: Names::new(&decls),
                        lsn: 0,
                        bytes: 0,
                    })
                })
                .collect(),
            decls,
            nshards: shards.max(1),
            max_bytes,
            used: AtomicI64::new(0),
            pending: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            entities: AtomicI64::new(0),
            late: AtomicU64::new(0),
            future: AtomicU64::new(0),
        }
    }

    pub(crate) fn empty_shard(&self) -> FShard {
        FShard {
            entities: EntityMap::default(),
            names: Names::new(&self.decls),
            lsn: 0,
            bytes: 0,
        }
    }

    /// Replace every shard's contents (start-up, from a snapshot).
    pub(crate) fn install(&self, shards: Vec<FShard>, entities: u64) {
        let mut used = 0u64;
        for (lock, sh) in self.shards.iter().zip(shards) {
            used += sh.bytes;
            *lock.write() = sh;
        }
        self.used
            .store(i64::try_from(used).unwrap_or(i64::MAX), Ordering::Relaxed);
        self.entities.store(
            i64::try_from(entities).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn shard_of(&self, entity: &str) -> u32 {
        vx_proto::shard::shard_of_hash(EntityRef::new(entity).hash, self.nshards)
    }

    /// The shard of an entity whose hash is computed already.
    fn shard(&self, e: EntityRef<'_>) -> Option<&RwLock<FShard>> {
        let i = vx_proto::shard::shard_of_hash(e.hash, self.nshards);
        self.shards.get(i as usize)
    }

    pub fn shards(&self) -> u32 {
        self.nshards
    }

    pub fn decls(&self) -> &[FeatureDecl] {
        &self.decls.list
    }

    pub fn is_declared(&self, name: &str) -> bool {
        self.decls.is_declared(name)
    }

    pub fn stats(&self) -> FeatureStats {
        FeatureStats {
            entities: u64::try_from(self.entities.load(Ordering::Relaxed)).unwrap_or(0),
            bytes: self.used_bytes(),
            max_bytes: self.max_bytes,
            late_events: self.late.load(Ordering::Relaxed),
            future_events: self.future.load(Ordering::Relaxed),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        u64::try_from(self.used.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Change entity `e`'s shard under its write lock, and add what that changed of the
    /// shard's bytes to the tables' count.
    fn change<R: Default>(&self, e: EntityRef<'_>, f: impl FnOnce(&mut FShard) -> R) -> R {
        let Some(lock) = self.shard(e) else {
            return R::default();
        };
        let mut g = lock.write();
        let before = g.bytes;
        let out = f(&mut g);
        let after = g.bytes;
        if after != before {
            self.used.fetch_add(
                i64::try_from(after).unwrap_or(i64::MAX)
                    - i64::try_from(before).unwrap_or(i64::MAX),
                Ordering::Relaxed,
            );
        }
        out
    }

    // ---------------------------------------------------------------------------------------
    // The budget (`storage.max_feature_bytes`), checked by the writer before it writes.

    /// Reserve room for what `batch` would create; false (nothing reserved) past the budget.
    pub(crate) fn reserve_events(&self, batch: &Batch) -> bool {
        let used = self.used_bytes() + self.pending.load(Ordering::Relaxed);
        // Cheap bound first: every event creating its entity and every feature it can touch.
        let per_event = ENTITY_COST
            + vx_proto::rules::MAX_ENTITY_LEN as u64
            + (3 + self.decls.max_per_type as u64) * (FEAT_COST + NAME_COST + 256)
            + (self.decls.max_per_type as u64) * (HLL_M * HLL_LEVELS) as u64;
        let bound = per_event.saturating_mul(batch.len() as u64);
        if used.saturating_add(bound) <= self.max_bytes {
            self.pending.fetch_add(bound, Ordering::Relaxed);
            return true;
        }
        let cost = self.creation_cost(batch);
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return false;
        }
        self.pending.fetch_add(cost, Ordering::Relaxed);
        true
    }

    /// What the batch's events would create: entities and features that do not exist yet.
    fn creation_cost(&self, batch: &Batch) -> u64 {
        let mut new_entities: HashSet<&str> = HashSet::new();
        let mut cost = 0u64;
        for ev in batch.iter() {
            let Some(entity) = ev.entity else { continue };
            let decls = self.decls.by_from.get(ev.ty).map_or(&[][..], |v| &v[..]);
            let typed = matches!(ev.kind, Kind::Counter | Kind::Gauge);
            let er = EntityRef::new(entity);
            let Some(lock) = self.shard(er) else {
                continue;
            };
            let g = lock.read();
            match g.entities.get(er) {
                None => {
                    if new_entities.insert(entity) {
                        cost += ENTITY_COST + 2 * entity.len() as u64 + 2 * FEAT_COST;
                    }
                    cost += decls.len() as u64 * WINDOW_MAX;
                    if typed {
                        cost += FEAT_COST + NAME_COST + ev.ty.len() as u64;
                    }
                }
                Some(e) => {
                    if typed {
                        let has = g
                            .names
                            .id(ev.ty)
                            .is_some_and(|id| e.feats.iter().any(|f| f.name == id));
                        if !has {
                            cost += FEAT_COST + NAME_COST + ev.ty.len() as u64;
                        }
                    }
                    for &d in decls {
                        if !e.feats.iter().any(|f| f.name == Decls::id(d)) {
                            cost += WINDOW_MAX;
                        }
                    }
                }
            }
        }
        cost
    }

    /// Reserve room for a PUT; false past the budget.
    pub(crate) fn reserve_put(&self, entity: &str, set: &[(String, Option<FeatureValue>)]) -> bool {
        let used = self.used_bytes() + self.pending.load(Ordering::Relaxed);
        let er = EntityRef::new(entity);
        let Some(lock) = self.shard(er) else {
            return false;
        };
        let g = lock.read();
        let ent = g.entities.get(er);
        let mut cost = if ent.is_none() {
            ENTITY_COST + 2 * entity.len() as u64
        } else {
            0
        };
        for (name, v) in set {
            let Some(v) = v else { continue };
            let exists = ent.is_some_and(|e| {
                g.names
                    .id(name)
                    .is_some_and(|id| e.feats.iter().any(|f| f.name == id))
            });
            let extra = match v {
                FeatureValue::Str(s) => s.len() as u64,
                _ => 0,
            };
            if !exists {
                cost += FEAT_COST + NAME_COST + 2 * name.len() as u64 + extra;
            }
        }
        if cost > 0 && used.saturating_add(cost) > self.max_bytes {
            return false;
        }
        self.pending.fetch_add(cost, Ordering::Relaxed);
        true
    }

    /// The group is applied (or abandoned): its reservations are spent.
    pub(crate) fn end_group(&self) {
        self.pending.store(0, Ordering::Relaxed);
    }

    // ---------------------------------------------------------------------------------------
    // Applying records.

    /// Apply one checksum-verified record. `replay` is set during recovery only.
    pub(crate) fn apply(
        &self,
        rec: &[u8],
        h: &Header,
        replay: Option<&Replay<'_>>,
    ) -> Result<DirectApplied, Decode> {
        match h.ty {
            RecordType::Events => {
                let mut prev_ty: &str = "";
                let mut decls: &[u32] = &[];
                for run in record::runs(rec, h.n) {
                    let run = run?;
                    for ev in vx_proto::packed::events(run.events, run.stream) {
                        let ev = ev?;
                        let Some(entity) = ev.entity else { continue };
                        // Runs are mostly of one type: look the declarations up on a change.
                        if ev.ty != prev_ty {
                            prev_ty = ev.ty;
                            decls = self.decls.by_from.get(ev.ty).map_or(&[][..], |v| &v[..]);
                        }
                        self.apply_event(entity, &ev, decls, h, replay);
                    }
                }
                Ok(DirectApplied::default())
            }
            RecordType::FeaturePut => {
                let (entity, set) = record::feature_put(rec, h.n)?;
                Ok(self.apply_put(entity, &set, h.lsn, h.append_ms, replay))
            }
            RecordType::FeatureDelete => {
                let (entity, name) = record::feature_delete(rec)?;
                Ok(self.apply_delete(entity, name, h.lsn, replay))
            }
            RecordType::Tombstone => Ok(DirectApplied::default()),
        }
    }

    /// Whether only redone declarations apply to entity `e` for a record at `lsn`: during
    /// recovery, when its shard's snapshot covers the record.
    fn redo_only(&self, e: EntityRef<'_>, lsn: u64, replay: Option<&Replay<'_>>) -> bool {
        let s = vx_proto::shard::shard_of_hash(e.hash, self.nshards) as usize;
        replay
            .and_then(|r| r.covered.get(s))
            .is_some_and(|&c| lsn <= c)
    }

    fn apply_event(
        &self,
        entity: &str,
        ev: &EventView<'_>,
        decls: &[u32],
        h: &Header,
        replay: Option<&Replay<'_>>,
    ) {
        let er = EntityRef::new(entity);
        // `Some`: only these declarations are redone for this record (recovery).
        let redo = replay
            .filter(|_| self.redo_only(er, h.lsn, replay))
            .map(|r| r.redo);
        if let Some(redo) = redo
            && !decls.iter().any(|&d| redo.get(d as usize) == Some(&true))
        {
            return;
        }
        self.change(er, |sh| self.apply_event_to(sh, er, ev, decls, h, redo));
    }

    fn apply_event_to(
        &self,
        sh: &mut FShard,
        er: EntityRef<'_>,
        ev: &EventView<'_>,
        decls: &[u32],
        h: &Header,
        redo: Option<&[bool]>,
    ) {
        let (lsn, append_ms) = (h.lsn, h.append_ms);
        let FShard {
            entities,
            names,
            bytes,
            lsn: shard_lsn,
        } = sh;
        let future = ev.ts > append_ms.saturating_add(MAX_FUTURE_MS);
        let ent = if redo.is_some() {
            // Recomputing a declaration over records the snapshot covers: only entities that
            // still exist are touched (a later delete removed the others).
            match entities.get_mut(er) {
                Some(e) => e,
                None => return,
            }
        } else {
            *shard_lsn = lsn;
            let (e, created) = entities.get_or_insert(er);
            if created {
                *bytes += ENTITY_COST + 2 * er.name.len() as u64;
                self.entities.fetch_add(1, Ordering::Relaxed);
            }
            e.as_of = e.as_of.max(ev.ts);
            if !future {
                e.wm = e.wm.max(ev.ts);
            }
            e.events = Some(e.events.unwrap_or(0).saturating_add(1));
            e.last_ts = Some(e.last_ts.map_or(ev.ts, |t| t.max(ev.ts)));
            // Counters and gauges, unless a declaration owns the name.
            if let (Kind::Counter | Kind::Gauge, Some(value)) = (ev.kind, ev.value)
                && !self.decls.is_declared(ev.ty)
            {
                let id = names.id(ev.ty).unwrap_or(u32::MAX);
                let st = plain_mut(e, names, bytes, id, ev.ty, append_ms);
                if ev.kind == Kind::Counter {
                    add_counter(st, value, ev.ts);
                } else {
                    set_gauge(st, value, ev.ts);
                }
            }
            e
        };
        for &d in decls {
            if redo.is_some_and(|r| r.get(d as usize) != Some(&true)) {
                continue;
            }
            let Some(decl) = self.decls.list.get(d as usize) else {
                continue;
            };
            let width = self.decls.widths.get(d as usize).copied().flatten();
            if width.is_some() && future {
                self.future.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let id = Decls::id(d);
            let pos = match ent.feats.iter().position(|f| f.name == id) {
                Some(p) => p,
                None => {
                    let st = match decl.agg {
                        Agg::Last => State::Plain {
                            v: FeatureValue::Int(0),
                            ts: i64::MIN,
                        },
                        // Windowed sketches start sparse (empty); all-time ones are 64 bytes.
                        Agg::Distinct => State::Hll {
                            head: i64::MIN,
                            regs: if width.is_some() {
                                Vec::new()
                            } else {
                                vec![0u8; HLL_M]
                            },
                        },
                        _ => State::Win(Buckets::new()),
                    };
                    *bytes += FEAT_COST + state_bytes(&st);
                    ent.feats.push(Feat {
                        name: id,
                        updated_ms: append_ms,
                        st,
                    });
                    ent.feats.len() - 1
                }
            };
            let Some(f) = ent.feats.get_mut(pos) else {
                continue;
            };
            let old = state_bytes(&f.st);
            let applied = aggregate(decl, width, &mut f.st, ev);
            match applied {
                Some(true) => f.updated_ms = append_ms,
                Some(false) => {
                    self.late.fetch_add(1, Ordering::Relaxed);
                }
                None => {}
            }
            *bytes = (*bytes + state_bytes(&f.st)).saturating_sub(old);
        }
    }

    fn apply_put(
        &self,
        entity: &str,
        set: &[(&str, Option<FeatureValue>)],
        lsn: u64,
        append_ms: i64,
        replay: Option<&Replay<'_>>,
    ) -> DirectApplied {
        let er = EntityRef::new(entity);
        // PUTs never touch declared aggregates (refused before they are written).
        if self.redo_only(er, lsn, replay) {
            return DirectApplied::default();
        }
        self.change(er, |sh| self.put_to(sh, er, set, lsn, append_ms))
    }

    fn put_to(
        &self,
        sh: &mut FShard,
        er: EntityRef<'_>,
        set: &[(&str, Option<FeatureValue>)],
        lsn: u64,
        append_ms: i64,
    ) -> DirectApplied {
        let mut out = DirectApplied::default();
        let FShard {
            entities,
            names,
            bytes,
            lsn: shard_lsn,
        } = sh;
        *shard_lsn = lsn;
        out.found = entities.contains_key(er);
        if set.iter().all(|(_, v)| v.is_none()) && !out.found {
            // Only deletes of an unknown entity: nothing to create.
            return out;
        }
        if !out.found {
            *bytes += ENTITY_COST + 2 * er.name.len() as u64;
            self.entities.fetch_add(1, Ordering::Relaxed);
        }
        let (e, _) = entities.get_or_insert(er);
        e.as_of = e.as_of.max(append_ms);
        for (name, v) in set {
            if self.decls.is_declared(name) {
                continue;
            }
            if let Some(b) = e.builtin(name) {
                // The built-ins are integers (the HTTP layer refuses anything else).
                match v {
                    None => {
                        out.deleted += u64::from(b.is_some());
                        *b = None;
                    }
                    Some(FeatureValue::Int(i)) => {
                        *b = Some(*i);
                        out.set += 1;
                    }
                    Some(_) => {}
                }
                continue;
            }
            match v {
                None => {
                    if let Some(id) = names.id(name)
                        && remove_feat(e, names, bytes, id)
                    {
                        out.deleted += 1;
                    }
                }
                Some(v) => {
                    let id = names.id(name).unwrap_or(u32::MAX);
                    let st = plain_mut(e, names, bytes, id, name, append_ms);
                    let old = state_bytes(st);
                    let ts = match st {
                        State::Plain { ts, .. } => *ts,
                        _ => i64::MIN,
                    };
                    *st = State::Plain { v: v.clone(), ts };
                    *bytes = (*bytes + state_bytes(st)).saturating_sub(old);
                    out.set += 1;
                }
            }
        }
        out
    }

    fn apply_delete(
        &self,
        entity: &str,
        name: Option<&str>,
        lsn: u64,
        replay: Option<&Replay<'_>>,
    ) -> DirectApplied {
        let er = EntityRef::new(entity);
        let redo_only = self.redo_only(er, lsn, replay);
        self.change(er, |sh| {
            self.delete_from(sh, er, name, lsn, replay, redo_only)
        })
    }

    fn delete_from(
        &self,
        sh: &mut FShard,
        er: EntityRef<'_>,
        name: Option<&str>,
        lsn: u64,
        replay: Option<&Replay<'_>>,
        redo_only: bool,
    ) -> DirectApplied {
        let mut out = DirectApplied::default();
        let FShard {
            entities,
            names,
            bytes,
            lsn: shard_lsn,
        } = sh;
        let redo = |id: u32| {
            self.decls
                .decl_of(id)
                .is_some_and(|d| replay.is_some_and(|r| r.redo.get(d) == Some(&true)))
        };
        if !redo_only {
            *shard_lsn = lsn;
        }
        if name.is_none() && !redo_only {
            if let Some(e) = entities.remove(er) {
                out.found = true;
                out.deleted = e.feats.len() as u64;
                *bytes = bytes.saturating_sub(ENTITY_COST + 2 * er.name.len() as u64);
                for f in e.feats {
                    *bytes = bytes.saturating_sub(FEAT_COST + state_bytes(&f.st));
                    *bytes = bytes.saturating_sub(names.release(f.name));
                }
                self.entities.fetch_sub(1, Ordering::Relaxed);
            }
            return out;
        }
        let Some(e) = entities.get_mut(er) else {
            return out;
        };
        match name {
            None => {
                // Recomputing: the delete resets the redone declarations of the entity.
                e.feats.retain(|f| !redo(f.name));
            }
            Some(n) => {
                if !redo_only && let Some(b) = e.builtin(n) {
                    out.found = b.is_some();
                    out.deleted = u64::from(b.is_some());
                    *b = None;
                    return out;
                }
                let Some(id) = names.id(n) else {
                    return out;
                };
                if redo_only && !redo(id) {
                    return out;
                }
                if remove_feat(e, names, bytes, id) {
                    out.found = true;
                    out.deleted = 1;
                }
            }
        }
        out
    }

    // ---------------------------------------------------------------------------------------
    // Reads.

    /// Whether the entity exists, and whether it has the feature `name` (if given).
    pub fn exists(&self, entity: &str, name: Option<&str>) -> bool {
        let er = EntityRef::new(entity);
        let Some(lock) = self.shard(er) else {
            return false;
        };
        let g = lock.read();
        let Some(e) = g.entities.get(er) else {
            return false;
        };
        match name {
            None => true,
            Some(EVENTS) => e.events.is_some(),
            Some(LAST_TS) => e.last_ts.is_some(),
            Some(n) => g
                .names
                .id(n)
                .is_some_and(|id| e.feats.iter().any(|f| f.name == id)),
        }
    }

    /// Append `{"entity":…,"features":{…},"as_of":…}` (or without `as_of`) for one entity to
    /// `out`; false (nothing written) if the entity is unknown.
    pub fn write_json(
        &self,
        entity: &str,
        names: Option<&[&str]>,
        at: ReadAt,
        with_as_of: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        let er = EntityRef::new(entity);
        let Some(lock) = self.shard(er) else {
            return false;
        };
        let g = lock.read();
        let Some(e) = g.entities.get(er) else {
            return false;
        };
        out.extend_from_slice(b"{\"entity\":");
        json_str(out, entity);
        out.extend_from_slice(b",\"features\":{");
        let mut first = true;
        let builtin = |name: &str, v: Option<i64>, first: &mut bool, out: &mut Vec<u8>| {
            let Some(v) = v else { return };
            if !*first {
                out.push(b',');
            }
            *first = false;
            json_str(out, name);
            let _ = write!(Bytes(out), ":{v}");
        };
        let one = |f: &Feat, first: &mut bool, out: &mut Vec<u8>| {
            let Some(v) = self.read_value(f, e, at) else {
                return;
            };
            if !*first {
                out.push(b',');
            }
            *first = false;
            json_str(out, g.names.name(f.name));
            out.push(b':');
            v.write(out);
        };
        match names {
            None => {
                builtin(EVENTS, e.events, &mut first, out);
                builtin(LAST_TS, e.last_ts, &mut first, out);
                for f in &e.feats {
                    one(f, &mut first, out);
                }
            }
            Some(list) => {
                for n in list {
                    match *n {
                        EVENTS => builtin(EVENTS, e.events, &mut first, out),
                        LAST_TS => builtin(LAST_TS, e.last_ts, &mut first, out),
                        _ => {
                            if let Some(id) = g.names.id(n)
                                && let Some(f) = e.feats.iter().find(|f| f.name == id)
                            {
                                one(f, &mut first, out);
                            }
                        }
                    }
                }
            }
        }
        out.push(b'}');
        if with_as_of {
            let _ = write!(Bytes(out), ",\"as_of\":{}", e.as_of.max(0));
        }
        out.push(b'}');
        true
    }

    /// One feature's value as a read sees it now; `None` when hidden (ttl) or empty.
    fn read_value(&self, f: &Feat, e: &Entity, at: ReadAt) -> Option<Out> {
        let d = self.decls.decl_of(f.name);
        if let Some(d) = d
            && let Some(Some(ttl)) = self.decls.ttls.get(d)
            && at.now_ms.saturating_sub(f.updated_ms) > *ttl
        {
            return None;
        }
        let Some(d) = d else {
            return match &f.st {
                State::Plain { v, .. } => Some(Out::Value(v.clone())),
                _ => None,
            };
        };
        let decl = self.decls.list.get(d)?;
        let width = self.decls.widths.get(d).copied().flatten();
        let lo = |width: i64| e.wm.div_euclid(width) - BUCKETS;
        match (&f.st, decl.agg) {
            (State::Plain { v, ts }, Agg::Last) => {
                if *ts == i64::MIN {
                    return None;
                }
                if let Some(w) = width
                    && ts.div_euclid(w) <= lo(w)
                {
                    return None;
                }
                Some(Out::Value(v.clone()))
            }
            (State::Win(buckets), agg) => {
                let live = buckets
                    .iter()
                    .filter(|b| width.is_none_or(|w| b.idx > lo(w)));
                let (mut n, mut a, mut any) = (0u64, 0f64, false);
                let mut m: Option<f64> = None;
                for b in live {
                    n += u64::from(b.n);
                    any |= b.n > 0;
                    match agg {
                        Agg::Min => m = Some(m.map_or(b.a, |x| x.min(b.a))),
                        Agg::Max => m = Some(m.map_or(b.a, |x| x.max(b.a))),
                        _ => a += b.a,
                    }
                }
                match agg {
                    Agg::Count => Some(Out::Value(FeatureValue::Int(
                        i64::try_from(n).unwrap_or(i64::MAX),
                    ))),
                    Agg::Sum => Some(Out::Num(a)),
                    Agg::Avg if any && n > 0 => Some(Out::Num(a / n as f64)),
                    Agg::Min | Agg::Max if any => m.map(Out::Num),
                    _ => None,
                }
            }
            (State::Hll { head, regs }, Agg::Distinct) => {
                let est = match width {
                    None => hll_estimate(regs.iter().copied()),
                    Some(w) => {
                        if *head == i64::MIN {
                            0.0
                        } else {
                            let shift = e.wm.div_euclid(w).saturating_sub(*head).max(0);
                            hll_estimate(windowed_registers(regs, *head, shift).into_iter())
                        }
                    }
                };
                Some(Out::Value(FeatureValue::Int(est.round() as i64)))
            }
            _ => None,
        }
    }
}

/// A value on its way to JSON.
enum Out {
    Value(FeatureValue),
    /// An aggregate's number: integral values print as integers.
    Num(f64),
}

impl Out {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Out::Value(FeatureValue::Int(i)) => {
                let _ = write!(Bytes(out), "{i}");
            }
            Out::Value(FeatureValue::Float(f)) => json_f64(out, *f),
            Out::Value(FeatureValue::Bool(b)) => {
                out.extend_from_slice(if *b { b"true" } else { b"false" })
            }
            Out::Value(FeatureValue::Str(s)) => json_str(out, s),
            Out::Num(f) => {
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    let _ = write!(Bytes(out), "{}", *f as i64);
                } else {
                    json_f64(out, *f);
                }
            }
        }
    }
}

struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn json_f64(out: &mut Vec<u8>, f: f64) {
    if f.is_finite() {
        let _ = serde_json::to_writer(&mut *out, &f);
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Remove feature `id` of the entity, freeing its bytes and its name's reference; false if it
/// has no such feature.
fn remove_feat(e: &mut Entity, names: &mut Names, bytes: &mut u64, id: u32) -> bool {
    let Some(p) = e.feats.iter().position(|f| f.name == id) else {
        return false;
    };
    let f = e.feats.swap_remove(p);
    *bytes = bytes.saturating_sub(FEAT_COST + state_bytes(&f.st));
    *bytes = bytes.saturating_sub(names.release(id));
    true
}

/// The plain state of feature `id` (`name`), created if missing. `id` is `u32::MAX` when the
/// name has no id yet in this shard.
fn plain_mut<'e>(
    e: &'e mut Entity,
    names: &mut Names,
    bytes: &mut u64,
    id: u32,
    name: &str,
    append_ms: i64,
) -> &'e mut State {
    let pos = if id == u32::MAX {
        None
    } else {
        e.feats.iter().position(|f| f.name == id)
    };
    let pos = match pos {
        Some(p) => {
            if let Some(f) = e.feats.get_mut(p) {
                f.updated_ms = append_ms;
            }
            p
        }
        None => {
            let (id, added) = names.acquire(name);
            *bytes += added + FEAT_COST;
            e.feats.push(Feat {
                name: id,
                updated_ms: append_ms,
                st: State::Plain {
                    v: FeatureValue::Int(0),
                    ts: i64::MIN,
                },
            });
            e.feats.len() - 1
        }
    };
    // `pos` is in range: found or just pushed.
    &mut e.feats[pos].st
}

fn add_counter(st: &mut State, delta: Num, ts: i64) {
    let d = match delta {
        Num::Int(i) => i,
        // Decoders accept counters only as integers (a float with zero fraction included).
        Num::Float(f) => f as i64,
    };
    match st {
        State::Plain {
            v: FeatureValue::Int(c),
            ts: t,
        } => {
            *c = c.saturating_add(d);
            *t = (*t).max(ts);
        }
        State::Plain {
            v: FeatureValue::Float(c),
            ts: t,
        } => {
            *c += d as f64;
            *t = (*t).max(ts);
        }
        State::Plain { v, ts: t } => {
            // A PUT left a string or a bool: the counter starts over.
            *v = FeatureValue::Int(d);
            *t = (*t).max(ts);
        }
        other => {
            *other = State::Plain {
                v: FeatureValue::Int(d),
                ts,
            }
        }
    }
}

fn set_gauge(st: &mut State, value: Num, ts: i64) {
    match st {
        State::Plain { v, ts: t } => {
            if ts >= *t {
                *v = value.into();
                *t = ts;
            }
        }
        other => {
            *other = State::Plain {
                v: value.into(),
                ts,
            }
        }
    }
}

/// Update one declared aggregate with an event: `Some(true)` applied, `Some(false)` late,
/// `None` not applicable (no value where one is needed).
fn aggregate(
    decl: &FeatureDecl,
    width: Option<i64>,
    st: &mut State,
    ev: &EventView<'_>,
) -> Option<bool> {
    let b = width.map_or(0, |w| ev.ts.div_euclid(w));
    match (decl.agg, st) {
        (Agg::Last, State::Plain { v, ts }) => {
            let value = ev.value?;
            if ev.ts >= *ts {
                *v = value.into();
                *ts = ev.ts;
            }
            Some(true)
        }
        (Agg::Distinct, State::Hll { head, regs }) => {
            let h = match decl.of {
                DistinctOf::Value => {
                    let f = ev.value?.as_f64();
                    // 3 and 3.0 are one value; -0.0 and 0.0 too.
                    let f = if f == 0.0 { 0.0 } else { f };
                    xxhash_rust::xxh3::xxh3_64(&f.to_bits().to_le_bytes())
                }
                DistinctOf::Stream => xxhash_rust::xxh3::xxh3_64(ev.stream.as_bytes()),
                DistinctOf::Data => xxhash_rust::xxh3::xxh3_64(ev.data?.as_bytes()),
            };
            let reg = (h >> (64 - HLL_BITS)) as usize;
            let rest = (h << HLL_BITS) | (1 << (HLL_BITS - 1));
            let rho = (rest.leading_zeros() + 1).min(HLL_LEVELS as u32) as u8;
            if width.is_none() {
                if let Some(r) = regs.get_mut(reg) {
                    *r = (*r).max(rho);
                }
                *head = 0;
                return Some(true);
            }
            Some(hll_window_add(head, regs, b, reg, rho))
        }
        (_, State::Win(buckets)) => {
            let a = match decl.agg {
                Agg::Count => 0.0,
                _ => ev.value?.as_f64(),
            };
            let head = buckets.last().map_or(i64::MIN, |x| x.idx);
            if head != i64::MIN && b <= head - BUCKETS {
                return Some(false);
            }
            let fold = |bk: &mut Bucket| {
                bk.n = bk.n.saturating_add(1);
                bk.a = match decl.agg {
                    Agg::Min if bk.n > 1 => bk.a.min(a),
                    Agg::Max if bk.n > 1 => bk.a.max(a),
                    Agg::Min | Agg::Max => a,
                    _ => bk.a + a,
                };
            };
            if head == i64::MIN || b > head {
                let mut bk = Bucket {
                    idx: b,
                    n: 0,
                    a: 0.0,
                };
                fold(&mut bk);
                let keep_from = buckets.partition_point(|x| x.idx <= b - BUCKETS);
                buckets.drain(..keep_from);
                buckets.push(bk);
            } else {
                match buckets.binary_search_by_key(&b, |x| x.idx) {
                    Ok(i) => {
                        if let Some(bk) = buckets.get_mut(i) {
                            fold(bk);
                        }
                    }
                    Err(i) => {
                        let mut bk = Bucket {
                            idx: b,
                            n: 0,
                            a: 0.0,
                        };
                        fold(&mut bk);
                        buckets.insert(i, bk);
                    }
                }
            }
            Some(true)
        }
        _ => None,
    }
}

/// Windowed HLL, dense: `regs[r * LEVELS + (l - 1)]` holds a tag of the newest bucket in
/// which register `r` reached level `l` (0: none), the tag being `bucket mod 255 + 1`; entries
/// are cleared once a window old, so a tag's age relative to `head` is unambiguous. Sparse
/// (while it holds at most [`HLL_SPARSE_MAX`] entries, which small cardinalities do): the
/// same entries as `(register, level - 1, tag)` triples sorted by register and level, so an entity with a few distinct
/// values costs tens of bytes instead of 1 KiB; it turns dense when it would pass that.
fn hll_window_add(head: &mut i64, regs: &mut Vec<u8>, b: i64, reg: usize, rho: u8) -> bool {
    let dense = regs.len() == HLL_M * HLL_LEVELS;
    if *head == i64::MIN {
        *head = b;
    }
    if b <= *head - BUCKETS {
        return false;
    }
    if b > *head {
        let shift = b - *head;
        let old_head = *head;
        if dense {
            for t in regs.iter_mut() {
                if *t != 0 && age(*t, old_head) + shift >= BUCKETS {
                    *t = 0;
                }
            }
        } else {
            let mut keep = 0;
            for i in (0..regs.len() / 3).map(|i| i * 3) {
                if age(regs[i + 2], old_head) + shift < BUCKETS {
                    regs.copy_within(i..i + 3, keep);
                    keep += 3;
                }
            }
            regs.truncate(keep);
        }
        *head = b;
    }
    let tag = (b.rem_euclid(255) + 1) as u8;
    let new_age = *head - b;
    let newer = |t: u8| t == 0 || age(t, *head) > new_age;
    if dense {
        for l in 0..usize::from(rho) {
            if let Some(t) = regs.get_mut(reg * HLL_LEVELS + l)
                && newer(*t)
            {
                *t = tag;
            }
        }
        return true;
    }
    // Sparse entries are sorted by (register, level): the register's levels are found with
    // one binary search and walked in order (levels 0..rho are consecutive entries).
    let key = |i: usize| (regs[i * 3], regs[i * 3 + 1]);
    let n = regs.len() / 3;
    let mut i = {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(mid) < (reg as u8, 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    for l in 0..rho {
        if i < regs.len() / 3 && (regs[i * 3], regs[i * 3 + 1]) == (reg as u8, l) {
            if newer(regs[i * 3 + 2]) {
                regs[i * 3 + 2] = tag;
            }
        } else {
            regs.splice(i * 3..i * 3, [reg as u8, l, tag]);
        }
        i += 1;
    }
    if regs.len() > HLL_SPARSE_MAX * 3 {
        let mut d = vec![0u8; HLL_M * HLL_LEVELS];
        for e in regs.chunks_exact(3) {
            if let Some(t) = d.get_mut(usize::from(e[0]) * HLL_LEVELS + usize::from(e[1])) {
                *t = e[2];
            }
        }
        *regs = d;
    }
    true
}

/// Entries a sparse windowed sketch holds before it turns dense.
const HLL_SPARSE_MAX: usize = 96;

fn age(tag: u8, head: i64) -> i64 {
    let h = head.rem_euclid(255);
    (h - (i64::from(tag) - 1)).rem_euclid(255)
}

/// The registers over the window that ends `shift` buckets after `head`.
fn windowed_registers(regs: &[u8], head: i64, shift: i64) -> [u8; HLL_M] {
    let mut v = [0u8; HLL_M];
    let live = |t: u8| t != 0 && age(t, head) + shift < BUCKETS;
    if regs.len() == HLL_M * HLL_LEVELS {
        for (r, out) in v.iter_mut().enumerate() {
            for l in 0..HLL_LEVELS {
                if let Some(&t) = regs.get(r * HLL_LEVELS + l)
                    && live(t)
                {
                    *out = (l + 1) as u8;
                }
            }
        }
    } else {
        for e in regs.chunks_exact(3) {
            if live(e[2])
                && let Some(out) = v.get_mut(usize::from(e[0]))
            {
                *out = (*out).max(e[1] + 1);
            }
        }
    }
    v
}

/// Whether `regs` is a valid sketch for a window (`windowed`) or all time (a snapshot's).
pub(crate) fn hll_valid(regs: &[u8], windowed: bool) -> bool {
    if !windowed {
        return regs.len() == HLL_M;
    }
    regs.len() == HLL_M * HLL_LEVELS
        || (regs.len().is_multiple_of(3)
            && regs.len() <= HLL_SPARSE_MAX * 3
            && regs
                .chunks_exact(3)
                .all(|e| usize::from(e[0]) < HLL_M && usize::from(e[1]) < HLL_LEVELS)
            && regs
                .chunks_exact(3)
                .zip(regs.chunks_exact(3).skip(1))
                .all(|(a, b)| (a[0], a[1]) < (b[0], b[1])))
}

fn hll_estimate(regs: impl Iterator<Item = u8>) -> f64 {
    let m = HLL_M as f64;
    let (mut sum, mut zeros) = (0f64, 0u32);
    for r in regs {
        sum += 2f64.powi(-i32::from(r));
        zeros += u32::from(r == 0);
    }
    let alpha = 0.709;
    let e = alpha * m * m / sum;
    if e <= 2.5 * m && zeros > 0 {
        m * (m / f64::from(zeros)).ln()
    } else {
        e
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn decl(name: &str, agg: Agg, window: Option<u64>) -> FeatureDecl {
        FeatureDecl {
            name: name.into(),
            from: "hit".into(),
            agg,
            window: window.map(Duration::from_secs),
            ttl: None,
            of: DistinctOf::Value,
        }
    }

    #[test]
    fn hll_is_within_its_error_all_time_and_windowed() {
        let all_time = decl("d", Agg::Distinct, None);
        let windowed = decl("w", Agg::Distinct, Some(60));
        for n in [1u64, 5, 50, 1000, 20_000] {
            let mut a = State::Hll {
                head: i64::MIN,
                regs: vec![0u8; HLL_M],
            };
            let mut w = State::Hll {
                head: i64::MIN,
                regs: Vec::new(),
            };
            for i in 0..n {
                let ev = EventView {
                    stream: "s",
                    entity: Some("e"),
                    ty: "hit",
                    ts: 7_000 + (i % 3) as i64 * 1000,
                    kind: Kind::Event,
                    value: Some(Num::Int(i as i64)),
                    id: None,
                    data: None,
                };
                aggregate(&all_time, None, &mut a, &ev);
                aggregate(&windowed, windowed.width_ms(), &mut w, &ev);
            }
            let (State::Hll { regs: ra, .. }, State::Hll { head, regs: rw }) = (&a, &w) else {
                panic!()
            };
            let all = hll_estimate(ra.iter().copied());
            let win = hll_estimate(windowed_registers(rw, *head, 0).into_iter());
            assert!(hll_valid(rw, true));
            assert_eq!(all, win, "a window holding everything is the plain sketch");
            let err = (all - n as f64).abs() / n as f64;
            assert!(err < 0.4, "n {n}: estimate {all}");
            // A window later, nothing is left.
            let gone = hll_estimate(windowed_registers(rw, *head, 60).into_iter());
            assert_eq!(gone, 0.0);
        }
    }

    #[test]
    fn window_buckets_slide_and_drop_late_events() {
        let d = decl("s", Agg::Sum, Some(60)); // 1 s buckets
        let w = d.width_ms();
        assert_eq!(w, Some(1000));
        let mut st = State::Win(Buckets::new());
        let ev = |ts: i64, v: i64| EventView {
            stream: "s",
            entity: Some("e"),
            ty: "hit",
            ts,
            kind: Kind::Event,
            value: Some(Num::Int(v)),
            id: None,
            data: None,
        };
        assert_eq!(aggregate(&d, w, &mut st, &ev(0, 1)), Some(true));
        assert_eq!(aggregate(&d, w, &mut st, &ev(59_999, 2)), Some(true));
        assert_eq!(aggregate(&d, w, &mut st, &ev(120_000, 4)), Some(true));
        // Bucket 0 and 59 are a window behind bucket 120: gone.
        let State::Win(b) = &st else { panic!() };
        assert_eq!(b.len(), 1);
        assert_eq!(aggregate(&d, w, &mut st, &ev(1_000, 8)), Some(false));
        assert_eq!(aggregate(&d, w, &mut st, &ev(61_000, 8)), Some(true));
        let State::Win(b) = &st else { panic!() };
        assert_eq!(b.iter().map(|x| x.idx).collect::<Vec<_>>(), [61, 120]);
        assert!(b.len() <= BUCKETS as usize);
    }

    #[test]
    fn declarations_are_checked() {
        assert!(check_decls(&[decl("ok", Agg::Sum, Some(300))]).is_ok());
        assert!(check_decls(&[decl("events", Agg::Sum, None)]).is_err());
        assert!(check_decls(&[decl("a", Agg::Sum, None), decl("a", Agg::Max, None)]).is_err());
        assert!(
            check_decls(&[FeatureDecl {
                window: Some(Duration::from_millis(500)),
                ..decl("a", Agg::Sum, None)
            }])
            .is_err()
        );
        assert!(check_decls(&[decl("a", Agg::Sum, Some(31 * 86_400))]).is_err());
        assert!(
            check_decls(&[FeatureDecl {
                of: DistinctOf::Stream,
                ..decl("a", Agg::Sum, None)
            }])
            .is_err()
        );
    }
}
