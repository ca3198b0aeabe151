//! One event mapping of a YAML document: its nodes, as they arrive, checked against the
//! rules of docs/API.md §2 with the same rule functions (and messages) as the JSON decoders; the
//! YAML-specific rules of docs/API.md §3 apply on top: a plain scalar in a string field is its text
//! (`stream: 42` is the stream "42"), `<<` is refused, tags must be core ones.

use granit_parser::{ScalarStyle, Tag};

use super::data::DataWriter;
use super::scalar::{CoreTag, TagError, plain};
use super::scalar::{Int, Scalar, core_tag, int_value, resolve};
use super::{Node, Problem};
use crate::decode::event::missing;
use crate::decode::fields::{FIELD_LIST, Field};
use crate::event::{EventView, Kind, Num};
use crate::rules::{
    RuleError, check_reserved, check_value, kind_from_str, short, ts_from_i64, ts_from_rfc3339,
    ts_from_u64, ts_not_whole,
};

/// What the next node of the mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Key,
    Value(Field),
    /// Inside `data`, which the [`DataWriter`] takes.
    Data,
}

/// The event being read; its buffers are reused from event to event.
#[derive(Debug, Default)]
pub(super) struct EventBuilder {
    stream: String,
    ty: String,
    entity: String,
    id: String,
    /// Fields seen so far (bits of [`Field::bit`]).
    seen: u8,
    /// Fields present with a non-null value.
    set: u8,
    ts: Option<i64>,
    kind: Option<Kind>,
    value: Option<Num>,
    data: DataWriter,
    expect: Option<Expect>,
    /// Size of the event so far, counted as its JSON form would be, alias expansions
    /// included (docs/API.md §3: "alias expansion counts against ingest.max_event_bytes").
    bytes: usize,
}

/// Bytes a node adds to an event's size: about what it takes in compact JSON.
fn cost(node: &Node<'_>) -> usize {
    match node {
        Node::Scalar { value, .. } => value.len() + 3,
        _ => 1,
    }
}

impl EventBuilder {
    /// Start a new event (its `MappingStart` has been read).
    pub(super) fn start(&mut self) {
        self.seen = 0;
        self.set = 0;
        self.ts = None;
        self.kind = None;
        self.value = None;
        self.expect = Some(Expect::Key);
        self.bytes = 1;
    }

    /// Take the next node of the event; true once its mapping has ended.
    pub(super) fn node(&mut self, node: &Node<'_>, max_bytes: usize) -> Result<bool, Problem> {
        self.bytes = self.bytes.saturating_add(cost(node));
        if self.bytes > max_bytes {
            return Err(Problem::TooLarge);
        }
        match self.expect {
            None => Err(Problem::Malformed("YAML node outside an event".into())),
            Some(Expect::Data) => {
                if self.data.node(node)? {
                    self.expect = Some(Expect::Key);
                }
                Ok(false)
            }
            Some(Expect::Key) => match *node {
                Node::MapEnd => {
                    self.expect = None;
                    Ok(true)
                }
                Node::Scalar { value, style, tag } => {
                    self.key(value, style, tag)?;
                    Ok(false)
                }
                Node::MapStart { .. } | Node::SeqStart { .. } => Err(Problem::Invalid {
                    field: None,
                    message: "the keys of an event must be field names, found a collection".into(),
                }),
                Node::SeqEnd => Err(Problem::Malformed("unbalanced YAML collection".into())),
            },
            Some(Expect::Value(Field::Data)) => {
                self.data.start();
                self.seen |= Field::Data.bit();
                self.set |= Field::Data.bit();
                self.expect = Some(Expect::Data);
                if self.data.node(node)? {
                    self.expect = Some(Expect::Key);
                }
                Ok(false)
            }
            Some(Expect::Value(field)) => {
                self.value_of(field, node)?;
                self.expect = Some(Expect::Key);
                Ok(false)
            }
        }
    }

