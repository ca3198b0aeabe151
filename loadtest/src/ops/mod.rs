//! The operations a lane sends, drawn from the workload with a seeded generator per lane (the
//! same seed replays the same operations): ingest bodies and batches, replay pages and scans,
//! and the key-value mix, which one generator ([`KvGen`]) draws for both `kv` (RESP commands)
//! and `features` (HTTP requests of SPEC §6), so the two scenarios issue the same operations on
//! the same keys with the same values. The fanout scenario gets its generator here when it
//! exists.

use crate::dist::{DistError, KeyDist};
use crate::http::segment;
use crate::recorder::Op;
use crate::resp;
use crate::workload::{Format, Workload};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::fmt::Write as _;
use std::ops::Range;

/// The event type every generated event carries.
pub const EVENT_TYPE: &str = "lt";

/// The events of one request, for the frames encoder: the strings of all events live in one
/// arena (a few allocations per batch, not per event, since the generator shares the cores with
/// the server it measures).
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub stream: String,
    arena: String,
    /// Per event: entity, id (empty range: none) and the JSON text of `data`, in `arena`.
    events: Vec<[Range<usize>; 3]>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn wire(&self) -> Vec<vx_client::WireEvent<'_>> {
        self.events
            .iter()
            .map(|[entity, id, data]| vx_client::WireEvent {
                stream: &self.stream,
                entity: (!entity.is_empty()).then(|| &self.arena[entity.clone()]),
                ty: EVENT_TYPE,
                ts: None,
                kind: vx_client::Kind::Event,
                value: None,
                id: (!id.is_empty()).then(|| &self.arena[id.clone()]),
                data: Some(&self.arena[data.clone()]),
            })
            .collect()
    }
}

pub struct IngestGen {
    rng: StdRng,
    streams: KeyDist,
    entities: KeyDist,
    prefix: String,
    batch: u32,
    value_size: usize,
    format: Format,
    /// `Some((tag, next))`: unique ids `tag-next`.
    ids: Option<(String, u64)>,
    /// Whether events carry an entity (the feature store's path).
    with_entity: bool,
}

impl IngestGen {
    /// `run_tag` makes ids unique across runs (so a rerun is not taken for retries).
    pub fn new(w: &Workload, lane: u32, run_tag: &str) -> Result<IngestGen, DistError> {
        Ok(IngestGen {
            rng: lane_rng(w.seed, lane),
            streams: KeyDist::new(w.distribution, w.streams, w.zipf_alpha)?,
            entities: KeyDist::new(w.distribution, w.key_space, w.zipf_alpha)?,
            prefix: w.stream_prefix.clone(),
            batch: w.batch,
            value_size: w.value_size_b,
            format: w.format,
            ids: w.ids.then(|| (format!("{run_tag}-{lane}"), 0)),
            with_entity: w.entities,
        })
    }

    pub fn events_per_request(&self) -> u64 {
        u64::from(self.batch)
    }

    /// Append the next event of `stream` to `out` as one JSON object (no newline), padded
    /// with a `data` string to `value_size_b` bytes; returns the byte ranges of its entity,
    /// id and data in `out`. Names and ids are generated from safe characters (the workload
    /// checks the prefix), so nothing needs escaping.
    fn write_event(&mut self, stream: &str, out: &mut String) -> [Range<usize>; 3] {
        let start = out.len();
        let _ = write!(out, "{{\"stream\":\"{stream}\",\"type\":\"{EVENT_TYPE}\"");
        let (mut e0, mut e1) = (0, 0);
        if self.with_entity {
            let entity = self.entities.sample(&mut self.rng);
            out.push_str(",\"entity\":\"");
            e0 = out.len();
            let _ = write!(out, "k{entity}");
            e1 = out.len();
            out.push('"');
        }
        let mut id = 0..0;
        if let Some((tag, n)) = self.ids.as_mut() {
            *n += 1;
            out.push_str(",\"id\":\"");
            let i0 = out.len();
            let _ = write!(out, "{tag}-{n}");
            id = i0..out.len();
            out.push('"');
        }
        out.push_str(",\"data\":");
        let d0 = out.len();
        // What is written so far, the two quotes of data and the closing brace.
        let pad = self.value_size.saturating_sub(out.len() - start + 3);
        out.push('"');
        out.extend(std::iter::repeat_n('x', pad));
        out.push('"');
        let d1 = out.len();
        out.push('}');
        [e0..e1, id, d0..d1]
    }

