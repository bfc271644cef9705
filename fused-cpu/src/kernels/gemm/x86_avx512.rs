//! x86-64 AVX-512 (F/BW/VL + VNNI) GEMM micro-kernels.
//!
//! **Float** ([`micro_rows`]): weights of a tile of [`FRT`] rows are
//! decoded to f32 and transposed (16 × 16 blocks) so that one vector holds
//! one `k` of sixteen rows; each activation is broadcast once for 32 rows and
//! [`FCN`] columns share each weight vector (16 accumulators, one FMA per
//! term, `k` ascending per lane: no horizontal sums).
//!
//! **Int** ([`micro_legacy`], [`micro_kquant`]): weights of a tile of
//! [`RT`] rows are decoded to signed 8-bit codes and transposed so that a
//! 64-byte vector holds, for one group of four consecutive `k`, the four
//! codes of each of sixteen rows (lane `i` = row `i` of a 16-row group).
//! Activations are copied once per tile and K chunk with `+128` added (a xor
//! of the sign bit), so that `vpdpbusd(acc, bcast(y + 128), w)` adds
//! `Σ_{4 k} (y + 128)·w` to sixteen rows exactly; the `128·Σw` excess is a
//! per-row constant of the weights, computed at decode time and used as the
//! accumulator's starting value. With two row vectors and [`CN`] columns per
//! call, each weight vector is used for four columns and each broadcast
//! activation word for 32 rows, straight from registers.
//!
//! Per block the exact i32 sums are then scaled in f32:
//! - Q4_0, Q5_0, Q8_0, IQ4_NL (× Q8_0): `acc += f32(isum)·(dx·dy)`.
//! - Q4_K (× Q8_K): per 32-element sub-block the i32 sum is multiplied by
//!   its 6-bit scale (`vpmulld`) and added; the min term
//!   `Σ_s m_s·(bsum_2s + bsum_2s+1)` is one `vpdpwssd` per pair of bsums;
//!   `acc += f32(I)·(dx·dy) − f32(M)·(dmin·dy)` per super-block.
//! - Q6_K (× Q8_K): the same with 16-element groups, signed scales and the
//!   `−32` code offset folded into the `vpdpwssd` term
//!   (`Σ_g (−32·sc_g)·bsum_g`).
//!
//! Integer sums are exact (wrapping i32 arithmetic whose true result fits),
//! so only the f32 scaling differs in order from the core's reference.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

use super::int::{IntAcc, IntActs, IntTile, RV, start_values};
use super::x86_avx2::{prefetch, rd32};
use super::{CN, IntFormat, KC, RT};

const _: () = assert!(RT.is_multiple_of(32), "whole pairs of row vectors");

// ---------------------------------------------------------------------------
// Float, rows in lanes (two or more columns on AVX-512).

/// Rows per rows-in-lanes float tile: two 16-lane vectors.
pub const FRT: usize = 32;
/// Elements of K per rows-in-lanes float chunk (a multiple of every block).
pub const FKC: usize = 256;

/// One K chunk of [`FRT`] weight rows as f32, transposed so that `w[k][v]`
/// holds element `k` of rows `16v..16v + 16`.
#[derive(Debug)]
pub struct FloatRows {
    w: [[[f32; 16]; 2]; FKC],
    rows: [[f32; FKC]; FRT],
}

impl FloatRows {
    /// A zeroed tile.
    pub const fn new() -> FloatRows {
        FloatRows {
            w: [[[0.0; 16]; 2]; FKC],
            rows: [[0.0; FKC]; FRT],
        }
    }
}

impl Default for FloatRows {
    fn default() -> FloatRows {
        FloatRows::new()
    }
}

/// The accumulators of one column of a rows-in-lanes float tile.
pub type FloatRowsAcc = [[f32; 16]; 2];

/// Columns per rows-in-lanes float micro-kernel call (16 accumulators).
pub const FCN: usize = 8;

/// Decodes `len` elements (whole blocks of `dtype`, `len ≤ FKC`) of each
/// row of `rows` (each from the chunk's first block to the end of the row)
/// to f32, transposes them into `t` and prefetches the rows' next chunk.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn decode_rows(
    dtype: DType,
    rows: &[&[u8]; FRT],
    len: usize,
    t: &mut FloatRows,
) -> Result<(), Error> {
    let len = len.min(FKC);
    let n = dtype.row_bytes(len)?;
    for (row, dst) in rows.iter().zip(t.rows.iter_mut()) {
        let src = row.get(..n).ok_or(Error::LengthMismatch {
            what: "GEMM weight row chunk",
            expected: n,
            actual: row.len(),
        })?;
        // SAFETY: the features of this function include the decoder's.
        unsafe { super::x86_avx2::decode(dtype, src, &mut dst[..len])? };
        prefetch(&row[n..row.len().min(2 * n)]);
        dst[len..len.next_multiple_of(16)].fill(0.0);
    }
    for kb in (0..len).step_by(16) {
        for v in 0..2 {
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, ri) in r.iter_mut().enumerate() {
                // SAFETY: elements `kb..kb + 16 ≤ FKC` of a tile row.
                *ri = unsafe { _mm512_loadu_ps(t.rows[16 * v + i].as_ptr().add(kb)) };
            }
            let out = transpose16(r);
            for (j, o) in out.iter().enumerate() {
                // SAFETY: `kb + j < FKC`; a 16-lane array.
                unsafe { _mm512_storeu_ps(t.w[kb + j][v].as_mut_ptr(), *o) };
            }
        }
    }
    Ok(())
}

