//! Single-node mode's writes: the router's admitted requests into the local log.

use super::{
    Change, Events, Features, FeaturesWritten, Pending, Reached, Refusal, StreamDeleted, Written,
    not_found, unknown_target,
};
use vx_router::{Reservation, Router, Submit};
use vx_storage::{FeatureOp, FeatureWrite};

pub(super) fn write(router: Router, events: Events, reservation: Reservation) -> Pending<Written> {
    Box::pin(async move {
        let req = Submit {
            batch: events.batch,
            durability: events.asked.local,
            expected_last_seq: events.expected_last_seq,
        };
        match router.write_admitted(req, reservation).await {
            Ok(a) => Ok(Written {
                accepted: a.outcome.accepted,
                duplicates: Some(a.outcome.duplicates),
                last_seq: Some(a.outcome.last_seq),
                durability: Reached::Local(a.outcome.durability),
                queue_fill: a.queue_fill,
                position: None,
                stages: a.outcome.stages,
            }),
            Err(e) => Err(Refusal::from_router(e)),
        }
    })
}

pub(super) fn features(router: Router, f: Features) -> Pending<FeaturesWritten> {
    let store = router.store();
    let op = match f.change {
        // A PUT of nothing writes no record.
        Change::Put(set) if set.is_empty() => {
            let d = f
                .asked
                .local
                .unwrap_or_else(|| store.fsync_mode().durability());
            return Box::pin(async move {
                Ok(FeaturesWritten {
                    set: 0,
                    added: 0,
                    deleted: 0,
                    found: 0,
                    incremented: None,
                    durability: Reached::Local(d),
                    position: None,
                })
            });
        }
        Change::Put(set) => FeatureOp::Put(set),
        Change::Delete(targets) => {
            // A delete of what does not exist writes no record.
            let features = store.features();
            let what = unknown_target(&targets);
            let found: Vec<_> = targets
                .into_iter()
                .filter(|(e, name)| features.exists(e, name.as_deref()))
                .collect();
            if found.is_empty() {
                return Box::pin(async move { Err(not_found(what)) });
            }
            FeatureOp::Delete(found)
        }
        Change::Incr { name, by } => FeatureOp::Incr { name, by },
    };
    let targets = match &op {
        FeatureOp::Delete(t) => t.len() as u64,
        FeatureOp::Put(_) | FeatureOp::Incr { .. } => 0,
    };
    let delete = matches!(op, FeatureOp::Delete(_));
    Box::pin(async move {
        let written = router
            .submit_features(FeatureWrite {
                entity: f.entity,
                op,
                durability: f.asked.local,
                guard: None,
                origin: None,
                append_ms: None,
            })
            .await;
        match written {
            // Deleted meanwhile, by a write ahead of this one.
            Ok((o, _)) if delete && !o.found => Err(not_found("unknown entity or feature".into())),
            Ok((o, _)) => Ok(FeaturesWritten {
                set: o.set,
                added: o.added,
                deleted: o.deleted,
                found: targets,
                incremented: o.incremented,
                durability: Reached::Local(o.durability),
                position: None,
            }),
            Err(e) => Err(Refusal::from_router(e)),
        }
    })
}

pub(super) async fn delete_stream(
    router: &Router,
    stream: &str,
    asked: super::Asked,
) -> Result<StreamDeleted, Refusal> {
    match router.store().delete(stream, asked.local, None).await {
        Ok(out) => Ok(StreamDeleted {
            last_seq: out.last_seq,
            durability: Reached::Local(out.durability),
            position: None,
        }),
        Err(error) => Err(Refusal::from_write(error)),
    }
}
