//! Unit tests of the YAML decoder: each rule of docs/API.md §2/§3 with its error class and field,
//! documents and sequences, aliases, limits, positions, and chunking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::decode_yaml;
use crate::canonical::write_event;
use crate::canonical_yaml::write_document;
use crate::decode::{LIMIT_DATA_DEPTH, LIMIT_EVENT_BYTES};
use crate::error::{ErrorClass, InputError};
use crate::event::{EventView, Kind, Num};
use crate::packed::Batch;
use crate::testing::Pieces;

const NOW: i64 = 1_000;
const MAX: usize = 1 << 20;

fn run(body: &str, sizes: &[usize], max: usize) -> Result<Vec<String>, InputError> {
    let mut batch = Batch::new();
    let reader = Pieces::new(body.as_bytes(), sizes);
    decode_yaml(reader, max, u64::MAX, NOW, &mut batch)?;
    Ok(batch
        .iter()
        .map(|ev| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, 0);
            String::from_utf8(out).unwrap()
        })
        .collect())
}

fn ok(body: &str) -> Vec<String> {
    run(body, &[], MAX).unwrap_or_else(|e| panic!("{body:?}: {e:?}"))
}

fn err(body: &str) -> InputError {
    match run(body, &[], MAX) {
        Ok(v) => panic!("{body:?} decoded to {v:?}"),
        Err(e) => e,
    }
}

fn invalid(body: &str, field: &str) -> InputError {
    let e = err(body);
    assert_eq!(e.class, ErrorClass::InvalidEvent, "{body:?}: {e:?}");
    assert_eq!(e.field.as_deref(), Some(field), "{body:?}: {e:?}");
    e
}

/// Canonical JSON of one event with `seq` 0.
fn c(json: &str) -> String {
    format!("{},\"seq\":0}}", json.strip_suffix('}').unwrap())
}

