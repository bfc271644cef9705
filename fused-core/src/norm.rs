//! RMS normalisation, defined once.
//!
//! `rms_norm(x, eps)` scales each column of `x` (its `ne[0] = K` elements)
//! by `s = 1 / sqrt(sum(x²)/K + eps)`. The reduction order is part of the
//! definition, so that every backend's unfused norm kernel and every fused
//! GEMV prologue (CPU SIMD lanes and GPU warps alike) reproduce it bit for
//! bit:
//!
//! 1. f32 throughout. 32 interleaved partial sums: partial `j` accumulates
//!    `x[i]²` for `i ≡ j (mod 32)`, in increasing `i`, starting at `+0.0`,
//!    as a plain product then a plain sum (`p[j] = p[j] + x[i] * x[i]`, two
//!    roundings, **no fused multiply-add**; a GPU must keep the compiler
//!    from contracting it: `__fmul_rn`/`__fadd_rn`, GLSL `precise`). An
//!    AVX2 kernel holds the partials as 4 × 8 lanes, AVX-512 as 2 × 16, a
//!    warp as one per lane.
//! 2. A fixed tree over the partials, the order of a warp's shuffle-down
//!    reduction: `p[j] = p[j] + p[j + w]` for `j < w`, `w = 16, 8, 4, 2, 1`;
//!    the sum is `p[0]`.
//! 3. `mean = sum / K` (f32 division, `K` converted to f32, exact for the
//!    sizes the graph takes), `s = 1.0 / sqrt(mean + eps)` (f32, correctly
//!    rounded square root and division).
//! 4. `y[i] = x[i] · s`; with a weight `g` (the fused prologue of
//!    `mul(rms_norm(x), g)`), `y[i] = (x[i] · s) · g[i]`, the unfused op
//!    order: the norm's product first, then the mul.
//!
//! [`partials`], [`reduce_partials`] and [`scale_from_sum`] are the three
//! stages for a backend that computes them its own way (a SIMD kernel feeds
//! its lanes to [`reduce_partials`]); [`scale`] and [`rms_norm`] are the
//! whole definition.

use crate::error::Error;

/// The number of interleaved partial sums of the reduction.
pub const PARTIALS: usize = 32;

/// The longest column the fused GEMV prologue takes: 32768 f32 (128 KiB),
/// what a GPU block keeps in shared memory; every hidden size in use fits.
/// The unfused op takes any length the graph takes.
pub const MAX_PROLOGUE_LEN: usize = 32768;

/// The longest column the graph's `rms_norm` takes: `2^24`, below which a
/// length converts to f32 exactly.
pub const MAX_LEN: usize = 1 << 24;

/// A norm's epsilon, kept as its bits so that ops and plans stay `Eq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Eps(u32);

impl Eps {
    /// `eps`.
    pub const fn new(eps: f32) -> Eps {
        Eps(eps.to_bits())
    }

    /// The value.
    pub const fn get(self) -> f32 {
        f32::from_bits(self.0)
    }

    /// Whether the fused prologue takes it: finite and `>= 0`.
    pub fn is_valid(self) -> bool {
        let e = self.get();
        e.is_finite() && e >= 0.0
    }
}

impl core::fmt::Display for Eps {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:e}", self.get())
    }
}

/// Stage 1: the 32 interleaved partial sums of `x²`.
pub fn partials(x: &[f32]) -> [f32; PARTIALS] {
    let mut p = [0.0f32; PARTIALS];
    let mut chunks = x.chunks_exact(PARTIALS);
    for c in &mut chunks {
        for (pj, &v) in p.iter_mut().zip(c) {
            *pj += v * v;
        }
    }
    for (pj, &v) in p.iter_mut().zip(chunks.remainder()) {
        *pj += v * v;
    }
    p
}

/// Stage 2: the shuffle-down tree over the partials.
pub fn reduce_partials(mut p: [f32; PARTIALS]) -> f32 {
    let mut w = PARTIALS / 2;
    while w > 0 {
        for j in 0..w {
            p[j] += p[j + w];
        }
        w /= 2;
    }
    p[0]
}

/// Stage 3: the scale `1 / sqrt(sum / k + eps)`.
pub fn scale_from_sum(sum: f32, k: usize, eps: f32) -> f32 {
    let mean = sum / k as f32;
    1.0 / libm::sqrtf(mean + eps)
}

