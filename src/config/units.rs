//! Durations and byte sizes as written in the config file and env vars (docs/CONFIG.md): durations
//! `500ms`, `10s`, `10m`, `2h`, `30d`; sizes in bytes or with `KiB`/`MiB`/`GiB`/`TiB`. Also the
//! serde helpers that accept them from YAML, both as numbers and as strings.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// A config value that does not parse. The message says what was expected; the caller adds
/// where the value came from (the file and line, the env var, the flag).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadValue(pub String);

/// Split `"64MiB"` / `"64 MiB"` into the digits and the (trimmed) unit.
fn split_number(s: &str) -> Result<(u64, &str), BadValue> {
    let s = s.trim();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(end);
    if digits.is_empty() {
        return Err(BadValue(format!(
            "{s:?} does not start with a whole number"
        )));
    }
    let n = digits
        .parse::<u64>()
        .map_err(|_| BadValue(format!("{digits} is too large")))?;
    Ok((n, unit.trim()))
}

/// Parse a duration: a whole number followed by `ms`, `s`, `m`, `h` or `d`.
pub fn parse_duration(s: &str) -> Result<Duration, BadValue> {
    let (n, unit) = split_number(s)?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "" if n == 0 => 1,
        "" => {
            return Err(BadValue(format!(
                "duration {s:?} needs a unit: ms, s, m, h or d (e.g. 500ms, 10s, 10m, 30d)"
            )));
        }
        other => {
            return Err(BadValue(format!(
                "unknown duration unit {other:?} in {s:?}: use ms, s, m, h or d"
            )));
        }
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| BadValue(format!("duration {s:?} is too large")))
}

/// Parse a size: a whole number of bytes, optionally followed by `B`, `KiB`, `MiB`, `GiB` or `TiB`.
pub fn parse_size(s: &str) -> Result<u64, BadValue> {
    let (n, unit) = split_number(s)?;
    let shift = match unit {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        "KB" | "kB" | "MB" | "GB" | "TB" | "K" | "M" | "G" | "k" => {
            return Err(BadValue(format!(
                "size {s:?}: write binary units KiB, MiB, GiB or TiB (powers of 1024)"
            )));
        }
        other => return Err(BadValue(format!("unknown size unit {other:?} in {s:?}"))),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| BadValue(format!("size {s:?} is too large")))
}

/// Render a duration the way the config is written (for `--help` and docs).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms != 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// Render a size with the largest binary unit that divides it.
pub fn format_size(n: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[derive(Clone, Copy)]
struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size in bytes or with a unit (KiB, MiB, GiB, TiB)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("size {v} is negative")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_size(v).map_err(E::custom)
    }
}

#[derive(Clone, Copy)]
struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as 500ms, 10s, 10m or 30d")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        // A bare number is ambiguous (seconds? milliseconds?); only 0 means the same in all.
        if v == 0 {
            Ok(Duration::ZERO)
        } else {
            Err(E::custom(format!(
                "duration {v} needs a unit: write it as a string such as {v}s or {v}ms"
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("duration {v} is negative"))),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration(v).map_err(E::custom)
    }
}

/// `deserialize_with` for a size.
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(SizeVisitor)
}

/// `deserialize_with` for an optional size (`null` or absent: none).
pub fn opt_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    d.deserialize_option(OptVisitor(SizeVisitor))
}

/// `deserialize_with` for a duration.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

/// `deserialize_with` for an optional duration.
pub fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    d.deserialize_option(OptVisitor(DurationVisitor))
}

/// `storage.fsync_interval_ms`: a number of milliseconds, or a duration string.
pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct MillisVisitor;
    impl Visitor<'_> for MillisVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of milliseconds or a duration such as 100ms")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            parse_millis(v).map_err(E::custom)
        }
    }
    d.deserialize_any(MillisVisitor)
}

/// A number of milliseconds, or a duration with a unit.
pub fn parse_millis(s: &str) -> Result<u64, BadValue> {
    match s.trim().parse::<u64>() {
        Ok(v) => Ok(v),
        Err(_) => parse_duration(s).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

struct OptVisitor<V>(V);

impl<'de, V: Visitor<'de> + Copy> Visitor<'de> for OptVisitor<V> {
    type Value = Option<V::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self.0).map(Some)
    }
}