    fn key(&mut self, value: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<(), Problem> {
        let field_err = |name: &str, message: String| Problem::Invalid {
            field: Some(short(name).to_string()),
            message,
        };
        if style == ScalarStyle::Plain && tag.is_none() && value == "<<" {
            return Err(field_err(
                "<<",
                "merge keys (<<) are not supported: write the event's fields out".into(),
            ));
        }
        core_tag(tag).map_err(|e| field_err(value, e.to_string()))?;
        let Some(field) = Field::from_name(value) else {
            let name = short(value);
            return Err(field_err(
                name,
                format!("unknown field {name:?}; expected one of {FIELD_LIST}"),
            ));
        };
        if self.seen & field.bit() != 0 {
            return Err(field_err(
                field.name(),
                format!("duplicate field \"{}\"", field.name()),
            ));
        }
        self.seen |= field.bit();
        self.expect = Some(Expect::Value(field));
        Ok(())
    }

    fn value_of(&mut self, field: Field, node: &Node<'_>) -> Result<(), Problem> {
        let name = field.name();
        let bad = |message: String| Problem::Invalid {
            field: Some(name.to_string()),
            message: format!("field \"{name}\": {message}"),
        };
        let broken = |e: RuleError| bad(e.to_string());
        let Node::Scalar { value, style, tag } = *node else {
            let what = match node {
                Node::SeqStart { .. } => "a sequence",
                _ => "a mapping",
            };
            let expected = match field {
                Field::Ts => "integer milliseconds or an RFC 3339 string",
                Field::Value => "a number",
                _ => "a string",
            };
            return Err(bad(format!("must be {expected}, got {what}")));
        };
        if let Some(rule) = field.text_rule() {
            let text = string_field(value, style, tag).map_err(|e| bad(e.to_string()))?;
            let Some(text) = text else {
                if rule.nullable() {
                    return Ok(());
                }
                return Err(bad("must be a string, got null".into()));
            };
            rule.check(text).map_err(broken)?;
            let buf = match field {
                Field::Stream => &mut self.stream,
                Field::Type => &mut self.ty,
                Field::Entity => &mut self.entity,
                _ => &mut self.id,
            };
            buf.clear();
            buf.push_str(text);
            self.set |= field.bit();
            return Ok(());
        }
        let scalar = resolve(value, style, tag).map_err(|e| bad(e.to_string()))?;
        match field {
            Field::Ts => self.ts = ts(scalar).map_err(broken)?,
            Field::Kind => {
                self.kind = match scalar {
                    Scalar::Null => None,
                    _ => Some(kind_from_str(value).map_err(broken)?),
                }
            }
            _ => self.value = number(scalar).map_err(broken)?,
        }
        Ok(())
    }

    /// The event is complete: check the rules that span fields and view it.
    pub(super) fn finish(&self, now_ms: i64) -> Result<EventView<'_>, Problem> {
        let has = |f: Field| self.set & f.bit() != 0;
        let required = |f: Field| {
            if has(f) {
                Ok(())
            } else {
                Err(Problem::Input(missing(f)))
            }
        };
        required(Field::Stream)?;
        required(Field::Type)?;
        // An absent `kind` is `event` (docs/API.md §2), `Kind`'s default.
        let kind = self.kind.unwrap_or_default();
        let value = check_value(kind, self.value).map_err(Problem::Input)?;
        check_reserved(kind, &self.ty).map_err(Problem::Input)?;
        let data = if has(Field::Data) {
            Some(self.data.text()?)
        } else {
            None
        };
        Ok(EventView {
            stream: &self.stream,
            entity: Some(self.entity.as_str()).filter(|e| has(Field::Entity) && !e.is_empty()),
            ty: &self.ty,
            ts: self.ts.unwrap_or(now_ms),
            kind,
            value,
            id: Some(self.id.as_str()).filter(|_| has(Field::Id)),
            data,
        })
    }
}

/// Why a string field's value is not a string.
#[derive(Debug, thiserror::Error)]
enum NotAString {
    #[error(transparent)]
    Tag(#[from] TagError),
    /// The value's type, described.
    #[error("must be a string, got {0}")]
    Other(&'static str),
}

/// A string field's text: a quoted scalar or a plain one as written, `None` for null.
fn string_field<'a>(
    value: &'a str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<Option<&'a str>, NotAString> {
    match core_tag(tag)? {
        None if style == ScalarStyle::Plain => match plain(value) {
            Scalar::Null => Ok(None),
            _ => Ok(Some(value)),
        },
        None | Some(CoreTag::Str | CoreTag::NonSpecific) => Ok(Some(value)),
        Some(CoreTag::Null) => match resolve(value, style, tag)? {
            Scalar::Null => Ok(None),
            s => Err(NotAString::Other(s.describe())),
        },
        Some(_) => {
            let s = resolve(value, style, tag)?;
            Err(NotAString::Other(s.describe()))
        }
    }
}

fn ts(scalar: Scalar<'_>) -> Result<Option<i64>, RuleError> {
    match scalar {
        Scalar::Null => Ok(None),
        Scalar::Str(s) => ts_from_rfc3339(s).map(Some),
        Scalar::Int(i) => match int_value(i) {
            Some(v) if v < 0 => ts_from_i64(i64::try_from(v).unwrap_or(i64::MIN)).map(Some),
            Some(v) => ts_from_u64(u64::try_from(v).unwrap_or(u64::MAX)).map(Some),
            None => Err(RuleError::TsTooLate(literal(i))),
        },
        Scalar::Float(f) => Err(ts_not_whole(f)),
        Scalar::NonFinite => Err(ts_not_whole("a non-finite number")),
        Scalar::Bool(_) => Err(RuleError::TsNotATime(scalar.describe().to_string())),
    }
}

fn literal(i: Int<'_>) -> String {
    match i {
        Int::Dec(d) => d.to_string(),
        Int::Oct(d) => format!("0o{d}"),
        Int::Hex(d) => format!("0x{d}"),
    }
}

/// `value`: integers that fit an i64 stay integers (as from JSON); every number is finite.
fn number(scalar: Scalar<'_>) -> Result<Option<Num>, RuleError> {
    let finite = |v: f64, shown: &str| {
        if v.is_finite() {
            Ok(Some(Num::Float(v)))
        } else {
            Err(RuleError::NotFinite(shown.to_string()))
        }
    };
    match scalar {
        Scalar::Null => Ok(None),
        Scalar::Int(i) => match int_value(i).map(i64::try_from) {
            Some(Ok(v)) => Ok(Some(Num::Int(v))),
            Some(Err(_)) | None => {
                let shown = literal(i);
                match i {
                    Int::Dec(d) => finite(d.parse::<f64>().unwrap_or(f64::INFINITY), &shown),
                    _ => match int_value(i) {
                        Some(v) => finite(v as f64, &shown),
                        None => Err(RuleError::NumberOutOfRange(shown)),
                    },
                }
            }
        },
        Scalar::Float(f) => finite(f.parse::<f64>().unwrap_or(f64::INFINITY), f),
        Scalar::NonFinite => Err(RuleError::NotFinite("a non-finite one".into())),
        Scalar::Bool(_) | Scalar::Str(_) => Err(RuleError::NotANumber(scalar.describe().into())),
    }
}
