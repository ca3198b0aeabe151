//! The `distinct` sketch: HyperLogLog of 64 registers (standard error 1.04/√64 ≈ 13%; below
//! ~160 distinct values linear counting is used, within a few percent). Windowed, each
//! register keeps, per level 1..=16, the bucket that last reached that level, so the estimate
//! over any window suffix is exact HLL over that window (1 KiB per entity and feature, or a
//! few dozen bytes while sparse); all time it is the plain 64-byte sketch.

use crate::decl::BUCKETS;

const HLL_BITS: u32 = 6;
/// Registers of a sketch: an all-time sketch is this many bytes.
pub(crate) const HLL_M: usize = 1 << HLL_BITS;
/// Levels a windowed sketch tracks per register: a dense windowed sketch is `M * LEVELS` bytes.
pub(crate) const HLL_LEVELS: usize = 16;

/// An empty sketch: windowed ones start sparse (no bytes), all-time ones are 64 bytes.
pub(crate) fn empty(windowed: bool) -> Vec<u8> {
    if windowed {
        Vec::new()
    } else {
        vec![0u8; HLL_M]
    }
}

/// The register a value's hash `h` lands in, and the level it reaches there.
pub(crate) fn place(h: u64) -> (usize, u8) {
    let reg = (h >> (64 - HLL_BITS)) as usize;
    let rest = (h << HLL_BITS) | (1 << (HLL_BITS - 1));
    let rho = (rest.leading_zeros() + 1).min(HLL_LEVELS as u32) as u8;
    (reg, rho)
}

/// Add a placed value to an all-time sketch.
pub(crate) fn add_all_time(regs: &mut [u8], reg: usize, rho: u8) {
    if let Some(r) = regs.get_mut(reg) {
        *r = (*r).max(rho);
    }
}

/// Add a placed value in bucket `b` to a windowed sketch; false if `b` is a window behind
/// its newest bucket (late).
///
/// Dense: `regs[r * LEVELS + (l - 1)]` holds a tag of the newest bucket in
/// which register `r` reached level `l` (0: none), the tag being `bucket mod 255 + 1`; entries
/// are cleared once a window old, so a tag's age relative to `head` is unambiguous. Sparse
/// (while it holds at most [`HLL_SPARSE_MAX`] entries, which small cardinalities do): the
/// same entries as `(register, level - 1, tag)` triples sorted by register and level, so an
/// entity with a few distinct values costs tens of bytes instead of 1 KiB; it turns dense
/// when it would pass that.
pub(crate) fn add_windowed(
    head: &mut i64,
    regs: &mut Vec<u8>,
    b: i64,
    reg: usize,
    rho: u8,
) -> bool {
    let dense = regs.len() == HLL_M * HLL_LEVELS;
    if *head == i64::MIN {
        *head = b;
    }
    if b <= *head - BUCKETS {
        return false;
    }
    if b > *head {
        let shift = b - *head;
        let old_head = *head;
        if dense {
            for t in regs.iter_mut() {
                if *t != 0 && age(*t, old_head) + shift >= BUCKETS {
                    *t = 0;
                }
            }
        } else {
            let mut keep = 0;
            for i in (0..regs.len() / 3).map(|i| i * 3) {
                if age(regs[i + 2], old_head) + shift < BUCKETS {
                    regs.copy_within(i..i + 3, keep);
                    keep += 3;
                }
            }
            regs.truncate(keep);
        }
        *head = b;
    }
    let tag = (b.rem_euclid(255) + 1) as u8;
    let new_age = *head - b;
    let newer = |t: u8| t == 0 || age(t, *head) > new_age;
    if dense {
        for l in 0..usize::from(rho) {
            if let Some(t) = regs.get_mut(reg * HLL_LEVELS + l)
                && newer(*t)
            {
                *t = tag;
            }
        }
        return true;
    }
    // Sparse entries are sorted by (register, level): the register's levels are found with
    // one binary search and walked in order (levels 0..rho are consecutive entries).
    let key = |i: usize| (regs[i * 3], regs[i * 3 + 1]);
    let n = regs.len() / 3;
    let mut i = {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key(mid) < (reg as u8, 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    for l in 0..rho {
        if i < regs.len() / 3 && (regs[i * 3], regs[i * 3 + 1]) == (reg as u8, l) {
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
    true
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
    } else {
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

/// Whether `regs` is a valid sketch for a window (`windowed`) or all time (a snapshot's).
pub(crate) fn valid(regs: &[u8], windowed: bool) -> bool {
    if !windowed {
        return regs.len() == HLL_M;
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
