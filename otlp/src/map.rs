//! OTLP spans and log records → Veltrix events (one each), pure and synchronous.
//!
//! | event field | span | log record |
//! | --- | --- | --- |
//! | `stream` | resource attribute `otlp.stream_attribute` (default `service.name`), else `unknown_service` | same |
//! | `type` | span name, sanitized (below); `span` if empty | severity text, else the severity number's name (`INFO`, `WARN2`…), else `log`; sanitized |
//! | `ts` | `start_time_unix_nano` in ms; receive time if 0 | `time_unix_nano`, else `observed_time_unix_nano`, else receive time |
//! | `entity` | trace id, lowercase hex | trace id, lowercase hex; without one, the stream (service name) |
//! | `id` | trace id + span id in hex (48 chars): a retried export is a duplicate, not stored twice | none |
//! | `kind` | `event` | `event` |
//! | `data` | see [`span_data`] | see [`log_data`] |
//!
//! A `type` allows only `[A-Za-z0-9_.:-]` (docs/API.md §2), and span names are free text
//! (`GET /users/{id}`): every other character becomes `_` and the name is cut to 128 bytes;
//! the name as sent is kept in `data.name`.
//!
//! # What rejects one item, what rejects the request
//! An item that cannot be a valid event is left out and counted in the answer's
//! `partial_success` (OTLP's way: the exporter must not retry it), while the others are
//! stored: a stream attribute that is not a valid stream name, a trace or span id of the wrong
//! length, attributes nested deeper than `data` may be (docs/API.md §2: 64 levels), or an event over
//! `ingest.max_event_bytes`. What concerns the request as a whole refuses all of it: a body
//! that does not decode (400), and events adding up to more than `ingest.max_body_bytes`
//! (413): a request's events are held whole until stored, so they are bounded like a body.

use base64::Engine as _;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Av;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{Span, span, status};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use vx_proto::rules::{MAX_DATA_DEPTH, MAX_TYPE_LEN, type_byte, valid_entity, valid_stream};
use vx_proto::{Batch, EventView, InputError, Kind};

/// OTel's `service.name` when a resource has none.
pub const UNKNOWN_SERVICE: &str = "unknown_service";

/// How items become events.
#[derive(Clone, Copy, Debug)]
pub struct Mapping<'a> {
    /// The resource attribute that names the stream (`otlp.stream_attribute`).
    pub stream_attribute: &'a str,
    /// `ingest.max_event_bytes`, on the event's canonical JSON form.
    pub max_event_bytes: usize,
    /// `ingest.max_body_bytes`, on the sum of the request's events as stored.
    pub max_batch_bytes: u64,
    /// The `ts` of items without a time.
    pub now_ms: i64,
}

/// A request's events, and its items that were left out.
#[derive(Debug, Default)]
pub struct Mapped {
    pub batch: Batch,
    /// Spans or log records in the request.
    pub items: u64,
    /// Of those, left out (OTLP `rejected_spans` / `rejected_log_records`).
    pub rejected: u64,
    /// Why the first left-out item was rejected (OTLP `error_message`), with the count of the
    /// others.
    pub first_rejection: Option<String>,
}

impl Mapped {
    /// OTLP's `error_message` of a partial success.
    pub fn error_message(&self) -> String {
        match (&self.first_rejection, self.rejected) {
            (None, _) => String::new(),
            (Some(m), 0 | 1) => m.clone(),
            (Some(m), n) => format!("{m} (and {} more rejected)", n - 1),
        }
    }

    fn reject(&mut self, what: &str, index: u64, why: &str) {
        self.rejected += 1;
        if self.first_rejection.is_none() {
            self.first_rejection = Some(format!("{what} {index} rejected: {why}"));
        }
    }
}

/// Why one item cannot be an event.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
struct ItemError(String);

/// Map every span of `req`.
pub fn traces(req: &ExportTraceServiceRequest, m: &Mapping<'_>) -> Result<Mapped, InputError> {
    let resources = req.resource_spans.iter().map(|rs| {
        let scopes = rs
            .scope_spans
            .iter()
            .map(|ss| (ss.scope.as_ref(), &ss.spans));
        (rs.resource.as_ref(), scopes)
    });
    map_items(resources, "span", span, m)
}

/// Map every log record of `req`.
pub fn logs(req: &ExportLogsServiceRequest, m: &Mapping<'_>) -> Result<Mapped, InputError> {
    let resources = req.resource_logs.iter().map(|rl| {
        let scopes = rl
            .scope_logs
            .iter()
            .map(|sl| (sl.scope.as_ref(), &sl.log_records));
        (rl.resource.as_ref(), scopes)
    });
    map_items(resources, "log record", log, m)
}

