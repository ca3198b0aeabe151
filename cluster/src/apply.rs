//! The apply loop: this node's member of the consumer group `T.group`. It consumes the
//! partitions of `T` and `T.entities` the group gives it, `read_committed`, in offset order,
//! into the node's local copy ([`LocalCopy`]). It also routes the events it stored that carry
//! an entity to `T.entities`, in Kafka transactions that commit its consumed offsets of `T`
//! (consume-transform-produce), so that each event reaches the feature tables exactly once.
//!
//! # Where a partition starts
//! When the group gives this node a partition, the loop looks at what the local copy has
//! applied of it (the offsets recorded in the local log, [`LocalCopy::applied`]) and at the
//! topic's watermarks:
//! - nothing local, or local older than the topic's first retained offset: the shard's local
//!   copy is discarded ([`LocalCopy::reset`]) and rebuilt from the first retained offset;
//! - a gap that would take longer than `cluster.max_catchup` to replay at the measured apply
//!   rate: discarded and rebuilt the same way (docs/CLUSTER.md says why this is the spec'd
//!   behaviour and what it costs);
//! - otherwise: it continues after the last applied offset.
//!
//! Entity events are produced only for records at or after the group's committed offset of
//! the partition: those before it were routed by whoever applied them first. A record that
//! the local copy had already applied but whose routing was not committed (a crash between
//! the two) has its stored events read back from the local copy ([`LocalCopy::stored_since`]).
//!
//! # Revocation
//! Before a partition is taken away, the loop waits for its records in flight and commits
//! their routing, so that the next owner starts exactly after it.

use crate::error::{ClusterError, LocalError};
use crate::names::Names;
use crate::outcomes::{Outcome, Outcomes};
use crate::txn::{OutRecord, Topic, Txn, TxnError, TxnSettings};
use parking_lot::{Mutex, RwLock};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientConfig, ClientContext};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// A local apply in flight: resolves once the record is applied locally.
pub type Applying = Pin<Box<dyn Future<Output = Applied> + Send>>;

/// What applying one record locally did, and the entity records it makes.
pub struct Applied {
    pub outcome: Outcome,
    /// Records for `T.entities` (only from records of `T`, and only if asked for).
    pub route: Vec<OutRecord>,
}

/// The node's local copy of the partitions it owns, as the apply loop uses it.
pub trait LocalCopy: Send + Sync + 'static {
    /// The last offset of the partition applied locally, if any.
    fn applied(&self, topic: Topic, partition: u32) -> Option<u64>;
    /// Discard the local copy of this shard (blocking).
    fn reset(&self, topic: Topic, partition: u32) -> Result<(), LocalError>;
    /// Start applying one record, in offset order per partition: enqueued before this
    /// returns, applied when the future resolves. `route`: also return its entity records.
    fn submit(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        value: &[u8],
        route: bool,
    ) -> Result<Applying, LocalError>;
    /// The entity records of records of partition `partition` of `T` already applied
    /// locally at offsets `from..=through` (blocking): what a crash kept from being routed.
    fn stored_since(
        &self,
        partition: u32,
        from: u64,
        through: u64,
    ) -> Result<Vec<OutRecord>, LocalError>;
}

/// Settings of the apply loop.
#[derive(Clone, Debug)]
pub struct ApplySettings {
    pub brokers: String,
    pub names: Names,
    pub node: String,
    /// The apply producer's transactional settings (`Names::apply_txn_id`).
    pub txn: TxnSettings,
    /// The group's `session.timeout.ms`: how long a dead node keeps its partitions.
    pub session_timeout: Duration,
    pub max_catchup: Duration,
}

/// The state of one owned partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionState {
    /// Replaying up to the end offset seen when it was given (exclusive).
    CatchingUp {
        end: u64,
    },
    Live,
}

/// What this node owns, shared with the HTTP layer (forwarding, readiness, metrics).
#[derive(Default)]
pub struct Ownership {
    parts: RwLock<BTreeMap<(Topic, u32), PartitionState>>,
    /// The group gave this node its first assignment (possibly empty).
    joined: AtomicBool,
    pub rebalances: AtomicU64,
    /// Records applied, and entity records routed, since start.
    pub applied: AtomicU64,
    pub routed: AtomicU64,
    /// Shards discarded and rebuilt since start.
    pub rebuilds: AtomicU64,
    /// Consumer lag per owned partition (end offset − next offset), refreshed by the loop.
    pub lag: RwLock<BTreeMap<(Topic, u32), u64>>,
    /// When each partition still catching up was given to this node.
    assigned_at: RwLock<BTreeMap<(Topic, u32), Instant>>,
    /// How long the last partition given to this node took to catch up (ms), and the sum
    /// and count of those times since start: the time to move a shard.
    pub last_move_ms: AtomicU64,
    pub moves: AtomicU64,
    pub moves_ms: AtomicU64,
}

