//! `Content-Encoding` (gzip, zstd) and YAML bodies through `decode_encoded_body`: the
//! decompressed size is held to the body limit (a zip bomb is refused after at most that much
//! output), bad compressed data is 400, YAML is decoded on the blocking pool with the same
//! limits and budget as the other formats, and a YAML error stops the body from being read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use vx_ingest::{
    Encoding, Format, InflightBudget, IngestError, LIMIT_BODY_BYTES, Limits, decode_body,
    decode_encoded_body, encoding_for,
};
use vx_proto::ErrorClass;

fn event(i: usize) -> String {
    format!(r#"{{"stream":"s{}","type":"t","value":{i}}}"#, i % 3)
}

fn ndjson(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| event(i) + "\n")
        .collect::<String>()
        .into_bytes()
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(body).unwrap();
    e.finish().unwrap()
}

fn zstd(body: &[u8]) -> Vec<u8> {
    zstd::encode_all(body, 3).unwrap()
}

/// `body` in chunks of `size` bytes.
fn chunks(
    body: &[u8],
    size: usize,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Unpin + use<> {
    let v: Vec<_> = body
        .chunks(size.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    stream::iter(v)
}

async fn decode(
    body: &[u8],
    format: Format,
    encoding: Encoding,
    limits: Limits,
) -> Result<usize, IngestError> {
    let budget = InflightBudget::new(1 << 30);
    let (batch, _permit) =
        decode_encoded_body(chunks(body, 1000), format, encoding, &limits, &budget, 0).await?;
    Ok(batch.len())
}

fn input(e: IngestError) -> vx_proto::InputError {
    match e {
        IngestError::Input(e) => e,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn content_encodings() {
    assert_eq!(encoding_for(None), Ok(Encoding::Identity));
    assert_eq!(encoding_for(Some("identity")), Ok(Encoding::Identity));
    assert_eq!(encoding_for(Some("GZIP")), Ok(Encoding::Gzip));
    assert_eq!(encoding_for(Some("x-gzip")), Ok(Encoding::Gzip));
    assert_eq!(encoding_for(Some(" zstd ")), Ok(Encoding::Zstd));
    assert_eq!(encoding_for(Some("identity, zstd")), Ok(Encoding::Zstd));
    for bad in ["br", "deflate", "gzip, zstd", "gzip, gzip", "compress"] {
        let e = encoding_for(Some(bad)).unwrap_err();
        assert_eq!(e.encoding, bad);
        assert!(e.to_string().contains("gzip, zstd"), "{e}");
    }
}

#[tokio::test]
async fn gzip_and_zstd_bodies() {
    let body = ndjson(500);
    let limits = Limits::default();
    assert_eq!(
        decode(&gzip(&body), Format::Ndjson, Encoding::Gzip, limits)
            .await
            .unwrap(),
        500
    );
    assert_eq!(
        decode(&zstd(&body), Format::Ndjson, Encoding::Zstd, limits)
            .await
            .unwrap(),
        500
    );
    // Concatenated members and frames are one body.
    let (a, b) = body.split_at(body.len() / 2 + 7);
    let two = [gzip(a), gzip(b)].concat();
    assert_eq!(
        decode(&two, Format::Ndjson, Encoding::Gzip, limits)
            .await
            .unwrap(),
        500
    );
    let two = [zstd(a), zstd(b)].concat();
    assert_eq!(
        decode(&two, Format::Ndjson, Encoding::Zstd, limits)
            .await
            .unwrap(),
        500
    );
    // Any format, YAML included.
    let yaml = (0..200)
        .map(|i| format!("- {{stream: s, type: t, value: {i}}}\n"))
        .collect::<String>();
    assert_eq!(
        decode(&gzip(yaml.as_bytes()), Format::Yaml, Encoding::Gzip, limits)
            .await
            .unwrap(),
        200
    );
    assert_eq!(
        decode(&zstd(yaml.as_bytes()), Format::Yaml, Encoding::Zstd, limits)
            .await
            .unwrap(),
        200
    );
}

#[tokio::test]
async fn bad_compressed_data_is_malformed() {
    let body = ndjson(50);
    let limits = Limits::default();
    // Bits flipped inside the deflate data may still inflate to other events (which the event
    // decoder may refuse first); the header and the checksum are checked by the decoder.
    let gz = gzip(&body);
    let zs = zstd(&body);
    let mut bad_magic = gz.clone();
    bad_magic[0] ^= 0xff;
    let mut bad_crc = gz.clone();
    let at = bad_crc.len() - 8;
    bad_crc[at] ^= 0xff;
    let mut bad_checksum = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    bad_checksum.include_checksum(true).unwrap();
    bad_checksum.write_all(&body).unwrap();
    let mut bad_checksum = bad_checksum.finish().unwrap();
    let at = bad_checksum.len() - 1;
    bad_checksum[at] ^= 0xff;
    let cases: Vec<(Vec<u8>, Encoding)> = vec![
        (body.clone(), Encoding::Gzip),
        (body.clone(), Encoding::Zstd),
        (bad_magic, Encoding::Gzip),
        (bad_crc, Encoding::Gzip),
        (bad_checksum, Encoding::Zstd),
        (gz[..gz.len() - 5].to_vec(), Encoding::Gzip),
        (zs[..zs.len() - 5].to_vec(), Encoding::Zstd),
        ([gz.clone(), b"junk".to_vec()].concat(), Encoding::Gzip),
        ([zs.clone(), b"junk".to_vec()].concat(), Encoding::Zstd),
    ];
    for (i, (bytes, enc)) in cases.into_iter().enumerate() {
        let e = input(
            decode(&bytes, Format::Ndjson, enc, limits)
                .await
                .unwrap_err(),
        );
        assert_eq!(e.class, ErrorClass::Malformed, "case {i}: {e:?}");
        assert!(e.message.contains(enc.as_str()), "case {i}: {e:?}");
    }
}

#[tokio::test]
async fn zip_bombs_are_refused_at_the_body_limit() {
    // 128 MiB of blank NDJSON lines, or of empty YAML documents (so that the decoders never
    // object), compresses to about 128 KiB with gzip and a few KiB with zstd.
    let limits = Limits {
        max_body_bytes: 1 << 20,
        max_event_bytes: 1 << 20,
        ..Limits::default()
    };
    for (format, filler) in [(Format::Ndjson, "\n"), (Format::Yaml, "---\n")] {
        let block = filler.repeat((1 << 20) / filler.len());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let mut zs = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
        for _ in 0..128 {
            gz.write_all(block.as_bytes()).unwrap();
            zs.write_all(block.as_bytes()).unwrap();
        }
        let gz = gz.finish().unwrap();
        let zs = zs.finish().unwrap();
        for (bytes, enc) in [(&gz, Encoding::Gzip), (&zs, Encoding::Zstd)] {
            let start = Instant::now();
            let budget = InflightBudget::new(1 << 30);
            let err =
                decode_encoded_body(chunks(bytes, 16 << 10), format, enc, &limits, &budget, 0)
                    .await
                    .unwrap_err();
            let e = input(err);
            assert_eq!(e.class, ErrorClass::TooLarge, "{enc:?} {format:?}: {e:?}");
            assert_eq!(e.limit.as_deref(), Some(LIMIT_BODY_BYTES));
            assert_eq!(e.max, Some(1 << 20));
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{:?}",
                start.elapsed()
            );
            assert_eq!(budget.available(), 1 << 30, "the budget is released");
        }
    }
}

#[tokio::test]
async fn compressed_bytes_are_held_to_the_limit_too() {
    // Stored (uncompressed) deflate blocks of length zero decompress to nothing: without a
    // limit on the compressed side, such a body could be read forever.
    let limits = Limits {
        max_body_bytes: 64 << 10,
        max_event_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut body = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    for _ in 0..(200 << 10) / 5 {
        body.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
    }
    let e = input(
        decode(&body, Format::Ndjson, Encoding::Gzip, limits)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.class, ErrorClass::TooLarge, "{e:?}");
    assert_eq!(e.limit.as_deref(), Some(LIMIT_BODY_BYTES));
}

#[tokio::test]
async fn a_failing_body_is_a_body_error_through_the_decompressor() {
    let gz = gzip(&ndjson(100));
    let items: Vec<Result<Bytes, &str>> = vec![
        Ok(Bytes::copy_from_slice(&gz[..20])),
        Err("connection reset"),
    ];
    let budget = InflightBudget::new(1 << 20);
    let err = decode_encoded_body(
        stream::iter(items),
        Format::Ndjson,
        Encoding::Gzip,
        &Limits::default(),
        &budget,
        0,
    )
    .await
    .unwrap_err();
    match err {
        IngestError::Body(msg) => assert!(msg.contains("connection reset"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// YAML documents of `n` events, one per document.
fn yaml(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("---\nstream: s{}\ntype: t\nvalue: {i}\n", i % 3))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn yaml_in_many_chunks_with_budget_and_limits() {
    let body = yaml(300);
    for size in [1, 7, 4096] {
        let budget = InflightBudget::new(1 << 20);
        let (batch, permit) = decode_body(
            chunks(&body, size),
            Format::Yaml,
            &Limits::default(),
            &budget,
            9,
        )
        .await
        .unwrap();
        assert_eq!(batch.len(), 300);
        assert_eq!(batch.runs().len(), 3);
        assert!(batch.iter().all(|e| e.ts == 9));
        assert_eq!(permit.bytes(), body.len() as u64);
        drop(permit);
        assert_eq!(budget.available(), 1 << 20);
    }
    let limits = Limits {
        max_body_bytes: 1000,
        max_event_bytes: 1 << 20,
        ..Limits::default()
    };
    let budget = InflightBudget::new(1 << 20);
    let e = input(
        decode_body(chunks(&body, 100), Format::Yaml, &limits, &budget, 0)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.class, e.limit.as_deref()),
        (ErrorClass::TooLarge, Some(LIMIT_BODY_BYTES))
    );
    assert_eq!(budget.available(), 1 << 20);
}

#[tokio::test]
async fn a_yaml_error_stops_reading_the_body() {
    // A bad first event, then an endless body: the answer comes without reading it all.
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&pulled);
    let bad = Bytes::from_static(b"- {stream: s, type: t, bogus: 1}\n");
    let more = Bytes::from_static(b"- {stream: s, type: t}\n");
    let body = stream::iter(std::iter::once(bad).chain(std::iter::repeat(more)))
        .map(move |c| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<_, Infallible>(c)
        })
        .boxed();
    let budget = InflightBudget::new(1 << 30);
    let limits = Limits {
        max_body_bytes: u64::MAX,
        max_event_bytes: 1 << 20,
        ..Limits::default()
    };
    let e = input(
        decode_body(body, Format::Yaml, &limits, &budget, 0)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.class, e.field.as_deref()),
        (ErrorClass::InvalidEvent, Some("bogus"))
    );
    assert_eq!(e.index, Some(0));
    assert!(
        pulled.load(Ordering::Relaxed) < 1000,
        "{}",
        pulled.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_yaml_bodies_at_once() {
    assert!(vx_ingest::yaml::parallelism() >= 1);
    let body = Arc::new(yaml(200));
    let budget = InflightBudget::new(1 << 30);
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let body = Arc::clone(&body);
            let budget = budget.clone();
            tokio::spawn(async move {
                let (batch, _) = decode_body(
                    chunks(&body, 333),
                    Format::Yaml,
                    &Limits::default(),
                    &budget,
                    0,
                )
                .await
                .unwrap();
                batch.len()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_yaml_upload_does_not_hold_up_the_others() {
    // More stalled uploads than there are parsing slots: each waits for the network without
    // holding a slot, so a complete body is still decoded.
    let stalled: Vec<_> = (0..vx_ingest::yaml::parallelism() + 2)
        .map(|_| {
            tokio::spawn(async {
                let first = stream::iter([Ok::<_, Infallible>(Bytes::from_static(
                    b"- {stream: s, type: t}\n",
                ))]);
                let body = first.chain(stream::pending()).boxed();
                let budget = InflightBudget::new(1 << 20);
                decode_body(body, Format::Yaml, &Limits::default(), &budget, 0).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let body = yaml(50);
    let budget = InflightBudget::new(1 << 20);
    let done = tokio::time::timeout(
        Duration::from_secs(20),
        decode_body(
            chunks(&body, 100),
            Format::Yaml,
            &Limits::default(),
            &budget,
            0,
        ),
    )
    .await
    .expect("a complete YAML body is decoded while others stall")
    .unwrap();
    assert_eq!(done.0.len(), 50);
    for t in stalled {
        t.abort();
    }
}
