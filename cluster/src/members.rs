//! Who owns which partition, at which URL: the compacted topic `T.members`, one record per
//! node (key: the node id; value: its URL and the partitions the consumer group gave it, as
//! JSON), written by each node after every change of its assignment and read by every node
//! from the beginning. No second coordination service: Kafka's consumer group decides the
//! owners, this topic only tells everyone what it decided.
//!
//! A node that dies leaves its last record behind. Its partitions are claimed again by their
//! new owners, whose records come later in the topic's single partition, and the latest
//! claim of a partition wins. A node that stops cleanly writes a tombstone (a null value).

use crate::error::ClusterError;
use crate::names::Names;
use parking_lot::RwLock;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What one node says of itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub node: String,
    /// Base URL of its HTTP API (`cluster.advertise`).
    pub url: String,
    /// Partitions of `T` it owns.
    pub streams: BTreeSet<u32>,
    /// Partitions of `T.entities` it owns.
    pub entities: BTreeSet<u32>,
    /// The settings every node must share (config key → value), checked by each node
    /// before it joins ([`Members::disagreement`]). Absent in records of older versions.
    #[serde(default)]
    pub agreed: BTreeMap<String, String>,
    /// What its local copy holds against its limits, republished as it changes: ingest
    /// nodes refuse with 507 from it before they produce (docs/CLUSTER.md, "Limits").
    #[serde(default)]
    pub usage: Usage,
}

/// A node's local copy against its limits (`storage.max_streams`,
/// `storage.max_feature_bytes`); zeros in records of older versions (no limit known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub streams: u64,
    pub max_streams: u64,
    pub feature_bytes: u64,
    pub max_feature_bytes: u64,
}

impl Usage {
    /// At or past `storage.max_streams`: a write that creates a stream is refused.
    pub fn streams_full(&self) -> bool {
        self.max_streams > 0 && self.streams >= self.max_streams
    }

    /// At or past `storage.max_feature_bytes`: a write that reaches the tables is refused.
    pub fn features_full(&self) -> bool {
        self.max_feature_bytes > 0 && self.feature_bytes >= self.max_feature_bytes
    }
}

/// A member as last read, with the offset of its record (later claims win).
#[derive(Clone, Debug)]
struct Seen {
    member: Member,
    offset: i64,
}

/// The members table every node reads.
#[derive(Clone, Default)]
pub struct Members {
    inner: Arc<RwLock<BTreeMap<String, Seen>>>,
    /// The reader has read the topic up to its end at least once.
    caught_up: Arc<AtomicBool>,
    /// Some record says its node is at a limit: the ingest side looks closer only then.
    any_full: Arc<AtomicBool>,
}

/// Where a partition is served from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub node: String,
    pub url: String,
}

impl Members {
    /// The owner of `partition` of `T` (`entities: false`) or `T.entities`: the latest claim.
    pub fn owner(&self, partition: u32, entities: bool) -> Option<Owner> {
        self.claimant(partition, entities, |m| Owner {
            node: m.node.clone(),
            url: m.url.clone(),
        })
    }

    /// The usage the owner of `partition` last published (see [`Members::owner`]).
    pub fn usage_of(&self, partition: u32, entities: bool) -> Option<Usage> {
        self.claimant(partition, entities, |m| m.usage)
    }

    /// `what` of the latest claim of `partition`.
    fn claimant<T>(
        &self,
        partition: u32,
        entities: bool,
        what: impl Fn(&Member) -> T,
    ) -> Option<T> {
        let table = self.inner.read();
        table
            .values()
            .filter(|s| {
                let set = if entities {
                    &s.member.entities
                } else {
                    &s.member.streams
                };
                set.contains(&partition)
            })
            .max_by_key(|s| s.offset)
            .map(|s| what(&s.member))
    }

    /// The nodes that own at least one partition now (the latest claim of it): a node that
    /// died leaves its record behind, but once its partitions are claimed again it owns none.
    pub fn owners(&self) -> Vec<Owner> {
        let table = self.inner.read();
        let mut latest: BTreeMap<(bool, u32), (i64, &str)> = BTreeMap::new();
        for (node, seen) in table.iter() {
            let claims = seen
                .member
                .streams
                .iter()
                .map(|p| (false, *p))
                .chain(seen.member.entities.iter().map(|p| (true, *p)));
            for key in claims {
                let e = latest.entry(key).or_insert((seen.offset, node));
                if seen.offset > e.0 {
                    *e = (seen.offset, node);
                }
            }
        }
        let owning: BTreeSet<&str> = latest.values().map(|(_, n)| *n).collect();
        table
            .values()
            .filter(|s| owning.contains(s.member.node.as_str()))
            .map(|s| Owner {
                node: s.member.node.clone(),
                url: s.member.url.clone(),
            })
            .collect()
    }

