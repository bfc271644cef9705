//! GEMV, gated GEMV and the element-wise kernels against the core's
//! reference (`ActQuant::F32`), and fused == unfused bit for bit.
//!
//! Tolerances (NMSE against the core's f32 reference):
//! - GEMV, every weight format (F32, F16, Q8_0, Q4_0, Q4_K): 1e-6. The shader
//!   computes the core's sum rearranged: per unit of 4 to 32 values
//!   `d·Σ q·x` (Q4_0: `d·Σ (q − 8)·x`; Q4_K: `d·sc·Σ q·x − dmin·m·Σ x`
//!   per sub-block; for 4-bit codes `Σ q·x = 256·Σ (0.5 + q/256)·x −
//!   128·Σ x`, NMSE about 1e-11 at K = 4096 against 1e-12 for the exact
//!   formats), partial sums per thread reduced over the workgroup,
//!   instead of one left-to-right sum of dequantized products: only
//!   rounding differs.
//! - Gated GEMV and activations: 1e-6. The shader's `exp` (Vulkan allows
//!   3 + 2·|x| ulp), its `erf` (Abramowitz–Stegun 7.1.26, |error| ≤ 1.5e-7)
//!   and `tanh` (through `exp`) differ from libm by a few ulp.
//! - add, mul, row bias: bit for bit (IEEE-rounded single operations).
//! - fused == unfused: bit for bit (same shader functions, `precise`).

mod common;

use common::{
    Sweep, assert_no_validation_messages, backend_or_skip, chain, data, first_bit_difference, nmse,
    operands, weights,
};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, Stage};
use fused_core::job::GemvJob;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
#[cfg(feature = "lab")]
use fused_vulkan::GemvShape;
use fused_vulkan::{MAX_COLS, Tuning, VulkanBackend, VulkanError};

const TOL: f64 = 1e-6;
const DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_K,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::IQ4_NL,
    DType::Q5_K,
    DType::Q6_K,
    DType::TQ2_0,
];

#[test]
fn gemv_matches_the_reference_for_every_format_and_column_count() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let m = 37;
    let mut sweep = Sweep::new(&b, 3);
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        // Not a power of two where the format allows it.
        let k = if dtype.block_len() == 256 { 768 } else { 320 };
        let wb = weights(dtype, m, k, 1);
        let w = WeightMatrix::new(dtype, m, k, &wb).unwrap();
        for n_cols in 1..=MAX_COLS {
            if !sweep.runs(i, n_cols) {
                continue;
            }
            let x = data(k * n_cols, 2 + n_cols as u64);
            let ops = operands(m, n_cols);
            let ops: Vec<&[f32]> = ops.iter().map(|v| &v[..]).collect();
            for e in [Epilogue::NONE, chain(Activation::Silu)] {
                let bound = e.bind(&ops, m, n_cols).unwrap();
                let mut want = vec![0.0; m * n_cols];
                gemm(&w, &x, n_cols, ActQuant::F32, &bound, &mut want).unwrap();
                let mut got = vec![f32::NAN; m * n_cols];
                b.gemv(
                    &GemvJob::new(&w, &x, n_cols).with_epilogue(e, &ops),
                    &mut got,
                )
                .unwrap();
                let err = nmse(&got, &want);
                assert!(
                    err <= TOL,
                    "{dtype:?} cols={n_cols} stages={}: nmse {err:e}",
                    e.len()
                );
            }
        }
    }
    sweep.report("formats x column counts");
    assert_no_validation_messages(&b);
}

#[test]
fn gated_gemv_matches_the_reference_for_every_activation() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (m, k) = (29, 256);
    let mut sweep = Sweep::new(&b, 3);
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        let gb = weights(dtype, m, k, 3);
        let ub = weights(dtype, m, k, 4);
        let w = GluWeights::new(
            WeightMatrix::new(dtype, m, k, &gb).unwrap(),
            WeightMatrix::new(dtype, m, k, &ub).unwrap(),
        )
        .unwrap();
        // The activation is a push constant: one pipeline serves them all.
        for (j, n_cols) in [1, 3, MAX_COLS].into_iter().enumerate() {
            if !sweep.runs(i, j) {
                continue;
            }
            for act in Activation::ALL {
                let x: Vec<f32> = data(k * n_cols, 5).iter().map(|v| v * 4.0).collect();
                let ops = operands(m, n_cols);
                let ops: Vec<&[f32]> = ops.iter().map(|v| &v[..]).collect();
                let e = chain(Activation::GeluTanh);
                let bound = e.bind(&ops, m, n_cols).unwrap();
                let mut want = vec![0.0; m * n_cols];
                gemm_glu(&w, &x, n_cols, ActQuant::F32, act, &bound, &mut want).unwrap();
                let mut got = vec![f32::NAN; m * n_cols];
                b.gemv(
                    &GemvJob::gated(w.gate(), w.up(), act, &x, n_cols).with_epilogue(e, &ops),
                    &mut got,
                )
                .unwrap();
                let err = nmse(&got, &want);
                assert!(err <= TOL, "{dtype:?} {act} cols={n_cols}: nmse {err:e}");
            }
        }
    }
    sweep.report("formats x column counts");
    assert_no_validation_messages(&b);
}

