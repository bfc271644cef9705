//! x86-64 AVX2 + FMA + F16C kernels.
//!
//! Every kernel is a safe [`RowDot`] that validates its inputs (weight
//! format, activation variant and format, byte lengths) and returns the
//! core's errors, then calls an `unsafe fn` compiled with
//! `#[target_feature(enable = "avx2,fma,f16c")]`.
//!
//! The quantized kernels keep GGML's arithmetic structure: integer dot
//! products per block (or per super-block lane) that are exact in i32, then
//! one f32 multiply by the block scales. Only the order of the f32 additions
//! differs from the scalar reference. Eight 32-element blocks are processed
//! per iteration: their per-lane integer sums are reduced to one i32 per
//! block with a `hadd` tree, converted to f32 and multiplied by the eight
//! block scales (`dx·dy`, converted with F16C) in one FMA. Q6_K and TQ2_0
//! do the same with eight super-blocks: their offsets come from the
//! `bsums` into lanes of their own, so a block's lanes must be added up
//! before they meet its scale (see `q8k_loop`).
//!
//! Signed × signed byte products use `maddubs` on `|x|` and `sign(y, x)`
//! (GGML's trick); it is exact for codes in `-127..=127`, which is all the
//! core's quantizers write (a code of −128 on both sides may saturate).
//! Unsigned-code formats (Q4_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K, TQ2_0) feed
//! the unsigned codes to `maddubs` directly and subtract the offset (`8·Σy`,
//! `32·Σ sc·bsum`, `Σ bsum`) exactly, for any activation byte. BF16 widens
//! to f32 by a 16-bit shift; F16 with F16C.

use core::arch::x86_64::*;

use fused_core::acts::ActQuant;
use fused_core::{DType, Error};

use super::RowDot;
pub(super) use super::common::{check_f32, check_quant, kscales, rd16, rdf16, rdf32};
use crate::acts::Acts;

/// The avx2 kernel for weights of `dtype` fed activations in `mode`, if any.
pub fn row_dot(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) => Some(dot_q4_0_q8_0),
        (DType::Q4_1, ActQuant::Q8_1) => Some(dot_q4_1_q8_1),
        (DType::Q5_0, ActQuant::Q8_0) => Some(dot_q5_0_q8_0),
        (DType::Q8_0, ActQuant::Q8_0) => Some(dot_q8_0_q8_0),
        (DType::IQ4_NL, ActQuant::Q8_0) => Some(dot_iq4_nl_q8_0),
        (DType::Q4_K, ActQuant::Q8_K) => Some(dot_q4_k_q8_k),
        (DType::Q6_K, ActQuant::Q8_K) => Some(dot_q6_k_q8_k),
        (DType::Q5_1, ActQuant::Q8_1) => Some(dot_q5_1_q8_1),
        (DType::Q5_K, ActQuant::Q8_K) => Some(dot_q5_k_q8_k),
        (DType::TQ2_0, ActQuant::Q8_K) => Some(dot_tq2_0_q8_k),
        (DType::F16, ActQuant::F32) => Some(dot_f16_f32),
        (DType::BF16, ActQuant::F32) => Some(dot_bf16_f32),
        (DType::F32, ActQuant::F32) => Some(dot_f32_f32),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Safe entry points.

