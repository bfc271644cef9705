//! The `decode` mode: a stack of decode layers ([`crate::stack`]) run fused
//! and unfused on each backend, checked bit for bit against each other,
//! timed per token, kernel launches and barriers per token (as the timed
//! executor counts them). GGML's activation mode, or f32 activations on a
//! backend without a kernel for GGML's quantized ones for that format (the
//! row's `acts` says which). Weights: random, one stack per format, or
//! those of a GGUF file (`decode FILE`).

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::planner::{Plan, plan};

use crate::backend::{
    Backend, RunConfig, RunError, finish_errors, registry, selected, skip_unavailable,
};
use crate::cli::Cli;
use crate::metrics;
use crate::metrics::median;

use crate::stack::{DecodeStack, GgufWeights, build_stack};

/// One backend × format of the `decode` mode.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DecodeRow {
    /// Backend name.
    pub backend: String,
    /// Weight format.
    pub dtype: String,
    /// Layers in the stack.
    pub layers: usize,
    /// Median time per token (one pass over the stack), fused, µs.
    pub fused_us: f64,
    /// The same, unfused, µs.
    pub unfused_us: f64,
    /// Unfused / fused.
    pub speedup: f64,
    /// Barriers per token, fused.
    pub barriers_fused: u64,
    /// Barriers per token, unfused.
    pub barriers_unfused: u64,
    /// Kernel launches per token, fused.
    pub launches_fused: u64,
    /// Kernel launches per token, unfused.
    pub launches_unfused: u64,
    /// How the GEMVs took their activations: `ggml` (GGML's quantized
    /// activations) or `f32`.
    pub acts: &'static str,
    /// Whether fused and unfused gave the same bits.
    pub fused_eq_unfused: bool,
}

/// The JSON document of a `decode` run (schema `fused-verify/decode/1`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodeReport {
    /// `fused-verify/decode/1`.
    pub schema: &'static str,
    /// Hidden size.
    pub hidden: usize,
    /// FFN size.
    pub ffn: usize,
    /// The GGUF file the weights came from (`decode FILE`); none: random.
    pub gguf: Option<String>,
    /// Every measurement.
    pub rows: Vec<DecodeRow>,
    /// Failures.
    pub errors: Vec<String>,
}

/// The formats the `decode` mode runs unless `--filter` picks others.
pub const DEFAULT_DTYPES: [DType; 4] = [DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::F16];

/// One timed stack: µs per token fused and unfused, their counts, whether
/// the outputs agree, and the activation mode used.
struct Timed {
    fused_us: f64,
    unfused_us: f64,
    fused: crate::backend::RunStats,
    unfused: crate::backend::RunStats,
    same: bool,
    mode: GemvMode,
}

fn decode_one(
    be: &dyn Backend,
    s: &DecodeStack,
    p: &Plan,
    cfg: RunConfig,
    reps: usize,
) -> Result<Timed, RunError> {
    let unfused = Plan::unfused(&s.graph);
    let mut cfg = cfg;
    if let Err(why) = be.supports(&s.graph, p, cfg) {
        let f32_acts = RunConfig {
            mode: GemvMode::F32,
            ..cfg
        };
        if cfg.mode == GemvMode::F32 || be.supports(&s.graph, p, f32_acts).is_err() {
            return Err(RunError::Device(why));
        }
        cfg = f32_acts;
    }
    let (mut mf, mut mu) = (s.mem.clone(), s.mem.clone());
    be.run_plan(&s.graph, p, &mut mf, cfg)?;
    be.run_plan(&s.graph, &unfused, &mut mu, cfg)?;
    let out = s.graph.tensor(s.out)?;
    let same = metrics::first_difference_nan_equal(&mf.read(out)?, &mu.read(out)?).is_none();
    let mut t = be
        .time_plans(&s.graph, &[p, &unfused], &s.mem, cfg, reps)?
        .into_iter();
    let (f, u) = (t.next().unwrap_or_default(), t.next().unwrap_or_default());
    let us = |t: Vec<std::time::Duration>| median(t).as_secs_f64() * 1e6;
    Ok(Timed {
        fused: f.stats,
        unfused: u.stats,
        fused_us: us(f.times),
        unfused_us: us(u.times),
        same,
        mode: cfg.mode,
    })
}

/// What the rows of the `decode` mode run: random weights of a format, or
/// the weights of a GGUF file.
enum Source<'a> {
    Random(DType),
    File(&'a GgufWeights),
}

