//! What can go wrong in cluster mode, typed: the server maps these to start-up errors or to
//! the HTTP answers of docs/API.md (503 for a broker that is down, 429 for a full producer).

use rdkafka::error::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A topic exists with another partition count than the data dir's shard count.
    #[error(
        "topic {topic} has {found} partitions but this data dir has {shards} shards; the \
         partitions are the shards, so they must match (create the topic with {shards} \
         partitions, or use a data dir with {found} shards)"
    )]
    PartitionMismatch {
        topic: String,
        found: usize,
        shards: u32,
    },
    /// Kafka refused or failed an operation; `what` says which.
    #[error("{what}: {source}")]
    Kafka {
        what: String,
        #[source]
        source: KafkaError,
    },
    /// A topic could not be created.
    #[error("creating topic {topic}: {reason}")]
    CreateTopic { topic: String, reason: String },
    /// This node's value of a setting every node must share differs from a member's.
    #[error(
        "{key} is {ours} on this node but {theirs} on node {node} of the cluster; every node \
         must have the same {key} (docs/CLUSTER.md, \"Every node must share\"), so this node \
         does not start"
    )]
    Disagree {
        key: String,
        ours: String,
        theirs: String,
        node: String,
    },
    /// Kafka did not answer in time.
    #[error("{what}: no answer from Kafka within {secs} s")]
    Timeout { what: String, secs: u64 },
}

impl ClusterError {
    pub(crate) fn kafka(what: impl Into<String>) -> impl FnOnce(KafkaError) -> ClusterError {
        let what = what.into();
        move |source| ClusterError::Kafka { what, source }
    }
}

/// What the node's local copy (its `vx-storage` store) could not do for the apply loop
/// ([`crate::apply::LocalCopy`]); the loop logs it and takes the partition again later.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The store refused the record, or a reset (shutting down, a broken disk, an origin
    /// applied already).
    #[error("the local store refused it: {0}")]
    Store(#[from] vx_storage::WriteError),
    /// Reading records back from the local log failed.
    #[error("reading the local log: {0}")]
    Read(#[from] vx_storage::ReadError),
    /// An event too large for a record to route (the store holds larger ones only if its
    /// limits changed).
    #[error("an event cannot be routed: {0}")]
    Pack(#[from] vx_proto::packed::PackError),
    /// Events the local log holds that do not decode: a corrupt copy.
    #[error("a stored event does not decode: {0:?}")]
    Decode(vx_proto::packed::DecodeError),
    /// A stream whose events were being read back was deleted meanwhile.
    #[error("stream {0:?} vanished while its events were read back")]
    Vanished(String),
}
