//! A rough throughput measurement of the YAML decoder against NDJSON and against serde-saphyr
//! (the serde YAML crate measured in docs/DEPENDENCIES.md), not an assertion. Run it with:
//! `cargo test --release -p vx-proto --test yaml_throughput -- --ignored --nocapture`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use vx_proto::Batch;
use vx_proto::decode::{Decoder, Format, decode_yaml};

const EVENTS: usize = 200_000;

fn fields(i: usize) -> (String, String, u64, u64) {
    (
        format!("match-{}", i % 64),
        format!("player-{}", i % 1000),
        1_732_000_000_000u64 + i as u64,
        (i % 100) as u64,
    )
}

fn ndjson() -> Vec<u8> {
    (0..EVENTS)
        .map(|i| {
            let (s, e, ts, v) = fields(i);
            format!(
                "{{\"stream\":\"{s}\",\"entity\":\"{e}\",\"type\":\"damage\",\"ts\":{ts},\"kind\":\"counter\",\"value\":{v},\"id\":\"evt-{i}\",\"data\":{{\"weapon\":\"bow\",\"crit\":true}}}}\n"
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// Block-style YAML: one event per document, or one sequence of all.
fn yaml(documents: bool) -> Vec<u8> {
    (0..EVENTS)
        .map(|i| {
            let (s, e, ts, v) = fields(i);
            let ev = format!(
                "stream: {s}\n  entity: {e}\n  type: damage\n  ts: {ts}\n  kind: counter\n  value: {v}\n  id: evt-{i}\n  data: {{weapon: bow, crit: true}}\n"
            );
            if documents {
                format!("---\n{}", ev.replace("\n  ", "\n"))
            } else {
                format!("- {ev}")
            }
        })
        .collect::<String>()
        .into_bytes()
}

fn report(name: &str, bytes: usize, secs: f64) {
    println!(
        "{name}: {:.0} k events/s, {:.1} MB/s",
        EVENTS as f64 / secs / 1e3,
        bytes as f64 / secs / 1e6
    );
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Owned {
    stream: String,
    entity: Option<String>,
    #[serde(rename = "type")]
    ty: String,
    ts: Option<u64>,
    kind: Option<String>,
    value: Option<f64>,
    id: Option<String>,
    data: Option<serde_json::Value>,
}

#[test]
#[ignore = "timing, run by hand in release mode"]
fn yaml_throughput() {
    let body = ndjson();
    let start = Instant::now();
    let mut d = Decoder::new(Format::Ndjson, 1 << 20, 0).unwrap();
    let mut batch = Batch::new();
    for chunk in body.chunks(64 << 10) {
        d.feed(chunk, &mut batch).unwrap();
    }
    d.finish(&mut batch).unwrap();
    assert_eq!(batch.len(), EVENTS);
    report(
        "NDJSON (vx decoder)",
        body.len(),
        start.elapsed().as_secs_f64(),
    );

    for documents in [true, false] {
        let body = yaml(documents);
        let shape = if documents {
            "documents"
        } else {
            "one sequence"
        };
        let start = Instant::now();
        let mut batch = Batch::new();
        decode_yaml(&body[..], 1 << 20, u64::MAX, 0, &mut batch).unwrap();
        assert_eq!(batch.len(), EVENTS);
        report(
            &format!("YAML {shape} (vx decoder on granit-parser)"),
            body.len(),
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        let mut parser =
            granit_parser::Parser::new_from_iter(std::str::from_utf8(&body).unwrap().chars());
        let mut n = 0usize;
        while let Some(ev) = parser.next_event() {
            ev.unwrap();
            n += 1;
        }
        assert!(n > EVENTS);
        report(
            &format!("YAML {shape} (granit-parser events only)"),
            body.len(),
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        let mut reader = &body[..];
        let events = if documents {
            serde_saphyr::read::<_, Owned>(&mut reader)
                .map(Result::unwrap)
                .count()
        } else {
            let opts = serde_saphyr::options! {
                budget: serde_saphyr::budget! {
                    max_reader_input_bytes: None,
                    max_events: usize::MAX,
                    max_nodes: usize::MAX,
                },
            };
            serde_saphyr::from_reader_with_options::<_, Vec<Owned>>(reader, opts)
                .unwrap()
                .len()
        };
        assert_eq!(events, EVENTS);
        report(
            &format!("YAML {shape} (serde-saphyr into a struct)"),
            body.len(),
            start.elapsed().as_secs_f64(),
        );
    }
}
