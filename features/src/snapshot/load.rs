//! Loading and checking a snapshot: every checksum, the rkyv validation of every archive
//! (read in place, 16-aligned), the schema hash and the shard count, then each shard's
//! contents rebuilt into fresh tables (names mapped by their text, the state of changed
//! declarations dropped, every record encoding checked, windows and sketches checked for
//! shape), the shards on several threads.

use super::{
    ArchivedSnapHeld, ArchivedSnapMeta, ArchivedSnapShard, HEAD_LEN, MAGIC, SnapFile, TRAILER,
    schema_hash, take_bytes,
};
use crate::Features;
use crate::decl::{BUCKETS, FeatureValue};
use crate::prefetch::Lines;
use crate::rec::{Rec, check_encoding, entity_of};
use crate::state::{Bucket, State};
use crate::table::{EntityRef, Shard};
use crate::{Replay, hll};
use hashbrown::HashMap;
use parking_lot::Mutex;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Why a snapshot cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("{0}")]
    Bad(String),
    #[error("reading it: {0}")]
    Io(#[from] io::Error),
}

fn bad(why: impl Into<String>) -> Unusable {
    Unusable::Bad(why.into())
}

/// A parsed, checked header.
struct Head {
    shards: u32,
    covered_min: u64,
    covered_max: u64,
    created_ms: i64,
    meta_len: usize,
    meta_crc: u32,
}

fn read_head(f: &dyn SnapFile) -> Result<Head, Unusable> {
    let mut h = [0u8; HEAD_LEN];
    f.read_exact_at(&mut h, 0)
        .map_err(|_| bad("shorter than its header"))?;
    let u32_at = |i: usize| u32::from_le_bytes(array_at(&h, i));
    let u64_at = |i: usize| u64::from_le_bytes(array_at(&h, i));
    if &h[..8] != MAGIC {
        return Err(bad("not a snapshot (bad magic)"));
    }
    if crc32c::crc32c(&h[..60]) != u32_at(60) {
        return Err(bad("header checksum mismatch"));
    }
    if u64_at(8) != schema_hash() {
        return Err(bad("schema hash mismatch (written by another version)"));
    }
    Ok(Head {
        shards: u32_at(16),
        covered_min: u64_at(24),
        covered_max: u64_at(32),
        created_ms: i64::from_le_bytes(array_at(&h, 40)),
        meta_len: u32_at(48) as usize,
        meta_crc: u32_at(52),
    })
}

/// Read `len` bytes at `off` into a 16-aligned buffer (rkyv validation needs alignment).
fn read_aligned(
    f: &dyn SnapFile,
    off: u64,
    len: usize,
    file_len: u64,
) -> Result<AlignedVec<16>, Unusable> {
    let mut v = AlignedVec::<16>::new();
    read_into(f, off, len, file_len, &mut v)?;
    Ok(v)
}

/// [`read_aligned`] into `v`, reusing its memory.
fn read_into(
    f: &dyn SnapFile,
    off: u64,
    len: usize,
    file_len: u64,
    v: &mut AlignedVec<16>,
) -> Result<(), Unusable> {
    if off.saturating_add(len as u64) > file_len {
        return Err(bad("truncated"));
    }
    v.clear();
    v.resize(len, 0);
    f.read_exact_at(v, off)?;
    Ok(())
}

/// The `N` bytes of `b` at `at`, for fixed-width fields of a header or frame whose length is
/// checked already (zeros past the end, which the checksums then refuse).
fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(src) = b.get(at..at + N) {
        a.copy_from_slice(src);
    }
    a
}

/// A snapshot loaded into fresh shard tables, not yet installed ([`Features::install`]).
pub struct Loaded {
    pub covered_min: u64,
    pub covered_max: u64,
    /// When the snapshot was written, ms since the Unix epoch.
    pub created_ms: i64,
    pub entities: u64,
    shards: Vec<Shard>,
    from: ReplayFrom,
}

/// Where the log replay after a load starts, per shard and per declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayFrom {
    /// Per shard: the last LSN the tables cover (0: none).
    pub covered: Vec<u64>,
    /// Per declaration: recomputed from the whole retained log (changed since the snapshot).
    pub redo: Vec<bool>,
}

impl ReplayFrom {
    /// No snapshot: every shard replays the whole log, nothing is recomputed.
    pub fn everything(features: &Features) -> ReplayFrom {
        ReplayFrom {
            covered: vec![0; features.shards() as usize],
            redo: vec![false; features.decls().len()],
        }
    }

    /// What [`Features::events`], [`Features::put`] and [`Features::delete`] take during
    /// recovery.
    pub fn replay(&self) -> Replay<'_> {
        Replay {
            covered: &self.covered,
            redo: &self.redo,
        }
    }
}

