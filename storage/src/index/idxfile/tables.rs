//! The two tables a version 2 index file carries after its spans (cluster mode), as of the
//! end of its segment: the last applied origin offset of every partition, and the LSN of
//! every shard's last reset of its streams. Each is the whole table, not a change, so that
//! start-up needs only the newest index file and the active segment to restore them, whatever
//! retention removed before. A version 1 file carries neither: both are empty.
//!
//! ```text
//! origins (origins × 16 bytes), sorted by (topic, partition)
//!   0  u8     topic       0 = the streams topic, 1 = the entities topic
//!   1  [u8;3] 0
//!   4  u32    partition
//!   8  u64    offset      the largest origin offset applied of that partition
//! resets (resets × 16 bytes), sorted by shard
//!   0  u32    shard
//!   4  u32    0
//!   8  u64    lsn         the LSN of the shard's last reset of its streams
//! ```

use crate::api::{Origin, OriginTopic};
use crate::log::record::{Decode, Fields};

/// Bytes of one row of either table.
pub const ROW_LEN: usize = 16;

/// What an index file records besides its segment's streams (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    /// Per (topic, partition), the largest origin offset applied.
    pub origins: Vec<Origin>,
    /// Per shard whose streams were ever reset: the LSN of its last reset record.
    pub resets: Vec<(u32, u64)>,
}

impl Tables {
    pub fn is_empty(&self) -> bool {
        self.origins.is_empty() && self.resets.is_empty()
    }

    /// Both tables' bytes, sorted as the format says.
    pub(super) fn write(&self, out: &mut Vec<u8>) {
        let mut origins = self.origins.clone();
        origins.sort_unstable_by_key(|o| (o.topic, o.partition));
        for o in &origins {
            out.push(o.topic.as_u8());
            out.extend_from_slice(&[0; 3]);
            out.extend_from_slice(&o.partition.to_le_bytes());
            out.extend_from_slice(&o.offset.to_le_bytes());
        }
        let mut resets = self.resets.clone();
        resets.sort_unstable();
        for (shard, lsn) in &resets {
            out.extend_from_slice(&shard.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&lsn.to_le_bytes());
        }
    }

    /// Parse `origins` then `resets` rows from `b` (exactly their bytes).
    pub(super) fn parse(b: &[u8], origins: u32, resets: u32) -> Result<Tables, Decode> {
        let mut r = Fields::new(b);
        let mut t = Tables::default();
        for _ in 0..origins {
            let topic = OriginTopic::from_u8(r.u8()?).ok_or(Decode::Bad("unknown origin topic"))?;
            if r.arr::<3>()? != [0; 3] {
                return Err(Decode::Bad("index origin padding is not zero"));
            }
            t.origins.push(Origin {
                topic,
                partition: r.u32()?,
                offset: r.u64()?,
            });
        }
        for _ in 0..resets {
            let shard = r.u32()?;
            if r.u32()? != 0 {
                return Err(Decode::Bad("index reset padding is not zero"));
            }
            t.resets.push((shard, r.u64()?));
        }
        if r.pos() != b.len() {
            return Err(Decode::Bad("index tables length"));
        }
        Ok(t)
    }
}
