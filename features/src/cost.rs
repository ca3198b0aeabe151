//! What the tables' parts cost against `storage.max_feature_bytes`, as functions of their
//! sizes: the allocator's size classes, an index table's growth, a state's and a key's bytes
//! outside their slot, a declared aggregate's largest state. They stand below the types and
//! the tables that use them (docs/FEATURES.md "The budget").

use crate::decl::{BUCKETS, FeatureValue};
use crate::hll::{EXACT_BYTES_MAX, HLL_LEVELS, HLL_M};
use crate::state::{Bucket, State};

pub(crate) const BUCKET_COST: u64 = std::mem::size_of::<Bucket>() as u64;

/// Bytes the allocator (mimalloc) hands out for a request of `n` bytes: its size classes are
/// 8-byte steps up to 64 bytes, then four per power of two; past 128 KiB an allocation gets
/// its own pages.
pub(crate) fn alloc_size(n: usize) -> u64 {
    if n == 0 {
        return 0;
    }
    if n <= 64 {
        return n.next_multiple_of(8) as u64;
    }
    if n > 128 << 10 {
        return n.next_multiple_of(4096) as u64;
    }
    let log2 = usize::BITS - 1 - (n - 1).leading_zeros();
    n.next_multiple_of((1usize << log2) / 4) as u64
}

/// The capacity an index table ([`crate::index`], hashbrown's policy) of `capacity` grows to
/// when it must hold `items`.
pub(crate) fn grown_capacity(capacity: usize, items: usize) -> usize {
    if items <= capacity {
        return capacity;
    }
    let want = items.max(capacity + 1);
    let buckets = if want < 8 {
        (want + 1).next_power_of_two().max(4)
    } else {
        (want * 8 / 7).next_power_of_two()
    };
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
}

/// What a feature's state keeps outside the slot.
pub(crate) fn state_heap(st: &State) -> u64 {
    match st {
        State::Plain {
            v: FeatureValue::Str(s),
            ..
        } => alloc_size(s.len()),
        State::Plain { .. } => 0,
        State::Win(b) if b.spilled() => alloc_size(b.capacity() * BUCKET_COST as usize),
        State::Win(_) => 0,
        State::Hll { regs, .. } => alloc_size(regs.capacity()),
    }
}

/// What an entity's key keeps outside its slot: a name over 22 bytes ([`Key`]).
pub(crate) fn key_heap(name: &str) -> u64 {
    if name.len() > 22 {
        alloc_size(name.len())
    } else {
        0
    }
}

/// The most a declared aggregate's state can come to (60 buckets, the dense windowed sketch,
/// an all-time `distinct`'s 16 exact values): what the budget reserves for one before it
/// exists, and for one event's update.
pub(crate) fn state_max_bytes(windowed_sketch: bool) -> u64 {
    let win = alloc_size(BUCKETS as usize * BUCKET_COST as usize);
    let hll = if windowed_sketch {
        alloc_size(HLL_M * HLL_LEVELS).max(alloc_size(EXACT_BYTES_MAX[1]))
    } else {
        alloc_size(HLL_M).max(alloc_size(EXACT_BYTES_MAX[0]))
    };
    win.max(hll)
}
