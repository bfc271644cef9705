//! x86-64 AVX-512 (F/BW/VL + VNNI) kernels, on 256-bit vectors.
//!
//! The 32-element formats pair two blocks per vector: the first 16 codes of
//! blocks `b` and `b + 1` in one `ymm`, their last 16 in another, each
//! matched by the same halves of the two Q8_0 activation blocks. Two
//! chained `vpdpbusd` (unsigned weight codes × signed activations) then
//! leave four i32 lanes per block, and three `hadd` reduce four such pairs
//! to one exact i32 per block for eight blocks, which are converted to f32
//! and multiplied by the eight `dx·dy` (gathered with `vpermt2w`, widened
//! with F16C) in one FMA. Offsets are subtracted exactly in i32: Q4_0 codes
//! are `u − 8`, so `Σ(u − 8)·y = Σu·y − Σ8·y`; Q8_0 weights are biased to
//! `x + 128`, so `Σx·y = Σ(x + 128)·y − Σ128·y`. Both are exact for every
//! byte value.
//!
//! Q4_K and Q6_K keep the AVX2 structure (`maddubs` of the unsigned codes,
//! then the sub-block scales) with the scale multiply-add fused into
//! `vpdpwssd` and two independent accumulators. Tails shorter than eight
//! blocks and the float formats use the AVX2 kernels.
//!
//! The AVX-512 intrinsics and `target_feature` names used here are stable
//! since Rust 1.89, the workspace's `rust-version`.

use core::arch::x86_64::*;

use fused_core::reference::ActQuant;
use fused_core::{DType, Error};

use super::RowDot;
use super::x86_avx2::{
    self as avx2, Q4K_BYTES, Q6K_BYTES, Q8K_BYTES, check_quant, f16x8, hsum_i32, hsum_ps,
    legacy_loop, rdf16, reduce8,
};
use crate::acts::Acts;

/// The avx512 kernel for weights of `dtype` fed activations in `mode`, if any.
pub fn row_dot(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) => Some(dot_q4_0_q8_0),
        (DType::Q8_0, ActQuant::Q8_0) => Some(dot_q8_0_q8_0),
        (DType::Q4_K, ActQuant::Q8_K) => Some(dot_q4_k_q8_k),
        (DType::Q6_K, ActQuant::Q8_K) => Some(dot_q6_k_q8_k),
        _ => None,
    }
}

/// The avx512 four-row kernel for weights of `dtype` fed activations in
/// `mode`, if any.
pub fn row_dot4(dtype: DType, mode: ActQuant) -> Option<super::RowDot4> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) => Some(dot4_q4_0_q8_0),
        _ => None,
    }
}

