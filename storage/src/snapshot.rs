//! Snapshots of the feature tables, and how start-up rebuilds them (SPEC §6, §7 restart).
//!
//! A snapshot is written shard by shard while ingest goes on: the snapshot thread takes one
//! shard's read lock, copies that shard (entities, features, names) and notes the LSN the copy
//! covers, releases the lock and serializes the copy with rkyv. Extra memory is therefore one
//! shard's copy and its archive (about 1/`shards` of the tables), and the writer waits at most
//! for one shard's copy. Shards cover different LSNs: a shard covers `max(its last applied
//! LSN, the LSN every shard had applied when the copy was taken)`, which is exact because only
//! the writer changes a shard, in log order, under its lock.
//!
//! Start-up loads the newest snapshot that validates (checksums, rkyv validation, schema hash,
//! shard count, and covering only records the log still has), replays the log from the
//! smallest covered LSN + 1 and applies to each shard only the records after its own covered
//! LSN. A corrupt, truncated or mismatched snapshot is skipped with a warning naming it; one
//! that covers records past the end of the log (its tail was lost: `fsync: interval`/`never`
//! after a power cut, or `--repair`) is removed, since its state includes writes that are
//! gone. With no usable snapshot the tables are rebuilt from the whole retained log.
//! Declarations whose definition changed since the snapshot (by [`FeatureDecl::fingerprint`])
//! are recomputed from the whole retained log; everything else comes from the snapshot.
//!
//! The two newest snapshots are kept, and retention keeps every record after the older one's
//! smallest covered LSN (`snapshot_floor`), so either can be completed from the log.
//!
//! # File format (`snapshots/snap-<max covered LSN, 20 digits>.vxs`, little-endian)
//! ```text
//! header, 64 bytes
//!   0  [u8; 8]  magic "VXSNAP01"
//!   8  u64      schema hash: xxh3-64 of SCHEMA (the archived types below)
//!   16 u32      shards
//!   20 u32      number of declarations in the meta archive
//!   24 u64      smallest covered LSN of any shard
//!   32 u64      largest covered LSN of any shard
//!   40 i64      created, ms since the Unix epoch
//!   48 u32      meta archive length
//!   52 u32      meta archive CRC-32C
//!   56 u32      reserved (0)
//!   60 u32      CRC-32C of bytes 0..60
//! meta archive (rkyv SnapMeta: the declarations' names and fingerprints), zero-padded to 16
//! per shard 0..shards-1: a frame
//!   u64 length, u32 CRC-32C of the archive, u32 shard, then the rkyv archive of SnapShard,
//!   zero-padded to a multiple of 16 (every archive starts 16-aligned)
//! trailer, 16 bytes: "VXSNEND\0", u64 file length
//! ```

use crate::api::OpenError;
use crate::engine::{Engine, Shared};
use crate::features::{Bucket, Entity, FShard, Feat, FeatureValue, Features, Replay, State};
use crate::record;
use crate::segment::{self, io_err};
use crate::vfs::{OpenMode, VFile, Vfs};
use hashbrown::HashMap;
use rkyv::rancor;
use rkyv::util::AlignedVec;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub const SNAPSHOT_DIR: &str = "snapshots";
const MAGIC: &[u8; 8] = b"VXSNAP01";
const TRAILER: &[u8; 8] = b"VXSNEND\0";
const HEAD_LEN: usize = 64;
/// Describes the archived types; change it with them, so old snapshots are skipped.
const SCHEMA: &str = "vx-snapshot 2: SnapMeta{decls:Vec<(String,u64)>} \
    SnapShard{covered:u64,names:Vec<String>,entities:Vec<SnapEntity{key:String,\
    events:Option<i64>,last_ts:Option<i64>,wm:i64,as_of:i64,\
    feats:Vec<SnapFeat{name:u32,updated_ms:i64,st:SnapState{Int(i64,i64)|Float(f64,i64)|\
    Bool(bool,i64)|Str(String,i64)|Win(Vec<SnapBucket{idx:i64,n:u32,a:f64}>)|Hll(i64,Vec<u8>)}}>}>}";

