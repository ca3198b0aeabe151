//! Start-up: rebuild the engine's state from the data dir, reading index files rather than
//! the log wherever it can.
//!
//! 1. Leftovers of interrupted writes go: `*.tmp` files, index files without a segment, and
//!    empty segments that do not continue the log (an interrupted roll).
//! 2. The carry file is verified; the streams it holds stay on disk.
//! 3. Every sealed segment's index file is verified (checksum, segment, length, LSN
//!    continuity) and folded into the streams' state. A sealed segment without a valid index
//!    is scanned record by record and its index written again.
//! 4. The dedup tables are refilled from the newest sealed segments whose records are within
//!    `ingest.dedup_window` (at most as many ids as `ingest.dedup_memory` holds).
//! 5. The active (last) segment is scanned record by record, checking each record's length,
//!    checksum, version, type, LSN continuity and the `seq` continuity of its runs.
//!
//! # Torn tails and corruption (SPEC §7)
//! In the active segment, a bad record with no valid record anywhere after it is a torn tail
//! (a write cut short by a crash): it is truncated with a warning naming the file and offset.
//! A bad record followed by a valid one is corruption of data that was written whole: start-up
//! stops with the file and offset; `--repair` truncates there after saying exactly what it
//! drops. A bad record in a sealed segment is always corruption; `--repair` then also removes
//! every later segment (their `seq`s would follow a gap). Every removal is followed by a
//! directory fsync, and the recovered active segment is fsynced, so that what start-up
//! found is durable before anything is acknowledged on top of it.

use crate::api::{OpenError, RecoveryReport, StorageConfig};
use crate::dedup::{self, DedupTable};
use crate::index::carry::Carry;
use crate::index::idxfile::{Agg, IdxContents};
use crate::index::memory::{Placed, SealedTs};
use crate::log::record::{self, Decode, HEADER_LEN, RecordType};
use crate::log::segment::{self, DataDir, LogFile, SegInfo, io_err};
use crate::log::state::{LogWriter, Published, WState};
use crate::vfs::{OpenMode, VFile};
use hashbrown::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vx_proto::shard::shard_of;