impl Ownership {
    /// A partition reached the end it saw when it was given: it is served from now on.
    fn caught_up(&self, topic: Topic, partition: u32) {
        let took = self
            .assigned_at
            .write()
            .remove(&(topic, partition))
            .map_or(0, |t| {
                u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
            });
        self.last_move_ms.store(took, Ordering::Relaxed);
        self.moves.fetch_add(1, Ordering::Relaxed);
        self.moves_ms.fetch_add(took, Ordering::Relaxed);
        tracing::info!(topic = ?topic, partition, took_ms = took, "partition caught up: served here");
    }
}

impl Ownership {
    pub fn owned(&self, topic: Topic) -> BTreeSet<u32> {
        self.parts
            .read()
            .keys()
            .filter(|(t, _)| *t == topic)
            .map(|(_, p)| *p)
            .collect()
    }

    pub fn owns(&self, topic: Topic, partition: u32) -> bool {
        self.parts.read().contains_key(&(topic, partition))
    }

    /// Joined the group and every owned partition caught up with what it saw when given it.
    pub fn ready(&self) -> bool {
        self.joined.load(Ordering::Acquire)
            && self
                .parts
                .read()
                .values()
                .all(|s| *s == PartitionState::Live)
    }

    pub fn states(&self) -> Vec<((Topic, u32), PartitionState)> {
        self.parts.read().iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// Called after every change of this node's assignment (to announce it in `T.members`).
pub type OnAssignment = Box<dyn Fn(&BTreeSet<u32>, &BTreeSet<u32>) + Send + Sync>;

struct InFlight {
    topic: Topic,
    partition: u32,
    offset: u64,
    route: bool,
    applying: Applying,
}

/// The loop's state, behind the consumer context (rebalance callbacks run inside `poll`).
struct LoopState {
    local: Arc<dyn LocalCopy>,
    runtime: Handle,
    txn: Txn,
    inflight: VecDeque<InFlight>,
    /// Entity records to route in the next transaction.
    route: Vec<OutRecord>,
    /// Next offset to commit per partition of `T` and of `T.entities`.
    commit: BTreeMap<(Topic, u32), u64>,
    /// Routing is done below this offset per partition of `T` (the group's committed one).
    routed_below: BTreeMap<u32, u64>,
    /// Offsets at or below this are already applied locally: skipped.
    skip_through: BTreeMap<(Topic, u32), u64>,
    last_commit: Instant,
    /// Measured apply rate (records/s), for the catch-up estimate.
    rate: f64,
}

struct Ctx {
    settings: ApplySettings,
    state: Mutex<Option<LoopState>>,
    ownership: Arc<Ownership>,
    outcomes: Outcomes,
    on_assignment: OnAssignment,
}

impl ClientContext for Ctx {
    /// librdkafka's statistics (every `statistics.interval.ms`): the lag of each owned
    /// partition, and whether one that was catching up has reached the end it saw when it
    /// was given. The fetch position (`next_offset`) passes transaction markers, which the
    /// last applied record's offset never does.
    fn stats(&self, stats: rdkafka::Statistics) {
        let mut lag = BTreeMap::new();
        let mut caught_up = Vec::new();
        let mut ends = Vec::new();
        for (name, t) in &stats.topics {
            let Some(topic) = self.topic_of(name) else {
                continue;
            };
            for (id, p) in &t.partitions {
                let Ok(partition) = u32::try_from(*id) else {
                    continue;
                };
                if !p.desired || !self.ownership.owns(topic, partition) {
                    continue;
                }
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                if end >= 0 {
                    ends.push((topic, partition, end as u64));
                }
                if p.app_offset >= 0 && end >= 0 {
                    lag.insert(
                        (topic, partition),
                        u64::try_from(end - p.app_offset).unwrap_or(0),
                    );
                }
                if p.fetchq_cnt == 0 && p.next_offset >= 0 {
                    caught_up.push((topic, partition, p.next_offset as u64));
                }
            }
        }
        *self.ownership.lag.write() = lag;
        let inflight: BTreeSet<(Topic, u32)> = self
            .state
            .lock()
            .as_ref()
            .map(|st| st.inflight.iter().map(|f| (f.topic, f.partition)).collect())
            .unwrap_or_default();
        let mut parts = self.ownership.parts.write();
        for (topic, partition, end) in ends {
            // Given while the watermarks could not be read: the end the statistics saw
            // stands in for the one the partition was given with.
            if let Some(PartitionState::CatchingUp { end: e }) = parts.get_mut(&(topic, partition))
                && *e == UNKNOWN_END
            {
                *e = end;
            }
        }
        for (topic, partition, next) in caught_up {
            if let Some(s) = parts.get_mut(&(topic, partition))
                && let PartitionState::CatchingUp { end } = *s
                && next >= end
                && !inflight.contains(&(topic, partition))
            {
                *s = PartitionState::Live;
                self.ownership.caught_up(topic, partition);
            }
        }
    }
}

/// The end of a partition given while its watermarks could not be read: replaced by the end
/// the consumer's statistics report, so it is caught up only once that end is reached.
const UNKNOWN_END: u64 = u64::MAX;

/// Records in flight at most before the loop waits for the oldest.
const MAX_INFLIGHT: usize = 1024;
/// Routing is committed at least this often (and before a revocation).
const COMMIT_EVERY: Duration = Duration::from_millis(50);
/// Entity record bytes that make the loop commit early.
const COMMIT_BYTES: usize = 8 << 20;

impl ConsumerContext for Ctx {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        self.ownership.rebalances.fetch_add(1, Ordering::Relaxed);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let with_offsets = self.on_assign(consumer, tpl);
                if let Err(e) = consumer.incremental_assign(&with_offsets) {
                    tracing::error!(error = %e, "incremental_assign failed");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.on_revoke(consumer, tpl);
                if let Err(e) = consumer.incremental_unassign(tpl) {
                    tracing::error!(error = %e, "incremental_unassign failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance error: giving up the partitions");
                self.on_revoke(consumer, tpl);
                let _ = consumer.incremental_unassign(tpl);
            }
        }
        self.ownership.joined.store(true, Ordering::Release);
        let streams = self.ownership.owned(Topic::Streams);
        let entities = self.ownership.owned(Topic::Entities);
        (self.on_assignment)(&streams, &entities);
    }
}

impl Ctx {
    fn topic_of(&self, name: &str) -> Option<Topic> {
        let n = &self.settings.names;
        if name == n.streams {
            Some(Topic::Streams)
        } else if name == n.entities {
            Some(Topic::Entities)
        } else {
            None
        }
    }

