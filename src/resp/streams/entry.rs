//! An event as a stream entry (docs/RESP.md, "Streams"): its id `<seq>-0` and its fields
//! `type`, `entity`, `ts`, `kind`, `value` (those present: `entity` and `value` when the event
//! has them, `kind` when it is not `event`), then the members of `data` when it is a JSON
//! object (strings as their text, other values as compact JSON text), or one field `data`
//! holding its JSON text when it is not. The event's `id` is not a field. A member of `data`
//! named like one of the fields before it is answered as `data.<name>`, so that a client
//! that makes a map of an entry keeps both.
//!
//! [`Entries`] holds a reply's entries, encoded (an entry is the same in RESP2 and RESP3),
//! within a byte bound: a reply is built whole before it is written, so this bounds what one
//! command can make the server hold.

use super::MAX_REPLY_BYTES;
use super::ids::entry_id;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::VecDeque;
use vx_proto::event::{Kind, Num};
use vx_proto::{EventView, canonical};

/// The fields an event maps to, before the members of its `data`.
const FIELDS: [&str; 5] = ["type", "entity", "ts", "kind", "value"];

/// A reply's entries, encoded, in seq order, within [`MAX_REPLY_BYTES`] (less what the
/// reply's other entries took: `XREAD` shares the bound among its streams).
pub(super) struct Entries {
    list: VecDeque<Vec<u8>>,
    bytes: usize,
    budget: usize,
    /// Keep the newest entries when over the budget (a reverse range), not the oldest.
    newest: bool,
}

impl Entries {
    pub(super) fn new(budget: usize, newest: bool) -> Entries {
        Entries {
            list: VecDeque::new(),
            bytes: 0,
            budget,
            newest,
        }
    }

    /// The whole reply's bound.
    pub(super) fn whole(newest: bool) -> Entries {
        Entries::new(MAX_REPLY_BYTES, newest)
    }

    /// No entries, with the same bound.
    pub(super) fn empty_like(&self) -> Entries {
        Entries::new(self.budget, self.newest)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// No more entries fit (always false when keeping the newest: older ones go instead).
    pub(super) fn full(&self) -> bool {
        !self.newest && self.bytes >= self.budget
    }

    pub(super) fn push(&mut self, seq: u64, ev: &EventView<'_>) {
        let mut e = Vec::with_capacity(64 + ev.data.map_or(0, str::len));
        write_entry(&mut e, seq, ev);
        self.bytes += e.len();
        self.list.push_back(e);
        while self.newest && self.bytes > self.budget && self.list.len() > 1 {
            if let Some(old) = self.list.pop_front() {
                self.bytes -= old.len();
            }
        }
    }

    /// Add an event given as its canonical JSON (a line of an owner's NDJSON replay, cluster
    /// mode); false if it is not one (logged: the owner answered something else).
    pub(super) fn push_json(&mut self, line: &[u8]) -> bool {
        match serde_json::from_slice::<Line<'_>>(line) {
            Ok(l) => match l.view() {
                Some((seq, ev)) => {
                    self.push(seq, &ev);
                    true
                }
                None => {
                    tracing::warn!("a stream owner's event has an unknown kind or value");
                    false
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "a stream owner's event is not canonical JSON");
                false
            }
        }
    }

    /// Append the first entry alone (`XINFO STREAM`'s first and last entry).
    pub(super) fn write_one(&self, out: &mut Vec<u8>) {
        if let Some(e) = self.list.front() {
            out.extend_from_slice(e);
        }
    }

    /// Append the entries as an array, in seq order or (`reverse`) the other way.
    pub(super) fn write(self, out: &mut Vec<u8>, reverse: bool) {
        out.push(b'*');
        out.extend_from_slice(itoa::Buffer::new().format(self.list.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.reserve(self.bytes);
        if reverse {
            for e in self.list.iter().rev() {
                out.extend_from_slice(e);
            }
        } else {
            for e in &self.list {
                out.extend_from_slice(e);
            }
        }
    }
}

/// An event in canonical JSON (docs/API.md §2.2), borrowed where it has no escapes.
#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    stream: Cow<'a, str>,
    #[serde(borrow, default)]
    entity: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "type")]
    ty: Cow<'a, str>,
    ts: i64,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    value: Option<serde_json::Number>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
    seq: u64,
}

impl Line<'_> {
    fn view(&self) -> Option<(u64, EventView<'_>)> {
        let kind = match self.kind.as_deref() {
            None => Kind::Event,
            Some(k) => Kind::parse(k)?,
        };
        let value = match &self.value {
            None => None,
            Some(n) => Some(match n.as_i64() {
                Some(i) => Num::Int(i),
                None => Num::Float(n.as_f64()?),
            }),
        };
        let ev = EventView {
            stream: &self.stream,
            entity: self.entity.as_deref(),
            ty: &self.ty,
            ts: self.ts,
            kind,
            value,
            id: self.id.as_deref(),
            data: self.data.map(RawValue::get),
        };
        Some((self.seq, ev))
    }
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Append one entry: `[id, [field, value, …]]`.
pub(super) fn write_entry(out: &mut Vec<u8>, seq: u64, ev: &EventView<'_>) {
    let fields = fields(ev);
    out.extend_from_slice(b"*2\r\n");
    bulk(out, entry_id(seq).as_bytes());
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(2 * fields.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &fields {
        bulk(out, name.as_bytes());
        bulk(out, value.as_bytes());
    }
}

/// An event's fields, in order (see the module docs).
pub(super) fn fields<'a>(ev: &EventView<'a>) -> Vec<(Cow<'a, str>, Cow<'a, str>)> {
    let mut out: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::with_capacity(8);
    out.push(("type".into(), ev.ty.into()));
    if let Some(e) = ev.entity {
        out.push(("entity".into(), e.into()));
    }
    out.push(("ts".into(), ev.ts.to_string().into()));
    if ev.kind != Kind::Event {
        out.push(("kind".into(), ev.kind.as_str().into()));
    }
    if let Some(v) = ev.value {
        out.push(("value".into(), num_text(v).into()));
    }
    if let Some(data) = ev.data {
        match members(data) {
            Some(members) => {
                for (name, raw) in members {
                    let name = if FIELDS.contains(&name.as_str()) {
                        format!("data.{name}")
                    } else {
                        name
                    };
                    out.push((name.into(), member_text(raw)));
                }
            }
            None => out.push(("data".into(), data.into())),
        }
    }
    out
}

