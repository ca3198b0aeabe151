//! The storage I/O seam: every file operation of the log, the index files, the carry file and
//! the data dir's metadata goes through [`Vfs`] and [`VFile`], so that tests can replace the
//! disk with [`crate::sim::SimFs`], which loses unsynced bytes on a simulated power cut and
//! fails on command (the approach of redb's crash-consistency backend).
//!
//! [`RealFs`] is the production backend: `std::fs` with positional I/O (`pread`/`pwrite`),
//! `fdatasync`, a directory fsync by opening the directory, and `flock` for the data-dir lock.
//!
//! [`cached_only`] runs reads that must not wait for the disk: on the real disk each read is a
//! `preadv2` with `RWF_NOWAIT`, answered from the page cache or refused with
//! [`io::ErrorKind::WouldBlock`], so that a request handler can serve a small page on its
//! async worker and hand a cold one to the blocking pool (docs/ARCHITECTURE.md, "Reader index
//! and replay").
//!
//! [`FileCache`] keeps readers' descriptors of sealed segments and index files open on
//! demand, at most a fixed number at a time, so the number of segments never bounds how many
//! descriptors the process needs (a reader that holds a file keeps it alive past eviction).

use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to open a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// An existing file, read only.
    Read,
    /// An existing file, read and write.
    Write,
    /// A new file, read and write; fails if it exists.
    CreateNew,
    /// Create it if missing (never truncate), read and write.
    Create,
}

/// A file: positional reads and writes, a data sync, truncation.
#[expect(
    clippy::len_without_is_empty,
    reason = "the length of a file, not of a collection"
)]
pub trait VFile: Send + Sync {
    /// Read at most `buf.len()` bytes at `off`; 0 at or past the end.
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Write all of `buf` at `off`. On error, any prefix of `buf` may have been written.
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// `fdatasync`: the bytes written so far survive a power cut.
    fn sync_data(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;

    /// Fill `buf` from `off`, or fail with `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let n = self.read_full_at(buf, off)?;
        if n < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} bytes at offset {off}, {n} available", buf.len()),
            ));
        }
        Ok(())
    }

    /// Read until `buf` is full or the end of the file; returns the bytes read.
    fn read_full_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            let at = off.saturating_add(n as u64);
            match self.read_at(&mut buf[n..], at) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// The whole file.
    fn read_all(&self) -> io::Result<Vec<u8>> {
        let len = usize::try_from(self.len()?)
            .map_err(|_| io::Error::other("file larger than the address space"))?;
        let mut buf = vec![0u8; len];
        let n = self.read_full_at(&mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    }
}

/// A held data-dir lock; released when dropped.
pub trait DirLock: Send + Sync {}
impl<T: Send + Sync> DirLock for T {}

/// The file system under the storage engine. Paths are absolute or relative to the process.
pub trait Vfs: Send + Sync {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// The names of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn open(&self, path: &Path, how: OpenMode) -> io::Result<Arc<dyn VFile>>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Atomically replace `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync a directory: its entries (creates, removes, renames) survive a power cut.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Take the exclusive lock of `path` (created if missing); `None` if another process holds it.
    fn lock(&self, path: &Path) -> io::Result<Option<Box<dyn DirLock>>>;
}

thread_local! {
    /// Set while [`cached_only`] runs on this thread.
    static CACHED_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with every read of the real disk it makes on this thread answered from the page
/// cache only: a read whose bytes are not all cached fails with
/// [`io::ErrorKind::WouldBlock`] instead of waiting for the disk (see [`would_block`]).
/// Reads of other backends ([`crate::sim::SimFs`] holds everything in memory) are
/// unchanged. `f` must not await or hand work to other threads: the mode is per thread.
pub fn cached_only<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the previous mode, also when `f` unwinds.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CACHED_ONLY.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CACHED_ONLY.with(|c| c.replace(true)));
    f()
}

/// Whether `e` is a read [`cached_only`] refused because its bytes were not cached.
pub fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// A read that takes its bytes from the page cache or fails with `WouldBlock`
/// (`RWF_NOWAIT`). A kernel or file system without it (`EOPNOTSUPP`, `EINVAL`) reads as
/// uncached too: the caller then reads on a thread that may wait.
fn read_cached(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    use rustix::io::{Errno, ReadWriteFlags, preadv2};
    match preadv2(
        file,
        &mut [std::io::IoSliceMut::new(buf)],
        off,
        ReadWriteFlags::NOWAIT,
    ) {
        Ok(n) => Ok(n),
        Err(Errno::AGAIN | Errno::OPNOTSUPP | Errno::INVAL) => {
            Err(io::ErrorKind::WouldBlock.into())
        }
        Err(e) => Err(e.into()),
    }
}

/// The real disk.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(File);

