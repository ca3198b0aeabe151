//! The carry file `log/streams.carry`: streams that have no events in any retained segment
//! but must not be forgotten, kept on disk instead of in memory:
//! - *orphans*, whose events retention removed: still listed, with `events: 0` (docs/API.md §5);
//! - *tombstones*, deleted streams: not listed, but a later write continues their `seq`.
//!
//! Both only need a name, the last seq and the floor. The file is sorted by name, so a lookup
//! is a binary search by `pread`, and listing merges it with the names in memory. It is
//! rewritten whole (write, fsync, rename, fsync the directory) before retention removes a
//! segment whose removal would orphan a stream, and when a segment holding tombstones is
//! sealed. At start-up the carry file and the retained index files together give every
//! stream's state.
//!
//! # Layout (all integers little-endian)
//! ```text
//! header (32 bytes)
//!   0  [u8;4] magic "VXCY"
//!   4  u16    version 1
//!   6  u16    0
//!   8  u64    count: entries
//!  16  u64    orphans: entries with last_seq > floor
//!  24  u64    entries_len: bytes of the entries region
//! offsets: count × u64, the offset of each entry in the entries region, in name order
//! entries: u16 name_len, name bytes, u64 last_seq, u64 floor
//!          (floor = last_seq: a tombstone; floor < last_seq: an orphan)
//! footer: u32 crc32c of every byte before it
//! ```

use crate::log::record::{Decode, Fields};
use crate::log::segment::write_durably;
use crate::vfs::{OpenMode, VFile, Vfs};
use std::io;
use std::path::Path;
use std::sync::Arc;

const MAGIC: [u8; 4] = *b"VXCY";
const VERSION: u16 = 1;
const HEADER_LEN: u64 = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarryEntry {
    pub name: String,
    pub last_seq: u64,
    pub floor: u64,
}

impl CarryEntry {
    /// Deleted and not written since.
    pub fn is_tombstone(&self) -> bool {
        self.floor >= self.last_seq
    }
}

/// An open carry file (or none yet).
#[derive(Clone, Default)]
pub struct Carry {
    file: Option<Arc<dyn VFile>>,
    count: u64,
    orphans: u64,
}

fn bad(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("carry file: {why}"))
}

fn decode(e: Decode) -> io::Error {
    match e {
        Decode::Bad(w) => bad(w),
        Decode::Incomplete(_) => bad("truncated"),
    }
}

impl Carry {
    /// Open and verify `path`; an absent file is an empty carry.
    pub fn open(vfs: &dyn Vfs, path: &Path) -> io::Result<Carry> {
        if !vfs.exists(path)? {
            return Ok(Carry::default());
        }
        let file = vfs.open(path, OpenMode::Read)?;
        let bytes = file.read_all()?;
        let body = bytes.len().checked_sub(4).ok_or_else(|| bad("truncated"))?;
        let crc = u32::from_le_bytes(bytes[body..].try_into().map_err(|_| bad("truncated"))?);
        if crc32c::crc32c(&bytes[..body]) != crc {
            return Err(bad("checksum mismatch"));
        }
        let mut r = Fields::new(&bytes);
        if r.arr::<4>().map_err(decode)? != MAGIC || r.u16().map_err(decode)? != VERSION {
            return Err(bad("not a carry file of version 1"));
        }
        r.u16().map_err(decode)?;
        let count = r.u64().map_err(decode)?;
        let orphans = r.u64().map_err(decode)?;
        let entries_len = r.u64().map_err(decode)?;
        if HEADER_LEN + count * 8 + entries_len + 4 != bytes.len() as u64 {
            return Err(bad("length does not match its header"));
        }
        Ok(Carry {
            file: Some(file),
            count,
            orphans,
        })
    }

    /// Entries that are orphans (listed streams).
    pub fn orphans(&self) -> u64 {
        self.orphans
    }

    fn entry_at(&self, i: u64) -> io::Result<CarryEntry> {
        let f = self.file.as_ref().ok_or_else(|| bad("empty"))?;
        let mut off = [0u8; 8];
        f.read_exact_at(&mut off, HEADER_LEN + i * 8)?;
        let at = HEADER_LEN + self.count * 8 + u64::from_le_bytes(off);
        let mut buf = [0u8; 2 + 256 + 16];
        let n = f.read_full_at(&mut buf, at)?;
        let mut r = Fields::new(buf.get(..n).ok_or(Decode::Incomplete(n)).map_err(decode)?);
        let nl = usize::from(r.u16().map_err(decode)?);
        let name = r.str(nl).map_err(decode)?.to_string();
        Ok(CarryEntry {
            name,
            last_seq: r.u64().map_err(decode)?,
            floor: r.u64().map_err(decode)?,
        })
    }

