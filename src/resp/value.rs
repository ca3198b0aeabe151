//! Feature values to and from RESP (docs/RESP.md "Values").
//!
//! Out: integers (stored integers, the built-ins, counts, integral aggregates) are RESP
//! integers; other numbers are bulk strings in Rust's shortest round-trip form; strings are
//! bulk strings; booleans are RESP3 booleans (the integers 1 and 0 in RESP2).
//!
//! In: every `HSET` value arrives as a string. One that is an integer (`-12`) is stored as an
//! integer, one that is a finite decimal number (`2.5`, `1e3`) as a float, anything else as
//! a string; so a counter set over RESP keeps counting when events add to it. Booleans cannot
//! be written over RESP (the string `true` stays a string).

use vx_proto::resp::Reply;
use vx_storage::features::{FeatureValue, Reading};

/// An `HSET` value; `None` if it is not UTF-8 (feature strings are text).
pub(crate) fn parse(b: &[u8]) -> Option<FeatureValue> {
    let s = std::str::from_utf8(b).ok()?;
    if let Ok(i) = s.parse::<i64>() {
        return Some(FeatureValue::Int(i));
    }
    // `f64::from_str` also takes `inf`, `NaN` and `infinity`: those stay strings.
    let numeric = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'-' | b'+' | b'e' | b'E'));
    if numeric
        && let Ok(f) = s.parse::<f64>()
        && f.is_finite()
    {
        return Some(FeatureValue::Float(f));
    }
    Some(FeatureValue::Str(s.into()))
}

/// Write one value as a reply.
pub(crate) fn write(r: &mut Reply<'_>, v: Reading<'_>) {
    match v {
        Reading::Int(i) | Reading::Value(&FeatureValue::Int(i)) => r.int(i),
        Reading::Value(FeatureValue::Float(f)) => r.bulk(f.to_string().as_bytes()),
        Reading::Value(FeatureValue::Bool(b)) => r.boolean(*b),
        Reading::Value(FeatureValue::Str(s)) => r.bulk(s.as_bytes()),
        // As over HTTP: integral values print as integers while f64 holds them exactly.
        Reading::Num(f) => {
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                r.int(f as i64);
            } else {
                r.bulk(f.to_string().as_bytes());
            }
        }
    }
}

/// Write one value read on any node ([`crate::cluster::read::Val`]), as [`write`] does.
pub(crate) fn write_val(r: &mut Reply<'_>, v: &crate::cluster::read::Val) {
    use crate::cluster::read::Val;
    match v {
        Val::Int(i) => r.int(*i),
        Val::Float(f) => r.bulk(f.to_string().as_bytes()),
        Val::Bool(b) => r.boolean(*b),
        Val::Str(s) => r.bulk(s.as_bytes()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_in() {
        assert_eq!(parse(b"42"), Some(FeatureValue::Int(42)));
        assert_eq!(parse(b"-7"), Some(FeatureValue::Int(-7)));
        assert_eq!(parse(b"2.5"), Some(FeatureValue::Float(2.5)));
        assert_eq!(parse(b"1e3"), Some(FeatureValue::Float(1000.0)));
        assert_eq!(parse(b"inf"), Some(FeatureValue::Str("inf".into())));
        assert_eq!(parse(b"NaN"), Some(FeatureValue::Str("NaN".into())));
        assert_eq!(parse(b"1e999"), Some(FeatureValue::Str("1e999".into())));
        assert_eq!(parse(b"true"), Some(FeatureValue::Str("true".into())));
        assert_eq!(parse(b""), Some(FeatureValue::Str("".into())));
        assert_eq!(parse(b"\xff"), None);
    }

    #[test]
    fn values_out() {
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3: false,
        };
        write(&mut r, Reading::Int(3));
        write(&mut r, Reading::Value(&FeatureValue::Float(0.1)));
        write(&mut r, Reading::Value(&FeatureValue::Bool(true)));
        write(&mut r, Reading::Num(4.0));
        write(&mut r, Reading::Num(4.5));
        assert_eq!(out, b":3\r\n$3\r\n0.1\r\n:1\r\n:4\r\n$3\r\n4.5\r\n");
    }
}
