//! AVX-512 (F/BW/VL + VNNI) group kernel for packed Q4_0 × Q8_0.
//!
//! One 64-byte line holds block `b` of the group's four rows, one row per
//! 128-bit lane. The activation block's two halves are broadcast to the four
//! lanes, so two `vpdpbusd` give each row four i32 partial sums in its own
//! lane. The `−8` offset of the codes is taken off exactly in i32: the
//! activation blocks' `−8·Σq`, read from the activation side data
//! ([`crate::acts::side::q8_0_offset_term_at`], four lanes' shares a block,
//! added up here) or, without side data, summed from their codes, are
//! added to the rows' block dots.
//! The four lanes of each row and block are then added up, exactly
//! in i32, before they meet the block's scale, as in the reference: a
//! lane alone can be far larger than the block's dot where an activation
//! is large (scaled one by one, they cancelled in f32 and were 1–8 % off
//! with one activation of 1e6). Four blocks at a time, one shuffle tree
//! ([`sum_parts`]) leaves each row's four block dots in its 128-bit lane;
//! they are converted and multiplied by the rows' `dx·dy` (the sixteen f16
//! scales of the four lines transposed to match, widened at once; `dy` as
//! f32 from the side data) in one FMA; lanes are reduced once per row at
//! the end.
//!
//! Like the plain kernels ([`super::super::x86_avx512`]), the kernel
//! prefetches one call ahead: the lines of the next group (which follows
//! the group in memory, `group.len()` bytes on), one per block.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

use super::{GROUP_ROWS, LINE, check_q4_0_group};
use crate::acts::Acts;
use crate::acts::side::{Q8_0_D_AFTER_OFFSET, Q8_0_GROUP_BLOCKS, q8_0_offset_term_at, side_bytes};
use crate::kernels::x86_avx512::prefetch;

/// Q4_0 × Q8_0 for the four rows of a packed group with `nb` blocks a row.
pub fn group_q4_0_q8_0(
    group: &[u8],
    nb: usize,
    acts: &Acts<'_>,
) -> Result<[f32; GROUP_ROWS], Error> {
    let y = check_q4_0_group(group, nb, acts)?;
    let side = match *acts {
        Acts::Quant { side, .. }
            if side.len() == side_bytes(DType::Q8_0, nb * DType::Q8_0.block_len()) =>
        {
            side
        }
        _ => &[],
    };
    // Side data covers whole groups of four activation blocks only.
    let with_side = if side.is_empty() {
        0
    } else {
        nb / Q8_0_GROUP_BLOCKS * Q8_0_GROUP_BLOCKS
    };
    // SAFETY: this function is only returned by `packed_dot` for an ISA that
    // `Isa::is_supported()` confirmed to be Avx512 or better (AVX-512
    // F/BW/VL/VNNI and F16C present); the group holds `nb` code lines and
    // `nb` × 8 scale bytes after them, `y` holds `nb` Q8_0 blocks, and
    // `side` (when `with_side > 0`) is the whole side data of those blocks,
    // whose entries for the first `with_side` blocks are read; the next
    // group is only prefetched.
    Ok(unsafe {
        q4_0_q8_0_group(
            group.as_ptr(),
            group.len(),
            y.as_ptr(),
            side.as_ptr(),
            nb,
            with_side,
        )
    })
}

/// The offset term `−8·Σq` of the activation block at `yp` (d, then 32
/// codes), summed from its codes: the value the side data holds.
///
/// # Safety
/// `yp..yp + 34` readable.
#[inline]
unsafe fn offset_term(yp: *const u8) -> i32 {
    let mut sum = 0i32;
    for i in 0..32 {
        // SAFETY: byte `2 + i < 34` of the block.
        sum += i32::from(unsafe { yp.add(2 + i).read() } as i8);
    }
    -8 * sum
}

/// `i32` lane `l` of the result takes lane `4·(l mod 4)` of its source:
/// the value of block `l mod 4` of a side-data group (at lane `4j` for
/// block `j`) for row `l / 4`'s 128-bit lane.
const BLOCK_OF_LANE: [i32; 16] = [0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12];

/// Word `4r + j` of the result takes word `4j + r` of its source: the
/// scales of four lines (block `j`, row `r` at word `4j + r`) transposed to
/// the lanes where [`sum_parts`] puts row `r`'s block `j`.
const SCALE_OF_LANE: [i16; 16] = [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15];

