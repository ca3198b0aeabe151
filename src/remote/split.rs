//! Cutting `veltrix ingest`'s input into request bodies, streaming: at most one batch (plus
//! one event or document) is in memory, whatever the input's size.
//!
//! The server checks every event (docs/API.md §2, §3), so the client only needs to find where one
//! event ends, in the cheapest honest way per format:
//! - **NDJSON**: lines. Blank lines are skipped, nothing is parsed.
//! - **YAML**: document boundaries. YAML 1.2 forbids a line starting with `---` or `...` (then a
//!   space or the line's end) inside any scalar, so such a line always starts or ends a
//!   document and a batch can be cut before it without parsing. The YAML is sent as it is, so
//!   the server's YAML rules apply unchanged (converting to JSON here would not keep them:
//!   `stream: 42` is the stream `"42"` in YAML). A document holding a sequence of events counts
//!   as one toward `--batch`. Not handled: `%` directives (they would stay with the document
//!   before them).
//! - **JSON**: an array of events (or one object, or objects one after another) is read with
//!   serde_json's streaming reader, one element at a time as raw text, and re-joined into
//!   arrays of at most `--batch` elements. Malformed JSON stops here with its line and column.
//! - **Frames** (docs/PROTOCOL.md, the HTTP ingest body: BATCH frames back to back): whole
//!   frames, by their length prefix (`vx_proto::frames::Head`, which checks it against the cap
//!   before anything is read); a frame counts as one toward `--batch`, and a request holds
//!   whole frames only (one frame is one atomic batch, never cut).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::io::{self, BufRead, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The input formats, chosen by the file's extension or `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Ndjson,
    Json,
    Yaml,
    /// BATCH frames of docs/PROTOCOL.md, back to back.
    Frames,
}

impl Format {
    /// By extension: `.json`; `.ndjson`, `.jsonl`; `.yaml`, `.yml`.
    pub fn of_path(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "json" => Some(Format::Json),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            "yaml" | "yml" => Some(Format::Yaml),
            "vxf" | "frames" => Some(Format::Frames),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Ndjson => "application/x-ndjson",
            Format::Json => "application/json",
            Format::Yaml => "application/yaml",
            Format::Frames => vx_proto::frames::CONTENT_TYPE,
        }
    }
}

/// One request body.
#[derive(Debug)]
pub struct Batch {
    pub body: Vec<u8>,
    /// Events in it (YAML: documents; frames: BATCH frames).
    pub events: u64,
    /// Position of its first event (YAML: document) in the input, 0-based.
    pub first: u64,
    /// Bytes of the input read up to the end of this batch.
    pub read_to: u64,
}

/// Why the input could not be cut into batches.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("reading the input: {0}")]
    Read(#[from] io::Error),
    #[error("{what} {n} is longer than --max-bytes ({max} bytes)")]
    TooLong {
        what: &'static str,
        n: u64,
        max: usize,
    },
    #[error("the input is not valid JSON: {0}")]
    Json(String),
    #[error("frame {n} at byte {at}: {reason}")]
    Frame { n: u64, at: u64, reason: String },
}

/// Limits of one batch.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub events: u64,
    pub bytes: usize,
}

/// Read `input` to its end, handing each batch to `emit`; stops early (`Ok`) when `emit`
/// returns false.
pub fn split(
    input: impl Read,
    format: Format,
    limits: Limits,
    emit: &mut dyn FnMut(Batch) -> bool,
) -> Result<(), SplitError> {
    let limits = Limits {
        events: limits.events.max(1),
        bytes: limits.bytes.max(1),
    };
    match format {
        Format::Ndjson => lines(io::BufReader::new(input), false, limits, emit),
        Format::Yaml => lines(io::BufReader::new(input), true, limits, emit),
        Format::Json => json(input, limits, emit),
        Format::Frames => frames(io::BufReader::new(input), limits, emit),
    }
}

