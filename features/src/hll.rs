//! The `distinct` state: the values themselves while there are at most [`EXACT_MAX`] of
//! them (their 64-bit hashes: exact, but for a hash collision, about 1 in 10^17 for 16
//! values), then a HyperLogLog of 64 registers (standard error 1.04/√64 ≈ 13%; below ~160
//! distinct values linear counting is used; docs/FEATURES.md gives the measured error).
//!
//! Windowed, each kept value (and in the sketch each register, per level 1..=16) keeps the
//! tag of the newest bucket that saw it, so the count over any window suffix is exact while
//! exact, and exact HLL over that window once a sketch; a sketch whose every entry slid out
//! of the window is empty again, and counts exactly again. All time, the set turns into the
//! plain 64-byte sketch at its 17th value, for good.
//!
//! # Layouts of the state's bytes (`State::Hll`'s `regs`, also in snapshots as they are)
//!
//! | form | all time | windowed |
//! | --- | --- | --- |
//! | exact, no value | empty | empty |
//! | exact, `k` ≤ 16 values | `0xFF`, then `k` × u64 hash (LE) | `0xFF`, then `k` × (u64 hash (LE), u8 tag) |
//! | sketch | 64 registers, each a level 0..=16 | dense: 1024 bytes, `regs[r * 16 + l - 1]` the tag of the newest bucket in which register `r` reached level `l` (0: none); sparse: `(register, level - 1, tag)` triples sorted by register and level, at most 96 |
//!
//! A tag is `bucket mod 255 + 1`; entries are cleared once a window old, so a tag's age
//! relative to the newest bucket (`head`) is unambiguous. The forms cannot be mistaken for
//! one another: an exact set is never 64 (all time) or 1024 (windowed) bytes long, starts with
//! `0xFF`, where a register holds at most 16 and a sparse entry starts with a register below
//! 64. A sketch written before exact sets existed (format 3 snapshots) loads as a sketch.

use crate::decl::BUCKETS;

const HLL_BITS: u32 = 6;
/// Registers of a sketch: an all-time sketch is this many bytes.
pub(crate) const HLL_M: usize = 1 << HLL_BITS;
/// Levels a windowed sketch tracks per register: a dense windowed sketch is `M * LEVELS` bytes.
pub(crate) const HLL_LEVELS: usize = 16;
/// Values a `distinct` counts exactly before it turns into the sketch.
pub(crate) const EXACT_MAX: usize = 16;
/// The first byte of an exact set with values.
const EXACT: u8 = 0xFF;
/// Bytes of an exact set's value: the hash, and windowed its tag.
const fn entry_len(windowed: bool) -> usize {
    if windowed { 9 } else { 8 }
}
/// The most bytes an exact set takes: what the budget reserves for one.
pub(crate) const EXACT_BYTES_MAX: [usize; 2] = [1 + EXACT_MAX * 8, 1 + EXACT_MAX * 9];

/// An empty state: an exact set of no value (no bytes).
pub(crate) fn empty() -> Vec<u8> {
    Vec::new()
}

/// Whether `regs` is an exact set (rather than a sketch).
fn is_exact(regs: &[u8], windowed: bool) -> bool {
    let sketch = if windowed { HLL_M * HLL_LEVELS } else { HLL_M };
    regs.len() != sketch && regs.first().is_none_or(|&b| b == EXACT)
}

/// The values of an exact set: (hash, tag; 0 all time).
fn values(regs: &[u8], windowed: bool) -> impl Iterator<Item = (u64, u8)> + '_ {
    regs.get(1..)
        .unwrap_or(&[])
        .chunks_exact(entry_len(windowed))
        .map(|e| {
            let mut h = [0u8; 8];
            h.copy_from_slice(&e[..8]);
            (u64::from_le_bytes(h), e.get(8).copied().unwrap_or(0))
        })
}

/// Add one more value to an exact set (room for exactly it, so that the set's allocation is
/// what it holds).
fn push_value(regs: &mut Vec<u8>, h: u64, tag: Option<u8>) {
    let add = 8 + usize::from(tag.is_some()) + usize::from(regs.is_empty());
    regs.reserve_exact(add);
    if regs.is_empty() {
        regs.push(EXACT);
    }
    regs.extend_from_slice(&h.to_le_bytes());
    if let Some(t) = tag {
        regs.push(t);
    }
}

/// The register a value's hash `h` lands in, and the level it reaches there.
pub(crate) fn place(h: u64) -> (usize, u8) {
    let reg = (h >> (64 - HLL_BITS)) as usize;
    let rest = (h << HLL_BITS) | (1 << (HLL_BITS - 1));
    let rho = (rest.leading_zeros() + 1).min(HLL_LEVELS as u32) as u8;
    (reg, rho)
}

