//! Each stream's chain of nodes across sealed segments, so that memory keeps O(1) per stream
//! whatever the number of segments the stream spans.
//!
//! A stream's entries in the index files of the sealed segments that hold its events are the
//! nodes of a list, newest first; memory keeps only the newest node (the [`ChainHead`]). Each node
//! points to its parent (the stream's previous node) and to a *jump* node further back, chosen
//! as in Myers' applicative random-access lists ("An applicative random-access stack", 1983):
//! if the parent's jump and the jump's jump are equally far apart, jump to the jump's jump,
//! else to the parent. Jump lengths then grow like a skew-binary number system, so finding
//! the node that holds a `seq` takes O(log n) node reads, each a few `pread`s of an index
//! file. Every node also keeps the min/max `ts` over the nodes its jump skips, so the min/max
//! over any suffix of the chain (the retained nodes, after retention removed a prefix) is
//! O(log n) reads too.
//!
//! Linking a new node needs its parent, the parent's jump and the jump's jump, and their
//! aggregates: the [`ChainHead`] keeps them, so sealing a segment reads at most one older node per
//! stream (when the new node jumps, for the new jump's own jump).

use crate::index::idxfile::{Entry, NodeRef, TsRange};
use std::io;

/// The newest node of a stream's chain, with what linking the next node needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainHead {
    pub node: NodeRef,
    pub last_seq: u64,
    /// Aggregate over (jump, node].
    pub agg: TsRange,
    pub jump: NodeRef,
    /// The jump node's own aggregate (over (jump.jump, jump]).
    pub jump_agg: TsRange,
    pub jj: NodeRef,
}

impl ChainHead {
    /// The head for a node read from segment `seg`'s index.
    pub fn from_entry(seg: u64, e: &Entry) -> ChainHead {
        ChainHead {
            node: e.node(seg),
            last_seq: e.last_seq,
            agg: e.agg.unwrap_or(TsRange::EMPTY),
            jump: e.jump,
            jump_agg: e.jump_agg.unwrap_or(TsRange::EMPTY),
            jj: e.jj,
        }
    }
}

/// The chain fields of a new node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    pub depth: u64,
    pub parent: NodeRef,
    pub jump: NodeRef,
    pub jj: NodeRef,
    pub agg: TsRange,
    pub jump_agg: TsRange,
}

impl Links {
    pub fn fill(&self, e: &mut Entry) {
        e.depth = self.depth;
        e.parent = self.parent;
        e.jump = self.jump;
        e.jj = self.jj;
        e.agg = Some(self.agg);
        e.jump_agg = (!self.jump_agg.is_empty()).then_some(self.jump_agg);
    }
}

/// Link a new node (events `own`) after `prev`; `read` fetches an older node's entry.
pub fn link(
    prev: Option<&ChainHead>,
    own: TsRange,
    read: &mut dyn FnMut(NodeRef) -> io::Result<Entry>,
) -> io::Result<Links> {
    let Some(p) = prev else {
        return Ok(Links {
            depth: 1,
            parent: NodeRef::default(),
            jump: NodeRef::default(),
            jj: NodeRef::default(),
            agg: own,
            jump_agg: TsRange::EMPTY,
        });
    };
    let skew = !p.jump.is_none()
        && !p.jj.is_none()
        && p.node.depth - p.jump.depth == p.jump.depth - p.jj.depth;
    if skew {
        match read(p.jj) {
            // (jj, new] = {new} ∪ (jump, parent] ∪ (jj, jump].
            Ok(far) => {
                return Ok(Links {
                    depth: p.node.depth + 1,
                    parent: p.node,
                    jump: p.jj,
                    jj: far.jump,
                    agg: own.merge(p.agg).merge(p.jump_agg),
                    jump_agg: far.agg.unwrap_or(TsRange::EMPTY),
                });
            }
            // Retention removed that node: nothing will ever look that far back, so link
            // to the parent instead; the jumps grow again from here.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Links {
        depth: p.node.depth + 1,
        parent: p.node,
        jump: p.node,
        jj: p.jump,
        agg: own,
        jump_agg: p.agg,
    })
}

