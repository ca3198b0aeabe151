//! Loading and checking a snapshot: every checksum, the rkyv validation of every archive
//! (read in place, 16-aligned), the schema hash and the shard count, then each shard's
//! contents rebuilt into fresh tables (names mapped by their text, the state of changed
//! declarations dropped, windows and sketches checked for shape).

use super::{
    ArchivedSnapMeta, ArchivedSnapShard, ArchivedSnapState, HEAD_LEN, MAGIC, SnapFile, TRAILER,
    schema_hash,
};
use crate::Features;
use crate::decl::{BUCKETS, FeatureValue};
use crate::table::{Bucket, Entity, Feat, Feats, Shard, State};
use crate::{Replay, hll};
use hashbrown::HashMap;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use std::io;

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
    if off.saturating_add(len as u64) > file_len {
        return Err(bad("truncated"));
    }
    let mut v = AlignedVec::<16>::with_capacity(len);
    v.resize(len, 0);
    f.read_exact_at(&mut v, off)?;
    Ok(v)
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
    let mut shards = Vec::with_capacity(features.shards() as usize);
    let mut covered = Vec::with_capacity(features.shards() as usize);
    let mut entities = 0u64;
    let (head, old) = walk(f, features.shards(), &mut 0, &mut |a, old| {
        let mut sh = features.empty_shard();
        build_shard(&mut sh, a, old, features)?;
        entities += sh.entities.len() as u64;
        covered.push(a.covered.to_native());
        shards.push(sh);
        Ok(())
    })?;
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
    let mut entities = 0u64;
    let (head, _) = walk(f, shards, &mut at, &mut |a, old| {
        let mut sh = features.empty_shard();
        build_shard(&mut sh, a, old, &features)?;
        entities += sh.entities.len() as u64;
        Ok(())
    })
    .map_err(|reason| VerifyError { at, reason })?;
    Ok(Verified {
        covered_min: head.covered_min,
        covered_max: head.covered_max,
        entities,
    })
}

/// Read a snapshot part by part in file order (header, meta archive, each shard's frame,
/// trailer), checking each, and hand the validated shard archives over with the declarations
/// the snapshot was made with (name → fingerprint), which it also returns. `at` is kept at the
/// offset of the part being read, so that a failure can name it.
type OldDecls = HashMap<String, u64>;

fn walk(
    f: &dyn SnapFile,
    shards: u32,
    at: &mut u64,
    on_shard: &mut dyn FnMut(&ArchivedSnapShard, &OldDecls) -> Result<(), Unusable>,
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
        let bytes = read_aligned(f, off + 16, len, file_len)?;
        if crc32c::crc32c(&bytes) != crc {
            return Err(bad(format!("shard {i} checksum mismatch")));
        }
        let a = rkyv::access::<ArchivedSnapShard, rancor::Error>(&bytes)
            .map_err(|e| bad(format!("shard {i} does not validate: {e}")))?;
        on_shard(a, &old)?;
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
    Ok((head, old))
}

/// Fill a fresh shard from its archive, read in place: names are mapped by their text, and
/// the state of declarations that changed (or are gone) is dropped.
fn build_shard(
    sh: &mut Shard,
    a: &ArchivedSnapShard,
    old_decls: &HashMap<String, u64>,
    features: &Features,
) -> Result<(), Unusable> {
    let decls = features.decls();
    let names: Vec<&str> = a.names.iter().map(|n| n.as_str()).collect();
    // Per archived name id: the new id (None: dropped).
    // What becomes of each archived name: a declaration unchanged since the snapshot keeps
    // its (permanent) id, a plain name is interned per feature, the rest is dropped.
    #[derive(Clone, Copy)]
    enum Slot {
        Drop,
        Declared { id: u32, windowed: bool },
        Plain,
    }
    let slots: Vec<Slot> = names
        .iter()
        .map(|name| match decls.iter().find(|d| d.name == *name) {
            Some(d) if old_decls.get(*name) == Some(&d.fingerprint()) => match sh.names.id(name) {
                Some(id) => Slot::Declared {
                    id,
                    windowed: d.window.is_some(),
                },
                None => Slot::Drop,
            },
            Some(_) => Slot::Drop,
            None if old_decls.contains_key(*name) => Slot::Drop,
            None => Slot::Plain,
        })
        .collect();
    sh.lsn = a.covered.to_native();
    sh.entities.reserve(a.entities.len());
    for e in a.entities.iter() {
        let mut feats = Feats::with_capacity(e.feats.len());
        for f in e.feats.iter() {
            let idx = f.name.to_native() as usize;
            let (id, windowed) = match slots.get(idx) {
                Some(Slot::Declared { id, windowed }) => (*id, *windowed),
                Some(Slot::Plain) => match names.get(idx) {
                    Some(name) => (sh.names_acquire(name), false),
                    None => continue,
                },
                Some(Slot::Drop) | None => continue,
            };
            let st = match &f.st {
                ArchivedSnapState::Int(v, ts) => State::Plain {
                    v: FeatureValue::Int(v.to_native()),
                    ts: ts.to_native(),
                },
                ArchivedSnapState::Float(v, ts) => State::Plain {
                    v: FeatureValue::Float(v.to_native()),
                    ts: ts.to_native(),
                },
                ArchivedSnapState::Bool(v, ts) => State::Plain {
                    v: FeatureValue::Bool(*v),
                    ts: ts.to_native(),
                },
                ArchivedSnapState::Str(v, ts) => State::Plain {
                    v: FeatureValue::Str(v.as_str().into()),
                    ts: ts.to_native(),
                },
                ArchivedSnapState::Win(b) => {
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
                ArchivedSnapState::Hll(head, regs) => {
                    if !hll::valid(regs.as_slice(), windowed) {
                        return Err(bad("a distinct sketch of the wrong shape"));
                    }
                    State::Hll {
                        head: head.to_native(),
                        regs: regs.as_slice().to_vec(),
                    }
                }
            };
            feats.push(Feat {
                name: id,
                updated_ms: f.updated_ms.to_native(),
                st,
            });
        }
        sh.insert_entity(
            e.key.as_str(),
            Entity::restored(
                e.events.as_ref().map(|v| v.to_native()),
                e.last_ts.as_ref().map(|v| v.to_native()),
                feats,
                e.wm.to_native(),
                e.as_of.to_native(),
            ),
        );
    }
    sh.recount();
    Ok(())
}
