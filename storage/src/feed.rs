//! The one path from the log to the feature tables: decode a checksum-verified record and
//! hand its contents, as typed values and in log order, to vx-features' apply interface. The
//! apply threads ([`crate::apply`]) call it for every record the writer made durable and for
//! every record start-up replays, each thread for the shards it owns ([`Part`]).
//!
//! What feeds the tables: event-batch records (unless `storage.features_from_events` is off,
//! as in cluster mode), entity-events records, feature puts and deletes, and resets of a
//! shard's feature tables. Tombstones and resets of a shard's streams change no feature.
//!
//! A part applies only what touches its shards: the events of its slice of the record's
//! [`Cut`] (or, for [`Part::WHOLE`], every event, sorted here), a put or delete target whose
//! entity it owns, a reset of a shard it owns. So every change is made once, by its shard's
//! owner, in log order.

use crate::api::OriginTopic;
use crate::features::parallel::{Cut, Key, Part};
use crate::features::{ApplyError, DirectApplied, Features, LogPos, Replay, entity_hash};
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
    /// An apply thread panicked while it applied the record's group (a bug): which of its
    /// changes reached the tables is unknown.
    #[error("an apply thread panicked: {0}")]
    Panicked(String),
}

impl From<Decode> for FeedError {
    fn from(e: Decode) -> Self {
        FeedError::Decode(e)
    }
}

/// What a part is to apply of a record, besides the record: which part, the record's cut
/// into the parts' slices (for an events record when there is more than one part), and
/// recovery's [`Replay`].
#[derive(Clone, Copy)]
pub(crate) struct Apply<'a> {
    pub part: Part,
    pub cut: Option<&'a Cut>,
    /// Set during recovery only.
    pub replay: Option<&'a Replay<'a>>,
    /// `storage.features_from_events`.
    pub from_events: bool,
}

/// Whether a record of this header feeds the tables events (`from_events`:
/// `storage.features_from_events`).
pub(crate) fn has_events(h: &Header, from_events: bool) -> bool {
    match h.ty {
        RecordType::Events => from_events,
        RecordType::EntityEvents => true,
        _ => false,
    }
}

/// Apply what of a checksum-verified record touches the shards of `how.part`.
pub(crate) fn apply_part(
    features: &Features,
    rec: &[u8],
    h: &Header,
    how: Apply<'_>,
) -> Result<DirectApplied, FeedError> {
    let at = LogPos {
        lsn: h.lsn,
        append_ms: h.append_ms,
    };
    let owns = |shard: u32| how.part.owns(shard, features.shards());
    if has_events(h, how.from_events) {
        match how.cut {
            Some(cut) if how.part.of > 1 => apply_slice(features, rec, h, at, cut, how),
            _ => apply_events(features, rec, h, at, how.replay),
        }?;
        return Ok(DirectApplied::default());
    }
    match h.ty {
        // Events that do not feed the tables (cluster mode's event batches), tombstones.
        RecordType::Events | RecordType::EntityEvents | RecordType::Tombstone => {
            Ok(DirectApplied::default())
        }
        RecordType::FeaturePut => {
            let (entity, set) = record::feature_put(rec, h.n)?;
            if !owns(features.shard_of(entity)) {
                return Ok(DirectApplied::default());
            }
            Ok(features.put(at, entity, &set, how.replay)?)
        }
        RecordType::FeatureIncr => {
            let (entity, name, by) = record::feature_incr(rec, h.n)?;
            if !owns(features.shard_of(entity)) {
                return Ok(DirectApplied::default());
            }
            Ok(features.incr(at, entity, name, by, how.replay)?)
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
                if owns(features.shard_of(entity)) {
                    sum += features.delete(at, entity, &names, how.replay)?;
                }
                names.clear();
            }
            Ok(sum)
        }
        RecordType::Reset => match record::reset(rec)? {
            (OriginTopic::Entities, shard) if owns(shard) => {
                features.reset_shard(at, shard, how.replay)?;
                Ok(DirectApplied::default())
            }
            _ => Ok(DirectApplied::default()),
        },
    }
}

/// Every event of the record, handed over at once: the tables apply them shard by shard
/// (vx-features' `RecordEvents::apply_all`).
fn apply_events(
    features: &Features,
    rec: &[u8],
    h: &Header,
    at: LogPos,
    replay: Option<&Replay<'_>>,
) -> Result<(), FeedError> {
    let mut events = features.events(at, replay)?;
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
    Ok(())
}

/// The events of one part's slice of the record's cut, decoded (only those) and applied in
/// the cut's shard order.
fn apply_slice(
    features: &Features,
    rec: &[u8],
    h: &Header,
    at: LogPos,
    cut: &Cut,
    how: Apply<'_>,
) -> Result<(), FeedError> {
    let slice = cut.part(how.part.index);
    if slice.is_empty() {
        return Ok(());
    }
    // The cut checked the runs; one that does not decode now was reported by it.
    let streams: Vec<&str> = record::runs(rec, h.n)
        .map_while(Result::ok)
        .map(|r| r.stream)
        .collect();
    let mut evs: Vec<EventView<'_>> = Vec::with_capacity(slice.len());
    let mut hashes: Vec<u64> = Vec::with_capacity(slice.len());
    let mut bad = None;
    for k in slice {
        let stream = streams.get(k.run as usize).copied().unwrap_or("");
        match rec
            .get(k.at as usize..)
            .ok_or(vx_proto::packed::DecodeError::Bad("event past its record"))
            .and_then(|b| vx_proto::packed::decode_event(b, stream))
        {
            Ok((ev, _)) => {
                evs.push(ev);
                hashes.push(k.hash);
            }
            Err(e) => {
                bad = Some(Decode::from(e));
                break;
            }
        }
    }
    features
        .events(at, how.replay)?
        .apply_sorted(&evs, &hashes)?;
    match bad {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// A record's events with an entity, for [`Cut::new`]: each event's entity hash, its
/// offset in the record and its run, read from the event headers alone (nothing else of an
/// event is decoded). On a run or event that does not decode, the keys before it and why.
pub(crate) fn keys(rec: &[u8], h: &Header) -> (Vec<Key>, Option<Decode>) {
    let mut keys = Vec::with_capacity((rec.len() / 48).min(1 << 16));
    for (i, run) in record::runs(rec, h.n).enumerate() {
        let run = match run {
            Ok(r) => r,
            Err(e) => return (keys, Some(e)),
        };
        let Ok(ri) = u32::try_from(i) else {
            return (keys, Some(Decode::Bad("too many runs")));
        };
        let base = run.at + run.len - run.events.len();
        for event in vx_proto::packed::entities(run.events) {
            let (at, entity) = match event {
                Ok(x) => x,
                Err(e) => return (keys, Some(e.into())),
            };
            let Some(entity) = entity else { continue };
            let Ok(off) = u32::try_from(base + at) else {
                return (keys, Some(Decode::Bad("event offset past 4GiB")));
            };
            keys.push(Key {
                hash: entity_hash(entity),
                at: off,
                run: ri,
            });
        }
    }
    (keys, None)
}
