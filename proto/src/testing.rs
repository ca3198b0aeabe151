//! Test support, compiled only with the `testing` feature: the one definition of "a valid
//! event, as a producer may send it" that the property tests share (vx-proto's JSON/NDJSON,
//! YAML and frames decoders, the root crate's HTTP properties), and the fixed seed events of
//! the fuzz crate. Before this module each test had its own copy of the generators, and the
//! copies drifted apart (one lacked `u64`s in `data`, one never sent an empty entity, only one
//! sent escapes or number literals); here every test draws from their union.
//!
//! What it owns:
//! - the parts: names within the limits of docs/API.md §2.1, kinds with values valid for them, `ts` as
//!   milliseconds or RFC 3339 or absent, `data` as the JSON text a producer writes (escapes,
//!   number literals, whitespace) — [`stream_name`], [`entity`], [`type_name`], [`id`],
//!   [`kind_and_value`], [`ts`], [`json_value`];
//! - [`Event`], drawn by [`event`], and how it is sent (a JSON object in any field order and
//!   spacing, a YAML document, a frames [`WireEvent`]) and stored (its [`EventView`]);
//! - [`seed_views`], the fuzz targets' seed events;
//! - [`Pieces`], a reader that hands a body out in pieces of given sizes.
//!
//! The tests keep what is their own: how bodies are framed and chunked, mutations, decode
//! drivers and the assertions. Nothing outside tests and the fuzz crate enables the feature.

use std::collections::HashSet;

use proptest::prelude::*;
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

use crate::canonical::{write_json_str, write_num};
use crate::canonical_yaml::{write_document, write_yaml_str};
use crate::frames::WireEvent;
use crate::rules::{MAX_TS, reserved_feature_name};
use crate::{EventView, Kind, Num};

/// The receive time tests give decoders, for events without a `ts`.
pub const NOW: i64 = 1_732_000_000_000;

// ---------------------------------------------------------------------------------------------
// Kinds and values
// ---------------------------------------------------------------------------------------------

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

/// A counter's value: an integer, or a float with a zero fraction (within ±2^53, where every
/// integer is exact), which a counter takes as that integer (docs/API.md §2).
pub fn counter_value() -> impl Strategy<Value = Num> {
    prop_oneof![
        any::<i64>().prop_map(Num::Int),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|i| Num::Float(i as f64)),
    ]
}

/// A kind and a value valid for it, as sent; `None` is an absent `kind` (an `event`).
pub fn kind_and_value() -> impl Strategy<Value = (Option<Kind>, Option<Num>)> {
    prop_oneof![
        prop::option::of(number()).prop_map(|v| (None, v)),
        prop::option::of(number()).prop_map(|v| (Some(Kind::Event), v)),
        counter_value().prop_map(|v| (Some(Kind::Counter), Some(v))),
        number().prop_map(|v| (Some(Kind::Gauge), Some(v))),
    ]
}

// ---------------------------------------------------------------------------------------------
// Names (each within the docs/API.md §2 byte limit even at 4 bytes a character, so that no test has
// to filter: stream ≤ 160 of 256, entity ≤ 80 of 256, id ≤ 120 of 128, which leaves room for
// a suffix a test appends to make names unique)
// ---------------------------------------------------------------------------------------------

// Each name draws from two alphabets: any printable character of any script (`\PC`), or ASCII
// with the characters JSON or YAML must escape (`"`, `\`, U+2028, U+FEFF — a format character,
// so outside `\PC`) and some multi-byte ones, which `\PC` reaches only rarely.

/// A stream name: 1–40 characters.
pub fn stream_name() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{1,40}", "[ -~éü\u{2028}\u{feff}😀]{1,40}"]
}

/// An entity: 0–20 characters; an empty one is stored as none.
pub fn entity() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{0,20}", "[ -~éü\u{2028}\u{feff}😀]{0,20}"]
}

/// An event type: the character set of docs/API.md §2.1, up to its 128 characters.
pub fn type_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.:-]{1,128}"
}

/// An id: 1–30 characters.
pub fn id() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{1,30}", "[ -~éü\u{2028}\u{feff}😀]{1,30}"]
}

// ---------------------------------------------------------------------------------------------
// ts
// ---------------------------------------------------------------------------------------------

