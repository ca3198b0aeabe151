//! Property tests of the JSON and NDJSON decoders: any valid event, encoded by serde_json,
//! decodes to its canonical form whatever the chunking; any bytes decode or fail cleanly, and
//! the outcome never depends on where the chunks split.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};
use vx_proto::canonical::write_event;
use vx_proto::decode::{Decoder, Format};
use vx_proto::event::MAX_TS;
use vx_proto::testing::{self, NOW};
use vx_proto::{Batch, EventView, InputError, Kind, Num};

#[derive(Clone, Debug)]
enum Ts {
    Absent,
    Int(i64),
    /// Nanoseconds since the epoch, written with an offset of this many minutes.
    Rfc(i128, i32),
}

#[derive(Clone, Debug)]
enum Val {
    Int(i64),
    /// A float with zero fraction, only for counters: written `12.0`, read as 12.
    WholeFloat(i64),
    Float(f64),
}

#[derive(Clone, Debug)]
struct Gen {
    stream: String,
    entity: Option<String>,
    ty: String,
    ts: Ts,
    kind: Option<Kind>,
    value: Option<Val>,
    id: Option<String>,
    data: Option<Value>,
}

/// The shared kinds and values (`vx_proto::testing`), a counter's whole float kept apart: it
/// is written `12.0` and read as 12.
fn kind_and_value() -> impl Strategy<Value = (Option<Kind>, Option<Val>)> {
    testing::kind_and_value().prop_map(|(kind, value)| {
        let value = value.map(|v| match v {
            Num::Int(i) => Val::Int(i),
            Num::Float(f) if kind == Some(Kind::Counter) => Val::WholeFloat(f as i64),
            Num::Float(f) => Val::Float(f),
        });
        (kind, value)
    })
}

fn ts() -> impl Strategy<Value = Ts> {
    // Up to 9999-12-30, so that any offset keeps the local date within RFC 3339's years.
    let max_ns: i128 = 253_402_000_000 * 1_000_000_000;
    prop_oneof![
        Just(Ts::Absent),
        (0..MAX_TS).prop_map(Ts::Int),
        (0..max_ns, -(23 * 60 + 59)..=(23 * 60 + 59)).prop_map(|(ns, off)| Ts::Rfc(ns, off)),
    ]
}

fn event() -> impl Strategy<Value = Gen> {
    (
        testing::stream_name(),
        prop::option::of(testing::entity()),
        testing::type_name(),
        ts(),
        kind_and_value(),
        prop::option::of(testing::id()),
        prop::option::of(testing::json_value(6, 48, 6)),
    )
        .prop_filter("reserved type", |(_, _, ty, _, (kind, _), _, _)| {
            !testing::reserved_type(*kind, ty)
        })
        .prop_map(|(stream, entity, ty, ts, (kind, value), id, data)| Gen {
            stream,
            entity,
            ty,
            ts,
            kind,
            value,
            id,
            data,
        })
}

impl Gen {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("stream".into(), self.stream.clone().into());
        if let Some(e) = &self.entity {
            m.insert("entity".into(), e.clone().into());
        }
        m.insert("type".into(), self.ty.clone().into());
        match self.ts {
            Ts::Absent => {}
            Ts::Int(t) => {
                m.insert("ts".into(), t.into());
            }
            Ts::Rfc(ns, off) => {
                let t = OffsetDateTime::from_unix_timestamp_nanos(ns)
                    .unwrap()
                    .to_offset(UtcOffset::from_whole_seconds(off * 60).unwrap());
                m.insert("ts".into(), t.format(&Rfc3339).unwrap().into());
            }
        }
        if let Some(k) = self.kind {
            m.insert("kind".into(), k.as_str().into());
        }
        match self.value {
            None => {}
            Some(Val::Int(i)) => {
                m.insert("value".into(), i.into());
            }
            Some(Val::WholeFloat(i)) => {
                m.insert("value".into(), (i as f64).into());
            }
            Some(Val::Float(f)) => {
                m.insert("value".into(), f.into());
            }
        }
        if let Some(id) = &self.id {
            m.insert("id".into(), id.clone().into());
        }
        if let Some(d) = &self.data {
            m.insert("data".into(), d.clone());
        }
        Value::Object(m)
    }

    fn expected(&self, seq: u64) -> Vec<u8> {
        let data = self
            .data
            .as_ref()
            .map(|d| serde_json::to_string(d).unwrap());
        let ev = EventView {
            stream: &self.stream,
            entity: self.entity.as_deref().filter(|e| !e.is_empty()),
            ty: &self.ty,
            ts: match self.ts {
                Ts::Absent => NOW,
                Ts::Int(t) => t,
                Ts::Rfc(ns, _) => ns.div_euclid(1_000_000) as i64,
            },
            kind: self.kind.unwrap_or_default(),
            value: self.value.as_ref().map(|v| match *v {
                Val::Int(i) => Num::Int(i),
                Val::WholeFloat(i) => Num::Int(i),
                Val::Float(f) => Num::Float(f),
            }),
            id: self.id.as_deref(),
            data: data.as_deref(),
        };
        let mut out = Vec::new();
        write_event(&mut out, &ev, seq);
        out
    }
}

