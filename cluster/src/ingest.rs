//! The write path of cluster mode: requests become Kafka records. A request of one record
//! (one partition: the common case, a request to one stream) is produced by an idempotent
//! producer, atomic by itself, acknowledged by every in-sync replica (`acks=all`). A request
//! spanning partitions is produced in a transaction by one of [`PRODUCERS`] threads, each
//! grouping the requests that arrive meanwhile into its next transaction (Kafka's group
//! commit, as the log writer groups fsyncs), so that it is atomic for `read_committed`
//! consumers. A request's records are in one
//! transaction, so a request spanning partitions is atomic for `read_committed` consumers.
//!
//! Bounded: the queue to the thread holds at most [`QUEUE_JOBS`] requests (past it
//! [`ProduceError::Full`], a 429), a transaction at most [`MAX_GROUP_BYTES`]; a request that
//! waited longer than its deadline before its transaction began is answered
//! [`ProduceError::Unavailable`] (503) without being produced. The bytes themselves are held
//! in the router's admission budget by the caller until the answer comes.

use crate::txn::{OutRecord, Txn, TxnError, TxnSettings};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// Requests queued for the producer thread at most.
pub const QUEUE_JOBS: usize = 4096;
/// Bytes of records in one transaction at most (a larger single request goes alone).
pub const MAX_GROUP_BYTES: usize = 16 << 20;
/// Transactional producers per node, each with one transaction in flight.
pub const PRODUCERS: usize = 4;

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
    /// Requests of one record, produced without a transaction, and the sum of their times to
    /// Kafka's acknowledgement (microseconds).
    pub direct: AtomicU64,
    pub direct_us: AtomicU64,
    pub failed_direct: AtomicU64,
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
    /// The idempotent producer of single-record requests (no transaction needed: one record
    /// is atomic by itself).
    direct: Option<FutureProducer>,
    names: crate::names::Names,
}

