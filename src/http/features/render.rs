//! The JSON of a feature read (docs/API.md §6): `{"entity":…,"features":{…},"as_of":…}`, written
//! straight into the response body from the feature store's query API, without building a
//! `serde_json::Value` per entity.

use std::io::Write as _;
use vx_storage::features::{FeatureValue, Features, ReadAt, Reading};

/// Append one entity's object to `out` (with `as_of` when `with_as_of`); false, with nothing
/// written, if the entity is unknown.
pub fn write_entity(
    features: &Features,
    entity: &str,
    names: Option<&[&str]>,
    at: ReadAt,
    with_as_of: bool,
    out: &mut Vec<u8>,
) -> bool {
    let start = out.len();
    out.extend_from_slice(b"{\"entity\":");
    json_str(out, entity);
    out.extend_from_slice(b",\"features\":{");
    let mut first = true;
    let read = features.read(entity, names, at, &mut |name, v| {
        if !first {
            out.push(b',');
        }
        first = false;
        json_str(out, name);
        out.push(b':');
        write_value(out, v);
    });
    let Some(read) = read else {
        out.truncate(start);
        return false;
    };
    out.push(b'}');
    if with_as_of {
        let _ = write!(out, ",\"as_of\":{}", read.as_of);
    }
    out.push(b'}');
    true
}

// Writing into a Vec cannot fail: the results below are ignored for that reason.
fn write_value(out: &mut Vec<u8>, v: Reading<'_>) {
    match v {
        Reading::Int(i) | Reading::Value(&FeatureValue::Int(i)) => {
            let _ = write!(out, "{i}");
        }
        Reading::Value(FeatureValue::Float(f)) => json_f64(out, *f),
        Reading::Value(FeatureValue::Bool(b)) => {
            out.extend_from_slice(if *b { b"true" } else { b"false" })
        }
        Reading::Value(FeatureValue::Str(s)) => json_str(out, s),
        // An aggregate's number: integral values print as integers, as long as f64 holds
        // every integer up to them exactly.
        Reading::Num(f) => {
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                let _ = write!(out, "{}", f as i64);
            } else {
                json_f64(out, f);
            }
        }
    }
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *out, s);
}

fn json_f64(out: &mut Vec<u8>, f: f64) {
    if f.is_finite() {
        let _ = serde_json::to_writer(&mut *out, &f);
    } else {
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use vx_storage::features::{Agg, DistinctOf, FeatureDecl, LogPos};

    /// Every kind of value renders as before the rendering moved here: integers, floats,
    /// booleans, strings, integral aggregates as integers, `as_of` last.
    #[test]
    fn an_entity_renders_as_json() {
        let decl = FeatureDecl {
            name: "total".into(),
            from: "hit".into(),
            agg: Agg::Sum,
            window: None,
            ttl: None,
            of: DistinctOf::Value,
        };
        let f = Features::new(2, vec![decl], u64::MAX);
        let at = LogPos {
            lsn: 1,
            append_ms: 5_000,
        };
        let mut events = f.events(at, None).unwrap();
        for v in [2, 3] {
            let ev = vx_proto::EventView {
                stream: "s",
                entity: Some("p1"),
                ty: "hit",
                ts: 4_000,
                kind: vx_proto::Kind::Event,
                value: Some(vx_proto::Num::Float(f64::from(v) / 2.0)),
                id: None,
                data: None,
            };
            events.apply(&ev).unwrap();
        }
        let set = [
            ("s", Some(FeatureValue::Str("a\"b".into()))),
            ("f", Some(FeatureValue::Float(0.25))),
            ("b", Some(FeatureValue::Bool(true))),
        ];
        let at = LogPos {
            lsn: 2,
            append_ms: 6_000,
        };
        f.put(at, "p1", &set, None).unwrap();
        let mut out = b"[".to_vec();
        assert!(write_entity(
            &f,
            "p1",
            None,
            ReadAt { now_ms: 0 },
            true,
            &mut out
        ));
        assert!(!write_entity(
            &f,
            "p2",
            None,
            ReadAt { now_ms: 0 },
            true,
            &mut out
        ));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"[{"entity":"p1","features":{"events":2,"last_ts":4000,"total":2.5,"s":"a\"b","f":0.25,"b":true},"as_of":6000}"#
        );
        let mut out = Vec::new();
        let names = ["b", "nope", "events"];
        assert!(write_entity(
            &f,
            "p1",
            Some(&names),
            ReadAt { now_ms: 0 },
            false,
            &mut out
        ));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"entity":"p1","features":{"b":true,"events":2}}"#
        );
    }
}