/// Transposes a 16 × 16 f32 matrix held as sixteen row vectors.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let mut a = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // b[4g + m], lane L: rows 4g..4g + 4 at k = 4L + m.
    let mut b = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let pd = |x: __m512| _mm512_castps_pd(x);
        let (a0, a1, a2, a3) = (a[4 * g], a[4 * g + 1], a[4 * g + 2], a[4 * g + 3]);
        b[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a0), pd(a2)));
        b[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a0), pd(a2)));
        b[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(a1), pd(a3)));
        b[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(a1), pd(a3)));
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for m in 0..4 {
        let c0 = _mm512_shuffle_f32x4::<0x44>(b[m], b[4 + m]);
        let c1 = _mm512_shuffle_f32x4::<0xee>(b[m], b[4 + m]);
        let c2 = _mm512_shuffle_f32x4::<0x44>(b[8 + m], b[12 + m]);
        let c3 = _mm512_shuffle_f32x4::<0xee>(b[8 + m], b[12 + m]);
        out[m] = _mm512_shuffle_f32x4::<0x88>(c0, c2);
        out[4 + m] = _mm512_shuffle_f32x4::<0xdd>(c0, c2);
        out[8 + m] = _mm512_shuffle_f32x4::<0x88>(c1, c3);
        out[12 + m] = _mm512_shuffle_f32x4::<0xdd>(c1, c3);
    }
    out
}

/// `acc[c][v][i] += Σ_{k < len} w[k][v][i]·x[c][k]`: one FMA per term, `k`
/// ascending, for the 32 rows of `t` and [`FCN`] columns.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn micro_rows(t: &FloatRows, x: [&[f32]; FCN], acc: &mut [FloatRowsAcc; FCN]) {
    let len = x.iter().map(|s| s.len()).min().unwrap_or(0).min(FKC);
    let mut a = [[_mm512_setzero_ps(); 2]; FCN];
    for (ac, lanes) in a.iter_mut().zip(acc.iter()) {
        for (v, l) in ac.iter_mut().zip(lanes) {
            // SAFETY: a 16-lane array.
            *v = unsafe { _mm512_loadu_ps(l.as_ptr()) };
        }
    }
    let xp = x.map(|s| s.as_ptr());
    for k in 0..len {
        let w = &t.w[k];
        // SAFETY: two 16-lane arrays.
        let (w0, w1) = unsafe {
            (
                _mm512_loadu_ps(w[0].as_ptr()),
                _mm512_loadu_ps(w[1].as_ptr()),
            )
        };
        for c in 0..FCN {
            // SAFETY: `k < len ≤ x[c].len()`.
            let xb = _mm512_set1_ps(unsafe { *xp[c].add(k) });
            a[c][0] = _mm512_fmadd_ps(w0, xb, a[c][0]);
            a[c][1] = _mm512_fmadd_ps(w1, xb, a[c][1]);
        }
    }
    for (ac, lanes) in a.iter().zip(acc.iter_mut()) {
        for (v, l) in ac.iter().zip(lanes) {
            // SAFETY: a 16-lane array.
            unsafe { _mm512_storeu_ps(l.as_mut_ptr(), *v) };
        }
    }
}

// ---------------------------------------------------------------------------
// Int: tiles.

