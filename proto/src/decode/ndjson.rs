//! NDJSON framing: one event object per line (`\n`, with an optional `\r` before it); blank and
//! whitespace-only lines are skipped. Complete lines are decoded straight from the chunk they
//! arrived in; only a line split across chunks is copied, into a buffer bounded by
//! `ingest.max_event_bytes`.

use super::Sink;
use crate::error::InputError;
use crate::packed::Batch;

/// Incremental NDJSON decoder; see the module docs.
#[derive(Debug)]
pub struct NdjsonDecoder {
    sink: Sink,
    /// The bytes of the current line received so far, when it began in an earlier chunk.
    partial: Vec<u8>,
    /// 1-based number of the current line.
    line: u64,
}

impl NdjsonDecoder {
    pub fn new(max_event_bytes: usize, now_ms: i64) -> NdjsonDecoder {
        NdjsonDecoder {
            sink: Sink::new(max_event_bytes, now_ms),
            partial: Vec::new(),
            line: 1,
        }
    }

    /// Decode the lines `chunk` completes; keep the unterminated rest for the next call.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Batch) -> Result<(), InputError> {
        self.sink.check_failed()?;
        let mut rest = chunk;
        if !self.partial.is_empty() {
            let Some(nl) = memchr::memchr(b'\n', rest) else {
                return self.hold(rest);
            };
            let (head, tail) = rest.split_at(nl);
            self.hold(head)?;
            let r = line_done(&mut self.sink, self.line, &self.partial, out);
            self.partial.clear();
            r?;
            self.line += 1;
            rest = &tail[1..];
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', rest) {
            let line = &rest[start..nl];
            line_done(&mut self.sink, self.line, line, out)?;
            self.line += 1;
            start = nl + 1;
        }
        self.hold(&rest[start..])
    }

    /// The body has ended: an unterminated last line is an event like any other.
    pub fn finish(&mut self, out: &mut Batch) -> Result<(), InputError> {
        self.sink.check_failed()?;
        let r = line_done(&mut self.sink, self.line, &self.partial, out);
        self.partial.clear();
        r
    }

    /// Keep `bytes` of an unterminated line, refusing to hold more than one event's worth
    /// (plus one byte for a `\r` before the newline).
    fn hold(&mut self, bytes: &[u8]) -> Result<(), InputError> {
        if self.partial.len() + bytes.len() > self.sink.max_event_bytes.saturating_add(1) {
            return Err(self.sink.too_large(self.line, 1));
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }
}

/// One complete line (without its `\n`).
fn line_done(
    sink: &mut Sink,
    line_no: u64,
    line: &[u8],
    out: &mut Batch,
) -> Result<(), InputError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > sink.max_event_bytes {
        return Err(sink.too_large(line_no, 1));
    }
    if line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
        return Ok(());
    }
    sink.event(line, line_no, 1, out)
}
