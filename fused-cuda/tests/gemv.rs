//! The GEMV and gated dual GEMV kernels against the core reference, on the
//! first CUDA device (skipped without one; see `common::backend_or_skip`).
//!
//! Tolerances (NMSE, against the core's `ActQuant::F32` reference on the same
//! dequantized weights and against the f64 reference): 1e-6 for every
//! format. The kernels compute the core's dequantized products regrouped per
//! 4-element chunk (codes as exact f32 values, then the block's scale
//! factors; see `kernels/gemv.cu`), so they differ from the reference in
//! rounding and summation order (fmaf per lane, a shuffle butterfly, the
//! block's warps in order) and in the element functions (CUDA's
//! expf/erff/tanhf, within 2 ulp); the largest NMSE seen is printed.

mod common;

use common::{CoreGemvJob, Rng, backend_or_skip, chain, chain_operands, nmse, weights, wide};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::reference::gemv::{gemm, gemm_f64, gemm_glu, gemm_glu_f64};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_cuda::{CudaBackend, GEMV_DTYPES};

const TOL: f64 = 1e-6;

/// K values for a format: whole blocks, odd counts of them, whole tiles of
/// the device layout plus a rest, and for the float formats a K that is not
/// a multiple of the 8-element vector.
fn ks(dtype: DType) -> Vec<usize> {
    let b = dtype.block_len();
    if b == 1 {
        vec![1, 37, 256, 2048 + 8, 2049, 8192 + 8]
    } else {
        // The last: more whole tiles (512 or 1024 elements) than a block's
        // warps take in one pass, then one block of the rest.
        vec![b, 3 * b, 2048 + b, 9216 + b]
    }
}

fn check_gemv(
    be: &CudaBackend,
    rng: &mut Rng,
    dtype: DType,
    m: usize,
    k: usize,
    n_cols: usize,
    worst: &mut f64,
) {
    let bytes = weights(rng, dtype, m, k);
    let w = WeightMatrix::new(dtype, m, k, &bytes).unwrap();
    let x = rng.vec_scaled(k * n_cols, 1.0);
    let [o0, o1, bias] = chain_operands(rng, m, n_cols);
    let ops: [&[f32]; 3] = [&o0, &o1, &bias];
    for epi in [Epilogue::NONE, chain()] {
        let bound = epi.bind(&ops, m, n_cols).unwrap();
        let mut want = vec![0.0f32; m * n_cols];
        gemm(&w, &x, n_cols, ActQuant::F32, &bound, &mut want).unwrap();
        let mut want64 = vec![0.0f64; m * n_cols];
        gemm_f64(&w, &x, n_cols, &bound, &mut want64).unwrap();
        let mut got = vec![f32::NAN; m * n_cols];
        common::gemv_host(
            be,
            &CoreGemvJob::new(&w, &x, n_cols).with_epilogue(epi, &ops),
            &mut got,
        )
        .unwrap();
        let e32 = nmse(&got, &wide(&want));
        let e64 = nmse(&got, &want64);
        *worst = worst.max(e32).max(e64);
        assert!(
            e32 <= TOL && e64 <= TOL,
            "{dtype} m={m} k={k} cols={n_cols} stages={}: nmse {e32:e} (f32 ref), {e64:e} (f64 ref)",
            epi.len()
        );
    }
}

#[test]
fn gemv_matches_the_reference_for_every_format_and_edge_shape() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(1);
    for dtype in GEMV_DTYPES {
        let mut worst = 0.0f64;
        for k in ks(dtype) {
            for m in [1, 37, 300] {
                for n_cols in [1, 3, 8] {
                    check_gemv(&be, &mut rng, dtype, m, k, n_cols, &mut worst);
                }
            }
        }
        // Every column count on one shape.
        let k = 2 * dtype.block_len().max(128);
        for n_cols in 1..=8 {
            check_gemv(&be, &mut rng, dtype, 65, k, n_cols, &mut worst);
        }
        eprintln!("gemv {dtype}: worst nmse {worst:e} (tolerance {TOL:e})");
    }
}

#[test]
fn gated_gemv_matches_the_reference() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(2);
    for dtype in GEMV_DTYPES {
        let mut worst = 0.0f64;
        for act in Activation::ALL {
            let (m, k) = (70, 4 * dtype.block_len().max(64));
            for n_cols in [1, 2, 8] {
                let gb = weights(&mut rng, dtype, m, k);
                let ub = weights(&mut rng, dtype, m, k);
                let g = WeightMatrix::new(dtype, m, k, &gb).unwrap();
                let u = WeightMatrix::new(dtype, m, k, &ub).unwrap();
                let w = GluWeights::new(g, u).unwrap();
                let x = rng.vec_scaled(k * n_cols, 1.0);
                let res = rng.vec_scaled(m * n_cols, 1.0);
                let epi = Epilogue::NONE.then_add().unwrap();
                let bound = epi.bind(&[&res], m, n_cols).unwrap();
                let mut want = vec![0.0f32; m * n_cols];
                gemm_glu(&w, &x, n_cols, ActQuant::F32, act, &bound, &mut want).unwrap();
                let mut want64 = vec![0.0f64; m * n_cols];
                gemm_glu_f64(&w, &x, n_cols, act, &bound, &mut want64).unwrap();
                let mut got = vec![f32::NAN; m * n_cols];
                common::gemv_host(
                    &be,
                    &CoreGemvJob::gated(w.gate(), w.up(), act, &x, n_cols)
                        .with_epilogue(epi, &[&res]),
                    &mut got,
                )
                .unwrap();
                let e32 = nmse(&got, &wide(&want));
                let e64 = nmse(&got, &want64);
                worst = worst.max(e32).max(e64);
                assert!(
                    e32 <= TOL && e64 <= TOL,
                    "glu {dtype} {act} cols={n_cols}: nmse {e32:e} / {e64:e}"
                );
            }
        }
        eprintln!("gemv_glu {dtype}: worst nmse {worst:e} (tolerance {TOL:e})");
    }
}
