//! x86-64 AVX2 + FMA + F16C float micro-kernel: [`RR`] rows × [`CN`]
//! columns, eight `k` lanes per accumulator, so each weight vector is
//! reused from a register for four columns and each activation vector for
//! four rows. F32, F16 and BF16 rows are decoded with vector conversions,
//! every other format with the core's dequantizer.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

use super::{CN, FloatAcc, FloatTile, RR};

/// Dequantizes one block-aligned piece of a weight row to f32.
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    let n = dst.len();
    match dtype {
        DType::F16 if src.len() == 2 * n => {
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: elements `i..i + 8 ≤ n` of both (`src` holds 2n
                // bytes, `dst` n floats); unaligned accesses.
                unsafe {
                    let h = _mm_loadu_si128(src.as_ptr().add(2 * i).cast());
                    _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                }
                i += 8;
            }
            for (d, s) in dst[i..].iter_mut().zip(src[2 * i..].chunks_exact(2)) {
                *d = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
            Ok(())
        }
        DType::BF16 if src.len() == 2 * n => {
            let mut i = 0;
            while i + 8 <= n {
                // SAFETY: as for F16.
                unsafe {
                    let h = _mm_loadu_si128(src.as_ptr().add(2 * i).cast());
                    let v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
                    _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_castsi256_ps(v));
                }
                i += 8;
            }
            for (d, s) in dst[i..].iter_mut().zip(src[2 * i..].chunks_exact(2)) {
                *d = half::bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
            Ok(())
        }
        DType::F32 if src.len() == 4 * n => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
            Ok(())
        }
        _ => fused_core::quant::dequantize_row(dtype, src, dst),
    }
}

/// The mask loading the first `n < 8` lanes.
#[target_feature(enable = "avx2,fma,f16c")]
fn tail_mask(n: usize) -> __m256i {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), idx)
}

/// `acc[c][r][l] += Σ_{k < len, k ≡ l mod 8} w[r][k]·x[c][k]` (one FMA per
/// term, `k` ascending within a lane).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `len ≤ KC` and every `x[c]` holds
/// at least `len` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn micro(w: &FloatTile, len: usize, x: [&[f32]; CN], acc: &mut [FloatAcc; CN]) {
    let mut a = [[_mm256_setzero_ps(); RR]; CN];
    for c in 0..CN {
        for r in 0..RR {
            // SAFETY: an 8-lane array.
            a[c][r] = unsafe { _mm256_loadu_ps(acc[c][r].as_ptr()) };
        }
    }
    let xp = x.map(|s| s.as_ptr());
    let mut k = 0;
    while k + 8 <= len {
        let mut xv = [_mm256_setzero_ps(); CN];
        for c in 0..CN {
            // SAFETY: `k + 8 ≤ len ≤ x[c].len()`.
            xv[c] = unsafe { _mm256_loadu_ps(xp[c].add(k)) };
        }
        for r in 0..RR {
            // SAFETY: `k + 8 ≤ len ≤ KC`, inside the tile row.
            let wv = unsafe { _mm256_loadu_ps(w[r].as_ptr().add(k)) };
            for c in 0..CN {
                a[c][r] = _mm256_fmadd_ps(wv, xv[c], a[c][r]);
            }
        }
        k += 8;
    }
    if k < len {
        let m = tail_mask(len - k);
        let mut xv = [_mm256_setzero_ps(); CN];
        for c in 0..CN {
            // SAFETY: only lanes `k..len` are read (masked load).
            xv[c] = unsafe { _mm256_maskload_ps(xp[c].add(k), m) };
        }
        for r in 0..RR {
            // SAFETY: lanes `k..len < KC` of the tile row (masked load).
            let wv = unsafe { _mm256_maskload_ps(w[r].as_ptr().add(k), m) };
            for c in 0..CN {
                a[c][r] = _mm256_fmadd_ps(wv, xv[c], a[c][r]);
            }
        }
    }
    for c in 0..CN {
        for r in 0..RR {
            // SAFETY: an 8-lane array.
            unsafe { _mm256_storeu_ps(acc[c][r].as_mut_ptr(), a[c][r]) };
        }
    }
}

/// The sum of the eight lanes, in a fixed order.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `lanes` holds at least 8 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn reduce(lanes: &[f32]) -> f32 {
    assert!(lanes.len() >= 8, "eight lanes");
    // SAFETY: eight readable floats (checked above).
    let v = unsafe { _mm256_loadu_ps(lanes.as_ptr()) };
    crate::kernels::x86_avx2::hsum_ps(v)
}
