//! Running the `model` mode: the reference's decoding of the prompt, then
//! on every selected backend and activation mode the runtime's
//! teacher-forced logits and greedy tokens, checked and reported.

use std::path::Path;
use std::time::Instant;

use fused_core::acts::GemvMode;
use fused_core::backend::Backend as CoreBackend;
use fused_cpu::Isa;
use fused_llama::{LlamaError, LoadOptions, Model, ModelFile, Tokenizer};

use crate::backend::{family_errors, named, registry, selected};
use crate::cli::{Acts, Cli};
use crate::verify::Outcome;

use super::checks::{
    PARIS, check_logits, first_divergence, judge, says_paris, threshold, top2_margin,
};
use super::config::Hyper;
use super::decoding::{Greedy, forced_and_greedy, greedy, logits_after};
use super::error::ModelError;
use super::reference::Reference;
use super::report::{BackendRun, ModelCheck, ModelReport, ReferenceRun};

/// The prompt of every check.
pub const PROMPT: &str = "The capital of France is";

/// The checks each backend runs per activation mode.
const CHECKS: [&str; 3] = ["logits", "greedy", "paris"];

/// What every backend run is checked against.
struct Ctx<'a> {
    path: &'a Path,
    reference: Reference,
    tokenizer: Tokenizer,
    prompt: Vec<u32>,
    /// The reference's greedy decoding, `max(steps, tokens)` long.
    greedy: Greedy,
    steps: usize,
    tokens: usize,
    modes: Vec<GemvMode>,
    /// CPU threads (the reference's and the CPU backend's).
    threads: usize,
}

/// The first backend's run in one mode, which the others' greedy tokens
/// are compared with.
struct First {
    mode: GemvMode,
    backend: String,
    tokens: Vec<u32>,
    max_abs: f64,
}

/// The activation mode's name in reports.
fn mode_name(m: GemvMode) -> &'static str {
    match m {
        GemvMode::F32 => "f32",
        GemvMode::Ggml => "ggml",
    }
}

/// Opens the model file; a missing file is [`ModelError::Io`].
fn open(path: &Path) -> Result<ModelFile, ModelError> {
    ModelFile::open(path).map_err(|e| match e {
        LlamaError::Io { path, source } => ModelError::Io { path, source },
        other => ModelError::runtime("opening the model", other),
    })
}

/// `text` shortened to about `n` characters, escaped for one line.
fn excerpt(text: &str, n: usize) -> String {
    let mut s: String = text.chars().take(n).collect();
    if text.chars().count() > n {
        s.push('…');
    }
    format!("\"{}\"", s.escape_debug())
}

/// The f64 reference of the Llama GGUF file at `path` (its products on
/// `threads` threads) and the file's tokenizer: a missing file is
/// [`ModelError::Io`], another architecture [`ModelError::NotLlama`].
pub fn load_reference(path: &Path, threads: usize) -> Result<(Reference, Tokenizer), ModelError> {
    let file = open(path)?;
    let g = file.parse().map_err(|e| match e {
        LlamaError::Gguf(e) => ModelError::Gguf(e),
        other => ModelError::runtime("reading the file", other),
    })?;
    let h = Hyper::from_gguf(&g)?;
    let tokenizer = Tokenizer::from_gguf(&g, h.vocab)
        .map_err(|e| ModelError::runtime("reading the tokenizer", e))?;
    Ok((Reference::load(&g, threads)?, tokenizer))
}

