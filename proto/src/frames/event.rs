//! One event in binary form (docs/PROTOCOL.md, "Event"): a kind byte, a flags byte, the
//! fixed-width numbers the flags announce, then length-prefixed strings. The layout follows
//! the packed header and the on-disk record, so decoding is a few bounds checks and copies
//! straight into a [`crate::Batch`].
//!
//! The decoder checks every rule of docs/API.md §2 through the same functions as the JSON and YAML
//! decoders ([`crate::rules`]), so a producer gets the same answer for the same event in any
//! format. What only binary input can get wrong — bytes that are not
//! UTF-8, unknown flag bits, a non-finite float — is reported here.

use serde::de::IgnoredAny;

use super::EncodeError;
use super::wire::{Reader, put_i64, put_u8, put_u16, put_u32, put_u64};
use crate::decode::LIMIT_EVENT_BYTES;
use crate::decode::compact::{Compacted, compact};
use crate::error::InputError;
use crate::event::{EventView, Kind, Num};
use crate::rules::{
    MAX_DATA_DEPTH, RuleError, TextRule, check_reserved, check_value, data_too_deep, ts_from_i64,
};

/// Bits of an event's flags byte.
pub mod flags {
    pub const HAS_VALUE: u8 = 0x01;
    /// The value is f64 bits (else an i64); only with [`HAS_VALUE`].
    pub const VALUE_F64: u8 = 0x02;
    pub const HAS_ID: u8 = 0x04;
    pub const HAS_DATA: u8 = 0x08;
    pub const HAS_ENTITY: u8 = 0x10;
    /// Without it the server's receive time is the event's `ts`.
    pub const HAS_TS: u8 = 0x20;
    pub const KNOWN: u8 = 0x3f;
}

/// An event as a producer sends it: like [`EventView`], but `ts` may be left to the server.
/// `data` must be JSON text (the server checks it and stores it compacted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WireEvent<'a> {
    pub stream: &'a str,
    pub entity: Option<&'a str>,
    pub ty: &'a str,
    pub ts: Option<i64>,
    pub kind: Kind,
    pub value: Option<Num>,
    pub id: Option<&'a str>,
    pub data: Option<&'a str>,
}

impl<'a> From<EventView<'a>> for WireEvent<'a> {
    fn from(ev: EventView<'a>) -> WireEvent<'a> {
        WireEvent {
            stream: ev.stream,
            entity: ev.entity,
            ty: ev.ty,
            ts: Some(ev.ts),
            kind: ev.kind,
            value: ev.value,
            id: ev.id,
            data: ev.data,
        }
    }
}

fn fits(field: &'static str, s: &str, max: usize) -> Result<(), EncodeError> {
    if s.len() > max {
        return Err(EncodeError::FieldTooLong {
            field,
            len: s.len(),
            max,
        });
    }
    Ok(())
}

