//! A request within a group: who waits for it and with what, and what it will apply once
//! durable.

use super::plan::PlannedRun;
use super::{DeleteReply, FeatureReply, Reply, UnitReply};
use crate::api::*;
use vx_proto::Batch;

/// Who is waiting for a planned request, and with what.
pub(super) enum Answer {
    Write(Option<Reply>, WriteOutcome),
    Delete(Option<DeleteReply>, DeleteOutcome),
    Feature(Option<FeatureReply>, FeatureOutcome),
    /// Entity events and resets: success and nothing more.
    Done(Option<UnitReply>),
}

/// A request planned within a group.
pub(super) struct Planned {
    pub(super) answer: Answer,
    pub(super) guard: Option<Box<dyn Send>>,
    pub(super) want: Durability,
    pub(super) batch: Option<Batch>,
    pub(super) runs: Vec<PlannedRun>,
    pub(super) tombstone: Option<(u32, String, u64)>,
    /// The request's record in the group buffer (start, end), to apply to the features.
    pub(super) rec: Option<(usize, usize)>,
    /// Dedup entries to commit once the record is visible: (shard, key, seq).
    pub(super) ids: Vec<(u32, u128, u64)>,
    /// The caller's span, for writes (disabled otherwise).
    pub(super) span: tracing::Span,
    /// The LSN of the request's record (none for a request of duplicates only).
    pub(super) lsn: Option<u64>,
    /// Cluster mode: where the request was consumed (applied with its record).
    pub(super) origin: Option<Origin>,
    /// Cluster mode: the shard (and what of it) the request's record resets.
    pub(super) reset: Option<(OriginTopic, u32)>,
    /// The record's append time: the group's clock, or the one a cluster record carries.
    pub(super) append_ms: Option<i64>,
    /// A write: when it was sent to the writer (its stages count from there).
    pub(super) sent: Option<std::time::Instant>,
}

impl Planned {
    /// A planned request with nothing to apply yet: the caller fills in what it has.
    pub(super) fn new(answer: Answer, guard: Option<Box<dyn Send>>, want: Durability) -> Planned {
        Planned {
            answer,
            guard,
            want,
            batch: None,
            runs: Vec::new(),
            tombstone: None,
            rec: None,
            ids: Vec::new(),
            span: tracing::Span::none(),
            lsn: None,
            origin: None,
            reset: None,
            append_ms: None,
            sent: None,
        }
    }

    pub(super) fn set_durability(&mut self, d: Durability) {
        match &mut self.answer {
            Answer::Write(_, o) => o.durability = d,
            Answer::Delete(_, o) => o.durability = d,
            Answer::Feature(_, o) => o.durability = d,
            Answer::Done(_) => {}
        }
    }

    pub(super) fn owed(&self) -> bool {
        match &self.answer {
            Answer::Write(r, _) => r.is_some(),
            Answer::Delete(r, _) => r.is_some(),
            Answer::Feature(r, _) => r.is_some(),
            Answer::Done(r) => r.is_some(),
        }
    }

    /// Send the answer if it is still owed. A refused request releases its reservation at
    /// once; an accepted one keeps it until it is applied.
    pub(super) fn answer(&mut self, res: Result<(), WriteError>) {
        if res.is_err() {
            self.guard = None;
        }
        match &mut self.answer {
            Answer::Write(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
            Answer::Delete(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
            Answer::Feature(reply, o) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res.map(|()| o.clone()));
                }
            }
            Answer::Done(reply) => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(res);
                }
            }
        }
    }
}
