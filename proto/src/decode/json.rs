//! JSON framing: the body is one event object or an array of them. A byte scanner that tracks
//! nesting depth, strings and escapes finds where each event object ends, so each is decoded
//! as soon as its last byte arrives; the brackets and commas between events are checked here,
//! and anything after the top-level value is refused. The scanner's depth is bounded, so a
//! body of a billion `[` is refused at once instead of being scanned or recursed.
//!
//! An element that is not an object is refused from its first byte (422 if it starts a JSON
//! value, 400 otherwise), without reading the rest of it.

use super::compact::string_stop;
use super::{LIMIT_DATA_DEPTH, Sink};
use crate::error::InputError;
use crate::packed::Batch;
use crate::rules::MAX_DATA_DEPTH;

/// Deepest nesting inside one element: the event object plus the depth of `data`.
const MAX_ELEMENT_DEPTH: u32 = 1 + MAX_DATA_DEPTH as u32;

/// Where the scanner is in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScanState {
    /// Before the top-level value.
    Start,
    /// After the opening `[`: an event or `]`.
    ArrayStart,
    /// After a `,`: an event.
    ArrayNext,
    /// After an event in the array: `,` or `]`.
    AfterElement,
    /// Inside an event object.
    Element,
    /// After the top-level value: only whitespace may follow.
    Done,
}

/// Where an element ends: nesting depth and string state, carried across chunks.
#[derive(Debug, Default)]
struct Scan {
    depth: u32,
    in_str: bool,
    escaped: bool,
}

/// Line bookkeeping for positions in errors.
#[derive(Debug)]
struct Lines {
    /// 1-based current line.
    line: u64,
    /// Body offset of the current line's first byte.
    line_start: u64,
}

impl Lines {
    fn column(&self, offset: u64) -> u64 {
        offset.saturating_sub(self.line_start) + 1
    }
}

impl Scan {
    /// Scan `bytes` (at body offset `base`) for the end of the element. `Ok(Some(n))`: the
    /// element ends after `bytes[..n]`; `Ok(None)`: it goes on past `bytes`; `Err(i)`: it nests
    /// too deep at `bytes[i]`.
    fn run(&mut self, bytes: &[u8], base: u64, lines: &mut Lines) -> Result<Option<usize>, usize> {
        let mut i = 0;
        while i < bytes.len() {
            if self.in_str {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                let rest = &bytes[i..];
                match string_stop(rest) {
                    None => return Ok(None),
                    Some(p) => {
                        if rest.get(p) == Some(&b'\\') {
                            self.escaped = true;
                        } else {
                            self.in_str = false;
                        }
                        i += p + 1;
                    }
                }
                continue;
            }
            match bytes.get(i) {
                Some(b'"') => self.in_str = true,
                Some(b'{' | b'[') => {
                    self.depth += 1;
                    if self.depth > MAX_ELEMENT_DEPTH {
                        return Err(i);
                    }
                }
                Some(b'}' | b']') => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return Ok(Some(i + 1));
                    }
                }
                Some(b'\n') => {
                    lines.line += 1;
                    lines.line_start = base + i as u64 + 1;
                }
                _ => {}
            }
            i += 1;
        }
        Ok(None)
    }
}

/// Incremental JSON decoder for an event object or an array of them; see the module docs.
#[derive(Debug)]
pub struct JsonDecoder {
    sink: Sink,
    state: ScanState,
    /// The top-level value is an array (else a single object).
    array: bool,
    scan: Scan,
    /// The current element's bytes received so far, when it began in an earlier chunk.
    partial: Vec<u8>,
    /// Body offset of the first byte of the next chunk.
    offset: u64,
    lines: Lines,
    /// Where the current element starts.
    elem_line: u64,
    elem_column: u64,
}

impl JsonDecoder {
    pub fn new(max_event_bytes: usize, now_ms: i64) -> JsonDecoder {
        JsonDecoder {
            sink: Sink::new(max_event_bytes, now_ms),
            state: ScanState::Start,
            array: false,
            scan: Scan::default(),
            partial: Vec::new(),
            offset: 0,
            lines: Lines {
                line: 1,
                line_start: 0,
            },
            elem_line: 1,
            elem_column: 1,
        }
    }

