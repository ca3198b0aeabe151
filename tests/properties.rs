//! Property tests over the real binary (issue 3), one server per property:
//! - any valid events, posted as JSON, NDJSON, YAML and binary frames, replay (NDJSON) as their
//!   canonical form (docs/API.md §2), with `seq` 1, 2, … on a fresh stream per format and case;
//! - any bytes (random, or a valid body with a few bytes changed), posted with any ingest
//!   content type, plain or gzip/zstd (compressed, or random bytes claiming to be), get a 200
//!   or a 4xx in the error shape of docs/API.md §10, never a 5xx or a hang, and the server stays healthy.
//!
//! The libFuzzer targets in fuzz/ search the decoders far harder (docs/FUZZING.md); these keep
//! the whole path — HTTP, decompression, decoding, admission, storage, replay — honest on
//! every CI run, with 48 cases per property to keep the run short.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;
use vx_proto::EventView;
use vx_proto::canonical::write_event;
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};
use vx_proto::testing;

/// Cases per property.
const CASES: u32 = 48;
const YAML: &str = "application/yaml";
const FRAMES: &str = "application/vnd.veltrix.frames";

// ---------------------------------------------------------------------------------------------
// Events: `vx_proto::testing` (names, kinds and values, `ts` as milliseconds or RFC 3339,
// `data` with escapes, number literals and whitespace, JSON field order and spacing)
// ---------------------------------------------------------------------------------------------

/// One case: a stream name (made unique per format and case when posted) and its events (their
/// own streams unused: each is posted on the case's).
#[derive(Clone, Debug)]
struct Case {
    stream: String,
    events: Vec<testing::Event>,
    /// Variations of the bodies: a JSON array even for one event, CRLF lines, one frame per
    /// event.
    array: bool,
    crlf: bool,
    frame_each: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        testing::stream_name(),
        proptest::collection::vec(testing::event(4), 1..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(stream, mut events, array, crlf, frame_each)| {
            // Ids are unique within a request: a repeat would be a duplicate (docs/API.md §2).
            for (i, e) in events.iter_mut().enumerate() {
                if let Some(id) = &mut e.id {
                    id.push_str(&format!("#{i}"));
                }
            }
            Case {
                stream,
                events,
                array,
                crlf,
                frame_each,
            }
        })
}

/// The ingest formats of docs/API.md §3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fmt {
    Json,
    Ndjson,
    Yaml,
    Frames,
}

const FORMATS: [Fmt; 4] = [Fmt::Json, Fmt::Ndjson, Fmt::Yaml, Fmt::Frames];

impl Fmt {
    fn content_type(self) -> &'static str {
        match self {
            Fmt::Json => JSON,
            Fmt::Ndjson => NDJSON,
            Fmt::Yaml => YAML,
            Fmt::Frames => FRAMES,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fmt::Json => "json",
            Fmt::Ndjson => "ndjson",
            Fmt::Yaml => "yaml",
            Fmt::Frames => "frames",
        }
    }
}

/// The body of `case`'s events, all on `stream`, in `fmt`.
fn body(case: &Case, fmt: Fmt, stream: &str) -> Vec<u8> {
    let events: Vec<testing::Event> = case
        .events
        .iter()
        .map(|e| testing::Event {
            stream: stream.to_string(),
            ..e.clone()
        })
        .collect();
    let mut out = Vec::new();
    match fmt {
        Fmt::Json => {
            let arr = case.array || events.len() > 1;
            if arr {
                out.extend_from_slice(b"[\n");
            }
            for (i, e) in events.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b",\n");
                }
                out.extend_from_slice(&e.to_json(false));
            }
            if arr {
                out.extend_from_slice(b"\n]");
            }
        }
        Fmt::Ndjson => {
            let eol: &[u8] = if case.crlf { b"\r\n" } else { b"\n" };
            for (i, e) in events.iter().enumerate() {
                out.extend_from_slice(&e.to_json(true));
                out.extend_from_slice(eol);
                if i == 0 {
                    out.extend_from_slice(eol);
                }
            }
        }
        Fmt::Yaml => {
            for e in &events {
                out.extend_from_slice(&e.to_yaml());
            }
        }
        Fmt::Frames => {
            let data: Vec<Option<String>> = events.iter().map(testing::Event::data_sent).collect();
            let wires: Vec<WireEvent<'_>> = events
                .iter()
                .zip(&data)
                .map(|(e, d)| e.wire(d.as_deref()))
                .collect();
            if case.frame_each {
                for w in &wires {
                    encode_batch(&mut out, &BatchHead::default(), std::slice::from_ref(w)).unwrap();
                }
            } else {
                encode_batch(&mut out, &BatchHead::default(), &wires).unwrap();
            }
        }
    }
    out
}

