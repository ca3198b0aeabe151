//! YAML bodies (docs/API.md §3): a stream of documents, each an event mapping or a sequence of them,
//! decoded from an [`io::Read`] as the bytes arrive, node by node, straight into the packed
//! events of a [`Batch`] — no document tree is built.
//!
//! # How
//! The parser is `granit-parser`, the event parser under serde-saphyr (the same crate and
//! version). Its events are walked by hand rather than through serde-saphyr's serde layer,
//! because the YAML rules of docs/API.md §3.2 need what that layer hides: the scalar's style and tag (the
//! 1.2 core schema, `stream: 42` as text, non-core tags refused), the document boundaries
//! (errors name the `document`), and each alias (its expansion counts against the event's
//! size). It is also about twice as fast (tests/yaml_throughput.rs).
//!
//! # Layout
//! - `chars`: bytes → `char`s for the parser, UTF-8 checked, with a cap on what the parser
//!   can buffer between two events.
//! - `scalar`: the core schema and the tag rules.
//! - `event`: one event mapping → an [`crate::EventView`], with the rules of docs/API.md §2.
//! - `data`: a `data` node → compact JSON.
//! - here: documents, anchors and aliases, positions in errors.
//!
//! # Anchors and aliases
//! An anchored node's events are recorded as they pass; an alias replays them through the
//! same path as parsed events (and into any recording still open, so recordings are already
//! expanded). Every replayed node counts towards the size of the event it lands in, so an
//! alias bomb fails at `ingest.max_event_bytes` of expansion, after work proportional to that
//! limit. Recordings live for their document and are capped at
//! [`ANCHOR_BUDGET_EVENTS`] × `ingest.max_event_bytes` bytes; a document root is never
//! recorded (only a recursive alias could refer to it).

mod anchors;
mod chars;
mod data;
mod event;
mod scalar;

#[cfg(test)]
mod tests;

use std::io::Read;
use std::rc::Rc;

use granit_parser::{ErrorKind, Event, Parser, ScalarStyle, ScanError, Span, Tag};

use self::anchors::Anchors;
use self::chars::{Chars, Guard};
use self::event::EventBuilder;
use self::scalar::{Scalar, collection_tag, resolve};
use super::{LIMIT_BODY_BYTES, LIMIT_DATA_DEPTH, LIMIT_EVENT_BYTES};
use crate::error::InputError;
use crate::packed::Batch;
use crate::rules::{MAX_DATA_DEPTH, data_too_deep};

/// Anchored nodes of one document may hold this many times `ingest.max_event_bytes`.
pub const ANCHOR_BUDGET_EVENTS: usize = 4;

/// Decode a whole YAML body from `reader` into `out`. `max_event_bytes` bounds one event
/// (alias expansions included) and what the decoder buffers; `max_body_bytes` bounds the
/// decoded request as a whole (`out`'s packed size): aliases let a small body name the same
/// large node in every event, so the expanded request, not only each event, must be held to
/// the body limit (413). `now_ms` is the `ts` of events that carry none. The caller bounds the
/// raw body itself (`ingest.max_body_bytes`).
///
/// On error, `out` may hold the events decoded before it; the request is refused whole.
pub fn decode_yaml<R: Read>(
    reader: R,
    max_event_bytes: usize,
    max_body_bytes: u64,
    now_ms: i64,
    out: &mut Batch,
) -> Result<(), InputError> {
    let guard = Rc::new(Guard::new(max_event_bytes));
    let chars = Chars::new(reader, Rc::clone(&guard));
    let mut options = granit_parser::Options::default();
    options.set_emit_comments(false);
    // JSON written as YAML flow (a replayed `data`) may have keys longer than YAML's usual
    // 1024-character implicit key.
    options.simple_key_max_lookahead = max_event_bytes.clamp(1024, 64 << 10);
    // A valid body nests at most a root sequence, an event mapping and 64 levels of `data`.
    // The scanner reads flow collections ahead of the events it hands out, so its own limit
    // is what trips first on deep flow nesting: set it there, and answer 413 like for JSON.
    options.flow_nesting_limit = MAX_DATA_DEPTH + 2;
    options.block_nesting_limit = MAX_DATA_DEPTH + 2;
    let mut parser = Parser::new_from_fallible_iter_with_options(chars, options);
    let mut doc = Documents::new(max_event_bytes, now_ms);
    doc.max_batch_bytes = usize::try_from(max_body_bytes).unwrap_or(usize::MAX);
    loop {
        let next = parser.next_event();
        guard.event_seen();
        match next {
            None => return Ok(()),
            Some(Err(e)) => {
                let err = match (guard.take_error(), e.kind()) {
                    (Some(err), _) => err,
                    (None, ErrorKind::RecursionLimitExceeded) => InputError::too_large(
                        LIMIT_DATA_DEPTH,
                        MAX_DATA_DEPTH as u64,
                        format!(
                            "the YAML nests deeper than an event's \"data\" may ({MAX_DATA_DEPTH} \
                             levels)"
                        ),
                    ),
                    (None, _) => InputError::malformed(format!("invalid YAML: {}", e.info())),
                };
                return Err(doc.locate(err, Pos::of_error(&e)));
            }
            Some(Ok((ev, span))) => doc.parsed(ev, &span, out)?,
        }
    }
}

