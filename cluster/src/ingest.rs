//! The write path of cluster mode: requests become Kafka records, produced in transactions by
//! one thread per node that groups the requests arriving meanwhile into the next transaction
//! (Kafka's group commit, as the log writer groups fsyncs). A request's records are in one
//! transaction, so a request spanning partitions is atomic for `read_committed` consumers.
//!
//! Bounded: the queue to the thread holds at most [`QUEUE_JOBS`] requests (past it
//! [`ProduceError::Full`], a 429), a transaction at most [`MAX_GROUP_BYTES`]; a request that
//! waited longer than its deadline before its transaction began is answered
//! [`ProduceError::Unavailable`] (503) without being produced. The bytes themselves are held
//! in the router's admission budget by the caller until the answer comes.

use crate::txn::{OutRecord, Txn, TxnError, TxnSettings};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Requests queued for the producer thread at most.
pub const QUEUE_JOBS: usize = 4096;
/// Bytes of records in one transaction at most (a larger single request goes alone).
pub const MAX_GROUP_BYTES: usize = 16 << 20;

/// Why a request was not produced. Nothing of it is in Kafka.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The producer's queue is full: back off (429 with `Retry-After`).
    #[error("the Kafka producer's queue is full")]
    Full,
    /// Kafka is down or slow, or the node is stopping (503 with `Retry-After`).
    #[error("{0}")]
    Unavailable(String),
    /// Kafka refused the request's records for what they are.
    #[error("{0}")]
    Refused(String),
}

/// Counters of the producer thread, read by the metrics at scrape time.
#[derive(Debug, Default)]
pub struct ProducerStats {
    pub transactions: AtomicU64,
    pub failed_transactions: AtomicU64,
    pub requests: AtomicU64,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    /// Sum of commit durations, microseconds (with `transactions`, the mean).
    pub commit_us: AtomicU64,
}

struct Job {
    records: Vec<OutRecord>,
    deadline: Instant,
    reply: oneshot::Sender<Result<Vec<u64>, ProduceError>>,
}

/// The handle requests are produced through; cheap to clone.
#[derive(Clone)]
pub struct IngestProducer {
    tx: flume::Sender<Job>,
    stats: Arc<ProducerStats>,
}

impl IngestProducer {
    /// Start the producer thread. Its first `init_transactions` happens there; until it
    /// succeeds, requests wait (up to their deadline).
    pub fn start(settings: TxnSettings, runtime: Handle) -> IngestProducer {
        let (tx, rx) = flume::bounded::<Job>(QUEUE_JOBS);
        let stats = Arc::new(ProducerStats::default());
        let thread_stats = Arc::clone(&stats);
        let spawned = std::thread::Builder::new()
            .name("vx-kafka-ingest".into())
            .spawn(move || run(Txn::new(settings, runtime), &rx, &thread_stats));
        if let Err(e) = spawned {
            // Without the thread every request is answered Unavailable (its sender drops).
            tracing::error!(error = %e, "cannot start the Kafka producer thread");
        }
        IngestProducer { tx, stats }
    }

    pub fn stats(&self) -> &Arc<ProducerStats> {
        &self.stats
    }

    /// Produce one request's records in a transaction; the offsets of its records, in order,
    /// once the transaction committed. `wait` bounds the time before its transaction begins.
    pub async fn send(
        &self,
        records: Vec<OutRecord>,
        wait: Duration,
    ) -> Result<Vec<u64>, ProduceError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            records,
            deadline: Instant::now() + wait,
            reply,
        };
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(flume::TrySendError::Full(_)) => return Err(ProduceError::Full),
            Err(flume::TrySendError::Disconnected(_)) => {
                return Err(ProduceError::Unavailable(
                    "the Kafka producer stopped".into(),
                ));
            }
        }
        answer.await.unwrap_or_else(|_| {
            Err(ProduceError::Unavailable(
                "the Kafka producer stopped".into(),
            ))
        })
    }
}