    /// The newly given partitions, each with the offset to start from.
    fn on_assign(
        &self,
        consumer: &BaseConsumer<Self>,
        tpl: &TopicPartitionList,
    ) -> TopicPartitionList {
        let mut out = TopicPartitionList::new();
        let mut guard = self.state.lock();
        let Some(state) = guard.as_mut() else {
            return out;
        };
        let committed = consumer
            .committed_offsets(tpl.clone(), self.settings.session_timeout)
            .ok();
        for e in tpl.elements() {
            let Some(topic) = self.topic_of(e.topic()) else {
                continue;
            };
            let Ok(partition) = u32::try_from(e.partition()) else {
                continue;
            };
            let started = Instant::now();
            let (low, high) = match consumer.fetch_watermarks(
                e.topic(),
                e.partition(),
                self.settings.session_timeout,
            ) {
                Ok((l, h)) => (l.max(0) as u64, h.max(0) as u64),
                Err(err) => {
                    // Its end is learnt from the consumer's statistics (see `stats`): until
                    // then the partition is catching up, not served as if complete.
                    tracing::warn!(topic = e.topic(), partition, error = %err, "no watermarks: starting after the local copy, its end unknown");
                    (0, UNKNOWN_END)
                }
            };
            let local = state.local.applied(topic, partition);
            let gap = if high == UNKNOWN_END {
                0 // not known: keep the local copy
            } else {
                high.saturating_sub(local.map_or(0, |l| l + 1))
            };
            let replay = Duration::from_secs_f64(gap as f64 / state.rate.max(1.0));
            let rebuild = match local {
                // Nothing here to discard: start at the first retained offset.
                None => false,
                Some(l) => l + 1 < low || replay > self.settings.max_catchup,
            };
            let start = if rebuild {
                tracing::warn!(
                    topic = e.topic(), partition, local = ?local, low, high,
                    replay_s = replay.as_secs_f64(),
                    "discarding the local copy of this shard and rebuilding it from the topic"
                );
                if let Err(err) = state.local.reset(topic, partition) {
                    tracing::error!(topic = e.topic(), partition, error = %err, "cannot discard the local copy; not taking the partition");
                    continue;
                }
                self.ownership.rebuilds.fetch_add(1, Ordering::Relaxed);
                state.skip_through.remove(&(topic, partition));
                low
            } else {
                if let Some(l) = local {
                    state.skip_through.insert((topic, partition), l);
                }
                local.map_or(low, |l| l + 1)
            };
            if topic == Topic::Streams {
                let c = committed
                    .as_ref()
                    .and_then(|c| c.find_partition(e.topic(), e.partition()))
                    .and_then(|el| match el.offset() {
                        Offset::Offset(o) => u64::try_from(o).ok(),
                        _ => None,
                    })
                    .unwrap_or(0);
                tracing::debug!(
                    partition,
                    committed = c,
                    ok = committed.is_some(),
                    "routing starts at the committed offset"
                );
                state.routed_below.insert(partition, c);
                // Applied locally but not routed: a crash came between the two.
                if !rebuild
                    && let Some(l) = local
                    && l >= c
                {
                    tracing::debug!(
                        partition,
                        from = c,
                        through = l,
                        "reading back unrouted records"
                    );
                    match state.local.stored_since(partition, c, l) {
                        Ok(records) => state.route.extend(records),
                        Err(err) => {
                            tracing::error!(partition, error = %err, "cannot read back unrouted records")
                        }
                    }
                    state.commit.insert((topic, partition), l + 1);
                }
            }
            self.ownership
                .assigned_at
                .write()
                .insert((topic, partition), started);
            if !rebuild && let Some(l) = local {
                // The local copy holds everything through `l`: a read waiting for a
                // position at or below it must not wait for a record after it, which may
                // never come (the tail may be transaction markers only).
                self.outcomes
                    .applied_through(topic == Topic::Entities, partition, l);
            }
            let st = if start >= high {
                if high > 0 {
                    self.outcomes
                        .applied_through(topic == Topic::Entities, partition, high - 1);
                }
                self.ownership.caught_up(topic, partition);
                PartitionState::Live
            } else {
                PartitionState::CatchingUp { end: high }
            };
            self.ownership.parts.write().insert((topic, partition), st);
            tracing::info!(
                topic = e.topic(),
                partition,
                start,
                end = high,
                rebuild,
                took_ms = started.elapsed().as_millis() as u64,
                "partition assigned"
            );
            if let Err(err) = out.add_partition_offset(
                e.topic(),
                e.partition(),
                Offset::Offset(i64::try_from(start).unwrap_or(i64::MAX)),
            ) {
                tracing::error!(error = %err, "cannot assign the partition");
            }
        }
        out
    }