/// Runs the `model FILE` mode and returns the report (printing as it goes
/// when `print` is set).
pub fn run_model(cli: &Cli, print: bool) -> ModelReport {
    let mut report = ModelReport {
        schema: "fused-verify/model/1",
        prompt: PROMPT.to_string(),
        steps: cli.steps,
        tokens: cli.tokens,
        ..ModelReport::default()
    };
    let result = match cli.file.as_deref() {
        None => Err("`model` needs a FILE (a Llama GGUF model)".to_string()),
        Some(path) => {
            report.file = path.display().to_string();
            prepare(path, cli, print, &mut report)
                .map(|ctx| run_backends(&ctx, cli, print, &mut report))
                .map_err(|e| match e {
                    // Its message starts with the path already.
                    ModelError::Io { .. } => e.to_string(),
                    e => format!("{}: {e}", path.display()),
                })
        }
    };
    if let Err(e) = result {
        if print {
            println!("FAIL {e}");
        }
        report.errors.push(e);
    }
    report.tally();
    if print && !report.checks.is_empty() {
        println!("== summary");
        print!("{}", report.table());
    }
    report
}

/// Reads the file, builds the reference, and decodes the prompt with it.
fn prepare<'a>(
    path: &'a Path,
    cli: &Cli,
    print: bool,
    report: &mut ModelReport,
) -> Result<Ctx<'a>, ModelError> {
    if cli.steps == 0 || cli.tokens == 0 {
        return Err(ModelError::Usage(
            "--steps and --tokens must be at least 1".into(),
        ));
    }
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let t0 = Instant::now();
    let (reference, tokenizer) = load_reference(path, threads)?;
    let load_s = t0.elapsed().as_secs_f64();
    let h = reference.hyper().clone();
    let prompt = tokenizer
        .encode(PROMPT)
        .map_err(|e| ModelError::runtime("encoding the prompt", e))?;
    report.prompt_ids = prompt.clone();
    if print {
        let formats: Vec<String> = reference
            .weights()
            .formats
            .iter()
            .map(|(f, n)| format!("{n} {f}"))
            .collect();
        println!(
            "== model {}: llama, {} layers, hidden {}, FFN {}, {} heads / {} KV heads of {}, \
             vocab {}; {} matrices",
            path.display(),
            h.n_layer,
            h.hidden,
            h.ffn,
            h.n_head,
            h.n_head_kv,
            h.head_dim,
            h.vocab,
            formats.join(", ")
        );
    }
    let modes: Vec<GemvMode> = if cli.acts.is_empty() {
        vec![GemvMode::F32, GemvMode::Ggml]
    } else {
        let mut m: Vec<GemvMode> = Vec::new();
        for a in &cli.acts {
            let mode = match a {
                Acts::F32 => GemvMode::F32,
                Acts::Ggml => GemvMode::Ggml,
            };
            if !m.contains(&mode) {
                m.push(mode);
            }
        }
        m
    };
    let n = cli.steps.max(cli.tokens);
    let t1 = Instant::now();
    let decoded = greedy(&mut &reference, &prompt, n)?;
    let decode_s = t1.elapsed().as_secs_f64();
    let text = tokenizer
        .decode(&decoded.tokens)
        .map_err(|e| ModelError::runtime("decoding the reference's tokens", e))?;
    let margins: Vec<f64> = decoded.logits.iter().map(|l| top2_margin(l)).collect();
    if print {
        println!(
            "== reference (f64, weights dequantized in {load_s:.1} s): prompt {} \
             ({} tokens), {n} greedy tokens in {decode_s:.1} s: {}",
            excerpt(PROMPT, 60),
            prompt.len(),
            excerpt(&text, 60)
        );
    }
    let paris = says_paris(&text);
    push(
        report,
        print,
        ModelCheck {
            backend: "reference".into(),
            mode: "f64",
            check: "paris",
            outcome: if paris { Outcome::Pass } else { Outcome::Fail },
            detail: format!(
                "{} {PARIS:?} (first token {}, margin {:.2})",
                if paris {
                    "continues with"
                } else {
                    "does not continue with"
                },
                decoded.tokens.first().copied().unwrap_or_default(),
                margins.first().copied().unwrap_or(f64::NAN)
            ),
        },
    );
    report.reference = Some(ReferenceRun {
        tokens: decoded.tokens.clone(),
        text,
        margins,
        load_s,
        decode_s,
    });
    Ok(Ctx {
        path,
        reference,
        tokenizer,
        prompt,
        greedy: decoded,
        steps: cli.steps,
        tokens: cli.tokens,
        modes,
        threads,
    })
}