/// Every launch shape (reduction by subgroup or shared-memory tree, rows
/// per workgroup not dividing M, loop-trip tails) and the scalar F32/F16
/// path (K not a multiple of 4 or 8) match the reference, and the plain and
/// gated forms stay bit-identical to the unfused ones under each shape.
#[cfg(feature = "lab")]
#[test]
fn every_gemv_shape_matches_the_reference() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    let m = 23;
    let default = b.gemv_shape(DType::F16, ActQuant::F32, 1, false).unwrap();
    let mut shapes = Vec::new();
    // More output values (rows x columns) than threads in the last two.
    for (workgroup, rows, unroll, subgroup_reduce) in
        [(32, 3, 3, false), (16, 8, 4, true), (8, 2, 1, true)]
    {
        shapes.push(Some(GemvShape {
            workgroup,
            rows,
            unroll,
            subgroup_reduce: subgroup_reduce && default.subgroup_reduce,
            lanes: 1,
        }));
    }
    let cases = [
        (DType::F32, 37),
        (DType::F16, 42),
        (DType::F16, 1032),
        (DType::BF16, 42),
        (DType::BF16, 1032),
        (DType::Q8_0, 1056),
        (DType::Q4_0, 1056),
        (DType::Q4_K, 1280),
        (DType::Q5_0, 1056),
        (DType::Q6_K, 1280),
    ];
    let mut sweep = Sweep::new(&b, 3);
    for (i, shape) in shapes.into_iter().enumerate() {
        b.set_tuning(Tuning::default().with_gemv_shape(shape))
            .unwrap();
        for (j, (dtype, k)) in cases.into_iter().enumerate() {
            if !sweep.runs(i, j) {
                continue;
            }
            let wb = weights(dtype, m, k, 14);
            let ub = weights(dtype, m, k, 15);
            let w = WeightMatrix::new(dtype, m, k, &wb).unwrap();
            let u = WeightMatrix::new(dtype, m, k, &ub).unwrap();
            for n_cols in [1, 5] {
                let what = format!("{shape:?} {dtype:?} k={k} cols={n_cols}");
                let x = data(k * n_cols, 16);
                let ops = operands(m, n_cols);
                let ops: Vec<&[f32]> = ops.iter().map(|v| &v[..]).collect();
                let e = chain(Activation::Silu);
                let bound = e.bind(&ops, m, n_cols).unwrap();
                let mut want = vec![0.0; m * n_cols];
                gemm(&w, &x, n_cols, ActQuant::F32, &bound, &mut want).unwrap();
                let mut got = vec![f32::NAN; m * n_cols];
                b.gemv(
                    &GemvJob::new(&w, &x, n_cols).with_epilogue(e, &ops),
                    &mut got,
                )
                .unwrap();
                let err = nmse(&got, &want);
                assert!(err <= TOL, "{what}: nmse {err:e}");
                let mut plain = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&w, &x, n_cols), &mut plain).unwrap();
                let unfused = unfused_chain(&b, &e, &ops, plain.clone());
                assert_eq!(first_bit_difference(&got, &unfused), None, "{what}");
                let glu = GluWeights::new(w, u).unwrap();
                let mut fused = vec![0.0; m * n_cols];
                b.gemv(
                    &GemvJob::gated(glu.gate(), glu.up(), Activation::GeluErf, &x, n_cols)
                        .with_epilogue(e, &ops),
                    &mut fused,
                )
                .unwrap();
                let mut up = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&u, &x, n_cols), &mut up).unwrap();
                let mut gated = vec![0.0; m * n_cols];
                b.glu(Activation::GeluErf, &plain, &up, &mut gated).unwrap();
                let unfused = unfused_chain(&b, &e, &ops, gated);
                assert_eq!(first_bit_difference(&fused, &unfused), None, "glu {what}");
            }
        }
    }
    sweep.report("shapes x formats");
    // A shape the device cannot run is an error, and the setting stays.
    let too_big = GemvShape {
        workgroup: 3,
        ..default
    };
    let before = b.tuning();
    let too_big = Tuning::default().with_gemv_shape(Some(too_big));
    assert!(b.set_tuning(too_big).is_err());
    assert_eq!(b.tuning(), before);
    b.set_tuning(Tuning::default()).unwrap();
    let again = b.gemv_shape(DType::F16, ActQuant::F32, 1, false).unwrap();
    assert_eq!(again, default);
    assert_no_validation_messages(&b);
}

