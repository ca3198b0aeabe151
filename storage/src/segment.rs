//! The data directory: its lock, its metadata (shard count and hash, recorded at creation),
//! and the log's segment files `log/<first lsn, 20 digits>.log`, sortable by name.

use crate::api::OpenError;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const META_FILE: &str = "meta.json";
pub const LOCK_FILE: &str = "LOCK";
pub const LOG_DIR: &str = "log";
pub const DEFAULT_SHARDS: u32 = 128;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> OpenError {
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
    _lock: File,
}

impl DataDir {
    /// Create or open the data dir, take its lock, and check/record the shard count.
    pub fn open(root: &Path, shards: Option<u32>) -> Result<DataDir, OpenError> {
        fs::create_dir_all(root.join(LOG_DIR))
            .map_err(io(format!("creating data dir {}", root.display())))?;
        let lock_path = root.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(format!("opening {}", lock_path.display())))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(OpenError::Locked {
                    path: root.to_path_buf(),
                });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(io(format!("locking {}", lock_path.display()))(e));
            }
        }
        let meta_path = root.join(META_FILE);
        let meta = if meta_path.exists() {
            let text = fs::read_to_string(&meta_path)
                .map_err(io(format!("reading {}", meta_path.display())))?;
            let meta: Meta = serde_json::from_str(&text).map_err(|e| OpenError::Meta {
                path: meta_path.clone(),
                reason: e.to_string(),
            })?;
            if meta.hash != vx_proto::shard::HASH_NAME || meta.format != 1 || meta.shards == 0 {
                return Err(OpenError::Meta {
                    path: meta_path,
                    reason: format!(
                        "unsupported format {} / hash {:?} / shards {}",
                        meta.format, meta.hash, meta.shards
                    ),
                });
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
                format: 1,
                shards: shards.unwrap_or(DEFAULT_SHARDS).max(1),
                hash: vx_proto::shard::HASH_NAME.to_string(),
                writers: 1,
                dedup_key: random_u64(),
            };
            let text = serde_json::to_string_pretty(&meta).map_err(|e| OpenError::Meta {
                path: meta_path.clone(),
                reason: e.to_string(),
            })?;
            // Write-then-rename so a crash never leaves a half-written meta file.
            let tmp = root.join("meta.json.tmp");
            fs::write(&tmp, text).map_err(io(format!("writing {}", tmp.display())))?;
            File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io(format!("syncing {}", tmp.display())))?;
            fs::rename(&tmp, &meta_path).map_err(io(format!("renaming {}", tmp.display())))?;
            sync_dir(root).map_err(io(format!("syncing {}", root.display())))?;
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

    /// Segment files in LSN order: (first lsn, path).
    pub fn list_segments(&self) -> Result<Vec<(u64, PathBuf)>, OpenError> {
        let dir = self.log_dir();
        let mut out = Vec::new();
        let entries = fs::read_dir(&dir).map_err(io(format!("listing {}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(io(format!("listing {}", dir.display())))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(".log") else {
                continue;
            };
            if let Ok(lsn) = stem.parse::<u64>() {
                out.push((lsn, entry.path()));
            }
        }
        out.sort_unstable_by_key(|&(lsn, _)| lsn);
        Ok(out)
    }
}

pub fn segment_path(log_dir: &Path, first_lsn: u64) -> PathBuf {
    log_dir.join(format!("{first_lsn:020}.log"))
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A random seed without a dependency: std's RandomState is seeded from the OS.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// Open segment files shared with readers, by first LSN.
#[derive(Default)]
pub struct Segments {
    files: RwLock<BTreeMap<u64, (Arc<File>, PathBuf)>>,
}

impl Segments {
    pub fn insert(&self, first_lsn: u64, file: Arc<File>, path: PathBuf) {
        self.files.write().insert(first_lsn, (file, path));
    }

    pub fn get(&self, first_lsn: u64) -> Option<(Arc<File>, PathBuf)> {
        self.files.read().get(&first_lsn).cloned()
    }
}
