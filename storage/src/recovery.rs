//! Start-up: scan every segment in LSN order, verify each record (length, CRC32C, version,
//! LSN continuity), and rebuild the writer's `seq` and dedup state and the reader index.
//!
//! Only the active (last) segment may end in a torn record: the tail from the first bad
//! record on is truncated with a warning naming the file and offset. A bad record anywhere
//! else stops start-up with an error naming file and offset; with `repair` that segment is
//! truncated there and every later segment removed, after a warning saying what is lost
//! (a later segment cannot be kept: its `seq`s would follow a gap).

use crate::api::{OpenError, RecoveryReport, StorageConfig};
use crate::dedup::{self, DedupTable};
use crate::index::{Index, RunLoc};
use crate::record::{self, Decode, HEADER_LEN};
use crate::segment::{self, DataDir, Segments};
use hashbrown::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vx_proto::shard::shard_of;

pub(crate) struct Recovered {
    pub streams: HashMap<Box<str>, u64>,
    pub dedup: Vec<DedupTable>,
    pub next_lsn: u64,
    pub active: Arc<File>,
    pub active_path: PathBuf,
    pub active_first: u64,
    pub active_len: u64,
    pub report: RecoveryReport,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> OpenError {
    move |source| OpenError::Io { context, source }
}

/// Outcome of scanning one segment.
enum Scan {
    Clean,
    /// The first bad record's offset and why.
    Bad {
        offset: u64,
        reason: String,
    },
}

pub(crate) fn recover(
    dir: &DataDir,
    cfg: &StorageConfig,
    index: &Index,
    segments: &Segments,
    now_ms: i64,
) -> Result<Recovered, OpenError> {
    let started = std::time::Instant::now();
    let shards = dir.meta.shards;
    let log_dir = dir.log_dir();
    let window_ms = cfg.dedup_window.as_millis() as i64;
    let per_shard_mem = cfg.dedup_memory / u64::from(shards);
    let mut st = State {
        shards,
        dedup_key: dir.meta.dedup_key,
        streams: HashMap::new(),
        dedup: (0..shards)
            .map(|_| DedupTable::new(per_shard_mem, window_ms))
            .collect(),
        next_lsn: 1,
        index,
        now_ms,
        report: RecoveryReport::default(),
    };
    let mut list = dir.list_segments()?;
    if list.is_empty() {
        let path = segment::segment_path(&log_dir, 1);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(format!("creating {}", path.display())))?;
        segment::sync_dir(&log_dir).map_err(io(format!("syncing {}", log_dir.display())))?;
        list.push((1, path));
        drop(f);
    }
    let mut i = 0;
    let mut active_len = 0;
    while i < list.len() {
        let (first_lsn, path) = list[i].clone();
        let last = i + 1 == list.len();
        if first_lsn != st.next_lsn && !(i == 0 && st.next_lsn == 1) {
            return Err(OpenError::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "segment starts at LSN {first_lsn}, expected {}",
                    st.next_lsn
                ),
                loses: "this and every later segment".into(),
            });
        }
        if i == 0 {
            st.next_lsn = first_lsn;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io(format!("opening {}", path.display())))?;
        let file_len = file
            .metadata()
            .map_err(io(format!("reading {}", path.display())))?
            .len();
        let (valid_len, scan) = st.scan(&file, &path, first_lsn, file_len)?;
        if let Scan::Bad { offset, reason } = scan {
            let later: Vec<&(u64, PathBuf)> = list[i + 1..].iter().collect();
            let later_bytes: u64 = later
                .iter()
                .filter_map(|(_, p)| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum();
            let lose_here = file_len - offset;
            if last {
                tracing::warn!(
                    file = %path.display(),
                    offset,
                    bytes = lose_here,
                    "truncating the torn tail of the active log segment: {reason}"
                );
            } else if !cfg.repair {
                return Err(OpenError::Corrupt {
                    file: path,
                    offset,
                    reason,
                    loses: format!(
                        "{lose_here} bytes of this segment and {} later segment(s) ({later_bytes} bytes)",
                        later.len()
                    ),
                });
            } else {
                tracing::warn!(
                    file = %path.display(),
                    offset,
                    "repair: truncating a corrupt record ({reason}); losing {lose_here} bytes of \
                     this segment and {} later segment(s) ({later_bytes} bytes)",
                    later.len()
                );
                for (_, p) in &later {
                    std::fs::remove_file(p).map_err(io(format!("removing {}", p.display())))?;
                }
                list.truncate(i + 1);
            }
            file.set_len(offset)
                .and_then(|()| file.sync_all())
                .map_err(io(format!("truncating {}", path.display())))?;
            st.report.truncated_bytes += lose_here;
        }
        let file = Arc::new(file);
        segments.insert(first_lsn, Arc::clone(&file), path.clone());
        st.report.segments += 1;
        active_len = valid_len;
        i += 1;
    }
    let (active_first, active_path) = list.last().cloned().ok_or_else(|| OpenError::Meta {
        path: log_dir.clone(),
        reason: "no log segment".into(),
    })?;
    let (active, _) = segments.get(active_first).ok_or_else(|| OpenError::Meta {
        path: active_path.clone(),
        reason: "segment vanished during recovery".into(),
    })?;
    st.report.streams = st.streams.len() as u64;
    st.report.took = started.elapsed();
    Ok(Recovered {
        streams: st.streams,
        dedup: st.dedup,
        next_lsn: st.next_lsn,
        active,
        active_path,
        active_first,
        active_len,
        report: st.report,
    })
}

