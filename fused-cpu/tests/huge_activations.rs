//! One huge activation (3e38, near `f32::MAX`) among ordinary ones, ordinary
//! weights (issue 34): every ISA's GEMV against the core reference, whose
//! operation order is the spec. Where the reference is finite the backend
//! must be too (and agree within the reordering tolerance of
//! `tests/kernels.rs`); where it overflows the backend must not be finite
//! either. TQ2_0 against Q8_K activations used to give +inf on AVX2 and
//! AVX-512 for a finite reference: its kernel scaled the lanes of partial
//! sums of a block, which can be twice the block's sum, before adding them;
//! Q6_K against Q8_K (AVX2, AVX-512) gave 0 instead of the row's ordinary
//! value where the weight at the huge activation is 0: lanes near
//! `f32::MAX` of opposite signs, its `q·y` and its offset `−32·y`,
//! cancelled and took the rest of the row with them. AVX-512's Q8_0
//! kernel and packed Q4_0 kernel had the same flaw with the `−128·Σy` and
//! `−8·Σy` offsets of their unsigned × signed `vpdpbusd`, kept in one lane
//! of each block: with one activation of 1e6 (a finite f16 Q8_0 scale)
//! they were 1–8 % off the reference. The packed kernel now adds up each
//! block's lanes exactly in i32 before they meet its scale; the Q8_0
//! kernel still scales its lanes one by one, but each now starts from its
//! own share of the offset and holds the exact dot of its eight elements.

#![cfg(feature = "std")]

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::epilogue::Epilogue;
use fused_core::job::GemvJob;
use fused_core::quant::{dequantize_row, quantize_row};
use fused_core::reference::gemv::gemm;
use fused_core::weights::WeightMatrix;
use fused_cpu::packed::PackedWeights;
use fused_cpu::{CpuBackend, Isa};

mod common;
use common::{ACT_MODES, Rng, WEIGHT_FORMATS, quantized};

/// The huge activation.
const HUGE: f32 = 3e38;

/// `m` rows of `k` weights in `dtype`: random in ±0.9, and at `at` a weight
/// of `+1`, `−1` or `0` (rows `3i`, `3i + 1`, `3i + 2`): the largest of its
/// block, so a TQ2_0 row holds `t = +1`, `−1` or `0` there with `d = 1`.
fn weights(dtype: DType, m: usize, k: usize, at: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    quantized(dtype, m, k, |r| {
        let mut v = rng.vec_scaled(k, 0.9);
        v[at] = [1.0, -1.0, 0.0][r % 3];
        v
    })
}

/// `n` columns of `k` random activations in ±1 with `huge` at `at` of each.
fn activations(k: usize, n: usize, at: usize, huge: f32, seed: u64) -> Vec<f32> {
    let mut x = Rng::new(seed).vec(k * n);
    for col in x.chunks_exact_mut(k) {
        col[at] = huge;
    }
    x
}

/// Where each block of `dtype` keeps its codes (a byte range of the
/// block) if the format has a min term (`w = d·sc·q − dmin·m`, or
/// `d·q + m`): zeroed, the block dequantizes to that term alone.
fn code_bytes(dtype: DType) -> Option<core::ops::Range<usize>> {
    match dtype {
        DType::Q4_1 => Some(4..20),
        DType::Q5_1 => Some(4..24),
        DType::Q4_K => Some(16..144),
        DType::Q5_K => Some(16..176),
        _ => None,
    }
}

