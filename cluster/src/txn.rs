//! One Kafka transaction at a time, on a blocking thread: begin, produce every record, wait for
//! every delivery, optionally add the consumed offsets of a consumer group, commit — or abort
//! everything. The ingest producer ([`crate::ingest`]) and the apply loop's producer both run
//! their groups through [`Txn::commit`].
//!
//! librdkafka's transactional calls block (up to their timeout), so a `Txn` lives on a thread
//! of its own; deliveries are awaited on the server's runtime through its handle. A fatal
//! error (this producer was fenced by a newer one with the same transactional id, or its state
//! is unknown) makes the next call start a new producer and `init_transactions` again, which
//! aborts whatever the old one left open.

use crate::names::Names;
pub use crate::names::Topic;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use rdkafka::ClientConfig;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::types::RDKafkaErrorCode;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::runtime::Handle;

/// One record to produce: its topic, partition and value (records are not keyed: the
/// partition is chosen here, and compaction is never used on these topics).
#[derive(Clone, Debug)]
pub struct OutRecord {
    pub topic: Topic,
    pub partition: u32,
    pub value: Vec<u8>,
}

impl OutRecord {
    pub fn size(&self) -> usize {
        self.value.len() + 64
    }
}

/// Producer settings shared by the transactional producers.
#[derive(Clone, Debug)]
pub struct TxnSettings {
    pub brokers: String,
    pub names: Names,
    /// `transactional.id`.
    pub txn_id: String,
    /// The largest record value (`message.max.bytes`).
    pub max_record_bytes: u64,
    /// `transaction.timeout.ms`: how long the broker lets a transaction of a dead producer
    /// stay open before aborting it (it holds back `read_committed` consumers meanwhile).
    pub txn_timeout: Duration,
    /// Bound on each blocking call (init, begin, commit, abort, adding offsets).
    pub call_timeout: Duration,
}

/// A failed transaction; nothing of it is visible to `read_committed` consumers.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// Kafka could not take it now (broker down or slow, a timeout, a retriable error).
    #[error("Kafka did not take the transaction: {0}")]
    Unavailable(String),
    /// A record was refused for what it is (too large, say): retrying does not help.
    #[error("Kafka refused a record: {0}")]
    Refused(String),
    /// The consumer group no longer knows this member (it was dropped while it could not
    /// reach the group's coordinator, or a rebalance moved on): the offsets cannot be
    /// committed until the consumer rejoins, so retrying now does not help.
    #[error("the consumer group does not know this member now: {0}")]
    Group(String),
    /// A call into librdkafka did not return in time: the producer is abandoned, and the
    /// next transaction starts a new one (see [`send_offsets_bounded`]).
    #[error("Kafka did not answer: {0}")]
    Stuck(String),
}

/// A transactional producer, used from one thread.
pub struct Txn {
    settings: TxnSettings,
    runtime: Handle,
    producer: Option<FutureProducer>,
}

impl Txn {
    pub fn new(settings: TxnSettings, runtime: Handle) -> Txn {
        Txn {
            settings,
            runtime,
            producer: None,
        }
    }

    /// The producer, created and initialised (`init_transactions`) if it is not.
    fn producer(&mut self) -> Result<&FutureProducer, TxnError> {
        if self.producer.is_none() {
            let s = &self.settings;
            let p: FutureProducer = ClientConfig::new()
                .set("bootstrap.servers", &s.brokers)
                .set("transactional.id", &s.txn_id)
                .set("allow.auto.create.topics", "false")
                .set("enable.idempotence", "true")
                .set("acks", "all")
                // Grouping is done per transaction; do not wait to fill batches as well.
                .set("linger.ms", "0")
                // Transactions are chains of small requests (add partitions, produce, end):
                // Nagle's algorithm would hold each one back for the broker's delayed ACK.
                .set("socket.nagle.disable", "true")
                // Right after a commit the coordinator is still writing the markers, and the
                // next transaction's first partition is refused as concurrent and retried:
                // retry after milliseconds, not the default 100.
                .set("retry.backoff.ms", "2")
                .set("retry.backoff.max.ms", "50")
                // What waits for the broker is bounded by the router's budgets already; keep
                // librdkafka's own queue to what one large request needs.
                .set(
                    "queue.buffering.max.kbytes",
                    (s.max_record_bytes.div_ceil(1024) * 2)
                        .max(65_536)
                        .to_string(),
                )
                .set("message.max.bytes", s.max_record_bytes.to_string())
                .set(
                    "transaction.timeout.ms",
                    s.txn_timeout.as_millis().to_string(),
                )
                .set("message.timeout.ms", s.txn_timeout.as_millis().to_string())
                .create()
                .map_err(|e| TxnError::Unavailable(format!("creating the producer: {e}")))?;
            p.init_transactions(s.call_timeout)
                .map_err(|e| TxnError::Unavailable(format!("init_transactions: {e}")))?;
            tracing::info!(txn_id = %s.txn_id, "transactional producer ready");
            self.producer = Some(p);
        }
        self.producer
            .as_ref()
            .ok_or_else(|| TxnError::Unavailable("no producer".into()))
    }