fn decode(format: Format, body: &[u8], cuts: &[usize]) -> Result<Vec<Vec<u8>>, InputError> {
    let mut d = Decoder::new(format, 1 << 20, NOW).unwrap();
    let mut batch = Batch::new();
    let mut at = 0;
    for &c in cuts {
        let c = c % (body.len() + 1);
        if c > at {
            d.feed(&body[at..c], &mut batch)?;
            at = c;
        }
    }
    d.feed(&body[at..], &mut batch)?;
    d.finish(&mut batch)?;
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

fn sorted(mut cuts: Vec<usize>, len: usize) -> Vec<usize> {
    for c in &mut cuts {
        *c %= len + 1;
    }
    cuts.sort_unstable();
    cuts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_events_decode_to_canonical_form(
        events in prop::collection::vec(event(), 1..5),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
        pretty in any::<bool>(),
    ) {
        let expected: Vec<Vec<u8>> =
            events.iter().enumerate().map(|(i, e)| e.expected(i as u64 + 1)).collect();

        let mut ndjson = Vec::new();
        for e in &events {
            serde_json::to_writer(&mut ndjson, &e.to_json()).unwrap();
            ndjson.extend_from_slice(if pretty { b"\r\n \n" } else { b"\n" });
        }
        let cuts_n = sorted(cuts.clone(), ndjson.len());
        prop_assert_eq!(decode(Format::Ndjson, &ndjson, &cuts_n).unwrap(), expected.clone());

        let array = Value::Array(events.iter().map(Gen::to_json).collect());
        let json = if pretty {
            serde_json::to_vec_pretty(&array).unwrap()
        } else {
            serde_json::to_vec(&array).unwrap()
        };
        let cuts_j = sorted(cuts.clone(), json.len());
        prop_assert_eq!(decode(Format::Json, &json, &cuts_j).unwrap(), expected.clone());

        // A lone object is a body too.
        let one = serde_json::to_vec_pretty(&events[0].to_json()).unwrap();
        prop_assert_eq!(decode(Format::Json, &one, &[]).unwrap(), vec![expected[0].clone()]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..256),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        for format in [Format::Json, Format::Ndjson] {
            let whole = decode(format, &body, &[]);
            let cut = decode(format, &body, &sorted(cuts.clone(), body.len()));
            prop_assert_eq!(whole, cut);
        }
    }

    #[test]
    fn damaged_events_fail_cleanly_whatever_the_chunking(
        events in prop::collection::vec(event(), 1..3),
        damage in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let array = Value::Array(events.iter().map(Gen::to_json).collect());
        let mut body = serde_json::to_vec_pretty(&array).unwrap();
        let mut lines = Vec::new();
        for e in &events {
            serde_json::to_writer(&mut lines, &e.to_json()).unwrap();
            lines.push(b'\n');
        }
        for (at, b) in damage {
            let n = body.len();
            body[at % n] = b;
            let n = lines.len();
            lines[at % n] = b;
        }
        for (format, body) in [(Format::Json, &body), (Format::Ndjson, &lines)] {
            let whole = decode(format, body, &[]);
            let cut = decode(format, body, &sorted(cuts.clone(), body.len()));
            prop_assert_eq!(whole, cut);
        }
    }
}
