//! The `perf` mode: per backend and case, the median time of the fused
//! plan and of the same graph unfused (timed interleaved), the fused plan's GB/s (weights,
//! activations, operands and output, each moved once) as a share of the
//! backend's bandwidth ceiling measured in the same run, the speedup
//! and the kernel launches and barriers per plan (as the timed executor
//! counts them).
//!
//! A backend without a kernel for GGML's quantized activations of a format
//! is timed on the same case with f32 activations (the case id says
//! `f32acts`); a case it has no kernel for at all is listed as skipped with
//! the reason.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::planner::{Plan, plan};

use crate::backend::{Backend, RunConfig, finish_errors, registry, selected, skip_unavailable};
use crate::cases::{Built, Case, Link, Pattern, Special, build, weight_dtypes};
use crate::cli::Cli;
use crate::metrics::median;
use crate::progress::Progress;

/// One timed case on one backend.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PerfRow {
    /// Backend name.
    pub backend: String,
    /// Case id.
    pub case: String,
    /// Median time of the fused plan, µs.
    pub fused_us: f64,
    /// Median time of the unfused graph, µs.
    pub unfused_us: f64,
    /// Bytes the fused plan must move at least.
    pub bytes: usize,
    /// Fused GB/s (10⁹ bytes/s).
    pub gbs: f64,
    /// Fused GB/s as a percentage of the measured ceiling.
    pub pct_of_ceiling: Option<f64>,
    /// Unfused time / fused time.
    pub speedup: f64,
    /// Barriers of the fused plan.
    pub barriers_fused: u64,
    /// Barriers of the unfused graph.
    pub barriers_unfused: u64,
    /// Kernel launches of the fused plan.
    pub launches_fused: u64,
    /// Kernel launches of the unfused graph.
    pub launches_unfused: u64,
}

/// A backend's ceiling.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Ceiling {
    /// Backend name.
    pub backend: String,
    /// Threads used by the probe.
    pub threads: usize,
    /// Bandwidth ceiling, GB/s: the CPU's read bandwidth; on Vulkan a
    /// device buffer copy's bytes read plus written per second.
    pub read_gbs: Option<f64>,
}

/// The JSON document of a `perf` run (schema `fused-verify/perf/1`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PerfReport {
    /// `fused-verify/perf/1`.
    pub schema: &'static str,
    /// Repetitions per measurement.
    pub reps: usize,
    /// Ceilings per backend.
    pub ceilings: Vec<Ceiling>,
    /// Every measurement.
    pub rows: Vec<PerfRow>,
    /// Errors (a backend that failed to run a case, or ran none).
    pub errors: Vec<String>,
    /// Cases a backend has no kernel for, with the reason.
    pub skipped: Vec<String>,
}

/// The perf cases: per weight format a 4096×4096 GEMV with an in-place
/// residual add and a 4096×4096 SiLU GLU, plus a signed FWHT of 256 rows
/// of 4096.
pub fn perf_cases(seed: u64, threads: usize) -> Vec<Case> {
    let mut v = Vec::new();
    let base = |pattern, dtype, shape, m, k, cols| Case {
        pattern,
        dtype,
        shape,
        m,
        k,
        cols,
        glu: Activation::Silu,
        chain: Vec::new(),
        threads,
        mode: fused_core::acts::GemvMode::Ggml,
        special: Special::None,
        seed,
        weights: None,
        norm: false,
    };
    for d in weight_dtypes() {
        let mut c = base(Pattern::Gemv, d, "perf", 4096, 4096, 1);
        c.chain = vec![Link::AddInPlace];
        v.push(c);
        v.push(base(Pattern::Glu, d, "perf", 4096, 4096, 1));
    }
    v.push(base(
        Pattern::SignedFwht,
        DType::F32,
        "perf",
        4096,
        4096,
        256,
    ));
    v
}

/// Why a case was not timed.
#[derive(Debug)]
enum NotTimed {
    /// The backend has no kernel for it.
    Skip(String),
    /// It failed.
    Fail(String),
}

/// The case as `be` can time it, built: as given, or with f32 activations
/// where `be` lacks GGML's quantized ones; the first refusal when it has a
/// kernel for neither.
pub(crate) fn timing_case(be: &dyn Backend, case: &Case) -> Result<(Case, Built), String> {
    let cfg = |c: &Case| RunConfig {
        threads: c.threads,
        mode: c.mode,
    };
    let b = build(case).map_err(|e| e.to_string())?;
    let why = match be.supports(&b.graph, &plan(&b.graph), cfg(case)) {
        Ok(()) => return Ok((case.clone(), b)),
        Err(why) => why,
    };
    if case.mode != GemvMode::Ggml {
        return Err(why);
    }
    let mut f32_case = case.clone();
    f32_case.mode = GemvMode::F32;
    let b = build(&f32_case).map_err(|e| e.to_string())?;
    match be.supports(&b.graph, &plan(&b.graph), cfg(&f32_case)) {
        Ok(()) => Ok((f32_case, b)),
        Err(_) => Err(why),
    }
}

