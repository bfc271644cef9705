//! RMS normalisation on CUDA: the kernel against `fused_core::norm` bit for
//! bit (the same reduction order, correctly rounded division and square
//! root), special values included, and the GEMV norm prologue shared by
//! q, k and v: one norm launch (the quantizer's norm variant in GGML's
//! mode), equal to the unfused plan bit for bit. Skipped without a device.

mod common;

use common::{Rng, backend_or_skip};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::PlanStats;
use fused_core::exec::StepKernels;
use fused_core::planner::{Plan, plan};
use fused_cuda::DevicePlan;
use fused_testkit::compare::assert_bits_eq;
use fused_testkit::layer::NormQkv;
use fused_testkit::suite::run_resident;

#[test]
fn kernel_equals_the_core_definition() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(41);
    for k in [1, 5, 31, 32, 33, 100, 576, 4096, 5003] {
        for cols in [1, 3, 9] {
            let mut x = rng.vec_scaled(k * cols, 40.0);
            if cols > 1 {
                // A zero column (s = inf: 0·inf is NaN, as on the host) and
                // one whose squares overflow (s = 0).
                x[..k].fill(0.0);
                x[k..2 * k].iter_mut().for_each(|v| *v *= 1e18);
            }
            let g = rng.vec_scaled(k, 2.0);
            for (gamma, eps) in [(None, 1e-5f32), (Some(&g[..]), 1e-6), (None, 0.0)] {
                let mut want = vec![0.0; k * cols];
                fused_core::norm::rms_norm(k, eps, &x, gamma, &mut want).unwrap();
                let mut got = vec![f32::NAN; k * cols];
                StepKernels::rms_norm(&be, k, eps, &x, gamma, &mut got).unwrap();
                let w = if gamma.is_some() { "weighted" } else { "plain" };
                assert_bits_eq(&got, &want, &format!("K={k} cols={cols} {w} eps={eps}"));
            }
        }
    }
    let mut y = vec![0.0; 10];
    let short = StepKernels::rms_norm(&be, 4, 1e-5, &[1.0; 10], None, &mut y);
    assert!(short.is_err(), "10 values are not whole columns of 4");
}

/// The norm-q/k/v graph of `dtype` weights (`k` values in, `m` rows each)
/// on random inputs, run once fused and once unfused in `mode`: each
/// output's bits compared, and both runs' counts returned (fused, unfused).
fn fused_against_unfused(
    be: &fused_cuda::CudaBackend,
    dtype: DType,
    (k, m): (usize, usize),
    seed: u64,
    mode: GemvMode,
) -> (PlanStats, PlanStats) {
    let mut rng = Rng::new(seed);
    let wb = common::weights(&mut rng, dtype, 3 * m, k);
    let (x, gamma) = (rng.vec_scaled(k, 3.0), rng.vec(k));
    let NormQkv {
        graph: g,
        mem,
        outs,
    } = NormQkv::new(dtype, (k, m), &wb, &x, &gamma).unwrap();
    let fused = plan(&g);
    assert_eq!(fused.prologue_nodes.len(), 2, "{fused:?}");
    let run = |p: &Plan| {
        let dp = DevicePlan::new(be, &g, p, mode, &mem.sizes()).unwrap();
        run_resident(dp, &mem).unwrap()
    };
    let (mf, sf) = run(&fused);
    let (mu, su) = run(&Plan::unfused(&g));
    for &o in &outs {
        let t = g.tensor(o).unwrap();
        let what = format!("{dtype} K={k} {mode:?} output {o}");
        assert_bits_eq(&mf.read(t).unwrap(), &mu.read(t).unwrap(), &what);
    }
    (sf, su)
}

/// q, k and v read one normed product: one prologue launch (its output
/// read by three GEMVs), in both activation modes and every Q8 layout,
/// equal to the unfused plan bit for bit.
#[test]
fn one_norm_feeds_q_k_and_v() {
    let Some(be) = backend_or_skip() else { return };
    for dtype in [DType::Q8_0, DType::Q4_1, DType::Q4_K, DType::F16] {
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            let (sf, su) = fused_against_unfused(&be, dtype, (512, 48), 5, mode);
            // One norm launch (in GGML's mode with quantized weights the
            // quantizer's norm variant) read by the three GEMVs (grouped
            // into one launch where the tuning groups them); unfused, the
            // norm, the mul and the quantizer are launches of their own.
            let quantized = mode == GemvMode::Ggml && dtype != DType::F16;
            assert_eq!(sf.quantizations, u64::from(quantized), "{dtype} {mode:?}");
            assert_eq!(
                su.launches - sf.launches,
                1 + u64::from(quantized),
                "{dtype} {mode:?} fused {sf:?} unfused {su:?}"
            );
        }
    }
}

/// The norm quantizer's scale passes the 32 partial sums from warp to warp
/// a segment of 512 values at a time: lengths of part of a segment, of
/// whole rounds of 8 segments and of several rounds with a partial last
/// one all give the unfused norm, mul and quantizer's bits, Q8_0 and Q8_K
/// activations (Q8_0 and Q4_K weights).
#[test]
fn the_norm_quantizer_equals_the_unfused_norm_at_every_length() {
    let Some(be) = backend_or_skip() else { return };
    for (dtype, lengths) in [
        (DType::Q8_0, &[32, 96, 576, 4096, 4128, 8192, 8224][..]),
        (DType::Q4_K, &[256, 768, 4096, 5120, 8448][..]),
    ] {
        for &k in lengths {
            let (sf, _) = fused_against_unfused(&be, dtype, (k, 16), k as u64, GemvMode::Ggml);
            assert_eq!(sf.quantizations, 1, "{dtype} K={k}: one norm quantizer");
        }
    }
}
