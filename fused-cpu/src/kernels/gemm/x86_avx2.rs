//! x86-64 AVX2 + FMA + F16C GEMM micro-kernels.
//!
//! **Float** ([`micro`]): [`RR`] rows × [`CN`] columns, eight `k` lanes per
//! accumulator, so each weight vector is reused from a register for four
//! columns and each activation vector for four rows. F32, F16 and BF16 rows
//! are decoded with vector conversions, every other format with the core's
//! dequantizer.
//!
//! **Int** ([`micro_legacy`], [`micro_kquant`]): the tiles of
//! [`super::int`] (also used by AVX-512, whose per-row decoding and
//! activation preparation are the AVX2 code here), eight rows per vector.
//! Without VNNI a group of four products is `vpmaddubsw` (unsigned × signed
//! bytes to i16 pairs) then `vpmaddwd` with ones (pairs to i32). The i16
//! pair must not saturate: with the `+128` activations (≤ 255) that holds
//! for codes of magnitude ≤ 64 (Q4_0, Q5_0, Q4_K, Q6_K's unsigned 6-bit
//! codes: 2·255·63 < 2¹⁵). Q8_0 and IQ4_NL codes reach ±128, so their
//! kernel ([`micro_legacy`] with `SIGNED`) undoes the `+128` and uses the
//! sign trick instead: `|w|` (unsigned) × `y·sign(w)` (|y| ≤ 127, as the
//! Q8_0 quantizer makes it), starting from zero rather than the `−128·Σw`
//! correction. Integer sums are exact, and the f32 scaling is the same
//! operations as AVX-512's, so both ISAs give the same results.

use core::arch::x86_64::*;

use fused_core::{DType, Error};

use super::int::{IntAcc, IntActs, IntTile, Q8_0, Q8K, start_values};
use super::{CN, FloatAcc, FloatTile, IntFormat, KC, RR, RT};
use crate::kernels::x86_avx2 as avx2;

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

// ---------------------------------------------------------------------------
// Int: shared with AVX-512.

/// The little-endian f16 at `p` as f32 (F16C).
///
/// # Safety
/// `p..p + 2` must be readable; F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn h2f(p: *const u8) -> f32 {
    // SAFETY: forwarded from the caller; unaligned read.
    let bits = u16::from_le(unsafe { p.cast::<u16>().read_unaligned() });
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// Little-endian i32 at `p`.
///
/// # Safety
/// `p..p + 4` must be readable.
#[inline(always)]
pub(super) unsafe fn rd32(p: *const u8) -> i32 {
    // SAFETY: forwarded from the caller; unaligned read.
    i32::from_le(unsafe { p.cast::<i32>().read_unaligned() })
}

/// Asks for the cache lines of `bytes` in L2 (a hint; never faults).
///
/// # Safety
/// AVX2, FMA and F16C must be available (callers outside this module's
/// feature set must check them).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        // SAFETY: a prefetch is only a hint: it never faults and has no
        // observable effect (`_mm_prefetch` is an unsafe function in Rust
        // 1.89, the workspace's `rust-version`, and a safe one in newer
        // versions, hence the `allow`).
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T1>(line.as_ptr().cast())
        };
    }
}

/// Prepares `len` elements (a multiple of the activation block) of each of
/// `cols` (the column's bytes from the chunk's first block on) into `out`.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `cols.len() ≤ NC`, `len ≤ KC`,
/// and every column holds the blocks of `len` elements of `fmt`'s
/// activation format.
#[target_feature(enable = "avx2,fma,f16c")]
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

/// Decodes `len` elements (whole blocks) of each of the [`RT`] weight rows
/// `rows` (each from the chunk's first block to the end of the row) into
/// the row-major codes and the per-row scales of `t`, and prefetches the
/// rows' next chunk. The transpose and the sums are the caller's.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `len ≤ KC` is a multiple of the
/// format's block and every row holds those blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_int_rows(fmt: IntFormat, rows: &[&[u8]; RT], len: usize, t: &mut IntTile) {
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
}

/// The 32 signed codes of a 32-element block at `p`, in element order.
///
/// # Safety
/// AVX2 and F16C must be available; the block must be readable.
#[target_feature(enable = "avx2,fma,f16c")]
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

// ---------------------------------------------------------------------------
// Int: AVX2 tiles and micro-kernels.

/// Rows per AVX2 int vector.
const LANES: usize = 8;
/// 8-row vectors per micro-kernel call.
const VPC: usize = 2;
/// Micro-kernel calls per tile.
pub const INT_CALLS: usize = RT / (LANES * VPC);

