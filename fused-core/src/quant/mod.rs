//! Row-level quantization, dequantization and the quantized dot product.
//!
//! Three entry points dispatch on [`DType`]:
//!
//! * [`dequantize_row`]: bytes of any format to f32;
//! * [`quantize_row`]: f32 to bytes of any format; for Q4_0, Q4_1, Q5_0,
//!   Q5_1, Q8_0, Q8_1, Q8_K, IQ4_NL and TQ2_0 the bytes are those of GGML's
//!   `quantize_row_*_ref`, bit for bit;
//! * [`vec_dot`]: a quantized weight row dotted with an activation row already
//!   quantized into the weight's [`DType::vec_dot_type`], following GGML's
//!   generic scalar kernels operation for operation. This is the bit-exact
//!   "same-quantization reference" that backends compare to.
//!
//! All three validate lengths first and return an [`Error`] instead of
//! panicking. Quantized bytes may sit at any alignment; they are read block by
//! block with [`bytemuck::pod_read_unaligned`]. Nothing here allocates.

mod float;
mod iq4nl;
mod kquants;
mod legacy;
mod ternary;

use crate::blocks::Block;
use crate::dtype::DType;
use crate::error::Error;
use crate::error::check_len;

/// Dequantizes one row of `dtype` into `dst`.
///
/// `dst.len()` is the number of elements and must be a whole number of blocks
/// of `dtype`; `src` must be exactly `dtype.row_bytes(dst.len())` bytes. The
/// float formats are read as little-endian F32/F16/BF16 values. The arithmetic
/// is GGML's `dequantize_row_*` (e.g. Q4_K: `d·sc·q − dmin·m` with
/// `d·sc` and `dmin·m` formed first), so results are bit-identical to GGML's.
///
/// # Errors
/// [`Error::NotBlockAligned`] when `dst.len()` is not a multiple of the block
/// length; [`Error::LengthMismatch`] when `src` has the wrong size.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    check_len(
        "dequantize_row: src bytes",
        dtype.row_bytes(dst.len())?,
        src.len(),
    )?;
    match dtype {
        DType::F32 => float::dequantize_f32(src, dst),
        DType::F16 => float::dequantize_f16(src, dst),
        DType::BF16 => float::dequantize_bf16(src, dst),
        DType::Q4_0 => dequant_blocks(src, dst, legacy::dequantize_q4_0),
        DType::Q4_1 => dequant_blocks(src, dst, legacy::dequantize_q4_1),
        DType::Q5_0 => dequant_blocks(src, dst, legacy::dequantize_q5_0),
        DType::Q5_1 => dequant_blocks(src, dst, legacy::dequantize_q5_1),
        DType::Q8_0 => dequant_blocks(src, dst, legacy::dequantize_q8_0),
        DType::Q8_1 => dequant_blocks(src, dst, legacy::dequantize_q8_1),
        DType::Q4_K => dequant_blocks(src, dst, kquants::dequantize_q4_k),
        DType::Q5_K => dequant_blocks(src, dst, kquants::dequantize_q5_k),
        DType::Q6_K => dequant_blocks(src, dst, kquants::dequantize_q6_k),
        DType::Q8_K => dequant_blocks(src, dst, kquants::dequantize_q8_k),
        DType::IQ4_NL => dequant_blocks(src, dst, iq4nl::dequantize_iq4_nl),
        DType::TQ2_0 => dequant_blocks(src, dst, ternary::dequantize_tq2_0),
    }
    Ok(())
}

