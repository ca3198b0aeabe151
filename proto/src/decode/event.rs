//! One event: the bytes of a single JSON object → a validated [`EventView`] (SPEC §2).
//!
//! serde_json deserializes straight into borrowed fields through the visitors of
//! [`super::fields`], so no `Value` tree is built: strings without escapes are borrowed from
//! the input, strings with escapes are unescaped into buffers the parser reuses, and `data` is
//! captured as its raw text and then compacted. The rules that span fields (required fields,
//! `value` by `kind`, reserved types) are checked here once the object is complete.

use serde::Deserializer as _;
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::LIMIT_DATA_DEPTH;
use super::compact::{Compacted, compact};
use super::fields::{Ctx, EventVisitor, Field, Unescaped};
use crate::error::InputError;
use crate::event::{EventView, Kind, MAX_DATA_DEPTH, Num, reserved_feature_name};
use crate::packed::Batch;

/// Parses single events, reusing its buffers between events so that the steady state does
/// not allocate. The returned view borrows from the input and from the parser.
#[derive(Debug, Default)]
pub struct EventParser {
    unescaped: Unescaped,
    /// The compacted `data` text when the sent text was not already compact.
    data: String,
}

impl EventParser {
    pub fn new() -> EventParser {
        EventParser::default()
    }

    /// Parse and validate one event object. `now_ms` is the `ts` of an event that has none.
    ///
    /// Positions in the error are relative to `bytes` (1-based); errors found once the whole
    /// object was read (a missing field, a counter without value…) carry no position.
    pub fn parse<'a>(
        &'a mut self,
        bytes: &'a [u8],
        now_ms: i64,
    ) -> Result<EventView<'a>, InputError> {
        // One UTF-8 check for the whole event is cheaper than serde_json's check of each
        // string, and lets it borrow strings without checking them again.
        let text = std::str::from_utf8(bytes).map_err(|e| bad_utf8(bytes, e.valid_up_to()))?;
        let mut ctx = Ctx::default();
        let mut de = serde_json::Deserializer::from_str(text);
        let visitor = EventVisitor {
            unescaped: &mut self.unescaped,
            ctx: &mut ctx,
        };
        let fields = match (&mut de).deserialize_map(visitor).and_then(|f| {
            de.end()?;
            Ok(f)
        }) {
            Ok(f) => f,
            Err(e) => return Err(from_serde(&e, ctx)),
        };

        let data = match fields.data {
            None => None,
            Some(raw) => match compact(raw.get(), &mut self.data, MAX_DATA_DEPTH) {
                Ok(c) => Some(c),
                Err(_) => {
                    let mut e = InputError::too_large(
                        LIMIT_DATA_DEPTH,
                        MAX_DATA_DEPTH as u64,
                        format!("field \"data\" is nested deeper than {MAX_DATA_DEPTH} levels"),
                    );
                    e.field = Some("data".into());
                    return Err(e);
                }
            },
        };

        let this: &'a EventParser = self;
        let un = &this.unescaped;
        let stream = fields
            .stream
            .ok_or_else(|| missing(Field::Stream))?
            .get(&un.stream);
        let ty = fields.ty.ok_or_else(|| missing(Field::Type))?.get(&un.ty);
        let entity = fields
            .entity
            .map(|t| t.get(&un.entity))
            .filter(|e| !e.is_empty());
        let id = fields.id.map(|t| t.get(&un.id));
        let kind = fields.kind.unwrap_or_default();
        let value = check_value(kind, fields.value)?;
        check_reserved(kind, ty)?;
        let data = match data {
            None => None,
            Some(Compacted::AsIs) => fields.data.map(RawValue::get),
            Some(Compacted::Copied) => Some(this.data.as_str()),
        };
        Ok(EventView {
            stream,
            entity,
            ty,
            ts: fields.ts.unwrap_or(now_ms),
            kind,
            value,
            id,
            data,
        })
    }
}