/// A stream name no other case or format uses, so that its `seq`s start at 1.
fn fresh_stream(base: &str, fmt: Fmt) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{base}#{}.{n}", fmt.name())
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// The replayed events of `stream` (NDJSON, the default), as parsed JSON, and the raw lines.
async fn replay(api: &Api, stream: &str) -> Result<Vec<(String, Value)>, TestCaseError> {
    let path = format!("/v1/streams/{}/events?limit=1000", enc(stream));
    let r = api
        .try_send(reqwest::Method::GET, &path, &[], None)
        .await
        .map_err(|e| fail(format!("GET {path}: {e}")))?;
    if r.status != 200 {
        return Err(fail(format!("GET {path}: {r}")));
    }
    let text = std::str::from_utf8(&r.body).map_err(|e| fail(format!("{e}: {r}")))?;
    text.split('\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .map(|v| (l.to_string(), v))
                .map_err(|e| fail(format!("replayed line is not JSON ({e}): {l:?}")))
        })
        .collect()
}

/// Post `case` in `fmt` to a fresh stream, replay it, and compare with the canonical form.
async fn roundtrip(api: &Api, case: &Case, fmt: Fmt) -> Result<(), TestCaseError> {
    let stream = fresh_stream(&case.stream, fmt);
    let body = body(case, fmt, &stream);
    let shown = String::from_utf8_lossy(&body).into_owned();
    let before = now_ms();
    let r = api
        .try_send(
            reqwest::Method::POST,
            "/v1/events",
            &[("content-type", fmt.content_type())],
            Some(body.into()),
        )
        .await
        .map_err(|e| fail(format!("POST {}: {e}", fmt.name())))?;
    let after = now_ms();
    let n = case.events.len() as u64;
    let ok = r.status == 200
        && r.json()["accepted"] == n
        && r.json()["duplicates"] == 0
        && r.json()["last_seq"][&stream] == n;
    if !ok {
        return Err(fail(format!(
            "{} body {shown:?}: expected 200 storing {n} events on {stream:?}, got {r}",
            fmt.name()
        )));
    }
    let lines = replay(api, &stream).await?;
    if lines.len() as u64 != n {
        return Err(fail(format!(
            "{} body {shown:?}: replayed {} events, sent {n}: {lines:?}",
            fmt.name(),
            lines.len()
        )));
    }
    for (i, (ev, (raw, got))) in case.events.iter().zip(&lines).enumerate() {
        let data = ev.data_compact();
        // As stored (`ts` 0 when the server picks it), on the stream posted to.
        let view = EventView {
            stream: &stream,
            ..ev.stored(0, data.as_deref())
        };
        let mut want = Vec::new();
        write_event(&mut want, &view, i as u64 + 1);
        let mut want: Value = serde_json::from_slice(&want).unwrap();
        let mut got = got.clone();
        if ev.ts.given().is_none() {
            let ts = got.get("ts").and_then(Value::as_i64);
            if !ts.is_some_and(|ts| (before..=after).contains(&ts)) {
                return Err(fail(format!(
                    "{}: server-assigned ts of {raw} is not within {before}..={after}",
                    fmt.name()
                )));
            }
            want.as_object_mut().unwrap().remove("ts");
            got.as_object_mut().unwrap().remove("ts");
        }
        if want != got {
            return Err(fail(format!(
                "{} body {shown:?}, event {i}:\n  replayed {raw}\n  expected {want}",
                fmt.name()
            )));
        }
        // Canonical JSON is compact, in the canonical field order (docs/API.md §2.2): the line is the canonical
        // writer's own output for the replayed values.
        if fmt != Fmt::Yaml && ev.ts.given().is_some() {
            let mut canonical = Vec::new();
            write_event(&mut canonical, &view, i as u64 + 1);
            if raw.as_bytes() != canonical {
                return Err(fail(format!(
                    "{} body {shown:?}, event {i}: replayed {raw}, canonical {}",
                    fmt.name(),
                    String::from_utf8_lossy(&canonical)
                )));
            }
        }
    }
    Ok(())
}

