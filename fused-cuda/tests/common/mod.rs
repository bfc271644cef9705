//! Helpers shared by the device tests: opening the backend (or skipping),
//! deterministic random data, weights in every format, error measures.
#![allow(dead_code)]

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
pub(crate) use fused_core::job::GemvJob as CoreGemvJob;
use fused_core::weights::WeightMatrix;
use fused_cuda::{CudaBackend, CudaError, DeviceVec, DeviceWeights};
use std::io::Write;

/// Opens the backend, or reports the skip and returns `None`.
///
/// Without a device (or without the `cuda` feature) the test passes and says
/// `skipped: no CUDA device (<reason>)` on stderr; `FUSED_REQUIRE_CUDA=1`
/// makes that a failure instead (for runs on a GPU machine).
pub(crate) fn backend_or_skip() -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            if !fused_cuda::CUDA_ENABLED {
                assert_eq!(e, CudaError::NotCompiled);
            }
            if std::env::var_os("FUSED_REQUIRE_CUDA").is_some_and(|v| v != "0") {
                panic!("FUSED_REQUIRE_CUDA is set, but: {e}");
            }
            let _ = writeln!(std::io::stderr(), "skipped: no CUDA device ({e})");
            None
        }
    }
}

pub(crate) use fused_testkit::Rng;

/// `rows × k` random weights quantized into `dtype` (row by row).
pub(crate) fn weights(rng: &mut Rng, dtype: DType, rows: usize, k: usize) -> Vec<u8> {
    let rb = dtype.row_bytes(k).unwrap();
    let mut out = vec![0u8; rows * rb];
    for r in 0..rows {
        let row = rng.vec_scaled(k, 1.0);
        fused_core::quant::quantize_row(dtype, &row, &mut out[r * rb..(r + 1) * rb]).unwrap();
    }
    out
}

/// `v` copied back to the host.
pub(crate) fn download(be: &CudaBackend, v: &DeviceVec) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    be.download(v, &mut out).unwrap();
    out
}

/// Random `m × k` weights of `dtype` ([`weights`]) uploaded to `be`.
pub(crate) fn upload_weights(
    be: &CudaBackend,
    rng: &mut Rng,
    dtype: DType,
    m: usize,
    k: usize,
) -> DeviceWeights {
    let bytes = weights(rng, dtype, m, k);
    be.upload_weights(&WeightMatrix::new(dtype, m, k, &bytes).unwrap())
        .unwrap()
}

/// Normalised mean squared error of `got` against `want`.
pub(crate) fn nmse(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let mut num = 0.0;
    let mut den = 0.0;
    for (&g, &w) in got.iter().zip(want) {
        assert!(g.is_finite(), "non-finite output {g} (want {w})");
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    if den == 0.0 { num } else { num / den }
}

/// `want` widened to f64.
pub(crate) fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Asserts bit equality, naming the first differing index.
pub(crate) fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{what}: index {i}: {g} vs {w}");
    }
}

/// `silu(v)·m + r`: the fixed chain of decode's gated FFN
/// (`src/fixed_epi.rs`).
pub(crate) fn silu_mul_add() -> Epilogue {
    Epilogue::NONE
        .then_act(Activation::Silu)
        .and_then(|e| e.then_mul())
        .and_then(|e| e.then_add())
        .unwrap()
}

/// SiLU, then · operand 0, then + operand 1, then + row bias (operand 2).
pub(crate) fn chain() -> Epilogue {
    Epilogue::NONE
        .then_act(Activation::Silu)
        .and_then(|e| e.then_mul())
        .and_then(|e| e.then_add())
        .and_then(|e| e.then_row_bias())
        .unwrap()
}

/// Random operands of [`chain`] for `m` rows and `n_cols` columns: the
/// multiplier, the addend, the row bias.
pub(crate) fn chain_operands(rng: &mut Rng, m: usize, n_cols: usize) -> [Vec<f32>; 3] {
    [
        rng.vec_scaled(m * n_cols, 1.0),
        rng.vec_scaled(m * n_cols, 1.0),
        rng.vec_scaled(m, 1.0),
    ]
}

thread_local! {
    /// The launch count [`launches`] counts from (per test thread).
    static LAUNCH_BASE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Launches (and copies) of `be` so far, through the core's counters.
fn launch_count(be: &CudaBackend) -> u64 {
    fused_core::exec::StepKernels::counters(be).kernel_calls
}

/// Counts launches from now on ([`launches`]).
pub(crate) fn reset_launches(be: &CudaBackend) {
    LAUNCH_BASE.with(|b| b.set(launch_count(be)));
}

/// Launches of `be` since the last [`reset_launches`] on this thread.
pub(crate) fn launches(be: &CudaBackend) -> u64 {
    launch_count(be) - LAUNCH_BASE.with(|b| b.get())
}

/// The backend's tuning with `knob` set.
pub(crate) fn tuned(be: &CudaBackend, knob: fused_cuda::Knob) -> fused_cuda::Tuning {
    be.tuning().with(knob).expect("a knob value with a kernel")
}

/// `StepKernels::gemv` on host slices.
pub(crate) fn gemv_host(
    be: &CudaBackend,
    job: &CoreGemvJob<'_, WeightMatrix<'_>>,
    y: &mut [f32],
) -> Result<(), CudaError> {
    fused_core::exec::StepKernels::gemv(be, job, y)
}

/// `StepKernels::fwht` on host slices.
pub(crate) fn fwht_host(
    be: &CudaBackend,
    desc: &fused_core::fwht::FwhtDesc,
    x: &[f32],
    signs: Option<&[f32]>,
    y: &mut [f32],
) -> Result<(), CudaError> {
    fused_core::exec::StepKernels::fwht(be, desc, x, signs, y)
}
