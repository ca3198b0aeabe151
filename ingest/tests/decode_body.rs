//! `decode_body`: bodies in many chunks, the body limit, failing body streams.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use vx_ingest::{Format, InflightBudget, IngestError, LIMIT_BODY_BYTES, Limits, decode_body};
use vx_proto::ErrorClass;

fn event(i: usize) -> String {
    format!(
        r#"{{"stream":"s{}","type":"t","kind":"counter","value":{i},"id":"e{i}"}}"#,
        i % 3
    )
}

fn ndjson(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| event(i) + "\n")
        .collect::<String>()
        .into_bytes()
}

/// `body` in chunks of 1, 2, … 13 bytes, round and round.
fn chunked(body: &[u8]) -> impl Stream<Item = Result<Bytes, Infallible>> + Unpin + use<> {
    let mut chunks = Vec::new();
    let mut rest = body;
    let mut size = 1;
    while !rest.is_empty() {
        let (a, b) = rest.split_at(size.min(rest.len()));
        chunks.push(Ok(Bytes::copy_from_slice(a)));
        rest = b;
        size = size % 13 + 1;
    }
    stream::iter(chunks)
}

#[tokio::test]
async fn ndjson_in_many_chunks() {
    let body = ndjson(200);
    let budget = InflightBudget::new(1 << 20);
    let (batch, permit) = decode_body(
        chunked(&body),
        Format::Ndjson,
        &Limits::default(),
        &budget,
        7,
    )
    .await
    .unwrap();
    assert_eq!(batch.len(), 200);
    assert_eq!(batch.runs().len(), 3);
    assert!(batch.iter().all(|e| e.ts == 7));
    // The permit holds the body's bytes until the caller is done with the batch.
    assert_eq!(permit.bytes(), body.len() as u64);
    assert_eq!(budget.available(), (1 << 20) - body.len() as u64);
    drop(permit);
    assert_eq!(budget.available(), 1 << 20);
}

#[tokio::test]
async fn json_array_in_many_chunks() {
    let body = format!(
        "[\n{}\n]",
        (0..50).map(event).collect::<Vec<_>>().join(",\n")
    );
    let budget = InflightBudget::new(1 << 20);
    let (batch, _permit) = decode_body(
        chunked(body.as_bytes()),
        Format::Json,
        &Limits::default(),
        &budget,
        0,
    )
    .await
    .unwrap();
    assert_eq!(batch.len(), 50);
    let ids: Vec<_> = batch.iter().map(|e| e.id.unwrap().to_string()).collect();
    assert_eq!(ids[49], "e49");
}

#[tokio::test]
async fn empty_bodies() {
    let budget = InflightBudget::new(100);
    let none = stream::iter(Vec::<Result<Bytes, Infallible>>::new());
    let (batch, permit) = decode_body(none, Format::Ndjson, &Limits::default(), &budget, 0)
        .await
        .unwrap();
    assert!(batch.is_empty());
    assert_eq!(permit.bytes(), 0);
    let none = stream::iter(vec![Ok::<_, Infallible>(Bytes::from_static(b" [ ] "))]);
    let (batch, _) = decode_body(none, Format::Json, &Limits::default(), &budget, 0)
        .await
        .unwrap();
    assert!(batch.is_empty());
}

#[tokio::test]
async fn body_over_the_limit_is_refused_as_it_arrives() {
    let line = Bytes::from(event(1) + "\n");
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    // An endless body: only the limit can stop it.
    let endless = stream::repeat(line.clone())
        .map(Ok::<_, Infallible>)
        .inspect(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
    let limits = Limits {
        max_body_bytes: 10 * line.len() as u64 + 5,
        max_event_bytes: 1 << 20,
        ..Limits::default()
    };
    let budget = InflightBudget::new(1 << 20);
    let err = decode_body(endless, Format::Ndjson, &limits, &budget, 0)
        .await
        .unwrap_err();
    let IngestError::Input(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.class, ErrorClass::TooLarge);
    assert_eq!(e.limit.as_deref(), Some(LIMIT_BODY_BYTES));
    assert_eq!(e.max, Some(limits.max_body_bytes));
    assert_eq!(pulled.load(Ordering::SeqCst), 11);
    // Nothing stays accounted after a failure.
    assert_eq!(budget.available(), 1 << 20);

    // Exactly at the limit is fine.
    let limits = Limits {
        max_body_bytes: 10 * line.len() as u64,
        ..limits
    };
    let ten = stream::iter(vec![Ok::<_, Infallible>(line); 10]);
    let (batch, _) = decode_body(ten, Format::Ndjson, &limits, &budget, 0)
        .await
        .unwrap();
    assert_eq!(batch.len(), 10);
}

#[tokio::test]
async fn failing_body_stream() {
    let budget = InflightBudget::new(1 << 20);
    let body = stream::iter(vec![
        Ok(Bytes::from(event(0) + "\n")),
        Err("connection reset by peer"),
        Ok(Bytes::from(event(1) + "\n")),
    ]);
    let err = decode_body(body, Format::Ndjson, &Limits::default(), &budget, 0)
        .await
        .unwrap_err();
    match err {
        IngestError::Body(msg) => assert!(msg.contains("connection reset"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(budget.available(), 1 << 20);
}

#[tokio::test]
async fn bad_events_are_reported_with_their_position() {
    let mut body = ndjson(5);
    body.extend_from_slice(b"{\"stream\":\"s\",\"type\":\"t\",\"kind\":\"gauge\"}\n");
    body.extend_from_slice(&ndjson(5));
    let budget = InflightBudget::new(1 << 20);
    let err = decode_body(
        chunked(&body),
        Format::Ndjson,
        &Limits::default(),
        &budget,
        0,
    )
    .await
    .unwrap_err();
    let IngestError::Input(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.class, ErrorClass::InvalidEvent);
    assert_eq!(
        (e.index, e.line, e.field.as_deref()),
        (Some(5), Some(6), Some("value"))
    );

    let limits = Limits {
        max_body_bytes: 1 << 20,
        max_event_bytes: 40,
        ..Limits::default()
    };
    let err = decode_body(chunked(&body), Format::Ndjson, &limits, &budget, 0)
        .await
        .unwrap_err();
    let IngestError::Input(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.class, ErrorClass::TooLarge);
    assert_eq!(e.limit.as_deref(), Some("ingest.max_event_bytes"));
    assert_eq!(e.index, Some(0));
}

/// A body that sends some bytes and then nothing: `ingest.body_timeout` ends the wait, and the
/// bytes it had taken from the in-flight budget go back with the error (the caller answers 408).
/// Both the in-task decoders and the YAML pool read through the same timed reader.
#[tokio::test]
async fn a_stalled_body_times_out_and_gives_its_budget_back() {
    let limits = Limits {
        body_timeout: std::time::Duration::from_millis(100),
        ..Limits::default()
    };
    let budget = InflightBudget::new(1 << 20);
    let cases = [
        (Format::Ndjson, ndjson(20)),
        (
            Format::Yaml,
            b"stream: s\ntype: t\n---\nstream: s\ntype: u\n---\nstr".to_vec(),
        ),
    ];
    for (format, sent) in cases {
        // What was sent arrives, then the stream never yields again nor ends.
        let body = chunked(&sent).chain(stream::pending());
        let err = decode_body(body, format, &limits, &budget, 0)
            .await
            .unwrap_err();
        assert!(
            matches!(err, IngestError::Timeout(d) if d == limits.body_timeout),
            "{err:?}"
        );
        assert_eq!(budget.available(), 1 << 20, "{format:?}");
    }
}
