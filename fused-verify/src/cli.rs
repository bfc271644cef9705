//! The command line (clap, derive).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::cases::CaseSet;

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Every selected backend against the references, fused against unfused.
    Test,
    /// Time fused and unfused plans against the measured bandwidth ceiling.
    Perf,
    /// The GEMV of every weight matrix of a GGUF file (its first `--rows`
    /// rows) with a SiLU and a residual add, on every selected backend.
    Gguf,
    /// A stack of decode layers fused vs unfused: time and barriers per token
    /// (`--filter` picks one weight format, e.g. `q4_0`); `decode FILE`: the
    /// first `--layers` layers of a GGUF file, with its weights.
    Decode,
    /// `model FILE`: a Llama GGUF model through the example runtime
    /// (`fused-llama`) on every backend against an f64 reference forward
    /// pass: logits per teacher-forced step, greedy tokens across
    /// backends, and " Paris" after "The capital of France is".
    Model,
}

/// How the runtime's GEMVs take their activations (`model --mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Acts {
    /// f32 activations against the dequantized weights.
    F32,
    /// GGML's Q8 quantization of the activations, as llama.cpp's CPU path.
    Ggml,
}

/// `fused-verify`: checks every backend against the core reference and
/// fused against unfused, bit for bit; `perf` measures speed.
#[derive(Clone, Debug, Parser)]
#[command(name = "fused-verify", version, about)]
pub struct Cli {
    /// `test` (default), `perf`, `decode [FILE]`, `gguf FILE` or `model FILE`.
    #[arg(value_enum, default_value_t = Mode::Test)]
    pub mode: Mode,
    /// gguf, decode, model: the GGUF file.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// gguf: rows taken from each weight matrix.
    #[arg(long, default_value_t = 256)]
    pub rows: usize,
    /// gguf: also write, per tensor, every operand of `y = silu(W·x) + r`:
    /// the activations `DIR/<tensor>.x.npy`, the residual
    /// `DIR/<tensor>.r.npy` and each selected backend's output (the fused
    /// plan) `DIR/<tensor>.<backend>.y.npy` (little-endian f32 `.npy`),
    /// and `DIR/manifest.json`: per tensor the formula, weight format,
    /// shape, activation mode per backend, the files, and where W lies in
    /// FILE (W is not copied). Tensor names that are not plain file names
    /// are refused.
    #[arg(long, value_name = "DIR")]
    pub dump: Option<PathBuf>,
    /// Backends to run, matched by prefix (`cpu` = every CPU instruction
    /// set; `cpu-avx2`, `vulkan`, `cuda`); repeatable. Default: every
    /// backend, unavailable ones reported as skipped. A backend named here
    /// exactly that runs no case fails the run, as does a family (`cpu`)
    /// none of whose members runs one (members this machine cannot run are
    /// skipped), unless `--allow-skip`.
    #[arg(short, long)]
    pub backend: Vec<String>,
    /// Only cases whose id contains this text (ids look like
    /// `gemv/q4_0/63/63x96x2/silu+add/ggml/t2/finite/s1`).
    #[arg(short, long)]
    pub filter: Option<String>,
    /// Base seed of the inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Which case set.
    #[arg(long, value_enum, default_value_t = CaseSet::Quick)]
    pub cases: CaseSet,
    /// Also write the full report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// perf, decode: also draw the results as an SVG bar chart to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print the summary table as Markdown.
    #[arg(long)]
    pub markdown: bool,
    /// Do not fail when a requested backend runs no case.
    #[arg(long)]
    pub allow_skip: bool,
    /// Multiply every tolerance by this factor (0 demands exact agreement).
    #[arg(long, default_value_t = 1.0)]
    pub tolerance_scale: f64,
    /// Print every failed check (default: the first 20).
    #[arg(short, long)]
    pub verbose: bool,
    /// perf, decode: timed repetitions per plan (the median is reported).
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
    /// decode: layers in the stack.
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    /// perf, decode, model: worker threads (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// model: teacher-forced decode steps whose logits are checked.
    #[arg(long, default_value_t = 16)]
    pub steps: usize,
    /// model: greedy tokens compared across backends.
    #[arg(long, default_value_t = 32)]
    pub tokens: usize,
    /// model: the activation mode(s) the runtime runs in, repeatable
    /// (default: f32 and ggml).
    #[arg(long = "mode", value_enum, value_name = "MODE")]
    pub acts: Vec<Acts>,
}
