//! Replay cursors: read one stream's events in `seq` order straight from the log segments
//! (`pread`), locating each run through the stream's run index, with a bounded buffer
//! (a window of the current run, never the whole range).

use crate::api::{ReadError, ReadQuery};
use crate::index::{Index, RunLoc};
use crate::record::{self, Decode};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use vx_proto::EventView;

/// Bytes read from the log at a time.
const READ_CHUNK: usize = 256 << 10;

pub struct Cursor {
    pub(crate) index: Arc<crate::writer::Shared>,
    pub(crate) stream: Box<str>,
    pub(crate) shard: u32,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) start_seq: u64,
    /// Next seq to look at.
    pub(crate) next_seq: u64,
    /// Last seq of the range (inclusive).
    pub(crate) end_seq: u64,
    pub(crate) remaining: u64,
    pub(crate) q: ReadQuery,
    run: Option<RunState>,
}

struct RunState {
    loc: RunLoc,
    file: Arc<File>,
    path: PathBuf,
    /// Seq of the event at `pos`.
    seq: u64,
    /// File offset of `buf[0]`.
    buf_off: u64,
    buf: Vec<u8>,
    /// Position in `buf` of the next event.
    pos: usize,
}

impl Cursor {
    pub(crate) fn open(
        shared: Arc<crate::writer::Shared>,
        shard: u32,
        stream: &str,
        q: ReadQuery,
    ) -> Option<Cursor> {
        let (first_seq, last_seq) = shared
            .index
            .with(shard, stream, |s| (s.first_seq(), s.last_seq()))?;
        let start_seq = q.from.unwrap_or(first_seq).max(first_seq);
        let end_seq = q.to.map_or(last_seq, |to| to.min(last_seq));
        Some(Cursor {
            index: shared,
            stream: stream.into(),
            shard,
            first_seq,
            last_seq,
            start_seq,
            next_seq: start_seq,
            end_seq,
            remaining: q.limit,
            q,
            run: None,
        })
    }

    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub fn shard(&self) -> u32 {
        self.shard
    }

    pub fn start_seq(&self) -> u64 {
        self.start_seq
    }

    /// True when no filter other than the seq range and limit applies (then the range is
    /// contiguous and `X-Vx-Next-Seq` is meaningful).
    pub fn unfiltered(&self) -> bool {
        self.q.since.is_none()
            && self.q.until.is_none()
            && self.q.types.is_none()
            && self.q.entity.is_none()
    }

    /// The seq to ask for next after an unfiltered read that runs to its end:
    /// `start + min(limit, events in range)`.
    pub fn next_seq_after_full_read(&self) -> u64 {
        let in_range = (self.end_seq + 1).saturating_sub(self.start_seq);
        self.start_seq + in_range.min(self.q.limit)
    }

    fn index(&self) -> &Index {
        &self.index.index
    }

    fn matches(&self, ev: &EventView<'_>) -> bool {
        if let Some(since) = self.q.since
            && ev.ts < since
        {
            return false;
        }
        if let Some(until) = self.q.until
            && ev.ts >= until
        {
            return false;
        }
        if let Some(types) = &self.q.types
            && !types.iter().any(|t| t == ev.ty)
        {
            return false;
        }
        if let Some(entity) = &self.q.entity
            && ev.entity.unwrap_or("") != entity
        {
            return false;
        }
        true
    }