/// Add a value (its hash `h`) to an all-time state.
pub(crate) fn add_all_time(regs: &mut Vec<u8>, h: u64) {
    if !is_exact(regs, false) {
        let (reg, rho) = place(h);
        if let Some(r) = regs.get_mut(reg) {
            *r = (*r).max(rho);
        }
        return;
    }
    if values(regs, false).any(|(v, _)| v == h) {
        return;
    }
    if values(regs, false).count() < EXACT_MAX {
        push_value(regs, h, None);
        return;
    }
    // The 17th value: the sketch, for good.
    let mut sketch = vec![0u8; HLL_M];
    for v in values(regs, false).map(|(v, _)| v).chain([h]) {
        let (reg, rho) = place(v);
        if let Some(r) = sketch.get_mut(reg) {
            *r = (*r).max(rho);
        }
    }
    *regs = sketch;
}

/// Add a value (its hash `h`) in bucket `b` to a windowed state; false if `b` is a window
/// behind its newest bucket (late).
pub(crate) fn add_windowed(head: &mut i64, regs: &mut Vec<u8>, b: i64, h: u64) -> bool {
    if *head == i64::MIN {
        *head = b;
    }
    if b <= *head - BUCKETS {
        return false;
    }
    if b > *head {
        expire(regs, *head, b - *head);
        *head = b;
    }
    let tag = tag_of(b);
    if !is_exact(regs, true) {
        let (reg, rho) = place(h);
        add_to_sketch(regs, *head, tag, reg, rho);
        return true;
    }
    let newer = |t: u8| t == 0 || age(t, *head) > *head - b;
    let at = values(regs, true).position(|(v, _)| v == h);
    if let Some(i) = at {
        if let Some(t) = regs.get_mut(1 + i * 9 + 8)
            && newer(*t)
        {
            *t = tag;
        }
        return true;
    }
    if values(regs, true).count() < EXACT_MAX {
        push_value(regs, h, Some(tag));
        return true;
    }
    // The 17th value within the window: a sketch of them all, each at its own bucket.
    let kept: Vec<(u64, u8)> = values(regs, true).chain([(h, tag)]).collect();
    regs.clear();
    regs.shrink_to_fit();
    for (v, t) in kept {
        let (reg, rho) = place(v);
        add_to_sketch(regs, *head, t, reg, rho);
    }
    true
}

/// The window moved `shift` buckets past `old_head`: entries now a window old are cleared. A
/// sketch left with no entry is an exact set of no value again.
fn expire(regs: &mut Vec<u8>, old_head: i64, shift: i64) {
    let stays = |t: u8| t != 0 && age(t, old_head) + shift < BUCKETS;
    if is_exact(regs, true) {
        let kept: Vec<(u64, u8)> = values(regs, true).filter(|&(_, t)| stays(t)).collect();
        if kept.len() < values(regs, true).count() {
            regs.clear();
            regs.shrink_to_fit();
            for (v, t) in kept {
                push_value(regs, v, Some(t));
            }
        }
        return;
    }
    if regs.len() == HLL_M * HLL_LEVELS {
        for t in regs.iter_mut() {
            if *t != 0 && !stays(*t) {
                *t = 0;
            }
        }
        if regs.iter().all(|&t| t == 0) {
            *regs = Vec::new();
        }
        return;
    }
    let mut keep = 0;
    for i in (0..regs.len() / 3).map(|i| i * 3) {
        if stays(regs[i + 2]) {
            regs.copy_within(i..i + 3, keep);
            keep += 3;
        }
    }
    regs.truncate(keep);
    if regs.is_empty() {
        regs.shrink_to_fit();
    }
}

fn tag_of(b: i64) -> u8 {
    (b.rem_euclid(255) + 1) as u8
}

