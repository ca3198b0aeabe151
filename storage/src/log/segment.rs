//! The data directory and its files: the lock, the metadata (shard count and hash, recorded at
//! creation), the log's segments `log/<first LSN, 20 digits>.log` (sortable by name) with
//! their index files `log/<first LSN>.idx`, and the carry file `log/streams.carry`; and the
//! registry of segments that readers resolve a segment's first LSN through (per segment a few
//! fixed fields in memory; files are opened on demand through a bounded descriptor cache).

use crate::api::OpenError;
use crate::index::idxfile::{self, Entry, IdxHeader, NodeRef};
use crate::index::pages::{IndexPages, PageStats};
use crate::vfs::{DirLock, FileCache, OpenMode, VFile, Vfs};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const META_FILE: &str = "meta.json";
pub const LOCK_FILE: &str = "LOCK";
pub const LOG_DIR: &str = "log";
pub const CARRY_FILE: &str = "streams.carry";
pub const DEFAULT_SHARDS: u32 = 128;
/// The data-dir format this build writes and reads: 2 (record version 2, index files).
pub const FORMAT: u32 = 2;

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> OpenError {
    let context = context.into();
    move |source| OpenError::Io { context, source }
}

/// What the data dir records about itself.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub format: u32,
    pub shards: u32,
    pub hash: String,
    /// Number of log writers (logs) of this data dir; 1 today.
    pub writers: u32,
    /// Key of the 128-bit dedup hashes, random per data dir so ids cannot be chosen to collide.
    pub dedup_key: u64,
}

/// The locked data dir. The lock is held as long as this value lives.
pub struct DataDir {
    pub root: PathBuf,
    pub meta: Meta,
    _lock: Box<dyn DirLock>,
}

impl DataDir {
    /// Create or open the data dir, take its lock, and check/record the shard count.
    pub fn open(vfs: Arc<dyn Vfs>, root: &Path, shards: Option<u32>) -> Result<DataDir, OpenError> {
        vfs.create_dir_all(&root.join(LOG_DIR))
            .map_err(io_err(format!("creating data dir {}", root.display())))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = vfs
            .lock(&lock_path)
            .map_err(io_err(format!("locking {}", lock_path.display())))?
            .ok_or_else(|| OpenError::Locked {
                path: root.to_path_buf(),
            })?;
        let meta_path = root.join(META_FILE);
        let meta_err = |reason: String| OpenError::Meta {
            path: meta_path.clone(),
            reason,
        };
        let exists = vfs
            .exists(&meta_path)
            .map_err(io_err(format!("reading {}", meta_path.display())))?;
        let meta = if exists {
            let f = vfs
                .open(&meta_path, OpenMode::Read)
                .map_err(io_err(format!("reading {}", meta_path.display())))?;
            let text = f
                .read_all()
                .map_err(io_err(format!("reading {}", meta_path.display())))?;
            let meta: Meta = serde_json::from_slice(&text).map_err(|e| meta_err(e.to_string()))?;
            if meta.format == 1 {
                return Err(meta_err(
                    "this data dir was written by an earlier development version (format 1, \
                     log records of version 1); this version reads format 2 only: export its \
                     streams with the earlier version and ingest them again"
                        .into(),
                ));
            }
            if meta.hash != vx_proto::shard::HASH_NAME || meta.format != FORMAT || meta.shards == 0
            {
                return Err(meta_err(format!(
                    "unsupported format {} / hash {:?} / shards {}",
                    meta.format, meta.hash, meta.shards
                )));
            }
            if let Some(requested) = shards
                && requested != meta.shards
            {
                return Err(OpenError::ShardMismatch {
                    path: root.to_path_buf(),
                    recorded: meta.shards,
                    requested,
                });
            }
            meta
        } else {
            let meta = Meta {
                format: FORMAT,
                shards: shards.unwrap_or(DEFAULT_SHARDS).max(1),
                hash: vx_proto::shard::HASH_NAME.to_string(),
                writers: 1,
                dedup_key: random_u64(),
            };
            let text = serde_json::to_vec_pretty(&meta).map_err(|e| meta_err(e.to_string()))?;
            // Write, sync, rename, sync the directory: a crash never leaves a half-written
            // meta file, and a created data dir stays created.
            let tmp = root.join("meta.json.tmp");
            write_durably(&*vfs, &tmp, &meta_path, &text)
                .map_err(io_err(format!("writing {}", meta_path.display())))?;
            meta
        };
        Ok(DataDir {
            root: root.to_path_buf(),
            meta,
            _lock: lock,
        })
    }