    fn next_stream(&mut self) -> String {
        format!("{}{}", self.prefix, self.streams.sample(&mut self.rng))
    }

    /// The events of the next frames BATCH: one stream per request, an entity per event.
    pub fn next_batch(&mut self) -> Batch {
        let stream = self.next_stream();
        let mut arena = String::with_capacity(self.batch as usize * (self.value_size + 8));
        let events = (0..self.batch)
            .map(|_| self.write_event(&stream, &mut arena))
            .collect();
        Batch {
            stream,
            arena,
            events,
        }
    }

    /// `n` events of `stream` as an NDJSON body.
    pub fn ndjson_for(&mut self, stream: &str, n: u32) -> Vec<u8> {
        let mut out = String::with_capacity(n as usize * (self.value_size + 2));
        for _ in 0..n {
            self.write_event(stream, &mut out);
            out.push('\n');
        }
        out.into_bytes()
    }

    /// The next HTTP body and its content type.
    pub fn next_body(&mut self) -> (Vec<u8>, &'static str) {
        let stream = self.next_stream();
        match self.format {
            Format::Ndjson => (self.ndjson_for(&stream, self.batch), "application/x-ndjson"),
            Format::Json => {
                let mut out =
                    String::with_capacity(self.batch as usize * (self.value_size + 1) + 2);
                out.push('[');
                for i in 0..self.batch {
                    if i > 0 {
                        out.push(',');
                    }
                    self.write_event(&stream, &mut out);
                }
                out.push(']');
                (out.into_bytes(), "application/json")
            }
        }
    }
}

/// A stream the replay scenario reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInfo {
    pub name: String,
    pub first_seq: u64,
    pub last_seq: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayOp {
    /// `limit` events from `from`.
    Page {
        stream: usize,
        from: u64,
        limit: u32,
    },
    /// The whole stream.
    Scan { stream: usize },
}

pub struct ReplayGen {
    rng: StdRng,
    pick: KeyDist,
    page: u32,
    scan_pct: f64,
}

impl ReplayGen {
    pub fn new(w: &Workload, lane: u32, streams: usize) -> Result<ReplayGen, DistError> {
        Ok(ReplayGen {
            rng: lane_rng(w.seed, lane),
            pick: KeyDist::new(w.distribution, streams as u64, w.zipf_alpha)?,
            page: w.page_events,
            scan_pct: w.scan_pct,
        })
    }

    pub fn next(&mut self, streams: &[StreamInfo]) -> ReplayOp {
        let stream = self.pick.sample(&mut self.rng) as usize;
        if self.scan_pct > 0.0 && self.rng.random_range(0.0..100.0) < self.scan_pct {
            return ReplayOp::Scan { stream };
        }
        // `pick` draws over exactly `streams.len()` streams.
        let s = &streams[stream];
        // A uniformly random full page when the stream has one, else its start.
        let last_start = s
            .last_seq
            .saturating_sub(u64::from(self.page) - 1)
            .max(s.first_seq);
        let from = self.rng.random_range(s.first_seq..=last_start);
        ReplayOp::Page {
            stream,
            from,
            limit: self.page,
        }
    }
}

/// One operation of the key-value mix, on key indexes (see [`kv_key`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Get(u64),
    Set(u64),
    Del(u64),
    /// A batch read of `batch_size` keys, in this order (duplicates possible, as drawn).
    Query(Vec<u64>),
}

