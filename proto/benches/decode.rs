//! Decode throughput per ingest format: the same 1000 events (~160 bytes each as NDJSON, the
//! shape of `bench/ingest.lua`) encoded as NDJSON, a JSON array, a YAML stream and binary
//! frames, decoded from 64 KiB chunks into a packed `Batch`. divan reports bytes/s and
//! events/s.
//!
//! `cargo bench -p vx-proto --bench decode`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use vx_proto::Batch;
use vx_proto::canonical_yaml::write_document;
use vx_proto::decode::{Decoder, Format, decode_yaml};
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};
use vx_proto::{EventView, Kind, Num};

const EVENTS: usize = 1000;
const CHUNK: usize = 64 << 10;
const MAX_EVENT: usize = 1 << 20;

fn main() {
    divan::main();
}

struct Owned {
    stream: String,
    entity: String,
    data: String,
    i: i64,
}

fn events() -> Vec<Owned> {
    (0..EVENTS)
        .map(|i| Owned {
            stream: format!("bench-{}", i % 100),
            entity: format!("player-{}", (i * 7) % 1000),
            data: format!("{{\"weapon\":\"bow\",\"n\":{i}}}"),
            i: i as i64,
        })
        .collect()
}

fn view(o: &Owned) -> EventView<'_> {
    EventView {
        stream: &o.stream,
        entity: Some(&o.entity),
        ty: "damage",
        ts: 1_732_000_000_000 + o.i,
        kind: Kind::Counter,
        value: Some(Num::Int(o.i % 50)),
        id: None,
        data: Some(&o.data),
    }
}

fn json_line(o: &Owned) -> String {
    format!(
        "{{\"stream\":\"{}\",\"entity\":\"{}\",\"type\":\"damage\",\"ts\":{},\"kind\":\"counter\",\"value\":{},\"data\":{}}}",
        o.stream,
        o.entity,
        1_732_000_000_000 + o.i,
        o.i % 50,
        o.data
    )
}

fn body(format: Format) -> Vec<u8> {
    let evs = events();
    match format {
        Format::Ndjson => evs
            .iter()
            .map(|o| json_line(o) + "\n")
            .collect::<String>()
            .into_bytes(),
        Format::Json => {
            let lines: Vec<String> = evs.iter().map(json_line).collect();
            format!("[{}]", lines.join(",")).into_bytes()
        }
        Format::Yaml => {
            let mut out = Vec::new();
            for o in &evs {
                write_document(&mut out, &view(o), None);
            }
            out
        }
        Format::Frames => {
            let wire: Vec<WireEvent<'_>> = evs.iter().map(|o| WireEvent::from(view(o))).collect();
            let mut out = Vec::new();
            encode_batch(&mut out, &BatchHead::default(), &wire).unwrap();
            out
        }
    }
}

fn decode(format: Format, body: &[u8]) -> Batch {
    let mut batch = Batch::new();
    if format == Format::Yaml {
        decode_yaml(body, MAX_EVENT, u64::MAX, 0, &mut batch).unwrap();
        return batch;
    }
    let mut d = Decoder::new(format, MAX_EVENT, 0).unwrap();
    for chunk in body.chunks(CHUNK) {
        d.feed(chunk, &mut batch).unwrap();
    }
    d.finish(&mut batch).unwrap();
    batch
}

fn run(bencher: Bencher<'_, '_>, format: Format) {
    let body = body(format);
    assert_eq!(decode(format, &body).len(), EVENTS);
    bencher
        .counter(BytesCount::new(body.len()))
        .counter(ItemsCount::new(EVENTS))
        .bench(|| decode(format, black_box(&body)));
}

#[divan::bench]
fn ndjson(b: Bencher<'_, '_>) {
    run(b, Format::Ndjson);
}

#[divan::bench]
fn json_array(b: Bencher<'_, '_>) {
    run(b, Format::Json);
}

#[divan::bench]
fn yaml(b: Bencher<'_, '_>) {
    run(b, Format::Yaml);
}

#[divan::bench]
fn frames(b: Bencher<'_, '_>) {
    run(b, Format::Frames);
}
