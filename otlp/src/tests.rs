//! Unit and property tests of OTLP decoding, mapping, cost bounds and answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::testing::{
    END_NS, HOST_NAME, SCOPE_NAME, SCOPE_VERSION, START_NS, every_value_kind,
    every_value_kind_data, json as otlp_json, kv, logs, span, string, traces,
};
use super::*;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Av;
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, KeyValueList};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::{Span, Status, span};
use proptest::prelude::*;
use serde_json::{Value, json};

const NOW: i64 = 1_700_000_000_000;

fn mapping() -> Mapping<'static> {
    Mapping {
        stream_attribute: "service.name",
        max_event_bytes: 1 << 20,
        max_batch_bytes: 64 << 20,
        now_ms: NOW,
    }
}

/// One mapped event: (stream, type, ts, entity, id, data).
type Ev = (String, String, i64, Option<String>, Option<String>, Value);

/// The batch's events.
fn events(m: &Mapped) -> Vec<Ev> {
    m.batch
        .iter()
        .map(|ev| {
            (
                ev.stream.to_string(),
                ev.ty.to_string(),
                ev.ts,
                ev.entity.map(str::to_string),
                ev.id.map(str::to_string),
                serde_json::from_str(ev.data.unwrap()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_span_maps_to_one_event() {
    let mut sp = span(0xab, 0x01, "GET /users/{id}");
    sp.parent_span_id = vec![0x02; 8];
    // Every kind of value, and a NaN: not a JSON number, so its name as a string.
    sp.attributes = every_value_kind();
    sp.attributes.push(kv("nan", Av::DoubleValue(f64::NAN)));
    sp.status = Some(Status {
        message: "boom".into(),
        code: 2,
    });
    sp.events = vec![span::Event {
        time_unix_nano: 5,
        name: "retry".into(),
        attributes: vec![kv("n", Av::IntValue(1))],
        ..Default::default()
    }];
    sp.links = vec![span::Link {
        trace_id: vec![0xcd; 16],
        span_id: vec![0x03; 8],
        ..Default::default()
    }];
    let m = map::traces(&traces(Some("checkout"), vec![sp]), &mapping()).unwrap();
    assert_eq!((m.items, m.rejected), (1, 0));
    let evs = events(&m);
    let (stream, ty, ts, entity, id, data) = &evs[0];
    let mut attributes = every_value_kind_data();
    attributes["nan"] = json!("NaN");
    assert_eq!(stream, "checkout");
    assert_eq!(ty, "GET__users__id_");
    assert_eq!(*ts, (START_NS / 1_000_000) as i64);
    let trace = "ab".repeat(16);
    assert_eq!(entity.as_deref(), Some(trace.as_str()));
    assert_eq!(id.clone(), Some(format!("{trace}{}", "01".repeat(8))));
    assert_eq!(
        data,
        &json!({
            "name": "GET /users/{id}",
            "span_id": "0101010101010101",
            "parent_span_id": "0202020202020202",
            "kind": "server",
            "start_time_unix_nano": START_NS,
            "end_time_unix_nano": END_NS,
            "duration_ns": 100_000_000,
            "status": {"code": "error", "message": "boom"},
            "attributes": attributes,
            "events": [{"name": "retry", "time_unix_nano": 5, "attributes": {"n": 1}}],
            "links": [{"trace_id": "cd".repeat(16), "span_id": "0303030303030303", "attributes": {}}],
            "resource": {"service.name": "checkout", "host.name": HOST_NAME},
            "scope": {"name": SCOPE_NAME, "version": SCOPE_VERSION}
        })
    );
}

#[test]
fn stream_attribute_is_configurable_and_defaults_to_unknown_service() {
    let req = traces(Some("checkout"), vec![span(1, 1, "a")]);
    let m = Mapping {
        stream_attribute: "host.name",
        ..mapping()
    };
    assert_eq!(events(&map::traces(&req, &m).unwrap())[0].0, "h1");
    let req = traces(None, vec![span(1, 1, "a")]);
    assert_eq!(
        events(&map::traces(&req, &mapping()).unwrap())[0].0,
        map::UNKNOWN_SERVICE
    );
    // A span without a name or a start time: type `span`, ts now, and no trace: no entity.
    let mut sp = span(0, 1, "");
    sp.trace_id.clear();
    sp.start_time_unix_nano = 0;
    let evs = events(&map::traces(&traces(Some("x"), vec![sp]), &mapping()).unwrap());
    assert_eq!((evs[0].1.as_str(), evs[0].2), ("span", NOW));
    assert_eq!((evs[0].3.clone(), evs[0].4.clone()), (None, None));
}

#[test]
fn bad_items_are_left_out_and_the_rest_is_kept() {
    let mut short_id = span(1, 2, "b");
    short_id.trace_id = vec![1; 5];
    let mut huge = span(1, 3, "c");
    huge.attributes = vec![kv("big", string(&"x".repeat(5000)))];
    let req = traces(
        Some("svc"),
        vec![span(1, 1, "a"), short_id, huge, span(1, 4, "d")],
    );
    let m = Mapping {
        max_event_bytes: 4096,
        ..mapping()
    };
    let out = map::traces(&req, &m).unwrap();
    assert_eq!((out.items, out.rejected, out.batch.len()), (4, 2, 2));
    let msg = out.error_message();
    assert!(
        msg.contains("span 1 rejected: trace_id is 5 bytes"),
        "{msg}"
    );
    assert!(msg.contains("1 more"), "{msg}");
    let types: Vec<String> = events(&out).into_iter().map(|e| e.1).collect();
    assert_eq!(types, ["a", "d"]);

    // An invalid stream name rejects every item of its resource.
    let bad = traces(Some("a\u{1}b"), vec![span(1, 1, "a")]);
    let out = map::traces(&bad, &mapping()).unwrap();
    assert_eq!((out.rejected, out.batch.len()), (1, 0));
    assert!(out.error_message().contains("not a valid stream name"));

    // Too deep: arrays nested past data's 64 levels.
    let mut v = AnyValue {
        value: Some(string("x")),
    };
    for _ in 0..80 {
        v = AnyValue {
            value: Some(Av::ArrayValue(ArrayValue { values: vec![v] })),
        };
    }
    let mut deep = span(1, 1, "deep");
    deep.attributes = vec![KeyValue {
        key: "d".into(),
        value: Some(v),
        ..Default::default()
    }];
    let out = map::traces(&traces(Some("s"), vec![deep]), &mapping()).unwrap();
    assert_eq!(out.rejected, 1);
    assert!(out.error_message().contains("nested deeper"));
}

#[test]
fn a_request_over_the_body_limit_in_events_is_refused_whole() {
    let spans = (0..50).map(|i| span(1, i, "a")).collect();
    let m = Mapping {
        max_batch_bytes: 4000,
        ..mapping()
    };
    let e = map::traces(&traces(Some("s"), spans), &m).unwrap_err();
    assert_eq!(e.class, vx_proto::ErrorClass::TooLarge);
    assert_eq!(e.limit.as_deref(), Some("ingest.max_body_bytes"));
}

#[test]
fn log_records_map_type_time_and_entity() {
    let with_text = LogRecord {
        time_unix_nano: 2_000_000,
        observed_time_unix_nano: 3_000_000,
        severity_number: 9,
        severity_text: "Info level".into(),
        body: Some(AnyValue {
            value: Some(string("hello")),
        }),
        trace_id: vec![0x0f; 16],
        span_id: vec![0x01; 8],
        attributes: vec![kv("k", string("v"))],
        ..Default::default()
    };
    let by_number = LogRecord {
        observed_time_unix_nano: 3_000_000,
        severity_number: 13,
        body: Some(AnyValue {
            value: Some(Av::KvlistValue(KeyValueList {
                values: vec![kv("a", Av::IntValue(1))],
            })),
        }),
        ..Default::default()
    };
    let bare = LogRecord::default();
    let m = map::logs(
        &logs(Some("api"), vec![with_text, by_number, bare]),
        &mapping(),
    )
    .unwrap();
    assert_eq!((m.items, m.rejected), (3, 0));
    let evs = events(&m);
    assert_eq!(evs[0].1, "Info_level");
    assert_eq!(evs[0].2, 2);
    assert_eq!(evs[0].3.as_deref(), Some("0f".repeat(16).as_str()));
    assert_eq!(evs[0].4, None, "logs have no id");
    assert_eq!(evs[0].5["body"], "hello");
    assert_eq!(evs[0].5["severity_number"], 9);
    assert_eq!(evs[0].5["severity_text"], "Info level");
    assert_eq!(evs[0].5["span_id"], "0101010101010101");
    assert_eq!(evs[0].5["attributes"], json!({"k": "v"}));
    assert_eq!(evs[1].1, "WARN");
    assert_eq!(evs[1].2, 3, "observed time when there is no time");
    assert_eq!(
        evs[1].3.as_deref(),
        Some("api"),
        "span-less logs: the service"
    );
    assert_eq!(evs[1].5["body"], json!({"a": 1}));
    assert_eq!((evs[2].1.as_str(), evs[2].2), ("log", NOW));
}

/// OTLP/JSON as the spec writes it: hex ids, int64 as strings or numbers, enums as integers,
/// lowerCamelCase names, unknown fields ignored.
#[test]
fn otlp_json_is_decoded_as_the_spec_says() {
    let body = json!({
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]},
            "someFutureField": {"x": 1},
            "scopeSpans": [{
                "scope": {"name": "s"},
                "spans": [{
                    "traceId": "5B8EFFF798038103D269B633813FC60C",
                    "spanId": "eee19b7ec3c1b174",
                    "name": "a",
                    "kind": 3,
                    "startTimeUnixNano": "1544712660000000000",
                    "endTimeUnixNano": 1544712661000000000u64,
                    "attributes": [
                        {"key": "s", "value": {"intValue": "42"}},
                        {"key": "n", "value": {"intValue": 7}},
                        {"key": "b", "value": {"bytesValue": "AQID"}}
                    ],
                    "status": {"code": 1}
                }]
            }]
        }]
    })
    .to_string();
    let m = decode_and_map(Signal::Traces, Wire::Json, body.as_bytes(), &mapping()).unwrap();
    let evs = events(&m);
    assert_eq!(evs.len(), 1);
    let (stream, _, ts, entity, _, data) = &evs[0];
    assert_eq!(stream, "js");
    assert_eq!(*ts, 1_544_712_660_000);
    assert_eq!(entity.as_deref(), Some("5b8efff798038103d269b633813fc60c"));
    assert_eq!(data["kind"], "client");
    assert_eq!(data["duration_ns"], 1_000_000_000u64);
    assert_eq!(data["status"]["code"], "ok");
    assert_eq!(data["attributes"], json!({"s": 42, "n": 7, "b": "AQID"}));

    // Empty export: no events. Not JSON, or ids that are not hex: malformed.
    let m = decode_and_map(Signal::Logs, Wire::Json, b"{}", &mapping()).unwrap();
    assert_eq!(m.items, 0);
    for bad in [
        &b""[..],
        b"[",
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#,
    ] {
        let e = decode_and_map(Signal::Traces, Wire::Json, bad, &mapping()).unwrap_err();
        assert_eq!(e.class, vx_proto::ErrorClass::Malformed, "{bad:?}");
    }
}

#[test]
fn protobuf_round_trip_and_malformed_bodies() {
    let req = traces(Some("p"), vec![span(7, 7, "x"), span(7, 8, "y")]);
    let bytes = prost::Message::encode_to_vec(&req);
    let m = decode_and_map(Signal::Traces, Wire::Protobuf, &bytes, &mapping()).unwrap();
    assert_eq!((m.items, m.batch.len()), (2, 2));
    for cut in [1, bytes.len() / 2, bytes.len() - 1] {
        let e = decoded_cost(Signal::Traces, Wire::Protobuf, &bytes[..cut])
            .err()
            .or_else(|| {
                decode_and_map(Signal::Traces, Wire::Protobuf, &bytes[..cut], &mapping()).err()
            });
        assert!(e.is_some(), "a body cut at {cut} must be refused");
    }
}

#[test]
fn the_cost_bound_covers_empty_message_bombs() {
    // 100k empty spans: 200 kB on the wire, tens of MB once decoded.
    let spans = vec![Span::default(); 100_000];
    let bytes = prost::Message::encode_to_vec(&traces(None, spans));
    let cost = cost::protobuf(Signal::Traces, &bytes).unwrap();
    let span_size = std::mem::size_of::<Span>() as u64;
    assert!(cost >= 100_000 * span_size, "{cost}");
    assert!(bytes.len() < 300_000);
    // JSON: one struct per `{`.
    assert!(cost::json(b"[{},{},{}]") >= 3 * span_size);
    // Groups, bad wire types and truncation are refused before prost sees them.
    assert!(cost::protobuf(Signal::Traces, &[0x0b]).is_err());
    assert!(cost::protobuf(Signal::Traces, &[0x0a, 0x05, 0x00]).is_err());
    assert!(cost::protobuf(Signal::Logs, &[0x80]).is_err());
}

#[test]
fn answers_in_the_request_encoding() {
    let mut m = Mapped {
        items: 3,
        rejected: 2,
        first_rejection: Some("span 0 rejected: x".into()),
        ..Default::default()
    };
    let body = success_body(Signal::Traces, Wire::Json, &m);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["partialSuccess"]["rejectedSpans"], 2);
    assert_eq!(
        v["partialSuccess"]["errorMessage"],
        "span 0 rejected: x (and 1 more rejected)"
    );
    let pb = success_body(Signal::Logs, Wire::Protobuf, &m);
    let resp: ExportLogsServiceResponse = prost::Message::decode(&pb[..]).unwrap();
    assert_eq!(resp.partial_success.unwrap().rejected_log_records, 2);
    m.rejected = 0;
    m.first_rejection = None;
    assert_eq!(success_body(Signal::Logs, Wire::Json, &m), b"{}");
    assert!(success_body(Signal::Traces, Wire::Protobuf, &m).is_empty());
}

