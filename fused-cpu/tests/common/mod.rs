//! Helpers shared by the fused-cpu integration tests: test data, weight
//! matrices, bit and error comparisons, the formats and activation modes to
//! cover. Builds without fused-cpu's `std` feature (the scalar tests run under
//! Miri with `--no-default-features`); what needs the threaded backend is in
//! [`backend`], behind `std`.
// Each test file is its own crate and uses only part of this module.
#![allow(dead_code)]

#[cfg(feature = "std")]
pub(crate) mod backend;

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::BoundEpilogue;
use fused_core::quant::quantize_row;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_cpu::Isa;
use fused_cpu::acts::{Acts, column, prepared_bytes, quantize_columns};
use fused_cpu::gemv::{RowKernels, gemv_glu_rows, gemv_rows};

pub(crate) use fused_testkit::Rng;

/// `n` values in [-0.5, 0.5) hashed from their index and `seed` (each seed
/// starts the sequence elsewhere): no state, so cheap enough for Miri.
pub(crate) fn vals(n: usize, seed: u32) -> Vec<f32> {
    let start = seed.wrapping_mul(0x85eb_ca6b);
    (0..n)
        .map(|i| {
            let h = (i as u32).wrapping_add(start).wrapping_mul(2_654_435_761);
            (h >> 9) as f32 / (1u32 << 23) as f32 - 0.5
        })
        .collect()
}

/// An `m × k` weight matrix in `dtype`, row `r` quantized from `row(r)`
/// (`k` values).
pub(crate) fn quantized(
    dtype: DType,
    m: usize,
    k: usize,
    mut row: impl FnMut(usize) -> Vec<f32>,
) -> Vec<u8> {
    let rb = dtype.row_bytes(k).unwrap();
    let mut w = vec![0u8; rb * m];
    for (r, bytes) in w.chunks_exact_mut(rb).enumerate() {
        quantize_row(dtype, &row(r), bytes).unwrap();
    }
    w
}

/// An `m × k` weight matrix in `dtype` quantized from `rng`'s values.
pub(crate) fn weights(dtype: DType, m: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    quantized(dtype, m, k, |_| rng.vec(k))
}

/// The bit patterns of `v`, for exact comparisons; every NaN maps to one
/// value (NaN payloads are not compared).
pub(crate) fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() })
        .collect()
}

/// Normalised mean squared error of `a` against the reference `b`.
pub(crate) fn nmse(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    num / den.max(1e-30)
}

/// NMSE allowed against the core reference in the same activation mode: the
/// scalar path is the reference's arithmetic; SIMD paths reorder f32 sums
/// (integer sums stay exact).
pub(crate) fn tolerance(isa: Isa) -> f64 {
    if isa == Isa::Scalar { 0.0 } else { 1e-9 }
}

/// The gate/up pair of `m × k` matrices in `dtype` with bytes `gate`, `up`.
pub(crate) fn glu_pair<'a>(
    dtype: DType,
    m: usize,
    k: usize,
    gate: &'a [u8],
    up: &'a [u8],
) -> GluWeights<'a> {
    GluWeights::new(
        WeightMatrix::new(dtype, m, k, gate).unwrap(),
        WeightMatrix::new(dtype, m, k, up).unwrap(),
    )
    .unwrap()
}

/// Every weight format (all but the activation-only ones), in the order the
/// tests draw their data in.
pub(crate) const WEIGHT_FORMATS: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::IQ4_NL,
    DType::Q4_K,
    DType::Q5_K,
    DType::Q6_K,
    DType::TQ2_0,
];

/// The formats with the most specialised kernels (four-row, AVX-512 and
/// integer GEMM kernels).
pub(crate) const HOT_FORMATS: [DType; 5] = [
    DType::Q4_0,
    DType::Q8_0,
    DType::F16,
    DType::Q4_K,
    DType::Q6_K,
];

/// Every activation mode.
pub(crate) const ACT_MODES: [ActQuant; 4] = [
    ActQuant::F32,
    ActQuant::Q8_0,
    ActQuant::Q8_1,
    ActQuant::Q8_K,
];

/// The activation modes worth testing for `dtype`: f32 and, where it differs,
/// GGML's quantized mode for it.
pub(crate) fn modes(dtype: DType) -> Vec<ActQuant> {
    let mut m = vec![ActQuant::F32];
    if ActQuant::ggml(dtype) != ActQuant::F32 {
        m.push(ActQuant::ggml(dtype));
    }
    m
}

/// The `n` columns of `k` values in `x`, prepared (quantized) for `mode`.
pub(crate) fn prepare_columns(mode: ActQuant, x: &[f32], k: usize, n: usize) -> Vec<u8> {
    let mut scratch = vec![0u8; prepared_bytes(mode, k).unwrap() * n];
    quantize_columns(mode, x, k, &mut scratch).unwrap();
    scratch
}

/// `a` without its side data, so that kernels fall back to the blocks alone.
pub(crate) fn without_side(a: Acts<'_>) -> Acts<'_> {
    match a {
        Acts::Quant { dtype, bytes, .. } => Acts::Quant {
            dtype,
            bytes,
            side: &[],
        },
        f => f,
    }
}

/// Runs the row drivers with `kernels` over the `n` columns of `x` prepared
/// for `mode`, with `epilogue` fused: `gemv_rows` on `wm`, and
/// `gemv_glu_rows` (SiLU) on `wm` as both gate and up; asserts each equals
/// the core reference (`gemm`, `gemm_glu`) bit for bit.
pub(crate) fn assert_rows_equal_reference(
    kernels: RowKernels,
    wm: WeightMatrix<'_>,
    x: &[f32],
    n: usize,
    mode: ActQuant,
    epilogue: &BoundEpilogue<'_>,
) {
    let (dtype, m, k) = (wm.dtype(), wm.rows(), wm.cols());
    let scratch = prepare_columns(mode, x, k, n);
    let cols: Vec<_> = (0..n)
        .map(|c| column(mode, x, &scratch, k, c).unwrap())
        .collect();
    let mut y = vec![0.0f32; m * n];
    gemv_rows(kernels, &wm, &cols, 0..m, epilogue, |r, c, v| {
        y[c * m + r] = v
    })
    .unwrap();
    let mut want = vec![0.0f32; m * n];
    gemm(&wm, x, n, mode, epilogue, &mut want).unwrap();
    assert_eq!(bits(&y), bits(&want), "{dtype} {mode:?}");
    let pair = GluWeights::new(wm, wm).unwrap();
    gemv_glu_rows(
        kernels,
        &pair,
        Activation::Silu,
        &cols,
        0..m,
        epilogue,
        |r, c, v| y[c * m + r] = v,
    )
    .unwrap();
    gemm_glu(&pair, x, n, mode, Activation::Silu, epilogue, &mut want).unwrap();
    assert_eq!(bits(&y), bits(&want), "{dtype} {mode:?} glu");
}
