//! The checks of one case: the references (computed once per case) and,
//! per backend, fused against unfused and against the references.
//!
//! Per case, on the reference: the planner fuses what the pattern expects;
//! the f64 and same-quantization references are finite (for finite inputs);
//! malformed weights are refused with a typed error.
//! Per case and backend: both runs succeed; fused equals unfused bit for
//! bit (also with NaN/Inf inputs); NMSE against f64 and ulps against the
//! same-quantization reference within [`crate::tolerance`]; non-finite
//! values where the reference has them; the plan needs fewer barriers than
//! the unfused graph when it fuses; a short weight buffer is an error; the
//! backend's own checker (the Vulkan validation layer) reported nothing.
//! A case the backend has no kernel for ([`Backend::supports`]) is skipped
//! on it, with the reason.

use std::panic::{AssertUnwindSafe, catch_unwind};

use fused_core::Error;
use fused_core::fwht::fwht_f64;
use fused_core::memory::Memory;
use fused_core::planner::{Plan, plan};
use fused_core::quant::dequantize_row;
use fused_core::reference::eval::eval_graph;
use fused_core::reference::gemv::{gemm_f64, gemm_glu_f64};
use fused_core::tensor::BufferId;
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;

use crate::backend::{Backend, RunConfig, RunError, RunStats};
use crate::cases::{Built, Case, Pattern, Special, build, build_seeded};
use crate::metrics;
use crate::tolerance::{self, Tolerance};

/// One named check and its verdict.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// Measured values, or why it failed.
    pub detail: String,
}

/// The verdict on one case for one backend (or the reference).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every check held.
    Pass,
    /// A check failed.
    Fail,
    /// Not run (the backend is not available, or has no kernel for the case).
    Skip,
}

/// The error metrics of one backend run (absent where not computed).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Measured {
    /// NMSE against the f64 reference.
    pub nmse: Option<f64>,
    /// Largest absolute error against the f64 reference.
    pub max_abs: Option<f64>,
    /// Largest ulp distance against the same-quantization reference.
    pub max_ulp: Option<u64>,
    /// The tolerance applied.
    pub tolerance: Option<Tolerance>,
    /// The fused run's counters.
    pub fused: Option<RunStats>,
    /// The unfused run's counters.
    pub unfused: Option<RunStats>,
}

/// The result of one case on one backend.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CaseResult {
    /// The backend's name (`reference` for the per-case reference checks).
    pub backend: String,
    /// The case id.
    pub case: String,
    /// The pattern's name.
    pub pattern: &'static str,
    /// The weight format's name.
    pub dtype: String,
    /// The verdict.
    pub outcome: Outcome,
    /// The checks run.
    pub checks: Vec<Check>,
    /// The metrics.
    pub metrics: Measured,
}

impl CaseResult {
    fn new(backend: &str, case: &Case) -> CaseResult {
        CaseResult {
            backend: backend.to_string(),
            case: case.id(),
            pattern: case.pattern.name(),
            dtype: case.dtype.name().to_string(),
            outcome: Outcome::Pass,
            checks: Vec::new(),
            metrics: Measured::default(),
        }
    }

    fn check(&mut self, name: &'static str, ok: bool, detail: String) {
        if !ok {
            self.outcome = Outcome::Fail;
        }
        self.checks.push(Check { name, ok, detail });
    }

    /// The result of a case the backend did not run (it is not available).
    pub fn skipped(backend: &str, case: &Case, reason: &str) -> CaseResult {
        CaseResult::not_run(backend, case, "available", reason)
    }

    /// The result of a case the backend has no kernel for.
    pub fn unsupported(backend: &str, case: &Case, reason: &str) -> CaseResult {
        CaseResult::not_run(backend, case, "supported", reason)
    }

    fn not_run(backend: &str, case: &Case, check: &'static str, reason: &str) -> CaseResult {
        let mut r = CaseResult::new(backend, case);
        r.outcome = Outcome::Skip;
        r.checks.push(Check {
            name: check,
            ok: true,
            detail: reason.to_string(),
        });
        r
    }
}

/// A case with its references, shared by every backend.
#[derive(Debug)]
pub struct Prepared {
    /// The case.
    pub case: Case,
    /// Its graph and inputs (`Err` when building failed).
    pub built: Result<Built, Error>,
    /// The planner's plan.
    pub plan: Plan,
    /// The f64 reference output.
    pub truth: Vec<f64>,
    /// The same-quantization reference output (the core's unfused evaluator).
    pub reference: Vec<f32>,
    /// NMSE of the same-quantization reference against the f64 one.
    pub reference_nmse: f64,
    /// The magnitude the outputs are computed at, which the ulp check's
    /// floor scales ([`ulp_scale`]).
    pub ulp_scale: f32,
    /// The typical magnitude of a GEMV case's sums, `Σ|w·x| / √K` at its
    /// largest ([`term_scale`]; 0 for the other patterns).
    pub term_scale: f32,
    /// The checks made on the references.
    pub result: CaseResult,
}

