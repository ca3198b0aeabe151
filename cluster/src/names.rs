//! The Kafka names a cluster derives from `cluster.topic` (`T`) and `cluster.node_id`: one
//! place, so that every node, the docs and the tests agree on them.

/// Which of the cluster's topics a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// `T`, partition = the stream's shard.
    Streams,
    /// `T.entities`, partition = the entity's shard.
    Entities,
}

/// The names of one cluster's topics and group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// `T`: one partition per shard, keyed by stream (partition = shard).
    pub streams: String,
    /// `T.entities`: one partition per shard, keyed by entity: the feature path.
    pub entities: String,
    /// `T.members`: compacted, one partition: who owns which partitions, at which URL.
    pub members: String,
    /// `T.group`: the consumer group whose assignment decides the owners.
    pub group: String,
}

impl Names {
    pub fn new(topic: &str) -> Names {
        Names {
            streams: topic.to_string(),
            entities: format!("{topic}.entities"),
            members: format!("{topic}.members"),
            group: format!("{topic}.group"),
        }
    }

    /// The transactional id of a node's ingest producer: stable across the node's restarts,
    /// so that a restarted node fences its old self (a zombie's open transaction is aborted).
    pub fn ingest_txn_id(&self, node: &str) -> String {
        format!("{}.ingest.{node}", self.streams)
    }

    /// The transactional id of a node's apply producer (entity events and consumed offsets).
    pub fn apply_txn_id(&self, node: &str) -> String {
        format!("{}.apply.{node}", self.streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_topic() {
        let n = Names::new("ev");
        assert_eq!(n.streams, "ev");
        assert_eq!(n.entities, "ev.entities");
        assert_eq!(n.members, "ev.members");
        assert_eq!(n.group, "ev.group");
        assert_eq!(n.ingest_txn_id("n1"), "ev.ingest.n1");
        assert_eq!(n.apply_txn_id("n1"), "ev.apply.n1");
    }
}
