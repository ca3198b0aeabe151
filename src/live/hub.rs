//! The followed streams ("topics") and their fan-out.
//!
//! A topic exists while its stream has followers. Its pump waits on the storage's watch of
//! the stream (pushed by the log writer when a group becomes visible), reads the new events
//! from the log once, encodes each once ([`Encoded`]) and appends them to the topic's ring:
//! the newest events, bounded in count and bytes. Followers take `Bytes` handles out of the
//! ring (no copy, no encode per follower). A follower whose position has left the ring reads
//! from storage instead, so a slow follower costs the others nothing and never holds the
//! pump, and the pump never holds the writer.
//!
//! Bounds: followers (and blocked Redis `XREAD`s, [`Hub::reserve`]) ≤ `server.max_followers`
//! (503 past it), so topics ≤ that too; a ring holds at most [`RING_EVENTS`] events and its
//! share of [`RING_BUDGET`] bytes (never less than [`RING_MIN_BYTES`]), so all rings together
//! stay within about `RING_BUDGET`.

use super::Encoded;
use bytes::Bytes;
use hashbrown::HashMap;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use vx_storage::{ReadError, ReadQuery, Store};

/// Events a ring holds at most.
pub const RING_EVENTS: usize = 16_384;
/// Bytes all rings share; a ring's cap is its share, between [`RING_MIN_BYTES`] and
/// [`RING_MAX_BYTES`].
pub const RING_BUDGET: usize = 256 << 20;
pub const RING_MIN_BYTES: usize = 1 << 20;
pub const RING_MAX_BYTES: usize = 16 << 20;
/// Events, and bytes, the pump reads from the log per blocking step.
const PUMP_STEP_EVENTS: u64 = 4096;
const PUMP_STEP_BYTES: usize = 4 << 20;
/// Publications are spaced by this much per follower of the topic, up to [`PUBLISH_GAP_MAX`]:
/// each publication wakes every follower, so this bounds wake-ups per second to about
/// 1 / `PUBLISH_GAP_PER_FOLLOWER` whatever the ingest rate (events published together are
/// sent together), at a cost in delivery latency of at most the gap.
const PUBLISH_GAP_PER_FOLLOWER: Duration = Duration::from_micros(2);
const PUBLISH_GAP_MAX: Duration = Duration::from_millis(4);

/// How a follower is connected (a metrics label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Sse,
    Ndjson,
    WebSocket,
    /// A blocked `XREAD` of the Redis-protocol listener: it holds a place against
    /// `server.max_followers` ([`Hub::reserve`]) but no topic.
    Resp,
}

impl Transport {
    /// In the order of the follower counts (`Hub::followers`, `HubSnapshot::followers`).
    pub const ALL: [Transport; 4] = [
        Transport::Sse,
        Transport::Ndjson,
        Transport::WebSocket,
        Transport::Resp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Ndjson => "ndjson",
            Transport::WebSocket => "websocket",
            Transport::Resp => "resp",
        }
    }
}

/// What followers watch on a topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tail {
    /// One past the newest event in the ring.
    pub next: u64,
    /// The stream was deleted (its last seq then): followers end.
    pub deleted: Option<u64>,
    /// The server is draining: followers end (told here rather than through a cancellation
    /// token, so a live follower waits on one thing only).
    pub closing: bool,
}

/// The newest events of a topic, contiguous in `seq`.
struct Ring {
    /// Seq of `events[0]`; when empty, of the next event to be pushed.
    first: u64,
    events: VecDeque<Encoded>,
    /// Each publication's SSE frames in one buffer, for followers that take whole
    /// publications: one shared handle per publication instead of one per event (a refcount
    /// touched by every follower is what fan-out contends on).
    batches: VecDeque<SseRun>,
    bytes: usize,
}

/// One publication's SSE frames, concatenated (a run of seqs `first..=last`).
struct SseRun {
    first: u64,
    last: u64,
    sse: Bytes,
}

/// What a follower finds in the ring at its position.
pub enum Taken {
    /// The SSE frames of one whole publication starting at its position, through `last`.
    Batch { sse: Bytes, last: u64, events: u64 },
    /// Events were appended to the caller's vector, from its position on.
    Events,
    /// Its position is past the newest event: it is live and caught up.
    Ahead,
    /// Its position has left the ring (or was never in it): read storage.
    Behind,
}

