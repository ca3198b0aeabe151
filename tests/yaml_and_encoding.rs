//! YAML bodies and `Content-Encoding` over the real binary (docs/API.md §3, §5): YAML streams of
//! documents and sequences are stored like JSON; replay as YAML gives the canonical events as
//! documents, and posting them back stores the same events; gzip and zstd bodies of any
//! format; a zip bomb and an alias bomb are refused fast (413) with nothing stored; bad
//! compressed data is 400; unknown encodings 415.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use vx_proto::Batch;
use vx_proto::canonical::write_event;

const YAML: &str = "application/yaml";

fn zstd(body: &[u8]) -> Vec<u8> {
    zstd::encode_all(body, 3).unwrap()
}

/// Events as YAML: every other one a JSON-style flow document, the rest grouped in block
/// sequences of flow mappings.
fn yaml_body(events: &[Event]) -> String {
    let mut out = String::from("%YAML 1.2\n# events\n");
    for (i, chunk) in events.chunks(3).enumerate() {
        if i % 2 == 0 {
            for e in chunk {
                out.push_str("---\n");
                out.push_str(&e.to_json());
                out.push('\n');
            }
        } else {
            out.push_str("---\n");
            for e in chunk {
                out.push_str("- ");
                out.push_str(&e.to_json());
                out.push('\n');
            }
        }
    }
    out
}

/// `GET …/events` with `Accept: application/yaml`.
async fn replay_yaml(api: &Api, stream: &str) -> Resp {
    let r = api
        .get_with(
            &format!("/v1/streams/{}/events?limit=100000", enc(stream)),
            &[("accept", YAML)],
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.header("content-type"), Some(YAML), "{r}");
    r
}