    pub fn log_dir(&self) -> PathBuf {
        self.root.join(LOG_DIR)
    }
}

/// Write `bytes` to `tmp`, fsync it, rename it over `to`, fsync the directory.
pub fn write_durably(vfs: &dyn Vfs, tmp: &Path, to: &Path, bytes: &[u8]) -> io::Result<()> {
    if vfs.exists(tmp)? {
        vfs.remove(tmp)?;
    }
    let f = vfs.open(tmp, OpenMode::CreateNew)?;
    f.write_all_at(bytes, 0)?;
    f.sync_data()?;
    drop(f);
    vfs.rename(tmp, to)?;
    let dir = to.parent().unwrap_or(Path::new("."));
    vfs.sync_dir(dir)
}

pub fn segment_path(log_dir: &Path, first_lsn: u64) -> PathBuf {
    log_dir.join(format!("{first_lsn:020}.log"))
}

pub fn idx_path(log_dir: &Path, first_lsn: u64) -> PathBuf {
    log_dir.join(format!("{first_lsn:020}.idx"))
}

/// What a file in the log dir is, by its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogFile {
    Segment(u64),
    Index(u64),
    Carry,
    /// A temporary file of an interrupted write (`*.tmp`).
    Temp(String),
    Other(String),
}

pub fn classify(name: &str) -> LogFile {
    let lsn = |stem: &str| {
        (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
            .then(|| stem.parse::<u64>().ok())
            .flatten()
    };
    if name == CARRY_FILE {
        LogFile::Carry
    } else if name.ends_with(".tmp") {
        LogFile::Temp(name.to_string())
    } else if let Some(n) = name.strip_suffix(".log").and_then(lsn) {
        LogFile::Segment(n)
    } else if let Some(n) = name.strip_suffix(".idx").and_then(lsn) {
        LogFile::Index(n)
    } else {
        LogFile::Other(name.to_string())
    }
}

/// A random seed without a dependency: std's RandomState is seeded from the OS.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// What memory keeps about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegInfo {
    pub first_lsn: u64,
    /// Bytes of the segment (of the active one: as of the last update).
    pub log_len: u64,
    pub idx_len: u64,
    pub min_append_ms: i64,
    pub max_append_ms: i64,
    /// The sealed segment's index header; `None` for the active segment.
    pub idx: Option<IdxHeader>,
}

/// The segments readers can reach, by first LSN.
pub struct Segments {
    /// Shared with each read's walk, which names its file only in an error.
    pub log_dir: Arc<Path>,
    map: RwLock<BTreeMap<u64, SegInfo>>,
    /// Keyed by (first LSN, is the index file).
    files: FileCache<(u64, bool)>,
    /// Pages of sealed index files that readers touched.
    pages: Arc<IndexPages>,
}

/// The bounds of what readers keep: descriptors and index pages.
#[derive(Clone, Copy, Debug)]
pub struct ReadCaches {
    /// Descriptors of sealed segments and index files (`StorageConfig::open_files`).
    pub open_files: usize,
    /// Bytes of index pages (`storage.index_cache_bytes`; 0: none).
    pub index_bytes: u64,
}

impl Segments {
    pub fn new(vfs: Arc<dyn Vfs>, log_dir: PathBuf, caches: ReadCaches) -> Self {
        Segments {
            log_dir: log_dir.into(),
            map: RwLock::new(BTreeMap::new()),
            files: FileCache::new(vfs, caches.open_files),
            pages: Arc::new(IndexPages::new(caches.index_bytes)),
        }
    }

    pub fn insert(&self, info: SegInfo) {
        self.map.write().insert(info.first_lsn, info);
    }

    pub fn update(&self, first_lsn: u64, f: impl FnOnce(&mut SegInfo)) {
        if let Some(i) = self.map.write().get_mut(&first_lsn) {
            f(i);
        }
    }

    pub fn remove(&self, first_lsn: u64) -> Option<SegInfo> {
        let info = self.map.write().remove(&first_lsn);
        self.files.evict(&(first_lsn, false));
        self.files.evict(&(first_lsn, true));
        self.pages.forget(first_lsn);
        info
    }

