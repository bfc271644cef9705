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

use super::{CN, IntFormat, KC, NC, RT};
use crate::kernels::x86_avx2 as avx2;

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

/// Bytes of a Q8_K block.
const Q8K: usize = 292;
/// Bytes of a Q8_0 block.
const Q8_0: usize = 34;
/// Super-blocks per K chunk.
const SB: usize = KC / 256;

/// One K chunk of [`RT`] weight rows decoded for the int kernels.
#[derive(Debug)]
pub struct IntTile {
    /// `[k group][row vector][lane·4 + j]`: code `j` of the group's four.
    codes: [[[u8; 64]; RV]; KC / 4],
    /// Row-major codes before the transpose.
    rows: [[u8; KC]; RT],
    /// Σ of the codes of each 16-element group, per row.
    sum16: [[i32; RT]; KC / 16],
    /// Legacy: `−128·Σ codes` of each block, per row.
    corr: [[i32; RT]; KC / 32],
    /// K-quants: the integer scale of each group (32 elements for Q4_K,
    /// 16 for Q6_K), per row.
    gsc: [[i32; RT]; KC / 16],
    /// K-quants: the starting value of the super-block sum, per row.
    sbcorr: [[i32; RT]; SB],
    /// K-quants: i16 pairs multiplied with the bsum pairs (Q4_K: `(m, m)`,
    /// Q6_K: `(−32·sc, −32·sc')`), per super-block, pair and row.
    pairs: [[[i32; RT]; 8]; SB],
    /// Legacy: `dx` per block; K-quants: `d` per super-block (first `SB`).
    scale: [[f32; RT]; KC / 32],
    /// Q4_K: `dmin` per super-block.
    scale2: [[f32; RT]; SB],
}

impl IntTile {
    /// A zeroed tile.
    pub const fn new() -> IntTile {
        IntTile {
            codes: [[[0; 64]; RV]; KC / 4],
            rows: [[0; KC]; RT],
            sum16: [[0; RT]; KC / 16],
            corr: [[0; RT]; KC / 32],
            gsc: [[0; RT]; KC / 16],
            sbcorr: [[0; RT]; SB],
            pairs: [[[0; RT]; 8]; SB],
            scale: [[0.0; RT]; KC / 32],
            scale2: [[0.0; RT]; SB],
        }
    }
}

impl Default for IntTile {
    fn default() -> IntTile {
        IntTile::new()
    }
}

/// One K chunk of up to [`NC`] activation columns prepared for the int
/// kernels.
#[derive(Debug)]
pub struct IntActs {
    /// Codes `+ 128`, per column.
    codes: [[u8; KC]; NC],
    /// The activation scale per block (Q8_0) or super-block (Q8_K).
    dy: [[f32; KC / 32]; NC],
    /// Q8_K: the 16 bsums of each super-block as eight i16 pairs.
    bsums: [[i32; 8 * SB]; NC],
}

impl IntActs {
    /// A zeroed buffer.
    pub const fn new() -> IntActs {
        IntActs {
            codes: [[0; KC]; NC],
            dy: [[0.0; KC / 32]; NC],
            bsums: [[0; 8 * SB]; NC],
        }
    }
}

impl Default for IntActs {
    fn default() -> IntActs {
        IntActs::new()
    }
}

/// Row vectors (16 rows each) per int tile.
pub const RV: usize = RT / 16;

/// The accumulators of one column of an int tile: one 16-row vector per
/// [`RV`].
pub type IntAcc = [[f32; 16]; RV];

/// The little-endian f16 at `p` as f32 (F16C).
///
/// # Safety
/// `p..p + 2` must be readable; F16C must be available.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn h2f(p: *const u8) -> f32 {
    // SAFETY: forwarded from the caller; unaligned read.
    let bits = u16::from_le(unsafe { p.cast::<u16>().read_unaligned() });
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Asks for the cache lines of `bytes` in L2 (a hint; never faults).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available (this
/// module's features; callers outside it must check them).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
pub fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast());
    }
}

/// Little-endian i32 at `p`.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
unsafe fn rd32(p: *const u8) -> i32 {
    // SAFETY: forwarded from the caller; unaligned read.
    i32::from_le(unsafe { p.cast::<i32>().read_unaligned() })
}

