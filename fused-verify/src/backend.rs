//! The verifier's view of a backend, and the registry of backends this
//! build knows.
//!
//! Every backend is reached through the core's contract
//! ([`fused_core::backend::Backend`]: compile a plan into a resident plan,
//! write, run, read) by one adapter, [`Contract`]; the object-safe
//! [`Backend`] trait below is only what the verifier's loops need of it
//! (a name, whether it can run here, run a plan over host buffers, time
//! plans interleaved). A backend that cannot run here says why
//! ([`Availability::Skip`]); the registry keeps it listed, so a run shows
//! the skip instead of passing silently. A backend that can run but lacks a
//! kernel for one case says so per case ([`Backend::supports`]): that case
//! is reported as skipped on it, with the reason.
//!
//! To add a backend: implement the core's contract in its crate and push a
//! [`Contract`] of it in [`registry`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fused_core::Error;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend as CoreBackend, CoreErrorSource, PlanStats, ResidentPlan};
use fused_core::error::Unsupported;
use fused_core::graph::Graph;
use fused_core::memory::Memory;
use fused_core::planner::Plan;
use fused_cpu::{CpuBackend, Isa};

/// Whether a backend can run on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// It can run.
    Ready,
    /// It cannot; the reason is shown in the report.
    Skip(String),
}

/// How one run is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// Worker threads (CPU backends; a GPU backend ignores it).
    pub threads: usize,
    /// How matmuls feed activations to the dot products.
    pub mode: GemvMode,
}

/// What one run of a plan did, as the backend counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunStats {
    /// Steps that launched a kernel (reshapes and views excluded).
    pub kernel_steps: u64,
    /// Barriers: synchronisation points between dependent kernels.
    pub barriers: u64,
    /// Kernel invocations.
    pub kernel_calls: u64,
}

/// The timed runs of one plan ([`Backend::time_plans`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimedPlan {
    /// The time of each run.
    pub times: Vec<Duration>,
    /// What one run of the timed executor launched and waited for.
    pub stats: RunStats,
}

/// Why a backend run failed.
#[derive(Clone, Debug, PartialEq)]
pub enum RunError {
    /// Bad or unsupported input, as the core defines it.
    Core(Error),
    /// The device or its driver failed.
    Device(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Core(e) => write!(f, "{e}"),
            RunError::Device(e) => write!(f, "device: {e}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<Error> for RunError {
    fn from(e: Error) -> Self {
        RunError::Core(e)
    }
}

/// A backend under verification.
pub trait Backend: Send + Sync {
    /// A unique name, e.g. `cpu-avx2`; `--backend` matches it by prefix.
    fn name(&self) -> &str;

    /// Whether it can run here, and why not.
    fn availability(&self) -> Availability;

    /// The device it runs on, in words, once opened (default: not said).
    fn device(&self) -> Option<String> {
        None
    }

    /// Whether its results must equal the core reference bit for bit
    /// (the same operation order as the reference), rather than within the
    /// tolerance table.
    fn bit_exact_reference(&self) -> bool;

    /// Whether it has a kernel for every step of `plan` (made for `g`) and
    /// of the unfused graph with `cfg`; why not (a weight format, an
    /// activation mode, a column count it lacks). The verifier reports an
    /// unsupported case as skipped on this backend. Default: everything.
    fn supports(&self, g: &Graph, plan: &Plan, cfg: RunConfig) -> Result<(), String> {
        let _ = (g, plan, cfg);
        Ok(())
    }

    /// Whether the timing modes (`perf`, `decode`) can time it here, and
    /// why not. Default: when it can run at all.
    fn timing_availability(&self) -> Availability {
        self.availability()
    }

    /// What the backend's own checker (the Vulkan validation layer) reported
    /// since the last call, or `None` when it has no checker running. The
    /// verifier fails a case during which anything was reported.
    fn take_diagnostics(&self) -> Option<Vec<String>> {
        None
    }

    /// Runs `plan` (made for `g`) over `mem`, reading the graph's inputs from
    /// it and leaving every computed tensor in it.
    fn run_plan(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError>;

    /// Runs every node of `g` by itself.
    fn run_unfused(
        &self,
        g: &Graph,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError> {
        self.run_plan(g, &Plan::unfused(g), mem, cfg)
    }

    /// The time of each of `reps` runs of every plan in `plans` (made for
    /// `g`), one entry per plan with what one run launched and waited for,
    /// with the inputs already on the device (transfers not timed) and
    /// every run starting from `mem`. The plans run interleaved (A, B, A,
    /// B, ...) after one untimed warm-up run each, so that a change in the
    /// machine's load affects them alike.
    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError>;

    /// The read-bandwidth ceiling in GB/s (10⁹ bytes/s) with `threads`
    /// threads, measured now, or `None` when the backend has no probe.
    fn bandwidth_gbs(&self, threads: usize) -> Option<f64>;
}

/// Opens an instance of a backend for a thread count, or says why it
/// cannot be opened here.
type Opener<B> = Box<dyn Fn(usize) -> Result<B, String> + Send + Sync>;

/// A backend of the core's contract under verification: opened on first
/// use (once, or once per thread count for a CPU backend), every plan
/// compiled, written, run and read back through the contract.
pub struct Contract<B> {
    name: String,
    open: Opener<B>,
    per_thread_count: bool,
    instances: Mutex<Vec<(usize, Arc<B>)>>,
    failed: Mutex<Option<String>>,
    /// Checker messages already reported.
    seen: Mutex<usize>,
}

impl<B> std::fmt::Debug for Contract<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Contract")
            .field("name", &self.name)
            .finish()
    }
}

impl<B: CoreBackend + Send + Sync> Contract<B> {
    /// A backend opened once by `open` (a GPU: the thread count is ignored).
    pub fn once(
        name: &str,
        open: impl Fn() -> Result<B, String> + Send + Sync + 'static,
    ) -> Contract<B> {
        Contract::new(name, Box::new(move |_| open()), false)
    }

    /// A backend opened once per thread count by `open` (a CPU).
    pub fn per_thread_count(
        name: &str,
        open: impl Fn(usize) -> Result<B, String> + Send + Sync + 'static,
    ) -> Contract<B> {
        Contract::new(name, Box::new(open), true)
    }

    fn new(name: &str, open: Opener<B>, per_thread_count: bool) -> Contract<B> {
        Contract {
            name: name.to_string(),
            open,
            per_thread_count,
            instances: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
            seen: Mutex::new(0),
        }
    }

    /// The instance for `threads` threads, opened on first use, or why
    /// there is none.
    pub fn instance(&self, threads: usize) -> Result<Arc<B>, String> {
        let key = if self.per_thread_count { threads } else { 0 };
        let mut all = self.instances.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, b)) = all.iter().find(|(t, _)| *t == key) {
            return Ok(Arc::clone(b));
        }
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = failed.as_ref() {
            return Err(why.clone());
        }
        match (self.open)(threads.max(1)) {
            Ok(b) => {
                let b = Arc::new(b);
                all.push((key, Arc::clone(&b)));
                Ok(b)
            }
            Err(why) => {
                *failed = Some(why.clone());
                Err(why)
            }
        }
    }

