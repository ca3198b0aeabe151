//! Planning one request of a group: dedup, the conditional write, `storage.max_streams`,
//! `seq` assignment, and its record built into the group buffer. Nothing here touches the
//! disk; a group whose write fails is undone from what planning noted ([`Scratch::undo`]).

use crate::api::*;
use crate::apply::Applier;
use crate::features::FeatureValue;
use crate::index::memory::Placed;
use crate::index::samples::RunMark;
use crate::log::record::{RecordBuilder, RecordType};
use crate::log::state::{LogWriter, WState};
use hashbrown::{HashMap, HashSet};

/// Per-group scratch state, reused across groups.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) buf: Vec<u8>,
    /// Prior writer states, in touch order, to undo the group if its write fails.
    pub(super) undo: Vec<(Box<str>, Option<WState>)>,
    /// Ids assigned in this group, not yet in the dedup tables: their seq and the append
    /// time of their request (which the window counts from, as for the tables: cluster
    /// records carry their own, and how requests fall into groups must not matter).
    pub(super) pending: HashMap<u128, (u64, i64)>,
    /// Ids of the request being planned.
    pub(super) keys: HashSet<u128>,
    /// Origin offsets planned in this group, not yet applied: per (topic, partition), the
    /// largest (see `cluster.rs`).
    pub(super) origins: HashMap<(OriginTopic, u32), u64>,
    /// The feature budget this group's requests reserved, released once it is applied.
    pub(super) reserved: u64,
}

impl Scratch {
    /// A request with `origin` was planned: later ones of the group must be above it.
    pub(super) fn note_origin(&mut self, origin: Option<Origin>) {
        if let Some(o) = origin {
            let at = self
                .origins
                .entry((o.topic, o.partition))
                .or_insert(o.offset);
            *at = (*at).max(o.offset);
        }
    }
}

/// One stream's run of a planned record; offsets are relative to the group buffer until the
/// write places them.
pub(super) struct PlannedRun {
    pub(super) run: usize,
    pub(super) shard: u32,
    pub(super) floor: u64,
    pub(super) placed: Placed,
    /// Group-buffer offsets of the run header and of its record's end.
    pub(super) head_rel: usize,
    pub(super) rec_end_rel: usize,
    /// Where its events are sampled (see [`crate::index::samples`]): empty, without an
    /// allocation, for a run of at most 32 events and 4 KiB.
    pub(super) marks: Vec<RunMark>,
}

/// What planning one write request produced.
pub(super) struct WritePlan {
    pub(super) rec: Option<(usize, usize)>,
    pub(super) outcome: WriteOutcome,
    pub(super) runs: Vec<PlannedRun>,
    pub(super) ids: Vec<(u32, u128, u64)>,
}

/// A read the writer needs before it can plan a request failed: that request is refused
/// (507), and nothing was written.
pub(super) fn unreadable(context: &str, e: std::io::Error) -> WriteError {
    WriteError::StorageFull(IoFailure::new(context, e))
}

