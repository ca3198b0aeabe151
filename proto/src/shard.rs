//! The stream → shard hash of docs/API.md §1.4: xxh3-64 of the stream's bytes, mod the shard count.
//! It lives here, beside the event model, because the router (admission) and the storage
//! engine (per-shard state) must agree on it and neither may depend on the other's internals.

/// Name of the hash recorded in the data dir, so that a future change is detected at start-up.
pub const HASH_NAME: &str = "xxh3-64";

pub fn shard_of(stream: &str, shards: u32) -> u32 {
    shard_of_hash(xxhash_rust::xxh3::xxh3_64(stream.as_bytes()), shards)
}

/// [`shard_of`] for a name whose xxh3-64 the caller already has (and uses for more).
pub fn shard_of_hash(hash: u64, shards: u32) -> u32 {
    let shards = u64::from(shards.max(1));
    // The remainder is < shards ≤ u32::MAX, so the narrowing cannot truncate.
    (hash % shards) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_range_and_deterministic() {
        for n in [1u32, 2, 7, 128] {
            let a = shard_of("match-42", n);
            assert!(a < n);
            assert_eq!(a, shard_of("match-42", n));
        }
        assert_eq!(shard_of("x", 1), 0);
    }
}
