#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::AppError;
use super::output::{Output, negotiate};
use crate::config::{Config, FsyncSetting, Scope, TokenDecl};
use crate::error::retry_after_secs;
use crate::state::AppState;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::response::IntoResponse;
use serde_json::Value;
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn call(state: &AppState, req: Request<Body>) -> Answer {
    let resp = super::app(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

fn get(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).unwrap()
}

fn post(content_type: Option<&str>, body: &str) -> Request<Body> {
    let mut b = Request::post("/v1/events");
    if let Some(ct) = content_type {
        b = b.header("content-type", ct);
    }
    b.body(Body::from(body.to_string())).unwrap()
}

/// Ready, but with no store: for everything that is decided before storage is touched.
fn ready_without_store() -> AppState {
    let state = AppState::new(&Config::default());
    state.force_ready_without_router();
    state
}

/// Ready over a real store in a temporary directory.
fn ready_with_store(dir: &tempfile::TempDir, edit: impl FnOnce(&mut Config)) -> AppState {
    let mut cfg = Config::default();
    cfg.storage.data_dir = dir.path().join("data");
    cfg.storage.shards = Some(4);
    cfg.storage.fsync = FsyncSetting::Never;
    edit(&mut cfg);
    let state = AppState::new(&cfg);
    let mut storage = cfg.storage_config();
    storage.observer = Some(state.metrics().observer());
    let (store, _) = vx_storage::Store::open(storage).unwrap();
    state.set_ready(vx_router::Router::new(
        cfg.admission_config(store.shards()),
        store,
    ));
    state
}

#[tokio::test]
async fn unknown_route_and_wrong_method_use_the_error_shape() {
    let state = ready_without_store();
    let a = call(&state, get("/v2/nothing")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.code(), "not_found");
    assert!(a.json()["error"]["message"].is_string());
    assert_eq!(a.header("content-type"), Some("application/json"));

    let a = call(
        &state,
        Request::builder()
            .method(Method::DELETE)
            .uri("/v1/streams")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(a.code(), "method_not_allowed");
}

#[tokio::test]
async fn starting_answers_not_ready_but_health_and_metrics_work() {
    let state = AppState::new(&Config::default());
    let a = call(&state, get("/v1/streams")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.code(), "not_ready");
    assert_eq!(a.header("retry-after"), Some("1"));

    let a = call(&state, post(Some("application/json"), "{}")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.header("x-vx-queue-fill"), Some("0.00"));

    assert_eq!(call(&state, get("/healthz")).await.status, StatusCode::OK);
    let a = call(&state, get("/readyz")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.code(), "not_ready");
    assert_eq!(call(&state, get("/metrics")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn draining_closes_connections() {
    let state = ready_without_store();
    state.begin_drain();
    let a = call(&state, get("/v1/streams")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(a.code(), "not_ready");
    assert_eq!(a.header("connection"), Some("close"));
    assert_eq!(
        call(&state, get("/readyz")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn ingest_header_errors() {
    let state = ready_without_store();
    for ct in [None, Some("text/csv"), Some("application/xml")] {
        let a = call(&state, post(ct, "{}")).await;
        assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        assert_eq!(a.code(), "unsupported_media_type");
        let supported = a.json()["error"]["supported"].clone();
        assert!(
            supported
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == "application/x-ndjson"),
            "{supported}"
        );
        assert_eq!(a.header("x-vx-queue-fill"), Some("0.00"));
    }

    let req = Request::post("/v1/events")
        .header("content-type", "application/json")
        .header("content-encoding", "br")
        .body(Body::from("{}"))
        .unwrap();
    let a = call(&state, req).await;
    assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(a.header("x-vx-queue-fill"), Some("0.00"));

    for (name, value) in [
        ("x-vx-durability", "replicated"),
        ("x-vx-durability", "always"),
        ("x-vx-expected-last-seq", "-1"),
        ("x-vx-expected-last-seq", "ten"),
    ] {
        let req = Request::post("/v1/events")
            .header("content-type", "application/json")
            .header(name, value)
            .body(Body::from("{}"))
            .unwrap();
        let a = call(&state, req).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{name}: {value}");
        assert_eq!(a.code(), "bad_request");
        assert_eq!(a.header("x-vx-queue-fill"), Some("0.00"));
    }
}

#[tokio::test]
async fn replay_request_errors() {
    let state = ready_without_store();
    for uri in [
        "/v1/streams/s/events?limit=100001",
        "/v1/streams/s/events?limit=0",
        "/v1/streams/s/events?from=-3",
        "/v1/streams/s/events?since=yesterday",
        "/v1/streams/s/events?types=a,b%20c",
        "/v1/streams/s/events?follow=yes",
        "/v1/streams/s/events?pace=original&speed=0",
        "/v1/streams/s/events?from=1&from=2",
        "/v1/streams?limit=10001",
        "/v1/streams?bogus=1",
    ] {
        let a = call(&state, get(uri)).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(a.code(), "bad_request", "{uri}");
    }
    let req = Request::get("/v1/streams/s/events")
        .header("accept", "text/csv")
        .body(Body::empty())
        .unwrap();
    let a = call(&state, req).await;
    assert_eq!(a.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(a.code(), "not_acceptable");
    assert!(a.json()["error"]["supported"].is_array());
}

#[test]
fn accept_negotiation() {
    let with = |v: Option<&str>| {
        let mut h = HeaderMap::new();
        if let Some(v) = v {
            h.insert("accept", v.parse().unwrap());
        }
        negotiate(&h).map_err(|e| e.code.as_str())
    };
    assert_eq!(with(None), Ok(Output::Ndjson));
    assert_eq!(with(Some("*/*")), Ok(Output::Ndjson));
    assert_eq!(with(Some("application/x-ndjson")), Ok(Output::Ndjson));
    assert_eq!(with(Some("application/json")), Ok(Output::JsonArray));
    assert_eq!(
        with(Some("text/html, application/json;q=0.9, */*;q=0.1")),
        Ok(Output::JsonArray)
    );
    assert_eq!(
        with(Some("application/json;q=0.5, application/x-ndjson")),
        Ok(Output::Ndjson)
    );
    assert_eq!(with(Some("application/json;q=0")), Err("not_acceptable"));
    assert_eq!(with(Some("application/yaml")), Ok(Output::Yaml));
    assert_eq!(with(Some("text/yaml;q=0.8")), Ok(Output::Yaml));
    assert_eq!(with(Some("application/x-yaml")), Ok(Output::Yaml));
    assert_eq!(with(Some("text/csv")), Err("not_acceptable"));
}

#[test]
fn input_and_write_errors_map_once() {
    let e = vx_proto::InputError::too_large("ingest.max_event_bytes", 1024, "event too large")
        .at_index(3);
    let a = AppError::from(e);
    assert_eq!(
        (a.status(), a.code.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large")
    );
    assert_eq!(a.details.index, Some(3));
    assert_eq!(a.details.limit.as_deref(), Some("ingest.max_event_bytes"));
    assert_eq!(a.details.max, Some(1024));

    let a = AppError::from(vx_proto::InputError::invalid("ts", "bad ts").at_line(2, 7));
    assert_eq!(
        (a.status(), a.code.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_event")
    );
    assert_eq!((a.details.line, a.details.column), (Some(2), Some(7)));
    assert_eq!(a.details.field.as_deref(), Some("ts"));
    let a = AppError::from(vx_proto::InputError::malformed("eh"));
    assert_eq!(
        (a.status(), a.code.as_str()),
        (StatusCode::BAD_REQUEST, "malformed")
    );

    use vx_storage::WriteError;
    let a = AppError::from(WriteError::Conflict {
        stream: "s".into(),
        expected: 1,
        last_seq: 9,
    });
    assert_eq!(
        (a.status(), a.code.as_str(), a.details.last_seq),
        (StatusCode::CONFLICT, "conflict", Some(9))
    );
    for e in [
        WriteError::StorageFull(vx_storage::IoFailure::new(
            "disk",
            std::io::ErrorKind::StorageFull.into(),
        )),
        WriteError::Poisoned(
            vx_storage::IoFailure::new("fsync", std::io::ErrorKind::Other.into()).into(),
        ),
        WriteError::TooManyStreams { max: 5 },
    ] {
        let a = AppError::from(e);
        assert_eq!(
            (a.status(), a.code.as_str()),
            (StatusCode::INSUFFICIENT_STORAGE, "storage_full")
        );
    }
    let resp = AppError::from(WriteError::ShuttingDown).into_response();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn backpressure_headers_and_body() {
    let resp = AppError::backpressure(1500, "shard 3 is full").into_response();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "2");
    assert_eq!(resp.headers()["x-vx-retry-after-ms"], "1500");
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "backpressure");
    assert_eq!(v["error"]["message"], "shard 3 is full");
    assert_eq!(retry_after_secs(0), 1);
    assert_eq!(retry_after_secs(1), 1);
    assert_eq!(retry_after_secs(1000), 1);
    assert_eq!(retry_after_secs(1001), 2);
}

/// A ready state (no engine) with one token per `(token, scope)`.
fn ready_with_tokens(tokens: &[(&str, Scope)]) -> AppState {
    let mut cfg = Config::default();
    cfg.auth.tokens = tokens
        .iter()
        .map(|(token, scope)| TokenDecl {
            token: (*token).into(),
            scopes: vec![*scope],
        })
        .collect();
    let state = AppState::new(&cfg);
    state.force_ready_without_router();
    state
}

#[tokio::test]
async fn auth_scopes() {
    let state = ready_with_tokens(&[("reader", Scope::Read), ("root", Scope::Admin)]);
    let with = |uri: &str, token: Option<&str>| {
        let mut b = Request::get(uri);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(Body::empty()).unwrap()
    };
    assert_eq!(
        call(&state, with("/healthz", None)).await.status,
        StatusCode::OK
    );
    let a = call(&state, with("/metrics", None)).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized".into())
    );
    let a = call(&state, with("/metrics", Some("wrong"))).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(&state, with("/metrics", Some("reader"))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&state, with("/metrics", Some("root"))).await.status,
        StatusCode::OK
    );

    let req = Request::post("/v1/events")
        .header("authorization", "Bearer reader")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let a = call(&state, req).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    assert_eq!(a.header("x-vx-queue-fill"), Some("0.00"));
}

/// The status page and its JSON answer while starting (an operator can watch recovery), with
/// `null` for what needs the store; the API does not.
#[tokio::test]
async fn status_answers_while_starting() {
    let state = AppState::new(&Config::default());
    let a = call(&state, get("/v1/status")).await;
    assert_eq!(a.status, StatusCode::OK);
    let v = a.json();
    assert_eq!(
        (v["phase"].as_str(), v["ready"].as_bool()),
        (Some("starting"), Some(false))
    );
    assert!(v["queues"].is_null() && v["streams"].is_null());
    assert_eq!(call(&state, get("/")).await.status, StatusCode::OK);
    assert_eq!(
        call(&state, get("/ui/app.css")).await.status,
        StatusCode::OK
    );
    let a = call(&state, get("/v1/streams")).await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    state.begin_drain();
    let a = call(&state, get("/v1/status")).await;
    assert_eq!(a.json()["phase"], "draining");
}

/// The status page's routes challenge with Basic (a browser prompts), the API keeps Bearer;
/// Basic credentials carry the token as the password and pass the same scope check.
#[tokio::test]
async fn status_page_auth_basic_and_bearer() {
    let state = ready_with_tokens(&[("reader", Scope::Read), ("writer", Scope::Ingest)]);
    let with = |uri: &str, auth: Option<&str>| {
        let mut b = Request::get(uri);
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        b.body(Body::empty()).unwrap()
    };
    for page in ["/", "/ui/app.js", "/ui/app.css"] {
        let a = call(&state, with(page, None)).await;
        assert_eq!(
            (a.status, a.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized".into())
        );
        assert_eq!(
            a.header("www-authenticate"),
            Some(r#"Basic realm="veltrix", charset="UTF-8""#),
            "{page}"
        );
    }
    let a = call(&state, with("/v1/status", None)).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert_eq!(a.header("www-authenticate"), Some("Bearer"));
    // base64("anyone:reader"), base64("x:writer"), base64("x:nope").
    let (reader, writer, unknown) = (
        "Basic YW55b25lOnJlYWRlcg==",
        "Basic eDp3cml0ZXI=",
        "Basic eDpub3Bl",
    );
    let a = call(&state, with("/", Some(reader))).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(a.header("content-security-policy").is_some());
    let a = call(&state, with("/", Some(writer))).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    let a = call(&state, with("/", Some(unknown))).await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert!(
        a.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Basic "))
    );
    for auth in [reader, "Bearer reader"] {
        let a = call(&state, with("/v1/status", Some(auth))).await;
        assert_eq!(a.status, StatusCode::OK, "{auth}");
        let v = a.json();
        // No store: the parts that need one are null, the rest is there.
        assert_eq!(v["phase"], "ready");
        assert!(v["queues"].is_null() && v["streams"].is_null() && v["log"].is_null());
        assert_eq!(v["ingest"]["events"], 0);
        assert!(v["requests"]["/v1/events"]["count"].is_u64());
        assert_eq!(v["followers"]["by_transport"]["sse"], 0);
    }
    let a = call(&state, with("/v1/streams", Some(writer))).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = call(&state, with("/ui/nothing.js", Some(reader))).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn ingest_then_replay_over_a_real_store() {
    let dir = tempfile::tempdir().unwrap();
    let state = ready_with_store(&dir, |_| {});
    let body = concat!(
        r#"{"stream":"a/b","type":"t","ts":1,"id":"x"}"#,
        "\n",
        r#"{"stream":"a/b","type":"t","ts":2,"entity":"p"}"#,
        "\n",
        r#"{"stream":"a/b","type":"t","ts":3,"id":"x"}"#,
        "\n",
        r#"{"stream":"c","type":"u","ts":4}"#,
        "\n"
    );
    let a = call(&state, post(Some("application/x-ndjson"), body)).await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&a.body)
    );
    let v = a.json();
    assert_eq!(v["accepted"], 3);
    assert_eq!(v["duplicates"], 1);
    assert_eq!(v["last_seq"]["a/b"], 2);
    assert_eq!(v["last_seq"]["c"], 1);
    assert_eq!(v["durability"], "write");
    let fill: f64 = a.header("x-vx-queue-fill").unwrap().parse().unwrap();
    assert!((0.0..=1.0).contains(&fill));

    // `%2F` is part of the one `{stream}` segment.
    let a = call(&state, get("/v1/streams/a%2Fb/events")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(a.header("x-vx-first-seq"), Some("1"));
    assert_eq!(a.header("x-vx-last-seq"), Some("2"));
    assert_eq!(a.header("x-vx-next-seq"), Some("3"));
    let shard = vx_proto::shard::shard_of("a/b", 4).to_string();
    assert_eq!(a.header("x-vx-shard"), Some(shard.as_str()));
    let text = String::from_utf8(a.body.clone()).unwrap();
    assert_eq!(
        text,
        "{\"stream\":\"a/b\",\"type\":\"t\",\"ts\":1,\"kind\":\"event\",\"id\":\"x\",\"seq\":1}\n\
         {\"stream\":\"a/b\",\"entity\":\"p\",\"type\":\"t\",\"ts\":2,\"kind\":\"event\",\"seq\":2}\n"
    );

    // A JSON array, a window, and `X-Vx-Next-Seq` = from + events returned.
    let req = Request::get("/v1/streams/a%2Fb/events?from=2&limit=5")
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap();
    let a = call(&state, req).await;
    let arr = a.json();
    assert_eq!(arr.as_array().unwrap().len(), 1);
    assert_eq!(arr[0]["seq"], 2);
    assert_eq!(a.header("x-vx-next-seq"), Some("3"));
    let a = call(&state, get("/v1/streams/a%2Fb/events?limit=1")).await;
    assert_eq!(a.header("x-vx-next-seq"), Some("2"));
    let a = call(&state, get("/v1/streams/a%2Fb/events?from=9")).await;
    assert_eq!((a.header("x-vx-next-seq"), a.body.len()), (Some("9"), 0));
    let req = Request::get("/v1/streams/a%2Fb/events?from=9")
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap();
    assert_eq!(call(&state, req).await.body, b"[]");

    // With a filter there is no next-seq header.
    let a = call(&state, get("/v1/streams/a%2Fb/events?entity=p")).await;
    assert_eq!(a.header("x-vx-next-seq"), None);
    assert_eq!(a.body.iter().filter(|b| **b == b'\n').count(), 1);

    let a = call(&state, get("/v1/streams/a%2Fb")).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json()["stream"], "a/b");
    assert_eq!(a.json()["events"], 2);
    assert_eq!(a.header("x-vx-shard"), Some(shard.as_str()));

    let a = call(&state, get("/v1/streams?limit=1")).await;
    assert_eq!(a.json()["streams"][0]["stream"], "a/b");
    assert_eq!(a.json()["next"], "a/b");
    let a = call(&state, get("/v1/streams?after=a%2Fb")).await;
    assert_eq!(a.json()["streams"][0]["stream"], "c");
    assert_eq!(a.json()["next"], Value::Null);

    let a = call(&state, get("/v1/streams/nope/events")).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    assert!(a.header("x-vx-shard").is_some());

    // Conditional write: 409 with the actual last seq, and only for one stream.
    let req = Request::post("/v1/events")
        .header("content-type", "application/json")
        .header("x-vx-expected-last-seq", "0")
        .body(Body::from(r#"{"stream":"c","type":"u"}"#))
        .unwrap();
    let a = call(&state, req).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::CONFLICT, "conflict".into())
    );
    assert_eq!(a.json()["error"]["last_seq"], 1);
    let req = Request::post("/v1/events")
        .header("content-type", "application/json")
        .header("x-vx-expected-last-seq", "1")
        .body(Body::from(
            r#"[{"stream":"c","type":"u"},{"stream":"d","type":"u"}]"#,
        ))
        .unwrap();
    assert_eq!(call(&state, req).await.code(), "bad_request");

    // Input errors keep their details.
    let a = call(
        &state,
        post(
            Some("application/x-ndjson"),
            "{\"stream\":\"c\",\"type\":\"u\"}\n{\"stream\":\"c\"}\n",
        ),
    )
    .await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_event".into())
    );
    assert_eq!(a.json()["error"]["index"], 1);

    // An empty request is a no-op success.
    let a = call(&state, post(Some("application/json"), "[]")).await;
    assert_eq!(
        (a.status, a.json()["accepted"].clone()),
        (StatusCode::OK, Value::from(0))
    );

    assert_eq!(call(&state, get("/readyz")).await.status, StatusCode::OK);
    let metrics = String::from_utf8(call(&state, get("/metrics")).await.body).unwrap();
    assert!(
        metrics.contains("vx_events_ingested_total{format=\"ndjson\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("vx_queue_depth{shard=\"3\"}"));
    assert!(metrics.contains("vx_ingest_requests_rejected_total{"));
    assert!(metrics.contains("route=\"/v1/streams/{stream}/events\""));
    assert!(!metrics.contains("# EOF"));
    assert!(metrics.contains("# TYPE vx_events_ingested_total counter"));

    let store = state.router().unwrap().store().clone();
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .unwrap();
}

#[tokio::test]
async fn replay_streams_many_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let state = ready_with_store(&dir, |_| {});
    let pad = "x".repeat(200);
    let mut body = String::new();
    for i in 0..2000 {
        body.push_str(&format!(
            "{{\"stream\":\"big\",\"type\":\"t\",\"ts\":{i},\"data\":\"{pad}\"}}\n"
        ));
    }
    let a = call(&state, post(Some("application/x-ndjson"), &body)).await;
    assert_eq!(a.status, StatusCode::OK);
    let req = Request::get("/v1/streams/big/events?limit=100000")
        .header("accept", "application/json")
        .body(Body::empty())
        .unwrap();
    let a = call(&state, req).await;
    assert!(a.body.len() > 4 * (64 << 10), "spans several chunks");
    let arr = a.json();
    let arr = arr.as_array().unwrap();
    assert_eq!(arr.len(), 2000);
    assert!(arr.iter().enumerate().all(|(i, e)| e["seq"] == i + 1));
    assert_eq!(a.header("x-vx-next-seq"), Some("2001"));
    let store = state.router().unwrap().store().clone();
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .unwrap();
}

/// A record the feature tables do not take poisons the store (docs/FEATURES.md): that request
/// and every later write answer 507 `storage_full`, `/readyz` 503; reads still answer.
#[tokio::test]
async fn a_failed_feature_apply_answers_507_and_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let state = ready_with_store(&dir, |_| {});
    let put = |body: &'static str| {
        Request::put("/v1/features/p1")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    assert_eq!(
        call(&state, put(r#"{"hp":1}"#)).await.status,
        StatusCode::OK
    );
    let store = state.router().unwrap().store().clone();
    store.features().fail_next_apply();
    let a = call(&state, put(r#"{"hp":2}"#)).await;
    assert_eq!(
        (a.status, a.code()),
        (StatusCode::INSUFFICIENT_STORAGE, "storage_full".into())
    );
    let a = call(
        &state,
        post(Some("application/json"), r#"{"stream":"s","type":"t"}"#),
    )
    .await;
    assert_eq!(a.status, StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(
        call(&state, get("/readyz")).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let a = call(&state, get("/v1/features/p1")).await;
    assert_eq!(a.json()["features"]["hp"], 1);
}

/// A paged replay honours `Last-Event-ID` as the live form does: it starts right after it,
/// wins over `from`, and a value that is not a seq is 400 (docs/API.md §5.4).
#[tokio::test]
async fn a_paged_replay_starts_after_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let state = ready_with_store(&dir, |_| {});
    let body = r#"[{"stream":"r","type":"t"},{"stream":"r","type":"t"},{"stream":"r","type":"t"}]"#;
    let a = call(&state, post(Some("application/json"), body)).await;
    assert_eq!(a.status, StatusCode::OK);
    let with_id = |id: &str| {
        Request::get("/v1/streams/r/events?from=1")
            .header("accept", "application/json")
            .header("last-event-id", id)
            .body(Body::empty())
            .unwrap()
    };
    let a = call(&state, with_id("1")).await;
    let seqs: Vec<u64> = a
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(a.header("x-vx-next-seq"), Some("4"));
    let a = call(&state, with_id("seven")).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
}
