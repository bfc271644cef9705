//! Choosing the next token from logits: greedy (temperature 0), or
//! temperature and top-p (nucleus) sampling from a small deterministic RNG.

/// SplitMix64: a small, fast, deterministic generator (the same seed gives
/// the same tokens on every machine).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// How the next token is chosen.
#[derive(Clone, Debug)]
pub struct Sampler {
    temp: f32,
    top_p: f32,
    rng: Rng,
}

impl Sampler {
    /// Greedy when `temp <= 0`; otherwise softmax(logits / temp) cut to the
    /// smallest set of most likely tokens whose mass reaches `top_p`
    /// (clamped to `(0, 1]`), sampled with an RNG seeded by `seed`.
    pub fn new(temp: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temp,
            top_p: if top_p.is_finite() {
                top_p.clamp(f32::MIN_POSITIVE, 1.0)
            } else {
                1.0
            },
            rng: Rng::new(seed),
        }
    }

    /// Whether it picks the largest logit (temperature 0, or NaN).
    pub fn is_greedy(&self) -> bool {
        self.temp.is_nan() || self.temp <= 0.0
    }

    /// The next token for `logits` (one per vocabulary entry; not empty).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        // NaN and non-positive temperatures are greedy.
        if self.is_greedy() {
            return argmax(logits);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let inv_t = 1.0 / f64::from(self.temp);
        let mut probs: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, (f64::from(l - max) * inv_t).exp()))
            .filter(|(_, p)| *p > 0.0)
            .collect();
        // Most likely first; ties by id so the order is deterministic.
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let total: f64 = probs.iter().map(|p| p.1).sum();
        if probs.is_empty() || total.is_nan() || total <= 0.0 || !total.is_finite() {
            return argmax(logits);
        }
        let target = f64::from(self.top_p) * total;
        let mut kept = 0.0;
        let mut n = 0;
        for p in &probs {
            kept += p.1;
            n += 1;
            if kept >= target {
                break;
            }
        }
        let mut r = self.rng.next_f64() * kept;
        for p in &probs[..n] {
            r -= p.1;
            if r < 0.0 {
                return p.0;
            }
        }
        probs[n - 1].0
    }
}

/// The index of the largest logit (the first on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    // The core's rule, which the whole-token plan's argmax follows too.
    fused_core::decode::argmax(logits) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.0, 3.0, 1.0, 3.0]), 1);
        assert_eq!(Sampler::new(0.0, 1.0, 1).sample(&[0.0, -1.0, 2.0]), 2);
    }

    #[test]
    fn sampling_is_deterministic_and_respects_top_p() {
        let logits = [2.0f32, 1.0, 0.5, -1.0, 0.0];
        let draw = |seed| {
            let mut s = Sampler::new(0.8, 0.9, seed);
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        // A tiny top-p keeps only the most likely token.
        let mut s = Sampler::new(1.0, 1e-6, 3);
        assert!((0..32).all(|_| s.sample(&logits) == 0));
        // Every draw is a valid id, and more than one id comes up.
        let d = draw(11);
        assert!(d.iter().all(|&t| (t as usize) < logits.len()));
        assert!(d.iter().any(|&t| t != d[0]));
    }
}
