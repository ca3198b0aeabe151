//! What decoding an OTLP body will cost in memory, found before it is decoded.
//!
//! A protobuf or JSON message is decoded whole into prost structs, and a struct costs far more
//! than its wire form: an empty `Span` is 2 bytes on the wire (tag and length 0) and ~250 in
//! memory. Left alone, a 64 MiB body of empty spans would decode to gigabytes. So the decoded
//! size is bounded first, and the handler holds it in the in-flight budget
//! (`ingest.max_inflight_bytes`), refusing (413) a body whose bound exceeds the whole budget.
//!
//! - Protobuf: [`protobuf`] walks the wire format along the OTLP schema (only the message-typed
//!   fields; scalars, strings and unknown fields are skipped) and adds, for every message it
//!   meets, twice its struct size (a `Vec` may hold up to twice its length). Strings and bytes
//!   cost at most their wire length, which the body already counts. The walk also rejects what
//!   prost would reject structurally (truncated fields, groups, nesting past prost's limit).
//! - JSON: [`json`] has no schema to walk cheaply, so every `{` in the body (inside strings
//!   too: an overestimate is safe) counts as one struct of the largest decoded type plus a
//!   `serde_json` map node (the body is parsed into a `Value` tree first, `super::json`), and
//!   every `[`, `,` and `:` as one `Value` with its key.

use std::mem::size_of;

use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};

use super::Signal;

/// prost's default recursion limit: a body nested deeper is malformed for prost too.
pub const MAX_DEPTH: u32 = 100;

/// Why the wire walk stopped: the body is not a well-formed protobuf message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated protobuf field at byte {0}")]
    Truncated(usize),
    #[error("invalid protobuf varint at byte {0}")]
    Varint(usize),
    #[error("unsupported protobuf wire type {wire_type} at byte {at}")]
    WireType { wire_type: u64, at: usize },
    #[error("protobuf message nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// The message types of the OTLP trace and logs schemas that hold other messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    TracesRequest,
    LogsRequest,
    ResourceSpans,
    ResourceLogs,
    Resource,
    EntityRef,
    ScopeSpans,
    ScopeLogs,
    Scope,
    Span,
    SpanEvent,
    Link,
    Status,
    LogRecord,
    KeyValue,
    AnyValue,
    ArrayValue,
    KvList,
    /// An element of a repeated string field (`EntityRef` keys): a `String` of its own.
    RepeatedString,
}

impl Node {
    /// The message type of field `field`, if it is a message (or a repeated string) field.
    fn child(self, field: u64) -> Option<Node> {
        use Node::*;
        Some(match (self, field) {
            (TracesRequest, 1) => ResourceSpans,
            (LogsRequest, 1) => ResourceLogs,
            (ResourceSpans | ResourceLogs, 1) => Resource,
            (ResourceSpans, 2) => ScopeSpans,
            (ResourceLogs, 2) => ScopeLogs,
            (Resource, 1) => KeyValue,
            (Resource, 3) => EntityRef,
            (EntityRef, 3 | 4) => RepeatedString,
            (ScopeSpans | ScopeLogs, 1) => Scope,
            (ScopeSpans, 2) => Span,
            (ScopeLogs, 2) => LogRecord,
            (Scope, 3) => KeyValue,
            (Span, 9) => KeyValue,
            (Span, 11) => SpanEvent,
            (Span, 13) => Link,
            (Span, 15) => Status,
            (SpanEvent, 3) => KeyValue,
            (Link, 4) => KeyValue,
            (LogRecord, 5) => AnyValue,
            (LogRecord, 6) => KeyValue,
            (KeyValue, 2) => AnyValue,
            (AnyValue, 5) => ArrayValue,
            (AnyValue, 6) => KvList,
            (ArrayValue, 1) => AnyValue,
            (KvList, 1) => KeyValue,
            _ => return None,
        })
    }