/// Times one case on one backend.
fn time_case(be: &dyn Backend, case: &Case, reps: usize) -> Result<PerfRow, NotTimed> {
    let (case, b) = timing_case(be, case).map_err(NotTimed::Skip)?;
    let fused = plan(&b.graph);
    let unfused = Plan::unfused(&b.graph);
    let cfg = RunConfig {
        threads: case.threads,
        mode: case.mode,
    };
    let mut timed = be
        .time_plans(&b.graph, &[&fused, &unfused], &b.mem, cfg, reps)
        .map_err(|e| NotTimed::Fail(e.to_string()))?
        .into_iter();
    let (f, u) = (
        timed.next().unwrap_or_default(),
        timed.next().unwrap_or_default(),
    );
    let (tf, tu) = (median(f.times), median(u.times));
    let (sf, su) = (f.stats, u.stats);
    let bytes = case.min_bytes();
    let secs = tf.as_secs_f64().max(1e-12);
    Ok(PerfRow {
        backend: be.name().to_string(),
        case: case.id(),
        fused_us: tf.as_secs_f64() * 1e6,
        unfused_us: tu.as_secs_f64() * 1e6,
        bytes,
        gbs: bytes as f64 / secs / 1e9,
        pct_of_ceiling: None,
        speedup: tu.as_secs_f64() / secs,
        barriers_fused: sf.barriers,
        barriers_unfused: su.barriers,
        launches_fused: sf.kernel_calls,
        launches_unfused: su.kernel_calls,
    })
}

/// Runs the `perf` mode.
pub fn run_perf(cli: &Cli, print: bool) -> PerfReport {
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut cases = perf_cases(cli.seed, threads);
    if let Some(f) = &cli.filter {
        cases.retain(|c| c.id().contains(f.as_str()));
    }
    let backends = registry();
    let mut report = PerfReport {
        schema: "fused-verify/perf/1",
        reps: cli.reps,
        ceilings: Vec::new(),
        rows: Vec::new(),
        errors: Vec::new(),
        skipped: Vec::new(),
    };
    let chosen: Vec<&dyn Backend> = backends
        .iter()
        .map(|b| b.as_ref())
        .filter(|b| selected(b.name(), &cli.backend))
        .collect();
    let mut progress = Progress::new((cases.len() * chosen.len()) as u64);
    if print {
        println!(
            "{:<12} {:<44} {:>10} {:>10} {:>8} {:>7} {:>7} {:>9} {:>9}",
            "backend",
            "case",
            "fused µs",
            "unfused µs",
            "GB/s",
            "% ceil",
            "speedup",
            "barriers",
            "launches"
        );
    }
    for be in chosen {
        if skip_unavailable(be, cli, print, &mut report.errors) {
            continue;
        }
        let ceiling = be.bandwidth_gbs(threads);
        report.ceilings.push(Ceiling {
            backend: be.name().to_string(),
            threads,
            read_gbs: ceiling,
        });
        if print {
            let c = ceiling.map_or("-".to_string(), |g| format!("{g:.1} GB/s"));
            progress.bar_suspend(|| {
                println!("{}: bandwidth ceiling {c} ({threads} threads)", be.name())
            });
        }
        let mut ran = 0;
        for case in &cases {
            match time_case(be, case, cli.reps) {
                Ok(mut row) => {
                    row.pct_of_ceiling = ceiling.map(|c| 100.0 * row.gbs / c);
                    if print {
                        progress.bar_suspend(|| {
                            println!(
                                "{:<12} {:<44} {:>10.1} {:>10.1} {:>8.2} {:>7} {:>7.2} {:>4}/{:<4} {:>4}/{:<4}",
                                row.backend,
                                row.case,
                                row.fused_us,
                                row.unfused_us,
                                row.gbs,
                                row.pct_of_ceiling
                                    .map_or("-".into(), |p| format!("{p:.0}%")),
                                row.speedup,
                                row.barriers_fused,
                                row.barriers_unfused,
                                row.launches_fused,
                                row.launches_unfused
                            )
                        });
                    }
                    report.rows.push(row);
                    ran += 1;
                }
                Err(NotTimed::Fail(e)) => {
                    report
                        .errors
                        .push(format!("{} {}: {e}", be.name(), case.id()))
                }
                Err(NotTimed::Skip(why)) => {
                    let line = format!("{} {}: {why}", be.name(), case.id());
                    if print {
                        progress.bar_suspend(|| println!("SKIP {line}"));
                    }
                    report.skipped.push(line);
                }
            }
            progress.inc(be.name());
        }
        if ran == 0 && !cli.allow_skip {
            report
                .errors
                .push(format!("backend {} ran no case", be.name()));
        }
    }
    progress.finish();
    let timed = report.rows.iter().map(|r| r.backend.as_str());
    finish_errors(cli, &backends, timed, &mut report.errors, print);
    report
}

impl PerfReport {
    /// The chart of `--plot`: fused and unfused GB/s per backend and case,
    /// the highest measured ceiling as a line.
    pub fn chart(&self) -> crate::plot::BarChart<'static> {
        let ceiling = self
            .ceilings
            .iter()
            .filter_map(|c| c.read_gbs)
            .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))));
        crate::plot::BarChart {
            title: "fused-verify perf: GB/s (fused and unfused)",
            unit: "GB/s",
            series: &["fused", "unfused"],
            groups: self
                .rows
                .iter()
                .map(|r| crate::plot::Group {
                    label: format!("{} {}", r.backend, r.case),
                    values: vec![r.gbs, r.gbs / r.speedup.max(1e-12)],
                })
                .collect(),
            line: ceiling.map(|c| (c, format!("read ceiling {c:.1} GB/s"))),
        }
    }
}
