#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::canonical::write_event;
use crate::error::ErrorClass;

const NOW: i64 = 1_000;
const MAX: usize = 1 << 20;

fn canonical(batch: &Batch) -> Vec<String> {
    batch
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, i as u64 + 1);
            String::from_utf8(out).unwrap()
        })
        .collect()
}

/// Decode `body` fed in chunks of the given sizes (the rest in one chunk).
fn run_chunks(
    format: Format,
    max: usize,
    body: &[u8],
    sizes: &[usize],
) -> Result<Vec<String>, InputError> {
    let mut d = Decoder::new(format, max, NOW).unwrap();
    let mut batch = Batch::new();
    let mut rest = body;
    for &n in sizes {
        let (a, b) = rest.split_at(n.min(rest.len()));
        d.feed(a, &mut batch)?;
        rest = b;
    }
    d.feed(rest, &mut batch)?;
    d.finish(&mut batch)?;
    Ok(canonical(&batch))
}

fn run(format: Format, body: &str) -> Result<Vec<String>, InputError> {
    run_chunks(format, MAX, body.as_bytes(), &[])
}

fn ok(format: Format, body: &str) -> Vec<String> {
    match run(format, body) {
        Ok(v) => v,
        Err(e) => panic!("{body:?} failed: {e:?}"),
    }
}

fn err(format: Format, body: &str) -> InputError {
    match run(format, body) {
        Ok(v) => panic!("{body:?} decoded to {v:?}"),
        Err(e) => e,
    }
}

/// One NDJSON event; returns its canonical form.
fn one(body: &str) -> String {
    let v = ok(Format::Ndjson, body);
    assert_eq!(v.len(), 1, "{body}");
    v.into_iter().next().unwrap()
}

/// A 422 on `field` for a one-line NDJSON body.
fn invalid(body: &str, field: &str) -> InputError {
    let e = err(Format::Ndjson, body);
    assert_eq!(e.class, ErrorClass::InvalidEvent, "{body}: {e:?}");
    assert_eq!(e.field.as_deref(), Some(field), "{body}: {e:?}");
    assert_eq!(e.index, Some(0), "{body}: {e:?}");
    assert!(
        e.message.contains(field),
        "{body}: message {:?} names no field",
        e.message
    );
    e
}

fn ev(fields: &str) -> String {
    format!("{{\"stream\":\"s\",\"type\":\"t\",{fields}}}")
}

