//! The single log writer thread: group commit.
//!
//! It blocks for the first queued request, drains whatever else is queued (bounded), and for
//! the group: checks ids against the dedup tables *before* assigning `seq`, assigns `seq`s,
//! encodes one record per request into one buffer, writes it with one `pwrite`, fsyncs once if
//! the mode or any request asks for it, then applies the group to the reader index (visibility
//! follows durability), commits the dedup entries, answers, and releases reservations.
//!
//! A failed write truncates the partial bytes and undoes the group's `seq` assignments, so the
//! requests are answered 507 and a retry is not mistaken for a duplicate. A failed fsync
//! poisons the store: every later write is refused until restart.

use crate::api::*;
use crate::dedup::{self, DedupTable};
use crate::index::{Index, RunLoc};
use crate::record::{RecordBuilder, encode_event};
use crate::segment::{self, Segments};
use hashbrown::HashMap;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Instant;
use tokio::sync::oneshot;
use vx_proto::{EventView, shard::shard_of};

pub(crate) type Reply = oneshot::Sender<Result<WriteOutcome, WriteError>>;

#[expect(
    clippy::large_enum_variant,
    reason = "Shutdown is sent once; boxing Write would allocate per request"
)]
pub(crate) enum Msg {
    Write(WriteRequest, Reply),
    /// Finish what is queued before this, fsync, and stop.
    Shutdown,
}

/// Bounds of one group: what one write carries at most.
const GROUP_MAX_REQUESTS: usize = 1024;
const GROUP_MAX_BYTES: usize = 32 << 20;

/// State shared between the writer and the [`crate::Store`] handles.
pub(crate) struct Shared {
    pub index: Index,
    pub segments: Segments,
    pub poisoned: AtomicBool,
    pub poison_reason: Mutex<String>,
    /// Per shard: append time of the oldest remembered id (`i64::MIN`: none).
    pub horizons: Vec<AtomicI64>,
}

/// Everything the writer thread owns.
pub(crate) struct Writer {
    pub shared: Arc<Shared>,
    pub cfg: StorageConfig,
    pub shards: u32,
    pub dedup_key: u64,
    pub log_dir: PathBuf,
    pub active: Arc<File>,
    pub active_path: PathBuf,
    pub active_len: u64,
    /// First LSN of the active segment (its name).
    pub active_first: u64,
    pub next_lsn: u64,
    /// Last assigned `seq` per stream (including not-yet-visible ones).
    pub streams: HashMap<Box<str>, u64>,
    pub dedup: Vec<DedupTable>,
    /// Data dir lock and metadata: held as long as the writer runs.
    pub _dir: segment::DataDir,
}

/// A request planned within a group.
struct Planned {
    reply: Option<Reply>,
    guard: Option<Box<dyn Send>>,
    want: Durability,
    outcome: WriteOutcome,
    /// Runs of this request's record: (shard, stream, loc, bytes). `loc.offset` is relative to
    /// the group buffer until the write places it.
    runs: Vec<(u32, Box<str>, RunLoc, u64)>,
    /// Dedup entries to commit once the record is durable: (shard, key, seq).
    ids: Vec<(u32, u128, u64)>,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Writer {
    pub fn run(mut self, rx: flume::Receiver<Msg>) {
        let mode = self.cfg.fsync;
        let mut unsynced = false;
        let mut last_sync = Instant::now();
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut group: Vec<(WriteRequest, Reply)> = Vec::new();
        loop {
            let first = if unsynced && mode == FsyncMode::Interval {
                match rx.recv_deadline(last_sync + self.cfg.fsync_interval) {
                    Ok(m) => Some(m),
                    Err(flume::RecvTimeoutError::Timeout) => None,
                    Err(flume::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                }
            };
            let mut stop = false;
            match first {
                None => {
                    // Interval deadline passed with nothing new: sync what was written.
                    self.sync(&mut unsynced, &mut last_sync);
                    continue;
                }
                Some(Msg::Shutdown) => stop = true,
                Some(Msg::Write(req, reply)) => group.push((req, reply)),
            }
            let mut bytes: usize = group.iter().map(|(r, _)| r.batch.mem_bytes()).sum();
            while !stop && group.len() < GROUP_MAX_REQUESTS && bytes < GROUP_MAX_BYTES {
                match rx.try_recv() {
                    Ok(Msg::Write(req, reply)) => {
                        bytes += req.batch.mem_bytes();
                        group.push((req, reply));
                    }
                    Ok(Msg::Shutdown) => stop = true,
                    Err(_) => break,
                }
            }
            if !group.is_empty() {
                self.commit_group(&mut group, &mut buf, &mut unsynced, &mut last_sync);
            }
            if mode == FsyncMode::Interval
                && unsynced
                && last_sync.elapsed() >= self.cfg.fsync_interval
            {
                self.sync(&mut unsynced, &mut last_sync);
            }
            if buf.capacity() > GROUP_MAX_BYTES * 2 {
                buf = Vec::with_capacity(1 << 20);
            }
            if stop {
                break;
            }
        }
        if unsynced {
            self.sync(&mut unsynced, &mut last_sync);
        }
        // Anything still queued arrived after shutdown began.
        while let Ok(msg) = rx.try_recv() {
            if let Msg::Write(_, reply) = msg {
                let _ = reply.send(Err(WriteError::ShuttingDown));
            }
        }
        tracing::info!(lsn = self.next_lsn - 1, "log writer stopped");
    }

    fn poisoned(&self) -> Option<WriteError> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            Some(WriteError::Poisoned(
                self.shared.poison_reason.lock().clone(),
            ))
        } else {
            None
        }
    }