/// A followed stream.
pub struct Topic {
    pub stream: String,
    ring: RwLock<Ring>,
    tail: watch::Sender<Tail>,
    /// Follower positions by id, for lag metrics: (next seq, reading storage).
    positions: Mutex<HashMap<u64, Arc<Position>>>,
    followers: AtomicUsize,
    /// Set once deleted or stopped: new followers get a fresh topic.
    ended: AtomicBool,
    stop: CancellationToken,
}

/// A follower's progress, as metrics see it.
#[derive(Default)]
pub struct Position {
    pub next: AtomicU64,
    pub from_storage: AtomicBool,
}

impl Topic {
    /// Append the events at or after `next` (at most `max_bytes` of SSE frames, at least
    /// one event) to `out`; or, with `whole` and `next` at the start of a publication, that
    /// publication's frames as one buffer, when it ends at or before `until`.
    pub fn take(
        &self,
        next: u64,
        max_bytes: usize,
        whole: bool,
        until: u64,
        out: &mut Vec<Encoded>,
    ) -> Taken {
        let ring = self.ring.read();
        let end = ring.first + ring.events.len() as u64;
        if next >= end {
            return Taken::Ahead;
        }
        if next < ring.first {
            return Taken::Behind;
        }
        if whole {
            let i = ring.batches.partition_point(|b| b.first < next);
            if let Some(b) = ring.batches.get(i)
                && b.first == next
                && b.last <= until
            {
                return Taken::Batch {
                    sse: b.sse.clone(),
                    last: b.last,
                    events: b.last - b.first + 1,
                };
            }
        }
        let skip = usize::try_from(next - ring.first).unwrap_or(usize::MAX);
        let mut bytes = 0;
        for e in ring.events.iter().skip(skip) {
            if bytes > 0 && bytes + e.mem_bytes() > max_bytes {
                break;
            }
            bytes += e.mem_bytes();
            out.push(e.clone());
        }
        Taken::Events
    }

    /// Append events read by the pump (contiguous from the ring's end) and publish them.
    fn push(&self, batch: Vec<Encoded>, cap_bytes: usize) {
        let Some(last) = batch.last().map(|e| e.seq) else {
            return;
        };
        let first = batch.first().map_or(last, |e| e.seq);
        let mut sse = Vec::with_capacity(batch.iter().map(|e| e.sse().len()).sum());
        for e in &batch {
            sse.extend_from_slice(&e.sse());
        }
        let sse = Bytes::from(sse);
        {
            let mut ring = self.ring.write();
            ring.bytes += sse.len();
            ring.batches.push_back(SseRun { first, last, sse });
            for e in batch {
                ring.bytes += e.mem_bytes();
                ring.events.push_back(e);
            }
            while ring.events.len() > RING_EVENTS
                || (ring.bytes > cap_bytes && ring.events.len() > 1)
            {
                if let Some(old) = ring.events.pop_front() {
                    ring.bytes -= old.mem_bytes();
                    ring.first = old.seq + 1;
                }
                // A publication goes with its first event.
                while ring.batches.front().is_some_and(|b| b.first < ring.first) {
                    if let Some(b) = ring.batches.pop_front() {
                        ring.bytes -= b.sse.len();
                    }
                }
            }
        }
        self.tail.send_modify(|t| t.next = last + 1);
    }

    /// Events before `first` are gone from storage: start the ring over there.
    fn restart_at(&self, first: u64) {
        let mut ring = self.ring.write();
        ring.events.clear();
        ring.batches.clear();
        ring.bytes = 0;
        ring.first = first;
        drop(ring);
        self.tail.send_modify(|t| t.next = first);
    }

    fn end_deleted(&self, last_seq: u64) {
        self.ended.store(true, Ordering::Release);
        self.tail.send_modify(|t| t.deleted = Some(last_seq));
    }

    pub fn bytes(&self) -> usize {
        self.ring.read().bytes
    }

    pub fn followers(&self) -> usize {
        self.followers.load(Ordering::Relaxed)
    }
}

/// Every followed stream, the follower count and its limit.
pub struct Hub {
    topics: Mutex<HashMap<String, Arc<Topic>>>,
    followers: [AtomicUsize; 4],
    /// All transports: what `server.max_followers` bounds.
    total: AtomicUsize,
    max_followers: usize,
    next_id: AtomicU64,
    /// Cancelled when the server drains: every follower ends (see [`Hub::close`]).
    pub closing: CancellationToken,
    closed: AtomicBool,
    pub stats: Stats,
}

