//! One follower, or one paced replay: where it is, where its next events come from, and what
//! it sends next ([`Follower::next`]).
//!
//! A follower reads storage (a replay cursor, in bounded blocking steps) until its position
//! reaches what the topic's ring holds, then takes events from the ring. When the ring has
//! moved on past its position (it lagged: its connection was slower than the stream), it
//! reads storage again, from exactly its position. The position only ever moves past an
//! event that was sent or that its filters drop, so the switches in both directions lose and
//! repeat nothing.
//!
//! A follower's memory: this struct, at most one storage step of events ([`STEP_EVENTS`],
//! [`STEP_BYTES`]) or one ring take ([`TAKE_BYTES`], handles to shared buffers) pending, and a
//! cursor's read window while it reads storage (up to 256 KiB, freed once it is live).

use super::Encoded;
use super::hub::{Hub, Membership, Taken};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use vx_storage::{Cursor, ReadError, ReadQuery, Store};

/// A comment (SSE), a blank line (NDJSON) or a ping (WebSocket) after this long without
/// anything else sent.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Bound of one storage step.
pub const STEP_EVENTS: usize = 1024;
pub const STEP_BYTES: usize = 256 << 10;
/// Bound of one take from the ring (of the events' memory, the shared buffers included).
pub const TAKE_BYTES: usize = 256 << 10;
/// Pending and scratch buffers above this many events are given back once empty, so a
/// follower that caught up does not keep its catch-up's memory.
const SHRINK_ABOVE: usize = 64;
/// Pause before looking again after a storage step that found nothing to do.
const IDLE_RETRY: Duration = Duration::from_millis(50);

/// `pace=original&speed=…`: events are spaced by the difference of their `ts` over `speed`.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    pub speed: f64,
}

/// What a follower produces next.
#[derive(Debug)]
pub enum Next {
    /// Events to send, in order.
    Events(Vec<Encoded>),
    /// SSE frames of consecutive events, shared with every follower that sends them.
    Frames(bytes::Bytes),
    /// Nothing was sent for [`HEARTBEAT`].
    Heartbeat,
    Notice(Notice),
    End(FollowEnd),
}

/// Something the client must be told that is not an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Events `from..first_seq` were removed (retention, or a delete and rewrite) before
    /// this follower got them; it goes on at `first_seq`.
    Retained { from: u64, first_seq: u64 },
}

/// Why a follower stops.
#[derive(Debug, PartialEq, Eq)]
pub enum FollowEnd {
    /// The range, the limit or (without `follow`) the stream's end at the start is reached.
    Done,
    /// The stream was deleted.
    Deleted { last_seq: u64 },
    /// The server is draining.
    Shutdown,
    /// Reading the log failed.
    Failed(String),
}

/// Where a follower starts and what it keeps.
pub struct Start {
    pub stream: String,
    /// First seq wanted (floored at the first retained).
    pub from: u64,
    /// The position is a resume point (`Last-Event-ID`): events already gone past it are
    /// reported with a [`Notice`] rather than skipped silently.
    pub resume: bool,
    /// Last seq to send.
    pub to: Option<u64>,
    pub limit: Option<u64>,
    /// The exact filters (`since`, `until`, `types`, `entity`); its seq range and limit are
    /// not used (`from`, `to` and `limit` are the follower's own).
    pub filter: ReadQuery,
    pub pace: Option<Pace>,
    /// The output is SSE (see [`Next::Frames`]).
    pub sse: bool,
}

pub struct Follower {
    store: Store,
    hub: Arc<Hub>,
    stream: String,
    filter: ReadQuery,
    next: u64,
    end: Option<u64>,
    remaining: Option<u64>,
    /// Live followers only; a bounded replay has none.
    member: Option<Membership>,
    strict: bool,
    cursor: Option<Cursor>,
    pending: VecDeque<Encoded>,
    scratch: Vec<Encoded>,
    notice: Option<Notice>,
    pace: Option<Pacer>,
    /// Took events from the ring since it last read storage (a later fall back is a lag).
    live: bool,
    /// The output is SSE: whole publications can be sent as the pump framed them.
    whole_frames: bool,
    heartbeat_at: Instant,
}

