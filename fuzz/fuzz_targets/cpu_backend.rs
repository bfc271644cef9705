//! The CPU backend's entry points: `CpuBackend::gemv` (plain and gated;
//! 7 inputs in 10) over arbitrary formats, shapes, columns, activation
//! modes, epilogue chains and slice lengths, and the FWHT, the element-wise
//! ops and the packed-weights GEMV (`fused_fuzz::cpu_ops`, whose functions
//! say their oracles).
//!
//! The GEMV's oracle, against the core's reference `gemv_job`:
//! - the scalar ISA (documented bit-exact to the reference) errs exactly
//!   when the reference does, and otherwise returns the reference's answer
//!   bit for bit (NaNs equal);
//! - the machine's best ISA errs exactly when the reference does; otherwise
//!   its fused result equals, bit for bit, its own unfused sequence (the
//!   GEMV with no epilogue, then the element-wise entry points stage by
//!   stage), and, for weights quantized from bounded values, lies within
//!   a loose NMSE of the reference.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Unstructured;
use fused_core::epilogue::{Epilogue, Stage};
use fused_core::job::GemvJob;
use fused_core::reference::gemv::gemv_job;
use fused_core::weights::WeightMatrix;
use fused_cpu::{CpuBackend, Isa};
use fused_fuzz::bits::assert_same;
use fused_fuzz::close::assert_nmse;
use fused_fuzz::cpu_ops;
use fused_fuzz::gemv_case::GemvCase;
use libfuzzer_sys::fuzz_target;

/// The scalar and the best ISA, two threads each, made once.
fn backends() -> &'static (CpuBackend, CpuBackend) {
    static B: OnceLock<(CpuBackend, CpuBackend)> = OnceLock::new();
    B.get_or_init(|| {
        (
            CpuBackend::with_isa(Isa::Scalar, 2).expect("scalar backend"),
            CpuBackend::new(2).expect("best backend"),
        )
    })
}

/// The fused result equals the GEMV without epilogue followed by the element-wise entry
/// points, on the same backend, bit for bit.
fn check_unfused(
    be: &CpuBackend,
    c: &GemvCase,
    job: &GemvJob<'_, WeightMatrix<'_>>,
    fused: &[f32],
) {
    let (m, n) = (c.m, c.n_cols);
    let len = m * n;
    if len == 0 {
        // Nothing to compare; the element-wise ops refuse an empty row bias.
        return;
    }
    let plain = GemvJob {
        epilogue: Epilogue::NONE,
        operands: &[],
        ..*job
    };
    let mut v = vec![0.0f32; len];
    match job.weights {
        fused_core::job::GemvWeights::Plain(_) => be.gemv(&plain, &mut v).expect("plain GEMV"),
        fused_core::job::GemvWeights::Gated { gate, up, act } => {
            let (mut g, mut u) = (vec![0.0f32; len], vec![0.0f32; len]);
            let pg = GemvJob {
                weights: fused_core::job::GemvWeights::Plain(gate),
                ..plain
            };
            let pu = GemvJob {
                weights: fused_core::job::GemvWeights::Plain(up),
                ..plain
            };
            be.gemv(&pg, &mut g).expect("gate GEMV");
            be.gemv(&pu, &mut u).expect("up GEMV");
            be.glu(act, &g, &u, &mut v).expect("glu");
        }
    }
    let mut out = vec![0.0f32; len];
    for s in job.epilogue.stages() {
        match *s {
            Stage::Act(a) => be.unary(a, &v, &mut out),
            Stage::Add { slot } => be.add(&v, job.operands[slot as usize], &mut out),
            Stage::Mul { slot } => be.mul(&v, job.operands[slot as usize], &mut out),
            Stage::AddRowBias { slot } => {
                be.add_row_bias(&v, job.operands[slot as usize], &mut out)
            }
        }
        .expect("element-wise stage");
        core::mem::swap(&mut v, &mut out);
    }
    assert_same("best ISA: fused vs unfused", fused, &v);
}

/// Checks one GEMV case (plain or gated) on both ISAs.
fn check_gemv(c: &GemvCase) {
    let Some(epilogue) = c.epilogue else {
        return;
    };
    let (Ok(w), Ok(w_up)) = (
        WeightMatrix::new(c.dtype, c.m, c.k, &c.w),
        WeightMatrix::new(c.dtype, c.m, c.k, &c.w_up),
    ) else {
        return;
    };
    let ops: Vec<&[f32]> = c.operands.iter().map(Vec::as_slice).collect();
    let base = match c.gated {
        Some(act) => GemvJob::gated(&w, &w_up, act, &c.x, c.n_cols),
        None => GemvJob::new(&w, &c.x, c.n_cols),
    };
    let job = base.with_mode(c.mode).with_epilogue(epilogue, &ops);

    let mut want = vec![0.0f32; c.y_len];
    let reference = gemv_job(&job, &mut want);
    let (scalar, best) = backends();

    let mut y = vec![0.0f32; c.y_len];
    let r = scalar.gemv(&job, &mut y);
    assert!(
        r.is_ok() == reference.is_ok(),
        "scalar {r:?} vs reference {reference:?}"
    );
    if r.is_ok() {
        assert_same("scalar ISA vs reference", &y, &want);
    }

    let mut y = vec![0.0f32; c.y_len];
    let r = best.gemv(&job, &mut y);
    assert!(
        r.is_ok() == reference.is_ok(),
        "best {r:?} vs reference {reference:?}"
    );
    if r.is_ok() {
        check_unfused(best, c, &job, &y);
        if c.sane {
            assert_nmse("best ISA vs reference", &y, &want, 1e-4);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(entry) = u.int_in_range(0..=9u8) else {
        return;
    };
    let (scalar, best) = backends();
    // Ends of fuzzer data are not findings: `Err` from `u` is ignored.
    let _ = match entry {
        0 => cpu_ops::check_fwht(&mut u, scalar, best),
        1 => cpu_ops::check_elementwise(&mut u, scalar, best),
        2 => GemvCase::arbitrary(&mut u).map(|c| cpu_ops::check_packed(&c, best)),
        _ => GemvCase::arbitrary(&mut u).map(|c| check_gemv(&c)),
    };
});