    /// Bytes one occurrence costs once decoded (doubled: room a growing `Vec` may leave).
    fn cost(self) -> u64 {
        let size = match self {
            Node::TracesRequest | Node::LogsRequest => 0,
            Node::ResourceSpans => size_of::<ResourceSpans>(),
            Node::ResourceLogs => size_of::<ResourceLogs>(),
            Node::Resource => size_of::<Resource>(),
            Node::EntityRef => size_of::<EntityRef>(),
            Node::ScopeSpans => size_of::<ScopeSpans>(),
            Node::ScopeLogs => size_of::<ScopeLogs>(),
            Node::Scope => size_of::<InstrumentationScope>(),
            Node::Span => size_of::<Span>(),
            Node::SpanEvent => size_of::<span::Event>(),
            Node::Link => size_of::<span::Link>(),
            Node::Status => size_of::<Status>(),
            Node::LogRecord => size_of::<LogRecord>(),
            Node::KeyValue => size_of::<KeyValue>(),
            Node::AnyValue => size_of::<AnyValue>(),
            Node::ArrayValue => size_of::<ArrayValue>(),
            Node::KvList => size_of::<KeyValueList>(),
            Node::RepeatedString => size_of::<String>(),
        };
        2 * size as u64
    }
}

/// The largest decoded struct: what one JSON object is assumed to cost.
fn largest() -> u64 {
    [
        Node::ResourceSpans,
        Node::ResourceLogs,
        Node::Resource,
        Node::ScopeSpans,
        Node::ScopeLogs,
        Node::Scope,
        Node::Span,
        Node::SpanEvent,
        Node::Link,
        Node::LogRecord,
        Node::KeyValue,
        Node::AnyValue,
    ]
    .into_iter()
    .map(Node::cost)
    .max()
    .unwrap_or(0)
}

/// Bound on the memory that decoding the protobuf `body` of `signal` takes beyond the body.
pub fn protobuf(signal: Signal, body: &[u8]) -> Result<u64, WireError> {
    let root = match signal {
        Signal::Traces => Node::TracesRequest,
        Signal::Logs => Node::LogsRequest,
    };
    let mut total = 0u64;
    walk(body, 0, root, 0, &mut total)?;
    Ok(total)
}

/// Bound on the memory that decoding the JSON `body` takes beyond the body.
pub fn json(body: &[u8]) -> u64 {
    // A B-tree leaf of serde_json's map holds 11 entries, allocated whole for the first one.
    const MAP_NODE: u64 = 11 * (size_of::<String>() + size_of::<serde_json::Value>()) as u64 + 64;
    const VALUE: u64 = 2 * (size_of::<String>() + size_of::<serde_json::Value>()) as u64;
    let objects = memchr::memchr_iter(b'{', body).count() as u64;
    let others = body
        .iter()
        .filter(|&&b| matches!(b, b'[' | b',' | b':'))
        .count() as u64;
    objects
        .saturating_mul(largest() + MAP_NODE)
        .saturating_add(others.saturating_mul(VALUE))
}

/// A base-128 varint at `buf[*at..]`; `base` is `buf`'s offset in the body (for messages).
fn varint(buf: &[u8], at: &mut usize, base: usize) -> Result<u64, WireError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&b) = buf.get(*at) else {
            return Err(WireError::Truncated(base + *at));
        };
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::Varint(base + *at))
}

/// Walk one message of type `node` (its bytes are `buf`, at `base` in the body).
fn walk(buf: &[u8], base: usize, node: Node, depth: u32, total: &mut u64) -> Result<(), WireError> {
    if depth > MAX_DEPTH {
        return Err(WireError::TooDeep);
    }
    let mut at = 0;
    while at < buf.len() {
        let start = at;
        let key = varint(buf, &mut at, base)?;
        let (field, wire_type) = (key >> 3, key & 7);
        let skip = match wire_type {
            0 => {
                varint(buf, &mut at, base)?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                let len = varint(buf, &mut at, base)?;
                let len = usize::try_from(len).map_err(|_| WireError::Truncated(base + start))?;
                let end = at
                    .checked_add(len)
                    .filter(|&e| e <= buf.len())
                    .ok_or(WireError::Truncated(base + start))?;
                if let Some(child) = node.child(field) {
                    *total = total.saturating_add(child.cost());
                    if child != Node::RepeatedString {
                        walk(&buf[at..end], base + at, child, depth + 1, total)?;
                    }
                }
                at = end;
                0
            }
            _ => {
                return Err(WireError::WireType {
                    wire_type,
                    at: base + start,
                });
            }
        };
        at = at
            .checked_add(skip)
            .filter(|&e| e <= buf.len())
            .ok_or(WireError::Truncated(base + start))?;
    }
    Ok(())
}
