//! The members table against a real Kafka broker: every node reads what every node
//! announced; the latest claim of a partition wins (a dead node's record stays behind until
//! its partitions are claimed again); a node that leaves is forgotten.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use vx_cluster::members::{Announcer, Member, Members, Owner};
use vx_cluster::testing::Broker;
use vx_cluster::{Names, admin};

fn member(node: &str, streams: &[u32], entities: &[u32]) -> Member {
    Member {
        node: node.into(),
        url: format!("http://{node}:7100"),
        streams: streams.iter().copied().collect::<BTreeSet<_>>(),
        entities: entities.iter().copied().collect::<BTreeSet<_>>(),
        agreed: Default::default(),
        usage: Default::default(),
    }
}

fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_follow_the_latest_claims() {
    let broker = Broker::start();
    let names = Names::new("vx-members");
    admin::ensure_topics(&broker.bootstrap(), &names, 4, 1 << 20)
        .await
        .unwrap();
    let announcer = Announcer::new(&broker.bootstrap(), &names).unwrap();
    announcer.announce(&member("a", &[0, 1], &[0])).unwrap();
    announcer
        .announce(&member("b", &[2, 3], &[1, 2, 3]))
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let members = Members::default();
    members
        .start_reader(&broker.bootstrap(), &names, Arc::clone(&stop))
        .unwrap();
    eventually("the reader catches up", || members.caught_up());
    let owner = |p, e| members.owner(p, e).map(|o: Owner| o.node);
    eventually("both members", || owner(3, false).as_deref() == Some("b"));
    assert_eq!(owner(0, false).as_deref(), Some("a"));
    assert_eq!(owner(0, true).as_deref(), Some("a"));
    assert_eq!(
        members.owner(1, true).map(|o| o.url).as_deref(),
        Some("http://b:7100")
    );

    // b dies without a word; a takes its stream partitions over. b's record stays, but the
    // later claim wins.
    announcer
        .announce(&member("a", &[0, 1, 2, 3], &[0]))
        .unwrap();
    eventually("a owns 3", || owner(3, false).as_deref() == Some("a"));
    assert_eq!(
        owner(2, true).as_deref(),
        Some("b"),
        "unclaimed again: still b"
    );

    // a leaves cleanly.
    announcer.leave("a").unwrap();
    eventually("a is gone", || owner(0, false).is_none());
    assert_eq!(
        owner(3, false).as_deref(),
        Some("b"),
        "b's stale claim is all that is left"
    );
    assert_eq!(members.nodes().len(), 1);
    stop.store(true, std::sync::atomic::Ordering::Release);
}
