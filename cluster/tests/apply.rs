//! The apply loop against a real Kafka broker, with an in-memory stand-in for the local copy:
//! partitions are applied in offset order by whichever node the group gives them to, a node
//! that joins rebuilds what it is given, and every record of `T` is routed to `T.entities`
//! exactly once however the partitions move.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vx_cluster::apply::{Applied, ApplyLoop, ApplySettings, Applying, LocalCopy};
use vx_cluster::error::LocalError;
use vx_cluster::ingest::IngestProducer;
use vx_cluster::outcomes::Outcome;
use vx_cluster::testing::Broker;
use vx_cluster::txn::{OutRecord, Topic, TxnSettings};
use vx_cluster::{Names, admin};
use vx_storage::{OriginTopic, WriteError};

/// Applied records of one partition: (offset, value).
type Applies = Vec<(u64, Vec<u8>)>;

/// Applied records per partition.
#[derive(Default)]
struct Fake {
    parts: Mutex<BTreeMap<(Topic, u32), Applies>>,
}

impl Fake {
    fn route(value: &[u8]) -> OutRecord {
        OutRecord {
            topic: Topic::Entities,
            partition: 0,
            value: value.to_vec(),
        }
    }
    fn values(&self, topic: Topic) -> Vec<Vec<u8>> {
        self.parts
            .lock()
            .iter()
            .filter(|((t, _), _)| *t == topic)
            .flat_map(|(_, v)| v.iter().map(|(_, x)| x.clone()))
            .collect()
    }
}

impl LocalCopy for Fake {
    fn applied(&self, topic: Topic, partition: u32) -> Option<u64> {
        self.parts
            .lock()
            .get(&(topic, partition))
            .and_then(|v| v.last())
            .map(|(o, _)| *o)
    }
    fn reset(&self, topic: Topic, partition: u32) -> Result<(), LocalError> {
        self.parts.lock().remove(&(topic, partition));
        Ok(())
    }
    fn submit(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        value: &[u8],
        route: bool,
    ) -> Result<Applying, LocalError> {
        let mut parts = self.parts.lock();
        let v = parts.entry((topic, partition)).or_default();
        if v.last().is_some_and(|(o, _)| *o >= offset) {
            return Err(LocalError::Store(WriteError::OriginNotAfter {
                topic: match topic {
                    Topic::Streams => OriginTopic::Streams,
                    Topic::Entities => OriginTopic::Entities,
                },
                partition,
                offset,
                applied: v.last().map_or(0, |(o, _)| *o),
            }));
        }
        v.push((offset, value.to_vec()));
        let routed = if route && topic == Topic::Streams {
            vec![Fake::route(value)]
        } else {
            vec![]
        };
        Ok(Box::pin(async move {
            Applied {
                outcome: Outcome::Features,
                route: routed,
            }
        }))
    }
    fn stored_since(
        &self,
        partition: u32,
        from: u64,
        through: u64,
    ) -> Result<Vec<OutRecord>, LocalError> {
        Ok(self
            .parts
            .lock()
            .get(&(Topic::Streams, partition))
            .map(|v| {
                v.iter()
                    .filter(|(o, _)| (from..=through).contains(o))
                    .map(|(_, x)| Fake::route(x))
                    .collect()
            })
            .unwrap_or_default())
    }
}

fn txn(broker: &Broker, names: &Names, id: String) -> TxnSettings {
    TxnSettings {
        brokers: broker.bootstrap(),
        names: names.clone(),
        txn_id: id,
        max_record_bytes: 1 << 20,
        txn_timeout: Duration::from_secs(10),
        call_timeout: Duration::from_secs(10),
    }
}

fn start(broker: &Broker, names: &Names, node: &str, local: Arc<Fake>) -> ApplyLoop {
    let settings = ApplySettings {
        brokers: broker.bootstrap(),
        names: names.clone(),
        node: node.into(),
        txn: txn(broker, names, names.apply_txn_id(node)),
        session_timeout: Duration::from_secs(3),
        max_catchup: Duration::from_secs(300),
    };
    ApplyLoop::start(
        settings,
        local,
        tokio::runtime::Handle::current(),
        Box::new(|_, _| {}),
    )
    .unwrap()
}