pub fn schema_hash() -> u64 {
    xxhash_rust::xxh3::xxh3_64(SCHEMA.as_bytes())
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) struct SnapMeta {
    pub decls: Vec<(String, u64)>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) struct SnapShard {
    pub covered: u64,
    pub names: Vec<String>,
    pub entities: Vec<SnapEntity>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) struct SnapEntity {
    pub key: String,
    pub events: Option<i64>,
    pub last_ts: Option<i64>,
    pub wm: i64,
    pub as_of: i64,
    pub feats: Vec<SnapFeat>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) struct SnapFeat {
    pub name: u32,
    pub updated_ms: i64,
    pub st: SnapState,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) enum SnapState {
    Int(i64, i64),
    Float(f64, i64),
    Bool(bool, i64),
    Str(String, i64),
    Win(Vec<SnapBucket>),
    Hll(i64, Vec<u8>),
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub(crate) struct SnapBucket {
    pub idx: i64,
    pub n: u32,
    pub a: f64,
}

/// A snapshot on disk, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapInfo {
    pub path: PathBuf,
    pub covered_min: u64,
    pub covered_max: u64,
    pub created_ms: i64,
    pub bytes: u64,
}

fn snap_path(dir: &Path, covered_max: u64) -> PathBuf {
    dir.join(format!("snap-{covered_max:020}.vxs"))
}

fn copy_shard(g: &FShard, covered: u64) -> SnapShard {
    let names = (0..g.names_len())
        .map(|i| g.names.name(i as u32).to_string())
        .collect();
    let entities = g
        .entities
        .iter()
        .map(|(k, e)| SnapEntity {
            key: k.to_string(),
            events: e.events,
            last_ts: e.last_ts,
            wm: e.wm,
            as_of: e.as_of,
            feats: e
                .feats
                .iter()
                .map(|f| SnapFeat {
                    name: f.name,
                    updated_ms: f.updated_ms,
                    st: match &f.st {
                        State::Plain { v, ts } => match v {
                            FeatureValue::Int(i) => SnapState::Int(*i, *ts),
                            FeatureValue::Float(x) => SnapState::Float(*x, *ts),
                            FeatureValue::Bool(b) => SnapState::Bool(*b, *ts),
                            FeatureValue::Str(s) => SnapState::Str(s.to_string(), *ts),
                        },
                        State::Win(b) => SnapState::Win(
                            b.iter()
                                .map(|b| SnapBucket {
                                    idx: b.idx,
                                    n: b.n,
                                    a: b.a,
                                })
                                .collect(),
                        ),
                        State::Hll { head, regs } => SnapState::Hll(*head, regs.to_vec()),
                    },
                })
                .collect(),
        })
        .collect();
    SnapShard {
        covered,
        names,
        entities,
    }
}

fn pad16(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(16) {
        buf.push(0);
    }
}

/// Write a snapshot of `features` into `dir` (durably: temp file, fsync, rename, dir fsync).
pub(crate) fn write(
    vfs: &dyn Vfs,
    dir: &Path,
    features: &Features,
    now_ms: i64,
) -> io::Result<SnapInfo> {
    vfs.create_dir_all(dir)?;
    let tmp = dir.join("snap.vxs.tmp");
    if vfs.exists(&tmp)? {
        vfs.remove(&tmp)?;
    }
    let f = vfs.open(&tmp, OpenMode::CreateNew)?;
    let meta = SnapMeta {
        decls: features
            .decls()
            .iter()
            .map(|d| (d.name.clone(), d.fingerprint()))
            .collect(),
    };
    let meta_bytes = rkyv::to_bytes::<rancor::Error>(&meta).map_err(io::Error::other)?;
    let mut off = HEAD_LEN as u64;
    let mut chunk: Vec<u8> = Vec::with_capacity(meta_bytes.len() + 16);
    chunk.extend_from_slice(&meta_bytes);
    pad16(&mut chunk);
    f.write_all_at(&chunk, off)?;
    off += chunk.len() as u64;
    let (mut cmin, mut cmax) = (u64::MAX, 0u64);
    for (i, lock) in features.shards.iter().enumerate() {
        let copy = {
            let g = lock.read();
            let applied = features.applied.load(Ordering::Acquire);
            copy_shard(&g, g.lsn.max(applied))
        };
        cmin = cmin.min(copy.covered);
        cmax = cmax.max(copy.covered);
        let bytes = rkyv::to_bytes::<rancor::Error>(&copy).map_err(io::Error::other)?;
        drop(copy);
        chunk.clear();
        chunk.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        chunk.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        chunk.extend_from_slice(&(i as u32).to_le_bytes());
        chunk.extend_from_slice(&bytes);
        pad16(&mut chunk);
        f.write_all_at(&chunk, off)?;
        off += chunk.len() as u64;
    }
    if cmin == u64::MAX {
        cmin = 0;
    }
    let mut trailer = Vec::with_capacity(16);
    trailer.extend_from_slice(TRAILER);
    trailer.extend_from_slice(&(off + 16).to_le_bytes());
    f.write_all_at(&trailer, off)?;
    off += 16;
    let mut head = Vec::with_capacity(HEAD_LEN);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&schema_hash().to_le_bytes());
    head.extend_from_slice(&features.shards().to_le_bytes());
    head.extend_from_slice(&(meta.decls.len() as u32).to_le_bytes());
    head.extend_from_slice(&cmin.to_le_bytes());
    head.extend_from_slice(&cmax.to_le_bytes());
    head.extend_from_slice(&now_ms.to_le_bytes());
    head.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    head.extend_from_slice(&crc32c::crc32c(&meta_bytes).to_le_bytes());
    head.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&head);
    head.extend_from_slice(&crc.to_le_bytes());
    f.write_all_at(&head, 0)?;
    f.sync_data()?;
    drop(f);
    let to = snap_path(dir, cmax);
    vfs.rename(&tmp, &to)?;
    vfs.sync_dir(dir)?;
    Ok(SnapInfo {
        path: to,
        covered_min: cmin,
        covered_max: cmax,
        created_ms: now_ms,
        bytes: off,
    })
}