    fn poison(&self, reason: String) {
        tracing::error!(%reason, "fsync failed: refusing writes until restart");
        *self.shared.poison_reason.lock() = reason;
        self.shared.poisoned.store(true, Ordering::Release);
    }

    fn sync(&mut self, unsynced: &mut bool, last_sync: &mut Instant) -> bool {
        let t = Instant::now();
        let res = self.active.sync_data();
        if let Some(o) = &self.cfg.observer {
            o.fsync(t.elapsed());
        }
        *last_sync = Instant::now();
        match res {
            Ok(()) => {
                *unsynced = false;
                true
            }
            Err(e) => {
                self.poison(format!("fdatasync {}: {e}", self.active_path.display()));
                false
            }
        }
    }

    fn commit_group(
        &mut self,
        group: &mut Vec<(WriteRequest, Reply)>,
        buf: &mut Vec<u8>,
        unsynced: &mut bool,
        last_sync: &mut Instant,
    ) {
        let mode = self.cfg.fsync;
        let visible_at = mode.durability();
        let now = now_ms();
        buf.clear();
        // Prior values of `streams`, in touch order, to undo the group if its write fails.
        let mut undo: Vec<(Box<str>, Option<u64>)> = Vec::new();
        let mut pending_ids: HashMap<u128, u64> = HashMap::new();
        let mut planned: Vec<Planned> = Vec::with_capacity(group.len());
        let first_lsn = self.next_lsn;
        for (req, reply) in group.drain(..) {
            if let Some(err) = self.poisoned() {
                let _ = reply.send(Err(err));
                continue;
            }
            let want = req.durability.unwrap_or(visible_at);
            match self.plan(&req, now, buf, &mut undo, &mut pending_ids) {
                Ok((outcome, runs, ids)) => {
                    let mut p = Planned {
                        reply: Some(reply),
                        guard: req.guard,
                        want,
                        outcome,
                        runs,
                        ids,
                    };
                    if want == Durability::None {
                        p.outcome.durability = Durability::None;
                        answer(&mut p, Ok(()));
                    }
                    planned.push(p);
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            }
        }
        let records = self.next_lsn - first_lsn;
        if buf.is_empty() {
            // All duplicates or refused: nothing to write, but duplicates' answers still wait
            // for nothing.
            for p in &mut planned {
                p.outcome.durability = p.want;
                p.guard = None;
                answer(p, Ok(()));
            }
            return;
        }
        let at = self.active_len;
        if let Err(e) = self.active.write_all_at(buf, at) {
            // Cut off whatever part of the group reached the file, and forget the group.
            let _ = self.active.set_len(at);
            self.next_lsn = first_lsn;
            self.undo(undo);
            let msg = format!("write to {} failed: {e}", self.active_path.display());
            tracing::error!("{msg}");
            for p in &mut planned {
                answer(p, Err(WriteError::StorageFull(msg.clone())));
            }
            return;
        }
        self.active_len += buf.len() as u64;
        *unsynced = true;
        let events: u64 = planned.iter().map(|p| p.outcome.accepted).sum();
        if let Some(o) = &self.cfg.observer {
            o.appended(records, events, buf.len() as u64);
        }
        // Requests that asked for `write` below the visibility level (mode `always`) are
        // answered now; the rest wait until they are applied, so an acknowledged write is
        // always visible to the reader who acknowledged it (read-your-writes).
        for p in &mut planned {
            if p.want == Durability::Write && p.want < visible_at {
                p.outcome.durability = Durability::Write;
                answer(p, Ok(()));
            }
        }
        let need_sync =
            mode == FsyncMode::Always || planned.iter().any(|p| p.want == Durability::Fsync);
        if need_sync && !self.sync(unsynced, last_sync) {
            // Never pretend: the unsynced group is cut off and refused.
            let _ = self.active.set_len(at);
            self.active_len = at;
            self.next_lsn = first_lsn;
            self.undo(undo);
            let err = self
                .poisoned()
                .unwrap_or(WriteError::Poisoned(String::new()));
            for p in &mut planned {
                answer(p, Err(err.clone()));
            }
            return;
        }
        // Visible: place runs at their file offsets and publish them.
        for p in &mut planned {
            for (shard, stream, mut loc, bytes) in p.runs.drain(..) {
                loc.offset += at;
                loc.segment = self.active_first;
                self.shared.index.apply(shard, &stream, loc, bytes);
            }
            for &(shard, key, seq) in &p.ids {
                if let Some(t) = self.dedup.get_mut(shard as usize) {
                    t.insert(key, seq, now, now);
                }
            }
            // Release the admission reservation once the request is applied and before it
            // is answered, so a producer never finds its own finished request still queued.
            p.guard = None;
            if p.reply.is_some() {
                p.outcome.durability = if need_sync {
                    Durability::Fsync
                } else {
                    Durability::Write
                };
                answer(p, Ok(()));
            }
        }
        for (i, t) in self.dedup.iter().enumerate() {
            if let Some(h) = self.shared.horizons.get(i) {
                h.store(t.oldest_ms().unwrap_or(i64::MIN), Ordering::Relaxed);
            }
        }
        if self.active_len >= self.cfg.segment_bytes {
            self.roll(unsynced, last_sync);
        }
    }

    fn undo(&mut self, undo: Vec<(Box<str>, Option<u64>)>) {
        for (stream, prior) in undo.into_iter().rev() {
            match prior {
                Some(seq) => {
                    self.streams.insert(stream, seq);
                }
                None => {
                    self.streams.remove(&stream);
                }
            }
        }
    }

    /// Dedup, conditional check and `seq` assignment for one request, and its record appended
    /// to `buf` (none if every event is a duplicate).
    #[allow(clippy::type_complexity)]
    fn plan(
        &mut self,
        req: &WriteRequest,
        now: i64,
        buf: &mut Vec<u8>,
        undo: &mut Vec<(Box<str>, Option<u64>)>,
        pending_ids: &mut HashMap<u128, u64>,
    ) -> Result<
        (
            WriteOutcome,
            Vec<(u32, Box<str>, RunLoc, u64)>,
            Vec<(u32, u128, u64)>,
        ),
        WriteError,
    > {
        let batch = &req.batch;
        let streams = batch.streams();
        if let Some(expected) = req.expected_last_seq {
            for sc in streams {
                let name = batch.name(sc.stream);
                let last = self.streams.get(name).copied().unwrap_or(0);
                if last != expected {
                    return Err(WriteError::Conflict {
                        stream: name.to_string(),
                        expected,
                        last_seq: last,
                    });
                }
            }
        }
        let new_streams = streams
            .iter()
            .filter(|sc| !self.streams.contains_key(batch.name(sc.stream)))
            .count() as u64;
        if new_streams > 0 && self.streams.len() as u64 + new_streams > self.cfg.max_streams {
            return Err(WriteError::TooManyStreams {
                max: self.cfg.max_streams,
            });
        }
        // Group the request's events by stream (runs are per stream).
        let mut per: Vec<Vec<EventView<'_>>> = vec![Vec::new(); streams.len()];
        for (h, ev) in batch.headers().iter().zip(batch.iter()) {
            if let Some(slot) = batch.stream_slot(h.stream) {
                per[slot].push(ev);
            }
        }
        let mut outcome = WriteOutcome {
            accepted: 0,
            duplicates: 0,
            last_seq: Vec::with_capacity(streams.len()),
            durability: Durability::None,
        };
        let mut runs = Vec::new();
        let mut ids = Vec::new();
        let mut fresh: Vec<(usize, u64)> = Vec::new(); // (event index in `per[slot]`, seq)
        let mut rb: Option<RecordBuilder> = None;
        let rec_start = buf.len();
        let lsn = self.next_lsn;
        for (slot, evs) in per.iter().enumerate() {
            let name = batch.name(streams[slot].stream);
            let shard = shard_of(name, self.shards);
            let prior = self.streams.get(name).copied();
            let mut last = prior.unwrap_or(0);
            let mut dup_seq = None;
            fresh.clear();
            for (i, ev) in evs.iter().enumerate() {
                if let Some(id) = ev.id {
                    let key = dedup::key(self.dedup_key, name, id);
                    let seen = pending_ids
                        .get(&key)
                        .copied()
                        .or_else(|| self.dedup.get(shard as usize).and_then(|t| t.get(key, now)));
                    if let Some(seq) = seen {
                        outcome.duplicates += 1;
                        dup_seq = Some(seq);
                        continue;
                    }
                    last += 1;
                    pending_ids.insert(key, last);
                    ids.push((shard, key, last));
                } else {
                    last += 1;
                }
                fresh.push((i, last));
            }
            if fresh.is_empty() {
                outcome
                    .last_seq
                    .push((name.to_string(), dup_seq.unwrap_or(last)));
                continue;
            }
            // Undo is replayed in reverse, so a stream touched twice in a group gets its
            // first-touch value back last: no need to look for an earlier entry.
            undo.push((name.into(), prior));
            self.streams.insert(name.into(), last);
            let base = fresh[0].1;
            let count = fresh.len() as u32;
            let builder = match &mut rb {
                Some(b) => b,
                None => rb.insert(RecordBuilder::begin(buf, lsn, now)),
            };
            let events_at = builder.begin_run(buf, name, base, count);
            let mut bytes = 0u64;
            let (mut min_ts, mut max_ts) = (i64::MAX, i64::MIN);
            for &(i, _) in &fresh {
                let ev = &evs[i];
                bytes += encode_event(buf, ev) as u64;
                min_ts = min_ts.min(ev.ts);
                max_ts = max_ts.max(ev.ts);
            }
            builder.end_run(buf);
            outcome.accepted += u64::from(count);
            outcome.last_seq.push((name.to_string(), last));
            runs.push((
                shard,
                Box::<str>::from(name),
                RunLoc {
                    first_seq: base,
                    count,
                    events_len: bytes as u32,
                    segment: 0,
                    offset: (rec_start + events_at) as u64,
                    min_ts,
                    max_ts,
                },
                bytes,
            ));
        }
        if let Some(b) = rb {
            b.finish(buf);
            self.next_lsn += 1;
        }
        Ok((outcome, runs, ids))
    }

    /// Close the active segment (synced) and start the next one.
    fn roll(&mut self, unsynced: &mut bool, last_sync: &mut Instant) {
        if *unsynced && !self.sync(unsynced, last_sync) {
            return;
        }
        let path = segment::segment_path(&self.log_dir, self.next_lsn);
        let opened = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .and_then(|f| segment::sync_dir(&self.log_dir).map(|()| f));
        match opened {
            Ok(file) => {
                let file = Arc::new(file);
                self.shared
                    .segments
                    .insert(self.next_lsn, Arc::clone(&file), path.clone());
                tracing::debug!(segment = %path.display(), "rolled log segment");
                self.active = file;
                self.active_path = path;
                self.active_len = 0;
                self.active_first = self.next_lsn;
            }
            Err(e) => {
                // Keep appending to the current segment; rolling is retried after the next group.
                tracing::error!(segment = %path.display(), "cannot create log segment: {e}");
            }
        }
    }
}

/// Send the answer if it is still owed. A refused request releases its reservation at once;
/// an accepted one keeps it until it is applied.
fn answer(p: &mut Planned, res: Result<(), WriteError>) {
    if res.is_err() {
        p.guard = None;
    }
    if let Some(reply) = p.reply.take() {
        let _ = reply.send(res.map(|()| p.outcome.clone()));
    }
}
