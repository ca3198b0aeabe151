//! OTLP/JSON as the protobuf JSON mapping allows it, made acceptable to opentelemetry-proto's
//! serde derive, which is stricter than the mapping in a few places that real producers reach
//! (the OpenTelemetry Collector's protojson among them):
//!
//! - `null` stands for the field's default: members whose value is `null` are dropped (the
//!   derive refuses `null` for lists, ids and 64-bit times).
//! - Default values may be omitted: `{"arrayValue": {}}` and `{"kvlistValue": {}}` (an empty
//!   array or map attribute) get their `values: []`, a key-value without `key` gets `""`, an
//!   entity reference its empty fields (the derive has no defaults for these types).
//! - 32-bit integers may be strings (`"severityNumber": "9"`), as 64-bit ones may (which the
//!   crate handles): `kind`, `code`, `severityNumber`, `flags` and the `dropped*Count` fields.
//! - Doubles may be strings: `"1.5"`, and `"NaN"`, `"Infinity"`, `"-Infinity"`, which JSON
//!   numbers cannot carry. A finite one becomes a number; a non-finite `doubleValue` becomes
//!   the `stringValue` of its name, which is what the event's `data` shows for it anyway
//!   (`map::av_json`).
//!
//! And stricter than the derive where it is laxer: serde's derive reads a message from a JSON
//! array too (its fields by position), which no JSON mapping allows. A body that is not an
//! object, a message field (`resource`, `scope`, `status`, `body`, `value`, `arrayValue`,
//! `kvlistValue`) that is an array, or an array inside a repeated field (whose items are
//! messages or strings) is refused ([`check_shape`]).
//!
//! The body is parsed into a `serde_json::Value` tree for this (its memory is part of the
//! bound in [`super::cost::json`]), fixed in place, then deserialized into the messages.

use serde_json::{Map, Value};

/// Fields of type int32/uint32/enum in the OTLP trace and logs messages.
const INT32_FIELDS: [&str; 7] = [
    "kind",
    "code",
    "severityNumber",
    "flags",
    "droppedAttributesCount",
    "droppedEventsCount",
    "droppedLinksCount",
];

/// The fields of the trace and logs messages whose value is one message (an object).
const MESSAGE_FIELDS: [&str; 7] = [
    "resource",
    "scope",
    "status",
    "body",
    "value",
    "arrayValue",
    "kvlistValue",
];

/// Deserialize an OTLP/JSON message, accepting what the protobuf JSON mapping accepts.
pub fn from_slice<M: serde::de::DeserializeOwned>(body: &[u8]) -> serde_json::Result<M> {
    let mut v: Value = serde_json::from_slice(body)?;
    check_shape(&v, None).map_err(serde::de::Error::custom)?;
    normalize(&mut v, None);
    serde_json::from_value(v)
}

/// Refuse a JSON array where the mapping has a message: the whole body, a message field, an
/// item of a repeated field. `key` is the member name `v` was found under (`None`: the body).
/// Recursion follows the document's nesting, which serde_json's parser already bounds (128).
pub fn check_shape(v: &Value, key: Option<&str>) -> Result<(), String> {
    match (v, key) {
        (Value::Object(map), _) => map
            .iter()
            .try_for_each(|(k, member)| check_shape(member, Some(k))),
        (Value::Array(_), None) => Err("the body is an array, not an object".to_string()),
        (Value::Array(_), Some(k)) if MESSAGE_FIELDS.contains(&k) => {
            Err(format!("`{k}` is an array, not an object"))
        }
        (Value::Array(items), Some(k)) => items.iter().try_for_each(|item| match item {
            Value::Array(_) => Err(format!("an item of `{k}` is an array")),
            item => check_shape(item, Some(k)),
        }),
        (_, None) => Err("the body is not an object".to_string()),
        _ => Ok(()),
    }
}

/// Fix `v` in place; `key` is the member name `v` was found under (for an array: the array's).
/// Recursion follows the document's nesting, which serde_json's parser already bounds (128).
pub fn normalize(v: &mut Value, key: Option<&str>) {
    match v {
        Value::Array(items) => {
            for item in items.iter_mut() {
                normalize(item, key);
            }
        }
        Value::Object(map) => {
            map.retain(|_, member| !member.is_null());
            for field in INT32_FIELDS {
                if let Some(Value::String(s)) = map.get(field)
                    && let Some(n) = int(s)
                {
                    map.insert(field.to_string(), n);
                }
            }
            if let Some(Value::String(s)) = map.get("doubleValue") {
                match s.trim().parse::<f64>() {
                    Ok(f) if f.is_finite() => {
                        let n = serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number);
                        map.insert("doubleValue".into(), n);
                    }
                    Ok(f) => {
                        let name = if f.is_nan() {
                            "NaN"
                        } else if f > 0.0 {
                            "Infinity"
                        } else {
                            "-Infinity"
                        };
                        map.remove("doubleValue");
                        map.insert("stringValue".into(), Value::from(name));
                    }
                    Err(_) => {}
                }
            }
            match key {
                Some("arrayValue" | "kvlistValue") => default(map, "values", json_array),
                Some("entityRefs") => {
                    default(map, "schemaUrl", || Value::from(""));
                    default(map, "type", || Value::from(""));
                    default(map, "idKeys", json_array);
                    default(map, "descriptionKeys", json_array);
                }
                _ => {}
            }
            let is_kvlist = key == Some("kvlistValue");
            for (k, member) in map.iter_mut() {
                // Key-value lists: `attributes` anywhere, and a map attribute's `values`.
                if (k == "attributes" || (is_kvlist && k == "values"))
                    && let Value::Array(kvs) = member
                {
                    for kv in kvs.iter_mut() {
                        if let Value::Object(kv) = kv {
                            default(kv, "key", || Value::from(""));
                        }
                    }
                }
                normalize(member, Some(k));
            }
        }
        _ => {}
    }
}

fn json_array() -> Value {
    Value::Array(Vec::new())
}

fn default(map: &mut Map<String, Value>, field: &str, value: impl FnOnce() -> Value) {
    if !map.contains_key(field) {
        map.insert(field.to_string(), value());
    }
}

/// A 32-bit integer field sent as a string, as a JSON number.
fn int(s: &str) -> Option<Value> {
    let s = s.trim();
    s.parse::<i64>()
        .ok()
        .map(Value::from)
        .or_else(|| s.parse::<u64>().ok().map(Value::from))
}