macro_rules! quant_entry {
    ($(#[$m:meta])* $name:ident, $dt:expr, $imp:ident) => {
        $(#[$m])*
        fn $name(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
            let y = check_quant($dt, dtype, w_row, acts, k)?;
            let nb = k / $dt.block_len();
            // SAFETY: this function is only returned by `row_dot`, which the
            // dispatcher (`kernels::row_dot`) consults only for an ISA that
            // `Isa::is_supported()` confirmed, so AVX2, FMA and F16C are
            // present. `check_quant` verified that `w_row` and `y` hold
            // exactly `nb` blocks each, which is all the kernel reads.
            Ok(unsafe { $imp(w_row.as_ptr(), y.as_ptr(), nb) })
        }
    };
}

quant_entry!(
    /// Q4_0 × Q8_0.
    dot_q4_0_q8_0, DType::Q4_0, q4_0_q8_0
);
quant_entry!(
    /// Q4_1 × Q8_1.
    dot_q4_1_q8_1, DType::Q4_1, q4_1_q8_1
);
quant_entry!(
    /// Q5_0 × Q8_0.
    dot_q5_0_q8_0, DType::Q5_0, q5_0_q8_0
);
quant_entry!(
    /// Q8_0 × Q8_0.
    dot_q8_0_q8_0, DType::Q8_0, q8_0_q8_0
);
quant_entry!(
    /// IQ4_NL × Q8_0.
    dot_iq4_nl_q8_0, DType::IQ4_NL, iq4_nl_q8_0
);
quant_entry!(
    /// Q4_K × Q8_K.
    dot_q4_k_q8_k, DType::Q4_K, q4_k_q8_k
);
quant_entry!(
    /// Q6_K × Q8_K.
    dot_q6_k_q8_k, DType::Q6_K, q6_k_q8_k
);
quant_entry!(
    /// Q5_1 × Q8_1.
    dot_q5_1_q8_1, DType::Q5_1, q5_1_q8_1
);
quant_entry!(
    /// Q5_K × Q8_K.
    dot_q5_k_q8_k, DType::Q5_K, q5_k_q8_k
);
quant_entry!(
    /// TQ2_0 × Q8_K.
    dot_tq2_0_q8_k, DType::TQ2_0, tq2_0_q8_k
);

/// F16 × F32.
fn dot_f16_f32(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let x = check_f32(DType::F16, dtype, w_row, acts, k)?;
    // SAFETY: this function is only returned by `row_dot`, which the
    // dispatcher (`kernels::row_dot`) consults only for an ISA that
    // `Isa::is_supported()` confirmed, so AVX2, FMA and F16C are present.
    // `check_f32` verified `w_row.len() == 2·k` and `x.len() == k`.
    Ok(unsafe { half_f32::<false>(w_row.as_ptr(), x.as_ptr(), k) })
}

/// BF16 × F32.
fn dot_bf16_f32(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let x = check_f32(DType::BF16, dtype, w_row, acts, k)?;
    // SAFETY: as in `dot_f16_f32`; `check_f32` verified `w_row.len() == 2·k`
    // and `x.len() == k`.
    Ok(unsafe { half_f32::<true>(w_row.as_ptr(), x.as_ptr(), k) })
}

/// F32 × F32.
fn dot_f32_f32(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let x = check_f32(DType::F32, dtype, w_row, acts, k)?;
    // SAFETY: as in `dot_f16_f32`; `check_f32` verified `w_row.len() == 4·k`
    // and `x.len() == k`.
    Ok(unsafe { f32_f32(w_row.as_ptr(), x.as_ptr(), k) })
}

// ---------------------------------------------------------------------------
// Helpers (shared with the AVX-512 kernels, which enable a superset of these
// features, so they inline there).

/// The eight f16 values at `p`, `p + stride`, …, `p + 7·stride`, as f32.
///
/// # Safety
/// Each of the eight 2-byte locations must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn f16x8(p: *const u8, stride: usize) -> __m256 {
    // SAFETY: the caller guarantees the eight 2-byte reads are in bounds.
    let (lo, hi) = unsafe {
        (
            rd16(p)
                | rd16(p.add(stride)) << 16
                | rd16(p.add(2 * stride)) << 32
                | rd16(p.add(3 * stride)) << 48,
            rd16(p.add(4 * stride))
                | rd16(p.add(5 * stride)) << 16
                | rd16(p.add(6 * stride)) << 32
                | rd16(p.add(7 * stride)) << 48,
        )
    };
    _mm256_cvtph_ps(_mm_set_epi64x(hi as i64, lo as i64))
}

/// Reduces eight vectors of eight i32 lanes to one vector whose lane `i` is
/// the (exact, wrapping) sum of the lanes of `s[i]`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn reduce8(s: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(s[0], s[1]);
    let h23 = _mm256_hadd_epi32(s[2], s[3]);
    let h45 = _mm256_hadd_epi32(s[4], s[5]);
    let h67 = _mm256_hadd_epi32(s[6], s[7]);
    let a = _mm256_hadd_epi32(h01, h23);
    let b = _mm256_hadd_epi32(h45, h67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256(a, b, 0x20),
        _mm256_permute2x128_si256(a, b, 0x31),
    )
}

/// The sum of the eight i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// The sum of the eight f32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The 32 4-bit codes of a Q4-style `qs` (16 bytes at `p`) in element order:
/// low nibbles (elements 0..16) in the low half, high nibbles in the high.
///
/// # Safety
/// `p..p + 16` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn nibbles32(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned load.
    let q = unsafe { _mm_loadu_si128(p.cast()) };
    let q = _mm256_broadcastsi128_si256(q);
    _mm256_and_si256(
        _mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0)),
        _mm256_set1_epi8(0x0f),
    )
}