    pub fn get(&self, first_lsn: u64) -> Option<SegInfo> {
        self.map.read().get(&first_lsn).copied()
    }

    /// Every segment, oldest first.
    pub fn all(&self) -> Vec<SegInfo> {
        self.map.read().values().copied().collect()
    }

    pub fn oldest(&self) -> Option<SegInfo> {
        self.map.read().values().next().copied()
    }

    pub fn count(&self) -> usize {
        self.map.read().len()
    }

    /// Bytes of every segment and index file.
    pub fn total_bytes(&self) -> u64 {
        self.map
            .read()
            .values()
            .map(|s| s.log_len + s.idx_len)
            .sum()
    }

    /// Descriptors the cache holds now.
    pub fn open_files(&self) -> usize {
        self.files.len()
    }

    fn gone(first_lsn: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("segment {first_lsn} was removed by retention"),
        )
    }

    /// A segment's log file, for reading.
    pub fn log_file(&self, first_lsn: u64) -> io::Result<Arc<dyn VFile>> {
        if self.get(first_lsn).is_none() {
            return Err(Self::gone(first_lsn));
        }
        self.files.get(&(first_lsn, false), || {
            segment_path(&self.log_dir, first_lsn)
        })
    }

    /// A sealed segment's index file and header, read through the index page cache: what
    /// readers look things up in.
    pub fn idx(&self, first_lsn: u64) -> io::Result<(Arc<dyn VFile>, IdxHeader)> {
        let (f, h) = self.idx_uncached(first_lsn)?;
        Ok((self.pages.file(first_lsn, f, h.file_len()), h))
    }

    /// A sealed segment's index file and header, read from the file: for reading it whole
    /// (retention), which would only push hot pages out of the cache.
    pub fn idx_uncached(&self, first_lsn: u64) -> io::Result<(Arc<dyn VFile>, IdxHeader)> {
        let h = self
            .get(first_lsn)
            .ok_or_else(|| Self::gone(first_lsn))?
            .idx
            .ok_or_else(|| io::Error::other(format!("segment {first_lsn} is not sealed")))?;
        let f = self
            .files
            .get(&(first_lsn, true), || idx_path(&self.log_dir, first_lsn))?;
        Ok((f, h))
    }

    /// Every span of a sealed node, decoded, from the index page cache (`None`: a node of
    /// more than `pages::DECODED_SPANS` spans, or no cache; search its spans in the file).
    pub fn node_spans(
        &self,
        seg: u64,
        file: &dyn VFile,
        h: &IdxHeader,
        e: &Entry,
    ) -> io::Result<Option<Arc<[idxfile::Span]>>> {
        self.pages.spans(seg, file, h, e)
    }

    /// The sample of sealed `span` a walk to `seq` starts from ([`idxfile::best_sample`]),
    /// found in its samples decoded in the index page cache when the cache keeps them.
    pub fn best_sample(
        &self,
        seg: u64,
        file: &dyn VFile,
        h: &IdxHeader,
        span: &idxfile::Span,
        seq: u64,
    ) -> io::Result<Option<idxfile::Sample>> {
        // A span without samples has no sample to start from: nothing to look up.
        if seq <= span.first_seq || span.samples_n == 0 || h.version < idxfile::VERSION_SAMPLES {
            return Ok(None);
        }
        match self.pages.samples(seg, file, h, span)? {
            Some(all) => Ok(crate::index::samples::best(&all, seq)),
            None => idxfile::best_sample(file, h, span, seq),
        }
    }

    /// What the index page cache holds and did.
    pub fn index_pages(&self) -> PageStats {
        self.pages.stats()
    }

    /// A stream's node in a sealed segment.
    pub fn entry(&self, node: NodeRef, stream: &str) -> io::Result<Entry> {
        if self.get(node.seg).is_none() {
            // Retention removed it: `NotFound`, whatever the cache still holds.
            return Err(Self::gone(node.seg));
        }
        let found = self.pages.entry(node.seg, stream, || {
            let (f, h) = self.idx(node.seg)?;
            idxfile::lookup(&*f, &h, stream)
        })?;
        found.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "index of segment {} has no entry for stream {stream:?}",
                    node.seg
                ),
            )
        })
    }
}