/// A number as replay prints it (`12`, `2.5`, `12.0`).
fn num_text(v: Num) -> String {
    let mut b = Vec::new();
    canonical::write_num(&mut b, v);
    String::from_utf8_lossy(&b).into_owned()
}

/// A member of `data`: a string as its text, anything else as its (compact) JSON text.
fn member_text(raw: &RawValue) -> Cow<'_, str> {
    let text = raw.get();
    if text.starts_with('"')
        && let Ok(s) = serde_json::from_str::<Cow<'_, str>>(text)
    {
        return s;
    }
    text.into()
}

/// The members of `data` in their order, if it is a JSON object.
fn members(data: &str) -> Option<Vec<(String, &RawValue)>> {
    struct Ordered<'a>(Vec<(String, &'a RawValue)>);
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Ordered<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Ordered<'de>, A::Error> {
            let mut out = Vec::new();
            while let Some(kv) = m.next_entry::<String, &'de RawValue>()? {
                out.push(kv);
            }
            Ok(Ordered(out))
        }
    }
    if !data.starts_with('{') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(data);
    serde::Deserializer::deserialize_map(&mut de, V)
        .ok()
        .map(|o| o.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn view<'a>(data: Option<&'a str>) -> EventView<'a> {
        EventView {
            stream: "s",
            entity: Some("p1"),
            ty: "damage",
            ts: 42,
            kind: Kind::Counter,
            value: Some(Num::Int(12)),
            id: Some("evt-1"),
            data,
        }
    }

    fn pairs(ev: &EventView<'_>) -> Vec<(String, String)> {
        fields(ev)
            .into_iter()
            .map(|(n, v)| (n.into_owned(), v.into_owned()))
            .collect()
    }

    fn p(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn an_event_maps_to_its_fields_then_its_data_members() {
        let ev = view(Some(
            r#"{"weapon":"bow","n":3,"f":2.5,"ok":true,"nil":null,"o":{"a":[1,"x"]},"esc":"a\"b\u00e9","type":"shadow"}"#,
        ));
        assert_eq!(
            pairs(&ev),
            p(&[
                ("type", "damage"),
                ("entity", "p1"),
                ("ts", "42"),
                ("kind", "counter"),
                ("value", "12"),
                ("weapon", "bow"),
                ("n", "3"),
                ("f", "2.5"),
                ("ok", "true"),
                ("nil", "null"),
                ("o", r#"{"a":[1,"x"]}"#),
                ("esc", "a\"bé"),
                ("data.type", "shadow"),
            ])
        );
    }

    #[test]
    fn absent_fields_are_left_out_and_other_data_is_one_field() {
        let mut ev = view(Some("[1,2]"));
        ev.entity = None;
        ev.kind = Kind::Event;
        ev.value = None;
        assert_eq!(
            pairs(&ev),
            p(&[("type", "damage"), ("ts", "42"), ("data", "[1,2]")])
        );
        ev.data = Some("\"text\"");
        assert_eq!(pairs(&ev)[2], ("data".into(), "\"text\"".into()));
        ev.data = None;
        ev.kind = Kind::Gauge;
        ev.value = Some(Num::Float(12.0));
        assert_eq!(
            pairs(&ev),
            p(&[
                ("type", "damage"),
                ("ts", "42"),
                ("kind", "gauge"),
                ("value", "12.0")
            ])
        );
    }

    #[test]
    fn entries_are_bounded_keeping_the_oldest_or_the_newest() {
        let ev = view(None);
        let mut one = Vec::new();
        write_entry(&mut one, 1, &ev);
        assert!(one.starts_with(b"*2\r\n$3\r\n1-0\r\n*10\r\n$4\r\ntype\r\n$6\r\ndamage\r\n"));
        let mut fwd = Entries::new(one.len() * 3, false);
        let mut seq = 0;
        while !fwd.full() {
            seq += 1;
            fwd.push(seq, &ev);
        }
        assert_eq!(fwd.list.len(), 3);
        let mut rev = Entries::new(one.len() * 3 + 8, true);
        for s in 1..=10 {
            rev.push(s, &ev);
        }
        assert_eq!(rev.list.len(), 3);
        let mut out = Vec::new();
        rev.write(&mut out, true);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("*3\r\n*2\r\n$4\r\n10-0\r\n"), "{text}");
        assert!(text.contains("$3\r\n8-0\r\n"), "{text}");
        assert!(!text.contains("$3\r\n7-0\r\n"), "{text}");
    }

    #[test]
    fn an_owners_canonical_json_reads_as_the_same_entry() {
        let ev = view(Some(r#"{"w":"b\"ow","n":[1]}"#));
        let mut json = Vec::new();
        canonical::write_event(&mut json, &ev, 7);
        let mut direct = Entries::whole(false);
        direct.push(7, &ev);
        let mut owned = Entries::whole(false);
        assert!(owned.push_json(&json));
        assert!(!owned.push_json(b"{\"not\":1}"));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        direct.write(&mut a, false);
        owned.write(&mut b, false);
        assert_eq!(a, b);
    }
}
