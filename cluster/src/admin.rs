//! The cluster's topics: created at start-up where absent, checked where present. The
//! partitions of `T` and `T.entities` are the shards, so a different count than the data
//! dir's is a start-up error rather than a silent remapping of streams to other shards.

use crate::error::ClusterError;
use crate::names::Names;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::time::Duration;

/// How long start-up waits for Kafka's metadata and topic creation.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Make sure `T` and `T.entities` exist with `shards` partitions and `T.members` with one
/// (compacted). `max_record_bytes` is the largest record a request can make (the topics'
/// `max.message.bytes` is set to it when they are created). Replication is the broker's
/// default (`default.replication.factor`).
///
/// A failure Kafka's client reports as passing (a connection to a broker dropped or
/// replaced, a broker or controller not available yet: brokers that have just started) is
/// tried again, from the metadata, until [`ADMIN_TIMEOUT`]; a refusal (a partition count
/// that does not match, a topic Kafka will not create) is not.
pub async fn ensure_topics(
    brokers: &str,
    names: &Names,
    shards: u32,
    max_record_bytes: u64,
) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + ADMIN_TIMEOUT;
    loop {
        match ensure_once(brokers, names, shards, max_record_bytes).await {
            Err(e) if passing(&e) && tokio::time::Instant::now() < deadline => {
                tracing::warn!(error = %e, "the cluster's topics: trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            done => return done,
        }
    }
}

/// The pause between two tries of [`ensure_topics`].
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Whether a failure of [`ensure_once`] may pass by itself.
fn passing(e: &ClusterError) -> bool {
    let code = match e {
        ClusterError::Kafka { source, .. } => source.rdkafka_error_code(),
        _ => return false,
    };
    matches!(
        code,
        Some(
            RDKafkaErrorCode::DestroyBroker
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::BrokerNotAvailable
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::NotController
                | RDKafkaErrorCode::NetworkException
        )
    )
}

/// One try of [`ensure_topics`].
async fn ensure_once(
    brokers: &str,
    names: &Names,
    shards: u32,
    max_record_bytes: u64,
) -> Result<(), ClusterError> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        // Asking for a topic's metadata must not create it with the broker's defaults
        // (`auto.create.topics.enable`, on by default): the partitions are the shards.
        .set("allow.auto.create.topics", "false")
        .create()
        .map_err(ClusterError::kafka("connecting the admin client"))?;
    let max = max_record_bytes.to_string();
    let wanted = [
        (names.streams.as_str(), shards as i32, false),
        (names.entities.as_str(), shards as i32, false),
        (names.members.as_str(), 1, true),
    ];
    let mut create = Vec::new();
    for (topic, partitions, compact) in wanted {
        match partition_count(&admin, topic).await? {
            Some(found) if found == partitions as usize => {}
            Some(found) => {
                return Err(ClusterError::PartitionMismatch {
                    topic: topic.to_string(),
                    found,
                    shards: partitions as u32,
                });
            }
            None => {
                let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1))
                    .set("max.message.bytes", &max);
                if compact {
                    t = t.set("cleanup.policy", "compact");
                }
                create.push(t);
            }
        }
    }
    if create.is_empty() {
        return Ok(());
    }
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .create_topics(create.iter(), &opts)
        .await
        .map_err(ClusterError::kafka("creating the cluster's topics"))?;
    for r in results {
        match r {
            Ok(_) => {}
            // Another node created it meanwhile: check it like an existing one.
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                let want = if topic == names.members {
                    1
                } else {
                    shards as usize
                };
                match partition_count(&admin, &topic).await? {
                    Some(found) if found == want => {}
                    Some(found) => {
                        return Err(ClusterError::PartitionMismatch {
                            topic,
                            found,
                            shards: want as u32,
                        });
                    }
                    None => {
                        return Err(ClusterError::CreateTopic {
                            topic,
                            reason: "it exists and has no partitions".into(),
                        });
                    }
                }
            }
            Err((topic, code)) => {
                return Err(ClusterError::Kafka {
                    what: format!("creating topic {topic}"),
                    source: KafkaError::AdminOp(code),
                });
            }
        }
    }
    tracing::info!(topics = ?create.iter().map(|t| t.name).collect::<Vec<_>>(), "created the cluster's topics");
    Ok(())
}

/// Partitions of `topic`, or `None` if it does not exist.
async fn partition_count(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Option<usize>, ClusterError> {
    let client = admin.inner();
    let topic_owned = topic.to_string();
    // fetch_metadata blocks; librdkafka answers from its own threads.
    let md =
        tokio::task::block_in_place(|| client.fetch_metadata(Some(&topic_owned), ADMIN_TIMEOUT))
            .map_err(ClusterError::kafka(format!(
                "reading the metadata of topic {topic}"
            )))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match t.error() {
        None => Ok(Some(t.partitions().len())),
        Some(e) if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition => {
            Ok(None)
        }
        Some(e) => Err(ClusterError::Kafka {
            what: format!("reading the metadata of topic {topic}"),
            source: KafkaError::MetadataFetch(RDKafkaErrorCode::from(e)),
        }),
    }
}
