//! Bad input gives typed errors before anything runs (needs a device to get
//! a backend; skipped without one).

mod common;

use common::{CoreGemvJob, Rng, backend_or_skip, weights};
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::Unsupported;
use fused_core::fwht::FwhtDesc;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};
use fused_cuda::{CudaError, GemvJob};

fn core_err<T: std::fmt::Debug>(r: Result<T, CudaError>) -> Error {
    match r {
        Err(CudaError::Core(e)) => e,
        other => panic!("expected a core error, got {other:?}"),
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(8);
    let (m, k) = (4, 64);
    let bytes = weights(&mut rng, DType::Q4_0, m, k);
    let w = WeightMatrix::new(DType::Q4_0, m, k, &bytes).unwrap();
    let x = rng.vec_scaled(k, 1.0);
    let mut y = vec![0.0; m];

    // Unsupported weight format (Q8_1 is an activation format).
    let b5 = weights(&mut rng, DType::Q8_1, m, k);
    let w5 = WeightMatrix::new(DType::Q8_1, m, k, &b5).unwrap();
    assert!(matches!(
        core_err(be.upload_weights(&w5)),
        Error::UnsupportedDType { .. }
    ));
    // Short activations, short output.
    assert!(matches!(
        core_err(common::gemv_host(
            &be,
            &CoreGemvJob::new(&w, &x[1..], 1),
            &mut y
        )),
        Error::LengthMismatch { .. }
    ));
    assert!(matches!(
        core_err(common::gemv_host(
            &be,
            &CoreGemvJob::new(&w, &x, 1),
            &mut y[1..]
        )),
        Error::LengthMismatch { .. }
    ));
    // Too many columns: refused as unsupported, naming the limit.
    let x9 = rng.vec_scaled(9 * k, 1.0);
    let mut y9 = vec![0.0; 9 * m];
    assert!(matches!(
        core_err(common::gemv_host(
            &be,
            &CoreGemvJob::new(&w, &x9, 9),
            &mut y9
        )),
        Error::Unsupported(Unsupported::Columns {
            max: fused_cuda::MAX_COLS,
            actual: 9
        })
    ));
    // Missing and short epilogue operands, on host and device paths.
    let epi = Epilogue::NONE.then_add().unwrap();
    assert!(matches!(
        core_err(common::gemv_host(
            &be,
            &CoreGemvJob::new(&w, &x, 1).with_epilogue(epi, &[]),
            &mut y
        )),
        Error::MissingOperand { slot: 0 }
    ));
    let wd = be.upload_weights(&w).unwrap();
    let xd = be.upload(&x).unwrap();
    let short = be.alloc(m - 1).unwrap();
    let mut yd = be.alloc(m).unwrap();
    assert!(matches!(
        core_err(be.gemv_batch(
            &xd,
            1,
            ActQuant::F32,
            &mut [GemvJob::new(&wd, &mut yd).with_epilogue(&epi, &[&short])]
        )),
        Error::LengthMismatch { .. }
    ));
    // GLU weights of different shapes.
    let b2 = weights(&mut rng, DType::Q4_0, m + 1, k);
    let w2 = be
        .upload_weights(&WeightMatrix::new(DType::Q4_0, m + 1, k, &b2).unwrap())
        .unwrap();
    assert!(matches!(
        core_err(be.gemv_batch(
            &xd,
            1,
            ActQuant::F32,
            &mut [fused_cuda::GemvJob::new(&wd, &mut yd).with_glu(&w2, Activation::Silu)]
        )),
        Error::ShapeMismatch { .. }
    ));
    // Activation modes without a kernel for the format: typed, before any launch.
    common::reset_launches(&be);
    for (mode, dtype) in [
        (ActQuant::Q8_K, DType::Q4_0),
        (ActQuant::Q8_1, DType::Q4_0),
        (ActQuant::Q8_0, DType::F16),
    ] {
        let b = weights(&mut rng, dtype, m, k);
        let wm = WeightMatrix::new(dtype, m, k, &b).unwrap();
        let wq = be.upload_weights(&wm).unwrap();
        assert_eq!(
            core_err(be.gemv_batch(&xd, 1, mode, &mut [GemvJob::new(&wq, &mut yd)])),
            Error::Unsupported(Unsupported::ActQuant(mode)),
            "{dtype} {mode:?}"
        );
    }
    assert_eq!(common::launches(&be), 0);
    // Quantized activations of another length than the weights' K, and a
    // quantizer input that is not whole columns.
    let acts = be.quantize_acts(ActQuant::Q8_0, &xd, 1).unwrap();
    common::reset_launches(&be);
    let b3 = weights(&mut rng, DType::Q4_0, m, 2 * k);
    let w3 = be
        .upload_weights(&WeightMatrix::new(DType::Q4_0, m, 2 * k, &b3).unwrap())
        .unwrap();
    assert!(matches!(
        core_err(be.gemv_quantized_batch(&acts, &mut [fused_cuda::GemvJob::new(&w3, &mut yd)])),
        Error::LengthMismatch { .. }
    ));
    assert!(matches!(
        core_err(be.quantize_acts(ActQuant::Q8_0, &xd, 3)),
        Error::LengthMismatch { .. }
    ));
    assert!(matches!(
        core_err(be.quantize_acts(ActQuant::Q8_K, &xd, 1)),
        Error::NotBlockAligned { .. }
    ));
    // FWHT: partial rows, wrong sign length, signs on an unsigned descriptor.
    let d = FwhtDesc::new(8).unwrap();
    let mut out = vec![0.0; 12];
    assert!(matches!(
        core_err(common::fwht_host(&be, &d, &[0.0; 12], None, &mut out)),
        Error::LengthMismatch { .. }
    ));
    let mut out = vec![0.0; 16];
    let ds = d.with_signs(16).unwrap();
    assert!(matches!(
        core_err(common::fwht_host(
            &be,
            &ds,
            &[0.0; 16],
            Some(&[1.0; 8]),
            &mut out
        )),
        Error::LengthMismatch { .. }
    ));
    assert!(matches!(
        core_err(common::fwht_host(
            &be,
            &d,
            &[0.0; 16],
            Some(&[1.0; 8]),
            &mut out
        )),
        Error::LengthMismatch { .. }
    ));
    // Element-wise length mismatches.
    let a = be.alloc(10).unwrap();
    let b = be.alloc(9).unwrap();
    let mut o = be.alloc(10).unwrap();
    assert!(matches!(
        core_err(be.elementwise(fused_cuda::Elementwise::Add(&a, &b), &mut o)),
        Error::LengthMismatch { .. }
    ));
    assert!(matches!(
        core_err(be.elementwise(
            fused_cuda::Elementwise::Glu(Activation::Silu, &a, &b),
            &mut o
        )),
        Error::LengthMismatch { .. }
    ));
    let bias = be.alloc(3).unwrap();
    assert!(matches!(
        core_err(be.elementwise(fused_cuda::Elementwise::AddRowBias(&a, &bias), &mut o)),
        Error::LengthMismatch { .. }
    ));
    let mut host = vec![0.0; 9];
    assert!(matches!(
        core_err(be.download(&a, &mut host)),
        Error::LengthMismatch { .. }
    ));
    // Nothing was launched by any of the refused calls.
    assert_eq!(common::launches(&be), 0);
}
