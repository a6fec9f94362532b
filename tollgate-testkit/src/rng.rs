//! [`Rng`]: the one seeded generator of the tests, examples and benches (SplitMix64), so
//! that a run draws the same numbers every time and a failure can be replayed from its seed.

use std::ops::RangeInclusive;

/// A SplitMix64 generator: small, fast, good enough for tests, and seeded, so every run
/// draws the same numbers. Not for anything that must be unpredictable.
///
/// ```ignore
/// let mut rng = Rng::new(7);
/// let delay = Duration::from_millis(rng.below(4));
/// if rng.chance(0.25) { /* now and then */ }
/// ```
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator with state `seed`: any seed works, 0 included.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform over `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform over `range` (both ends included).
    pub fn range(&mut self, range: RangeInclusive<usize>) -> usize {
        let (low, high) = range.into_inner();
        low + self.below((high - low) as u64 + 1) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Log-uniform in `[low, high)` (`0 < low < high`): as likely between 1 and 2 as between
    /// 10 and 20.
    pub fn log_uniform(&mut self, low: f64, high: f64) -> f64 {
        low * (high / low).powf(self.unit())
    }

    /// Shuffles `items` (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}