/// Decodes `len` elements (whole blocks) of the [`RT`] weight rows `rows`
/// (each from the chunk's first block to the end of the row) into `t`, and
/// prefetches the rows' next chunk.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available; `len ≤ KC`
/// is a multiple of the format's block and every row holds those blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn decode_int(fmt: IntFormat, rows: &[&[u8]; RT], len: usize, t: &mut IntTile) {
    // SAFETY: forwarded from the caller (AVX2 is among this function's
    // features).
    unsafe { super::x86_avx2::decode_int_rows(fmt, rows, len, t) };
    // Transpose to rows-in-lanes and sum the codes of each 16-element group.
    let one = _mm512_set1_epi8(1);
    for j in 0..len / 32 {
        for rv in 0..RV {
            let base = 16 * rv;
            let mut z = [_mm512_setzero_si512(); 8];
            for (i, zi) in z.iter_mut().enumerate() {
                // Rows (0, 4), (1, 5), (2, 6), (3, 7), (8, 12), … (11, 15).
                let a = base + (i / 4) * 8 + i % 4;
                *zi = pair(&t.rows[a], &t.rows[a + 4], 32 * j);
            }
            let o = transpose4([z[0], z[1], z[2], z[3]]);
            let q = transpose4([z[4], z[5], z[6], z[7]]);
            let mut s = [_mm512_setzero_si512(); 2];
            for i in 0..4 {
                let lo = _mm512_shuffle_i32x4::<0x88>(o[i], q[i]);
                let hi = _mm512_shuffle_i32x4::<0xdd>(o[i], q[i]);
                // SAFETY: k groups `8j + i` and `8j + 4 + i` are below KC/4.
                unsafe {
                    _mm512_storeu_si512(t.codes[8 * j + i][rv].as_mut_ptr().cast(), lo);
                    _mm512_storeu_si512(t.codes[8 * j + 4 + i][rv].as_mut_ptr().cast(), hi);
                }
                s[0] = _mm512_dpbusd_epi32(s[0], one, lo);
                s[1] = _mm512_dpbusd_epi32(s[1], one, hi);
            }
            for (h, sh) in s.iter().enumerate() {
                // SAFETY: sixteen lanes of a 32-lane row.
                unsafe { _mm512_storeu_si512(t.sum16[2 * j + h][base..].as_mut_ptr().cast(), *sh) };
            }
        }
    }
    start_values(fmt, len, t);
}

/// Bytes `at..at + 32` of `lo` in the low half and of `hi` in the high half.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn pair(lo: &[u8; KC], hi: &[u8; KC], at: usize) -> __m512i {
    assert!(at + 32 <= KC, "inside the row");
    // SAFETY: bytes `at..at + 32 ≤ KC` of both rows (checked above).
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(lo.as_ptr().add(at).cast()),
            _mm256_loadu_si256(hi.as_ptr().add(at).cast()),
        )
    };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Transposes the 4×4 dwords inside each 128-bit lane of four vectors.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn transpose4(z: [__m512i; 4]) -> [__m512i; 4] {
    let t0 = _mm512_unpacklo_epi32(z[0], z[1]);
    let t1 = _mm512_unpackhi_epi32(z[0], z[1]);
    let t2 = _mm512_unpacklo_epi32(z[2], z[3]);
    let t3 = _mm512_unpackhi_epi32(z[2], z[3]);
    [
        _mm512_unpacklo_epi64(t0, t2),
        _mm512_unpackhi_epi64(t0, t2),
        _mm512_unpacklo_epi64(t1, t3),
        _mm512_unpackhi_epi64(t1, t3),
    ]
}

// ---------------------------------------------------------------------------
// Int: micro-kernels.

/// Loads row vectors `2h` and `2h + 1` of a per-row i32 array.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn ld2i(a: &[i32; RT], h: usize) -> [__m512i; 2] {
    let a = &a[32 * h..32 * h + 32];
    // SAFETY: 32 readable i32 (sliced above).
    unsafe {
        [
            _mm512_loadu_si512(a.as_ptr().cast()),
            _mm512_loadu_si512(a.as_ptr().add(16).cast()),
        ]
    }
}

/// Loads row vectors `2h` and `2h + 1` of a per-row f32 array.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn ld2f(a: &[f32; RT], h: usize) -> [__m512; 2] {
    let a = &a[32 * h..32 * h + 32];
    // SAFETY: 32 readable f32 (sliced above).
    unsafe {
        [
            _mm512_loadu_ps(a.as_ptr()),
            _mm512_loadu_ps(a.as_ptr().add(16)),
        ]
    }
}

/// The broadcast activation word of k group `kg` of prepared column `c`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn bcast(a: &IntActs, c: usize, kg: usize) -> __m512i {
    // SAFETY: `kg < KC/4`, so bytes `4kg..4kg + 4` are inside the column.
    _mm512_set1_epi32(unsafe { rd32(a.codes[c].as_ptr().add(4 * kg)) })
}

/// Adds, for each column `c`, the VNNI dot products of k group `kg` of row
/// vectors `2h`, `2h + 1` with the broadcast activation word of prepared
/// column `cols[c]` to `ia[c]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn dot_group(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    kg: usize,
    h: usize,
    ia: &mut [[__m512i; 2]; CN],
) {
    let (w0, w1) = (&t.codes[kg][2 * h], &t.codes[kg][2 * h + 1]);
    // SAFETY: `w0` and `w1` are 64-byte arrays (bounds-checked above);
    // unaligned loads.
    let w = unsafe {
        [
            _mm512_loadu_si512(w0.as_ptr().cast()),
            _mm512_loadu_si512(w1.as_ptr().cast()),
        ]
    };
    for c in 0..CN {
        let y = bcast(a, cols[c], kg);
        ia[c][0] = _mm512_dpbusd_epi32(ia[c][0], y, w[0]);
        ia[c][1] = _mm512_dpbusd_epi32(ia[c][1], y, w[1]);
    }
}