/// Decodes `len` elements of the [`RT`] weight rows `rows` into `t` (see
/// [`decode_int_rows`]), transposes them to rows in lanes and fills the
/// code sums and starting values.
///
/// # Safety
/// As [`decode_int_rows`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_int(fmt: IntFormat, rows: &[&[u8]; RT], len: usize, t: &mut IntTile) {
    // SAFETY: forwarded from the caller.
    unsafe { decode_int_rows(fmt, rows, len, t) };
    let ones8 = _mm256_set1_epi8(1);
    let ones16 = _mm256_set1_epi16(1);
    for j in 0..len / 32 {
        for v in 0..RT / LANES {
            let mut r = [_mm256_setzero_si256(); LANES];
            for (i, ri) in r.iter_mut().enumerate() {
                let row = &t.rows[LANES * v + i][32 * j..32 * j + 32];
                // SAFETY: 32 readable bytes (sliced above).
                *ri = unsafe { _mm256_loadu_si256(row.as_ptr().cast()) };
            }
            let g = transpose8(r);
            let mut s = [_mm256_setzero_si256(); 2];
            for (i, gi) in g.iter().enumerate() {
                let at = t.codes[8 * j + i].as_flattened_mut();
                let at = &mut at[4 * LANES * v..4 * LANES * (v + 1)];
                // SAFETY: 32 writable bytes (sliced above).
                unsafe { _mm256_storeu_si256(at.as_mut_ptr().cast(), *gi) };
                let four = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, *gi), ones16);
                s[i / 4] = _mm256_add_epi32(s[i / 4], four);
            }
            for (h, sh) in s.iter().enumerate() {
                let at = &mut t.sum16[2 * j + h][LANES * v..LANES * (v + 1)];
                // SAFETY: eight writable i32 (sliced above).
                unsafe { _mm256_storeu_si256(at.as_mut_ptr().cast(), *sh) };
            }
        }
    }
    start_values(fmt, len, t);
}

/// Transposes an 8 × 8 matrix of dwords held as eight row vectors.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn transpose8(r: [__m256i; 8]) -> [__m256i; 8] {
    let mut t = [_mm256_setzero_si256(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4h + m]: rows 4h..4h + 4, dwords m (low half) and m + 4 (high).
    let mut u = [_mm256_setzero_si256(); 8];
    for h in 0..2 {
        let (a, b, c, d) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
        u[4 * h] = _mm256_unpacklo_epi64(a, c);
        u[4 * h + 1] = _mm256_unpackhi_epi64(a, c);
        u[4 * h + 2] = _mm256_unpacklo_epi64(b, d);
        u[4 * h + 3] = _mm256_unpackhi_epi64(b, d);
    }
    let mut out = [_mm256_setzero_si256(); 8];
    for m in 0..4 {
        out[m] = _mm256_permute2x128_si256::<0x20>(u[m], u[4 + m]);
        out[m + 4] = _mm256_permute2x128_si256::<0x31>(u[m], u[4 + m]);
    }
    out
}

/// Loads the eight values of a per-row array at rows `8v..8v + 8`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ld_i(a: &[i32; RT], v: usize) -> __m256i {
    let a = &a[LANES * v..LANES * (v + 1)];
    // SAFETY: eight readable i32 (sliced above).
    unsafe { _mm256_loadu_si256(a.as_ptr().cast()) }
}

/// As [`ld_i`] for f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn ld_f(a: &[f32; RT], v: usize) -> __m256 {
    let a = &a[LANES * v..LANES * (v + 1)];
    // SAFETY: eight readable f32 (sliced above).
    unsafe { _mm256_loadu_ps(a.as_ptr()) }
}

/// Adds, for each column `c`, the four products of k group `kg` of the
/// 8-row vectors `VPC·h..VPC·h + VPC` and prepared column `cols[c]` to
/// `ia[c]` (see the module documentation for `SIGNED`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_group<const SIGNED: bool>(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    kg: usize,
    h: usize,
    ia: &mut [[__m256i; VPC]; CN],
) {
    let ones16 = _mm256_set1_epi16(1);
    let codes = t.codes[kg].as_flattened();
    let mut w = [_mm256_setzero_si256(); VPC];
    for (v, wv) in w.iter_mut().enumerate() {
        let at = &codes[4 * LANES * (VPC * h + v)..4 * LANES * (VPC * h + v + 1)];
        // SAFETY: 32 readable bytes (sliced above).
        *wv = unsafe { _mm256_loadu_si256(at.as_ptr().cast()) };
    }
    let abs = w.map(|wv| _mm256_abs_epi8(wv));
    for c in 0..CN {
        let word = &a.codes[cols[c]][4 * kg..4 * kg + 4];
        // SAFETY: four readable bytes (sliced above).
        let yb = _mm256_set1_epi32(unsafe { rd32(word.as_ptr()) });
        for v in 0..VPC {
            let p = if SIGNED {
                let y = _mm256_xor_si256(yb, _mm256_set1_epi8(-128));
                _mm256_maddubs_epi16(abs[v], _mm256_sign_epi8(y, w[v]))
            } else {
                _mm256_maddubs_epi16(yb, w[v])
            };
            ia[c][v] = _mm256_add_epi32(ia[c][v], _mm256_madd_epi16(p, ones16));
        }
    }
}