struct Pacer {
    speed: f64,
    /// The last event released: its ts and when it was due.
    last: Option<(i64, Instant)>,
    /// Pacing stops once the follower has caught up: live events go as they come.
    off: bool,
}

impl Pacer {
    /// When the event with `ts` is due; the first one at once (`now`).
    fn due(&self, ts: i64, now: Instant) -> Instant {
        match self.last {
            None => now,
            Some((last_ts, at)) => {
                let gap_ms = ts.saturating_sub(last_ts).max(0) as f64 / self.speed;
                // Far-future gaps saturate at a year rather than overflow.
                at + Duration::from_secs_f64((gap_ms / 1000.0).min(3.15e7))
            }
        }
    }
}

impl Follower {
    /// A follower of `start.stream`: live when `member` is given, else a bounded replay
    /// that ends at `start.to`.
    pub fn new(store: Store, hub: Arc<Hub>, start: Start, member: Option<Membership>) -> Follower {
        if let Some(m) = &member {
            m.position.next.store(start.from, Ordering::Relaxed);
            m.position.from_storage.store(true, Ordering::Relaxed);
        }
        Follower {
            store,
            hub,
            stream: start.stream,
            filter: start.filter,
            next: start.from,
            end: start.to,
            remaining: start.limit,
            member,
            strict: start.resume,
            cursor: None,
            pending: VecDeque::new(),
            scratch: Vec::new(),
            notice: None,
            pace: start.pace.map(|p| Pacer {
                speed: p.speed,
                last: None,
                off: false,
            }),
            live: false,
            whole_frames: start.sse,
            heartbeat_at: Instant::now() + HEARTBEAT,
        }
    }

    /// The next thing to send. Cancel-safe only in that dropping it ends the follower.
    pub async fn next(&mut self) -> Next {
        let out = self.step().await;
        self.heartbeat_at = Instant::now() + HEARTBEAT;
        if let Some(m) = &self.member {
            m.position.next.store(self.next, Ordering::Relaxed);
        }
        out
    }

    async fn step(&mut self) -> Next {
        loop {
            if !self.pending.is_empty() {
                match self.release() {
                    Ok(events) => return Next::Events(events),
                    Err(due) => {
                        tokio::select! {
                            biased;
                            () = self.hub.closing.cancelled() => return Next::End(FollowEnd::Shutdown),
                            () = tokio::time::sleep_until(due.min(self.heartbeat_at)) => {
                                if due > self.heartbeat_at {
                                    return Next::Heartbeat;
                                }
                            }
                        }
                        continue;
                    }
                }
            }
            // After the events read before it: a notice says what comes after them.
            if let Some(n) = self.notice.take() {
                return Next::Notice(n);
            }
            if self.finished() {
                return Next::End(FollowEnd::Done);
            }
            if self.hub.is_closed() {
                return Next::End(FollowEnd::Shutdown);
            }
            if self.cursor.is_none()
                && let Some(m) = self.member.as_mut()
            {
                // Seen before looking at the ring: a publication after this wakes the wait.
                let t = *m.tail.borrow_and_update();
                if let Some(last_seq) = t.deleted {
                    return Next::End(FollowEnd::Deleted { last_seq });
                }
                if t.closing {
                    return Next::End(FollowEnd::Shutdown);
                }
                self.scratch.clear();
                // Whole publications go as they are when nothing is taken out of them.
                let whole = self.whole_frames
                    && !self.filter.filtered()
                    && self.remaining.is_none()
                    && self.pace.as_ref().is_none_or(|p| p.off);
                let until = self.end.unwrap_or(u64::MAX);
                match m
                    .topic
                    .take(self.next, TAKE_BYTES, whole, until, &mut self.scratch)
                {
                    Taken::Batch { sse, last, events } => {
                        self.live = true;
                        m.position.from_storage.store(false, Ordering::Relaxed);
                        self.hub
                            .stats
                            .events_live
                            .fetch_add(events, Ordering::Relaxed);
                        self.next = last + 1;
                        return Next::Frames(sse);
                    }
                    Taken::Events => {
                        self.keep_taken();
                        continue;
                    }
                    Taken::Ahead => {
                        if let Some(p) = self.pace.as_mut() {
                            p.off = true;
                        }
                        if let Some(done) = self.wait_tail().await {
                            return done;
                        }
                        continue;
                    }
                    Taken::Behind => {
                        if self.live {
                            self.live = false;
                            self.hub.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
                        }
                        m.position.from_storage.store(true, Ordering::Relaxed);
                    }
                }
            }
            match self.storage_step().await {
                Ok(true) => continue,
                Ok(false) => {
                    if self.member.is_none() {
                        // A bounded replay read to the end of what was there.
                        if self.pending.is_empty() {
                            return Next::End(FollowEnd::Done);
                        }
                        continue;
                    }
                    // Nothing new in storage that the ring does not hold yet: look again
                    // soon (the ring's pump may be a step behind the index).
                    tokio::select! {
                        biased;
                        () = self.hub.closing.cancelled() => return Next::End(FollowEnd::Shutdown),
                        () = tokio::time::sleep(IDLE_RETRY) => {}
                    }
                }
                Err(end) => return Next::End(end),
            }
        }
    }