/// The node that holds `seq`, or the first node after it (`seq` in a gap): the node with the
/// greatest `first_seq ≤ seq`, or the oldest reachable one. `None` when `seq` is past the
/// head's last seq.
pub fn locate(
    head: &ChainHead,
    seq: u64,
    read: &mut dyn FnMut(NodeRef) -> io::Result<Entry>,
) -> io::Result<Option<(NodeRef, Entry)>> {
    if seq > head.last_seq {
        return Ok(None);
    }
    let mut at = head.node;
    loop {
        let e = read(at)?;
        if e.first_seq <= seq {
            return Ok(Some((at, e)));
        }
        at = if !e.jump.is_none() && e.jump.first_seq > seq {
            e.jump
        } else if !e.parent.is_none() {
            e.parent
        } else {
            return Ok(Some((at, e)));
        };
    }
}

/// Min/max `ts` over the nodes of depth ≥ `min_depth` (the retained ones); never reads a node
/// below that depth.
pub fn aggregate(
    head: &ChainHead,
    min_depth: u64,
    read: &mut dyn FnMut(NodeRef) -> io::Result<Entry>,
) -> io::Result<TsRange> {
    let mut acc = TsRange::EMPTY;
    let mut at = head.node;
    while !at.is_none() && at.depth >= min_depth {
        let e = read(at)?;
        if e.jump.is_none() {
            // A chain's first node: its aggregate is its own.
            return Ok(acc.merge(e.agg.unwrap_or(TsRange::EMPTY)));
        }
        if e.jump.depth + 1 >= min_depth {
            acc = acc.merge(e.agg.unwrap_or(TsRange::EMPTY));
            at = e.jump;
        } else {
            acc = acc.merge(e.own.unwrap_or(TsRange::EMPTY));
            at = e.parent;
        }
    }
    Ok(acc)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::index::idxfile::F_EVENTS;
    use std::collections::HashMap;

    /// A chain of `n` nodes, node i (1-based, segment i) holding seqs [10i, 10i+9] and ts
    /// i*3..i*3+2, but with node 7's min ts very small.
    fn build(n: u64) -> (ChainHead, HashMap<u64, Entry>) {
        let mut store: HashMap<u64, Entry> = HashMap::new();
        let mut head: Option<ChainHead> = None;
        for i in 1..=n {
            let own = TsRange {
                min_ts: if i == 7 { -100 } else { i as i64 * 3 },
                max_ts: i as i64 * 3 + 2,
            };
            let links = link(head.as_ref(), own, &mut |r| Ok(store[&r.seg].clone())).unwrap();
            let mut e = Entry {
                name: "s".into(),
                flags: F_EVENTS,
                first_seq: 10 * i,
                last_seq: 10 * i + 9,
                count: 10,
                own: Some(own),
                ..Entry::default()
            };
            links.fill(&mut e);
            head = Some(ChainHead::from_entry(i, &e));
            store.insert(i, e);
        }
        (head.unwrap(), store)
    }

    #[test]
    fn locate_finds_every_seq_in_logarithmic_reads() {
        for n in [1u64, 2, 3, 7, 64, 1000] {
            let (head, store) = build(n);
            let mut worst = 0;
            for seq in (0..10 * n + 20).step_by(3) {
                let mut reads = 0;
                let got = locate(&head, seq, &mut |r| {
                    reads += 1;
                    Ok(store[&r.seg].clone())
                })
                .unwrap();
                worst = worst.max(reads);
                if seq > 10 * n + 9 {
                    assert!(got.is_none());
                    continue;
                }
                let (at, e) = got.unwrap();
                let want = (seq / 10).max(1);
                assert_eq!((at.seg, e.first_seq), (want, want * 10), "seq {seq} of {n}");
            }
            let bound = 4 * (64 - n.leading_zeros() as u64) + 4;
            assert!(worst <= bound, "{worst} reads for {n} nodes");
        }
    }

    #[test]
    fn aggregate_over_every_suffix() {
        for n in [1u64, 2, 5, 9, 100] {
            let (head, store) = build(n);
            for min_depth in 1..=n + 1 {
                let mut reads = 0;
                let got = aggregate(&head, min_depth, &mut |r| {
                    reads += 1;
                    assert!(r.depth >= min_depth, "read a node below the suffix");
                    Ok(store[&r.seg].clone())
                })
                .unwrap();
                let want =
                    (min_depth..=n).fold(TsRange::EMPTY, |a, i| a.merge(store[&i].own.unwrap()));
                assert_eq!(got, want, "suffix from {min_depth} of {n}");
                assert!(reads <= 4 * (64 - n.leading_zeros() as u64) + 4);
            }
        }
    }
}
