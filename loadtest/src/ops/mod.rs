//! The operations a lane sends, drawn from the workload with a seeded generator per lane (the
//! same seed replays the same operations): ingest bodies and batches, replay pages and scans,
//! and the key-value mix, which one generator ([`KvGen`]) draws for both `kv` (RESP commands)
//! and `features` (HTTP requests of docs/API.md §6), so the two scenarios issue the same operations on
//! the same keys with the same values. Over RESP, ingest is one `XADD` per operation
//! ([`IngestGen::next_xadd`]) and replay's pages and scans are `XRANGE`s
//! ([`encode_replay_resp`]).

use crate::dist::{DistError, KeyDist};
use crate::http::segment;
use crate::recorder::Op;
use crate::workload::{Distribution, EntityNames, Format, Workload};
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
    /// The events are counters of 1 (`counter = true`).
    counter: bool,
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
                kind: if self.counter {
                    vx_client::Kind::Counter
                } else {
                    vx_client::Kind::Event
                },
                value: self.counter.then_some(vx_client::Num::Int(1)),
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
    /// `distribution = "sequential"`: entities from [`SEQUENTIAL`] instead of `entities`.
    sequential: bool,
    entity_names: EntityNames,
    key_size: usize,
    counter: bool,
    /// What [`IngestGen::encode_xadd`] writes each XADD's arguments into, kept between
    /// operations: the entity, the id, `data`'s padding and the stream's name.
    scratch_entity: Vec<u8>,
    scratch_id: Vec<u8>,
    padding: Vec<u8>,
    scratch_stream: Vec<u8>,
}

