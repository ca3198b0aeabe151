//! Writes request bodies for `bench/body.lua`: the same events (the shape of `bench/ingest.lua`)
//! as NDJSON and as binary frames, so both formats are measured with the same load generator.
//!
//! `cargo run --release -p vx-proto --example bench_bodies -- DIR [EVENTS] [STREAMS]`

use std::io::Write;
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};
use vx_proto::{Kind, Num};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .ok_or("usage: bench_bodies DIR [EVENTS] [STREAMS]")?,
    );
    let events: usize = args.next().map_or(Ok(1000), |s| s.parse())?;
    let streams: usize = args.next().map_or(Ok(100), |s| s.parse())?;
    std::fs::create_dir_all(&dir)?;
    let owned: Vec<(String, String, String, i64)> = (0..events)
        .map(|i| {
            (
                format!("bench-{}", (events + i) % streams),
                format!("player-{}", (i * 7) % 1000),
                format!("{{\"weapon\":\"bow\",\"n\":{i}}}"),
                i as i64,
            )
        })
        .collect();
    let mut ndjson = Vec::new();
    let mut wire = Vec::new();
    for (stream, entity, data, i) in &owned {
        writeln!(
            ndjson,
            "{{\"stream\":\"{stream}\",\"entity\":\"{entity}\",\"type\":\"damage\",\"ts\":{},\"kind\":\"counter\",\"value\":{},\"data\":{data}}}",
            1_732_000_000_000 + i,
            i % 50
        )?;
        wire.push(WireEvent {
            stream,
            entity: Some(entity),
            ty: "damage",
            ts: Some(1_732_000_000_000 + i),
            kind: Kind::Counter,
            value: Some(Num::Int(i % 50)),
            id: None,
            data: Some(data),
        });
    }
    let mut frames = Vec::new();
    encode_batch(
        &mut frames,
        &BatchHead {
            request_id: 1,
            ..BatchHead::default()
        },
        &wire,
    )?;
    std::fs::write(dir.join("ndjson.body"), &ndjson)?;
    std::fs::write(dir.join("frames.body"), &frames)?;
    println!(
        "ndjson {} bytes, frames {} bytes, {events} events",
        ndjson.len(),
        frames.len()
    );
    Ok(())
}