/// A batch being filled.
struct Filling {
    batch: Batch,
    limits: Limits,
}

impl Filling {
    fn new(limits: Limits) -> Filling {
        Filling {
            batch: Batch {
                body: Vec::new(),
                events: 0,
                first: 0,
                read_to: 0,
            },
            limits,
        }
    }

    /// Would adding `len` more bytes pass the byte cap of a non-empty batch?
    fn full_for(&self, len: usize) -> bool {
        self.batch.events > 0 && self.batch.body.len() + len > self.limits.bytes
    }

    /// Hand the batch over (if it has anything) and start the next one.
    fn flush(&mut self, emit: &mut dyn FnMut(Batch) -> bool) -> bool {
        if self.batch.events == 0 {
            return true;
        }
        let next = Batch {
            body: Vec::with_capacity(self.batch.body.len()),
            events: 0,
            first: self.batch.first + self.batch.events,
            read_to: self.batch.read_to,
        };
        emit(std::mem::replace(&mut self.batch, next))
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A YAML document marker line: `---` or `...` then whitespace or the end of the line.
fn is_marker(line: &[u8]) -> bool {
    (line.starts_with(b"---") || line.starts_with(b"..."))
        && line.get(3).is_none_or(|c| c.is_ascii_whitespace())
}

/// Has this YAML line content (not blank, not only a comment, not a bare marker)?
fn yaml_content(line: &[u8]) -> bool {
    let body = if is_marker(line) { &line[3..] } else { line };
    let t = body.trim_ascii_start();
    !t.is_empty() && !t.starts_with(b"#")
}

/// NDJSON lines, or YAML documents made of lines.
fn lines(
    mut r: impl BufRead,
    yaml: bool,
    limits: Limits,
    emit: &mut dyn FnMut(Batch) -> bool,
) -> Result<(), SplitError> {
    let mut fill = Filling::new(limits);
    let mut line = Vec::new();
    // YAML: the document being read (its leading marker line included).
    let mut doc: Vec<u8> = Vec::new();
    let mut doc_content = false;
    let mut read = 0u64;
    let mut n = 0u64;
    let what = if yaml { "document" } else { "line" };
    let too_long = |n: u64| SplitError::TooLong {
        what,
        n,
        max: limits.bytes,
    };
    loop {
        line.clear();
        // One line at most a byte over the cap is read: a file without newlines cannot make
        // us hold more than that.
        let max = u64::try_from(limits.bytes)
            .unwrap_or(u64::MAX)
            .saturating_add(2);
        let got = (&mut r).take(max).read_until(b'\n', &mut line)?;
        if got as u64 >= max && !line.ends_with(b"\n") {
            return Err(too_long(n + 1));
        }
        read += got as u64;
        let end = got == 0;
        if !yaml {
            if end {
                break;
            }
            if is_blank(&line) {
                fill.batch.read_to = read;
                continue;
            }
            n += 1;
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            if fill.full_for(line.len()) && !fill.flush(emit) {
                return Ok(());
            }
            fill.batch.body.extend_from_slice(&line);
            fill.batch.events += 1;
            fill.batch.read_to = read;
            if fill.batch.events >= limits.events && !fill.flush(emit) {
                return Ok(());
            }
            continue;
        }
        // YAML: a marker line or the end finishes the document before it.
        let starts_doc = !end && line.starts_with(b"---") && is_marker(&line);
        if end || starts_doc {
            if doc_content {
                n += 1;
                if fill.full_for(doc.len()) && !fill.flush(emit) {
                    return Ok(());
                }
                if !fill.batch.body.is_empty() && !doc.starts_with(b"---") {
                    // A bare document after an explicit end (`...`) of the one before.
                    fill.batch.body.extend_from_slice(b"---\n");
                }
                fill.batch.body.extend_from_slice(&doc);
                if !doc.ends_with(b"\n") {
                    fill.batch.body.push(b'\n');
                }
                fill.batch.events += 1;
                fill.batch.read_to = read - got as u64;
                if fill.batch.events >= limits.events && !fill.flush(emit) {
                    return Ok(());
                }
            }
            doc.clear();
            doc_content = false;
            if end {
                break;
            }
        }
        if doc.len() + line.len() > limits.bytes {
            return Err(too_long(n + 1));
        }
        doc_content |= yaml_content(&line);
        doc.extend_from_slice(&line);
    }
    fill.batch.read_to = read;
    fill.flush(emit);
    Ok(())
}

/// BATCH frames, whole.
fn frames(
    mut r: impl Read,
    limits: Limits,
    emit: &mut dyn FnMut(Batch) -> bool,
) -> Result<(), SplitError> {
    use vx_proto::frames::{FrameType, HEAD_LEN, Head};
    let mut fill = Filling::new(limits);
    let mut read = 0u64;
    let mut n = 0u64;
    let max_body = u32::try_from(limits.bytes.saturating_sub(HEAD_LEN)).unwrap_or(u32::MAX);
    loop {
        let mut head = [0u8; HEAD_LEN];
        let got = read_full(&mut r, &mut head)?;
        if got == 0 {
            break;
        }
        n += 1;
        let bad = |reason: String| SplitError::Frame {
            n,
            at: read,
            reason,
        };
        if got < HEAD_LEN {
            return Err(bad("the input ends inside a frame header".into()));
        }
        let h = match Head::parse(&head, max_body) {
            Ok(Some(h)) => h,
            Ok(None) => return Err(bad("the input ends inside a frame header".into())),
            Err(_) => {
                return Err(SplitError::TooLong {
                    what: "frame",
                    n,
                    max: limits.bytes,
                });
            }
        };
        if h.frame_type() != Some(FrameType::Batch) {
            return Err(bad(format!("type 0x{:02x} is not a BATCH frame", h.ty)));
        }
        if fill.full_for(h.frame_len()) && !fill.flush(emit) {
            return Ok(());
        }
        let at = fill.batch.body.len();
        fill.batch.body.extend_from_slice(&head);
        fill.batch.body.resize(at + h.frame_len(), 0);
        if read_full(&mut r, &mut fill.batch.body[at + HEAD_LEN..])? < h.len as usize {
            return Err(bad("the input ends inside a frame".into()));
        }
        read += h.frame_len() as u64;
        fill.batch.events += 1;
        fill.batch.read_to = read;
        if fill.batch.events >= limits.events && !fill.flush(emit) {
            return Ok(());
        }
    }
    fill.flush(emit);
    Ok(())
}

/// Read until `buf` is full or the input ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Counts the bytes read through it, and fails a read once more than `max` bytes went by
/// since the last [`Counting::mark`] (one JSON element cannot grow without bound).
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
    max: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.read.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total.saturating_sub(self.mark.load(Ordering::Relaxed)) > self.max {
            return Err(io::Error::other(ELEMENT_TOO_LONG));
        }
        Ok(n)
    }
}