#[test]
fn content_types() {
    assert_eq!(
        Wire::for_content_type(Some("application/x-protobuf")),
        Some(Wire::Protobuf)
    );
    assert_eq!(
        Wire::for_content_type(Some("Application/JSON; charset=utf-8")),
        Some(Wire::Json)
    );
    assert_eq!(Wire::for_content_type(Some("application/protobuf")), None);
    assert_eq!(Wire::for_content_type(None), None);
}

fn any_value() -> impl Strategy<Value = AnyValue> {
    let leaf = prop_oneof![
        ".{0,12}".prop_map(Av::StringValue),
        any::<bool>().prop_map(Av::BoolValue),
        any::<i64>().prop_map(Av::IntValue),
        any::<f64>().prop_map(Av::DoubleValue),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Av::BytesValue),
    ]
    .prop_map(|v| AnyValue { value: Some(v) });
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|values| Av::ArrayValue(ArrayValue { values })),
            proptest::collection::vec(("[a-z.]{1,6}", inner), 0..4).prop_map(
                |kvs| Av::KvlistValue(KeyValueList {
                    values: key_values(kvs)
                })
            ),
        ]
        .prop_map(|v| AnyValue { value: Some(v) })
    })
}

fn attrs() -> impl Strategy<Value = Vec<KeyValue>> {
    proptest::collection::vec(("[a-z.]{1,8}", any_value()), 0..4).prop_map(key_values)
}

