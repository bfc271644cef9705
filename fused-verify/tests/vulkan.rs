//! The quick case set on the Vulkan backend (lavapipe in CI): no failure,
//! every case run or skipped for want of a kernel, under the validation
//! layer with no message. Without a Vulkan device the test reports a skip,
//! unless `FUSED_REQUIRE_VULKAN=1` (scripts/test sets it), which makes a
//! missing device a failure.

use std::io::Write;

use clap::Parser;
use fused_core::backend::{Backend as _, HostPlan, ResidentPlan};
use fused_verify::backend::{Availability, Backend, Contract, open_vulkan};
use fused_verify::cases::{CaseSet, generate};
use fused_verify::cli::Cli;
use fused_verify::run::run_tests;
use fused_verify::verify::{Outcome, check_backend, prepare};
use fused_vulkan::{VulkanBackend, VulkanError};

/// The Vulkan backend as the verifier opens it (validation on where the
/// layer is installed).
fn vulkan() -> Contract<VulkanBackend> {
    Contract::once("vulkan", open_vulkan)
}

/// Whether the backend can run here; panics when it cannot but must.
fn available(be: &Contract<VulkanBackend>) -> bool {
    match be.availability() {
        Availability::Ready => true,
        Availability::Skip(why) => {
            if std::env::var_os("FUSED_REQUIRE_VULKAN").is_some_and(|v| v != "0") {
                panic!("FUSED_REQUIRE_VULKAN is set, but: {why}");
            }
            let _ = writeln!(std::io::stderr(), "skipped: no Vulkan device ({why})");
            false
        }
    }
}

/// Whether the validation layer is asked for (as the backend decides).
fn validation_wanted() -> bool {
    std::env::var_os("FUSED_VK_VALIDATION").is_none_or(|v| v != "0")
}

#[test]
fn quick_set_passes_on_vulkan() {
    if !available(&vulkan()) {
        return;
    }
    let cli = Cli::parse_from(["fused-verify", "--backend", "vulkan"]);
    let r = run_tests(&cli, false);
    let failures: Vec<String> = r
        .results
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .take(10)
        .map(|c| format!("{} {}: {:?}", c.backend, c.case, c.checks))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let vk = r.backends.iter().find(|b| b.name == "vulkan").unwrap();
    assert!(vk.available);
    assert!(vk.cases_run > 100, "{vk:?}");
    // Vulkan has a kernel for every case: none is skipped as unsupported.
    assert_eq!(vk.cases_unsupported, 0, "{vk:?}");
    assert_eq!(vk.cases_run, r.n_cases, "{vk:?}");
    for c in r.results.iter().filter(|c| c.backend == "vulkan") {
        assert_eq!(c.outcome, Outcome::Pass, "{c:?}");
        let bad_input = c.case.contains("/bad_input/");
        let names: Vec<&str> = c.checks.iter().map(|k| k.name).collect();
        assert!(bad_input || names.contains(&"fused_eq_unfused"), "{c:?}");
        if validation_wanted() {
            assert!(names.contains(&"validation"), "{c:?}");
        }
    }
    // Every pattern and every format Vulkan has a kernel for ran.
    for want in [
        "gemv/f32/",
        "gemv/f16/",
        "gemv/q8_0/",
        "gemv/q4_0/",
        "gemv/q4_K/",
    ] {
        assert!(
            r.results.iter().any(|c| c.backend == "vulkan"
                && c.outcome == Outcome::Pass
                && c.case.starts_with(want)),
            "no {want} case ran"
        );
    }
    for want in ["glu/", "fwht/", "fwht_signed/"] {
        assert!(
            r.results.iter().any(|c| c.backend == "vulkan"
                && c.outcome == Outcome::Pass
                && c.case.starts_with(want)),
            "no {want} case ran"
        );
    }
}

