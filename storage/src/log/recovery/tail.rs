//! The active segment at start-up: scanned record by record and applied, a torn tail cut
//! off, corruption reported (or with `--repair` cut off with everything after it).

use super::{Bad, Pass, Recovery, Walk, find_valid_after, read_records};
use crate::api::OpenError;
use crate::dedup;
use crate::index::memory::Placed;
use crate::index::samples::{self, RunMark};
use crate::log::record::{self, BadRecord, Decode, RecordType};
use crate::log::segment::{self, io_err};
use crate::log::source::{Durable, RunAt, SourcePos};
use crate::log::state::WState;
use crate::vfs::OpenMode;
use hashbrown::HashMap;
use std::path::Path;
use vx_proto::shard::shard_of;

impl Recovery<'_> {
    /// Scan the active segment; cut a torn tail, refuse (or repair) corruption.
    pub(super) fn scan_active(&mut self, path: &Path, len: u64) -> Result<Pass, OpenError> {
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

    pub(super) fn truncate(&mut self, path: &Path, at: u64, len: u64) -> Result<(), OpenError> {
        let f = self
            .engine
            .vfs
            .open(path, OpenMode::Write)
            .map_err(io_err(format!("opening {}", path.display())))?;
        f.set_len(at)
            .and_then(|()| f.sync_data())
            .map_err(io_err(format!("truncating {}", path.display())))?;
        self.report.truncated_bytes += len - at;
        self.engine.truncated(at);
        Ok(())
    }

    /// A bad record at `offset` of segment `at` outside the active tail (or a segment that
    /// does not continue the log, `offset` 0 of the one before it with `truncate` false):
    /// an error saying what `--repair` would drop, or with `--repair` the repair itself —
    /// that segment truncated there (with `truncate`) and every `later` segment removed.
    pub(super) fn corrupt_or_repair(
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
    pub(super) fn scan(
        &mut self,
        path: &Path,
        len: u64,
        active: bool,
    ) -> Result<Option<Bad>, OpenError> {
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
            let remember_ids = active && h.append_ms >= window_from;
            match self.apply_record(off, &h, rec, active, remember_ids, now) {
                Ok(Ok(())) => true,
                Ok(Err(why)) => {
                    bad = fail(why.to_string());
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

    /// Apply one verified record at `off` of the segment being scanned (`active`: the active
    /// one, else a sealed one whose index is rebuilt). `Ok(Err)`: the record is bad.
    pub(super) fn apply_record(
        &mut self,
        off: u64,
        h: &record::Header,
        rec: &[u8],
        active: bool,
        remember_ids: bool,
        now: i64,
    ) -> Result<Result<(), BadRecord>, OpenError> {
        let shards = self.engine.shards;
        // Declared before what borrows them.
        let mut marks: Vec<RunMark> = Vec::new();
        let mut applied = Durable::at(SourcePos::Lsn(h.lsn), h.append_ms, Vec::new());
        applied.origin = match record::origin(h, rec) {
            Ok(o) => o,
            Err(e) => return Ok(Err(e.into())),
        };
        let mut ids = Vec::new();
        match h.ty {
            // Feature writes change no stream; they are applied to the feature tables after
            // recovery (snapshot.rs). Here they only have to be well-formed.
            RecordType::FeaturePut => {
                if let Err(e) = record::feature_put(rec, h.n) {
                    return Ok(Err(e.into()));
                }
            }
            RecordType::FeatureDelete => {
                if let Err(e) = record::feature_delete(rec, h.n) {
                    return Ok(Err(e.into()));
                }
            }
            RecordType::FeatureIncr => {
                if let Err(e) = record::feature_incr(rec, h.n) {
                    return Ok(Err(e.into()));
                }
            }
            // Feature-table records too: only their shape is checked here.
            RecordType::EntityEvents => {
                for run in record::runs(rec, h.n) {
                    if let Err(e) = check_run(run) {
                        return Ok(Err(e));
                    }
                }
            }
            RecordType::Reset => {
                let (target, shard) = match record::reset(rec) {
                    Ok(r) => r,
                    Err(e) => return Ok(Err(e.into())),
                };
                if shard >= shards {
                    return Ok(Err(
                        Decode::Bad("reset of a shard the store does not have").into()
                    ));
                }
                // In the active segment the writer may have crashed before it dropped the
                // shard's carry entries; nothing after the reset can be in the carry file
                // yet (only a seal or retention of a later segment adds entries). In a
                // sealed segment it did, and later entries may be there: leave them.
                if active && target == crate::api::OriginTopic::Streams {
                    self.engine
                        .carry_drop_shard(shard)
                        .map_err(io_err("rewriting the carry file for a reset"))?;
                }
                applied.reset = Some((target, shard));
            }
            RecordType::Tombstone => {
                let (stream, last) = match record::tombstone(rec) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(e.into())),
                };
                let st = self.load(stream)?;
                self.engine.streams.set(
                    stream,
                    WState {
                        last: st.last.max(last),
                        floor: last,
                        deleted: true,
                    },
                );
                applied.tombstone = Some((shard_of(stream, shards), stream, last));
            }
            RecordType::Events => {
                // Check every run before applying any, so a bad record leaves nothing behind.
                let mut runs = Vec::new();
                let mut seen: HashMap<&str, u64> = HashMap::new();
                for run in record::runs(rec, h.n) {
                    let (run, min_ts, max_ts) = match check_run(run) {
                        Ok(r) => r,
                        Err(e) => return Ok(Err(e)),
                    };
                    let prev = match seen.get(run.stream) {
                        Some(&l) => Some(l),
                        None => self.known(run.stream)?.map(|st| st.last),
                    };
                    // A stream nothing retained knows of (no index entry, not in the carry
                    // file) may start anywhere: retention removed the segments holding its
                    // earlier events while it still had events in the active segment.
                    let prev = prev.unwrap_or(run.base_seq.saturating_sub(1));
                    if run.base_seq != prev + 1 {
                        return Ok(Err(BadRecord::SeqGap {
                            stream: run.stream.to_string(),
                            base: run.base_seq,
                            expected: prev + 1,
                        }));
                    }
                    seen.insert(run.stream, run.base_seq + u64::from(run.count) - 1);
                    runs.push((run, min_ts, max_ts));
                }
                let seed = self.engine.dedup_key;
                // Each run's marks, as the writer computed them from the same bytes.
                let mut ranges = Vec::with_capacity(runs.len());
                for (run, _, _) in &runs {
                    let from = marks.len();
                    let head_len = run.len - run.events.len();
                    samples::run_marks(run.events, run.count, head_len, &mut marks);
                    ranges.push(from..marks.len());
                }
                for ((run, min_ts, max_ts), range) in runs.into_iter().zip(ranges) {
                    let shard = shard_of(run.stream, shards);
                    let st = self.load(run.stream)?;
                    let last = run.base_seq + u64::from(run.count) - 1;
                    self.engine.streams.set(
                        run.stream,
                        WState {
                            last,
                            floor: st.floor,
                            deleted: false,
                        },
                    );
                    let off32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                    applied.runs.push(RunAt {
                        shard,
                        stream: run.stream,
                        floor: st.floor,
                        placed: Placed {
                            first_seq: run.base_seq,
                            count: run.count,
                            off: off32(off + run.at as u64),
                            len: off32(run.len as u64),
                            rec_end: off32((h.len - run.at) as u64),
                            min_ts,
                            max_ts,
                            bytes: run.events.len() as u64,
                        },
                        marks: marks.get(range).unwrap_or_default(),
                    });
                    for (i, ev) in vx_proto::packed::events(run.events, run.stream).enumerate() {
                        let Ok(ev) = ev else { continue };
                        let Some(id) = ev.id else { continue };
                        applied.id_count += 1;
                        if remember_ids {
                            let key = dedup::key(seed, run.stream, id);
                            ids.push((shard, key, run.base_seq + i as u64));
                        }
                    }
                    self.report.events += u64::from(run.count);
                }
            }
        }
        applied.ids = &ids;
        self.engine.apply(applied, now);
        self.engine.next_lsn = h.lsn + 1;
        self.engine.appended(off + h.len as u64, h.append_ms);
        self.report.records += 1;
        Ok(Ok(()))
    }
}

/// A run's events decode and are as many as it says (at least one); its min and max `ts`.
fn check_run(
    run: Result<record::Run<'_>, Decode>,
) -> Result<(record::Run<'_>, i64, i64), BadRecord> {
    let run = run?;
    let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
    let mut n = 0u32;
    for ev in vx_proto::packed::events(run.events, run.stream) {
        let ev = ev.map_err(Decode::from)?;
        min_ts = min_ts.min(ev.ts);
        max_ts = max_ts.max(ev.ts);
        n += 1;
    }
    if n != run.count || n == 0 {
        return Err(BadRecord::RunLength);
    }
    Ok((run, min_ts, max_ts))
}