/// The scale of one column `x`.
pub fn scale(x: &[f32], eps: f32) -> f32 {
    scale_from_sum(reduce_partials(partials(x)), x.len(), eps)
}

/// Normalises every column of `k` values of `x` into `y`: `y = x · s`, or
/// `y = (x · s) · g` with `gamma = Some(g)` (`g` of `k` values).
pub fn rms_norm(
    k: usize,
    eps: f32,
    x: &[f32],
    gamma: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), Error> {
    rms_norm_with(partials, k, eps, x, gamma, y)
}

/// [`rms_norm`] with the 32 partial sums of each column computed by
/// `column_partials`, which must return what [`partials`] returns (a
/// backend's vectorised form); the rest of the definition is this one.
pub fn rms_norm_with(
    column_partials: impl Fn(&[f32]) -> [f32; PARTIALS],
    k: usize,
    eps: f32,
    x: &[f32],
    gamma: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), Error> {
    check(k, x.len(), gamma.map(<[f32]>::len), y.len())?;
    for (xc, yc) in x.chunks_exact(k).zip(y.chunks_exact_mut(k)) {
        let s = scale_from_sum(reduce_partials(column_partials(xc)), k, eps);
        match gamma {
            None => yc.iter_mut().zip(xc).for_each(|(o, &v)| *o = v * s),
            Some(g) => {
                for ((o, &v), &gv) in yc.iter_mut().zip(xc).zip(g) {
                    *o = (v * s) * gv;
                }
            }
        }
    }
    Ok(())
}

/// Checks the arguments of [`rms_norm`]: `k >= 1`, `x` a whole number of
/// columns, `y` as long as `x`, the weight (if any) `k` long.
pub fn check(k: usize, x_len: usize, gamma_len: Option<usize>, y_len: usize) -> Result<(), Error> {
    if k == 0 || !x_len.is_multiple_of(k) {
        return Err(Error::LengthMismatch {
            what: "rms_norm input (whole columns)",
            expected: x_len.div_ceil(k.max(1)) * k.max(1),
            actual: x_len,
        });
    }
    crate::error::check_len("rms_norm output", x_len, y_len)?;
    if let Some(n) = gamma_len {
        crate::error::check_len("rms_norm weight", k, n)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let x = [3.0f32, 4.0];
        // mean of squares 12.5, s = 1/sqrt(12.5)
        let s = scale(&x, 0.0);
        assert_eq!(s, 1.0 / libm::sqrtf(12.5));
        let mut y = [0.0; 2];
        rms_norm(2, 0.0, &x, None, &mut y).unwrap();
        assert_eq!(y, [3.0 * s, 4.0 * s]);
        rms_norm(2, 0.0, &x, Some(&[2.0, -1.0]), &mut y).unwrap();
        assert_eq!(y, [(3.0 * s) * 2.0, -(4.0 * s)]);
        assert!(rms_norm(0, 0.0, &[], None, &mut []).is_err());
        assert!(rms_norm(3, 0.0, &x, None, &mut y).is_err());
        assert!(rms_norm(2, 0.0, &x, Some(&[1.0]), &mut y).is_err());
    }

    #[test]
    fn the_order_is_the_interleaved_one() {
        // 64 values: partial j sums x[j]² + x[j+32]², then the tree.
        let x: [f32; 70] = core::array::from_fn(|i| (i as f32 * 0.37).sin() * 3.0);
        let mut p = [0.0f32; 32];
        for (i, v) in x.iter().enumerate() {
            p[i % 32] += v * v;
        }
        for w in [16, 8, 4, 2, 1] {
            for j in 0..w {
                p[j] += p[j + w];
            }
        }
        assert_eq!(reduce_partials(partials(&x)).to_bits(), p[0].to_bits());
        let want = 1.0 / libm::sqrtf(p[0] / 70.0 + 1e-5);
        assert_eq!(scale(&x, 1e-5).to_bits(), want.to_bits());
    }

    #[test]
    fn eps_validity() {
        assert!(Eps::new(1e-6).is_valid());
        assert!(Eps::new(0.0).is_valid());
        assert!(!Eps::new(-1e-6).is_valid());
        assert!(!Eps::new(f32::NAN).is_valid());
        assert!(!Eps::new(f32::INFINITY).is_valid());
    }
}
