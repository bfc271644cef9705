//! The one deterministic generator of the workspace's tests and cases.

/// xorshift64*: small, fast, and the same values on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded with `seed` (any value; nearby seeds give unrelated streams).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[-1, 1)`.
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` values uniform in `[-1, 1)`.
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    /// `n` values uniform in `[-scale, scale)`.
    pub fn vec_scaled(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32() * scale).collect()
    }

    /// `n` values of ±1.
    pub fn signs(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| if self.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn values_are_in_range_and_seeds_differ() {
        let mut a = Rng::new(1);
        let v = a.vec(1000);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        assert!(v.iter().any(|x| *x < -0.5) && v.iter().any(|x| *x > 0.5));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_eq!(Rng::new(7).vec(4), Rng::new(7).vec(4));
        assert!(Rng::new(3).signs(64).iter().all(|s| s.abs() == 1.0));
    }
}
