//! The one path from the log to the feature tables: decode a checksum-verified record and
//! hand its contents, as typed values and in log order, to vx-features' apply interface. The
//! writer calls it for every record it made durable, recovery for every record it replays.
//!
//! What feeds the tables: event-batch records (unless `storage.features_from_events` is off,
//! as in cluster mode), entity-events records, feature puts and deletes, and resets of a
//! shard's feature tables. Tombstones and resets of a shard's streams change no feature.

use crate::api::OriginTopic;
use crate::features::{ApplyError, DirectApplied, Features, LogPos, Replay};
use crate::record::{self, Decode, Header, RecordType};
use vx_proto::EventView;

/// A record the feature tables did not take.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The record does not decode, although its checksum matched: a bug in the writer.
    #[error("the record does not decode: {0:?}")]
    Decode(Decode),
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

impl From<Decode> for FeedError {
    fn from(e: Decode) -> Self {
        FeedError::Decode(e)
    }
}

/// Apply one checksum-verified record. `replay` is set during recovery only;
/// `from_events` is `storage.features_from_events`.
pub(crate) fn apply_record(
    features: &Features,
    rec: &[u8],
    h: &Header,
    replay: Option<&Replay<'_>>,
    from_events: bool,
) -> Result<DirectApplied, FeedError> {
    let at = LogPos {
        lsn: h.lsn,
        append_ms: h.append_ms,
    };
    match h.ty {
        RecordType::Events if !from_events => Ok(DirectApplied::default()),
        RecordType::Events | RecordType::EntityEvents => {
            let mut events = features.events(at, replay)?;
            // The record's events go over all at once: the tables apply them shard by shard
            // (vx-features' `RecordEvents::apply_all`).
            // Sized for events of a few dozen bytes, the smallest usual.
            let mut evs: Vec<EventView<'_>> = Vec::with_capacity((rec.len() / 48).min(1 << 16));
            for run in record::runs(rec, h.n) {
                let run = run?;
                for ev in vx_proto::packed::events(run.events, run.stream) {
                    match ev {
                        Ok(ev) => evs.push(ev),
                        Err(e) => {
                            // The events before a bad one are applied all the same.
                            events.apply_all(&evs)?;
                            return Err(Decode::from(e).into());
                        }
                    }
                }
            }
            events.apply_all(&evs)?;
            Ok(DirectApplied::default())
        }
        RecordType::FeaturePut => {
            let (entity, set) = record::feature_put(rec, h.n)?;
            Ok(features.put(at, entity, &set, replay)?)
        }
        RecordType::FeatureDelete => {
            let targets = record::feature_delete(rec, h.n)?;
            // Targets of one entity, next to each other (`HDEL` of several names), change it
            // under one lock; entities one after another (`DEL` of several).
            let mut sum = DirectApplied::default();
            let mut names: Vec<Option<&str>> = Vec::new();
            for (i, &(entity, name)) in targets.iter().enumerate() {
                names.push(name);
                if targets.get(i + 1).is_some_and(|(next, _)| *next == entity) {
                    continue;
                }
                sum += features.delete(at, entity, &names, replay)?;
                names.clear();
            }
            Ok(sum)
        }
        RecordType::Tombstone => Ok(DirectApplied::default()),
        RecordType::Reset => match record::reset(rec)? {
            (OriginTopic::Entities, shard) => {
                features.reset_shard(at, shard, replay)?;
                Ok(DirectApplied::default())
            }
            (OriginTopic::Streams, _) => Ok(DirectApplied::default()),
        },
    }
}
