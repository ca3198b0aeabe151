//! Offline verification of a data dir (`veltrix check`): every file start-up would read,
//! checked as start-up checks it, without taking the data dir's `LOCK` and without changing
//! anything, so it also runs beside a server that holds the dir.
//!
//! - `meta.json`: parses and names a format this version reads.
//! - Log segments: every record's header, length and CRC (`recovery::read_records`,
//!   `record::crc_ok`), LSN continuity within and across segments, each record's body (its
//!   origin, runs and their events through `vx_proto::packed`, tombstones, feature writes,
//!   resets, entity events), and the `seq` continuity of every stream from the first record
//!   that names it (a reset of its shard's streams starts it over).
//! - Index files: checksum, header, entries and spans (`idxfile::IdxContents`), and that the
//!   header matches its segment (first LSN, length, next segment's LSN); each span's samples
//!   (version 3) lie inside it in seq order, tile the samples region, and point where they
//!   say in the segment (a run header of the stream at that seq, or that event of a run with
//!   that many events left, and the end of its record), read against the segment once.
//! - Snapshots: `snapshot::verify`, the checks of start-up's loader, one shard at a time.
//! - The carry file: `carry::Carry::open`'s checks.
//!
//! **A live server.** The last segment is the one a server appends to. A bad record at its end
//! with no valid record after it is a write in progress (or, offline, a torn tail that start-up
//! truncates), reported as [`Status::Tail`], not corruption. Files that disappear meanwhile
//! (retention, snapshot rotation) are noted and skipped; a segment that appears after the
//! listing is not checked. A bad record followed by a valid one, or any bad record in a
//! sealed segment, is corruption, named by file and offset.

use crate::api::OriginTopic;
use crate::index::carry::Carry;
use crate::index::idxfile::{IdxContents, Sample};
use crate::log::record::{self, BadRecord, Decode, RecordType};
use crate::log::recovery::{self, Walk, find_valid_after};
use crate::log::segment::{self, LogFile, META_FILE, Meta};
use crate::snapshot::{self, SNAPSHOT_DIR};
use crate::vfs::{OpenMode, RealFs, VFile, Vfs};
use crate::{CARRY_FILE, LOG_DIR};
use hashbrown::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// Why a data dir could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{}: not a data dir (no {META_FILE})", .0.display())]
    NotADataDir(PathBuf),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// What one file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Meta,
    Segment,
    /// The last segment: the one a server appends to.
    ActiveSegment,
    Index,
    Snapshot,
    Carry,
}

/// The verdict on one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// The active segment ends in an incomplete record: a write in progress (with a server
    /// running) or a torn tail that start-up truncates (without). Not corruption.
    Tail {
        offset: u64,
        reason: String,
    },
    /// Not corruption, but worth knowing (start-up mends it, or it changed while checked).
    Note(String),
    /// Corrupt at this offset.
    Corrupt {
        offset: u64,
        reason: String,
    },
}

/// One file's report.
#[derive(Clone, Debug)]
pub struct FileReport {
    pub path: PathBuf,
    pub kind: Kind,
    pub status: Status,
    /// What was found: records and LSNs, entries, entities.
    pub summary: String,
}

/// The whole report.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub files: Vec<FileReport>,
    pub records: u64,
    pub events: u64,
}

impl Report {
    pub fn corrupt(&self) -> impl Iterator<Item = &FileReport> {
        self.files
            .iter()
            .filter(|f| matches!(f.status, Status::Corrupt { .. }))
    }

    pub fn is_ok(&self) -> bool {
        self.corrupt().next().is_none()
    }
}

/// Check the data dir at `root`.
pub fn check(root: &Path) -> Result<Report, CheckError> {
    check_with(&RealFs, root)
}

