//! The storage engine's side of the feature snapshots (docs/API.md §6, §7 restart): where they live
//! (`snapshots/` in the data dir), the snapshot thread that takes them, and start-up's rebuild
//! of the tables (the newest usable snapshot, then the log after it). The file format, its
//! writer, loader and checker are vx-features' (`vx_features::snapshot`); this module gives
//! them files through [`SnapIo`] and does the durable part (temp file, fsync, rename, dir
//! fsync).
//!
//! Start-up skips a corrupt, truncated or mismatched snapshot with a warning naming it; one
//! that covers records past the end of the log (its tail was lost: `fsync: interval`/`never`
//! after a power cut, or `--repair`) is removed, since its state includes writes that are
//! gone. With no usable snapshot the tables are rebuilt from the whole retained log. A
//! poisoned store takes no snapshot: its tables may miss a record the log has
//! (docs/FEATURES.md), and a snapshot would make that permanent.

use crate::api::OpenError;
use crate::apply::{Applier, Handed};
use crate::features::snapshot::{self as vxs, ReplayFrom, SnapFile, Unusable};
use crate::log::state::{LogWriter, Published};
use crate::segment::{self, io_err};
use crate::vfs::{OpenMode, VFile, Vfs};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub const SNAPSHOT_DIR: &str = "snapshots";

/// A snapshot on disk, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapInfo {
    pub path: PathBuf,
    pub covered_min: u64,
    pub covered_max: u64,
    pub created_ms: i64,
    pub bytes: u64,
}

/// A storage file as the snapshot format reads and writes it.
pub struct SnapIo<'a>(pub &'a dyn VFile);

impl SnapFile for SnapIo<'_> {
    fn read_exact_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, off)
    }
    fn write_all_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        self.0.write_all_at(buf, off)
    }
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }
}

/// Write a snapshot of `features` into `dir` (durably: temp file, fsync, rename, dir fsync).
pub(crate) fn write(
    vfs: &dyn Vfs,
    dir: &Path,
    features: &crate::features::Features,
    now_ms: i64,
) -> io::Result<SnapInfo> {
    vfs.create_dir_all(dir)?;
    let tmp = dir.join(vxs::TEMP_NAME);
    if vfs.exists(&tmp)? {
        vfs.remove(&tmp)?;
    }
    let f = vfs.open(&tmp, OpenMode::CreateNew)?;
    let written = vxs::write_to(features, &SnapIo(&*f), now_ms)?;
    f.sync_data()?;
    drop(f);
    let to = dir.join(vxs::file_name(written.covered_max));
    vfs.rename(&tmp, &to)?;
    vfs.sync_dir(dir)?;
    Ok(SnapInfo {
        path: to,
        covered_min: written.covered_min,
        covered_max: written.covered_max,
        created_ms: now_ms,
        bytes: written.bytes,
    })
}

/// Check a snapshot as start-up would load it (`veltrix check`).
pub fn verify(f: &dyn VFile, shards: u32) -> Result<vxs::Verified, vxs::VerifyError> {
    vxs::verify(&SnapIo(f), shards)
}

/// The snapshots in `dir`, newest (largest covered LSN) first, by name.
pub(crate) fn list(vfs: &dyn Vfs, dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let names = match vfs.list(dir) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<(u64, PathBuf)> = names
        .into_iter()
        .filter_map(|n| Some((vxs::parse_file_name(&n)?, dir.join(n))))
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.0));
    Ok(out)
}

/// What bootstrap did with the feature tables.
#[derive(Clone, Debug, Default)]
pub struct FeatureBoot {
    /// The snapshot loaded, if any.
    pub snapshot: Option<PathBuf>,
    /// Snapshots skipped (with why).
    pub skipped: Vec<(PathBuf, String)>,
    pub entities: u64,
    /// Records of the log replayed into the tables.
    pub replayed_records: u64,
    /// Declarations recomputed from the whole retained log.
    pub recomputed: Vec<String>,
    pub took: Duration,
}