/// Loads row vectors `2h`, `2h + 1` of the accumulators of `CN` columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn load_acc(acc: &[IntAcc; CN], h: usize) -> [[__m512; 2]; CN] {
    let mut f = [[_mm512_setzero_ps(); 2]; CN];
    for (fc, a) in f.iter_mut().zip(acc) {
        for (v, lanes) in fc.iter_mut().zip(&a[2 * h..2 * h + 2]) {
            // SAFETY: a 16-lane array.
            *v = unsafe { _mm512_loadu_ps(lanes.as_ptr()) };
        }
    }
    f
}

/// Stores row vectors `2h`, `2h + 1` of the accumulators of `CN` columns.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn store_acc(acc: &mut [IntAcc; CN], h: usize, f: [[__m512; 2]; CN]) {
    for (a, fc) in acc.iter_mut().zip(f) {
        for (lanes, v) in a[2 * h..2 * h + 2].iter_mut().zip(fc) {
            // SAFETY: a 16-lane array.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
        }
    }
}

/// 32-element-block formats × Q8_0 over the first `len` elements of the
/// chunk: `acc[c] += Σ_b f32(isum_b)·(dx_b·dy_b)` for prepared columns
/// `cols`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available; `len ≤ KC`
/// a multiple of 32; `t` and `a` decoded for those elements; `cols[c] < NC`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn micro_legacy(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    len: usize,
    h: usize,
    acc: &mut [IntAcc; CN],
) {
    assert!(h < RV / 2, "row vector pair");
    let mut f = load_acc(acc, h);
    for b in 0..len / 32 {
        let corr = ld2i(&t.corr[b], h);
        let mut ia = [corr; CN];
        for g in 0..8 {
            dot_group(t, a, cols, 8 * b + g, h, &mut ia);
        }
        let dx = ld2f(&t.scale[b], h);
        for c in 0..CN {
            let dy = _mm512_set1_ps(a.dy[cols[c]][b]);
            for v in 0..2 {
                let s = _mm512_mul_ps(dx[v], dy);
                f[c][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[c][v]), s, f[c][v]);
            }
        }
    }
    store_acc(acc, h, f);
}

/// Q4_K (`G = 8` k groups per scale, `MIN`) or Q6_K (`G = 4`, no min) × Q8_K
/// over the first `len` elements of the chunk, for prepared columns `cols`.
///
/// # Safety
/// As [`micro_legacy`], with `len` a multiple of 256.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn micro_kquant<const G: usize, const MIN: bool>(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    len: usize,
    h: usize,
    acc: &mut [IntAcc; CN],
) {
    assert!(h < RV / 2, "row vector pair");
    let mut f = load_acc(acc, h);
    let groups = 64 / G;
    for sb in 0..len / 256 {
        let start = ld2i(&t.sbcorr[sb], h);
        let mut tot = [start; CN];
        for gi in 0..groups {
            let mut ia = [[_mm512_setzero_si512(); 2]; CN];
            for g in 0..G {
                dot_group(t, a, cols, 64 * sb + G * gi + g, h, &mut ia);
            }
            let sc = ld2i(&t.gsc[groups * sb + gi], h);
            for c in 0..CN {
                for v in 0..2 {
                    tot[c][v] = _mm512_add_epi32(tot[c][v], _mm512_mullo_epi32(ia[c][v], sc[v]));
                }
            }
        }
        let mut mins = [[_mm512_setzero_si512(); 2]; CN];
        for j in 0..8 {
            let p = ld2i(&t.pairs[sb][j], h);
            for c in 0..CN {
                let bs = _mm512_set1_epi32(a.bsums[cols[c]][8 * sb + j]);
                for v in 0..2 {
                    if MIN {
                        mins[c][v] = _mm512_dpwssd_epi32(mins[c][v], p[v], bs);
                    } else {
                        tot[c][v] = _mm512_dpwssd_epi32(tot[c][v], p[v], bs);
                    }
                }
            }
        }
        let dx = ld2f(&t.scale[sb], h);
        let dm = ld2f(&t.scale2[sb], h);
        for c in 0..CN {
            let dy = _mm512_set1_ps(a.dy[cols[c]][sb]);
            for v in 0..2 {
                let s = _mm512_mul_ps(dx[v], dy);
                f[c][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[c][v]), s, f[c][v]);
                if MIN {
                    let sm = _mm512_mul_ps(dm[v], dy);
                    f[c][v] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[c][v]), sm, f[c][v]);
                }
            }
        }
    }
    store_acc(acc, h, f);
}
