//! Writing a snapshot: shard by shard under each shard's read lock, while ingest goes on.

use super::{
    HEAD_LEN, MAGIC, SnapBucket, SnapFile, SnapHeld, SnapMeta, SnapShard, TRAILER, put_var,
    schema_hash,
};
use crate::Features;
use crate::decl::FeatureValue;
use crate::state::State;
use crate::table::Shard;
use rkyv::rancor;
use std::io;

/// What [`write_to`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub covered_min: u64,
    pub covered_max: u64,
    /// The file's length.
    pub bytes: u64,
}

/// Copy a shard under its read lock: bytes as the slots hold them, and the held states.
fn copy_shard(g: &Shard, covered: u64) -> io::Result<SnapShard> {
    let names = g.names.iter().map(str::to_string).collect();
    // Most entities are a short key and a record of a few dozen bytes.
    let mut packed = Vec::with_capacity(g.entities.len() * 40);
    let mut held = Vec::new();
    for (k, r) in g.entities.slots() {
        let key = k.as_bytes();
        put_var(&mut packed, key.len() as u64);
        packed.extend_from_slice(key);
        let (enc, states) = r.snapshot_parts();
        put_var(&mut packed, enc.len() as u64);
        packed.extend_from_slice(enc);
        for st in states {
            held.push(match st {
                State::Plain {
                    v: FeatureValue::Str(s),
                    ts,
                } => SnapHeld::Str(s.to_string(), *ts),
                // A record holds only strings, windows and sketches outside its encoding.
                State::Plain { .. } => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a record holds a plain number outside its encoding",
                    ));
                }
                State::Win(b) => SnapHeld::Win(
                    b.iter()
                        .map(|b| SnapBucket {
                            idx: b.idx,
                            n: b.n,
                            a: b.a,
                        })
                        .collect(),
                ),
                State::Hll { head, regs } => SnapHeld::Hll(*head, regs.to_vec()),
            });
        }
    }
    Ok(SnapShard {
        covered,
        names,
        entities: g.entities.len() as u64,
        packed,
        held,
    })
}

fn pad16(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(16) {
        buf.push(0);
    }
}

/// The most of a shard's archive handed to one write. The archive is written from rkyv's
/// buffer as it is, rather than copied behind its chunk head first (at 100M entities, 27 MB a
/// shard); and a kernel built without preemption (this box's) may copy one write into the
/// page cache without giving the CPU to another thread, so no write is a whole shard.
/// Measured with GET p99 while the snapshot is written (docs/BENCHMARKS.md, "100 million
/// entities"): a little lower, not gone.
pub(crate) const WRITE_PIECE: usize = 1 << 20;

/// Write a snapshot of `features` into `f` (a new, empty file), stamped `now_ms`. Syncing,
/// naming ([`super::file_name`]) and the atomic rename are the caller's.
pub fn write_to(features: &Features, f: &dyn SnapFile, now_ms: i64) -> io::Result<Written> {
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
        // A shard covers its own last LSN or what every shard had applied when it was
        // copied, whichever is larger: only the writer changes it, in log order, under the lock.
        let copy = {
            let g = lock.read();
            copy_shard(&g, g.lsn.max(features.applied()))?
        };
        cmin = cmin.min(copy.covered);
        cmax = cmax.max(copy.covered);
        let bytes = rkyv::to_bytes::<rancor::Error>(&copy).map_err(io::Error::other)?;
        drop(copy);
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        head[8..12].copy_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
        head[12..].copy_from_slice(&(i as u32).to_le_bytes());
        f.write_all_at(&head, off)?;
        off += 16;
        for piece in bytes.chunks(WRITE_PIECE) {
            f.write_all_at(piece, off)?;
            off += piece.len() as u64;
        }
        let pad = (16 - bytes.len() % 16) % 16;
        f.write_all_at(&[0u8; 16][..pad], off)?;
        off += pad as u64;
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
    Ok(Written {
        covered_min: cmin,
        covered_max: cmax,
        bytes: off,
    })
}
