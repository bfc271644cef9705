//! x86-64 quantization of activation columns to Q8_0, Q8_1 (AVX-512 and
//! AVX2) and Q8_K (AVX-512), bit-identical to the core's
//! [`fused_core::quant::quantize_row`] (GGML's reference rounding).
//!
//! The core's Q8_0 and Q8_1 quantizers are, per 32-element block: `amax =
//! max |v|`, `d = amax / 127`, `id = 1 / d` (0 when `d` is 0), `q =
//! roundf(v·id)` with libm's `roundf(x) = trunc(x + copysign(0.5 − ε/4,
//! x))` (libm 0.2's generic `round`: that very expression, not a
//! description of it), and `d` stored as f16 (round to nearest even); Q8_1
//! also stores `s = d·Σq` as f16 (the sum exact in i32, then one f32
//! product). Here the block's sixteen- or eight-lane parts take the same
//! f32 operations in the same order (`amax` and `d`, `id` in scalar; the
//! add and the truncation are exact IEEE operations in vectors as in
//! scalar), so every byte matches. Blocks where a rounded value leaves ±127
//! (NaN or infinite inputs, or `1/d` overflowing for a subnormal `d`: there
//! the vector conversion to integers and Rust's saturating `as i8` differ,
//! and the vector `max` treats NaN otherwise than the core's fold) go
//! through the core's quantizer.
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

/// Elements per Q8_0 or Q8_1 block.
const QK: usize = 32;
/// Bytes per Q8_0 block: f16 `d`, then 32 i8.
const BLOCK_BYTES: usize = 34;
/// Bytes per Q8_1 block: f16 `d`, f16 `s`, then 32 i8.
const Q8_1_BLOCK_BYTES: usize = 36;

/// A quantizer of this module: `x` (whole blocks) into the blocks `out`.
pub(crate) type Quantizer = unsafe fn(&[f32], &mut [u8]) -> Result<(), Error>;

/// libm's `roundf` offset, `0.5 − ε/4` (the largest f32 below 0.5).
const ROUND_HALF: f32 = 0.5 - 0.25 * f32::EPSILON;

/// Quantizes `x` (whole 32-element blocks) into the Q8_0 blocks `out`.
///
/// # Safety
/// AVX-512 F/BW/VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_q8_0(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    unsafe { quantize_q8::<false>(x, out) }
}

/// Quantizes `x` (whole 32-element blocks) into the Q8_1 blocks `out`.
///
/// # Safety
/// AVX-512 F/BW/VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_q8_1(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    unsafe { quantize_q8::<true>(x, out) }
}

/// The format, block bytes and offset of the codes of Q8_0 (`SUM` false)
/// or Q8_1 (`SUM` true: `s` after `d`).
const fn q8_layout<const SUM: bool>() -> (DType, usize, usize) {
    if SUM {
        (DType::Q8_1, Q8_1_BLOCK_BYTES, 4)
    } else {
        (DType::Q8_0, BLOCK_BYTES, 2)
    }
}

/// Writes `d` (and, with `SUM`, `s = d·sum`) as f16 at the start of `ob`.
#[inline(always)]
fn write_scales<const SUM: bool>(ob: &mut [u8], d: f32, sum: i32) {
    ob[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
    if SUM {
        ob[2..4].copy_from_slice(&half::f16::from_f32(sum as f32 * d).to_le_bytes());
    }
}

/// Quantizes `x` (whole 32-element blocks) into Q8_0 (`SUM` false) or Q8_1
/// (`SUM` true) blocks `out`, sixteen lanes at a time.
///
/// # Safety
/// AVX-512 F/BW/VL present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantize_q8<const SUM: bool>(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    let (dtype, bb, at) = const { q8_layout::<SUM>() };
    fused_core::error::check_len("Q8_0/Q8_1 blocks", x.len() / QK * bb, out.len())?;
    let half = _mm512_set1_ps(ROUND_HALF);
    let sign = _mm512_set1_epi32(i32::MIN);
    for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(bb)) {
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
            fused_core::quant::quantize_row(dtype, xb, ob)?;
            continue;
        }
        let (ia, ib) = (_mm512_cvttps_epi32(ta), _mm512_cvttps_epi32(tb));
        let sum = if SUM {
            _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ib))
        } else {
            0
        };
        write_scales::<SUM>(ob, d, sum);
        // SAFETY: `ob` holds `at + 32` bytes: 16 at `at` and 16 at `at +
        // 16`, unaligned.
        unsafe {
            _mm_storeu_si128(ob.as_mut_ptr().add(at).cast(), _mm512_cvtepi32_epi8(ia));
            _mm_storeu_si128(
                ob.as_mut_ptr().add(at + 16).cast(),
                _mm512_cvtepi32_epi8(ib),
            );
        }
    }
    Ok(())
}

/// Quantizes `x` (whole 32-element blocks) into the Q8_0 blocks `out`.
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_q8_0_avx2(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    unsafe { quantize_q8_avx2::<false>(x, out) }
}

/// Quantizes `x` (whole 32-element blocks) into the Q8_1 blocks `out`.
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_q8_1_avx2(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    // SAFETY: forwarded from the caller.
    unsafe { quantize_q8_avx2::<true>(x, out) }
}