/// An event's `ts` as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ts {
    /// Not sent: the server's receive time.
    Absent,
    /// Milliseconds since the epoch, sent as a number.
    Ms(i64),
    /// An RFC 3339 string (nanoseconds, any offset) and the milliseconds it stands for
    /// (rounded down, as the decoders do).
    Rfc3339 { text: String, ms: i64 },
}

impl Ts {
    /// The milliseconds sent, if any.
    pub fn given(&self) -> Option<i64> {
        match self {
            Ts::Absent => None,
            Ts::Ms(ms) | Ts::Rfc3339 { ms, .. } => Some(*ms),
        }
    }

    /// The stored `ts`: `now` when none was sent.
    pub fn stored(&self, now: i64) -> i64 {
        self.given().unwrap_or(now)
    }
}

/// Absent, milliseconds in range, or RFC 3339.
pub fn ts() -> impl Strategy<Value = Ts> {
    // Up to 9999-12-30, so that any offset keeps the local date within RFC 3339's years.
    let max_ns: i128 = 253_402_000_000 * 1_000_000_000;
    prop_oneof![
        Just(Ts::Absent),
        (0..MAX_TS).prop_map(Ts::Ms),
        (0..max_ns, -(23 * 60 + 59)..=(23 * 60 + 59))
            .prop_filter_map("an RFC 3339 time", |(ns, off)| rfc3339(ns, off)),
    ]
}

/// `ns` since the epoch, written at an offset of `offset_min` minutes. The ranges [`ts`] draws
/// from always give `Some`; `None` would only drop the case.
fn rfc3339(ns: i128, offset_min: i32) -> Option<Ts> {
    let offset = UtcOffset::from_whole_seconds(offset_min * 60).ok()?;
    let text = OffsetDateTime::from_unix_timestamp_nanos(ns)
        .ok()?
        .to_offset(offset)
        .format(&Rfc3339)
        .ok()?;
    let ms = i64::try_from(ns.div_euclid(1_000_000)).ok()?;
    Some(Ts::Rfc3339 { text, ms })
}

// ---------------------------------------------------------------------------------------------
// data: JSON text as a producer sends it
// ---------------------------------------------------------------------------------------------

/// A piece of a JSON string literal.
#[derive(Clone, Debug)]
pub enum Piece {
    /// Text, written with the canonical escaping (serde_json's: only `"`, `\` and control
    /// characters).
    Text(String),
    /// An escape a producer may write instead of the raw character: as written, and what it
    /// reads as.
    Escape(&'static str, &'static str),
}

/// Escapes a producer may write: each short form, `\/`, `\u` for BMP and control characters,
/// a surrogate pair, and the characters YAML cannot carry raw.
pub const ESCAPES: &[(&str, &str)] = &[
    ("\\u00e9", "é"),
    ("\\/", "/"),
    ("\\ud83d\\ude00", "😀"),
    ("\\t", "\t"),
    ("\\n", "\n"),
    ("\\u0000", "\0"),
    ("\\\"", "\""),
    ("\\\\", "\\"),
    ("\\b", "\u{8}"),
    ("\\f", "\u{c}"),
    ("\\r", "\r"),
    ("\\u2028", "\u{2028}"),
    ("\\uFEFF", "\u{feff}"),
];

/// Number literals that are not in their canonical form; `data` keeps them as written.
pub const LITERALS: &[&str] = &[
    "1.50",
    "2E3",
    "-0",
    "1e-2",
    "0.1",
    "12345678901234567890123",
    "-1.0e+5",
];

/// A JSON value kept as the literal text a producer sends.
#[derive(Clone, Debug)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    /// Beyond `i64` too.
    UInt(u64),
    Float(f64),
    /// A number literal as written (one of [`LITERALS`]).
    Literal(&'static str),
    Str(Vec<Piece>),
    Array(Vec<Json>),
    /// Keys are distinct: YAML refuses duplicates (docs/API.md §3).
    Object(Vec<(Vec<Piece>, Json)>),
}

/// Whitespace between the tokens of a JSON object or array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spacing {
    Compact,
    /// Spaces and tabs only, so that NDJSON lines stay lines.
    Spaced,
    /// Line breaks (CRLF) and indentation too.
    Lines,
}

