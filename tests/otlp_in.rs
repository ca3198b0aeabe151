//! OTLP in (docs/API.md §7) against the real binary: `POST /v1/traces` and `POST /v1/logs` in
//! protobuf and JSON, plain and gzip, over TCP and the Unix socket; each span or log record
//! replayed as one event with the mapped fields; partial success; malformed bodies refused
//! whole with OTLP's `Status`; auth; 429 with `Retry-After` under backpressure. A real
//! OpenTelemetry SDK exporter is in tests/otlp_sdk.rs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Av;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::{Span, span};
use prost::Message as _;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use veltrix::otlp::testing::{
    self, END_NS, HOST_NAME, SCOPE_NAME, SCOPE_VERSION, START_NS, json_resource, kv, log_record,
    logs, string, traces,
};

const PB: &str = "application/x-protobuf";

/// `google.rpc.Status`, as an OTLP client reads an error body.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// Span `i` of trace `trace` (span id `i + 1`), starting `i` ms after [`START_NS`]: child of
/// span 0 when `i > 0`, with the attributes and the event [`check_spans`] expects.
fn span(trace: u8, i: u8, name: &str) -> Span {
    Span {
        parent_span_id: if i > 0 { vec![1; 8] } else { Vec::new() },
        start_time_unix_nano: START_NS + u64::from(i) * 1_000_000,
        attributes: vec![
            kv("http.route", string("/users/{id}")),
            kv("http.status_code", Av::IntValue(200)),
        ],
        events: vec![span::Event {
            time_unix_nano: START_NS + 10,
            name: "cache-miss".into(),
            attributes: vec![kv("key", string("u7"))],
            ..Default::default()
        }],
        ..testing::span(trace, i + 1, name)
    }
}

/// The server of most tests here: four shards, data under `dir`.
fn server_in(dir: &Path) -> ServerConfig {
    ServerConfig::new(dir.join("data")).args(["--shards", "4"])
}