/// Outputs from which on the same-quantization reference itself must meet
/// the NMSE budget (with fewer, NMSE is a ratio of a few values and the
/// activation rounding alone can exceed a budget set for many outputs).
pub const MIN_OUTPUTS_FOR_REFERENCE_NMSE: usize = 64;

/// How much worse than the same-quantization reference a backend's NMSE may
/// be where the reference itself exceeds the budget.
pub const NMSE_SLACK_OVER_REFERENCE: f64 = 1.5;

/// The f64 reference of a built case.
fn truth(case: &Case, b: &Built) -> Result<Vec<f64>, Error> {
    let (m, k, cols) = (case.m, case.k, case.cols);
    let mut y = vec![0.0f64; m * cols];
    let ops: Vec<&[f32]> = b.operands.iter().map(Vec::as_slice).collect();
    match case.pattern {
        Pattern::Gemv => {
            let w = WeightMatrix::new(case.dtype, m, k, &b.w)?;
            gemm_f64(&w, &b.x, cols, &b.epilogue.bind(&ops, m, cols)?, &mut y)?;
        }
        Pattern::Glu => {
            let gw = GluWeights::new(
                WeightMatrix::new(case.dtype, m, k, &b.w)?,
                WeightMatrix::new(case.dtype, m, k, &b.w_up)?,
            )?;
            let e = b.epilogue.bind(&ops, m, cols)?;
            gemm_glu_f64(&gw, &b.x, cols, case.glu, &e, &mut y)?;
        }
        Pattern::Fwht | Pattern::SignedFwht => {
            let d = b.fwht.ok_or(Error::BadFwhtSize { n: 0 })?;
            y = vec![0.0f64; k * cols];
            let signs = (case.pattern == Pattern::SignedFwht).then_some(b.signs.as_slice());
            fwht_f64(&d, &b.x, signs, &mut y)?;
        }
    }
    Ok(y)
}

/// Builds `case`, plans it and computes both references.
pub fn prepare(case: &Case) -> Prepared {
    let mut result = CaseResult::new("reference", case);
    let built = build(case);
    let mut p = Prepared {
        case: case.clone(),
        built,
        plan: Plan::default(),
        truth: Vec::new(),
        reference: Vec::new(),
        reference_nmse: 0.0,
        ulp_scale: 0.0,
        term_scale: 0.0,
        result: CaseResult::new("reference", case),
    };
    let b = match &p.built {
        Ok(b) => b,
        Err(e) => {
            result.check("build", false, format!("building the case failed: {e}"));
            p.result = result;
            return p;
        }
    };
    p.plan = plan(&b.graph);
    let want = case.expected_fused_steps();
    result.check(
        "plan",
        p.plan.fused_steps() == want,
        format!(
            "{} fused steps (expected {want}); refusals: {:?}",
            p.plan.fused_steps(),
            p.plan.refusals
        ),
    );
    let reference = (|| {
        let mut mem = b.mem.clone();
        eval_graph(&b.graph, &mut mem, case.mode)?;
        mem.read(b.graph.tensor(b.out)?)
    })();
    match (truth(case, b), reference) {
        (Ok(t), Ok(r)) => {
            if case.special == Special::None {
                let ok = metrics::all_finite(&t) && metrics::all_finite(&r);
                result.check(
                    "reference_finite",
                    ok,
                    format!("f64 and same-quantization references finite: {ok}"),
                );
            }
            if case.special == Special::None {
                let nmse = metrics::nmse(&r, &t);
                let tol = tolerance::for_case(case, true, 1.0).nmse;
                let enforced = r.len() >= MIN_OUTPUTS_FOR_REFERENCE_NMSE;
                result.metrics.nmse = Some(nmse);
                result.metrics.max_abs = Some(metrics::max_abs(&r, &t));
                result.check(
                    "reference_nmse",
                    nmse <= tol || !enforced,
                    format!(
                        "same-quantization reference NMSE vs f64 {nmse:.3e} (tolerance {tol:.0e}{})",
                        if enforced { "" } else { ", not enforced below 64 outputs" }
                    ),
                );
                p.reference_nmse = nmse;
            }
            p.ulp_scale = ulp_scale(case, &r);
            p.term_scale = term_scale(case, b);
            p.truth = t;
            p.reference = r;
        }
        (Err(e), _) | (_, Err(e)) => result.check("reference", false, format!("{e}")),
    }
    if case.special == Special::BadInput && case.dtype.is_quantized() {
        let mut bad = case.clone();
        bad.k = case.dtype.block_len() + 1;
        let refused = matches!(build(&bad), Err(Error::NotBlockAligned { .. }));
        result.check(
            "k_not_block_multiple_refused",
            refused,
            format!("K = {} refused with NotBlockAligned: {refused}", bad.k),
        );
    }
    p.result = result;
    p
}

