//! Test support, compiled only with the `testing` feature: the OTLP requests the tests send,
//! built in one place. The unit tests of this module's parent, the integration tests
//! (tests/otlp_in.rs) and the fuzz crate's `otlp` seeds each had their own copy of these
//! builders, with their own resource, scope and span; here they share one.
//!
//! A cargo feature rather than an always-compiled module, as `vx_proto::testing` is: the
//! integration tests and the fuzz crate cannot see `#[cfg(test)]` items of the library, and
//! a feature keeps these builders out of every build but theirs. The package enables it for
//! its own tests through a dev-dependency on itself; the fuzz crate through its dependency.
//!
//! What it owns: an export of either signal ([`traces`], [`logs`]) from one [`resource`] and
//! one scope ([`SCOPE_NAME`], [`SCOPE_VERSION`]), a plain [`span`] and [`log_record`], the
//! [`kv`] of an attribute, attributes of [`every_value_kind`] with the `data` they map to,
//! and the OTLP/JSON form of a message ([`json`], [`json_resource`]). The tests keep what is
//! their own: the fields they set on top of these, hand-written OTLP/JSON as producers write
//! it, and the assertions.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Av;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span};
use serde_json::{Value, json};

/// The start of a [`span`] and the time of a [`log_record`]: 2024-11-19T07:06:40.123456789Z.
pub const START_NS: u64 = 1_732_000_000_123_456_789;
/// The end of a [`span`]: 100 ms after its start.
pub const END_NS: u64 = START_NS + 100_000_000;
/// The `host.name` of every [`resource`]: a second string attribute, for the tests that name
/// the stream by another attribute than `service.name`.
pub const HOST_NAME: &str = "h1";
/// The instrumentation scope of every export.
pub const SCOPE_NAME: &str = "shop.http";
pub const SCOPE_VERSION: &str = "2.1.0";

/// An attribute.
pub fn kv(key: &str, v: Av) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// A string attribute value.
pub fn string(v: &str) -> Av {
    Av::StringValue(v.into())
}

/// A resource with `service.name` = `service` (none without one) and `host.name`.
pub fn resource(service: Option<&str>) -> Resource {
    let named = service.map(|s| kv("service.name", string(s)));
    Resource {
        attributes: named
            .into_iter()
            .chain([kv("host.name", string(HOST_NAME))])
            .collect(),
        ..Default::default()
    }
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: SCOPE_NAME.into(),
        version: SCOPE_VERSION.into(),
        ..Default::default()
    })
}

/// A trace export: `spans` in one scope of one [`resource`].
pub fn traces(service: Option<&str>, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(service)),
            scope_spans: vec![ScopeSpans {
                scope: scope(),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A logs export: `records` in one scope of one [`resource`].
pub fn logs(service: Option<&str>, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource(service)),
            scope_logs: vec![ScopeLogs {
                scope: scope(),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A server span of trace `[trace; 16]` with id `[span_id; 8]`, from [`START_NS`] to
/// [`END_NS`]; no parent, attributes, events or links.
pub fn span(trace: u8, span_id: u8, name: &str) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![span_id; 8],
        name: name.into(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: START_NS,
        end_time_unix_nano: END_NS,
        ..Default::default()
    }
}

/// An `ERROR` (17) log record at [`START_NS`], observed 5 ns later, with a string body and,
/// given a trace, trace id `[trace; 16]` and span id `[1; 8]`; no attributes.
pub fn log_record(severity_text: &str, body: &str, trace: Option<u8>) -> LogRecord {
    LogRecord {
        time_unix_nano: START_NS,
        observed_time_unix_nano: START_NS + 5,
        severity_number: SeverityNumber::Error as i32,
        severity_text: severity_text.into(),
        body: Some(AnyValue {
            value: Some(string(body)),
        }),
        trace_id: trace.map(|t| vec![t; 16]).unwrap_or_default(),
        span_id: trace.map(|_| vec![1; 8]).unwrap_or_default(),
        ..Default::default()
    }
}

/// One attribute of each kind of value (string, int, double, bool, bytes, array, map).
pub fn every_value_kind() -> Vec<KeyValue> {
    vec![
        kv("s", string("x")),
        kv("i", Av::IntValue(-7)),
        kv("d", Av::DoubleValue(0.5)),
        kv("b", Av::BoolValue(true)),
        kv("y", Av::BytesValue(vec![1, 2, 3])),
        kv(
            "a",
            Av::ArrayValue(ArrayValue {
                values: vec![AnyValue {
                    value: Some(Av::IntValue(1)),
                }],
            }),
        ),
        kv(
            "m",
            Av::KvlistValue(KeyValueList {
                values: vec![kv("k", string("v"))],
            }),
        ),
    ]
}

/// The `attributes` of an event's `data` from [`every_value_kind`] (bytes as base64).
pub fn every_value_kind_data() -> Value {
    json!({"s": "x", "i": -7, "d": 0.5, "b": true, "y": "AQID", "a": [1], "m": {"k": "v"}})
}

/// `msg` in OTLP/JSON, by opentelemetry-proto's serde mapping (hex ids, lowerCamelCase).
pub fn json(msg: &impl serde::Serialize) -> Vec<u8> {
    match serde_json::to_vec(msg) {
        Ok(body) => body,
        Err(e) => panic!("an OTLP message as JSON: {e}"),
    }
}

/// The OTLP/JSON form of [`resource`]`(Some(service))`, for hand-written JSON exports.
pub fn json_resource(service: &str) -> Value {
    match serde_json::to_value(resource(Some(service))) {
        Ok(v) => v,
        Err(e) => panic!("an OTLP resource as JSON: {e}"),
    }
}