    fn ready(&self, threads: usize) -> Result<Arc<B>, RunError> {
        self.instance(threads)
            .map_err(|why| RunError::Device(format!("{} unavailable: {why}", self.name)))
    }
}

/// The contract's error as a run error: the core's own errors stay typed.
fn run_error<E: std::error::Error + CoreErrorSource>(e: E) -> RunError {
    match e.core_error() {
        Some(core) => RunError::Core(*core),
        None => RunError::Device(e.to_string()),
    }
}

/// What one run issued, as the verifier counts it: a kernel call is a
/// launch, a dispatch or a copy; a barrier a wait between dependent kernels.
fn run_stats(s: PlanStats) -> RunStats {
    RunStats {
        kernel_steps: s.kernel_steps,
        barriers: s.barriers,
        kernel_calls: s.launches + s.copies,
    }
}

impl<B: CoreBackend + Send + Sync> Backend for Contract<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn availability(&self) -> Availability {
        match self.instance(1) {
            Ok(_) => Availability::Ready,
            Err(why) => Availability::Skip(why),
        }
    }

    fn bit_exact_reference(&self) -> bool {
        self.instance(1)
            .is_ok_and(|b| b.capabilities().bit_exact_reference)
    }

    fn device(&self) -> Option<String> {
        self.instance(1).ok().map(|b| b.device())
    }

    fn supports(&self, g: &Graph, plan: &Plan, cfg: RunConfig) -> Result<(), String> {
        let Ok(b) = self.instance(cfg.threads) else {
            return Ok(());
        };
        match b
            .supports(g, plan, cfg.mode)
            .and_then(|()| b.supports(g, &Plan::unfused(g), cfg.mode))
        {
            Err(Error::Unsupported(u)) => Err(format!("unsupported: {u}")),
            // A malformed graph is the run's error to report.
            _ => Ok(()),
        }
    }

    fn take_diagnostics(&self) -> Option<Vec<String>> {
        let all = self.instance(1).ok()?.messages()?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let new = all.get(*seen..).unwrap_or_default().to_vec();
        *seen = all.len();
        Some(new)
    }

    fn run_plan(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError> {
        let b = self.ready(cfg.threads)?;
        let mut p = b
            .compile(g, plan, cfg.mode, &mem.sizes())
            .map_err(run_error)?;
        p.write_all(mem)
            .and_then(|()| p.run())
            .and_then(|()| p.read_all(mem))
            .map_err(run_error)?;
        Ok(run_stats(p.stats()))
    }

    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        let b = self.ready(cfg.threads)?;
        let sizes = mem.sizes();
        let mut resident = plans
            .iter()
            .map(|p| {
                let mut rp = b.compile(g, p, cfg.mode, &sizes)?;
                rp.write_all(mem)?;
                rp.restore_inputs()?;
                rp.run()?; // warm-up
                Ok(rp)
            })
            .collect::<Result<Vec<_>, B::Error>>()
            .map_err(run_error)?;
        let mut timed: Vec<TimedPlan> = resident
            .iter()
            .map(|rp| TimedPlan {
                times: Vec::with_capacity(reps),
                stats: run_stats(rp.stats()),
            })
            .collect();
        // Interleaved (A, B, A, B, ...): a change in the machine's load
        // affects every plan alike.
        for _ in 0..reps.max(1) {
            for (rp, t) in resident.iter_mut().zip(timed.iter_mut()) {
                t.times.push(rp.time_once().map_err(run_error)?.best());
            }
        }
        Ok(timed)
    }

    fn bandwidth_gbs(&self, threads: usize) -> Option<f64> {
        self.instance(threads).ok()?.copy_bandwidth_gbs()
    }
}