    /// Partitions are being taken away: finish what is in flight, commit its routing.
    fn on_revoke(&self, consumer: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let mut guard = self.state.lock();
        if let Some(state) = guard.as_mut() {
            self.flush(consumer, state, true);
        }
        for e in tpl.elements() {
            if let (Some(topic), Ok(p)) = (self.topic_of(e.topic()), u32::try_from(e.partition())) {
                self.ownership.parts.write().remove(&(topic, p));
                self.ownership.lag.write().remove(&(topic, p));
                self.outcomes.forget(topic == Topic::Entities, p);
                if let Some(state) = guard.as_mut() {
                    state.skip_through.remove(&(topic, p));
                    state.commit.remove(&(topic, p));
                    state.routed_below.remove(&p);
                }
                tracing::info!(topic = e.topic(), partition = p, "partition revoked");
            }
        }
    }

    /// Wait for every record in flight (all of them when `all`, else those done already),
    /// then, when due, commit routing and offsets in one transaction.
    fn flush(&self, consumer: &BaseConsumer<Self>, state: &mut LoopState, all: bool) {
        while let Some(front) = state.inflight.front_mut() {
            let done = if all {
                Some(state.runtime.block_on(&mut front.applying))
            } else {
                match state
                    .runtime
                    .block_on(async { futures_util::poll!(&mut front.applying) })
                {
                    std::task::Poll::Ready(a) => Some(a),
                    std::task::Poll::Pending => None,
                }
            };
            let Some(applied) = done else { break };
            let Some(f) = state.inflight.pop_front() else {
                break;
            };
            self.finish(state, f, applied);
        }
        let due = all
            || state.last_commit.elapsed() >= COMMIT_EVERY
            || state.route.iter().map(OutRecord::size).sum::<usize>() >= COMMIT_BYTES;
        if due && (!state.route.is_empty() || !state.commit.is_empty()) {
            self.commit(consumer, state);
        }
    }