/// [`check`] through any [`Vfs`].
pub fn check_with(vfs: &dyn Vfs, root: &Path) -> Result<Report, CheckError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckError::Io { path, source }
    };
    let mut report = Report::default();
    let meta_path = root.join(META_FILE);
    if !vfs.exists(&meta_path).map_err(io_err(&meta_path))? {
        return Err(CheckError::NotADataDir(root.to_path_buf()));
    }
    let shards = check_meta(vfs, &meta_path, &mut report);
    let log_dir = root.join(LOG_DIR);
    let mut segs = Vec::new();
    let mut idxs = Vec::new();
    for name in vfs.list(&log_dir).map_err(io_err(&log_dir))? {
        match segment::classify(&name) {
            LogFile::Segment(lsn) => segs.push(lsn),
            LogFile::Index(lsn) => idxs.push(lsn),
            LogFile::Carry => {
                let path = log_dir.join(CARRY_FILE);
                let status = match Carry::open(vfs, &path) {
                    Ok(_) => Status::Ok,
                    Err(e) => Status::Corrupt {
                        offset: 0,
                        reason: e.to_string(),
                    },
                };
                report.files.push(FileReport {
                    path,
                    kind: Kind::Carry,
                    status,
                    summary: String::new(),
                });
            }
            LogFile::Temp(_) | LogFile::Other(_) => {}
        }
    }
    segs.sort_unstable();
    idxs.sort_unstable();
    let mut log = LogCheck {
        streams: HashMap::new(),
        next_lsn: None,
        shards,
    };
    let mut lens: HashMap<u64, u64> = HashMap::new();
    for (i, &lsn) in segs.iter().enumerate() {
        let active = i + 1 == segs.len();
        let path = segment::segment_path(&log_dir, lsn);
        let r = log.segment(vfs, &path, lsn, active, &mut report, &mut lens);
        report.files.push(r);
    }
    for &lsn in &idxs {
        let path = segment::idx_path(&log_dir, lsn);
        let next = segs.iter().find(|&&s| s > lsn).copied();
        let r = check_index(vfs, &path, lsn, lens.get(&lsn).copied(), next, segs.last());
        report.files.push(r);
    }
    for (i, &lsn) in segs.iter().enumerate() {
        if i + 1 < segs.len() && !idxs.contains(&lsn) && lens.contains_key(&lsn) {
            report.files.push(FileReport {
                path: segment::idx_path(&log_dir, lsn),
                kind: Kind::Index,
                status: Status::Note("missing: start-up rebuilds it from the segment".into()),
                summary: String::new(),
            });
        }
    }
    if let Some(shards) = shards {
        let dir = root.join(SNAPSHOT_DIR);
        let listed = snapshot::list(vfs, &dir).map_err(io_err(&dir))?;
        for (_, path) in listed.into_iter().rev() {
            report.files.push(check_snapshot(vfs, &path, shards));
        }
    }
    Ok(report)
}

fn check_meta(vfs: &dyn Vfs, path: &Path, report: &mut Report) -> Option<u32> {
    let read = vfs.open(path, OpenMode::Read).and_then(|f| f.read_all());
    let (status, shards) = match read {
        Err(e) => (
            Status::Corrupt {
                offset: 0,
                reason: e.to_string(),
            },
            None,
        ),
        Ok(bytes) => match serde_json::from_slice::<Meta>(&bytes) {
            Err(e) => (
                Status::Corrupt {
                    offset: 0,
                    reason: e.to_string(),
                },
                None,
            ),
            Ok(m) if m.format != segment::FORMAT || m.shards == 0 => (
                Status::Corrupt {
                    offset: 0,
                    reason: format!("unsupported format {} / shards {}", m.format, m.shards),
                },
                None,
            ),
            Ok(m) => (Status::Ok, Some(m.shards)),
        },
    };
    report.files.push(FileReport {
        path: path.to_path_buf(),
        kind: Kind::Meta,
        status,
        summary: shards.map_or_else(String::new, |s| format!("{s} shards")),
    });
    shards
}

/// State carried from segment to segment.
struct LogCheck {
    /// Each stream's last seq seen so far (bounded like the server's streams).
    streams: HashMap<String, u64>,
    next_lsn: Option<u64>,
    /// The data dir's shard count (a reset forgets the streams of one shard).
    shards: Option<u32>,
}

