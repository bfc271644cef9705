//! The host-side operations of the layered path: rotary position
//! embeddings (RoPE) between its plans, and RMSNorm for a backend that
//! refuses to compute it as a GEMV's prologue; both in the core's order,
//! as the whole-token plan computes them.

use fused_core::decode::RopeMode;

/// `out[i] = (x[i] · s) · w[i]`, `s = 1 / sqrt(mean(x²) + eps)`: GGML's
/// `rms_norm` then `mul`, in `fused_core::norm`'s order (the one a plan's
/// norm prologue computes, so that the host fallback gives the same bits).
/// `w` and `out` as long as `x`; a shorter one bounds what is written.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let s = fused_core::norm::scale(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * s) * g;
    }
}

/// Rotary position embeddings in GGML's "normal" mode (the mode of GGUF
/// Llama files, whose converter permuted Q and K for it): each head's
/// adjacent pairs `(x[2i], x[2i+1])` are rotated by
/// `θ_i = pos · scale · base^(−2i/d) / factor_i`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    head_dim: usize,
    /// `base^(−2/d)`, multiplied in step by step as GGML does.
    theta_scale: f32,
    freq_scale: f32,
    /// Per-pair divisors (`rope_freqs.weight` of Llama 3 files), or empty.
    factors: Vec<f32>,
}

impl Rope {
    /// RoPE over heads of `head_dim` (even) elements, frequency base `base`,
    /// positions scaled by `freq_scale`, and optional per-pair frequency
    /// factors (`head_dim / 2` of them, or none).
    pub fn new(head_dim: usize, base: f32, freq_scale: f32, factors: Vec<f32>) -> Rope {
        Rope {
            head_dim,
            theta_scale: base.powf(-2.0 / head_dim as f32),
            freq_scale,
            factors,
        }
    }

    /// The `(cos, sin)` of each pair's angle at position `pos`.
    pub fn angles(&self, pos: usize) -> Vec<(f32, f32)> {
        let mut theta = pos as f32;
        (0..self.head_dim / 2)
            .map(|i| {
                let ff = self.factors.get(i).copied().unwrap_or(1.0);
                let t = self.freq_scale * (theta / ff);
                theta *= self.theta_scale;
                (t.cos(), t.sin())
            })
            .collect()
    }

    /// The angles at `pos` as a RoPE table row: `cos θ_i, sin θ_i` of pair
    /// `i` at `2i, 2i + 1` (`fused_core::decode::rope`'s layout).
    pub fn table_row(&self, pos: usize) -> Vec<f32> {
        self.angles(pos)
            .into_iter()
            .flat_map(|(c, s)| [c, s])
            .collect()
    }

    /// Rotates every head of `x` (heads of `head_dim` elements, back to
    /// back) for position `pos`.
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let row = self.table_row(pos);
        let src = x.to_vec();
        // The core's RoPE, which the whole-token plan runs too; its only
        // refusals (an odd head, a partial head) the loaded shapes exclude,
        // and `x` is left as it was if one came.
        let _ = fused_core::decode::rope(RopeMode::Adjacent, self.head_dim, &src, &row, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_at_zero_is_identity() {
        let rope = Rope::new(8, 10_000.0, 1.0, Vec::new());
        let mut x: Vec<f32> = (0..16).map(|i| i as f32 - 3.5).collect();
        let before = x.clone();
        rope.apply(&mut x, 0);
        assert_eq!(x, before);
    }

    #[test]
    fn rope_rotates_adjacent_pairs_by_the_expected_angles() {
        let (d, base, pos) = (8usize, 100_000.0f32, 7usize);
        let rope = Rope::new(d, base, 1.0, Vec::new());
        // Two heads of unit vectors along the first element of each pair.
        let mut x = vec![0.0f32; 2 * d];
        for i in (0..2 * d).step_by(2) {
            x[i] = 1.0;
        }
        rope.apply(&mut x, pos);
        for head in x.chunks_exact(d) {
            for i in 0..d / 2 {
                let theta = pos as f64 * f64::from(base).powf(-2.0 * i as f64 / d as f64);
                let (c, s) = (theta.cos() as f32, theta.sin() as f32);
                assert!((head[2 * i] - c).abs() < 1e-4, "cos of pair {i}");
                assert!((head[2 * i + 1] - s).abs() < 1e-4, "sin of pair {i}");
            }
        }
    }

    #[test]
    fn rope_keeps_norms_and_relative_positions() {
        // A rotation keeps each pair's norm, and q·k depends only on the
        // distance between the positions.
        let rope = Rope::new(64, 10_000.0, 1.0, Vec::new());
        let q: Vec<f32> = (0..64)
            .map(|i| ((i * 7) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let k: Vec<f32> = (0..64)
            .map(|i| ((i * 5) % 13) as f32 / 13.0 - 0.5)
            .collect();
        let dot_at = |pq: usize, pk: usize| {
            let (mut a, mut b) = (q.clone(), k.clone());
            rope.apply(&mut a, pq);
            rope.apply(&mut b, pk);
            let n: f32 = a.iter().map(|v| v * v).sum();
            let n0: f32 = q.iter().map(|v| v * v).sum();
            assert!((n - n0).abs() < 1e-4);
            a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>()
        };
        assert!((dot_at(5, 2) - dot_at(13, 10)).abs() < 1e-3);
    }

    #[test]
    fn rope_factors_divide_the_angle() {
        let plain = Rope::new(4, 10_000.0, 1.0, Vec::new());
        let halved = Rope::new(4, 10_000.0, 1.0, vec![2.0, 2.0]);
        let scaled = Rope::new(4, 10_000.0, 0.5, Vec::new());
        let (a, b, c) = (plain.angles(6), halved.angles(12), scaled.angles(12));
        for i in 0..2 {
            assert!((a[i].0 - b[i].0).abs() < 1e-6 && (a[i].1 - b[i].1).abs() < 1e-6);
            assert!((a[i].0 - c[i].0).abs() < 1e-6 && (a[i].1 - c[i].1).abs() < 1e-6);
        }
    }

    #[test]
    fn rms_norm_scales_by_the_root_mean_square() {
        let mut out = [0.0f32; 4];
        rms_norm(
            &[1.0, -1.0, 1.0, -1.0],
            &[1.0, 2.0, 3.0, 4.0],
            0.0,
            &mut out,
        );
        assert_eq!(out, [1.0, -2.0, 3.0, -4.0]);
    }
}
