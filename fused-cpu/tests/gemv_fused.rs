//! The CPU backend against the core reference, and fused vs unfused on this
//! backend, for every weight format, epilogue, ISA and thread count.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::job::GemvJob;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::WeightMatrix;
use fused_cpu::{CpuBackend, Isa};

mod common;
use common::backend::{assert_every_chain_fuses, glu_add_fused_and_unfused};
use common::{HOT_FORMATS, Rng, WEIGHT_FORMATS, bits, glu_pair, modes, nmse, tolerance, weights};

#[test]
fn gemv_matches_reference_and_fused_matches_unfused() {
    let mut rng = Rng::new(0x1234_5678);
    for dtype in WEIGHT_FORMATS {
        let k = if dtype.block_len() == 256 { 512 } else { 96 };
        for &(m, n_cols) in &[(1usize, 1usize), (37, 1), (63, 3)] {
            let w = weights(dtype, m, k, &mut rng);
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            let x = rng.vec(k * n_cols);
            let res = rng.vec(m * n_cols);
            let mul = rng.vec(m * n_cols);
            let bias = rng.vec(m);
            for mode in modes(dtype) {
                // Reference, no epilogue.
                let none = Epilogue::NONE.bind(&[], m, n_cols).unwrap();
                let mut want = vec![0.0f32; m * n_cols];
                gemm(&wm, &x, n_cols, mode, &none, &mut want).unwrap();
                for isa in Isa::available() {
                    for threads in [1, 2, 3] {
                        let be = CpuBackend::with_isa(isa, threads).unwrap();
                        let mut y = vec![0.0f32; m * n_cols];
                        be.gemv(
                            &GemvJob::new(&wm, &x, n_cols)
                                .with_mode(mode)
                                .with_bound(&none),
                            &mut y,
                        )
                        .unwrap();
                        let e = nmse(&y, &want);
                        assert!(
                            e <= tolerance(isa),
                            "{dtype} {mode:?} {isa} t{threads} {m}x{k}x{n_cols}: NMSE {e:e}"
                        );
                        assert_every_chain_fuses(
                            &be,
                            [&mul, &res, &bias],
                            m,
                            n_cols,
                            |epi, out| {
                                be.gemv(
                                    &GemvJob::new(&wm, &x, n_cols)
                                        .with_mode(mode)
                                        .with_bound(epi),
                                    out,
                                )
                                .unwrap()
                            },
                            &format!("{dtype} {mode:?} {isa} t{threads}"),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn glu_fused_matches_unfused_and_reference() {
    let mut rng = Rng::new(0xabc);
    for dtype in HOT_FORMATS {
        let k = if dtype.block_len() == 256 { 256 } else { 128 };
        let (m, n_cols) = (45, 2);
        let (wg, wu) = (
            weights(dtype, m, k, &mut rng),
            weights(dtype, m, k, &mut rng),
        );
        let pair = glu_pair(dtype, m, k, &wg, &wu);
        let x = rng.vec(k * n_cols);
        let res = rng.vec(m * n_cols);
        let mode = ActQuant::ggml(dtype);
        let epi = Epilogue::NONE.then_add().unwrap();
        let bound = epi.bind(&[&res], m, n_cols).unwrap();
        let mut want = vec![0.0f32; m * n_cols];
        gemm_glu(&pair, &x, n_cols, mode, Activation::Silu, &bound, &mut want).unwrap();
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let be = CpuBackend::with_isa(isa, threads).unwrap();
                let (fused, unfused) =
                    glu_add_fused_and_unfused(&be, &pair, Activation::Silu, &x, n_cols, mode, &res);
                assert!(nmse(&fused, &want) <= tolerance(isa), "{dtype} {isa}");
                assert_eq!(bits(&fused), bits(&unfused), "{dtype} {isa} t{threads}");
            }
        }
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let be = CpuBackend::new(2).unwrap();
    let w = vec![0u8; 18 * 4];
    let wm = WeightMatrix::new(DType::Q4_0, 4, 32, &w).unwrap();
    let none = Epilogue::NONE.bind(&[], 4, 1).unwrap();
    let mut y = vec![0.0; 4];
    assert!(
        be.gemv(
            &GemvJob::new(&wm, &[0.0; 31], 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&none),
            &mut y
        )
        .is_err()
    );
    assert!(
        be.gemv(
            &GemvJob::new(&wm, &[0.0; 32], 1)
                .with_mode(ActQuant::Q8_K)
                .with_bound(&none),
            &mut y
        )
        .is_err()
    );
    assert!(
        be.gemv(
            &GemvJob::new(&wm, &[0.0; 32], 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&none),
            &mut y[..3]
        )
        .is_err()
    );
    // An epilogue bound for another output: its operand has the other
    // output's length, which the job's own binding refuses.
    let r = [0.5f32; 8];
    let other = Epilogue::NONE
        .then_add()
        .unwrap()
        .bind(&[&r], 4, 2)
        .unwrap();
    assert!(
        be.gemv(
            &GemvJob::new(&wm, &[0.0; 32], 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&other),
            &mut y
        )
        .is_err()
    );
    assert!(CpuBackend::new(0).is_err());
    assert!(be.add(&[1.0; 3], &[1.0; 4], &mut [0.0; 3]).is_err());
}