/// Rebuild the feature tables at start-up: the newest usable snapshot, then the log after it.
pub(crate) fn bootstrap(
    engine: &LogWriter,
    applier: &mut Applier,
) -> Result<(FeatureBoot, Vec<SnapInfo>), OpenError> {
    let started = Instant::now();
    let shared = &engine.shared;
    let features = &shared.features;
    let vfs = &*engine.vfs;
    let dir = engine.dir.root.join(SNAPSHOT_DIR);
    let last_lsn = engine.next_lsn.saturating_sub(1);
    let segs = shared.segments.all();
    let first_lsn = segs.first().map_or(1, |s| s.first_lsn);
    let mut boot = FeatureBoot::default();
    let mut kept: Vec<SnapInfo> = Vec::new();
    let mut chosen: Option<vxs::Loaded> = None;
    let listed = list(vfs, &dir).map_err(io_err(format!("listing {}", dir.display())))?;
    for (_, path) in listed {
        let attempt = (|| -> Result<vxs::Loaded, Unusable> {
            let f = vfs.open(&path, OpenMode::Read)?;
            vxs::load(&SnapIo(&*f), features)
        })();
        match attempt {
            Ok(loaded) => {
                if loaded.covered_max > last_lsn {
                    let why = format!(
                        "it covers the log up to LSN {}, but the log ends at {last_lsn} (its tail was lost); removing it",
                        loaded.covered_max
                    );
                    tracing::warn!(snapshot = %path.display(), "skipping snapshot: {why}");
                    let _ = vfs.remove(&path);
                    boot.skipped.push((path, why));
                    continue;
                }
                let info = SnapInfo {
                    path: path.clone(),
                    covered_min: loaded.covered_min,
                    covered_max: loaded.covered_max,
                    created_ms: loaded.created_ms,
                    bytes: vfs
                        .open(&path, OpenMode::Read)
                        .and_then(|f| f.len())
                        .unwrap_or(0),
                };
                if chosen.is_some() {
                    kept.push(info);
                    continue;
                }
                if loaded.covered_min + 1 < first_lsn {
                    let why = format!(
                        "the log it needs from LSN {} was retained away (the log starts at {first_lsn})",
                        loaded.covered_min + 1
                    );
                    tracing::warn!(snapshot = %path.display(), "skipping snapshot: {why}");
                    boot.skipped.push((path, why));
                    continue;
                }
                boot.snapshot = Some(path);
                boot.entities = loaded.entities;
                kept.push(info);
                chosen = Some(loaded);
            }
            Err(e) => {
                tracing::warn!(snapshot = %path.display(), error = %e, "skipping snapshot");
                boot.skipped.push((path, e.to_string()));
            }
        }
    }
    let from = match chosen {
        Some(l) => features.install(l),
        None => {
            if first_lsn > 1 {
                tracing::warn!(
                    first_lsn,
                    "no usable snapshot: the feature tables are rebuilt from the retained log only, without what retention removed"
                );
            }
            ReplayFrom::everything(features)
        }
    };
    boot.recomputed = features
        .decls()
        .iter()
        .zip(&from.redo)
        .filter(|(_, r)| **r)
        .map(|(d, _)| d.name.clone())
        .collect();
    let any_redo = from.redo.iter().any(|&r| r) && boot.snapshot.is_some();
    let start = if any_redo {
        first_lsn
    } else {
        from.covered.iter().copied().min().unwrap_or(0) + 1
    };
    boot.replayed_records = replay_log(engine, applier, &segs, start, Arc::new(from))?;
    features.applied_through(last_lsn);
    boot.entities = features.stats().entities;
    boot.took = started.elapsed();
    kept.sort_by_key(|s| std::cmp::Reverse(s.covered_max));
    Ok((boot, kept))
}

/// Records start-up hands the apply threads at once, at most: as large as the writer's
/// largest groups, so that the threads wake once per many records.
const REPLAY_GROUP_BYTES: usize = 8 << 20;
const REPLAY_GROUP_RECORDS: usize = 4096;

/// A group of replayed records being gathered, with where each came from (to name it if the
/// tables refuse it).
struct Replayed {
    buf: Vec<u8>,
    recs: Vec<(usize, usize)>,
    places: Vec<(Arc<Path>, u64)>,
}

impl Replayed {
    fn new(buf: Vec<u8>) -> Replayed {
        Replayed {
            buf,
            recs: Vec::new(),
            places: Vec::new(),
        }
    }

    fn is_full(&self) -> bool {
        self.buf.len() >= REPLAY_GROUP_BYTES || self.recs.len() >= REPLAY_GROUP_RECORDS
    }

    /// Hand it to the apply threads; the first record they refuse is reported in `failed`.
    fn hand_over(
        self,
        applier: &mut Applier,
        replay: &Arc<ReplayFrom>,
        failed: &Arc<parking_lot::Mutex<Option<OpenError>>>,
    ) {
        if self.recs.is_empty() {
            return;
        }
        let (places, failed) = (self.places, Arc::clone(failed));
        applier.hand_over(Handed {
            buf: self.buf,
            recs: self.recs,
            replay: Some(Arc::clone(replay)),
            poison: None,
            finish: Box::new(move |outcomes| {
                let refused = outcomes
                    .into_iter()
                    .zip(places)
                    .find_map(|(o, place)| Some((o.error?, place)));
                if let Some(((_, e), (path, off))) = refused {
                    failed
                        .lock()
                        .get_or_insert_with(|| corrupt(&path, off, &e.to_string()));
                }
            }),
        });
    }
}