/// Why a snapshot cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unusable {
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

fn read_head(f: &dyn VFile) -> Result<Head, Unusable> {
    let mut h = [0u8; HEAD_LEN];
    f.read_exact_at(&mut h, 0)
        .map_err(|_| bad("shorter than its header"))?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(a)
    };
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
        created_ms: i64::from_le_bytes(h[40..48].try_into().unwrap_or([0; 8])),
        meta_len: u32_at(48) as usize,
        meta_crc: u32_at(52),
    })
}

/// Read `len` bytes at `off` into a 16-aligned buffer (rkyv validation needs alignment).
fn read_aligned(
    f: &dyn VFile,
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

/// A snapshot loaded into fresh shard tables, not yet installed.
struct Loaded {
    shards: Vec<FShard>,
    covered: Vec<u64>,
    redo: Vec<bool>,
    entities: u64,
}

fn load(f: &dyn VFile, features: &Features) -> Result<(Head, Loaded), Unusable> {
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
    Ok((
        head,
        Loaded {
            shards,
            covered,
            redo,
            entities,
        },
    ))
}

/// Check a snapshot as start-up would load it (every checksum, the rkyv validation of every
/// archive, the schema hash, the shard count, each shard's contents), one shard in memory at a
/// time, without keeping it. On failure, the offset of the part that failed.
pub fn verify(f: &dyn VFile, shards: u32) -> Result<SnapInfoOf, (u64, String)> {
    let features = Features::new(shards, Vec::new(), u64::MAX);
    let mut at = 0u64;
    let mut entities = 0u64;
    let (head, _) = walk(f, shards, &mut at, &mut |a, old| {
        let mut sh = features.empty_shard();
        build_shard(&mut sh, a, old, &features)?;
        entities += sh.entities.len() as u64;
        Ok(())
    })
    .map_err(|e| (at, e.to_string()))?;
    Ok(SnapInfoOf {
        covered_min: head.covered_min,
        covered_max: head.covered_max,
        entities,
    })
}

/// What [`verify`] found in a valid snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapInfoOf {
    pub covered_min: u64,
    pub covered_max: u64,
    pub entities: u64,
}

/// Read a snapshot part by part in file order (header, meta archive, each shard's frame,
/// trailer), checking each, and hand the validated shard archives over with the declarations
/// the snapshot was made with (name → fingerprint), which it also returns. `at` is kept at the
/// offset of the part being read, so that a failure can name it.
type OldDecls = HashMap<String, u64>;

fn walk(
    f: &dyn VFile,
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
        let len = u64::from_le_bytes(fh[..8].try_into().unwrap_or([0; 8]));
        let crc = u32::from_le_bytes(fh[8..12].try_into().unwrap_or([0; 4]));
        let shard = u32::from_le_bytes(fh[12..16].try_into().unwrap_or([0; 4]));
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
    if &t[..8] != TRAILER || u64::from_le_bytes(t[8..].try_into().unwrap_or([0; 8])) != file_len {
        return Err(bad("bad trailer"));
    }
    Ok((head, old))
}

