//! Which key, stream or entity an operation picks: uniform, or Zipfian (rand_distr's
//! rejection-inversion sampler) with rank 1 mapped to index 0, so the hottest keys are the
//! first ones.

use crate::workload::Distribution as Kind;
use rand::RngExt;
use rand::rngs::StdRng;
use rand_distr::{Distribution, Zipf};

#[derive(Clone, Debug)]
pub enum KeyDist {
    Uniform { n: u64 },
    Zipfian { n: u64, zipf: Zipf<f64> },
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build a Zipfian sampler over {n} keys with alpha {alpha}")]
pub struct DistError {
    n: u64,
    alpha: f64,
}

impl KeyDist {
    pub fn new(kind: Kind, n: u64, alpha: f64) -> Result<KeyDist, DistError> {
        let n = n.max(1);
        Ok(match kind {
            Kind::Uniform | Kind::Sequential => KeyDist::Uniform { n },
            Kind::Zipfian => KeyDist::Zipfian {
                n,
                zipf: Zipf::new(n as f64, alpha).map_err(|_| DistError { n, alpha })?,
            },
        })
    }

    /// The number of keys it picks from.
    pub fn keys(&self) -> u64 {
        match self {
            KeyDist::Uniform { n } | KeyDist::Zipfian { n, .. } => *n,
        }
    }

    /// An index in `0..n`.
    pub fn sample(&self, rng: &mut StdRng) -> u64 {
        match self {
            KeyDist::Uniform { n } => rng.random_range(0..*n),
            KeyDist::Zipfian { n, zipf } => {
                // Ranks are 1..=n as floats; the clamp guards the float edge.
                let rank = zipf.sample(rng) as u64;
                rank.clamp(1, *n) - 1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn frequencies(dist: &KeyDist, n: usize, draws: usize) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(7);
        let mut counts = vec![0u64; n];
        for _ in 0..draws {
            let k = dist.sample(&mut rng) as usize;
            assert!(k < n, "sample {k} out of 0..{n}");
            counts[k] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    #[test]
    fn zipfian_frequencies_follow_the_power_law() {
        for alpha in [0.99, 1.0, 1.5] {
            let n = 20;
            let dist = match KeyDist::new(Kind::Zipfian, n as u64, alpha) {
                Ok(d) => d,
                Err(e) => panic!("{e}"),
            };
            let freq = frequencies(&dist, n, 400_000);
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-alpha)).sum();
            for (i, f) in freq.iter().enumerate() {
                let expected = ((i + 1) as f64).powf(-alpha) / norm;
                // 400k draws: the standard error of the largest frequency is under 0.001.
                assert!(
                    (f - expected).abs() < 0.005,
                    "alpha {alpha}, key {i}: {f} vs {expected}"
                );
            }
            assert!(freq[0] > freq[1] && freq[1] > freq[n - 1]);
        }
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let n = 10;
        let dist = match KeyDist::new(Kind::Uniform, n as u64, 0.0) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        for f in frequencies(&dist, n, 200_000) {
            assert!((f - 0.1).abs() < 0.005, "{f}");
        }
    }

    #[test]
    fn a_single_key_is_always_key_zero_and_large_spaces_stay_in_range() {
        let mut rng = StdRng::seed_from_u64(1);
        for kind in [Kind::Uniform, Kind::Zipfian] {
            let one = match KeyDist::new(kind, 1, 0.99) {
                Ok(d) => d,
                Err(e) => panic!("{e}"),
            };
            assert!((0..1000).all(|_| one.sample(&mut rng) == 0));
            let big = match KeyDist::new(kind, 1 << 40, 0.99) {
                Ok(d) => d,
                Err(e) => panic!("{e}"),
            };
            assert!((0..10_000).all(|_| big.sample(&mut rng) < 1 << 40));
        }
    }
}