/// Parse one event and push it into `out`: for one-off use; decoders keep an [`EventParser`].
pub fn parse_event(bytes: &[u8], now_ms: i64, out: &mut Batch) -> Result<(), InputError> {
    let mut parser = EventParser::new();
    let ev = parser.parse(bytes, now_ms)?;
    out.push(&ev).map_err(InputError::from_encode)
}

/// Invalid UTF-8 at `bytes[at]`; the position is 1-based line and column like serde_json's.
fn bad_utf8(bytes: &[u8], at: usize) -> InputError {
    let before = bytes.get(..at).unwrap_or_default();
    let line = memchr::memchr_iter(b'\n', before).count() as u64 + 1;
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |p| p + 1);
    InputError::malformed("invalid UTF-8 in the body").at_line(line, (at - line_start) as u64 + 1)
}

pub(super) fn missing(f: Field) -> InputError {
    InputError::invalid(f.name(), format!("missing required field \"{}\"", f.name()))
}

/// A counter or gauge may not take the name of a built-in feature (SPEC §2, §6).
pub(super) fn check_reserved(kind: Kind, ty: &str) -> Result<(), InputError> {
    if kind != Kind::Event && reserved_feature_name(ty) {
        return Err(InputError::invalid(
            "type",
            format!(
                "field \"type\": a {} may not be named \"{ty}\", which is reserved for a \
                 built-in feature",
                kind.as_str()
            ),
        ));
    }
    Ok(())
}

/// The `value` rules of SPEC §2, which depend on `kind` (shared with the frames decoder, so
/// that both formats accept exactly the same values).
pub(crate) fn check_value(kind: Kind, value: Option<Num>) -> Result<Option<Num>, InputError> {
    // i64::MIN and the first float past i64::MAX, both exact as f64.
    const I64_LOW: f64 = -9_223_372_036_854_775_808.0;
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    match (kind, value) {
        (Kind::Counter, None) => Err(InputError::invalid(
            "value",
            "missing required field \"value\": a counter needs an integer delta",
        )),
        (Kind::Counter, Some(Num::Float(x))) => {
            if x.fract() == 0.0 && (I64_LOW..I64_END).contains(&x) {
                // Exact: x is integral and within i64's range.
                Ok(Some(Num::Int(x as i64)))
            } else {
                Err(InputError::invalid(
                    "value",
                    format!("field \"value\": a counter's value must be an integer (i64), got {x}"),
                ))
            }
        }
        (Kind::Gauge, None) => Err(InputError::invalid(
            "value",
            "missing required field \"value\": a gauge needs a finite number",
        )),
        // Every number the decoders produce is finite (serde_json reports overflow as an
        // error, the YAML decoder refuses non-finite numbers).
        (_, v) => Ok(v),
    }
}

/// Map serde_json's error (and what the visitors recorded) to an [`InputError`].
fn from_serde(e: &serde_json::Error, ctx: Ctx) -> InputError {
    let text = e.to_string();
    // serde_json appends the position to its message; the position goes in its own fields.
    let msg = match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => &text[..i],
        _ => text.as_str(),
    };
    let err = match ctx.error {
        Some(err) => err,
        None => match (e.classify(), ctx.field) {
            (Category::Data, Some(f)) => {
                InputError::invalid(f.name(), format!("field \"{}\": {msg}", f.name()))
            }
            (Category::Data, None) => {
                InputError::invalid_event(format!("an event must be a JSON object: {msg}"))
            }
            // A well-formed number too large for an f64 breaks a value rule, not the syntax.
            (Category::Syntax, Some(f)) if msg.starts_with("number out of range") => {
                InputError::invalid(f.name(), format!("field \"{}\": {msg}", f.name()))
            }
            _ => InputError::malformed(format!("invalid JSON: {msg}")),
        },
    };
    if e.line() > 0 {
        err.at_line(e.line() as u64, e.column() as u64)
    } else {
        err
    }
}
