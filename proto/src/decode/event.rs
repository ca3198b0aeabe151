//! One event: the bytes of a single JSON object → a validated [`EventView`] (docs/API.md §2).
//!
//! serde_json deserializes straight into borrowed fields through the visitors of
//! [`super::fields`], so no `Value` tree is built: strings without escapes are borrowed from
//! the input, strings with escapes are unescaped into buffers the parser reuses, and `data` is
//! captured as its raw text and then compacted. The rules that span fields (required fields,
//! `value` by `kind`, reserved types; [`crate::rules`]) are checked here once the object is
//! complete.

use serde::Deserializer as _;
use serde_json::error::Category;
use serde_json::value::RawValue;

use super::compact::{Compacted, compact};
use super::fields::{Ctx, EventVisitor, Field, Unescaped};
use crate::error::InputError;
use crate::event::EventView;
use crate::packed::Batch;
use crate::rules::{MAX_DATA_DEPTH, check_reserved, check_value, data_too_deep};

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
                Err(_) => return Err(data_too_deep()),
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
        // An absent `kind` is `event` (docs/API.md §2), `Kind`'s default.
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
    out.push(&ev).map_err(InputError::from_pack)
}

/// Invalid UTF-8 at `bytes[at]`; the position is 1-based line and column like serde_json's.
fn bad_utf8(bytes: &[u8], at: usize) -> InputError {
    let before = &bytes[..at];
    let line = memchr::memchr_iter(b'\n', before).count() as u64 + 1;
    let line_start = memchr::memrchr(b'\n', before).map_or(0, |p| p + 1);
    InputError::malformed("invalid UTF-8 in the body").at_line(line, (at - line_start) as u64 + 1)
}

pub(super) fn missing(f: Field) -> InputError {
    InputError::invalid(f.name(), format!("missing required field \"{}\"", f.name()))
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
