//! The scalar (no_std) paths of the CPU backend, small enough for Miri:
//! tiled GEMV / GLU with epilogue vs the core reference, element-wise
//! fallback, FWHT rows. Built with or without `std`.

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::reference::gemv::{GluWeights, gemm, gemm_glu};
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_cpu::acts::column;
use fused_cpu::gemv::{gemv_glu_rows, gemv_rows};
use fused_cpu::kernels::{RowDot, scalar};

mod common;
use common::{prepare_columns, quantized, vals};

#[test]
fn scalar_gemv_equals_reference_bit_for_bit() {
    for dtype in [DType::Q4_0, DType::Q4_1, DType::F16, DType::Q4_K] {
        let k = dtype.block_len().max(64);
        let (m, n) = (if cfg!(miri) { 5 } else { 19 }, 2);
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
        let scratch = prepare_columns(mode, &x, k, n);
        let cols: Vec<_> = (0..n).map(|c| column(mode, &x, &scratch, k, c)).collect();
        let mut y = vec![0.0f32; m * n];
        gemv_rows(
            (scalar::row_dot as RowDot).into(),
            &wm,
            &cols,
            0..m,
            &bound,
            |r, c, v| y[c * m + r] = v,
        )
        .unwrap();
        let mut want = vec![0.0f32; m * n];
        gemm(&wm, &x, n, mode, &bound, &mut want).unwrap();
        assert_eq!(y, want, "{dtype}");

        let pair = GluWeights::new(wm, wm).unwrap();
        gemv_glu_rows(
            (scalar::row_dot as RowDot).into(),
            &pair,
            Activation::Silu,
            &cols,
            0..m,
            &bound,
            |r, c, v| y[c * m + r] = v,
        )
        .unwrap();
        gemm_glu(&pair, &x, n, mode, Activation::Silu, &bound, &mut want).unwrap();
        assert_eq!(y, want, "{dtype} glu");
    }
}

#[test]
fn elementwise_and_fwht_rows() {
    let a = vals(40, 1);
    let b = vals(40, 2);
    let mut o = vec![0.0; 40];
    fused_cpu::elementwise::glu(Activation::Sigmoid, &a, &b, &mut o).unwrap();
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
