//! What a YAML scalar means: the YAML 1.2 core schema (spec §10.3.2) applied to a scalar's
//! text, style and tag, and the tag rules of docs/API.md §3 (only core-schema tags are accepted).
//!
//! The resolution is written out here rather than left to a serde deserializer because the
//! the YAML rules of docs/API.md §3.2 depend on it exactly: `0b1`, `1_000` or `yes` are strings in YAML 1.2, an
//! explicit `!!binary` or `!!timestamp` is refused, and a number keeps its literal so that
//! `data` can store it as sent (like the JSON decoders do).

use granit_parser::{ScalarStyle, Tag};

/// A core-schema tag, or the non-specific `!`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CoreTag {
    /// `!` on a scalar: a string, whatever its text.
    NonSpecific,
    Str,
    Int,
    Float,
    Bool,
    Null,
    Map,
    Seq,
}

impl CoreTag {
    fn name(self) -> &'static str {
        match self {
            CoreTag::NonSpecific => "!",
            CoreTag::Str => "!!str",
            CoreTag::Int => "!!int",
            CoreTag::Float => "!!float",
            CoreTag::Bool => "!!bool",
            CoreTag::Null => "!!null",
            CoreTag::Map => "!!map",
            CoreTag::Seq => "!!seq",
        }
    }
}

/// Why a tag, or a tagged value, is refused (docs/API.md §3: only core-schema tags, on values that
/// fit them).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum TagError {
    /// The tag as written, cut to 64 characters.
    #[error(
        "unsupported YAML tag {0}: only the YAML 1.2 core schema tags (!!str, !!int, !!float, \
         !!bool, !!null, !!map, !!seq) are accepted"
    )]
    Unsupported(String),
    #[error("a {collection} cannot be tagged {tag}")]
    Collection {
        collection: &'static str,
        tag: &'static str,
    },
    #[error("a scalar cannot be tagged {0}")]
    Scalar(&'static str),
    /// The value, cut to 64 characters.
    #[error("{shown:?} is not a valid {tag} value")]
    Value { shown: String, tag: &'static str },
}

/// The core tag of `tag`, or why it is refused.
pub(super) fn core_tag(tag: Option<&Tag>) -> Result<Option<CoreTag>, TagError> {
    let Some(tag) = tag else { return Ok(None) };
    let core = match tag.core_suffix() {
        Some("str") => CoreTag::Str,
        Some("int") => CoreTag::Int,
        Some("float") => CoreTag::Float,
        Some("bool") => CoreTag::Bool,
        Some("null") => CoreTag::Null,
        Some("map") => CoreTag::Map,
        Some("seq") => CoreTag::Seq,
        _ if tag.handle().is_empty() && tag.suffix() == "!" => CoreTag::NonSpecific,
        _ => {
            let shown: String = tag.original().chars().take(64).collect();
            return Err(TagError::Unsupported(shown));
        }
    };
    Ok(Some(core))
}

/// Check the tag of a mapping (`map`) or a sequence.
pub(super) fn collection_tag(tag: Option<&Tag>, map: bool) -> Result<(), TagError> {
    match core_tag(tag)? {
        None | Some(CoreTag::NonSpecific) => Ok(()),
        Some(CoreTag::Map) if map => Ok(()),
        Some(CoreTag::Seq) if !map => Ok(()),
        Some(t) => Err(TagError::Collection {
            collection: if map { "mapping" } else { "sequence" },
            tag: t.name(),
        }),
    }
}

/// An integer literal of the core schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Int<'a> {
    /// `[-+]?[0-9]+`, sign included.
    Dec(&'a str),
    /// The digits of `0o[0-7]+`.
    Oct(&'a str),
    /// The digits of `0x[0-9a-fA-F]+`.
    Hex(&'a str),
}

/// What a scalar resolves to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(Int<'a>),
    /// A float literal of the core schema (its value may still overflow an f64).
    Float(&'a str),
    /// `.inf`, `-.inf`, `.nan` and their other spellings.
    NonFinite,
    Str(&'a str),
}

impl Scalar<'_> {
    /// How a type error names this value.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            Scalar::Null => "null",
            Scalar::Bool(_) => "a boolean",
            Scalar::Int(_) => "an integer",
            Scalar::Float(_) | Scalar::NonFinite => "a float",
            Scalar::Str(_) => "a string",
        }
    }
}

/// Resolve a scalar by the core schema; an explicit core tag forces its type (and must fit
/// the text), a quoted or block scalar is a string.
pub(super) fn resolve<'a>(
    value: &'a str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<Scalar<'a>, TagError> {
    let plain = || {
        if style == ScalarStyle::Plain {
            plain(value)
        } else {
            Scalar::Str(value)
        }
    };
    let Some(tag) = core_tag(tag)? else {
        return Ok(plain());
    };
    let typed = plain_typed(value);
    let ok = match (tag, typed) {
        (CoreTag::NonSpecific | CoreTag::Str, _) => Some(Scalar::Str(value)),
        (CoreTag::Null, Scalar::Null) => Some(Scalar::Null),
        (CoreTag::Bool, Scalar::Bool(b)) => Some(Scalar::Bool(b)),
        (CoreTag::Int, Scalar::Int(i)) => Some(Scalar::Int(i)),
        (CoreTag::Float, Scalar::Float(f)) => Some(Scalar::Float(f)),
        (CoreTag::Float, Scalar::Int(Int::Dec(d))) => Some(Scalar::Float(d)),
        (CoreTag::Float, Scalar::NonFinite) => Some(Scalar::NonFinite),
        _ => None,
    };
    ok.ok_or_else(|| {
        let shown: String = value.chars().take(64).collect();
        if matches!(tag, CoreTag::Map | CoreTag::Seq) {
            TagError::Scalar(tag.name())
        } else {
            TagError::Value {
                shown,
                tag: tag.name(),
            }
        }
    })
}

/// A plain scalar by the core schema's regular expressions.
pub(super) fn plain(value: &str) -> Scalar<'_> {
    // Most plain scalars in events are words: only these first bytes can start anything but
    // a string.
    match value.as_bytes().first() {
        None => Scalar::Null,
        Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'~' | b'n' | b'N' | b't' | b'T' | b'f' | b'F') => {
            plain_typed(value)
        }
        Some(_) => Scalar::Str(value),
    }
}