#[test]
fn minimal_and_full_events() {
    assert_eq!(
        one(r#"{"stream":"s","type":"t"}"#),
        r#"{"stream":"s","type":"t","ts":1000,"kind":"event","seq":1}"#
    );
    assert_eq!(
        one(
            r#"{"stream": "match-42", "entity": "player-7", "type": "damage", "ts": 1732000000123,
 "kind": "counter", "value": 12, "id": "evt-0001", "data": {"weapon": "bow"}}"#
                .replace('\n', " ")
                .as_str()
        ),
        r#"{"stream":"match-42","entity":"player-7","type":"damage","ts":1732000000123,"kind":"counter","value":12,"id":"evt-0001","data":{"weapon":"bow"},"seq":1}"#
    );
    // Field order in the input does not matter; escapes in strings are decoded.
    assert_eq!(
        one(r#"{"type":"t","data":1,"stream":"s\u0031\"\\"}"#),
        r#"{"stream":"s1\"\\","type":"t","ts":1000,"kind":"event","data":1,"seq":1}"#
    );
    assert!(
        invalid(r#"{"stream":"s\u0001","type":"t"}"#, "stream")
            .message
            .contains("control")
    );
}

#[test]
fn stream_rules() {
    invalid(r#"{"type":"t"}"#, "stream");
    invalid(r#"{"stream":"","type":"t"}"#, "stream");
    invalid(r#"{"stream":null,"type":"t"}"#, "stream");
    invalid(r#"{"stream":5,"type":"t"}"#, "stream");
    invalid(r#"{"stream":["a"],"type":"t"}"#, "stream");
    invalid(r#"{"stream":{"a":1},"type":"t"}"#, "stream");
    invalid("{\"stream\":\"a\u{7f}\",\"type\":\"t\"}", "stream");
    invalid("{\"stream\":\"a\u{85}\",\"type\":\"t\"}", "stream");
    let long = "é".repeat(128);
    one(&format!(r#"{{"stream":"{long}","type":"t"}}"#));
    let e = invalid(&format!(r#"{{"stream":"{long}x","type":"t"}}"#), "stream");
    assert!(e.message.contains("256"), "{e:?}");
    assert!(e.line.is_some() && e.column.is_some());
}

#[test]
fn type_rules() {
    invalid(r#"{"stream":"s"}"#, "type");
    invalid(r#"{"stream":"s","type":""}"#, "type");
    invalid(r#"{"stream":"s","type":"a b"}"#, "type");
    invalid(r#"{"stream":"s","type":"é"}"#, "type");
    invalid(r#"{"stream":"s","type":true}"#, "type");
    let t = "aZ09_.:-".repeat(16);
    one(&format!(r#"{{"stream":"s","type":"{t}"}}"#));
    invalid(&format!(r#"{{"stream":"s","type":"{t}a"}}"#), "type");
}

#[test]
fn entity_rules() {
    assert!(!one(&ev(r#""entity":"""#)).contains("entity"));
    assert!(!one(&ev(r#""entity":null"#)).contains("entity"));
    assert!(one(&ev(r#""entity":"p 7""#)).contains(r#""entity":"p 7""#));
    invalid(&ev(r#""entity":"a\tb""#), "entity");
    invalid(&ev(r#""entity":7"#), "entity");
    one(&ev(&format!(r#""entity":"{}""#, "x".repeat(256))));
    invalid(&ev(&format!(r#""entity":"{}""#, "x".repeat(257))), "entity");
}

#[test]
fn ts_rules() {
    assert!(one(&ev(r#""ts":0"#)).contains(r#""ts":0,"#));
    assert!(one(&ev(r#""ts":9007199254740991"#)).contains(r#""ts":9007199254740991,"#));
    assert!(one(&ev(r#""ts":null"#)).contains(r#""ts":1000,"#));
    invalid(&ev(r#""ts":9007199254740992"#), "ts");
    invalid(&ev(r#""ts":18446744073709551616"#), "ts");
    invalid(&ev(r#""ts":-1"#), "ts");
    invalid(&ev(r#""ts":1.5"#), "ts");
    invalid(&ev(r#""ts":1e400"#), "ts");
    invalid(&ev(r#""ts":true"#), "ts");
    invalid(&ev(r#""ts":"yesterday""#), "ts");
    invalid(&ev(r#""ts":"1969-12-31T23:59:59Z""#), "ts");
    // Any offset; truncated (not rounded) to the millisecond.
    assert!(
        one(&ev(r#""ts":"2024-11-19T08:06:40.123999+01:00""#)).contains(r#""ts":1732000000123,"#)
    );
    assert!(one(&ev(r#""ts":"2024-11-19T07:06:40Z""#)).contains(r#""ts":1732000000000,"#));
    assert!(one(&ev(r#""ts":"2024-11-18T21:36:40.5-09:30""#)).contains(r#""ts":1732000000500,"#));
    assert!(one(&ev(r#""ts":"1970-01-01T00:00:00Z""#)).contains(r#""ts":0,"#));
}

#[test]
fn kind_and_value_rules() {
    assert!(one(&ev(r#""kind":"counter","value":12"#)).contains(r#""kind":"counter","value":12,"#));
    assert!(one(&ev(r#""kind":"counter","value":-12.0"#)).contains(r#""value":-12,"#));
    assert!(one(&ev(r#""kind":"counter","value":1e3"#)).contains(r#""value":1000,"#));
    assert!(
        one(&ev(r#""kind":"counter","value":-9223372036854775808"#))
            .contains(r#""value":-9223372036854775808,"#)
    );
    invalid(&ev(r#""kind":"counter""#), "value");
    invalid(&ev(r#""kind":"counter","value":null"#), "value");
    invalid(&ev(r#""kind":"counter","value":1.5"#), "value");
    invalid(
        &ev(r#""kind":"counter","value":9223372036854775808"#),
        "value",
    );
    invalid(&ev(r#""kind":"counter","value":9.3e18"#), "value");
    invalid(&ev(r#""kind":"counter","value":"1""#), "value");
    assert!(one(&ev(r#""kind":"gauge","value":1.5"#)).contains(r#""kind":"gauge","value":1.5,"#));
    assert!(one(&ev(r#""kind":"gauge","value":2.0"#)).contains(r#""value":2.0,"#));
    assert!(one(&ev(r#""kind":"gauge","value":-3"#)).contains(r#""value":-3,"#));
    invalid(&ev(r#""kind":"gauge""#), "value");
    invalid(&ev(r#""kind":"gauge","value":1e400"#), "value");
    invalid(&ev(r#""kind":"gauge","value":[1]"#), "value");
    assert!(!one(&ev(r#""kind":"event""#)).contains("value"));
    let big = one(&ev(r#""value":18446744073709551615"#));
    assert!(big.contains(r#""value":1.8446744073709552e+19,"#), "{big}");
    assert!(one(&ev(r#""kind":null"#)).contains(r#""kind":"event""#));
    invalid(&ev(r#""kind":"Counter""#), "kind");
    invalid(&ev(r#""kind":1"#), "kind");
}

#[test]
fn reserved_types() {
    for t in ["events", "last_ts"] {
        for k in ["counter", "gauge"] {
            let e = invalid(
                &format!(r#"{{"stream":"s","type":"{t}","kind":"{k}","value":1}}"#),
                "type",
            );
            assert!(e.message.contains("reserved"), "{e:?}");
        }
        one(&format!(r#"{{"stream":"s","type":"{t}"}}"#));
    }
}

#[test]
fn id_rules() {
    assert!(one(&ev(r#""id":"evt-1""#)).contains(r#""id":"evt-1","#));
    assert!(!one(&ev(r#""id":null"#)).contains("\"id\""));
    invalid(&ev(r#""id":"""#), "id");
    invalid(&ev(r#""id":"a\u0000""#), "id");
    invalid(&ev(r#""id":12"#), "id");
    one(&ev(&format!(r#""id":"{}""#, "i".repeat(128))));
    invalid(&ev(&format!(r#""id":"{}""#, "i".repeat(129))), "id");
}

#[test]
fn data_is_compacted_as_sent() {
    let got = one(&ev(
        "\"data\" : { \"z\" : [ 1.50 , 1e2 , -0 , \"a \\u0041\\n\" ] ,\t\"a\" : { } , \"m\":null }",
    ));
    assert!(
        got.contains(r#""data":{"z":[1.50,1e2,-0,"a \u0041\n"],"a":{},"m":null},"seq""#),
        "{got}"
    );
    assert!(one(&ev(r#""data":null"#)).contains(r#""data":null"#));
    assert!(one(&ev(r#""data":"x""#)).contains(r#""data":"x""#));
    let ok64 = format!("{}{}", "[".repeat(64), "]".repeat(64));
    assert!(one(&ev(&format!(r#""data":{ok64}"#))).contains(&ok64));
    for deep in [65, 200, 5000] {
        let d = format!("{}{}", "[".repeat(deep), "]".repeat(deep));
        for format in [Format::Ndjson, Format::Json] {
            let e = err(format, &ev(&format!(r#""data":{d}"#)));
            assert_eq!(e.class, ErrorClass::TooLarge, "{deep}: {e:?}");
            assert_eq!(e.limit.as_deref(), Some(LIMIT_DATA_DEPTH));
            assert_eq!(e.max, Some(64));
            assert_eq!(e.index, Some(0));
        }
    }
}

#[test]
fn unknown_duplicate_and_non_objects() {
    let e = invalid(&ev(r#""strem":"x""#), "strem");
    assert!(e.message.contains("unknown field"), "{e:?}");
    let e = invalid(r#"{"stream":"a","stream":"b","type":"t"}"#, "stream");
    assert!(e.message.contains("duplicate"), "{e:?}");
    invalid(&ev(r#""data":1,"data":2"#), "data");
    for body in ["[1]", "5", "\"x\"", "null", "true", "[]"] {
        let e = err(Format::Ndjson, body);
        assert_eq!(e.class, ErrorClass::InvalidEvent, "{body}: {e:?}");
        assert_eq!(e.field, None);
        assert_eq!(e.index, Some(0));
    }
}

#[test]
fn malformed_input() {
    for body in [
        "{\"stream\":",
        "{\"stream\":\"s\",\"type\":\"t\"",
        "{\"stream\":\"s\",\"type\":\"t\"} x",
        "{'stream':1}",
        "{\"stream\":\"s\",\"type\":\"t\",}",
        "{\"stream\":\"s\" \"type\":\"t\"}",
        "@",
    ] {
        for format in [Format::Ndjson, Format::Json] {
            let e = err(format, body);
            assert_eq!(e.class, ErrorClass::Malformed, "{body}: {e:?}");
            assert!(e.line.is_some() && e.column.is_some(), "{body}: {e:?}");
        }
    }
    // Invalid UTF-8 inside a string, in a field and in data.
    for body in [
        &b"{\"stream\":\"\xff\",\"type\":\"t\"}"[..],
        &b"{\"stream\":\"s\",\"type\":\"t\",\"data\":[\"\xc3\x28\"]}"[..],
    ] {
        let e = run_chunks(Format::Ndjson, MAX, body, &[]).unwrap_err();
        assert_eq!(e.class, ErrorClass::Malformed, "{e:?}");
    }
}

#[test]
fn ndjson_lines_and_positions() {
    let a = r#"{"stream":"a","type":"t"}"#;
    let body = format!("\n{a}\r\n   \n\t\r\n{a}\n\n{a}");
    assert_eq!(ok(Format::Ndjson, &body).len(), 3);
    assert_eq!(ok(Format::Ndjson, ""), Vec::<String>::new());
    assert_eq!(ok(Format::Ndjson, "\n \n"), Vec::<String>::new());

    // The second event, on line 4, has a bad type value at column 23.
    let body = format!("{a}\n\n \n{{\"stream\":\"a\",\"type\":5}}\n{a}\n");
    let e = err(Format::Ndjson, &body);
    assert_eq!(
        (e.index, e.line, e.field.as_deref()),
        (Some(1), Some(4), Some("type"))
    );
    assert_eq!(e.column, Some(22));
    // A rule checked once the object is complete points at the event's start.
    let e = err(Format::Ndjson, &format!("{a}\n{{\"stream\":\"a\"}}\n"));
    assert_eq!((e.index, e.line, e.column), (Some(1), Some(2), Some(1)));
    // Malformed: position of the syntax error.
    let e = err(Format::Ndjson, &format!("{a}\n{a}\n{{\"stream\" \"a\"}}"));
    assert_eq!(
        (e.class, e.index, e.line, e.column),
        (ErrorClass::Malformed, Some(2), Some(3), Some(11))
    );
}

#[test]
fn json_framing() {
    let a = r#"{"stream":"a","type":"t"}"#;
    assert_eq!(ok(Format::Json, a).len(), 1);
    assert_eq!(ok(Format::Json, &format!(" \n{a} \n")).len(), 1);
    assert_eq!(ok(Format::Json, "[]").len(), 0);
    assert_eq!(ok(Format::Json, " [ \n ] ").len(), 0);
    assert_eq!(ok(Format::Json, &format!("[{a}]")).len(), 1);
    assert_eq!(
        ok(Format::Json, &format!("[\n  {a},\n  {a} ,{a}\n]\n")).len(),
        3
    );
    // Brackets and quotes inside strings do not confuse the scanner.
    let tricky = r#"{"stream":"a]}\"{[","type":"t","data":{"x":"}\\","y":["]"]}}"#;
    assert_eq!(
        ok(Format::Json, &format!("[{tricky},{tricky}]")),
        ok(Format::Ndjson, &format!("{tricky}\n{tricky}"))
    );

    for (body, index) in [
        (String::new(), None),
        ("  \n ".to_string(), None),
        ("[".to_string(), None),
        (format!("[{a}"), None),
        (format!("[{a},"), None),
        (format!("[{a},]"), Some(1)),
        (format!("[{a} {a}]"), None),
        (format!("[{a}] x"), None),
        (format!("[{a}][]"), None),
        (format!("{a} {a}"), None),
        (format!("{a},"), None),
        (format!("[{a},{{\"stream\":"), Some(1)),
        (format!("[{a},x]"), Some(1)),
        ("]".to_string(), Some(0)),
    ] {
        let e = err(Format::Json, &body);
        assert_eq!(e.class, ErrorClass::Malformed, "{body}: {e:?}");
        assert_eq!(e.index, index, "{body}: {e:?}");
        assert!(e.line.is_some() && e.column.is_some(), "{body}: {e:?}");
    }
    for (body, index) in [
        ("5", 0),
        ("\"x\"", 0),
        ("[[]]", 0),
        ("[null]", 0),
        ("[1, 2]", 0),
        (&format!("[{a}, true]"), 1),
        (&format!("[{a}, {{}}]"), 1),
    ] {
        let e = err(Format::Json, body);
        assert_eq!(e.class, ErrorClass::InvalidEvent, "{body}: {e:?}");
        assert_eq!(e.index, Some(index), "{body}: {e:?}");
    }

    // Positions inside a pretty-printed array: event 1's "type" is on line 4.
    let body = format!("[\n  {a},\n  {{\"stream\": \"b\",\n   \"type\": \"a b\"}}\n]");
    let e = err(Format::Json, &body);
    assert_eq!(
        (e.index, e.line, e.field.as_deref()),
        (Some(1), Some(4), Some("type"))
    );
    assert_eq!(e.column, Some(16));
    let e = err(Format::Json, &format!("[{a},\n  {{\"stream\":\"b\"}}]"));
    assert_eq!((e.index, e.line, e.column), (Some(1), Some(2), Some(3)));
    let e = err(Format::Json, &format!("[{a}\n ,\n{a}\n x]"));
    assert_eq!(
        (e.class, e.line, e.column),
        (ErrorClass::Malformed, Some(4), Some(2))
    );
}

#[test]
fn deep_nesting_is_refused_fast() {
    // 64 MiB of `[`: refused at the first element, without scanning it all.
    let body = vec![b'['; 64 << 20];
    let mut d = Decoder::new(Format::Json, MAX, NOW).unwrap();
    let mut b = Batch::new();
    let e = d.feed(&body, &mut b).unwrap_err();
    assert_eq!(e.class, ErrorClass::InvalidEvent);
    // `{` nesting is bounded by the scanner's depth limit.
    let body = vec![b'{'; 64 << 20];
    let mut d = Decoder::new(Format::Json, usize::MAX, NOW).unwrap();
    let e = d.feed(&body, &mut b).unwrap_err();
    assert_eq!(e.class, ErrorClass::TooLarge);
    assert_eq!(e.limit.as_deref(), Some(LIMIT_DATA_DEPTH));
    assert_eq!(e.column, Some(66));
    let body = format!(
        "[{{\"stream\":\"s\",\"type\":\"t\",\"data\":{}",
        "{\"a\":[".repeat(40)
    );
    let e = err(Format::Json, &body);
    assert_eq!(e.class, ErrorClass::TooLarge);
}

#[test]
fn event_size_limit() {
    let a = r#"{"stream":"a","type":"t"}"#; // 25 bytes
    for format in [Format::Json, Format::Ndjson] {
        let sep = if format == Format::Json { "," } else { "\n" };
        let body = a.to_string();
        assert!(run_chunks(format, 25, body.as_bytes(), &[]).is_ok());
        let big = r#"{"stream":"ab","type":"t"}"#;
        let body = if format == Format::Json {
            format!("[{a}{sep}{big}]")
        } else {
            format!("{a}{sep}{big}\r\n")
        };
        for sizes in [&[][..], &[1; 64][..], &[27, 1, 1, 1][..]] {
            let e = run_chunks(format, 25, body.as_bytes(), sizes).unwrap_err();
            assert_eq!(e.class, ErrorClass::TooLarge, "{format:?}");
            assert_eq!(e.limit.as_deref(), Some(LIMIT_EVENT_BYTES));
            assert_eq!(e.max, Some(25));
            assert_eq!(e.index, Some(1));
        }
    }
    // Refused while the event is still arriving: the decoder never holds much more than the
    // limit, however long the event goes on.
    for format in [Format::Json, Format::Ndjson] {
        let mut d = Decoder::new(format, 100, NOW).unwrap();
        let mut b = Batch::new();
        d.feed(b"{\"stream\":\"", &mut b).unwrap();
        let mut fed = 11;
        let e = loop {
            match d.feed(b"xxxxxxxxxx", &mut b) {
                Ok(()) => fed += 10,
                Err(e) => break e,
            }
            assert!(fed <= 110, "{format:?} still buffering at {fed} bytes");
        };
        assert_eq!(e.class, ErrorClass::TooLarge);
        // The error sticks.
        assert_eq!(d.feed(b"\n", &mut b).unwrap_err(), e);
        assert_eq!(d.finish(&mut b).unwrap_err(), e);
    }
}

/// Bodies whose result (events or error) must not depend on how they are chunked.
fn boundary_bodies() -> Vec<(Format, String)> {
    let a = r#"{"stream":"s\u00e9","entity":"p","type":"t","ts":"2024-11-19T07:06:40.5Z","kind":"gauge","value":1.25,"id":"i\"d","data":{ "k" : [ "]}\\\"" , {} ] }}"#;
    let b = r#"{"stream":"é","type":"t","kind":"counter","value":3,"data":"x"}"#;
    vec![
        (Format::Ndjson, format!("{a}\n\r\n{b}\r\n  \n{a}")),
        (
            Format::Ndjson,
            format!("{a}\n{b}\n{{\"stream\":\"x\",\"type\":\"t\",\"bad\":1}}\n{a}"),
        ),
        (Format::Ndjson, format!("{a}\n{{\"stream\":")),
        (Format::Json, format!("[ {a} ,\n {b},{a} ]\n")),
        (Format::Json, a.to_string()),
        (Format::Json, format!("[{a},{b}")),
        (Format::Json, format!("[{a},\n{b},]")),
        (Format::Json, format!("[{a} , 12]")),
        (Format::Json, format!("[{a},{b}] {{")),
    ]
}

#[test]
fn chunk_boundaries_do_not_matter() {
    for (format, body) in boundary_bodies() {
        let bytes = body.as_bytes();
        let whole = run_chunks(format, MAX, bytes, &[]);
        if format == Format::Ndjson && body.starts_with("{\"stream\":\"s") && !body.contains("bad")
        {
            if body.ends_with("\"stream\":") {
                assert!(whole.is_err());
            } else {
                assert_eq!(whole.as_ref().map(Vec::len).unwrap_or(0), 3, "{body}");
            }
        }
        for at in 0..=bytes.len() {
            assert_eq!(
                run_chunks(format, MAX, bytes, &[at]),
                whole,
                "{format:?} split at {at}"
            );
        }
        assert_eq!(run_chunks(format, MAX, bytes, &vec![1; bytes.len()]), whole);
        assert_eq!(run_chunks(format, MAX, bytes, &[3, 0, 7, 1, 2, 64]), whole);
    }
}

#[test]
fn parse_event_pushes_one() {
    let mut b = Batch::new();
    parse_event(br#"{"stream":"s","type":"t","ts":5}"#, NOW, &mut b).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b.iter().next().map(|e| e.ts), Some(5));
    let e = parse_event(br#"{"stream":"s"}"#, NOW, &mut b).unwrap_err();
    // The parser alone knows no index and gives no position for whole-object rules.
    assert_eq!((e.index, e.line), (None, None));
    assert_eq!(b.len(), 1);
}
