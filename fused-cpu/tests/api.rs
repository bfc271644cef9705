//! The public surface a new user meets: typed errors instead of panics or
//! aborts, f32 values into and out of executor memory, and the unfused
//! element-wise ops giving the fused epilogue's bits on every ISA.

#![cfg(feature = "std")]

use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};
use fused_cpu::acts::{column, prepared_bytes, quantize_columns};
use fused_cpu::exec::CpuMemory;
use fused_cpu::gemv::{RowKernels, gemv_glu_rows, gemv_rows};
use fused_cpu::{CpuBackend, Isa, elementwise};

mod common;
use common::{Rng, bits, glu_pair, weights};

/// Absurd thread counts fail before any thread is started.
#[test]
fn thread_counts_out_of_range_are_typed_errors() {
    for threads in [0, 1025, 100_000, usize::MAX] {
        let e = CpuBackend::new(threads).unwrap_err();
        assert_eq!(
            e,
            Error::OutOfRange {
                what: "thread count",
                value: threads,
                min: 1,
                max: 1024
            }
        );
        assert_eq!(
            e.to_string(),
            format!("thread count {threads} is outside 1..=1024")
        );
    }
    assert_eq!(CpuBackend::new(1).unwrap().threads(), 1);
}

/// A column index past the last column, a `k` that does not divide the
/// activations and a scratch buffer of the wrong size are errors.
#[test]
fn bad_columns_are_typed_errors() {
    let (k, n) = (64, 3);
    let x = Rng::new(5).vec(k * n);
    assert!(column(ActQuant::F32, &x, &[], k, n - 1).is_ok());
    let past = column(ActQuant::F32, &x, &[], k, n).unwrap_err();
    assert_eq!(past.to_string(), "activation column 3 is outside 0..=2");
    let none = column(ActQuant::F32, &[], &[], k, 0).unwrap_err();
    assert_eq!(
        none.to_string(),
        "activation column 0: there is none (the range is empty)"
    );
    assert!(column(ActQuant::F32, &x, &[], k, usize::MAX).is_err());
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        let kq = 256;
        let x = Rng::new(6).vec(kq * n);
        let mut scratch = vec![0u8; n * prepared_bytes(mode, kq).unwrap()];
        quantize_columns(mode, &x, kq, &mut scratch).unwrap();
        assert!(column(mode, &x, &scratch, kq, n - 1).is_ok(), "{mode:?}");
        assert!(column(mode, &x, &scratch, kq, n).is_err(), "{mode:?}");
        assert!(column(mode, &x, &scratch[1..], kq, 0).is_err(), "{mode:?}");
        assert!(column(mode, &x, &scratch, 0, 0).is_err(), "{mode:?}");
        assert!(column(mode, &x[1..], &scratch, kq, 0).is_err(), "{mode:?}");
    }
}

/// An epilogue bound for another output shape is an error, not a panic.
#[test]
fn gemv_rows_rejects_an_epilogue_of_another_shape() {
    let (m, k) = (8, 32);
    let w = weights(DType::Q8_0, m, k, &mut Rng::new(9));
    let w = WeightMatrix::new(DType::Q8_0, m, k, &w).unwrap();
    let x = Rng::new(10).vec(k);
    let cols = [column(ActQuant::F32, &x, &[], k, 0).unwrap()];
    let kernels = RowKernels::new(Isa::detect(), DType::Q8_0, ActQuant::F32);
    let short = Epilogue::NONE.bind(&[], m - 1, 1).unwrap();
    let r = gemv_rows(kernels, &w, &cols, 0..m, &short, |_, _, _| {});
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })));
    let two = Epilogue::NONE.bind(&[], m, 2).unwrap();
    assert!(gemv_rows(kernels, &w, &cols, 0..m, &two, |_, _, _| {}).is_err());
}

/// `write_f32` then `read_f32` gives the values back (F32 exactly, F16
/// and BF16 as their rounding), strided tensors included; bad input is an
/// error that leaves the memory unchanged.
#[test]
fn cpu_memory_takes_f32_values() {
    let mut mem = CpuMemory::new(&[256, 64]);
    let vals: Vec<f32> = Rng::new(11).vec(12);
    let t = TensorDesc::contiguous(DType::F32, [4, 3, 1, 1], BufferId(0), 16).unwrap();
    mem.write_f32(&t, &vals).unwrap();
    assert_eq!(bits(&mem.read_f32(&t).unwrap()), bits(&vals));
    // Every other row of a 6-row F16 matrix.
    let s =
        TensorDesc::strided(DType::F16, [4, 3, 1, 1], [2, 16, 48, 48], BufferId(0), 80).unwrap();
    mem.write_f32(&s, &vals).unwrap();
    let want: Vec<f32> = vals
        .iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect();
    assert_eq!(bits(&mem.read_f32(&s).unwrap()), bits(&want));
    let b = TensorDesc::contiguous(DType::BF16, [12, 1, 1, 1], BufferId(1), 0).unwrap();
    mem.write_f32(&b, &vals).unwrap();
    let want: Vec<f32> = vals
        .iter()
        .map(|&v| half::bf16::from_f32(v).to_f32())
        .collect();
    assert_eq!(bits(&mem.read_f32(&b).unwrap()), bits(&want));

    let before = mem.clone();
    assert!(mem.write_f32(&t, &vals[1..]).is_err());
    let q = TensorDesc::contiguous(DType::Q8_0, [32, 1, 1, 1], BufferId(0), 0).unwrap();
    assert!(matches!(
        mem.write_f32(&q, &[0.0; 32]),
        Err(Error::UnsupportedDType { .. })
    ));
    let outside = TensorDesc::contiguous(DType::F32, [16, 2, 1, 1], BufferId(1), 0).unwrap();
    assert!(mem.write_f32(&outside, &[0.0; 32]).is_err());
    let missing = TensorDesc::contiguous(DType::F32, [4, 1, 1, 1], BufferId(2), 0).unwrap();
    assert!(mem.write_f32(&missing, &[0.0; 4]).is_err());
    assert_eq!(mem, before);
}