impl LogWriter {
    /// A direct feature write's record; returns its range in the group buffer and whether
    /// the entity (or feature) exists before the group (the answer of a `none` delete).
    pub(super) fn plan_feature(
        &mut self,
        applier: &Applier,
        fw: &FeatureWrite,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<((usize, usize), bool), WriteError> {
        self.check_origin(fw.origin, scratch)?;
        // Its budget and "found" read the entity as the log has it.
        applier.settle();
        let features = &self.shared.features;
        let reserved = match &fw.op {
            FeatureOp::Put(set) => features.reserve_put(&fw.entity, set),
            // At most one new number: what a PUT of one takes.
            FeatureOp::Incr { name, .. } => {
                features.reserve_put(&fw.entity, &[(name.clone(), Some(FeatureValue::Int(0)))])
            }
            FeatureOp::Delete(_) => Some(0),
        };
        match reserved {
            Some(n) => scratch.reserved += n,
            None if self.cfg.refuse_at_limits => {
                return Err(WriteError::FeatureBudget {
                    max: self.cfg.max_feature_bytes,
                });
            }
            None => {}
        }
        let found = match &fw.op {
            FeatureOp::Put(_) | FeatureOp::Incr { .. } => features.exists(&fw.entity, None),
            FeatureOp::Delete(targets) => targets
                .iter()
                .any(|(e, name)| features.exists(e, name.as_deref())),
        };
        let buf = &mut scratch.buf;
        let start = buf.len();
        let ty = match fw.op {
            FeatureOp::Put(_) => RecordType::FeaturePut,
            FeatureOp::Delete(_) => RecordType::FeatureDelete,
            FeatureOp::Incr { .. } => RecordType::FeatureIncr,
        };
        let mut rb = RecordBuilder::begin_with(buf, ty, self.next_lsn, now, fw.origin);
        match &fw.op {
            FeatureOp::Put(set) => rb.feature_put(buf, &fw.entity, set),
            FeatureOp::Delete(targets) => {
                rb.feature_delete(buf, targets.iter().map(|(e, n)| (e.as_str(), n.as_deref())))
            }
            FeatureOp::Incr { name, by } => rb.feature_incr(buf, &fw.entity, name, *by),
        }
        let len = match rb.finish(buf) {
            Ok(len) => len,
            Err(e) => {
                buf.truncate(start);
                return Err(e.into());
            }
        };
        self.next_lsn += 1;
        scratch.note_origin(fw.origin);
        Ok(((start, start + len), found))
    }

    /// Reserve the feature budget for `batch`'s events (added to the group's); false past the
    /// budget. Past the bound that reads no entity, the exact check reads the entities, so it
    /// waits for the feature tables to apply every group handed over first.
    pub(super) fn reserve_features(
        &mut self,
        applier: &Applier,
        batch: &vx_proto::Batch,
        scratch: &mut Scratch,
    ) -> bool {
        let features = &self.shared.features;
        let reserved = match features.reserve_bound(batch) {
            Some(n) => Some(n),
            None => {
                applier.settle();
                self.shared.features.reserve_events(batch)
            }
        };
        match reserved {
            Some(n) => {
                scratch.reserved += n;
                true
            }
            None => false,
        }
    }

    /// A limit is reached: whether to refuse (single-node), or to apply anyway and say so
    /// (cluster mode, where Kafka acknowledged the record already; rate-limited warning).
    pub(super) fn over_limit(&mut self, key: &'static str) -> bool {
        if self.cfg.refuse_at_limits {
            return true;
        }
        let now = vx_sys::now_ms();
        if now - self.limit_warned_ms >= 60_000 {
            self.limit_warned_ms = now;
            tracing::warn!(
                limit = key,
                "past a storage limit: applying an acknowledged cluster record anyway"
            );
        }
        false
    }

    /// A tombstone record for `stream`; returns its shard and last seq.
    pub(super) fn plan_delete(
        &mut self,
        stream: &str,
        origin: Option<Origin>,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(u32, u64), WriteError> {
        self.check_origin(origin, scratch)?;
        let not_found = || WriteError::NotFound {
            stream: stream.to_string(),
        };
        let st = self
            .state_of(stream)
            .map_err(|e| unreadable("reading the carry file", e))?
            .ok_or_else(not_found)?;
        if st.deleted {
            return Err(not_found());
        }
        let prior = self.streams.map.get(stream).copied();
        self.streams
            .load(stream, if prior.is_none() { Some(st) } else { None });
        scratch.undo.push((stream.into(), prior));
        let buf = &mut scratch.buf;
        let mut rb =
            RecordBuilder::begin_with(buf, RecordType::Tombstone, self.next_lsn, now, origin);
        rb.tombstone(buf, stream, st.last);
        rb.finish(buf)?;
        self.next_lsn += 1;
        scratch.note_origin(origin);
        self.streams.set(
            stream,
            WState {
                last: st.last,
                floor: st.last,
                deleted: true,
            },
        );
        Ok((vx_proto::shard::shard_of(stream, self.shards), st.last))
    }
}