/// Q4_0 × Q8_0 for four rows at once: each activation block pair and its
/// `8·Σy` offset term are loaded and computed once for the four rows.
fn dot4_q4_0_q8_0(
    dtype: DType,
    rows: [&[u8]; 4],
    acts: &Acts<'_>,
    k: usize,
) -> Result<[f32; 4], Error> {
    let y = check_quant(DType::Q4_0, dtype, rows[0], acts, k)?;
    for r in &rows[1..] {
        check_quant(DType::Q4_0, dtype, r, acts, k)?;
    }
    let nb = k / DType::Q4_0.block_len();
    let w = [
        rows[0].as_ptr(),
        rows[1].as_ptr(),
        rows[2].as_ptr(),
        rows[3].as_ptr(),
    ];
    // SAFETY: this function is only returned by `row_dot4`, which the
    // dispatcher (`kernels::row_dot4`) consults only for an ISA that
    // `Isa::is_supported()` confirmed (Avx512), so AVX-512 F/BW/VL/VNNI,
    // AVX2, FMA and F16C are present. `check_quant` verified that every row
    // and `y` hold exactly `nb` blocks, which is all the kernel reads.
    Ok(unsafe { q4_0_q8_0_x4(w, y.as_ptr(), nb) })
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds `nb`
/// Q4_0 blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_0_q8_0_x4(w: [*const u8; 4], y: *const u8, nb: usize) -> [f32; 4] {
    const WB: usize = 18;
    const YB: usize = 34;
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut b = 0usize;
    while b + 8 <= nb {
        let mut p = [[zero; 4]; 4];
        for i in 0..4 {
            // SAFETY: blocks `b + 2i` and `b + 2i + 1` are below `nb`; the
            // reads are the activation blocks' `qs` fields.
            let (y1, y2) = unsafe {
                let yp = y.add((b + 2 * i) * YB);
                (
                    pair128(yp.add(2), yp.add(YB + 2)),
                    pair128(yp.add(18), yp.add(YB + 18)),
                )
            };
            let s = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(zero, eight, y1), eight, y2);
            for (r, pr) in p.iter_mut().enumerate() {
                // SAFETY: the same two blocks of weight row `r`: its `qs`.
                let v = unsafe {
                    let wp = w[r].add((b + 2 * i) * WB);
                    pair128(wp.add(2), wp.add(WB + 2))
                };
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                let t = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(zero, lo, y1), hi, y2);
                pr[i] = _mm256_sub_epi32(t, s);
            }
        }
        // SAFETY: blocks `b..b + 8` of the activations are in bounds (272
        // bytes, 256 read).
        let dy = unsafe { d8_q8_0(y.add(b * YB)) };
        for r in 0..4 {
            let isum = _mm256_cvtepi32_ps(reduce_pairs(&p[r]));
            // SAFETY: blocks `b..b + 8` of row `r` (144 bytes, 128 read).
            let dx = unsafe { d8_q4_0(w[r].add(b * WB)) };
            acc[r] = _mm256_fmadd_ps(isum, _mm256_mul_ps(dx, dy), acc[r]);
        }
        b += 8;
    }
    let mut out = [0.0f32; 4];
    for r in 0..4 {
        // SAFETY: the remaining `nb − b` blocks of row `r` and of `y`;
        // AVX2/FMA/F16C are part of this function's features.
        out[r] =
            hsum_ps(acc[r]) + unsafe { avx2::q4_0_q8_0(w[r].add(b * WB), y.add(b * YB), nb - b) };
    }
    out
}

macro_rules! quant_entry {
    ($(#[$m:meta])* $name:ident, $dt:expr, $imp:ident) => {
        $(#[$m])*
        fn $name(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
            let y = check_quant($dt, dtype, w_row, acts, k)?;
            let nb = k / $dt.block_len();
            // SAFETY: this function is only returned by `row_dot`, which the
            // dispatcher (`kernels::row_dot`) consults only for an ISA that
            // `Isa::is_supported()` confirmed (Avx512 or better), so
            // AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C are present.
            // `check_quant` verified that `w_row` and `y` hold exactly `nb`
            // blocks each, which is all the kernel reads.
            Ok(unsafe { $imp(w_row.as_ptr(), y.as_ptr(), nb) })
        }
    };
}

quant_entry!(
    /// Q4_0 × Q8_0.
    dot_q4_0_q8_0, DType::Q4_0, q4_0_q8_0
);
quant_entry!(
    /// Q8_0 × Q8_0.
    dot_q8_0_q8_0, DType::Q8_0, q8_0_q8_0
);
quant_entry!(
    /// Q4_K × Q8_K.
    dot_q4_k_q8_k, DType::Q4_K, q4_k_q8_k
);
quant_entry!(
    /// Q6_K × Q8_K.
    dot_q6_k_q8_k, DType::Q6_K, q6_k_q8_k
);

/// 16 bytes at `p` in the low half and 16 at `q` in the high half.
///
/// # Safety
/// `p..p + 16` and `q..q + 16` must be readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn pair128(p: *const u8, q: *const u8) -> __m256i {
    // SAFETY: the caller guarantees both 16-byte reads; unaligned loads.
    let (a, b) = unsafe { (_mm_loadu_si128(p.cast()), _mm_loadu_si128(q.cast())) };
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b)
}

/// The i16 at word `i` of `[a | b]` (64 words) for each of the first eight
/// lanes of `idx`, widened from f16 to f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn f16_pick(a: __m512i, idx: [i16; 8], b: __m512i) -> __m512i {
    let [i0, i1, i2, i3, i4, i5, i6, i7] = idx;
    let idx = _mm512_zextsi128_si512(_mm_setr_epi16(i0, i1, i2, i3, i4, i5, i6, i7));
    _mm512_permutex2var_epi16(a, idx, b)
}

