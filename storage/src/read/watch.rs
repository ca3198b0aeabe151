//! What followers of a stream wait on (docs/API.md §5 live replay): the stream's last visible `seq`
//! and how many times it was deleted, pushed by the log writer at the moment a group becomes
//! visible, so a follower never polls the index.
//!
//! Only watched streams cost anything: the writer looks a stream up here only while at least
//! one stream is watched, and an entry lives only while someone holds its receiver (entries
//! without receivers are dropped when next touched or at the next subscription).

use hashbrown::HashMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::watch;

/// What a follower sees of a stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visible {
    /// The last visible `seq` (0 for a stream never written).
    pub last_seq: u64,
    /// Tombstones applied since the watch began, and resets of the stream's shard (cluster
    /// mode; `last_seq` then goes back to 0): a change means the stream was deleted, even if
    /// it was written again before the follower looked (a counter, not a flag, for that).
    pub deletes: u64,
}

#[derive(Default)]
pub(crate) struct Watches {
    /// Entries in `map`, read without the lock on the writer's path.
    len: AtomicUsize,
    map: Mutex<HashMap<Box<str>, watch::Sender<Visible>>>,
}

impl Watches {
    /// Watch `stream`, whose last visible seq is `current()` (called under the lock, so no
    /// publication can fall between reading it and subscribing).
    pub fn subscribe(
        &self,
        stream: &str,
        current: impl FnOnce() -> u64,
    ) -> watch::Receiver<Visible> {
        let mut map = self.map.lock();
        map.retain(|_, tx| tx.receiver_count() > 0);
        let rx = match map.get(stream) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(Visible {
                    last_seq: current(),
                    deletes: 0,
                });
                map.insert(stream.into(), tx);
                rx
            }
        };
        self.len.store(map.len(), Ordering::Release);
        rx
    }

    /// The writer made events of `stream` up to `last_seq` visible.
    pub fn published(&self, stream: &str, last_seq: u64) {
        self.change(stream, |v| {
            if last_seq > v.last_seq {
                v.last_seq = last_seq;
                true
            } else {
                false
            }
        });
    }

    /// The writer made a tombstone of `stream` visible.
    pub fn deleted(&self, stream: &str, last_seq: u64) {
        self.change(stream, |v| {
            v.deletes += 1;
            v.last_seq = v.last_seq.max(last_seq);
            true
        });
    }

    /// The writer forgot every stream of `shard` (a reset): each watched one counts a delete
    /// and starts again from seq 0.
    pub fn reset_shard(&self, shard: u32, shards: u32) {
        if self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut map = self.map.lock();
        map.retain(|_, tx| tx.receiver_count() > 0);
        for (name, tx) in map.iter() {
            if vx_proto::shard::shard_of(name, shards) == shard {
                tx.send_modify(|v| {
                    v.deletes += 1;
                    v.last_seq = 0;
                });
            }
        }
        self.len.store(map.len(), Ordering::Release);
    }

    fn change(&self, stream: &str, f: impl FnOnce(&mut Visible) -> bool) {
        if self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut map = self.map.lock();
        let Some(tx) = map.get(stream) else {
            return;
        };
        if tx.receiver_count() == 0 {
            map.remove(stream);
            self.len.store(map.len(), Ordering::Release);
            return;
        }
        tx.send_if_modified(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_to_subscribers_and_forgets_unwatched_streams() {
        let w = Watches::default();
        w.published("a", 5); // nobody watches: nothing kept
        assert_eq!(w.len.load(Ordering::Relaxed), 0);
        let mut rx = w.subscribe("a", || 7);
        assert_eq!(rx.borrow_and_update().last_seq, 7);
        w.published("a", 6); // not newer: no wake-up
        assert!(!rx.has_changed().unwrap_or(true));
        w.published("a", 9);
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(rx.borrow_and_update().last_seq, 9);
        w.deleted("a", 9);
        w.published("a", 10);
        let v = *rx.borrow_and_update();
        assert_eq!(
            (v.last_seq, v.deletes),
            (10, 1),
            "a delete is seen after a rewrite"
        );
        drop(rx);
        w.published("a", 11);
        assert_eq!(w.len.load(Ordering::Relaxed), 0, "dropped once unwatched");
    }

    /// A reset of a shard counts a delete for its watched streams and starts them at 0.
    #[test]
    fn a_reset_counts_as_a_delete_of_the_shards_streams() {
        let w = Watches::default();
        let (a, b) = ("a", "b");
        let shard = |s: &str| vx_proto::shard::shard_of(s, 64);
        assert_ne!(shard(a), shard(b));
        let mut ra = w.subscribe(a, || 7);
        let mut rb = w.subscribe(b, || 9);
        w.reset_shard(shard(a), 64);
        assert_eq!(
            *ra.borrow_and_update(),
            Visible {
                last_seq: 0,
                deletes: 1
            }
        );
        assert!(!rb.has_changed().unwrap_or(true));
        assert_eq!(rb.borrow_and_update().last_seq, 9);
        w.published(a, 1);
        assert_eq!(
            ra.borrow_and_update().last_seq,
            1,
            "written again from seq 1"
        );
    }
}
