//! GEMV outputs quantized by the GEMV itself
//! ([`GemvJob::with_quantized_output`]) against the quantizer launch on the
//! same output: the codes, scales and sums bit for bit, for every quantized
//! weight format (each in GGML's activation mode) writing each of the three
//! activation modes, plain, gated and with an epilogue chain, alone and in
//! grouped batches; and the refusals. On the first CUDA device (skipped
//! without one).

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip, chain, chain_operands, upload_weights};
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::Unsupported;
use fused_core::{DType, Error};
use fused_cuda::{
    CudaBackend, CudaError, DeviceActs, DeviceVec, DeviceWeights, GemvJob, LaunchOptions,
};

const OUT_MODES: [ActQuant; 3] = [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K];

/// Checks every `qs[i]` (written by a GEMV along with `ys[i]`) against the
/// quantizer launch on `ys[i]`.
fn check_outputs(be: &CudaBackend, ys: &[DeviceVec], qs: &[DeviceActs], what: &str) {
    for (i, (y, q)) in ys.iter().zip(qs).enumerate() {
        let want = be.quantize_acts(q.mode(), y, 1).unwrap();
        let got = be.download_acts(q).unwrap();
        let want = be.download_acts(&want).unwrap();
        assert!(got == want, "{what}, job {i}: quantized output differs");
    }
}

/// `y = epi(W·x)`, gated by `up` (SiLU) where given.
fn job<'a>(
    w: &'a DeviceWeights,
    up: Option<&'a DeviceWeights>,
    epi: &'a Epilogue,
    ops: &'a [&'a DeviceVec],
    y: &'a mut DeviceVec,
) -> GemvJob<'a> {
    let j = GemvJob::new(w, y).with_epilogue(epi, ops);
    match up {
        Some(u) => j.with_glu(u, Activation::Silu),
        None => j,
    }
}

/// [`job`] over each of `ws`, job `i` writing `ys[i]` and `qs[i]`.
fn folded_jobs<'a>(
    ws: &'a [DeviceWeights],
    up: Option<&'a DeviceWeights>,
    epi: &'a Epilogue,
    ops: &'a [&'a DeviceVec],
    ys: &'a mut [DeviceVec],
    qs: &'a mut [DeviceActs],
) -> Vec<GemvJob<'a>> {
    ws.iter()
        .zip(ys.iter_mut())
        .zip(qs.iter_mut())
        .map(|((w, y), q)| job(w, up, epi, ops, y).with_quantized_output(q))
        .collect()
}

#[test]
fn quantized_outputs_equal_the_quantizer_on_the_output() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(41);
    let saved = be.options();
    // 1280 rows: 5 Q8_K blocks, 40 of 32; k with whole blocks of every format.
    let (m, k) = (1280usize, 2304usize);
    let x = be.upload(&rng.vec_scaled(k, 1.0)).unwrap();
    let [o0, o1, bias] = chain_operands(&mut rng, m, 1);
    let ops: Vec<DeviceVec> = [o0, o1, bias]
        .iter()
        .map(|v| be.upload(v).unwrap())
        .collect();
    let op_refs: Vec<&DeviceVec> = ops.iter().collect();
    let epi_chain = chain();
    for dtype in fused_cuda::GEMV_DTYPES
        .into_iter()
        .filter(|d| d.is_quantized())
    {
        let mode = ActQuant::ggml(dtype);
        let ws: Vec<DeviceWeights> = (0..3)
            .map(|_| upload_weights(&be, &mut rng, dtype, m, k))
            .collect();
        for (out_mode, (epi, glu)) in OUT_MODES.into_iter().zip([
            (&Epilogue::NONE, false),
            (&epi_chain, false),
            (&epi_chain, true),
        ]) {
            for group in [false, true] {
                be.set_options(LaunchOptions { group, ..saved });
                let what = format!(
                    "{dtype} {mode:?} -> {out_mode:?}, stages {}, glu {glu}, group {group}",
                    epi.len()
                );
                // Three jobs (grouped into one launch where they can be)
                // with quantized outputs, and the same without.
                let mut ys: Vec<DeviceVec> = (0..3).map(|_| be.alloc(m).unwrap()).collect();
                let mut plain: Vec<DeviceVec> = (0..3).map(|_| be.alloc(m).unwrap()).collect();
                let mut qs: Vec<_> = (0..3)
                    .map(|_| be.alloc_acts(out_mode, m, 1).unwrap())
                    .collect();
                let up = glu.then_some(&ws[2]);
                let mut jobs = folded_jobs(&ws, up, epi, &op_refs, &mut ys, &mut qs);
                be.gemv_batch(&x, 1, mode, &mut jobs).unwrap();
                drop(jobs);
                let mut jobs: Vec<GemvJob<'_>> = ws
                    .iter()
                    .zip(plain.iter_mut())
                    .map(|(w, y)| job(w, up, epi, &op_refs, y))
                    .collect();
                be.gemv_batch(&x, 1, mode, &mut jobs).unwrap();
                drop(jobs);
                for (y, p) in ys.iter().zip(&plain) {
                    let (mut a, mut b) = (vec![0.0; m], vec![0.0; m]);
                    be.download(y, &mut a).unwrap();
                    be.download(p, &mut b).unwrap();
                    assert_bits_eq(&a, &b, &format!("{what}: y"));
                }
                check_outputs(&be, &ys, &qs, &what);
                // Again into the same buffers: every launch leaves the
                // completion counters at 0 for the next.
                let acts = be.quantize_acts(mode, &x, 1).unwrap();
                let mut jobs = folded_jobs(&ws, up, epi, &op_refs, &mut ys, &mut qs);
                be.gemv_quantized_batch(&acts, &mut jobs).unwrap();
                drop(jobs);
                check_outputs(&be, &ys, &qs, &format!("{what}, second run"));
            }
        }
    }
    be.set_options(saved);
}