/// The `d` of eight 18-byte blocks at `p` (Q4_0), in the lane order
/// `[0, 2, 4, 6, 1, 3, 5, 7]` that the pair reduction leaves.
///
/// # Safety
/// `p..p + 128` must be readable (eight blocks hold 144 bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn d8_q4_0(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 128 readable bytes; unaligned loads.
    let (a, b) = unsafe {
        (
            _mm512_loadu_si512(p.cast()),
            _mm512_loadu_si512(p.add(64).cast()),
        )
    };
    let r = f16_pick(a, [0, 18, 36, 54, 9, 27, 45, 63], b);
    _mm256_cvtph_ps(_mm512_castsi512_si128(r))
}

/// The `d` of eight 34-byte blocks at `p` (Q8_0), in the lane order
/// `[0, 2, 4, 6, 1, 3, 5, 7]`.
///
/// # Safety
/// `p..p + 256` must be readable (eight blocks hold 272 bytes).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn d8_q8_0(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 256 readable bytes; unaligned loads.
    let (a, b, c, d) = unsafe {
        (
            _mm512_loadu_si512(p.cast()),
            _mm512_loadu_si512(p.add(64).cast()),
            _mm512_loadu_si512(p.add(128).cast()),
            _mm512_loadu_si512(p.add(192).cast()),
        )
    };
    // Blocks 0..4 have their `d` at words 0, 17, 34, 51 of `[a | b]`, blocks
    // 4..8 at words 4, 21, 38, 55 of `[c | d]`.
    let r1 = f16_pick(a, [0, 34, 0, 0, 17, 51, 0, 0], b);
    let r2 = f16_pick(c, [0, 0, 4, 38, 0, 0, 21, 55], d);
    let r = _mm512_mask_blend_epi16(0b1100_1100, r1, r2);
    _mm256_cvtph_ps(_mm512_castsi512_si128(r))
}

