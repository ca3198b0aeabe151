//! Server-Sent Events (`text/event-stream`) as the follow endpoints write them (docs/API.md §5,
//! `src/http/follow.rs`, `src/live/`): the one parser of the CLI's `veltrix tail`, the load
//! generator's fan-out followers and the tests.
//!
//! What the server writes, and so what this parser gives back:
//! - `id: <seq>` then `data: <canonical JSON>` (one `data:` line per line of the data) and a
//!   blank line: an event. The id is always a seq, so it is parsed here ([`Id`]).
//! - `event: retained` / `event: deleted` and their `data:`: named notices.
//! - `: heartbeat` and a blank line: a comment-only block ([`Event::comment`]).
//!
//! The format is the HTML standard's: a line ends with LF, CRLF or a lone CR; `:` starts a
//! comment; `name: value` strips one space after the colon; a line without a colon is a field
//! with an empty value; several `data:` lines join with LF; a blank line dispatches the block.
//! Unlike the standard, an id is not carried over to the next event: each event of a stream
//! has its own, and one without an id is for the caller to reject, not the previous one again.
//!
//! The parser is incremental and sans-I/O: [`SseParser::feed`] takes whatever piece a read
//! returned (a line, even a CRLF, may be split anywhere) and hands out each complete block.
//! It is also bounded: the field name, the id and the event name are read into fixed inline
//! buffers, comments, unknown fields and unwanted data are skipped without being stored, and
//! the data it keeps is limited by `max_data` ([`SseError::DataTooLarge`]), so a bad server
//! cannot make a client allocate without bound. [`KeepData::Named`] keeps only the data of
//! named events: a fan-out follower that needs no more than the id of an ordinary event then
//! skips its data with `memchr`, never copying it.

use memchr::memchr2;

/// The longest event name kept (ours are `retained` and `deleted`).
pub const MAX_EVENT_NAME: usize = 32;
/// Data kept of one block beyond which [`SseParser::feed`] fails, unless set otherwise.
pub const DEFAULT_MAX_DATA: usize = 64 << 20;
/// A block's data buffer above this capacity is freed after dispatch rather than kept for the
/// next one, so that a parser at rest holds little.
const KEEP_CAPACITY: usize = 4 << 10;

/// Why the stream cannot be parsed on. The parser is not to be fed after an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE event whose data is over {limit} bytes")]
    DataTooLarge { limit: usize },
    #[error("an SSE event name over {MAX_EVENT_NAME} bytes or not UTF-8")]
    BadEventName,
}

/// The `id:` of a block: our server's ids are seqs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Id {
    Seq(u64),
    /// Present but not a seq: empty, not decimal digits, or past `u64`.
    Invalid,
}

/// Which `data:` the parser keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeepData {
    /// Every block's data.
    #[default]
    All,
    /// Only the data of named events (an `event:` other than `message` before the `data:`
    /// line, as the server writes it); the data of ordinary events is skipped unread.
    Named,
}

/// One dispatched block (the lines before a blank line). It borrows the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The last `id:` of the block.
    pub id: Option<Id>,
    /// The last `event:` of the block.
    pub name: Option<&'a str>,
    /// The `data:` lines joined with LF (empty when not kept, see [`KeepData`]).
    pub data: &'a [u8],
    /// Whether the block had a `data:` line (kept or not).
    pub has_data: bool,
    /// The block held only comment lines (a heartbeat).
    pub comment: bool,
}

impl Event<'_> {
    /// An ordinary event (no `event:` name, or `message`), as opposed to a named notice.
    pub fn is_message(&self) -> bool {
        matches!(self.name, None | Some("" | "message"))
    }
}

/// Where in a line the parser is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// At the start of a line.
    Start,
    /// Reading the field name.
    Name,
    /// Just after the colon: one space is stripped.
    ValueFirst(Field),
    Value(Field),
    /// The rest of the line is not needed (a comment, an unknown field, unkept data).
    Skip,
}