/// How one item becomes an event (`span`, `log`).
type MapItem<T> = fn(&T, &ItemCtx<'_>, &mut Sink) -> Result<(), ItemError>;

/// The walk both signals share: OTLP nests items in scopes in resources; each item is mapped
/// with what its resource and scope give it, counted, and left out (with the reason, as
/// `what` and its index) if it cannot be an event, and the request's events are bounded as
/// they grow.
fn map_items<'r, T: 'r, S>(
    resources: impl Iterator<Item = (Option<&'r Resource>, S)>,
    what: &str,
    item: MapItem<T>,
    m: &Mapping<'_>,
) -> Result<Mapped, InputError>
where
    S: Iterator<Item = (Option<&'r InstrumentationScope>, &'r Vec<T>)>,
{
    let mut out = Mapped::default();
    let mut sink = Sink::default();
    for (resource, scopes) in resources {
        let res = ResourceCtx::new(resource, m.stream_attribute);
        for (scope, items) in scopes {
            let cx = ItemCtx {
                res: &res,
                scope: scope_json(scope),
                m,
            };
            for it in items {
                let index = out.items;
                out.items += 1;
                if let Err(e) = item(it, &cx, &mut sink) {
                    out.reject(what, index, &e.0);
                }
                check_total(&sink.batch, m)?;
            }
        }
    }
    out.batch = sink.batch;
    Ok(out)
}

/// The request's events together may not exceed `ingest.max_body_bytes` (413).
fn check_total(batch: &Batch, m: &Mapping<'_>) -> Result<(), InputError> {
    if batch.mem_bytes() as u64 > m.max_batch_bytes {
        return Err(InputError::too_large(
            vx_proto::decode::LIMIT_BODY_BYTES,
            m.max_batch_bytes,
            format!(
                "the request's events add up to more than {} bytes (ingest.max_body_bytes); \
                 send smaller batches",
                m.max_batch_bytes
            ),
        ));
    }
    Ok(())
}

/// What every item of one resource shares.
struct ResourceCtx {
    /// The stream, or why the resource's items are rejected.
    stream: Result<String, ItemError>,
    /// The resource's attributes, or why its items are rejected.
    attributes: Result<Value, ItemError>,
}

impl ResourceCtx {
    fn new(resource: Option<&Resource>, stream_attribute: &str) -> ResourceCtx {
        let attrs: &[KeyValue] = resource.map_or(&[], |r| &r.attributes);
        let named = attrs
            .iter()
            .rev()
            .find(|kv| kv.key == stream_attribute)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref());
        let stream = match named {
            None => Ok(UNKNOWN_SERVICE.to_string()),
            Some(Av::StringValue(s)) if s.is_empty() => Ok(UNKNOWN_SERVICE.to_string()),
            Some(Av::StringValue(s)) => Ok(s.clone()),
            // A non-string attribute names the stream by its JSON text (`42`, `true`); one
            // nested too deep to be written has none, and is no stream name either.
            Some(other) => av_json(other, 1).map(|v| v.to_string()),
        };
        let stream = match stream {
            Ok(name) if valid_stream(&name) => Ok(name),
            _ => Err(ItemError(format!(
                "resource attribute {stream_attribute:?} is not a valid stream name (1-256 bytes \
                 of UTF-8 without control characters)"
            ))),
        };
        ResourceCtx {
            stream,
            // data (1) → resource (2).
            attributes: attributes_json(attrs, 2).map_err(|e| ItemError(format!("resource {e}"))),
        }
    }
}

/// What the items of one scope share: their resource, their scope (`data.scope`), and how
/// they become events.
struct ItemCtx<'a> {
    res: &'a ResourceCtx,
    scope: Result<Value, ItemError>,
    m: &'a Mapping<'a>,
}

impl ItemCtx<'_> {
    /// The items' stream, or why they are rejected.
    fn stream(&self) -> Result<&str, ItemError> {
        self.res.stream.as_deref().map_err(ItemError::clone)
    }

    /// The last fields of every item's `data`: the resource's attributes and the scope.
    fn add_resource_and_scope(&self, d: &mut Map<String, Value>) -> Result<(), ItemError> {
        d.insert("resource".into(), self.res.attributes.clone()?);
        d.insert("scope".into(), self.scope.clone()?);
        Ok(())
    }
}