    /// Decode the events `chunk` completes; keep an unfinished event for the next call.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Batch) -> Result<(), InputError> {
        self.sink.check_failed()?;
        let mut i = 0;
        while let Some(&b) = chunk.get(i) {
            if self.state == ScanState::Element {
                i = self.element(chunk, i, out)?;
                continue;
            }
            match b {
                b' ' | b'\t' | b'\r' => {}
                b'\n' => {
                    self.lines.line += 1;
                    self.lines.line_start = self.offset + i as u64 + 1;
                }
                // The element scan starts at its `{`, so do not step past it.
                _ => {
                    if self.between(b, self.offset + i as u64)? {
                        continue;
                    }
                }
            }
            i += 1;
        }
        self.offset += chunk.len() as u64;
        Ok(())
    }

    /// The body has ended: it must have ended after the top-level value.
    pub fn finish(&mut self, _out: &mut Batch) -> Result<(), InputError> {
        self.sink.check_failed()?;
        let msg = match self.state {
            ScanState::Done => return Ok(()),
            ScanState::Start => {
                "empty body: expected an event object or an array of event objects".to_string()
            }
            ScanState::Element => {
                format!("unexpected end of body inside event {}", self.sink.index)
            }
            ScanState::ArrayStart | ScanState::ArrayNext | ScanState::AfterElement => {
                "unexpected end of body: the array is not closed".to_string()
            }
        };
        let mut e =
            InputError::malformed(msg).at_line(self.lines.line, self.lines.column(self.offset));
        if self.state == ScanState::Element {
            e = e.at_index(self.sink.index);
        }
        Err(self.sink.fail(e))
    }

    /// Handle the non-whitespace byte `b` (at body offset `at`) outside any element. Returns
    /// true when it starts an element, which is then scanned from that byte.
    fn between(&mut self, b: u8, at: u64) -> Result<bool, InputError> {
        let next = match (self.state, b) {
            (ScanState::Start, b'[') => {
                self.array = true;
                ScanState::ArrayStart
            }
            (ScanState::Start | ScanState::ArrayStart | ScanState::ArrayNext, b'{') => {
                self.elem_line = self.lines.line;
                self.elem_column = self.lines.column(at);
                self.scan = Scan::default();
                self.state = ScanState::Element;
                return Ok(true);
            }
            (ScanState::ArrayStart | ScanState::AfterElement, b']') => ScanState::Done,
            (ScanState::AfterElement, b',') => ScanState::ArrayNext,
            (ScanState::Start | ScanState::ArrayStart | ScanState::ArrayNext, _) => {
                return Err(self.not_an_object(b, at));
            }
            (ScanState::AfterElement, _) => {
                return Err(self.framing_error(
                    format!(
                        "expected ',' or ']' after event {}, found {}",
                        self.sink.index.saturating_sub(1),
                        show(b)
                    ),
                    at,
                ));
            }
            (ScanState::Done, _) => {
                return Err(self.framing_error(
                    format!("unexpected {} after the end of the JSON value", show(b)),
                    at,
                ));
            }
            (ScanState::Element, _) => ScanState::Element,
        };
        self.state = next;
        Ok(false)
    }

    /// Scan the current element from `chunk[i]`; decode it if it ends in this chunk. Returns
    /// the index of the first byte after what was consumed.
    fn element(&mut self, chunk: &[u8], i: usize, out: &mut Batch) -> Result<usize, InputError> {
        let avail = &chunk[i..];
        // Never scan (or buffer) more than one event's worth of bytes.
        let allowance = self.sink.max_event_bytes.saturating_sub(self.partial.len());
        let window = &avail[..allowance.min(avail.len())];
        let base = self.offset + i as u64;
        match self.scan.run(window, base, &mut self.lines) {
            Ok(Some(end)) => {
                let own = &window[..end];
                let bytes: &[u8] = if self.partial.is_empty() {
                    own
                } else {
                    self.partial.extend_from_slice(own);
                    &self.partial
                };
                let r = self
                    .sink
                    .event(bytes, self.elem_line, self.elem_column, out);
                self.partial.clear();
                r?;
                self.state = if self.array {
                    ScanState::AfterElement
                } else {
                    ScanState::Done
                };
                Ok(i + end)
            }
            Ok(None) if window.len() < avail.len() => {
                Err(self.sink.too_large(self.elem_line, self.elem_column))
            }
            Ok(None) => {
                self.partial.extend_from_slice(window);
                Ok(chunk.len())
            }
            Err(at) => {
                let e = InputError::too_large(
                    LIMIT_DATA_DEPTH,
                    MAX_DATA_DEPTH as u64,
                    format!(
                        "event {} nests deeper than {MAX_ELEMENT_DEPTH} levels (\"data\" may be \
                         at most {MAX_DATA_DEPTH} levels deep)",
                        self.sink.index
                    ),
                )
                .at_index(self.sink.index)
                .at_line(self.lines.line, self.lines.column(base + at as u64));
                Err(self.sink.fail(e))
            }
        }
    }

    /// A value that is not an object where an event should be: 422 if it is a JSON value,
    /// 400 if it is not JSON at all.
    fn not_an_object(&mut self, b: u8, at: u64) -> InputError {
        let found = match b {
            b'[' => Some("an array"),
            b'"' => Some("a string"),
            b'-' | b'0'..=b'9' => Some("a number"),
            b't' | b'f' => Some("a boolean"),
            b'n' => Some("null"),
            _ => None,
        };
        let what = if self.state == ScanState::Start {
            "the body must be an event object or an array of event objects".to_string()
        } else {
            format!("event {} must be a JSON object", self.sink.index)
        };
        let e = match (found, self.state) {
            (Some(found), _) => InputError::invalid_event(format!("{what}, found {found}")),
            (None, ScanState::ArrayNext) if b == b']' => {
                InputError::malformed("invalid JSON: trailing comma before ']'")
            }
            (None, _) => InputError::malformed(format!("invalid JSON: {what}, found {}", show(b))),
        };
        let e = e
            .at_index(self.sink.index)
            .at_line(self.lines.line, self.lines.column(at));
        self.sink.fail(e)
    }

    fn framing_error(&mut self, msg: String, at: u64) -> InputError {
        let e = InputError::malformed(format!("invalid JSON: {msg}"))
            .at_line(self.lines.line, self.lines.column(at));
        self.sink.fail(e)
    }
}

/// A byte for an error message.
fn show(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", char::from(b))
    } else {
        format!("byte 0x{b:02x}")
    }
}