/// Fill a fresh shard from its archive, read in place: names are mapped by their text, and
/// the state of declarations that changed (or are gone) is dropped.
fn build_shard(
    sh: &mut FShard,
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
        let mut feats = crate::features::Feats::with_capacity(e.feats.len());
        for f in e.feats.iter() {
            let idx = f.name.to_native() as usize;
            let (id, windowed) = match slots.get(idx) {
                Some(Slot::Declared { id, windowed }) => (*id, *windowed),
                Some(Slot::Plain) => (
                    sh.names_acquire(names.get(idx).copied().unwrap_or("")),
                    false,
                ),
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
                    if b.len() > crate::features::BUCKETS as usize {
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
                    if !crate::features::hll_valid(regs.as_slice(), windowed) {
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
            Entity {
                events: e.events.as_ref().map(|v| v.to_native()),
                last_ts: e.last_ts.as_ref().map(|v| v.to_native()),
                feats,
                wm: e.wm.to_native(),
                as_of: e.as_of.to_native(),
            },
        );
    }
    Ok(())
}

/// The snapshots in `dir`, newest (largest covered LSN) first, by name.
pub(crate) fn list(vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let names = match vfs.list(dir) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<(u64, PathBuf)> = names
        .into_iter()
        .filter_map(|n| {
            let lsn = n
                .strip_prefix("snap-")?
                .strip_suffix(".vxs")?
                .parse()
                .ok()?;
            Some((lsn, dir.join(n)))
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.0));
    Ok(out)
}

/// What bootstrap did with the feature tables.
#[derive(Clone, Debug, Default)]
pub struct FeatureBoot {
    /// The snapshot loaded, if any.
    pub snapshot: Option<PathBuf>,
    /// Snapshots skipped (with why).
    pub skipped: Vec<(PathBuf, String)>,
    pub entities: u64,
    /// Records of the log replayed into the tables.
    pub replayed_records: u64,
    /// Declarations recomputed from the whole retained log.
    pub recomputed: Vec<String>,
    pub took: Duration,
}

/// Rebuild the feature tables at start-up: the newest usable snapshot, then the log after it.
pub(crate) fn bootstrap(engine: &Engine) -> Result<(FeatureBoot, Vec<SnapInfo>), OpenError> {
    let started = Instant::now();
    let shared = &engine.shared;
    let features = &shared.features;
    let vfs = &*engine.vfs;
    let dir = engine.dir.root.join(SNAPSHOT_DIR);
    let last_lsn = engine.next_lsn.saturating_sub(1);
    let segs = shared.segments.all();
    let first_lsn = segs.first().map_or(1, |s| s.first_lsn);
    let mut boot = FeatureBoot::default();
    let mut kept: Vec<SnapInfo> = Vec::new();
    let mut chosen: Option<Loaded> = None;
    let listed = list(vfs, &dir).map_err(io_err(format!("listing {}", dir.display())))?;
    for (_, path) in listed {
        let attempt = (|| -> Result<(Head, Loaded), Unusable> {
            let f = vfs.open(&path, OpenMode::Read)?;
            load(&*f, features)
        })();
        match attempt {
            Ok((head, loaded)) => {
                if head.covered_max > last_lsn {
                    let why = format!(
                        "it covers the log up to LSN {}, but the log ends at {last_lsn} (its tail was lost); removing it",
                        head.covered_max
                    );
                    tracing::warn!(snapshot = %path.display(), "skipping snapshot: {why}");
                    let _ = vfs.remove(&path);
                    boot.skipped.push((path, why));
                    continue;
                }
                let info = SnapInfo {
                    path: path.clone(),
                    covered_min: head.covered_min,
                    covered_max: head.covered_max,
                    created_ms: head.created_ms,
                    bytes: vfs
                        .open(&path, OpenMode::Read)
                        .and_then(|f| f.len())
                        .unwrap_or(0),
                };
                if chosen.is_some() {
                    kept.push(info);
                    continue;
                }
                if head.covered_min + 1 < first_lsn {
                    let why = format!(
                        "the log it needs from LSN {} was retained away (the log starts at {first_lsn})",
                        head.covered_min + 1
                    );
                    tracing::warn!(snapshot = %path.display(), "skipping snapshot: {why}");
                    boot.skipped.push((path, why));
                    continue;
                }
                boot.snapshot = Some(path);
                boot.entities = loaded.entities;
                kept.push(info);
                chosen = Some(loaded);
            }
            Err(e) => {
                tracing::warn!(snapshot = %path.display(), error = %e, "skipping snapshot");
                boot.skipped.push((path, e.to_string()));
            }
        }
    }
    let shards = features.shards() as usize;
    let (covered, redo) = match chosen {
        Some(l) => {
            features.install(l.shards, l.entities);
            (l.covered, l.redo)
        }
        None => {
            if first_lsn > 1 {
                tracing::warn!(
                    first_lsn,
                    "no usable snapshot: the feature tables are rebuilt from the retained log only, without what retention removed"
                );
            }
            (vec![0; shards], vec![false; features.decls().len()])
        }
    };
    boot.recomputed = features
        .decls()
        .iter()
        .zip(&redo)
        .filter(|(_, r)| **r)
        .map(|(d, _)| d.name.clone())
        .collect();
    let any_redo = redo.iter().any(|&r| r) && boot.snapshot.is_some();
    let start = if any_redo {
        first_lsn
    } else {
        covered.iter().copied().min().unwrap_or(0) + 1
    };
    let replay = Replay {
        covered: &covered,
        redo: &redo,
    };
    let mut n = 0u64;
    for (i, seg) in segs.iter().enumerate() {
        let end = segs.get(i + 1).map_or(u64::MAX, |s| s.first_lsn - 1);
        if end < start || seg.log_len == 0 {
            continue;
        }
        let path = segment::segment_path(&engine.log_dir, seg.first_lsn);
        let file = shared
            .segments
            .log_file(seg.first_lsn)
            .map_err(io_err(format!("opening {}", path.display())))?;
        let mut failed: Option<OpenError> = None;
        crate::recovery::read_records(&*file, &path, seg.log_len, &mut |off, item| {
            let crate::recovery::Walk::Record(h, rec) = item else {
                failed = Some(corrupt(&path, off, "bad record header"));
                return false;
            };
            if h.lsn < start {
                return true;
            }
            if !record::crc_ok(&h, rec) {
                failed = Some(corrupt(&path, off, "record checksum mismatch"));
                return false;
            }
            if let Err(e) = features.apply(rec, &h, Some(&replay)) {
                failed = Some(corrupt(&path, off, &format!("{e:?}")));
                return false;
            }
            n += 1;
            true
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    features.applied.store(last_lsn, Ordering::Release);
    boot.replayed_records = n;
    boot.entities = features.stats().entities;
    boot.took = started.elapsed();
    kept.sort_by_key(|s| std::cmp::Reverse(s.covered_max));
    Ok((boot, kept))
}

fn corrupt(path: &Path, off: u64, why: &str) -> OpenError {
    OpenError::Corrupt {
        file: path.to_path_buf(),
        offset: off,
        reason: why.to_string(),
        loses: "this record and everything after it".into(),
    }
}

/// What the snapshot thread is asked to do.
pub(crate) enum SnapMsg {
    /// Take a snapshot now; the reply carries its outcome.
    Now(std::sync::mpsc::Sender<io::Result<SnapInfo>>),
    /// Take a last snapshot and stop.
    Stop,
}

/// Snapshot bookkeeping the store reports (metrics).
#[derive(Default)]
pub(crate) struct SnapStatus {
    pub last_created_ms: std::sync::atomic::AtomicI64,
    pub written: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
    pub last_bytes: std::sync::atomic::AtomicU64,
}

/// The snapshot thread: every `interval`, on request (retention asks when it waits), and at
/// stop. Keeps the two newest snapshots and publishes the retention floor.
pub(crate) fn run(
    shared: Arc<Shared>,
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    interval: Duration,
    mut kept: Vec<SnapInfo>,
    status: Arc<SnapStatus>,
    rx: flume::Receiver<SnapMsg>,
) {
    publish_floor(&shared, &kept);
    let mut last = Instant::now();
    loop {
        let msg = rx.recv_timeout(
            interval
                .saturating_sub(last.elapsed())
                .max(Duration::from_millis(1)),
        );
        let (reply, stop) = match msg {
            Ok(SnapMsg::Now(r)) => (Some(r), false),
            Ok(SnapMsg::Stop) | Err(flume::RecvTimeoutError::Disconnected) => (None, true),
            Err(flume::RecvTimeoutError::Timeout) => {
                if last.elapsed() < interval {
                    continue;
                }
                (None, false)
            }
        };
        last = Instant::now();
        let res = write(&*vfs, &dir, &shared.features, crate::writer::now_ms());
        match &res {
            Ok(info) => {
                status.written.fetch_add(1, Ordering::Relaxed);
                status
                    .last_created_ms
                    .store(info.created_ms, Ordering::Relaxed);
                status.last_bytes.store(info.bytes, Ordering::Relaxed);
                tracing::info!(
                    snapshot = %info.path.display(),
                    bytes = info.bytes,
                    covered_min = info.covered_min,
                    covered_max = info.covered_max,
                    took_ms = u64::try_from(last.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "snapshot written"
                );
                kept.retain(|k| k.path != info.path);
                kept.insert(0, info.clone());
                for old in kept.drain(2.min(kept.len())..) {
                    if let Err(e) = vfs.remove(&old.path) {
                        tracing::warn!(snapshot = %old.path.display(), error = %e, "cannot remove an old snapshot");
                    }
                }
                let _ = vfs.sync_dir(&dir);
                publish_floor(&shared, &kept);
            }
            Err(e) => {
                status.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "cannot write a snapshot; retrying at the next interval");
            }
        }
        if let Some(r) = reply {
            let _ = r.send(res);
        }
        if stop {
            break;
        }
    }
}

fn publish_floor(shared: &Shared, kept: &[SnapInfo]) {
    let floor = kept.iter().map(|k| k.covered_min).min().unwrap_or(0);
    shared.snapshot_floor.store(floor, Ordering::Release);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The archive of a small shard, byte for byte: any change to the archived types (or to
    /// rkyv's format) changes it, and must come with a new SCHEMA.
    #[test]
    fn golden_archive() {
        let shard = SnapShard {
            covered: 42,
            names: vec!["events".into(), "last_ts".into(), "hp".into()],
            entities: vec![SnapEntity {
                key: "p1".into(),
                events: Some(3),
                last_ts: None,
                wm: 1000,
                as_of: 1000,
                feats: vec![
                    SnapFeat {
                        name: 0,
                        updated_ms: 5,
                        st: SnapState::Int(3, 1000),
                    },
                    SnapFeat {
                        name: 2,
                        updated_ms: 5,
                        st: SnapState::Win(vec![SnapBucket {
                            idx: 7,
                            n: 2,
                            a: 1.5,
                        }]),
                    },
                ],
            }],
        };
        let bytes = rkyv::to_bytes::<rancor::Error>(&shard).unwrap();
        let a = rkyv::access::<ArchivedSnapShard, rancor::Error>(&bytes).unwrap();
        assert_eq!(a.covered.to_native(), 42);
        assert_eq!(a.entities[0].key.as_str(), "p1");
        assert_eq!(
            (bytes.len(), xxhash_rust::xxh3::xxh3_64(&bytes)),
            (GOLDEN_LEN, GOLDEN_HASH),
            "the snapshot archive layout changed: bump SCHEMA"
        );
        assert_eq!(schema_hash(), xxhash_rust::xxh3::xxh3_64(SCHEMA.as_bytes()));
    }

    /// Tables with every kind of state: plain values of each type, windows, both sketches.
    fn sample_tables() -> Features {
        use crate::features::{Agg, DistinctOf, FeatureDecl};
        use crate::record::{RecordBuilder, RecordType};
        let decl = |name: &str, agg, window: Option<u64>| FeatureDecl {
            name: name.into(),
            from: "hit".into(),
            agg,
            window: window.map(Duration::from_secs),
            ttl: None,
            of: DistinctOf::Stream,
        };
        let mut decls = vec![
            decl("n", Agg::Count, Some(60)),
            decl("s", Agg::Sum, None),
            decl("l", Agg::Last, Some(600)),
        ];
        decls.push(FeatureDecl {
            of: DistinctOf::Stream,
            ..decl("d", Agg::Distinct, Some(3600))
        });
        decls.push(FeatureDecl {
            of: DistinctOf::Value,
            ..decl("da", Agg::Distinct, None)
        });
        let f = Features::new(4, decls, u64::MAX);
        let mut lsn = 1;
        for i in 0..40i64 {
            let entity = format!("entity-{i}-{}", "x".repeat((i % 30) as usize));
            let mut buf = Vec::new();
            let mut rb = RecordBuilder::begin(&mut buf, RecordType::Events, lsn, 10_000);
            rb.begin_run(&mut buf, &format!("s{}", i % 3), 1, 3);
            for k in 0..3 {
                let ev = vx_proto::EventView {
                    stream: "s",
                    entity: Some(&entity),
                    ty: "hit",
                    ts: 1_000 * k,
                    kind: vx_proto::Kind::Counter,
                    value: Some(vx_proto::Num::Int(i + k)),
                    id: None,
                    data: None,
                };
                vx_proto::packed::encode_event(&mut buf, &ev).unwrap();
            }
            rb.end_run(&mut buf).unwrap();
            rb.finish(&mut buf).unwrap();
            let h = record::parse_header(&buf).unwrap();
            f.apply(&buf, &h, None).unwrap();
            lsn += 1;
            let mut buf = Vec::new();
            let mut rb = RecordBuilder::begin(&mut buf, RecordType::FeaturePut, lsn, 10_000);
            let set = vec![
                (
                    "str".to_string(),
                    Some(FeatureValue::Str("v".repeat(i as usize).into())),
                ),
                ("f".to_string(), Some(FeatureValue::Float(i as f64 / 3.0))),
                ("b".to_string(), Some(FeatureValue::Bool(i % 2 == 0))),
            ];
            rb.feature_put(&mut buf, &entity, &set);
            rb.finish(&mut buf).unwrap();
            let h = record::parse_header(&buf).unwrap();
            f.apply(&buf, &h, None).unwrap();
            lsn += 1;
        }
        f
    }

    fn dump(f: &Features) -> Vec<String> {
        (0..40)
            .map(|i| {
                let entity = format!("entity-{i}-{}", "x".repeat(i % 30));
                let mut out = Vec::new();
                f.write_json(
                    &entity,
                    None,
                    crate::features::ReadAt { now_ms: 0 },
                    true,
                    &mut out,
                );
                String::from_utf8(out).unwrap()
            })
            .collect()
    }

    /// A snapshot written and loaded gives the same tables; any damage to its bytes (a flipped
    /// byte, a truncation, bytes appended) is refused or, at worst, loads something valid,
    /// and never panics.
    #[test]
    fn round_trip_and_damage_is_refused_without_panic() {
        use crate::sim::SimFs;
        let fs = SimFs::new();
        let dir = Path::new("/snaps");
        let f = sample_tables();
        let info = write(&fs, dir, &f, 5).unwrap();
        let file = fs.open(&info.path, OpenMode::Read).unwrap();
        let bytes = file.read_all().unwrap();
        let fresh = sample_tables_empty();
        let (head, loaded) = load(&*file, &fresh).unwrap();
        assert_eq!(head.covered_max, 80);
        fresh.install(loaded.shards, loaded.entities);
        assert_eq!(dump(&fresh), dump(&f));

        let mut rng = 0x5EED_u64;
        let mut next = |n: usize| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((rng >> 33) as usize) % n.max(1)
        };
        let mut refused = 0;
        for case in 0..600 {
            let mut b = bytes.clone();
            match case % 3 {
                0 => {
                    let at = next(b.len());
                    b[at] ^= 1 << next(8);
                }
                1 => b.truncate(next(b.len())),
                _ => b.extend((0..1 + next(64)).map(|_| next(256) as u8)),
            }
            let p = dir.join(format!("bad-{case}.vxs"));
            let w = fs.open(&p, OpenMode::CreateNew).unwrap();
            w.write_all_at(&b, 0).unwrap();
            if load(&*w, &sample_tables_empty()).is_err() {
                refused += 1;
            }
        }
        assert!(
            refused > 590,
            "only {refused} of 600 damaged snapshots refused"
        );
    }

    fn sample_tables_empty() -> Features {
        let f = sample_tables();
        Features::new(4, f.decls().to_vec(), u64::MAX)
    }

    const GOLDEN_LEN: usize = 216;
    const GOLDEN_HASH: u64 = 4383645820110679822;
}