async fn post(api: &Api, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Resp {
    api.send(reqwest::Method::POST, path, headers, Some(body.into()))
        .await
}

/// An OTLP/HTTP export in protobuf.
async fn post_pb(api: &Api, path: &str, body: Vec<u8>) -> Resp {
    post(api, path, &[("content-type", PB)], body).await
}

/// An OTLP/HTTP export in JSON.
async fn post_json(api: &Api, path: &str, body: impl Into<Vec<u8>>) -> Resp {
    post(api, path, &[("content-type", JSON)], body.into()).await
}

/// `GET /metrics` has this sample (the OTLP lines shown if not).
async fn assert_metric(api: &Api, sample: &str) {
    let m = api.get("/metrics").await.text();
    assert!(
        m.contains(sample),
        "no {sample} in:\n{}",
        m.lines()
            .filter(|l| l.contains("otlp"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A 200 of an OTLP export in protobuf: no partial success.
fn assert_exported_pb(r: &Resp) {
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.header("content-type"), Some(PB), "{r}");
    check_queue_fill(r);
}

/// The `google.rpc.Status` of a protobuf error answer.
fn status_pb(r: &Resp, status: u16, code: &str, grpc: i32) -> RpcStatus {
    assert_eq!(r.status, status, "{r}");
    assert_eq!(r.header("content-type"), Some(PB), "{r}");
    let st = RpcStatus::decode(&r.body[..]).unwrap_or_else(|e| panic!("not a Status ({e}): {r}"));
    assert_eq!(st.code, grpc, "{r}");
    assert!(
        st.message.starts_with(&format!("{code}: ")),
        "the Status message starts with the Veltrix code: {st:?}"
    );
    st
}

/// A JSON error answer: Veltrix's error object with OTLP Status's `code` and `message` beside.
fn status_json(r: &Resp, status: u16, code: &str, grpc: i64) -> Value {
    assert_eq!(r.status, status, "{r}");
    assert!(r.header("content-type").unwrap_or("").starts_with(JSON));
    let v = r.json();
    assert_eq!(v["error"]["code"], code, "{r}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert_eq!(v["code"], grpc, "{r}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("{code}: "))),
        "{r}"
    );
    v
}

fn hex(b: u8, n: usize) -> String {
    format!("{b:02x}").repeat(n)
}

/// The replayed span events of `trace` with span `i` at index `i`, checked field by field.
fn check_spans(lines: &[Line], stream: &str, trace: u8, names: &[&str]) {
    assert_eq!(lines.len(), names.len(), "{stream}: {lines:?}");
    for (i, (line, name)) in lines.iter().zip(names).enumerate() {
        let v = &line.value;
        let i = i as u8;
        assert_eq!(v["stream"], stream);
        assert_eq!(v["kind"], "event");
        assert_eq!(v["entity"], hex(trace, 16), "entity is the trace id");
        assert_eq!(v["id"], format!("{}{}", hex(trace, 16), hex(i + 1, 8)));
        assert_eq!(
            v["ts"],
            (START_NS / 1_000_000 + u64::from(i)),
            "ts is the start in ms"
        );
        let d = &v["data"];
        assert_eq!(d["name"], *name);
        assert_eq!(d["span_id"], hex(i + 1, 8));
        if i > 0 {
            assert_eq!(d["parent_span_id"], hex(1, 8));
        } else {
            assert!(d.get("parent_span_id").is_none());
        }
        assert_eq!(d["kind"], "server");
        assert_eq!(
            d["start_time_unix_nano"],
            START_NS + u64::from(i) * 1_000_000
        );
        assert_eq!(d["end_time_unix_nano"], END_NS);
        assert_eq!(
            d["attributes"],
            json!({"http.route": "/users/{id}", "http.status_code": 200})
        );
        assert_eq!(d["events"][0]["name"], "cache-miss");
        assert_eq!(d["events"][0]["attributes"]["key"], "u7");
        assert_eq!(d["resource"]["service.name"], stream);
        assert_eq!(d["resource"]["host.name"], HOST_NAME);
        assert_eq!(
            d["scope"],
            json!({"name": SCOPE_NAME, "version": SCOPE_VERSION})
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_in_protobuf_json_and_gzip_replay_as_events() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_in(tmp.path())
        .uds(tmp.path().join("vx.sock"))
        .start();
    let api = &server.api;
    let names = ["GET /users/{id}", "SELECT users", "render"];
    let spans = |trace| {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| span(trace, i as u8, n))
            .collect::<Vec<_>>()
    };

    // Protobuf.
    let body = traces(Some("shop"), spans(0xa1)).encode_to_vec();
    let r = post_pb(api, "/v1/traces", body.clone()).await;
    assert_exported_pb(&r);
    let resp = ExportTraceServiceResponse::decode(&r.body[..]).unwrap();
    assert_eq!(resp.partial_success, None, "{resp:?}");
    check_spans(&api.replay_all("shop").await, "shop", 0xa1, &names);
    // The type is the span name made a valid type.
    let lines = api.replay_all("shop").await;
    assert_eq!(lines[0].value["type"], "GET__users__id_");
    assert_eq!(lines[1].value["type"], "SELECT_users");

    // An exporter's retry of the same export is acknowledged and stored once.
    let r = post_pb(api, "/v1/traces", body).await;
    assert_exported_pb(&r);
    assert_eq!(api.replay_all("shop").await.len(), 3);

    // Gzip, and over the Unix socket.
    let body = gzip(&traces(Some("shop-gz"), spans(0xb2)).encode_to_vec());
    let r = post(
        server.uds(),
        "/v1/traces",
        &[("content-type", PB), ("content-encoding", "gzip")],
        body,
    )
    .await;
    assert_exported_pb(&r);
    check_spans(&api.replay_all("shop-gz").await, "shop-gz", 0xb2, &names);

    // JSON, written as OTLP/JSON producers write it: hex ids (any case), int64 as strings,
    // enums as integers, unknown fields ignored.
    let json_spans: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let start = START_NS + i as u64 * 1_000_000;
            let mut s = json!({
                "traceId": hex(0xc3, 16).to_uppercase(),
                "spanId": hex(i as u8 + 1, 8),
                "name": n,
                "kind": 2,
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": END_NS,
                "attributes": [
                    {"key": "http.route", "value": {"stringValue": "/users/{id}"}},
                    {"key": "http.status_code", "value": {"intValue": "200"}}
                ],
                "events": [{"timeUnixNano": "10", "name": "cache-miss",
                            "attributes": [{"key": "key", "value": {"stringValue": "u7"}}]}],
                "aFieldFromTheFuture": true
            });
            if i > 0 {
                s["parentSpanId"] = json!(hex(1, 8));
            }
            s
        })
        .collect();
    let body = json!({"resourceSpans": [{
        "resource": json_resource("shop-json"),
        "scopeSpans": [{"scope": {"name": SCOPE_NAME, "version": SCOPE_VERSION}, "spans": json_spans}]
    }]});
    let r = post(
        api,
        "/v1/traces",
        &[("content-type", "application/json; charset=utf-8")],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.header("content-type"), Some(JSON));
    assert_eq!(r.json(), json!({}), "a full success has no partialSuccess");
    check_spans(
        &api.replay_all("shop-json").await,
        "shop-json",
        0xc3,
        &names,
    );

    // Counted in the ingest metrics under their own format label.
    assert_metric(api, "vx_events_ingested_total{format=\"otlp_traces\"} 9").await;
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_in_protobuf_json_and_gzip_replay_as_events() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_in(tmp.path()).start();
    let api = &server.api;
    let with_attributes = LogRecord {
        attributes: vec![kv("user.id", Av::IntValue(7))],
        ..log_record("ERROR", "db down", Some(0x5e))
    };
    let req = logs(
        Some("api"),
        vec![with_attributes, log_record("", "no trace", None)],
    );
    let r = post_pb(api, "/v1/logs", req.encode_to_vec()).await;
    assert_exported_pb(&r);
    assert_eq!(
        ExportLogsServiceResponse::decode(&r.body[..])
            .unwrap()
            .partial_success,
        None
    );
    let r = post(
        api,
        "/v1/logs",
        &[("content-type", PB), ("content-encoding", "gzip")],
        gzip(&logs(Some("api"), vec![log_record("WARN", "gz", None)]).encode_to_vec()),
    )
    .await;
    assert_exported_pb(&r);
    let body = json!({"resourceLogs": [{
        "resource": json_resource("api"),
        "scopeLogs": [{"logRecords": [{
            "observedTimeUnixNano": START_NS.to_string(),
            "severityNumber": 9,
            "body": {"kvlistValue": {"values": [{"key": "msg", "value": {"stringValue": "hi"}}]}},
            "traceId": "", "spanId": ""
        }]}]
    }]});
    let r = post_json(api, "/v1/logs", body.to_string()).await;
    assert_eq!((r.status, r.json()), (200, json!({})), "{r}");

    let lines = api.replay_all("api").await;
    let v: Vec<&Value> = lines.iter().map(|l| &l.value).collect();
    assert_eq!(v.len(), 4);
    let ms = (START_NS / 1_000_000) as i64;
    // With a trace: entity is the trace id; type the severity text.
    assert_eq!(v[0]["type"], "ERROR");
    assert_eq!(v[0]["ts"], ms);
    assert_eq!(v[0]["entity"], hex(0x5e, 16));
    assert!(v[0].get("id").is_none());
    assert_eq!(v[0]["data"]["body"], "db down");
    assert_eq!(v[0]["data"]["severity_number"], 17);
    assert_eq!(v[0]["data"]["severity_text"], "ERROR");
    assert_eq!(v[0]["data"]["span_id"], hex(1, 8));
    assert_eq!(v[0]["data"]["attributes"], json!({"user.id": 7}));
    assert_eq!(v[0]["data"]["resource"]["service.name"], "api");
    // No severity text: the severity number's name. No trace: the service is the entity.
    assert_eq!(v[1]["type"], "ERROR");
    assert_eq!(v[1]["entity"], "api");
    assert_eq!(v[2]["type"], "WARN");
    assert_eq!(v[2]["data"]["body"], "gz");
    // JSON: observed time when there is no time; a map body stays a map.
    assert_eq!(v[3]["type"], "INFO");
    assert_eq!(v[3]["ts"], ms);
    assert_eq!(v[3]["data"]["body"], json!({"msg": "hi"}));
    assert_eq!(v[3]["entity"], "api");
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_that_cannot_be_events_are_a_partial_success() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_in(tmp.path())
        .env("VX_INGEST_MAX_EVENT_BYTES", "4KiB")
        .start();
    let api = &server.api;
    let mut bad_id = span(0x11, 1, "bad");
    bad_id.trace_id = vec![1, 2, 3];
    let mut too_big = span(0x11, 2, "big");
    too_big
        .attributes
        .push(kv("blob", string(&"x".repeat(8000))));
    let req = traces(Some("partial"), vec![span(0x11, 0, "ok"), bad_id, too_big]);
    let r = post_pb(api, "/v1/traces", req.encode_to_vec()).await;
    assert_exported_pb(&r);
    let partial = ExportTraceServiceResponse::decode(&r.body[..])
        .unwrap()
        .partial_success
        .expect("partial_success");
    assert_eq!(partial.rejected_spans, 2);
    assert!(
        partial
            .error_message
            .contains("span 1 rejected: trace_id is 3 bytes"),
        "{partial:?}"
    );
    let lines = api.replay_all("partial").await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].value["data"]["name"], "ok");

    // JSON: the same answer in JSON. A stream name with a control character rejects the
    // resource's records.
    let body = json!({"resourceLogs": [
        {"resource": json_resource("a\u{7}b"),
         "scopeLogs": [{"logRecords": [{"severityText": "INFO"}, {"severityText": "INFO"}]}]},
        {"scopeLogs": [{"logRecords": [{"severityText": "INFO", "body": {"stringValue": "kept"}}]}]}
    ]});
    let r = post_json(api, "/v1/logs", body.to_string()).await;
    assert_eq!(r.status, 200, "{r}");
    let v = r.json();
    assert_eq!(v["partialSuccess"]["rejectedLogRecords"], 2, "{r}");
    assert!(
        v["partialSuccess"]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("not a valid stream name")
    );
    // No service.name: OTel's `unknown_service`.
    let lines = api.replay_all("unknown_service").await;
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].value["data"]["body"], "kept");
    assert_metric(
        api,
        "vx_events_rejected_total{reason=\"invalid_event\",format=\"otlp_logs\"} 2",
    )
    .await;
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_whole_in_otlp_shape() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_in(tmp.path())
        .env("VX_INGEST_MAX_BODY_BYTES", "64KiB")
        .env("VX_INGEST_MAX_EVENT_BYTES", "16KiB")
        .start();
    let api = &server.api;
    // A valid message cut short, and garbage.
    let good = traces(Some("never"), vec![span(1, 0, "a"), span(1, 1, "b")]).encode_to_vec();
    for body in [good[..good.len() - 3].to_vec(), vec![0xff; 40]] {
        let r = post_pb(api, "/v1/traces", body).await;
        status_pb(&r, 400, "malformed", 3);
        assert_eq!(r.header("x-vx-queue-fill"), Some("0.00"));
    }
    for body in [
        &br#"{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "xyz"}]}]}]}"#[..],
        b"{\"resourceLogs\": [",
    ] {
        let r = post_json(api, "/v1/logs", body).await;
        status_json(&r, 400, "malformed", 3);
    }
    // Content types OTLP does not use: 415, listing the two it does.
    let r = post(
        api,
        "/v1/traces",
        &[("content-type", "text/plain")],
        good.clone(),
    )
    .await;
    let v = status_json(&r, 415, "unsupported_media_type", 3);
    assert_eq!(v["error"]["supported"], json!([PB, JSON]));
    let many: Vec<Span> = (0..600).map(|i| span(2, (i % 200) as u8, "x")).collect();
    let big = traces(Some("never"), many).encode_to_vec();
    assert!(big.len() > 64 << 10);
    for (header, body, status, code) in [
        // Bad gzip.
        (("content-encoding", "gzip"), good.clone(), 400, "malformed"),
        // Over the body limit (decompressed): 413.
        (("content-encoding", "gzip"), gzip(&big), 413, "too_large"),
        // A bad X-Vx-Durability, and X-Vx-Expected-Last-Seq (not on OTLP routes): 400.
        (
            ("x-vx-durability", "eventually"),
            good.clone(),
            400,
            "bad_request",
        ),
        (
            ("x-vx-expected-last-seq", "0"),
            good.clone(),
            400,
            "bad_request",
        ),
    ] {
        let r = post(api, "/v1/traces", &[("content-type", PB), header], body).await;
        status_pb(&r, status, code, 3);
    }
    // Wrong method: 405 in OTLP shape too.
    let r = api
        .send(
            reqwest::Method::GET,
            "/v1/traces",
            &[("content-type", PB)],
            None,
        )
        .await;
    status_pb(&r, 405, "method_not_allowed", 12);
    // Nothing of any of these was stored.
    let r = api.get("/v1/streams").await;
    assert_eq!(r.json()["streams"], json!([]), "{r}");
    // And the same body, intact, is stored; a good X-Vx-Durability is honoured.
    let r = post(
        api,
        "/v1/traces",
        &[("content-type", PB), ("x-vx-durability", "fsync")],
        good,
    )
    .await;
    assert_exported_pb(&r);
    assert_eq!(api.replay_all("never").await.len(), 2);
    server.stop_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_routes_need_the_ingest_scope() {
    let tmp = tempfile::tempdir().unwrap();
    let server = server_in(tmp.path()).with_scoped_tokens(tmp.path()).start();
    let api = &server.api;
    let body = logs(Some("authz"), vec![log_record("INFO", "x", None)]).encode_to_vec();
    let r = post_pb(api, "/v1/logs", body.clone()).await;
    status_pb(&r, 401, "unauthorized", 16);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = post(
        api,
        "/v1/traces",
        &[
            ("content-type", JSON),
            ("authorization", "Bearer read-secret"),
        ],
        b"{}".to_vec(),
    )
    .await;
    status_json(&r, 403, "forbidden", 7);
    for token in ["ingest-secret", "admin-secret"] {
        let auth = format!("Bearer {token}");
        let r = post(
            api,
            "/v1/logs",
            &[("content-type", PB), ("authorization", &auth)],
            body.clone(),
        )
        .await;
        assert_exported_pb(&r);
    }
    server.stop_clean();
}