const ELEMENT_TOO_LONG: &str = "element too long";

fn json(
    input: impl Read,
    limits: Limits,
    emit: &mut dyn FnMut(Batch) -> bool,
) -> Result<(), SplitError> {
    let read = Arc::new(AtomicU64::new(0));
    let mark = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: input,
        read: Arc::clone(&read),
        mark: Arc::clone(&mark),
        // A read may bring a buffer's worth beyond the element itself.
        max: u64::try_from(limits.bytes).unwrap_or(u64::MAX) + (64 << 10),
    };
    let mut r = io::BufReader::new(counting);
    // Skip leading whitespace to see whether the input is an array.
    let first = loop {
        let buf = r.fill_buf()?;
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let c = buf[i];
                r.consume(i);
                break Some(c);
            }
            None if buf.is_empty() => break None,
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    };
    let Some(first) = first else {
        return Ok(());
    };
    let mut fill = Filling::new(limits);
    let mut n = 0u64;
    let mut stopped = false;
    let mut too_long = false;
    let mut element = |raw: Box<RawValue>| -> bool {
        n += 1;
        mark.store(read.load(Ordering::Relaxed), Ordering::Relaxed);
        let text = raw.get().as_bytes();
        if text.len() > limits.bytes {
            too_long = true;
            return false;
        }
        if fill.full_for(text.len() + 2) {
            fill.batch.body.push(b']');
            if !fill.flush(emit) {
                stopped = true;
                return false;
            }
        }
        fill.batch
            .body
            .push(if fill.batch.events == 0 { b'[' } else { b',' });
        fill.batch.body.extend_from_slice(text);
        fill.batch.events += 1;
        // Bytes the reader took in; its buffer may hold a little of what follows.
        fill.batch.read_to = read.load(Ordering::Relaxed);
        if fill.batch.events >= limits.events {
            fill.batch.body.push(b']');
            if !fill.flush(emit) {
                stopped = true;
                return false;
            }
        }
        true
    };
    let result = if first == b'[' {
        let mut de = serde_json::Deserializer::from_reader(&mut r);
        de.deserialize_seq(Elements(&mut element))
            .and_then(|()| de.end())
    } else {
        let mut result = Ok(());
        for raw in serde_json::Deserializer::from_reader(&mut r).into_iter::<Box<RawValue>>() {
            match raw {
                Ok(raw) => {
                    if !element(raw) {
                        break;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        result
    };
    if too_long {
        return Err(SplitError::TooLong {
            what: "event",
            n,
            max: limits.bytes,
        });
    }
    if stopped {
        return Ok(());
    }
    if let Err(e) = result {
        if e.is_io() && e.to_string().contains(ELEMENT_TOO_LONG) {
            return Err(SplitError::TooLong {
                what: "event",
                n: n + 1,
                max: limits.bytes,
            });
        }
        if e.is_io() {
            return Err(SplitError::Read(io::Error::other(e.to_string())));
        }
        return Err(SplitError::Json(e.to_string()));
    }
    if fill.batch.events > 0 {
        fill.batch.body.push(b']');
    }
    fill.batch.read_to = read.load(Ordering::Relaxed);
    fill.flush(emit);
    Ok(())
}

/// A JSON array read element by element, each handed to the callback as raw text; the
/// callback returns false to stop.
struct Elements<'a, F>(&'a mut F);

impl<'de, F: FnMut(Box<RawValue>) -> bool> Visitor<'de> for Elements<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
            if !(self.0)(raw) {
                return Err(de::Error::custom(STOPPED));
            }
        }
        Ok(())
    }
}