/// A node event, from the parser or replayed from an anchor.
#[derive(Clone, Copy, Debug)]
enum Node<'a> {
    Scalar {
        value: &'a str,
        style: ScalarStyle,
        tag: Option<&'a Tag>,
    },
    SeqStart {
        tag: Option<&'a Tag>,
    },
    SeqEnd,
    MapStart {
        tag: Option<&'a Tag>,
    },
    MapEnd,
}

/// A rule broken inside a document, before its position is known.
#[derive(Debug)]
enum Problem {
    /// 422, naming a field if there is one.
    Invalid {
        field: Option<String>,
        message: String,
    },
    /// An error already built by a shared rule function.
    Input(InputError),
    /// 400.
    Malformed(String),
    /// 413: `data` nests too deep.
    TooDeep,
    /// 413: the event is over `ingest.max_event_bytes`.
    TooLarge,
}

impl Problem {
    /// A broken rule inside `data`.
    fn data(message: impl std::fmt::Display) -> Problem {
        Problem::Invalid {
            field: Some("data".into()),
            message: format!("field \"data\": {message}"),
        }
    }
}

/// 1-based line and column.
#[derive(Clone, Copy, Debug, Default)]
struct Pos {
    line: u64,
    column: u64,
}

impl Pos {
    fn of(span: &Span) -> Pos {
        Pos {
            line: span.start.line() as u64,
            column: span.start.col() as u64 + 1,
        }
    }

    fn of_error(e: &ScanError) -> Pos {
        Pos {
            line: e.marker().line() as u64,
            column: e.marker().col() as u64 + 1,
        }
    }
}

/// Where a document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DocumentState {
    /// Between documents.
    Between,
    /// A document started; its root node is next.
    Root,
    /// In a root sequence: an event mapping or the end is next.
    Items,
    /// In an event mapping; `in_seq` if it is an element of a root sequence.
    Event { in_seq: bool },
    /// The root node is complete.
    RootDone,
}

/// The document-level state of one body.
struct Documents {
    max_event_bytes: usize,
    /// The decoded request may not outgrow this (see [`decode_yaml`]).
    max_batch_bytes: usize,
    now_ms: i64,
    /// Index of the next event in the request.
    index: u64,
    /// Documents started so far.
    documents: u64,
    state: DocumentState,
    event: EventBuilder,
    /// Where the current event mapping starts, for the errors about the whole event.
    event_pos: Pos,
    anchors: Anchors,
}

impl Documents {
    fn new(max_event_bytes: usize, now_ms: i64) -> Documents {
        Documents {
            max_event_bytes,
            max_batch_bytes: usize::MAX,
            now_ms,
            index: 0,
            documents: 0,
            state: DocumentState::Between,
            event: EventBuilder::default(),
            event_pos: Pos::default(),
            anchors: Anchors::default(),
        }
    }

    /// Add what is known of the current position to `err`.
    fn locate(&self, mut err: InputError, pos: Pos) -> InputError {
        if self.documents > 0 && self.state != DocumentState::Between {
            err = err.at_document(self.documents - 1);
        }
        if matches!(self.state, DocumentState::Event { .. }) {
            err = err.at_index(self.index);
        }
        if pos.line > 0 {
            err = err.at_line(pos.line, pos.column);
        }
        err
    }

    fn problem(&self, p: Problem, pos: Pos) -> InputError {
        let err = match p {
            Problem::Invalid { field, message } => match field {
                Some(f) => InputError::invalid(f, message),
                None => InputError::invalid_event(message),
            },
            Problem::Input(e) => e,
            Problem::Malformed(m) => InputError::malformed(format!("invalid YAML: {m}")),
            Problem::TooDeep => data_too_deep(),
            Problem::TooLarge => {
                let max = self.max_event_bytes;
                InputError::too_large(
                    LIMIT_EVENT_BYTES,
                    max as u64,
                    format!(
                        "event {} is larger than {max} bytes (ingest.max_event_bytes), YAML \
                         alias expansions included",
                        self.index
                    ),
                )
            }
        };
        self.locate(err, pos)
    }

