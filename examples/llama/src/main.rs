//! `fused-llama`: decodes a Llama-architecture GGUF model on a fused
//! backend (the CPU by default), streaming the text as it is generated.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use fused_core::acts::GemvMode;
use fused_core::backend::Backend;
use fused_llama::{DecodePath, LlamaError, LoadOptions, Model, ModelFile, Sampler, generate};

/// The model `scripts/fetch-model` caches.
const CACHED_MODEL: &str = ".models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Which backend runs the plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// fused-cpu (SIMD kernels, `--threads` threads).
    Cpu,
    /// fused-vulkan (needs the `vulkan` cargo feature and a Vulkan driver).
    Vulkan,
    /// fused-cuda (needs the `cuda` cargo feature and an NVIDIA GPU).
    Cuda,
}

/// How GEMVs take their activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// f32 activations against dequantized weights.
    F32,
    /// GGML's Q8 quantization of activations, as llama.cpp's CPU path.
    Ggml,
}

/// Decodes a Llama-architecture GGUF model through fused's plans.
#[derive(Debug, Parser)]
#[command(name = "fused-llama", version)]
struct Args {
    /// The GGUF model (default: the model `scripts/fetch-model` cached).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt (plain text; control tokens such as <|im_start|> are
    /// recognised).
    #[arg(long, default_value = "The capital of France is")]
    prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', default_value_t = 64)]
    n: usize,
    /// The backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    /// CPU threads (default: the available parallelism).
    #[arg(long)]
    threads: Option<usize>,
    /// The sampling seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Nucleus sampling: keep the most likely tokens up to this mass.
    #[arg(long = "top-p", default_value_t = 0.95)]
    top_p: f32,
    /// How GEMVs take their activations.
    #[arg(long, value_enum, default_value_t = Mode::Ggml)]
    mode: Mode,
    /// The most positions (capped by the model's context length).
    #[arg(long, default_value_t = fused_llama::config::DEFAULT_MAX_CONTEXT)]
    ctx: usize,
    /// Run every RMSNorm on the host instead of as the prologue of the
    /// GEMVs that read it (what a backend refusing the prologue gets).
    #[arg(long)]
    host_norm: bool,
    /// Run plans per layer with RoPE and attention on the host, instead of
    /// the whole token as one plan.
    #[arg(long)]
    layered: bool,
    /// Plan the whole token unfused: every element-wise op and norm its own
    /// launch (what fusion saves; built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long)]
    unfused: bool,
    /// Keep generating past the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Print the model, backend and plans on stderr before generating.
    #[arg(short, long)]
    verbose: bool,
    /// End stdout with one JSON line: prompt and generated ids, tok/s.
    #[arg(long)]
    json: bool,
    /// Measure the backend's copy bandwidth before and after decoding and
    /// report the decode speed as a fraction of its floor (the weight bytes
    /// a token reads at that bandwidth).
    #[arg(long)]
    floor: bool,