/// The magnitude `case`'s outputs are computed at: the largest output of
/// the same-quantization `reference`, or, where an activation squashes the
/// values it is given (GELU or SiLU of a large negative pre-activation
/// gives a value near zero whose ulps say nothing about the products that
/// made it), the largest output of the case with every activation made the
/// identity ([`Case::linearized`]), if that is larger. An ulp count is only
/// meaningful for outputs not far below this scale.
pub fn ulp_scale(case: &Case, reference: &[f32]) -> f32 {
    let own = metrics::max_magnitude(reference);
    if !case.has_nonlinearity() {
        return own;
    }
    let linear = case.linearized();
    let linear_out = build_seeded(&linear, case.data_seed()).and_then(|b| {
        let mut mem = b.mem.clone();
        eval_graph(&b.graph, &mut mem, linear.mode)?;
        mem.read(b.graph.tensor(b.out)?)
    });
    // A linearized case that cannot be evaluated leaves the output's own
    // scale (the stricter floor).
    linear_out.map_or(own, |v| own.max(metrics::max_magnitude(&v)))
}

/// The largest `Σ_i |w_ri·x_ci|` over the outputs of a GEMV case, divided
/// by `√K`: the magnitude a sum of `K` products of random signs typically
/// has, and the one its rounding scales with (a reordered sum is off by a
/// few of its ulps), which an output falls far below where its products
/// cancel. Non-finite sums (the NaN and Inf cases) and the other patterns
/// give 0.
pub fn term_scale(case: &Case, b: &Built) -> f32 {
    if case.pattern != Pattern::Gemv {
        return 0.0;
    }
    let (m, k) = (case.m, case.k);
    let Ok(rb) = case.dtype.row_bytes(k) else {
        return 0.0;
    };
    let mut row = vec![0.0f32; k];
    let mut best = 0.0f64;
    for r in 0..m {
        let Some(src) = b.w.get(r * rb..(r + 1) * rb) else {
            return 0.0;
        };
        if dequantize_row(case.dtype, src, &mut row).is_err() {
            return 0.0;
        }
        for x in b.x.chunks_exact(k) {
            let sum: f64 = row
                .iter()
                .zip(x)
                .map(|(&w, &v)| (f64::from(w) * f64::from(v)).abs())
                .sum();
            if sum.is_finite() {
                best = best.max(sum);
            }
        }
    }
    (best / (k as f64).sqrt()) as f32
}

/// Runs `f`, turning a panic into an error message.
fn guarded<T, E: std::fmt::Display>(f: impl FnOnce() -> Result<T, E>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("error: {e}")),
        Err(_) => Err("panicked".to_string()),
    }
}

/// The output of one backend run of `plan` (fused) or of the graph unfused.
fn run_once(
    be: &dyn Backend,
    b: &Built,
    plan: Option<&Plan>,
    mem: &Memory,
    cfg: RunConfig,
) -> Result<(Vec<f32>, RunStats), String> {
    guarded(|| -> Result<_, RunError> {
        let mut m = mem.clone();
        let stats = match plan {
            Some(p) => be.run_plan(&b.graph, p, &mut m, cfg)?,
            None => be.run_unfused(&b.graph, &mut m, cfg)?,
        };
        Ok((m.read(b.graph.tensor(b.out)?)?, stats))
    })
}

/// Checks `be` on a prepared case; `scale` scales the tolerance table.
pub fn check_backend(be: &dyn Backend, p: &Prepared, scale: f64) -> CaseResult {
    let case = &p.case;
    let mut r = CaseResult::new(be.name(), case);
    let b = match &p.built {
        Ok(b) => b,
        Err(e) => {
            r.check("build", false, format!("{e}"));
            return r;
        }
    };
    let cfg = RunConfig {
        threads: case.threads,
        mode: case.mode,
    };
    if let Err(why) = be.supports(&b.graph, &p.plan, cfg) {
        return CaseResult::unsupported(be.name(), case, &why);
    }
    // Messages from before this case are not its own.
    let _ = be.take_diagnostics();
    if case.special == Special::BadInput {
        short_weights(be, b, &p.plan, cfg, &mut r);
        diagnostics(be, &mut r);
        return r;
    }
    check_runs(be, p, b, cfg, scale, &mut r);
    diagnostics(be, &mut r);
    r
}