/// Q8_0 and Q4_0 read through 32-bit loads (devices without 16-bit storage
/// access) match the reference and, where the device has 16-bit access,
/// give the same bits as its 16-bit loads; rows of an odd number of blocks
/// start at every 2-byte alignment.
#[test]
fn quantized_gemv_without_16bit_loads_matches() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    let (m, k) = (23, 1056);
    for dtype in [DType::Q8_0, DType::Q4_0] {
        let gb = weights(dtype, m, k, 21);
        let ub = weights(dtype, m, k, 22);
        let w = WeightMatrix::new(dtype, m, k, &gb).unwrap();
        let u = WeightMatrix::new(dtype, m, k, &ub).unwrap();
        let glu = GluWeights::new(w, u).unwrap();
        for n_cols in [1, 3] {
            let what = format!("{dtype:?} cols={n_cols}");
            let x = data(k * n_cols, 23);
            let mut want = vec![0.0; m * n_cols];
            let none = Epilogue::NONE.bind(&[], m, n_cols).unwrap();
            gemm(&w, &x, n_cols, ActQuant::F32, &none, &mut want).unwrap();
            let mut got = [vec![f32::NAN; m * n_cols], vec![f32::NAN; m * n_cols]];
            let mut gated = [vec![f32::NAN; m * n_cols], vec![f32::NAN; m * n_cols]];
            for (i, on) in [false, true].into_iter().enumerate() {
                b.set_tuning(Tuning::default().with_16bit_loads(on))
                    .unwrap();
                b.gemv(&GemvJob::new(&w, &x, n_cols), &mut got[i]).unwrap();
                b.gemv(
                    &GemvJob::gated(glu.gate(), glu.up(), Activation::Silu, &x, n_cols),
                    &mut gated[i],
                )
                .unwrap();
            }
            let err = nmse(&got[0], &want);
            assert!(err <= TOL, "{what}: nmse {err:e}");
            assert_eq!(first_bit_difference(&got[0], &got[1]), None, "{what}");
            assert_eq!(
                first_bit_difference(&gated[0], &gated[1]),
                None,
                "glu {what}"
            );
        }
    }
    assert_no_validation_messages(&b);
}

/// Applies `e` stage by stage with the unfused kernels.
fn unfused_chain(b: &VulkanBackend, e: &Epilogue, ops: &[&[f32]], mut v: Vec<f32>) -> Vec<f32> {
    for st in e.stages() {
        let mut out = vec![0.0; v.len()];
        match *st {
            Stage::Act(a) => b.unary(a, &v, &mut out).unwrap(),
            Stage::Add { slot } => b.add(&v, ops[slot as usize], &mut out).unwrap(),
            Stage::Mul { slot } => b.mul(&v, ops[slot as usize], &mut out).unwrap(),
            Stage::AddRowBias { slot } => b.add_row_bias(&v, ops[slot as usize], &mut out).unwrap(),
        }
        v = out;
    }
    v
}

#[test]
fn fused_equals_unfused_bit_for_bit() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (m, k) = (41, 256);
    for dtype in [DType::F16, DType::Q4_0, DType::Q4_K] {
        let gb = weights(dtype, m, k, 6);
        let ub = weights(dtype, m, k, 7);
        let wg = WeightMatrix::new(dtype, m, k, &gb).unwrap();
        let wu = WeightMatrix::new(dtype, m, k, &ub).unwrap();
        for n_cols in [1, 4] {
            let x: Vec<f32> = data(k * n_cols, 8).iter().map(|v| v * 3.0).collect();
            let ops = operands(m, n_cols);
            let ops: Vec<&[f32]> = ops.iter().map(|v| &v[..]).collect();
            for act in Activation::ALL {
                let e = chain(act);
                let mut fused = vec![0.0; m * n_cols];
                b.gemv(
                    &GemvJob::new(&wg, &x, n_cols).with_epilogue(e, &ops),
                    &mut fused,
                )
                .unwrap();
                let mut acc = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&wg, &x, n_cols), &mut acc).unwrap();
                let unfused = unfused_chain(&b, &e, &ops, acc);
                assert_eq!(
                    first_bit_difference(&fused, &unfused),
                    None,
                    "gemv {dtype:?} {act} cols={n_cols}"
                );

                let glu = GluWeights::new(wg, wu).unwrap();
                let mut fused = vec![0.0; m * n_cols];
                b.gemv(
                    &GemvJob::gated(glu.gate(), glu.up(), act, &x, n_cols).with_epilogue(e, &ops),
                    &mut fused,
                )
                .unwrap();
                let mut gate = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&wg, &x, n_cols), &mut gate).unwrap();
                let mut up = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&wu, &x, n_cols), &mut up).unwrap();
                let mut gated = vec![0.0; m * n_cols];
                b.glu(act, &gate, &up, &mut gated).unwrap();
                let unfused = unfused_chain(&b, &e, &ops, gated);
                assert_eq!(
                    first_bit_difference(&fused, &unfused),
                    None,
                    "gemv_glu {dtype:?} {act} cols={n_cols}"
                );
            }
        }
    }
    assert_no_validation_messages(&b);
}

