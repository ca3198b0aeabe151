//! The value of every record the cluster writes to Kafka, version 1. All integers are
//! little-endian. A record is one request's share of one partition: what the owner of that
//! partition applies as one local request.
//!
//! ```text
//! header (24 bytes)
//!   0   u8   version     1
//!   1   u8   kind        1 = events, 2 = stream delete, 3 = entity events,
//!                        4 = feature put, 5 = feature delete, 6 = feature increment
//!   2   u8   flags       bit 0: expected_last_seq is set (events only); other bits 0
//!   3   u8   reserved    0
//!   4   u32  n           events and entity events: runs; feature put: names;
//!                        stream delete, feature delete and feature increment: 1
//!   8   i64  append_ms   the producing node's clock when it took the request, ms since the
//!                        epoch: the append time every replica of the partition uses (the
//!                        dedup window and retention count from it), so that they agree
//!   16  u64  expected    X-Vx-Expected-Last-Seq (0 without flag 0)
//! events and entity events: n runs
//!   u16  stream_len (1..=256), then the stream's bytes (UTF-8)
//!   u32  count        events in the run (≥ 1)
//!   u32  events_len   bytes of the events that follow
//!   events            `count` events in the event layout of vx_proto::packed
//! stream delete
//!   u16  stream_len, then the stream's bytes
//! feature put (`PUT /v1/features/{entity}`; to the entity's partition of `T.entities`)
//!   u16  entity_len (1..=256), then the entity's bytes
//!   n ×  u8 name_len (1..=128), the name's bytes, u8 tag, then the value by tag:
//!        0 null (delete that feature; no bytes), 1 i64, 2 f64 (finite), 3 bool (1 byte,
//!        0 or 1), 4 string (u32 length, then UTF-8 bytes)
//! feature delete (`DELETE /v1/features/{entity}[/{name}]`)
//!   u16  entity_len, then the entity's bytes
//!   u8   name_len       0: the whole entity; else the feature's name follows
//! feature increment (the Redis protocol's `HINCRBY`, `HINCRBYFLOAT`; the owner makes the
//! sum when it applies the record)
//!   u16  entity_len, then the entity's bytes
//!   u8   name_len (1..=128), the name's bytes
//!   u8   tag            1 = i64, 2 = f64 (finite)
//!   8 bytes             the increment
//! ```
//!
//! Entity events are the events an owner stored that carry an entity, on their way to the
//! owner of the entity's shard in `T.entities` (docs/CLUSTER.md, "Features"): the same body
//! as events, runs named by the stream the events were stored in.
//!
//! Decoding checks every length and every event (the events are rebuilt into a
//! [`vx_proto::Batch`] through its validating decoder): a record that does not decode is an
//! error, never a panic.

use vx_proto::le::Reader;
use vx_proto::{Batch, packed};
use vx_storage::features::{FeatureValue, Increment};

pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 24;
const FLAG_EXPECTED: u8 = 1;

/// What a record asks its partition's owner to do.
#[derive(Debug)]
pub enum Body {
    /// Store these events (one request's share of the partition).
    Events {
        batch: Batch,
        expected_last_seq: Option<u64>,
    },
    /// Delete (tombstone) a stream.
    Delete { stream: String },
    /// Feed these stored events to the feature tables of the entities' shard.
    EntityEvents { batch: Batch },
    /// Set (or, `None`, delete) features of an entity.
    FeaturePut {
        entity: String,
        set: Vec<(String, Option<FeatureValue>)>,
    },
    /// Delete one feature, or (`None`) the whole entity.
    FeatureDelete {
        entity: String,
        name: Option<String>,
    },
    /// Add to one feature.
    FeatureIncr {
        entity: String,
        name: String,
        by: Increment,
    },
}

/// A decoded record.
#[derive(Debug)]
pub struct Record {
    pub append_ms: i64,
    pub body: Body,
}

/// A record that does not decode.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("cluster record: unknown version {0}")]
    Version(u8),
    #[error("cluster record: unknown kind {0}")]
    Kind(u8),
    #[error("cluster record: {0}")]
    Bad(&'static str),
    #[error("cluster record: bad event: {0}")]
    Event(String),
}

/// Encode the runs of `batch` whose shard is `shard` (all of them with `None`) as an events
/// (or entity events) record. Returns `None` if no run is on that shard.
pub fn encode_events(
    batch: &Batch,
    shard: Option<u32>,
    append_ms: i64,
    expected_last_seq: Option<u64>,
    entity_events: bool,
) -> Option<Vec<u8>> {
    let runs: Vec<_> = batch
        .runs()
        .iter()
        .filter(|r| shard.is_none_or(|s| r.shard == s))
        .collect();
    if runs.is_empty() {
        return None;
    }
    let body: usize = runs
        .iter()
        .map(|r| 10 + batch.stream(r).len() + r.events.len())
        .sum();
    let mut out = Vec::with_capacity(HEADER_LEN + body);
    let kind = if entity_events { 3 } else { 1 };
    header(
        &mut out,
        kind,
        runs.len() as u32,
        append_ms,
        expected_last_seq,
    );
    for r in runs {
        stream(&mut out, batch.stream(r));
        out.extend_from_slice(&r.count.to_le_bytes());
        out.extend_from_slice(&(r.events.len() as u32).to_le_bytes());
        out.extend_from_slice(&r.events);
    }
    Some(out)
}