/// Add a placed value with bucket tag `tag` to a windowed sketch whose newest bucket is
/// `head`, keeping the newest tag per register and level.
///
/// Dense: `regs[r * LEVELS + (l - 1)]`. Sparse (while it holds at most [`HLL_SPARSE_MAX`]
/// entries, which small cardinalities do): the same entries as `(register, level - 1, tag)`
/// triples sorted by register and level, so an entity with a few dozen distinct values costs
/// a few hundred bytes instead of 1 KiB; it turns dense when it would pass that.
fn add_to_sketch(regs: &mut Vec<u8>, head: i64, tag: u8, reg: usize, rho: u8) {
    let new_age = age(tag, head);
    let newer = |t: u8| t == 0 || age(t, head) > new_age;
    if regs.len() == HLL_M * HLL_LEVELS {
        for l in 0..usize::from(rho) {
            if let Some(t) = regs.get_mut(reg * HLL_LEVELS + l)
                && newer(*t)
            {
                *t = tag;
            }
        }
        return;
    }
    // Sparse entries are sorted by (register, level): the register's levels are found with
    // one binary search and walked in order (levels 0..rho are consecutive entries).
    let key = |regs: &[u8], i: usize| (regs[i * 3], regs[i * 3 + 1]);
    let n = regs.len() / 3;
    let mut i = {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(regs, mid) < (reg as u8, 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    for l in 0..rho {
        if i < regs.len() / 3 && key(regs, i) == (reg as u8, l) {
            if newer(regs[i * 3 + 2]) {
                regs[i * 3 + 2] = tag;
            }
        } else {
            regs.splice(i * 3..i * 3, [reg as u8, l, tag]);
        }
        i += 1;
    }
    if regs.len() > HLL_SPARSE_MAX * 3 {
        let mut d = vec![0u8; HLL_M * HLL_LEVELS];
        for e in regs.chunks_exact(3) {
            if let Some(t) = d.get_mut(usize::from(e[0]) * HLL_LEVELS + usize::from(e[1])) {
                *t = e[2];
            }
        }
        *regs = d;
    }
}

/// Entries a sparse windowed sketch holds before it turns dense.
const HLL_SPARSE_MAX: usize = 96;

fn age(tag: u8, head: i64) -> i64 {
    let h = head.rem_euclid(255);
    (h - (i64::from(tag) - 1)).rem_euclid(255)
}

/// The registers over the window that ends `shift` buckets after `head`.
pub(crate) fn windowed_registers(regs: &[u8], head: i64, shift: i64) -> [u8; HLL_M] {
    let mut v = [0u8; HLL_M];
    let live = |t: u8| t != 0 && age(t, head) + shift < BUCKETS;
    if regs.len() == HLL_M * HLL_LEVELS {
        for (r, out) in v.iter_mut().enumerate() {
            for l in 0..HLL_LEVELS {
                if let Some(&t) = regs.get(r * HLL_LEVELS + l)
                    && live(t)
                {
                    *out = (l + 1) as u8;
                }
            }
        }
    } else if !is_exact(regs, true) {
        for e in regs.chunks_exact(3) {
            if live(e[2])
                && let Some(out) = v.get_mut(usize::from(e[0]))
            {
                *out = (*out).max(e[1] + 1);
            }
        }
    }
    v
}

/// The distinct values a state counts: all time (`shift` unused), or over the window that
/// ends `shift` buckets after `head`. Exact while exact; the sketch's estimate after.
pub(crate) fn count(regs: &[u8], windowed: bool, head: i64, shift: i64) -> f64 {
    if is_exact(regs, windowed) {
        let live = |t: u8| !windowed || age(t, head) + shift < BUCKETS;
        return values(regs, windowed).filter(|&(_, t)| live(t)).count() as f64;
    }
    if windowed {
        estimate(windowed_registers(regs, head, shift).into_iter())
    } else {
        estimate(regs.iter().copied())
    }
}

/// Whether `regs` is a valid state for a window (`windowed`) or all time (a snapshot's).
pub(crate) fn valid(regs: &[u8], windowed: bool) -> bool {
    if is_exact(regs, windowed) {
        let body = regs.get(1..).unwrap_or(&[]);
        let n = body.len() / entry_len(windowed);
        let hashes: Vec<u64> = values(regs, windowed).map(|(v, _)| v).collect();
        return body.len().is_multiple_of(entry_len(windowed))
            && (regs.is_empty() || (1..=EXACT_MAX).contains(&n))
            && (1..hashes.len()).all(|i| !hashes[..i].contains(&hashes[i]))
            && (!windowed || values(regs, true).all(|(_, t)| t != 0));
    }
    if !windowed {
        return regs.len() == HLL_M && regs.iter().all(|&r| usize::from(r) <= HLL_LEVELS);
    }
    regs.len() == HLL_M * HLL_LEVELS
        || (regs.len().is_multiple_of(3)
            && regs.len() <= HLL_SPARSE_MAX * 3
            && regs
                .chunks_exact(3)
                .all(|e| usize::from(e[0]) < HLL_M && usize::from(e[1]) < HLL_LEVELS)
            && regs
                .chunks_exact(3)
                .zip(regs.chunks_exact(3).skip(1))
                .all(|(a, b)| (a[0], a[1]) < (b[0], b[1])))
}

pub(crate) fn estimate(regs: impl Iterator<Item = u8>) -> f64 {
    let m = HLL_M as f64;
    let (mut sum, mut zeros) = (0f64, 0u32);
    for r in regs {
        sum += 2f64.powi(-i32::from(r));
        zeros += u32::from(r == 0);
    }
    let alpha = 0.709;
    let e = alpha * m * m / sum;
    if e <= 2.5 * m && zeros > 0 {
        m * (m / f64::from(zeros)).ln()
    } else {
        e
    }
}

#[cfg(test)]
mod tests;
