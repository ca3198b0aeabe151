//! Seed inputs of the `yaml`, `frames`, `content` and `otlp` targets: valid bodies in each target's
//! input layout, which random mutation alone reaches slowly (a frame's length prefixes must
//! agree with its contents; a compressed stream carries checksums). `examples/seeds.rs` writes
//! them into `corpus/<target>/`; the unit tests check that each is accepted. The events are
//! vx-proto's (`vx_proto::testing::seed_views`, shared with the property tests' generators).

use std::io::Write;

use vx_proto::canonical_yaml::write_document;
use vx_proto::frames::{BatchHead, WireEvent, encode_batch};
use vx_proto::testing::seed_views;

/// Prefix of a chunked target's input: 64 KiB `max_event_bytes`, one chunk.
const WHOLE: [u8; 2] = [0, 0];

/// Seeds of the `frames` target.
pub fn frames() -> Vec<Vec<u8>> {
    let views = seed_views();
    let mut wires: Vec<WireEvent<'_>> = views.iter().copied().map(WireEvent::from).collect();
    // One event left to the server's clock, one with whitespace in `data`.
    wires[2].ts = None;
    wires[0].data = Some(r#"{ "weapon" : "bow" }"#);
    let mut out = Vec::new();
    let mut one = WHOLE.to_vec();
    let mut many = vec![0, 3, 1, 7, 0];
    for (i, w) in wires.iter().enumerate() {
        let mut body = Vec::new();
        if let Err(e) = encode_batch(&mut body, &BatchHead::default(), &[*w]) {
            panic!("seed {i} does not encode: {e}");
        }
        one.extend_from_slice(&body);
        many.extend_from_slice(&body);
    }
    let mut all = WHOLE.to_vec();
    if let Err(e) = encode_batch(&mut all, &BatchHead::default(), &wires) {
        panic!("seed batch does not encode: {e}");
    }
    // An empty frame between two.
    let mut with_empty = all.clone();
    if let Err(e) = encode_batch(&mut with_empty, &BatchHead::default(), &[]) {
        panic!("empty batch does not encode: {e}");
    }
    with_empty.extend_from_slice(&all[2..]);
    out.extend([one, many, all, with_empty]);
    out
}

/// Seeds of the `yaml` target.
pub fn yaml() -> Vec<Vec<u8>> {
    let mut canonical = WHOLE.to_vec();
    for v in seed_views() {
        write_document(&mut canonical, &v, None);
    }
    let mut chunked = vec![0, 2, 5, 1];
    chunked.extend_from_slice(&canonical[2..]);
    let hand = "%YAML 1.2\n# events\n---\n\
        - {stream: match-42, type: damage, kind: counter, value: 3, ts: 1732000000123}\n\
        - stream: 42\n  type: t\n  entity: ''\n  ts: '2024-11-19T07:06:40.123+01:00'\n  \
          data: &d {k: [1, 2.5, null, true, \"x\\ty\"], 'q': two}\n\
        - &e {stream: s, type: u, kind: gauge, value: -0.5, data: *d}\n\
        - *e\n\
        ---\n\
        stream: \"a/b c\"\n\
        type: pos:x\n\
        id: evt-1\n\
        data:\n  text: |\n    two\n    lines\n  nested:\n    - a\n    - {b: ~}\n\
        ...\n";
    let mut hand_in = WHOLE.to_vec();
    hand_in.extend_from_slice(hand.as_bytes());
    vec![canonical, chunked, hand_in]
}

/// Seeds of the `content` target: NDJSON bodies, compressed by the target (modes 0, 1) or
/// already compressed (modes 2, 3), within a 16 KiB limit, in chunks of 5 bytes.
pub fn content() -> Vec<Vec<u8>> {
    let body: &[u8] =
        b"{\"stream\":\"s\",\"type\":\"t\",\"ts\":1}\n\n{\"stream\":\"s\",\"type\":\"u\"}\n";
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        match e.write_all(body).and_then(|()| e.finish()) {
            Ok(gz) => gz,
            Err(e) => panic!("gzip: {e}"),
        }
    };
    let zs = match zstd::encode_all(body, 3) {
        Ok(z) => z,
        Err(e) => panic!("zstd: {e}"),
    };
    let mut out = Vec::new();
    for (mode, payload) in [(0u8, body), (1, body), (2, &gz[..]), (3, &zs[..])] {
        let mut s = vec![mode, 255, 5];
        s.extend_from_slice(payload);
        out.push(s);
    }
    // Two gzip members, two zstd frames: a body may concatenate them.
    for (mode, one) in [(2u8, &gz), (3, &zs)] {
        let mut s = vec![mode, 255, 0];
        s.extend_from_slice(one);
        s.extend_from_slice(one);
        out.push(s);
    }
    out
}

/// Seeds of the `otlp` target: a trace export (two spans, attributes of every kind, an event
/// and a link) and a logs export, each in protobuf and in OTLP/JSON, with an event limit that
/// fits them (255: 16 KiB) and one that rejects items (0: 64 bytes). The exports are built by
/// vx-otlp's shared OTLP test support (`vx_otlp::testing`).
pub fn otlp() -> Vec<Vec<u8>> {
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use opentelemetry_proto::tonic::trace::v1::{Span, span};
    use prost::Message as _;
    use vx_otlp::testing::{every_value_kind, json, log_record, logs, traces};

    let a_span = |id: u8| Span {
        parent_span_id: if id > 1 { vec![1; 8] } else { Vec::new() },
        attributes: every_value_kind(),
        events: vec![span::Event {
            time_unix_nano: 1,
            name: "e".into(),
            attributes: every_value_kind(),
            ..Default::default()
        }],
        links: vec![span::Link {
            trace_id: vec![2; 16],
            span_id: vec![2; 8],
            ..Default::default()
        }],
        ..vx_otlp::testing::span(1, id, "GET /x")
    };
    let traces = traces(Some("svc"), vec![a_span(1), a_span(2)]);
    let record = LogRecord {
        attributes: every_value_kind(),
        ..log_record("ERROR", "hello", Some(3))
    };
    let logs = logs(Some("svc"), vec![record]);
    let bodies = [
        (0u8, traces.encode_to_vec()),
        (1, logs.encode_to_vec()),
        (2, json(&traces)),
        (3, json(&logs)),
    ];
    let mut out = Vec::new();
    for limit in [255u8, 0] {
        for (mode, body) in &bodies {
            let mut s = vec![*mode, limit];
            s.extend_from_slice(body);
            out.push(s);
        }
    }
    out
}