/// Where the request's events go: the batch, and buffers reused from item to item (the
/// event's `data` text, and its canonical form, whose length is what
/// `ingest.max_event_bytes` limits).
#[derive(Default)]
struct Sink {
    batch: Batch,
    canonical: Vec<u8>,
    data: String,
}

fn span(sp: &Span, cx: &ItemCtx<'_>, sink: &mut Sink) -> Result<(), ItemError> {
    let stream = cx.stream()?;
    let trace_id = id_hex(&sp.trace_id, 16, "trace_id")?;
    let span_id = id_hex(&sp.span_id, 8, "span_id")?;
    let parent = id_hex(&sp.parent_span_id, 8, "parent_span_id")?;
    let mut d = Map::new();
    d.insert("name".into(), Value::from(sp.name.as_str()));
    if let Some(s) = &span_id {
        d.insert("span_id".into(), Value::from(s.as_str()));
    }
    if let Some(p) = parent {
        d.insert("parent_span_id".into(), Value::from(p));
    }
    d.insert("kind".into(), Value::from(span_kind(sp.kind)));
    d.insert(
        "start_time_unix_nano".into(),
        sp.start_time_unix_nano.into(),
    );
    d.insert("end_time_unix_nano".into(), sp.end_time_unix_nano.into());
    if sp.end_time_unix_nano >= sp.start_time_unix_nano && sp.start_time_unix_nano > 0 {
        d.insert(
            "duration_ns".into(),
            (sp.end_time_unix_nano - sp.start_time_unix_nano).into(),
        );
    }
    if let Some(st) = &sp.status {
        let mut s = Map::new();
        s.insert("code".into(), Value::from(status_code(st.code)));
        if !st.message.is_empty() {
            s.insert("message".into(), Value::from(st.message.as_str()));
        }
        d.insert("status".into(), Value::Object(s));
    }
    if !sp.trace_state.is_empty() {
        d.insert("trace_state".into(), Value::from(sp.trace_state.as_str()));
    }
    if sp.flags != 0 {
        d.insert("flags".into(), sp.flags.into());
    }
    d.insert("attributes".into(), attributes_json(&sp.attributes, 2)?);
    if !sp.events.is_empty() {
        let events = sp
            .events
            .iter()
            .map(span_event)
            .collect::<Result<Vec<_>, _>>()?;
        d.insert("events".into(), Value::Array(events));
    }
    if !sp.links.is_empty() {
        let links = sp.links.iter().map(link).collect::<Result<Vec<_>, _>>()?;
        d.insert("links".into(), Value::Array(links));
    }
    dropped(
        &mut d,
        "dropped_attributes_count",
        sp.dropped_attributes_count,
    );
    dropped(&mut d, "dropped_events_count", sp.dropped_events_count);
    dropped(&mut d, "dropped_links_count", sp.dropped_links_count);
    cx.add_resource_and_scope(&mut d)?;

    let ty = sanitize_type(&sp.name).unwrap_or_else(|| "span".to_string());
    let id = match (&trace_id, &span_id) {
        (Some(t), Some(s)) => Some(format!("{t}{s}")),
        _ => None,
    };
    let ts = nanos_ms(sp.start_time_unix_nano).unwrap_or(cx.m.now_ms);
    let entity = trace_id.as_deref();
    sink.push(stream, entity, &ty, ts, id.as_deref(), d, cx.m)
}

