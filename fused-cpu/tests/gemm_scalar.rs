//! The scalar GEMM path (two or more columns through `gemv_rows` /
//! `gemv_glu_rows` with the scalar kernels): the core reference bit for bit
//! in f32 mode for every weight format. Small enough for Miri; built with or
//! without `std` (`cargo +nightly miri test -p fused-cpu
//! --no-default-features --test gemm_scalar`).

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::reference::gemv::{GluWeights, gemm, gemm_glu};
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_cpu::Isa;
use fused_cpu::acts::column;
use fused_cpu::gemv::{RowKernels, gemv_glu_rows, gemv_rows};

mod common;
use common::{WEIGHT_FORMATS, bits, quantized, vals};

/// Small enough for Miri: the scalar GEMM path (f32 mode, every format) is
/// the reference bit for bit, plain and GLU, through `gemv_rows`.
#[test]
fn scalar_gemm_equals_reference_bit_for_bit() {
    let formats: &[DType] = if cfg!(miri) {
        &[DType::F16, DType::Q4_0, DType::Q4_K]
    } else {
        &WEIGHT_FORMATS
    };
    for &dtype in formats {
        let k = if dtype.block_len() == 1 {
            19
        } else {
            dtype.block_len()
        };
        let (m, n) = (if cfg!(miri) { 5 } else { 11 }, 3);
        let w = quantized(dtype, m, k, |r| vals(k, r as u32));
        let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
        let x = vals(k * n, 99);
        let res = vals(m * n, 7);
        let bound = Epilogue::NONE
            .then_act(Activation::Silu)
            .and_then(|e| e.then_add())
            .unwrap()
            .bind(&[&res], m, n)
            .unwrap();
        let mode = ActQuant::F32;
        let kernels = RowKernels::new(Isa::Scalar, dtype, mode);
        assert!(kernels.gemm.is_some());
        let cols: Vec<_> = (0..n).map(|c| column(mode, &x, &[], k, c)).collect();
        let mut y = vec![0.0f32; m * n];
        gemv_rows(kernels, &wm, &cols, 0..m, &bound, |r, c, v| {
            y[c * m + r] = v
        })
        .unwrap();
        let mut want = vec![0.0f32; m * n];
        gemm(&wm, &x, n, mode, &bound, &mut want).unwrap();
        assert_eq!(bits(&y), bits(&want), "{dtype}");
        let pair = GluWeights::new(wm, wm).unwrap();
        gemv_glu_rows(
            kernels,
            &pair,
            Activation::Silu,
            &cols,
            0..m,
            &bound,
            |r, c, v| y[c * m + r] = v,
        )
        .unwrap();
        gemm_glu(&pair, &x, n, mode, Activation::Silu, &bound, &mut want).unwrap();
        assert_eq!(bits(&y), bits(&want), "{dtype} glu");
    }
}
