//! The RMS norm on the CPU, bit for bit [`fused_core::norm`]'s definition:
//! the unfused `rms_norm` op and the GEMV steps' norm prologue (the
//! executor normalises each column into the activation scratch once, then
//! the GEMV quantizes or reads it as it would the mul's output).
//!
//! The 32 interleaved partial sums are 4 × 8 AVX2 lanes where AVX2 is there
//! (plain `mul` then `add`, no FMA, as the definition says), else the
//! core's portable loop; the tree, the mean and the scale are the core's.

use fused_core::Error;
use fused_core::norm::{PARTIALS, partials, rms_norm_with};

use crate::isa::Isa;

/// `y = rms_norm(x)` per column of `k` values, times `gamma` where given.
pub(crate) fn rms_norm(
    isa: Isa,
    k: usize,
    eps: f32,
    x: &[f32],
    gamma: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), Error> {
    rms_norm_with(|c| column_partials(isa, c), k, eps, x, gamma, y)
}

/// The 32 partial sums of `x²` ([`fused_core::norm::partials`]).
fn column_partials(isa: Isa, x: &[f32]) -> [f32; PARTIALS] {
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx2 | Isa::Avx512) && isa.is_supported() {
        // SAFETY: the machine runs AVX2 (`Isa::is_supported`).
        return unsafe { partials_avx2(x) };
    }
    let _ = isa;
    partials(x)
}

/// [`fused_core::norm::partials`] as 4 accumulators of 8 lanes: lane `l`
/// of accumulator `a` is partial `8a + l`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn partials_avx2(x: &[f32]) -> [f32; PARTIALS] {
    use core::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut chunks = x.chunks_exact(PARTIALS);
    for c in &mut chunks {
        for (a, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 32 values; lanes 8a..8a+8 are inside it.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * a)) };
            *acc = _mm256_add_ps(*acc, _mm256_mul_ps(v, v));
        }
    }
    let mut p = [0.0f32; PARTIALS];
    for (a, acc) in acc.iter().enumerate() {
        // SAFETY: `p` holds 32 values; lanes 8a..8a+8 are inside it.
        unsafe { _mm256_storeu_ps(p.as_mut_ptr().add(8 * a), *acc) };
    }
    for (pj, &v) in p.iter_mut().zip(chunks.remainder()) {
        *pj += v * v;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn every_isa_matches_the_core_definition() {
        for k in [1, 31, 32, 33, 64, 100, 4096, 4099] {
            let x: Vec<f32> = (0..2 * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173)
                .collect();
            let g: Vec<f32> = (0..k).map(|i| 1.0 + (i % 7) as f32 * 0.01).collect();
            let mut want = vec![0.0f32; 2 * k];
            fused_core::norm::rms_norm(k, 1e-6, &x, Some(&g), &mut want).unwrap();
            for isa in Isa::available() {
                let mut y = vec![0.0f32; 2 * k];
                rms_norm(isa, k, 1e-6, &x, Some(&g), &mut y).unwrap();
                let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?} k={k}");
            }
        }
    }
}
