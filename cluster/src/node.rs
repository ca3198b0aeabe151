//! One cluster node: everything a `veltrix serve --cluster kafka` process runs besides its
//! HTTP API, started once the local store is open and stopped before it closes.
//!
//! - the topics, created or checked ([`crate::admin`]);
//! - the members table, read from `T.members`, and this node's announcements in it;
//! - the ingest producer ([`crate::ingest`]);
//! - the apply loop over the local store ([`crate::apply`], [`crate::local`]).

use crate::admin;
use crate::apply::{ApplyLoop, ApplySettings, Ownership, PartitionState};
use crate::error::ClusterError;
use crate::fence::Fencer;
use crate::ingest::{IngestProducer, ProduceError, ProducerStats};
use crate::local::StoreCopy;
use crate::members::{Announcer, Member, Members, Owner, Usage};
use crate::names::Names;
use crate::outcomes::Outcomes;
use crate::txn::{OutRecord, Topic, TxnSettings};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;
use vx_storage::Store;

/// What a node needs to know (the `cluster.*` keys, resolved).
#[derive(Clone, Debug)]
pub struct NodeSettings {
    pub brokers: String,
    pub topic: String,
    pub node: String,
    /// Base URL of this node's HTTP API.
    pub advertise: String,
    pub max_catchup: Duration,
    /// The consumer group's session timeout: how long a dead node keeps its partitions.
    pub session_timeout: Duration,
    /// The transaction timeout of both producers: how long a dead producer's open
    /// transaction holds back `read_committed` readers before the broker aborts it.
    pub txn_timeout: Duration,
    /// The largest record a request makes (`ingest.max_body_bytes` and some).
    pub max_record_bytes: u64,
    /// The settings every node must share, config key → value (the shard count, dedup,
    /// feature declarations): published in `T.members`, and a node that differs from the
    /// cluster refuses to start, naming the key.
    pub agreed: std::collections::BTreeMap<String, String>,
}

/// Where a shard is served from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here, and caught up.
    Local,
    /// Here, but still replaying what it had to when it got the partition.
    CatchingUp,
    /// On another node.
    Remote(Owner),
    /// Nobody claims it right now (a rebalance is under way).
    Unknown,
}

/// A running cluster node.
pub struct Node {
    pub settings: NodeSettings,
    pub names: Names,
    /// Partitions of each topic (the local store's shards).
    shards: u32,
    producer: IngestProducer,
    members: Members,
    announcer: Arc<Announcer>,
    apply: Mutex<Option<ApplyLoop>>,
    ownership: Arc<Ownership>,
    outcomes: Outcomes,
    stop_reader: Arc<AtomicBool>,
}

/// How often a node looks whether its usage changed, to publish it.
const USAGE_EVERY: Duration = Duration::from_secs(1);

/// The local copy against its limits.
fn usage_of(store: &Store) -> Usage {
    let f = store.features().stats();
    Usage {
        streams: store.stream_count() as u64,
        max_streams: store.max_streams(),
        feature_bytes: f.bytes,
        max_feature_bytes: f.max_bytes,
    }
}

