//! Property tests of the YAML decoder: any valid event, written by the canonical YAML writer,
//! decodes to the same canonical event whatever the reads; any bytes (and YAML-looking token
//! soup) decode or fail with an `InputError`, never panic, and the outcome does not depend on
//! how the reader splits the body.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;

use proptest::prelude::*;
use serde_json::{Map, Value};
use vx_proto::canonical::write_event;
use vx_proto::canonical_yaml::write_document;
use vx_proto::decode::decode_yaml;
use vx_proto::event::MAX_TS;
use vx_proto::{Batch, EventView, InputError, Kind, Num};

const NOW: i64 = 1_732_000_000_000;

/// A reader returning `body` in pieces of the given sizes (cycled; 0 counts as 1).
struct Pieces<'a> {
    rest: &'a [u8],
    sizes: Vec<usize>,
    next: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let size = match self.sizes.get(self.next % self.sizes.len().max(1)) {
            Some(&s) => s.max(1),
            None => usize::MAX,
        };
        self.next += 1;
        let n = size.min(buf.len()).min(self.rest.len());
        let (a, b) = self.rest.split_at(n);
        buf[..n].copy_from_slice(a);
        self.rest = b;
        Ok(n)
    }
}

fn decode(body: &[u8], sizes: Vec<usize>, max: usize) -> Result<Vec<Vec<u8>>, InputError> {
    let mut batch = Batch::new();
    let reader = Pieces {
        rest: body,
        sizes,
        next: 0,
    };
    decode_yaml(reader, max, u64::MAX, NOW, &mut batch)?;
    Ok(batch
        .iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut out = Vec::new();
            write_event(&mut out, &ev, i as u64 + 1);
            out
        })
        .collect())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid event in canonical form: the owned parts of an [`EventView`].
#[derive(Clone, Debug)]
struct Owned {
    stream: String,
    entity: Option<String>,
    ty: String,
    ts: i64,
    kind: Kind,
    value: Option<Num>,
    id: Option<String>,
    data: Option<String>,
}

impl Owned {
    fn view(&self) -> EventView<'_> {
        EventView {
            stream: &self.stream,
            entity: self.entity.as_deref(),
            ty: &self.ty,
            ts: self.ts,
            kind: self.kind,
            value: self.value,
            id: self.id.as_deref(),
            data: self.data.as_deref(),
        }
    }
}

fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

fn kind_and_value() -> impl Strategy<Value = (Kind, Option<Num>)> {
    prop_oneof![
        prop::option::of(prop_oneof![
            any::<i64>().prop_map(Num::Int),
            finite().prop_map(Num::Float)
        ])
        .prop_map(|v| (Kind::Event, v)),
        any::<i64>().prop_map(|i| (Kind::Counter, Some(Num::Int(i)))),
        prop_oneof![
            any::<i64>().prop_map(Num::Int),
            finite().prop_map(Num::Float)
        ]
        .prop_map(|v| (Kind::Gauge, Some(v))),
    ]
}

fn event() -> impl Strategy<Value = Owned> {
    (
        "\\PC{1,40}",
        prop::option::of("\\PC{1,20}"),
        "[A-Za-z0-9_.:-]{1,128}",
        0..MAX_TS,
        kind_and_value(),
        prop::option::of("\\PC{1,30}"),
        prop::option::of(json_value()),
    )
        .prop_filter("reserved type", |(_, _, ty, _, (kind, _), _, _)| {
            *kind == Kind::Event || (ty != "events" && ty != "last_ts")
        })
        .prop_map(|(stream, entity, ty, ts, (kind, value), id, data)| Owned {
            stream,
            entity,
            ty,
            ts,
            kind,
            value,
            id,
            data: data.map(|d| serde_json::to_string(&d).unwrap()),
        })
}

/// YAML-looking tokens, so that random bodies reach past the parser into the event rules.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    const TOKENS: &[&str] = &[
        "- ",
        "---\n",
        "...\n",
        "\n",
        "  ",
        " ",
        ": ",
        ",",
        "{",
        "}",
        "[",
        "]",
        "stream",
        "type",
        "data",
        "ts",
        "kind",
        "value",
        "id",
        "entity",
        "counter",
        "gauge",
        "s",
        "t",
        "1",
        "-7",
        "0x1F",
        "1.5",
        ".inf",
        "~",
        "null",
        "true",
        "\"x\"",
        "'y'",
        "&a ",
        "*a",
        "&b ",
        "*b",
        "!!str ",
        "!!int ",
        "!x ",
        "<<",
        "? ",
        "| \n",
        "> \n",
        "# c\n",
        "2024-01-01T00:00:00Z",
        "\"\\u00e9\"",
        "é",
        "\t",
        "%YAML 1.2\n",
    ];
    prop::collection::vec(prop::sample::select(TOKENS), 0..80).prop_map(|t| t.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn canonical_yaml_decodes_to_the_same_events(
        events in prop::collection::vec(event(), 1..5),
        sizes in prop::collection::vec(0usize..64, 0..4),
    ) {
        let mut body = Vec::new();
        let mut expected = Vec::new();
        for (i, e) in events.iter().enumerate() {
            write_document(&mut body, &e.view(), None);
            let mut out = Vec::new();
            write_event(&mut out, &e.view(), i as u64 + 1);
            expected.push(out);
        }
        let got = decode(&body, sizes, 1 << 20);
        prop_assert!(got.is_ok(), "{}: {:?}", String::from_utf8_lossy(&body), got);
        let got = got.unwrap();
        prop_assert_eq!(
            got.iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>(),
            expected.iter().map(|g| String::from_utf8_lossy(g).into_owned()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..512),
        sizes in prop::collection::vec(0usize..16, 1..4),
        max in prop_oneof![Just(1usize << 20), 1usize..256],
    ) {
        let whole = decode(&body, Vec::new(), max);
        let split = decode(&body, sizes, max);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn token_soup_never_panics(
        body in soup(),
        sizes in prop::collection::vec(0usize..16, 1..4),
        max in prop_oneof![Just(1usize << 20), 1usize..256],
    ) {
        let whole = decode(&body, Vec::new(), max);
        let split = decode(&body, sizes, max);
        prop_assert_eq!(whole, split);
    }
}