/// The next entity of a sequential fill, shared by every lane of the process (a process runs
/// one workload).
static SEQUENTIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
            sequential: w.distribution == Distribution::Sequential,
            entity_names: w.entity_names,
            key_size: w.key_size_b,
            counter: w.counter,
            scratch_entity: Vec::new(),
            scratch_id: Vec::new(),
            padding: Vec::new(),
            scratch_stream: Vec::new(),
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
        if self.counter {
            out.push_str(",\"kind\":\"counter\",\"value\":1");
        }
        let (mut e0, mut e1) = (0, 0);
        if self.with_entity {
            let entity = if self.sequential {
                SEQUENTIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.entities.keys()
            } else {
                self.entities.sample(&mut self.rng)
            };
            out.push_str(",\"entity\":\"");
            e0 = out.len();
            match self.entity_names {
                EntityNames::Short => {
                    let _ = write!(out, "k{entity}");
                }
                EntityNames::Keys => out.push_str(&key_string(entity, self.key_size)),
            }
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

    /// Append the next event of `stream` as `XADD <stream> <id> <fields…>` (a RESP array of
    /// bulk strings): `type lt`, `entity <entity>` (with `entities`), `id <unique id>` (with
    /// `ids`), `kind counter value 1` (with `counter`), and `data` padded with `x` so that the
    /// fields and their values add up to `value_size_b` bytes. The same draws as
    /// [`IngestGen::next_body`]'s events (the entity, then nothing else), so the same seed
    /// writes the same events over HTTP and over RESP; on Veltrix they are the same event
    /// (docs/RESP.md: `type`, `entity`, `id`, `kind` and `value` are the event's, `data` goes
    /// into its data).
    pub fn encode_xadd(&mut self, stream: &[u8], id: &[u8], out: &mut Vec<u8>) {
        self.scratch_entity.clear();
        if self.with_entity {
            let entity = if self.sequential {
                SEQUENTIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.entities.keys()
            } else {
                self.entities.sample(&mut self.rng)
            };
            match self.entity_names {
                EntityNames::Short => {
                    self.scratch_entity.push(b'k');
                    self.scratch_entity
                        .extend_from_slice(itoa::Buffer::new().format(entity).as_bytes());
                }
                EntityNames::Keys => put_key(entity, self.key_size, &mut self.scratch_entity),
            }
        }
        self.scratch_id.clear();
        if let Some((tag, k)) = self.ids.as_mut() {
            *k += 1;
            self.scratch_id.extend_from_slice(tag.as_bytes());
            self.scratch_id.push(b'-');
            self.scratch_id
                .extend_from_slice(itoa::Buffer::new().format(*k).as_bytes());
        }
        let used = 4 + EVENT_TYPE.len() + 4;
        let used = used
            + if self.with_entity {
                6 + self.scratch_entity.len()
            } else {
                0
            };
        let used = used
            + if self.ids.is_some() {
                2 + self.scratch_id.len()
            } else {
                0
            };
        let used = used + if self.counter { 4 + 7 + 5 + 1 } else { 0 };
        let pad = self.value_size.saturating_sub(used);
        if self.padding.len() < pad {
            self.padding.resize(pad, b'x');
        }
        let mut fields: [(&[u8], &[u8]); 6] = [(b"", b""); 6];
        let mut n = 0;
        for (on, name, value) in [
            (true, &b"type"[..], EVENT_TYPE.as_bytes()),
            (self.with_entity, b"entity", &self.scratch_entity[..]),
            (self.ids.is_some(), b"id", &self.scratch_id[..]),
            (self.counter, b"kind", b"counter"),
            (self.counter, b"value", b"1"),
            (true, b"data", &self.padding[..pad]),
        ] {
            if on {
                fields[n] = (name, value);
                n += 1;
            }
        }
        let mut w = vx_proto::resp::Reply { out, resp3: false };
        w.array(3 + 2 * n);
        w.bulk(b"XADD");
        w.bulk(stream);
        w.bulk(id);
        for (f, v) in &fields[..n] {
            w.bulk(f);
            w.bulk(v);
        }
    }

    /// The next ingest operation over RESP: one event, `XADD <stream> * <fields…>` on a
    /// stream drawn as [`IngestGen::next_body`] draws it ([`IngestGen::encode_xadd`]).
    pub fn next_xadd(&mut self, out: &mut Vec<u8>) {
        let s = self.streams.sample(&mut self.rng);
        let mut stream = std::mem::take(&mut self.scratch_stream);
        stream.clear();
        stream.extend_from_slice(self.prefix.as_bytes());
        stream.extend_from_slice(itoa::Buffer::new().format(s).as_bytes());
        self.encode_xadd(&stream, b"*", out);
        self.scratch_stream = stream;
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
            counter: self.counter,
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

/// A replay scan over RESP reads the stream in `XRANGE` pages of this many entries, all sent
/// at once (the ranges are known: a stream's ids are its seqs).
pub const RESP_SCAN_PAGE: u32 = 10_000;

/// `XRANGE <stream> <from>-0 <to>-0 COUNT <count>`.
pub fn encode_xrange(stream: &[u8], from: u64, to: u64, count: u32, out: &mut Vec<u8>) {
    // `<seq>-0` in a buffer on the stack: no allocation per operation.
    fn id(seq: u64, buf: &mut [u8; 24]) -> &[u8] {
        let mut digits = itoa::Buffer::new();
        let d = digits.format(seq).as_bytes();
        buf[..d.len()].copy_from_slice(d);
        buf[d.len()..d.len() + 2].copy_from_slice(b"-0");
        &buf[..d.len() + 2]
    }
    let (mut a, mut b) = ([0u8; 24], [0u8; 24]);
    let mut c = itoa::Buffer::new();
    let mut w = vx_proto::resp::Reply { out, resp3: false };
    w.array(6);
    w.bulk(b"XRANGE");
    w.bulk(stream);
    w.bulk(id(from, &mut a));
    w.bulk(id(to, &mut b));
    w.bulk(b"COUNT");
    w.bulk(c.format(count).as_bytes());
}

/// A replay operation over RESP, appended to `out` as its `XRANGE` commands: a page is one,
/// `XRANGE <stream> <from>-0 <from + limit − 1>-0 COUNT <limit>` (a point read, `page_events =
/// 1`: `XRANGE s N-0 N-0 COUNT 1`); a scan is the pages of [`RESP_SCAN_PAGE`] entries from the
/// stream's first seq through its last, as listed before the run. Returns the seq the first
/// entry of the first reply should have and how many replies the commands get; reply i's
/// entries start at that seq + i × [`RESP_SCAN_PAGE`].
pub fn encode_replay_resp(op: &ReplayOp, streams: &[StreamInfo], out: &mut Vec<u8>) -> (u64, u32) {
    match *op {
        ReplayOp::Page {
            stream,
            from,
            limit,
        } => {
            let s = &streams[stream];
            let to = from.saturating_add(u64::from(limit) - 1);
            encode_xrange(s.name.as_bytes(), from, to, limit, out);
            (from, 1)
        }
        ReplayOp::Scan { stream } => {
            let s = &streams[stream];
            let page = u64::from(RESP_SCAN_PAGE);
            let mut replies = 0u32;
            let mut from = s.first_seq;
            while from <= s.last_seq {
                let to = from.saturating_add(page - 1).min(s.last_seq);
                encode_xrange(s.name.as_bytes(), from, to, RESP_SCAN_PAGE, out);
                replies += 1;
                from = from.saturating_add(page);
            }
            (s.first_seq, replies)
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

/// A request of the features scenario (docs/API.md §6).
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
    /// `kv_type = "hash"`.
    hash: bool,
    /// The key being written into a RESP command.
    key: Vec<u8>,
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
            hash: w.kv_type == crate::workload::KvType::Hash,
            key: Vec::with_capacity(w.key_size_b),
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

    /// Append `op` as a RESP command: GET, SET, DEL, or MGET of the batch; with `kv_type =
    /// "hash"`, HGET and HSET of the field `v` (the feature the features scenario writes).
    /// Keys are written into one buffer the generator keeps, not a new one each.
    pub fn encode_resp(&mut self, op: &KvOp, out: &mut Vec<u8>) {
        let field = FEATURE.as_bytes();
        let (verb, keys, rest): (&[u8], &[u64], &[&[u8]]) = match op {
            KvOp::Get(k) if self.hash => (b"HGET", std::slice::from_ref(k), &[field]),
            KvOp::Set(k) if self.hash => (b"HSET", std::slice::from_ref(k), &[field, &self.value]),
            KvOp::Get(k) => (b"GET", std::slice::from_ref(k), &[]),
            KvOp::Set(k) => (b"SET", std::slice::from_ref(k), &[&self.value]),
            KvOp::Del(k) => (b"DEL", std::slice::from_ref(k), &[]),
            KvOp::Query(keys) => (b"MGET", keys, &[]),
        };
        let mut w = vx_proto::resp::Reply { out, resp3: false };
        w.array(1 + keys.len() + rest.len());
        w.bulk(verb);
        for &k in keys {
            self.key.clear();
            put_key(k, self.key_size, &mut self.key);
            w.bulk(&self.key);
        }
        for p in rest {
            w.bulk(p);
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
                // one feature, as MGET returns only the values. Keys are written in place, as
                // the RESP writer writes MGET's, so that neither side of a comparison pays
                // for formatting the other does not.
                let mut body = Vec::with_capacity(keys.len() * (self.key_size + 3) + 40);
                body.extend_from_slice(b"{\"entities\":[");
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.push(b'"');
                    put_key(*k, self.key_size, &mut body);
                    body.push(b'"');
                }
                body.extend_from_slice(b"],\"names\":[\"");
                body.extend_from_slice(FEATURE.as_bytes());
                body.extend_from_slice(b"\"]}");
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
    let mut out = Vec::with_capacity(key_len(k, size));
    put_key(k, size, &mut out);
    out
}

/// Append [`kv_key`] to `out`.
pub fn put_key(k: u64, size: usize, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(k).as_bytes();
    out.extend_from_slice(b"key:");
    out.resize(out.len() + pad(k, size), b'0');
    out.extend_from_slice(digits);
}

/// The length of [`kv_key`]: `size`, or more when the index has more digits than fit.
pub fn key_len(k: u64, size: usize) -> usize {
    4 + pad(k, size) + digits(k)
}

/// The zeros before the index's digits.
fn pad(k: u64, size: usize) -> usize {
    size.saturating_sub(4).saturating_sub(digits(k))
}

fn digits(k: u64) -> usize {
    k.checked_ilog10().map_or(1, |l| l as usize + 1)
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
mod stream_tests;
#[cfg(test)]
mod tests;