/// Replay the log's records from LSN `start` into the tables, through the apply threads,
/// as the writer hands them its groups (so recovery applies as the running process did).
/// Returns how many records were replayed.
fn replay_log(
    engine: &LogWriter,
    applier: &mut Applier,
    segs: &[segment::SegInfo],
    start: u64,
    replay: Arc<ReplayFrom>,
) -> Result<u64, OpenError> {
    let failed: Arc<parking_lot::Mutex<Option<OpenError>>> = Arc::default();
    let mut n = 0u64;
    let mut group = Replayed::new(applier.spare());
    for (i, seg) in segs.iter().enumerate() {
        let end = segs.get(i + 1).map_or(u64::MAX, |s| s.first_lsn - 1);
        if end < start || seg.log_len == 0 {
            continue;
        }
        let path: Arc<Path> = segment::segment_path(&engine.log_dir, seg.first_lsn).into();
        let file = engine
            .shared
            .segments
            .log_file(seg.first_lsn)
            .map_err(io_err(format!("opening {}", path.display())))?;
        let mut bad: Option<OpenError> = None;
        crate::recovery::read_records(&*file, &path, seg.log_len, &mut |off, item| {
            let crate::recovery::Walk::Record(h, rec) = item else {
                bad = Some(corrupt(&path, off, "bad record header"));
                return false;
            };
            if h.lsn < start {
                return true;
            }
            if !crate::record::crc_ok(&h, rec) {
                bad = Some(corrupt(&path, off, "record checksum mismatch"));
                return false;
            }
            if failed.lock().is_some() {
                return false;
            }
            let at = group.buf.len();
            group.buf.extend_from_slice(rec);
            group.recs.push((at, group.buf.len()));
            group.places.push((Arc::clone(&path), off));
            if group.is_full() {
                let full = std::mem::replace(&mut group, Replayed::new(applier.spare()));
                full.hand_over(applier, &replay, &failed);
            }
            n += 1;
            true
        })?;
        if let Some(e) = bad {
            applier.settle();
            return Err(e);
        }
    }
    group.hand_over(applier, &replay, &failed);
    applier.settle();
    match failed.lock().take() {
        Some(e) => Err(e),
        None => Ok(n),
    }
}

fn corrupt(path: &Path, off: u64, why: &str) -> OpenError {
    OpenError::Corrupt {
        file: path.to_path_buf(),
        offset: off,
        reason: why.to_string(),
        loses: "this record and everything after it".into(),
    }
}

/// What the snapshot thread is asked to do.
pub(crate) enum SnapMsg {
    /// Take a snapshot now; the reply carries its outcome.
    Now(std::sync::mpsc::Sender<io::Result<SnapInfo>>),
    /// Take a last snapshot and stop.
    Stop,
}

/// Snapshot bookkeeping the store reports (metrics).
#[derive(Default)]
pub(crate) struct SnapStatus {
    pub last_created_ms: std::sync::atomic::AtomicI64,
    pub written: std::sync::atomic::AtomicU64,
    pub failed: std::sync::atomic::AtomicU64,
    pub last_bytes: std::sync::atomic::AtomicU64,
}

/// The snapshot thread: every `interval`, on request (retention asks when it waits), and at
/// stop. Keeps the two newest snapshots and publishes the retention floor.
pub(crate) fn run(
    shared: Arc<Published>,
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    interval: Duration,
    mut kept: Vec<SnapInfo>,
    status: Arc<SnapStatus>,
    rx: flume::Receiver<SnapMsg>,
) {
    publish_floor(&shared, &kept);
    let mut last = Instant::now();
    loop {
        let msg = rx.recv_timeout(
            interval
                .saturating_sub(last.elapsed())
                .max(Duration::from_millis(1)),
        );
        let (reply, stop) = match msg {
            Ok(SnapMsg::Now(r)) => (Some(r), false),
            Ok(SnapMsg::Stop) | Err(flume::RecvTimeoutError::Disconnected) => (None, true),
            Err(flume::RecvTimeoutError::Timeout) => {
                if last.elapsed() < interval {
                    continue;
                }
                (None, false)
            }
        };
        last = Instant::now();
        let res = if shared.poison.is_set() {
            Err(io::Error::other(
                "the store is poisoned: its feature tables may miss a record of the log, and a snapshot would keep that past a restart",
            ))
        } else {
            write(&*vfs, &dir, &shared.features, vx_sys::now_ms())
        };
        match &res {
            Ok(info) => {
                status.written.fetch_add(1, Ordering::Relaxed);
                status
                    .last_created_ms
                    .store(info.created_ms, Ordering::Relaxed);
                status.last_bytes.store(info.bytes, Ordering::Relaxed);
                tracing::info!(
                    snapshot = %info.path.display(),
                    bytes = info.bytes,
                    covered_min = info.covered_min,
                    covered_max = info.covered_max,
                    took_ms = u64::try_from(last.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "snapshot written"
                );
                kept.retain(|k| k.path != info.path);
                kept.insert(0, info.clone());
                for old in kept.drain(2.min(kept.len())..) {
                    if let Err(e) = vfs.remove(&old.path) {
                        tracing::warn!(snapshot = %old.path.display(), error = %e, "cannot remove an old snapshot");
                    }
                }
                let _ = vfs.sync_dir(&dir);
                publish_floor(&shared, &kept);
            }
            Err(e) => {
                status.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "cannot write a snapshot; retrying at the next interval");
            }
        }
        if let Some(r) = reply {
            let _ = r.send(res);
        }
        if stop {
            break;
        }
    }
}

fn publish_floor(shared: &Published, kept: &[SnapInfo]) {
    let floor = kept.iter().map(|k| k.covered_min).min().unwrap_or(0);
    shared.snapshot_floor.store(floor, Ordering::Release);
}