struct State<'a> {
    shards: u32,
    dedup_key: u64,
    streams: HashMap<Box<str>, u64>,
    dedup: Vec<DedupTable>,
    next_lsn: u64,
    index: &'a Index,
    now_ms: i64,
    report: RecoveryReport,
}

impl State<'_> {
    /// Scan one segment; returns the length of its valid prefix and whether it ended clean.
    fn scan(
        &mut self,
        file: &File,
        path: &Path,
        first_lsn: u64,
        file_len: u64,
    ) -> Result<(u64, Scan), OpenError> {
        let mut r = BufReader::with_capacity(1 << 20, file);
        let mut offset: u64 = 0;
        let mut rec: Vec<u8> = Vec::new();
        loop {
            let mut header = [0u8; HEADER_LEN];
            match read_full(&mut r, &mut header) {
                Ok(0) => return Ok((offset, Scan::Clean)),
                Ok(n) if n < HEADER_LEN => {
                    return Ok((offset, bad(offset, "truncated record header")));
                }
                Ok(_) => {}
                Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
            }
            let h = match record::parse_header(&header) {
                Ok(h) => h,
                Err(Decode::Bad(why)) => return Ok((offset, bad(offset, why))),
                Err(Decode::Incomplete(_)) => {
                    return Ok((offset, bad(offset, "truncated record header")));
                }
            };
            if h.lsn != self.next_lsn {
                let why = format!("record LSN {} where {} was expected", h.lsn, self.next_lsn);
                return Ok((
                    offset,
                    Scan::Bad {
                        offset,
                        reason: why,
                    },
                ));
            }
            // A length past the end of the file is a torn write (or garbage): never allocate it.
            if offset + h.len as u64 > file_len {
                return Ok((
                    offset,
                    bad(offset, "record extends past the end of the file"),
                ));
            }
            rec.clear();
            rec.extend_from_slice(&header);
            rec.resize(h.len, 0);
            match read_full(&mut r, &mut rec[HEADER_LEN..]) {
                Ok(n) if n < h.len - HEADER_LEN => {
                    return Ok((offset, bad(offset, "truncated record")));
                }
                Ok(_) => {}
                Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
            }
            if !record::crc_ok(&h, &rec) {
                return Ok((offset, bad(offset, "checksum mismatch")));
            }
            if let Err(why) = self.apply(&rec, h.runs, h.append_ms, first_lsn, offset) {
                return Ok((offset, bad(offset, why)));
            }
            self.next_lsn += 1;
            self.report.records += 1;
            offset += h.len as u64;
        }
    }

    /// Rebuild state from one verified record at `offset` of segment `segment`.
    fn apply(
        &mut self,
        rec: &[u8],
        runs: u32,
        append_ms: i64,
        segment: u64,
        offset: u64,
    ) -> Result<(), &'static str> {
        // Parse everything first so that a bad run leaves no partial state behind.
        let mut parsed = Vec::new();
        for run in record::runs(rec, runs) {
            let run = run.map_err(|e| match e {
                Decode::Bad(w) => w,
                Decode::Incomplete(_) => "truncated run",
            })?;
            let mut pos = 0;
            let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
            let mut ids = Vec::new();
            for i in 0..run.count {
                let (ev, n) = record::decode_event(&run.events[pos..], run.stream)
                    .map_err(|_| "bad event in run")?;
                min_ts = min_ts.min(ev.ts);
                max_ts = max_ts.max(ev.ts);
                if let Some(id) = ev.id {
                    ids.push((
                        dedup::key(self.dedup_key, run.stream, id),
                        run.base_seq + u64::from(i),
                    ));
                }
                pos += n;
            }
            if pos != run.events.len() || run.count == 0 {
                return Err("run length does not match its events");
            }
            let expected = self.streams.get(run.stream).copied().unwrap_or(0) + 1;
            if run.base_seq != expected {
                return Err("run seq does not follow the stream's last seq");
            }
            parsed.push((run, min_ts, max_ts, ids));
        }
        for (run, min_ts, max_ts, ids) in parsed {
            let shard = shard_of(run.stream, self.shards);
            self.streams
                .insert(run.stream.into(), run.base_seq + u64::from(run.count) - 1);
            if let Some(t) = self.dedup.get_mut(shard as usize) {
                for (key, seq) in ids {
                    if t.get(key, self.now_ms).is_none() {
                        t.insert(key, seq, append_ms, self.now_ms);
                    }
                }
            }
            self.index.apply(
                shard,
                run.stream,
                RunLoc {
                    first_seq: run.base_seq,
                    count: run.count,
                    events_len: run.events.len() as u32,
                    segment,
                    offset: offset + run.events_at as u64,
                    min_ts,
                    max_ts,
                },
                run.events.len() as u64,
            );
            self.report.events += u64::from(run.count);
        }
        Ok(())
    }
}

fn bad(offset: u64, why: &str) -> Scan {
    Scan::Bad {
        offset,
        reason: why.to_string(),
    }
}

/// Read until `buf` is full or EOF; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
