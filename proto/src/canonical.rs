//! The canonical output form of docs/API.md §2: a compact JSON object with the event's fields in
//! the field order of docs/API.md §2.2 followed by `seq`; `ts` and `kind` always present, absent optional fields omitted,
//! `data` byte-for-byte as stored.

use crate::event::{EventView, Num};

/// Append `s` as a JSON string literal.
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Append a number in its canonical text: integers as integers, floats in serde_json's
/// shortest round-trip form (always with a `.` or exponent, e.g. `12.0`).
pub fn write_num(out: &mut Vec<u8>, n: Num) {
    match n {
        Num::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
        Num::Float(f) => {
            // serde_json writes finite floats with ryu; non-finite values never get here
            // (validation rejects them), and writing to a Vec cannot fail.
            if serde_json::to_writer(&mut *out, &f).is_err() {
                out.extend_from_slice(b"null");
            }
        }
    }
}

/// Append the canonical JSON of `ev` with its `seq` (no trailing newline).
pub fn write_event(out: &mut Vec<u8>, ev: &EventView<'_>, seq: u64) {
    out.extend_from_slice(b"{\"stream\":");
    write_json_str(out, ev.stream);
    if let Some(entity) = ev.entity {
        out.extend_from_slice(b",\"entity\":");
        write_json_str(out, entity);
    }
    out.extend_from_slice(b",\"type\":");
    write_json_str(out, ev.ty);
    out.extend_from_slice(b",\"ts\":");
    out.extend_from_slice(itoa::Buffer::new().format(ev.ts).as_bytes());
    out.extend_from_slice(b",\"kind\":\"");
    out.extend_from_slice(ev.kind.as_str().as_bytes());
    out.push(b'"');
    if let Some(v) = ev.value {
        out.extend_from_slice(b",\"value\":");
        write_num(out, v);
    }
    if let Some(id) = ev.id {
        out.extend_from_slice(b",\"id\":");
        write_json_str(out, id);
    }
    if let Some(data) = ev.data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.as_bytes());
    }
    out.extend_from_slice(b",\"seq\":");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Kind;

    #[test]
    fn canonical_shape() {
        let ev = EventView {
            stream: "m\"1",
            entity: Some("p"),
            ty: "t",
            ts: 7,
            kind: Kind::Gauge,
            value: Some(Num::Float(12.0)),
            id: None,
            data: Some("{\"a\":[1,2]}"),
        };
        let mut out = Vec::new();
        write_event(&mut out, &ev, 3);
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            r#"{"stream":"m\"1","entity":"p","type":"t","ts":7,"kind":"gauge","value":12.0,"data":{"a":[1,2]},"seq":3}"#
        );
    }

    #[test]
    fn escapes_control_chars() {
        let mut out = Vec::new();
        write_json_str(&mut out, "a\u{1}b\n");
        assert_eq!(out, b"\"a\\u0001b\\n\"");
        let back: String = serde_json::from_slice(&out).unwrap_or_default();
        assert_eq!(back, "a\u{1}b\n");
    }
}