/// Drawn keys and values as attributes (a value may be empty, which `kv` cannot make).
fn key_values(kvs: Vec<(String, AnyValue)>) -> Vec<KeyValue> {
    kvs.into_iter()
        .map(|(key, value)| KeyValue {
            key,
            value: Some(value),
            ..Default::default()
        })
        .collect()
}

fn any_span() -> impl Strategy<Value = Span> {
    (
        proptest::array::uniform16(any::<u8>()),
        proptest::array::uniform8(any::<u8>()),
        ".{0,40}",
        0i32..8,
        any::<u64>(),
        any::<u64>(),
        attrs(),
    )
        .prop_map(|(t, sid, name, kind, start, end, attributes)| Span {
            trace_id: t.to_vec(),
            span_id: sid.to_vec(),
            name,
            kind,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            ..Default::default()
        })
}

fn any_log() -> impl Strategy<Value = LogRecord> {
    (
        any::<u64>(),
        0i32..30,
        ".{0,10}",
        proptest::option::of(any_value()),
        attrs(),
    )
        .prop_map(|(time, sev, text, body, attributes)| LogRecord {
            time_unix_nano: time,
            severity_number: sev,
            severity_text: text,
            body,
            attributes,
            ..Default::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary bytes, in either encoding and for either signal, never panic: a cost, then
    /// a batch or an error.
    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for signal in [Signal::Traces, Signal::Logs] {
            for wire in [Wire::Protobuf, Wire::Json] {
                if decoded_cost(signal, wire, &body).is_ok() {
                    let _ = decode_and_map(signal, wire, &body, &mapping());
                }
            }
        }
    }

    /// Every valid span becomes exactly one event, in both encodings, with the same events.
    #[test]
    fn valid_spans_map_one_to_one(
        service in "[a-z]{1,10}",
        spans in proptest::collection::vec(any_span(), 0..12),
    ) {
        let req = traces(Some(&service), spans.clone());
        let pb = prost::Message::encode_to_vec(&req);
        prop_assert!(decoded_cost(Signal::Traces, Wire::Protobuf, &pb).is_ok());
        let m = decode_and_map(Signal::Traces, Wire::Protobuf, &pb, &mapping()).unwrap();
        prop_assert_eq!(m.items, spans.len() as u64);
        prop_assert_eq!(m.rejected, 0);
        prop_assert_eq!(m.batch.len(), spans.len());
        let json = otlp_json(&req);
        let mj = decode_and_map(Signal::Traces, Wire::Json, &json, &mapping()).unwrap();
        prop_assert_eq!(events(&m), events(&mj));
        for (ev, sp) in events(&m).iter().zip(&spans) {
            prop_assert_eq!(&ev.0, &service);
            prop_assert!(vx_proto::rules::valid_type(&ev.1));
            prop_assert_eq!(&ev.5["name"], &Value::from(sp.name.as_str()));
        }
    }

    /// Every log record becomes exactly one event.
    #[test]
    fn valid_logs_map_one_to_one(records in proptest::collection::vec(any_log(), 0..12)) {
        let req = logs(Some("svc"), records.clone());
        let pb = prost::Message::encode_to_vec(&req);
        let m = decode_and_map(Signal::Logs, Wire::Protobuf, &pb, &mapping()).unwrap();
        prop_assert_eq!((m.items, m.rejected), (records.len() as u64, 0));
        prop_assert_eq!(m.batch.len(), records.len());
    }
}

/// What the protobuf JSON mapping allows and the generated serde derive alone refuses
/// (`json::normalize`): nulls as defaults, omitted defaults, 32-bit ints and doubles as strings.
#[test]
fn otlp_json_defaults_nulls_and_numbers_as_strings() {
    let logs = |record: &str| {
        format!(
            r#"{{"resourceLogs":[{{"resource":{{"attributes":null}},"scopeLogs":[{{"scope":null,"logRecords":[{record}]}}]}}]}}"#
        )
    };
    for (record, key, want) in [
        (r#"{"body":{"arrayValue":{}}}"#, "body", json!([])),
        (r#"{"body":{"kvlistValue":{}}}"#, "body", json!({})),
        (r#"{"body":{"doubleValue":"1.5"}}"#, "body", json!(1.5)),
        (r#"{"body":{"doubleValue":"NaN"}}"#, "body", json!("NaN")),
        (
            r#"{"body":{"doubleValue":"-Infinity"}}"#,
            "body",
            json!("-Infinity"),
        ),
        (
            r#"{"body":{"kvlistValue":{"values":[{"value":{"intValue":"1"}}]}}}"#,
            "body",
            json!({"": 1}),
        ),
        (
            r#"{"attributes":[{"value":{"boolValue":true}}]}"#,
            "attributes",
            json!({"": true}),
        ),
        (
            r#"{"attributes":null,"severityNumber":"9"}"#,
            "severity_number",
            json!(9),
        ),
        (
            r#"{"flags":"1","traceId":null,"timeUnixNano":null}"#,
            "flags",
            json!(1),
        ),
    ] {
        let body = logs(record);
        let m = decode_and_map(Signal::Logs, Wire::Json, body.as_bytes(), &mapping())
            .unwrap_or_else(|e| panic!("{record}: {e}"));
        let evs = events(&m);
        assert_eq!(evs.len(), 1, "{record}");
        assert_eq!(evs[0].5[key], want, "{record}");
    }
    // Spans: enum and counts as strings, null lists.
    let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","kind":"2","droppedEventsCount":"3","events":null,"links":[],"status":{"code":"2","message":null}}]}]}]}"#;
    let m = decode_and_map(Signal::Traces, Wire::Json, body.as_bytes(), &mapping()).unwrap();
    let d = &events(&m)[0].5;
    assert_eq!(d["kind"], "server");
    assert_eq!(d["dropped_events_count"], 3);
    assert_eq!(d["status"], json!({"code": "error"}));
    // Still refused: what no JSON mapping allows.
    for bad in [
        r#"{"body":{"doubleValue":"lots"}}"#,
        r#"{"severityNumber":"nine"}"#,
        r#"{"traceId":"not hex"}"#,
    ] {
        let e =
            decode_and_map(Signal::Logs, Wire::Json, logs(bad).as_bytes(), &mapping()).unwrap_err();
        assert_eq!(e.class, vx_proto::ErrorClass::Malformed, "{bad}");
    }
}

/// serde's derive reads a message from an array (its fields by position); the JSON mapping
/// has only objects for messages, so an array where a message goes is 400 `malformed`, and
/// says where: the body, a message field, an item of a repeated field. Each body here would
/// decode without the check.
#[test]
fn otlp_json_refuses_arrays_where_messages_go() {
    let record = r#"{"body":{"stringValue":"x"}}"#;
    let logs = |resource: &str, records: &str| {
        format!(
            r#"{{"resourceLogs":[{{"resource":{resource},"scopeLogs":[{{"logRecords":{records}}}]}}]}}"#
        )
    };
    let good = logs("{}", &format!("[{record}]"));
    let m = decode_and_map(Signal::Logs, Wire::Json, good.as_bytes(), &mapping()).unwrap();
    assert_eq!(events(&m).len(), 1);
    for (body, says) in [
        (
            r#"[[{"scopeLogs":[]}]]"#.to_string(),
            "the body is an array",
        ),
        (
            logs("[[]]", &format!("[{record}]")),
            "`resource` is an array",
        ),
        (
            logs("{}", &format!("[[{record}]]")),
            "an item of `logRecords` is an array",
        ),
        (
            logs("{}", r#"[{"body":{"kvlistValue":[[]]}}]"#),
            "`kvlistValue` is an array",
        ),
        ("5".to_string(), "the body is not an object"),
    ] {
        let e =
            decode_and_map(Signal::Logs, Wire::Json, body.as_bytes(), &mapping()).expect_err(&body);
        assert_eq!(e.class, vx_proto::ErrorClass::Malformed, "{body}");
        assert!(e.message.contains(says), "{body}: {}", e.message);
    }
    // Strings in a repeated field of strings are fine.
    let traces = r#"{"resourceSpans":[{"resource":{"entityRefs":[{"type":"service","idKeys":["service.name"]}]},"scopeSpans":[]}]}"#;
    decode_and_map(Signal::Traces, Wire::Json, traces.as_bytes(), &mapping()).unwrap();
}