/// The 32 fifth bits of a Q5 block (`qh` at `p`, a little-endian u32) as
/// bytes `0x10` (bit set) or `0` in element order.
///
/// # Safety
/// `p..p + 4` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn fifth_bits(p: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes; unaligned read.
    let bits = u32::from_le(unsafe { p.cast::<u32>().read_unaligned() });
    let v = _mm256_set1_epi32(bits as i32);
    // Byte j of the result takes source byte j / 8.
    let v = _mm256_shuffle_epi8(
        v,
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let on = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    _mm256_and_si256(on, _mm256_set1_epi8(0x10))
}

/// `Σ_j a_j·b_j` over 32 unsigned bytes `a` and signed bytes `b`, as eight
/// i32 lanes (exact when every adjacent pair sum fits i16, i.e. `a ≤ 127`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_u8i8(a: __m256i, b: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1))
}

/// `Σ_j (a_j − off)·b_j` for unsigned codes `a ≤ 63` and offset `off ≤ 63`
/// (given as a byte vector), exact for any signed `b`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_off(a: __m256i, off: __m256i, b: __m256i) -> __m256i {
    let p = _mm256_sub_epi16(_mm256_maddubs_epi16(a, b), _mm256_maddubs_epi16(off, b));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// `Σ_j x_j·y_j` for signed codes (exact for codes in `-127..=127`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_i8i8(x: __m256i, y: __m256i) -> __m256i {
    dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

// ---------------------------------------------------------------------------
// 32-element block formats against Q8_0 / Q8_1.

/// Runs `block` (per-block i32 lanes) over `nb` blocks, eight at a time, and
/// returns `Σ_b isum_b · dx_b · dy_b`. `WB`/`YB` are the block sizes, the
/// weight and activation `d` at offset 0 of their blocks. The tail (fewer
/// than eight blocks) is done one block at a time.
macro_rules! legacy_loop {
    ($w:ident, $y:ident, $nb:ident, $WB:expr, $YB:expr, |$wp:ident, $yp:ident| $block:expr) => {{
        let mut acc = _mm256_setzero_ps();
        let mut b = 0usize;
        while b + 8 <= $nb {
            let mut s = [_mm256_setzero_si256(); 8];
            for (i, si) in s.iter_mut().enumerate() {
                // SAFETY: block `b + i < nb`, in bounds of both rows.
                let ($wp, $yp) = unsafe { ($w.add((b + i) * $WB), $y.add((b + i) * $YB)) };
                *si = $block;
            }
            let isum = _mm256_cvtepi32_ps(reduce8(&s));
            // SAFETY: the eight `d` fields of blocks `b..b + 8`.
            let (dx, dy) = unsafe { (f16x8($w.add(b * $WB), $WB), f16x8($y.add(b * $YB), $YB)) };
            acc = _mm256_fmadd_ps(isum, _mm256_mul_ps(dx, dy), acc);
            b += 8;
        }
        let mut sum = hsum_ps(acc);
        while b < $nb {
            // SAFETY: block `b < nb`, in bounds of both rows.
            let ($wp, $yp) = unsafe { ($w.add(b * $WB), $y.add(b * $YB)) };
            let isum = hsum_i32($block) as f32;
            // SAFETY: the `d` fields of block `b`.
            let (dx, dy) = unsafe { (rdf16($wp), rdf16($yp)) };
            sum += isum * (dx * dy);
            b += 1;
        }
        sum
    }};
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q4_0 blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_0_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let eight = _mm256_set1_epi8(8);
    legacy_loop!(w, y, nb, 18, 34, |wp, yp| {
        // SAFETY: `qs` of the weight block and of the activation block.
        let (u, q) = unsafe { (nibbles32(wp.add(2)), _mm256_loadu_si256(yp.add(2).cast())) };
        dot_off(u, eight, q)
    })
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q5_0 blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_0_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let sixteen = _mm256_set1_epi8(16);
    legacy_loop!(w, y, nb, 22, 34, |wp, yp| {
        // SAFETY: `qh`, `qs` of the weight block, `qs` of the activations.
        let (u, q) = unsafe {
            (
                _mm256_or_si256(nibbles32(wp.add(6)), fifth_bits(wp.add(2))),
                _mm256_loadu_si256(yp.add(2).cast()),
            )
        };
        dot_off(u, sixteen, q)
    })
}