#[test]
fn element_wise_kernels_match_the_core() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let n = 3000;
    let mut a: Vec<f32> = data(n, 21).iter().map(|v| v * 12.0).collect();
    a[..6].copy_from_slice(&[0.0, -0.0, 1e-30, -1e-30, 40.0, -40.0]);
    let c = data(n, 22);
    for act in Activation::ALL {
        let mut got = vec![0.0; n];
        b.unary(act, &a, &mut got).unwrap();
        let want: Vec<f32> = a.iter().map(|&v| act.apply(v)).collect();
        let err = nmse(&got, &want);
        assert!(err <= TOL, "{act}: nmse {err:e}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{act} at {}: {g} vs {w}",
                a[i]
            );
        }
        b.glu(act, &a, &c, &mut got).unwrap();
        let want: Vec<f32> = a
            .iter()
            .zip(&c)
            .map(|(&g, &u)| fused_core::element::glu(act, g, u))
            .collect();
        assert!(nmse(&got, &want) <= TOL, "glu {act}");
    }
    let mut got = vec![0.0; n];
    b.add(&a, &c, &mut got).unwrap();
    let want: Vec<f32> = a.iter().zip(&c).map(|(x, y)| x + y).collect();
    assert_eq!(first_bit_difference(&got, &want), None, "add");
    b.mul(&a, &c, &mut got).unwrap();
    let want: Vec<f32> = a.iter().zip(&c).map(|(x, y)| x * y).collect();
    assert_eq!(first_bit_difference(&got, &want), None, "mul");
    let bias = data(30, 23);
    b.add_row_bias(&a, &bias, &mut got).unwrap();
    let want: Vec<f32> = a
        .iter()
        .enumerate()
        .map(|(i, x)| x + bias[i % 30])
        .collect();
    assert_eq!(first_bit_difference(&got, &want), None, "row bias");
    assert_no_validation_messages(&b);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (m, k) = (4, 64);
    let wb = weights(DType::Q8_0, m, k, 1);
    let w = WeightMatrix::new(DType::Q8_0, m, k, &wb).unwrap();
    let x = data(k * 9, 1);
    let mut y = vec![0.0; m * 9];
    let core_err = |r: Result<(), VulkanError>| matches!(r, Err(VulkanError::Core(_)));
    assert!(
        core_err(b.gemv(&GemvJob::new(&w, &x, 9), &mut y)),
        "9 columns"
    );
    assert!(core_err(
        b.gemv(&GemvJob::new(&w, &x[..k - 1], 1), &mut y[..m])
    ));
    assert!(core_err(
        b.gemv(&GemvJob::new(&w, &x[..k], 1), &mut y[..m - 1])
    ));
    let e = chain(Activation::Relu);
    assert!(
        core_err(b.gemv(
            &GemvJob::new(&w, &x[..k], 1).with_epilogue(e, &[]),
            &mut y[..m]
        )),
        "operands missing"
    );
    let short = [0.0f32; 3];
    assert!(core_err(b.gemv(
        &GemvJob::new(&w, &x[..k], 1).with_epilogue(e, &[&short, &short, &short]),
        &mut y[..m]
    )));
    // Q4_1 weights have shaders for f32 activations and GGML's Q8_1 mode:
    // Q8_0 activations are refused.
    let kb = weights(DType::Q4_1, 1, 256, 1);
    let wk = WeightMatrix::new(DType::Q4_1, 1, 256, &kb).unwrap();
    assert!(core_err(b.gemv(
        &GemvJob::new(&wk, &data(256, 1), 1).with_mode(ActQuant::Q8_0),
        &mut y[..1]
    )));
    let mut out = vec![0.0; 5];
    assert!(core_err(b.add(&[0.0; 5], &[0.0; 4], &mut out)));
    assert!(core_err(b.add_row_bias(&[0.0; 5], &[0.0; 2], &mut out)));
    assert!(core_err(b.unary(Activation::Silu, &[0.0; 4], &mut out)));
    assert_no_validation_messages(&b);
}
