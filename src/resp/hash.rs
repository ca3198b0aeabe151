//! The hash write commands (`HSET`, `HDEL`, `DEL`, `HINCRBY`, `HINCRBYFLOAT`): the change
//! each hands to the one write path, checked as a `PUT`'s or `DELETE`'s is, and how its
//! outcome is answered (Redis's replies). [`super::command`] submits them.
//!
//! Increments are not read-modify-writes: the change carries the increment, and the feature
//! tables make the sum when they apply its record, in log order (vx-features' `incr.rs`).
//! So two `HINCRBY`s of one field from two connections both count, and the reply is the
//! value the tables made, as Redis's is.

use super::value::{self, text};
use crate::failure::Failure;
use crate::http::features::{check_name, check_value};
use crate::write::{Change, FeaturesWritten};
use bytes::Bytes;
use vx_proto::ErrorCode;
use vx_proto::resp::Reply;
use vx_router::Router;
use vx_storage::features::{
    FeatureValue, Features, IncrRefused, Increment, Incremented, float_of, int_of,
};

/// What a write command's reply says (Redis's answers).
#[derive(Clone, Copy)]
pub(super) enum Answer {
    /// `HSET`: fields that are new.
    Added,
    /// `HDEL`: fields removed.
    Deleted,
    /// `DEL`: keys that existed.
    Found,
    /// `HINCRBY` (an integer) and `HINCRBYFLOAT` (a bulk string): the new value.
    Sum,
}

impl Answer {
    /// The reply to a write done.
    pub(super) fn write(self, w: &FeaturesWritten, r: &mut Reply<'_>) {
        let n = match self {
            Answer::Added => w.added,
            Answer::Deleted => w.deleted,
            Answer::Found => w.found,
            Answer::Sum => return sum(w.incremented, r),
        };
        r.int(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// An increment's reply: the new value, or Redis's error for what the value could not take.
fn sum(incremented: Option<Incremented>, r: &mut Reply<'_>) {
    match incremented {
        Some(Incremented::Int(i)) => r.int(i),
        Some(Incremented::Float(f)) => r.bulk(value::float_text(f).as_bytes()),
        Some(Incremented::Refused(why)) => r.error("ERR", refused(why)),
        // Declared since the command was checked (a restart with new declarations).
        None => r.error(
            "ERR",
            "the feature is a declared aggregate: it cannot be incremented",
        ),
    }
}

/// Redis's words for an increment the value cannot take.
fn refused(why: IncrRefused) -> &'static str {
    match why {
        IncrRefused::NotInteger => "hash value is not an integer",
        IncrRefused::NotFloat => "hash value is not a float",
        IncrRefused::Overflow => "increment or decrement would overflow",
        IncrRefused::NotFinite => "increment would produce NaN or Infinity",
    }
}

/// Why a write command is refused before anything is written: Redis's own error (an
/// argument of the wrong form), or the server's one error mapping.
pub(super) struct Bad {
    pub(super) prefix: &'static str,
    pub(super) message: String,
}

impl Bad {
    fn redis(message: &str) -> Bad {
        Bad {
            prefix: "ERR",
            message: message.to_string(),
        }
    }
}

impl From<Failure> for Bad {
    fn from(f: Failure) -> Bad {
        let (prefix, message) = f.into_resp();
        Bad { prefix, message }
    }
}

/// A write command's change: the entity that admits it, the change, and what its reply
/// says. Names and values are checked as a `PUT`'s are.
pub(super) fn change(
    command: &str,
    args: &[Bytes],
    router: &Router,
) -> Result<(String, Change, Answer), Bad> {
    let features = router.store().features();
    match command {
        "hset" => {
            let e = entity(&args[1])?;
            let mut set: Vec<(String, Option<FeatureValue>)> = Vec::new();
            for pair in args[2..].chunks_exact(2) {
                let n = feature_name(features, &pair[0])?;
                let v = value::parse(n, &pair[1])?;
                check_value(n, Some(&v))?;
                set.push((n.to_string(), Some(v)));
            }
            Ok((e, Change::Put(set), Answer::Added))
        }
        "hincrby" | "hincrbyfloat" => {
            let e = entity(&args[1])?;
            let n = feature_name(features, &args[2])?;
            let by = increment(command, n, &args[3])?;
            let change = Change::Incr {
                name: n.to_string(),
                by,
            };
            Ok((e, change, Answer::Sum))
        }
        "hdel" => {
            let e = entity(&args[1])?;
            // SPEC §6: feature DELETEs, every name in one record (stored whole or not at
            // all, as Redis's command is atomic); a name named twice counts once.
            let mut targets: Vec<(String, Option<String>)> = Vec::new();
            for n in args[2..].iter().filter_map(|a| text(a)) {
                if !targets.iter().any(|(_, t)| t.as_deref() == Some(n)) {
                    targets.push((e.clone(), Some(n.to_string())));
                }
            }
            Ok((e, Change::Delete(targets), Answer::Deleted))
        }
        _ => {
            // `DEL`: a key named twice counts once, as in Redis.
            let mut targets: Vec<(String, Option<String>)> = Vec::new();
            for a in &args[1..] {
                let e = entity(a)?;
                if !targets.iter().any(|(t, _)| *t == e) {
                    targets.push((e, None));
                }
            }
            let first = targets.first().map(|(e, _)| e.clone()).unwrap_or_default();
            Ok((first, Change::Delete(targets), Answer::Found))
        }
    }
}

/// `HINCRBY`'s or `HINCRBYFLOAT`'s increment of feature `name`, with Redis's errors for one
/// of the wrong form. The built-ins hold integers: `HINCRBYFLOAT` of one is refused as a
/// `PUT` of a float would be.
fn increment(command: &str, name: &str, arg: &[u8]) -> Result<Increment, Bad> {
    if command == "hincrby" {
        let i = text(arg)
            .and_then(int_of)
            .ok_or_else(|| Bad::redis("value is not an integer or out of range"))?;
        return Ok(Increment::Int(i));
    }
    let f = text(arg)
        .and_then(float_of)
        .ok_or_else(|| Bad::redis("value is not a valid float"))?;
    check_value(name, Some(&FeatureValue::Float(f)))?;
    Ok(Increment::Float(f))
}

/// A field that names a feature that may be written.
fn feature_name<'a>(features: &Features, b: &'a [u8]) -> Result<&'a str, Failure> {
    let n = text(b).ok_or_else(|| {
        Failure::new(
            ErrorCode::InvalidEvent,
            format!(
                "field {:?} is not a feature name: 1-128 bytes of [A-Za-z0-9_.:-]",
                String::from_utf8_lossy(b)
            ),
        )
    })?;
    check_name(features, n)?;
    Ok(n)
}