impl IngestProducer {
    /// Start the producer thread. Its first `init_transactions` happens there; until it
    /// succeeds, requests wait (up to their deadline).
    pub fn start(settings: TxnSettings, runtime: Handle) -> IngestProducer {
        let (tx, rx) = flume::bounded::<Job>(QUEUE_JOBS);
        let stats = Arc::new(ProducerStats::default());
        // Several transactions in flight: a transaction is a few round trips to the broker
        // (and right after a commit the next one waits for its markers), so one producer
        // alone leaves the broker idle between them. Each has a transactional id of its own,
        // stable across restarts (`<ingest id>.<k>`), so a restarted node fences all of them.
        for k in 0..PRODUCERS {
            let mut s = settings.clone();
            s.txn_id = format!("{}.{k}", settings.txn_id);
            let (rx, stats, runtime) = (rx.clone(), Arc::clone(&stats), runtime.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("vx-kafka-ingest-{k}"))
                .spawn(move || run(Txn::new(s, runtime), &rx, &stats));
            if let Err(e) = spawned {
                // The other threads take the requests; with none, every request is answered
                // Unavailable (its sender drops).
                tracing::error!(error = %e, "cannot start a Kafka producer thread");
            }
        }
        let direct = ClientConfig::new()
            .set("bootstrap.servers", &settings.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("allow.auto.create.topics", "false")
            .set("socket.nagle.disable", "true")
            // Concurrent requests share produce requests to the broker.
            .set("linger.ms", "1")
            .set("message.max.bytes", settings.max_record_bytes.to_string())
            .set(
                "queue.buffering.max.kbytes",
                (settings.max_record_bytes.div_ceil(1024) * 2)
                    .max(65_536)
                    .to_string(),
            )
            .set(
                "message.timeout.ms",
                settings.txn_timeout.as_millis().to_string(),
            )
            .create::<FutureProducer>();
        let direct = match direct {
            Ok(p) => Some(p),
            Err(e) => {
                // Single-record requests then go through the transactions too.
                tracing::error!(error = %e, "cannot create the idempotent producer");
                None
            }
        };
        IngestProducer {
            tx,
            stats,
            direct,
            names: settings.names,
        }
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
        if let ([one], Some(direct)) = (records.as_slice(), &self.direct) {
            return self.send_one(direct, one, wait).await.map(|o| vec![o]);
        }
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

impl IngestProducer {
    /// One record: produced by the idempotent producer, acknowledged by every in-sync replica.
    async fn send_one(
        &self,
        producer: &FutureProducer,
        r: &OutRecord,
        wait: Duration,
    ) -> Result<u64, ProduceError> {
        let started = Instant::now();
        let topic = match r.topic {
            crate::names::Topic::Streams => self.names.streams.as_str(),
            crate::names::Topic::Entities => self.names.entities.as_str(),
        };
        let partition = i32::try_from(r.partition)
            .map_err(|_| ProduceError::Refused(format!("partition {}", r.partition)))?;
        let record = FutureRecord::<(), [u8]>::to(topic)
            .partition(partition)
            .payload(&r.value);
        let delivery = match producer.send_result(record) {
            Ok(d) => d,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                return Err(ProduceError::Full);
            }
            Err((e, _)) => return Err(self.failed(direct_error(e))),
        };
        let result = match tokio::time::timeout(wait, delivery).await {
            Ok(Ok(Ok(d))) => Ok(u64::try_from(d.offset).unwrap_or(0)),
            Ok(Ok(Err((e, _)))) => Err(self.failed(direct_error(e))),
            Ok(Err(_)) => Err(self.failed(ProduceError::Unavailable("delivery dropped".into()))),
            // Still queued or in flight: it may yet be written, but the client is told it was
            // not (a retry with the same ids is a duplicate, never a second copy).
            Err(_) => Err(self.failed(ProduceError::Unavailable(
                "Kafka did not acknowledge the request in time".into(),
            ))),
        };
        if result.is_ok() {
            let s = &self.stats;
            s.direct.fetch_add(1, Ordering::Relaxed);
            s.requests.fetch_add(1, Ordering::Relaxed);
            s.records.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(r.value.len() as u64, Ordering::Relaxed);
            s.direct_us.fetch_add(
                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        result
    }

    fn failed(&self, e: ProduceError) -> ProduceError {
        self.stats.failed_direct.fetch_add(1, Ordering::Relaxed);
        e
    }
}

fn direct_error(e: KafkaError) -> ProduceError {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize) => {
            ProduceError::Refused(e.to_string())
        }
        _ => ProduceError::Unavailable(e.to_string()),
    }
}

/// How long after a commit a producer waits before its next transaction sends anything.
/// Right after a commit the coordinator is still writing the transaction's markers, and a
/// new transaction's first partition would be refused as concurrent — which librdkafka
/// retries after a fixed 20 ms. Waiting a little instead (and taking the requests that
/// arrive meanwhile into the transaction) is both faster and groups more.
const AFTER_COMMIT: Duration = Duration::from_millis(4);

fn run(mut txn: Txn, rx: &flume::Receiver<Job>, stats: &ProducerStats) {
    if let Err(e) = txn.init() {
        tracing::warn!(error = %e, "Kafka producer not ready yet; requests wait for it");
    }
    let mut committed_at = Instant::now();
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut bytes: usize = jobs[0].records.iter().map(OutRecord::size).sum();
        let ready_at = committed_at + AFTER_COMMIT;
        loop {
            if bytes >= MAX_GROUP_BYTES {
                break;
            }
            let now = Instant::now();
            let next = if now < ready_at {
                rx.recv_timeout(ready_at - now).ok()
            } else {
                rx.try_recv().ok()
            };
            match next {
                Some(j) => {
                    bytes += j.records.iter().map(OutRecord::size).sum::<usize>();
                    jobs.push(j);
                }
                None if Instant::now() >= ready_at => break,
                None => {}
            }
        }
        let now = Instant::now();
        let (live, expired): (Vec<Job>, Vec<Job>) =
            jobs.into_iter().partition(|j| j.deadline > now);
        expired.into_iter().for_each(late);
        if live.is_empty() {
            continue;
        }
        let records: Vec<OutRecord> = live
            .iter()
            .flat_map(|j| j.records.iter().cloned())
            .collect();
        let started = Instant::now();
        let result = txn.commit(&records, None);
        committed_at = Instant::now();
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        stats.commit_us.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        answer(&mut txn, live, result, stats);
    }
}

fn late(j: Job) {
    let _ = j.reply.send(Err(ProduceError::Unavailable(
        "Kafka did not take the request in time".into(),
    )));
}

fn produce_error(e: &TxnError) -> ProduceError {
    match e {
        TxnError::Unavailable(m) => ProduceError::Unavailable(m.clone()),
        TxnError::Refused(m) => ProduceError::Refused(m.clone()),
        TxnError::Stuck(m) | TxnError::Group(m) => ProduceError::Unavailable(m.clone()),
    }
}

/// Answer each request of a committed (or failed) transaction with its records' offsets. A
/// transaction that Kafka refused for one record's sake (too large) is tried again request by
/// request, so that only that request fails.
fn answer(
    txn: &mut Txn,
    jobs: Vec<Job>,
    result: Result<Vec<u64>, TxnError>,
    stats: &ProducerStats,
) {
    match result {
        Ok(offsets) if offsets.len() == jobs.iter().map(|j| j.records.len()).sum::<usize>() => {
            stats
                .requests
                .fetch_add(jobs.len() as u64, Ordering::Relaxed);
            stats
                .records
                .fetch_add(offsets.len() as u64, Ordering::Relaxed);
            let mut at = 0;
            for j in jobs {
                let n = j.records.len();
                stats.bytes.fetch_add(
                    j.records.iter().map(|r| r.value.len() as u64).sum(),
                    Ordering::Relaxed,
                );
                let _ = j.reply.send(Ok(offsets[at..at + n].to_vec()));
                at += n;
            }
        }
        Ok(offsets) => {
            // Committed, but the deliveries do not match the records: a bug, said as such.
            tracing::error!(
                offsets = offsets.len(),
                "Kafka returned another number of offsets than records"
            );
            for j in jobs {
                let _ = j.reply.send(Err(ProduceError::Unavailable(
                    "internal: offsets do not match the records".into(),
                )));
            }
        }
        Err(TxnError::Refused(m)) if jobs.len() > 1 => {
            tracing::debug!(error = %m, "a transaction was refused: trying its requests one by one");
            for j in jobs {
                let started = Instant::now();
                let r = txn.commit(&j.records, None);
                stats.transactions.fetch_add(1, Ordering::Relaxed);
                stats.commit_us.fetch_add(
                    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
                answer(txn, vec![j], r, stats);
            }
        }
        Err(e) => {
            stats.failed_transactions.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, requests = jobs.len(), "Kafka transaction failed");
            for j in jobs {
                let _ = j.reply.send(Err(produce_error(&e)));
            }
        }
    }
}