    /// Time every phase of every token (plans, host attention, RoPE, norms,
    /// sampling) and print where a token's time goes on stderr at the end
    #[arg(long)]
    profile: bool,
    /// After decoding, run the whole token once more launch by launch (a
    /// CUDA event, or a Vulkan barrier and timestamp, between every two)
    /// and print each kernel's share of its time on stderr (CUDA and
    /// Vulkan; built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long)]
    launch_profile: bool,
    /// After decoding, replay the whole token (a CUDA graph, a Vulkan
    /// command buffer) this many times with nothing left out, then without
    /// each kernel's launches in turn, then without every kernel that
    /// streams no weights, and print each median and what leaving it out
    /// saved on stderr: what each kernel costs the replayed token (CUDA and
    /// Vulkan; built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "RUNS")]
    leave_out_profile: Option<usize>,
    /// After decoding, run the whole token this many more times, each
    /// timed on the device (where the backend has a timer) and on the
    /// host, and print the medians (built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "RUNS")]
    token_timing: Option<usize>,
    /// Bytes of the next GEMV's weights each kernel between two GEMVs asks
    /// L2 for (CUDA: the lab's `Knob::L2BetweenBytes`; Vulkan: a read
    /// beside each of them, `Tuning::with_l2_between`; for A/B runs; built
    /// with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "BYTES")]
    l2_between: Option<usize>,
    /// How many GEMVs ahead the look-ahead may ask for once the next
    /// GEMV's weights are all asked for (CUDA: `Knob::L2Reach`; Vulkan:
    /// `Tuning::with_l2_reach`; for A/B runs; built with the `lab`
    /// feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "GEMVS")]
    l2_reach: Option<usize>,
    /// Invocations a workgroup of every activation quantizer, the norm
    /// quantizers among them, each with its default values per invocation
    /// (Vulkan: `Tuning::with_quantize_shape`; for A/B runs; built with
    /// the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "INVOCATIONS")]
    quantize_workgroup: Option<u32>,
    /// The workgroups the attention splits of a long context aim at
    /// (Vulkan only; `Tuning::with_attention_workgroups`, for A/B runs;
    /// built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "WORKGROUPS")]
    attention_workgroups: Option<usize>,
    /// Bytes of the next GEMV's weights each integer GEMV asks L2 for
    /// (CUDA only; `Knob::L2AheadBytes`, for A/B runs; built with the `lab`
    /// feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "BYTES")]
    l2_ahead: Option<usize>,
    /// Rows a block of the one-column integer GEMV kernels, 1, 2 or 4
    /// (CUDA only; `Knob::IntRows`, for A/B runs; built with the `lab`
    /// feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "ROWS")]
    int_rows: Option<usize>,
    /// Whether a one-column integer GEMV writes the next GEMV's quantized
    /// input itself, `on` or `off` (CUDA only; `Knob::FoldQuantizers`, for
    /// A/B runs; built with the `lab` feature).
    #[cfg(feature = "lab")]
    #[arg(long, value_name = "ON|OFF", value_parser = parse_on_off)]
    fold_quantizers: Option<bool>,
}

/// `on` or `off`, as a flag's value.
#[cfg(feature = "lab")]
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s}: expected on or off")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The model to load: `--model`, else the cached model in the working
/// directory or the workspace.
fn model_path(args: &Args) -> Result<PathBuf, LlamaError> {
    if let Some(p) = &args.model {
        return Ok(p.clone());
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    [PathBuf::from(CACHED_MODEL), workspace.join(CACHED_MODEL)]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| {
            LlamaError::Usage(format!(
                "no --model given and no cached model at {CACHED_MODEL}: run scripts/fetch-model"
            ))
        })
}

