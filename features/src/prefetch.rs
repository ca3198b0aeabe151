//! Asking the CPU to start loading a cache line without waiting for it: the applier applies the
//! events of a record one after another, and an entity with windowed aggregates is several
//! dependent loads from its slot (the side allocation, then its buckets and sketch), each a
//! miss once the tables outgrow the caches. Started a few events ahead (`ordered.rs`, and a
//! pipeline of reads in `read.rs`), those misses overlap instead of following each other.

/// Start loading the cache line at `p` (any address: a prefetch never faults and changes
/// nothing a program can observe).
#[inline]
pub(crate) fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint; it reads nothing into the program, never faults (an
    // invalid address is ignored) and SSE, which it needs, is part of x86-64's baseline. The
    // intrinsic is `unsafe` only because it carries `#[target_feature]`.
    #[allow(unsafe_code)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Start loading the `bytes` bytes from `p`, a line at a time (every line they touch, however
/// `p` is aligned).
#[inline]
pub(crate) fn span<T>(p: *const T, bytes: usize) {
    let p = p.cast::<u8>();
    let skew = p as usize & 63;
    let first = p.wrapping_sub(skew);
    for off in (0..bytes + skew).step_by(64) {
        line(first.wrapping_add(off));
    }
}

/// Spans to load, noted as they are found and asked for later, many at once. Profiled on this
/// machine (AMD EPYC), the cycles of prefetches issued one at a time under a lock landed on
/// the prefetch itself and on the lock's release, as if each waited for its miss; issued
/// together after the locks they cost less (docs/BENCHMARKS.md, "Ingest with features"). Why
/// exactly (a locked instruction ordering the loads before it, or the prefetch's own page
/// walk) was not established.
#[derive(Default)]
pub struct Lines(smallvec::SmallVec<[(*const u8, usize); 8]>);

impl Lines {
    pub fn new() -> Lines {
        Lines::default()
    }

    /// Note the `bytes` bytes from `p` (any address: nothing is read).
    pub(crate) fn add<T>(&mut self, p: *const T, bytes: usize) {
        self.0.push((p.cast::<u8>(), bytes));
    }

    /// Start loading every span noted, and forget them.
    pub fn issue(&mut self) {
        for (p, n) in self.0.drain(..) {
            span(p, n);
        }
    }
}

/// The stages of the look-ahead (`ordered.rs`, and a pipeline of reads), in the order an
/// event goes through them: each loads what the next one reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// The index entry the look-up starts at (its address comes from the hash alone).
    Index,
    /// The entity's slot (the entry says where).
    Slot,
    /// The record's side allocation (the slot points at it); only for events of a type with
    /// declared aggregates, as the next.
    Side,
    /// The held states' buckets and sketches.
    States,
}