/// Prepares `len` elements (a multiple of the activation block) of each of
/// `cols` (the column's bytes from the chunk's first block on) into `out`.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available; `cols.len()
/// ≤ NC`, `len ≤ KC`, and every column holds the blocks of `len` elements
/// of `fmt`'s activation format.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn prep_acts(fmt: IntFormat, cols: &[&[u8]], len: usize, out: &mut IntActs) {
    let bias = _mm256_set1_epi8(-128);
    for (c, col) in cols.iter().enumerate() {
        let p = col.as_ptr();
        let dst = out.codes[c].as_mut_ptr();
        match fmt {
            IntFormat::Legacy(_) => {
                for b in 0..len / 32 {
                    // SAFETY: block `b` of the column (34 bytes) and bytes
                    // `32b..32b + 32 ≤ KC` of the row buffer.
                    unsafe {
                        let bp = p.add(b * Q8_0);
                        let q = _mm256_loadu_si256(bp.add(2).cast());
                        _mm256_storeu_si256(dst.add(32 * b).cast(), _mm256_xor_si256(q, bias));
                        out.dy[c][b] = h2f(bp);
                    }
                }
            }
            IntFormat::Q4K | IntFormat::Q6K => {
                for sb in 0..len / 256 {
                    // SAFETY: super-block `sb` of the column (292 bytes:
                    // f32 d, 256 codes, 16 i16 bsums) and bytes
                    // `256sb..256sb + 256 ≤ KC` of the row buffer.
                    unsafe {
                        let bp = p.add(sb * Q8K);
                        out.dy[c][sb] = avx2::rdf32(bp);
                        for i in 0..8 {
                            let q = _mm256_loadu_si256(bp.add(4 + 32 * i).cast());
                            _mm256_storeu_si256(
                                dst.add(256 * sb + 32 * i).cast(),
                                _mm256_xor_si256(q, bias),
                            );
                        }
                        for j in 0..8 {
                            out.bsums[c][8 * sb + j] = rd32(bp.add(260 + 4 * j));
                        }
                    }
                }
            }
        }
    }
}