/// Fails `r` when the backend's checker reported anything during the case.
fn diagnostics(be: &dyn Backend, r: &mut CaseResult) {
    if let Some(msgs) = be.take_diagnostics() {
        r.check(
            "validation",
            msgs.is_empty(),
            match msgs.first() {
                None => "no validation messages".to_string(),
                Some(first) => format!("{} validation message(s), first: {first}", msgs.len()),
            },
        );
    }
}

/// The fused and unfused runs of a case with finite or non-finite inputs,
/// and their checks.
fn check_runs(
    be: &dyn Backend,
    p: &Prepared,
    b: &Built,
    cfg: RunConfig,
    scale: f64,
    r: &mut CaseResult,
) {
    let case = &p.case;
    let fused = run_once(be, b, Some(&p.plan), &b.mem, cfg);
    let unfused = run_once(be, b, None, &b.mem, cfg);
    let ((yf, sf), (yu, su)) = match (fused, unfused) {
        (Ok(f), Ok(u)) => (f, u),
        (f, u) => {
            let msg = |x: &Result<_, String>| x.as_ref().err().cloned().unwrap_or("ok".into());
            r.check(
                "run",
                false,
                format!("fused: {}; unfused: {}", msg(&f), msg(&u)),
            );
            return;
        }
    };
    r.metrics.fused = Some(sf);
    r.metrics.unfused = Some(su);
    let diff = metrics::first_difference_nan_equal(&yf, &yu);
    let nan_bits = metrics::first_bit_difference(&yf, &yu);
    let bits = |v: &[f32], i: usize| {
        v.get(i)
            .map_or("-".into(), |x| format!("{x:?} ({:#010x})", x.to_bits()))
    };
    r.check(
        "fused_eq_unfused",
        diff.is_none(),
        match (diff, nan_bits) {
            (None, Some(i)) => format!(
                "bit-identical except NaN sign/payload (first at {i}: fused {} vs unfused {})",
                bits(&yf, i),
                bits(&yu, i)
            ),
            (None, None) => "bit-identical".to_string(),
            (Some(i), _) => format!(
                "first difference at {i}: fused {} vs unfused {}",
                bits(&yf, i),
                bits(&yu, i)
            ),
        },
    );
    let want_kernels = p.plan.kernel_steps(&b.graph) as u64;
    r.check(
        "counters",
        sf.kernel_steps == want_kernels
            && sf.barriers <= sf.kernel_steps
            && (p.plan.fused_steps() == 0 || sf.barriers < su.barriers),
        format!(
            "fused {} kernel steps (plan: {want_kernels}), {} barriers; unfused {} barriers",
            sf.kernel_steps, sf.barriers, su.barriers
        ),
    );
    if case.special != Special::None {
        let same = metrics::same_nonfinite_pattern(&yf, &p.reference);
        let n = yf.iter().filter(|v| !v.is_finite()).count();
        r.check(
            "nonfinite_propagates",
            same,
            format!("non-finite pattern as in the reference: {same} ({n} non-finite outputs)"),
        );
        // The outputs the reference keeps finite must still be right: a
        // kernel that lost a block's scale to a NaN gives finite but wrong
        // rows, which the pattern alone does not see.
        let tol = tolerance::for_case(case, be.bit_exact_reference(), scale);
        let (got, want): (Vec<f32>, Vec<f32>) = yf
            .iter()
            .zip(&p.reference)
            .filter(|(_, w)| w.is_finite())
            .map(|(g, w)| (*g, *w))
            .unzip();
        let floor = (tol.ulp_floor * p.ulp_scale).max(p.term_scale);
        let ulp = metrics::max_ulp(&got, &want, floor);
        r.check(
            "finite_outputs_match",
            ulp <= tol.ulp,
            format!(
                "{} finite reference outputs, max {ulp} ulp (tolerance {})",
                want.len(),
                tol.ulp
            ),
        );
        return;
    }
    let tol = tolerance::for_case(case, be.bit_exact_reference(), scale);
    let nmse = metrics::nmse(&yf, &p.truth);
    let max_abs = metrics::max_abs(&yf, &p.truth);
    // Ulps of the larger of the floor and the sums' typical magnitude: a
    // reordered accumulation is off by a few of its ulps, however much of
    // an output cancels.
    let floor = (tol.ulp_floor * p.ulp_scale).max(p.term_scale);
    let ulp = metrics::max_ulp(&yf, &p.reference, floor);
    r.metrics.nmse = Some(nmse);
    r.metrics.max_abs = Some(max_abs);
    r.metrics.max_ulp = Some(ulp);
    r.metrics.tolerance = Some(tol);
    let budget = tol.nmse.max(NMSE_SLACK_OVER_REFERENCE * p.reference_nmse);
    // As for the reference: over a few outputs NMSE is the relative error
    // of values that may have cancelled; the ulp check covers them.
    let enforced = yf.len() >= MIN_OUTPUTS_FOR_REFERENCE_NMSE;
    r.check(
        "nmse_vs_f64",
        nmse <= budget || !enforced,
        format!(
            "NMSE {nmse:.3e} (tolerance {:.0e}, same-quantization reference {:.3e}{}), max abs error {max_abs:.3e}",
            tol.nmse,
            p.reference_nmse,
            if enforced { "" } else { "; not enforced below 64 outputs" }
        ),
    );
    r.check(
        "ulp_vs_same_quant",
        ulp <= tol.ulp,
        format!("max {ulp} ulp (tolerance {})", tol.ulp),
    );
}