const STOPPED: &str = "stopped";

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str, format: Format, events: u64, bytes: usize) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        split(
            input.as_bytes(),
            format,
            Limits { events, bytes },
            &mut |b| {
                out.push((
                    String::from_utf8(b.body).unwrap_or_default(),
                    b.events,
                    b.first,
                ));
                true
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        out
    }

    #[test]
    fn ndjson_splits_on_lines_and_skips_blank_ones() {
        let b = all(
            "{\"a\":1}\n\n{\"a\":2}\n{\"a\":3}",
            Format::Ndjson,
            2,
            1 << 20,
        );
        assert_eq!(
            b,
            vec![
                ("{\"a\":1}\n{\"a\":2}\n".to_string(), 2, 0),
                ("{\"a\":3}\n".to_string(), 1, 2)
            ]
        );
        // The byte cap cuts before the line that would pass it.
        let b = all("{\"a\":1}\n{\"a\":2}\n", Format::Ndjson, 100, 10);
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn json_arrays_are_rejoined_in_batches() {
        let b = all(
            " [ {\"a\": 1}, {\"a\":[2]} ,{}]\n",
            Format::Json,
            2,
            1 << 20,
        );
        assert_eq!(
            b,
            vec![
                ("[{\"a\": 1},{\"a\":[2]}]".to_string(), 2, 0),
                ("[{}]".to_string(), 1, 2)
            ]
        );
        let b = all("{\"a\":1} {\"b\":2}", Format::Json, 10, 1 << 20);
        assert_eq!(b, vec![("[{\"a\":1},{\"b\":2}]".to_string(), 2, 0)]);
        assert!(all("[]", Format::Json, 10, 100).is_empty());
        let err = split(
            "[{\"a\":1},".as_bytes(),
            Format::Json,
            Limits {
                events: 10,
                bytes: 100,
            },
            &mut |_| true,
        );
        assert!(matches!(err, Err(SplitError::Json(_))), "{err:?}");
    }

    #[test]
    fn yaml_splits_on_document_markers() {
        let input = "stream: s\ntype: a\n---\nstream: s\ntext: |\n  --- not a marker\n...\n# c\n---\n- {stream: s}\n- {stream: t}\n";
        let b = all(input, Format::Yaml, 2, 1 << 20);
        assert_eq!(b.len(), 2);
        assert_eq!(
            b[0].0,
            "stream: s\ntype: a\n---\nstream: s\ntext: |\n  --- not a marker\n...\n# c\n"
        );
        assert_eq!(b[1].0, "---\n- {stream: s}\n- {stream: t}\n");
        assert_eq!((b[1].1, b[1].2), (1, 2));
    }

    fn frame(stream: &str, n: usize) -> Vec<u8> {
        use vx_proto::frames::{BatchHead, WireEvent, encode_batch};
        let ids: Vec<String> = (0..n).map(|i| format!("id-{i}")).collect();
        let evs: Vec<WireEvent<'_>> = ids
            .iter()
            .map(|id| WireEvent {
                stream,
                entity: None,
                ty: "t",
                ts: Some(1),
                kind: vx_proto::Kind::Event,
                value: None,
                id: Some(id),
                data: None,
            })
            .collect();
        let mut out = Vec::new();
        encode_batch(&mut out, &BatchHead::default(), &evs).unwrap_or_else(|e| panic!("{e}"));
        out
    }

    #[test]
    fn frames_are_sent_whole() {
        let (a, b, c) = (frame("s", 3), frame("s", 1), frame("t", 2));
        let input = [a.clone(), b.clone(), c.clone()].concat();
        let mut out = Vec::new();
        let limits = Limits {
            events: 2,
            bytes: 1 << 20,
        };
        split(&input[..], Format::Frames, limits, &mut |batch| {
            out.push(batch);
            true
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].body, [a.clone(), b].concat());
        assert_eq!((out[1].body.clone(), out[1].first), (c, 2));
        // Cut inside a frame, or a frame over the cap: errors.
        let cut = split(&a[..a.len() - 1], Format::Frames, limits, &mut |_| true);
        assert!(matches!(cut, Err(SplitError::Frame { .. })), "{cut:?}");
        let small = Limits {
            events: 2,
            bytes: 8,
        };
        let big = split(&a[..], Format::Frames, small, &mut |_| true);
        assert!(matches!(big, Err(SplitError::TooLong { .. })), "{big:?}");
    }

    #[test]
    fn a_line_past_the_cap_is_an_error_not_a_big_buffer() {
        let long = format!("{{\"a\":\"{}\"}}\n", "x".repeat(1000));
        let err = split(
            long.as_bytes(),
            Format::Ndjson,
            Limits {
                events: 10,
                bytes: 100,
            },
            &mut |_| true,
        );
        assert!(
            matches!(err, Err(SplitError::TooLong { n: 1, .. })),
            "{err:?}"
        );
        let arr = format!("[{}]", long.trim());
        let err = split(
            arr.as_bytes(),
            Format::Json,
            Limits {
                events: 10,
                bytes: 100,
            },
            &mut |_| true,
        );
        assert!(matches!(err, Err(SplitError::TooLong { .. })), "{err:?}");
    }
}