#[test]
fn documents_mappings_and_sequences() {
    let a = c(r#"{"stream":"s","type":"t","ts":5,"kind":"event"}"#);
    let b = c(r#"{"stream":"s","type":"u","ts":1000,"kind":"event"}"#);
    assert_eq!(ok("stream: s\ntype: t\nts: 5\n"), vec![a.clone()]);
    assert_eq!(
        ok("stream: s\ntype: t\nts: 5\n---\nstream: s\ntype: u\n"),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(
        ok(
            "---\n- {stream: s, type: t, ts: 5}\n- stream: s\n  type: u\n---\n- {stream: s, type: t, ts: 5}\n...\n"
        ),
        vec![a.clone(), b.clone(), a.clone()]
    );
    // Empty bodies, empty and null documents, empty sequences hold no events.
    for body in [
        "",
        "\n# nothing\n",
        "---\n",
        "---\n---\n",
        "~\n",
        "--- []\n",
        "[]",
    ] {
        assert_eq!(ok(body), Vec::<String>::new(), "{body:?}");
    }
    // Directives and a byte order mark are YAML.
    assert_eq!(
        ok("\u{feff}%YAML 1.2\n---\nstream: s\ntype: t\nts: 5\n"),
        vec![a]
    );
    // A JSON body is a YAML body.
    assert_eq!(ok(r#"[{"stream":"s","type":"u"}]"#), vec![b]);
}

#[test]
fn full_event_and_data_conversion() {
    let body = "stream: match-42\nentity: player-7\ntype: damage\nts: 1732000000123\n\
                kind: counter\nvalue: 12\nid: evt-0001\ndata:\n  weapon: bow\n  hits: [1, 2.50, +7, 0x1F, 0o17, .5, 1e3, -0]\n  \
                crit: true\n  none: ~\n  text: \"a\\tb\\u00e9\"\n  1: one\n  nested: {x: [[], {}]}\n";
    assert_eq!(
        ok(body),
        vec![c(
            r#"{"stream":"match-42","entity":"player-7","type":"damage","ts":1732000000123,"kind":"counter","value":12,"id":"evt-0001","data":{"weapon":"bow","hits":[1,2.50,7,31,15,0.5,1e3,-0],"crit":true,"none":null,"text":"a\tbé","1":"one","nested":{"x":[[],{}]}}}"#
        )]
    );
    // Scalars as data, and JSON-looking flow kept as written.
    assert_eq!(
        ok("stream: s\ntype: t\nts: 1\ndata: {\"a\":1.50,\"b\":[true,null,\"\\u0041\"]}\n"),
        vec![c(
            r#"{"stream":"s","type":"t","ts":1,"kind":"event","data":{"a":1.50,"b":[true,null,"A"]}}"#
        )]
    );
    assert_eq!(
        ok("stream: s\ntype: t\nts: 1\ndata: |\n  two\n  lines\n"),
        vec![c(
            r#"{"stream":"s","type":"t","ts":1,"kind":"event","data":"two\nlines\n"}"#
        )]
    );
    assert_eq!(
        ok("stream: s\ntype: t\nts: 1\ndata:\n"),
        vec![c(
            r#"{"stream":"s","type":"t","ts":1,"kind":"event","data":null}"#
        )]
    );
}

#[test]
fn plain_scalars_in_string_fields_are_their_text() {
    assert_eq!(
        ok("stream: 42\ntype: 1.5\nentity: true\nid: 0x1F\nts: 1\n"),
        vec![c(
            r#"{"stream":"42","entity":"true","type":"1.5","ts":1,"kind":"event","id":"0x1F"}"#
        )]
    );
    assert_eq!(
        ok("stream: !!str 42\ntype: t\nentity: ~\nid: null\nts: 1\n"),
        vec![c(r#"{"stream":"42","type":"t","ts":1,"kind":"event"}"#)]
    );
    assert_eq!(
        ok("stream: '~'\ntype: t\nentity: \"\"\nts: 1\n"),
        vec![c(r#"{"stream":"~","type":"t","ts":1,"kind":"event"}"#)]
    );
    invalid("stream: ~\ntype: t\n", "stream");
    invalid("stream: s\ntype: !!int 5\n", "type");
    invalid("stream: [a]\ntype: t\n", "stream");
    invalid("stream: s\ntype: a b\n", "type");
    invalid("stream: \"a\\u0001\"\ntype: t\n", "stream");
}

#[test]
fn ts_kind_and_value() {
    let ts = |v: &str| run(&format!("stream: s\ntype: t\nts: {v}\n"), &[], MAX);
    let got = |v: &str| ts(v).unwrap()[0].clone();
    assert!(got("2024-11-19T07:06:40.123456Z").contains("\"ts\":1732000000123"));
    assert!(got("\"2024-11-19T08:06:40.123+01:00\"").contains("\"ts\":1732000000123"));
    assert!(got("0x10").contains("\"ts\":16"));
    assert!(got("~").contains("\"ts\":1000"));
    for bad in [
        "1.5",
        "-1",
        "9007199254740992",
        "99999999999999999999999",
        ".inf",
        "true",
        "yesterday",
        "{}",
    ] {
        let e = ts(bad).unwrap_err();
        assert_eq!(
            (e.class, e.field.as_deref()),
            (ErrorClass::InvalidEvent, Some("ts")),
            "{bad}: {e:?}"
        );
    }
    let ev = |kv: &str| run(&format!("stream: s\ntype: t\nts: 1\n{kv}\n"), &[], MAX);
    assert!(
        ev("kind: counter\nvalue: 12.0").unwrap()[0].contains("\"kind\":\"counter\",\"value\":12,")
    );
    assert!(ev("kind: gauge\nvalue: -0.5").unwrap()[0].contains("\"value\":-0.5"));
    assert!(ev("value: 0x10").unwrap()[0].contains("\"value\":16"));
    let big = ev("value: 18446744073709551615").unwrap();
    assert!(
        big[0].contains("\"value\":1.8446744073709552e+19"),
        "{big:?}"
    );
    assert!(ev("kind: ~").unwrap()[0].contains("\"kind\":\"event\""));
    for (kv, field) in [
        ("kind: gauge\nvalue: .inf", "value"),
        ("value: .nan", "value"),
        ("value: -.Inf", "value"),
        ("value: 1e400", "value"),
        ("value: \"12\"", "value"),
        ("value: true", "value"),
        ("kind: counter\nvalue: 1.5", "value"),
        ("kind: counter", "value"),
        ("kind: Counter", "kind"),
        ("kind: [event]", "kind"),
    ] {
        let e = ev(kv).unwrap_err();
        assert_eq!(
            (e.class, e.field.as_deref()),
            (ErrorClass::InvalidEvent, Some(field)),
            "{kv}: {e:?}"
        );
    }
    invalid("stream: s\ntype: events\nkind: counter\nvalue: 1\n", "type");
}

#[test]
fn duplicate_keys_merge_keys_and_unknown_fields() {
    invalid("stream: s\ntype: t\nstream: s\n", "stream");
    invalid("stream: s\ntype: t\ndata: {a: 1, b: 2, a: 3}\n", "data");
    invalid("stream: s\ntype: t\ndata: {a: 1, \"a\": 3}\n", "data");
    // The same key at different levels or in different maps is fine.
    assert_eq!(
        ok("stream: s\ntype: t\nts: 1\ndata: {a: {a: 1}, b: [{a: 1}, {a: 2}]}\n").len(),
        1
    );
    invalid("- &base {stream: s, type: t}\n- <<: *base\n  ts: 1\n", "<<");
    invalid("stream: s\ntype: t\ndata:\n  <<: {a: 1}\n", "data");
    // A quoted "<<" is an ordinary key.
    assert!(ok("stream: s\ntype: t\nts: 1\ndata: {\"<<\": 1}\n")[0].contains(r#""data":{"<<":1}"#));
    let e = invalid("stream: s\ntype: t\nstreem: s\n", "streem");
    assert!(e.message.contains("unknown field"), "{e:?}");
    invalid("stream: s\n", "type");
    let e = err("stream: s\ntype: t\n[a]: 1\n");
    assert_eq!(e.class, ErrorClass::InvalidEvent);
    invalid("stream: s\ntype: t\ndata: {[a]: 1}\n", "data");
}

#[test]
fn tags_outside_the_core_schema_are_refused() {
    invalid("stream: s\ntype: t\ndata: !!binary aGVsbG8=\n", "data");
    invalid("stream: s\ntype: t\ndata: !!timestamp 2001-12-14\n", "data");
    invalid("stream: s\ntype: t\ndata: !!set {a: ~}\n", "data");
    invalid("stream: s\ntype: t\ndata: !custom x\n", "data");
    invalid("stream: !custom s\ntype: t\n", "stream");
    invalid("stream: s\ntype: t\ndata: !!int abc\n", "data");
    let e = err("!!omap\n- stream: s\n  type: t\n");
    assert_eq!(e.class, ErrorClass::InvalidEvent);
    let e = err("--- !custom\nstream: s\ntype: t\n");
    assert_eq!(e.class, ErrorClass::InvalidEvent);
    // Core tags are fine.
    assert!(
        ok("stream: s\ntype: t\nts: 1\ndata: !!map {a: !!str 1, b: !!float 2, c: !!null ~, d: !!seq [!!bool true], e: ! 5}\n")[0]
            .contains(r#""data":{"a":"1","b":2,"c":null,"d":[true],"e":"5"}"#)
    );
}

#[test]
fn non_finite_numbers_in_data_are_refused() {
    for v in [".inf", "-.inf", ".NaN", "+1e400"] {
        invalid(&format!("stream: s\ntype: t\ndata: [{v}]\n"), "data");
    }
    // A JSON-valid literal is kept as written, as from JSON.
    assert!(ok("stream: s\ntype: t\nts: 1\ndata: [1e400]\n")[0].contains("[1e400]"));
}

#[test]
fn nesting_is_bounded_like_json() {
    let nested = |depth: usize| {
        format!(
            "stream: s\ntype: t\nts: 1\ndata: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        )
    };
    assert_eq!(ok(&nested(64)).len(), 1);
    for depth in [65, 300, 100_000] {
        let e = err(&nested(depth));
        assert_eq!(e.class, ErrorClass::TooLarge, "{depth}: {e:?}");
        assert_eq!(e.limit.as_deref(), Some(LIMIT_DATA_DEPTH));
        assert_eq!(e.max, Some(64));
        if depth == 65 {
            assert_eq!(e.field.as_deref(), Some("data"));
        }
    }
    // Block style too, and in a sequence document.
    let mut block = String::from("- stream: s\n  type: t\n  data:\n");
    for d in 0..70 {
        block.push_str(&" ".repeat(4 + 2 * d));
        block.push_str("a:\n");
    }
    let e = err(&block);
    assert_eq!(e.limit.as_deref(), Some(LIMIT_DATA_DEPTH), "{e:?}");
}

#[test]
fn alias_bomb_is_refused_fast() {
    let mut bomb = String::from(
        "stream: s\ntype: t\ndata:\n  a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "  a{i}: &a{i} [*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p},*a{p}]\n"
        ));
    }
    let start = Instant::now();
    let e = err(&bomb);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(e.class, ErrorClass::TooLarge, "{e:?}");
    assert_eq!(e.limit.as_deref(), Some(LIMIT_EVENT_BYTES));
    assert_eq!(e.max, Some(MAX as u64));
    assert_eq!(e.index, Some(0));
    // Aliases are fine within the limit, and count against it.
    let body = "- &e {stream: s, type: t, ts: 1, data: &d {k: [1, 2]}}\n- *e\n- {stream: s, type: u, ts: 1, data: *d}\n";
    let got = ok(body);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], got[1]);
    assert!(got[2].contains(r#""data":{"k":[1,2]}"#));
    let small = "stream: s\ntype: t\ndata: {a: &x [aaaaaaaaaa, aaaaaaaaaa], b: [*x, *x, *x, *x]}\n";
    assert!(run(small, &[], 200).is_ok());
    let e = run(small, &[], 100).unwrap_err();
    assert_eq!(e.limit.as_deref(), Some(LIMIT_EVENT_BYTES));
    // A node that contains its own alias cannot become JSON.
    let e = err("stream: s\ntype: t\ndata: &a [1, *a]\n");
    assert_eq!(e.class, ErrorClass::InvalidEvent, "{e:?}");
    let e = err("&r\n- stream: s\n  type: t\n- *r\n");
    assert_eq!(e.class, ErrorClass::InvalidEvent, "{e:?}");
    // Anchors belong to their document.
    let e = err("- &e {stream: s, type: t}\n---\n- *e\n");
    assert_eq!(e.class, ErrorClass::Malformed, "{e:?}");
}

#[test]
fn events_and_tokens_over_the_limit() {
    let big = format!("stream: s\ntype: t\ndata: {}\n", "x".repeat(300));
    assert!(run(&big, &[], 400).is_ok());
    let e = run(&big, &[], 200).unwrap_err();
    assert_eq!(
        (e.class, e.limit.as_deref()),
        (ErrorClass::TooLarge, Some(LIMIT_EVENT_BYTES))
    );
    // A scalar far over the limit is refused while it is read, not once it is whole.
    let huge = format!("stream: s\ntype: t\ndata: \"{}", "x".repeat(200 << 10));
    let e = run(&huge, &[], 1024).unwrap_err();
    assert_eq!(
        (e.class, e.limit.as_deref()),
        (ErrorClass::TooLarge, Some(LIMIT_EVENT_BYTES)),
        "{e:?}"
    );
}

#[test]
fn positions_documents_and_indexes_in_errors() {
    let body = "- {stream: s, type: t}\n- {stream: s, type: t}\n---\nstream: s\ntype: t\n---\n- {stream: s, type: t}\n- stream: s\n  type: t\n  ts: nope\n";
    let e = invalid(body, "ts");
    assert_eq!((e.index, e.document), (Some(4), Some(2)), "{e:?}");
    assert_eq!((e.line, e.column), (Some(10), Some(7)), "{e:?}");
    // A missing field is reported at the event's start.
    let e = invalid("---\n- stream: s\n  type: t\n- stream: s\n", "type");
    assert_eq!(
        (e.index, e.document, e.line, e.column),
        (Some(1), Some(0), Some(4), Some(3)),
        "{e:?}"
    );
    let e = err("stream: s\ntype: t\n---\n\"a\"\n");
    assert_eq!(
        (e.class, e.document),
        (ErrorClass::InvalidEvent, Some(1)),
        "{e:?}"
    );
    let e = err("- stream: s\n  type: t\n- 5\n");
    assert_eq!(
        (e.class, e.index),
        (ErrorClass::InvalidEvent, Some(1)),
        "{e:?}"
    );
    let e = err("- stream: s\n  type: t\n- [a]\n");
    assert_eq!(
        (e.class, e.index),
        (ErrorClass::InvalidEvent, Some(1)),
        "{e:?}"
    );
    // Syntax errors are 400 with a position.
    for (body, line) in [
        ("stream: s\ntype: t\ndata: [s\n", 3),
        ("stream: s\ntype: b: c\n", 2),
        ("- {stream: s, type: t}\nb: c\n", 2),
        ("stream: s\ntype: t\ndata: 'x\n", 4),
    ] {
        let e = err(body);
        assert_eq!(e.class, ErrorClass::Malformed, "{body:?}: {e:?}");
        assert_eq!(e.line, Some(line), "{body:?}: {e:?}");
        assert!(e.column.is_some(), "{e:?}");
    }
    let e = err("stream: s\ntype: \"\u{1}\"\n");
    assert_eq!(e.class, ErrorClass::Malformed, "{e:?}");
    let mut bad = b"stream: s\ntype: t\ndata: \"".to_vec();
    bad.extend_from_slice(&[0xff, b'"', b'\n']);
    let mut batch = Batch::new();
    let e = decode_yaml(&bad[..], MAX, u64::MAX, NOW, &mut batch).unwrap_err();
    assert_eq!(e.class, ErrorClass::Malformed, "{e:?}");
    assert!(e.message.contains("UTF-8"), "{e:?}");
    let e = decode_yaml(
        &b"stream: s\ntype: t\x00\n"[..],
        MAX,
        u64::MAX,
        NOW,
        &mut batch,
    )
    .unwrap_err();
    assert_eq!(e.class, ErrorClass::Malformed, "{e:?}");
}

/// Bodies exercising most paths, valid and not.
fn corpus() -> Vec<String> {
    let mut bodies = vec![
        "stream: s\ntype: t\nts: 5\n---\n- {stream: s, type: u, data: {a: [1, 2.5, x]}}\n- stream: \"é😀\"\n  type: t\n  data: |\n    block\n".to_string(),
        "- &e {stream: s, type: t, ts: 1, data: &d {k: [1, 2]}}\n- *e\n- {stream: s, type: u, ts: 1, data: *d}\n".to_string(),
        "stream: s\ntype: t\nts: 2024-11-19T07:06:40.123Z\nkind: gauge\nvalue: 1.5\n".to_string(),
        "stream: s\ntype: t\nstream: s\n".to_string(),
        "stream: s\ntype: t\ndata: {a: 1\n".to_string(),
        "- {stream: s, type: t}\n- 5\n".to_string(),
        "stream: s\ntype: t\ndata: \"\\u00e9\\t\\\"x\"\n".to_string(),
    ];
    let mut out = Vec::new();
    for (i, v) in [Num::Int(-3), Num::Float(0.1)].into_iter().enumerate() {
        let ev = EventView {
            stream: "s\"\\\u{feff}",
            entity: Some("p\u{2028}"),
            ty: "a:b-c.d_e",
            ts: 7,
            kind: Kind::Gauge,
            value: Some(v),
            id: Some("x"),
            data: Some(r#"{"a":["\ud83d\ude00","\u0041",1.50,{"":null}]}"#),
        };
        write_document(&mut out, &ev, None);
        if i == 0 {
            out.extend_from_slice(b"...\n");
        }
    }
    bodies.push(String::from_utf8(out).unwrap());
    bodies
}

#[test]
fn where_the_reads_split_does_not_matter() {
    for body in corpus() {
        let whole = run(&body, &[], MAX);
        assert_eq!(run(&body, &[1], MAX), whole, "{body:?}");
        assert_eq!(run(&body, &[3, 1, 7], MAX), whole, "{body:?}");
        for at in 0..body.len() {
            let sizes = [at, usize::MAX];
            assert_eq!(run(&body, &sizes, MAX), whole, "{body:?} split at {at}");
        }
    }
}

#[test]
fn canonical_yaml_round_trips() {
    let bodies = corpus();
    let last = bodies.last().unwrap();
    let got = ok(last);
    assert_eq!(got.len(), 2);
    assert!(got[0].contains(r#""stream":"s\"\\"#), "{got:?}");
    // Escapes in `data` come back in serde_json's form, with the same value.
    assert!(
        got[0].contains(r#""data":{"a":["😀","A",1.50,{"":null}]}"#),
        "{got:?}"
    );
    // Re-encoding the decoded events gives the same YAML.
    let mut batch = Batch::new();
    decode_yaml(last.as_bytes(), MAX, u64::MAX, NOW, &mut batch).unwrap();
    let mut again = Vec::new();
    for ev in batch.iter() {
        write_document(&mut again, &ev, None);
    }
    let mut batch2 = Batch::new();
    decode_yaml(&again[..], MAX, u64::MAX, NOW, &mut batch2).unwrap();
    assert_eq!(
        batch.iter().collect::<Vec<_>>(),
        batch2.iter().collect::<Vec<_>>()
    );
}

/// Aliases let a small body name one large node in every event: the decoded request as a whole
/// is held to the body limit, so the amplification is refused with 413 instead of growing the
/// batch without bound (found by the `yaml` fuzz target's harness).
#[test]
fn alias_amplification_is_bounded_per_body() {
    let mut body = String::from("- {stream: s, type: t, data: {a0: &a0 \"");
    body.push_str(&"x".repeat(200));
    body.push('"');
    for i in 1..8 {
        body.push_str(&format!(", a{i}: &a{i} [*a{p}, *a{p}]", p = i - 1));
    }
    body.push_str("}}\n");
    for _ in 0..2000 {
        body.push_str("- {stream: s, type: t, data: *a7}\n");
    }
    let limit = 1u64 << 20;
    let mut batch = Batch::new();
    let e = decode_yaml(body.as_bytes(), 64 << 10, limit, NOW, &mut batch).unwrap_err();
    assert_eq!(e.class, ErrorClass::TooLarge);
    assert_eq!(e.limit.as_deref(), Some("ingest.max_body_bytes"));
    assert_eq!(e.max, Some(limit));
    assert!(e.index.is_some());
    // The batch stopped growing at the limit (plus the one event that crossed it).
    assert!(batch.mem_bytes() as u64 <= limit + (64 << 10) * 2);
    // With room for it, the same body decodes (every event is within its own limit).
    let mut batch = Batch::new();
    decode_yaml(body.as_bytes(), 64 << 10, u64::MAX, NOW, &mut batch).unwrap();
    assert_eq!(batch.len(), 2001);
}