/// Builds the chosen backend and runs on it: the one place that names a
/// backend type.
fn run(args: &Args) -> Result<(), LlamaError> {
    #[cfg(feature = "lab")]
    if args.launch_profile && (args.backend == BackendKind::Cpu || args.layered) {
        return Err(LlamaError::Usage(
            "--launch-profile times the whole token on a GPU: --backend cuda or vulkan, \
             without --layered"
                .to_string(),
        ));
    }
    #[cfg(feature = "lab")]
    if args.leave_out_profile.is_some() && (args.backend == BackendKind::Cpu || args.layered) {
        return Err(LlamaError::Usage(
            "--leave-out-profile replays the whole token on a GPU: --backend cuda or vulkan, \
             without --layered"
                .to_string(),
        ));
    }
    match args.backend {
        BackendKind::Cpu => {
            let threads = args.threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            });
            let be = fused_cpu::CpuBackend::new(threads)
                .map_err(|e| LlamaError::backend("starting the CPU backend", e))?;
            run_on(&be, args, |_| Ok(()))
        }
        #[cfg(feature = "vulkan")]
        BackendKind::Vulkan => {
            #[allow(unused_mut)]
            let mut be = fused_vulkan::VulkanBackend::new()
                .map_err(|e| LlamaError::backend("opening a Vulkan device", e))?;
            #[cfg(feature = "lab")]
            {
                let mut tuning = be.tuning();
                if let Some(bytes) = args.l2_between {
                    tuning = tuning.with_l2_between(bytes as u64);
                }
                if let Some(reach) = args.l2_reach {
                    tuning = tuning.with_l2_reach(reach);
                }
                if let Some(workgroups) = args.attention_workgroups {
                    tuning = tuning.with_attention_workgroups(workgroups);
                }
                if let Some(workgroup) = args.quantize_workgroup {
                    use fused_core::acts::ActQuant;
                    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
                        let shape = fused_vulkan::QuantizeShape {
                            workgroup,
                            ..tuning.quantize_shape(mode)
                        };
                        tuning = tuning.with_quantize_shape(mode, shape);
                    }
                }
                be.set_tuning(tuning)
                    .map_err(|e| LlamaError::backend("a tuning flag", e))?;
            }
            run_on(&be, args, |_model| {
                #[cfg(feature = "lab")]
                print_profiles(args, || device_plan(_model), "a barrier and a timestamp")?;
                Ok(())
            })
        }
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => {
            let be = fused_cuda::CudaBackend::new()
                .map_err(|e| LlamaError::backend("opening a CUDA device", e))?;
            #[cfg(feature = "lab")]
            {
                use fused_cuda::Knob;
                let knobs = [
                    args.l2_between.map(Knob::L2BetweenBytes),
                    args.l2_reach.map(Knob::L2Reach),
                    args.l2_ahead.map(Knob::L2AheadBytes),
                    args.int_rows.map(Knob::IntRows),
                    args.fold_quantizers.map(Knob::FoldQuantizers),
                ];
                for knob in knobs.into_iter().flatten() {
                    let tuning = be.tuning().with(knob);
                    be.set_tuning(tuning.map_err(|e| LlamaError::backend("a tuning flag", e))?);
                }
            }
            run_on(&be, args, |_model| {
                #[cfg(feature = "lab")]
                print_profiles(args, || device_plan(_model), "an event")?;
                Ok(())
            })
        }
        #[allow(unreachable_patterns)]
        other => Err(LlamaError::Usage(format!(
            "--backend {}: built without its cargo feature (cargo run --release -p fused-llama \
             --features {0})",
            format!("{other:?}").to_lowercase()
        ))),
    }
}

