//! The backend abstraction every backend crate implements for the verifier,
//! and the registry of backends this build knows.
//!
//! A backend runs a core [`Plan`] over host byte buffers (the reference
//! evaluator's [`Memory`]): the fused plan from [`fused_core::planner::plan`]
//! and the same graph unfused ([`Plan::unfused`]). The verifier compares the
//! two with each other and with the reference. A backend that cannot run
//! here says why ([`Availability::Skip`]); the registry keeps it listed, so
//! a run shows the skip instead of passing silently. A backend that can run
//! but lacks a kernel for one case says so per case ([`Backend::supports`]):
//! that case is reported as skipped on it, with the reason.
//!
//! The CPU backends are here; the GPU backends (Vulkan, CUDA) are in
//! [`crate::gpu`]. To add a backend: implement [`Backend`] behind the
//! backend crate's feature and push it in [`registry`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fused_core::Error;
use fused_core::error::Unsupported;
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::tensor::BufferId;
use fused_cpu::exec::{CpuMemory, Executor};
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

/// The number of buffers in `mem` (they are numbered from 0).
pub fn buffer_count(mem: &Memory) -> u32 {
    (0u32..)
        .take_while(|b| mem.buffer(BufferId(*b)).is_ok())
        .count() as u32
}

/// The CPU backend of `fused-cpu` pinned to one instruction set, with one
/// thread pool per thread count (built on first use).
#[derive(Debug)]
pub struct CpuIsaBackend {
    isa: Isa,
    name: String,
    pools: Mutex<Vec<(usize, Arc<CpuBackend>)>>,
}

impl CpuIsaBackend {
    /// The backend for `isa` (which may be unavailable on this machine).
    pub fn new(isa: Isa) -> CpuIsaBackend {
        CpuIsaBackend {
            isa,
            name: format!("cpu-{}", isa.name()),
            pools: Mutex::new(Vec::new()),
        }
    }

    /// The instruction set.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    fn pool(&self, threads: usize) -> Result<Arc<CpuBackend>, Error> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, be)) = pools.iter().find(|(t, _)| *t == threads) {
            return Ok(Arc::clone(be));
        }
        let be = Arc::new(CpuBackend::with_isa(self.isa, threads)?);
        pools.push((threads, Arc::clone(&be)));
        Ok(be)
    }
}

/// Copies the executor's buffers back into the host memory.
fn copy_back(src: &CpuMemory, dst: &mut Memory, n: u32) -> Result<(), Error> {
    for b in 0..n {
        dst.buffer_mut(BufferId(b))?.copy_from_slice(src.bytes(b)?);
    }
    Ok(())
}

impl Backend for CpuIsaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn availability(&self) -> Availability {
        if self.isa.is_supported() {
            Availability::Ready
        } else {
            Availability::Skip(format!(
                "this CPU lacks {} (best: {})",
                self.isa,
                Isa::detect()
            ))
        }
    }

    fn bit_exact_reference(&self) -> bool {
        self.isa == Isa::Scalar
    }

    fn run_plan(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError> {
        let be = self.pool(cfg.threads)?;
        let n = buffer_count(mem);
        let mut cpu = CpuMemory::from_reference(mem, n)?;
        let s = Executor::new(&be, cfg.mode).run(g, plan, &mut cpu)?;
        copy_back(&cpu, mem, n)?;
        Ok(RunStats {
            kernel_steps: s.kernel_steps,
            barriers: s.counters.barriers,
            kernel_calls: s.counters.kernel_calls,
        })
    }

    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        let be = self.pool(cfg.threads)?;
        let ex = Executor::new(&be, cfg.mode);
        let fresh = CpuMemory::from_reference(mem, buffer_count(mem))?;
        // In-place plans overwrite their inputs: every run starts from a
        // copy made outside the timed region.
        let mut work = fresh.clone();
        let mut timed = Vec::with_capacity(plans.len());
        for p in plans {
            work.clone_from(&fresh);
            let s = ex.run(g, p, &mut work)?;
            timed.push(TimedPlan {
                times: Vec::with_capacity(reps),
                stats: RunStats {
                    kernel_steps: s.kernel_steps,
                    barriers: s.counters.barriers,
                    kernel_calls: s.counters.kernel_calls,
                },
            });
        }
        for _ in 0..reps.max(1) {
            for (p, t) in plans.iter().zip(timed.iter_mut()) {
                work.clone_from(&fresh);
                let start = Instant::now();
                ex.run(g, p, &mut work)?;
                t.times.push(start.elapsed());
            }
        }
        Ok(timed)
    }

    fn bandwidth_gbs(&self, threads: usize) -> Option<f64> {
        // 256 MiB: well beyond the last-level cache of the machines we run on.
        Some(fused_cpu::backend::read_bandwidth(256 << 20, threads, 5))
    }
}

/// A backend this build does not contain (its crate or feature is not
/// built yet); listed so that a request for it is reported, never faked.
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

/// Every backend this build knows: one CPU backend per instruction set
/// (those this machine lacks report a skip), then Vulkan and CUDA (a skip
/// when no device can be opened, or when built without their feature).
pub fn registry() -> Vec<Box<dyn Backend>> {
    let mut v: Vec<Box<dyn Backend>> = [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| cfg!(target_arch = "x86_64") || *isa == Isa::Scalar)
        .map(|isa| Box::new(CpuIsaBackend::new(isa)) as Box<dyn Backend>)
        .collect();
    #[cfg(feature = "vulkan")]
    v.push(Box::new(crate::gpu::GpuBackend::<
        fused_vulkan::VulkanBackend,
    >::new()));
    #[cfg(not(feature = "vulkan"))]
    v.push(Box::new(Unbuilt {
        name: "vulkan",
        reason: "built without the `vulkan` feature",
    }));
    #[cfg(feature = "cuda")]
    v.push(Box::new(
        crate::gpu::GpuBackend::<fused_cuda::CudaBackend>::new(),
    ));
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