impl LogCheck {
    fn segment(
        &mut self,
        vfs: &dyn Vfs,
        path: &Path,
        lsn: u64,
        active: bool,
        report: &mut Report,
        lens: &mut HashMap<u64, u64>,
    ) -> FileReport {
        let kind = if active {
            Kind::ActiveSegment
        } else {
            Kind::Segment
        };
        let done = |status, summary: String| FileReport {
            path: path.to_path_buf(),
            kind,
            status,
            summary,
        };
        let opened = vfs
            .open(path, OpenMode::Read)
            .and_then(|f| Ok((f.len()?, f)));
        let (len, f) = match opened {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Retention removed it after the listing: what follows starts anew.
                self.next_lsn = None;
                return done(
                    Status::Note("removed while checked (retention)".into()),
                    String::new(),
                );
            }
            Err(e) => {
                return done(
                    Status::Corrupt {
                        offset: 0,
                        reason: format!("cannot read it: {e}"),
                    },
                    String::new(),
                );
            }
        };
        lens.insert(lsn, len);
        if len == 0 {
            return done(Status::Ok, "empty".into());
        }
        if let Some(expected) = self.next_lsn
            && expected != lsn
        {
            self.next_lsn = None;
            return done(
                Status::Corrupt {
                    offset: 0,
                    reason: format!("segment starts at LSN {lsn}, expected {expected}"),
                },
                String::new(),
            );
        }
        let mut expected = lsn;
        let (mut records, mut events) = (0u64, 0u64);
        let mut bad: Option<(u64, String)> = None;
        let walked = recovery::read_records(&*f, path, len, &mut |off, item| {
            let (h, rec) = match item {
                Walk::Bad(why) => {
                    bad = Some((off, why.to_string()));
                    return false;
                }
                Walk::Record(h, rec) => (h, rec),
            };
            let checked = if !record::crc_ok(&h, rec) {
                Err("checksum mismatch".to_string())
            } else if h.lsn != expected {
                Err(format!(
                    "record LSN {} where {expected} was expected",
                    h.lsn
                ))
            } else {
                self.body(&h, rec).map_err(|e| e.to_string())
            };
            match checked {
                Ok(n) => {
                    records += 1;
                    events += n;
                    expected = h.lsn + 1;
                    true
                }
                Err(why) => {
                    bad = Some((off, why));
                    false
                }
            }
        });
        if let Err(e) = walked {
            bad = Some((0, e.to_string()));
        }
        report.records += records;
        report.events += events;
        self.next_lsn = Some(expected);
        let summary = if records == 0 {
            "no records".to_string()
        } else {
            format!(
                "{records} records (LSN {lsn}..{}), {events} events",
                expected - 1
            )
        };
        let Some((offset, reason)) = bad else {
            return done(Status::Ok, summary);
        };
        if active {
            match find_valid_after(&*f, offset, len, expected) {
                Ok(None) => return done(Status::Tail { offset, reason }, summary),
                Ok(Some((at, later))) => {
                    let reason =
                        format!("{reason} (a valid record, LSN {later}, follows at offset {at})");
                    return done(Status::Corrupt { offset, reason }, summary);
                }
                Err(e) => {
                    let reason = format!("{reason}; reading on: {e}");
                    return done(Status::Corrupt { offset, reason }, summary);
                }
            }
        }
        done(Status::Corrupt { offset, reason }, summary)
    }

    /// Check a checksum-verified record's body; returns its events.
    fn body(&mut self, h: &record::Header, rec: &[u8]) -> Result<u64, BadRecord> {
        record::origin(h, rec)?;
        match h.ty {
            RecordType::Reset => {
                let (target, shard) = record::reset(rec)?;
                if let (OriginTopic::Streams, Some(shards)) = (target, self.shards) {
                    self.streams
                        .retain(|name, _| vx_proto::shard::shard_of(name, shards) != shard);
                }
                Ok(0)
            }
            RecordType::EntityEvents => {
                for run in record::runs(rec, h.n) {
                    let run = run?;
                    let mut n = 0u32;
                    for ev in vx_proto::packed::events(run.events, run.stream) {
                        ev.map_err(Decode::from)?;
                        n += 1;
                    }
                    if n != run.count || n == 0 {
                        return Err(BadRecord::RunLength);
                    }
                }
                Ok(0)
            }
            RecordType::FeaturePut => Ok(record::feature_put(rec, h.n).map(|_| 0)?),
            RecordType::FeatureDelete => Ok(record::feature_delete(rec, h.n).map(|_| 0)?),
            RecordType::FeatureIncr => Ok(record::feature_incr(rec, h.n).map(|_| 0)?),
            RecordType::Tombstone => {
                let (stream, last) = record::tombstone(rec)?;
                let cur = self.streams.get(stream).copied().unwrap_or(last);
                self.streams.insert(stream.to_string(), cur.max(last));
                Ok(0)
            }
            RecordType::Events => {
                let mut events = 0u64;
                for run in record::runs(rec, h.n) {
                    let run = run?;
                    let mut n = 0u32;
                    for ev in vx_proto::packed::events(run.events, run.stream) {
                        ev.map_err(Decode::from)?;
                        n += 1;
                    }
                    if n != run.count || n == 0 {
                        return Err(BadRecord::RunLength);
                    }
                    // A stream first seen here may start anywhere (retention removed what
                    // came before); after that its runs follow each other.
                    if let Some(&prev) = self.streams.get(run.stream)
                        && run.base_seq != prev + 1
                    {
                        return Err(BadRecord::SeqGap {
                            stream: run.stream.to_string(),
                            base: run.base_seq,
                            expected: prev + 1,
                        });
                    }
                    let last = run.base_seq + u64::from(run.count) - 1;
                    self.streams.insert(run.stream.to_string(), last);
                    events += u64::from(run.count);
                }
                Ok(events)
            }
        }
    }
}

