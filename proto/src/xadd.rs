//! Redis's `XADD stream * field value …` as an event (docs/RESP.md, "Streams"; SPEC §6): the
//! fields `type` (default [`DEFAULT_TYPE`]), `entity`, `ts`, `id`, `kind` and `value` are the
//! event's, checked by the rules every decoder checks ([`crate::rules`]); every other field is
//! a string member of `data`, in the order sent. A field given twice is refused (`data` is a
//! JSON object). Untrusted input, fuzzed by `fuzz/fuzz_targets/xadd.rs`.

use crate::canonical;
use crate::event::{Kind, Num};
use crate::rules::{
    RuleError, TextRule, check_reserved, check_value, kind_from_str, short, ts_from_i64,
    ts_from_rfc3339, ts_from_u64, ts_not_whole,
};
use crate::{EventView, InputError};

/// The `type` of an event whose fields name none.
pub const DEFAULT_TYPE: &str = "xadd";

/// The event of an `XADD`'s field/value pairs (`pairs`: names and values, alternating; an odd
/// last one is ignored); `data` is the JSON text buffer of its other fields, `now_ms` the
/// `ts` of an event whose fields name none.
pub fn event_of<'a, B: AsRef<[u8]>>(
    stream: &'a str,
    pairs: &'a [B],
    data: &'a mut Vec<u8>,
    now_ms: i64,
) -> Result<EventView<'a>, InputError> {
    let mut seen: hashbrown::HashSet<&str> = hashbrown::HashSet::with_capacity(pairs.len() / 2);
    let mut ev = EventView {
        stream,
        entity: None,
        ty: DEFAULT_TYPE,
        ts: now_ms,
        kind: Kind::Event,
        value: None,
        id: None,
        data: None,
    };
    let mut value = None;
    for pair in pairs.chunks_exact(2) {
        let name = std::str::from_utf8(pair[0].as_ref()).map_err(|_| {
            InputError::invalid("data", "a field name must be UTF-8 (data is a JSON object)")
        })?;
        let text = std::str::from_utf8(pair[1].as_ref()).map_err(|_| {
            InputError::invalid(name, format!("field \"{}\": must be UTF-8", short(name)))
        })?;
        if !seen.insert(name) {
            return Err(InputError::invalid(
                name,
                format!("field \"{}\" is given twice", short(name)),
            ));
        }
        match name {
            "type" => {
                TextRule::Type.check(text).map_err(|e| e.on("type"))?;
                ev.ty = text;
            }
            "entity" => {
                TextRule::Entity.check(text).map_err(|e| e.on("entity"))?;
                ev.entity = Some(text).filter(|e| !e.is_empty());
            }
            "id" => {
                TextRule::Id.check(text).map_err(|e| e.on("id"))?;
                ev.id = Some(text);
            }
            "ts" => ev.ts = ts_of(text).map_err(|e| e.on("ts"))?,
            "kind" => ev.kind = kind_from_str(text).map_err(|e| e.on("kind"))?,
            "value" => value = Some(number(text).map_err(|e| e.on("value"))?),
            _ => {
                data.push(if data.is_empty() { b'{' } else { b',' });
                canonical::write_json_str(data, name);
                data.push(b':');
                canonical::write_json_str(data, text);
            }
        }
    }
    ev.value = check_value(ev.kind, value)?;
    check_reserved(ev.kind, ev.ty)?;
    if !data.is_empty() {
        data.push(b'}');
        let data: &'a Vec<u8> = data;
        // Built from `&str`s by the JSON string writer: UTF-8.
        ev.data = std::str::from_utf8(data).ok();
    }
    Ok(ev)
}

/// A number's text as JSON reads it: `-12` an integer, `2.5` and `1e3` floats.
fn json_number(text: &str) -> Option<serde_json::Number> {
    let plain = !text.is_empty() && !text.starts_with(['+', ' ']) && !text.ends_with(' ');
    plain
        .then(|| serde_json::from_str::<serde_json::Number>(text).ok())
        .flatten()
}

/// `value`: a JSON number's text (an integer stays an integer).
fn number(text: &str) -> Result<Num, RuleError> {
    let n = json_number(text).ok_or_else(|| RuleError::NotANumber(format!("{:?}", short(text))))?;
    Ok(match (n.as_i64(), n.as_f64()) {
        (Some(i), _) => Num::Int(i),
        (None, Some(f)) if f.is_finite() => Num::Float(f),
        _ => return Err(RuleError::NotFinite(short(text).to_string())),
    })
}

/// `ts`: integer milliseconds, or an RFC 3339 time.
fn ts_of(text: &str) -> Result<i64, RuleError> {
    match json_number(text) {
        Some(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => ts_from_u64(u),
            (None, Some(i)) => ts_from_i64(i),
            _ => Err(ts_not_whole(text)),
        },
        None => ts_from_rfc3339(text),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::canonical::write_event;
    use crate::decode::EventParser;
    use proptest::prelude::*;

    const NOW: i64 = 1_732_000_000_000;

    /// The event's canonical JSON without its `seq` (as a client would send it).
    fn body_of(ev: &EventView<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        write_event(&mut out, ev, 7);
        let at = out.windows(7).rposition(|w| w == b",\"seq\":").unwrap();
        out.truncate(at);
        out.push(b'}');
        out
    }

    #[test]
    fn fields_map_to_the_event_and_others_to_data() {
        let pairs = [
            "type", "damage", "entity", "p7", "kind", "counter", "value", "12", "weapon", "bow",
        ];
        let mut data = Vec::new();
        let ev = event_of("s", &pairs, &mut data, NOW).unwrap();
        assert_eq!(
            (ev.ty, ev.entity, ev.kind),
            ("damage", Some("p7"), Kind::Counter)
        );
        assert_eq!(ev.value, Some(Num::Int(12)));
        assert_eq!((ev.ts, ev.data), (NOW, Some(r#"{"weapon":"bow"}"#)));
        let mut data = Vec::new();
        assert_eq!(
            event_of("s", &["a", "1"], &mut data, NOW).unwrap().ty,
            DEFAULT_TYPE
        );
        let mut data = Vec::new();
        assert!(event_of("s", &["a", "1", "a", "2"], &mut data, NOW).is_err());
    }

    proptest! {
        /// Any pairs (the fuzz target `xadd` searches harder): no panic, and an accepted
        /// event is one the JSON decoder accepts, equal to it.
        #[test]
        fn accepted_pairs_are_events_the_json_decoder_accepts(
            pairs in proptest::collection::vec(
                prop_oneof![
                    Just(b"type".to_vec()), Just(b"entity".to_vec()), Just(b"ts".to_vec()),
                    Just(b"kind".to_vec()), Just(b"value".to_vec()), Just(b"id".to_vec()),
                    Just(b"counter".to_vec()), Just(b"gauge".to_vec()), Just(b"1e3".to_vec()),
                    Just(b"-12".to_vec()), Just(b"2026-11-29T00:00:00Z".to_vec()),
                    proptest::collection::vec(any::<u8>(), 0..12),
                ],
                0..12,
            )
        ) {
            let mut data = Vec::new();
            if let Ok(ev) = event_of("s", &pairs, &mut data, NOW) {
                let body = body_of(&ev);
                let mut parser = EventParser::new();
                let back = parser.parse(&body, NOW + 1);
                prop_assert_eq!(back.as_ref().ok(), Some(&ev), "{}", String::from_utf8_lossy(&body));
            }
        }
    }
}
