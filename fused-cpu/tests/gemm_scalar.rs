//! The scalar GEMM path (two or more columns through `gemv_rows` /
//! `gemv_glu_rows` with the scalar kernels): the core reference bit for bit
//! in f32 mode for every weight format. Small enough for Miri; built with or
//! without `std` (`cargo +nightly miri test -p fused-cpu
//! --no-default-features --test gemm_scalar`).

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::weights::WeightMatrix;
use fused_cpu::Isa;
use fused_cpu::gemv::RowKernels;

mod common;
use common::{WEIGHT_FORMATS, assert_rows_equal_reference, quantized, vals};

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
        #[cfg(feature = "lab")]
        assert!(kernels.gemm().is_some());
        assert_rows_equal_reference(kernels, wm, &x, n, mode, &bound);
    }
}
