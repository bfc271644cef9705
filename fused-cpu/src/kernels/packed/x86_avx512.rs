//! AVX-512 (F/BW/VL + VNNI) group kernel for packed Q4_0 × Q8_0.
//!
//! One 64-byte line holds block `b` of the group's four rows, one row per
//! 128-bit lane. The activation block's two halves are broadcast to the four
//! lanes, so two `vpdpbusd` give each row four i32 partial sums in its own
//! lane; the `−8` offset of the codes is taken off exactly in i32 (a third
//! and fourth `vpdpbusd` of the constant 8 against the same activations).
//! The partial sums are converted and multiplied by the rows' `dx·dy` (the
//! four f16 scales of the line widened and spread over their lanes) in one
//! FMA per block; lanes are reduced once per row at the end.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

use super::check_q4_0_group;
use crate::acts::Acts;
use crate::packed::{GROUP_ROWS, LINE};

/// Q4_0 × Q8_0 for the four rows of a packed group with `nb` blocks a row.
pub fn group_q4_0_q8_0(
    group: &[u8],
    nb: usize,
    acts: &Acts<'_>,
) -> Result<[f32; GROUP_ROWS], Error> {
    let y = check_q4_0_group(group, nb, acts)?;
    // SAFETY: this function is only returned by `packed_dot` for an ISA that
    // `Isa::is_supported()` confirmed to be Avx512 or better (AVX-512
    // F/BW/VL/VNNI and F16C present); the group holds `nb` code lines and
    // `nb` × 8 scale bytes after them, and `y` holds `nb` Q8_0 blocks,
    // which is all the kernel reads.
    Ok(unsafe { q4_0_q8_0_group(group.as_ptr(), y.as_ptr(), nb) })
}

/// # Safety
/// AVX-512 F/BW/VL/VNNI and F16C present; `g` holds `nb` code lines
/// followed by `nb · 8` scale bytes, `y` holds `nb` Q8_0 blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c")]
unsafe fn q4_0_q8_0_group(g: *const u8, y: *const u8, nb: usize) -> [f32; GROUP_ROWS] {
    let yb = DType::Q8_0.block_bytes();
    let m4 = _mm512_set1_epi8(0x0f);
    let eight = _mm512_set1_epi8(8);
    let zero = _mm512_setzero_si512();
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    // SAFETY: the scales start right after the `nb` code lines.
    let scales = unsafe { g.add(nb * LINE) };
    let mut acc = [_mm512_setzero_ps(); 2];
    for b in 0..nb {
        // SAFETY: line `b` (64 bytes), the line's 8 scale bytes and
        // activation block `b` (34 bytes: d, then 32 codes) are in bounds.
        let (w, d4, ylo, yhi, dy) = unsafe {
            let yp = y.add(b * yb);
            (
                _mm512_loadu_si512(g.add(b * LINE).cast()),
                _mm_loadl_epi64(scales.add(b * 8).cast()),
                _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(2).cast())),
                _mm512_broadcast_i32x4(_mm_loadu_si128(yp.add(18).cast())),
                _mm_cvtsi32_si128(i32::from(yp.cast::<u16>().read_unaligned())),
            )
        };
        let lo = _mm512_and_si512(w, m4);
        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
        let t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, ylo), hi, yhi);
        let s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, eight, ylo), eight, yhi);
        let dx = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_cvtph_ps(d4)));
        let dy = _mm512_broadcastss_ps(_mm_cvtph_ps(dy));
        let sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(t, s));
        acc[b & 1] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dx, dy), acc[b & 1]);
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