fn log(lr: &LogRecord, cx: &ItemCtx<'_>, sink: &mut Sink) -> Result<(), ItemError> {
    let stream = cx.stream()?;
    let trace_id = id_hex(&lr.trace_id, 16, "trace_id")?;
    let span_id = id_hex(&lr.span_id, 8, "span_id")?;
    let mut d = Map::new();
    if let Some(body) = lr.body.as_ref().and_then(|b| b.value.as_ref()) {
        d.insert("body".into(), av_json(body, 2)?);
    }
    if lr.severity_number != 0 {
        d.insert("severity_number".into(), lr.severity_number.into());
    }
    if !lr.severity_text.is_empty() {
        d.insert(
            "severity_text".into(),
            Value::from(lr.severity_text.as_str()),
        );
    }
    if !lr.event_name.is_empty() {
        d.insert("event_name".into(), Value::from(lr.event_name.as_str()));
    }
    if let Some(s) = span_id {
        d.insert("span_id".into(), Value::from(s));
    }
    if lr.time_unix_nano != 0 {
        d.insert("time_unix_nano".into(), lr.time_unix_nano.into());
    }
    if lr.observed_time_unix_nano != 0 {
        d.insert(
            "observed_time_unix_nano".into(),
            lr.observed_time_unix_nano.into(),
        );
    }
    if lr.flags != 0 {
        d.insert("flags".into(), lr.flags.into());
    }
    d.insert("attributes".into(), attributes_json(&lr.attributes, 2)?);
    dropped(
        &mut d,
        "dropped_attributes_count",
        lr.dropped_attributes_count,
    );
    cx.add_resource_and_scope(&mut d)?;

    let ty = sanitize_type(&lr.severity_text)
        .or_else(|| severity_name(lr.severity_number))
        .unwrap_or_else(|| "log".to_string());
    let ts = nanos_ms(lr.time_unix_nano)
        .or_else(|| nanos_ms(lr.observed_time_unix_nano))
        .unwrap_or(cx.m.now_ms);
    // A log outside any trace is keyed by its service, so per-service features still count it.
    let entity = trace_id.as_deref().unwrap_or(stream);
    sink.push(stream, Some(entity), &ty, ts, None, d, cx.m)
}

impl Sink {
    /// Build the event, check its size as `/v1/events` would, and add it to the batch.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        stream: &str,
        entity: Option<&str>,
        ty: &str,
        ts: i64,
        id: Option<&str>,
        data: Map<String, Value>,
        m: &Mapping<'_>,
    ) -> Result<(), ItemError> {
        self.data.clear();
        // Compact JSON into the reused buffer. Writing into a `String` cannot fail (every key is a
        // string, every number finite: non-finite doubles became strings); should it, the item is
        // rejected rather than stored half-written.
        write!(self.data, "{}", Value::Object(data))
            .map_err(|_| ItemError("its data could not be written as JSON".into()))?;
        let entity = entity.filter(|e| !e.is_empty() && valid_entity(e));
        let ev = EventView {
            stream,
            entity,
            ty,
            ts,
            kind: Kind::Event,
            value: None,
            id,
            data: Some(&self.data),
        };
        self.canonical.clear();
        vx_proto::canonical::write_event(&mut self.canonical, &ev, 0);
        if self.canonical.len() > m.max_event_bytes {
            return Err(ItemError(format!(
                "its event is {} bytes, more than {} (ingest.max_event_bytes)",
                self.canonical.len(),
                m.max_event_bytes
            )));
        }
        self.batch.push(&ev).map_err(|e| ItemError(e.to_string()))
    }
}

/// An id as lowercase hex; `None` when absent (empty or all zero, OTLP's "invalid" id).
fn id_hex(bytes: &[u8], len: usize, field: &str) -> Result<Option<String>, ItemError> {
    if bytes.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if bytes.len() != len {
        return Err(ItemError(format!(
            "{field} is {} bytes, not {len}",
            bytes.len()
        )));
    }
    let mut s = String::with_capacity(2 * len);
    for b in bytes {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(Some(s))
}

/// Nanoseconds → ms; `None` for 0 (unset). Every u64 of ns is below 2^53 ms.
fn nanos_ms(ns: u64) -> Option<i64> {
    (ns != 0).then(|| i64::try_from(ns / 1_000_000).unwrap_or(i64::MAX))
}

/// A `type` from free text: disallowed characters become `_`, cut to 128 bytes.
pub fn sanitize_type(s: &str) -> Option<String> {
    let t: String = s
        .chars()
        .map(|c| match u8::try_from(c) {
            Ok(b) if type_byte(b) => c,
            _ => '_',
        })
        .take(MAX_TYPE_LEN)
        .collect();
    (!t.is_empty()).then_some(t)
}

fn severity_name(n: i32) -> Option<String> {
    let sev = SeverityNumber::try_from(n).ok()?;
    let name = sev.as_str_name().strip_prefix("SEVERITY_NUMBER_")?;
    (name != "UNSPECIFIED").then(|| name.to_string())
}

fn span_kind(k: i32) -> &'static str {
    match span::SpanKind::try_from(k) {
        Ok(span::SpanKind::Internal) => "internal",
        Ok(span::SpanKind::Server) => "server",
        Ok(span::SpanKind::Client) => "client",
        Ok(span::SpanKind::Producer) => "producer",
        Ok(span::SpanKind::Consumer) => "consumer",
        _ => "unspecified",
    }
}

