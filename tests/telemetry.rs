//! Tracing out (docs/API.md §7, issue 10): with `telemetry.otlp_endpoint` set, the real binary
//! exports its `request` → `batch` → `commit` spans over OTLP/HTTP protobuf to a receiver
//! this test starts, with the fields that matter; with the collector down it serves as
//! usual and still stops cleanly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};
use tempfile::TempDir;

/// What the receiver got: the resource's attributes and every span.
#[derive(Default)]
struct Received {
    resources: Vec<Vec<KeyValue>>,
    spans: Vec<Span>,
    content_types: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

async fn traces(
    State(got): State<Shared>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> (axum::http::StatusCode, Vec<u8>) {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut got = got.lock().unwrap();
    got.content_types.push(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
    );
    for rs in req.resource_spans {
        got.resources
            .push(rs.resource.map(|r| r.attributes).unwrap_or_default());
        for ss in rs.scope_spans {
            got.spans.extend(ss.spans);
        }
    }
    let answer = ExportTraceServiceResponse {
        partial_success: None,
    };
    (axum::http::StatusCode::OK, answer.encode_to_vec())
}

/// An OTLP/HTTP traces receiver on 127.0.0.1:0.
async fn receiver() -> (std::net::SocketAddr, Shared) {
    let got = Shared::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(traces))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, got)
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(&span.attributes, key) {
        Some(any_value::Value::IntValue(n)) => *n,
        other => panic!("span {} attribute {key}: {other:?}", span.name),
    }
}

fn string<'a>(span: &'a Span, key: &str) -> &'a str {
    match attr(&span.attributes, key) {
        Some(any_value::Value::StringValue(s)) => s,
        other => panic!("span {} attribute {key}: {other:?}", span.name),
    }
}

async fn post_ndjson(server: &Server, events: &[Event]) {
    let r = server
        .api
        .send(
            reqwest::Method::POST,
            "/v1/events",
            &[("content-type", "application/x-ndjson")],
            Some(ndjson(events).into()),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver() {
    let (collector, got) = receiver().await;
    let dir = TempDir::new().unwrap();
    let server = ServerConfig::new(dir.path().join("data"))
        .env("VX_TELEMETRY_OTLP_ENDPOINT", format!("http://{collector}"))
        .start();
    let events: Vec<Event> = (0..5)
        .map(|i| {
            Event::simple(
                if i % 2 == 0 { "traced-a" } else { "traced-b" },
                "t",
                1,
                None,
            )
        })
        .collect();
    for _ in 0..3 {
        post_ndjson(&server, &events).await;
    }
    // Shutdown flushes the batch processor: every span has been sent when the process exits.
    let logs = tokio::task::spawn_blocking(move || server.stop_clean())
        .await
        .unwrap();
    let got = got.lock().unwrap();
    assert!(
        got.content_types
            .iter()
            .all(|c| c == "application/x-protobuf"),
        "{:?}",
        got.content_types
    );
    let service = got
        .resources
        .iter()
        .find_map(|r| attr(r, "service.name"))
        .expect("a resource with service.name");
    assert_eq!(
        service,
        &any_value::Value::StringValue("veltrix".into()),
        "{logs}"
    );

    let named =
        |name: &str| -> Vec<&Span> { got.spans.iter().filter(|s| s.name == name).collect() };
    let requests: Vec<&Span> = named("request")
        .into_iter()
        .filter(|s| string(s, "path") == "/v1/events")
        .collect();
    let batches = named("batch");
    let commits = named("commit");
    assert_eq!(
        requests.len(),
        3,
        "spans: {:?}",
        got.spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_eq!(batches.len(), 3);
    assert!(!commits.is_empty());

    for req in &requests {
        assert_eq!(string(req, "method"), "POST");
        assert_eq!(int(req, "status"), 200);
        // SpanKind::Server.
        assert_eq!(req.kind, 2);
    }
    for batch in &batches {
        // request → batch: a child in the same trace.
        let parent = requests
            .iter()
            .find(|r| r.span_id == batch.parent_span_id)
            .expect("each batch span is a request's child");
        assert_eq!(parent.trace_id, batch.trace_id);
        assert_eq!(int(batch, "streams"), 2);
        assert_eq!(int(batch, "events"), 5);
        assert!(int(batch, "bytes") > 0);
        assert_eq!(string(batch, "durability"), "fsync");
        assert!(int(batch, "group") >= 1);
        assert!(int(batch, "fsync_us") >= 0);
        // batch → commit: the group commit that wrote it links to it.
        let commit = commits
            .iter()
            .find(|c| c.links.iter().any(|l| l.span_id == batch.span_id))
            .expect("a commit span links to each batch");
        assert!(int(commit, "requests") >= 1);
        assert!(int(commit, "events") >= 5);
        assert!(int(commit, "bytes") > 0);
        assert_eq!(
            attr(&commit.attributes, "fsync"),
            Some(&any_value::Value::BoolValue(true))
        );
        assert!(int(commit, "fsync_us") >= 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_changes_nothing_for_clients() {
    // A port nobody listens on: bind, note it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = TempDir::new().unwrap();
    let server = ServerConfig::new(dir.path().join("data"))
        .env(
            "VX_TELEMETRY_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}/"),
        )
        .start();
    post_ndjson(&server, &[Event::simple("untraced", "t", 1, None)]).await;
    tokio::task::spawn_blocking(move || server.stop_clean())
        .await
        .unwrap();
}

#[test]
fn a_bad_endpoint_is_a_start_up_error() {
    let dir = TempDir::new().unwrap();
    let (status, logs) = ServerConfig::new(dir.path().join("data"))
        .env("VX_TELEMETRY_OTLP_ENDPOINT", "collector:4318")
        .run_to_exit(START_TIMEOUT);
    let status = status.expect("exits");
    assert!(!status.success());
    assert!(logs.contains("telemetry.otlp_endpoint"), "{logs}");
}