/// Quantizes one row of f32 values into `dtype`.
///
/// `src.len()` must be a whole number of blocks of `dtype` and `dst` exactly
/// `dtype.row_bytes(src.len())` bytes.
///
/// * F32 is a byte copy (little-endian); F16 and BF16 round to nearest, ties
///   to even.
/// * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K, IQ4_NL and TQ2_0 produce the
///   same bytes as GGML's `quantize_row_*_ref` for every finite input. (One
///   documented exception: for an IQ4_NL block whose largest magnitude is
///   below 1e-15, GGML writes scale 0 and leaves stale codes from an
///   uninitialised buffer; this writes scale 0 and index 0 everywhere. Both
///   dequantize to 0. Likewise for an all-zero Q8_K block GGML leaves `bsums`
///   unwritten; this writes zeros.) Activation rounding, which backends must match:
///   Q8_0/Q8_1 use `d = amax/127`, `id = 1/d` from the f32 `d`, ties away
///   from zero, `d` stored as f16, Q8_1 `s = f16(d·Σq)`; Q8_K uses the
///   largest-magnitude *signed* value `max`, `iscale = −127/max`, ties to
///   even, `min(127, q)`, `d = 1/iscale` stored as f32 and per-16 `bsums`.
/// * Q4_K, Q5_K and Q6_K use this crate's own, simpler search; their bytes
///   differ from GGML's but their error stays within GGML's
///   `test-quantize-fns` budget.
///
/// Non-finite inputs never panic; the bytes they give are unspecified.
///
/// # Errors
/// [`Error::NotBlockAligned`] when `src.len()` is not a multiple of the block
/// length; [`Error::LengthMismatch`] when `dst` has the wrong size.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), Error> {
    check_len(
        "quantize_row: dst bytes",
        dtype.row_bytes(src.len())?,
        dst.len(),
    )?;
    match dtype {
        DType::F32 => float::quantize_f32(src, dst),
        DType::F16 => float::quantize_f16(src, dst),
        DType::BF16 => float::quantize_bf16(src, dst),
        DType::Q4_0 => quant_blocks(src, dst, legacy::quantize_q4_0),
        DType::Q4_1 => quant_blocks(src, dst, legacy::quantize_q4_1),
        DType::Q5_0 => quant_blocks(src, dst, legacy::quantize_q5_0),
        DType::Q5_1 => quant_blocks(src, dst, legacy::quantize_q5_1),
        DType::Q8_0 => quant_blocks(src, dst, legacy::quantize_q8_0),
        DType::Q8_1 => quant_blocks(src, dst, legacy::quantize_q8_1),
        DType::Q4_K => quant_blocks(src, dst, kquants::quantize_q4_k),
        DType::Q5_K => quant_blocks(src, dst, kquants::quantize_q5_k),
        DType::Q6_K => quant_blocks(src, dst, kquants::quantize_q6_k),
        DType::Q8_K => quant_blocks(src, dst, kquants::quantize_q8_k),
        DType::IQ4_NL => quant_blocks(src, dst, iq4nl::quantize_iq4_nl),
        DType::TQ2_0 => quant_blocks(src, dst, ternary::quantize_tq2_0),
    }
    Ok(())
}