#[test]
fn quantized_outputs_are_refused_where_no_kernel_writes_them() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(42);
    let (m, k) = (256usize, 512usize);
    let w = upload_weights(&be, &mut rng, DType::Q4_0, m, k);
    let x2 = be.upload(&rng.vec_scaled(2 * k, 1.0)).unwrap();
    let x1 = be.upload(&rng.vec_scaled(k, 1.0)).unwrap();
    let unsupported = |r: Result<(), CudaError>, what: &str| {
        assert!(
            matches!(
                r,
                Err(CudaError::Core(Error::Unsupported(Unsupported::Operation(
                    _
                ))))
            ),
            "{what}: {r:?}"
        );
    };
    // f32 activations: the float kernels write no quantized output.
    let mut y = be.alloc(m).unwrap();
    let mut q = be.alloc_acts(ActQuant::Q8_0, m, 1).unwrap();
    let mut jobs = [GemvJob::new(&w, &mut y).with_quantized_output(&mut q)];
    unsupported(
        be.gemv_batch(&x1, 1, ActQuant::F32, &mut jobs),
        "f32 activations",
    );
    // Two columns.
    let mut y = be.alloc(2 * m).unwrap();
    let mut jobs = [GemvJob::new(&w, &mut y).with_quantized_output(&mut q)];
    unsupported(
        be.gemv_batch(&x2, 2, ActQuant::Q8_0, &mut jobs),
        "two columns",
    );
    // Output activations of two columns.
    let mut y = be.alloc(m).unwrap();
    let mut q2 = be.alloc_acts(ActQuant::Q8_0, m / 2, 2).unwrap();
    let mut jobs = [GemvJob::new(&w, &mut y).with_quantized_output(&mut q2)];
    unsupported(
        be.gemv_batch(&x1, 1, ActQuant::Q8_0, &mut jobs),
        "two output columns",
    );
    // Output activations of another length than the GEMV's rows.
    let mut q = be.alloc_acts(ActQuant::Q8_K, 2 * m, 1).unwrap();
    let mut jobs = [GemvJob::new(&w, &mut y).with_quantized_output(&mut q)];
    let r = be.gemv_batch(&x1, 1, ActQuant::Q8_0, &mut jobs);
    assert!(
        matches!(r, Err(CudaError::Core(Error::LengthMismatch { .. }))),
        "{r:?}"
    );
    // Rows that are not whole blocks of the output mode cannot be allocated.
    assert!(matches!(
        be.alloc_acts(ActQuant::Q8_K, 96, 1),
        Err(CudaError::Core(Error::NotBlockAligned { .. }))
    ));
}
