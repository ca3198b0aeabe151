//! The `position` of a write in cluster mode (the body's `position`, `X-Vx-Position`), and
//! what `X-Vx-Min-Position` asks of a read. It is opaque to clients: they pass it back as
//! they got it. Inside, it is the Kafka offset of each record the write made, one per
//! partition it touched: `1:3@1052,17@998,e5@40` (version 1, then `partition@offset` pairs,
//! partitions of `T` first, those of `T.entities` — feature writes — marked `e`). A read of
//! a shard with a minimum position waits until that shard's owner has applied the
//! position's offset of that partition; a shard the position does not name is not waited
//! for. Positions of several writes merge by taking the larger offset per partition.

use crate::names::Topic;
use std::collections::BTreeMap;

/// Per partition of `T` or `T.entities`, an offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Position(BTreeMap<(Topic, u32), u64>);

/// A string that is not a position.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a position (pass back the X-Vx-Position of a write, unchanged)")]
pub struct BadPosition(pub String);

impl Position {
    pub fn new() -> Position {
        Position::default()
    }

    /// Add `offset` of `partition` of `topic` (the larger one wins).
    pub fn add(&mut self, topic: Topic, partition: u32, offset: u64) {
        let e = self.0.entry((topic, partition)).or_insert(offset);
        *e = (*e).max(offset);
    }

    /// The offset this position asks of `partition` of `topic`, if any.
    pub fn get(&self, topic: Topic, partition: u32) -> Option<u64> {
        self.0.get(&(topic, partition)).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Topic, u32, u64)> + '_ {
        self.0.iter().map(|(&(t, p), &o)| (t, p, o))
    }

    pub fn parse(s: &str) -> Result<Position, BadPosition> {
        let bad = || BadPosition(s.chars().take(64).collect());
        let rest = s.trim().strip_prefix("1:").ok_or_else(bad)?;
        let mut p = Position::new();
        if rest.is_empty() {
            return Ok(p);
        }
        for pair in rest.split(',') {
            let (part, off) = pair.split_once('@').ok_or_else(bad)?;
            let (topic, part) = match part.strip_prefix('e') {
                Some(rest) => (Topic::Entities, rest),
                None => (Topic::Streams, part),
            };
            let part: u32 = part.parse().map_err(|_| bad())?;
            let off: u64 = off.parse().map_err(|_| bad())?;
            p.add(topic, part, off);
        }
        Ok(p)
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("1:")?;
        for (i, ((t, p), o)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let mark = if *t == Topic::Entities { "e" } else { "" };
            write!(f, "{mark}{p}@{o}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn positions_print_parse_and_merge() {
        let mut p = Position::new();
        p.add(Topic::Streams, 17, 998);
        p.add(Topic::Streams, 3, 1052);
        p.add(Topic::Streams, 3, 7);
        p.add(Topic::Entities, 3, 40);
        assert_eq!(p.to_string(), "1:3@1052,17@998,e3@40");
        assert_eq!(Position::parse(&p.to_string()).unwrap(), p);
        assert_eq!(p.get(Topic::Streams, 3), Some(1052));
        assert_eq!(p.get(Topic::Entities, 3), Some(40));
        assert_eq!(p.get(Topic::Streams, 4), None);
        assert!(Position::parse("1:").unwrap().is_empty());
        for bad in [
            "", "2:1@1", "1:x@1", "1:1@", "1:1", "1:1@-3", "3@1", "1:ee1@1",
        ] {
            assert!(Position::parse(bad).is_err(), "{bad}");
        }
    }
}