#[test]
fn valid_events_replay_canonically_in_every_format() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let rt = runtime();
    let api = server.api.clone();
    let result = runner().run(&case(), |case| {
        rt.block_on(async {
            for fmt in FORMATS {
                roundtrip(&api, &case, fmt).await?;
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Any bytes: 200 or 4xx, never 5xx
// ---------------------------------------------------------------------------------------------

const CONTENT_TYPES: &[&str] = &[
    JSON,
    "application/json; charset=utf-8",
    NDJSON,
    "application/jsonl",
    YAML,
    "application/x-yaml",
    "text/yaml",
    FRAMES,
    "text/plain",
];

/// How the body is sent.
#[derive(Clone, Copy, Debug)]
enum Coding {
    Identity,
    /// Compressed for real.
    Gzip,
    Zstd,
    /// The bytes as they are, labelled as compressed.
    GzipClaimed,
    ZstdClaimed,
}

/// A change to a valid body.
#[derive(Clone, Debug)]
enum Mutation {
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize, usize),
    Truncate(usize),
}

fn mutate(body: &mut Vec<u8>, m: &Mutation) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *m {
        Mutation::Set(i, b) => {
            if !body.is_empty() {
                let i = at(i, body.len());
                body[i] = b;
            }
        }
        Mutation::Insert(i, b) => {
            let i = at(i, body.len() + 1);
            body.insert(i, b);
        }
        Mutation::Remove(i, n) => {
            let i = at(i, body.len());
            let end = (i + n).min(body.len());
            body.drain(i..end);
        }
        Mutation::Truncate(i) => {
            let i = at(i, body.len() + 1);
            body.truncate(i);
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Remove(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// What is posted.
#[derive(Clone, Debug)]
enum Bytes {
    Random(Vec<u8>),
    /// A valid body of `case` in a format, then changed; posted with that format's content
    /// type, unless `false` (then with the one drawn).
    Mutated(Box<Case>, usize, Vec<Mutation>, bool),
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..768).prop_map(Bytes::Random),
        (
            case(),
            0..FORMATS.len(),
            proptest::collection::vec(mutation(), 1..3),
            proptest::bool::weighted(0.8),
        )
            .prop_map(|(c, f, m, own)| Bytes::Mutated(Box::new(c), f, m, own)),
    ]
}

fn coding() -> impl Strategy<Value = Coding> {
    prop_oneof![
        4 => Just(Coding::Identity),
        1 => Just(Coding::Gzip),
        1 => Just(Coding::Zstd),
        1 => Just(Coding::GzipClaimed),
        1 => Just(Coding::ZstdClaimed),
    ]
}

const ERROR_CODES: &[&str] = &[
    "malformed",
    "bad_request",
    "conflict",
    "too_large",
    "unsupported_media_type",
    "invalid_event",
    "backpressure",
];

async fn any_bytes(
    api: &Api,
    bytes: &Bytes,
    ct: &str,
    coding: Coding,
) -> Result<(), TestCaseError> {
    let (plain, ct) = match bytes {
        Bytes::Random(b) => (b.clone(), ct),
        Bytes::Mutated(case, f, mutations, own) => {
            let fmt = FORMATS[*f];
            let mut b = body(case, fmt, &fresh_stream(&case.stream, fmt));
            for m in mutations {
                mutate(&mut b, m);
            }
            (b, if *own { fmt.content_type() } else { ct })
        }
    };
    let (sent, encoding) = match coding {
        Coding::Identity => (plain.clone(), None),
        Coding::Gzip => (gzip(&plain), Some("gzip")),
        Coding::Zstd => (zstd::encode_all(&plain[..], 3).unwrap(), Some("zstd")),
        Coding::GzipClaimed => (plain.clone(), Some("gzip")),
        Coding::ZstdClaimed => (plain.clone(), Some("zstd")),
    };
    let mut headers = vec![("content-type", ct)];
    if let Some(e) = encoding {
        headers.push(("content-encoding", e));
    }
    let shown = format!(
        "{ct} ({coding:?}) body {:?}",
        String::from_utf8_lossy(&plain)
    );
    let r = api
        .try_send(
            reqwest::Method::POST,
            "/v1/events",
            &headers,
            Some(sent.into()),
        )
        .await
        .map_err(|e| fail(format!("{shown}: the request failed: {e}")))?;
    match r.status {
        200 => {}
        400..=499 => {
            let code = serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
            if !code.is_some_and(|c| ERROR_CODES.contains(&c.as_str())) {
                return Err(fail(format!("{shown}: a 4xx not in the error shape: {r}")));
            }
        }
        _ => return Err(fail(format!("{shown}: {r}"))),
    }
    let health = api
        .try_send(reqwest::Method::GET, "/healthz", &[], None)
        .await
        .map_err(|e| fail(format!("{shown}: /healthz failed afterwards: {e}")))?;
    if health.status != 200 {
        return Err(fail(format!("{shown}: /healthz afterwards: {health}")));
    }
    Ok(())
}

#[test]
fn any_bytes_get_a_200_or_a_4xx() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let rt = runtime();
    let api = server.api.clone();
    let strategy = (bytes(), proptest::sample::select(CONTENT_TYPES), coding());
    let result = runner().run(&strategy, |(bytes, ct, coding)| {
        rt.block_on(any_bytes(&api, &bytes, ct, coding))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // Still ready, and still storing.
    rt.block_on(async {
        assert_eq!(api.get("/readyz").await.status, 200);
        let e = Event::simple("after/any-bytes", "t", 1, None);
        assert_accepted(&api.post_ndjson(&[e]).await, 1);
    });
}
