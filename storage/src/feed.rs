//! The one path from the log to the feature tables: decode a checksum-verified record and
//! hand its contents, as typed values and in log order, to vx-features' apply interface. The
//! writer calls it for every record it made durable, recovery for every record it replays.
//!
//! What feeds the tables: event-batch records (unless `storage.features_from_events` is off,
//! as in cluster mode), entity-events records, feature puts and deletes, and resets of a
//! shard's feature tables. Tombstones and resets of a shard's streams change no feature.

use crate::api::OriginTopic;
use crate::features::{
    Ahead, ApplyError, DirectApplied, Features, Lines, LogPos, RecordEvents, Replay,
};
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

/// Events are applied in steps of `STEP`; an event enters each stage of the look-ahead
/// (`RecordEvents::prefetch`) this many steps before the step that applies it: far enough for
/// each stage's loads to arrive before the next stage reads them, near enough that what is
/// loaded is still in the cache. A step notes the lines of a stage for `STEP` events under
/// the shard locks, then asks for all of them at once, after the locks (vx-features'
/// `Lines`: one at a time under a lock, each prefetch seemed to wait for its miss).
const STEP: usize = 8;
const STAGES: [(usize, Ahead); 4] = [
    (4, Ahead::Index),
    (3, Ahead::Slot),
    (2, Ahead::Side),
    (1, Ahead::States),
];
/// Events held back: the step applied now and the ones in the look-ahead.
const HELD: usize = (STAGES[0].0 + 1) * STEP;

/// One step: the look-ahead's stages for the steps after the first `STEP` events of `queue`,
/// then those events applied.
fn step<'a>(
    events: &mut RecordEvents<'a>,
    queue: &mut VecDeque<EventView<'a>>,
    lines: &mut Lines,
) -> Result<(), FeedError> {
    for (ahead, stage) in STAGES {
        let from = (ahead * STEP).min(queue.len());
        for ev in queue.range(from..(from + STEP).min(queue.len())) {
            events.prefetch(ev, stage, lines);
        }
    }
    lines.issue();
    for _ in 0..STEP {
        match queue.pop_front() {
            Some(ev) => events.apply(&ev)?,
            None => break,
        }
    }
    Ok(())
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
            // Events are applied in steps behind the decoding, which asks the tables to start
            // loading each one's entity some steps early (see `step`): an entity with windowed
            // aggregates is several dependent cache misses, and these overlap across the
            // events in between instead of following each other.
            let mut queue: VecDeque<EventView<'_>> = VecDeque::with_capacity(HELD);
            let mut lines = Lines::new();
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
                    if queue.len() == HELD {
                        step(&mut events, &mut queue, &mut lines)?;
                    }
                }
            }
            while !queue.is_empty() {
                step(&mut events, &mut queue, &mut lines)?;
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
