//! Every status of the docs/API.md §3 table reachable in a single-node build without auth: the
//! success body and durability levels, and each error with its code, its details and its
//! one body shape. Any 4xx must leave nothing stored, which is checked by replay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use reqwest::Method;
use serde_json::Value;

/// A rejected request: the error shape of docs/API.md §10, and `X-Vx-Queue-Fill: 0.00` because it was
/// refused before admission.
fn rejected(r: &Resp, status: u16, code: &str) -> serde_json::Map<String, Value> {
    let err = assert_error(r, status, code);
    assert_eq!(r.header("x-vx-queue-fill"), Some("0.00"), "{r}");
    err
}

async fn assert_absent(api: &Api, stream: &str) {
    let (r, _) = api.replay(stream, "").await;
    assert_error(&r, 404, "not_found");
    assert_error(&api.stream_info(stream).await, 404, "not_found");
}

async fn post_if(api: &Api, expected: &str, body: String) -> Resp {
    api.post_events(Some(NDJSON), body, &[("x-vx-expected-last-seq", expected)])
        .await
}

async fn post(api: &Api, ct: &str, body: &str) -> Resp {
    api.post_events(Some(ct), body.to_string(), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ok_answers_counts_and_durability() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    // Requests without events are no-ops.
    for (ct, body) in [
        (NDJSON, ""),
        (NDJSON, "\n\n  \n"),
        (JSON, "[]"),
        (JSON, " [ ] "),
    ] {
        let r = post(api, ct, body).await;
        assert_accepted(&r, 0);
    }
    assert_eq!(
        api.get("/v1/streams").await.json()["streams"],
        serde_json::json!([])
    );

    // Media types: parameters ignored, the jsonl alias, case-insensitive names.
    let ev = |i: i64| Event::simple("ok/1", "t", i, Some(format!("k{i}")));
    for (i, ct) in [
        "application/json; charset=utf-8",
        "application/x-ndjson; charset=utf-8",
        "application/jsonl",
        "Application/JSON",
    ]
    .into_iter()
    .enumerate()
    {
        let r = api.post_events(Some(ct), ev(i as i64).to_json(), &[]).await;
        let body = assert_accepted(&r, 1);
        assert_eq!(
            last_seq_map(&body).get("ok/1"),
            Some(&(i as u64 + 1)),
            "{ct}: {r}"
        );
        assert_eq!(
            body["durability"], "fsync",
            "default under --fsync always: {r}"
        );
    }

    // Duplicates: counted, no new seq, together with accepted they are all events.
    let evs: Vec<Event> = (0..4).map(ev).chain((10..12).map(ev)).collect();
    let r = api.post_ndjson(&evs).await;
    let body = assert_ok(&r);
    assert_eq!(body["accepted"], 2, "{r}");
    assert_eq!(body["duplicates"], 4, "{r}");
    assert_eq!(last_seq_map(&body).get("ok/1"), Some(&6), "{r}");
    assert_eq!(api.replay_all("ok/1").await.len(), 6);

    // X-Vx-Durability is honoured and reported.
    for level in ["none", "write", "fsync"] {
        let e = Event::simple("ok/2", "t", 1, None);
        let r = api
            .post_events(Some(JSON), e.to_json(), &[("x-vx-durability", level)])
            .await;
        let body = assert_accepted(&r, 1);
        assert_eq!(body["durability"], level, "{r}");
    }
    assert_eq!(api.replay_all("ok/2").await.len(), 3);

    // A counter value with a zero fraction is accepted and replayed as an integer.
    let mut c = Event::simple("ok/3", "hits", 1, None);
    c.kind = Some("counter");
    c.value = Some("3.0".into());
    assert_accepted(&post(api, JSON, &c.to_json()).await, 1);
    let lines = api.replay_all("ok/3").await;
    assert_eq!(
        lines[0].value["value"],
        serde_json::json!(3),
        "{}",
        lines[0].raw
    );
    assert_eq!(lines[0].value["kind"], "counter");
    server.stop_clean();

    // Under --fsync never the default level is `write`; a request can ask for more or less.
    let server = ServerConfig::new(tmp.path().join("data"))
        .args(["--fsync", "never"])
        .start();
    let e = Event::simple("ok/4", "t", 1, None);
    let body = assert_accepted(
        &server.api.post_events(Some(JSON), e.to_json(), &[]).await,
        1,
    );
    assert_eq!(body["durability"], "write");
    for level in ["fsync", "none"] {
        let r = server
            .api
            .post_events(Some(JSON), e.to_json(), &[("x-vx-durability", level)])
            .await;
        assert_eq!(assert_accepted(&r, 1)["durability"], level, "{r}");
    }
    server.stop_clean();
    let server = ServerConfig::new(tmp.path().join("data"))
        .args(["--fsync", "interval"])
        .start();
    let body = assert_accepted(
        &server.api.post_events(Some(JSON), e.to_json(), &[]).await,
        1,
    );
    assert_eq!(body["durability"], "write");
    assert_eq!(server.api.replay_all("ok/4").await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_bodies_are_400_with_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    let good = r#"{"stream":"m","type":"t"}"#;
    // (content type, body, line, column): column is that of the offending character.
    let cases: Vec<(&str, String, u64, Option<u64>)> = vec![
        (JSON, r#"{"stream": "m", "type": "#.into(), 1, None),
        (
            JSON,
            format!("[\n {good},\n {{\"stream\": x}}\n]"),
            3,
            Some(13),
        ),
        (JSON, format!("[{good}, {good}"), 1, None),
        (JSON, format!("{good} x"), 1, Some(27)),
        (JSON, format!("{good}{good}"), 1, None),
        (JSON, format!("[{good},]"), 1, Some(28)),
        (
            NDJSON,
            format!("{good}\n{{\"stream\":\"m\",\"type\":\"t\"\n{good}\n"),
            2,
            None,
        ),
        (
            NDJSON,
            format!("{good}\n{good}\n\n{{\"stream\":\"m\" \"type\":\"t\"}}\n"),
            4,
            Some(15),
        ),
        (NDJSON, format!("{good}\n{good} {good}\n"), 2, None),
    ];
    for (ct, body, line, column) in cases {
        let r = post(api, ct, &body).await;
        let err = rejected(&r, 400, "malformed");
        assert_eq!(
            err.get("line").and_then(Value::as_u64),
            Some(line),
            "{body:?}: {r}"
        );
        let col = err.get("column").and_then(Value::as_u64);
        assert!(col.is_some_and(|c| c >= 1), "column is 1-based: {r}");
        if let Some(c) = column {
            assert_eq!(col, Some(c), "{body:?}: {r}");
        }
    }
    // Invalid UTF-8 inside a string.
    let mut bytes = br#"{"stream":"m","type":"t","data":""#.to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    bytes.extend_from_slice(br#""}"#);
    for ct in [JSON, NDJSON] {
        let r = api.post_events(Some(ct), bytes.clone(), &[]).await;
        rejected(&r, 400, "malformed");
    }
    assert_absent(api, "m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_parameters_and_headers_are_400_bad_request() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;
    let e = Event::simple("b/1", "t", 1, None).to_json();

    for (h, v) in [
        ("x-vx-durability", "bogus"),
        ("x-vx-durability", "replicated-ish"),
        ("x-vx-expected-last-seq", "abc"),
        ("x-vx-expected-last-seq", "-1"),
    ] {
        let r = api.post_events(Some(JSON), e.clone(), &[(h, v)]).await;
        rejected(&r, 400, "bad_request");
    }
    assert_absent(api, "b/1").await;
    assert_accepted(&post(api, JSON, &e).await, 1);

    for query in [
        "from=abc",
        "from=-1",
        "to=x",
        "limit=100001",
        "limit=abc",
        "limit=-5",
        "since=yesterday",
        "until=2024-13-45T99:00:00Z",
    ] {
        let (r, _) = api.replay("b/1", query).await;
        assert_error(&r, 400, "bad_request");
    }
    let (r, lines) = api.replay("b/1", "limit=100000").await;
    assert_eq!(r.status, 200, "limit=100000 is the maximum, allowed: {r}");
    assert_eq!(lines.len(), 1);
    for query in ["limit=abc", "limit=-1"] {
        let r = api.get(&format!("/v1/streams?{query}")).await;
        assert_error(&r, 400, "bad_request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unknown_routes_methods_and_media_types() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;
    assert_accepted(
        &post(api, JSON, &Event::simple("n/1", "t", 1, None).to_json()).await,
        1,
    );

    for path in [
        "/nope",
        "/v1/nope",
        "/v1/streams/n%2F2",
        "/v1/streams/n%2F2/events",
        "/v2/events",
    ] {
        assert_error(&api.get(path).await, 404, "not_found");
    }
    for (method, path, allow) in [
        (Method::GET, "/v1/events", "POST"),
        (Method::DELETE, "/v1/events", "POST"),
        (Method::POST, "/v1/streams", "GET"),
        (Method::POST, "/v1/streams/n%2F1/events", "GET"),
    ] {
        let r = api.send(method.clone(), path, &[], None).await;
        assert_error(&r, 405, "method_not_allowed");
        let allowed = r.header("allow").unwrap_or("");
        assert!(
            allowed.contains(allow),
            "{method} {path}: Allow must list {allow}: {r}"
        );
    }
    for accept in ["text/csv", "application/xml", "image/png"] {
        let r = api
            .get_with("/v1/streams/n%2F1/events", &[("accept", accept)])
            .await;
        assert_error(&r, 406, "not_acceptable");
    }

    // 415: no content type, or one we do not take; the error lists what we do take.
    let body = Event::simple("n/3", "t", 1, None).to_json();
    for ct in [
        Some("text/plain"),
        None,
        Some("application/xml"),
        Some("application/jsonx"),
    ] {
        let r = api.post_events(ct, body.clone(), &[]).await;
        rejected(&r, 415, "unsupported_media_type");
        let text = r.text();
        assert!(
            text.contains("application/json") && text.contains("application/x-ndjson"),
            "415 must list the supported types: {r}"
        );
    }
    assert_absent(api, "n/3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn expected_last_seq_conflicts_are_409() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;
    let evs = |from: i64, n: i64| -> String {
        ndjson(
            &(from..from + n)
                .map(|i| Event::simple("c/1", "t", i, None))
                .collect::<Vec<_>>(),
        )
    };
    let r = post_if(api, "0", evs(0, 3)).await;
    assert_eq!(last_seq_map(&assert_accepted(&r, 3)).get("c/1"), Some(&3));
    for wrong in ["0", "2", "4"] {
        let r = post_if(api, wrong, evs(3, 2)).await;
        let err = assert_error(&r, 409, "conflict");
        assert_eq!(err.get("last_seq").and_then(Value::as_u64), Some(3), "{r}");
    }
    assert_eq!(api.replay_all("c/1").await.len(), 3, "a 409 stores nothing");
    let r = post_if(api, "3", evs(3, 2)).await;
    assert_eq!(last_seq_map(&assert_accepted(&r, 2)).get("c/1"), Some(&5));

    // A stream that does not exist has last seq 0.
    let body = Event::simple("c/2", "t", 1, None).to_json();
    let r = api
        .post_events(Some(JSON), body.clone(), &[("x-vx-expected-last-seq", "7")])
        .await;
    let err = assert_error(&r, 409, "conflict");
    assert_eq!(err.get("last_seq").and_then(Value::as_u64), Some(0), "{r}");
    assert_absent(api, "c/2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits_are_413_with_limit_and_max() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_MAX_BODY_BYTES", "65536")
        .env("VX_INGEST_MAX_EVENT_BYTES", "4096")
        .start();
    let api = &server.api;
    let check = |r: &Resp, key: &str, max: u64| {
        let err = rejected(r, 413, "too_large");
        let limit = err.get("limit").and_then(Value::as_str).unwrap_or("");
        assert!(limit.contains(key), "limit must name {key}: {r}");
        assert_eq!(err.get("max").and_then(Value::as_u64), Some(max), "{r}");
    };
    let small = |stream: &str, n: usize| -> Vec<Event> {
        (0..n)
            .map(|i| {
                let mut e = Event::simple(stream, "t", i as i64, None);
                e.data = Some((
                    "\"0123456789012345678901234567890123456789\"".into(),
                    String::new(),
                ));
                e
            })
            .collect()
    };

    // Body over ingest.max_body_bytes, with a Content-Length and chunked.
    let big = ndjson(&small("l/body", 1000));
    assert!(big.len() > 65536);
    // Refused bodies first over raw sockets: the connection must stay usable or be closed
    // with notice (see `answer_keeps_connection_honest`).
    let head = |extra: &str, len: usize| {
        format!(
            "POST /v1/events HTTP/1.1\r\nHost: t\r\nContent-Type: {NDJSON}\r\n{extra}\
             Content-Length: {len}\r\n\r\n"
        )
    };
    let mut req = head("", big.len()).into_bytes();
    req.extend_from_slice(big.as_bytes());
    let (status, body) = answer_keeps_connection_honest(server.addr, req);
    assert_eq!(status, 413, "{body}");
    let mut req = "POST /v1/events HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-ndjson\r\n\
                   Transfer-Encoding: chunked\r\n\r\n"
        .as_bytes()
        .to_vec();
    for c in big.as_bytes().chunks(4096) {
        req.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        req.extend_from_slice(c);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let (status, body) = answer_keeps_connection_honest(server.addr, req);
    assert_eq!(status, 413, "{body}");

    let r = post(api, NDJSON, &big).await;
    check(&r, "max_body_bytes", 65536);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
        .as_bytes()
        .chunks(4096)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let r = api
        .post_events(
            Some(NDJSON),
            reqwest::Body::wrap_stream(futures_util::stream::iter(chunks)),
            &[],
        )
        .await;
    check(&r, "max_body_bytes", 65536);
    assert_absent(api, "l/body").await;
    // Just under the limit is fine.
    let fits = ndjson(&small("l/fits", 600));
    assert!(fits.len() < 65536);
    assert_accepted(&post(api, NDJSON, &fits).await, 600);

    // One event over ingest.max_event_bytes, after good ones in the same request.
    let mut evs = small("l/event", 3);
    let mut fat = Event::simple("l/event", "t", 9, None);
    let payload = "y".repeat(5000);
    fat.data = Some((format!("\"{payload}\""), String::new()));
    evs.push(fat);
    for r in [api.post_ndjson(&evs).await, api.post_json_array(&evs).await] {
        check(&r, "max_event_bytes", 4096);
    }
    assert_absent(api, "l/event").await;

    // data nested deeper than 64 levels.
    let nest = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    let mut deep = Event::simple("l/deep", "t", 1, None);
    deep.data = Some((nest(65), String::new()));
    check(&post(api, JSON, &deep.to_json()).await, "", 64);
    let r = post(api, NDJSON, &deep.to_json()).await;
    let err = rejected(&r, 413, "too_large");
    assert_eq!(err.get("max").and_then(Value::as_u64), Some(64), "{r}");
    assert_absent(api, "l/deep").await;
    // Very deep input must not hurt the server either.
    deep.data = Some((nest(100_000).chars().take(60_000).collect(), String::new()));
    let r = post(api, JSON, &deep.to_json()).await;
    assert!(r.status == 413 || r.status == 400, "{r}");
    let mut ok = Event::simple("l/deep", "t", 1, None);
    ok.data = Some((nest(64), nest(64)));
    assert_accepted(&post(api, JSON, &ok.to_json()).await, 1);
    let lines = api.replay_all("l/deep").await;
    ok.check(&lines[0].value, Some(&lines[0].raw), 1).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_events_are_422_with_index_and_field_and_store_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;
    let long = |n: usize| "x".repeat(n);

    // (event, field) — every rule of docs/API.md §2.
    let cases: Vec<(String, &str)> = vec![
        (r#"{"type":"t"}"#.into(), "stream"),
        (r#"{"stream":"i","entity":"p"}"#.into(), "type"),
        (r#"{"stream":"","type":"t"}"#.into(), "stream"),
        (
            format!(r#"{{"stream":"{}","type":"t"}}"#, long(257)),
            "stream",
        ),
        (r#"{"stream":"a\u0001b","type":"t"}"#.into(), "stream"),
        (r#"{"stream":"a\u007fb","type":"t"}"#.into(), "stream"),
        (r#"{"stream":5,"type":"t"}"#.into(), "stream"),
        (r#"{"stream":null,"type":"t"}"#.into(), "stream"),
        (r#"{"stream":"i","type":"bad type"}"#.into(), "type"),
        (r#"{"stream":"i","type":""}"#.into(), "type"),
        (r#"{"stream":"i","type":"é"}"#.into(), "type"),
        (
            format!(r#"{{"stream":"i","type":"{}"}}"#, long(129)),
            "type",
        ),
        (
            r#"{"stream":"i","type":"t","entity":"e\u0007"}"#.into(),
            "entity",
        ),
        (
            format!(r#"{{"stream":"i","type":"t","entity":"{}"}}"#, long(257)),
            "entity",
        ),
        (r#"{"stream":"i","type":"t","entity":7}"#.into(), "entity"),
        (r#"{"stream":"i","type":"t","ts":-1}"#.into(), "ts"),
        (
            r#"{"stream":"i","type":"t","ts":9007199254740992}"#.into(),
            "ts",
        ),
        (r#"{"stream":"i","type":"t","ts":1.5}"#.into(), "ts"),
        (r#"{"stream":"i","type":"t","ts":"yesterday"}"#.into(), "ts"),
        (
            r#"{"stream":"i","type":"t","ts":"2024-11-19 07:06:40"}"#.into(),
            "ts",
        ),
        (r#"{"stream":"i","type":"t","ts":true}"#.into(), "ts"),
        (r#"{"stream":"i","type":"t","kind":"bogus"}"#.into(), "kind"),
        (r#"{"stream":"i","type":"t","kind":1}"#.into(), "kind"),
        (
            r#"{"stream":"i","type":"t","kind":"counter"}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"counter","value":1.5}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"counter","value":"3"}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"counter","value":9223372036854775808}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"gauge"}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"gauge","value":null}"#.into(),
            "value",
        ),
        (
            r#"{"stream":"i","type":"t","kind":"gauge","value":1e999}"#.into(),
            "value",
        ),
        (r#"{"stream":"i","type":"t","value":"x"}"#.into(), "value"),
        (r#"{"stream":"i","type":"t","id":""}"#.into(), "id"),
        (
            format!(r#"{{"stream":"i","type":"t","id":"{}"}}"#, long(129)),
            "id",
        ),
        (r#"{"stream":"i","type":"t","id":5}"#.into(), "id"),
        (r#"{"stream":"i","type":"t","id":"a\nb"}"#.into(), "id"),
        (
            r#"{"stream":"i","type":"t","strem":"typo"}"#.into(),
            "strem",
        ),
        (
            r#"{"stream":"i","type":"events","kind":"counter","value":1}"#.into(),
            "type",
        ),
        (
            r#"{"stream":"i","type":"last_ts","kind":"gauge","value":1}"#.into(),
            "type",
        ),
        (
            r#"{"stream":"i","type":"events","kind":"gauge","value":1}"#.into(),
            "type",
        ),
    ];
    for (ev, field) in &cases {
        for (ct, body) in [
            (JSON, ev.clone()),
            (NDJSON, format!("{ev}\n")),
            (JSON, format!("[{ev}]")),
        ] {
            let r = post(api, ct, &body).await;
            let err = rejected(&r, 422, "invalid_event");
            assert_eq!(
                err.get("index").and_then(Value::as_u64),
                Some(0),
                "{body}: {r}"
            );
            assert_eq!(
                err.get("field").and_then(Value::as_str),
                Some(*field),
                "{body}: {r}"
            );
        }
    }
    // The unknown field is named in the message too.
    let r = post(api, JSON, &cases.iter().find(|c| c.1 == "strem").unwrap().0).await;
    assert!(r.text().contains("strem"), "{r}");
    // `events` and `last_ts` are fine as the type of a plain event.
    let plain = r#"{"stream":"i2","type":"events"}"#;
    assert_accepted(&post(api, JSON, plain).await, 1);
    // Not an object.
    for (ct, body) in [
        (JSON, "[1]"),
        (JSON, "\"s\""),
        (NDJSON, "[]\n"),
        (NDJSON, "42\n"),
    ] {
        let r = post(api, ct, body).await;
        let err = rejected(&r, 422, "invalid_event");
        assert_eq!(
            err.get("index").and_then(Value::as_u64),
            Some(0),
            "{body}: {r}"
        );
    }
    assert_absent(api, "i").await;

    // Atomicity: the 4th of 5 events is bad; nothing of the request is stored, on any stream.
    let good = |s: &str, i: i64| Event::simple(s, "t", i, Some(format!("{s}-{i}"))).to_json();
    let bad = r#"{"stream":"a/3","type":"t","kind":"gauge"}"#;
    let lines = [
        good("a/0", 0),
        good("a/1", 1),
        good("a/2", 2),
        bad.to_string(),
        good("a/4", 4),
    ];
    let nd = lines.join("\n");
    let arr = format!("[{}]", lines.join(","));
    for (ct, body) in [(NDJSON, nd), (JSON, arr)] {
        let r = post(api, ct, &body).await;
        let err = rejected(&r, 422, "invalid_event");
        assert_eq!(err.get("index").and_then(Value::as_u64), Some(3), "{r}");
        assert_eq!(
            err.get("field").and_then(Value::as_str),
            Some("value"),
            "{r}"
        );
    }
    for s in ["a/0", "a/1", "a/2", "a/3", "a/4"] {
        assert_absent(api, s).await;
    }
    // The same on an existing stream: its last seq does not move, and the ids are not taken.
    assert_accepted(
        &post(
            api,
            NDJSON,
            &format!("{}\n{}", good("a/x", 0), good("a/x", 1)),
        )
        .await,
        2,
    );
    let body = [
        good("a/x", 2),
        good("a/x", 3),
        good("a/x", 4),
        bad.replace("a/3", "a/x"),
        good("a/x", 5),
    ]
    .join("\n");
    rejected(&post(api, NDJSON, &body).await, 422, "invalid_event");
    let info = api.stream_info("a/x").await.json();
    assert_eq!(info["last_seq"], 2, "{info}");
    let r = post(api, NDJSON, &good("a/x", 2)).await;
    assert_eq!(
        last_seq_map(&assert_accepted(&r, 1)).get("a/x"),
        Some(&3),
        "{r}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn early_refusals_of_large_bodies_keep_connections_honest() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    // 2 MB of valid events after a first line that decides the answer.
    let tail = ndjson(
        &(0..40_000)
            .map(|i| Event::simple("k/1", "t", i, None))
            .collect::<Vec<_>>(),
    );
    assert!(tail.len() > 1 << 20);
    let cases: [(&str, &str, &str, u16); 4] = [
        (NDJSON, "", "{\"stream\":\n", 400),
        (NDJSON, "", "{\"stream\":\"k/1\"}\n", 422),
        ("text/plain", "", "", 415),
        (NDJSON, "X-Vx-Durability: bogus\r\n", "", 400),
    ];
    for (ct, extra, first, want) in cases {
        let body = format!("{first}{tail}");
        let mut req = format!(
            "POST /v1/events HTTP/1.1\r\nHost: t\r\nContent-Type: {ct}\r\n{extra}\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body.as_bytes());
        let (status, answer) = answer_keeps_connection_honest(server.addr, req);
        assert_eq!(status, want, "{ct} {first:?}: {answer}");
    }
    assert_absent(&server.api, "k/1").await;
}
