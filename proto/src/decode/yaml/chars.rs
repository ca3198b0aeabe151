//! The parser's input: the body's bytes from an [`io::Read`], decoded as UTF-8 one `char` at
//! a time through a small fixed buffer (the body is never held whole).
//!
//! It also bounds what the parser can buffer: a scalar is collected whole before the parser
//! emits it, so a 64 MiB scalar would be 64 MiB in memory before any rule could refuse it.
//! No valid event holds a token larger than `ingest.max_event_bytes`, so the input read
//! between two parser events is capped just above that, and refused (413) past it.

use std::cell::{Cell, RefCell};
use std::io::{self, Read};
use std::rc::Rc;

use granit_parser::ErrorKind;

use crate::decode::LIMIT_EVENT_BYTES;
use crate::error::InputError;

/// Bytes read per `read` call.
const BUF_BYTES: usize = 16 << 10;
/// Room above `ingest.max_event_bytes` for the parser's lookahead and the syntax around a
/// token.
const SLACK_BYTES: u64 = 64 << 10;

/// What the input shares with the decoder: where the last parser event was, and the error
/// that made the input stop (the parser only sees a generic input error).
#[derive(Debug)]
pub(super) struct Guard {
    consumed: Cell<u64>,
    mark: Cell<u64>,
    max_event_bytes: u64,
    error: RefCell<Option<InputError>>,
}

impl Guard {
    pub(super) fn new(max_event_bytes: usize) -> Guard {
        Guard {
            consumed: Cell::new(0),
            mark: Cell::new(0),
            max_event_bytes: max_event_bytes as u64,
            error: RefCell::new(None),
        }
    }

    /// The parser produced an event: the input read so far belongs to it.
    pub(super) fn event_seen(&self) {
        self.mark.set(self.consumed.get());
    }

    /// The error that stopped the input, if it stopped on its own account.
    pub(super) fn take_error(&self) -> Option<InputError> {
        self.error.borrow_mut().take()
    }
}

/// UTF-8 decoding iterator over a reader; see the module docs.
pub(super) struct Chars<R> {
    reader: R,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    eof: bool,
    done: bool,
    guard: Rc<Guard>,
}

impl<R: Read> Chars<R> {
    pub(super) fn new(reader: R, guard: Rc<Guard>) -> Chars<R> {
        Chars {
            reader,
            buf: vec![0; BUF_BYTES].into_boxed_slice(),
            pos: 0,
            end: 0,
            eof: false,
            done: false,
            guard,
        }
    }

    /// Make at least `need` bytes available from `pos`; false if the input ends first.
    fn fill(&mut self, need: usize) -> Result<bool, InputError> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        while self.end < need && !self.eof {
            let free = &mut self.buf[self.end..];
            match self.reader.read(free) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(InputError::malformed(format!(
                        "reading the body failed: {e}"
                    )));
                }
            }
        }
        Ok(self.end >= need)
    }

    fn decode(&mut self) -> Result<Option<char>, InputError> {
        if self.pos >= self.end && !self.fill(1)? {
            return Ok(None);
        }
        let lead = self.buf[self.pos];
        let width = match lead {
            // YAML has no raw NUL, and the parser pads its lookahead with NUL at the end of
            // input: one in the body would read as a silent end.
            0 => return Err(InputError::malformed("NUL byte in a YAML body")),
            0x01..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return Err(bad_utf8()),
        };
        if self.end - self.pos < width && !self.fill(width)? {
            return Err(bad_utf8());
        }
        let bytes = &self.buf[self.pos..self.pos + width];
        let c = std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.chars().next())
            .ok_or_else(bad_utf8)?;
        self.pos += width;
        let consumed = self.guard.consumed.get() + width as u64;
        self.guard.consumed.set(consumed);
        let since = consumed - self.guard.mark.get();
        if since > self.guard.max_event_bytes + SLACK_BYTES {
            let max = self.guard.max_event_bytes;
            return Err(InputError::too_large(
                LIMIT_EVENT_BYTES,
                max,
                format!(
                    "a YAML token (scalar, comment or blank run) is larger than {max} bytes \
                     (ingest.max_event_bytes)"
                ),
            ));
        }
        Ok(Some(c))
    }
}

fn bad_utf8() -> InputError {
    InputError::malformed("invalid UTF-8 in the body")
}

impl<R: Read> Iterator for Chars<R> {
    type Item = Result<char, ErrorKind>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.decode() {
            Ok(Some(c)) => Some(Ok(c)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                let kind = ErrorKind::Custom(e.message.clone());
                *self.guard.error.borrow_mut() = Some(e);
                Some(Err(kind))
            }
        }
    }
}