#[test]
fn a_validation_message_fails_the_case() {
    let be = vulkan();
    if !available(&be) {
        return;
    }
    let vk = be.instance(1).unwrap();
    let ctx = vk.context();
    if !ctx.validation_enabled() {
        assert!(!validation_wanted() || std::env::var_os("FUSED_REQUIRE_VULKAN").is_none());
        let _ = writeln!(std::io::stderr(), "skipped: validation layer not on");
        return;
    }
    let case = generate(CaseSet::Quick, 1)
        .into_iter()
        .find(|c| c.id().starts_with("gemv/f32/63/"))
        .unwrap();
    let p = prepare(&case);
    assert_eq!(check_backend(&be, &p, 1.0).outcome, Outcome::Pass);
    // A message reported during the next case (here: before its runs but
    // after the backend drained the older ones) must fail it.
    struct Noisy<'a>(&'a Contract<VulkanBackend>);
    impl Backend for Noisy<'_> {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn availability(&self) -> Availability {
            self.0.availability()
        }
        fn bit_exact_reference(&self) -> bool {
            false
        }
        fn take_diagnostics(&self) -> Option<Vec<String>> {
            self.0.take_diagnostics()
        }
        fn run_plan(
            &self,
            g: &fused_core::graph::Graph,
            plan: &fused_core::planner::Plan,
            mem: &mut fused_core::memory::Memory,
            cfg: fused_verify::backend::RunConfig,
        ) -> Result<fused_verify::backend::RunStats, fused_verify::backend::RunError> {
            let vk = self.0.instance(1).unwrap();
            let ctx = vk.context();
            assert!(ctx.report_test_message(c"fused-verify test message"));
            self.0.run_plan(g, plan, mem, cfg)
        }
        fn time_plans(
            &self,
            g: &fused_core::graph::Graph,
            plans: &[&fused_core::planner::Plan],
            mem: &fused_core::memory::Memory,
            cfg: fused_verify::backend::RunConfig,
            reps: usize,
        ) -> Result<Vec<fused_verify::backend::TimedPlan>, fused_verify::backend::RunError>
        {
            self.0.time_plans(g, plans, mem, cfg, reps)
        }
        fn bandwidth_gbs(&self, _: usize) -> Option<f64> {
            None
        }
    }
    let r = check_backend(&Noisy(&be), &p, 1.0);
    assert_eq!(r.outcome, Outcome::Fail, "{r:?}");
    let v = r.checks.iter().find(|c| c.name == "validation").unwrap();
    assert!(
        !v.ok && v.detail.contains("fused-verify test message"),
        "{v:?}"
    );
    // Drained: the next case is clean again.
    assert_eq!(check_backend(&be, &p, 1.0).outcome, Outcome::Pass);
}

/// Every quick case Vulkan has a kernel for, fused and unfused, through the
/// device-resident executor and through the host-slice executor: every
/// buffer bit for bit the same, or a typed refusal (never a silently wrong
/// result); a case the host executor rejects is rejected by the device plan
/// too.
#[test]
fn device_plan_equals_the_host_slice_executor_on_the_quick_set() {
    use fused_core::backend::Resident;
    use fused_core::planner::{Plan, Step, plan};
    use fused_verify::backend::RunConfig;
    use fused_verify::cases::build;

    let be = vulkan();
    if !available(&be) {
        return;
    }
    let dev = be.instance(1).unwrap();
    let dev = &*dev;
    let (mut ran, mut refused) = (0, Vec::new());
    for case in generate(CaseSet::Quick, 1) {
        let Ok(b) = build(&case) else { continue };
        let cfg = RunConfig {
            threads: 1,
            mode: case.mode,
        };
        let fused = plan(&b.graph);
        if be.supports(&b.graph, &fused, cfg).is_err() {
            continue;
        }
        for p in [fused.clone(), Plan::unfused(&b.graph)] {
            let id = case.id();
            let sz = b.mem.sizes();
            let host = HostPlan::new(dev, &b.graph, &p, cfg.mode, b.mem.clone(), &sz)
                .map_err(VulkanError::from)
                .and_then(|mut h| h.run().map(|()| h.memory().clone()));
            let dp = dev.compile(&b.graph, &p, cfg.mode, &sz);
            let mut dp = match (host, dp) {
                (Err(_), Err(_)) => continue,
                (Err(e), Ok(_)) => {
                    panic!("{id}: the host executor refused ({e}), the device plan did not")
                }
                (Ok(_), Err(e)) => panic!("{id}: {e}"),
                (Ok(_), Ok(Resident::Host(_, why))) => {
                    refused.push(format!("{id}: {why}"));
                    continue;
                }
                (Ok(want), Ok(dp)) => (dp, want),
            };
            dp.0.write_all(&b.mem).unwrap();
            dp.0.run().unwrap();
            let mut got = b.mem.clone();
            dp.0.read_all(&mut got).unwrap();
            assert!(got == dp.1, "{id}: the device plan differs");
            // One dispatch per kernel step, plus the activation quantizer
            // before each GEMV step with GGML's Q8 activations whose input
            // the latest quantization does not already hold; with f32
            // activations (f32 mode, or float weights) a norm prologue is a
            // dispatch of its own (shared by the GEMVs that read the same
            // normed input); quantized, it is the quantizer's.
            let stats = dp.0.stats();
            let steps = p.kernel_steps(&b.graph);
            let prologues = p
                .steps
                .iter()
                .filter(|s| match s {
                    Step::Gemv(f) => f.prologue.is_some(),
                    Step::GluGemv(f) => f.prologue.is_some(),
                    _ => false,
                })
                .count();
            let issued = (stats.launches - stats.quantizations) as usize;
            let expected = steps..=steps + prologues;
            assert!(
                expected.contains(&issued),
                "{id}: {issued} dispatches for {steps} kernel steps and {prologues} prologues"
            );
            ran += 1;
        }
    }
    assert!(ran > 200, "{ran} runs; refused: {refused:#?}");
    // Refusals are the documented ones only (strided or non-F32 inputs,
    // broadcast operands).
    for r in &refused {
        assert!(
            r.contains("strided") || r.contains("broadcast") || r.contains("must be"),
            "{r}"
        );
    }
    let _ = writeln!(
        std::io::stderr(),
        "device plan: {ran} runs equal, {} refused: {refused:#?}",
        refused.len()
    );
    if validation_wanted() && dev.context().validation_enabled() {
        let msgs = dev.context().validation_messages();
        assert!(msgs.is_empty(), "{msgs:#?}");
    }
}