/// Records a check (and prints it when `print`).
fn push(report: &mut ModelReport, print: bool, c: ModelCheck) {
    if print {
        println!("{}", c.line());
    }
    report.checks.push(c);
}

/// Every check of `backend` in every mode, counted as skipped for `why`;
/// an error too when `--backend` named it exactly (unless `--allow-skip`).
fn skip(ctx: &Ctx<'_>, cli: &Cli, backend: &str, why: &str, print: bool, report: &mut ModelReport) {
    if print {
        println!("SKIP {backend}: {why}");
    }
    for &mode in &ctx.modes {
        for check in CHECKS {
            report.checks.push(ModelCheck {
                backend: backend.to_string(),
                mode: mode_name(mode),
                check,
                outcome: Outcome::Skip,
                detail: why.to_string(),
            });
        }
    }
    if named(backend, &cli.backend) && !cli.allow_skip {
        let e = format!("backend {backend} ran no check ({why}); pass --allow-skip to accept");
        if print {
            println!("FAIL {e}");
        }
        report.errors.push(e);
    }
}

/// The CPU instruction sets to run: each one `--backend` names exactly
/// (`cpu-avx2`), else the best one this machine has that the patterns
/// select (all of them when there is none).
fn cpu_isas(cli: &Cli) -> Vec<Isa> {
    let name = |i: &Isa| format!("cpu-{}", i.name());
    let named_isas: Vec<Isa> = Isa::ALL
        .into_iter()
        .filter(|i| named(&name(i), &cli.backend))
        .collect();
    if !named_isas.is_empty() {
        return named_isas;
    }
    Isa::available()
        .filter(|i| selected(&name(i), &cli.backend))
        .last()
        .into_iter()
        .collect()
}

/// Opens each backend this build has (the CPU, Vulkan, CUDA) that
/// `--backend` selects and runs it; then fails each `--backend` family
/// none of whose members ran (unless `--allow-skip`).
fn run_backends(ctx: &Ctx<'_>, cli: &Cli, print: bool, report: &mut ModelReport) {
    let mut firsts: Vec<First> = Vec::new();
    for isa in cpu_isas(cli) {
        let name = format!("cpu-{}", isa.name());
        if !isa.is_supported() {
            let why = format!("this CPU lacks {isa} (best: {})", Isa::detect());
            skip(ctx, cli, &name, &why, print, report);
            continue;
        }
        match fused_cpu::CpuBackend::with_isa(isa, ctx.threads) {
            Ok(be) => run_backend(&be, ctx, &mut firsts, print, report),
            Err(e) => skip(ctx, cli, &name, &e.to_string(), print, report),
        }
    }
    if selected("vulkan", &cli.backend) {
        #[cfg(feature = "vulkan")]
        match crate::backend::open_vulkan() {
            Ok(be) => run_backend(&be, ctx, &mut firsts, print, report),
            Err(why) => skip(ctx, cli, "vulkan", &why, print, report),
        }
        #[cfg(not(feature = "vulkan"))]
        skip(
            ctx,
            cli,
            "vulkan",
            "built without the `vulkan` feature",
            print,
            report,
        );
    }
    if selected("cuda", &cli.backend) {
        #[cfg(feature = "cuda")]
        match fused_cuda::CudaBackend::new() {
            Ok(be) => run_backend(&be, ctx, &mut firsts, print, report),
            Err(e) => skip(ctx, cli, "cuda", &e.to_string(), print, report),
        }
        #[cfg(not(feature = "cuda"))]
        skip(
            ctx,
            cli,
            "cuda",
            "built without the `cuda` feature (opt-in)",
            print,
            report,
        );
    }
    // Exact names are reported by `skip`: every CPU instruction set's too.
    let names: Vec<String> = registry()
        .iter()
        .map(|b| b.name().to_string())
        .chain(Isa::ALL.iter().map(|i| format!("cpu-{}", i.name())))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let ran: Vec<&str> = report.runs.iter().map(|r| r.backend.as_str()).collect();
    let errors = family_errors(cli, &names, &ran);
    for e in errors {
        if print {
            println!("FAIL {e}");
        }
        report.errors.push(e);
    }
}