/// Append `ev` in binary form. Fails, writing nothing, only when a field is longer than its
/// length prefix can say (which no valid event is); the rules of docs/API.md §2 are the server's
/// to check.
pub fn encode_event(out: &mut Vec<u8>, ev: &WireEvent<'_>) -> Result<(), EncodeError> {
    let (u8max, u16max) = (usize::from(u8::MAX), usize::from(u16::MAX));
    fits("stream", ev.stream, u16max)?;
    fits("type", ev.ty, u8max)?;
    fits("entity", ev.entity.unwrap_or(""), u16max)?;
    fits("id", ev.id.unwrap_or(""), u8max)?;
    fits("data", ev.data.unwrap_or(""), u32::MAX as usize)?;
    let mut fl = 0;
    let value = match ev.value {
        None => None,
        Some(Num::Int(i)) => {
            fl |= flags::HAS_VALUE;
            Some(i as u64)
        }
        Some(Num::Float(f)) => {
            fl |= flags::HAS_VALUE | flags::VALUE_F64;
            Some(f.to_bits())
        }
    };
    for (present, bit) in [
        (ev.ts.is_some(), flags::HAS_TS),
        (ev.entity.is_some(), flags::HAS_ENTITY),
        (ev.id.is_some(), flags::HAS_ID),
        (ev.data.is_some(), flags::HAS_DATA),
    ] {
        if present {
            fl |= bit;
        }
    }
    put_u8(out, ev.kind as u8);
    put_u8(out, fl);
    if let Some(ts) = ev.ts {
        put_i64(out, ts);
    }
    if let Some(v) = value {
        put_u64(out, v);
    }
    put_u16(out, ev.stream.len() as u16);
    out.extend_from_slice(ev.stream.as_bytes());
    put_u8(out, ev.ty.len() as u8);
    out.extend_from_slice(ev.ty.as_bytes());
    if let Some(e) = ev.entity {
        put_u16(out, e.len() as u16);
        out.extend_from_slice(e.as_bytes());
    }
    if let Some(id) = ev.id {
        put_u8(out, id.len() as u8);
        out.extend_from_slice(id.as_bytes());
    }
    if let Some(d) = ev.data {
        put_u32(out, d.len() as u32);
        out.extend_from_slice(d.as_bytes());
    }
    Ok(())
}

/// How far the event at the front of a buffer reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extent {
    /// The event is the first `n` bytes.
    Complete(usize),
    /// The buffer is too short to tell: at least this many bytes are needed.
    Incomplete(usize),
}

/// Find the extent of the event at the front of `buf` by reading only its flags and length
/// prefixes. `left` is what remains of the enclosing frame and `max` is
/// `ingest.max_event_bytes`: an event reaching past either is refused as soon as a length says
/// so, so the caller never buffers more than `max` bytes for one event. `index` is the event's
/// position in the request, for the error.
pub(crate) fn extent(buf: &[u8], left: u64, max: usize, index: u64) -> Result<Extent, InputError> {
    let have = |end: u64| -> Result<bool, InputError> {
        if end > left {
            return Err(InputError::malformed(format!(
                "event {index} runs past the end of its BATCH frame"
            ))
            .at_index(index));
        }
        if end > max as u64 {
            return Err(InputError::too_large(
                LIMIT_EVENT_BYTES,
                max as u64,
                format!("event {index} is larger than {max} bytes (ingest.max_event_bytes)"),
            )
            .at_index(index));
        }
        Ok(end <= buf.len() as u64)
    };
    // Read a little-endian length of `n` bytes ending at `end` (already known to be present).
    let len_at = |end: u64, n: usize| -> u64 {
        let start = end as usize - n;
        buf.get(start..end as usize).map_or(0, |b| {
            b.iter()
                .rev()
                .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
        })
    };
    let mut end = 2u64;
    if !have(end)? {
        return Ok(Extent::Incomplete(end as usize));
    }
    let fl = buf.get(1).copied().unwrap_or(0);
    if fl & flags::HAS_TS != 0 {
        end += 8;
    }
    if fl & flags::HAS_VALUE != 0 {
        end += 8;
    }
    let strings: [(bool, usize); 5] = [
        (true, 2),                        // stream
        (true, 1),                        // type
        (fl & flags::HAS_ENTITY != 0, 2), // entity
        (fl & flags::HAS_ID != 0, 1),     // id
        (fl & flags::HAS_DATA != 0, 4),   // data
    ];
    for (present, prefix) in strings {
        if !present {
            continue;
        }
        end += prefix as u64;
        if !have(end)? {
            return Ok(Extent::Incomplete(end as usize));
        }
        end += len_at(end, prefix);
    }
    if !have(end)? {
        return Ok(Extent::Incomplete(end as usize));
    }
    Ok(Extent::Complete(end as usize))
}

/// Decodes single events, keeping a buffer for compacted `data` between them so that the
/// steady state does not allocate.
#[derive(Debug, Default)]
pub struct EventDecoder {
    data: String,
}

impl EventDecoder {
    pub fn new() -> EventDecoder {
        EventDecoder::default()
    }

