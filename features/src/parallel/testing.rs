//! A [`Group`] of records given as packed batches (vx-proto's [`Batch`], the log's event
//! layout) rather than log records, for tests and the apply benchmark (feature `testing`):
//! what the storage engine's group does with a record (one thread cuts it from the event
//! headers alone, each thread decodes and applies only its slice), without the record
//! format around the runs.

use super::{Claims, Cut, Group, Key, Part};
use crate::{ApplyError, Features, LogPos, entity_hash};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use vx_proto::packed::{decode_event, entities};
use vx_proto::{Batch, EventView};

/// A record at its place in the log: a packed batch, its events' `ts` moved by `ts_shift` (so
/// that the same batch can be applied again later in event time).
#[derive(Clone)]
pub struct Record {
    pub at: LogPos,
    pub batch: Arc<Batch>,
    pub ts_shift: i64,
}

impl Record {
    /// The events of `evs` as one record at `at`.
    pub fn new(at: LogPos, evs: &[EventView<'_>]) -> Record {
        let mut batch = Batch::new();
        for ev in evs {
            // Events built by tests fit the layout (their fields are short).
            let _ = batch.push(ev);
        }
        Record {
            at,
            batch: Arc::new(batch),
            ts_shift: 0,
        }
    }

    /// The event at `at` of run `run`.
    fn event(&self, run: u32, at: u32) -> Option<EventView<'_>> {
        let r = self.batch.runs().get(run as usize)?;
        let (mut ev, _) = decode_event(r.events.get(at as usize..)?, self.batch.stream(r)).ok()?;
        ev.ts += self.ts_shift;
        Some(ev)
    }

    /// Every event, run by run.
    fn events(&self) -> Vec<EventView<'_>> {
        let mut out = Vec::with_capacity(self.batch.len());
        for r in self.batch.runs() {
            for ev in vx_proto::packed::events(&r.events, self.batch.stream(r)).flatten() {
                out.push(EventView {
                    ts: ev.ts + self.ts_shift,
                    ..ev
                });
            }
        }
        out
    }

    /// Its events with an entity, read from their headers alone.
    fn keys(&self) -> Vec<Key> {
        let mut keys = Vec::with_capacity(self.batch.len());
        for (ri, r) in self.batch.runs().iter().enumerate() {
            for (at, entity) in entities(&r.events).map_while(Result::ok) {
                if let (Some(e), Ok(a), Ok(run)) = (entity, u32::try_from(at), u32::try_from(ri)) {
                    keys.push(Key {
                        hash: entity_hash(e),
                        at: a,
                        run,
                    });
                }
            }
        }
        keys
    }
}

/// Records of events, each at its place in the log.
pub struct EventGroup {
    records: Vec<Record>,
    cuts: Claims<Cut>,
    /// The first refusal of any part.
    pub error: Mutex<Option<ApplyError>>,
    /// Parts that panicked.
    pub panics: Mutex<Vec<String>>,
    /// Set by `finish`: how many times it ran (once).
    pub finished: AtomicU64,
}

impl EventGroup {
    pub fn new(records: Vec<Record>) -> EventGroup {
        let n = records.len();
        EventGroup {
            records,
            cuts: Claims::new(n),
            error: Mutex::new(None),
            panics: Mutex::new(Vec::new()),
            finished: AtomicU64::new(0),
        }
    }

    fn apply_part(&self, features: &Features, part: Part) -> Result<(), ApplyError> {
        if part.of == 1 {
            for r in &self.records {
                features.events(r.at, None)?.apply_all(&r.events())?;
            }
            return Ok(());
        }
        self.cuts.make(|i| {
            let keys = self.records.get(i).map_or_else(Vec::new, Record::keys);
            Cut::new(features, keys, part.of)
        });
        let mut views = Vec::new();
        let mut hashes = Vec::new();
        for (i, r) in self.records.iter().enumerate() {
            let Some(cut) = self.cuts.get(i) else { break };
            let slice = cut.part(part.index);
            if slice.is_empty() {
                continue;
            }
            views.clear();
            hashes.clear();
            for k in slice {
                if let Some(ev) = r.event(k.run, k.at) {
                    views.push(ev);
                    hashes.push(k.hash);
                }
            }
            features.events(r.at, None)?.apply_sorted(&views, &hashes)?;
        }
        Ok(())
    }
}

impl Group for EventGroup {
    fn apply(&self, features: &Features, part: Part) {
        if let Err(e) = self.apply_part(features, part) {
            self.error.lock().get_or_insert(e);
        }
    }

    fn finish(&self, _: &Features) {
        self.finished.fetch_add(1, Ordering::AcqRel);
    }

    fn panicked(&self, _: &Features, why: &str) {
        self.panics.lock().push(why.to_string());
    }
}
