//! The serde side of one event: the field names, and a visitor per field that reads its value
//! straight from serde_json (borrowing strings where it can) and checks it against its rule
//! of docs/API.md §2 ([`crate::rules`]) as it is read, so that an error names the field.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Unexpected, Visitor};
use serde_json::value::RawValue;

use crate::error::InputError;
use crate::event::{Kind, Num};
use crate::rules::{
    TextRule, kind_from_str, short, ts_from_i64, ts_from_rfc3339, ts_from_u64, ts_not_whole,
};

/// The top-level fields of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    Stream,
    Type,
    Entity,
    Ts,
    Kind,
    Value,
    Id,
    Data,
}

pub(super) const FIELD_LIST: &str = "stream, type, entity, ts, kind, value, id, data";

impl Field {
    pub(super) fn name(self) -> &'static str {
        match self {
            Field::Stream => "stream",
            Field::Type => "type",
            Field::Entity => "entity",
            Field::Ts => "ts",
            Field::Kind => "kind",
            Field::Value => "value",
            Field::Id => "id",
            Field::Data => "data",
        }
    }

    pub(super) fn from_name(s: &str) -> Option<Field> {
        Some(match s {
            "stream" => Field::Stream,
            "type" => Field::Type,
            "entity" => Field::Entity,
            "ts" => Field::Ts,
            "kind" => Field::Kind,
            "value" => Field::Value,
            "id" => Field::Id,
            "data" => Field::Data,
            _ => return None,
        })
    }

    pub(super) fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// The rule of a string field; `None` for the other fields.
    pub(super) fn text_rule(self) -> Option<TextRule> {
        match self {
            Field::Stream => Some(TextRule::Stream),
            Field::Type => Some(TextRule::Type),
            Field::Entity => Some(TextRule::Entity),
            Field::Id => Some(TextRule::Id),
            Field::Ts | Field::Kind | Field::Value | Field::Data => None,
        }
    }
}

/// A string field's text: borrowed from the input, or — when it had escapes — unescaped into
/// the parser's buffer for that field.
#[derive(Clone, Copy, Debug)]
pub(super) enum Text<'de> {
    Borrowed(&'de str),
    Copied,
}

impl<'de> Text<'de> {
    pub(super) fn get<'a>(self, copied: &'a str) -> &'a str
    where
        'de: 'a,
    {
        match self {
            Text::Borrowed(s) => s,
            Text::Copied => copied,
        }
    }
}

/// What the visitor read. `None` is an absent field (or, for optional ones, `null`).
#[derive(Default)]
pub(super) struct Fields<'de> {
    pub(super) stream: Option<Text<'de>>,
    pub(super) ty: Option<Text<'de>>,
    pub(super) entity: Option<Text<'de>>,
    pub(super) id: Option<Text<'de>>,
    pub(super) ts: Option<i64>,
    pub(super) kind: Option<Kind>,
    pub(super) value: Option<Num>,
    pub(super) data: Option<&'de RawValue>,
}

/// Buffers for strings that had escapes, one per string field, reused from event to event.
#[derive(Debug, Default)]
pub(super) struct Unescaped {
    pub(super) stream: String,
    pub(super) ty: String,
    pub(super) entity: String,
    pub(super) id: String,
}

/// What the visitors tell the caller beyond serde_json's error: the field whose value was
/// being read (to name it in type errors) and errors that serde_json cannot express.
#[derive(Default)]
pub(super) struct Ctx {
    pub(super) field: Option<Field>,
    pub(super) error: Option<InputError>,
}

pub(super) struct EventVisitor<'p> {
    pub(super) unescaped: &'p mut Unescaped,
    pub(super) ctx: &'p mut Ctx,
}

impl<'de> Visitor<'de> for EventVisitor<'_> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
        let EventVisitor { unescaped, ctx } = self;
        let mut f = Fields::default();
        let mut seen = 0u8;
        while let Some(key) = map.next_key_seed(KeySeed { ctx: &mut *ctx })? {
            if seen & key.bit() != 0 {
                ctx.error = Some(InputError::invalid(
                    key.name(),
                    format!("duplicate field \"{}\"", key.name()),
                ));
                return Err(de::Error::custom("duplicate field"));
            }
            seen |= key.bit();
            ctx.field = Some(key);
            match key {
                Field::Stream => {
                    f.stream = map.next_value_seed(TextSeed {
                        buf: &mut unescaped.stream,
                        rule: TextRule::Stream,
                    })?;
                }
                Field::Type => {
                    f.ty = map.next_value_seed(TextSeed {
                        buf: &mut unescaped.ty,
                        rule: TextRule::Type,
                    })?;
                }
                Field::Entity => {
                    f.entity = map.next_value_seed(TextSeed {
                        buf: &mut unescaped.entity,
                        rule: TextRule::Entity,
                    })?;
                }
                Field::Id => {
                    f.id = map.next_value_seed(TextSeed {
                        buf: &mut unescaped.id,
                        rule: TextRule::Id,
                    })?;
                }
                Field::Ts => f.ts = map.next_value_seed(TsSeed)?,
                Field::Kind => f.kind = map.next_value_seed(KindSeed)?,
                Field::Value => f.value = map.next_value_seed(ValueSeed)?,
                Field::Data => f.data = Some(map.next_value::<&'de RawValue>()?),
            }
            ctx.field = None;
        }
        Ok(f)
    }
}

/// A field name; an unknown one is recorded in the context (serde_json's error could not
/// carry the name as a separate detail).
struct KeySeed<'c> {
    ctx: &'c mut Ctx,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Field;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Field, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed<'_> {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        match Field::from_name(v) {
            Some(f) => Ok(f),
            None => {
                let name = short(v);
                self.ctx.error = Some(InputError::invalid(
                    name,
                    format!("unknown field {name:?}; expected one of {FIELD_LIST}"),
                ));
                Err(E::custom("unknown field"))
            }
        }
    }
}

struct TextSeed<'b> {
    buf: &'b mut String,
    rule: TextRule,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = Option<Text<'de>>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = Option<Text<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        self.rule.check(v).map_err(E::custom)?;
        Ok(Some(Text::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.rule.check(v).map_err(E::custom)?;
        self.buf.clear();
        self.buf.push_str(v);
        Ok(Some(Text::Copied))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        if self.rule.nullable() {
            Ok(None)
        } else {
            Err(E::invalid_type(Unexpected::Unit, &self))
        }
    }
}

struct TsSeed;

impl<'de> DeserializeSeed<'de> for TsSeed {
    type Value = Option<i64>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for TsSeed {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("integer milliseconds since the Unix epoch or an RFC 3339 string")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        ts_from_u64(v).map(Some).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        ts_from_i64(v).map(Some).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(E::custom(ts_not_whole(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        ts_from_rfc3339(v).map(Some).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

struct KindSeed;

impl<'de> DeserializeSeed<'de> for KindSeed {
    type Value = Option<Kind>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for KindSeed {
    type Value = Option<Kind>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("one of \"event\", \"counter\", \"gauge\"")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        kind_from_str(v).map(Some).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<Num>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for ValueSeed {
    type Value = Option<Num>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Num::Int(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(match i64::try_from(v) {
            Ok(i) => Num::Int(i),
            Err(_) => Num::Float(v as f64),
        }))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Num::Float(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}
