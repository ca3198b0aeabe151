//! Failover without waiting for the broker's clean-up (docs/CLUSTER.md, "Failure modes").
//!
//! A node killed mid-transaction leaves its transactions open. Until the broker aborts them
//! (after `transaction.timeout.ms`, checked every
//! `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 10 s by default), every
//! `read_committed` reader of those partitions is held back at their last stable offset:
//! the new owners cannot catch up, and the dead node's shards stay unserved for 20–25 s.
//!
//! So a node given partitions whose previous owner has left the consumer group opens a
//! producer with each of that node's transactional ids and initialises it: Kafka then
//! fences the old producer and aborts its open transaction at once, and the partitions move
//! within the group's session timeout and a catch-up. A node still in the group is never
//! fenced (it gave partitions up in a rebalance, and commits what it has before it does); a
//! node that restarts later fences the stand-in in turn, as it fences its own old self.

use crate::members::Members;
use crate::names::Names;
use crate::txn::{Txn, TxnSettings};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::runtime::Handle;

/// How long asking the group for its members may take.
const ASK: Duration = Duration::from_secs(5);
/// How many times (a second apart) the group's members are asked before a previous owner
/// still listed is taken for alive.
const LOOKS: u32 = 3;

/// What fencing needs to know; cheap to clone into the thread that does it.
#[derive(Clone)]
pub struct Fencer {
    pub brokers: String,
    pub names: Names,
    /// This node.
    pub node: String,
    /// The settings of this node's own transactional producers, the id aside.
    pub txn: TxnSettings,
    pub runtime: Handle,
}

impl Fencer {
    /// The nodes that last claimed partitions this node just gained (`(entities, p)`), this
    /// node aside, read from `members` before this node announces its claim.
    pub fn previous_owners(&self, members: &Members, gained: &[(bool, u32)]) -> BTreeSet<String> {
        gained
            .iter()
            .filter_map(|&(entities, p)| members.owner(p, entities))
            .map(|o| o.node)
            .filter(|n| *n != self.node)
            .collect()
    }

    /// Fence those of `nodes` that are no longer in the consumer group, on a thread of its
    /// own (each fence is a few round trips to the transaction coordinator).
    pub fn fence_departed(&self, nodes: BTreeSet<String>) {
        if nodes.is_empty() {
            return;
        }
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("vx-kafka-fence".into())
            .spawn(move || me.fence_when_gone(nodes));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the fencing thread");
        }
    }

    /// Fence each of `nodes` once the group's member list no longer names it. The list can
    /// lag the assignment by a moment, so it is asked a few times; a node still listed after
    /// that is alive (it gave partitions up in a rebalance) and is left alone.
    fn fence_when_gone(&self, mut nodes: BTreeSet<String>) {
        for attempt in 0..LOOKS {
            if attempt > 0 {
                std::thread::sleep(Duration::from_secs(1));
            }
            let present = match self.group_members() {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot list the group's members");
                    continue;
                }
            };
            nodes.retain(|node| {
                if present.contains(node) {
                    return true;
                }
                self.fence(node);
                false
            });
            if nodes.is_empty() {
                return;
            }
        }
        tracing::debug!(?nodes, "previous owners still in the group: not fenced");
    }

    /// The node ids in the group now (from their `client.id`, `veltrix-<node>`).
    fn group_members(&self) -> Result<BTreeSet<String>, rdkafka::error::KafkaError> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()?;
        let list = consumer.fetch_group_list(Some(&self.names.group), ASK)?;
        Ok(list
            .groups()
            .iter()
            .flat_map(|g| g.members())
            .filter_map(|m| m.client_id().strip_prefix("veltrix-").map(str::to_string))
            .collect())
    }

    /// Initialise a producer with each of `node`'s transactional ids: its open transactions
    /// are aborted now.
    fn fence(&self, node: &str) {
        for txn_id in [
            self.names.ingest_txn_id(node),
            self.names.apply_txn_id(node),
        ] {
            let settings = TxnSettings {
                txn_id: txn_id.clone(),
                ..self.txn.clone()
            };
            let mut txn = Txn::new(settings, self.runtime.clone());
            match txn.init() {
                Ok(()) => tracing::info!(
                    node,
                    txn_id,
                    "fenced the transactions of a node that left the group"
                ),
                Err(e) => {
                    tracing::warn!(node, txn_id, error = %e, "fencing a departed node failed")
                }
            }
        }
    }
}