    /// Decode and validate one event; `bytes` must hold exactly the event. `now_ms` is the
    /// `ts` of an event that has none. Errors carry the field but no index (the caller knows
    /// it).
    pub fn decode<'a>(
        &'a mut self,
        bytes: &'a [u8],
        now_ms: i64,
    ) -> Result<EventView<'a>, InputError> {
        let mut r = Reader::new(bytes);
        let cut = || InputError::malformed("the event is cut off");
        let kind = r.u8().ok_or_else(cut)?;
        let fl = r.u8().ok_or_else(cut)?;
        if fl & !flags::KNOWN != 0 {
            return Err(InputError::malformed(format!(
                "unknown event flag bits 0x{:02x}",
                fl & !flags::KNOWN
            )));
        }
        if fl & flags::VALUE_F64 != 0 && fl & flags::HAS_VALUE == 0 {
            return Err(InputError::malformed(
                "event flag 0x02 (f64 value) is set without flag 0x01 (has value)",
            ));
        }
        let ts = match fl & flags::HAS_TS {
            0 => None,
            _ => Some(r.i64().ok_or_else(cut)?),
        };
        let raw_value = match fl & flags::HAS_VALUE {
            0 => None,
            _ => Some(r.u64().ok_or_else(cut)?),
        };
        let stream = string(&mut r, 2, "stream")?;
        let ty = string(&mut r, 1, "type")?;
        let entity = optional(&mut r, fl & flags::HAS_ENTITY, 2, "entity")?;
        let id = optional(&mut r, fl & flags::HAS_ID, 1, "id")?;
        let data = optional(&mut r, fl & flags::HAS_DATA, 4, "data")?;
        if r.remaining() > 0 {
            return Err(InputError::malformed(format!(
                "{} bytes after the end of the event",
                r.remaining()
            )));
        }

        let kind = Kind::from_u8(kind).ok_or_else(|| {
            InputError::invalid(
                "kind",
                format!("field \"kind\": must be 0 (event), 1 (counter) or 2 (gauge), got {kind}"),
            )
        })?;
        let text = |rule: TextRule, s: &str| rule.check(s).map_err(|e| e.on(rule.field()));
        text(TextRule::Stream, stream)?;
        text(TextRule::Type, ty)?;
        if let Some(e) = entity {
            text(TextRule::Entity, e)?;
        }
        if let Some(id) = id {
            text(TextRule::Id, id)?;
        }
        if let Some(t) = ts {
            ts_from_i64(t).map_err(|e| e.on("ts"))?;
        }
        let value = match raw_value {
            None => None,
            Some(bits) if fl & flags::VALUE_F64 != 0 => {
                let x = f64::from_bits(bits);
                if !x.is_finite() {
                    return Err(RuleError::NotFinite(x.to_string()).on("value"));
                }
                Some(Num::Float(x))
            }
            Some(bits) => Some(Num::Int(bits as i64)),
        };
        let value = check_value(kind, value)?;
        check_reserved(kind, ty)?;
        let compacted = match data {
            None => None,
            Some(raw) => Some(check_data(raw, &mut self.data)?),
        };
        let data = match (data, compacted) {
            (Some(raw), Some(Compacted::AsIs)) => Some(raw),
            (Some(_), Some(Compacted::Copied)) => Some(self.data.as_str()),
            _ => None,
        };
        Ok(EventView {
            stream,
            entity: entity.filter(|e| !e.is_empty()),
            ty,
            ts: ts.unwrap_or(now_ms),
            kind,
            value,
            id,
            data,
        })
    }
}

/// A string with a `prefix`-byte length.
fn string<'a>(
    r: &mut Reader<'a>,
    prefix: usize,
    field: &'static str,
) -> Result<&'a str, InputError> {
    let cut = || InputError::malformed(format!("field \"{field}\" is cut off"));
    let len = match prefix {
        1 => r.u8().map(usize::from),
        2 => r.u16().map(usize::from),
        _ => r.u32().map(|n| n as usize),
    }
    .ok_or_else(cut)?;
    let bytes = r.bytes(len).ok_or_else(cut)?;
    std::str::from_utf8(bytes).map_err(|_| {
        let mut e = InputError::malformed(format!("field \"{field}\" is not valid UTF-8"));
        e.field = Some(field.into());
        e
    })
}