/// A field whose value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Id,
    Event,
    Data,
}

/// A field name: only `id`, `event` and `data` matter, none longer than 5 bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Name {
    buf: [u8; 5],
    len: u8,
    overflow: bool,
}

impl Name {
    fn push(&mut self, b: u8) {
        match self.buf.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }

    fn field(&self) -> Option<Field> {
        if self.overflow {
            return None;
        }
        match &self.buf[..usize::from(self.len)] {
            b"id" => Some(Field::Id),
            b"event" => Some(Field::Event),
            b"data" => Some(Field::Data),
            _ => None,
        }
    }
}

/// An incremental, bounded parser of one `text/event-stream` body (see the module doc).
#[derive(Clone, Debug)]
pub struct SseParser {
    keep: KeepData,
    max_data: usize,
    line: Line,
    /// The previous line ended with CR: an LF right after it belongs to that line end.
    after_cr: bool,
    name: Name,
    /// The id being read: `None` once it is not a seq.
    id_value: Option<u64>,
    id_digits: bool,
    id: Option<Id>,
    event: [u8; MAX_EVENT_NAME],
    event_len: usize,
    event_overflow: bool,
    has_event: bool,
    data: Vec<u8>,
    data_lines: u32,
    /// A `data:` line of the block was kept: the next one is joined with LF.
    kept_lines: bool,
    /// The block has a line (of any kind), and a field line.
    lines: bool,
    fields: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(KeepData::All, DEFAULT_MAX_DATA)
    }
}

impl SseParser {
    /// A parser keeping `keep` data, at most `max_data` bytes of it per block.
    pub fn new(keep: KeepData, max_data: usize) -> SseParser {
        SseParser {
            keep,
            max_data,
            line: Line::Start,
            after_cr: false,
            name: Name::default(),
            id_value: None,
            id_digits: false,
            id: None,
            event: [0; MAX_EVENT_NAME],
            event_len: 0,
            event_overflow: false,
            has_event: false,
            data: Vec::new(),
            data_lines: 0,
            kept_lines: false,
            lines: false,
            fields: false,
        }
    }