fn check_index(
    vfs: &dyn Vfs,
    path: &Path,
    lsn: u64,
    seg_len: Option<u64>,
    next_seg: Option<u64>,
    last_seg: Option<&u64>,
) -> FileReport {
    let done = |status, summary: String| FileReport {
        path: path.to_path_buf(),
        kind: Kind::Index,
        status,
        summary,
    };
    let corrupt = |reason: String| Status::Corrupt { offset: 0, reason };
    let Some(seg_len) = seg_len else {
        return done(
            Status::Note("no segment (left by an interrupted write; start-up removes it)".into()),
            String::new(),
        );
    };
    if last_seg == Some(&lsn) {
        return done(
            Status::Note("index of the active segment (start-up removes it)".into()),
            String::new(),
        );
    }
    let contents = match vfs
        .open(path, OpenMode::Read)
        .and_then(|f| IdxContents::read(&*f))
    {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return done(
                Status::Note("removed while checked (retention)".into()),
                String::new(),
            );
        }
        Err(e) => return done(corrupt(e.to_string()), String::new()),
    };
    let h = contents.header;
    if h.segment != lsn || h.log_len != seg_len {
        return done(
            corrupt(format!(
                "describes segment {} of {} bytes, the segment has {seg_len}",
                h.segment, h.log_len
            )),
            String::new(),
        );
    }
    if let Some(next) = next_seg
        && h.next_lsn != next
    {
        return done(
            corrupt(format!(
                "says the log goes on at LSN {}, the next segment starts at {next}",
                h.next_lsn
            )),
            String::new(),
        );
    }
    let entries = match contents.entries() {
        Ok(e) => e,
        Err(e) => return done(corrupt(e.to_string()), String::new()),
    };
    let mut samples: HashMap<String, Vec<SpanSample>> = HashMap::new();
    let mut tiled = 0u64;
    for e in &entries {
        let spans = match contents.spans(e) {
            Ok(s) => s,
            Err(err) => {
                return done(
                    corrupt(format!("stream {:?}: {err}", e.name)),
                    String::new(),
                );
            }
        };
        for span in &spans {
            if span.samples_n > 0 && u64::from(span.samples_at) != tiled {
                return done(
                    corrupt(format!(
                        "stream {:?}: the samples of its span at seq {} start at {}, not {tiled}",
                        e.name, span.first_seq, span.samples_at
                    )),
                    String::new(),
                );
            }
            tiled += u64::from(span.samples_n);
            let list = match contents.samples(span) {
                Ok(l) => l,
                Err(err) => {
                    return done(
                        corrupt(format!("stream {:?}: {err}", e.name)),
                        String::new(),
                    );
                }
            };
            let mut prev = span.first_seq;
            for x in list {
                let run_fits = x.left == 0 || x.seq + u64::from(x.left) - 1 <= span.last_seq();
                if !span.holds_sample(&x) || x.seq <= prev || !run_fits {
                    return done(
                        corrupt(format!(
                            "stream {:?}: sample {x:?} does not lie in order inside its span {span:?}",
                            e.name
                        )),
                        String::new(),
                    );
                }
                prev = x.seq;
                samples.entry(e.name.clone()).or_default().push((
                    x,
                    u64::from(span.off),
                    span.end(),
                ));
            }
        }
    }
    if tiled != h.samples {
        return done(
            corrupt(format!(
                "its spans have {tiled} samples, its header says {}",
                h.samples
            )),
            String::new(),
        );
    }
    if !samples.is_empty() {
        let seg_path = segment::segment_path(path.parent().unwrap_or(Path::new("")), lsn);
        if let Err(reason) = samples_match(vfs, &seg_path, seg_len, samples) {
            return done(corrupt(reason), String::new());
        }
    }
    done(
        Status::Ok,
        format!("{} streams, {} samples", entries.len(), h.samples),
    )
}

