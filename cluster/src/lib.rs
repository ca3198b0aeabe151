//! `vx-cluster`: cluster mode on Kafka (docs/CLUSTER.md). The shards are the partitions of
//! the topic `T`; any node takes writes (it produces them to Kafka) and answers reads (the
//! owner of a shard applies its partition into the node's local store, through the storage
//! engine's input seam, and serves it).
//!
//! Without its default feature `kafka`, only the formats are built (`wire`, `position`,
//! `outcomes`, `names`): what the fuzz crate needs, without librdkafka.
//!
//! # Layout
//! - [`node`]: one cluster node: everything it runs besides its HTTP API.
//! - [`names`]: the topics, group and transactional ids derived from `cluster.topic`.
//! - [`admin`]: creating and checking the topics at start-up.
//! - [`txn`]: one Kafka transaction at a time on a blocking thread (begin, produce, wait for
//!   the deliveries, add consumed offsets, commit or abort).
//! - [`ingest`]: the write path: requests grouped into transactions by one thread.
//! - [`apply`]: the apply loop: this node's member of the consumer group, applying the
//!   partitions it owns into the local copy and routing entity events exactly once.
//! - [`local`]: the local store as the apply loop's local copy.
//! - [`outcomes`]: what applying each record did, for `applied` answers and position waits.
//! - [`position`]: a write's opaque position and what `X-Vx-Min-Position` waits for.
//! - [`members`]: who owns which partition at which URL (the compacted `T.members`).
//! - [`wire`]: the value of every record the cluster writes to Kafka, byte by byte.
//! - [`error`]: what can go wrong, typed.
//! - [`fence`]: a departed node's open transactions aborted at once, for a fast failover.
//! - `testing` (feature `testing`): real Kafka brokers for the tests (one, or a KRaft cluster
//!   of three).

#[cfg(feature = "kafka")]
pub mod admin;
#[cfg(feature = "kafka")]
pub mod apply;
#[cfg(feature = "kafka")]
pub mod error;
#[cfg(feature = "kafka")]
pub mod fence;
#[cfg(feature = "kafka")]
pub mod ingest;
#[cfg(feature = "kafka")]
pub mod local;
#[cfg(feature = "kafka")]
pub mod members;
pub mod names;
#[cfg(feature = "kafka")]
pub mod node;
pub mod outcomes;
pub mod position;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "kafka")]
pub mod txn;
pub mod wire;

#[cfg(feature = "kafka")]
pub use error::ClusterError;
pub use names::{Names, Topic};
#[cfg(feature = "kafka")]
pub use node::{Node, NodeSettings, Route};
