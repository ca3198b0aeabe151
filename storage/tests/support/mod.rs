//! What the storage crate's integration tests share: events, requests, a runtime to block on,
//! reading a whole stream back, and stores on the simulated disk.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use vx_proto::{Batch, EventView, Kind, Num};
use vx_storage::sim::SimFs;
use vx_storage::*;

/// A counter event of `stream` with value `value` and ts `ts`.
pub fn ev<'a>(stream: &'a str, id: Option<&'a str>, ts: i64, value: i64) -> EventView<'a> {
    EventView {
        stream,
        entity: Some("p1"),
        ty: "hit",
        ts,
        kind: Kind::Counter,
        value: Some(Num::Int(value)),
        id,
        data: Some("{\"w\":\"bow\"}"),
    }
}

pub fn req(events: &[EventView<'_>]) -> WriteRequest {
    let mut b = Batch::new();
    for e in events {
        b.push(e).unwrap();
    }
    WriteRequest {
        batch: b,
        durability: None,
        expected_last_seq: None,
        guard: None,
        origin: None,
        append_ms: None,
    }
}

pub fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// (seq, id, ts, value) of every event a query returns.
pub type Got = Vec<(u64, Option<String>, i64, i64)>;

pub fn read(store: &Store, stream: &str, q: ReadQuery) -> Got {
    let mut c = store.read(stream, q).unwrap();
    let mut out = Vec::new();
    while let Some((seq, e)) = c.next_event().unwrap() {
        let value = match e.value {
            Some(Num::Int(v)) => v,
            _ => i64::MIN,
        };
        out.push((seq, e.id.map(str::to_string), e.ts, value));
    }
    out
}

pub fn all(limit: u64) -> ReadQuery {
    ReadQuery {
        limit,
        ..Default::default()
    }
}

pub fn from(seq: u64, limit: u64) -> ReadQuery {
    ReadQuery {
        from: Some(seq),
        limit,
        ..Default::default()
    }
}

/// A store configuration on the simulated disk, data dir `/data`.
/// Four shards, applied by two threads (whatever the machine's cores: every test goes
/// through the apply threads' split; the feature model and `applier.rs` vary the count).
pub fn sim_cfg(fs: &SimFs) -> StorageConfig {
    let mut c = StorageConfig::new("/data");
    c.shards = Some(4);
    c.apply_threads = 2;
    c.vfs = Arc::new(fs.clone());
    c
}

pub fn real_cfg(dir: &Path) -> StorageConfig {
    let mut c = StorageConfig::new(dir);
    c.shards = Some(4);
    c.apply_threads = 2;
    c
}

/// splitmix64: every choice of a case comes from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Cluster mode: an origin of `topic`, partition `partition`, at `offset`.
pub fn origin(topic: OriginTopic, partition: u32, offset: u64) -> Origin {
    Origin {
        topic,
        partition,
        offset,
    }
}

/// `req` with an origin.
pub fn req_at(events: &[EventView<'_>], o: Origin) -> WriteRequest {
    WriteRequest {
        origin: Some(o),
        append_ms: None,
        ..req(events)
    }
}

/// The first `n` stream names `"{prefix}{i}"` that land in `shard` of `shards`.
pub fn streams_in(prefix: &str, shard: u32, shards: u32, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|s| vx_proto::shard::shard_of(s, shards) == shard)
        .take(n)
        .collect()
}

/// Stop the writer as a `kill -9` would leave the disk: whatever reached the page cache
/// stays (every pending operation survives), nothing more is written.
pub fn kill(fs: &SimFs, store: Store) {
    fs.freeze();
    store.shutdown();
    drop(store);
    fs.power_cut(&mut |n| n - 1);
}

/// A power cut: only what was synced survives.
pub fn power_loss(fs: &SimFs, store: Store) {
    fs.freeze();
    store.shutdown();
    drop(store);
    fs.power_cut(&mut |_| 0);
}