/// `Σ|w·x|` of row `r` and column `c` (f64), with `x` as the dot product
/// sees it in `mode` (quantized and dequantized): the scale of the error
/// that reordering the f32 sums may cause. Formats with a min term add
/// `2·Σ|min·x|` (the min part of each weight, [`code_bytes`]): the
/// reference and the kernels alike (GGML's arithmetic) take `Σ d·sc·q·x`
/// and `Σ dmin·m·x` as two f32 terms, each up to `Σ|w·x| + Σ|min·x|`,
/// whose difference is the dot; where a weight of 0 meets a large
/// activation they cancel, and their rounding error, far above
/// `1e-5·Σ|w·x|`, is the reference's own.
fn magnitudes(wm: &WeightMatrix<'_>, x: &[f32], n: usize, mode: ActQuant) -> Vec<f64> {
    let (m, k, dtype) = (wm.rows(), wm.cols(), wm.dtype());
    let mut xs = x.to_vec();
    if let Some(d) = mode.dtype() {
        let mut q = vec![0u8; d.row_bytes(k).unwrap()];
        for col in xs.chunks_exact_mut(k) {
            quantize_row(d, col, &mut q).unwrap();
            dequantize_row(d, &q, col).unwrap();
        }
    }
    let mut wrow = vec![0.0f32; k];
    let mut mins = vec![0.0f32; k];
    let mut mag = vec![0.0f64; m * n];
    for r in 0..m {
        let row = wm.row(r).unwrap();
        dequantize_row(dtype, row, &mut wrow).unwrap();
        if let Some(codes) = code_bytes(dtype) {
            let mut zeroed = row.to_vec();
            for block in zeroed.chunks_exact_mut(dtype.block_bytes()) {
                block[codes.clone()].fill(0);
            }
            dequantize_row(dtype, &zeroed, &mut mins).unwrap();
        }
        for c in 0..n {
            mag[c * m + r] = wrow
                .iter()
                .zip(&mins)
                .zip(&xs[c * k..(c + 1) * k])
                .map(|((w, mn), x)| {
                    let x = f64::from(*x);
                    (f64::from(*w) * x).abs() + 2.0 * (f64::from(*mn) * x).abs()
                })
                .sum();
        }
    }
    mag
}

/// Asserts that `got` agrees with the reference `want`: bit for bit on the
/// scalar ISA (the reference's arithmetic); elsewhere finite exactly where
/// `want` is, and within `1e-5·Σ|w·x|` of it there (`tests/kernels.rs`).
fn assert_agrees(got: &[f32], want: &[f32], mag: &[f64], isa: Isa, what: &str) {
    for (i, ((g, w), mg)) in got.iter().zip(want).zip(mag).enumerate() {
        if isa == Isa::Scalar {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{what} [{i}]: got {g:e}, want {w:e} (scalar: bit for bit)"
            );
        }
        assert_eq!(
            g.is_finite(),
            w.is_finite(),
            "{what} [{i}]: got {g:e}, want {w:e}"
        );
        if w.is_finite() {
            let err = (f64::from(*g) - f64::from(*w)).abs();
            assert!(
                err <= 1e-5 * (mg + 1e-30),
                "{what} [{i}]: got {g:e}, want {w:e}, |err| {err:e}, Σ|wx| {mg:e}"
            );
        }
    }
}

/// The backend's GEMV (`n` columns, one thread) on `isa`.
fn run(isa: Isa, wm: &WeightMatrix<'_>, x: &[f32], n: usize, mode: ActQuant) -> Vec<f32> {
    let be = CpuBackend::with_isa(isa, 1).unwrap();
    let none = Epilogue::NONE.bind(&[], wm.rows(), n).unwrap();
    let mut y = vec![0.0f32; wm.rows() * n];
    be.gemv(
        &GemvJob::new(wm, x, n).with_mode(mode).with_bound(&none),
        &mut y,
    )
    .unwrap();
    y
}

/// The core reference of the same product.
fn reference(wm: &WeightMatrix<'_>, x: &[f32], n: usize, mode: ActQuant) -> Vec<f32> {
    let none = Epilogue::NONE.bind(&[], wm.rows(), n).unwrap();
    let mut want = vec![0.0f32; wm.rows() * n];
    gemm(wm, x, n, mode, &none, &mut want).unwrap();
    want
}

