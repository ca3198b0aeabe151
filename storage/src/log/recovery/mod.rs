//! Start-up: rebuild the engine's state from the data dir, reading index files rather than
//! the log wherever it can.
//!
//! 1. Leftovers of interrupted writes go: `*.tmp` files, index files without a segment, and
//!    empty segments that do not continue the log (an interrupted roll).
//! 2. The carry file is verified; the streams it holds stay on disk.
//! 3. Every sealed segment's index file is verified (checksum, segment, length, LSN
//!    continuity) and folded into the streams' state: first the resets its table records
//!    that are new (the shard's streams are forgotten: the entries of that index file and
//!    later ones are from after the reset), then its entries; its table of applied origins
//!    replaces the one so far (each index file holds the whole table). A sealed segment
//!    without a valid index is scanned record by record and its index written again.
//! 4. The dedup tables are refilled from the newest sealed segments whose records are within
//!    `ingest.dedup_window` (at most as many ids as `ingest.dedup_memory` holds).
//! 5. The active (last) segment is scanned record by record, checking each record's length,
//!    checksum, version, type, LSN continuity and the `seq` continuity of its runs, and
//!    applied (origins and resets included: a reset found here also drops its shard's carry
//!    entries, in case the crash came before the writer did).
//!
//! # Torn tails and corruption (docs/API.md §7)
//! In the active segment, a bad record with no valid record anywhere after it is a torn tail
//! (a write cut short by a crash): it is truncated with a warning naming the file and offset.
//! A bad record followed by a valid one is corruption of data that was written whole: start-up
//! stops with the file and offset; `--repair` truncates there after saying exactly what it
//! drops. A bad record in a sealed segment is always corruption; `--repair` then also removes
//! every later segment (their `seq`s would follow a gap). Every removal is followed by a
//! directory fsync, and the recovered active segment is fsynced, so that what start-up
//! found is durable before anything is acknowledged on top of it.

mod fold;
mod tail;
mod walk;

pub(crate) use walk::{Walk, find_valid_after, read_records};

use crate::api::{OpenError, RecoveryReport, SourcePos, StorageConfig};
use crate::dedup::DedupTable;
use crate::index::carry::Carry;
use crate::index::idxfile::IdxContents;
use crate::log::active::Active;
use crate::log::segment::{self, DataDir, LogFile, ReadCaches, SegInfo, io_err};
use crate::log::state::{LogWriter, Published};
use crate::vfs::OpenMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vx_proto::shard::shard_of;

/// A bad record: where and why.
struct Bad {
    offset: u64,
    reason: String,
}

pub(crate) fn open(
    cfg: StorageConfig,
    now_ms: i64,
) -> Result<(LogWriter, RecoveryReport), OpenError> {
    let started = std::time::Instant::now();
    let mut dir = DataDir::open(Arc::clone(&cfg.vfs), &cfg.data_dir, cfg.shards)?;
    let mut report = RecoveryReport::default();
    // A repair changes the files; the next pass then recovers them like any others. Each
    // pass repairs one thing and there are few things to repair, but stay bounded anyway.
    for _ in 0..8 {
        let (mut engine, pass, removed) = pass(cfg.clone(), dir, now_ms, &mut report)?;
        match pass {
            Pass::Repaired => {
                let LogWriter { dir: d, .. } = engine;
                dir = d;
            }
            Pass::Done => {
                finish(&mut engine, removed)?;
                report.segments = engine.shared.segments.count() as u64;
                report.streams = engine.shared.index.listed() as u64 + engine.streams.orphans;
                report.took = started.elapsed();
                return Ok((engine, report));
            }
        }
    }
    Err(OpenError::Meta {
        path: cfg.data_dir.clone(),
        reason: "repair did not converge after 8 passes".into(),
    })
}