async fn produce(p: &IngestProducer, from: u32, n: u32) {
    for i in from..from + n {
        let r = OutRecord {
            topic: Topic::Streams,
            partition: i % 4,
            value: format!("r{i}").into_bytes(),
        };
        p.send(vec![r], Duration::from_secs(20)).await.unwrap();
    }
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn set(values: Vec<Vec<u8>>) -> BTreeSet<String> {
    values
        .into_iter()
        .map(|v| String::from_utf8(v).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_move_and_routing_stays_exactly_once() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("VX_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let broker = Broker::start();
    let names = Names::new("vx-apply");
    admin::ensure_topics(&broker.bootstrap(), &names, 4, 1 << 20)
        .await
        .unwrap();
    let producer = IngestProducer::start(
        txn(&broker, &names, names.ingest_txn_id("p")),
        tokio::runtime::Handle::current(),
    );
    produce(&producer, 0, 100).await;

    let a = Arc::new(Fake::default());
    let mut loop_a = start(&broker, &names, "a", Arc::clone(&a));
    eventually("a applies the first 100", || {
        a.values(Topic::Streams).len() == 100
    })
    .await;
    eventually("a is ready", || loop_a.ownership.ready()).await;
    eventually("a applies the 100 routed", || {
        a.values(Topic::Entities).len() == 100
    })
    .await;

    // b joins: some partitions move to it; it rebuilds them from the start.
    let b = Arc::new(Fake::default());
    let mut loop_b = start(&broker, &names, "b", Arc::clone(&b));
    eventually("b owns some", || {
        !loop_b.ownership.owned(Topic::Streams).is_empty()
    })
    .await;
    produce(&producer, 100, 100).await;
    let all: BTreeSet<String> = (0..200).map(|i| format!("r{i}")).collect();
    let owned = |l: &ApplyLoop, f: &Fake| -> BTreeSet<String> {
        let mine = l.ownership.owned(Topic::Streams);
        set(f
            .parts
            .lock()
            .iter()
            .filter(|((t, p), _)| *t == Topic::Streams && mine.contains(p))
            .flat_map(|(_, v)| v.iter().map(|(_, x)| x.clone()))
            .collect())
    };
    eventually("the owners hold all 200", || {
        let mut u = owned(&loop_a, &a);
        u.extend(owned(&loop_b, &b));
        u == all
    })
    .await;

    // a leaves: b gets everything, catches up from what it lacks.
    loop_a.stop();
    produce(&producer, 200, 40).await;
    let all: BTreeSet<String> = (0..240).map(|i| format!("r{i}")).collect();
    eventually("b holds all 240", || set(b.values(Topic::Streams)) == all).await;
    eventually("b is ready", || loop_b.ownership.ready()).await;

    // Every record of T was routed exactly once: T.entities holds 240 records, one each.
    let mut routed = a.values(Topic::Entities);
    routed.extend(b.values(Topic::Entities));
    eventually("b applied the routed records", || {
        b.values(Topic::Entities).len() + a.values(Topic::Entities).len() >= 240
    })
    .await;
    loop_b.stop();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let read = read_all(&broker, &names.entities, 4);
    for v in read {
        *count.entry(String::from_utf8(v).unwrap()).or_default() += 1;
    }
    assert_eq!(count.len(), 240, "every record routed");
    assert!(count.values().all(|&c| c == 1), "routed twice: {count:?}");
}

fn read_all(broker: &Broker, topic: &str, partitions: u32) -> Vec<Vec<u8>> {
    use rdkafka::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "read-all")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p as i32, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(3) {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            out.push(m.unwrap().payload().unwrap_or_default().to_vec());
            quiet = Instant::now();
        }
    }
    out
}
