//! AVX-512 (F/BW/VL + VNNI) group kernel for packed Q4_0 × Q8_0.
//!
//! One 64-byte line holds block `b` of the group's four rows, one row per
//! 128-bit lane. The activation block's two halves are broadcast to the four
//! lanes, so two `vpdpbusd` give each row four i32 partial sums in its own
//! lane. The `−8` offset of the codes is taken off exactly in i32: the
//! chain starts from `−8·Σq` of the activation block in the first i32 of
//! each row's lane, read from the activation side data
//! ([`crate::acts::side::q8_0_offset_term_at`], as the plain kernel does; blocks
//! without side data sum their codes here, to the same value). The partial
//! sums are converted and multiplied by the rows' `dx·dy` (the four f16
//! scales of the line widened and spread over their lanes; `dy` as f32
//! from the side data) in one FMA per block; lanes are reduced once per row
//! at the end.
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
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    // The first i32 of each row's 128-bit lane.
    const LANE0: __mmask16 = 0x1111;
    // SAFETY: the scales start right after the `nb` code lines.
    let scales = unsafe { g.add(nb * LINE) };
    let next = g.wrapping_add(stride);
    let mut acc = [_mm512_setzero_ps(); 2];
    for b in 0..nb {
        // One call ahead: line `b` of the next group, and its scale lines
        // (eight blocks' scales a line).
        prefetch(next.wrapping_add(b * LINE));
        if b % 8 == 0 {
            prefetch(next.wrapping_add(nb * LINE + b * 8));
        }
        // SAFETY: activation block `b` (34 bytes) is in bounds, and so are
        // its side entries (offset term, then `d` 64 bytes on) for
        // `b < with_side`.
        let (off, dy) = unsafe {
            let yp = y.add(b * yb);
            if b < with_side {
                let at = side.add(q8_0_offset_term_at(b));
                (
                    at.cast::<i32>().read_unaligned(),
                    at.add(Q8_0_D_AFTER_OFFSET).cast::<f32>().read_unaligned(),
                )
            } else {
                let d = _mm_cvtsi32_si128(i32::from(yp.cast::<u16>().read_unaligned()));
                (offset_term(yp), _mm_cvtss_f32(_mm_cvtph_ps(d)))
            }
        };
        // SAFETY: line `b` (64 bytes), the line's 8 scale bytes and
        // activation block `b` (d, then 32 codes) are in bounds.
        let (w, d4, ylo, yhi) = unsafe {
            let yp = y.add(b * yb);
            (
                _mm512_loadu_si512(g.add(b * LINE).cast()),
                _mm_loadl_epi64(scales.add(b * 8).cast()),
                _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(2).cast())),
                _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(18).cast())),
            )
        };
        let lo = _mm512_and_si512(w, m4);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
        let off = _mm512_maskz_set1_epi32(LANE0, off);
        let t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, lo, ylo), hi, yhi);
        let dx = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_cvtph_ps(d4)));
        let sum = _mm512_cvtepi32_ps(t);
        acc[b & 1] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dx, _mm512_set1_ps(dy)), acc[b & 1]);
    }
    // Row r's partial sums are the four f32 of 128-bit lane r.
    let v = _mm512_add_ps(acc[0], acc[1]);
    let v = _mm512_add_ps(v, _mm512_permute_ps::<0b10_11_00_01>(v));
    let v = _mm512_add_ps(v, _mm512_permute_ps::<0b01_00_11_10>(v));
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds 16 f32 (64 bytes); unaligned store.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
    [lanes[0], lanes[4], lanes[8], lanes[12]]
}
