//! One message of a group, planned: refused at once if the store is poisoned, else handed to
//! the planning of its kind (an event write, a stream delete, a feature write, cluster mode's
//! entity events and resets) and turned into a [`Planned`] request, or refused with the
//! error its planning gave. What each kind checks is in `write_plan.rs`, `plan.rs` and
//! `cluster.rs`.

use super::Msg;
use super::plan::Scratch;
use super::planned::{Answer, Planned};
use crate::api::*;
use crate::apply::Applier;
use crate::log::state::LogWriter;
use tokio::sync::oneshot;

impl LogWriter {
    /// Plan `msg` at the group's clock `now` (a cluster record's own append time wins);
    /// `None` if it was answered already (refused, or nothing to plan).
    pub(super) fn plan_msg(
        &mut self,
        applier: &Applier,
        msg: Msg,
        now: i64,
        scratch: &mut Scratch,
        span: &tracing::Span,
    ) -> Option<Planned> {
        if let Some(err) = self.poisoned() {
            msg.refuse(err);
            return None;
        }
        let visible_at = self.cfg.fsync.durability();
        match msg {
            Msg::Write(req, reply, caller, sent) => {
                span.follows_from(&caller);
                let want = req.durability.unwrap_or(visible_at);
                let now = req.append_ms.unwrap_or(now);
                let res = self.plan_write(applier, &req, now, scratch);
                let (plan, reply) = answered(res, reply)?;
                Some(Planned {
                    batch: Some(req.batch),
                    runs: plan.runs,
                    rec: plan.rec,
                    ids: plan.ids,
                    span: caller,
                    origin: req.origin,
                    append_ms: Some(now),
                    sent: Some(sent),
                    ..Planned::new(Answer::Write(Some(reply), plan.outcome), req.guard, want)
                })
            }
            Msg::Delete {
                stream,
                durability,
                origin,
                append_ms,
                reply,
            } => {
                let now = append_ms.unwrap_or(now);
                let want = durability.unwrap_or(visible_at);
                let res = self.plan_delete(&stream, origin, now, scratch);
                let ((shard, last_seq), reply) = answered(res, reply)?;
                let outcome = DeleteOutcome {
                    last_seq,
                    durability: Durability::None,
                };
                Some(Planned {
                    tombstone: Some((shard, stream, last_seq)),
                    origin,
                    append_ms: Some(now),
                    ..Planned::new(Answer::Delete(Some(reply), outcome), None, want)
                })
            }
            Msg::Feature(fw, reply) => {
                let want = fw.durability.unwrap_or(visible_at);
                let now = fw.append_ms.unwrap_or(now);
                let res = self.plan_feature(applier, &fw, now, scratch);
                let ((rec, found), reply) = answered(res, reply)?;
                let outcome = FeatureOutcome {
                    set: 0,
                    added: 0,
                    deleted: 0,
                    found,
                    incremented: None,
                    durability: Durability::None,
                };
                Some(Planned {
                    rec: Some(rec),
                    origin: fw.origin,
                    append_ms: Some(now),
                    ..Planned::new(Answer::Feature(Some(reply), outcome), fw.guard, want)
                })
            }
            Msg::EntityEvents {
                batch,
                origin,
                append_ms,
                reply,
            } => {
                let now = append_ms.unwrap_or(now);
                let res = self.plan_entity_events(applier, &batch, origin, now, scratch);
                let (rec, reply) = answered(res, reply)?;
                Some(Planned {
                    rec: Some(rec),
                    origin: Some(origin),
                    append_ms: Some(now),
                    ..Planned::new(Answer::Done(Some(reply)), None, visible_at)
                })
            }
            Msg::Reset {
                target,
                shard,
                reply,
            } => {
                let res = self.plan_reset(target, shard, now, scratch);
                let (rec, reply) = answered(res, reply)?;
                // Always fsynced (`needs_sync`): the carry file it rewrites must never be
                // ahead of the log.
                Some(Planned {
                    rec: Some(rec),
                    reset: Some((target, shard)),
                    ..Planned::new(Answer::Done(Some(reply)), None, Durability::Fsync)
                })
            }
            Msg::Shutdown => None,
        }
    }
}

/// A planning's result with whoever waits for its answer; or, refused, the error sent to
/// them and `None`.
fn answered<T, O>(
    res: Result<T, WriteError>,
    reply: oneshot::Sender<Result<O, WriteError>>,
) -> Option<(T, oneshot::Sender<Result<O, WriteError>>)> {
    match res {
        Ok(v) => Some((v, reply)),
        Err(e) => {
            let _ = reply.send(Err(e));
            None
        }
    }
}
