//! The 256-element K-quants Q4_K, Q5_K, Q6_K and the activation format Q8_K.
//!
//! Dequantizers, the Q8_K quantizer and the dots follow GGML operation for
//! operation. The Q4_K/Q5_K/Q6_K weight quantizers are this crate's own: a
//! least-squares refinement per sub-block, then a 6-bit (Q4_K/Q5_K) or 8-bit
//! (Q6_K) quantization of the sub-block scales. They are simpler than GGML's
//! weighted searches and stay within GGML's error budget.

use super::{block_pairs, f16_from, nearest_int};
use crate::blocks::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K};
use crate::dtype::QK_K;

/// Sub-blocks of 32 in a Q4_K/Q5_K super-block.
const NSUB: usize = QK_K / 32;
/// Groups of 16 in a Q6_K/Q8_K super-block.
const NGRP: usize = QK_K / 16;
/// Magnitudes below this count as an all-zero group (GGML's `GROUP_MAX_EPS`).
const GROUP_EPS: f32 = 1e-15;

/// Sub-block `j`'s 6-bit scale and min from the packed 12-byte array.
#[inline]
fn scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs eight 6-bit scales and mins (each ≤ 63) into the 12-byte array.
fn pack_scale_min(ls: &[u8; NSUB], lm: &[u8; NSUB]) -> [u8; 12] {
    let mut q = [0u8; 12];
    for j in 0..4 {
        q[j] = ls[j] | ((ls[j + 4] >> 4) << 6);
        q[j + 4] = lm[j] | ((lm[j + 4] >> 4) << 6);
        q[j + 8] = (ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4);
    }
    q
}

/// Rounds `v` to the nearest integer in `lo..=hi` (ties to even); NaN gives
/// `lo`. Clamping first keeps [`nearest_int`] inside its exact range.
#[inline]
fn round_clamp(v: f32, lo: i32, hi: i32) -> i32 {
    let c = if v > hi as f32 {
        hi as f32
    } else if v >= lo as f32 {
        v
    } else {
        lo as f32
    };
    nearest_int(c)
}

/// Codes `L ∈ 0..=nmax` for `x ≈ scale·L − mn`, their squared error and
/// the sums `(ΣL, ΣL², Σx·L)` a least-squares refit needs.
fn codes_affine(x: &[f32], scale: f32, mn: f32, nmax: i32, l: &mut [u8]) -> [f32; 4] {
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    let [mut err, mut sl, mut sll, mut sxl] = [0.0f32; 4];
    for (q, &v) in l.iter_mut().zip(x) {
        let c = round_clamp((v + mn) * inv, 0, nmax);
        *q = c as u8;
        let c = c as f32;
        let e = scale * c - mn - v;
        err += e * e;
        sl += c;
        sll += c * c;
        sxl += v * c;
    }
    [err, sl, sll, sxl]
}