/// [`quantize_q8`] eight lanes at a time, with AVX2 only.
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
unsafe fn quantize_q8_avx2<const SUM: bool>(x: &[f32], out: &mut [u8]) -> Result<(), Error> {
    let (dtype, bb, at) = const { q8_layout::<SUM>() };
    fused_core::error::check_len("Q8_0/Q8_1 blocks", x.len() / QK * bb, out.len())?;
    let half = _mm256_set1_ps(ROUND_HALF);
    let sign = _mm256_set1_ps(-0.0);
    let lim = _mm256_set1_ps(127.0);
    for (xb, ob) in x.chunks_exact(QK).zip(out.chunks_exact_mut(bb)) {
        // SAFETY: `xb` holds 32 f32: four unaligned 8-lane loads.
        let v: [__m256; 4] =
            core::array::from_fn(|i| unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * i)) });
        let abs = |v: __m256| _mm256_andnot_ps(sign, v);
        let m = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        let t = v.map(|v| {
            let p = _mm256_mul_ps(v, id);
            let r = _mm256_add_ps(p, _mm256_or_ps(_mm256_and_ps(p, sign), half));
            _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(r)
        });
        // As in `quantize_q8`: the core decides where a code leaves ±127.
        let small = t
            .iter()
            .all(|&t| _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(abs(t), lim)) == 0xff);
        if !small {
            fused_core::quant::quantize_row(dtype, xb, ob)?;
            continue;
        }
        let q = t.map(|t| _mm256_cvttps_epi32(t));
        let sum = if SUM {
            let s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
        } else {
            0
        };
        write_scales::<SUM>(ob, d, sum);
        // Packed to i16 then i8 per 128-bit lane (dwords `a0 b0 c0 d0 | a1
        // b1 c1 d1` of the four vectors' halves), then put in order.
        let w = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let codes = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: `ob` holds `at + 32` bytes; unaligned store.
        unsafe { _mm256_storeu_si256(ob.as_mut_ptr().add(at).cast(), codes) };
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;
    use std::{format, vec};

    /// Blocks of 32 edge cases and random values: exact ties after scaling
    /// (`amax` 127 gives `d = 1`: `k ± 0.5` round away from zero, and the
    /// values just inside them, `0.5 − ε/4` past an integer, round towards
    /// it), ±127 after scaling (both signs of the largest), zeros and
    /// signed zeros, subnormals (a subnormal `d`, whose `1/d` overflows),
    /// huge values, NaN and infinities anywhere in a block, then random
    /// values at several scales.
    fn inputs() -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut x: Vec<f32> = Vec::new();
        for sign in [1.0f32, -1.0] {
            x.extend((0..32).map(|i| match i {
                0 => 127.0 * sign,
                i => sign * ((i as f32 - 16.0) * 3.0 + if i % 2 == 0 { 0.5 } else { -0.5 }),
            }));
            x.extend((0..32).map(|i| match i {
                0 => -127.0 * sign,
                i => sign * ((i as f32 - 16.0) * 3.0 + ROUND_HALF),
            }));
        }
        x.extend((0..32).map(|i| {
            if i == 9 {
                -3.5
            } else if i == 20 {
                3.5
            } else {
                0.25
            }
        }));
        x.extend([0.0f32; 32]);
        x.extend((0..32).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 }));
        x.extend((0..32).map(|i| 1e-45 * i as f32));
        x.extend((0..32).map(|i| -1e-40 * (i % 5) as f32));
        x.extend((0..32).map(|i| 3.0e38 * if i % 3 == 0 { -1.0 } else { 0.5 }));
        for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for at in [0, 7, 31] {
                let mut b: Vec<f32> = (0..32).map(|_| next()).collect();
                b[at] = special;
                x.extend(b);
            }
        }
        x.extend([f32::NAN; 32]);
        for scale in [1e-30f32, 1e-3, 1.0, 7.0, 254.0, 1e20] {
            x.extend((0..32 * 40).map(|_| next() * scale));
        }
        x
    }

    /// The AVX-512 and AVX2 Q8_0 and Q8_1 quantizers write the core's bytes
    /// for every block of [`inputs`] (the core's `s` included).
    #[test]
    fn q8_0_q8_1_match_the_core() {
        use std::io::Write;
        let x = inputs();
        let isa = crate::isa::Isa::detect();
        let mut ran = 0;
        for (dtype, avx512, avx2) in [
            (
                DType::Q8_0,
                quantize_q8_0 as Quantizer,
                quantize_q8_0_avx2 as Quantizer,
            ),
            (DType::Q8_1, quantize_q8_1, quantize_q8_1_avx2),
        ] {
            let mut want = vec![0u8; dtype.row_bytes(x.len()).unwrap()];
            fused_core::quant::quantize_row(dtype, &x, &mut want).unwrap();
            let bb = dtype.row_bytes(QK).unwrap();
            for (name, f, here) in [
                ("avx512", avx512, isa >= crate::isa::Isa::Avx512),
                ("avx2", avx2, isa >= crate::isa::Isa::Avx2),
            ] {
                if !here {
                    let _ = writeln!(std::io::stderr(), "skipped: no {name} on this machine");
                    continue;
                }
                let mut got = vec![0u8; want.len()];
                // SAFETY: `Isa::detect()` confirmed the quantizer's
                // features.
                unsafe { f(&x, &mut got) }.unwrap();
                for (b, (g, w)) in got.chunks_exact(bb).zip(want.chunks_exact(bb)).enumerate() {
                    let what = format!("{dtype} {name} block {b}: {:?}", &x[QK * b..QK * (b + 1)]);
                    assert_eq!(g, w, "{what}");
                }
                // A wrong output length is an error.
                // SAFETY: as above.
                assert!(unsafe { f(&x, &mut got[1..]) }.is_err());
                ran += 1;
            }
        }
        assert!(ran > 0 || isa < crate::isa::Isa::Avx2);
    }
}