    /// Every node with a record, and its URL.
    pub fn nodes(&self) -> Vec<Owner> {
        self.inner
            .read()
            .values()
            .map(|s| Owner {
                node: s.member.node.clone(),
                url: s.member.url.clone(),
            })
            .collect()
    }

    /// The first shared setting in which `ours` differs from a node that owns partitions
    /// now (a record a killed node left behind, whose partitions others claimed since, is
    /// not asked; nor is this node's own). A key a member does not publish is not compared.
    pub fn disagreement(
        &self,
        node: &str,
        ours: &BTreeMap<String, String>,
    ) -> Option<ClusterError> {
        let owning: BTreeSet<String> = self.owners().into_iter().map(|o| o.node).collect();
        let table = self.inner.read();
        let members = table
            .values()
            .map(|s| &s.member)
            .filter(|m| m.node != node && owning.contains(&m.node));
        for m in members {
            for (key, value) in ours {
                if let Some(theirs) = m.agreed.get(key)
                    && theirs != value
                {
                    return Some(ClusterError::Disagree {
                        key: key.clone(),
                        ours: value.clone(),
                        theirs: theirs.clone(),
                        node: m.node.clone(),
                    });
                }
            }
        }
        None
    }

    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// Whether any node published usage at one of its limits.
    pub fn any_full(&self) -> bool {
        self.any_full.load(Ordering::Acquire)
    }

    fn apply(&self, key: &str, value: Option<&[u8]>, offset: i64) {
        let mut table = self.inner.write();
        self.apply_to(&mut table, key, value, offset);
        let full = table
            .values()
            .any(|s| s.member.usage.streams_full() || s.member.usage.features_full());
        self.any_full.store(full, Ordering::Release);
    }

    fn apply_to(
        &self,
        table: &mut BTreeMap<String, Seen>,
        key: &str,
        value: Option<&[u8]>,
        offset: i64,
    ) {
        match value {
            None => {
                table.remove(key);
            }
            Some(v) => match serde_json::from_slice::<Member>(v) {
                Ok(member) if member.node == key => {
                    table.insert(key.to_string(), Seen { member, offset });
                }
                Ok(_) | Err(_) => {
                    tracing::warn!(key, offset, "ignoring a members record that does not parse");
                }
            },
        }
    }

    /// Read `T.members` from the beginning, on a thread of its own, until `stop`.
    pub fn start_reader(
        &self,
        brokers: &str,
        names: &Names,
        stop: Arc<AtomicBool>,
    ) -> Result<(), ClusterError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            // Assigned, not subscribed: the group id is never used to commit.
            .set("group.id", format!("{}.members-reader", names.members))
            .set("allow.auto.create.topics", "false")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            // Short long-polls: the end-of-topic check queues behind them.
            .set("fetch.wait.max.ms", "50")
            .create()
            .map_err(ClusterError::kafka("creating the members reader"))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&names.members, 0, Offset::Beginning)
            .map_err(ClusterError::kafka("assigning the members topic"))?;
        consumer
            .assign(&tpl)
            .map_err(ClusterError::kafka("assigning the members topic"))?;
        let members = self.clone();
        let topic = names.members.clone();
        std::thread::Builder::new()
            .name("vx-kafka-members".into())
            .spawn(move || members.read_loop(&consumer, &topic, &stop))
            .map_err(|e| ClusterError::CreateTopic {
                topic: names.members.clone(),
                reason: format!("cannot start its reader thread: {e}"),
            })?;
        Ok(())
    }

    fn read_loop(&self, consumer: &BaseConsumer, topic: &str, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            // Everything buffered at once: a watermark query waits behind the connection's
            // long-poll fetch, so checking after each record read one record a second.
            let mut wait = Duration::from_millis(100);
            loop {
                match consumer.poll(wait) {
                    Some(Ok(m)) => {
                        if let Some(Ok(key)) = m.key_view::<str>() {
                            self.apply(key, m.payload(), m.offset());
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "members reader");
                        std::thread::sleep(Duration::from_millis(100));
                        break;
                    }
                    None => break,
                }
                wait = Duration::ZERO;
            }
            if !self.caught_up.load(Ordering::Relaxed) && reached_end(consumer, topic) {
                self.caught_up.store(true, Ordering::Release);
            }
        }
    }
}