/// One recovery pass over the data dir's files.
fn pass(
    cfg: StorageConfig,
    dir: DataDir,
    now_ms: i64,
    report: &mut RecoveryReport,
) -> Result<(LogWriter, Pass, bool), OpenError> {
    let vfs = Arc::clone(&cfg.vfs);
    let shards = dir.meta.shards;
    let log_dir = dir.log_dir();
    let listing = vfs
        .list(&log_dir)
        .map_err(io_err(format!("listing {}", log_dir.display())))?;
    let mut segs: Vec<u64> = Vec::new();
    let mut idxs: hashbrown::HashSet<u64> = hashbrown::HashSet::new();
    let mut removed = false;
    for name in &listing {
        match segment::classify(name) {
            LogFile::Segment(lsn) => segs.push(lsn),
            LogFile::Index(lsn) => {
                idxs.insert(lsn);
            }
            LogFile::Temp(t) => {
                remove(
                    &*vfs,
                    &log_dir.join(&t),
                    "an interrupted write's temporary file",
                )?;
                report.removed_strays += 1;
                removed = true;
            }
            LogFile::Carry | LogFile::Other(_) => {}
        }
    }
    segs.sort_unstable();
    let orphan_idx: Vec<u64> = idxs
        .iter()
        .copied()
        .filter(|l| segs.binary_search(l).is_err())
        .collect();
    for lsn in orphan_idx {
        remove(
            &*vfs,
            &segment::idx_path(&log_dir, lsn),
            "an index file without its segment",
        )?;
        idxs.remove(&lsn);
        report.removed_strays += 1;
        removed = true;
    }
    let carry_path = log_dir.join(segment::CARRY_FILE);
    let carry = match Carry::open(&*vfs, &carry_path) {
        Ok(c) => c,
        Err(e) if cfg.repair && e.kind() == std::io::ErrorKind::InvalidData => {
            // The carry file holds what the log no longer has (orphans, tombstones of
            // retained-away segments): it cannot be rebuilt. Keep it aside for inspection.
            let aside = log_dir.join(format!("{}.damaged", segment::CARRY_FILE));
            tracing::warn!(
                file = %carry_path.display(),
                moved_to = %aside.display(),
                error = %e,
                "repair: dropping a damaged carry file: streams whose events were all retained \
                 away are no longer listed, and streams deleted before their tombstone's \
                 segment was retained away restart at seq 1 when written again"
            );
            vfs.rename(&carry_path, &aside)
                .and_then(|()| vfs.sync_dir(&log_dir))
                .map_err(io_err(format!("moving {} aside", carry_path.display())))?;
            Carry::default()
        }
        Err(e) => {
            return Err(OpenError::Corrupt {
                file: carry_path.clone(),
                offset: 0,
                reason: e.to_string(),
                loses: "the record of deleted and retained-away streams (their seq would restart)"
                    .into(),
            });
        }
    };
    if segs.is_empty() {
        let path = segment::segment_path(&log_dir, 1);
        vfs.open(&path, OpenMode::CreateNew)
            .map_err(io_err(format!("creating {}", path.display())))?;
        vfs.sync_dir(&log_dir)
            .map_err(io_err(format!("syncing {}", log_dir.display())))?;
        segs.push(1);
    }
    let first = segs[0];
    let shared = Arc::new(Published::new(
        shards,
        Arc::clone(&vfs),
        log_dir.clone(),
        first,
        ReadCaches {
            open_files: cfg.open_files,
            index_bytes: cfg.index_cache_bytes,
        },
        Arc::new(crate::features::Features::new(
            shards,
            cfg.features.clone(),
            cfg.max_feature_bytes,
        )),
    ));
    *shared.carry.write() = carry;
    let window_ms = i64::try_from(cfg.dedup_window.as_millis()).unwrap_or(i64::MAX);
    let per_shard_mem = cfg.dedup_memory / u64::from(shards);
    let first_path = segment::segment_path(&log_dir, first);
    let active = vfs
        .open(&first_path, OpenMode::Write)
        .map_err(io_err(format!("opening {}", first_path.display())))?;
    let mut engine = LogWriter {
        shared,
        vfs,
        log_dir,
        shards,
        dedup_key: dir.meta.dedup_key,
        active: Active::new(active, first),
        next_lsn: first,
        applied: SourcePos::Lsn(first.saturating_sub(1)),
        streams: Default::default(),
        dedup: (0..shards)
            .map(|_| DedupTable::new(per_shard_mem, window_ms))
            .collect(),
        cfg,
        dir,
        snapshots: None,
        limit_warned_ms: 0,
        origins: crate::log::state::Origins::new(shards),
    };
    let mut r = Recovery {
        engine: &mut engine,
        report,
        now_ms,
        window_ms,
        removed,
    };
    let pass = r.run(&segs, &idxs)?;
    let removed = r.removed;
    Ok((engine, pass, removed))
}

/// After the last pass: deleted streams to the carry file, counters, and fsyncs.
fn finish(engine: &mut LogWriter, removed: bool) -> Result<(), OpenError> {
    let shards = engine.shards;
    // Deleted streams whose tombstone is in a sealed segment belong in the carry file.
    let deleted: Vec<crate::index::carry::CarryEntry> = engine
        .streams
        .map
        .iter()
        .filter(|(name, s)| s.deleted && !engine.active.touched.contains_key(&**name))
        .map(|(name, s)| crate::index::carry::CarryEntry {
            name: name.to_string(),
            last_seq: s.last,
            floor: s.floor,
        })
        .collect();
    if !deleted.is_empty() {
        engine
            .carry_update(&deleted)
            .map_err(io_err("writing the carry file"))?;
        for e in &deleted {
            engine
                .shared
                .index
                .remove(shard_of(&e.name, shards), &e.name);
            engine.streams.map.remove(e.name.as_str());
        }
    }
    let carry = engine.shared.carry.read().clone();
    engine
        .streams
        .recount(&carry.all().map_err(io_err("reading the carry file"))?);
    // What recovery found becomes durable before anything is acknowledged on top of it
    // (after a kill -9 the page cache may still hold bytes no fsync covered).
    engine.active.file.sync_data().map_err(io_err(format!(
        "syncing log segment {}",
        engine.active.first
    )))?;
    if removed {
        engine
            .vfs
            .sync_dir(&engine.log_dir)
            .map_err(io_err(format!("syncing {}", engine.log_dir.display())))?;
    }
    engine.publish_horizons();
    engine.publish_origins();
    Ok(())
}