    fn finished(&self) -> bool {
        self.remaining == Some(0) || self.end.is_some_and(|e| self.next > e)
    }

    /// Move what the ring gave into `pending`, through the filters and the range.
    fn keep_taken(&mut self) {
        let Some(last) = self.scratch.last().map(|e| e.seq) else {
            return;
        };
        self.live = true;
        if let Some(m) = &self.member {
            m.position.from_storage.store(false, Ordering::Relaxed);
        }
        let end = self.end.unwrap_or(u64::MAX);
        let filtered = self.filter.filtered();
        let mut kept = 0u64;
        for e in self.scratch.drain(..) {
            if e.seq > end {
                break;
            }
            if !filtered || e.kept_by(&self.filter) {
                self.pending.push_back(e);
                kept += 1;
            }
        }
        self.hub
            .stats
            .events_live
            .fetch_add(kept, Ordering::Relaxed);
        self.next = last + 1;
    }

    /// Wait for the ring to grow, a heartbeat, or the end. `Some` ends the step.
    async fn wait_tail(&mut self) -> Option<Next> {
        let tail = &mut self.member.as_mut()?.tail;
        // Shutdown comes through the tail too (`Tail::closing`).
        tokio::select! {
            biased;
            changed = tail.changed() => {
                // The sender lives as long as the topic, which this follower holds.
                changed.err().map(|_| Next::End(FollowEnd::Done))
            }
            () = tokio::time::sleep_until(self.heartbeat_at) => Some(Next::Heartbeat),
        }
    }

    /// Events of `pending` that may go now (all, but under pacing), within the limit; or
    /// when the first of them is due.
    fn release(&mut self) -> Result<Vec<Encoded>, Instant> {
        let max = self
            .remaining
            .map_or(usize::MAX, |r| usize::try_from(r).unwrap_or(usize::MAX));
        let mut out = Vec::new();
        match self.pace.as_mut() {
            Some(p) if !p.off => {
                let now = Instant::now();
                while out.len() < max {
                    let Some(e) = self.pending.front() else { break };
                    let due = p.due(e.ts, now);
                    if due > now {
                        if out.is_empty() {
                            return Err(due);
                        }
                        break;
                    }
                    p.last = Some((e.ts, due));
                    if let Some(e) = self.pending.pop_front() {
                        out.push(e);
                    }
                }
            }
            _ => {
                let n = self.pending.len().min(max);
                out.extend(self.pending.drain(..n));
            }
        }
        if let Some(r) = self.remaining.as_mut() {
            *r = r.saturating_sub(out.len() as u64);
            if *r == 0 {
                self.pending.clear();
            }
        }
        // A catch-up step leaves room for a thousand events; a live follower needs a handful.
        if self.pending.is_empty() && self.pending.capacity() > SHRINK_ABOVE {
            self.pending = VecDeque::new();
        }
        if self.scratch.capacity() > SHRINK_ABOVE {
            self.scratch = Vec::new();
        }
        Ok(out)
    }