/// Read and check the snapshot in `f` into fresh tables shaped like `features`.
pub fn load(f: &dyn SnapFile, features: &Features) -> Result<Loaded, Unusable> {
    let built: Vec<Mutex<Option<Shard>>> =
        (0..features.shards()).map(|_| Mutex::new(None)).collect();
    let (head, old) = walk(f, features.shards(), &mut 0, &|i, a, old| {
        let mut sh = features.empty_shard();
        build_shard(&mut sh, a, old, features)?;
        if let Some(slot) = built.get(i) {
            *slot.lock() = Some(sh);
        }
        Ok(())
    })?;
    let mut shards = Vec::with_capacity(built.len());
    for slot in built {
        shards.push(
            slot.into_inner()
                .ok_or_else(|| bad("a shard was not loaded"))?,
        );
    }
    let covered = shards.iter().map(|sh| sh.lsn).collect();
    let entities = shards.iter().map(|sh| sh.entities.len() as u64).sum();
    // Declarations unchanged since the snapshot keep their state; the others are redone.
    let redo = features
        .decls()
        .iter()
        .map(|d| old.get(d.name.as_str()) != Some(&d.fingerprint()))
        .collect();
    Ok(Loaded {
        covered_min: head.covered_min,
        covered_max: head.covered_max,
        created_ms: head.created_ms,
        entities,
        shards,
        from: ReplayFrom { covered, redo },
    })
}

impl Features {
    /// Replace every shard's contents with a loaded snapshot (start-up); where the log replay
    /// starts from.
    pub fn install(&self, loaded: Loaded) -> ReplayFrom {
        self.install_shards(loaded.shards, loaded.entities);
        loaded.from
    }
}

/// Why [`verify`] refused a snapshot, and where.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct VerifyError {
    /// The offset of the part that failed.
    pub at: u64,
    pub reason: Unusable,
}

/// What [`verify`] found in a valid snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified {
    pub covered_min: u64,
    pub covered_max: u64,
    pub entities: u64,
}

/// Check a snapshot as start-up would load it (every checksum, the rkyv validation of every
/// archive, the schema hash, the shard count, each shard's contents), one shard in memory at a
/// time, without keeping it.
pub fn verify(f: &dyn SnapFile, shards: u32) -> Result<Verified, VerifyError> {
    let features = Features::new(shards, Vec::new(), u64::MAX);
    let mut at = 0u64;
    let entities = AtomicU64::new(0);
    let (head, _) = walk(f, shards, &mut at, &|_, a, old| {
        let mut sh = features.empty_shard();
        build_shard(&mut sh, a, old, &features)?;
        entities.fetch_add(sh.entities.len() as u64, Ordering::Relaxed);
        Ok(())
    })
    .map_err(|reason| VerifyError { at, reason })?;
    Ok(Verified {
        covered_min: head.covered_min,
        covered_max: head.covered_max,
        entities: entities.into_inner(),
    })
}

/// Read a snapshot's header, meta archive, frame heads and trailer in file order, checking
/// each, then hand every shard's validated archive (with its number and the declarations the
/// snapshot was made with, name → fingerprint, which it also returns) to `on_shard`, on as
/// many threads as the machine has (up to 8): reading, checking and rebuilding one shard needs
/// nothing of another. `at` is kept at the offset of the part that failed (of the first
/// failing shard, if shards fail).
type OldDecls = HashMap<String, u64>;
type OnShard<'a> = dyn Fn(usize, &ArchivedSnapShard, &OldDecls) -> Result<(), Unusable> + Sync + 'a;