impl Spacing {
    /// Without line breaks: `Lines` becomes `Spaced` (for NDJSON).
    pub fn one_line(self) -> Spacing {
        match self {
            Spacing::Lines => Spacing::Spaced,
            s => s,
        }
    }

    fn gap(self) -> &'static [u8] {
        match self {
            Spacing::Compact => b"",
            Spacing::Spaced => b" \t",
            Spacing::Lines => b"\r\n  ",
        }
    }

    fn colon(self) -> &'static [u8] {
        match self {
            Spacing::Compact => b":",
            Spacing::Spaced => b" : ",
            Spacing::Lines => b": ",
        }
    }
}

/// Any of the three.
pub fn spacing() -> impl Strategy<Value = Spacing> {
    prop_oneof![
        Just(Spacing::Compact),
        Just(Spacing::Spaced),
        Just(Spacing::Lines)
    ]
}

/// A string literal's pieces: mostly text (ASCII with control characters, U+2028, U+FEFF and
/// multi-byte ones, or any printable text), now and then an escape.
pub fn json_string() -> impl Strategy<Value = Vec<Piece>> {
    let piece = prop_oneof![
        2 => "[ -~éü\u{2028}\u{feff}😀\u{1}\t\n]{0,8}".prop_map(Piece::Text),
        1 => "\\PC{0,8}".prop_map(Piece::Text),
        1 => prop::sample::select(ESCAPES).prop_map(|(w, r)| Piece::Escape(w, r)),
    ];
    prop::collection::vec(piece, 0..4)
}

/// Any JSON value (`data`), nested up to `depth` levels, about `size` nodes, up to `branch`
/// items or members per array or object.
pub fn json_value(depth: u32, size: u32, branch: u32) -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::Int),
        any::<u64>().prop_map(Json::UInt),
        finite().prop_map(Json::Float),
        prop::sample::select(LITERALS).prop_map(Json::Literal),
        json_string().prop_map(Json::Str),
    ];
    let width = branch as usize;
    leaf.prop_recursive(depth, size, branch, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Json::Array),
            prop::collection::vec((json_string(), inner), 0..width).prop_map(|members| {
                let mut seen = HashSet::new();
                Json::Object(
                    members
                        .into_iter()
                        .filter(|(k, _)| seen.insert(read(k)))
                        .collect(),
                )
            }),
        ]
    })
}

/// The string a literal's pieces spell once their escapes are read.
fn read(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.as_str(),
            Piece::Escape(_, r) => r,
        })
        .collect()
}

/// A string literal: as written (`plain`: false), or with the canonical escaping of what it
/// reads as.
fn write_str(out: &mut Vec<u8>, pieces: &[Piece], plain: bool) {
    if plain {
        write_json_str(out, &read(pieces));
        return;
    }
    out.push(b'"');
    for p in pieces {
        match p {
            Piece::Text(t) => {
                let mut lit = Vec::new();
                write_json_str(&mut lit, t);
                out.extend_from_slice(lit.get(1..lit.len() - 1).unwrap_or_default());
            }
            Piece::Escape(w, _) => out.extend_from_slice(w.as_bytes()),
        }
    }
    out.push(b'"');
}

impl Json {
    /// As a producer sends it: escapes and number literals as drawn, whitespace per `spacing`.
    pub fn text(&self, spacing: Spacing) -> String {
        let mut out = Vec::new();
        self.write(&mut out, spacing, false);
        utf8(out)
    }

    /// Compact, each string re-escaped canonically from what it reads as (number literals as
    /// written): the text the YAML decoder stores for this value, whatever escapes were sent.
    pub fn plain_text(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out, Spacing::Compact, true);
        utf8(out)
    }

    fn write(&self, out: &mut Vec<u8>, spacing: Spacing, plain: bool) {
        let gap = spacing.gap();
        match self {
            Json::Null => out.extend_from_slice(b"null"),
            Json::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Json::Int(i) => write_num(out, Num::Int(*i)),
            Json::UInt(u) => out.extend_from_slice(u.to_string().as_bytes()),
            Json::Float(f) => write_num(out, Num::Float(*f)),
            Json::Literal(l) => out.extend_from_slice(l.as_bytes()),
            Json::Str(p) => write_str(out, p, plain),
            Json::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(gap);
                    item.write(out, spacing, plain);
                }
                out.extend_from_slice(gap);
                out.push(b']');
            }
            Json::Object(members) => {
                out.push(b'{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(gap);
                    write_str(out, k, plain);
                    out.extend_from_slice(spacing.colon());
                    v.write(out, spacing, plain);
                }
                out.extend_from_slice(gap);
                out.push(b'}');
            }
        }
    }
}