/// Republish this node's record whenever its usage changed, every [`USAGE_EVERY`] at most,
/// on a thread of its own (announcing blocks until Kafka has it), until `stop`.
fn publish_usage(
    announcer: Arc<Announcer>,
    announced: Arc<Mutex<Member>>,
    store: Store,
    stop: Arc<AtomicBool>,
) {
    let run = move || {
        while !stop.load(Ordering::Acquire) {
            std::thread::sleep(USAGE_EVERY);
            let usage = usage_of(&store);
            let member = {
                let mut m = announced.lock();
                // Not announced yet (no assignment), or nothing new to say.
                if m.usage == usage || (m.streams.is_empty() && m.entities.is_empty()) {
                    continue;
                }
                m.usage = usage;
                m.clone()
            };
            if let Err(e) = announcer.announce(&member) {
                tracing::warn!(error = %e, "cannot publish this node's usage");
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("vx-kafka-usage".into())
        .spawn(run)
    {
        tracing::error!(error = %e, "cannot start the usage publisher: limits are not checked before producing");
    }
}

/// How long a joining node waits to have read `T.members` before it checks the settings.
const READ_MEMBERS: Duration = Duration::from_secs(15);

/// Read the members table to its end, then check this node's shared settings against the
/// nodes that own partitions.
async fn agree(members: &Members, settings: &NodeSettings) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + READ_MEMBERS;
    while !members.caught_up() {
        if tokio::time::Instant::now() >= deadline {
            return Err(ClusterError::Timeout {
                what: "reading the members topic".into(),
                secs: READ_MEMBERS.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match members.disagreement(&settings.node, &settings.agreed) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Node {
    /// Create or check the topics, then join: announce, read the members, start producing
    /// and applying. `shards` is the local store's shard count (the topics' partitions).
    pub async fn start(
        settings: NodeSettings,
        store: Store,
        runtime: Handle,
    ) -> Result<Arc<Node>, ClusterError> {
        let names = Names::new(&settings.topic);
        let shards = store.shards();
        admin::ensure_topics(
            &settings.brokers,
            &names,
            store.shards(),
            settings.max_record_bytes,
        )
        .await?;
        let announcer = Arc::new(Announcer::new(&settings.brokers, &names)?);
        let members = Members::default();
        let stop_reader = Arc::new(AtomicBool::new(false));
        members.start_reader(&settings.brokers, &names, Arc::clone(&stop_reader))?;
        if let Err(e) = agree(&members, &settings).await {
            stop_reader.store(true, Ordering::Release);
            return Err(e);
        }
        let txn = |id: String| TxnSettings {
            brokers: settings.brokers.clone(),
            names: names.clone(),
            txn_id: id,
            max_record_bytes: settings.max_record_bytes,
            txn_timeout: settings.txn_timeout,
            call_timeout: settings.txn_timeout,
        };
        let producer =
            IngestProducer::start(txn(names.ingest_txn_id(&settings.node)), runtime.clone());
        let announced = Arc::new(Mutex::new(Member {
            node: settings.node.clone(),
            url: settings.advertise.clone(),
            streams: Default::default(),
            entities: Default::default(),
            agreed: settings.agreed.clone(),
            usage: usage_of(&store),
        }));
        let fencer = Fencer {
            brokers: settings.brokers.clone(),
            names: names.clone(),
            node: settings.node.clone(),
            txn: txn(names.ingest_txn_id(&settings.node)),
            runtime: runtime.clone(),
        };
        let on_assignment = {
            let announcer = Arc::clone(&announcer);
            let announced = Arc::clone(&announced);
            let members = members.clone();
            let store = store.clone();
            Box::new(
                move |streams: &std::collections::BTreeSet<u32>,
                      entities: &std::collections::BTreeSet<u32>| {
                    let member = {
                        let mut m = announced.lock();
                        // Before this claim is announced, the table still names the
                        // partitions' previous owners.
                        let gained: Vec<(bool, u32)> = streams
                            .difference(&m.streams)
                            .map(|&p| (false, p))
                            .chain(entities.difference(&m.entities).map(|&p| (true, p)))
                            .collect();
                        fencer.fence_departed(fencer.previous_owners(&members, &gained));
                        m.streams = streams.clone();
                        m.entities = entities.clone();
                        m.usage = usage_of(&store);
                        m.clone()
                    };
                    if let Err(e) = announcer.announce(&member) {
                        tracing::error!(error = %e, "cannot announce this node's partitions");
                    }
                },
            )
        };
        publish_usage(
            Arc::clone(&announcer),
            Arc::clone(&announced),
            store.clone(),
            Arc::clone(&stop_reader),
        );
        let apply = ApplyLoop::start(
            ApplySettings {
                brokers: settings.brokers.clone(),
                names: names.clone(),
                node: settings.node.clone(),
                txn: txn(names.apply_txn_id(&settings.node)),
                session_timeout: settings.session_timeout,
                max_catchup: settings.max_catchup,
            },
            Arc::new(StoreCopy::new(store, runtime.clone())),
            runtime,
            on_assignment,
        )?;
        let ownership = Arc::clone(&apply.ownership);
        let outcomes = apply.outcomes.clone();
        tracing::info!(node = %settings.node, topic = %names.streams, "joined the cluster");
        Ok(Arc::new(Node {
            settings,
            names,
            shards,
            producer,
            members,
            announcer,
            apply: Mutex::new(Some(apply)),
            ownership,
            outcomes,
            stop_reader,
        }))
    }

    /// Partitions of each topic: the shards.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// Where `shard` of `topic` is served from.
    pub fn route(&self, topic: Topic, shard: u32) -> Route {
        let local = self
            .ownership
            .states()
            .into_iter()
            .find(|(k, _)| *k == (topic, shard))
            .map(|(_, s)| s);
        match local {
            Some(PartitionState::Live) => Route::Local,
            Some(PartitionState::CatchingUp { .. }) => Route::CatchingUp,
            None => match self.members.owner(shard, topic == Topic::Entities) {
                Some(o) if o.node == self.settings.node => Route::Unknown,
                Some(o) => Route::Remote(o),
                None => Route::Unknown,
            },
        }
    }

    /// Produce one request's records in one transaction; their offsets, in order.
    pub async fn produce(
        &self,
        records: Vec<OutRecord>,
        wait: Duration,
    ) -> Result<Vec<u64>, ProduceError> {
        self.producer.send(records, wait).await
    }

    /// Joined the group, every owned partition caught up, the members table read.
    pub fn ready(&self) -> bool {
        self.ownership.ready() && self.members.caught_up()
    }

    pub fn ownership(&self) -> &Arc<Ownership> {
        &self.ownership
    }

    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    pub fn members(&self) -> &Members {
        &self.members
    }

    pub fn producer_stats(&self) -> &Arc<ProducerStats> {
        self.producer.stats()
    }

    /// Leave: finish applying what is in flight, leave the group (the partitions move at
    /// once) and the members table. Blocking; the store is closed after this.
    pub fn shutdown(&self) {
        if let Some(mut apply) = self.apply.lock().take() {
            apply.stop();
        }
        if let Err(e) = self.announcer.leave(&self.settings.node) {
            tracing::warn!(error = %e, "cannot say in the members topic that this node left");
        }
        self.stop_reader.store(true, Ordering::Release);
    }
}
