//! The storage engine's hooks into the metrics: called from the writer thread, atomics only.

use super::Timed;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use std::time::Duration;
use vx_storage::Observer;

/// Storage engine hooks, called from the writer thread: atomics only.
#[derive(Debug)]
pub struct StorageObserver {
    pub(super) fsync: Timed,
    pub(super) events: Counter,
    pub(super) bytes: Counter,
    pub(super) records: Counter,
    pub(super) seal: Histogram,
}

impl Observer for StorageObserver {
    fn fsync(&self, took: Duration) {
        self.fsync.observe(took);
    }

    fn appended(&self, records: u64, events: u64, bytes: u64) {
        self.records.inc_by(records);
        self.events.inc_by(events);
        self.bytes.inc_by(bytes);
    }

    fn sealed(&self, took: Duration) {
        self.seal.observe(took.as_secs_f64());
    }
}