    /// Start the producer now (at start-up), so that the first request does not pay for it
    /// and a zombie of this node is fenced at once.
    pub fn init(&mut self) -> Result<(), TxnError> {
        self.producer().map(|_| ())
    }

    /// Produce `records` in one transaction, with `offsets` of `group` committed in it if
    /// given. Returns each record's offset, in order. On any failure the transaction is
    /// aborted: none of it is visible, and the caller may retry all of it.
    pub fn commit(
        &mut self,
        records: &[OutRecord],
        offsets: Option<(TopicPartitionList, ConsumerGroupMetadata)>,
    ) -> Result<Vec<u64>, TxnError> {
        let mut open = self.begin()?;
        open.send(records);
        open.commit(offsets)
    }

    /// Begin a transaction that records can be added to ([`Open::send`]) until it is
    /// committed ([`Open::commit`]) or dropped (aborted).
    pub fn begin(&mut self) -> Result<Open<'_>, TxnError> {
        let producer = match self.producer() {
            Ok(p) => p.clone(),
            Err(e) => return Err(e),
        };
        if let Err(e) = producer.begin_transaction().map_err(classify) {
            self.after_failure(&e);
            return Err(e);
        }
        Ok(Open {
            txn: self,
            producer,
            pending: FuturesUnordered::new(),
            offsets: Vec::new(),
            failed: None,
            done: false,
        })
    }

    /// After a failed transaction: abort it; if the producer's state is unknown or it was
    /// fenced, drop it so that the next call starts afresh.
    fn after_failure(&mut self, e: &TxnError) {
        let timeout = self.settings.call_timeout;
        if let TxnError::Stuck(_) = e {
            // Aborting would wait on the same stuck state: a new producer with this
            // transactional id fences the old one instead.
            tracing::warn!(error = %e, "abandoning a stuck transactional producer");
            self.producer = None;
            return;
        }
        let Some(p) = self.producer.as_ref() else {
            return;
        };
        if let Err(abort) = p.abort_transaction(timeout) {
            tracing::warn!(error = %e, abort_error = %abort, "aborting a failed transaction failed: starting a new producer");
            self.producer = None;
        }
    }
}

type Delivery = Pin<Box<dyn Future<Output = (usize, Result<u64, TxnError>)> + Send>>;

/// An open transaction: records are added with [`Open::send`], their deliveries come in as
/// they are acknowledged ([`Open::next_delivery`]), and [`Open::commit`] ends it. Dropped
/// without a commit, it is aborted.
pub struct Open<'a> {
    txn: &'a mut Txn,
    producer: FutureProducer,
    pending: FuturesUnordered<Delivery>,
    /// Each record's offset once delivered, in the order they were sent.
    offsets: Vec<Option<u64>>,
    failed: Option<TxnError>,
    done: bool,
}