    fn finish(&self, state: &mut LoopState, f: InFlight, applied: Applied) {
        if let Outcome::Failed { message } = &applied.outcome {
            tracing::error!(topic = ?f.topic, partition = f.partition, offset = f.offset, error = %message, "applying a record failed");
        }
        if f.route {
            tracing::trace!(
                partition = f.partition,
                offset = f.offset,
                n = applied.route.len(),
                "routing"
            );
            state.route.extend(applied.route);
        }
        // A rebuild replays records whose routing a previous owner committed: never move the
        // group's offset back below that, or the next owner would route them again.
        let next = f.offset + 1;
        if f.topic == Topic::Entities
            || state
                .routed_below
                .get(&f.partition)
                .is_none_or(|&c| next > c)
        {
            state.commit.insert((f.topic, f.partition), next);
        }
        self.outcomes.record(
            f.topic == Topic::Entities,
            f.partition,
            f.offset,
            applied.outcome,
        );
        self.ownership.applied.fetch_add(1, Ordering::Relaxed);
        let mut parts = self.ownership.parts.write();
        if let Some(s) = parts.get_mut(&(f.topic, f.partition))
            && let PartitionState::CatchingUp { end } = *s
            && f.offset + 1 >= end
        {
            *s = PartitionState::Live;
            self.ownership.caught_up(f.topic, f.partition);
        }
    }