fn plain_typed(value: &str) -> Scalar<'_> {
    match value {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "true" | "True" | "TRUE" => return Scalar::Bool(true),
        "false" | "False" | "FALSE" => return Scalar::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return Scalar::NonFinite,
        _ => {}
    }
    if let Some(d) = value.strip_prefix("0o") {
        if !d.is_empty() && d.bytes().all(|b| matches!(b, b'0'..=b'7')) {
            return Scalar::Int(Int::Oct(d));
        }
        return Scalar::Str(value);
    }
    if let Some(d) = value.strip_prefix("0x") {
        if !d.is_empty() && d.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Scalar::Int(Int::Hex(d));
        }
        return Scalar::Str(value);
    }
    let unsigned = value.strip_prefix(['-', '+']).unwrap_or(value);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Scalar::Int(Int::Dec(value));
    }
    if is_float(unsigned) {
        return Scalar::Float(value);
    }
    Scalar::Str(value)
}

/// `( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`, the core float without its
/// sign.
fn is_float(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |mut i: usize| {
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i, i - start)
    };
    let (mut i, int_digits) = digits(0);
    if b.get(i) == Some(&b'.') {
        let (j, frac_digits) = digits(i + 1);
        if int_digits == 0 && frac_digits == 0 {
            return false;
        }
        i = j;
    } else if int_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let (j, exp_digits) = digits(i);
        if exp_digits == 0 {
            return false;
        }
        i = j;
    }
    i == b.len()
}

/// The value of an integer literal, if it fits an i128.
pub(super) fn int_value(i: Int<'_>) -> Option<i128> {
    match i {
        Int::Dec(d) => d.parse::<i128>().ok(),
        Int::Oct(d) => i128::from_str_radix(d, 8).ok(),
        Int::Hex(d) => i128::from_str_radix(d, 16).ok(),
    }
}

