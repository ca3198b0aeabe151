//! A rough measurement of compressed ingest, not an assertion: NDJSON decoded as sent, from
//! gzip and from zstd (decompressed size per second), and how long a zip bomb takes to be
//! refused at the default body limit. Run it with:
//! `cargo test --release -p vx-ingest --test encoding_throughput -- --ignored --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::io::Write;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream;
use vx_ingest::{Encoding, Format, InflightBudget, Limits, decode_encoded_body};

fn body() -> Vec<u8> {
    (0..200_000)
        .map(|i| {
            format!(
                "{{\"stream\":\"match-{}\",\"entity\":\"player-{}\",\"type\":\"damage\",\"ts\":{},\"kind\":\"counter\",\"value\":{},\"id\":\"evt-{i}\",\"data\":{{\"weapon\":\"bow\"}}}}\n",
                i % 64,
                i % 1000,
                1_732_000_000_000u64 + i,
                i % 100
            )
        })
        .collect::<String>()
        .into_bytes()
}

async fn run(bytes: &[u8], encoding: Encoding, limits: &Limits) -> (f64, bool) {
    let chunks: Vec<Result<Bytes, Infallible>> = bytes
        .chunks(64 << 10)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let budget = InflightBudget::new(1 << 30);
    let start = Instant::now();
    let r = decode_encoded_body(
        stream::iter(chunks),
        Format::Ndjson,
        encoding,
        limits,
        &budget,
        0,
    )
    .await;
    (start.elapsed().as_secs_f64(), r.is_ok())
}

#[tokio::test]
#[ignore = "timing, run by hand in release mode"]
async fn encoding_throughput() {
    let plain = body();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let gz = gz.finish().unwrap();
    let zs = zstd::encode_all(&plain[..], 3).unwrap();
    let limits = Limits::default();
    for (name, bytes, enc) in [
        ("identity", &plain, Encoding::Identity),
        ("gzip", &gz, Encoding::Gzip),
        ("zstd", &zs, Encoding::Zstd),
    ] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let (t, ok) = run(bytes, enc, &limits).await;
            assert!(ok);
            best = best.min(t);
        }
        println!(
            "NDJSON {name}: {} bytes sent, {:.0} MB/s of decoded body",
            bytes.len(),
            plain.len() as f64 / best / 1e6
        );
    }
    let block = vec![b'\n'; 1 << 20];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut zs = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
    for _ in 0..1024 {
        gz.write_all(&block).unwrap();
        zs.write_all(&block).unwrap();
    }
    for (name, bytes, enc) in [
        ("gzip", gz.finish().unwrap(), Encoding::Gzip),
        ("zstd", zs.finish().unwrap(), Encoding::Zstd),
    ] {
        let (t, ok) = run(&bytes, enc, &limits).await;
        assert!(!ok);
        println!(
            "{name} bomb of 1 GiB ({} bytes sent): refused at the 64 MiB limit after {:.0} ms",
            bytes.len(),
            t * 1e3
        );
    }
}