/// Loads the model on `be`, generates, and reports; `after` reports what
/// only its backend can (before the JSON line).
fn run_on<B: Backend>(
    be: &B,
    args: &Args,
    after: impl FnOnce(&Model<'_, B>) -> Result<(), LlamaError>,
) -> Result<(), LlamaError> {
    let path = model_path(args)?;
    let opts = LoadOptions {
        mode: match args.mode {
            Mode::F32 => GemvMode::F32,
            Mode::Ggml => GemvMode::Ggml,
        },
        max_context: args.ctx,
        host_norm: args.host_norm,
        decode: if args.layered {
            DecodePath::Layered
        } else {
            DecodePath::WholeToken
        },
        #[cfg(feature = "lab")]
        unfused: args.unfused,
    };
    let t0 = std::time::Instant::now();
    let mut model = Model::load(ModelFile::open(&path)?, be, opts)?;
    let load = t0.elapsed();
    if args.verbose {
        let c = model.config();
        eprintln!(
            "model: {} — {} layers, hidden {}, FFN {}, {} heads / {} KV heads of {}, vocab {}",
            path.display(),
            c.n_layer,
            c.hidden,
            c.ffn,
            c.n_head,
            c.n_head_kv,
            c.head_dim,
            c.vocab
        );
        let formats: Vec<String> = model
            .weight_formats()
            .iter()
            .map(|(d, n)| format!("{n} {d}"))
            .collect();
        eprintln!("weights: {} matrices", formats.join(", "));
        eprintln!("backend: {}, mode {:?}", model.backend(), opts.mode);
        for (kind, why) in model.norm_fallbacks() {
            eprintln!("fallback: {kind}: the backend refused it: {why}");
        }
        if model.whole_token() {
            eprintln!("plan runs per token: 1 (the whole token)");
        } else {
            let (per_layer, head) = model.plan_runs();
            eprintln!("plan runs per token: {per_layer} per layer, {head} for the head");
        }
        for (name, s) in model.plan_summaries() {
            eprintln!(
                "plan {name}: {} kernel steps ({}), {} fused, {} with a norm prologue",
                s.kernel_steps,
                s.steps.join("; "),
                s.fused_steps,
                s.prologue_steps
            );
            for r in &s.refusals {
                eprintln!("  refused: {r}");
            }
            if s.host_steps {
                eprintln!(
                    "  runs step by step over host memory: the backend's device executor refused it"
                );
            }
        }
        eprintln!("loaded in {:.2} s", load.as_secs_f64());
    }
    let prompt = model.tokenizer().encode(&args.prompt)?;
    let copy_before = if args.floor {
        be.copy_bandwidth_gbs()
    } else {
        None
    };
    if args.profile {
        model.profile_tokens();
    }
    let mut sampler = Sampler::new(args.temp, args.top_p, args.seed);
    let mut out = std::io::stdout().lock();
    // The prompt is echoed with the first generated text, once the run is
    // known to fit the context.
    let mut echo = Some(args.prompt.as_str());
    let g = generate(
        &mut model,
        &prompt,
        args.n,
        &mut sampler,
        !args.ignore_eos,
        |text| {
            let _ = write!(out, "{}{text}", echo.take().unwrap_or_default());
            let _ = out.flush();
        },
    )?;
    let _ = writeln!(out, "{}", echo.take().unwrap_or_default());
    eprintln!(
        "prompt: {} tokens, {:.1} tok/s; decode: {} tokens, {:.1} tok/s ({})",
        g.prompt_ids.len(),
        g.prompt_tok_s(),
        g.ids.len(),
        g.decode_tok_s(),
        model.backend()
    );
    let copy_after = if args.floor {
        be.copy_bandwidth_gbs()
    } else {
        None
    };
    let bytes = model.weight_bytes_per_token();
    // The slower probe bounds the floor from above, the honest side.
    let copy = match (copy_before, copy_after) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let floor_tok_s = copy.map(|gbs| gbs * 1e9 / bytes as f64);
    if let Some(floor) = floor_tok_s {
        eprintln!(
            "floor: {:.1} MB a token at {:.0} GB/s (copy before {}, after {}) = {floor:.1} tok/s; \
             decode at {:.1} % of it",
            bytes as f64 / 1e6,
            copy.unwrap_or(0.0),
            fmt_gbs(copy_before),
            fmt_gbs(copy_after),
            100.0 * g.decode_tok_s() / floor
        );
    } else if args.floor {
        eprintln!("floor: {} has no copy-bandwidth probe", be.name());
    }
    if let Some(n) = model.launches_per_token() {
        eprintln!("launches a token: {n}");
    }
    if let Some(p) = model.profile() {
        eprintln!("where a token's time goes (prompt and decode tokens, host clock):\n{p}");
    }
    #[cfg(feature = "lab")]
    if let Some(runs) = args.token_timing {
        print_token_timing(&mut model, runs)?;
    }
    after(&model)?;
    if args.json {
        let j = serde_json::json!({
            "prompt_ids": g.prompt_ids,
            "ids": g.ids,
            "prompt_tok_s": g.prompt_tok_s(),
            "decode_tok_s": g.decode_tok_s(),
            "whole_token": model.whole_token(),
            "launches_per_token": model.launches_per_token(),
            "weight_bytes_per_token": bytes,
            "copy_gbs_before": copy_before,
            "copy_gbs_after": copy_after,
            "floor_tok_s": floor_tok_s,
        });
        let _ = writeln!(out, "{j}");
    }
    Ok(())
}

/// The device plan of the model's whole token.
#[cfg(all(any(feature = "cuda", feature = "vulkan"), feature = "lab"))]
fn device_plan<'m, 'b, B, P>(model: &'m Model<'b, B>) -> Result<&'m P, LlamaError>
where
    B: Backend<Plan<'b> = fused_core::backend::Resident<'b, P, B>>,
    P: fused_core::backend::ResidentPlan + 'b,
{
    let plan = model.token_plan().ok_or_else(|| {
        LlamaError::Usage("--launch-profile: the model runs no whole-token plan".to_string())
    })?;
    match plan {
        fused_core::backend::Resident::Device(plan) => Ok(plan),
        _ => Err(LlamaError::Usage(
            "--launch-profile: the token runs step by step over host memory".to_string(),
        )),
    }
}

/// The lab's profiles of the whole token after decoding, as the flags ask:
/// launch by launch (`between`: what separates every two launches), then
/// leaving each kernel out in turn; `plan` is only looked up when one is
/// asked for.
#[cfg(all(any(feature = "cuda", feature = "vulkan"), feature = "lab"))]
fn print_profiles<'p, P>(
    args: &Args,
    plan: impl FnOnce() -> Result<&'p P, LlamaError>,
    between: &str,
) -> Result<(), LlamaError>
where
    P: fused_core::launch_profile::LaunchProfiler + 'p,
    P::Error: std::fmt::Display,
{
    if !args.launch_profile && args.leave_out_profile.is_none() {
        return Ok(());
    }
    let plan = plan()?;
    if args.launch_profile {
        let launches = plan
            .profile_launches()
            .map_err(|e| LlamaError::backend("timing the token launch by launch", e))?;
        print_launch_profile(&launches, between);
    }
    if let Some(runs) = args.leave_out_profile {
        let times = plan
            .profile_leaving_out(runs.max(1))
            .map_err(|e| LlamaError::backend("timing the token leaving kernels out", e))?;
        print_leave_out_profile(&times);
    }
    Ok(())
}