/// Fits one 32-element sub-block as `scale·L − mn` with `scale, mn ≥ 0`.
///
/// Starts from a few scales spanning `[min(x, 0), max(x)]`, then alternates
/// "round the codes" and "least-squares refit of scale and min" and keeps the
/// pair with the smallest squared error.
fn fit_affine(x: &[f32], nmax: i32) -> (f32, f32) {
    let lo = x.iter().fold(0.0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(lo, |a, &v| a.max(v));
    let span = hi - lo;
    if span.is_nan() || span <= GROUP_EPS {
        return (0.0, -lo);
    }
    let n = x.len() as f32;
    let sx: f32 = x.iter().sum();
    let mut l = [0u8; 32];
    let mut best = (0.0f32, -lo);
    let mut best_err = f32::INFINITY;
    for step in [-1.0f32, -0.5, 0.0, 0.5, 1.0] {
        let mut scale = span / (nmax as f32 + step);
        let mut mn = -lo;
        for _ in 0..3 {
            let [err, sl, sll, sxl] = codes_affine(x, scale, mn, nmax, &mut l);
            if err < best_err {
                best_err = err;
                best = (scale, mn);
            }
            // Least squares of x ≈ s·L + o over the current codes.
            let det = n * sll - sl * sl;
            if det.is_nan() || det <= 0.0 {
                break;
            }
            let mut s = (n * sxl - sx * sl) / det;
            let mut o = (sx - s * sl) / n;
            if o > 0.0 {
                o = 0.0;
                s = sxl / sll;
            }
            if s.is_nan() || s <= 0.0 {
                break;
            }
            scale = s;
            mn = -o;
        }
    }
    best
}

/// The shared Q4_K/Q5_K quantizer: super-block scales, 6-bit sub-block scales
/// and mins, and one code per element (`0..=nmax`).
fn quantize_affine(x: &[f32], nmax: i32) -> (half::f16, half::f16, [u8; 12], [u8; QK_K]) {
    let mut scales = [0.0f32; NSUB];
    let mut mins = [0.0f32; NSUB];
    for ((s, m), xs) in scales.iter_mut().zip(&mut mins).zip(x.chunks_exact(32)) {
        (*s, *m) = fit_affine(xs, nmax);
    }
    let max_scale = scales.iter().fold(0.0f32, |a, &v| a.max(v));
    let max_min = mins.iter().fold(0.0f32, |a, &v| a.max(v));
    let d = f16_from(max_scale / 63.0);
    let dmin = f16_from(max_min / 63.0);
    let (df, dminf) = (d.to_f32(), dmin.to_f32());
    let mut ls = [0u8; NSUB];
    let mut lm = [0u8; NSUB];
    for j in 0..NSUB {
        if df > 0.0 {
            ls[j] = round_clamp(scales[j] / df, 0, 63) as u8;
        }
        if dminf > 0.0 {
            lm[j] = round_clamp(mins[j] / dminf, 0, 63) as u8;
        }
    }
    let mut l = [0u8; QK_K];
    for (j, (lj, xs)) in l.chunks_exact_mut(32).zip(x.chunks_exact(32)).enumerate() {
        let scale = df * ls[j] as f32;
        let mn = dminf * lm[j] as f32;
        codes_affine(xs, scale, mn, nmax, lj);
    }
    (d, dmin, pack_scale_min(&ls, &lm), l)
}

pub(super) fn quantize_q4_k(x: &[f32]) -> BlockQ4K {
    let (d, dmin, scales, l) = quantize_affine(x, 15);
    let mut qs = [0u8; QK_K / 2];
    for (c, q) in qs.chunks_exact_mut(32).enumerate() {
        for (i, b) in q.iter_mut().enumerate() {
            *b = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
        }
    }
    BlockQ4K {
        d,
        dmin,
        scales,
        qs,
    }
}

pub(super) fn dequantize_q4_k(b: &BlockQ4K, y: &mut [f32]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    for (c, (q, out)) in
        b.qs.chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
    {
        let (sc1, m1) = scale_min(2 * c, &b.scales);
        let (sc2, m2) = scale_min(2 * c + 1, &b.scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (lo, hi) = out.split_at_mut(32);
        for ((&q, a), h) in q.iter().zip(lo).zip(hi) {
            *a = d1 * (q & 0x0f) as f32 - m1;
            *h = d2 * (q >> 4) as f32 - m2;
        }
    }
}

pub(super) fn quantize_q5_k(x: &[f32]) -> BlockQ5K {
    let (d, dmin, scales, l) = quantize_affine(x, 31);
    let mut qs = [0u8; QK_K / 2];
    let mut qh = [0u8; QK_K / 8];
    for (c, q) in qs.chunks_exact_mut(32).enumerate() {
        for (i, b) in q.iter_mut().enumerate() {
            let (l1, l2) = (l[64 * c + i], l[64 * c + 32 + i]);
            *b = (l1 & 0x0f) | ((l2 & 0x0f) << 4);
            qh[i] |= ((l1 >> 4) & 1) << (2 * c);
            qh[i] |= ((l2 >> 4) & 1) << (2 * c + 1);
        }
    }
    BlockQ5K {
        d,
        dmin,
        scales,
        qh,
        qs,
    }
}

pub(super) fn dequantize_q5_k(b: &BlockQ5K, y: &mut [f32]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    for (c, (q, out)) in
        b.qs.chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
    {
        let (sc1, m1) = scale_min(2 * c, &b.scales);
        let (sc2, m2) = scale_min(2 * c + 1, &b.scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
        let (lo, hi) = out.split_at_mut(32);
        for (l, ((&q, a), h)) in q.iter().zip(lo).zip(hi).enumerate() {
            let h1 = if b.qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if b.qh[l] & u2 != 0 { 16 } else { 0 };
            *a = d1 * ((q & 0x0f) + h1) as f32 - m1;
            *h = d2 * ((q >> 4) + h2) as f32 - m2;
        }
    }
}

/// Fits one 16-element group as `s·L` with `L ∈ −32..=31`; returns `s`.
///
/// Starts from `s = max/−32` (the largest-magnitude value hits the extreme
/// code) and a few nearby scales, refits `s = Σx·L / ΣL²` on the rounded
/// codes and keeps the best squared error.
fn fit_symmetric(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_EPS {
        return 0.0;
    }
    let sse = |s: f32| -> (f32, f32, f32) {
        let inv = 1.0 / s;
        let (mut err, mut sxl, mut sll) = (0.0f32, 0.0f32, 0.0f32);
        for &v in x {
            let c = round_clamp(v * inv, -32, 31) as f32;
            let e = s * c - v;
            err += e * e;
            sxl += v * c;
            sll += c * c;
        }
        (err, sxl, sll)
    };
    let mut best = max / -32.0;
    let mut best_err = f32::INFINITY;
    for step in [0.0f32, 0.5, 1.0, 1.5, -0.5] {
        let mut s = max / -(32.0 - step);
        for _ in 0..2 {
            let (err, sxl, sll) = sse(s);
            if err < best_err {
                best_err = err;
                best = s;
            }
            if sll.is_nan() || sll <= 0.0 || sxl == 0.0 {
                break;
            }
            s = sxl / sll;
        }
    }
    best
}

pub(super) fn quantize_q6_k(x: &[f32]) -> BlockQ6K {
    let mut group = [0.0f32; NGRP];
    for (s, xs) in group.iter_mut().zip(x.chunks_exact(16)) {
        *s = fit_symmetric(xs);
    }
    let amax = group.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let mut blk = BlockQ6K {
        ql: [0; QK_K / 2],
        qh: [0; QK_K / 4],
        scales: [0; NGRP],
        d: f16_from(0.0),
    };
    if amax < GROUP_EPS {
        // All-zero block: every code 32 (value 0), d = 0.
        blk.ql = [0; QK_K / 2];
        blk.qh = [0xaa; QK_K / 4];
        return blk;
    }
    blk.d = f16_from(amax / 127.0);
    let d = blk.d.to_f32();
    let mut l = [32u8; QK_K];
    for (g, (lg, xs)) in l.chunks_exact_mut(16).zip(x.chunks_exact(16)).enumerate() {
        let sc = if d > 0.0 {
            round_clamp(group[g] / d, -127, 127)
        } else {
            0
        };
        blk.scales[g] = sc as i8;
        let ds = d * sc as f32;
        if ds == 0.0 {
            continue;
        }
        let inv = 1.0 / ds;
        for (q, &v) in lg.iter_mut().zip(xs) {
            *q = (round_clamp(v * inv, -32, 31) + 32) as u8;
        }
    }
    for h in 0..2 {
        let (ll, ql, qh) = (&l[128 * h..], &mut blk.ql[64 * h..], &mut blk.qh[32 * h..]);
        for i in 0..32 {
            ql[i] = (ll[i] & 0x0f) | ((ll[i + 64] & 0x0f) << 4);
            ql[i + 32] = (ll[i + 32] & 0x0f) | ((ll[i + 96] & 0x0f) << 4);
            qh[i] = (ll[i] >> 4)
                | ((ll[i + 32] >> 4) << 2)
                | ((ll[i + 64] >> 4) << 4)
                | ((ll[i + 96] >> 4) << 6);
        }
    }
    blk
}

/// The 256 Q6_K codes minus 32, in element order.
fn q6_codes(b: &BlockQ6K) -> [i8; QK_K] {
    let mut a = [0i8; QK_K];
    for h in 0..2 {
        let (ql, qh, out) = (&b.ql[64 * h..], &b.qh[32 * h..], &mut a[128 * h..]);
        for l in 0..32 {
            let c = |lo: u8, sh: u32| ((lo | (((qh[l] >> sh) & 3) << 4)) as i8) - 32;
            out[l] = c(ql[l] & 0x0f, 0);
            out[l + 32] = c(ql[l + 32] & 0x0f, 2);
            out[l + 64] = c(ql[l] >> 4, 4);
            out[l + 96] = c(ql[l + 32] >> 4, 6);
        }
    }
    a
}

pub(super) fn dequantize_q6_k(b: &BlockQ6K, y: &mut [f32]) {
    let d = b.d.to_f32();
    let codes = q6_codes(b);
    for (e, (out, &q)) in y.iter_mut().zip(&codes).enumerate() {
        *out = d * b.scales[e / 16] as f32 * q as f32;
    }
}

pub(super) fn quantize_q8_k(x: &[f32]) -> BlockQ8K {
    let mut blk = BlockQ8K {
        d: 0.0,
        qs: [0; QK_K],
        bsums: [0; NGRP],
    };
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        return blk;
    }
    let iscale = -127.0 / max;
    for (q, &v) in blk.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (s, qs) in blk.bsums.iter_mut().zip(blk.qs.chunks_exact(16)) {
        *s = qs.iter().map(|&q| i32::from(q)).sum::<i32>() as i16;
    }
    blk.d = 1.0 / iscale;
    blk
}

pub(super) fn dequantize_q8_k(b: &BlockQ8K, y: &mut [f32]) {
    for (out, &q) in y.iter_mut().zip(&b.qs) {
        *out = b.d * q as f32;
    }
}

/// Adds `scale·q8[e]·a[e]` for the 8-aligned positions `e` of `range` into the
/// lane `e % 8` of `acc`.
#[inline]
fn lanes(acc: &mut [i32; 8], scale: i32, q8: &[i8], a: &[i8]) {
    for (i, (&x, &w)) in q8.iter().zip(a).enumerate() {
        acc[i % 8] += scale * (i32::from(x) * i32::from(w));
    }
}

/// The Q4_K/Q5_K × Q8_K dot over a row, given each block's codes (0..=31).
fn vec_dot_affine<B: crate::blocks::Block>(
    w: &[u8],
    x: &[u8],
    parts: impl Fn(&B) -> (f32, f32, [u8; 12], [i8; QK_K]),
) -> f32 {
    let mut sums = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (bw, bx) in block_pairs::<B, BlockQ8K>(w, x) {
        let (d, dmin, sc, codes) = parts(&bw);
        let mut mi = 0i32;
        for (g, &bs) in bx.bsums.iter().enumerate() {
            mi += i32::from(bs) * i32::from(scale_min(g / 2, &sc).1);
        }
        let mut acc = [0i32; 8];
        for j in 0..NSUB {
            let scale = i32::from(scale_min(j, &sc).0);
            let r = 32 * j..32 * j + 32;
            lanes(&mut acc, scale, &bx.qs[r.clone()], &codes[r]);
        }
        let dd = d * bx.d;
        for (s, &a) in sums.iter_mut().zip(&acc) {
            *s += dd * a as f32;
        }
        let dm = dmin * bx.d;
        sumf -= dm * mi as f32;
    }
    for s in sums {
        sumf += s;
    }
    sumf
}

pub(super) fn vec_dot_q4_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    vec_dot_affine::<BlockQ4K>(w, x, |b| {
        let mut a = [0i8; QK_K];
        for (c, q) in b.qs.chunks_exact(32).enumerate() {
            for (l, &v) in q.iter().enumerate() {
                a[64 * c + l] = (v & 0x0f) as i8;
                a[64 * c + 32 + l] = (v >> 4) as i8;
            }
        }
        (b.d.to_f32(), b.dmin.to_f32(), b.scales, a)
    })
}

pub(super) fn vec_dot_q5_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    vec_dot_affine::<BlockQ5K>(w, x, |b| {
        let mut a = [0i8; QK_K];
        for (c, q) in b.qs.chunks_exact(32).enumerate() {
            for (l, &v) in q.iter().enumerate() {
                let h1 = ((b.qh[l] >> (2 * c)) & 1) << 4;
                let h2 = ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
                a[64 * c + l] = ((v & 0x0f) | h1) as i8;
                a[64 * c + 32 + l] = ((v >> 4) | h2) as i8;
            }
        }
        (b.d.to_f32(), b.dmin.to_f32(), b.scales, a)
    })
}

pub(super) fn vec_dot_q6_k_q8_k(w: &[u8], x: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (bw, bx) in block_pairs::<BlockQ6K, BlockQ8K>(w, x) {
        let codes = q6_codes(&bw);
        let mut acc = [0i32; 8];
        for g in 0..NGRP {
            let r = 16 * g..16 * g + 16;
            lanes(
                &mut acc,
                i32::from(bw.scales[g]),
                &bx.qs[r.clone()],
                &codes[r],
            );
        }
        let dd = bw.d.to_f32() * bx.d;
        for (s, &a) in sums.iter_mut().zip(&acc) {
            *s += dd * a as f32;
        }
    }
    let mut sumf = 0.0f32;
    for s in sums {
        sumf += s;
    }
    sumf
}