impl KvOp {
    pub fn op(&self) -> Op {
        match self {
            KvOp::Get(_) => Op::Get,
            KvOp::Set(_) => Op::Set,
            KvOp::Del(_) => Op::Del,
            KvOp::Query(_) => Op::Query,
        }
    }

    /// What a success counts as `events`: one value, or the keys of a batch read (so the
    /// query's `events` are batch_size × successes, its values).
    pub fn events(&self) -> u64 {
        match self {
            KvOp::Query(keys) => keys.len() as u64,
            _ => 1,
        }
    }
}

/// A request of the features scenario (SPEC §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureRequest {
    pub method: &'static str,
    pub path: String,
    /// `Some` for requests with a JSON body.
    pub content_type: Option<&'static str>,
    pub body: Bytes,
}

/// The name of the one feature the features scenario writes and reads.
pub const FEATURE: &str = "v";

pub struct KvGen {
    rng: StdRng,
    keys: KeyDist,
    read: f64,
    write: f64,
    delete: f64,
    query: f64,
    batch_size: u32,
    key_size: usize,
    value: Vec<u8>,
    /// `{"v":"<value>"}`, the features PUT body, built once (a clone is a reference count).
    put_body: Bytes,
    /// The operation last drawn, for an error (a timeout) that ends it before its answer.
    last: Op,
}

impl KvGen {
    pub fn new(w: &Workload, lane: u32) -> Result<KvGen, DistError> {
        // The same bytes kv's SET writes; 'x' needs no JSON escaping, so the feature's string
        // is exactly value_size_b bytes.
        let value = vec![b'x'; w.value_size_b];
        let mut put = Vec::with_capacity(value.len() + 10);
        put.extend_from_slice(b"{\"");
        put.extend_from_slice(FEATURE.as_bytes());
        put.extend_from_slice(b"\":\"");
        put.extend_from_slice(&value);
        put.extend_from_slice(b"\"}");
        Ok(KvGen {
            rng: lane_rng(w.seed, lane),
            keys: KeyDist::new(w.distribution, w.key_space, w.zipf_alpha)?,
            read: w.read_pct,
            write: w.write_pct,
            delete: w.delete_pct,
            query: w.query_pct,
            batch_size: w.batch_size,
            key_size: w.key_size_b,
            value,
            put_body: Bytes::from(put),
            last: Op::Get,
        })
    }

    /// The next operation. The first key and the roll are drawn before anything else, in the
    /// order they always were, so a mix without batch reads draws what it drew before
    /// `query_pct` existed; a batch read then draws its other keys.
    pub fn next_op(&mut self) -> KvOp {
        let key = self.keys.sample(&mut self.rng);
        let roll = self.rng.random_range(0.0..100.0);
        let op = if roll < self.read {
            KvOp::Get(key)
        } else if roll < self.read + self.write {
            KvOp::Set(key)
        } else if self.query > 0.0 && roll >= self.read + self.write + self.delete {
            // Tested as "at or past the others" (not "below 100"), so a sum that is 100 only
            // within the validation's tolerance never turns a DEL into a batch read.
            let mut keys = Vec::with_capacity(self.batch_size as usize);
            keys.push(key);
            for _ in 1..self.batch_size {
                keys.push(self.keys.sample(&mut self.rng));
            }
            KvOp::Query(keys)
        } else {
            KvOp::Del(key)
        };
        self.last = op.op();
        op
    }

    /// The operation last drawn (`get` before the first).
    pub fn last_op(&self) -> Op {
        self.last
    }