/// The weight buffer one byte short: both runs must return an error.
fn short_weights(be: &dyn Backend, b: &Built, plan: &Plan, cfg: RunConfig, r: &mut CaseResult) {
    let sizes = b.mem.sizes();
    let weight_end = b
        .graph
        .nodes()
        .iter()
        .filter(|n| n.tensor().buffer() == BufferId(0))
        .map(|n| n.tensor().byte_extent().end)
        .max()
        .unwrap_or(1);
    let mut short = sizes.clone();
    if let Some(first) = short.first_mut() {
        *first = weight_end.min(*first).saturating_sub(1);
    }
    let mut mem = Memory::new(&short);
    for (i, &len) in short.iter().enumerate().skip(1) {
        if let (Ok(src), Ok(dst)) = (
            b.mem.buffer(BufferId(i as u32)),
            mem.buffer_mut(BufferId(i as u32)),
        ) {
            dst.copy_from_slice(&src[..len]);
        }
    }
    for (name, plan) in [("fused", Some(plan)), ("unfused", None)] {
        let res = run_once(be, b, plan, &mem, cfg);
        let detail = match &res {
            Ok(_) => format!("{name}: ran on a short weight buffer"),
            Err(e) => format!("{name}: {e}"),
        };
        let ok = matches!(&res, Err(e) if e.starts_with("error"));
        r.check("short_buffer_is_error", ok, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Availability, TimedPlan};
    use crate::cases::{CaseSet, generate};
    use fused_core::graph::Graph;
    use fused_core::memory::Memory;

    /// A backend that has no kernel for anything and fails any run.
    struct Refusing;

    impl Backend for Refusing {
        fn name(&self) -> &str {
            "refusing"
        }
        fn availability(&self) -> Availability {
            Availability::Ready
        }
        fn bit_exact_reference(&self) -> bool {
            false
        }
        fn supports(&self, _: &Graph, _: &Plan, _: RunConfig) -> Result<(), String> {
            Err("no kernel for this test".to_string())
        }
        fn run_plan(
            &self,
            _: &Graph,
            _: &Plan,
            _: &mut Memory,
            _: RunConfig,
        ) -> Result<RunStats, RunError> {
            panic!("an unsupported case was run")
        }
        fn time_plans(
            &self,
            _: &Graph,
            _: &[&Plan],
            _: &Memory,
            _: RunConfig,
            _: usize,
        ) -> Result<Vec<TimedPlan>, RunError> {
            panic!("an unsupported case was timed")
        }
        fn bandwidth_gbs(&self, _: usize) -> Option<f64> {
            None
        }
    }

    #[test]
    fn a_case_the_backend_has_no_kernel_for_is_skipped_with_the_reason() {
        let case = generate(CaseSet::Quick, 1)
            .into_iter()
            .find(|c| c.pattern == Pattern::Gemv && c.special == Special::None)
            .unwrap();
        let r = check_backend(&Refusing, &prepare(&case), 1.0);
        assert_eq!(r.outcome, Outcome::Skip, "{r:?}");
        assert_eq!(r.checks.len(), 1, "{r:?}");
        assert_eq!(r.checks[0].name, "supported");
        assert_eq!(r.checks[0].detail, "no kernel for this test");
    }
}