/// Decodes `len` elements (whole blocks) of the [`RT`] weight rows `rows`
/// (each from the chunk's first block to the end of the row) into `t`, and
/// prefetches the rows' next chunk.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C must be available; `len ≤ KC`
/// is a multiple of the format's block and every row holds those blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn decode_int(fmt: IntFormat, rows: &[&[u8]; RT], len: usize, t: &mut IntTile) {
    let m4 = _mm256_set1_epi8(0x0f);
    let used = match fmt {
        IntFormat::Legacy(d) => len / 32 * d.block_bytes(),
        IntFormat::Q4K => len / 256 * avx2::Q4K_BYTES,
        IntFormat::Q6K => len / 256 * avx2::Q6K_BYTES,
    };
    for (r, row) in rows.iter().enumerate() {
        let p = row.as_ptr();
        if let Some(next) = row.get(used..) {
            prefetch(&next[..next.len().min(used)]);
        }
        let dst = t.rows[r].as_mut_ptr();
        match fmt {
            IntFormat::Legacy(dtype) => {
                let bb = dtype.block_bytes();
                for b in 0..len / 32 {
                    // SAFETY: block `b` of the row; `32b + 32 ≤ KC`.
                    unsafe {
                        let bp = p.add(b * bb);
                        _mm256_storeu_si256(dst.add(32 * b).cast(), legacy_codes(dtype, bp));
                        t.scale[b][r] = h2f(bp);
                    }
                }
            }
            IntFormat::Q4K => {
                for sb in 0..len / 256 {
                    // SAFETY: super-block `sb` of the row (144 bytes: d,
                    // dmin, 12 scale bytes, 128 code bytes); `256sb + 256 ≤ KC`.
                    unsafe {
                        let bp = p.add(sb * avx2::Q4K_BYTES);
                        t.scale[sb][r] = h2f(bp);
                        t.scale2[sb][r] = h2f(bp.add(2));
                        let (sc, m) = avx2::kscales(bp.add(4));
                        for c in 0..4 {
                            let q = _mm256_loadu_si256(bp.add(16 + 32 * c).cast());
                            let lo = _mm256_and_si256(q, m4);
                            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                            _mm256_storeu_si256(dst.add(256 * sb + 64 * c).cast(), lo);
                            _mm256_storeu_si256(dst.add(256 * sb + 64 * c + 32).cast(), hi);
                        }
                        for s in 0..8 {
                            t.gsc[8 * sb + s][r] = ((sc >> (8 * s)) & 0xff) as i32;
                            let mj = ((m >> (8 * s)) & 0xff) as i32;
                            t.pairs[sb][s][r] = mj | (mj << 16);
                        }
                    }
                }
            }
            IntFormat::Q6K => {
                for sb in 0..len / 256 {
                    // SAFETY: super-block `sb` of the row (210 bytes: ql,
                    // qh, 16 scales, d); `256sb + 256 ≤ KC`.
                    unsafe {
                        let bp = p.add(sb * avx2::Q6K_BYTES);
                        t.scale[sb][r] = h2f(bp.add(208));
                        for h in 0..2 {
                            let q = avx2::q6_half(bp.add(64 * h), bp.add(128 + 32 * h));
                            for (i, qi) in q.iter().enumerate() {
                                _mm256_storeu_si256(
                                    dst.add(256 * sb + 128 * h + 32 * i).cast(),
                                    *qi,
                                );
                            }
                        }
                        for g in 0..16 {
                            t.gsc[16 * sb + g][r] = i32::from(bp.add(192 + g).cast::<i8>().read());
                        }
                        for j in 0..8 {
                            let lo = (-32 * t.gsc[16 * sb + 2 * j][r]) as u16 as i32;
                            let hi = (-32 * t.gsc[16 * sb + 2 * j + 1][r]) as u16 as i32;
                            t.pairs[sb][j][r] = lo | (hi << 16);
                        }
                    }
                }
            }
        }
    }
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
    // Starting values: −128·Σ codes (scaled for the K-quants).
    match fmt {
        IntFormat::Legacy(_) => {
            for b in 0..len / 32 {
                for r in 0..RT {
                    t.corr[b][r] = (t.sum16[2 * b][r] + t.sum16[2 * b + 1][r]).wrapping_mul(-128);
                }
            }
        }
        IntFormat::Q4K => {
            for sb in 0..len / 256 {
                for r in 0..RT {
                    let mut s = 0i32;
                    for g in 0..8 {
                        let codes = t.sum16[16 * sb + 2 * g][r] + t.sum16[16 * sb + 2 * g + 1][r];
                        s = s.wrapping_add(codes.wrapping_mul(t.gsc[8 * sb + g][r]));
                    }
                    t.sbcorr[sb][r] = s.wrapping_mul(-128);
                }
            }
        }
        IntFormat::Q6K => {
            for sb in 0..len / 256 {
                for r in 0..RT {
                    let mut s = 0i32;
                    for g in 0..16 {
                        let codes = t.sum16[16 * sb + g][r];
                        s = s.wrapping_add(codes.wrapping_mul(t.gsc[16 * sb + g][r]));
                    }
                    t.sbcorr[sb][r] = s.wrapping_mul(-128);
                }
            }
        }
    }
}

/// The 32 signed codes of a 32-element block at `p`, in element order.
///
/// # Safety
/// AVX2 and F16C must be available; the block must be readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn legacy_codes(dtype: DType, p: *const u8) -> __m256i {
    // SAFETY: the fields of the block at `p`, as laid out for `dtype`.
    unsafe {
        match dtype {
            DType::Q4_0 => _mm256_sub_epi8(avx2::nibbles32(p.add(2)), _mm256_set1_epi8(8)),
            DType::Q5_0 => _mm256_sub_epi8(
                _mm256_or_si256(avx2::nibbles32(p.add(6)), avx2::fifth_bits(p.add(2))),
                _mm256_set1_epi8(16),
            ),
            DType::IQ4_NL => {
                let tab = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                    fused_core::blocks::KVALUES_IQ4NL.as_ptr().cast(),
                ));
                _mm256_shuffle_epi8(tab, avx2::nibbles32(p.add(2)))
            }
            _ => _mm256_loadu_si256(p.add(2).cast()),
        }
    }
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