fn run(mut txn: Txn, rx: &flume::Receiver<Job>, stats: &ProducerStats) {
    if let Err(e) = txn.init() {
        tracing::warn!(error = %e, "Kafka producer not ready yet; requests wait for it");
    }
    let mut group: Vec<Job> = Vec::new();
    let mut records: Vec<OutRecord> = Vec::new();
    while let Ok(first) = rx.recv() {
        group.clear();
        let mut bytes: usize = first.records.iter().map(OutRecord::size).sum();
        group.push(first);
        while bytes < MAX_GROUP_BYTES {
            match rx.try_recv() {
                Ok(j) => {
                    bytes += j.records.iter().map(OutRecord::size).sum::<usize>();
                    group.push(j);
                }
                Err(_) => break,
            }
        }
        let now = Instant::now();
        let (live, late): (Vec<Job>, Vec<Job>) = group.drain(..).partition(|j| j.deadline > now);
        for j in late {
            let _ = j.reply.send(Err(ProduceError::Unavailable(
                "Kafka did not take the request in time".into(),
            )));
        }
        if live.is_empty() {
            continue;
        }
        // Moved, not copied: the records go back to their jobs' answers only as offsets.
        records.clear();
        let mut counts = Vec::with_capacity(live.len());
        let mut replies = Vec::with_capacity(live.len());
        for j in live {
            counts.push(j.records.len());
            records.extend(j.records);
            replies.push(j.reply);
        }
        commit_group(&mut txn, &records, &counts, replies, stats);
    }
}

/// Commit one group; answer each request with its records' offsets. A group that Kafka
/// refuses for one record's sake (too large) is tried again request by request, so that only
/// that request fails.
fn commit_group(
    txn: &mut Txn,
    records: &[OutRecord],
    counts: &[usize],
    replies: Vec<oneshot::Sender<Result<Vec<u64>, ProduceError>>>,
    stats: &ProducerStats,
) {
    let started = Instant::now();
    let result = txn.commit(records, None);
    stats.transactions.fetch_add(1, Ordering::Relaxed);
    stats.commit_us.fetch_add(
        u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    match result {
        Ok(offsets) if offsets.len() == records.len() => {
            stats
                .requests
                .fetch_add(replies.len() as u64, Ordering::Relaxed);
            stats
                .records
                .fetch_add(records.len() as u64, Ordering::Relaxed);
            stats.bytes.fetch_add(
                records.iter().map(|r| r.value.len() as u64).sum(),
                Ordering::Relaxed,
            );
            let mut at = 0;
            for (reply, &n) in replies.into_iter().zip(counts) {
                let _ = reply.send(Ok(offsets[at..at + n].to_vec()));
                at += n;
            }
        }
        Ok(offsets) => {
            // Committed, but the deliveries do not match the records: a bug, said as such.
            tracing::error!(
                records = records.len(),
                offsets = offsets.len(),
                "Kafka returned another number of offsets than records"
            );
            for reply in replies {
                let _ = reply.send(Err(ProduceError::Unavailable(
                    "internal: offsets do not match the records".into(),
                )));
            }
        }
        Err(TxnError::Refused(m)) if replies.len() > 1 => {
            tracing::debug!(error = %m, "a transaction was refused: trying its requests one by one");
            let mut at = 0;
            for (reply, &n) in replies.into_iter().zip(counts) {
                commit_group(txn, &records[at..at + n], &[n], vec![reply], stats);
                at += n;
            }
        }
        Err(e) => {
            stats.failed_transactions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, requests = replies.len(), "Kafka transaction failed");
            for reply in replies {
                let _ = reply.send(Err(match &e {
                    TxnError::Unavailable(m) => ProduceError::Unavailable(m.clone()),
                    TxnError::Refused(m) => ProduceError::Refused(m.clone()),
                }));
            }
        }
    }
}
