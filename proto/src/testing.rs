//! Test support, behind the `testing` feature: the one place that generates valid events and
//! their parts for the property tests (vx-proto's decoders and frames codec, the root crate's
//! HTTP properties) and the fixed seed events of the fuzz crate, so that what "a valid event"
//! means to the tests cannot drift between copies. Each test keeps only what is its own (an
//! RFC 3339 `ts`, spacing and field order, pretty-printed `data`).

use crate::event::MAX_TS;
use crate::{EventView, Kind, Num};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// The receive time tests give decoders, for events without a `ts`.
pub const NOW: i64 = 1_732_000_000_000;

/// A finite `f64` (NaN and the infinities are not JSON numbers).
pub fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

/// Any event value: an integer or a finite float.
pub fn number() -> impl Strategy<Value = Num> {
    prop_oneof![
        any::<i64>().prop_map(Num::Int),
        finite().prop_map(Num::Float)
    ]
}

/// A counter's value: an integer, or a float with a zero fraction, which a counter takes as
/// that integer (SPEC §2).
pub fn counter_value() -> impl Strategy<Value = Num> {
    prop_oneof![
        any::<i64>().prop_map(Num::Int),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|i| Num::Float(i as f64)),
    ]
}

/// A kind and a value valid for it; `None` is an absent `kind` (an `event`).
pub fn kind_and_value() -> impl Strategy<Value = (Option<Kind>, Option<Num>)> {
    prop_oneof![
        prop::option::of(number()).prop_map(|v| (None, v)),
        prop::option::of(number()).prop_map(|v| (Some(Kind::Event), v)),
        counter_value().prop_map(|v| (Some(Kind::Counter), Some(v))),
        number().prop_map(|v| (Some(Kind::Gauge), Some(v))),
    ]
}

/// Any JSON value (`data`), nested up to `depth` levels, about `size` nodes, `branch` wide.
pub fn json_value(depth: u32, size: u32, branch: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        finite().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    let width = branch as usize;
    leaf.prop_recursive(depth, size, branch, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..width)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A stream name: 1–40 printable characters of any script (within the 256-byte limit).
pub fn stream_name() -> impl Strategy<Value = String> {
    "\\PC{1,40}"
}

/// An entity: up to 20 printable characters; an empty one is the same as none.
pub fn entity() -> impl Strategy<Value = String> {
    "\\PC{0,20}"
}

/// An event type: the SPEC's character set, up to its 128 characters.
pub fn type_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:-]{1,128}"
}

/// An id: 1–30 printable characters (within the 128-byte limit).
pub fn id() -> impl Strategy<Value = String> {
    "\\PC{1,30}"
}

/// Feature names a counter or gauge may not take as its type (the built-in features).
pub fn reserved_type(kind: Option<Kind>, ty: &str) -> bool {
    matches!(kind, Some(Kind::Counter | Kind::Gauge)) && (ty == "events" || ty == "last_ts")
}

/// A valid event with owned parts; `data` as a JSON value (render it as the test needs).
#[derive(Clone, Debug)]
pub struct Event {
    pub stream: String,
    pub entity: Option<String>,
    pub ty: String,
    /// `None`: left to the server's clock.
    pub ts: Option<i64>,
    pub kind: Option<Kind>,
    pub value: Option<Num>,
    pub id: Option<String>,
    pub data: Option<Value>,
}

/// Any valid event (SPEC §2), its `data` up to `data_depth` levels deep.
pub fn event(data_depth: u32) -> impl Strategy<Value = Event> {
    (
        stream_name(),
        prop::option::of(entity()),
        type_name(),
        prop::option::of(0..MAX_TS),
        kind_and_value(),
        prop::option::of(id()),
        prop::option::of(json_value(data_depth, 8 * data_depth, data_depth)),
    )
        .prop_filter("reserved type", |(_, _, ty, _, (kind, _), _, _)| {
            !reserved_type(*kind, ty)
        })
        .prop_map(|(stream, entity, ty, ts, (kind, value), id, data)| Event {
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

impl Event {
    /// `data` as compact JSON text.
    pub fn data_text(&self) -> Option<String> {
        self.data.as_ref().map(Value::to_string)
    }

    /// The event as a decoder stores it: `ts` from `now` when absent, an empty entity as
    /// none, a counter's whole float as its integer. `data` is the caller's (compact) text.
    pub fn stored<'a>(&'a self, now: i64, data: Option<&'a str>) -> EventView<'a> {
        let kind = self.kind.unwrap_or_default();
        EventView {
            stream: &self.stream,
            entity: self.entity.as_deref().filter(|e| !e.is_empty()),
            ty: &self.ty,
            ts: self.ts.unwrap_or(now),
            kind,
            value: self.value.map(|v| match v {
                Num::Float(f) if kind == Kind::Counter => Num::Int(f as i64),
                v => v,
            }),
            id: self.id.as_deref(),
            data,
        }
    }

    /// The event as a JSON object, as a producer sends it (`kind` only when given).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("stream".into(), self.stream.clone().into());
        if let Some(e) = &self.entity {
            m.insert("entity".into(), e.clone().into());
        }
        m.insert("type".into(), self.ty.clone().into());
        if let Some(t) = self.ts {
            m.insert("ts".into(), t.into());
        }
        if let Some(k) = self.kind {
            m.insert("kind".into(), k.as_str().into());
        }
        match self.value {
            None => {}
            Some(Num::Int(i)) => {
                m.insert("value".into(), i.into());
            }
            Some(Num::Float(f)) => {
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
}

/// Fixed events that reach the corners of the rules (escapes, non-ASCII names, each kind, a
/// whole and a fractional float, `null` and nested `data`): seeds of the fuzz targets.
pub fn seed_views() -> Vec<EventView<'static>> {
    let base = EventView {
        stream: "match-42",
        entity: Some("player-7"),
        ty: "damage",
        ts: 1_732_000_000_123,
        kind: Kind::Counter,
        value: Some(Num::Int(12)),
        id: Some("evt-0001"),
        data: Some(r#"{"weapon":"bow","crit":[1.50,2e3,-0],"s":"caf\u00e9 \"q\""}"#),
    };
    vec![
        base,
        EventView {
            stream: "a/b c ünï",
            entity: None,
            ty: "pos:x",
            kind: Kind::Gauge,
            value: Some(Num::Float(-3.25)),
            id: None,
            data: None,
            ..base
        },
        EventView {
            stream: "s",
            entity: None,
            ty: "t.u-v_w",
            ts: 0,
            kind: Kind::Event,
            value: None,
            id: None,
            data: Some("null"),
        },
        EventView {
            kind: Kind::Event,
            value: Some(Num::Float(0.5)),
            data: Some(r#"[[],{},"\ud83d\ude00",true]"#),
            ..base
        },
    ]
}