/// A backend this build does not contain (its crate or feature is not
/// built); listed so that a request for it is reported, never faked.
#[derive(Debug)]
pub struct Unbuilt {
    name: &'static str,
    reason: &'static str,
}

impl Backend for Unbuilt {
    fn name(&self) -> &str {
        self.name
    }

    fn availability(&self) -> Availability {
        Availability::Skip(self.reason.to_string())
    }

    fn bit_exact_reference(&self) -> bool {
        false
    }

    fn run_plan(
        &self,
        _: &Graph,
        _: &Plan,
        _: &mut Memory,
        _: RunConfig,
    ) -> Result<RunStats, RunError> {
        Err(Error::Unsupported(Unsupported::Operation("a backend that is not built")).into())
    }

    fn time_plans(
        &self,
        _: &Graph,
        _: &[&Plan],
        _: &Memory,
        _: RunConfig,
        _: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        Err(Error::Unsupported(Unsupported::Operation("a backend that is not built")).into())
    }

    fn bandwidth_gbs(&self, _: usize) -> Option<f64> {
        None
    }
}

/// The CPU backend pinned to `isa` with `threads` threads, or why it
/// cannot run here.
fn open_cpu(isa: Isa, threads: usize) -> Result<CpuBackend, String> {
    if !isa.is_supported() {
        return Err(format!("this CPU lacks {isa} (best: {})", Isa::detect()));
    }
    CpuBackend::with_isa(isa, threads).map_err(|e| e.to_string())
}

/// The Vulkan device, validation on unless `FUSED_VK_VALIDATION=0`; where
/// the layer is not installed the device opens without it (and no checker
/// runs).
#[cfg(feature = "vulkan")]
pub fn open_vulkan() -> Result<fused_vulkan::VulkanBackend, String> {
    use fused_vulkan::{ContextOptions, VulkanBackend, VulkanError};
    let validation = std::env::var_os("FUSED_VK_VALIDATION").is_none_or(|v| v != "0");
    let open = |validation| {
        VulkanBackend::with_options(ContextOptions {
            validation,
            ..ContextOptions::default()
        })
    };
    match open(validation) {
        Err(VulkanError::NoValidationLayer) => open(false),
        r => r,
    }
    .map_err(|e| {
        if e.is_no_device() {
            e.to_string()
        } else {
            format!("opening the Vulkan device failed: {e}")
        }
    })
}

/// Every backend this build knows: one CPU backend per instruction set
/// (those this machine lacks report a skip), then Vulkan and CUDA (a skip
/// when no device can be opened, or when built without their feature).
pub fn registry() -> Vec<Box<dyn Backend>> {
    let mut v: Vec<Box<dyn Backend>> = [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| cfg!(target_arch = "x86_64") || *isa == Isa::Scalar)
        .map(|isa| {
            Box::new(Contract::per_thread_count(
                &format!("cpu-{}", isa.name()),
                move |threads| open_cpu(isa, threads),
            )) as Box<dyn Backend>
        })
        .collect();
    #[cfg(feature = "vulkan")]
    v.push(Box::new(Contract::once("vulkan", open_vulkan)));
    #[cfg(not(feature = "vulkan"))]
    v.push(Box::new(Unbuilt {
        name: "vulkan",
        reason: "built without the `vulkan` feature",
    }));
    #[cfg(feature = "cuda")]
    v.push(Box::new(Contract::once("cuda", || {
        fused_cuda::CudaBackend::new().map_err(|e| e.to_string())
    })));
    #[cfg(not(feature = "cuda"))]
    v.push(Box::new(Unbuilt {
        name: "cuda",
        reason: "built without the `cuda` feature (opt-in)",
    }));
    v
}