fn status_code(c: i32) -> &'static str {
    match status::StatusCode::try_from(c) {
        Ok(status::StatusCode::Ok) => "ok",
        Ok(status::StatusCode::Error) => "error",
        _ => "unset",
    }
}

fn dropped(d: &mut Map<String, Value>, key: &str, n: u32) {
    if n != 0 {
        d.insert(key.into(), n.into());
    }
}

fn span_event(e: &span::Event) -> Result<Value, ItemError> {
    let mut o = Map::new();
    o.insert("name".into(), Value::from(e.name.as_str()));
    o.insert("time_unix_nano".into(), e.time_unix_nano.into());
    // data (1) → events (2) → event (3) → attributes (4).
    o.insert("attributes".into(), attributes_json(&e.attributes, 4)?);
    dropped(
        &mut o,
        "dropped_attributes_count",
        e.dropped_attributes_count,
    );
    Ok(Value::Object(o))
}

fn link(l: &span::Link) -> Result<Value, ItemError> {
    let mut o = Map::new();
    if let Some(t) = id_hex(&l.trace_id, 16, "link trace_id")? {
        o.insert("trace_id".into(), Value::from(t));
    }
    if let Some(s) = id_hex(&l.span_id, 8, "link span_id")? {
        o.insert("span_id".into(), Value::from(s));
    }
    if !l.trace_state.is_empty() {
        o.insert("trace_state".into(), Value::from(l.trace_state.as_str()));
    }
    if l.flags != 0 {
        o.insert("flags".into(), l.flags.into());
    }
    o.insert("attributes".into(), attributes_json(&l.attributes, 4)?);
    dropped(
        &mut o,
        "dropped_attributes_count",
        l.dropped_attributes_count,
    );
    Ok(Value::Object(o))
}

fn scope_json(scope: Option<&InstrumentationScope>) -> Result<Value, ItemError> {
    let mut o = Map::new();
    if let Some(s) = scope {
        if !s.name.is_empty() {
            o.insert("name".into(), Value::from(s.name.as_str()));
        }
        if !s.version.is_empty() {
            o.insert("version".into(), Value::from(s.version.as_str()));
        }
        if !s.attributes.is_empty() {
            // data (1) → scope (2) → attributes (3).
            let attrs =
                attributes_json(&s.attributes, 3).map_err(|e| ItemError(format!("scope {e}")))?;
            o.insert("attributes".into(), attrs);
        }
    }
    Ok(Value::Object(o))
}

/// Attributes as one JSON object (a repeated key: the last one wins), the object itself at
/// nesting level `depth` of `data`.
fn attributes_json(attrs: &[KeyValue], depth: usize) -> Result<Value, ItemError> {
    let mut o = Map::new();
    for kv in attrs {
        let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            None => Value::Null,
            Some(v) => av_json(v, depth + 1)?,
        };
        o.insert(kv.key.clone(), v);
    }
    Ok(Value::Object(o))
}

/// An attribute value as JSON; an array or map would be at nesting level `depth` of `data`.
/// Bytes become base64 (OTLP/JSON's convention); a non-finite double its name as a string.
fn av_json(v: &Av, depth: usize) -> Result<Value, ItemError> {
    Ok(match v {
        Av::StringValue(s) => Value::from(s.as_str()),
        Av::BoolValue(b) => Value::Bool(*b),
        Av::IntValue(i) => Value::from(*i),
        Av::DoubleValue(f) => serde_json::Number::from_f64(*f).map_or_else(
            || {
                Value::from(if f.is_nan() {
                    "NaN"
                } else if *f > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                })
            },
            Value::Number,
        ),
        Av::BytesValue(b) => Value::from(base64::engine::general_purpose::STANDARD.encode(b)),
        Av::ArrayValue(a) => {
            too_deep(depth)?;
            Value::Array(
                a.values
                    .iter()
                    .map(|x| {
                        x.value
                            .as_ref()
                            .map_or(Ok(Value::Null), |x| av_json(x, depth + 1))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Av::KvlistValue(kv) => {
            too_deep(depth)?;
            attributes_json(&kv.values, depth)?
        }
        // Dictionary references exist for profiles only; nothing to resolve them against here.
        Av::StringValueStrindex(_) => Value::Null,
    })
}

fn too_deep(depth: usize) -> Result<(), ItemError> {
    if depth > MAX_DATA_DEPTH {
        return Err(ItemError(format!(
            "an attribute value is nested deeper than data may be ({MAX_DATA_DEPTH} levels)"
        )));
    }
    Ok(())
}