/// Counters of the fan-out (read by the metrics collector).
#[derive(Default)]
pub struct Stats {
    pub rejected: AtomicU64,
    /// Followers whose position left their ring and went back to storage.
    pub fallbacks: AtomicU64,
    pub events_live: AtomicU64,
    pub events_storage: AtomicU64,
    pub publications: AtomicU64,
}

/// `server.max_followers` is reached.
#[derive(Debug)]
pub struct Full {
    pub max: usize,
}

/// A place against `server.max_followers`, given back when dropped: every follower holds
/// one (in its [`Membership`]), and so does a blocked Redis `XREAD`, which follows no topic.
pub struct Slot {
    hub: Arc<Hub>,
    transport: Transport,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.hub.followers[self.transport as usize].fetch_sub(1, Ordering::Relaxed);
        self.hub.total.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A follower's place in a topic; leaving (drop) removes it, and the topic with its last
/// follower.
pub struct Membership {
    hub: Arc<Hub>,
    pub topic: Arc<Topic>,
    /// The topic's end, and whether the stream was deleted or the server drains.
    pub tail: watch::Receiver<Tail>,
    id: u64,
    pub position: Arc<Position>,
    /// Given back after the topic is left (fields drop after `drop` runs).
    _slot: Slot,
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.topic.positions.lock().remove(&self.id);
        let mut topics = self.hub.topics.lock();
        if self.topic.followers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.topic.stop.cancel();
            if topics
                .get(&self.topic.stream)
                .is_some_and(|t| Arc::ptr_eq(t, &self.topic))
            {
                topics.remove(&self.topic.stream);
            }
        }
    }
}

impl Hub {
    pub fn new(max_followers: usize) -> Hub {
        Hub {
            topics: Mutex::new(HashMap::new()),
            followers: Default::default(),
            total: AtomicUsize::new(0),
            max_followers,
            next_id: AtomicU64::new(1),
            closing: CancellationToken::new(),
            closed: AtomicBool::new(false),
            stats: Stats::default(),
        }
    }

    /// The server drains: end every follower, and refuse new ones.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.closing.cancel();
        for t in self.topics.lock().values() {
            t.tail.send_modify(|t| t.closing = true);
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn followers(&self) -> usize {
        self.followers
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .sum()
    }

    /// Take a place against `server.max_followers`, or be refused (counted in
    /// `vx_followers_rejected`).
    pub fn reserve(self: &Arc<Self>, transport: Transport) -> Result<Slot, Full> {
        // Reserved atomically, so concurrent joins never pass the limit together.
        let reserved = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_followers).then_some(n + 1)
            });
        if reserved.is_err() {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Full {
                max: self.max_followers,
            });
        }
        self.followers[transport as usize].fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            hub: Arc::clone(self),
            transport,
        })
    }

    /// Become a follower of `stream`, starting its topic (and pump) if it has none.
    pub fn join(
        self: &Arc<Self>,
        store: &Store,
        stream: &str,
        transport: Transport,
    ) -> Result<Membership, Full> {
        let slot = self.reserve(transport)?;
        let mut topics = self.topics.lock();
        let topic = match topics.get(stream) {
            Some(t) if !t.ended.load(Ordering::Acquire) => Arc::clone(t),
            _ => {
                let t = self.start_topic(store, stream);
                topics.insert(stream.to_string(), Arc::clone(&t));
                t
            }
        };
        topic.followers.fetch_add(1, Ordering::AcqRel);
        drop(topics);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let position = Arc::new(Position::default());
        topic.positions.lock().insert(id, Arc::clone(&position));
        Ok(Membership {
            hub: Arc::clone(self),
            tail: topic.tail.subscribe(),
            topic,
            id,
            position,
            _slot: slot,
        })
    }

    fn start_topic(self: &Arc<Self>, store: &Store, stream: &str) -> Arc<Topic> {
        let watch = store.watch(stream);
        let start = watch.borrow().last_seq + 1;
        let (tail, _) = watch::channel(Tail {
            next: start,
            deleted: None,
            closing: self.is_closed(),
        });
        let topic = Arc::new(Topic {
            stream: stream.to_string(),
            ring: RwLock::new(Ring {
                first: start,
                events: VecDeque::new(),
                batches: VecDeque::new(),
                bytes: 0,
            }),
            tail,
            positions: Mutex::new(HashMap::new()),
            followers: AtomicUsize::new(0),
            ended: AtomicBool::new(false),
            stop: CancellationToken::new(),
        });
        tokio::spawn(pump(
            Arc::clone(self),
            Arc::clone(&topic),
            store.clone(),
            watch,
            start,
        ));
        topic
    }

    /// A ring's byte cap with `topics` topics.
    fn ring_cap(&self) -> usize {
        let topics = self.topics.lock().len().max(1);
        (RING_BUDGET / topics).clamp(RING_MIN_BYTES, RING_MAX_BYTES)
    }

    /// What the metrics report, computed at scrape time.
    pub fn snapshot(&self) -> HubSnapshot {
        let topics: Vec<Arc<Topic>> = self.topics.lock().values().cloned().collect();
        let mut s = HubSnapshot {
            followers: [0; 4],
            topics: topics.len() as u64,
            ..HubSnapshot::default()
        };
        for (i, f) in self.followers.iter().enumerate() {
            s.followers[i] = f.load(Ordering::Relaxed) as u64;
        }
        for t in &topics {
            s.ring_bytes += t.bytes() as u64;
            let tail = t.tail.borrow().next;
            for p in t.positions.lock().values() {
                let lag = tail.saturating_sub(p.next.load(Ordering::Relaxed));
                s.lag_max = s.lag_max.max(lag);
                s.lag_sum += lag;
                if p.from_storage.load(Ordering::Relaxed) {
                    s.from_storage += 1;
                }
            }
        }
        s
    }
}