/// Whether the backend called `name` is selected by the `--backend`
/// patterns (none: every backend; otherwise a prefix match, so `cpu`
/// selects every CPU instruction set).
pub fn selected(name: &str, patterns: &[String]) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| name.starts_with(p.as_str()))
}

/// Whether a `--backend` pattern names the backend called `name` exactly.
/// Such a backend must run (else the run fails unless `--allow-skip`); a
/// pattern that selects a family by prefix (`cpu`) only needs one of its
/// members to run, the others (an instruction set this CPU lacks) are
/// skipped.
pub fn named(name: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| p == name)
}

/// Ends a timing run's error list: adds [`family_errors`] of `cli` over
/// `backends` (the registry) and the backends that timed a case (`timed`),
/// then prints every error as `FAIL …` where `print`.
pub fn finish_errors<'a>(
    cli: &crate::cli::Cli,
    backends: &[Box<dyn Backend>],
    timed: impl IntoIterator<Item = &'a str>,
    errors: &mut Vec<String>,
    print: bool,
) {
    let names: Vec<&str> = backends.iter().map(|b| b.name()).collect();
    let timed: Vec<&str> = timed.into_iter().collect();
    errors.extend(family_errors(cli, &names, &timed));
    if print {
        for e in errors.iter() {
            println!("FAIL {e}");
        }
    }
}

/// The run-level errors of the `--backend` patterns that name no backend
/// exactly (families such as `cpu`) and select none of the backends in
/// `ran` (those that ran or timed a case); `names` is every backend of the
/// registry. Empty with `--allow-skip`.
pub fn family_errors(cli: &crate::cli::Cli, names: &[&str], ran: &[&str]) -> Vec<String> {
    if cli.allow_skip {
        return Vec::new();
    }
    cli.backend
        .iter()
        .filter(|p| !names.contains(&p.as_str()))
        .filter(|p| !ran.iter().any(|r| r.starts_with(p.as_str())))
        .map(|p| {
            format!("--backend {p}: no backend it selects ran a case; pass --allow-skip to accept")
        })
        .collect()
}

/// For the timing modes: whether `be` cannot be timed here
/// ([`Backend::timing_availability`]) and so is to be skipped.
/// Prints the reason when `print`; a backend that `--backend` names
/// exactly ([`named`]) and that cannot run is an error in `errors` unless
/// `--allow-skip`.
pub fn skip_unavailable(
    be: &dyn Backend,
    cli: &crate::cli::Cli,
    print: bool,
    errors: &mut Vec<String>,
) -> bool {
    let Availability::Skip(why) = be.timing_availability() else {
        return false;
    };
    if print {
        println!("SKIP {}: {why}", be.name());
    }
    if named(be.name(), &cli.backend) && !cli.allow_skip {
        errors.push(format!("backend {} ran no case ({why})", be.name()));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{family_errors, named, selected};
    use crate::cli::Cli;
    use clap::Parser;

    const NAMES: [&str; 4] = ["cpu-scalar", "cpu-avx2", "cpu-avx512", "cuda"];

    fn cli(args: &[&str]) -> Cli {
        Cli::parse_from(std::iter::once("fused-verify").chain(args.iter().copied()))
    }

    #[test]
    fn a_family_needs_one_member_that_ran() {
        let c = cli(&["--backend", "cpu"]);
        assert!(selected("cpu-avx512", &c.backend));
        assert!(!named("cpu-avx512", &c.backend));
        // An AVX2 machine: avx512 skipped, the family still ran.
        assert!(family_errors(&c, &NAMES, &["cpu-scalar", "cpu-avx2"]).is_empty());
        let e = family_errors(&c, &NAMES, &["cuda"]);
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("--backend cpu: no backend"), "{e:?}");
        let allowed = cli(&["--backend", "cpu", "--allow-skip"]);
        assert!(family_errors(&allowed, &NAMES, &[]).is_empty());
    }

    #[test]
    fn an_exact_name_is_left_to_the_per_backend_rule() {
        let c = cli(&["--backend", "cpu-avx512", "--backend", "cuda"]);
        assert!(named("cpu-avx512", &c.backend) && named("cuda", &c.backend));
        assert!(!named("cpu-avx2", &c.backend));
        // Exact names are not families: the caller reports them itself.
        assert!(family_errors(&c, &NAMES, &[]).is_empty());
        // A pattern that selects nothing is a family that never ran.
        let none = cli(&["--backend", "nosuch"]);
        assert_eq!(family_errors(&none, &NAMES, &["cpu-scalar"]).len(), 1);
    }
}