    fn commit(&self, consumer: &BaseConsumer<Self>, state: &mut LoopState) {
        if consumer.group_metadata().is_none() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for ((topic, p), next) in &state.commit {
            let name = match topic {
                Topic::Streams => &self.settings.names.streams,
                Topic::Entities => &self.settings.names.entities,
            };
            let _ = tpl.add_partition_offset(
                name,
                *p as i32,
                Offset::Offset(i64::try_from(*next).unwrap_or(i64::MAX)),
            );
        }
        tracing::debug!(records = state.route.len(), offsets = ?state.commit, "routing transaction");
        let mut tries = 0;
        loop {
            // The group's metadata moves into the commit (see `txn::send_offsets_bounded`).
            let Some(cgm) = consumer.group_metadata() else {
                return;
            };
            match state.txn.commit(&state.route, Some((tpl.clone(), cgm))) {
                Ok(_) => break,
                // Retrying would block the loop that must poll to rejoin the group: keep the
                // routing for the next commit (or the partition's next owner) and poll.
                Err(e @ TxnError::Group(_)) => {
                    tracing::warn!(error = %e, "routing transaction refused by the group; rejoining first");
                    return;
                }
                Err(e) if tries < 5 => {
                    tries += 1;
                    tracing::warn!(error = %e, tries, "routing transaction failed; retrying");
                    std::thread::sleep(Duration::from_millis(200 * tries));
                }
                Err(e) => {
                    // Kept for the next commit: routing is never dropped, only delayed.
                    tracing::error!(error = %e, "routing transaction failed; will retry");
                    return;
                }
            }
        }
        self.ownership
            .routed
            .fetch_add(state.route.len() as u64, Ordering::Relaxed);
        for ((topic, p), next) in &state.commit {
            if *topic == Topic::Streams {
                state.routed_below.insert(*p, *next);
            }
        }
        state.route.clear();
        state.commit.clear();
        state.last_commit = Instant::now();
    }
}

/// The running apply loop.
pub struct ApplyLoop {
    pub ownership: Arc<Ownership>,
    pub outcomes: Outcomes,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ApplyLoop {
    /// Join the group and start applying on a thread of its own.
    pub fn start(
        settings: ApplySettings,
        local: Arc<dyn LocalCopy>,
        runtime: Handle,
        on_assignment: OnAssignment,
    ) -> Result<ApplyLoop, ClusterError> {
        let ownership = Arc::new(Ownership::default());
        let outcomes = Outcomes::default();
        let ctx = Ctx {
            state: Mutex::new(Some(LoopState {
                local,
                txn: Txn::new(settings.txn.clone(), runtime.clone()),
                runtime,
                inflight: VecDeque::new(),
                route: Vec::new(),
                commit: BTreeMap::new(),
                routed_below: BTreeMap::new(),
                skip_through: BTreeMap::new(),
                last_commit: Instant::now(),
                rate: 20_000.0,
            })),
            ownership: Arc::clone(&ownership),
            outcomes: outcomes.clone(),
            on_assignment,
            settings,
        };
        let s = &ctx.settings;
        let consumer: BaseConsumer<Ctx> = ClientConfig::new()
            .set("bootstrap.servers", &s.brokers)
            .set("group.id", &s.names.group)
            .set("client.id", format!("veltrix-{}", s.node))
            .set("isolation.level", "read_committed")
            .set("allow.auto.create.topics", "false")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("statistics.interval.ms", "250")
            .set(
                "session.timeout.ms",
                s.session_timeout.as_millis().to_string(),
            )
            .set(
                "heartbeat.interval.ms",
                (s.session_timeout.as_millis() / 4).max(100).to_string(),
            )
            .set(
                "fetch.max.bytes",
                (s.txn.max_record_bytes.max(1 << 20) * 2).to_string(),
            )
            .set(
                "max.partition.fetch.bytes",
                s.txn.max_record_bytes.max(1 << 20).to_string(),
            )
            .create_with_context(ctx)
            .map_err(ClusterError::kafka("creating the consumer"))?;
        let names = consumer.context().settings.names.clone();
        consumer
            .subscribe(&[&names.streams, &names.entities])
            .map_err(ClusterError::kafka("subscribing to the cluster's topics"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("vx-kafka-apply".into())
            .spawn(move || run(&consumer, &thread_stop))
            .map_err(|e| ClusterError::CreateTopic {
                topic: names.streams.clone(),
                reason: format!("cannot start the apply thread: {e}"),
            })?;
        Ok(ApplyLoop {
            ownership,
            outcomes,
            stop,
            thread: Some(thread),
        })
    }

    /// Leave the group cleanly (the partitions move at once) and stop.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ApplyLoop {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(consumer: &BaseConsumer<Ctx>, stop: &AtomicBool) {
    let ctx = consumer.context();
    let _span = tracing::info_span!("apply", node = %ctx.settings.node).entered();
    let mut window = (Instant::now(), 0u64);
    while !stop.load(Ordering::Acquire) {
        let polled = consumer.poll(Duration::from_millis(20));
        let mut guard = ctx.state.lock();
        let Some(state) = guard.as_mut() else { break };
        match polled {
            Some(Ok(m)) => {
                if let (Some(topic), Ok(partition), Ok(offset)) = (
                    ctx.topic_of(m.topic()),
                    u32::try_from(m.partition()),
                    u64::try_from(m.offset()),
                ) && ctx.ownership.owns(topic, partition)
                    && state
                        .skip_through
                        .get(&(topic, partition))
                        .is_none_or(|&s| offset > s)
                {
                    let route = topic == Topic::Streams
                        && state
                            .routed_below
                            .get(&partition)
                            .is_none_or(|&c| offset >= c);
                    let value = m.payload().unwrap_or(&[]);
                    match state.local.submit(topic, partition, offset, value, route) {
                        Ok(applying) => state.inflight.push_back(InFlight {
                            topic,
                            partition,
                            offset,
                            route,
                            applying,
                        }),
                        Err(e) => {
                            tracing::error!(topic = m.topic(), partition, offset, error = %e, "cannot apply a record");
                        }
                    }
                    window.1 += 1;
                }
            }
            Some(Err(e)) => tracing::debug!(error = %e, "consumer"),
            None => {}
        }
        let all = state.inflight.len() >= MAX_INFLIGHT;
        ctx.flush(consumer, state, all);
        if window.0.elapsed() >= Duration::from_secs(2) {
            let secs = window.0.elapsed().as_secs_f64();
            if window.1 > 1000 {
                // Only busy windows say how fast applying can go.
                state.rate = 0.5 * state.rate + 0.5 * (window.1 as f64 / secs);
            }
            window = (Instant::now(), 0);
        }
        drop(guard);
    }
    // Leaving: finish and commit what is in flight, then leave the group at once.
    if let Some(state) = ctx.state.lock().as_mut() {
        ctx.flush(consumer, state, true);
    }
    consumer.unsubscribe();
    let _ = consumer.poll(Duration::from_millis(100));
}