/// The runtime on `be` in every mode: load, run, check.
fn run_backend<B: CoreBackend>(
    be: &B,
    ctx: &Ctx<'_>,
    firsts: &mut Vec<First>,
    print: bool,
    report: &mut ModelReport,
) {
    let name = be.name();
    if print {
        println!("on   {name}: {}", be.device());
    }
    let mut seen_messages = be.messages().map_or(0, |m| m.len());
    for &mode in &ctx.modes {
        let m = mode_name(mode);
        let t0 = Instant::now();
        let loaded = open(ctx.path).and_then(|file| {
            let opts = LoadOptions {
                mode,
                max_context: ctx.prompt.len() + ctx.steps.max(ctx.tokens) + 1,
                ..LoadOptions::default()
            };
            Model::load(file, be, opts)
                .map_err(|e| ModelError::runtime(format!("loading the model onto {name}"), e))
        });
        let load_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let paths = loaded.and_then(|mut model| {
            if print {
                match model.whole_token_refusal() {
                    None if model.whole_token() => {
                        println!("on   {name} {m}: the whole token as one plan")
                    }
                    Some(why) => println!("on   {name} {m}: the layered path ({why})"),
                    None => println!("on   {name} {m}: the layered path"),
                }
            }
            forced_and_greedy(
                &mut model,
                &ctx.prompt,
                &ctx.greedy.tokens,
                ctx.steps,
                ctx.tokens,
            )
        });
        let run_s = t1.elapsed().as_secs_f64();
        if let Some(all) = be.messages() {
            let new = all.get(seen_messages..).unwrap_or_default();
            if let Some(first) = new.first() {
                let e = format!(
                    "{name} {m}: the validation layer reported {} message(s), the first: {first}",
                    new.len()
                );
                if print {
                    println!("FAIL {e}");
                }
                report.errors.push(e);
            }
            seen_messages = all.len();
        }
        let paths = match paths {
            Ok(p) => p,
            Err(e) => {
                for check in CHECKS {
                    push(
                        report,
                        print,
                        ModelCheck {
                            backend: name.clone(),
                            mode: m,
                            check,
                            outcome: Outcome::Fail,
                            detail: e.to_string(),
                        },
                    );
                }
                continue;
            }
        };
        let limit = threshold(mode);
        let want = &ctx.greedy.logits[..ctx.steps];
        let logits = check_logits(&paths.forced, want, limit);
        let per_step: Vec<String> = logits.nmse.iter().map(|v| format!("{v:.1e}")).collect();
        push(
            report,
            print,
            ModelCheck {
                backend: name.clone(),
                mode: m,
                check: "logits",
                outcome: if logits.ok {
                    Outcome::Pass
                } else {
                    Outcome::Fail
                },
                detail: format!(
                    "{} steps, NMSE mean {:.2e} (limit {:.0e}), worst {:.2e} (limit {:.0e}), \
                     max |Δ| {:.2e}; per step {}",
                    logits.nmse.len(),
                    logits.mean,
                    limit.mean,
                    logits.worst,
                    limit.step,
                    logits.max_abs,
                    per_step.join(" ")
                ),
            },
        );
        let err = if logits.max_abs.is_finite() {
            logits.max_abs
        } else {
            f64::INFINITY
        };
        let (divergence, greedy_check) = greedy_verdict(ctx, firsts, mode, &paths.greedy, err);
        let greedy_check = ModelCheck {
            backend: name.clone(),
            mode: m,
            ..greedy_check
        };
        push(report, print, greedy_check);
        let text = ctx.tokenizer.decode(&paths.greedy);
        let (ok, detail) = match &text {
            Ok(t) if says_paris(t) => (
                true,
                format!("continues with {PARIS:?}: {}", excerpt(t, 40)),
            ),
            Ok(t) => (
                false,
                format!("continues with {}, not {PARIS:?}", excerpt(t, 40)),
            ),
            Err(e) => (false, format!("its tokens do not decode: {e}")),
        };
        push(
            report,
            print,
            ModelCheck {
                backend: name.clone(),
                mode: m,
                check: "paris",
                outcome: if ok { Outcome::Pass } else { Outcome::Fail },
                detail,
            },
        );
        if !firsts.iter().any(|f| f.mode == mode) {
            firsts.push(First {
                mode,
                backend: name.clone(),
                tokens: paths.greedy.clone(),
                max_abs: err,
            });
        }
        report.runs.push(BackendRun {
            backend: name.clone(),
            device: be.device(),
            mode: m,
            nmse: logits.nmse,
            mean: logits.mean,
            worst: logits.worst,
            threshold: limit,
            max_abs: logits.max_abs,
            greedy: paths.greedy,
            text: text.unwrap_or_default(),
            divergence,
            passes: paths.passes,
            load_s,
            run_s,
        });
    }
}

