//! The fanout scenario's ack table: when each seq of the run was acked, written by the
//! producers' lanes ([`crate::lanes`]) and read by the followers ([`crate::fanout`]) without a
//! lock, and [`parse_ack`], the seqs an ingest answer acked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When each seq of the run was acked, written by the producers and read by the followers.
/// A slot holds `(nanoseconds since origin + 1) << 1 | measured`: 0 is "not acked (yet)", and
/// `measured` says whether the request that wrote the event was meant to start inside the
/// measured window (the window a delivery counts in, like its ingest request).
pub struct AckTable {
    stream: String,
    origin: Instant,
    from: u64,
    slots: Box<[AtomicU64]>,
    /// The highest acked seq, 0 when none.
    last: AtomicU64,
    acked: AtomicU64,
}

/// What the table knows of a seq when a follower receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckState {
    Acked {
        at: Instant,
        measured: bool,
    },
    /// Inside the table, not acked yet: the follower got it before the producer got the ack
    /// (the server publishes at visibility), or no producer will (a timed-out request, a
    /// writer other than this run).
    Pending,
    /// Outside the table (before the start, or past every event this run could write).
    Unknown,
}

impl AckTable {
    pub fn new(stream: String, from: u64, capacity: usize) -> AckTable {
        AckTable {
            stream,
            origin: Instant::now(),
            from,
            slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            last: AtomicU64::new(0),
            acked: AtomicU64::new(0),
        }
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The first seq of the run.
    pub fn from(&self) -> u64 {
        self.from
    }

    fn index(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.from)?).ok()?;
        (i < self.slots.len()).then_some(i)
    }

    /// The seqs `first..=last` were acked at `at`.
    pub fn ack(&self, first: u64, last: u64, at: Instant, measured: bool) {
        if first > last {
            return;
        }
        let nanos = u64::try_from(at.saturating_duration_since(self.origin).as_nanos())
            .unwrap_or(u64::MAX >> 2)
            .min(u64::MAX >> 2);
        let v = ((nanos + 1) << 1) | u64::from(measured);
        for seq in first..=last {
            if let Some(i) = self.index(seq) {
                self.slots[i].store(v, Ordering::Release);
            }
        }
        self.acked.fetch_add(last - first + 1, Ordering::Relaxed);
        self.last.fetch_max(last, Ordering::Relaxed);
    }

    pub fn state(&self, seq: u64) -> AckState {
        let Some(i) = self.index(seq) else {
            return AckState::Unknown;
        };
        let v = self.slots[i].load(Ordering::Acquire);
        if v == 0 {
            return AckState::Pending;
        }
        AckState::Acked {
            at: self.origin + Duration::from_nanos((v >> 1) - 1),
            measured: v & 1 == 1,
        }
    }

    /// The highest seq a producer saw acked.
    pub fn last_acked(&self) -> Option<u64> {
        let l = self.last.load(Ordering::Relaxed);
        (l >= self.from && l > 0).then_some(l)
    }

    /// Events acked (the sum of the acked requests' new events).
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Seqs of `from..=last` that no producer saw acked.
    pub fn unacked_through(&self, last: u64) -> u64 {
        (self.from..=last)
            .filter(|s| !matches!(self.state(*s), AckState::Acked { .. }))
            .count() as u64
    }
}

/// The new events of an ingest answer (docs/API.md §3) to a request of one stream: `accepted` and
/// the stream's `last_seq`, so its seqs are `last − accepted + 1 ..= last`.
pub fn parse_ack(body: &[u8], stream: &str) -> Option<(u64, u64)> {
    #[derive(serde::Deserialize)]
    struct Ack {
        accepted: u64,
        last_seq: std::collections::HashMap<String, u64>,
    }
    let a: Ack = serde_json::from_slice(body).ok()?;
    let last = a.last_seq.get(stream).copied()?;
    (a.accepted <= last).then_some((a.accepted, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ack_table_knows_each_seq_its_window_and_what_was_never_acked() {
        let t = AckTable::new("s".into(), 10, 100);
        assert_eq!(t.last_acked(), None);
        let at = Instant::now();
        t.ack(10, 12, at, true);
        t.ack(14, 14, at + Duration::from_millis(3), false);
        t.ack(500, 501, at, true); // past the table: counted, not stored
        assert_eq!(t.last_acked(), Some(501));
        assert_eq!(t.acked(), 6);
        match t.state(11) {
            AckState::Acked { at: a, measured } => {
                assert!(a.max(at) - a.min(at) < Duration::from_micros(1));
                assert!(measured);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            t.state(14),
            AckState::Acked {
                measured: false,
                ..
            }
        ));
        assert_eq!(t.state(13), AckState::Pending);
        assert_eq!(t.state(9), AckState::Unknown);
        assert_eq!(t.state(110), AckState::Unknown);
        assert_eq!(t.unacked_through(14), 1);
        assert_eq!(
            parse_ack(
                br#"{"accepted":3,"duplicates":0,"last_seq":{"s":12},"durability":"fsync"}"#,
                "s"
            ),
            Some((3, 12))
        );
        assert_eq!(parse_ack(br#"{"accepted":3,"last_seq":{}}"#, "s"), None);
        assert_eq!(
            parse_ack(br#"{"accepted":3,"last_seq":{"s":2}}"#, "s"),
            None
        );
        assert_eq!(parse_ack(b"not json", "s"), None);
    }
}