/// # Safety
/// AVX2/FMA/F16C present; `w` and `y` hold `nb` Q8_0 blocks each.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q8_0_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    legacy_loop!(w, y, nb, 34, 34, |wp, yp| {
        // SAFETY: `qs` of both blocks.
        let (x, q) = unsafe {
            (
                _mm256_loadu_si256(wp.add(2).cast()),
                _mm256_loadu_si256(yp.add(2).cast()),
            )
        };
        dot_i8i8(x, q)
    })
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` IQ4_NL blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn iq4_nl_q8_0(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let tab = _mm_set_epi8(
        113, 89, 69, 53, 38, 25, 13, 1, -10, -22, -35, -49, -65, -83, -104, -127,
    );
    let tab = _mm256_broadcastsi128_si256(tab);
    legacy_loop!(w, y, nb, 18, 34, |wp, yp| {
        // SAFETY: `qs` of the weight block and of the activation block.
        let (u, q) = unsafe { (nibbles32(wp.add(2)), _mm256_loadu_si256(yp.add(2).cast())) };
        dot_i8i8(_mm256_shuffle_epi8(tab, u), q)
    })
}

/// Runs an affine-format × Q8_1 dot (Q4_1, Q5_1: `x = d·code + m`) over
/// `nb` blocks: `Σ_b (dx·dy)·isum_b + mx·sy`, with `isum_b = Σ code·q` from
/// the unsigned codes `$codes` of the weight block at `$wp` (block size
/// `$WB`, `d` at 0, `m` at 2). The first term is accumulated as in
/// `legacy_loop`, the second in a second accumulator; the tail (fewer than
/// eight blocks) is done one block at a time.
macro_rules! affine_loop {
    ($w:ident, $y:ident, $nb:ident, $WB:expr, |$wp:ident| $codes:expr) => {{
        let mut acc = _mm256_setzero_ps();
        let mut accm = _mm256_setzero_ps();
        let mut b = 0usize;
        while b + 8 <= $nb {
            let mut s = [_mm256_setzero_si256(); 8];
            for (i, si) in s.iter_mut().enumerate() {
                // SAFETY: block `b + i < nb`, in bounds of both rows.
                let ($wp, q) = unsafe {
                    (
                        $w.add((b + i) * $WB),
                        _mm256_loadu_si256($y.add((b + i) * 36 + 4).cast()),
                    )
                };
                *si = dot_u8i8($codes, q);
            }
            let isum = _mm256_cvtepi32_ps(reduce8(&s));
            // SAFETY: the `d`, `m`, `d`, `s` fields of blocks `b..b + 8`.
            let (dx, mx, dy, sy) = unsafe {
                (
                    f16x8($w.add(b * $WB), $WB),
                    f16x8($w.add(b * $WB + 2), $WB),
                    f16x8($y.add(b * 36), 36),
                    f16x8($y.add(b * 36 + 2), 36),
                )
            };
            acc = _mm256_fmadd_ps(isum, _mm256_mul_ps(dx, dy), acc);
            accm = _mm256_fmadd_ps(mx, sy, accm);
            b += 8;
        }
        let mut sum = hsum_ps(_mm256_add_ps(acc, accm));
        while b < $nb {
            // SAFETY: block `b < nb`, in bounds of both rows.
            let ($wp, yp) = unsafe { ($w.add(b * $WB), $y.add(b * 36)) };
            // SAFETY: `qs` of the activation block.
            let q = unsafe { _mm256_loadu_si256(yp.add(4).cast()) };
            let isum = hsum_i32(dot_u8i8($codes, q));
            let (dx, mx, dy, sy) = (
                // SAFETY: the `d` and `m` fields of weight block `b`.
                unsafe { rdf16($wp) },
                // SAFETY: as above.
                unsafe { rdf16($wp.add(2)) },
                // SAFETY: the `d` and `s` fields of activation block `b`.
                unsafe { rdf16(yp) },
                // SAFETY: as above.
                unsafe { rdf16(yp.add(2)) },
            );
            sum += (dx * dy) * isum as f32 + mx * sy;
            b += 1;
        }
        sum
    }};
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q4_1 blocks and `y` `nb` Q8_1 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_1_q8_1(w: *const u8, y: *const u8, nb: usize) -> f32 {
    affine_loop!(w, y, nb, 20, |wp| {
        // SAFETY: `qs` of the weight block.
        unsafe { nibbles32(wp.add(4)) }
    })
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q5_1 blocks and `y` `nb` Q8_1 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_1_q8_1(w: *const u8, y: *const u8, nb: usize) -> f32 {
    affine_loop!(w, y, nb, 24, |wp| {
        // SAFETY: `qh` and `qs` of the weight block (d, m, qh[4], qs[16]).
        unsafe { _mm256_or_si256(nibbles32(wp.add(8)), fifth_bits(wp.add(4))) }
    })
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K (292-byte blocks: f32 d, 256 codes, 16 i16 bsums).

pub(super) const Q8K_BYTES: usize = 292;
pub(super) const Q4K_BYTES: usize = 144;
pub(super) const Q5K_BYTES: usize = 176;
pub(super) const Q6K_BYTES: usize = 210;
pub(super) const TQ2_BYTES: usize = 66;

/// `[m0, m0, m1, m1, …, m7, m7]` as sixteen i16 from eight bytes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn dup_mins(m: u64) -> __m256i {
    let m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(m as i64));
    _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16))
}

/// A shuffle mask broadcasting i16 lane `lo` to the low 128-bit half and
/// lane `hi` to the high half (lanes 0..8 of a vector whose halves are equal).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bcast16_mask(lo: usize, hi: usize) -> __m256i {
    let m = |j: usize| (((2 * j + 1) << 8) | (2 * j)) as i16;
    _mm256_set_m128i(_mm_set1_epi16(m(hi)), _mm_set1_epi16(m(lo)))
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q4_K blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q4_k_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { q4_5_k_q8_k::<false>(w, y, nb) }
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q5_K blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q5_k_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { q4_5_k_q8_k::<true>(w, y, nb) }
}

/// Bytes `0x10` where bit `n` (0..8) of the same byte of `v` is set, else 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn bit_as_16(v: __m256i, n: usize) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << n) as i8);
    let on = _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
    _mm256_and_si256(on, _mm256_set1_epi8(0x10))
}

/// Q4_K (`Q5 = false`) or Q5_K (`Q5 = true`: the fifth bits from `qh` are
/// or-ed into the codes; the blocks are the Q4_K fields with `qh[32]`
/// inserted before `qs`) × Q8_K:
/// `Σ_b dx·dy·Σ_s sc_s·Σ code·q − dminx·dy·Σ_g m_{g/2}·bsum_g`.
///
/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` blocks of the format and `y` `nb`
/// Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q4_5_k_q8_k<const Q5: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let (wb, qs_at) = if Q5 { (Q5K_BYTES, 48) } else { (Q4K_BYTES, 16) };
    let m4 = _mm256_set1_epi8(0x0f);
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * wb), y.add(b * Q8K_BYTES)) };
        let qh = if Q5 {
            // SAFETY: `qh[0..32]` of the Q5_K block.
            unsafe { _mm256_loadu_si256(wp.add(16).cast()) }
        } else {
            _mm256_setzero_si256()
        };
        // SAFETY: the header fields and `bsums` of the two blocks.
        let (d, dmin, (sc, m), bsums) = unsafe {
            let dy = rdf32(yp);
            (
                rdf16(wp) * dy,
                rdf16(wp.add(2)) * dy,
                kscales(wp.add(4)),
                _mm256_loadu_si256(yp.add(260).cast()),
            )
        };
        let mins = _mm256_madd_epi16(bsums, dup_mins(m));
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(dmin), accm);
        let sc16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64));
        let scv = _mm256_broadcastsi128_si256(sc16);
        let mut isum = _mm256_setzero_si256();
        for c in 0..4 {
            // SAFETY: `qs[32c..32c + 32]` and `qs[64c..64c + 64]` of the blocks.
            let (q, y0, y1) = unsafe {
                (
                    _mm256_loadu_si256(wp.add(qs_at + 32 * c).cast()),
                    _mm256_loadu_si256(yp.add(4 + 64 * c).cast()),
                    _mm256_loadu_si256(yp.add(4 + 64 * c + 32).cast()),
                )
            };
            let mut lo = _mm256_and_si256(q, m4);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if Q5 {
                // Bit 2c of qh[l] is the fifth bit of element 64c + l, bit
                // 2c + 1 that of element 64c + 32 + l.
                lo = _mm256_or_si256(lo, bit_as_16(qh, 2 * c));
                hi = _mm256_or_si256(hi, bit_as_16(qh, 2 * c + 1));
            }
            let s0 = _mm256_shuffle_epi8(scv, bcast16_mask(2 * c, 2 * c));
            let s1 = _mm256_shuffle_epi8(scv, bcast16_mask(2 * c + 1, 2 * c + 1));
            let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0);
            let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d), acc);
    }
    hsum_ps(acc) - hsum_ps(accm)
}