    /// Position the cursor on the run holding `next_seq`; false at the end.
    fn load_run(&mut self) -> Result<bool, ReadError> {
        loop {
            if self.next_seq > self.end_seq {
                return Ok(false);
            }
            let Some(loc) = self
                .index()
                .with(self.shard, &self.stream, |s| s.run_at(self.next_seq))
                .flatten()
            else {
                return Ok(false);
            };
            let run_end = loc.first_seq + u64::from(loc.count);
            // Whole runs outside the time filter are skipped without reading them.
            let outside = self.q.since.is_some_and(|s| loc.max_ts < s)
                || self.q.until.is_some_and(|u| loc.min_ts >= u);
            if outside {
                self.next_seq = run_end;
                continue;
            }
            let Some((file, path)) = self.index.segments.get(loc.segment) else {
                return Err(ReadError::Corrupt {
                    file: PathBuf::from(format!("segment {}", loc.segment)),
                    offset: loc.offset,
                    reason: "segment is not open".into(),
                });
            };
            self.next_seq = self.next_seq.max(loc.first_seq);
            self.run = Some(RunState {
                loc,
                file,
                path,
                seq: loc.first_seq,
                buf_off: loc.offset,
                buf: Vec::new(),
                pos: 0,
            });
            return Ok(true);
        }
    }

    /// Next matching event with its seq; `None` at the end of the range or the limit.
    pub fn next_event(&mut self) -> Result<Option<(u64, EventView<'_>)>, ReadError> {
        loop {
            if self.remaining == 0 || self.next_seq > self.end_seq {
                return Ok(None);
            }
            let need_run = match &self.run {
                Some(r) => r.seq >= r.loc.first_seq + u64::from(r.loc.count),
                None => true,
            };
            if need_run {
                self.run = None;
                if !self.load_run()? {
                    return Ok(None);
                }
            }
            let Some(run) = self.run.as_mut() else {
                return Ok(None);
            };
            let (pos, len) = run.next_event(&self.stream)?;
            let seq = run.seq;
            run.seq += 1;
            run.pos = pos + len;
            if seq < self.next_seq {
                continue; // before `from` inside the first run
            }
            self.next_seq = seq + 1;
            // Decode twice (cheap, no allocation) so the borrow checker lets the loop go on
            // past filtered-out events.
            let matched = {
                let run = self
                    .run
                    .as_ref()
                    .ok_or_else(|| ReadError::Io(std::io::ErrorKind::Other.into()))?;
                let (ev, _) = decode_at(run, pos, &self.stream)?;
                self.matches(&ev)
            };
            if !matched {
                continue;
            }
            self.remaining -= 1;
            let run = self
                .run
                .as_ref()
                .ok_or_else(|| ReadError::Io(std::io::ErrorKind::Other.into()))?;
            let (ev, _) = decode_at(run, pos, &self.stream)?;
            return Ok(Some((seq, ev)));
        }
    }
}

fn decode_at<'a>(
    run: &'a RunState,
    pos: usize,
    stream: &'a str,
) -> Result<(EventView<'a>, usize), ReadError> {
    let bytes = run.buf.get(pos..).unwrap_or(&[]);
    record::decode_event(bytes, stream).map_err(|e| run.corrupt(pos, e))
}

impl RunState {
    fn corrupt(&self, pos: usize, e: Decode) -> ReadError {
        ReadError::Corrupt {
            file: self.path.clone(),
            offset: self.buf_off + pos as u64,
            reason: match e {
                Decode::Bad(w) => w.to_string(),
                Decode::Incomplete(_) => "event extends past its run".into(),
            },
        }
    }

    /// Make sure the next event is in the buffer; returns its position and length.
    fn next_event(&mut self, stream: &str) -> Result<(usize, usize), ReadError> {
        let run_end = self.loc.offset + u64::from(self.loc.events_len);
        loop {
            let avail = self.buf.get(self.pos..).unwrap_or(&[]);
            let need = match record::decode_event(avail, stream) {
                Ok((_, n)) => return Ok((self.pos, n)),
                Err(Decode::Incomplete(n)) => n,
                Err(e) => return Err(self.corrupt(self.pos, e)),
            };
            // Slide the window: keep the unread part, read at least what the event needs.
            let from = self.buf_off + self.pos as u64;
            let left_in_run = run_end.saturating_sub(from) as usize;
            if need > left_in_run {
                return Err(self.corrupt(self.pos, Decode::Incomplete(need)));
            }
            let want = need.max(READ_CHUNK).min(left_in_run);
            self.buf.clear();
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, from)?;
            self.buf_off = from;
            self.pos = 0;
        }
    }
}
