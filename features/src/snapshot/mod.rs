//! Snapshots of the feature tables: the file format, writing one ([`write_to`]), loading and
//! checking one ([`load`], [`verify`]) (docs/API.md §6, §7 restart). Where the files live, the
//! thread that takes them and the log replay after a load are the storage engine's
//! (vx-storage `snapshot.rs`); it hands this module a [`SnapFile`] to read or write.
//!
//! A snapshot is written shard by shard while ingest goes on: the snapshot thread takes one
//! shard's read lock, copies that shard (its names, every entity's key and record encoding as
//! they are, the held states) and notes the LSN the copy covers, releases the lock and
//! serializes the copy with rkyv. Extra memory is therefore one shard's copy and its archive
//! (about 1/`shards` of the tables), and the writer waits at most for one shard's copy, which
//! is a copy of bytes, not a rebuild. Shards cover different LSNs: a shard covers `max(its last
//! applied LSN, the LSN every shard had applied when the copy was taken)`, which is exact
//! because only the writer changes a shard, in log order, under its lock.
//!
//! Start-up (in the storage engine) loads the newest snapshot that validates (checksums, rkyv
//! validation, schema hash, shard count, every record encoding checked, and covering only
//! records the log still has), the shards on as many threads as the machine has (up to 8),
//! replays the log from the smallest covered LSN + 1 and applies to each shard only the
//! records after its own covered LSN. An entity whose feature names keep their ids (no
//! declaration changed) is put back as its encoding, without decoding it into a struct and
//! encoding it again. A corrupt, truncated or mismatched snapshot is skipped with a warning
//! naming it; one that covers records past the end of the log (its tail was lost: `fsync:
//! interval`/`never` after a power cut, or `--repair`) is removed, since its state includes
//! writes that are //! gone. With no usable snapshot the tables are rebuilt from the whole retained log.
//! Declarations whose definition changed since the snapshot (by
//! [`crate::FeatureDecl::fingerprint`])
//! are recomputed from the whole retained log; everything else comes from the snapshot.
//!
//! The two newest snapshots are kept, and retention keeps every record after the older one's
//! smallest covered LSN (`snapshot_floor`), so either can be completed from the log.
//!
//! The archived types below are the on-disk format, with the record encoding of
//! `crate::rec` inside them (its layout is written there, and `golden_encoding` holds it):
//! a change to either changes [`SCHEMA`], and snapshots of an older schema are skipped (the
//! tables are then rebuilt from the log).
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
//!   SnapShard.packed, per entity in slot order:
//!     varint key length, the key (UTF-8), varint encoding length, the record encoding
//!     (crate::rec: flags, times, features; each feature tagged "held" takes the next of
//!     SnapShard.held, in order)
//!   (varints: LEB128, 7 bits a byte, low first)
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
const SCHEMA: &str = "vx-snapshot 3: SnapMeta{decls:Vec<(String,u64)>} \
    SnapShard{covered:u64,names:Vec<String>,entities:u64,packed:Vec<u8>,\
    held:Vec<SnapHeld{Str(String,i64)|Win(Vec<SnapBucket{idx:i64,n:u32,a:f64}>)|Hll(i64,Vec<u8>)}>} \
    packed: (varint key length, key, varint encoding length, rec encoding 1)*";

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
    /// The shard's names by id (a freed id is an empty name).
    pub names: Vec<String>,
    pub entities: u64,
    /// Every entity's key and record encoding (the module docs' layout).
    pub packed: Vec<u8>,
    /// The states the records hold outside their encodings, in entity and feature order.
    pub held: Vec<SnapHeld>,
}

/// A state a record holds outside its encoding.
#[derive(rkyv::Archive, rkyv::Serialize, Debug, PartialEq)]
pub enum SnapHeld {
    /// A string value and its `ts`.
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
pub trait SnapFile: Sync {
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

/// Append `v` as a LEB128 varint.
fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Take a varint-length-prefixed byte string off the front of `b`; `None` if short.
fn take_bytes<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut r = crate::rec::Strict { b };
    let n = usize::try_from(r.var()?).ok()?;
    let s = r.take(n)?;
    *b = r.b;
    Some(s)
}

/// The name a snapshot is written under before its rename.
pub const TEMP_NAME: &str = "snap.vxs.tmp";
