//! `vx-router` owns the way from a decoded request to the log writer: shard choice, the
//! per-shard reservation counters with their high-water mark, the global queued-byte budget,
//! the measured drain rate that `Retry-After` is derived from, and dispatch to the storage
//! engine. It knows nothing of HTTP.
//!
//! # Admission (docs/API.md §4)
//! A request reserves, at once and in shard order, its event count on every shard it touches,
//! only if every one of them is below `high_water × queue_capacity` and the global queued-byte
//! budget allows; otherwise nothing is reserved and the caller answers 429. A shard therefore
//! never holds more than its mark plus one request. Reservations are released by the storage
//! engine (it drops the [`Reservation`] guard) once the request is applied.
//!
//! The check-and-reserve step runs under one short mutex per request (not per event): taking
//! every touched shard's counter in one critical section is what makes admission atomic
//! without rollbacks, and releases stay lock-free.
//!
//! # Streaming connections (docs/API.md §4)
//! A binary-frames connection is not refused with 429: where an HTTP request would be, it
//! waits in [`Router::admit_or_wait`] (not reading its socket meanwhile) until its shards have
//! drained below `ingest.low_water`, then tries again. Both paths decide with the one
//! [`Router::try_admit`]. Every release wakes the waiters, which re-check; nothing else waits
//! on the counters.

mod drain;

use drain::DrainRate;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Notify;
use tracing::Instrument;
use vx_proto::Batch;
use vx_storage::{
    Durability, FeatureOp, FeatureOutcome, FeatureWrite, Store, WriteError, WriteOutcome,
    WriteRequest,
};

/// Admission settings (the `ingest.*` keys of docs/CONFIG.md).
#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    pub shards: u32,
    /// Events per shard (`ingest.queue_capacity`).
    pub queue_capacity: u32,
    /// Fraction of capacity at which a shard refuses new requests (`ingest.high_water`).
    pub high_water: f64,
    /// Fraction a shard must drain below before `Retry-After` expects room again
    /// (`ingest.low_water`).
    pub low_water: f64,
    /// Bytes of admitted but unwritten events (`ingest.max_queued_bytes`).
    pub max_queued_bytes: u64,
}

/// One request to route.
pub struct Submit {
    pub batch: Batch,
    pub durability: Option<Durability>,
    pub expected_last_seq: Option<u64>,
}

/// A stored request and the fill of the fullest shard it touched (`X-Vx-Queue-Fill`).
#[derive(Debug)]
pub struct Accepted {
    pub outcome: WriteOutcome,
    pub queue_fill: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// 429: a target shard is at its mark or the byte budget is spent; nothing was reserved.
    #[error("{message}")]
    Backpressure {
        retry_after_ms: u64,
        queue_fill: f64,
        message: String,
    },
    /// The write itself failed after admission.
    #[error("{error}")]
    Write { error: WriteError, queue_fill: f64 },
}

/// What every clone of a [`Router`] and every [`Reservation`] share.
struct RouterState {
    cfg: AdmissionConfig,
    store: Store,
    /// Reserved events per shard.
    depth: Vec<AtomicU64>,
    /// Sum of `depth`, for the drain-time estimate.
    total: AtomicU64,
    queued_bytes: AtomicU64,
    /// High-water mark in events: a shard at or above it refuses new requests.
    mark: u64,
    low_mark: u64,
    admit: Mutex<()>,
    drain: DrainRate,
    /// Woken on every release, for [`Router::wait_below_low_water`].
    released: Notify,
}

/// Routes requests to the storage engine with atomic admission. Cheap to clone.
#[derive(Clone)]
pub struct Router {
    shared: Arc<RouterState>,
}

/// An admitted request's reservation; dropping it releases the events and bytes.
pub struct Reservation {
    shared: Arc<RouterState>,
    shards: Vec<(u32, u64)>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let s = &self.shared;
        let mut events = 0;
        for &(shard, n) in &self.shards {
            if let Some(d) = s.depth.get(shard as usize) {
                d.fetch_sub(n, Ordering::AcqRel);
            }
            events += n;
        }
        s.total.fetch_sub(events, Ordering::AcqRel);
        s.queued_bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        s.drain.record(events);
        // After the counters changed: a waiter that registered before re-checks them. With no
        // waiter this is one uncontended lock per request.
        s.released.notify_waiters();
    }
}