/// The quantized dot product of one weight row with one quantized activation
/// row: GGML's `ggml_vec_dot_<w>_<x>_generic`, operation for operation.
///
/// `w_row` holds `k` elements of `w_dtype` (`w_dtype.row_bytes(k)` bytes) and
/// `x_q` the same `k` activations already quantized into
/// `w_dtype.vec_dot_type()` (use [`quantize_row`]). All integer sums are exact
/// (i32); every f32 operation is listed below, in order, and the result is
/// bit-identical to GGML's generic CPU kernels. `dx`, `mx`, `dminx` are the
/// weight block's f16 scale, min and min-scale converted to f32; `dy`, `sy`
/// the activation block's scale and sum; `sumf` starts at `0.0`.
///
/// * Q4_0×Q8_0, per block in order: `isum = Σ_j (nib_j − 8)·q_j`, then
///   `sumf += ((isum as f32)·dx)·dy`.
/// * Q5_0×Q8_0: `isum = Σ_j (q5_j − 16)·q_j`; `sumf += (dx·dy)·(isum as f32)`.
/// * Q8_0×Q8_0: `isum = Σ_j qx_j·qy_j`; `sumf += (isum as f32)·(dx·dy)`.
/// * IQ4_NL×Q8_0: `isum = Σ_j KVALUES_IQ4NL[nib_j]·q_j`;
///   `sumf += (dy·dx)·(isum as f32)`.
/// * Q4_1×Q8_1 and Q5_1×Q8_1: `isum = Σ_j q_j·qy_j` (unsigned weight codes);
///   `sumf += (dx·dy)·(isum as f32) + mx·sy` (the two products are formed,
///   added, and the sum added to `sumf`).
/// * TQ2_0×Q8_K: `isum = Σ_j (t_j − 1)·q_j`; `sumf += (isum as f32)·(dy·dx)`
///   with `dy` the f32 Q8_K scale.
/// * Q4_K×Q8_K and Q5_K×Q8_K: eight f32 lanes `sums[0..8] = 0` run beside
///   `sumf`. Per super-block: lane integers
///   `a[l] = Σ_{sub-block s} sc_s·Σ_{e in s, e % 8 == l} q_e·qy_e` and the
///   min integer `mi = Σ_{g in 0..16} bsums_g·m_{g/2}`; then
///   `d = dx·dy`, `sums[l] += d·(a[l] as f32)` for `l` in 0..8,
///   `dmin = dminx·dy`, `sumf −= dmin·(mi as f32)`. After the last block,
///   `sumf += sums[l]` for `l` = 0, 1, …, 7.
/// * Q6_K×Q8_K: the same eight lanes with `sc` the signed scale of each
///   16-element group and codes `q6 − 32`; no min term, so `sumf` is
///   `((0 + sums[0]) + sums[1]) + … + sums[7]`.
///
/// # Errors
/// [`Error::UnsupportedDType`] when `w_dtype` has no `vec_dot_type` (the float
/// formats and the activation formats Q8_1 and Q8_K);
/// [`Error::NotBlockAligned`] when `k` is not a multiple of the block length;
/// [`Error::LengthMismatch`] when `w_row` or `x_q` has the wrong size.
pub fn vec_dot(w_dtype: DType, w_row: &[u8], x_q: &[u8], k: usize) -> Result<f32, Error> {
    let Some(x_dtype) = w_dtype.vec_dot_type() else {
        return Err(Error::UnsupportedDType {
            what: "vec_dot weights",
            dtype: w_dtype,
        });
    };
    check_len(
        "vec_dot: weight row bytes",
        w_dtype.row_bytes(k)?,
        w_row.len(),
    )?;
    check_len(
        "vec_dot: activation row bytes",
        x_dtype.row_bytes(k)?,
        x_q.len(),
    )?;
    Ok(match w_dtype {
        DType::Q4_0 => legacy::vec_dot_q4_0_q8_0(w_row, x_q),
        DType::Q4_1 => legacy::vec_dot_q4_1_q8_1(w_row, x_q),
        DType::Q5_0 => legacy::vec_dot_q5_0_q8_0(w_row, x_q),
        DType::Q5_1 => legacy::vec_dot_q5_1_q8_1(w_row, x_q),
        DType::Q8_0 => legacy::vec_dot_q8_0_q8_0(w_row, x_q),
        DType::IQ4_NL => iq4nl::vec_dot_iq4_nl_q8_0(w_row, x_q),
        DType::Q4_K => kquants::vec_dot_q4_k_q8_k(w_row, x_q),
        DType::Q5_K => kquants::vec_dot_q5_k_q8_k(w_row, x_q),
        DType::Q6_K => kquants::vec_dot_q6_k_q8_k(w_row, x_q),
        DType::TQ2_0 => ternary::vec_dot_tq2_0_q8_k(w_row, x_q),
        DType::F32 | DType::F16 | DType::BF16 | DType::Q8_1 | DType::Q8_K => {
            return Err(Error::UnsupportedDType {
                what: "vec_dot weights",
                dtype: w_dtype,
            });
        }
    })
}

/// Reads block `B` from exactly `B::BYTES` bytes (callers pass exact chunks).
fn read<B: Block>(bytes: &[u8]) -> B {
    bytemuck::pod_read_unaligned(bytes)
}

/// Dequantizes a length-checked row block by block.
fn dequant_blocks<B: Block>(src: &[u8], dst: &mut [f32], f: fn(&B, &mut [f32])) {
    for (b, out) in src.chunks_exact(B::BYTES).zip(dst.chunks_exact_mut(B::LEN)) {
        f(&read::<B>(b), out);
    }
}