    /// Parse `input` (any piece of the body), handing each complete block to `on`.
    pub fn feed(
        &mut self,
        mut input: &[u8],
        on: &mut impl FnMut(Event<'_>),
    ) -> Result<(), SseError> {
        while let Some(&b) = input.first() {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    input = &input[1..];
                    continue;
                }
            }
            match self.line {
                Line::Start => match b {
                    b'\n' | b'\r' => {
                        input = &input[1..];
                        self.after_cr = b == b'\r';
                        self.dispatch(on)?;
                    }
                    b':' => {
                        self.lines = true;
                        self.line = Line::Skip;
                    }
                    _ => {
                        self.lines = true;
                        self.fields = true;
                        self.name = Name::default();
                        self.line = Line::Name;
                    }
                },
                Line::Name => {
                    input = &input[1..];
                    match b {
                        b':' => self.line = self.start_value(),
                        b'\n' | b'\r' => {
                            // A field without a colon has an empty value.
                            if let Line::ValueFirst(f) = self.start_value() {
                                self.end_value(f)?;
                            }
                            self.end_line(b);
                        }
                        _ => self.name.push(b),
                    }
                }
                Line::ValueFirst(f) => {
                    if b == b' ' {
                        input = &input[1..];
                    }
                    self.line = Line::Value(f);
                }
                Line::Value(Field::Data) => {
                    let end = memchr2(b'\n', b'\r', input);
                    let piece = &input[..end.unwrap_or(input.len())];
                    if self.data.len() + piece.len() > self.max_data {
                        return Err(SseError::DataTooLarge {
                            limit: self.max_data,
                        });
                    }
                    self.data.extend_from_slice(piece);
                    match end {
                        Some(i) => {
                            let b = input[i];
                            input = &input[i + 1..];
                            self.end_line(b);
                        }
                        None => input = &[],
                    }
                }
                Line::Value(f) => {
                    input = &input[1..];
                    match b {
                        b'\n' | b'\r' => {
                            self.end_value(f)?;
                            self.end_line(b);
                        }
                        _ => self.push_value(f, b),
                    }
                }
                Line::Skip => match memchr2(b'\n', b'\r', input) {
                    Some(i) => {
                        let b = input[i];
                        input = &input[i + 1..];
                        self.end_line(b);
                    }
                    None => input = &[],
                },
            }
        }
        Ok(())
    }

    fn end_line(&mut self, b: u8) {
        self.after_cr = b == b'\r';
        self.line = Line::Start;
    }

    /// What to do with the value of the field just named.
    fn start_value(&mut self) -> Line {
        match self.name.field() {
            Some(Field::Id) => {
                self.id_value = Some(0);
                self.id_digits = false;
                Line::ValueFirst(Field::Id)
            }
            Some(Field::Event) => {
                self.event_len = 0;
                self.event_overflow = false;
                Line::ValueFirst(Field::Event)
            }
            Some(Field::Data) => {
                self.data_lines = self.data_lines.saturating_add(1);
                let keep = match self.keep {
                    KeepData::All => true,
                    KeepData::Named => self.has_event && !self.event_is_message(),
                };
                if !keep {
                    return Line::Skip;
                }
                if self.kept_lines {
                    // Bounded by the check on the next piece of data or at dispatch.
                    self.data.push(b'\n');
                }
                self.kept_lines = true;
                Line::ValueFirst(Field::Data)
            }
            None => Line::Skip,
        }
    }

    fn push_value(&mut self, f: Field, b: u8) {
        match f {
            Field::Id => {
                self.id_digits = true;
                self.id_value = self.id_value.and_then(|n| {
                    let d = char::from(b).to_digit(10)?;
                    n.checked_mul(10)?.checked_add(u64::from(d))
                });
            }
            Field::Event => match self.event.get_mut(self.event_len) {
                Some(slot) => {
                    *slot = b;
                    self.event_len += 1;
                }
                None => self.event_overflow = true,
            },
            Field::Data => {}
        }
    }

    fn end_value(&mut self, f: Field) -> Result<(), SseError> {
        match f {
            Field::Id => {
                self.id = Some(match self.id_value {
                    Some(seq) if self.id_digits => Id::Seq(seq),
                    _ => Id::Invalid,
                });
            }
            Field::Event => {
                if self.event_overflow
                    || std::str::from_utf8(&self.event[..self.event_len]).is_err()
                {
                    return Err(SseError::BadEventName);
                }
                self.has_event = true;
            }
            Field::Data => {}
        }
        Ok(())
    }

    fn event_is_message(&self) -> bool {
        matches!(&self.event[..self.event_len], b"" | b"message")
    }

    /// A blank line: hand out the block, if it had any line, and start the next.
    fn dispatch(&mut self, on: &mut impl FnMut(Event<'_>)) -> Result<(), SseError> {
        if !self.lines {
            return Ok(());
        }
        if self.data.len() > self.max_data {
            return Err(SseError::DataTooLarge {
                limit: self.max_data,
            });
        }
        let name = match self.has_event {
            // Checked to be UTF-8 when the field ended.
            true => std::str::from_utf8(&self.event[..self.event_len]).ok(),
            false => None,
        };
        on(Event {
            id: self.id,
            name,
            data: &self.data,
            has_data: self.data_lines > 0,
            comment: !self.fields,
        });
        self.id = None;
        self.has_event = false;
        self.event_len = 0;
        self.data_lines = 0;
        self.kept_lines = false;
        self.lines = false;
        self.fields = false;
        if self.data.capacity() > KEEP_CAPACITY {
            self.data = Vec::new();
        } else {
            self.data.clear();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