    /// One event from the parser.
    fn parsed(&mut self, ev: Event<'_>, span: &Span, out: &mut Batch) -> Result<(), InputError> {
        let pos = Pos::of(span);
        let (node, anchor) = match &ev {
            Event::DocumentStart(..) => {
                self.documents += 1;
                self.state = DocumentState::Root;
                self.anchors.clear();
                return Ok(());
            }
            Event::DocumentEnd => {
                self.state = DocumentState::Between;
                self.anchors.clear();
                return Ok(());
            }
            Event::Alias(id) => return self.alias(*id, pos, out),
            Event::Scalar(value, style, anchor, tag) => (
                Node::Scalar {
                    value: value.as_ref(),
                    style: *style,
                    tag: tag.as_deref(),
                },
                *anchor,
            ),
            Event::SequenceStart(_, anchor, tag) => (
                Node::SeqStart {
                    tag: tag.as_deref(),
                },
                *anchor,
            ),
            Event::SequenceEnd => (Node::SeqEnd, 0),
            Event::MappingStart(_, anchor, tag) => (
                Node::MapStart {
                    tag: tag.as_deref(),
                },
                *anchor,
            ),
            Event::MappingEnd => (Node::MapEnd, 0),
            // Stream start and end, and metadata events (not enabled).
            _ => return Ok(()),
        };
        let budget = self
            .max_event_bytes
            .saturating_mul(ANCHOR_BUDGET_EVENTS)
            .max(64 << 10);
        self.anchors
            .pass(&node, anchor, budget)
            .map_err(|p| self.problem(p, pos))?;
        self.node(&node, pos, out)
    }

    /// Replay the node `id` was defined on, at the alias's position.
    fn alias(&mut self, id: usize, pos: Pos, out: &mut Batch) -> Result<(), InputError> {
        let events = match self.anchors.replay(id) {
            Some(events) => events,
            None => {
                let p = Problem::Invalid {
                    field: None,
                    message: "a YAML alias refers to a node that contains it; recursive \
                              structures cannot be converted to JSON"
                        .into(),
                };
                return Err(self.problem(p, pos));
            }
        };
        let budget = self
            .max_event_bytes
            .saturating_mul(ANCHOR_BUDGET_EVENTS)
            .max(64 << 10);
        for owned in events.iter() {
            let node = owned.node();
            self.anchors
                .pass(&node, 0, budget)
                .map_err(|p| self.problem(p, pos))?;
            self.node(&node, pos, out)?;
        }
        Ok(())
    }

    fn node(&mut self, node: &Node<'_>, pos: Pos, out: &mut Batch) -> Result<(), InputError> {
        match self.state {
            DocumentState::Root | DocumentState::Items => {
                let top = self.state == DocumentState::Root;
                match *node {
                    Node::MapStart { tag } => {
                        collection_tag(tag, true).map_err(|e| {
                            let p = Problem::Invalid {
                                field: None,
                                message: e.to_string(),
                            };
                            self.problem(p, pos)
                        })?;
                        self.event.start();
                        self.event_pos = pos;
                        self.state = DocumentState::Event { in_seq: !top };
                        Ok(())
                    }
                    Node::SeqStart { tag } if top => {
                        collection_tag(tag, false).map_err(|e| {
                            let p = Problem::Invalid {
                                field: None,
                                message: e.to_string(),
                            };
                            self.problem(p, pos)
                        })?;
                        self.state = DocumentState::Items;
                        Ok(())
                    }
                    Node::SeqEnd if !top => {
                        self.state = DocumentState::RootDone;
                        Ok(())
                    }
                    Node::Scalar { value, style, tag }
                        if top && matches!(resolve(value, style, tag), Ok(Scalar::Null)) =>
                    {
                        // An empty (or null) document holds no events.
                        self.state = DocumentState::RootDone;
                        Ok(())
                    }
                    _ => {
                        let found = match node {
                            Node::SeqStart { .. } => "a sequence",
                            _ => "a scalar",
                        };
                        let message = if top {
                            format!(
                                "a YAML document must be an event mapping or a sequence of \
                                 them, found {found}"
                            )
                        } else {
                            format!("event {} must be a mapping, found {found}", self.index)
                        };
                        let err = InputError::invalid_event(message).at_index(self.index);
                        Err(self.locate(err, pos))
                    }
                }
            }
            DocumentState::Event { in_seq } => {
                let done = self
                    .event
                    .node(node, self.max_event_bytes)
                    .map_err(|p| self.problem(p, pos))?;
                if done {
                    match self.event.finish(self.now_ms) {
                        Ok(ev) => {
                            if let Err(e) = out.push(&ev) {
                                let err = InputError::from_pack(e).at_index(self.index);
                                return Err(self.locate(err, self.event_pos));
                            }
                        }
                        Err(p) => return Err(self.problem(p, self.event_pos)),
                    }
                    if out.mem_bytes() > self.max_batch_bytes {
                        let err = InputError::too_large(
                            LIMIT_BODY_BYTES,
                            self.max_batch_bytes as u64,
                            format!(
                                "the YAML body expands (through aliases) to more than {} bytes of                                  events",
                                self.max_batch_bytes
                            ),
                        );
                        return Err(self.locate(err, self.event_pos));
                    }
                    self.index += 1;
                    self.state = if in_seq {
                        DocumentState::Items
                    } else {
                        DocumentState::RootDone
                    };
                }
                Ok(())
            }
            DocumentState::Between | DocumentState::RootDone => Err(self.locate(
                InputError::malformed("invalid YAML: a node outside any document"),
                pos,
            )),
        }
    }
}