/// TQ2_0 in both of its activation modes (f32, and GGML's Q8_K), on every
/// ISA: with one activation of ±3e38 (at the start, middle or end of a
/// block, in a row of one block or of more than eight) every row of the
/// reference is finite (±3e38·t plus ordinary terms), and so must the
/// backend's be.
#[test]
fn tq2_0_huge_activation_matches_reference() {
    let dtype = DType::TQ2_0;
    let m = 12;
    for (k, at) in [(256, 0), (256, 77), (2560, 300), (2560, 2559), (4096, 1791)] {
        let w = weights(dtype, m, k, at, 0x34);
        let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
        for huge in [HUGE, -HUGE] {
            for n in [1, 2] {
                let x = activations(k, n, at, huge, 0x3e38);
                for mode in [ActQuant::F32, ActQuant::Q8_K] {
                    let want = reference(&wm, &x, n, mode);
                    assert!(
                        want.iter().all(|v| v.is_finite()),
                        "the reference is finite here: {want:?}"
                    );
                    // Rows with t = ±1 at the huge activation are ±huge.
                    assert!(want[0].abs() > 2.9e38 && want[1].abs() > 2.9e38);
                    let mag = magnitudes(&wm, &x, n, mode);
                    for isa in Isa::available() {
                        let got = run(isa, &wm, &x, n, mode);
                        let what = format!("TQ2_0 {mode:?} {isa} k={k} x[{at}]={huge:e} n={n}");
                        assert_agrees(&got, &want, &mag, isa, &what);
                    }
                }
            }
        }
    }
}

/// Every weight format in every activation mode it takes, on every ISA,
/// one column and three (the GEMM drivers), and Q4_0 packed, with `value`
/// at each of `positions` in turn (of `k`): finite exactly where the
/// reference is, and close to it there.
fn every_format_agrees(k: usize, positions: &[usize], values: &[f32]) {
    let m = 9;
    for dtype in WEIGHT_FORMATS {
        for &at in positions {
            let w = weights(dtype, m, k, at, 0x5eed);
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            let packed = (dtype == DType::Q4_0).then(|| PackedWeights::pack(&wm).unwrap());
            for mode in ACT_MODES {
                if mode.check(dtype).is_err() {
                    continue;
                }
                for &value in values {
                    for n in [1, 3] {
                        let x = activations(k, n, at, value, 0x3e38 + at as u64);
                        let want = reference(&wm, &x, n, mode);
                        let mag = magnitudes(&wm, &x, n, mode);
                        for isa in Isa::available() {
                            let what = format!("{dtype:?} {mode:?} {isa} x[{at}]={value:e} n={n}");
                            let got = run(isa, &wm, &x, n, mode);
                            assert_agrees(&got, &want, &mag, isa, &what);
                            if let Some(p) = packed.as_ref().filter(|_| mode == ActQuant::Q8_0) {
                                let be = CpuBackend::with_isa(isa, 1).unwrap();
                                let none = Epilogue::NONE.bind(&[], m, n).unwrap();
                                let mut y = vec![0.0f32; m * n];
                                be.gemv_packed(
                                    &GemvJob::new(p, &x, n).with_mode(mode).with_bound(&none),
                                    &mut y,
                                )
                                .unwrap();
                                assert_agrees(&y, &want, &mag, isa, &format!("{what} packed"));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// [`every_format_agrees`] with one activation of 3e38. (Where GGML's Q8_0
/// and Q8_1 activation scale, an f16, overflows, the reference is ±inf; the
/// backend must not be finite either, and is not checked further: AVX-512's
/// Q8_0 kernel, which scales a block's lanes one by one, gives NaN there
/// where a lane is 0.)
#[test]
fn every_format_huge_activation_agrees_with_reference() {
    every_format_agrees(1024, &[0, 517], &[HUGE]);
}

/// [`every_format_agrees`] with one activation of ±1e6, large but with a
/// finite f16 Q8_0 scale (`1e6/127`), at the start of a row, inside a
/// super-group of sixteen Q8_0 blocks and in the last, partial one (`k` =
/// 40 blocks of 32). AVX-512's Q8_0 kernel (one and four rows) and packed
/// Q4_0 kernel used to scale a lane holding a block's whole `−128·Σy` or
/// `−8·Σy` offset (from the unsigned × signed `vpdpbusd`) apart from the
/// lanes of its code products: lanes of `±128·127·dy·dx` that cancelled in
/// f32 and left their rounding error, 1–8 % off the reference. The packed
/// kernel now adds up each block's lanes in i32 first, as the reference
/// does; the Q8_0 kernel's lanes each take their own share of the offset.
#[test]
fn every_format_large_activation_agrees_with_reference() {
    every_format_agrees(1280, &[0, 517, 1279], &[1e6, -1e6]);
}
