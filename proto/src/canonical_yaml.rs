//! The canonical form of docs/API.md §2 as a YAML document, for replay with `Accept:
//! application/yaml`: the same fields, in the same order, with the same values as the
//! canonical JSON ([`crate::canonical`]), one block mapping per document:
//!
//! ```yaml
//! ---
//! stream: "match-42"
//! entity: "player-7"
//! type: "damage"
//! ts: 1732000000123
//! kind: counter
//! value: 12
//! id: "evt-0001"
//! data: {"weapon":"bow"}
//! seq: 1
//! ```
//!
//! Strings are always double-quoted, so that no text is read back as another type; `data` is
//! its stored JSON, which is valid YAML flow, with the few characters that YAML cannot carry
//! raw escaped. Posting a document (without its `seq`) back as YAML yields the same canonical
//! event, as long as `data` is in the form the YAML decoder writes (serde_json's escaping; a
//! `data` ingested as JSON with other escapes comes back with the same value in that form).

use crate::canonical::write_num;
use crate::event::EventView;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// True for a character a YAML double-quoted scalar cannot hold raw, or that a YAML reader
/// could take for something else: DEL and the C1 controls, the line and paragraph
/// separators, the byte order mark, and the two non-characters YAML excludes.
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

fn escape_u(out: &mut Vec<u8>, c: u32) {
    if c <= 0xffff {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[((c >> shift) & 0xf) as usize]);
        }
    } else {
        out.extend_from_slice(b"\\U");
        for shift in [28, 24, 20, 16, 12, 8, 4, 0] {
            out.push(HEX[((c >> shift) & 0xf) as usize]);
        }
    }
}

/// Append `s` as a YAML double-quoted scalar.
pub fn write_yaml_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if c < ' ' || needs_escape(c) => escape_u(out, u32::from(c)),
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Append the compact JSON `json` as YAML flow. JSON is YAML flow except for what YAML
/// cannot carry: the raw characters of [`needs_escape`] and surrogate-pair escapes (YAML
/// reads `\uD83D` as a character of its own), which become `\U` escapes; a lone surrogate,
/// which JSON tolerates and YAML cannot express, becomes U+FFFD.
pub fn write_json_as_yaml(out: &mut Vec<u8>, json: &str) {
    let b = json.as_bytes();
    let mut in_str = false;
    let mut copied = 0;
    let mut i = 0;
    let hex4 = |at: usize| -> Option<u32> {
        let digits = b.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    while let Some(&c) = b.get(i) {
        if !in_str {
            if c == b'"' {
                in_str = true;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_str = false;
                i += 1;
            }
            b'\\' if b.get(i + 1) == Some(&b'u') => {
                let Some(unit) = hex4(i + 2) else {
                    i += 2;
                    continue;
                };
                if !(0xd800..0xe000).contains(&unit) {
                    i += 6;
                    continue;
                }
                out.extend_from_slice(&b[copied..i]);
                let low = (b.get(i + 6..i + 8) == Some(b"\\u"))
                    .then(|| hex4(i + 8))
                    .flatten()
                    .filter(|l| (0xdc00..0xe000).contains(l));
                match low {
                    Some(low) if unit < 0xdc00 => {
                        escape_u(out, 0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00));
                        i += 12;
                    }
                    _ => {
                        escape_u(out, 0xfffd);
                        i += 6;
                    }
                }
                copied = i;
            }
            b'\\' => i += 2,
            c if c >= 0x7f => {
                // Decode the character starting here (the text is valid UTF-8).
                let width = match c {
                    0xf0.. => 4,
                    0xe0.. => 3,
                    0xc0.. => 2,
                    _ => 1,
                };
                let ch = json
                    .get(i..i + width)
                    .and_then(|s| s.chars().next())
                    .unwrap_or('\u{fffd}');
                if needs_escape(ch) {
                    out.extend_from_slice(&b[copied..i]);
                    escape_u(out, u32::from(ch));
                    copied = i + width;
                }
                i += width;
            }
            _ => i += 1,
        }
    }
    out.extend_from_slice(&b[copied..]);
}

/// Append `ev` as one YAML document (`---` line included), with its `seq` if given.
pub fn write_document(out: &mut Vec<u8>, ev: &EventView<'_>, seq: Option<u64>) {
    out.extend_from_slice(b"---\nstream: ");
    write_yaml_str(out, ev.stream);
    if let Some(entity) = ev.entity {
        out.extend_from_slice(b"\nentity: ");
        write_yaml_str(out, entity);
    }
    out.extend_from_slice(b"\ntype: ");
    write_yaml_str(out, ev.ty);
    out.extend_from_slice(b"\nts: ");
    out.extend_from_slice(itoa::Buffer::new().format(ev.ts).as_bytes());
    out.extend_from_slice(b"\nkind: ");
    out.extend_from_slice(ev.kind.as_str().as_bytes());
    if let Some(v) = ev.value {
        out.extend_from_slice(b"\nvalue: ");
        write_num(out, v);
    }
    if let Some(id) = ev.id {
        out.extend_from_slice(b"\nid: ");
        write_yaml_str(out, id);
    }
    if let Some(data) = ev.data {
        out.extend_from_slice(b"\ndata: ");
        write_json_as_yaml(out, data);
    }
    if let Some(seq) = seq {
        out.extend_from_slice(b"\nseq: ");
        out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Kind, Num};

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn document_shape() {
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
        assert_eq!(
            text(|o| write_document(o, &ev, Some(3))),
            "---\nstream: \"m\\\"1\"\nentity: \"p\"\ntype: \"t\"\nts: 7\nkind: gauge\n\
             value: 12.0\ndata: {\"a\":[1,2]}\nseq: 3\n"
        );
    }

    #[test]
    fn strings_escape_what_yaml_cannot_hold() {
        assert_eq!(
            text(|o| write_yaml_str(o, "a\u{1}\u{7f}\u{85}\u{2028}\u{feff}é😀\t")),
            "\"a\\u0001\\u007F\\u0085\\u2028\\uFEFFé😀\\t\""
        );
    }

    #[test]
    fn json_becomes_yaml_flow() {
        let cases = [
            (r#"{"a":"x"}"#, r#"{"a":"x"}"#),
            (r#"["\ud83d\ude00"]"#, r#"["\U0001F600"]"#),
            (
                r#"["\ud800","\udc00x","\ud83d\u0041"]"#,
                r#"["\uFFFD","\uFFFDx","\uFFFD\u0041"]"#,
            ),
            (
                "[\"a\u{7f}\u{2029}\",\"\\\"\u{85}\"]",
                r#"["a\u007F\u2029","\"\u0085"]"#,
            ),
            (r#"{"\u0041\\":1e400}"#, r#"{"\u0041\\":1e400}"#),
        ];
        for (json, yaml) in cases {
            assert_eq!(text(|o| write_json_as_yaml(o, json)), yaml, "{json}");
        }
    }
}