/// The greedy check of `ours` (a backend's tokens in `mode`, its logits
/// error `err`): against the first backend's tokens in that mode, or the
/// reference's when it is the first. The check's backend and mode are
/// left for the caller to fill.
fn greedy_verdict(
    ctx: &Ctx<'_>,
    firsts: &[First],
    mode: GemvMode,
    ours: &[u32],
    err: f64,
) -> (Option<super::checks::Divergence>, ModelCheck) {
    let (other, theirs, err_theirs) = match firsts.iter().find(|f| f.mode == mode) {
        Some(f) => (f.backend.as_str(), f.tokens.as_slice(), f.max_abs),
        None => ("the reference", &ctx.greedy.tokens[..ctx.tokens], 0.0),
    };
    let check = |outcome, detail| ModelCheck {
        backend: String::new(),
        mode: "",
        check: "greedy",
        outcome,
        detail,
    };
    let Some(at) = first_divergence(ours, theirs) else {
        return (
            None,
            check(
                Outcome::Pass,
                format!("{} tokens equal to {other}'s", ours.len()),
            ),
        );
    };
    let prefix = &ours[..at];
    let reference = if ctx.greedy.tokens.get(..at) == Some(prefix) {
        Ok(ctx.greedy.logits[at].clone())
    } else {
        logits_after(&mut &ctx.reference, &ctx.prompt, prefix)
    };
    let reference = match reference {
        Ok(r) => r,
        Err(e) => {
            return (
                None,
                check(
                    Outcome::Fail,
                    format!("parts from {other}'s at token {at}; the reference there: {e}"),
                ),
            );
        }
    };
    let d = judge(at, &reference, ours[at], theirs[at], err, err_theirs);
    let piece = |t: u32| {
        ctx.tokenizer
            .decode(&[t])
            .map_or_else(|_| String::new(), |s| excerpt(&s, 12))
    };
    let detail = format!(
        "parts from {other}'s at token {at} ({} {} here, {} {} there); the reference's \
         top-1 − top-2 margin there {:.3}, the lower pick {:.3} below its top; {} \
         2 × measured |Δ| {:.3}{}",
        d.ours,
        piece(d.ours),
        d.theirs,
        piece(d.theirs),
        d.margin,
        d.gap,
        if d.tie { "within" } else { "beyond" },
        d.tolerance,
        if d.tie { ": a tie, reported" } else { "" }
    );
    let outcome = if d.tie { Outcome::Pass } else { Outcome::Fail };
    (Some(d), check(outcome, detail))
}