/// The sum of the four lanes of each row of four blocks' i32 lanes (`t[j]`
/// lane `4r + i`: part `i` of row `r`'s dot of block `j`): lane `4r + j` of
/// the result is row `r`'s whole dot of block `j` (exact, wrapping).
#[target_feature(enable = "avx512f")]
#[inline]
fn sum_parts(t: [__m512i; 4]) -> __m512i {
    let pair = |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    let (s01, s23) = (pair(t[0], t[1]), pair(t[2], t[3]));
    _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    )
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI and F16C present; `g` holds `nb` code lines
/// followed by `nb · 8` scale bytes, `y` holds `nb` Q8_0 blocks, and `side`
/// holds their side data when `with_side > 0` (`with_side ≤ nb` whole
/// groups of blocks). `g + stride` (the next group) is only prefetched.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn q4_0_q8_0_group(
    g: *const u8,
    stride: usize,
    y: *const u8,
    side: *const u8,
    nb: usize,
    with_side: usize,
) -> [f32; GROUP_ROWS] {
    let yb = DType::Q8_0.block_bytes();
    let m4 = _mm512_set1_epi8(0x0f);
    // SAFETY: `[i32; 16]`, `[i16; 16]` and the vectors are plain bytes of
    // the same sizes.
    let (block_of_lane, scale_of_lane) = unsafe {
        (
            core::mem::transmute::<[i32; 16], __m512i>(BLOCK_OF_LANE),
            core::mem::transmute::<[i16; 16], __m256i>(SCALE_OF_LANE),
        )
    };
    // SAFETY: the scales start right after the `nb` code lines.
    let scales = unsafe { g.add(nb * LINE) };
    let next = g.wrapping_add(stride);
    let mut acc = _mm512_setzero_ps();
    let mut b = 0;
    while b < nb {
        // Blocks `b .. b + n`, summed per row and block in i32 (offset
        // included) before they meet their scale, as in the reference: a
        // lane alone can be far larger than the block's dot.
        let n = (nb - b).min(Q8_0_GROUP_BLOCKS);
        let mut t = [_mm512_setzero_si512(); Q8_0_GROUP_BLOCKS];
        for (j, tj) in t.iter_mut().enumerate().take(n) {
            let bj = b + j;
            // One call ahead: line `bj` of the next group, and its scale
            // lines (eight blocks' scales a line).
            prefetch(next.wrapping_add(bj * LINE));
            if bj % 8 == 0 {
                prefetch(next.wrapping_add(nb * LINE + bj * 8));
            }
            // SAFETY: line `bj` (64 bytes) and activation block `bj` (d,
            // then 32 codes) are in bounds.
            let (w, ylo, yhi) = unsafe {
                let yp = y.add(bj * yb);
                (
                    _mm512_loadu_si512(g.add(bj * LINE).cast()),
                    _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(2).cast())),
                    _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(18).cast())),
                )
            };
            let lo = _mm512_and_si512(w, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
            let z = _mm512_setzero_si512();
            *tj = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, lo, ylo), hi, yhi);
        }
        // The blocks' offset terms `−8·Σq` and `dy`, block `j` at lane `4j`.
        let (off, dy) = if b < with_side {
            // SAFETY: `b` starts a whole group with side data: its offset
            // terms (64 bytes, four lanes a block) and, 64 bytes on, its
            // `dy`.
            let (off, dy) = unsafe {
                let at = side.add(q8_0_offset_term_at(b));
                (
                    _mm512_loadu_si512(at.cast()),
                    _mm512_loadu_ps(at.add(Q8_0_D_AFTER_OFFSET).cast()),
                )
            };
            // Each block's four shares added up, into lane `4j`.
            let off = _mm512_add_epi32(off, _mm512_shuffle_epi32::<0b10_11_00_01>(off));
            let off = _mm512_add_epi32(off, _mm512_shuffle_epi32::<0b01_00_11_10>(off));
            (off, dy)
        } else {
            let mut off = [0i32; 16];
            let mut dy = [0.0f32; 16];
            for j in 0..n {
                // SAFETY: activation block `b + j < nb` (34 bytes).
                unsafe {
                    let yp = y.add((b + j) * yb);
                    let d = _mm_cvtsi32_si128(i32::from(yp.cast::<u16>().read_unaligned()));
                    off[4 * j] = offset_term(yp);
                    dy[4 * j] = _mm_cvtss_f32(_mm_cvtph_ps(d));
                }
            }
            // SAFETY: `[i32; 16]` and `[f32; 16]` are 64 bytes each.
            unsafe {
                (
                    _mm512_loadu_si512(off.as_ptr().cast()),
                    _mm512_loadu_ps(dy.as_ptr()),
                )
            }
        };
        // Lane `4r + j`: row `r`'s dot of block `b + j`, and its `dx·dy`.
        let isum = _mm512_add_epi32(
            sum_parts(t),
            _mm512_permutexvar_epi32(block_of_lane, off),
        );
        let dy = _mm512_permutexvar_ps(block_of_lane, dy);
        // SAFETY: the `n` lines' scale bytes `8b .. 8(b + n)` (words past
        // them are masked off and not read).
        let d16 = unsafe {
            _mm256_maskz_loadu_epi16(((1u32 << (4 * n)) - 1) as __mmask16, scales.add(b * 8).cast())
        };
        let dx = _mm512_cvtph_ps(_mm256_permutexvar_epi16(scale_of_lane, d16));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dx, dy), acc);
        b += n;
    }
    // Row r's partial sums are the four f32 of 128-bit lane r.
    let v = _mm512_add_ps(acc, _mm512_permute_ps::<0b10_11_00_01>(acc));
    let v = _mm512_add_ps(v, _mm512_permute_ps::<0b01_00_11_10>(v));
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds 16 f32 (64 bytes); unaligned store.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
    [lanes[0], lanes[4], lanes[8], lanes[12]]
}