    /// One bounded read of storage from the position. `Ok(true)`: progress (events may be
    /// pending, or all were filtered out); `Ok(false)`: nothing to read.
    async fn storage_step(&mut self) -> Result<bool, FollowEnd> {
        let cursor = match self.cursor.take() {
            Some(c) => c,
            None => {
                let q = ReadQuery {
                    from: Some(self.next),
                    to: self.end,
                    limit: u64::MAX,
                    ..self.filter.clone()
                };
                let Some(c) = self.store.read(&self.stream, q) else {
                    return self.gone();
                };
                if c.start_seq() > self.next {
                    let from = std::mem::replace(&mut self.next, c.start_seq());
                    if self.strict {
                        // Told before the events after the gap are read.
                        self.notice = Some(Notice::Retained {
                            from,
                            first_seq: c.start_seq(),
                        });
                        self.cursor = Some(c);
                        return Ok(true);
                    }
                }
                c
            }
        };
        self.strict = true;
        let before = self.next;
        let stepped = tokio::task::spawn_blocking(move || {
            let mut cursor = cursor;
            let res = super::read_encoded(&mut cursor, STEP_EVENTS, STEP_BYTES);
            (cursor, res)
        })
        .await;
        let (cursor, res) = match stepped {
            Ok(v) => v,
            Err(e) => return Err(FollowEnd::Failed(format!("replay task failed: {e}"))),
        };
        let (events, res) = res;
        let n = events.len() as u64;
        self.hub
            .stats
            .events_storage
            .fetch_add(n, Ordering::Relaxed);
        self.pending.extend(events);
        match res {
            Ok(done) => {
                self.next = self.next.max(cursor.position());
                if !done {
                    self.cursor = Some(cursor);
                }
                Ok(self.next > before || n > 0)
            }
            Err(ReadError::Retained {
                next_seq,
                first_seq,
                ..
            }) => {
                // The events read before the gap stay pending and go first.
                self.notice = Some(Notice::Retained {
                    from: next_seq,
                    first_seq,
                });
                self.next = first_seq;
                Ok(true)
            }
            Err(e) => Err(FollowEnd::Failed(e.to_string())),
        }
    }

    /// The stream cannot be read: deleted (a live follower learns it from its topic).
    fn gone(&mut self) -> Result<bool, FollowEnd> {
        if self.member.is_none() {
            return Err(FollowEnd::Deleted {
                last_seq: self.next.saturating_sub(1),
            });
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Transport;

    /// With nothing to send, a live follower produces a heartbeat every [`HEARTBEAT`] (time is
    /// paused: tokio moves it on when every task waits).
    #[tokio::test(start_paused = true)]
    async fn a_quiet_follower_sends_a_heartbeat_every_15_seconds() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut cfg = vx_storage::StorageConfig::new(tmp.path());
        cfg.shards = Some(2);
        let (store, _) = vx_storage::Store::open(cfg).unwrap_or_else(|e| panic!("{e}"));
        let hub = Arc::new(Hub::new(10));
        let member = hub
            .join(&store, "quiet", Transport::Sse)
            .unwrap_or_else(|_| panic!("room for a follower"));
        let start = Start {
            stream: "quiet".into(),
            from: 1,
            resume: false,
            to: None,
            limit: None,
            filter: ReadQuery::default(),
            pace: None,
            sse: true,
        };
        let mut f = Follower::new(store.clone(), Arc::clone(&hub), start, Some(member));
        for _ in 0..2 {
            let before = Instant::now();
            assert!(matches!(f.next().await, Next::Heartbeat));
            assert_eq!(before.elapsed(), HEARTBEAT);
        }
        hub.close();
        assert!(matches!(f.next().await, Next::End(FollowEnd::Shutdown)));
        drop(f);
        store.shutdown();
    }
}
