//! Anchors and aliases of the current document: an anchored node's events are recorded as
//! they pass (expanded: an alias inside is recorded as what it replays), and an alias
//! replays the recording. Recordings are charged against a per-document budget.

use std::rc::Rc;

use granit_parser::{ScalarStyle, Tag};
use hashbrown::HashMap;

use super::{Node, Problem};

/// A recorded node event.
#[derive(Clone, Debug)]
pub(super) enum Owned {
    Scalar {
        value: Box<str>,
        style: ScalarStyle,
        tag: Option<Box<Tag>>,
    },
    SeqStart(Option<Box<Tag>>),
    SeqEnd,
    MapStart(Option<Box<Tag>>),
    MapEnd,
}

impl Owned {
    fn of(node: &Node<'_>) -> Owned {
        let tag = |t: Option<&Tag>| t.map(|t| Box::new(t.clone()));
        match *node {
            Node::Scalar {
                value,
                style,
                tag: t,
            } => Owned::Scalar {
                value: value.into(),
                style,
                tag: tag(t),
            },
            Node::SeqStart { tag: t } => Owned::SeqStart(tag(t)),
            Node::SeqEnd => Owned::SeqEnd,
            Node::MapStart { tag: t } => Owned::MapStart(tag(t)),
            Node::MapEnd => Owned::MapEnd,
        }
    }

    pub(super) fn node(&self) -> Node<'_> {
        match self {
            Owned::Scalar { value, style, tag } => Node::Scalar {
                value,
                style: *style,
                tag: tag.as_deref(),
            },
            Owned::SeqStart(tag) => Node::SeqStart {
                tag: tag.as_deref(),
            },
            Owned::SeqEnd => Node::SeqEnd,
            Owned::MapStart(tag) => Node::MapStart {
                tag: tag.as_deref(),
            },
            Owned::MapEnd => Node::MapEnd,
        }
    }

    /// What a recording of this node is charged.
    fn cost(&self) -> usize {
        let tag = |t: &Option<Box<Tag>>| {
            t.as_ref()
                .map_or(0, |t| t.handle().len() + t.suffix().len() + 48)
        };
        32 + match self {
            Owned::Scalar { value, tag: t, .. } => value.len() + tag(t),
            Owned::SeqStart(t) | Owned::MapStart(t) => tag(t),
            Owned::SeqEnd | Owned::MapEnd => 0,
        }
    }
}

/// One anchor's recording.
#[derive(Debug)]
struct Recording {
    /// The node's events so far.
    events: Vec<Owned>,
    /// Depth of the document before the anchored node started.
    depth: usize,
    /// The node's events once it is complete (shared by every alias that replays it); until
    /// then an alias to it is recursive.
    done: Option<Rc<[Owned]>>,
    /// A document root: not recorded.
    root: bool,
}

/// The anchors of the current document.
#[derive(Debug, Default)]
pub(super) struct Anchors {
    by_id: HashMap<usize, Recording>,
    /// Ids of the recordings still open, innermost last.
    open: Vec<usize>,
    /// Collection depth in the document, replayed nodes included.
    depth: usize,
    /// Bytes charged to the recordings of this document.
    bytes: usize,
}

impl Anchors {
    pub(super) fn clear(&mut self) {
        self.by_id.clear();
        self.open.clear();
        self.depth = 0;
        self.bytes = 0;
    }

    /// Note `node` (which defines `anchor` if non-zero) in the open recordings.
    pub(super) fn pass(
        &mut self,
        node: &Node<'_>,
        anchor: usize,
        budget: usize,
    ) -> Result<(), Problem> {
        let starts = matches!(node, Node::MapStart { .. } | Node::SeqStart { .. });
        if anchor != 0 {
            self.by_id.insert(
                anchor,
                Recording {
                    events: Vec::new(),
                    depth: self.depth,
                    done: None,
                    root: self.depth == 0 && starts,
                },
            );
            self.open.push(anchor);
        }
        match node {
            Node::MapStart { .. } | Node::SeqStart { .. } => self.depth += 1,
            Node::MapEnd | Node::SeqEnd => self.depth = self.depth.saturating_sub(1),
            Node::Scalar { .. } => {}
        }
        if self.open.is_empty() {
            return Ok(());
        }
        let owned = Owned::of(node);
        for id in &self.open {
            if let Some(rec) = self.by_id.get_mut(id)
                && !rec.root
            {
                // Each open recording keeps its own copy, so each is charged.
                self.bytes = self.bytes.saturating_add(owned.cost());
                rec.events.push(owned.clone());
            }
        }
        if self.bytes > budget {
            return Err(Problem::TooLarge);
        }
        // Close the recordings this node completed (a scalar completes its own).
        while let Some(&id) = self.open.last() {
            match self.by_id.get_mut(&id) {
                Some(rec) if rec.depth == self.depth => {
                    rec.done = Some(Rc::from(std::mem::take(&mut rec.events)));
                    self.open.pop();
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// The events to replay for an alias to `id`, once its node is complete; `None` if the
    /// alias is inside the node it refers to (recursive).
    pub(super) fn replay(&self, id: usize) -> Option<Rc<[Owned]>> {
        self.by_id.get(&id).and_then(|r| r.done.clone())
    }
}