impl Open<'_> {
    /// Produce `records` in this transaction (not waiting for them).
    pub fn send(&mut self, records: &[OutRecord]) {
        let names = &self.txn.settings.names;
        for r in records {
            let idx = self.offsets.len();
            self.offsets.push(None);
            if self.failed.is_some() {
                continue;
            }
            let topic = match r.topic {
                Topic::Streams => names.streams.as_str(),
                Topic::Entities => names.entities.as_str(),
            };
            let Ok(partition) = i32::try_from(r.partition) else {
                self.failed = Some(TxnError::Refused(format!("partition {}", r.partition)));
                continue;
            };
            let mut record = FutureRecord::<(), [u8]>::to(topic)
                .partition(partition)
                .payload(&r.value);
            loop {
                match self.producer.send_result(record) {
                    Ok(d) => {
                        self.pending.push(Box::pin(async move {
                            let r = match d.await {
                                Ok(Ok(d)) => Ok(u64::try_from(d.offset).unwrap_or(0)),
                                Ok(Err((e, _))) => Err(classify(e)),
                                Err(_) => Err(TxnError::Unavailable("delivery dropped".into())),
                            };
                            (idx, r)
                        }));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's queue is bounded: wait for deliveries to make room.
                        record = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => {
                        self.failed = Some(classify(e));
                        break;
                    }
                }
            }
        }
    }

    /// Records sent and not acknowledged yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Wait for the next acknowledgement (forever when none is outstanding).
    pub async fn next_delivery(&mut self) {
        match self.pending.next().await {
            Some((idx, Ok(offset))) => {
                if let Some(o) = self.offsets.get_mut(idx) {
                    *o = Some(offset);
                }
            }
            Some((_, Err(e))) => {
                self.failed.get_or_insert(e);
            }
            None => std::future::pending().await,
        }
    }

    /// Wait for every delivery, add `offsets` of the consumer group if given, and commit.
    /// Every record's offset, in the order sent; on any failure the transaction is aborted.
    pub fn commit(
        mut self,
        offsets: Option<(TopicPartitionList, ConsumerGroupMetadata)>,
    ) -> Result<Vec<u64>, TxnError> {
        let runtime = self.txn.runtime.clone();
        while !self.pending.is_empty() && self.failed.is_none() {
            runtime.block_on(self.next_delivery());
        }
        self.done = true;
        let result = self.finish(offsets);
        if let Err(e) = &result {
            self.txn.after_failure(e);
        }
        result
    }

    fn finish(
        &mut self,
        offsets: Option<(TopicPartitionList, ConsumerGroupMetadata)>,
    ) -> Result<Vec<u64>, TxnError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let out = self
            .offsets
            .iter()
            .map(|o| o.ok_or_else(|| TxnError::Unavailable("a record was not delivered".into())))
            .collect::<Result<Vec<u64>, TxnError>>()?;
        let timeout = self.txn.settings.call_timeout;
        if let Some((tpl, cgm)) = offsets {
            send_offsets_bounded(&self.producer, tpl, cgm, timeout)?;
        }
        self.producer
            .commit_transaction(timeout)
            .map_err(classify)?;
        Ok(out)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.txn
                .after_failure(&TxnError::Unavailable("abandoned".into()));
        }
    }
}

/// `send_offsets_to_transaction`, given up on after `timeout`. librdkafka (up to 2.15)
/// ignores that call's timeout and can wait forever when the group coordinator's broker died
/// (librdkafka issues #5456 and #5511; fixed on its master only), which would hang the
/// apply loop and keep its partitions from ever moving. So the call runs on a thread of its
/// own; past `timeout` it is abandoned (that thread and its producer leak, once per
/// incident) and [`TxnError::Stuck`] makes the next transaction start a new producer, whose
/// `init_transactions` fences the stuck one.
fn send_offsets_bounded(
    producer: &FutureProducer,
    tpl: TopicPartitionList,
    cgm: ConsumerGroupMetadata,
    timeout: Duration,
) -> Result<(), TxnError> {
    let p = producer.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("vx-kafka-offsets".into())
        .spawn(move || {
            let _ = tx.send(p.send_offsets_to_transaction(&tpl, &cgm, timeout));
        })
        .map_err(|e| TxnError::Unavailable(format!("cannot start a thread: {e}")))?;
    match rx.recv_timeout(timeout + Duration::from_secs(1)) {
        Ok(r) => r.map_err(classify),
        Err(_) => Err(TxnError::Stuck(format!(
            "send_offsets_to_transaction did not return within {timeout:?}"
        ))),
    }
}

fn classify(e: KafkaError) -> TxnError {
    match e.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::RebalanceInProgress
            | RDKafkaErrorCode::FencedInstanceId,
        ) => TxnError::Group(e.to_string()),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessageSize,
        ) => TxnError::Refused(e.to_string()),
        _ => TxnError::Unavailable(e.to_string()),
    }
}
