//! The 32-element formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.
//!
//! Quantizers reproduce GGML's `quantize_row_*_ref` bit for bit; dequantizers
//! and dots use GGML's operation order (see [`super::vec_dot`]).

use super::{block_pairs, f16_from, round_away};
use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1, QK32};

const HALF: usize = QK32 / 2;

/// The value of largest magnitude (the first one on ties) and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Smallest and largest value (GGML's scan starting from ±FLT_MAX).
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

fn recip_or_zero(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// Splits a 32-element block into its first and second halves.
fn halves(x: &[f32]) -> (&[f32], &[f32]) {
    x.split_at(HALF)
}

pub(super) fn quantize_q4_0(x: &[f32]) -> BlockQ4_0 {
    let (max, _) = signed_absmax(x);
    let d = max / -8.0;
    let id = recip_or_zero(d);
    let mut qs = [0u8; HALF];
    let (lo, hi) = halves(x);
    for ((q, &a), &b) in qs.iter_mut().zip(lo).zip(hi) {
        let q0 = ((a * id + 8.5) as i8).min(15) as u8;
        let q1 = ((b * id + 8.5) as i8).min(15) as u8;
        *q = q0 | (q1 << 4);
    }
    BlockQ4_0 { d: f16_from(d), qs }
}

pub(super) fn dequantize_q4_0(b: &BlockQ4_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    let (lo, hi) = y.split_at_mut(HALF);
    for ((&q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = ((q & 0x0f) as i32 - 8) as f32 * d;
        *c = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

pub(super) fn quantize_q4_1(x: &[f32]) -> BlockQ4_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = recip_or_zero(d);
    let mut qs = [0u8; HALF];
    let (lo, hi) = halves(x);
    for ((q, &a), &b) in qs.iter_mut().zip(lo).zip(hi) {
        let q0 = (((a - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (((b - min) * id + 0.5) as i8).min(15) as u8;
        *q = q0 | (q1 << 4);
    }
    BlockQ4_1 {
        d: f16_from(d),
        m: f16_from(min),
        qs,
    }
}

pub(super) fn dequantize_q4_1(b: &BlockQ4_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    let (lo, hi) = y.split_at_mut(HALF);
    for ((&q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = (q & 0x0f) as f32 * d + m;
        *c = (q >> 4) as f32 * d + m;
    }
}

/// Packs 32 five-bit codes (element order) into `qs` and the `qh` u32.
fn pack5(codes: &[u8; QK32]) -> ([u8; HALF], [u8; 4]) {
    let mut qs = [0u8; HALF];
    let mut qh = 0u32;
    for (j, q) in qs.iter_mut().enumerate() {
        let (c0, c1) = (codes[j], codes[j + HALF]);
        *q = (c0 & 0x0f) | ((c1 & 0x0f) << 4);
        qh |= u32::from((c0 & 0x10) >> 4) << j;
        qh |= u32::from((c1 & 0x10) >> 4) << (j + HALF);
    }
    (qs, qh.to_le_bytes())
}

/// The 32 five-bit codes of a Q5 block, in element order.
fn unpack5(qs: &[u8; HALF], qh: [u8; 4]) -> [u8; QK32] {
    let qh = u32::from_le_bytes(qh);
    let mut codes = [0u8; QK32];
    for (j, &q) in qs.iter().enumerate() {
        let h0 = (((qh >> j) << 4) & 0x10) as u8;
        let h1 = ((qh >> (j + 12)) & 0x10) as u8;
        codes[j] = (q & 0x0f) | h0;
        codes[j + HALF] = (q >> 4) | h1;
    }
    codes
}

pub(super) fn quantize_q5_0(x: &[f32]) -> BlockQ5_0 {
    let (max, _) = signed_absmax(x);
    let d = max / -16.0;
    let id = recip_or_zero(d);
    let mut codes = [0u8; QK32];
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = ((v * id + 16.5) as i8).min(31) as u8;
    }
    let (qs, qh) = pack5(&codes);
    BlockQ5_0 {
        d: f16_from(d),
        qh,
        qs,
    }
}

pub(super) fn dequantize_q5_0(b: &BlockQ5_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, &c) in y.iter_mut().zip(&unpack5(&b.qs, b.qh)) {
        *out = (c as i32 - 16) as f32 * d;
    }
}

pub(super) fn quantize_q5_1(x: &[f32]) -> BlockQ5_1 {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = recip_or_zero(d);
    let mut codes = [0u8; QK32];
    for (c, &v) in codes.iter_mut().zip(x) {
        // GGML converts straight to uint8_t, without a clamp to 31.
        *c = ((v - min) * id + 0.5) as u8;
    }
    let (qs, qh) = pack5(&codes);
    BlockQ5_1 {
        d: f16_from(d),
        m: f16_from(min),
        qh,
        qs,
    }
}

pub(super) fn dequantize_q5_1(b: &BlockQ5_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    for (out, &c) in y.iter_mut().zip(&unpack5(&b.qs, b.qh)) {
        *out = c as f32 * d + m;
    }
}

/// Q8_0/Q8_1 codes: `d = amax/127`, `q = roundf(x/d)` via the f32 reciprocal,
/// as GGML's reference, with non-finite inputs settled:
///
/// - `amax` is GGML's fold `if a > |v| { a } else { |v| }` from 0, so a NaN
///   restarts it: `amax` is the largest `|v|` after the block's last NaN
///   (NaN when the last element is one); a NaN element's code is 0;
/// - an infinity makes `amax` infinite, `d` infinite and `1/d` zero: every
///   code 0 (the infinite element's `∞·0` is NaN, code 0), and any dot
///   product with the block `∞·0`, NaN;
/// - a rounded value beyond ±127 (an element before a NaN that restarted
///   `amax`, or any element where `1/d` overflows for a subnormal `d`) is
///   clamped to ±127. GGML's C leaves that conversion undefined; −128 is
///   excluded so that codes stay symmetric, which the x86 kernels' sign
///   trick (`|w|·(y·sign w)` in bytes) needs.
fn quantize_8(x: &[f32]) -> (f32, [i8; QK32]) {
    let amax = x
        .iter()
        .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = recip_or_zero(d);
    let mut qs = [0i8; QK32];
    for (q, &v) in qs.iter_mut().zip(x) {
        // `clamp` keeps NaN, and `as i8` makes it 0.
        *q = round_away(v * id).clamp(-127.0, 127.0) as i8;
    }
    (d, qs)
}

pub(super) fn quantize_q8_0(x: &[f32]) -> BlockQ8_0 {
    let (d, qs) = quantize_8(x);
    BlockQ8_0 { d: f16_from(d), qs }
}

pub(super) fn dequantize_q8_0(b: &BlockQ8_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, &q) in y.iter_mut().zip(&b.qs) {
        *out = q as f32 * d;
    }
}

pub(super) fn quantize_q8_1(x: &[f32]) -> BlockQ8_1 {
    let (d, qs) = quantize_8(x);
    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
    BlockQ8_1 {
        d: f16_from(d),
        s: f16_from(sum as f32 * d),
        qs,
    }
}

pub(super) fn dequantize_q8_1(b: &BlockQ8_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, &q) in y.iter_mut().zip(&b.qs) {
        *out = q as f32 * d;
    }
}

/// `Σ_j w(j)·qy_j` over a 32-element block, exact in i32.
fn isum(qy: &[i8; QK32], w: impl Fn(usize) -> i32) -> i32 {
    qy.iter()
        .enumerate()
        .map(|(j, &q)| w(j) * i32::from(q))
        .sum()
}

pub(super) fn vec_dot_q4_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockQ4_0, BlockQ8_0>(w, x) {
        let s = isum(&bx.qs, |j| nib(&bw.qs, j) - 8);
        sumf += s as f32 * bw.d.to_f32() * bx.d.to_f32();
    }
    sumf
}

pub(super) fn vec_dot_q4_1_q8_1(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockQ4_1, BlockQ8_1>(w, x) {
        let s = isum(&bx.qs, |j| nib(&bw.qs, j));
        sumf += (bw.d.to_f32() * bx.d.to_f32()) * s as f32 + bw.m.to_f32() * bx.s.to_f32();
    }
    sumf
}

pub(super) fn vec_dot_q5_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockQ5_0, BlockQ8_0>(w, x) {
        let codes = unpack5(&bw.qs, bw.qh);
        let s = isum(&bx.qs, |j| i32::from(codes[j]) - 16);
        sumf += (bw.d.to_f32() * bx.d.to_f32()) * s as f32;
    }
    sumf
}

pub(super) fn vec_dot_q5_1_q8_1(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockQ5_1, BlockQ8_1>(w, x) {
        let codes = unpack5(&bw.qs, bw.qh);
        let s = isum(&bx.qs, |j| i32::from(codes[j]));
        sumf += (bw.d.to_f32() * bx.d.to_f32()) * s as f32 + bw.m.to_f32() * bx.s.to_f32();
    }
    sumf
}

pub(super) fn vec_dot_q8_0_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockQ8_0, BlockQ8_0>(w, x) {
        let s = isum(&bx.qs, |j| i32::from(bw.qs[j]));
        sumf += s as f32 * (bw.d.to_f32() * bx.d.to_f32());
    }
    sumf
}

/// The 4-bit code of element `j` (0..32) of a Q4 block's `qs`.
#[inline]
fn nib(qs: &[u8; HALF], j: usize) -> i32 {
    if j < HALF {
        i32::from(qs[j] & 0x0f)
    } else {
        i32::from(qs[j - HALF] >> 4)
    }
}