/// The fan-out at one scrape.
#[derive(Clone, Copy, Debug, Default)]
pub struct HubSnapshot {
    /// By transport: SSE, NDJSON, WebSocket, RESP (blocked `XREAD`s).
    pub followers: [u64; 4],
    pub topics: u64,
    pub ring_bytes: u64,
    pub lag_max: u64,
    pub lag_sum: u64,
    pub from_storage: u64,
}

/// Read the events of `stream` from `next` up to `last` (a bounded step) and encode them.
/// Returns them with the position after them. Blocking.
fn read_step(
    store: &Store,
    stream: &str,
    next: u64,
    last: u64,
) -> Result<Option<(Vec<Encoded>, u64)>, ReadError> {
    let q = ReadQuery {
        from: Some(next),
        to: Some(last),
        limit: PUMP_STEP_EVENTS,
        ..ReadQuery::default()
    };
    let Some(mut cursor) = store.read(stream, q) else {
        return Ok(None);
    };
    if cursor.start_seq() > next {
        // Retention (or a delete) took events the ring was to hold.
        return Err(ReadError::Retained {
            stream: stream.to_string(),
            next_seq: next,
            first_seq: cursor.start_seq(),
        });
    }
    let (out, res) = super::read_encoded(&mut cursor, PUMP_STEP_EVENTS as usize, PUMP_STEP_BYTES);
    res?;
    let pos = out.last().map_or(cursor.position(), |e| e.seq + 1);
    Ok(Some((out, pos)))
}

