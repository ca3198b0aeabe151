//! The write path against a real Kafka broker: requests grouped into transactions, every
//! record at the offset the answer gives, a request spanning partitions atomic for
//! `read_committed` readers, and a record Kafka refuses failing only its own request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vx_cluster::ingest::{IngestProducer, ProduceError};
use vx_cluster::testing::Broker;
use vx_cluster::txn::{OutRecord, Topic, TxnSettings};
use vx_cluster::{Names, admin};

fn settings(broker: &Broker, names: &Names, max: u64) -> TxnSettings {
    TxnSettings {
        brokers: broker.bootstrap(),
        names: names.clone(),
        txn_id: names.ingest_txn_id("n1"),
        max_record_bytes: max,
        txn_timeout: Duration::from_secs(10),
        call_timeout: Duration::from_secs(10),
    }
}

/// Every committed record of `topic`'s `partitions`, as (partition, offset, value).
fn read_committed(broker: &Broker, topic: &str, partitions: u32) -> Vec<(u32, u64, Vec<u8>)> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("group.id", "reader")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
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
    while quiet.elapsed() < Duration::from_secs(2) {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            out.push((
                m.partition() as u32,
                m.offset() as u64,
                m.payload().unwrap_or_default().to_vec(),
            ));
            quiet = Instant::now();
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_produced_in_transactions_at_the_offsets_they_are_told() {
    let broker = Broker::start();
    let names = Names::new("vx-produce");
    admin::ensure_topics(&broker.bootstrap(), &names, 4, 1 << 20)
        .await
        .unwrap();
    let producer = IngestProducer::start(
        settings(&broker, &names, 1 << 20),
        tokio::runtime::Handle::current(),
    );
    // 50 concurrent requests, each with a record on two partitions.
    let mut tasks = Vec::new();
    for i in 0..50u32 {
        let p = producer.clone();
        tasks.push(tokio::spawn(async move {
            let records = vec![
                OutRecord {
                    topic: Topic::Streams,
                    partition: i % 4,
                    value: format!("a{i}").into_bytes(),
                },
                OutRecord {
                    topic: Topic::Streams,
                    partition: (i + 1) % 4,
                    value: format!("b{i}").into_bytes(),
                },
            ];
            (i, p.send(records, Duration::from_secs(20)).await)
        }));
    }
    let mut told = HashMap::new();
    for t in tasks {
        let (i, r) = t.await.unwrap();
        let offsets = r.unwrap_or_else(|e| panic!("request {i}: {e}\n{}", broker.log()));
        assert_eq!(offsets.len(), 2);
        told.insert((i % 4, offsets[0]), format!("a{i}"));
        told.insert(((i + 1) % 4, offsets[1]), format!("b{i}"));
    }
    let stats = producer.stats();
    let txns = stats
        .transactions
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!((1..=50).contains(&txns), "{txns} transactions");

    // A record past max.message.bytes fails its own request only.
    let big = OutRecord {
        topic: Topic::Streams,
        partition: 0,
        value: vec![b'x'; 2 << 20],
    };
    let small = OutRecord {
        topic: Topic::Streams,
        partition: 1,
        value: b"after".to_vec(),
    };
    let (a, b) = tokio::join!(
        producer.send(vec![big], Duration::from_secs(20)),
        producer.send(vec![small], Duration::from_secs(20))
    );
    assert!(matches!(a, Err(ProduceError::Refused(_))), "{a:?}");
    let b = b.unwrap();
    told.insert((1, b[0]), "after".to_string());

    let read = read_committed(&broker, &names.streams, 4);
    let seen: HashMap<(u32, u64), String> = read
        .into_iter()
        .map(|(p, o, v)| ((p, o), String::from_utf8(v).unwrap()))
        .collect();
    assert_eq!(
        seen, told,
        "committed records are exactly the acknowledged ones"
    );
}
