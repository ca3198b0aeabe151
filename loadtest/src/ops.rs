//! The operations a lane sends, drawn from the workload with a seeded generator per lane (the
//! same seed replays the same operations): ingest bodies and batches, replay pages and scans,
//! kv commands. The features and fanout scenarios get their generators here when they exist.

use crate::dist::{DistError, KeyDist};
use crate::recorder::Op;
use crate::workload::{Format, Workload};
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
                entity: Some(&self.arena[entity.clone()]),
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
        let entity = self.entities.sample(&mut self.rng);
        let _ = write!(
            out,
            "{{\"stream\":\"{stream}\",\"type\":\"{EVENT_TYPE}\",\"entity\":\""
        );
        let e0 = out.len();
        let _ = write!(out, "k{entity}");
        let e1 = out.len();
        out.push('"');
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Get(u64),
    Set(u64),
    Del(u64),
}

impl KvOp {
    pub fn op(&self) -> Op {
        match self {
            KvOp::Get(_) => Op::Get,
            KvOp::Set(_) => Op::Set,
            KvOp::Del(_) => Op::Del,
        }
    }
}

pub struct KvGen {
    rng: StdRng,
    keys: KeyDist,
    read: f64,
    write: f64,
    key_size: usize,
    value: Vec<u8>,
}

impl KvGen {
    pub fn new(w: &Workload, lane: u32) -> Result<KvGen, DistError> {
        Ok(KvGen {
            rng: lane_rng(w.seed, lane),
            keys: KeyDist::new(w.distribution, w.key_space, w.zipf_alpha)?,
            read: w.read_pct,
            write: w.write_pct,
            key_size: w.key_size_b,
            value: vec![b'x'; w.value_size_b],
        })
    }

    pub fn next_op(&mut self) -> KvOp {
        let key = self.keys.sample(&mut self.rng);
        let roll = self.rng.random_range(0.0..100.0);
        if roll < self.read {
            KvOp::Get(key)
        } else if roll < self.read + self.write {
            KvOp::Set(key)
        } else {
            KvOp::Del(key)
        }
    }

    pub fn key(&self, k: u64) -> Vec<u8> {
        kv_key(k, self.key_size)
    }

    pub fn value(&self) -> &[u8] {
        &self.value
    }
}

/// `key:` and the zero-padded index, `size` bytes in all (redis-benchmark's key shape).
pub fn kv_key(k: u64, size: usize) -> Vec<u8> {
    format!("key:{k:0width$}", width = size.saturating_sub(4)).into_bytes()
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
                ..w
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
            }
        }
        assert!((69_000..71_000).contains(&n[0]), "{n:?}");
        assert!((24_000..26_000).contains(&n[1]), "{n:?}");
        assert!((4_500..5_500).contains(&n[2]), "{n:?}");
        assert_eq!(kv_key(42, 16), b"key:000000000042");
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