/// Runs the `decode` mode: `--layers` layers of hidden size 1024 and FFN
/// size 2816 with random weights of each format, one token; or, given a
/// GGUF `FILE`, the first `--layers` layers of the file with its weights,
/// sizes and formats (`--filter` is then unused).
pub fn run_decode(cli: &Cli, print: bool) -> DecodeReport {
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut report = DecodeReport {
        schema: "fused-verify/decode/1",
        hidden: 1024,
        ffn: 2816,
        gguf: cli.file.as_ref().map(|p| p.display().to_string()),
        rows: Vec::new(),
        errors: Vec::new(),
    };
    let file = match cli
        .file
        .as_deref()
        .map(|p| (p, GgufWeights::load(p, cli.layers)))
    {
        None => None,
        Some((_, Ok(w))) => Some(w),
        Some((path, Err(e))) => {
            report
                .errors
                .push(format!("reading {}: {e}", path.display()));
            if print {
                println!("FAIL {}", report.errors[0]);
            }
            return report;
        }
    };
    let sources: Vec<Source> = match &file {
        Some(w) => {
            (report.hidden, report.ffn) = (w.hidden, w.ffn);
            if print && !w.rotate() {
                println!(
                    "note: hidden size {} is not a power of two: no Hadamard-rotated projection",
                    w.hidden
                );
            }
            if print && cli.filter.is_some() {
                println!("note: --filter is unused with a FILE: the file's formats run");
            }
            vec![Source::File(w)]
        }
        None => match &cli.filter {
            Some(name) => DType::from_name(name)
                .map(Source::Random)
                .into_iter()
                .collect(),
            None => DEFAULT_DTYPES.map(Source::Random).into(),
        },
    };
    let (h, f) = (report.hidden, report.ffn);
    if sources.is_empty() {
        report
            .errors
            .push("--filter names no weight format (e.g. q4_0)".to_string());
    }
    if print {
        println!(
            "{:<12} {:<9} {:<5} {:>6} {:>14} {:>14} {:>8} {:>10} {:>10}",
            "backend",
            "dtype",
            "acts",
            "layers",
            "fused µs/tok",
            "unfused µs/tok",
            "speedup",
            "barriers",
            "launches"
        );
    }
    let backends = registry();
    for be in backends.iter().filter(|b| selected(b.name(), &cli.backend)) {
        if skip_unavailable(be.as_ref(), cli, print, &mut report.errors) {
            continue;
        }
        for src in &sources {
            let cfg = RunConfig {
                threads,
                mode: GemvMode::Ggml,
            };
            let (d, layers, stack) = match src {
                Source::Random(d) => (
                    d.name().to_string(),
                    cli.layers,
                    build_stack(*d, cli.layers, h, f, cli.seed),
                ),
                Source::File(w) => (w.formats(), w.layers.len(), w.build_stack(cli.seed)),
            };
            let res = stack.map_err(RunError::from).and_then(|s| {
                let p = plan(&s.graph);
                decode_one(be.as_ref(), &s, &p, cfg, cli.reps)
            });
            match res {
                Ok(t) => {
                    let same = t.same;
                    let row = DecodeRow {
                        backend: be.name().to_string(),
                        dtype: d.clone(),
                        layers,
                        fused_us: t.fused_us,
                        unfused_us: t.unfused_us,
                        speedup: t.unfused_us / t.fused_us.max(1e-9),
                        barriers_fused: t.fused.barriers,
                        barriers_unfused: t.unfused.barriers,
                        launches_fused: t.fused.kernel_calls,
                        launches_unfused: t.unfused.kernel_calls,
                        acts: match t.mode {
                            GemvMode::Ggml => "ggml",
                            GemvMode::F32 => "f32",
                        },
                        fused_eq_unfused: same,
                    };
                    if print {
                        println!(
                            "{:<12} {:<9} {:<5} {:>6} {:>14.1} {:>14.1} {:>8.2} {:>5}/{:<4} {:>5}/{:<4}{}",
                            row.backend,
                            row.dtype,
                            row.acts,
                            row.layers,
                            row.fused_us,
                            row.unfused_us,
                            row.speedup,
                            row.barriers_fused,
                            row.barriers_unfused,
                            row.launches_fused,
                            row.launches_unfused,
                            if same { "" } else { "  FAIL fused != unfused" }
                        );
                    }
                    if !same {
                        report
                            .errors
                            .push(format!("{} {d}: fused != unfused", be.name()));
                    }
                    report.rows.push(row);
                }
                Err(e) => report.errors.push(format!("{} {d}: {e}", be.name())),
            }
        }
    }
    let timed = report.rows.iter().map(|r| r.backend.as_str());
    finish_errors(cli, &backends, timed, &mut report.errors, print);
    report
}

impl DecodeReport {
    /// The chart of `--plot`: fused and unfused µs per token.
    pub fn chart(&self) -> crate::plot::BarChart<'static> {
        crate::plot::BarChart {
            title: "fused-verify decode: µs per token (fused and unfused)",
            unit: "µs/token",
            series: &["fused", "unfused"],
            groups: self
                .rows
                .iter()
                .map(|r| crate::plot::Group {
                    label: format!("{} {} x{} layers", r.backend, r.dtype, r.layers),
                    values: vec![r.fused_us, r.unfused_us],
                })
                .collect(),
            line: None,
        }
    }
}