fn optional<'a>(
    r: &mut Reader<'a>,
    flag: u8,
    prefix: usize,
    field: &'static str,
) -> Result<Option<&'a str>, InputError> {
    if flag == 0 {
        Ok(None)
    } else {
        string(r, prefix, field).map(Some)
    }
}

/// `data` must be JSON text nesting at most 64 levels; it is stored compact. Depth is checked
/// first, by the compactor's flat scan, so that the JSON check never recurses deeply.
fn check_data(raw: &str, buf: &mut String) -> Result<Compacted, InputError> {
    let compacted = compact(raw, buf, MAX_DATA_DEPTH).map_err(|_| data_too_deep())?;
    // The same validating skip serde_json uses for `data` in JSON bodies: identical grammar.
    serde_json::from_str::<IgnoredAny>(raw)
        .map_err(|e| InputError::invalid("data", format!("field \"data\": not valid JSON: {e}")))?;
    Ok(compacted)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ErrorClass;
    use crate::decode::LIMIT_DATA_DEPTH;
    use crate::rules::MAX_TS;

    fn ev<'a>() -> WireEvent<'a> {
        WireEvent {
            stream: "s",
            entity: None,
            ty: "t",
            ts: Some(5),
            kind: Kind::Event,
            value: None,
            id: None,
            data: None,
        }
    }

    fn enc(e: &WireEvent<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        encode_event(&mut out, e).unwrap();
        out
    }

    fn decode_err(e: &WireEvent<'_>) -> InputError {
        let bytes = enc(e);
        EventDecoder::new().decode(&bytes, 0).unwrap_err()
    }

    #[test]
    fn extent_reads_only_lengths() {
        let e = WireEvent {
            entity: Some("p"),
            id: Some("i"),
            data: Some("{}"),
            value: Some(Num::Int(1)),
            ..ev()
        };
        let b = enc(&e);
        for cut in 0..b.len() {
            match extent(&b[..cut], 1 << 20, 1 << 20, 0).unwrap() {
                Extent::Incomplete(need) => assert!(need > cut && need <= b.len(), "{cut}"),
                Extent::Complete(n) => panic!("complete at {cut}: {n}"),
            }
        }
        assert_eq!(
            extent(&b, 1 << 20, 1 << 20, 0),
            Ok(Extent::Complete(b.len()))
        );
        // Past the frame: malformed. Past the event limit: too large, from the length alone.
        let e1 = extent(&b, (b.len() - 1) as u64, 1 << 20, 3).unwrap_err();
        assert_eq!((e1.class, e1.index), (ErrorClass::Malformed, Some(3)));
        let big = WireEvent {
            data: Some("[1]"),
            ..ev()
        };
        let mut b = enc(&big);
        let at = b.len() - 7;
        b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e2 = extent(&b[..at + 4], u64::MAX, 1000, 0).unwrap_err();
        assert_eq!(e2.class, ErrorClass::TooLarge);
        assert_eq!(e2.limit.as_deref(), Some(LIMIT_EVENT_BYTES));
    }

    #[test]
    fn rules_match_the_json_decoder() {
        let cases: Vec<(WireEvent<'_>, ErrorClass, &str)> = vec![
            (
                WireEvent { stream: "", ..ev() },
                ErrorClass::InvalidEvent,
                "stream",
            ),
            (
                WireEvent {
                    stream: "a\nb",
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "stream",
            ),
            (
                WireEvent { ty: "a b", ..ev() },
                ErrorClass::InvalidEvent,
                "type",
            ),
            (
                WireEvent {
                    id: Some(""),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "id",
            ),
            (
                WireEvent {
                    entity: Some("\u{7f}"),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "entity",
            ),
            (
                WireEvent {
                    ts: Some(-1),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "ts",
            ),
            (
                WireEvent {
                    ts: Some(MAX_TS),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "ts",
            ),
            (
                WireEvent {
                    kind: Kind::Counter,
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "value",
            ),
            (
                WireEvent {
                    kind: Kind::Counter,
                    value: Some(Num::Float(1.5)),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "value",
            ),
            (
                WireEvent {
                    kind: Kind::Gauge,
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "value",
            ),
            (
                WireEvent {
                    value: Some(Num::Float(f64::NAN)),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "value",
            ),
            (
                WireEvent {
                    kind: Kind::Gauge,
                    ty: "events",
                    value: Some(Num::Int(1)),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "type",
            ),
            (
                WireEvent {
                    data: Some("{\"a\":}"),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "data",
            ),
            (
                WireEvent {
                    data: Some("1 2"),
                    ..ev()
                },
                ErrorClass::InvalidEvent,
                "data",
            ),
        ];
        for (e, class, field) in cases {
            let err = decode_err(&e);
            assert_eq!(
                (err.class, err.field.as_deref()),
                (class, Some(field)),
                "{e:?}"
            );
        }
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        let err = decode_err(&WireEvent {
            data: Some(&deep),
            ..ev()
        });
        assert_eq!(err.class, ErrorClass::TooLarge);
        assert_eq!(err.limit.as_deref(), Some(LIMIT_DATA_DEPTH));
        // Same wording as the JSON path.
        let err = decode_err(&WireEvent { stream: "", ..ev() });
        assert_eq!(err.message, "field \"stream\": must not be empty");
    }

    #[test]
    fn accepted_forms_are_normalised_like_json() {
        let mut d = EventDecoder::new();
        // A whole float counter becomes an integer; an empty entity is no entity; data is
        // compacted; no ts means the receive time.
        let e = WireEvent {
            kind: Kind::Counter,
            value: Some(Num::Float(12.0)),
            entity: Some(""),
            ts: None,
            data: Some("{ \"a\" : [1, 2] }"),
            ..ev()
        };
        let b = enc(&e);
        let got = d.decode(&b, 77).unwrap();
        assert_eq!(got.value, Some(Num::Int(12)));
        assert_eq!(got.entity, None);
        assert_eq!(got.ts, 77);
        assert_eq!(got.data, Some("{\"a\":[1,2]}"));
    }

    #[test]
    fn binary_only_faults_are_malformed() {
        let mut d = EventDecoder::new();
        let mut b = enc(&ev());
        b[1] |= 0x80;
        assert_eq!(d.decode(&b, 0).unwrap_err().class, ErrorClass::Malformed);
        let mut b = enc(&ev());
        b[1] |= flags::VALUE_F64;
        assert_eq!(d.decode(&b, 0).unwrap_err().class, ErrorClass::Malformed);
        let mut b = enc(&WireEvent {
            stream: "ab",
            ..ev()
        });
        b[12] = 0xff;
        let err = d.decode(&b, 0).unwrap_err();
        assert_eq!(
            (err.class, err.field.as_deref()),
            (ErrorClass::Malformed, Some("stream"))
        );
        let b = enc(&ev());
        assert_eq!(
            d.decode(&b[..b.len() - 1], 0).unwrap_err().class,
            ErrorClass::Malformed
        );
        let mut b = enc(&ev());
        b.push(0);
        assert_eq!(d.decode(&b, 0).unwrap_err().class, ErrorClass::Malformed);
    }

    #[test]
    fn encoder_refuses_fields_its_prefixes_cannot_carry() {
        let long = "x".repeat(256);
        let mut out = vec![1];
        assert!(matches!(
            encode_event(&mut out, &WireEvent { ty: &long, ..ev() }),
            Err(EncodeError::FieldTooLong { field: "type", .. })
        ));
        assert_eq!(out, [1], "nothing written");
    }
}
