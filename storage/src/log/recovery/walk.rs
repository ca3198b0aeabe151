//! Walking a segment's records from the start, in bounded chunks, and telling a torn tail
//! from corruption (is there a valid record after a bad one?). Shared by recovery, the
//! feature tables' replay and `veltrix check`.

use crate::api::OpenError;
use crate::log::record::{self, Decode, HEADER_LEN};
use crate::log::segment::io_err;
use crate::vfs::VFile;
use std::path::Path;

/// Bytes read at a time when scanning a segment.
const SCAN_CHUNK: usize = 4 << 20;

/// What walking a segment finds next.
pub(crate) enum Walk<'a> {
    /// A record whose length fits the file (its checksum is not checked yet).
    Record(record::Header, &'a [u8]),
    /// Bytes that are not a record header, or a record cut off by the end of the file.
    Bad(&'static str),
}

/// Read the records of `file` (of `len` bytes) in order, calling `f(offset, item)` for each
/// until it returns false or a bad item was handed over.
pub(crate) fn read_records(
    file: &dyn VFile,
    path: &Path,
    len: u64,
    f: &mut dyn FnMut(u64, Walk<'_>) -> bool,
) -> Result<(), OpenError> {
    let mut off = 0u64;
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_off = 0u64;
    // Make `buf` hold `need` bytes at file offset `at`; false if the file is shorter.
    let fill =
        |buf: &mut Vec<u8>, buf_off: &mut u64, at: u64, need: usize| -> Result<bool, OpenError> {
            if at >= *buf_off && (at - *buf_off) as usize + need <= buf.len() {
                return Ok(true);
            }
            let left = usize::try_from(len - at).unwrap_or(usize::MAX);
            if left < need {
                return Ok(false);
            }
            buf.clear();
            buf.resize(need.max(SCAN_CHUNK).min(left), 0);
            file.read_exact_at(buf, at)
                .map_err(io_err(format!("reading {}", path.display())))?;
            *buf_off = at;
            Ok(true)
        };
    while off < len {
        if !fill(&mut buf, &mut buf_off, off, HEADER_LEN)? {
            f(off, Walk::Bad("truncated record header"));
            return Ok(());
        }
        let at = (off - buf_off) as usize;
        let h = match record::parse_header(&buf[at..at + HEADER_LEN]) {
            Ok(h) => h,
            Err(Decode::Bad(why)) => {
                f(off, Walk::Bad(why));
                return Ok(());
            }
            Err(Decode::Incomplete(_)) => {
                f(off, Walk::Bad("truncated record header"));
                return Ok(());
            }
        };
        // A length past the end of the file is a torn write (or garbage): never allocate it.
        if off + h.len as u64 > len || !fill(&mut buf, &mut buf_off, off, h.len)? {
            f(off, Walk::Bad("record extends past the end of the file"));
            return Ok(());
        }
        let at = (off - buf_off) as usize;
        if !f(off, Walk::Record(h, &buf[at..at + h.len])) {
            return Ok(());
        }
        off += h.len as u64;
    }
    Ok(())
}

/// The first valid record after a bad one at `bad` (offset and LSN), if any: a header that
/// parses, with an LSN at or after `expected`, within the file, whose checksum matches.
pub(crate) fn find_valid_after(
    file: &dyn VFile,
    bad: u64,
    len: u64,
    expected: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    let mut at = bad + 1;
    let mut window = vec![0u8; SCAN_CHUNK + HEADER_LEN];
    while at + HEADER_LEN as u64 <= len {
        let n = file.read_full_at(&mut window, at)?;
        let usable = n.saturating_sub(HEADER_LEN - 1);
        for i in 0..usable {
            let Ok(h) = record::parse_header(&window[i..i + HEADER_LEN]) else {
                continue;
            };
            let off = at + i as u64;
            if h.lsn < expected
                || h.lsn - expected > (len / HEADER_LEN as u64)
                || off + h.len as u64 > len
            {
                continue;
            }
            let mut rec = vec![0u8; h.len];
            file.read_exact_at(&mut rec, off)?;
            if record::crc_ok(&h, &rec) {
                return Ok(Some((off, h.lsn)));
            }
        }
        if usable == 0 {
            break;
        }
        at += usable as u64;
    }
    Ok(None)
}