/// A sample with the offsets of its span's start and end.
type SpanSample = (Sample, u64, u64);

/// Every sample of an index file (per stream, in seq order) points where it says in its
/// segment: read the segment's records once and follow each stream's runs inside its spans
/// (a run outside them is of the stream before a reset of its shard, cluster mode).
fn samples_match(
    vfs: &dyn Vfs,
    seg_path: &Path,
    seg_len: u64,
    samples: HashMap<String, Vec<SpanSample>>,
) -> Result<(), String> {
    let f = vfs
        .open(seg_path, OpenMode::Read)
        .map_err(|e| format!("reading {} for its samples: {e}", seg_path.display()))?;
    // Per stream: its samples and how many were matched.
    let mut todo: HashMap<String, (Vec<SpanSample>, usize)> =
        samples.into_iter().map(|(k, v)| (k, (v, 0))).collect();
    let mut failed: Option<String> = None;
    // A bad record ends the comparison: the segment's own report says what is wrong with it,
    // and the samples after it are not blamed.
    let mut cut = false;
    let walked = recovery::read_records(&*f, seg_path, seg_len, &mut |off, item| {
        let (h, rec) = match item {
            Walk::Record(h, rec) if record::crc_ok(&h, rec) => (h, rec),
            _ => {
                cut = true;
                return false;
            }
        };
        if h.ty != RecordType::Events {
            return true;
        }
        let rec_end = off + h.len as u64;
        for run in record::runs(rec, h.n) {
            let Ok(run) = run else {
                cut = true;
                return false;
            };
            let Some((list, done)) = todo.get_mut(run.stream) else {
                continue;
            };
            let head = off + run.at as u64;
            let events_at = head + (run.len - run.events.len()) as u64;
            let end_seq = run.base_seq + u64::from(run.count);
            // The event walk inside this run: index and offset of the next event.
            let (mut idx, mut pos) = (0u32, 0usize);
            while let Some(&(x, span_off, span_end)) = list.get(*done) {
                if head < span_off || (x.seq >= end_seq && head < span_end) {
                    break;
                }
                let ok = if x.seq < run.base_seq || x.seq >= end_seq {
                    false
                } else if x.left == 0 {
                    x.seq == run.base_seq && u64::from(x.off) == head
                } else {
                    let want = u32::try_from(x.seq - run.base_seq).unwrap_or(u32::MAX);
                    while idx < want {
                        match run.events.get(pos..).map(vx_proto::packed::event_len) {
                            Some(Ok(n)) if n > 0 => pos += n,
                            _ => break,
                        }
                        idx += 1;
                    }
                    idx == want
                        && u64::from(x.off) == events_at + pos as u64
                        && x.left == run.count - want
                };
                if !ok || u64::from(x.after) != rec_end {
                    failed = Some(format!(
                        "stream {:?}: sample {x:?} does not point at its event (the stream's run \
                         of seqs {}..{} is at offset {head} of the segment)",
                        run.stream, run.base_seq, end_seq
                    ));
                    return false;
                }
                *done += 1;
            }
        }
        true
    });
    if let Err(e) = walked {
        return Err(e.to_string());
    }
    if let Some(f) = failed {
        return Err(f);
    }
    if cut {
        return Ok(());
    }
    if let Some((name, (list, done))) = todo.iter().find(|(_, (l, d))| *d < l.len()) {
        return Err(format!(
            "stream {name:?}: sample {:?} is at no run of the stream in the segment",
            list[*done].0
        ));
    }
    Ok(())
}

fn check_snapshot(vfs: &dyn Vfs, path: &Path, shards: u32) -> FileReport {
    let done = |status, summary: String| FileReport {
        path: path.to_path_buf(),
        kind: Kind::Snapshot,
        status,
        summary,
    };
    let f: std::sync::Arc<dyn VFile> = match vfs.open(path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return done(
                Status::Note("removed while checked (a newer one replaced it)".into()),
                String::new(),
            );
        }
        Err(e) => {
            return done(
                Status::Corrupt {
                    offset: 0,
                    reason: e.to_string(),
                },
                String::new(),
            );
        }
    };
    match snapshot::verify(&*f, shards) {
        Ok(info) => done(
            Status::Ok,
            format!(
                "covers LSN {}..={}, {} entities",
                info.covered_min, info.covered_max, info.entities
            ),
        ),
        Err(e) => done(
            Status::Corrupt {
                offset: e.at,
                reason: e.to_string(),
            },
            String::new(),
        ),
    }
}