/// On every ISA: `gemv_rows` with an activation (and a GLU) in its
/// epilogue equals the plain GEMV followed by `elementwise::unary` (and
/// `elementwise::glu`) given the same ISA, bit for bit.
#[test]
fn elementwise_gives_the_fused_bits_of_its_isa() {
    let (m, k) = (37, 256);
    let mut rng = Rng::new(12);
    let x: Vec<f32> = rng.vec(k).iter().map(|v| v * 8.0).collect();
    for dtype in [DType::Q4_0, DType::F16] {
        let w = weights(dtype, m, k, &mut rng);
        let w = WeightMatrix::new(dtype, m, k, &w).unwrap();
        let (wg, wu) = (
            weights(dtype, m, k, &mut rng),
            weights(dtype, m, k, &mut rng),
        );
        let pair = glu_pair(dtype, m, k, &wg, &wu);
        let mode = ActQuant::ggml(dtype);
        let mut scratch = vec![0u8; prepared_bytes(mode, k).unwrap()];
        quantize_columns(mode, &x, k, &mut scratch).unwrap();
        let cols = [column(mode, &x, &scratch, k, 0).unwrap()];
        let none = Epilogue::NONE.bind(&[], m, 1).unwrap();
        for isa in Isa::available() {
            let kernels = RowKernels::new(isa, dtype, mode);
            let run = |epi: &fused_core::epilogue::BoundEpilogue<'_>| {
                let mut y = vec![f32::NAN; m];
                gemv_rows(kernels, &w, &cols, 0..m, epi, |r, _, v| y[r] = v).unwrap();
                y
            };
            let acc = run(&none);
            for act in [
                Activation::Silu,
                Activation::Sigmoid,
                Activation::GeluTanh,
                Activation::GeluErf,
                Activation::Relu,
            ] {
                let epi = Epilogue::NONE.then_act(act).unwrap();
                let fused = run(&epi.bind(&[], m, 1).unwrap());
                let mut unfused = vec![0.0; m];
                elementwise::unary(isa, act, &acc, &mut unfused).unwrap();
                assert_eq!(bits(&fused), bits(&unfused), "{isa} {dtype} {act:?}");
            }
            // The gated form: act(W_g·x) ⊙ (W_u·x).
            let mut fused = vec![f32::NAN; m];
            gemv_glu_rows(
                kernels,
                &pair,
                Activation::Silu,
                &cols,
                0..m,
                &none,
                |r, _, v| fused[r] = v,
            )
            .unwrap();
            let (mut g, mut u) = (vec![0.0; m], vec![0.0; m]);
            gemv_rows(kernels, pair.gate(), &cols, 0..m, &none, |r, _, v| g[r] = v).unwrap();
            gemv_rows(kernels, pair.up(), &cols, 0..m, &none, |r, _, v| u[r] = v).unwrap();
            let mut unfused = vec![0.0; m];
            elementwise::glu(isa, Activation::Silu, &g, &u, &mut unfused).unwrap();
            assert_eq!(bits(&fused), bits(&unfused), "{isa} {dtype} GLU");
        }
    }
}

/// K = 0: every output is the epilogue of the empty sum, as in the core's
/// reference, in f32 and in GGML's quantized modes.
#[test]
fn an_empty_inner_dimension_gives_the_reference_zeros() {
    use fused_core::job::GemvJob;
    let be = CpuBackend::new(2).unwrap();
    let x: [f32; 0] = [];
    for (dtype, mode) in [
        (DType::F32, ActQuant::F32),
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q4_K, ActQuant::Q8_K),
    ] {
        let w = WeightMatrix::new(dtype, 4, 0, &[]).unwrap();
        for n_cols in [1, 3] {
            let job = GemvJob::new(&w, &x, n_cols).with_mode(mode);
            let mut want = vec![1.0f32; 4 * n_cols];
            fused_core::reference::gemv::gemv_job(&job, &mut want).unwrap();
            let mut got = vec![f32::NAN; 4 * n_cols];
            be.gemv(&job, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "{dtype} {mode:?} {n_cols}");
            assert!(want.iter().all(|&v| v == 0.0));
        }
    }
}