/// `time_plans` on Vulkan: device-timed runs of the fused plan and the
/// unfused graph, with the device plan's launch and barrier counts.
#[test]
fn vulkan_times_plans_on_the_device() {
    use fused_core::planner::{Plan, plan};
    use fused_verify::backend::RunConfig;
    use fused_verify::cases::build;

    let be = vulkan();
    if !available(&be) {
        return;
    }
    assert_eq!(be.timing_availability(), Availability::Ready);
    let case = generate(CaseSet::Quick, 1)
        .into_iter()
        .find(|c| c.id().starts_with("gemv/q4_0/") && c.id().contains("/f32acts/"))
        .unwrap();
    let b = build(&case).unwrap();
    let (fused, unfused) = (plan(&b.graph), Plan::unfused(&b.graph));
    let cfg = RunConfig {
        threads: 1,
        mode: case.mode,
    };
    let t = be
        .time_plans(&b.graph, &[&fused, &unfused], &b.mem, cfg, 3)
        .unwrap();
    assert_eq!(t.len(), 2);
    for p in &t {
        assert_eq!(p.times.len(), 3);
        assert!(p.times.iter().all(|d| !d.is_zero()), "{p:?}");
    }
    assert_eq!(
        t[0].stats.kernel_calls as usize,
        fused.kernel_steps(&b.graph)
    );
    assert_eq!(
        t[1].stats.kernel_calls as usize,
        unfused.kernel_steps(&b.graph)
    );
    assert!(t[0].stats.barriers <= t[1].stats.barriers, "{t:?}");
    assert!(be.bandwidth_gbs(1).is_some_and(|g| g > 0.0));
}

/// The `perf` mode on Vulkan: every quantized format (Q4_0, Q4_1 and Q4_K
/// here) is timed with GGML's Q8 activations (quantized on the device: one
/// more launch and barrier per GEMV); launches and barriers are the device
/// plan's.
#[test]
fn perf_mode_times_vulkan_with_ggml_activations() {
    if !available(&vulkan()) {
        return;
    }
    let cli = Cli::parse_from([
        "fused-verify",
        "perf",
        "--backend",
        "vulkan",
        "--filter",
        "gemv/q4_",
        "--reps",
        "1",
    ]);
    let r = fused_verify::perf::run_perf(&cli, false);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let timed: Vec<&str> = r.rows.iter().map(|row| row.case.as_str()).collect();
    assert_eq!(timed.len(), 3, "{timed:?}");
    for row in &r.rows {
        assert!(row.case.contains("/ggml/"), "{row:?}");
        // The quantizer: one launch and one barrier more.
        let q = 1;
        assert!(row.fused_us > 0.0 && row.gbs > 0.0, "{row:?}");
        assert_eq!(
            (row.launches_fused, row.launches_unfused),
            (1 + q, 2 + q),
            "{row:?}"
        );
        assert_eq!(
            (row.barriers_fused, row.barriers_unfused),
            (q, 1 + q),
            "{row:?}"
        );
    }
    for f in ["gemv/q4_0/", "gemv/q4_1/", "gemv/q4_K/"] {
        assert!(r.rows.iter().any(|row| row.case.starts_with(f)), "{f}");
    }
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    assert!(r.ceilings[0].read_gbs.is_some_and(|g| g > 0.0));
}