/// The topic's pump: see the module docs. Ends when the topic's last follower leaves or the
/// stream is deleted.
async fn pump(
    hub: Arc<Hub>,
    topic: Arc<Topic>,
    store: Store,
    mut watch: watch::Receiver<vx_storage::watch::Visible>,
    mut next: u64,
) {
    let deletes = watch.borrow().deletes;
    let mut last_publish = tokio::time::Instant::now();
    loop {
        let visible = *watch.borrow_and_update();
        if visible.deletes != deletes {
            topic.end_deleted(visible.last_seq);
            return;
        }
        while visible.last_seq >= next && !topic.stop.is_cancelled() {
            let gap = (PUBLISH_GAP_PER_FOLLOWER
                * u32::try_from(topic.followers()).unwrap_or(u32::MAX))
            .min(PUBLISH_GAP_MAX);
            let due = last_publish + gap;
            if due > tokio::time::Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            let (s, name, last) = (store.clone(), topic.stream.clone(), visible.last_seq);
            let step = tokio::task::spawn_blocking(move || read_step(&s, &name, next, last)).await;
            match step {
                Ok(Ok(Some((batch, pos)))) => {
                    let progressed = pos > next;
                    next = pos;
                    if !batch.is_empty() {
                        topic.push(batch, hub.ring_cap());
                        hub.stats.publications.fetch_add(1, Ordering::Relaxed);
                        last_publish = tokio::time::Instant::now();
                    }
                    if !progressed {
                        break;
                    }
                }
                // Deleted (or not yet re-created): the watch says which.
                Ok(Ok(None)) => break,
                Ok(Err(ReadError::Retained { first_seq, .. })) => {
                    next = first_seq;
                    topic.restart_at(first_seq);
                }
                Ok(Err(e)) => {
                    tracing::error!(stream = %topic.stream, error = %e, "live fan-out cannot read the log");
                    // Followers fall back to storage (and report the error there); retry.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    break;
                }
                Err(e) => {
                    tracing::error!(stream = %topic.stream, error = %e, "live fan-out read failed");
                    break;
                }
            }
        }
        tokio::select! {
            changed = watch.changed() => {
                if changed.is_err() {
                    return; // the store is gone
                }
            }
            () = topic.stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vx_proto::EventView;
    use vx_proto::event::Kind;

    fn topic(first: u64) -> Topic {
        Topic {
            stream: "s".into(),
            ring: RwLock::new(Ring {
                first,
                events: VecDeque::new(),
                batches: VecDeque::new(),
                bytes: 0,
            }),
            tail: watch::channel(Tail {
                next: first,
                ..Tail::default()
            })
            .0,
            positions: Mutex::new(HashMap::new()),
            followers: AtomicUsize::new(0),
            ended: AtomicBool::new(false),
            stop: CancellationToken::new(),
        }
    }

    fn ev(seq: u64) -> Encoded {
        Encoded::new(
            seq,
            &EventView {
                stream: "s",
                entity: None,
                ty: "t",
                ts: 0,
                kind: Kind::Event,
                value: None,
                id: None,
                data: None,
            },
        )
    }

    fn seqs(out: &[Encoded]) -> Vec<u64> {
        out.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn take_finds_whole_publications_single_events_and_the_ends() {
        let t = topic(1);
        let mut out = Vec::new();
        assert!(matches!(
            t.take(1, 1 << 20, true, u64::MAX, &mut out),
            Taken::Ahead
        ));
        t.push(vec![ev(1), ev(2), ev(3)], 1 << 20);
        t.push(vec![ev(4)], 1 << 20);
        assert_eq!(t.tail.borrow().next, 5);
        match t.take(1, 1 << 20, true, u64::MAX, &mut out) {
            Taken::Batch { sse, last, events } => {
                assert_eq!((last, events), (3, 3));
                let want: Vec<u8> = [ev(1), ev(2), ev(3)].iter().flat_map(|e| e.sse()).collect();
                assert_eq!(sse, want);
            }
            _ => panic!("a whole publication"),
        }
        // Mid-publication, or a publication ending past `until`: event by event.
        assert!(matches!(
            t.take(2, 1 << 20, true, u64::MAX, &mut out),
            Taken::Events
        ));
        assert_eq!(seqs(&out), [2, 3, 4]);
        out.clear();
        assert!(matches!(
            t.take(1, 1 << 20, true, 2, &mut out),
            Taken::Events
        ));
        assert_eq!(
            seqs(&out),
            [1, 2, 3, 4],
            "the follower drops what is past `until`"
        );
        out.clear();
        // At least one event, whatever the byte bound.
        assert!(matches!(
            t.take(3, 1, false, u64::MAX, &mut out),
            Taken::Events
        ));
        assert_eq!(seqs(&out), [3]);
        assert!(matches!(
            t.take(5, 1 << 20, true, u64::MAX, &mut out),
            Taken::Ahead
        ));
    }

    #[test]
    fn a_full_ring_drops_its_oldest_events_and_their_publications() {
        let t = topic(1);
        t.push(vec![ev(1), ev(2)], 1 << 20);
        t.push(vec![ev(3), ev(4)], 1 << 20);
        // A cap of one byte keeps only the newest event.
        t.push(vec![ev(5)], 1);
        let mut out = Vec::new();
        assert!(matches!(
            t.take(4, 1 << 20, false, u64::MAX, &mut out),
            Taken::Behind
        ));
        assert!(matches!(
            t.take(5, 1 << 20, true, u64::MAX, &mut out),
            Taken::Batch { last: 5, .. }
        ));
        let ring = t.ring.read();
        assert_eq!(
            (ring.first, ring.events.len(), ring.batches.len()),
            (5, 1, 1)
        );
        assert_eq!(
            ring.bytes,
            ring.events[0].mem_bytes() + ring.batches[0].sse.len()
        );
        drop(ring);
        t.restart_at(9);
        assert!(matches!(
            t.take(5, 1 << 20, false, u64::MAX, &mut out),
            Taken::Behind
        ));
        assert_eq!(t.tail.borrow().next, 9);
    }
}
