//! The cluster's topics against a real Kafka broker: created where absent, with the shard
//! count as their partition count; a topic with another count is a clear start-up error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use vx_cluster::testing::Broker;
use vx_cluster::{ClusterError, Names, admin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_then_checked() {
    let broker = Broker::start();
    let names = Names::new("vx-topics");
    admin::ensure_topics(&broker.bootstrap(), &names, 8, 1 << 20)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", broker.log()));
    // Present and matching: nothing to do.
    admin::ensure_topics(&broker.bootstrap(), &names, 8, 1 << 20)
        .await
        .unwrap();
    // Another shard count: refused, naming both counts.
    let err = admin::ensure_topics(&broker.bootstrap(), &names, 4, 1 << 20)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ClusterError::PartitionMismatch { topic, found: 8, shards: 4 } if topic == "vx-topics"
        ),
        "{err}"
    );
    assert!(err.to_string().contains("8 partitions"), "{err}");
}
