//! Snapshots of the feature tables: the file format, writing one ([`write_to`]), loading and
//! checking one ([`load`], [`verify`]) (docs/API.md §6, §7 restart). Where the files live, the
//! thread that takes them and the log replay after a load are the storage engine's
//! (vx-storage `snapshot.rs`); it hands this module a [`SnapFile`] to read or write.
//!
//! A snapshot is written shard by shard while ingest goes on: the snapshot thread takes one
//! shard's read lock, copies that shard (entities, features, names) and notes the LSN the copy
//! covers, releases the lock and serializes the copy with rkyv. Extra memory is therefore one
//! shard's copy and its archive (about 1/`shards` of the tables), and the writer waits at most
//! for one shard's copy. Shards cover different LSNs: a shard covers `max(its last applied
//! LSN, the LSN every shard had applied when the copy was taken)`, which is exact because only
//! the writer changes a shard, in log order, under its lock.
//!
//! Start-up (in the storage engine) loads the newest snapshot that validates (checksums, rkyv
//! validation, schema hash, shard count, and covering only records the log still has), replays
//! the log from the smallest covered LSN + 1 and applies to each shard only the records after
//! its own covered LSN. A corrupt, truncated or mismatched snapshot is skipped with a warning naming it; one
//! that covers records past the end of the log (its tail was lost: `fsync: interval`/`never`
//! after a power cut, or `--repair`) is removed, since its state includes writes that are
//! gone. With no usable snapshot the tables are rebuilt from the whole retained log.
//! Declarations whose definition changed since the snapshot (by
//! [`crate::FeatureDecl::fingerprint`])
//! are recomputed from the whole retained log; everything else comes from the snapshot.
//!
//! The two newest snapshots are kept, and retention keeps every record after the older one's
//! smallest covered LSN (`snapshot_floor`), so either can be completed from the log.
//!
//! The archived types below are the on-disk format: they are not the tables' types, so the
//! tables can change shape (issue 19) while old snapshots still load, or are skipped by their
//! schema hash when the format itself changes.
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

use std::io;

mod load;
#[cfg(test)]
mod tests;
mod write;

pub use load::{Loaded, ReplayFrom, Unusable, Verified, VerifyError, load, verify};
pub use write::{Written, write_to};

pub(crate) const MAGIC: &[u8; 8] = b"VXSNAP01";
pub(crate) const TRAILER: &[u8; 8] = b"VXSNEND\0";
pub(crate) const HEAD_LEN: usize = 64;
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
pub struct SnapMeta {
    pub decls: Vec<(String, u64)>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub struct SnapShard {
    pub covered: u64,
    pub names: Vec<String>,
    pub entities: Vec<SnapEntity>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub struct SnapEntity {
    pub key: String,
    pub events: Option<i64>,
    pub last_ts: Option<i64>,
    pub wm: i64,
    pub as_of: i64,
    pub feats: Vec<SnapFeat>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub struct SnapFeat {
    pub name: u32,
    pub updated_ms: i64,
    pub st: SnapState,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub enum SnapState {
    Int(i64, i64),
    Float(f64, i64),
    Bool(bool, i64),
    Str(String, i64),
    Win(Vec<SnapBucket>),
    Hll(i64, Vec<u8>),
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub struct SnapBucket {
    pub idx: i64,
    pub n: u32,
    pub a: f64,
}

/// The file a snapshot is written to or read from: positional I/O, as the storage engine's
/// file layer provides it (a real file, or the simulated disk of its tests).
#[expect(
    clippy::len_without_is_empty,
    reason = "the length of a file, not of a collection"
)]
pub trait SnapFile {
    /// Fill `buf` from `off`, or fail (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` at `off`.
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
}

/// The name of the snapshot whose largest covered LSN is `covered_max`.
pub fn file_name(covered_max: u64) -> String {
    format!("snap-{covered_max:020}.vxs")
}

/// The largest covered LSN a snapshot's file name carries; `None` for other names.
pub fn parse_file_name(name: &str) -> Option<u64> {
    name.strip_prefix("snap-")?
        .strip_suffix(".vxs")?
        .parse()
        .ok()
}

/// The name a snapshot is written under before its rename.
pub const TEMP_NAME: &str = "snap.vxs.tmp";