/// Everything written here is UTF-8 (strings and ASCII), so the lossy conversion never loses
/// anything; it only spares an `unwrap`.
fn utf8(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

/// A valid event as a producer sends it: owned parts, with how its JSON form is laid out.
#[derive(Clone, Debug)]
pub struct Event {
    pub stream: String,
    /// As sent: `Some("")` is stored as no entity.
    pub entity: Option<String>,
    pub ty: String,
    pub ts: Ts,
    /// `None`: not sent (an `event`).
    pub kind: Option<Kind>,
    /// As sent: a counter's whole float is stored as its integer.
    pub value: Option<Num>,
    pub id: Option<String>,
    pub data: Option<Json>,
    /// Field order of the JSON object: a permutation of 0..8 (stream, entity, type, ts, kind,
    /// value, id, data).
    pub order: Vec<usize>,
    /// Whitespace of the JSON object and of `data` in every form that keeps it.
    pub spacing: Spacing,
}

/// Any valid event (docs/API.md §2), its `data` up to `data_depth` levels deep.
pub fn event(data_depth: u32) -> impl Strategy<Value = Event> {
    (
        stream_name(),
        prop::option::of(entity()),
        type_name(),
        ts(),
        kind_and_value(),
        prop::option::of(id()),
        prop::option::of(json_value(data_depth, 8 * data_depth, data_depth)),
        Just((0..8).collect::<Vec<usize>>()).prop_shuffle(),
        spacing(),
    )
        .prop_map(
            |(stream, entity, mut ty, ts, (kind, value), id, data, order, spacing)| {
                // Counters and gauges may not take a built-in feature's name; a suffix keeps
                // the case (rather than filtering it out).
                if matches!(kind, Some(Kind::Counter | Kind::Gauge)) && reserved_feature_name(&ty) {
                    ty.push('x');
                }
                Event {
                    stream,
                    entity,
                    ty,
                    ts,
                    kind,
                    value,
                    id,
                    data,
                    order,
                    spacing,
                }
            },
        )
}

impl Event {
    /// The stored value: a counter's whole float is its integer.
    pub fn stored_value(&self) -> Option<Num> {
        match (self.kind, self.value) {
            (Some(Kind::Counter), Some(Num::Float(f))) => Some(Num::Int(f as i64)),
            (_, v) => v,
        }
    }

    /// `data` as sent, with the event's whitespace (line breaks included).
    pub fn data_sent(&self) -> Option<String> {
        self.data.as_ref().map(|d| d.text(self.spacing))
    }

    /// `data` as the JSON, NDJSON and frames decoders store it: compact, escapes and number
    /// literals as sent.
    pub fn data_compact(&self) -> Option<String> {
        self.data.as_ref().map(|d| d.text(Spacing::Compact))
    }

    /// `data` as the YAML decoder stores it: [`Json::plain_text`].
    pub fn data_plain(&self) -> Option<String> {
        self.data.as_ref().map(Json::plain_text)
    }

    /// The event as a decoder stores it: `ts` from `now` when absent, an empty entity as
    /// none, a counter's whole float as its integer; `data` is the caller's stored text
    /// ([`Event::data_compact`] or [`Event::data_plain`]).
    pub fn stored<'a>(&'a self, now: i64, data: Option<&'a str>) -> EventView<'a> {
        EventView {
            stream: &self.stream,
            entity: self.entity.as_deref().filter(|e| !e.is_empty()),
            ty: &self.ty,
            ts: self.ts.stored(now),
            kind: self.kind.unwrap_or_default(),
            value: self.stored_value(),
            id: self.id.as_deref(),
            data,
        }
    }

    /// The event in a frames BATCH, as sent (entity and value as given, an RFC 3339 `ts` as
    /// its milliseconds); `data` is the caller's text (e.g. [`Event::data_sent`]).
    pub fn wire<'a>(&'a self, data: Option<&'a str>) -> WireEvent<'a> {
        WireEvent {
            stream: &self.stream,
            entity: self.entity.as_deref(),
            ty: &self.ty,
            ts: self.ts.given(),
            kind: self.kind.unwrap_or_default(),
            value: self.value,
            id: self.id.as_deref(),
            data,
        }
    }

    /// One JSON object: fields in the event's order, its spacing (without line breaks if
    /// `one_line`, for NDJSON), `ts` as sent, `data` with its escapes and literals.
    pub fn to_json(&self, one_line: bool) -> Vec<u8> {
        let spacing = if one_line {
            self.spacing.one_line()
        } else {
            self.spacing
        };
        let mut out = vec![b'{'];
        let mut first = true;
        for &f in &self.order {
            let mut val = Vec::new();
            let name = match f {
                0 => {
                    write_json_str(&mut val, &self.stream);
                    "stream"
                }
                1 => match &self.entity {
                    Some(e) => {
                        write_json_str(&mut val, e);
                        "entity"
                    }
                    None => continue,
                },
                2 => {
                    write_json_str(&mut val, &self.ty);
                    "type"
                }
                3 => match &self.ts {
                    Ts::Absent => continue,
                    Ts::Ms(ms) => {
                        write_num(&mut val, Num::Int(*ms));
                        "ts"
                    }
                    Ts::Rfc3339 { text, .. } => {
                        write_json_str(&mut val, text);
                        "ts"
                    }
                },
                4 => match self.kind {
                    Some(k) => {
                        write_json_str(&mut val, k.as_str());
                        "kind"
                    }
                    None => continue,
                },
                5 => match self.value {
                    Some(v) => {
                        write_num(&mut val, v);
                        "value"
                    }
                    None => continue,
                },
                6 => match &self.id {
                    Some(id) => {
                        write_json_str(&mut val, id);
                        "id"
                    }
                    None => continue,
                },
                _ => match &self.data {
                    Some(d) => {
                        d.write(&mut val, spacing, false);
                        "data"
                    }
                    None => continue,
                },
            };
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(spacing.gap());
            write_json_str(&mut out, name);
            out.extend_from_slice(spacing.colon());
            out.extend_from_slice(&val);
        }
        out.extend_from_slice(spacing.gap());
        out.push(b'}');
        out
    }

    /// One YAML document, as a producer sends it: the canonical YAML of docs/API.md §5's replay
    /// without `seq`, but with entity, value, `data` (compact) and `ts` as sent — no `ts`
    /// line when absent, an RFC 3339 `ts` as a quoted string.
    pub fn to_yaml(&self) -> Vec<u8> {
        let data = self.data_compact();
        let view = EventView {
            entity: self.entity.as_deref(),
            value: self.value,
            ..self.stored(0, data.as_deref())
        };
        let mut doc = Vec::new();
        write_document(&mut doc, &view, None);
        let mut out = Vec::with_capacity(doc.len());
        // Every line of the document starts with its field's key: strings are quoted with
        // their line breaks escaped, and `data` is compact.
        for line in utf8(doc).lines() {
            if line.starts_with("ts: ") {
                match &self.ts {
                    Ts::Absent => continue,
                    Ts::Ms(_) => out.extend_from_slice(line.as_bytes()),
                    Ts::Rfc3339 { text, .. } => {
                        out.extend_from_slice(b"ts: ");
                        write_yaml_str(&mut out, text);
                    }
                }
            } else {
                out.extend_from_slice(line.as_bytes());
            }
            out.push(b'\n');
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzz seeds
// ---------------------------------------------------------------------------------------------

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

/// A reader handing out a body in pieces of the given sizes (cycled; 0 counts as 1; no sizes,
/// all at once), to show that where the reads split does not matter.
pub struct Pieces<'a> {
    rest: &'a [u8],
    sizes: Vec<usize>,
    next: usize,
}

impl<'a> Pieces<'a> {
    pub fn new(body: &'a [u8], sizes: impl Into<Vec<usize>>) -> Pieces<'a> {
        Pieces {
            rest: body,
            sizes: sizes.into(),
            next: 0,
        }
    }
}

impl std::io::Read for Pieces<'_> {
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