fn walk(
    f: &dyn SnapFile,
    shards: u32,
    at: &mut u64,
    on_shard: &OnShard<'_>,
) -> Result<(Head, OldDecls), Unusable> {
    *at = 0;
    let file_len = f.len()?;
    let head = read_head(f)?;
    if head.shards != shards {
        return Err(bad(format!(
            "made for {} shards, the data dir has {shards}",
            head.shards,
        )));
    }
    *at = HEAD_LEN as u64;
    let meta_bytes = read_aligned(f, HEAD_LEN as u64, head.meta_len, file_len)?;
    if crc32c::crc32c(&meta_bytes) != head.meta_crc {
        return Err(bad("meta checksum mismatch"));
    }
    let meta = rkyv::access::<ArchivedSnapMeta, rancor::Error>(&meta_bytes)
        .map_err(|e| bad(format!("meta does not validate: {e}")))?;
    let old: OldDecls = meta
        .decls
        .iter()
        .map(|d| (d.0.as_str().to_string(), d.1.to_native()))
        .collect();
    let mut off = HEAD_LEN as u64 + (head.meta_len as u64).next_multiple_of(16);
    // Where each frame is (offset, length, checksum), from the frames' heads.
    let mut frames = Vec::with_capacity(shards as usize);
    for i in 0..shards {
        *at = off;
        let mut fh = [0u8; 16];
        if off + 16 > file_len {
            return Err(bad(format!("truncated before shard {i}")));
        }
        f.read_exact_at(&mut fh, off)?;
        let len = u64::from_le_bytes(array_at(&fh, 0));
        let crc = u32::from_le_bytes(array_at(&fh, 8));
        let shard = u32::from_le_bytes(array_at(&fh, 12));
        if shard != i {
            return Err(bad(format!("frame {i} names shard {shard}")));
        }
        let len = usize::try_from(len).map_err(|_| bad("frame length"))?;
        if (off + 16).saturating_add(len as u64) > file_len {
            return Err(bad(format!("shard {i} truncated")));
        }
        frames.push((off, len, crc));
        off += 16 + (len as u64).next_multiple_of(16);
    }
    *at = off;
    let mut t = [0u8; 16];
    if off + 16 != file_len {
        return Err(bad("length does not match its trailer"));
    }
    f.read_exact_at(&mut t, off)?;
    if &t[..8] != TRAILER || u64::from_le_bytes(array_at(&t, 8)) != file_len {
        return Err(bad("bad trailer"));
    }
    // Each worker reads its frames into one buffer: a buffer per frame would be mapped and
    // unmapped each time, and unmapping while other threads run interrupts all of them.
    let frame = |i: usize,
                 off: u64,
                 len: usize,
                 crc: u32,
                 bytes: &mut AlignedVec<16>|
     -> Result<(), Unusable> {
        read_into(f, off + 16, len, file_len, bytes)?;
        let bytes = &bytes[..];
        if crc32c::crc32c(bytes) != crc {
            return Err(bad(format!("shard {i} checksum mismatch")));
        }
        let a = rkyv::access::<ArchivedSnapShard, rancor::Error>(bytes)
            .map_err(|e| bad(format!("shard {i} does not validate: {e}")))?;
        on_shard(i, a, &old)
    };
    // The first failing shard (by number), its frame's offset and why.
    let failed: Mutex<Option<(usize, u64, Unusable)>> = Mutex::new(None);
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(frames.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut buf = AlignedVec::<16>::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(off, len, crc)) = frames.get(i) else {
                        break;
                    };
                    // A shard after a failed one is not worth loading.
                    if failed.lock().as_ref().is_some_and(|(j, ..)| *j < i) {
                        break;
                    }
                    if let Err(e) = frame(i, off, len, crc, &mut buf) {
                        let mut g = failed.lock();
                        if g.as_ref().is_none_or(|(j, ..)| i < *j) {
                            *g = Some((i, off, e));
                        }
                    }
                }
            });
        }
    });
    if let Some((_, off, e)) = failed.into_inner() {
        *at = off;
        return Err(e);
    }
    Ok((head, old))
}

