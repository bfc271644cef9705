//! TQ2_0: ternary values {−1, 0, 1} in 2 bits each, one f16 scale (stored
//! last) per 256 elements.
//!
//! The quantizer reproduces GGML's `quantize_row_tq2_0_ref` bit for bit.

use super::{block_pairs, f16_from, round_away};
use crate::blocks::{BlockQ8K, BlockTq2_0};
use crate::dtype::QK_K;

/// Element index of code `l` (0..4) of byte `qs[j]` (j in 0..64).
#[inline]
fn element(j: usize, l: usize) -> usize {
    (j / 32) * 128 + l * 32 + j % 32
}

/// `d = amax`, codes `roundf(x/d) + 1` (ties away from zero) in 2 bits.
pub(super) fn quantize_tq2_0(x: &[f32]) -> BlockTq2_0 {
    let amax = x
        .iter()
        .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
    let d = amax;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0u8; QK_K / 4];
    for (j, q) in qs.iter_mut().enumerate() {
        for l in 0..4 {
            let c = (round_away(x[element(j, l)] * id) as i32).wrapping_add(1);
            *q |= ((c & 3) as u8) << (2 * l);
        }
    }
    BlockTq2_0 { qs, d: f16_from(d) }
}

pub(super) fn dequantize_tq2_0(b: &BlockTq2_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (j, &q) in b.qs.iter().enumerate() {
        for l in 0..4 {
            y[element(j, l)] = (((q >> (2 * l)) & 3) as i32 - 1) as f32 * d;
        }
    }
}

pub(super) fn vec_dot_tq2_0_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockTq2_0, BlockQ8K>(w, x) {
        let mut s = 0i32;
        for (j, &q) in bw.qs.iter().enumerate() {
            for l in 0..4 {
                let t = ((q >> (2 * l)) & 3) as i32 - 1;
                s += i32::from(bx.qs[element(j, l)]) * t;
            }
        }
        let d = bx.d * bw.d.to_f32();
        sumf += s as f32 * d;
    }
    sumf
}
