//! Cluster mode's requests within a group: origins (each record consumed from a Kafka
//! partition carries its offset, refused unless above what the partition applied), entity
//! events (events for the feature tables only), and resets (one shard's local copy
//! discarded). Single-node mode never sends any of them: a request without an origin plans
//! exactly as before.

use super::plan::Scratch;
use crate::api::*;
use crate::apply::Applier;
use crate::log::record::{RecordBuilder, RecordType};
use crate::log::state::LogWriter;
use vx_proto::Batch;

impl LogWriter {
    /// Refuse an origin that is not above the last offset of its partition, applied or
    /// planned earlier in this group: origins of a partition arrive in offset order, so it
    /// was applied already (or the caller lost its place).
    pub(super) fn check_origin(
        &self,
        origin: Option<Origin>,
        scratch: &Scratch,
    ) -> Result<(), WriteError> {
        let Some(o) = origin else {
            return Ok(());
        };
        if o.partition >= self.shards {
            return Err(WriteError::UnknownShard {
                shard: o.partition,
                shards: self.shards,
            });
        }
        let key = (o.topic, o.partition);
        let last = scratch
            .origins
            .get(&key)
            .or_else(|| self.origins.applied.get(&key))
            .copied();
        match last {
            Some(applied) if o.offset <= applied => Err(WriteError::OriginNotAfter {
                topic: o.topic,
                partition: o.partition,
                offset: o.offset,
                applied,
            }),
            _ => Ok(()),
        }
    }

    /// A record of no runs that only carries `origin` (a request whose events were all
    /// duplicates, checked by the caller). Returns its range in the group buffer.
    pub(super) fn origin_only(
        &mut self,
        origin: Origin,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(usize, usize), WriteError> {
        let buf = &mut scratch.buf;
        let start = buf.len();
        let rb =
            RecordBuilder::begin_with(buf, RecordType::Events, self.next_lsn, now, Some(origin));
        let len = rb.finish(buf)?;
        self.next_lsn += 1;
        scratch.note_origin(Some(origin));
        Ok((start, start + len))
    }

    /// An entity-events record: the batch's runs as they are (base seq 0), for the feature
    /// tables only: no stream, seq or dedup state changes. The feature budget is reserved as
    /// for an event batch.
    pub(super) fn plan_entity_events(
        &mut self,
        applier: &Applier,
        batch: &Batch,
        origin: Origin,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(usize, usize), WriteError> {
        self.check_origin(Some(origin), scratch)?;
        if !self.reserve_features(applier, batch, scratch)
            && self.over_limit("storage.max_feature_bytes")
        {
            return Err(WriteError::FeatureBudget {
                max: self.cfg.max_feature_bytes,
            });
        }
        let buf = &mut scratch.buf;
        let start = buf.len();
        let built = (|| -> Result<usize, WriteError> {
            let mut rb = RecordBuilder::begin_with(
                buf,
                RecordType::EntityEvents,
                self.next_lsn,
                now,
                Some(origin),
            );
            for run in batch.runs() {
                rb.begin_run(buf, batch.stream(run), 0, run.count);
                buf.extend_from_slice(&run.events);
                rb.end_run(buf)?;
            }
            Ok(rb.finish(buf)?)
        })();
        let len = match built {
            Ok(len) => len,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        };
        self.next_lsn += 1;
        scratch.note_origin(Some(origin));
        Ok((start, start + len))
    }

    /// A reset record of `target` of `shard`. Nothing changes until it is applied (a reset
    /// is a group of its own).
    pub(super) fn plan_reset(
        &mut self,
        target: OriginTopic,
        shard: u32,
        now: i64,
        scratch: &mut Scratch,
    ) -> Result<(usize, usize), WriteError> {
        if shard >= self.shards {
            return Err(WriteError::UnknownShard {
                shard,
                shards: self.shards,
            });
        }
        let buf = &mut scratch.buf;
        let start = buf.len();
        let mut rb = RecordBuilder::begin(buf, RecordType::Reset, self.next_lsn, now);
        rb.reset(buf, target, shard);
        let len = rb.finish(buf)?;
        self.next_lsn += 1;
        Ok((start, start + len))
    }

    /// The part of applying a durable reset that is on disk: a reset of a shard's streams
    /// drops their carry entries (orphans and tombstones) before memory forgets them. A
    /// failure poisons the store: a later write would continue a forgotten stream's seqs
    /// from the carry file; a restart drops them again from the reset in the log.
    pub(super) fn reset_carry(
        &mut self,
        target: OriginTopic,
        shard: u32,
    ) -> Result<(), WriteError> {
        if target != OriginTopic::Streams {
            return Ok(());
        }
        self.carry_drop_shard(shard).map_err(|e| {
            let failure = IoFailure::new(
                format!("rewriting the carry file for a reset of shard {shard}"),
                e,
            );
            self.shared.poison.set(failure.clone());
            WriteError::Poisoned(failure.into())
        })
    }
}
