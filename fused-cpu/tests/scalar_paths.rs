//! The scalar (no_std) paths of the CPU backend, small enough for Miri:
//! tiled GEMV / GLU with epilogue vs the core reference, element-wise
//! fallback, FWHT rows. Built with or without `std`.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::weights::WeightMatrix;
use fused_cpu::Isa;
use fused_cpu::gemv::RowKernels;

mod common;
use common::{assert_rows_equal_reference, quantized, vals};

#[test]
fn scalar_gemv_equals_reference_bit_for_bit() {
    // One column goes through the row-dot kernels; two through them too
    // for the quantized formats (the scalar ISA has no int GEMM kernel) and
    // through the scalar GEMM driver for F16 (f32 activations).
    for dtype in [DType::Q4_0, DType::Q4_1, DType::F16, DType::Q4_K] {
        for n in [1, 2] {
            let k = dtype.block_len().max(64);
            let m = if cfg!(miri) { 5 } else { 19 };
            let w = quantized(dtype, m, k, |r| vals(k, r as u32));
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            let x = vals(k * n, 99);
            let res = vals(m * n, 5);
            let epi = Epilogue::NONE
                .then_act(Activation::GeluTanh)
                .and_then(|e| e.then_add())
                .unwrap();
            let bound = epi.bind(&[&res], m, n).unwrap();
            let mode = ActQuant::ggml(dtype);
            let kernels = RowKernels::new(Isa::Scalar, dtype, mode);
            assert_rows_equal_reference(kernels, wm, &x, n, mode, &bound);
        }
    }
}

#[test]
fn elementwise_and_fwht_rows() {
    let a = vals(40, 1);
    let b = vals(40, 2);
    let mut o = vec![0.0; 40];
    fused_cpu::elementwise::glu(Isa::Scalar, Activation::Sigmoid, &a, &b, &mut o).unwrap();
    for i in 0..40 {
        assert_eq!(o[i], Activation::Sigmoid.apply(a[i]) * b[i]);
    }
    assert!(fused_cpu::elementwise::add(&a, &b[..39], &mut o).is_err());
    let d = FwhtDesc::new(8).unwrap().with_signs(16).unwrap();
    let s = vals(16, 3);
    let mut y = vec![0.0; 40];
    fused_cpu::fwht::fwht_rows(&d, &a, Some(&s), 0, &mut y).unwrap();
    let mut want = vec![0.0; 40];
    fused_core::fwht::fwht(&d, &a, Some(&s), &mut want).unwrap();
    assert_eq!(y, want);
}