/// `acc[c][rows] += f32(s[c][v])·(d[v]·dy[c])` for the 8-row vectors of
/// call `h` (the f32 step of every int kernel).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale_add(
    acc: &mut [IntAcc; CN],
    h: usize,
    s: &[[__m256i; VPC]; CN],
    d: [__m256; VPC],
    dy: [f32; CN],
    sub: bool,
) {
    for c in 0..CN {
        let flat = acc[c].as_flattened_mut();
        for v in 0..VPC {
            let at = &mut flat[LANES * (VPC * h + v)..LANES * (VPC * h + v + 1)];
            let sc = _mm256_mul_ps(d[v], _mm256_set1_ps(dy[c]));
            let x = _mm256_cvtepi32_ps(s[c][v]);
            // SAFETY: eight readable and writable f32 (sliced above).
            unsafe {
                let f = _mm256_loadu_ps(at.as_ptr());
                let f = if sub {
                    _mm256_fnmadd_ps(x, sc, f)
                } else {
                    _mm256_fmadd_ps(x, sc, f)
                };
                _mm256_storeu_ps(at.as_mut_ptr(), f);
            }
        }
    }
}

/// 32-element-block formats × Q8_0 over the first `len` elements of the
/// chunk, for the 16 rows of call `h` (`h < INT_CALLS`): `acc[c] += Σ_b
/// f32(isum_b)·(dx_b·dy_b)` for prepared columns `cols`. `SIGNED` for Q8_0
/// and IQ4_NL (codes beyond ±64).
///
/// # Safety
/// AVX2, FMA and F16C must be available; `len ≤ KC` a multiple of 32; `t`
/// and `a` decoded for those elements; `cols[c] < NC`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn micro_legacy<const SIGNED: bool>(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    len: usize,
    h: usize,
    acc: &mut [IntAcc; CN],
) {
    assert!(h < INT_CALLS && len <= KC, "row vectors inside the tile");
    for b in 0..len / 32 {
        let start = if SIGNED {
            [_mm256_setzero_si256(); VPC]
        } else {
            core::array::from_fn(|v| ld_i(&t.corr[b], VPC * h + v))
        };
        let mut ia = [start; CN];
        for g in 0..8 {
            dot_group::<SIGNED>(t, a, cols, 8 * b + g, h, &mut ia);
        }
        let dx = core::array::from_fn(|v| ld_f(&t.scale[b], VPC * h + v));
        let dy = cols.map(|c| a.dy[c][b]);
        scale_add(acc, h, &ia, dx, dy, false);
    }
}

/// Q4_K (`G = 8` k groups per scale, `MIN`) or Q6_K (`G = 4`, no min) × Q8_K
/// over the first `len` elements of the chunk, for the 16 rows of call `h`.
///
/// # Safety
/// As [`micro_legacy`], with `len` a multiple of 256.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn micro_kquant<const G: usize, const MIN: bool>(
    t: &IntTile,
    a: &IntActs,
    cols: [usize; CN],
    len: usize,
    h: usize,
    acc: &mut [IntAcc; CN],
) {
    assert!(h < INT_CALLS && len <= KC, "row vectors inside the tile");
    let groups = 64 / G;
    for sb in 0..len / 256 {
        let start: [__m256i; VPC] = core::array::from_fn(|v| ld_i(&t.sbcorr[sb], VPC * h + v));
        let mut tot = [start; CN];
        for gi in 0..groups {
            let mut ia = [[_mm256_setzero_si256(); VPC]; CN];
            for g in 0..G {
                dot_group::<false>(t, a, cols, 64 * sb + G * gi + g, h, &mut ia);
            }
            for v in 0..VPC {
                let sc = ld_i(&t.gsc[groups * sb + gi], VPC * h + v);
                for c in 0..CN {
                    tot[c][v] = _mm256_add_epi32(tot[c][v], _mm256_mullo_epi32(ia[c][v], sc));
                }
            }
        }
        let mut mins = [[_mm256_setzero_si256(); VPC]; CN];
        for j in 0..8 {
            for v in 0..VPC {
                let p = ld_i(&t.pairs[sb][j], VPC * h + v);
                for c in 0..CN {
                    let bs = _mm256_set1_epi32(a.bsums[cols[c]][8 * sb + j]);
                    let m = _mm256_madd_epi16(p, bs);
                    if MIN {
                        mins[c][v] = _mm256_add_epi32(mins[c][v], m);
                    } else {
                        tot[c][v] = _mm256_add_epi32(tot[c][v], m);
                    }
                }
            }
        }
        let dy = cols.map(|c| a.dy[c][sb]);
        let dx = core::array::from_fn(|v| ld_f(&t.scale[sb], VPC * h + v));
        scale_add(acc, h, &tot, dx, dy, false);
        if MIN {
            let dm = core::array::from_fn(|v| ld_f(&t.scale2[sb], VPC * h + v));
            scale_add(acc, h, &mins, dm, dy, true);
        }
    }
}