/// Fill a fresh shard from its archive, read in place: names are mapped by their text (plain
/// names put back at their own ids where the permanent ones are unchanged, so that records
/// keep their encodings as they are), the state of declarations that changed (or are gone)
/// is dropped, and every record is checked before it is kept.
fn build_shard(
    sh: &mut Shard,
    a: &ArchivedSnapShard,
    old_decls: &HashMap<String, u64>,
    features: &Features,
) -> Result<(), Unusable> {
    let decls = features.decls();
    let names: Vec<&str> = a.names.iter().map(|n| n.as_str()).collect();
    let permanent = sh.names.permanent();
    let same_permanent = names.len() >= permanent
        && (0..permanent).all(|i| sh.names.name(i as u32) == names.get(i).copied());
    // Per archived name id: the new id and whether it is a windowed declaration; `None`: the
    // features of that name are dropped. A declaration unchanged since the snapshot keeps its
    // (permanent) id, a plain name is interned, the rest is dropped.
    let mut map: Vec<Option<(u32, bool)>> = Vec::with_capacity(names.len());
    for (idx, name) in names.iter().enumerate() {
        map.push(match decls.iter().find(|d| d.name == *name) {
            Some(d) if old_decls.get(*name) == Some(&d.fingerprint()) => {
                sh.names.id(name).map(|id| (id, d.window.is_some()))
            }
            Some(_) => None,
            None if old_decls.contains_key(*name) || name.is_empty() => None,
            None => {
                let own = u32::try_from(idx)
                    .ok()
                    .filter(|&id| same_permanent && idx >= permanent && sh.names.place(id, name));
                Some((own.unwrap_or_else(|| sh.names.intern(name)), false))
            }
        });
    }
    let rename = |name: u32| map.get(name as usize).copied().flatten();
    sh.lsn = a.covered.to_native();
    let mut packed: &[u8] = a.packed.as_slice();
    let mut held = a.held.iter();
    let count = a.entities.to_native();
    // Each entity takes at least 3 bytes (a key length, an encoding length and its flags):
    // a count beyond that is damage, not a reason to reserve memory.
    if count > packed.len() as u64 / 3 {
        return Err(bad("more entities than bytes for them"));
    }
    sh.entities.reserve(count as usize);
    // Entities are put in LOOK_AHEAD behind their parsing, which starts loading the index
    // entry each one goes to: the entries are random, a cache miss each, and these overlap
    // instead of following each other (the tables were reserved above, so entries stay put).
    const LOOK_AHEAD: usize = 12;
    let mut ahead: VecDeque<(EntityRef<'_>, &[u8])> = VecDeque::with_capacity(LOOK_AHEAD + 1);
    let mut lines = Lines::new();
    for _ in 0..count {
        let key = take_bytes(&mut packed).ok_or_else(|| bad("an entity is cut short"))?;
        let key = std::str::from_utf8(key).map_err(|_| bad("an entity key is not UTF-8"))?;
        let enc = take_bytes(&mut packed).ok_or_else(|| bad("an entity is cut short"))?;
        let er = EntityRef::new(key);
        sh.entities.prefetch_index(er, &mut lines);
        lines.issue();
        ahead.push_back((er, enc));
        if ahead.len() > LOOK_AHEAD
            && let Some((er, enc)) = ahead.pop_front()
        {
            put_entity(sh, er, enc, &mut held, &rename)?;
        }
    }
    while let Some((er, enc)) = ahead.pop_front() {
        put_entity(sh, er, enc, &mut held, &rename)?;
    }
    if !packed.is_empty() || held.next().is_some() {
        return Err(bad("bytes after the last entity"));
    }
    sh.names.drop_unused();
    sh.recount();
    Ok(())
}

/// Check one entity's record, take its held states, and put it in the shard: as it is if its
/// names keep their ids, decoded and renamed otherwise.
fn put_entity<'a>(
    sh: &mut Shard,
    er: EntityRef<'_>,
    enc: &[u8],
    held: &mut impl Iterator<Item = &'a ArchivedSnapHeld>,
    rename: &impl Fn(u32) -> Option<(u32, bool)>,
) -> Result<(), Unusable> {
    let mut states: SmallVec<[State; 4]> = SmallVec::new();
    let mut as_is = true;
    let mut failed = None;
    check_encoding(enc, |name, is_held| {
        let m = rename(name);
        match m {
            Some((id, _)) => {
                as_is &= id == name;
                sh.names.add_ref(id);
            }
            None => as_is = false,
        }
        if is_held {
            // A dropped feature's state is skipped unread (its declaration, which
            // decides a sketch's shape, is gone or changed).
            match held.next().map(|h| match m {
                Some((_, windowed)) => state_of(h, windowed),
                None => Ok(State::default()),
            }) {
                Some(Ok(st)) => states.push(st),
                Some(Err(e)) => failed = Some(e),
                None => failed = Some(bad("a record's held state is missing")),
            }
        }
    })
    .ok_or_else(|| bad("an entity's record does not decode"))?;
    if let Some(e) = failed {
        return Err(e);
    }
    if as_is {
        sh.entities
            .insert_rec(er, Rec::restored(enc, states.into_iter()));
    } else {
        let e = entity_of(enc, states, |name| rename(name).map(|(id, _)| id));
        sh.entities.insert(er, e);
    }
    Ok(())
}

/// A held state from its archive, checked for shape (`windowed`: of a windowed declaration,
/// which decides a sketch's size).
fn state_of(h: &ArchivedSnapHeld, windowed: bool) -> Result<State, Unusable> {
    Ok(match h {
        ArchivedSnapHeld::Str(v, ts) => State::Plain {
            v: FeatureValue::Str(v.as_str().into()),
            ts: ts.to_native(),
        },
        ArchivedSnapHeld::Win(b) => {
            if b.len() > BUCKETS as usize {
                return Err(bad("a window with more than 60 buckets"));
            }
            State::Win(
                b.iter()
                    .map(|b| Bucket {
                        idx: b.idx.to_native(),
                        n: b.n.to_native(),
                        a: b.a.to_native(),
                    })
                    .collect(),
            )
        }
        ArchivedSnapHeld::Hll(head, regs) => {
            if !hll::valid(regs.as_slice(), windowed) {
                return Err(bad("a distinct sketch of the wrong shape"));
            }
            State::Hll {
                head: head.to_native(),
                regs: regs.as_slice().to_vec(),
            }
        }
    })
}

/// [`build_shard`] with no declarations before or now, for the golden test.
#[cfg(test)]
pub(super) fn build_shard_for_test(
    sh: &mut Shard,
    a: &ArchivedSnapShard,
    features: &Features,
) -> Result<(), Unusable> {
    build_shard(sh, a, &HashMap::new(), features)
}