    /// Index of the first entry whose name is ≥ `name` (or > it with `exclusive`).
    fn lower_bound(&self, name: &str, exclusive: bool) -> io::Result<u64> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.entry_at(mid)?;
            let before = if exclusive {
                e.name.as_str() <= name
            } else {
                e.name.as_str() < name
            };
            if before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    pub fn get(&self, name: &str) -> io::Result<Option<CarryEntry>> {
        if self.count == 0 {
            return Ok(None);
        }
        let i = self.lower_bound(name, false)?;
        if i < self.count {
            let e = self.entry_at(i)?;
            if e.name == name {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// Entries from `start` (inclusive, or exclusive) on, in name order, while `keep` says so.
    pub fn scan(
        &self,
        start: &str,
        exclusive: bool,
        mut keep: impl FnMut(&CarryEntry) -> bool,
    ) -> io::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        let mut i = self.lower_bound(start, exclusive)?;
        while i < self.count {
            let e = self.entry_at(i)?;
            if !keep(&e) {
                break;
            }
            i += 1;
        }
        Ok(())
    }

    /// Every entry, in name order.
    pub fn all(&self) -> io::Result<Vec<CarryEntry>> {
        let mut out = Vec::new();
        self.scan("", false, |e| {
            out.push(e.clone());
            true
        })?;
        Ok(out)
    }

    /// Write `entries` (sorted by name, distinct) as the new carry file, durably.
    pub fn write(vfs: &dyn Vfs, path: &Path, entries: &[CarryEntry]) -> io::Result<Carry> {
        let mut offsets = Vec::with_capacity(entries.len() * 8);
        let mut body = Vec::new();
        let mut orphans = 0u64;
        for e in entries {
            offsets.extend_from_slice(&(body.len() as u64).to_le_bytes());
            let nl = u16::try_from(e.name.len()).map_err(|_| bad("stream name too long"))?;
            body.extend_from_slice(&nl.to_le_bytes());
            body.extend_from_slice(e.name.as_bytes());
            body.extend_from_slice(&e.last_seq.to_le_bytes());
            body.extend_from_slice(&e.floor.to_le_bytes());
            if !e.is_tombstone() {
                orphans += 1;
            }
        }
        let mut out = Vec::with_capacity(32 + offsets.len() + body.len() + 4);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&orphans.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&offsets);
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        let tmp = path.with_extension("carry.tmp");
        write_durably(vfs, &tmp, path, &out)?;
        Carry::open(vfs, path)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn e(name: &str, last_seq: u64, floor: u64) -> CarryEntry {
        CarryEntry {
            name: name.into(),
            last_seq,
            floor,
        }
    }

    #[test]
    fn write_open_get_scan() {
        let fs = crate::sim::SimFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join("streams.carry");
        assert_eq!(Carry::open(&fs, &path).unwrap().orphans(), 0);
        let entries: Vec<_> = (0..50)
            .map(|i| {
                e(
                    &format!("s{i:03}"),
                    i + 10,
                    if i % 2 == 0 { i + 10 } else { 3 },
                )
            })
            .collect();
        let c = Carry::write(&fs, &path, &entries).unwrap();
        assert_eq!((c.count, c.orphans()), (50, 25));
        let c = Carry::open(&fs, &path).unwrap();
        assert_eq!(c.get("s007").unwrap(), Some(e("s007", 17, 3)));
        assert!(c.get("s007").unwrap().unwrap().floor < 17);
        assert!(c.get("s008").unwrap().unwrap().is_tombstone());
        assert_eq!(c.get("s0").unwrap(), None);
        assert_eq!(c.get("zzz").unwrap(), None);
        let mut got = Vec::new();
        c.scan("s010", true, |e| {
            got.push(e.name.clone());
            got.len() < 3
        })
        .unwrap();
        assert_eq!(got, ["s011", "s012", "s013"]);
        assert_eq!(c.all().unwrap(), entries);
    }

    #[test]
    fn golden_bytes() {
        let fs = crate::sim::SimFs::new();
        let dir = Path::new("/d");
        fs.create_dir_all(dir).unwrap();
        let path = dir.join("streams.carry");
        Carry::write(&fs, &path, &[e("a", 5, 2)]).unwrap();
        let bytes = fs.open(&path, OpenMode::Read).unwrap().read_all().unwrap();
        let mut want = b"VXCY".to_vec();
        want.extend_from_slice(&[1, 0, 0, 0]);
        for v in [1u64, 1, 19, 0] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[1, 0, b'a']);
        want.extend_from_slice(&5u64.to_le_bytes());
        want.extend_from_slice(&2u64.to_le_bytes());
        let crc = crc32c::crc32c(&want);
        want.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(bytes, want);
    }
}