/// A key that names an entity (docs/API.md §2's entity rule), for a write.
fn entity(b: &Bytes) -> Result<String, Failure> {
    match text(b) {
        Some(e) if !e.is_empty() && vx_proto::rules::valid_entity(e) => Ok(e.to_string()),
        _ => Err(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "key {:?} is not an entity: 1-256 bytes of UTF-8 without control characters",
                String::from_utf8_lossy(b)
            ),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn answered(a: Answer, incremented: Option<Incremented>) -> String {
        let w = FeaturesWritten {
            set: 1,
            added: 1,
            deleted: 0,
            found: 0,
            incremented,
            durability: crate::write::Reached::Replicated,
            position: None,
        };
        let mut out = Vec::new();
        a.write(
            &w,
            &mut Reply {
                out: &mut out,
                resp3: true,
            },
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn increments_answer_as_redis() {
        assert_eq!(answered(Answer::Sum, Some(Incremented::Int(42))), ":42\r\n");
        assert_eq!(
            answered(Answer::Sum, Some(Incremented::Float(10.5))),
            "$4\r\n10.5\r\n"
        );
        assert_eq!(
            answered(
                Answer::Sum,
                Some(Incremented::Refused(IncrRefused::NotInteger))
            ),
            "-ERR hash value is not an integer\r\n"
        );
        assert_eq!(answered(Answer::Added, None), ":1\r\n");
    }

    #[test]
    fn increments_of_the_wrong_form_are_refused_as_redis_refuses_them() {
        let bad = |c: &str, n: &str, a: &[u8]| increment(c, n, a).err().unwrap().message;
        assert_eq!(
            bad("hincrby", "x", b"1.5"),
            "value is not an integer or out of range"
        );
        assert_eq!(
            bad("hincrby", "x", b"99999999999999999999"),
            "value is not an integer or out of range"
        );
        assert_eq!(
            bad("hincrbyfloat", "x", b"nan"),
            "value is not a valid float"
        );
        assert_eq!(
            bad("hincrbyfloat", "x", b"abc"),
            "value is not a valid float"
        );
        assert!(bad("hincrbyfloat", "events", b"1").contains("built in"));
        assert_eq!(
            increment("hincrby", "x", b"-3").ok(),
            Some(Increment::Int(-3))
        );
        assert_eq!(
            increment("hincrbyfloat", "x", b"1e3").ok(),
            Some(Increment::Float(1000.0))
        );
    }
}
