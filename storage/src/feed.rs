//! The one path from the log to the feature tables: decode a checksum-verified record and
//! hand its contents, as typed values and in log order, to vx-features' apply interface. The
//! writer calls it for every record it made durable, recovery for every record it replays.
//!
//! What feeds the tables: event-batch records (unless `storage.features_from_events` is off,
//! as in cluster mode), entity-events records, feature puts and deletes, and resets of a
//! shard's feature tables. Tombstones and resets of a shard's streams change no feature.

use crate::api::OriginTopic;
use crate::features::{Ahead, ApplyError, DirectApplied, Features, LogPos, Replay};
use crate::record::{self, Decode, Header, RecordType};
use std::collections::VecDeque;
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

/// How many events before its apply an event enters each stage of the look-ahead
/// (`RecordEvents::prefetch`): far enough for each stage's load to arrive before the next
/// stage reads it, near enough that what is loaded is still in the cache.
const STAGES: [(usize, Ahead); 4] = [
    (16, Ahead::Index),
    (10, Ahead::Slot),
    (5, Ahead::Side),
    (2, Ahead::States),
];
const AHEAD: usize = STAGES[0].0;

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
            // Events are applied AHEAD behind the decoding, which asks the tables to start
            // loading each one's entity early (vx-features' `RecordEvents::prefetch`): an
            // entity with windowed aggregates is several dependent cache misses, and these
            // overlap across the events in between instead of following each other.
            let mut queue: VecDeque<EventView<'_>> = VecDeque::with_capacity(AHEAD + 1);
            for run in record::runs(rec, h.n) {
                let run = run?;
                for ev in vx_proto::packed::events(run.events, run.stream) {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(e) => {
                            // The events before a bad one are applied, as they would be
                            // without the look-ahead.
                            while let Some(ev) = queue.pop_front() {
                                events.apply(&ev)?;
                            }
                            return Err(Decode::from(e).into());
                        }
                    };
                    queue.push_back(ev);
                    // The event `d` before its apply is `d` from the front once the queue
                    // is full: at index len - 1 - (AHEAD - d).
                    for (d, stage) in STAGES {
                        if let Some(ev) = (queue.len() + d)
                            .checked_sub(AHEAD + 1)
                            .and_then(|i| queue.get(i))
                        {
                            events.prefetch(ev, stage);
                        }
                    }
                    if queue.len() > AHEAD
                        && let Some(ev) = queue.pop_front()
                    {
                        events.apply(&ev)?;
                    }
                }
            }
            while let Some(ev) = queue.pop_front() {
                events.apply(&ev)?;
            }
            Ok(DirectApplied::default())
        }
        RecordType::FeaturePut => {
            let (entity, set) = record::feature_put(rec, h.n)?;
            Ok(features.put(at, entity, &set, replay)?)
        }
        RecordType::FeatureDelete => {
            let (entity, name) = record::feature_delete(rec)?;
            Ok(features.delete(at, entity, name, replay)?)
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
