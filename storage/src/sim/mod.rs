//! [`SimFs`]: an in-memory [`Vfs`] for crash-consistency tests (the approach of redb's
//! crash-testing backend and of LazyFS).
//!
//! # The power-loss model
//! Every file keeps the bytes known durable apart from the operations (writes, truncations)
//! made since its last `sync_data`; every directory keeps its durable entries apart from the
//! creates, removes and renames made since its last directory sync. A running process sees
//! everything. [`SimFs::power_cut`] then decides, per file and per directory independently,
//! what survived: the durable state plus an arbitrary *prefix* of the pending operations, the
//! first lost write possibly torn (a prefix of its bytes kept, or its range left as zeros, as a
//! file whose size reached the disk before its data). A file's data survives only if a
//! surviving directory entry still names it.
//!
//! Not modelled: a disk that persists a file's unsynced writes out of order (a later page
//! without an earlier one), corruption of synced data, and metadata other than names and
//! sizes. docs/ARCHITECTURE.md discusses what that leaves out.
//!
//! # Faults on command
//! [`SimFs::fail_next`] makes the next operation of a kind fail (EIO, or ENOSPC for
//! [`Fault::NoSpace`], which also writes part of the buffer first, as a real full disk does);
//! [`SimFs::freeze_after`] cuts the power after a number of mutating operations: from then
//! every operation fails until [`SimFs::power_cut`] restarts the machine.

use crate::vfs::{DirLock, OpenMode, VFile, Vfs};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An operation that can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The next `write_all_at` fails with EIO, writing nothing.
    Write,
    /// The next `write_all_at` fails with ENOSPC after writing part of its buffer.
    NoSpace,
    /// The next `sync_data` fails with EIO (and nothing becomes durable).
    Fsync,
    /// The next directory sync fails with EIO.
    SyncDir,
    /// The next `set_len` fails with EIO.
    Truncate,
    /// The next file creation fails with EIO.
    Create,
}

#[derive(Clone, Debug)]
enum DataOp {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug, Default)]
struct Inode {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<DataOp>,
}

#[derive(Clone, Debug)]
enum DirOp {
    Link(String, u64),
    Unlink(String),
    Rename(String, String),
}

#[derive(Clone, Debug, Default)]
struct Dir {
    current: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
    pending: Vec<DirOp>,
}

#[derive(Default)]
struct Disk {
    /// Bumped by every power cut: handles of an earlier boot fail.
    boot: u64,
    /// The power is off: every operation fails until `power_cut`.
    frozen: bool,
    /// Mutating operations left before the power goes.
    freeze_in: Option<u64>,
    dirs: BTreeMap<PathBuf, Dir>,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    faults: HashMap<Fault, u32>,
    locks: HashSet<PathBuf>,
    /// Counters, for tests to see that work happened.
    syncs: u64,
    dir_syncs: u64,
    reads: u64,
    read_bytes: u64,
}

/// The simulated file system. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<Disk>>,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated I/O error: {what}"))
}

fn powered_off() -> io::Error {
    io::Error::other("simulated power loss: the disk is gone")
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    Ok((parent, name.to_string()))
}

fn apply(buf: &mut Vec<u8>, op: &DataOp) {
    match op {
        DataOp::Write { off, data } => {
            let off = usize::try_from(*off).unwrap_or(usize::MAX);
            let end = off.saturating_add(data.len());
            if buf.len() < end {
                buf.resize(end, 0);
            }
            buf[off..end].copy_from_slice(data);
        }
        DataOp::SetLen(len) => buf.resize(usize::try_from(*len).unwrap_or(usize::MAX), 0),
    }
}

fn apply_dir(map: &mut BTreeMap<String, u64>, op: &DirOp) {
    match op {
        DirOp::Link(name, ino) => {
            map.insert(name.clone(), *ino);
        }
        DirOp::Unlink(name) => {
            map.remove(name);
        }
        DirOp::Rename(from, to) => {
            if let Some(ino) = map.remove(from) {
                map.insert(to.clone(), ino);
            }
        }
    }
}

impl Disk {
    fn check(&self, boot: u64) -> io::Result<()> {
        if self.frozen || boot != self.boot {
            return Err(powered_off());
        }
        Ok(())
    }