    pub fn key(&self, k: u64) -> Vec<u8> {
        kv_key(k, self.key_size)
    }

    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Payload bytes a success counts: the value a SET writes, nothing else (as kv always
    /// counted).
    pub fn bytes_of(&self, op: &KvOp) -> u64 {
        match op {
            KvOp::Set(_) => self.value.len() as u64,
            _ => 0,
        }
    }

    /// Append `op` as a RESP command: GET, SET, DEL, or MGET of the batch.
    pub fn encode_resp(&self, op: &KvOp, out: &mut Vec<u8>) {
        match op {
            KvOp::Get(k) => resp::encode(&[b"GET", &self.key(*k)], out),
            KvOp::Set(k) => resp::encode(&[b"SET", &self.key(*k), &self.value], out),
            KvOp::Del(k) => resp::encode(&[b"DEL", &self.key(*k)], out),
            KvOp::Query(keys) => {
                let keys: Vec<Vec<u8>> = keys.iter().map(|k| self.key(*k)).collect();
                let mut parts: Vec<&[u8]> = Vec::with_capacity(keys.len() + 1);
                parts.push(b"MGET");
                parts.extend(keys.iter().map(Vec::as_slice));
                resp::encode(&parts, out);
            }
        }
    }

    /// `op` as a request of the feature API: GET, PUT or DELETE of `/v1/features/{entity}`
    /// (the entity percent-encoded as one path segment), or `POST /v1/features/query`.
    pub fn feature_request(&self, op: &KvOp) -> FeatureRequest {
        let one = |method, k: u64, body: Option<Bytes>| FeatureRequest {
            method,
            path: format!("/v1/features/{}", segment(&self.entity(k))),
            content_type: body.is_some().then_some("application/json"),
            body: body.unwrap_or_default(),
        };
        match op {
            KvOp::Get(k) => one("GET", *k, None),
            KvOp::Set(k) => one("PUT", *k, Some(self.put_body.clone())),
            KvOp::Del(k) => one("DELETE", *k, None),
            KvOp::Query(keys) => {
                // Keys are "key:" and digits: nothing to escape in JSON. `names` asks for the
                // one feature, as MGET returns only the values.
                let mut body = String::with_capacity(keys.len() * (self.key_size + 3) + 40);
                body.push_str("{\"entities\":[");
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        body.push(',');
                    }
                    body.push('"');
                    body.push_str(&self.entity(*k));
                    body.push('"');
                }
                let _ = write!(body, "],\"names\":[\"{FEATURE}\"]}}");
                FeatureRequest {
                    method: "POST",
                    path: "/v1/features/query".into(),
                    content_type: Some("application/json"),
                    body: Bytes::from(body),
                }
            }
        }
    }

    /// The entity of key `k`: the kv key, as a string.
    pub fn entity(&self, k: u64) -> String {
        key_string(k, self.key_size)
    }
}

/// `key:` and the zero-padded index, `size` bytes in all (redis-benchmark's key shape).
pub fn kv_key(k: u64, size: usize) -> Vec<u8> {
    key_string(k, size).into_bytes()
}

/// [`kv_key`] as a string: the features entity of key `k`.
pub fn key_string(k: u64, size: usize) -> String {
    format!("key:{k:0width$}", width = size.saturating_sub(4))
}

