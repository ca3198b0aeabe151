//! The stored form of `data` (docs/API.md §2): the JSON text as sent minus insignificant whitespace —
//! key order, number literals and string escapes are kept byte for byte — and its nesting
//! depth, which is bounded.
//!
//! The input has already been validated by serde_json, so this only needs to tell strings
//! apart from the rest; it never fails on syntax.

/// Where the compact text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compacted {
    /// The text was already compact: use it as it is, no copy made.
    AsIs,
    /// The compact text was written to the output buffer.
    Copied,
}

/// `data` nests deeper than allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooDeep;

/// Compact the valid JSON text `raw` into `out` (only when it has whitespace to remove), and
/// check that it nests at most `max_depth` arrays/objects deep (a scalar is depth 0,
/// `{"a":[1]}` is depth 2).
pub fn compact(raw: &str, out: &mut String, max_depth: usize) -> Result<Compacted, TooDeep> {
    let bytes = raw.as_bytes();
    let mut depth = 0usize;
    let mut copied = false;
    // Start of the text not yet copied to `out` (meaningful once `copied`).
    let mut pending = 0usize;
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => i = string_end(bytes, i + 1),
            b'{' | b'[' => {
                depth += 1;
                if depth > max_depth {
                    return Err(TooDeep);
                }
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                if !copied {
                    out.clear();
                    copied = true;
                }
                // Whitespace is ASCII, so these are char boundaries.
                out.push_str(&raw[pending..i]);
                while matches!(bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                    i += 1;
                }
                pending = i;
            }
            _ => i += 1,
        }
    }
    if copied {
        out.push_str(&raw[pending..]);
        Ok(Compacted::Copied)
    } else {
        Ok(Compacted::AsIs)
    }
}

/// Index just past the closing quote of the string whose contents start at `i`.
fn string_end(bytes: &[u8], mut i: usize) -> usize {
    while let Some(rest) = bytes.get(i..) {
        match string_stop(rest) {
            Some(p) if rest.get(p) == Some(&b'\\') => i += p + 2,
            Some(p) => return i + p + 1,
            None => break,
        }
    }
    bytes.len()
}

/// Index of the first `"` or `\\` in `bytes`, the bytes that can end a run of string
/// contents. Most strings in events are short, where eight bytes at a time in a plain word
/// beat setting up a vectorized search; long ones get the vectorized search.
pub(super) fn string_stop(bytes: &[u8]) -> Option<usize> {
    const SHORT: usize = 64;
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The lowest set high bit marks the first byte of `x` equal to `b` (higher ones may be
    // false positives after a borrow, but only the lowest is used).
    fn eq(x: u64, b: u8) -> u64 {
        let y = x ^ (ONES * u64::from(b));
        y.wrapping_sub(ONES) & !y & HIGHS
    }
    let mut i = 0;
    while i < SHORT {
        let Some(word) = bytes.get(i..i + 8) else {
            break;
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_le_bytes(w);
        let hit = eq(x, b'"') | eq(x, b'\\');
        if hit != 0 {
            return Some(i + hit.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    let rest = bytes.get(i..)?;
    memchr::memchr2(b'"', b'\\', rest).map(|p| p + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(raw: &str) -> (String, Compacted) {
        let mut out = String::from("stale");
        let c = compact(raw, &mut out, 64).unwrap_or(Compacted::AsIs);
        match c {
            Compacted::AsIs => (raw.to_string(), c),
            Compacted::Copied => (out, c),
        }
    }

    #[test]
    fn removes_only_insignificant_whitespace() {
        assert_eq!(
            run("{ \"a b\" : [ 1 ,\n\t2.50e1 ] ,\r\n \"c\\\" d\" : \"x\\u0041 \" }"),
            (
                "{\"a b\":[1,2.50e1],\"c\\\" d\":\"x\\u0041 \"}".to_string(),
                Compacted::Copied
            )
        );
        assert_eq!(run("[1,{\"z\":1,\"a\":2}]").1, Compacted::AsIs);
        assert_eq!(run("\"  \"").1, Compacted::AsIs);
        assert_eq!(run("\"\\\\\"").1, Compacted::AsIs);
        assert_eq!(run("null").0, "null");
    }

    #[test]
    fn string_stop_finds_the_first_quote_or_backslash() {
        let naive = |b: &[u8]| b.iter().position(|&c| c == b'"' || c == b'\\');
        for len in 0..150 {
            for at in 0usize..=len {
                let mut b: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                // Bytes next to the targets that a sloppy bit trick could confuse with them.
                if let Some(x) = b.get_mut(at.wrapping_sub(1)) {
                    *x = b'"' + 1;
                }
                for stop in [b'"', b'\\'] {
                    let mut b = b.clone();
                    if at < len {
                        b[at] = stop;
                        b.extend_from_slice(b"\"\\");
                    }
                    assert_eq!(string_stop(&b), naive(&b), "{len} {at}");
                }
            }
        }
        assert_eq!(string_stop(b"\x00\x01\xff\x21\x5b\""), Some(5));
    }

    #[test]
    fn depth_is_bounded() {
        let mut out = String::new();
        let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(compact(&ok, &mut out, 64).is_ok());
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(compact(&deep, &mut out, 64), Err(TooDeep));
        // Brackets inside strings do not count.
        let s = format!("\"{}\"", "[".repeat(100));
        assert!(compact(&s, &mut out, 64).is_ok());
        assert_eq!(compact("5", &mut out, 0), Ok(Compacted::AsIs));
        assert_eq!(compact("{}", &mut out, 0), Err(TooDeep));
    }
}