/// Quantizes a length-checked row block by block.
fn quant_blocks<B: Block>(src: &[f32], dst: &mut [u8], f: fn(&[f32]) -> B) {
    for (x, out) in src.chunks_exact(B::LEN).zip(dst.chunks_exact_mut(B::BYTES)) {
        out.copy_from_slice(bytemuck::bytes_of(&f(x)));
    }
}

/// Iterates the block pairs of a length-checked weight row and activation row.
fn block_pairs<'a, W: Block, X: Block>(
    w: &'a [u8],
    x: &'a [u8],
) -> impl Iterator<Item = (W, X)> + 'a {
    w.chunks_exact(W::BYTES)
        .zip(x.chunks_exact(X::BYTES))
        .map(|(w, x)| (read::<W>(w), read::<X>(x)))
}

/// GGML's `nearest_int`: adds 1.5·2²³ and reads the low mantissa bits, which
/// rounds to nearest with ties to even for |x| ≤ 2²²−1. Outside that range
/// (and for NaN) the result is meaningless but the function never panics.
#[inline]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    ((v.to_bits() & 0x007f_ffff) as i32) - 0x0040_0000
}

/// C's `roundf`: to nearest, ties away from zero.
#[inline]
fn round_away(x: f32) -> f32 {
    libm::roundf(x)
}

/// f32 → f16 bits rounding to nearest even (GGML's `GGML_FP32_TO_FP16`).
#[inline]
fn f16_from(x: f32) -> half::f16 {
    half::f16::from_f32(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes of a Q8_0 block (after the 2-byte f16 scale).
    fn q8_0_codes(x: &[f32; 32]) -> ([u8; 2], [i8; 32]) {
        let mut b = [0u8; 34];
        quantize_row(DType::Q8_0, x, &mut b).unwrap();
        let mut codes = [0i8; 32];
        for (c, &byte) in codes.iter_mut().zip(&b[2..]) {
            *c = byte as i8;
        }
        ([b[0], b[1]], codes)
    }

    #[test]
    fn q8_codes_stay_within_127_whatever_the_input() {
        // A NaN restarts GGML's running max: the elements before it may
        // exceed the scale; they are clamped to ±127, never −128.
        let mut x = [0.5f32; 32];
        x[0] = -100.0;
        x[1] = 100.0;
        x[2] = f32::NAN;
        let (_, codes) = q8_0_codes(&x);
        assert_eq!((codes[0], codes[1], codes[2]), (-127, 127, 0));
        assert_eq!(codes[3], 127, "0.5 is the block's largest after the NaN");
        // A subnormal scale whose reciprocal overflows.
        let tiny = [-1e-40f32; 32];
        assert!(q8_0_codes(&tiny).1.iter().all(|&c| c == -127));
        // An infinity: every code 0, the scale infinite.
        let mut inf = [1.0f32; 32];
        inf[7] = f32::INFINITY;
        let (d, codes) = q8_0_codes(&inf);
        assert!(codes.iter().all(|&c| c == 0));
        assert!(half::f16::from_le_bytes(d).is_infinite());
        // Q8_1 shares the codes.
        let mut b = [0u8; 36];
        quantize_row(DType::Q8_1, &x, &mut b).unwrap();
        assert!(b[4..].iter().all(|&c| c as i8 != -128));
    }

    #[test]
    fn nearest_int_ties_to_even() {
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(3.5), 4);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-3.5), -4);
        assert_eq!(nearest_int(126.49), 126);
        assert_eq!(nearest_int(-127.0), -127);
        // Never panics, whatever the input.
        let _ = nearest_int(f32::NAN);
        let _ = nearest_int(f32::INFINITY);
        let _ = nearest_int(-1e30);
    }

    #[test]
    fn round_away_ties_away() {
        assert_eq!(round_away(2.5), 3.0);
        assert_eq!(round_away(-2.5), -3.0);
        assert_eq!(round_away(0.49999997), 0.0);
    }
}