/// With a tiny queue and many concurrent exporters, some exports get 429 with `Retry-After`
/// (which OTLP exporters honour) in OTLP's shape, the rest 200; exactly the acknowledged
/// exports are stored. Floods grow until a 429 is seen, as in tests/backpressure.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_exports_gets_429_with_retry_after() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_QUEUE_CAPACITY", "20")
        .args(["--fsync", "always", "--shards", "1"])
        .start();
    let acked = Arc::new(AtomicU64::new(0));
    let mut refused = 0;
    for round in 0..3u32 {
        let tasks = 16 << round;
        let handles: Vec<_> = (0..tasks)
            .map(|task| {
                let api = server.api.clone();
                let acked = acked.clone();
                tokio::spawn(async move {
                    let mut refused = 0;
                    for j in 0..50u32 {
                        let spans: Vec<Span> = (0..10)
                            .map(|k| {
                                let mut s = span(1, k, "flood");
                                // A distinct (trace, span) per span: no duplicates.
                                s.trace_id =
                                    format!("{round:02}{task:06}{j:04}{k:04}").into_bytes();
                                s
                            })
                            .collect();
                        let body = traces(Some("flood"), spans).encode_to_vec();
                        let r = post_pb(&api, "/v1/traces", body).await;
                        match r.status {
                            200 => {
                                acked.fetch_add(10, Ordering::Relaxed);
                            }
                            429 => {
                                status_pb(&r, 429, "backpressure", 8);
                                assert!(r.header_u64("retry-after") >= 1, "{r}");
                                assert!(r.header_u64("x-vx-retry-after-ms") >= 1, "{r}");
                                refused += 1;
                            }
                            _ => panic!("only 200 or 429 under overload, got {r}"),
                        }
                    }
                    refused
                })
            })
            .collect();
        for h in handles {
            refused += h.await.unwrap();
        }
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "no 429 even under the heaviest flood");
    let stored = server.api.replay_all("flood").await.len() as u64;
    assert_eq!(
        stored,
        acked.load(Ordering::Relaxed),
        "exactly the acknowledged spans"
    );
    server.stop_clean();
}