/// The four 32-code vectors of one 128-element half of a Q6_K block (`ql`
/// at `ql`, `qh` at `qh`), codes unsigned 0..64.
///
/// # Safety
/// `ql..ql + 64` and `qh..qh + 32` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn q6_half(ql: *const u8, qh: *const u8) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    // SAFETY: the caller guarantees the reads; unaligned loads.
    let (l0, l1, h) = unsafe {
        (
            _mm256_loadu_si256(ql.cast()),
            _mm256_loadu_si256(ql.add(32).cast()),
            _mm256_loadu_si256(qh.cast()),
        )
    };
    [
        _mm256_or_si256(
            _mm256_and_si256(l0, m4),
            _mm256_and_si256(_mm256_slli_epi16(h, 4), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(l1, m4),
            _mm256_and_si256(_mm256_slli_epi16(h, 2), m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
            _mm256_and_si256(h, m30),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
            _mm256_and_si256(_mm256_srli_epi16(h, 2), m30),
        ),
    ]
}

/// Runs `block` (the exact integer dot of weight block `b` with Q8_K block
/// `b`, as eight i32 lanes of partial sums) over `nb` blocks of `WB`-byte
/// weights whose f16 `d` is at offset `DX`, and returns
/// `Σ_b isum_b·(dx_b·dy_b)`.
///
/// Each block's lanes are added up (exactly, in i32) before they meet its
/// scale, as in the reference. The lanes alone can be far larger than the
/// block's sum where a format's offset is subtracted through the `bsums`
/// (an element's `code·q` and its `−off·q` land in different lanes); scaled
/// one by one, they overflow or cancel and swallow the rest of the row when
/// one activation is huge (3e38 makes `dy = −3e38/127` and its code −127:
/// with TQ2_0 a lane of `−254·dy·dx` for `t = +1`, +inf where the reference
/// gives `−127·dy·dx`; lanes of `∓127·dy·dx` for `t = 0`, which cancel
/// and leave the rounding error of 3e38 instead of the row's ordinary
/// value). Eight blocks are reduced together (`reduce8`), converted and
/// scaled by their eight `dx·dy` in one FMA; the last `nb mod 8` blocks one
/// at a time.
macro_rules! q8k_loop {
    ($w:ident, $y:ident, $nb:ident, $WB:expr, $DX:expr, |$b:ident| $block:expr) => {{
        let mut acc = _mm256_setzero_ps();
        let mut b0 = 0usize;
        while b0 + 8 <= $nb {
            let mut s = [_mm256_setzero_si256(); 8];
            for (i, si) in s.iter_mut().enumerate() {
                let $b = b0 + i;
                *si = $block;
            }
            // SAFETY: the `d` fields of weight and activation blocks
            // `b0..b0 + 8 ≤ nb`.
            let d = unsafe { q8k_scales8($w.add(b0 * $WB + $DX), $WB, $y.add(b0 * Q8K_BYTES)) };
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(&s)), d, acc);
            b0 += 8;
        }
        let mut sum = hsum_ps(acc);
        while b0 < $nb {
            let $b = b0;
            let isum = $block;
            // SAFETY: the `d` fields of weight and activation block `b0 < nb`.
            let d = unsafe { rdf16($w.add(b0 * $WB + $DX)) * rdf32($y.add(b0 * Q8K_BYTES)) };
            sum += hsum_i32(isum) as f32 * d;
            b0 += 1;
        }
        sum
    }};
}