    /// Count one mutating operation towards a scheduled power cut.
    fn tick(&mut self) -> io::Result<()> {
        if self.frozen {
            return Err(powered_off());
        }
        if let Some(n) = self.freeze_in.as_mut() {
            if *n == 0 {
                self.frozen = true;
                return Err(powered_off());
            }
            *n -= 1;
        }
        Ok(())
    }

    fn take_fault(&mut self, f: Fault) -> bool {
        match self.faults.get_mut(&f) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    fn dir(&mut self, dir: &Path) -> io::Result<&mut Dir> {
        self.dirs
            .get_mut(dir)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such directory"))
    }
}

struct SimFile {
    state: Arc<Mutex<Disk>>,
    ino: u64,
    boot: u64,
    writable: bool,
}

impl VFile for SimFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let mut s = self.state.lock();
        s.check(self.boot)?;
        let data = s
            .inodes
            .get(&self.ino)
            .map(|i| i.current.as_slice())
            .unwrap_or_default();
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        let Some(src) = data.get(off..) else {
            return Ok(0);
        };
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        s.reads += 1;
        s.read_bytes += n as u64;
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check(self.boot)?;
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "read only"));
        }
        s.tick()?;
        if s.take_fault(Fault::Write) {
            return Err(eio("write"));
        }
        let (data, res) = if s.take_fault(Fault::NoSpace) {
            let part = buf.len() / 2;
            (
                &buf[..part],
                Err(io::Error::from_raw_os_error(28)), // ENOSPC
            )
        } else {
            (buf, Ok(()))
        };
        let op = DataOp::Write {
            off,
            data: data.to_vec(),
        };
        if let Some(i) = s.inodes.get_mut(&self.ino) {
            apply(&mut i.current, &op);
            i.pending.push(op);
        }
        res
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check(self.boot)?;
        s.tick()?;
        if s.take_fault(Fault::Fsync) {
            return Err(eio("fsync"));
        }
        s.syncs += 1;
        if let Some(i) = s.inodes.get_mut(&self.ino) {
            i.durable = i.current.clone();
            i.pending.clear();
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.check(self.boot)?;
        s.tick()?;
        if s.take_fault(Fault::Truncate) {
            return Err(eio("truncate"));
        }
        let op = DataOp::SetLen(len);
        if let Some(i) = s.inodes.get_mut(&self.ino) {
            apply(&mut i.current, &op);
            i.pending.push(op);
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.state.lock();
        s.check(self.boot)?;
        Ok(s.inodes
            .get(&self.ino)
            .map_or(0, |i| i.current.len() as u64))
    }
}

struct SimLock {
    state: Arc<Mutex<Disk>>,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.state.lock().locks.remove(&self.path);
    }
}

impl SimFs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the next `times` operations of kind `f` fail.
    pub fn fail_next(&self, f: Fault, times: u32) {
        *self.state.lock().faults.entry(f).or_insert(0) += times;
    }

    /// Cut the power after `ops` more mutating operations (writes, syncs, truncations,
    /// creates, removes, renames, directory syncs).
    pub fn freeze_after(&self, ops: u64) {
        self.state.lock().freeze_in = Some(ops);
    }

    /// Cut the power now (if it is not off already).
    pub fn freeze(&self) {
        self.state.lock().frozen = true;
    }

    pub fn is_frozen(&self) -> bool {
        self.state.lock().frozen
    }

    /// File and directory syncs done so far.
    pub fn syncs(&self) -> (u64, u64) {
        let s = self.state.lock();
        (s.syncs, s.dir_syncs)
    }

    /// Reads so far (those that returned bytes) and the bytes they returned.
    pub fn reads(&self) -> (u64, u64) {
        let s = self.state.lock();
        (s.reads, s.read_bytes)
    }

    /// The power went out: decide what survived (see the module docs), then boot again.
    /// `below(n)` must return a number in `0..n`; the test's random source drives every choice.
    pub fn power_cut(&self, below: &mut dyn FnMut(u64) -> u64) {
        let mut s = self.state.lock();
        for dir in s.dirs.values_mut() {
            let keep = below(dir.pending.len() as u64 + 1) as usize;
            for op in dir.pending.drain(..).take(keep) {
                apply_dir(&mut dir.durable, &op);
            }
            dir.current = dir.durable.clone();
        }
        for inode in s.inodes.values_mut() {
            let keep = below(inode.pending.len() as u64 + 1) as usize;
            let pending = std::mem::take(&mut inode.pending);
            for op in pending.iter().take(keep) {
                apply(&mut inode.durable, op);
            }
            if let Some(DataOp::Write { off, data }) = pending.get(keep) {
                // The first lost write may be torn: part of it, or its size without its data.
                match below(3) {
                    0 => {}
                    1 => {
                        let part = below(data.len() as u64 + 1) as usize;
                        apply(
                            &mut inode.durable,
                            &DataOp::Write {
                                off: *off,
                                data: data[..part].to_vec(),
                            },
                        );
                    }
                    _ => {
                        let end = off.saturating_add(data.len() as u64);
                        if (inode.durable.len() as u64) < end {
                            apply(&mut inode.durable, &DataOp::SetLen(end));
                        }
                    }
                }
            }
            inode.current = inode.durable.clone();
        }
        let live: HashSet<u64> = s
            .dirs
            .values()
            .flat_map(|d| d.durable.values().copied())
            .collect();
        s.inodes.retain(|ino, _| live.contains(ino));
        s.boot += 1;
        s.frozen = false;
        s.freeze_in = None;
        s.faults.clear();
        s.locks.clear();
    }

    /// Names in `dir` and their current sizes (for tests that look at the files).
    pub fn files(&self, dir: &Path) -> Vec<(String, u64)> {
        let s = self.state.lock();
        s.dirs.get(dir).map_or_else(Vec::new, |d| {
            d.current
                .iter()
                .map(|(n, ino)| {
                    (
                        n.clone(),
                        s.inodes.get(ino).map_or(0, |i| i.current.len() as u64),
                    )
                })
                .collect()
        })
    }
}

