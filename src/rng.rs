//! A small seeded random number generator, so that every random choice in the pipeline derives
//! from the loader's seed and stays the same across platforms and crate versions.

/// SplitMix64 (Steele, Lea and Flood, 2014): tiny, fast, passes BigCrush, and fully specified,
/// so a seed means the same batches forever.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

/// Stage tags mixed into seeds so that stages draw independent streams.
pub(crate) const STAGE_PERMUTATION: u64 = 1;
pub(crate) const STAGE_AUGMENT: u64 = 3;

impl Rng {
    /// A generator for one (seed, epoch, stage) triple.
    pub(crate) fn for_stage(seed: u64, epoch: u64, stage: u64) -> Self {
        let mut r = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
        let a = r.next_u64();
        let mut r = Rng(a ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let b = r.next_u64();
        Rng(b ^ stage.wrapping_mul(0xAEF1_7502_108E_F2D9))
    }

    /// A generator for one sample (dataset `index`) of one (seed, epoch, stage) triple: what
    /// it draws depends on nothing else (not on threads, order or rank).
    pub(crate) fn for_sample(seed: u64, epoch: u64, stage: u64, index: u64) -> Self {
        let mut r = Rng::for_stage(seed, epoch, stage);
        let a = r.next_u64();
        Rng(a ^ index.wrapping_mul(0x9FB2_1C65_1E98_DF25))
    }

    /// A uniform float in `[0, 1)` (53 random bits).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias (Lemire's method).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }
}

/// A seeded permutation of `0..n` (Fisher–Yates): 4 bytes per sample.
pub(crate) fn permutation(n: u32, rng: &mut Rng) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).collect();
    shuffle(&mut v, rng);
    v
}

/// Shuffles a slice in place (Fisher–Yates).
pub(crate) fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_permutation_and_depends_on_seed_and_epoch() {
        let a = permutation(1000, &mut Rng::for_stage(1, 0, STAGE_PERMUTATION));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        let b = permutation(1000, &mut Rng::for_stage(1, 1, STAGE_PERMUTATION));
        let c = permutation(1000, &mut Rng::for_stage(2, 0, STAGE_PERMUTATION));
        let a2 = permutation(1000, &mut Rng::for_stage(1, 0, STAGE_PERMUTATION));
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, a2);
    }

    #[test]
    fn below_is_roughly_uniform() {
        let mut r = Rng::for_stage(7, 0, 0);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[r.below(6) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}
