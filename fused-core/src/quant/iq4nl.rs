//! IQ4_NL: 4-bit indices into a fixed non-linear codebook, one f16 scale per 32.
//!
//! The quantizer reproduces GGML's `quantize_row_iq4_nl_ref` (no importance
//! weights, no extra scale search) bit for bit.

use super::{block_pairs, f16_from};
use crate::blocks::{BlockIq4Nl, BlockQ8_0, KVALUES_IQ4NL, QK32};

const HALF: usize = QK32 / 2;

/// Index of the codebook entry nearest to `x` (ties to the upper entry, the
/// way GGML's bisection resolves them).
fn best_index(x: f32) -> usize {
    let v = &KVALUES_IQ4NL;
    let n = v.len();
    if x <= f32::from(v[0]) {
        return 0;
    }
    if x >= f32::from(v[n - 1]) {
        return n - 1;
    }
    let (mut lo, mut hi) = (0usize, n - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < f32::from(v[mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - f32::from(v[hi - 1]) < f32::from(v[hi]) - x {
        hi - 1
    } else {
        hi
    }
}

/// GGML's IQ4_NL reference: `d0 = max/−127` from the largest-magnitude
/// signed value, indices `best_index(x/d0)`, then the least-squares scale
/// `d = Σw·q·x / Σw·q²` with weights `w = x²`.
pub(super) fn quantize_iq4_nl(x: &[f32]) -> BlockIq4Nl {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut blk = BlockIq4Nl {
        d: f16_from(0.0),
        qs: [0; HALF],
    };
    if amax < 1e-15 {
        return blk;
    }
    let d0 = max / f32::from(KVALUES_IQ4NL[0]);
    let id = 1.0 / d0;
    let mut l = [0u8; QK32];
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (c, &v) in l.iter_mut().zip(x) {
        let i = best_index(id * v);
        *c = i as u8;
        let q = f32::from(KVALUES_IQ4NL[i]);
        let w = v * v;
        sumqx += w * q * v;
        sumq2 += w * q * q;
    }
    let d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    blk.d = f16_from(d);
    for (j, q) in blk.qs.iter_mut().enumerate() {
        *q = l[j] | (l[j + HALF] << 4);
    }
    blk
}

pub(super) fn dequantize_iq4_nl(b: &BlockIq4Nl, y: &mut [f32]) {
    let d = b.d.to_f32();
    let (lo, hi) = y.split_at_mut(HALF);
    for ((&q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
        *c = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
    }
}

pub(super) fn vec_dot_iq4_nl_q8_0(w: &[u8], x: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<BlockIq4Nl, BlockQ8_0>(w, x) {
        let d = bx.d.to_f32() * bw.d.to_f32();
        let mut s = 0i32;
        for (j, &q) in bw.qs.iter().enumerate() {
            s += i32::from(bx.qs[j]) * i32::from(KVALUES_IQ4NL[usize::from(q & 0x0f)]);
            s += i32::from(bx.qs[j + HALF]) * i32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
        sumf += d * s as f32;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_picks_nearest() {
        assert_eq!(best_index(-200.0), 0);
        assert_eq!(best_index(200.0), 15);
        assert_eq!(best_index(0.0), 8); // 1 is nearer than −10
        assert_eq!(best_index(-4.5), 8); // −10 and 1 equidistant → upper
        assert_eq!(best_index(-4.6), 7);
        assert_eq!(best_index(f32::NAN), 15);
    }
}