/// Encode a stream delete.
pub fn encode_delete(name: &str, append_ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 2 + name.len());
    header(&mut out, 2, 1, append_ms, None);
    stream(&mut out, name);
    out
}

/// Encode a feature put.
pub fn encode_feature_put(
    entity: &str,
    set: &[(String, Option<FeatureValue>)],
    append_ms: i64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 2 + entity.len() + set.len() * 24);
    header(&mut out, 4, set.len() as u32, append_ms, None);
    stream(&mut out, entity);
    for (name, value) in set {
        // Names are 1–128 bytes: the HTTP layer checks them first.
        let len = u8::try_from(name.len()).unwrap_or(u8::MAX);
        out.push(len);
        out.extend_from_slice(&name.as_bytes()[..usize::from(len).min(name.len())]);
        match value {
            None => out.push(0),
            Some(FeatureValue::Int(i)) => {
                out.push(1);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Some(FeatureValue::Float(f)) => {
                out.push(2);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
            Some(FeatureValue::Bool(b)) => {
                out.push(3);
                out.push(u8::from(*b));
            }
            Some(FeatureValue::Str(s)) => {
                out.push(4);
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
    out
}

/// Encode a feature delete (`name`: `None` deletes the whole entity).
pub fn encode_feature_delete(entity: &str, name: Option<&str>, append_ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 3 + entity.len() + name.map_or(0, str::len));
    header(&mut out, 5, 1, append_ms, None);
    stream(&mut out, entity);
    match name {
        None => out.push(0),
        Some(n) => {
            let len = u8::try_from(n.len()).unwrap_or(u8::MAX);
            out.push(len);
            out.extend_from_slice(&n.as_bytes()[..usize::from(len).min(n.len())]);
        }
    }
    out
}

/// Encode a feature increment.
pub fn encode_feature_incr(entity: &str, name: &str, by: Increment, append_ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 12 + entity.len() + name.len());
    header(&mut out, 6, 1, append_ms, None);
    stream(&mut out, entity);
    // Names are 1–128 bytes: the RESP layer checks them first.
    let len = u8::try_from(name.len()).unwrap_or(u8::MAX);
    out.push(len);
    out.extend_from_slice(&name.as_bytes()[..usize::from(len).min(name.len())]);
    match by {
        Increment::Int(i) => {
            out.push(1);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Increment::Float(f) => {
            out.push(2);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
    }
    out
}

fn header(out: &mut Vec<u8>, kind: u8, n: u32, append_ms: i64, expected: Option<u64>) {
    out.push(VERSION);
    out.push(kind);
    out.push(if expected.is_some() { FLAG_EXPECTED } else { 0 });
    out.push(0);
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&append_ms.to_le_bytes());
    out.extend_from_slice(&expected.unwrap_or(0).to_le_bytes());
}

fn stream(out: &mut Vec<u8>, name: &str) {
    // Stream names are 1–256 bytes: every decoder checks it before a batch exists.
    let len = u16::try_from(name.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&name.as_bytes()[..usize::from(len).min(name.len())]);
}

/// Decode a record's value.
pub fn decode(value: &[u8]) -> Result<Record, WireError> {
    let bad = || WireError::Bad("truncated");
    let mut r = Reader::new(value);
    let version = r.u8().ok_or_else(bad)?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let kind = r.u8().ok_or_else(bad)?;
    let flags = r.u8().ok_or_else(bad)?;
    if flags & !FLAG_EXPECTED != 0 || r.u8().ok_or_else(bad)? != 0 {
        return Err(WireError::Bad("reserved bits set"));
    }
    let n = r.u32().ok_or_else(bad)?;
    let append_ms = r.i64().ok_or_else(bad)?;
    let expected = r.u64().ok_or_else(bad)?;
    let expected_last_seq = (flags & FLAG_EXPECTED != 0).then_some(expected);
    let body = match kind {
        1 | 3 => {
            let batch = runs(&mut r, n)?;
            if kind == 1 {
                Body::Events {
                    batch,
                    expected_last_seq,
                }
            } else {
                Body::EntityEvents { batch }
            }
        }
        2 => {
            if n != 1 || expected_last_seq.is_some() {
                return Err(WireError::Bad("stream delete header"));
            }
            Body::Delete {
                stream: stream_name(&mut r)?.to_string(),
            }
        }
        6 => {
            if expected_last_seq.is_some() || n != 1 {
                return Err(WireError::Bad("feature increment header"));
            }
            let entity = stream_name(&mut r)?.to_string();
            feature_incr(&mut r, entity)?
        }
        4 | 5 => {
            if expected_last_seq.is_some() || (kind == 5 && n != 1) {
                return Err(WireError::Bad("feature write header"));
            }
            let entity = stream_name(&mut r)?.to_string();
            if kind == 4 {
                Body::FeaturePut {
                    entity,
                    set: feature_values(&mut r, n)?,
                }
            } else {
                let len = usize::from(r.u8().ok_or_else(bad)?);
                let name = match len {
                    0 => None,
                    _ => Some(utf8(r.bytes(len).ok_or_else(bad)?)?.to_string()),
                };
                Body::FeatureDelete { entity, name }
            }
        }
        k => return Err(WireError::Kind(k)),
    };
    if r.remaining() != 0 {
        return Err(WireError::Bad("bytes after the body"));
    }
    Ok(Record { append_ms, body })
}

fn stream_name<'a>(r: &mut Reader<'a>) -> Result<&'a str, WireError> {
    let len = usize::from(r.u16().ok_or(WireError::Bad("truncated stream"))?);
    if !(1..=256).contains(&len) {
        return Err(WireError::Bad("stream name length"));
    }
    let bytes = r.bytes(len).ok_or(WireError::Bad("truncated stream"))?;
    std::str::from_utf8(bytes).map_err(|_| WireError::Bad("stream name is not UTF-8"))
}

fn utf8(b: &[u8]) -> Result<&str, WireError> {
    std::str::from_utf8(b).map_err(|_| WireError::Bad("not UTF-8"))
}

fn feature_incr(r: &mut Reader<'_>, entity: String) -> Result<Body, WireError> {
    let bad = || WireError::Bad("truncated feature increment");
    let len = usize::from(r.u8().ok_or_else(bad)?);
    if !(1..=128).contains(&len) {
        return Err(WireError::Bad("feature name length"));
    }
    let name = utf8(r.bytes(len).ok_or_else(bad)?)?.to_string();
    let by = match r.u8().ok_or_else(bad)? {
        1 => Increment::Int(r.i64().ok_or_else(bad)?),
        2 => {
            let f = f64::from_bits(r.u64().ok_or_else(bad)?);
            if !f.is_finite() {
                return Err(WireError::Bad("non-finite feature increment"));
            }
            Increment::Float(f)
        }
        _ => return Err(WireError::Bad("unknown feature increment tag")),
    };
    Ok(Body::FeatureIncr { entity, name, by })
}

fn feature_values(
    r: &mut Reader<'_>,
    n: u32,
) -> Result<Vec<(String, Option<FeatureValue>)>, WireError> {
    let bad = || WireError::Bad("truncated feature value");
    let mut set = Vec::with_capacity((n as usize).min(1024));
    for _ in 0..n {
        let len = usize::from(r.u8().ok_or_else(bad)?);
        if !(1..=128).contains(&len) {
            return Err(WireError::Bad("feature name length"));
        }
        let name = utf8(r.bytes(len).ok_or_else(bad)?)?.to_string();
        let value = match r.u8().ok_or_else(bad)? {
            0 => None,
            1 => Some(FeatureValue::Int(r.i64().ok_or_else(bad)?)),
            2 => {
                let f = f64::from_bits(r.u64().ok_or_else(bad)?);
                if !f.is_finite() {
                    return Err(WireError::Bad("non-finite feature value"));
                }
                Some(FeatureValue::Float(f))
            }
            3 => match r.u8().ok_or_else(bad)? {
                0 => Some(FeatureValue::Bool(false)),
                1 => Some(FeatureValue::Bool(true)),
                _ => return Err(WireError::Bad("feature bool")),
            },
            4 => {
                let len = r.u32().ok_or_else(bad)? as usize;
                Some(FeatureValue::Str(
                    utf8(r.bytes(len).ok_or_else(bad)?)?.into(),
                ))
            }
            _ => return Err(WireError::Bad("unknown feature value tag")),
        };
        set.push((name, value));
    }
    Ok(set)
}

fn runs(r: &mut Reader<'_>, n: u32) -> Result<Batch, WireError> {
    if n == 0 {
        return Err(WireError::Bad("no runs"));
    }
    let mut batch = Batch::new();
    for _ in 0..n {
        let name = stream_name(r)?;
        let count = r.u32().ok_or(WireError::Bad("truncated run"))?;
        let len = r.u32().ok_or(WireError::Bad("truncated run"))? as usize;
        let events = r.bytes(len).ok_or(WireError::Bad("truncated events"))?;
        let mut seen = 0u32;
        for ev in packed::events(events, name) {
            let ev = ev.map_err(|e| WireError::Event(format!("{e:?}")))?;
            batch
                .push(&ev)
                .map_err(|e| WireError::Event(e.to_string()))?;
            seen += 1;
        }
        if seen != count || count == 0 {
            return Err(WireError::Bad("run count"));
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests;
