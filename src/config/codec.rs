//! How a scalar key's value is written as text (env vars, flags, `--help`, docs/CONFIG.md) and
//! read back: one [`Codec`] per kind of value, named by each key's declaration in
//! [`super::sections`]. Also the octal file mode of `server.uds_mode`, text and YAML.

use super::units::{
    BadValue, format_duration, format_size, parse_duration, parse_millis, parse_size,
};
use super::{ClusterMode, FsyncSetting, LogFormat};
use serde::Deserializer;
use serde::de::{self, Visitor};
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

/// Text ⇄ value of one kind of key. Errors say what was expected; the caller adds where the
/// value came from. For optional values, an empty text is unset.
pub trait Codec {
    type Value;
    fn parse(v: &str) -> Result<Self::Value, BadValue>;
    fn format(v: &Self::Value) -> String;
}

/// An empty value unsets an optional key.
fn opt<T>(v: &str, parse: impl FnOnce(&str) -> Result<T, BadValue>) -> Result<Option<T>, BadValue> {
    if v.trim().is_empty() {
        Ok(None)
    } else {
        parse(v).map(Some)
    }
}

/// An optional value of codec `C`: empty text is unset, and unset is written empty.
pub struct Opt<C>(PhantomData<C>);
impl<C: Codec> Codec for Opt<C> {
    type Value = Option<C::Value>;
    fn parse(v: &str) -> Result<Option<C::Value>, BadValue> {
        opt(v, C::parse)
    }
    fn format(v: &Option<C::Value>) -> String {
        v.as_ref().map(C::format).unwrap_or_default()
    }
}

/// A unit struct naming a codec: its value type, how text parses, how a value is written.
macro_rules! codec {
    ($(#[$m:meta])* $name:ident: $ty:ty, parse $parse:expr, format $format:expr) => {
        $(#[$m])*
        pub struct $name;
        impl Codec for $name {
            type Value = $ty;
            fn parse(v: &str) -> Result<$ty, BadValue> {
                $parse(v)
            }
            fn format(v: &$ty) -> String {
                $format(v)
            }
        }
    };
}

codec!(
    /// Text as given.
    Text: String, parse |v: &str| Ok(v.to_string()), format String::clone
);
codec!(
    Path: PathBuf,
    parse |v: &str| Ok(PathBuf::from(v)),
    format |v: &PathBuf| v.display().to_string()
);
codec!(
    /// `500ms`, `10s`, `10m`, `2h`, `30d`.
    Dur: Duration, parse parse_duration, format |v: &Duration| format_duration(*v)
);
codec!(
    /// Bytes, or a whole number with a binary unit (`64MiB`).
    Size: u64, parse parse_size, format |v: &u64| format_size(*v)
);
codec!(
    /// Milliseconds, as a number or a duration.
    Millis: u64, parse parse_millis, format u64::to_string
);
codec!(
    /// Octal permission bits, written `0660`.
    Octal: u32, parse parse_octal_mode, format |v: &u32| format!("{v:04o}")
);
codec!(
    Fsync: FsyncSetting,
    parse |v: &str| FsyncSetting::parse(v.trim())
        .ok_or_else(|| BadValue(format!("{v:?} is not one of always, interval, never"))),
    format |v: &FsyncSetting| v.as_str().to_string()
);
codec!(
    Cluster: ClusterMode,
    parse |v: &str| ClusterMode::parse(v.trim())
        .ok_or_else(|| BadValue(format!("{v:?} is not one of single, kafka"))),
    format |v: &ClusterMode| v.as_str().to_string()
);
codec!(
    Log: LogFormat,
    parse |v: &str| LogFormat::parse(v.trim())
        .ok_or_else(|| BadValue(format!("{v:?} is not one of pretty, json"))),
    format |v: &LogFormat| v.as_str().to_string()
);

/// A number in its `FromStr` form.
pub struct Num<T>(PhantomData<T>);
impl<T: std::str::FromStr + ToString> Codec for Num<T> {
    type Value = T;
    fn parse(v: &str) -> Result<T, BadValue> {
        v.trim()
            .parse()
            .map_err(|_| BadValue(format!("{v:?} is not a valid number")))
    }
    fn format(v: &T) -> String {
        v.to_string()
    }
}

/// Parse an octal permission string such as `"0660"` or `"660"`.
pub fn parse_octal_mode(s: &str) -> Result<u32, BadValue> {
    let t = s.trim();
    let t = t.strip_prefix("0o").unwrap_or(t);
    match u32::from_str_radix(t, 8) {
        Ok(m) if m <= 0o7777 && !t.is_empty() => Ok(m),
        _ => Err(BadValue(format!(
            "{s:?} is not an octal file mode such as \"0660\""
        ))),
    }
}

/// `deserialize_with` for `server.uds_mode`: a quoted octal string only.
pub fn octal_mode<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct ModeVisitor;
    impl Visitor<'_> for ModeVisitor {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a quoted octal mode such as \"0660\"")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
            parse_octal_mode(v).map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
            Err(E::custom(format!(
                "write the mode as a quoted octal string such as \"0{v}\" (YAML reads an \
                 unquoted number as decimal)"
            )))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
            Err(E::custom(format!(
                "write the mode as a quoted octal string, not {v}"
            )))
        }
    }
    d.deserialize_any(ModeVisitor)
}