/// Each lane draws from its own generator, derived from the workload seed.
pub fn lane_rng(seed: u64, lane: u32) -> StdRng {
    StdRng::seed_from_u64(seed ^ (u64::from(lane) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_events_are_value_size_bytes_of_valid_json() {
        let w = Workload {
            value_size_b: 128,
            batch: 5,
            streams: 3,
            ids: true,
            ..Workload::default()
        };
        let mut g = match IngestGen::new(&w, 0, "t") {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        let (body, ty) = g.next_body();
        assert_eq!(ty, "application/x-ndjson");
        let text = String::from_utf8(body).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        let mut ids = std::collections::HashSet::new();
        for line in &lines {
            assert_eq!(line.len(), 128, "{line}");
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            assert_eq!(v["type"], EVENT_TYPE);
            assert!(v["stream"].as_str().is_some_and(|s| s.starts_with("lt-")));
            assert!(ids.insert(v["id"].as_str().unwrap_or_default().to_string()));
        }
        // One stream per request.
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap_or_default();
        let last: serde_json::Value = serde_json::from_str(lines[4]).unwrap_or_default();
        assert_eq!(first["stream"], last["stream"]);
        // JSON arrays carry the same events.
        let mut g = match IngestGen::new(
            &Workload {
                format: Format::Json,
                ..w.clone()
            },
            0,
            "t",
        ) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        let (body, ty) = g.next_body();
        assert_eq!(ty, "application/json");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(v.as_array().map(Vec::len), Some(5));
        // Frames batches carry the same fields.
        let batch = g.next_batch();
        let wire = batch.wire();
        assert_eq!(wire.len(), 5);
        for ev in &wire {
            assert!(ev.stream.starts_with("lt-"));
            assert!(ev.entity.is_some_and(|e| e.starts_with('k')));
            assert!(ev.id.is_some());
            let data = ev.data.unwrap_or_default();
            assert!(data.starts_with('"') && data.ends_with('"') && data.len() > 2);
        }
        // Without entities (ingest without the feature store), in both encodings.
        let mut g = match IngestGen::new(
            &Workload {
                entities: false,
                ..w
            },
            0,
            "t",
        ) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        let (body, _) = g.next_body();
        let text = String::from_utf8(body).unwrap_or_default();
        for line in text.lines() {
            assert_eq!(line.len(), 128, "{line}");
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            assert!(v.get("entity").is_none(), "{line}");
        }
        assert!(g.next_batch().wire().iter().all(|ev| ev.entity.is_none()));
    }

    #[test]
    fn the_same_seed_replays_the_same_operations() {
        let w = Workload::default();
        let draw = |lane| {
            let mut g = match KvGen::new(&w, lane) {
                Ok(g) => g,
                Err(e) => panic!("{e}"),
            };
            (0..100).map(|_| g.next_op()).collect::<Vec<_>>()
        };
        assert_eq!(draw(0), draw(0));
        assert_ne!(draw(0), draw(1));
    }

    #[test]
    fn kv_mix_and_keys_follow_the_workload() {
        let w = Workload {
            read_pct: 70.0,
            write_pct: 25.0,
            delete_pct: 5.0,
            ..Workload::default()
        };
        let mut g = match KvGen::new(&w, 0) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        let mut n = [0u32; 3];
        for _ in 0..100_000 {
            match g.next_op() {
                KvOp::Get(_) => n[0] += 1,
                KvOp::Set(_) => n[1] += 1,
                KvOp::Del(_) => n[2] += 1,
                KvOp::Query(_) => panic!("no batch reads at query_pct 0"),
            }
        }
        assert!((69_000..71_000).contains(&n[0]), "{n:?}");
        assert!((24_000..26_000).contains(&n[1]), "{n:?}");
        assert!((4_500..5_500).contains(&n[2]), "{n:?}");
        assert_eq!(kv_key(42, 16), b"key:000000000042");
    }

    fn kv_and_features(w: Workload) -> (Workload, Workload) {
        let kv = Workload {
            scenario: crate::workload::Scenario::Kv,
            endpoints: vec!["resp://127.0.0.1:6379".into()],
            ..w.clone()
        };
        let features = Workload {
            scenario: crate::workload::Scenario::Features,
            endpoints: vec!["http://127.0.0.1:7100".into()],
            ..w
        };
        for w in [&kv, &features] {
            if let Err(e) = w.validate() {
                panic!("{e}");
            }
        }
        (kv, features)
    }

    fn generator(w: &Workload, lane: u32) -> KvGen {
        match KvGen::new(w, lane) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        }
    }

    /// The arguments of one RESP command (an array of bulk strings) at the front of `buf`.
    fn resp_args(buf: &[u8]) -> Vec<Vec<u8>> {
        let text = String::from_utf8_lossy(buf).to_string();
        let mut lines = text.split("\r\n");
        let n: usize = lines
            .next()
            .and_then(|l| l.strip_prefix('*'))
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        (0..n)
            .map(|_| {
                let _len = lines.next();
                lines.next().unwrap_or_default().as_bytes().to_vec()
            })
            .collect()
    }

    /// The entities a features request names, in order.
    fn feature_entities(r: &FeatureRequest) -> Vec<Vec<u8>> {
        if r.method == "POST" {
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            v["entities"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e.as_str().unwrap_or_default().as_bytes().to_vec())
                .collect()
        } else {
            let seg = r.path.strip_prefix("/v1/features/").unwrap_or_default();
            assert!(!seg.contains('/'), "one path segment: {}", r.path);
            vec![percent_encoding::percent_decode_str(seg).collect()]
        }
    }

    #[test]
    fn features_issue_the_same_operations_on_the_same_keys_as_kv() {
        let (kv, features) = kv_and_features(Workload {
            distribution: crate::workload::Distribution::Zipfian,
            key_space: 5_000,
            read_pct: 60.0,
            write_pct: 20.0,
            delete_pct: 5.0,
            query_pct: 15.0,
            batch_size: 8,
            seed: 77,
            ..Workload::default()
        });
        for lane in 0..4 {
            let (mut a, mut b) = (generator(&kv, lane), generator(&features, lane));
            for _ in 0..2_000 {
                let (op, same) = (a.next_op(), b.next_op());
                assert_eq!(op, same, "lane {lane}");
                assert_eq!(a.last_op(), op.op());
                // What goes on the wire names the same keys, in the same order.
                let mut cmd = Vec::new();
                a.encode_resp(&op, &mut cmd);
                let args = resp_args(&cmd);
                let verb = match op {
                    KvOp::Get(_) => "GET",
                    KvOp::Set(_) => "SET",
                    KvOp::Del(_) => "DEL",
                    KvOp::Query(_) => "MGET",
                };
                assert_eq!(args[0], verb.as_bytes());
                let req = b.feature_request(&op);
                let resp_keys = match op {
                    KvOp::Set(_) => {
                        assert_eq!(args[2], a.value());
                        args[1..2].to_vec()
                    }
                    _ => args[1..].to_vec(),
                };
                assert_eq!(resp_keys, feature_entities(&req), "{op:?}");
            }
        }
    }

    #[test]
    fn a_mix_without_batch_reads_draws_what_kv_always_drew() {
        // The generator before query_pct existed: a key, then the roll, nothing else. Runs
        // recorded with it replay the same operations now.
        let w = Workload {
            distribution: crate::workload::Distribution::Zipfian,
            ..Workload::default()
        };
        let mut g = generator(&w, 3);
        let mut rng = lane_rng(w.seed, 3);
        let keys = match KeyDist::new(w.distribution, w.key_space, w.zipf_alpha) {
            Ok(k) => k,
            Err(e) => panic!("{e}"),
        };
        for _ in 0..10_000 {
            let key = keys.sample(&mut rng);
            let roll = rng.random_range(0.0..100.0);
            let old = if roll < w.read_pct {
                KvOp::Get(key)
            } else if roll < w.read_pct + w.write_pct {
                KvOp::Set(key)
            } else {
                KvOp::Del(key)
            };
            assert_eq!(g.next_op(), old);
        }
    }

    #[test]
    fn batch_reads_take_their_share_and_batch_size_keys() {
        let (_, w) = kv_and_features(Workload {
            key_space: 1_000,
            read_pct: 50.0,
            write_pct: 20.0,
            delete_pct: 5.0,
            query_pct: 25.0,
            batch_size: 7,
            ..Workload::default()
        });
        let mut g = generator(&w, 0);
        let mut n = [0u32; 4];
        for _ in 0..100_000 {
            let op = g.next_op();
            match &op {
                KvOp::Get(_) => n[0] += 1,
                KvOp::Set(_) => n[1] += 1,
                KvOp::Del(_) => n[2] += 1,
                KvOp::Query(keys) => {
                    n[3] += 1;
                    assert_eq!(keys.len(), 7);
                    assert!(keys.iter().all(|k| *k < 1_000));
                }
            }
            assert_eq!(op.events(), if op.op() == Op::Query { 7 } else { 1 });
        }
        assert!((49_000..51_000).contains(&n[0]), "{n:?}");
        assert!((19_000..21_000).contains(&n[1]), "{n:?}");
        assert!((4_500..5_500).contains(&n[2]), "{n:?}");
        assert!((24_000..26_000).contains(&n[3]), "{n:?}");
        // Only batch reads: every operation is one.
        let (_, w) = kv_and_features(Workload {
            read_pct: 0.0,
            write_pct: 0.0,
            delete_pct: 0.0,
            query_pct: 100.0,
            ..Workload::default()
        });
        let mut g = generator(&w, 0);
        assert!((0..1_000).all(|_| matches!(g.next_op(), KvOp::Query(k) if k.len() == 100)));
    }

    #[test]
    fn feature_requests_are_those_of_spec_6() {
        let (_, w) = kv_and_features(Workload {
            value_size_b: 128,
            ..Workload::default()
        });
        let g = generator(&w, 0);
        let get = g.feature_request(&KvOp::Get(42));
        assert_eq!(
            (get.method, get.path.as_str(), get.content_type),
            ("GET", "/v1/features/key%3A000000000042", None)
        );
        assert!(get.body.is_empty());
        let del = g.feature_request(&KvOp::Del(42));
        assert_eq!((del.method, del.path), ("DELETE", get.path.clone()));
        let put = g.feature_request(&KvOp::Set(42));
        assert_eq!(
            (put.method, &put.path, put.content_type),
            ("PUT", &get.path, Some("application/json"))
        );
        // The value is kv's SET value: JSON-safe, exactly value_size_b bytes.
        let v: serde_json::Value = serde_json::from_slice(&put.body).unwrap_or_default();
        let value = v[FEATURE].as_str().unwrap_or_default();
        assert_eq!(value.len(), 128);
        assert_eq!(value.as_bytes(), g.value());
        assert_eq!(v.as_object().map(|o| o.len()), Some(1));
        assert_eq!(g.bytes_of(&KvOp::Set(1)), 128);
        assert_eq!(g.bytes_of(&KvOp::Get(1)), 0);
        let q = g.feature_request(&KvOp::Query(vec![3, 1, 3]));
        assert_eq!(
            (q.method, q.path.as_str(), q.content_type),
            ("POST", "/v1/features/query", Some("application/json"))
        );
        let v: serde_json::Value = serde_json::from_slice(&q.body).unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({
                "entities": ["key:000000000003", "key:000000000001", "key:000000000003"],
                "names": ["v"],
            })
        );
        assert_eq!(g.entity(42).as_bytes(), kv_key(42, 16));
    }

    #[test]
    fn pages_start_inside_the_retained_range() {
        let w = Workload {
            page_events: 256,
            ..Workload::default()
        };
        let streams = vec![
            StreamInfo {
                name: "a".into(),
                first_seq: 100,
                last_seq: 1000,
            },
            StreamInfo {
                name: "b".into(),
                first_seq: 1,
                last_seq: 10,
            },
        ];
        let mut g = match ReplayGen::new(&w, 0, streams.len()) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        for _ in 0..10_000 {
            match g.next(&streams) {
                ReplayOp::Page {
                    stream: 0, from, ..
                } => assert!((100..=745).contains(&from)),
                ReplayOp::Page {
                    stream: 1, from, ..
                } => assert_eq!(from, 1),
                other => panic!("{other:?}"),
            }
        }
    }
}
