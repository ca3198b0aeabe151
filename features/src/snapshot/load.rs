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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{SnapFile, write_to};
    use super::*;
    use crate::decl::{Agg, DistinctOf, FeatureDecl};
    use crate::{LogPos, ReadAt, Reading};
    use parking_lot::Mutex;
    use std::time::Duration;

    /// A file in memory.
    #[derive(Default)]
    struct MemFile(Mutex<Vec<u8>>);

    impl SnapFile for MemFile {
        fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
            let b = self.0.lock();
            let src = usize::try_from(off)
                .ok()
                .and_then(|o| b.get(o..o + buf.len()))
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
            let mut b = self.0.lock();
            let off = off as usize;
            if b.len() < off + buf.len() {
                b.resize(off + buf.len(), 0);
            }
            b[off..off + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.0.lock().len() as u64)
        }
    }

    fn sample_decls() -> Vec<FeatureDecl> {
        let decl = |name: &str, agg, window: Option<u64>, of| FeatureDecl {
            name: name.into(),
            from: "hit".into(),
            agg,
            window: window.map(Duration::from_secs),
            ttl: None,
            of,
        };
        vec![
            decl("n", Agg::Count, Some(60), DistinctOf::Stream),
            decl("s", Agg::Sum, None, DistinctOf::Stream),
            decl("l", Agg::Last, Some(600), DistinctOf::Stream),
            decl("d", Agg::Distinct, Some(3600), DistinctOf::Stream),
            decl("da", Agg::Distinct, None, DistinctOf::Value),
        ]
    }

    /// Tables with every kind of state: plain values of each type, windows, both sketches.
    fn sample_tables() -> Features {
        let f = Features::new(4, sample_decls(), u64::MAX);
        let mut lsn = 1;
        for i in 0..40i64 {
            let entity = format!("entity-{i}-{}", "x".repeat((i % 30) as usize));
            let stream = format!("s{}", i % 3);
            let at = LogPos {
                lsn,
                append_ms: 10_000,
            };
            let mut events = f.events(at, None).unwrap();
            for k in 0..3 {
                let ev = vx_proto::EventView {
                    stream: &stream,
                    entity: Some(&entity),
                    ty: "hit",
                    ts: 1_000 * k,
                    kind: vx_proto::Kind::Counter,
                    value: Some(vx_proto::Num::Int(i + k)),
                    id: None,
                    data: None,
                };
                events.apply(&ev).unwrap();
            }
            lsn += 1;
            let s = "v".repeat(i as usize);
            let set = [
                ("str", Some(FeatureValue::Str(s.into()))),
                ("f", Some(FeatureValue::Float(i as f64 / 3.0))),
                ("b", Some(FeatureValue::Bool(i % 2 == 0))),
            ];
            let at = LogPos {
                lsn,
                append_ms: 10_000,
            };
            f.put(at, &entity, &set, None).unwrap();
            lsn += 1;
        }
        f
    }

    fn dump(f: &Features) -> Vec<String> {
        (0..40)
            .map(|i| {
                let entity = format!("entity-{i}-{}", "x".repeat(i % 30));
                let mut out = String::new();
                let read = f.read(&entity, None, ReadAt { now_ms: 0 }, &mut |name, v| {
                    let v = match v {
                        Reading::Value(v) => format!("{v:?}"),
                        Reading::Int(i) => i.to_string(),
                        Reading::Num(x) => x.to_string(),
                    };
                    out.push_str(&format!("{name}={v};"));
                });
                format!("{out} {read:?}")
            })
            .collect()
    }

    /// A snapshot written and loaded gives the same tables; any damage to its bytes (a flipped
    /// byte, a truncation, bytes appended) is refused or, at worst, loads something valid,
    /// and never panics.
    #[test]
    fn round_trip_and_damage_is_refused_without_panic() {
        let f = sample_tables();
        let file = MemFile::default();
        let written = write_to(&f, &file, 5).unwrap();
        assert_eq!(written.covered_max, 80);
        let bytes = file.0.lock().clone();
        assert_eq!(written.bytes, bytes.len() as u64);
        let fresh = Features::new(4, sample_decls(), u64::MAX);
        let loaded = load(&file, &fresh).unwrap();
        assert_eq!((loaded.covered_max, loaded.created_ms), (80, 5));
        let from = fresh.install(loaded);
        assert_eq!(from.redo, [false; 5]);
        assert_eq!(dump(&fresh), dump(&f));
        assert!(verify(&file, 4).is_ok());
        assert!(matches!(verify(&file, 3), Err(VerifyError { at: 0, .. })));

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
            let damaged = MemFile(Mutex::new(b));
            if load(&damaged, &Features::new(4, sample_decls(), u64::MAX)).is_err() {
                refused += 1;
            }
        }
        assert!(
            refused > 590,
            "only {refused} of 600 damaged snapshots refused"
        );
    }

    /// A changed declaration is dropped from the snapshot's state and recomputed.
    #[test]
    fn changed_declarations_are_redone() {
        let f = sample_tables();
        let file = MemFile::default();
        write_to(&f, &file, 5).unwrap();
        let mut decls = sample_decls();
        decls[1].agg = Agg::Max;
        let fresh = Features::new(4, decls, u64::MAX);
        let from = fresh.install(load(&file, &fresh).unwrap());
        assert_eq!(from.redo, [false, true, false, false, false]);
        assert!(!fresh.exists("entity-1-x", Some("s")));
        assert!(fresh.exists("entity-1-x", Some("n")));
    }
}