fn remove(vfs: &dyn crate::vfs::Vfs, path: &Path, what: &str) -> Result<(), OpenError> {
    tracing::warn!(file = %path.display(), "removing {what}");
    vfs.remove(path)
        .map_err(io_err(format!("removing {}", path.display())))
}

struct Recovery<'a> {
    engine: &'a mut LogWriter,
    report: &'a mut RecoveryReport,
    now_ms: i64,
    window_ms: i64,
    removed: bool,
}

/// How a recovery pass ended.
enum Pass {
    Done,
    /// `--repair` changed the files: recover again from the start.
    Repaired,
}

impl Recovery<'_> {
    fn log_dir(&self) -> PathBuf {
        self.engine.log_dir.clone()
    }

    fn remove_stray(&mut self, path: &Path, what: &str) -> Result<(), OpenError> {
        remove(&*self.engine.vfs, path, what)?;
        self.report.removed_strays += 1;
        self.removed = true;
        Ok(())
    }

    /// The next LSN a sealed segment's valid index file records, if it has one.
    fn indexed_next_lsn(&self, lsn: u64, len: u64) -> Option<u64> {
        let path = segment::idx_path(&self.engine.log_dir, lsn);
        let f = self.engine.vfs.open(&path, OpenMode::Read).ok()?;
        let c = IdxContents::read(&*f).ok()?;
        (c.header.segment == lsn && c.header.log_len == len).then_some(c.header.next_lsn)
    }

    fn run(&mut self, segs: &[u64], idxs: &hashbrown::HashSet<u64>) -> Result<Pass, OpenError> {
        let log_dir = self.log_dir();
        let vfs = Arc::clone(&self.engine.vfs);
        let mut kept: Vec<(u64, u64)> = Vec::new();
        for &lsn in segs {
            let path = segment::segment_path(&log_dir, lsn);
            let len = vfs
                .open(&path, OpenMode::Read)
                .and_then(|f| f.len())
                .map_err(io_err(format!("opening {}", path.display())))?;
            kept.push((lsn, len));
        }
        // Empty segments left by an interrupted roll: any but the last, and the last one
        // unless the segment before it is sealed and says the log continues there.
        let last = kept.len().saturating_sub(1);
        let mut strays = Vec::new();
        for (i, &(lsn, len)) in kept.iter().enumerate() {
            if len != 0 || kept.len() == 1 {
                continue;
            }
            let continues = i == last
                && i > 0
                && self.indexed_next_lsn(kept[i - 1].0, kept[i - 1].1) == Some(lsn);
            if !continues {
                strays.push(lsn);
            }
        }
        for lsn in &strays {
            self.remove_stray(
                &segment::segment_path(&log_dir, *lsn),
                "an empty segment of an interrupted roll",
            )?;
            if idxs.contains(lsn) {
                self.remove_stray(&segment::idx_path(&log_dir, *lsn), "its index file")?;
            }
        }
        kept.retain(|(lsn, _)| !strays.contains(lsn));
        for (i, &(lsn, len)) in kept.iter().enumerate() {
            let path = segment::segment_path(&log_dir, lsn);
            if i > 0 && self.engine.next_lsn != lsn {
                let reason = format!(
                    "segment starts at LSN {lsn}, expected {}",
                    self.engine.next_lsn
                );
                return self.corrupt_or_repair(&kept[i - 1], 0, reason, &kept[i..], false);
            }
            self.engine.shared.segments.insert(SegInfo {
                first_lsn: lsn,
                log_len: len,
                idx_len: 0,
                min_append_ms: i64::MAX,
                max_append_ms: i64::MIN,
                idx: None,
            });
            self.begin_segment(lsn, &path, i == 0)?;
            if i + 1 == kept.len() {
                if idxs.contains(&lsn) {
                    // Sealed, but the next segment was never created: it is still the active
                    // one, and gets an index when it is sealed again.
                    self.remove_stray(
                        &segment::idx_path(&log_dir, lsn),
                        "the index of the active segment",
                    )?;
                }
                if let Pass::Repaired = self.dedup_window(&kept)? {
                    return Ok(Pass::Repaired);
                }
                return self.scan_active(&path, len);
            }
            if idxs.contains(&lsn) && self.fold_index(lsn, len)? {
                continue;
            }
            tracing::warn!(segment = %path.display(), "rebuilding a missing or invalid index file");
            if let Some(bad) = self.scan(&path, len, false)? {
                return self.corrupt_or_repair(
                    &(lsn, len),
                    bad.offset,
                    bad.reason,
                    &kept[i + 1..],
                    true,
                );
            }
            self.engine
                .seal(false)
                .map_err(io_err(format!("writing the index of {}", path.display())))?;
        }
        Ok(Pass::Done)
    }

    fn begin_segment(&mut self, lsn: u64, path: &Path, first: bool) -> Result<(), OpenError> {
        let f = self
            .engine
            .vfs
            .open(path, OpenMode::Write)
            .map_err(io_err(format!("opening {}", path.display())))?;
        self.engine.start_segment(f, lsn);
        if first {
            self.engine.next_lsn = lsn;
        }
        Ok(())
    }
}