/// True if `s` is a JSON number literal (RFC 8259 §6), which `data` keeps as written.
pub(super) fn is_json_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn core_schema_plain_scalars() {
        for s in ["", "~", "null", "Null", "NULL"] {
            assert_eq!(plain(s), Scalar::Null, "{s:?}");
        }
        assert_eq!(plain("true"), Scalar::Bool(true));
        assert_eq!(plain("FALSE"), Scalar::Bool(false));
        for s in ["0", "-12", "+7", "007"] {
            assert_eq!(plain(s), Scalar::Int(Int::Dec(s)), "{s:?}");
        }
        assert_eq!(plain("0o17"), Scalar::Int(Int::Oct("17")));
        assert_eq!(plain("0x1F"), Scalar::Int(Int::Hex("1F")));
        for s in ["1.5", ".5", "5.", "-1e5", "+1.5E-3", "1e400"] {
            assert_eq!(plain(s), Scalar::Float(s), "{s:?}");
        }
        for s in [".inf", "-.Inf", "+.INF", ".nan", ".NaN"] {
            assert_eq!(plain(s), Scalar::NonFinite, "{s:?}");
        }
        // YAML 1.1 forms are strings in 1.2.
        for s in [
            "yes",
            "No",
            "on",
            "tRuE",
            "0b101",
            "1_000",
            "0o8",
            "0x",
            "+0x1F",
            "-0o7",
            ".",
            "e5",
            "1e",
            "1.2.3",
            "nan",
            "inf",
            "-",
            "12:30",
            "2024-01-01",
        ] {
            assert_eq!(plain(s), Scalar::Str(s), "{s:?}");
        }
    }

    #[test]
    fn tags() {
        let t = |h: &str, s: &str| Tag::new(h, s);
        let core = |s: &str| t("tag:yaml.org,2002:", s);
        assert_eq!(
            resolve("5", ScalarStyle::Plain, Some(&core("str"))),
            Ok(Scalar::Str("5"))
        );
        assert_eq!(
            resolve("5", ScalarStyle::DoubleQuoted, Some(&core("int"))),
            Ok(Scalar::Int(Int::Dec("5")))
        );
        assert_eq!(
            resolve("5", ScalarStyle::Plain, Some(&core("float"))),
            Ok(Scalar::Float("5"))
        );
        assert!(resolve("x", ScalarStyle::Plain, Some(&core("int"))).is_err());
        assert!(resolve("x", ScalarStyle::Plain, Some(&core("map"))).is_err());
        assert_eq!(
            resolve("1", ScalarStyle::Plain, Some(&t("", "!"))),
            Ok(Scalar::Str("1"))
        );
        for bad in [
            t("!", "foo"),
            core("binary"),
            core("timestamp"),
            core("merge"),
        ] {
            let e = resolve("x", ScalarStyle::Plain, Some(&bad))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("unsupported YAML tag"), "{e}");
        }
        assert!(collection_tag(Some(&core("map")), true).is_ok());
        assert!(collection_tag(Some(&core("seq")), true).is_err());
        assert!(collection_tag(Some(&core("set")), true).is_err());
        assert_eq!(
            resolve("1", ScalarStyle::SingleQuoted, None),
            Ok(Scalar::Str("1"))
        );
    }

    #[test]
    fn json_numbers() {
        for s in ["0", "-0", "12", "-1.50", "1e5", "1E+5", "2.5e-3", "1e400"] {
            assert!(is_json_number(s), "{s}");
        }
        for s in ["", "-", "+1", "01", ".5", "5.", "1e", "1.e5", "0x1", "1_0"] {
            assert!(!is_json_number(s), "{s}");
        }
        assert_eq!(int_value(Int::Hex("ff")), Some(255));
        assert_eq!(int_value(Int::Oct("17")), Some(15));
        assert_eq!(int_value(Int::Dec("+007")), Some(7));
    }
}