/// Prints each kernel's share of a token run launch by launch (`between`:
/// what separated every two launches), the kernel with the most first.
#[cfg(all(any(feature = "cuda", feature = "vulkan"), feature = "lab"))]
fn print_launch_profile(launches: &[fused_core::launch_profile::LaunchTime], between: &str) {
    let total: f64 = launches.iter().map(|l| f64::from(l.ms)).sum();
    eprintln!(
        "launch profile: {} launches, {:.1} us in all ({between} between every two: no overlap)",
        launches.len(),
        total * 1e3
    );
    eprintln!(
        "{:>10} {:>6} {:>8} {:>7}  kernel",
        "us", "%", "launches", "GB/s"
    );
    for t in fused_core::launch_profile::kernel_totals(launches) {
        eprintln!(
            "{:>10.1} {:>6.1} {:>8} {:>7}  {}",
            t.ms * 1e3,
            100.0 * t.ms / total.max(f64::MIN_POSITIVE),
            t.launches,
            t.weight_gbs()
                .map_or_else(|| "-".to_string(), |g| format!("{g:.0}")),
            t.kernel
        );
    }
}

/// Prints a leave-out profile: each replay's median and what leaving its
/// launches out saved against the full token.
#[cfg(all(any(feature = "cuda", feature = "vulkan"), feature = "lab"))]
fn print_leave_out_profile(times: &[fused_core::launch_profile::LeftOutTime]) {
    let Some(full) = times.first() else { return };
    eprintln!(
        "leave-out profile: the token replayed in {:.1} us with nothing left out",
        full.ms * 1e3
    );
    eprintln!("{:>10} {:>8} {:>8}  left out", "us", "saved", "launches");
    for t in &times[1..] {
        eprintln!(
            "{:>10.1} {:>8.1} {:>8}  {}",
            t.ms * 1e3,
            (full.ms - t.ms) * 1e3,
            t.launches,
            t.left_out
        );
    }
}

/// Times `runs` more runs of the whole token and prints the medians.
#[cfg(feature = "lab")]
fn print_token_timing<B: Backend>(model: &mut Model<'_, B>, runs: usize) -> Result<(), LlamaError> {
    let Some(t) = model.time_token(runs.max(1))? else {
        return Err(LlamaError::Usage(
            "--token-timing times the whole-token plan: drop --layered".to_string(),
        ));
    };
    let median = |mut v: Vec<std::time::Duration>| {
        v.sort();
        v.get(v.len() / 2).map(|d| d.as_secs_f64() * 1e6)
    };
    let device = median(t.iter().filter_map(|x| x.device).collect());
    let wall = median(t.iter().map(|x| x.wall).collect());
    eprintln!(
        "token timing: {} runs, device median {} us, host median {} us",
        t.len(),
        device.map_or_else(|| "-".to_string(), |d| format!("{d:.1}")),
        wall.map_or_else(|| "-".to_string(), |w| format!("{w:.1}"))
    );
    Ok(())
}

/// A bandwidth for a report, or a dash.
fn fmt_gbs(g: Option<f64>) -> String {
    g.map_or_else(|| "-".to_string(), |g| format!("{g:.0}"))
}
