//! Feature values to and from RESP (docs/RESP.md "Values").
//!
//! Out: every value is a bulk string, in RESP2 and RESP3 alike, as Redis answers a hash
//! (typed clients such as Jedis and Lettuce cast hash values to byte arrays):
//! - integers in decimal (`42`, `-7`);
//! - other numbers in the shortest decimal form that reads back to the same f64, without an
//!   exponent, and without a fraction when they have none (`0.25`, `1000`, `-0` is `0`):
//!   Rust's `Display` for f64, which is also how Redis prints `HINCRBYFLOAT`'s results;
//! - booleans (written over HTTP) as `true` and `false`;
//! - strings as their bytes.
//!
//! In: an `HSET` value is stored as the string it is, whatever it looks like (`02134` reads
//! back `02134`); only the built-ins `events` and `last_ts`, which hold integers, take an
//! integer in Redis's form. A value must be UTF-8 (feature strings are text).

use crate::cluster::read::Val;
use crate::failure::Failure;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_storage::features::{EVENTS, FeatureValue, LAST_TS, Reading, int_of};

/// An `HSET` value for feature `name`: a string, or an integer for a built-in (the PUT rules
/// then refuse anything else, [`crate::http::features::check_value`]).
pub(crate) fn parse(name: &str, b: &[u8]) -> Result<FeatureValue, Failure> {
    let s = std::str::from_utf8(b).map_err(|_| {
        Failure::new(
            ErrorCode::InvalidEvent,
            format!(
                "feature {name:?}: a value must be UTF-8 (feature strings are text; \
                 encode binary values, e.g. as base64)"
            ),
        )
    })?;
    if (name == EVENTS || name == LAST_TS)
        && let Some(i) = int_of(s)
    {
        return Ok(FeatureValue::Int(i));
    }
    Ok(FeatureValue::Str(s.into()))
}

/// A float as a reply shows it (module docs).
pub(crate) fn float_text(f: f64) -> String {
    if f == 0.0 {
        // Not `-0`.
        return "0".to_string();
    }
    f.to_string()
}

/// Write one value as a reply: a bulk string.
pub(crate) fn write(r: &mut Reply<'_>, v: Reading<'_>) {
    match v {
        Reading::Value(v) => write_value(r, v),
        Reading::Int(i) => r.bulk(i.to_string().as_bytes()),
        Reading::Num(f) => r.bulk(float_text(f).as_bytes()),
    }
}

fn write_value(r: &mut Reply<'_>, v: &FeatureValue) {
    match v {
        FeatureValue::Int(i) => r.bulk(i.to_string().as_bytes()),
        FeatureValue::Float(f) => r.bulk(float_text(*f).as_bytes()),
        FeatureValue::Bool(b) => r.bulk(if *b { b"true" } else { b"false" }),
        FeatureValue::Str(s) => r.bulk(s.as_bytes()),
    }
}

/// Write one value read on any node ([`Val`]), as [`write`] does.
pub(crate) fn write_val(r: &mut Reply<'_>, v: &Val) {
    match v {
        Val::Int(i) => r.bulk(i.to_string().as_bytes()),
        Val::Float(f) => r.bulk(float_text(*f).as_bytes()),
        Val::Bool(b) => r.bulk(if *b { b"true" } else { b"false" }),
        Val::Str(s) => r.bulk(s.as_bytes()),
    }
}

/// An argument as text (keys, names and values are UTF-8 here), if it is.
pub(super) fn text(b: &[u8]) -> Option<&str> {
    std::str::from_utf8(b).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn values_in_are_kept_as_given() {
        for s in ["42", "02134", "+5", "1e3", "2.5", "true", "", "a\0b", "inf"] {
            assert_eq!(
                parse("x", s.as_bytes()).unwrap(),
                FeatureValue::Str(s.into()),
                "{s:?}"
            );
        }
        assert_eq!(parse("events", b"12").unwrap(), FeatureValue::Int(12));
        // Not an integer: a string, which the PUT rules refuse for a built-in.
        assert_eq!(
            parse("last_ts", b"012").unwrap(),
            FeatureValue::Str("012".into())
        );
        let e = parse("x", b"\xff").unwrap_err();
        assert!(e.message.contains("UTF-8"), "{}", e.message);
    }

    fn out(f: impl FnOnce(&mut Reply<'_>), resp3: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut r = Reply {
            out: &mut out,
            resp3,
        };
        f(&mut r);
        out
    }

    #[test]
    fn values_out_are_bulk_strings_in_both_protocols() {
        for resp3 in [false, true] {
            let got = out(
                |r| {
                    write(r, Reading::Int(42));
                    write(r, Reading::Value(&FeatureValue::Int(-7)));
                    write(r, Reading::Value(&FeatureValue::Float(0.1)));
                    write(r, Reading::Value(&FeatureValue::Float(1000.0)));
                    write(r, Reading::Value(&FeatureValue::Bool(true)));
                    write(r, Reading::Value(&FeatureValue::Str("02134".into())));
                    write(r, Reading::Num(4.0));
                    write(r, Reading::Num(-0.0));
                    write(r, Reading::Num(4.5));
                },
                resp3,
            );
            assert_eq!(
                String::from_utf8(got).unwrap(),
                "$2\r\n42\r\n$2\r\n-7\r\n$3\r\n0.1\r\n$4\r\n1000\r\n$4\r\ntrue\r\n\
                 $5\r\n02134\r\n$1\r\n4\r\n$1\r\n0\r\n$3\r\n4.5\r\n"
            );
            let got = out(
                |r| {
                    write_val(r, &Val::Int(42));
                    write_val(r, &Val::Float(1e21));
                    write_val(r, &Val::Bool(false));
                },
                resp3,
            );
            assert_eq!(
                String::from_utf8(got).unwrap(),
                "$2\r\n42\r\n$22\r\n1000000000000000000000\r\n$5\r\nfalse\r\n"
            );
        }
    }
}