/// A YAML replay without its `seq` lines: a body that can be posted back.
fn without_seq(yaml: &str) -> String {
    yaml.lines()
        .filter(|l| !l.starts_with("seq: "))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The canonical JSON of the events in a YAML replay, decoded with the server's own decoder
/// and numbered by the replay's `seq` lines.
fn yaml_as_canonical(yaml: &str) -> Vec<String> {
    let seqs: Vec<u64> = yaml
        .lines()
        .filter_map(|l| l.strip_prefix("seq: "))
        .map(|s| s.parse().unwrap())
        .collect();
    let mut batch = Batch::new();
    vx_proto::decode::decode_yaml(
        without_seq(yaml).as_bytes(),
        1 << 20,
        u64::MAX,
        0,
        &mut batch,
    )
    .unwrap_or_else(|e| panic!("replayed YAML does not decode: {e:?}\n{yaml}"));
    assert_eq!(batch.len(), seqs.len(), "{yaml}");
    batch
        .iter()
        .zip(seqs)
        .map(|(ev, seq)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, seq);
            String::from_utf8(out).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn yaml_ingest_and_yaml_replay_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    // Varied events as YAML documents and sequences.
    let mut rng = Rng::new(7);
    let before = now_ms();
    let mut events: Vec<Event> = (0..60).map(|n| varied_event(&mut rng, "y/1", n)).collect();
    let body = yaml_body(&events);
    let r = api.post_events(Some(YAML), body, &[]).await;
    let after = now_ms();
    let ok = assert_accepted(&r, 60);
    assert_eq!(ok["last_seq"]["y/1"], 60, "{r}");
    for e in &mut events {
        if let Ts::Absent(..) = e.ts {
            e.ts = Ts::Absent(before, after);
        }
    }
    let lines = api.replay_all("y/1").await;
    assert_eq!(lines.len(), 60);
    for (i, (line, ev)) in lines.iter().zip(&events).enumerate() {
        // `data` from YAML is the same value; its escapes are those of the YAML decoder.
        if let Err(e) = ev.check(&line.value, None, i as u64 + 1) {
            panic!("event {i}: {e}");
        }
    }

    // Replay as YAML: the same canonical events, one per document.
    let r = replay_yaml(api, "y/1").await;
    let yaml = r.text();
    assert_eq!(yaml.matches("---\n").count(), 60, "{yaml}");
    assert_eq!(r.header_u64("x-vx-last-seq"), 60);
    let ndjson: Vec<String> = lines.iter().map(|l| l.raw.clone()).collect();
    assert_eq!(yaml_as_canonical(&yaml), ndjson);

    // Posted back (to another stream), the replayed YAML stores the same events.
    let again = without_seq(&yaml).replace("\nstream: \"y/1\"\n", "\nstream: \"y/2\"\n");
    let r = api
        .post_events(Some("text/yaml; charset=utf-8"), again, &[])
        .await;
    assert_accepted(&r, 60);
    let copy = api.replay_all("y/2").await;
    assert_eq!(copy.len(), 60);
    for (a, b) in lines.iter().zip(&copy) {
        assert_eq!(a.raw.replace("\"y/1\"", "\"y/2\""), b.raw);
    }

    // Block style with the YAML rules of docs/API.md §3: plain scalars in string fields are text,
    // RFC 3339 `ts`, `data` converted to compact JSON, aliases expanded.
    let block = "\
- stream: 42
  type: damage
  entity: player-7
  ts: 2024-11-19T07:06:40.123456Z
  kind: counter
  value: 12
  id: evt-0001
  data: &d
    weapon: bow
    hits: [1, 2.50, 0x1F]
    note: |
      two
      lines
- {stream: 42, type: heal, ts: 1732000000999, data: *d}
";
    let r = api
        .post_events(Some("application/x-yaml"), block, &[])
        .await;
    assert_accepted(&r, 2);
    let (_, lines) = api.replay("42", "").await;
    let data = serde_json::json!({"weapon": "bow", "hits": [1, 2.50, 31], "note": "two\nlines\n"});
    assert_eq!(lines[0].value["stream"], "42");
    assert_eq!(lines[0].value["ts"], 1_732_000_000_123i64);
    assert_eq!(lines[0].value["value"], 12);
    assert_eq!(lines[0].value["data"], data);
    assert!(
        lines[0].raw.contains(r#""hits":[1,2.50,31]"#),
        "{}",
        lines[0].raw
    );
    assert_eq!(lines[1].value["data"], data);

    // An empty YAML body, or only empty documents, is a no-op.
    for body in ["", "---\n", "--- []\n...\n"] {
        assert_accepted(&api.post_events(Some(YAML), body, &[]).await, 0);
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn yaml_errors_are_refused_whole_with_positions() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    let cases: &[(&str, u16, &str, Option<&str>)] = &[
        (
            "- {stream: e, type: t}\n---\nstream: e\ntype: t\nstream: e\n",
            422,
            "invalid_event",
            Some("stream"),
        ),
        (
            "- {stream: e, type: t}\n- <<: {stream: e}\n  type: t\n",
            422,
            "invalid_event",
            Some("<<"),
        ),
        (
            "stream: e\ntype: t\ndata: !!binary aGk=\n",
            422,
            "invalid_event",
            Some("data"),
        ),
        (
            "stream: e\ntype: t\nkind: gauge\nvalue: .inf\n",
            422,
            "invalid_event",
            Some("value"),
        ),
        (
            "stream: e\ntype: t\nbogus: 1\n",
            422,
            "invalid_event",
            Some("bogus"),
        ),
        ("stream: e\ntype: t\ndata: [1, 2\n", 400, "malformed", None),
    ];
    for (body, status, code, field) in cases {
        let r = api.post_events(Some(YAML), *body, &[]).await;
        let err = assert_error(&r, *status, code);
        assert_eq!(
            err.get("field").and_then(Value::as_str),
            *field,
            "{body:?}: {r}"
        );
        assert!(
            err.get("line").is_some() && err.get("column").is_some(),
            "{r}"
        );
        assert_eq!(r.header("x-vx-queue-fill"), Some("0.00"));
    }
    // The index and document of the bad event.
    let r = api
        .post_events(
            Some(YAML),
            "- {stream: e, type: t}\n---\n- {stream: e, type: t}\n- {stream: e, type: t, ts: -1}\n",
            &[],
        )
        .await;
    let err = assert_error(&r, 422, "invalid_event");
    assert_eq!(
        (err["index"].as_u64(), err["document"].as_u64()),
        (Some(2), Some(1)),
        "{r}"
    );
    assert_eq!(
        (err["line"].as_u64(), err["field"].as_str()),
        (Some(4), Some("ts")),
        "{r}"
    );

    // Nesting deeper than 64 levels is 413, like JSON.
    let deep = format!(
        "stream: e\ntype: t\ndata: {}{}\n",
        "[".repeat(65),
        "]".repeat(65)
    );
    let r = api.post_events(Some(YAML), deep, &[]).await;
    let err = assert_error(&r, 413, "too_large");
    assert_eq!(err["max"], 64, "{r}");

    // Nothing of any of these was stored.
    let (r, _) = api.replay("e", "").await;
    assert_error(&r, 404, "not_found");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alias_bomb_is_refused_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    // "Billion laughs": 9^10 strings if expanded.
    let mut bomb = String::from(
        "stream: bomb\ntype: t\ndata:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..=10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "  a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let start = Instant::now();
    let r = api.post_events(Some(YAML), bomb, &[]).await;
    let took = start.elapsed();
    let err = assert_error(&r, 413, "too_large");
    assert_eq!(err["limit"], "ingest.max_event_bytes", "{r}");
    assert_eq!(err["max"], 1 << 20, "{r}");
    assert_eq!(err["index"], 0, "{r}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let (r, _) = api.replay("bomb", "").await;
    assert_error(&r, 404, "not_found");

    // The server still answers, YAML included.
    let r = api
        .post_events(Some(YAML), "stream: after\ntype: t\n", &[])
        .await;
    assert_accepted(&r, 1);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gzip_and_zstd_bodies() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data")).start();
    let api = &server.api;

    let mut rng = Rng::new(11);
    let events: Vec<Event> = (0..40)
        .map(|n| {
            let mut e = varied_event(&mut rng, "z/1", n);
            e.ts = Ts::Ms(1_732_000_000_000 + n as i64);
            e
        })
        .collect();
    let (a, b) = events.split_at(20);
    let (a1, a2) = a.split_at(10);
    let (b1, b2) = b.split_at(10);
    let sends: [(&str, &str, Vec<u8>); 4] = [
        (NDJSON, "gzip", gzip(ndjson(a1).as_bytes())),
        (JSON, "zstd", zstd(json_array(a2).as_bytes())),
        (YAML, "GZIP", gzip(yaml_body(b1).as_bytes())),
        (NDJSON, "identity, zstd", zstd(ndjson(b2).as_bytes())),
    ];
    for (ct, enc, body) in sends {
        let r = api
            .post_events(Some(ct), body, &[("content-encoding", enc)])
            .await;
        assert_accepted(&r, 10);
    }
    let lines = api.replay_all("z/1").await;
    assert_eq!(lines.len(), 40);
    for (i, (line, ev)) in lines.iter().zip(&events).enumerate() {
        if let Err(e) = ev.check(&line.value, None, i as u64 + 1) {
            panic!("event {i}: {e}");
        }
    }

    // Bad compressed bytes are 400, unknown codings 415; nothing stored.
    let good = gzip(ndjson(a1).as_bytes());
    let mut bad_crc = good.clone();
    let at = bad_crc.len() - 8;
    bad_crc[at] ^= 0xff;
    for (enc, body) in [
        ("gzip", b"not gzip at all".to_vec()),
        ("gzip", bad_crc),
        ("gzip", good[..good.len() / 2].to_vec()),
        ("zstd", b"\x28\xb5\x2f\xfd garbage".to_vec()),
    ] {
        let r = api
            .post_events(Some(NDJSON), body, &[("content-encoding", enc)])
            .await;
        let err = assert_error(&r, 400, "malformed");
        assert!(err["message"].as_str().unwrap().contains(enc), "{r}");
    }
    for enc in ["br", "deflate", "gzip, zstd"] {
        let r = api
            .post_events(Some(NDJSON), good.clone(), &[("content-encoding", enc)])
            .await;
        let err = assert_error(&r, 415, "unsupported_media_type");
        assert!(
            err["supported"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == "zstd"),
            "{r}"
        );
    }
    assert_eq!(api.replay_all("z/1").await.len(), 40);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zip_bomb_is_refused_fast() {
    let tmp = tempfile::tempdir().unwrap();
    let server = ServerConfig::new(tmp.path().join("data"))
        .env("VX_INGEST_MAX_BODY_BYTES", "16MiB")
        .start();
    let api = &server.api;

    // One real event, then 1 GiB of blank lines: ~1 MiB gzipped, ~33 KiB as zstd.
    let head = ndjson(&[Event::simple("bomb", "t", 1, None)]);
    let block = vec![b'\n'; 1 << 20];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut zs = zstd::stream::Encoder::new(Vec::new(), 19).unwrap();
    gz.write_all(head.as_bytes()).unwrap();
    zs.write_all(head.as_bytes()).unwrap();
    for _ in 0..1024 {
        gz.write_all(&block).unwrap();
        zs.write_all(&block).unwrap();
    }
    let gz = gz.finish().unwrap();
    let zs = zs.finish().unwrap();
    for (enc, body) in [("gzip", gz), ("zstd", zs)] {
        let start = Instant::now();
        let r = api
            .post_events(Some(NDJSON), body, &[("content-encoding", enc)])
            .await;
        let took = start.elapsed();
        let err = assert_error(&r, 413, "too_large");
        assert_eq!(err["limit"], "ingest.max_body_bytes", "{r}");
        assert_eq!(err["max"], 16 << 20, "{r}");
        assert!(took < Duration::from_secs(10), "{enc} took {took:?}");
    }
    let (r, _) = api.replay("bomb", "").await;
    assert_error(&r, 404, "not_found");
    server.stop();
}