/// Reduces four pair vectors (`[block 2i: 4 lanes | block 2i + 1: 4 lanes]`)
/// to the eight block sums in lane order `[0, 2, 4, 6, 1, 3, 5, 7]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn reduce_pairs(p: &[__m256i; 4]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]))
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; `w` holds `nb` Q4_0
/// blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_0_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    const WB: usize = 18;
    const YB: usize = 34;
    let m4 = _mm256_set1_epi8(0x0f);
    let eight = _mm256_set1_epi8(8);
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_ps();
    let mut b = 0usize;
    while b + 8 <= nb {
        let mut p = [zero; 4];
        for (i, pi) in p.iter_mut().enumerate() {
            // SAFETY: blocks `b + 2i` and `b + 2i + 1` are below `nb`; the
            // reads are their `qs` fields.
            let (v, y1, y2) = unsafe {
                let (wp, yp) = (w.add((b + 2 * i) * WB), y.add((b + 2 * i) * YB));
                (
                    pair128(wp.add(2), wp.add(WB + 2)),
                    pair128(yp.add(2), yp.add(YB + 2)),
                    pair128(yp.add(18), yp.add(YB + 18)),
                )
            };
            let lo = _mm256_and_si256(v, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            let t = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(zero, lo, y1), hi, y2);
            let s = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(zero, eight, y1), eight, y2);
            *pi = _mm256_sub_epi32(t, s);
        }
        let isum = _mm256_cvtepi32_ps(reduce_pairs(&p));
        // SAFETY: blocks `b..b + 8` are in bounds: 144 weight bytes and 272
        // activation bytes, more than the 128 and 256 read.
        let (dx, dy) = unsafe { (d8_q4_0(w.add(b * WB)), d8_q8_0(y.add(b * YB))) };
        acc = _mm256_fmadd_ps(isum, _mm256_mul_ps(dx, dy), acc);
        b += 8;
    }
    let head = avx2::hsum_ps(acc);
    // SAFETY: the remaining `nb − b` blocks of both rows; AVX2/FMA/F16C are
    // part of this function's features.
    head + unsafe { avx2::q4_0_q8_0(w.add(b * WB), y.add(b * YB), nb - b) }
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; `w` holds `nb` Q4_K
/// blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q4_k_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * Q4K_BYTES), y.add(b * Q8K_BYTES)) };
        // SAFETY: the header fields and `bsums` of the two blocks.
        let (d, dmin, (sc, m), bsums) = unsafe {
            let dy = avx2::rdf32(yp);
            (
                avx2::rdf16(wp) * dy,
                avx2::rdf16(wp.add(2)) * dy,
                avx2::kscales(wp.add(4)),
                _mm256_loadu_si256(yp.add(260).cast()),
            )
        };
        let mins = _mm256_madd_epi16(bsums, avx2::dup_mins(m));
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(dmin), accm);
        let scv = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let mut i0 = _mm256_setzero_si256();
        let mut i1 = _mm256_setzero_si256();
        for c in 0..4 {
            // SAFETY: `qs[32c..32c + 32]` and `qs[64c..64c + 64]` of the blocks.
            let (q, y0, y1) = unsafe {
                (
                    _mm256_loadu_si256(wp.add(16 + 32 * c).cast()),
                    _mm256_loadu_si256(yp.add(4 + 64 * c).cast()),
                    _mm256_loadu_si256(yp.add(4 + 64 * c + 32).cast()),
                )
            };
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            let s0 = _mm256_shuffle_epi8(scv, avx2::bcast16_mask(2 * c, 2 * c));
            let s1 = _mm256_shuffle_epi8(scv, avx2::bcast16_mask(2 * c + 1, 2 * c + 1));
            i0 = _mm256_dpwssd_epi32(i0, _mm256_maddubs_epi16(lo, y0), s0);
            i1 = _mm256_dpwssd_epi32(i1, _mm256_maddubs_epi16(hi, y1), s1);
        }
        let isum = _mm256_add_epi32(i0, i1);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
    }
    avx2::hsum_ps(acc) - avx2::hsum_ps(accm)
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; `w` holds `nb` Q6_K
/// blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * Q6K_BYTES), y.add(b * Q8K_BYTES)) };
        // SAFETY: `scales`, `d` of the weight block, `d`, `bsums` of the
        // activation block.
        let (d, sc8, bsums) = unsafe {
            (
                avx2::rdf16(wp.add(208)) * avx2::rdf32(yp),
                _mm_loadu_si128(wp.add(192).cast()),
                _mm256_loadu_si256(yp.add(260).cast()),
            )
        };
        // Σ sc·(q − 32)·y = Σ sc·q·y − 32·Σ_g sc_g·bsum_g.
        let corr = _mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(sc8));
        let mut i0 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        let mut i1 = _mm256_setzero_si256();
        let sa = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
        let sb = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
        for h in 0..2 {
            // SAFETY: `ql[64h..64h + 64]`, `qh[32h..32h + 32]`.
            let q = unsafe { avx2::q6_half(wp.add(64 * h), wp.add(128 + 32 * h)) };
            let sv = if h == 0 { sa } else { sb };
            for (t, qt) in q.iter().enumerate() {
                // SAFETY: activation codes `128h + 32t .. + 32`.
                let yv = unsafe { _mm256_loadu_si256(yp.add(4 + 128 * h + 32 * t).cast()) };
                let s = _mm256_shuffle_epi8(sv, avx2::bcast16_mask(2 * t, 2 * t + 1));
                let p = _mm256_maddubs_epi16(*qt, yv);
                if t % 2 == 0 {
                    i0 = _mm256_dpwssd_epi32(i0, p, s);
                } else {
                    i1 = _mm256_dpwssd_epi32(i1, p, s);
                }
            }
        }
        let isum = _mm256_add_epi32(i0, i1);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
    }
    avx2::hsum_ps(acc)
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; `w` and `y` hold `nb`
/// Q8_0 blocks each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_0_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let bias = _mm256_set1_epi8(-128);
    let zero = _mm256_setzero_si256();
    legacy_loop!(w, y, nb, 34, 34, |wp, yp| {
        // SAFETY: `qs` of both blocks.
        let (x, q) = unsafe {
            (
                _mm256_loadu_si256(wp.add(2).cast()),
                _mm256_loadu_si256(yp.add(2).cast()),
            )
        };
        let u = _mm256_xor_si256(x, bias);
        _mm256_sub_epi32(
            _mm256_dpbusd_epi32(zero, u, q),
            _mm256_dpbusd_epi32(zero, bias, q),
        )
    })
}
