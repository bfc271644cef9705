//! AVX-512 quantization of activation columns to Q8_0 and Q8_K,
//! bit-identical to the core's [`fused_core::quant::quantize_row`] (GGML's
//! reference rounding).
//!
//! The core's Q8_0 quantizer is, per 32-element block: `amax = max |v|`,
//! `d = amax / 127`, `id = 1 / d` (0 when `d` is 0), `q = roundf(v·id)`
//! with `roundf(x) = trunc(x + copysign(0.5 − ε/4, x))` (libm's), and `d`
//! stored as f16 (round to nearest even). Here the block's sixteen-lane
//! halves take the same f32 operations in the same order (`amax` and `d`,
//! `id` in scalar), so every byte matches. Blocks where a rounded value
//! leaves ±127 (NaN or infinite inputs, or `1/d` overflowing for a
//! subnormal `d`: there the vector conversion to integers and Rust's
//! saturating `as i8` differ) go through the core's quantizer.
//!
//! The core's Q8_K quantizer is, per 256-element block: `max` the first
//! element of largest `|v|` (NaN skipped), a zero block when that is 0,
//! else `iscale = −127 / max`, `q = min(nearest_int(iscale·v), 127) as i8`
//! with `nearest_int(x)` the low mantissa bits of `x + 1.5·2^23` minus
//! `2^22`, `bsums` the sums of sixteen `q` each, and `d = 1 / iscale`. Those
//! are integer and f32 operations with no conversion, so the vector version
//! matches for every input, NaN and infinities included.

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
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(r)
        };
        let (ta, tb) = (round(a), round(b));
        // Exact in i32 and i8 where |t| ≤ 127 (so for every finite block
        // with a normal `d`); otherwise (NaN, infinities, `1/d` overflowing
        // for a subnormal `d`) the core's quantizer decides.
        let lim = _mm512_set1_ps(127.0);
        let small = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(_mm512_abs_ps(ta), lim)
            & _mm512_cmp_ps_mask::<_CMP_LE_OQ>(_mm512_abs_ps(tb), lim);
        if small != 0xffff {
            fused_core::quant::quantize_row(DType::Q8_0, xb, ob)?;
            continue;
        }
        let qa = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(ta));
        let qb = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(tb));
        ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        // SAFETY: `ob` holds 34 bytes: 16 at 2 and 16 at 18, unaligned.
        unsafe {
            _mm_storeu_si128(ob.as_mut_ptr().add(2).cast(), qa);
            _mm_storeu_si128(ob.as_mut_ptr().add(18).cast(), qb);
        }
    }
    Ok(())
}

/// Elements per Q8_K block.
const QK_K: usize = 256;
/// Bytes per Q8_K block: f32 `d`, 256 i8, sixteen i16 `bsums`.
const Q8K_BLOCK_BYTES: usize = 292;

/// Quantizes `x` (whole 256-element blocks) into the Q8_K blocks `out`.
///
/// # Safety
/// AVX-512 F/BW/VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_q8_k(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    fused_core::error::check_len("Q8_K blocks", x.len() / QK_K * Q8K_BLOCK_BYTES, out.len())?;
    for (xb, ob) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(Q8K_BLOCK_BYTES))
    {
        // SAFETY: `xb` holds 256 f32: sixteen unaligned 16-lane loads.
        let v: [__m512; 16] =
            core::array::from_fn(|i| unsafe { _mm512_loadu_ps(xb.as_ptr().add(16 * i)) });
        // `max_ps(a, m)` returns `m` where `a` is NaN: NaN is skipped.
        let mut m = _mm512_setzero_ps();
        for vi in v {
            m = _mm512_max_ps(_mm512_abs_ps(vi), m);
        }
        let amax = _mm512_reduce_max_ps(m);
        ob.fill(0);
        if amax == 0.0 {
            continue;
        }
        let at = _mm512_set1_ps(amax);
        let first = v.iter().enumerate().find_map(|(i, vi)| {
            let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(*vi), at);
            (hit != 0).then(|| 16 * i + hit.trailing_zeros() as usize)
        });
        let max = first.map_or(amax, |i| xb[i]);
        let iscale = -127.0 / max;
        let (is, magic) = (_mm512_set1_ps(iscale), _mm512_set1_ps(12_582_912.0));
        let (low, bias) = (
            _mm512_set1_epi32(0x007f_ffff),
            _mm512_set1_epi32(0x0040_0000),
        );
        let (qs, rest) = ob[4..].split_at_mut(QK_K);
        for ((vi, qo), so) in v
            .iter()
            .zip(qs.chunks_exact_mut(16))
            .zip(rest.chunks_exact_mut(2))
        {
            let t = _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(is, *vi), magic));
            let q = _mm512_min_epi32(
                _mm512_sub_epi32(_mm512_and_si512(t, low), bias),
                _mm512_set1_epi32(127),
            );
            // The bytes kept by `as i8`, sign-extended back for the sum.
            let q8 = _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(q));
            // SAFETY: `qo` holds 16 bytes; unaligned store.
            unsafe { _mm_storeu_si128(qo.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(q)) };
            so.copy_from_slice(&(_mm512_reduce_add_epi32(q8) as i16).to_le_bytes());
        }
        ob[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
    Ok(())
}