/// Whether the reader's position is at the members topic's end.
fn reached_end(consumer: &BaseConsumer, topic: &str) -> bool {
    let Ok((_, high)) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(5)) else {
        return false;
    };
    let Ok(tpl) = consumer.position() else {
        return false;
    };
    tpl.elements_for_topic(topic)
        .first()
        .is_some_and(|e| match e.offset() {
            Offset::Offset(o) => o >= high,
            _ => high == 0,
        })
}

/// Writes this node's record to `T.members`.
pub struct Announcer {
    producer: ThreadedProducer<DefaultProducerContext>,
    topic: String,
}

impl Announcer {
    pub fn new(brokers: &str, names: &Names) -> Result<Announcer, ClusterError> {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("allow.auto.create.topics", "false")
            .create()
            .map_err(ClusterError::kafka("creating the members producer"))?;
        Ok(Announcer {
            producer,
            topic: names.members.clone(),
        })
    }

    /// Say which partitions this node owns now (waits until Kafka has it).
    pub fn announce(&self, member: &Member) -> Result<(), ClusterError> {
        let value = serde_json::to_vec(member).map_err(|e| ClusterError::CreateTopic {
            topic: self.topic.clone(),
            reason: format!("encoding the member record: {e}"),
        })?;
        self.send(&member.node, Some(&value))
    }

    /// Leave: a tombstone, so that nobody forwards to this node any more.
    pub fn leave(&self, node: &str) -> Result<(), ClusterError> {
        self.send(node, None)
    }

    fn send(&self, node: &str, value: Option<&[u8]>) -> Result<(), ClusterError> {
        let mut record = BaseRecord::<str, [u8]>::to(&self.topic)
            .key(node)
            .partition(0);
        if let Some(v) = value {
            record = record.payload(v);
        }
        self.producer
            .send(record)
            .map_err(|(e, _)| ClusterError::Kafka {
                what: "announcing this node in the members topic".into(),
                source: e,
            })?;
        self.producer
            .flush(Duration::from_secs(10))
            .map_err(ClusterError::kafka(
                "announcing this node in the members topic",
            ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record(node: &str, streams: &[u32], agreed: &[(&str, &str)]) -> Vec<u8> {
        serde_json::to_vec(&Member {
            node: node.into(),
            url: format!("http://{node}"),
            streams: streams.iter().copied().collect(),
            entities: BTreeSet::new(),
            agreed: agreed
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            usage: Usage::default(),
        })
        .unwrap()
    }

    fn ours(window: &str) -> BTreeMap<String, String> {
        [("storage.shards", "8"), ("ingest.dedup_window", window)]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_node_that_differs_from_an_owner_is_named_with_the_key() {
        let m = Members::default();
        m.apply(
            "a",
            Some(&record(
                "a",
                &[0, 1],
                &[("storage.shards", "8"), ("ingest.dedup_window", "10m")],
            )),
            1,
        );
        assert!(m.disagreement("b", &ours("10m")).is_none());
        let e = m.disagreement("b", &ours("1m")).unwrap().to_string();
        assert!(
            e.contains("ingest.dedup_window is 1m on this node but 10m on node a"),
            "{e}"
        );
        // Its own record (an earlier run with other settings) is not asked.
        assert!(m.disagreement("a", &ours("1m")).is_none());
        // A key an older member does not publish is not compared.
        m.apply("c", Some(&record("c", &[2], &[])), 2);
        assert!(m.disagreement("b", &ours("10m")).is_none());
    }

    #[test]
    fn a_dead_nodes_record_whose_partitions_moved_is_not_asked() {
        let m = Members::default();
        m.apply(
            "dead",
            Some(&record("dead", &[0], &[("ingest.dedup_window", "1h")])),
            1,
        );
        assert!(m.disagreement("b", &ours("10m")).is_some());
        // Its partition claimed again by a node with the new settings.
        m.apply(
            "new",
            Some(&record("new", &[0], &[("ingest.dedup_window", "10m")])),
            2,
        );
        assert!(m.disagreement("b", &ours("10m")).is_none());
    }
}