impl VFile for RealFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if CACHED_ONLY.with(Cell::get) {
            return read_cached(&self.0, buf, off);
        }
        self.0.read_at(buf, off)
    }
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_all_at(buf, off)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }

    fn open(&self, path: &Path, how: OpenMode) -> io::Result<Arc<dyn VFile>> {
        let mut o = OpenOptions::new();
        o.read(true);
        match how {
            OpenMode::Read => {}
            OpenMode::Write => {
                o.write(true);
            }
            OpenMode::CreateNew => {
                o.write(true).create_new(true);
            }
            OpenMode::Create => {
                o.write(true).create(true).truncate(false);
            }
        }
        Ok(Arc::new(RealFile(o.open(path)?)))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn lock(&self, path: &Path) -> io::Result<Option<Box<dyn DirLock>>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Some(Box::new(f))),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// Open descriptors of read-only files (sealed segments, index files), at most `capacity`,
/// least recently used evicted first. A reader keeps the `Arc` it got for as long as it reads.
/// Keyed by `K` (the log's: a segment's first LSN and which of its two files), so that a hit
/// builds no path: a point read asks for two or three files, and formatting their names was
/// about 4% of its CPU.
pub struct FileCache<K = PathBuf> {
    vfs: Arc<dyn Vfs>,
    capacity: usize,
    inner: Mutex<CacheInner<K>>,
}

struct CacheInner<K> {
    tick: u64,
    files: HashMap<K, (Arc<dyn VFile>, u64)>,
}

impl<K: std::hash::Hash + Eq + Clone> FileCache<K> {
    pub fn new(vfs: Arc<dyn Vfs>, capacity: usize) -> Self {
        FileCache {
            vfs,
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner {
                tick: 0,
                files: HashMap::new(),
            }),
        }
    }

    /// The open file of `key`, opened read-only from `path()` if it is not cached.
    pub fn get(&self, key: &K, path: impl FnOnce() -> PathBuf) -> io::Result<Arc<dyn VFile>> {
        {
            let mut g = self.inner.lock();
            g.tick += 1;
            let tick = g.tick;
            if let Some((f, used)) = g.files.get_mut(key) {
                *used = tick;
                return Ok(Arc::clone(f));
            }
        }
        // Opened outside the lock: opening may block on the disk.
        let f = self.vfs.open(&path(), OpenMode::Read)?;
        let mut g = self.inner.lock();
        g.tick += 1;
        let tick = g.tick;
        if g.files.len() >= self.capacity
            && let Some(oldest) = g
                .files
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
        {
            g.files.remove(&oldest);
        }
        g.files.insert(key.clone(), (Arc::clone(&f), tick));
        Ok(f)
    }

    /// Forget `key` (its file was removed or replaced).
    pub fn evict(&self, key: &K) {
        self.inner.lock().files.remove(key);
    }

    /// Descriptors held by the cache now.
    pub fn len(&self) -> usize {
        self.inner.lock().files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
        for i in 0..5 {
            std::fs::write(dir.path().join(i.to_string()), [i]).unwrap();
        }
        let cache = FileCache::new(Arc::clone(&vfs), 3);
        let p = |i: u8| dir.path().join(i.to_string());
        for i in 0..3 {
            cache.get(&p(i), || p(i)).unwrap();
        }
        cache.get(&p(0), || p(0)).unwrap(); // 1 is now the least recently used
        cache.get(&p(3), || p(3)).unwrap();
        assert_eq!(cache.len(), 3);
        let held = cache.get(&p(4), || p(4)).unwrap(); // evicts 2
        assert_eq!(cache.len(), 3);
        let mut b = [0u8; 1];
        held.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(b, [4]);
        cache.evict(&p(4));
        // Evicted but still held: the reader's descriptor stays valid.
        held.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(cache.len(), 2);
    }
}

#[cfg(test)]
mod cached_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A read in `cached_only` mode is answered from the page cache, or refused with
    /// `WouldBlock` when its bytes are not there; a plain read then brings them in.
    #[test]
    fn cached_only_reads_refuse_what_is_not_cached() {
        // Beside the test binary (the build's disk), not in /tmp: a tmpfs /tmp (Debian 13's
        // default) keeps its pages whatever `posix_fadvise` says, and nothing is uncached.
        let beside = std::env::current_exe().unwrap();
        let dir = tempfile::tempdir_in(beside.parent().unwrap()).unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = RealFs.open(&path, OpenMode::Read).unwrap();
        let mut buf = vec![0u8; 4096];
        let at = 512 << 10;
        assert_eq!(cached_only(|| f.read_at(&mut buf, at)).unwrap(), 4096);
        assert_eq!(buf[..], data[at as usize..at as usize + 4096]);

        // Written back, then dropped from the page cache.
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let err = cached_only(|| f.read_at(&mut buf, at)).unwrap_err();
        assert!(would_block(&err), "{err}");
        assert!(crate::ReadError::Io(err).is_uncached());

        // The mode ends with the closure: a plain read waits for the disk, and caches.
        assert_eq!(f.read_at(&mut buf, at).unwrap(), 4096);
        assert_eq!(cached_only(|| f.read_at(&mut buf, at)).unwrap(), 4096);
        assert_eq!(buf[..], data[at as usize..at as usize + 4096]);
    }
}
