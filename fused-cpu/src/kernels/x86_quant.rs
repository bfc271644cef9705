//! AVX-512 quantization of activation columns to Q8_0, bit-identical to the
//! core's [`fused_core::quant::quantize_row`] (GGML's reference rounding).
//!
//! The core's Q8_0 quantizer is, per 32-element block: `amax = max |v|`,
//! `d = amax / 127`, `id = 1 / d` (0 when `d` is 0), `q = roundf(v·id)`
//! with `roundf(x) = trunc(x + copysign(0.5 − ε/4, x))` (libm's), and `d`
//! stored as f16 (round to nearest even). Here the block's sixteen-lane
//! halves take the same f32 operations in the same order (`amax` and `d`,
//! `id` in scalar), so every byte matches. Blocks holding a NaN or an
//! infinity (where the vector conversion to integers and Rust's saturating
//! `as i8` differ) go through the core's quantizer.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

/// Elements per Q8_0 block.
const QK: usize = 32;
/// Bytes per Q8_0 block: f16 `d`, then 32 i8.
const BLOCK_BYTES: usize = 34;

/// Quantizes `x` (whole 32-element blocks) into the Q8_0 blocks `out`.
///
/// # Safety
/// AVX-512 F/BW/VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    fused_core::error::check_len("Q8_0 blocks", x.len() / QK * BLOCK_BYTES, out.len())?;
    // libm's `roundf` offset, `0.5 − ε/4` (the largest f32 below 0.5).
    let half = _mm512_set1_ps(0.5 - 0.25 * f32::EPSILON);
    let sign = _mm512_set1_epi32(i32::MIN);
    for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(BLOCK_BYTES)) {
        // SAFETY: `xb` holds 32 f32: two unaligned 16-lane loads.
        let (a, b) = unsafe {
            (
                _mm512_loadu_ps(xb.as_ptr()),
                _mm512_loadu_ps(xb.as_ptr().add(16)),
            )
        };
        let (aa, ab) = (_mm512_abs_ps(a), _mm512_abs_ps(b));
        let inf = _mm512_set1_ps(f32::INFINITY);
        let finite =
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(aa, inf) & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(ab, inf);
        if finite != 0xffff {
            fused_core::quant::quantize_row(DType::Q8_0, xb, ob)?;
            continue;
        }
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(aa, ab));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let round = |v: __m512| {
            let p = _mm512_mul_ps(v, id);
            let off = _mm512_or_si512(
                _mm512_and_si512(_mm512_castps_si512(p), sign),
                _mm512_castps_si512(half),
            );
            let r = _mm512_add_ps(p, _mm512_castsi512_ps(off));
            let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(r);
            // |t| ≤ 127: exact in i32 and in i8.
            _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t))
        };
        let (qa, qb) = (round(a), round(b));
        ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        // SAFETY: `ob` holds 34 bytes: 16 at 2 and 16 at 18, unaligned.
        unsafe {
            _mm_storeu_si128(ob.as_mut_ptr().add(2).cast(), qa);
            _mm_storeu_si128(ob.as_mut_ptr().add(18).cast(), qb);
        }
    }
    Ok(())
}