impl Router {
    pub fn new(cfg: AdmissionConfig, store: Store) -> Router {
        let cap = u64::from(cfg.queue_capacity.max(1));
        let mark = ((cap as f64 * cfg.high_water).floor() as u64).clamp(1, cap);
        let low_mark = ((cap as f64 * cfg.low_water).floor() as u64).min(mark.saturating_sub(1));
        let shards = cfg.shards.max(1);
        Router {
            shared: Arc::new(RouterState {
                depth: (0..shards).map(|_| AtomicU64::new(0)).collect(),
                total: AtomicU64::new(0),
                queued_bytes: AtomicU64::new(0),
                mark,
                low_mark,
                admit: Mutex::new(()),
                drain: DrainRate::new(),
                released: Notify::new(),
                cfg,
                store,
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    pub fn shard_of(&self, stream: &str) -> u32 {
        vx_proto::shard::shard_of(stream, self.shared.cfg.shards)
    }

    /// Reserved (admitted, not yet applied) events on `shard`.
    pub fn depth(&self, shard: u32) -> u64 {
        self.shared
            .depth
            .get(shard as usize)
            .map_or(0, |d| d.load(Ordering::Acquire))
    }

    pub fn capacity(&self) -> u64 {
        u64::from(self.shared.cfg.queue_capacity)
    }

    pub fn high_water_events(&self) -> u64 {
        self.shared.mark
    }

    /// The low-water mark in events: a stalled streaming connection resumes once its shards
    /// are below it (or empty, should the mark round down to 0).
    pub fn low_water_events(&self) -> u64 {
        self.shared.low_mark
    }

    /// True when a request of `bytes` on `shards` may resume: every shard below the low-water
    /// mark (or empty) and room in the queued-byte budget as admission counts it.
    fn drained_for(&self, shards: &[(u32, u64)], bytes: u64) -> bool {
        let s = &self.shared;
        let low = shards.iter().all(|&(shard, _)| {
            let d = self.depth(shard);
            d < s.low_mark || d == 0
        });
        let queued = s.queued_bytes.load(Ordering::Acquire);
        low && (queued == 0 || queued.saturating_add(bytes) <= s.cfg.max_queued_bytes)
    }

    /// Wait until a request of `bytes` on `shards` (as [`Router::shards_of`] gives them) may
    /// resume after [`Router::try_admit`] refused it: every one of its shards has drained below
    /// `ingest.low_water` and the queued-byte budget has room (docs/API.md §4, streaming connections).
    /// The caller then tries to admit again; another producer may have taken the room first.
    /// Cancel-safe.
    pub async fn wait_below_low_water(&self, shards: &[(u32, u64)], bytes: u64) {
        loop {
            // Created before the check: a release between the check and the await still
            // wakes it (`notify_waiters` reaches every `Notified` that exists at the call).
            let released = self.shared.released.notified();
            if self.drained_for(shards, bytes) {
                return;
            }
            released.await;
        }
    }

    /// Admission for streaming connections (docs/API.md §4: flow control, never 429): reserve for a
    /// request of `bytes` on `shards`, or wait until its shards drained below the low-water
    /// mark and try again, as long as it takes. The same admission decision as
    /// [`Router::try_admit`] (which HTTP uses, answering 429 instead of waiting). Cancel-safe:
    /// nothing is reserved until it returns.
    pub async fn admit_or_wait(&self, shards: &[(u32, u64)], bytes: u64) -> Reservation {
        loop {
            match self.try_admit(shards, bytes) {
                Ok(r) => return r,
                Err(_) => self.wait_below_low_water(shards, bytes).await,
            }
        }
    }

    pub fn queued_bytes(&self) -> u64 {
        self.shared.queued_bytes.load(Ordering::Acquire)
    }

    /// True while any shard is at its mark or the queued-byte budget is spent.
    pub fn backpressured(&self) -> bool {
        let s = &self.shared;
        s.queued_bytes.load(Ordering::Acquire) >= s.cfg.max_queued_bytes
            || s.depth.iter().any(|d| d.load(Ordering::Acquire) >= s.mark)
    }

    /// Measured drain rate of the writer, in events per second (0 before any measurement).
    pub fn drain_rate(&self) -> f64 {
        self.shared.drain.rate()
    }

    /// The fill (0–1) of the fullest of `shards`, as `X-Vx-Queue-Fill` reports it.
    pub fn fill_of(&self, shards: &[(u32, u64)]) -> f64 {
        let cap = self.capacity().max(1) as f64;
        let max = shards
            .iter()
            .map(|&(s, _)| self.depth(s))
            .max()
            .unwrap_or(0);
        (max as f64 / cap).clamp(0.0, 1.0)
    }

    /// Time until the writer has drained what is queued now down to the low-water mark, from
    /// the measured drain rate; one second when nothing has been measured yet.
    fn retry_after_ms(&self, worst_depth: u64) -> u64 {
        let s = &self.shared;
        let rate = s.drain.rate();
        if rate <= 0.0 {
            return 1000;
        }
        // The writer drains FIFO across shards, so the queue ahead of the full shard's oldest
        // events is all that is queued; what must drain is everything above the low mark.
        let total = s.total.load(Ordering::Acquire);
        let excess = total.max(worst_depth).saturating_sub(s.low_mark).max(1);
        let ms = (excess as f64 / rate * 1000.0).ceil() as u64;
        ms.clamp(1, 60_000)
    }

    /// Reserve for a request, atomically across its shards, or refuse with nothing reserved.
    pub fn try_admit(&self, shards: &[(u32, u64)], bytes: u64) -> Result<Reservation, SubmitError> {
        let s = &self.shared;
        let guard = s.admit.lock();
        let mut worst: Option<(u32, u64)> = None;
        // The fullest touched shard as seen by this decision: read again after the lock is
        // released, a shard may already have drained, and a refusal would report a fill below
        // the mark that refused it.
        let mut fullest = 0;
        for &(shard, _) in shards {
            let d = self.depth(shard);
            fullest = fullest.max(d);
            if d >= s.mark && worst.is_none_or(|(_, w)| d > w) {
                worst = Some((shard, d));
            }
        }
        let queued = s.queued_bytes.load(Ordering::Acquire);
        // A request larger than the whole byte budget is still admitted into an empty queue,
        // or it could never be stored at all.
        let bytes_spent = queued > 0 && queued.saturating_add(bytes) > s.cfg.max_queued_bytes;
        if worst.is_some() || bytes_spent {
            drop(guard);
            let queue_fill = (fullest as f64 / self.capacity().max(1) as f64).clamp(0.0, 1.0);
            let message = match worst {
                Some((shard, d)) => format!(
                    "shard {shard} is at its high-water mark ({d} of {} events queued)",
                    self.capacity()
                ),
                None => format!(
                    "the queued-byte budget is spent ({queued} of {} bytes)",
                    s.cfg.max_queued_bytes
                ),
            };
            let worst_depth = worst.map_or(0, |(_, d)| d);
            return Err(SubmitError::Backpressure {
                retry_after_ms: self.retry_after_ms(worst_depth),
                queue_fill,
                message,
            });
        }
        let mut events = 0;
        for &(shard, n) in shards {
            if let Some(d) = s.depth.get(shard as usize) {
                d.fetch_add(n, Ordering::AcqRel);
            }
            events += n;
        }
        s.total.fetch_add(events, Ordering::AcqRel);
        s.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        drop(guard);
        Ok(Reservation {
            shared: Arc::clone(&self.shared),
            shards: shards.to_vec(),
            bytes,
        })
    }

    /// Events per shard of a batch, sorted by shard (the order admission reserves in). Uses
    /// the shards [`Store::prepare`] computed, if it ran.
    pub fn shards_of(&self, batch: &Batch) -> Vec<(u32, u64)> {
        let prepared = batch.is_prepared_for(self.shared.cfg.shards);
        let mut per: Vec<(u32, u64)> = batch
            .runs()
            .iter()
            .map(|run| {
                let shard = if prepared {
                    run.shard
                } else {
                    self.shard_of(batch.stream(run))
                };
                (shard, u64::from(run.count))
            })
            .collect();
        per.sort_unstable_by_key(|&(s, _)| s);
        per.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        per
    }

    /// Admit and write one request (docs/API.md §3–§4). An empty batch is a no-op success.
    pub async fn submit(&self, req: Submit) -> Result<Accepted, SubmitError> {
        let span = self.batch_span(&req);
        self.submit_in_span(req).instrument(span).await
    }

    /// The `batch` span of a request: what it carries, then (recorded by the writer) the
    /// size of the group it was committed in and that group's fsync time. Its fields are
    /// evaluated only when the span is enabled (an OTLP export), not per request otherwise.
    fn batch_span(&self, req: &Submit) -> tracing::Span {
        tracing::info_span!(
            target: vx_sys::EXPORT_SPANS,
            "batch",
            streams = vx_sys::span_int(req.batch.runs().len()),
            events = vx_sys::span_int(req.batch.len()),
            bytes = vx_sys::span_int(req.batch.mem_bytes()),
            durability = req
                .durability
                .unwrap_or_else(|| self.store().fsync_mode().durability())
                .as_str(),
            group = tracing::field::Empty,
            fsync_us = tracing::field::Empty,
        )
    }

    async fn submit_in_span(&self, mut req: Submit) -> Result<Accepted, SubmitError> {
        let store = self.store();
        if req.batch.is_empty() {
            return Ok(Accepted {
                outcome: WriteOutcome {
                    accepted: 0,
                    duplicates: 0,
                    last_seq: Vec::new(),
                    durability: req
                        .durability
                        .unwrap_or_else(|| store.fsync_mode().durability()),
                    stored: Vec::new(),
                    stages: Default::default(),
                },
                queue_fill: 0.0,
            });
        }
        // Shards and dedup keys are computed here, on the caller's task, once.
        store.prepare(&mut req.batch);
        let shards = self.shards_of(&req.batch);
        let bytes = req.batch.mem_bytes() as u64;
        let reservation = self.try_admit(&shards, bytes)?;
        self.write_reserved(req, reservation).await
    }

    /// Admit and write a direct feature write (docs/API.md §6): admitted like events, on the
    /// entity's shard, one event per name it sets (an increment: one); a delete, one event
    /// per target on the target's shard.
    pub async fn submit_features(
        &self,
        mut fw: FeatureWrite,
    ) -> Result<(FeatureOutcome, f64), SubmitError> {
        let store = self.store();
        let features = store.features();
        let (shards, bytes) = match &fw.op {
            FeatureOp::Put(set) => (
                vec![(features.shard_of(&fw.entity), set.len().max(1) as u64)],
                fw.entity.len()
                    + set
                        .iter()
                        .map(|(name, v)| {
                            name.len()
                                + 16
                                + match v {
                                    Some(vx_storage::features::FeatureValue::Str(s)) => s.len(),
                                    _ => 8,
                                }
                        })
                        .sum::<usize>(),
            ),
            FeatureOp::Delete(targets) => {
                let mut shards: Vec<(u32, u64)> = Vec::new();
                for (e, _) in targets {
                    let s = features.shard_of(e);
                    match shards.iter_mut().find(|(x, _)| *x == s) {
                        Some((_, n)) => *n += 1,
                        None => shards.push((s, 1)),
                    }
                }
                (shards, vx_storage::delete_bytes(targets))
            }
            FeatureOp::Incr { name, .. } => (
                vec![(features.shard_of(&fw.entity), 1)],
                fw.entity.len() + name.len() + 16,
            ),
        };
        let reservation = self.try_admit(&shards, bytes as u64)?;
        let queue_fill = self.fill_of(&reservation.shards);
        fw.guard = Some(Box::new(reservation));
        match store.write_features(fw).await {
            Ok(out) => Ok((out, queue_fill)),
            Err(error) => Err(SubmitError::Write { error, queue_fill }),
        }
    }

    /// Write a request that [`Router::try_admit`] admitted (with `reservation`), as
    /// [`Router::submit`] does after admission; for callers that wait for room instead of
    /// refusing. Nothing is awaited before the store's `write`, so at its first poll the
    /// request enters the writer's channel (if the channel has room).
    pub async fn write_admitted(
        &self,
        req: Submit,
        reservation: Reservation,
    ) -> Result<Accepted, SubmitError> {
        let span = self.batch_span(&req);
        self.write_reserved(req, reservation).instrument(span).await
    }

    async fn write_reserved(
        &self,
        req: Submit,
        reservation: Reservation,
    ) -> Result<Accepted, SubmitError> {
        let store = self.store();
        let queue_fill = self.fill_of(&reservation.shards);
        let result = store
            .write(WriteRequest {
                batch: req.batch,
                durability: req.durability,
                expected_last_seq: req.expected_last_seq,
                guard: Some(Box::new(reservation)),
                // Single-node mode: the request comes from a client, not from a partition.
                origin: None,
                append_ms: None,
            })
            .await;
        match result {
            Ok(outcome) => Ok(Accepted {
                outcome,
                queue_fill,
            }),
            Err(error) => Err(SubmitError::Write { error, queue_fill }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use vx_proto::{EventView, Kind};
    use vx_storage::StorageConfig;

    fn router(dir: &std::path::Path, capacity: u32) -> Router {
        let mut cfg = StorageConfig::new(dir);
        cfg.shards = Some(4);
        let (store, _) = Store::open(cfg).unwrap();
        Router::new(
            AdmissionConfig {
                shards: 4,
                queue_capacity: capacity,
                high_water: 0.9,
                low_water: 0.75,
                max_queued_bytes: 1 << 20,
            },
            store,
        )
    }

    #[test]
    fn admission_is_atomic_and_bounded_by_the_mark() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 10); // mark = 9 events
        assert_eq!(r.high_water_events(), 9);
        let a = r.try_admit(&[(0, 8), (1, 2)], 100).unwrap();
        assert_eq!((r.depth(0), r.depth(1)), (8, 2));
        // Shard 0 is below its mark (8 < 9): one more request fits, beyond the mark.
        let b = r.try_admit(&[(0, 5)], 100).unwrap();
        assert_eq!(r.depth(0), 13);
        assert!(r.backpressured());
        // Now shard 0 is at its mark: a request touching it reserves nothing anywhere.
        match r.try_admit(&[(1, 1), (0, 1)], 100) {
            Err(SubmitError::Backpressure {
                retry_after_ms,
                queue_fill,
                ..
            }) => {
                assert!(retry_after_ms >= 1);
                assert!((queue_fill - 1.0).abs() < 1e-9);
            }
            _ => panic!("expected backpressure"),
        }
        assert_eq!(r.depth(1), 2);
        drop(a);
        drop(b);
        assert_eq!((r.depth(0), r.depth(1), r.queued_bytes()), (0, 0, 0));
        assert!(!r.backpressured());
    }

    #[test]
    fn byte_budget() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 1000);
        // Larger than the whole budget but the queue is empty: admitted.
        let a = r.try_admit(&[(0, 1)], 2 << 20).unwrap();
        assert!(r.try_admit(&[(1, 1)], 1).is_err());
        drop(a);
        assert!(r.try_admit(&[(1, 1)], 1).is_ok());
    }

    /// Poll `fut` a few scheduler rounds; true if it finished.
    async fn finishes<F: std::future::Future>(fut: &mut std::pin::Pin<Box<F>>) -> bool {
        for _ in 0..10 {
            let ready =
                std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_ready()))
                    .await;
            if ready {
                return true;
            }
            tokio::task::yield_now().await;
        }
        false
    }

    #[tokio::test]
    async fn waiting_resumes_only_below_the_low_water_mark() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 100); // mark 90, low water 75
        assert_eq!((r.high_water_events(), r.low_water_events()), (90, 75));
        let a = r.try_admit(&[(0, 80)], 10).unwrap();
        let b = r.try_admit(&[(0, 20)], 10).unwrap();
        assert!(r.try_admit(&[(0, 1)], 10).is_err());
        let shards = [(0, 1), (1, 1)];
        let mut wait = Box::pin(r.wait_below_low_water(&shards, 10));
        assert!(!finishes(&mut wait).await, "shard 0 is at 100");
        drop(b);
        // 80 is below the mark, so admission would succeed, but not below the low mark: a
        // stalled connection stays stalled (hysteresis).
        assert!(!finishes(&mut wait).await, "shard 0 is at 80, above 75");
        drop(a);
        assert!(finishes(&mut wait).await, "shard 0 drained");
        // Untouched shards never hold a waiter up, and an empty shard always lets it go.
        let c = r.try_admit(&[(2, 500)], 10).unwrap();
        let mut other = Box::pin(r.wait_below_low_water(&[(1, 1)], 10));
        assert!(finishes(&mut other).await);
        drop(c);
    }

    /// The frames path and the HTTP path take the same decision: where `try_admit` answers
    /// 429, `admit_or_wait` waits (until below the low-water mark) and then holds the
    /// reservation; where `try_admit` admits, `admit_or_wait` returns at once.
    #[tokio::test]
    async fn admit_or_wait_waits_where_try_admit_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 100); // mark 90 (ingest.high_water 0.9), low water 75
        let now = output(&mut Box::pin(r.admit_or_wait(&[(1, 5)], 10))).await;
        assert!(now.is_some(), "room on shard 1: admitted at once");
        drop(now);
        let full = r.try_admit(&[(0, 90)], 10).unwrap();
        assert!(matches!(
            r.try_admit(&[(0, 1)], 10),
            Err(SubmitError::Backpressure { .. })
        ));
        let mut wait = Box::pin(r.admit_or_wait(&[(0, 1)], 10));
        assert!(output(&mut wait).await.is_none(), "shard 0 at its mark");
        assert_eq!(r.depth(0), 90, "a waiter reserves nothing");
        drop(full);
        let admitted = output(&mut wait).await;
        assert!(admitted.is_some());
        assert_eq!(r.depth(0), 1, "the waiter now holds its reservation");
        drop(admitted);
        assert_eq!(r.depth(0), 0);
    }

    /// Poll `fut` a few scheduler rounds; its output if it finished.
    async fn output<F: std::future::Future>(fut: &mut std::pin::Pin<Box<F>>) -> Option<F::Output> {
        for _ in 0..10 {
            if let std::task::Poll::Ready(out) =
                std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await
            {
                return Some(out);
            }
            tokio::task::yield_now().await;
        }
        None
    }

    #[tokio::test]
    async fn waiting_for_the_byte_budget() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 1000); // 1 MiB of queued bytes
        let a = r.try_admit(&[(0, 1)], 900 << 10).unwrap();
        let mut wait = Box::pin(r.wait_below_low_water(&[(1, 1)], 200 << 10));
        assert!(!finishes(&mut wait).await);
        drop(a);
        assert!(finishes(&mut wait).await);
    }

    #[test]
    fn a_tiny_queue_has_a_low_mark_of_zero() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 1);
        assert_eq!((r.high_water_events(), r.low_water_events()), (1, 0));
        // Resuming at "below 0" would never happen: an empty shard counts as drained.
        assert!(r.drained_for(&[(0, 1)], 1));
    }

    #[tokio::test]
    async fn submit_stores_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let r = router(dir.path(), 100);
        let mut batch = Batch::new();
        for s in ["a", "b", "c", "a"] {
            batch
                .push(&EventView {
                    stream: s,
                    entity: None,
                    ty: "t",
                    ts: 1,
                    kind: Kind::Event,
                    value: None,
                    id: None,
                    data: None,
                })
                .unwrap();
        }
        assert_eq!(r.shards_of(&batch).iter().map(|s| s.1).sum::<u64>(), 4);
        let acc = r
            .submit(Submit {
                batch,
                durability: None,
                expected_last_seq: None,
            })
            .await
            .unwrap();
        assert_eq!(acc.outcome.accepted, 4);
        assert!(acc.queue_fill > 0.0);
        // The writer answers a request just before it drops the reservation: wait (bounded)
        // for the release rather than race it.
        for _ in 0..5000 {
            if (0..4).all(|s| r.depth(s) == 0) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!((0..4).all(|s| r.depth(s) == 0));
        let empty = r
            .submit(Submit {
                batch: Batch::new(),
                durability: None,
                expected_last_seq: None,
            })
            .await
            .unwrap();
        assert_eq!(empty.outcome.accepted, 0);
    }
}