/// Bytes read at a time when scanning a segment.
const SCAN_CHUNK: usize = 4 << 20;

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
                report.streams = engine.shared.index.listed() as u64 + engine.carry_orphans;
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
        cfg.open_files,
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
        active,
        active_first: first,
        active_len: 0,
        active_append: Agg::EMPTY,
        active_ids: 0,
        next_lsn: first,
        streams: HashMap::new(),
        dedup: (0..shards)
            .map(|_| DedupTable::new(per_shard_mem, window_ms))
            .collect(),
        touched: HashMap::new(),
        active_spans: 0,
        live: 0,
        carry_orphans: 0,
        cfg,
        dir,
        snap_tx: None,
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
        .iter()
        .filter(|(name, s)| s.deleted && !engine.touched.contains_key(&**name))
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
            engine.streams.remove(e.name.as_str());
        }
    }
    let carry = engine.shared.carry.read().clone();
    engine.live = engine.streams.values().filter(|s| !s.deleted).count() as u64;
    engine.carry_orphans = carry
        .all()
        .map_err(io_err("reading the carry file"))?
        .iter()
        .filter(|e| !e.is_tombstone() && !engine.streams.contains_key(e.name.as_str()))
        .count() as u64;
    // What recovery found becomes durable before anything is acknowledged on top of it
    // (after a kill -9 the page cache may still hold bytes no fsync covered).
    engine.active.sync_data().map_err(io_err(format!(
        "syncing log segment {}",
        engine.active_first
    )))?;
    if removed {
        engine
            .vfs
            .sync_dir(&engine.log_dir)
            .map_err(io_err(format!("syncing {}", engine.log_dir.display())))?;
    }
    engine.publish_horizons();
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
        self.engine.active = f;
        self.engine.active_first = lsn;
        self.engine.active_len = 0;
        self.engine.active_append = Agg::EMPTY;
        self.engine.active_ids = 0;
        if first {
            self.engine.next_lsn = lsn;
        }
        self.engine.set_active_seg(lsn);
        Ok(())
    }

    /// Fold a sealed segment's index file into the streams' state; false if the index is
    /// missing or does not match the segment (it is then rebuilt).
    fn fold_index(&mut self, lsn: u64, len: u64) -> Result<bool, OpenError> {
        let path = segment::idx_path(&self.log_dir(), lsn);
        let contents = self
            .engine
            .vfs
            .open(&path, OpenMode::Read)
            .and_then(|f| IdxContents::read(&*f));
        let contents = match contents {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "invalid index file");
                return Ok(false);
            }
        };
        let h = contents.header;
        if h.segment != lsn || h.log_len != len || h.next_lsn < lsn {
            tracing::warn!(file = %path.display(), "index file does not match its segment");
            return Ok(false);
        }
        let entries = contents
            .entries()
            .map_err(io_err(format!("reading {}", path.display())))?;
        for e in &entries {
            let shard = shard_of(&e.name, self.engine.shards);
            let ws = self.load(&e.name)?;
            let mut st = ws;
            self.engine
                .shared
                .index
                .upsert(shard, &e.name, ws.floor, |s| {
                    s.last_seq = s.last_seq.max(ws.last);
                    if e.is_tombstone() && e.floor >= s.floor {
                        s.floor = e.floor;
                        s.last_seq = s.last_seq.max(e.floor);
                        s.deleted = true;
                        s.events = 0;
                        s.bytes = 0;
                        s.first_seq = e.floor + 1;
                        s.sealed_ts = SealedTs::Known(Agg::EMPTY);
                        s.first_depth = s.head.map_or(1, |h| h.node.depth + 1);
                    }
                    if e.has_events() {
                        if e.last_seq > s.floor {
                            if s.events == 0 {
                                s.first_seq = e.first_seq;
                                s.first_depth = e.depth;
                            }
                            s.events += e.count;
                            s.bytes += e.bytes;
                            s.deleted = false;
                            s.last_seq = s.last_seq.max(e.last_seq);
                            if let (SealedTs::Known(a), Some(own)) = (s.sealed_ts, e.own) {
                                s.sealed_ts = SealedTs::Known(a.merge(own));
                            }
                        }
                        s.head = Some(crate::index::chain::Head::from_entry(lsn, e));
                    }
                    st = WState {
                        last: s.last_seq,
                        floor: s.floor,
                        deleted: s.deleted,
                    };
                });
            self.engine.set_state(&e.name, st);
        }
        self.engine.shared.segments.update(lsn, |s| {
            s.idx = Some(h);
            s.idx_len = h.file_len();
            s.min_append_ms = h.min_append_ms;
            s.max_append_ms = h.max_append_ms;
        });
        self.engine.next_lsn = h.next_lsn;
        self.report.index_files += 1;
        Ok(true)
    }

    /// The writer state of a stream that the retained index files or the carry file know of.
    fn known(&mut self, name: &str) -> Result<Option<WState>, OpenError> {
        if let Some(s) = self.engine.streams.get(name) {
            return Ok(Some(*s));
        }
        Ok(self
            .engine
            .shared
            .carry_get(name)
            .map_err(io_err("reading the carry file"))?
            .map(|e| WState::from(&e)))
    }

    /// A stream's writer state, loaded from the carry file the first time it is seen.
    fn load(&mut self, name: &str) -> Result<WState, OpenError> {
        // `LogWriter::load` keeps a state it has already; otherwise it takes the carried one.
        let carried = self.known(name)?;
        Ok(self.engine.load(name, carried))
    }

    /// Refill the dedup tables from the newest sealed segments within the window (`kept`:
    /// every segment, the active one last).
    fn dedup_window(&mut self, kept: &[(u64, u64)]) -> Result<Pass, OpenError> {
        let sealed = &kept[..kept.len().saturating_sub(1)];
        let capacity = self
            .engine
            .dedup
            .iter()
            .map(DedupTable::capacity)
            .sum::<usize>() as u64;
        let oldest = self.now_ms.saturating_sub(self.window_ms);
        let mut chosen: Vec<(u64, u64)> = Vec::new();
        let mut ids = 0u64;
        for &(lsn, len) in sealed.iter().rev() {
            let Some(info) = self.engine.shared.segments.get(lsn) else {
                continue;
            };
            let Some(h) = info.idx else { continue };
            if h.max_append_ms < oldest || ids >= capacity {
                break;
            }
            if h.ids > 0 {
                chosen.push((lsn, len));
            }
            ids += h.ids;
        }
        let log_dir = self.log_dir();
        for &(lsn, len) in chosen.iter().rev() {
            let path = segment::segment_path(&log_dir, lsn);
            let f = self
                .engine
                .vfs
                .open(&path, OpenMode::Read)
                .map_err(io_err(format!("opening {}", path.display())))?;
            let mut bad = None;
            let seed = self.engine.dedup_key;
            let (now, shards) = (self.now_ms, self.engine.shards);
            let dedup = &mut self.engine.dedup;
            read_records(&*f, &path, len, &mut |off, item| {
                let (h, rec) = match item {
                    Walk::Record(h, rec) if record::crc_ok(&h, rec) => (h, rec),
                    Walk::Record(..) => {
                        bad = Some(Bad {
                            offset: off,
                            reason: "checksum mismatch".into(),
                        });
                        return false;
                    }
                    Walk::Bad(why) => {
                        bad = Some(Bad {
                            offset: off,
                            reason: why.into(),
                        });
                        return false;
                    }
                };
                if h.ty == RecordType::Events {
                    for run in record::runs(rec, h.n).flatten() {
                        let shard = shard_of(run.stream, shards);
                        let Some(t) = dedup.get_mut(shard as usize) else {
                            continue;
                        };
                        for (i, ev) in vx_proto::packed::events(run.events, run.stream).enumerate()
                        {
                            if let Ok(ev) = ev
                                && let Some(id) = ev.id
                            {
                                let key = dedup::key(seed, run.stream, id);
                                t.insert_newer(key, run.base_seq + i as u64, h.append_ms, now);
                            }
                        }
                    }
                }
                true
            })?;
            if let Some(b) = bad {
                let i = kept
                    .iter()
                    .position(|&(l, _)| l == lsn)
                    .unwrap_or(kept.len());
                let later = kept.get(i + 1..).unwrap_or_default();
                return self.corrupt_or_repair(&(lsn, len), b.offset, b.reason, later, true);
            }
            self.report.scanned_segments += 1;
        }
        Ok(Pass::Done)
    }

    /// Scan the active segment; cut a torn tail, refuse (or repair) corruption.
    fn scan_active(&mut self, path: &Path, len: u64) -> Result<Pass, OpenError> {
        let Some(bad) = self.scan(path, len, true)? else {
            return Ok(Pass::Done);
        };
        let expected = self.engine.next_lsn;
        let f = self
            .engine
            .vfs
            .open(path, OpenMode::Read)
            .map_err(io_err(format!("opening {}", path.display())))?;
        let later = find_valid_after(&*f, bad.offset, len, expected)
            .map_err(io_err(format!("reading {}", path.display())))?;
        let lose = len - bad.offset;
        match later {
            None => tracing::warn!(
                file = %path.display(),
                offset = bad.offset,
                bytes = lose,
                "truncating the torn tail of the active log segment: {}",
                bad.reason
            ),
            Some((at, lsn)) if !self.engine.cfg.repair => {
                return Err(OpenError::Corrupt {
                    file: path.to_path_buf(),
                    offset: bad.offset,
                    reason: format!(
                        "{} (not a torn tail: a valid record, LSN {lsn}, follows at offset {at})",
                        bad.reason
                    ),
                    loses: format!(
                        "{lose} bytes of this segment: every record from LSN {expected} on"
                    ),
                });
            }
            Some((at, lsn)) => tracing::warn!(
                file = %path.display(),
                offset = bad.offset,
                "repair: dropping a corrupt record ({}) and everything after it in this segment: \
                 {lose} bytes, every record from LSN {expected} on (a valid record, LSN {lsn}, \
                 followed at offset {at})",
                bad.reason
            ),
        }
        self.truncate(path, bad.offset, len)?;
        Ok(Pass::Done)
    }

    fn truncate(&mut self, path: &Path, at: u64, len: u64) -> Result<(), OpenError> {
        let f = self
            .engine
            .vfs
            .open(path, OpenMode::Write)
            .map_err(io_err(format!("opening {}", path.display())))?;
        f.set_len(at)
            .and_then(|()| f.sync_data())
            .map_err(io_err(format!("truncating {}", path.display())))?;
        self.report.truncated_bytes += len - at;
        self.engine.active_len = at;
        let lsn = self.engine.active_first;
        self.engine.shared.segments.update(lsn, |s| s.log_len = at);
        Ok(())
    }

    /// A bad record at `offset` of segment `at` outside the active tail (or a segment that
    /// does not continue the log, `offset` 0 of the one before it with `truncate` false):
    /// an error saying what `--repair` would drop, or with `--repair` the repair itself —
    /// that segment truncated there (with `truncate`) and every `later` segment removed.
    fn corrupt_or_repair(
        &mut self,
        at: &(u64, u64),
        offset: u64,
        reason: String,
        later: &[(u64, u64)],
        truncate: bool,
    ) -> Result<Pass, OpenError> {
        let log_dir = self.log_dir();
        let (lsn, len) = *at;
        let path = segment::segment_path(&log_dir, lsn);
        let later_bytes: u64 = later.iter().map(|&(_, l)| l).sum();
        let files: Vec<String> = later
            .iter()
            .map(|&(l, b)| {
                format!(
                    "{} ({b} bytes)",
                    segment::segment_path(&log_dir, l).display()
                )
            })
            .collect();
        let here = if truncate {
            format!(
                "{} bytes of this segment from offset {offset} and ",
                len - offset
            )
        } else {
            String::new()
        };
        let loses = format!(
            "{here}{} later segment(s), {later_bytes} bytes{}{}",
            later.len(),
            if files.is_empty() { "" } else { ": " },
            files.join(", ")
        );
        if !self.engine.cfg.repair {
            return Err(OpenError::Corrupt {
                file: path,
                offset,
                reason,
                loses,
            });
        }
        tracing::warn!(file = %path.display(), offset, "repair: {reason}; dropping {loses}");
        for &(l, _) in later {
            for p in [
                segment::segment_path(&log_dir, l),
                segment::idx_path(&log_dir, l),
            ] {
                if self.engine.vfs.exists(&p).unwrap_or(false) {
                    self.engine
                        .vfs
                        .remove(&p)
                        .map_err(io_err(format!("removing {}", p.display())))?;
                }
            }
        }
        if truncate {
            let f = self
                .engine
                .vfs
                .open(&path, OpenMode::Write)
                .map_err(io_err(format!("opening {}", path.display())))?;
            f.set_len(offset)
                .and_then(|()| f.sync_data())
                .map_err(io_err(format!("truncating {}", path.display())))?;
            self.report.truncated_bytes += len - offset;
        }
        self.engine
            .vfs
            .sync_dir(&log_dir)
            .map_err(io_err(format!("syncing {}", log_dir.display())))?;
        Ok(Pass::Repaired)
    }

    /// Apply every record of `path` (the segment being scanned is the engine's active one);
    /// returns the first bad record, if any. Records before it are applied.
    fn scan(&mut self, path: &Path, len: u64, active: bool) -> Result<Option<Bad>, OpenError> {
        let f = self
            .engine
            .vfs
            .open(path, OpenMode::Read)
            .map_err(io_err(format!("opening {}", path.display())))?;
        let mut bad: Option<Bad> = None;
        let mut apply_err: Option<OpenError> = None;
        let (window_from, now) = (self.now_ms.saturating_sub(self.window_ms), self.now_ms);
        read_records(&*f, path, len, &mut |off, item| {
            let fail = |reason: String| {
                Some(Bad {
                    offset: off,
                    reason,
                })
            };
            let (h, rec) = match item {
                Walk::Bad(why) => {
                    bad = fail(why.into());
                    return false;
                }
                Walk::Record(h, rec) => (h, rec),
            };
            if !record::crc_ok(&h, rec) {
                bad = fail("checksum mismatch".into());
                return false;
            }
            if h.lsn != self.engine.next_lsn {
                bad = fail(format!(
                    "record LSN {} where {} was expected",
                    h.lsn, self.engine.next_lsn
                ));
                return false;
            }
            match self.apply_record(off, &h, rec, active && h.append_ms >= window_from, now) {
                Ok(Ok(())) => true,
                Ok(Err(why)) => {
                    bad = fail(why);
                    false
                }
                Err(e) => {
                    apply_err = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = apply_err {
            return Err(e);
        }
        self.report.scanned_segments += 1;
        Ok(bad)
    }

    /// Apply one verified record at `off` of the active segment. `Ok(Err)`: the record is bad.
    fn apply_record(
        &mut self,
        off: u64,
        h: &record::Header,
        rec: &[u8],
        remember_ids: bool,
        now: i64,
    ) -> Result<Result<(), String>, OpenError> {
        let shards = self.engine.shards;
        match h.ty {
            // Feature writes change no stream; they are applied to the feature tables after
            // recovery (snapshot.rs). Here they only have to be well-formed.
            RecordType::FeaturePut => {
                if let Err(e) = record::feature_put(rec, h.n) {
                    return Ok(Err(decode_reason(e)));
                }
            }
            RecordType::FeatureDelete => {
                if let Err(e) = record::feature_delete(rec) {
                    return Ok(Err(decode_reason(e)));
                }
            }
            RecordType::Tombstone => {
                let (stream, last) = match record::tombstone(rec) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(decode_reason(e))),
                };
                let st = self.load(stream)?;
                self.engine.set_state(
                    stream,
                    WState {
                        last: st.last.max(last),
                        floor: last,
                        deleted: true,
                    },
                );
                self.engine
                    .apply_tombstone(shard_of(stream, shards), stream, last);
            }
            RecordType::Events => {
                // Check every run before applying any, so a bad record leaves nothing behind.
                let mut runs = Vec::new();
                let mut seen: HashMap<&str, u64> = HashMap::new();
                for run in record::runs(rec, h.n) {
                    let run = match run {
                        Ok(r) => r,
                        Err(e) => return Ok(Err(decode_reason(e))),
                    };
                    let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
                    let mut n = 0u32;
                    for ev in vx_proto::packed::events(run.events, run.stream) {
                        match ev {
                            Ok(ev) => {
                                min_ts = min_ts.min(ev.ts);
                                max_ts = max_ts.max(ev.ts);
                                n += 1;
                            }
                            Err(e) => return Ok(Err(decode_reason(e.into()))),
                        }
                    }
                    if n != run.count || n == 0 {
                        return Ok(Err("run length does not match its events".into()));
                    }
                    let prev = match seen.get(run.stream) {
                        Some(&l) => Some(l),
                        None => self.known(run.stream)?.map(|st| st.last),
                    };
                    // A stream nothing retained knows of (no index entry, not in the carry
                    // file) may start anywhere: retention removed the segments holding its
                    // earlier events while it still had events in the active segment.
                    let prev = prev.unwrap_or(run.base_seq.saturating_sub(1));
                    if run.base_seq != prev + 1 {
                        return Ok(Err(format!(
                            "run of stream {:?} starts at seq {}, expected {}",
                            run.stream,
                            run.base_seq,
                            prev + 1
                        )));
                    }
                    seen.insert(run.stream, run.base_seq + u64::from(run.count) - 1);
                    runs.push((run, min_ts, max_ts));
                }
                let seed = self.engine.dedup_key;
                for (run, min_ts, max_ts) in runs {
                    let shard = shard_of(run.stream, shards);
                    let st = self.load(run.stream)?;
                    let last = run.base_seq + u64::from(run.count) - 1;
                    self.engine.set_state(
                        run.stream,
                        WState {
                            last,
                            floor: st.floor,
                            deleted: false,
                        },
                    );
                    let off32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                    self.engine.apply_run(
                        shard,
                        run.stream,
                        st.floor,
                        Placed {
                            first_seq: run.base_seq,
                            count: run.count,
                            off: off32(off + run.at as u64),
                            len: off32(run.len as u64),
                            rec_end: off32((h.len - run.at) as u64),
                            min_ts,
                            max_ts,
                            bytes: run.events.len() as u64,
                        },
                    );
                    let mut ids = 0u64;
                    for (i, ev) in vx_proto::packed::events(run.events, run.stream).enumerate() {
                        let Ok(ev) = ev else { continue };
                        let Some(id) = ev.id else { continue };
                        ids += 1;
                        if remember_ids && let Some(t) = self.engine.dedup.get_mut(shard as usize) {
                            let key = dedup::key(seed, run.stream, id);
                            t.insert_newer(key, run.base_seq + i as u64, h.append_ms, now);
                        }
                    }
                    self.engine.active_ids += ids;
                    self.report.events += u64::from(run.count);
                }
            }
        }
        self.engine.next_lsn = h.lsn + 1;
        self.engine.active_len = off + h.len as u64;
        self.engine.active_append = self.engine.active_append.merge(Agg {
            min_ts: h.append_ms,
            max_ts: h.append_ms,
        });
        let (lsn, len, append) = (
            self.engine.active_first,
            self.engine.active_len,
            self.engine.active_append,
        );
        self.engine.shared.segments.update(lsn, |s| {
            s.log_len = len;
            s.min_append_ms = append.min_ts;
            s.max_append_ms = append.max_ts;
        });
        self.report.records += 1;
        Ok(Ok(()))
    }
}

pub(crate) fn decode_reason(e: Decode) -> String {
    match e {
        Decode::Bad(w) => w.to_string(),
        Decode::Incomplete(_) => "truncated".to_string(),
    }
}

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
