//! A rough throughput measurement of the decoders, not an assertion (timings on shared CI
//! machines are noise). Run it with:
//! `cargo test --release -p vx-proto --test decode_throughput -- --ignored --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;
use vx_proto::Batch;
use vx_proto::decode::{Decoder, Format};
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};

const REQUESTS: usize = 1000;
const PER_REQUEST: usize = 1000;

fn event(i: usize) -> String {
    format!(
        r#"{{"stream":"match-{}","entity":"player-{}","type":"damage","ts":{},"kind":"counter","value":{},"id":"evt-{i}","data":{{"weapon":"bow","crit":{}}}}}"#,
        i % 64,
        i % 1000,
        1_732_000_000_000u64 + i as u64,
        i % 100,
        i.is_multiple_of(2)
    )
}

fn small(i: usize) -> String {
    format!(
        r#"{{"stream":"s{}","type":"click","value":{}}}"#,
        i % 16,
        i % 10
    )
}

/// An NDJSON body's events as one BATCH frame (an HTTP frames body).
fn frames_body(ndjson: &str) -> Vec<u8> {
    let mut d = Decoder::new(Format::Ndjson, 1 << 20, 0).unwrap();
    let mut batch = Batch::new();
    d.feed(ndjson.as_bytes(), &mut batch).unwrap();
    d.finish(&mut batch).unwrap();
    let wire: Vec<WireEvent<'_>> = batch.iter().map(WireEvent::from).collect();
    let mut out = Vec::new();
    encode_batch(&mut out, &BatchHead::default(), &wire).unwrap();
    out
}

/// Request bodies of `PER_REQUEST` events each.
fn requests(format: Format, make: fn(usize) -> String) -> Vec<Vec<u8>> {
    (0..REQUESTS)
        .map(|r| {
            let events = (0..PER_REQUEST).map(|i| make(r * PER_REQUEST + i));
            match format {
                Format::Ndjson => events.map(|e| e + "\n").collect::<String>().into_bytes(),
                Format::Json => format!("[{}]", events.collect::<Vec<_>>().join(",")).into_bytes(),
                // YAML is read from a reader, not fed in chunks: see tests/yaml_throughput.rs.
                Format::Yaml => unreachable!("only NDJSON and JSON are fed in chunks"),
                // The same events, re-encoded as one BATCH frame.
                Format::Frames => frames_body(&events.map(|e| e + "\n").collect::<String>()),
            }
        })
        .collect()
}

#[test]
#[ignore = "timing, run by hand in release mode"]
fn decode_throughput() {
    for (name, make) in [
        ("161-byte", event as fn(usize) -> String),
        ("45-byte", small),
    ] {
        for format in [Format::Ndjson, Format::Json, Format::Frames] {
            let bodies = requests(format, make);
            let bytes: usize = bodies.iter().map(Vec::len).sum();
            let n = REQUESTS * PER_REQUEST;
            let mut best = f64::MAX;
            for _ in 0..3 {
                let start = Instant::now();
                let mut events = 0;
                for body in &bodies {
                    let mut d = Decoder::new(format, 1 << 20, 0).unwrap();
                    let mut batch = Batch::new();
                    // 64 KiB chunks, as a server might see them.
                    for chunk in body.chunks(64 << 10) {
                        d.feed(chunk, &mut batch).unwrap();
                    }
                    d.finish(&mut batch).unwrap();
                    events += batch.len();
                }
                assert_eq!(events, n);
                best = best.min(start.elapsed().as_secs_f64());
            }
            if format == Format::Ndjson {
                // Baseline: serde_json alone, skipping over each line's value.
                let start = Instant::now();
                for body in &bodies {
                    for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                        serde_json::from_slice::<serde::de::IgnoredAny>(line).unwrap();
                    }
                }
                let t = start.elapsed().as_secs_f64();
                println!(
                    "{name} events, serde_json IgnoredAny baseline: {:.2} M events/s",
                    n as f64 / t / 1e6
                );
            }
            println!(
                "{name} events, {format:?}: {:.2} M events/s, {:.0} MB/s",
                n as f64 / best / 1e6,
                bytes as f64 / best / 1e6
            );
        }
    }
}