/// The eight block scales `dx·dy` of eight consecutive blocks: `dx` the f16
/// at `dx`, `dx + stride`, …; `dy` the f32 `d` of the eight Q8_K blocks at
/// `y`.
///
/// # Safety
/// AVX2/FMA/F16C present; the eight f16 and the eight Q8_K `d` readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q8k_scales8(dx: *const u8, stride: usize, y: *const u8) -> __m256 {
    // SAFETY: the caller guarantees the reads.
    unsafe {
        let dy = _mm256_set_ps(
            rdf32(y.add(7 * Q8K_BYTES)),
            rdf32(y.add(6 * Q8K_BYTES)),
            rdf32(y.add(5 * Q8K_BYTES)),
            rdf32(y.add(4 * Q8K_BYTES)),
            rdf32(y.add(3 * Q8K_BYTES)),
            rdf32(y.add(2 * Q8K_BYTES)),
            rdf32(y.add(Q8K_BYTES)),
            rdf32(y),
        );
        _mm256_mul_ps(f16x8(dx, stride), dy)
    }
}

/// The exact integer dot `Σ sc·(q − 32)·y` of Q6_K block `b` of `w` with
/// Q8_K block `b` of `y`, over eight i32 lanes of partial sums.
///
/// # Safety
/// AVX2/FMA/F16C present; `w` and `y` hold at least `b + 1` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn q6_k_block(w: *const u8, y: *const u8, b: usize) -> __m256i {
    // SAFETY: block `b`, in bounds of both rows (the caller's guarantee).
    let (wp, yp) = unsafe { (w.add(b * Q6K_BYTES), y.add(b * Q8K_BYTES)) };
    // SAFETY: `scales` of the weight block, `bsums` of the activation block.
    let (sc8, bsums) = unsafe {
        (
            _mm_loadu_si128(wp.add(192).cast()),
            _mm256_loadu_si256(yp.add(260).cast()),
        )
    };
    // Σ sc·(q − 32)·y = Σ sc·q·y − 32·Σ_g sc_g·bsum_g.
    let corr = _mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(sc8));
    let mut isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    let sa = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
    let sb = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    for h in 0..2 {
        // SAFETY: `ql[64h..64h + 64]`, `qh[32h..32h + 32]`.
        let q = unsafe { q6_half(wp.add(64 * h), wp.add(128 + 32 * h)) };
        let sv = if h == 0 { sa } else { sb };
        for (t, qt) in q.iter().enumerate() {
            // SAFETY: activation codes `128h + 32t .. + 32`.
            let yv = unsafe { _mm256_loadu_si256(yp.add(4 + 128 * h + 32 * t).cast()) };
            let s = _mm256_shuffle_epi8(sv, bcast16_mask(2 * t, 2 * t + 1));
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(*qt, yv), s);
            isum = _mm256_add_epi32(isum, p);
        }
    }
    isum
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` Q6_K blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6_k_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    q8k_loop!(w, y, nb, Q6K_BYTES, 208, |b| {
        // SAFETY: block `b < nb`, in bounds of both rows.
        unsafe { q6_k_block(w, y, b) }
    })
}

/// The exact integer dot `Σ (t − 1)·q` of TQ2_0 block `b` of `w` with
/// Q8_K block `b` of `y`, spread over eight i32 lanes (the lanes are
/// partial sums, meaningful only added together).
///
/// `Σ (t − 1)·q = Σ code·q − Σ q`, with `Σ q` from the `bsums`. The eight
/// `code·q` products of each i16 lane of `maddubs` (codes ≤ 3, so at most
/// `8·2·3·128 = 6144` in magnitude) are added in i16, exact for any bytes,
/// and widened once.
///
/// # Safety
/// AVX2/FMA/F16C present; `w` and `y` hold at least `b + 1` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tq2_0_block(w: *const u8, y: *const u8, b: usize) -> __m256i {
    let m3 = _mm256_set1_epi8(3);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: block `b`, in bounds of both rows (the caller's guarantee).
    let (wp, yp) = unsafe { (w.add(b * TQ2_BYTES), y.add(b * Q8K_BYTES)) };
    let mut p16 = _mm256_setzero_si256();
    for j in 0..2 {
        // SAFETY: `qs[32j..32j + 32]` of the weight block.
        let q = unsafe { _mm256_loadu_si256(wp.add(32 * j).cast()) };
        for l in 0..4 {
            // Bits 2l..2l + 2 of `qs[32j + m]` are element 128j + 32l + m.
            let codes = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * l as i32)), m3);
            // SAFETY: activation codes `128j + 32l .. + 32`.
            let yv = unsafe { _mm256_loadu_si256(yp.add(4 + 128 * j + 32 * l).cast()) };
            p16 = _mm256_add_epi16(p16, _mm256_maddubs_epi16(codes, yv));
        }
    }
    // SAFETY: `bsums` of the activation block.
    let bsums = unsafe { _mm256_loadu_si256(yp.add(260).cast()) };
    _mm256_sub_epi32(
        _mm256_madd_epi16(p16, ones),
        _mm256_madd_epi16(bsums, ones),
    )
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `nb` TQ2_0 blocks and `y` `nb` Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tq2_0_q8_k(w: *const u8, y: *const u8, nb: usize) -> f32 {
    q8k_loop!(w, y, nb, TQ2_BYTES, 64, |b| {
        // SAFETY: block `b < nb`, in bounds of both rows.
        unsafe { tq2_0_block(w, y, b) }
    })
}

// ---------------------------------------------------------------------------
// Float weights against f32 activations.

/// Eight 16-bit floats at `p` (f16, or bf16 when `BF16`) widened to f32.
///
/// # Safety
/// AVX2/FMA/F16C present; `p..p + 16` must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn half8<const BF16: bool>(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned load.
    let v = unsafe { _mm_loadu_si128(p.cast()) };
    if BF16 {
        // A bf16 is the high half of the f32 with the same bits.
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16))
    } else {
        _mm256_cvtph_ps(v)
    }
}

/// One 16-bit float at `p` (f16, or bf16 when `BF16`) widened to f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
unsafe fn half1<const BF16: bool>(p: *const u8) -> f32 {
    if BF16 {
        // SAFETY: forwarded from the caller.
        half::bf16::from_bits(unsafe { rd16(p) } as u16).to_f32()
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { rdf16(p) }
    }
}

/// F16 (or BF16 when `BF16`) weights × f32 activations.
///
/// # Safety
/// AVX2/FMA/F16C present; `w` holds `k` 16-bit floats and `x` `k` f32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_f32<const BF16: bool>(w: *const u8, x: *const f32, k: usize) -> f32 {
    let mut a = [_mm256_setzero_ps(); 4];
    let mut i = 0usize;
    while i + 32 <= k {
        for (j, aj) in a.iter_mut().enumerate() {
            // SAFETY: elements `i + 8j .. i + 8j + 8 ≤ k`.
            let (wv, xv) = unsafe {
                (
                    half8::<BF16>(w.add(2 * (i + 8 * j))),
                    _mm256_loadu_ps(x.add(i + 8 * j)),
                )
            };
            *aj = _mm256_fmadd_ps(wv, xv, *aj);
        }
        i += 32;
    }
    while i + 8 <= k {
        // SAFETY: elements `i .. i + 8 ≤ k`.
        let (wv, xv) = unsafe { (half8::<BF16>(w.add(2 * i)), _mm256_loadu_ps(x.add(i))) };
        a[0] = _mm256_fmadd_ps(wv, xv, a[0]);
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(a[0], a[1]),
        _mm256_add_ps(a[2], a[3]),
    ));
    while i < k {
        // SAFETY: element `i < k`.
        sum += unsafe { half1::<BF16>(w.add(2 * i)) * *x.add(i) };
        i += 1;
    }
    sum
}

/// # Safety
/// AVX2/FMA/F16C present; `w` holds `k` little-endian f32 and `x` `k` f32.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f32_f32(w: *const u8, x: *const f32, k: usize) -> f32 {
    let mut a = [_mm256_setzero_ps(); 4];
    let mut i = 0usize;
    while i + 32 <= k {
        for (j, aj) in a.iter_mut().enumerate() {
            // SAFETY: elements `i + 8j .. i + 8j + 8 ≤ k`.
            let (wv, xv) = unsafe {
                (
                    _mm256_loadu_ps(w.add(4 * (i + 8 * j)).cast()),
                    _mm256_loadu_ps(x.add(i + 8 * j)),
                )
            };
            *aj = _mm256_fmadd_ps(wv, xv, *aj);
        }
        i += 32;
    }
    while i + 8 <= k {
        // SAFETY: elements `i .. i + 8 ≤ k`.
        let (wv, xv) = unsafe {
            (
                _mm256_loadu_ps(w.add(4 * i).cast()),
                _mm256_loadu_ps(x.add(i)),
            )
        };
        a[0] = _mm256_fmadd_ps(wv, xv, a[0]);
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(
        _mm256_add_ps(a[0], a[1]),
        _mm256_add_ps(a[2], a[3]),
    ));
    while i < k {
        // SAFETY: element `i < k`.
        sum += unsafe { rdf32(w.add(4 * i)) * *x.add(i) };
        i += 1;
    }
    sum
}