impl Vfs for SimFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(powered_off());
        }
        // Directories themselves are durable at once: the engine only creates its two at
        // start-up, before anything of interest happens.
        let mut p = dir.to_path_buf();
        loop {
            s.dirs.entry(p.clone()).or_default();
            if !p.pop() || p.as_os_str().is_empty() {
                break;
            }
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(powered_off());
        }
        Ok(s.dir(dir)?.current.keys().cloned().collect())
    }

    fn open(&self, path: &Path, how: OpenMode) -> io::Result<Arc<dyn VFile>> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(powered_off());
        }
        let (parent, name) = split(path)?;
        let existing = s.dir(&parent)?.current.get(&name).copied();
        let ino = match (existing, how) {
            (Some(_), OpenMode::CreateNew) => {
                return Err(io::Error::new(io::ErrorKind::AlreadyExists, "file exists"));
            }
            (Some(ino), _) => ino,
            (None, OpenMode::Read | OpenMode::Write) => {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
            }
            (None, OpenMode::CreateNew | OpenMode::Create) => {
                s.tick()?;
                if s.take_fault(Fault::Create) {
                    return Err(eio("create"));
                }
                s.next_ino += 1;
                let ino = s.next_ino;
                s.inodes.insert(ino, Inode::default());
                let d = s.dir(&parent)?;
                d.current.insert(name.clone(), ino);
                d.pending.push(DirOp::Link(name, ino));
                ino
            }
        };
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            ino,
            boot: s.boot,
            writable: how != OpenMode::Read,
        }))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.tick()?;
        let (parent, name) = split(path)?;
        let d = s.dir(&parent)?;
        if d.current.remove(&name).is_none() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
        }
        d.pending.push(DirOp::Unlink(name));
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.tick()?;
        let (pf, nf) = split(from)?;
        let (pt, nt) = split(to)?;
        if pf != pt {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the simulated file system renames within one directory only",
            ));
        }
        let d = s.dir(&pf)?;
        let ino = d
            .current
            .remove(&nf)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        d.current.insert(nt.clone(), ino);
        d.pending.push(DirOp::Rename(nf, nt));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.tick()?;
        if s.take_fault(Fault::SyncDir) {
            return Err(eio("directory sync"));
        }
        s.dir_syncs += 1;
        let d = s.dir(dir)?;
        d.durable = d.current.clone();
        d.pending.clear();
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(powered_off());
        }
        let (parent, name) = split(path)?;
        Ok(s.dir(&parent)
            .map(|d| d.current.contains_key(&name))
            .unwrap_or(false))
    }

    fn lock(&self, path: &Path) -> io::Result<Option<Box<dyn DirLock>>> {
        let mut s = self.state.lock();
        if s.frozen {
            return Err(powered_off());
        }
        if !s.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(Box::new(SimLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        })))
    }
}

#[cfg(test)]
mod tests;
