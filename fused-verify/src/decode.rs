//! Transformer decode layers as a core graph, and the `decode` mode: a
//! stack of layers run fused and unfused on each backend, checked bit for
//! bit against each other, timed per token, kernel launches and barriers
//! per token (as the timed executor counts them). GGML's activation mode,
//! or f32 activations on a backend without a kernel for GGML's quantized
//! ones for that format (the row's `acts` says which).
//!
//! One layer: `h += W_o · attn(h)`; `h += W_d · (silu(W_g · n) ⊙ (W_u · n))`
//! with `n = norm(h)`; `h += W_r · H(norm(h) ⊙ signs)` (a Hadamard-rotated
//! projection). Attention and the norms are opaque ops the planner does not
//! fuse; the residual stream is updated in place. The planner fuses five
//! steps per layer: the three residual projections with their adds, the
//! GLU, and the signed FWHT.
//!
//! Weights: random ([`build_stack`], one stack per format), or those of a
//! GGUF file (`decode FILE`, [`GgufWeights`]): per layer `blk.N.attn_output`,
//! `blk.N.ffn_gate`, `blk.N.ffn_up` and `blk.N.ffn_down` in their stored
//! formats, the hidden and FFN sizes from `blk.0.ffn_gate` (`ne[0]`, `ne[1]`).
//! A GGUF file has no rotated projection: the stack reuses `attn_output`
//! (same shape) for it, and leaves the rotation out (with a printed note)
//! when the hidden size is not a power of two. Both build the same graph.

use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{DType, Error};

use std::path::Path;

use crate::backend::{
    Backend, RunConfig, RunError, finish_errors, registry, selected, skip_unavailable,
};
use crate::cases::Rng;
use crate::cli::Cli;
use crate::gguf;
use crate::metrics;
use crate::perf::median;

/// A stack of decode layers with its inputs.
#[derive(Debug)]
pub struct DecodeStack {
    /// The graph.
    pub graph: Graph,
    /// Weights (buffer 0), activations (buffer 1), the never-read Hadamard
    /// weight (buffer 2).
    pub mem: Memory,
    /// The residual stream after the last layer.
    pub out: NodeId,
}

/// One weight matrix of a decode layer, by what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `W_o`, hidden × hidden: the attention output projection.
    AttnOutput,
    /// `W_g`, FFN × hidden: the GLU's gate.
    FfnGate,
    /// `W_u`, FFN × hidden: the GLU's up projection.
    FfnUp,
    /// `W_d`, hidden × FFN: the FFN's down projection.
    FfnDown,
    /// `W_r`, hidden × hidden: the projection after the Hadamard rotation.
    Rotated,
}

impl Role {
    /// The roles a GGUF file provides, in the order a layer uses them.
    pub const FROM_FILE: [Role; 4] = [Role::AttnOutput, Role::FfnGate, Role::FfnUp, Role::FfnDown];

    /// `(k, m)`: row length and rows, for hidden size `h` and FFN size `f`.
    pub fn shape(self, h: usize, f: usize) -> (usize, usize) {
        match self {
            Role::AttnOutput | Role::Rotated => (h, h),
            Role::FfnGate | Role::FfnUp => (h, f),
            Role::FfnDown => (f, h),
        }
    }

    /// The GGML name of its tensor in layer `layer`. A GGUF file has no
    /// rotated projection: it reuses `attn_output`, of the same shape.
    pub fn ggml_name(self, layer: usize) -> String {
        let what = match self {
            Role::AttnOutput | Role::Rotated => "attn_output",
            Role::FfnGate => "ffn_gate",
            Role::FfnUp => "ffn_up",
            Role::FfnDown => "ffn_down",
        };
        format!("blk.{layer}.{what}.weight")
    }
}

/// A weight matrix: its format and its packed rows.
pub type PackedWeight = (DType, Vec<u8>);

/// `m` rows of `k` random values of `dtype`, small enough to keep the
/// residual stream in range over many layers.
fn random_weight(dtype: DType, k: usize, m: usize, rng: &mut Rng) -> Result<PackedWeight, Error> {
    let rb = dtype.row_bytes(k)?;
    let mut bytes = vec![0u8; rb * m];
    let scale = 1.0 / (k as f32).sqrt();
    for row in bytes.chunks_exact_mut(rb) {
        let v: Vec<f32> = rng.vec(k).iter().map(|x| x * scale).collect();
        quantize_row(dtype, &v, row)?;
    }
    Ok((dtype, bytes))
}

/// `layers` decode layers of hidden size `h` and FFN size `f` with random
/// weights of `dtype`; `h` and `f` must be whole blocks of `dtype` and `h` a
/// power of two (the Hadamard rotation spans the hidden vector).
pub fn build_stack(
    dtype: DType,
    layers: usize,
    h: usize,
    f: usize,
    seed: u64,
) -> Result<DecodeStack, Error> {
    build_graph(layers, h, f, true, seed, |_, role, rng| {
        let (k, m) = role.shape(h, f);
        random_weight(dtype, k, m, rng)
    })
}

/// The stack of the graph: `layers` layers, each weight matrix from
/// `weight(layer, role, rng)`; the rotated projection (and its Hadamard
/// step) only where `rotate`. The residual input and the signs are random
/// from `seed`.
fn build_graph(
    layers: usize,
    h: usize,
    f: usize,
    rotate: bool,
    seed: u64,
    mut weight: impl FnMut(usize, Role, &mut Rng) -> Result<PackedWeight, Error>,
) -> Result<DecodeStack, Error> {
    let mut rng = Rng::new(seed);
    let mut g = Graph::new();
    let (mut wnext, mut anext) = (0usize, 0usize);
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).div_ceil(64) * 64;
        p
    };
    let mut weight_input = |g: &mut Graph,
                            layer: usize,
                            role: Role,
                            rng: &mut Rng,
                            inits: &mut Vec<(TensorDesc, Vec<u8>)>|
     -> Result<NodeId, Error> {
        let (k, m) = role.shape(h, f);
        let (dtype, bytes) = weight(layer, role, rng)?;
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext)?;
        wnext += bytes.len().div_ceil(64) * 64;
        inits.push((t, bytes));
        g.input(t)
    };
    let f32_input = |g: &mut Graph,
                     p: Place,
                     v: Vec<f32>,
                     inits: &mut Vec<(TensorDesc, Vec<u8>)>|
     -> Result<NodeId, Error> {
        let t = TensorDesc::contiguous(DType::F32, [v.len(), 1, 1, 1], p.buffer, p.offset)?;
        inits.push((t, v.iter().flat_map(|x| x.to_le_bytes()).collect()));
        g.input(t)
    };
    let residual = act(h);
    let mut cur = f32_input(&mut g, residual, rng.vec(h), &mut inits)?;
    let had = if rotate {
        Some(g.input(TensorDesc::strided(
            DType::F32,
            [h, h, 1, 1],
            [4, 0, 0, 0],
            BufferId(2),
            0,
        )?)?)
    } else {
        None
    };
    let vec = [h, 1, 1, 1];
    for l in 0..layers {
        let mut w = |role| weight_input(&mut g, l, role, &mut rng, &mut inits);
        let w_o = w(Role::AttnOutput)?;
        let w_g = w(Role::FfnGate)?;
        let w_u = w(Role::FfnUp)?;
        let w_d = w(Role::FfnDown)?;
        let rotated = match had {
            Some(had) => {
                let w_r = w(Role::Rotated)?;
                let signs: Vec<f32> = (0..h)
                    .map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
                    .collect();
                Some((had, w_r, f32_input(&mut g, act(h), signs, &mut inits)?))
            }
            None => None,
        };
        let attn = g.other("attention", &[cur], vec, act(h))?;
        let o = g.mul_mat(w_o, attn, act(h))?;
        let h1 = g.add(o, cur, residual)?;
        let norm = g.other("rms_norm", &[h1], vec, act(h))?;
        let gate = g.mul_mat(w_g, norm, act(f))?;
        let up = g.mul_mat(w_u, norm, act(f))?;
        let a = g.glu(Activation::Silu, gate, up, act(f))?;
        let down = g.mul_mat(w_d, a, act(h))?;
        let h2 = g.add(down, h1, residual)?;
        cur = h2;
        if let Some((had, w_r, signs)) = rotated {
            let norm2 = g.other("rms_norm", &[h2], vec, act(h))?;
            let signed = g.mul(norm2, signs, act(h))?;
            let rot = g.mul_mat_hadamard(had, signed, act(h))?;
            let proj = g.mul_mat(w_r, rot, act(h))?;
            cur = g.add(proj, h2, residual)?;
        }
    }
    g.mark_output(cur)?;
    let mut mem = Memory::new(&[wnext.max(64), anext, 4 * h]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    Ok(DecodeStack {
        graph: g,
        mem,
        out: cur,
    })
}

/// The weights of a decode stack read from a GGUF file: per layer
/// `blk.N.attn_output`, `blk.N.ffn_gate`, `blk.N.ffn_up`, `blk.N.ffn_down`
/// in their stored formats (the rotated projection reuses `attn_output`).
#[derive(Clone, Debug)]
pub struct GgufWeights {
    /// Hidden size: `ne[0]` of `blk.0.ffn_gate.weight`.
    pub hidden: usize,
    /// FFN size: `ne[1]` of `blk.0.ffn_gate.weight`.
    pub ffn: usize,
    /// Per layer, the matrices of [`Role::FROM_FILE`] in that order.
    pub layers: Vec<[PackedWeight; 4]>,
}

impl GgufWeights {
    /// Reads the first `layers` layers of the file at `path` (fewer if the
    /// file has fewer). Fails, naming the tensor, on a missing tensor, a
    /// format the backends have no weight format for, a shape that does not
    /// fit the hidden and FFN sizes, or a truncated file.
    pub fn load(path: &Path, layers: usize) -> Result<Self, String> {
        let tensors = gguf::read_tensors(path)?;
        let in_file = tensors
            .iter()
            .filter_map(|t| {
                t.name
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .max()
            .map_or(0, |n| n + 1);
        if layers == 0 || in_file == 0 {
            return Err(format!(
                "no layers to run (--layers {layers}, {in_file} `blk.N.` layers in the file)"
            ));
        }
        let find = |name: &str| {
            tensors
                .iter()
                .find(|t| t.name == name)
                .ok_or_else(|| format!("{name}: not in the file"))
        };
        let (_, hidden, ffn) = gguf::weight_matrix(find(&Role::FfnGate.ggml_name(0))?)?;
        let mut out = Vec::new();
        for l in 0..layers.min(in_file) {
            let mut layer = Vec::new();
            for role in Role::FROM_FILE {
                let name = role.ggml_name(l);
                let t = find(&name)?;
                let (dtype, k, m) = gguf::weight_matrix(t)?;
                let (wk, wm) = role.shape(hidden, ffn);
                if (k, m) != (wk, wm) {
                    return Err(format!(
                        "{name}: shape [{k}, {m}], the stack needs [{wk}, {wm}] \
                         (hidden {hidden}, FFN {ffn} from blk.0.ffn_gate.weight)"
                    ));
                }
                layer.push((dtype, gguf::read_rows(path, t, dtype, m)?));
            }
            out.push(
                layer
                    .try_into()
                    .map_err(|_| "four weights per layer".to_string())?,
            );
        }
        Ok(Self {
            hidden,
            ffn,
            layers: out,
        })
    }

    /// Whether the stack has the rotated projection: the Hadamard step
    /// needs a power-of-two hidden size.
    pub fn rotate(&self) -> bool {
        self.hidden.is_power_of_two()
    }

    /// The weight formats, e.g. `q8_0` or `q4_k+q6_k`.
    pub fn formats(&self) -> String {
        let mut names: Vec<&str> = self
            .layers
            .iter()
            .flatten()
            .map(|(d, _)| d.name())
            .collect();
        names.sort_unstable();
        names.dedup();
        names.join("+")
    }

    /// The stack of these weights; the residual input and the signs are
    /// random from `seed`.
    pub fn build_stack(&self, seed: u64) -> Result<DecodeStack, Error> {
        build_graph(
            self.layers.len(),
            self.hidden,
            self.ffn,
            self.rotate(),
            seed,
            |l, role, _| {
                let slot = match role {
                    Role::AttnOutput | Role::Rotated => 0,
                    Role::FfnGate => 1,
                    Role::FfnUp => 2,
                    Role::FfnDown => 3,
                };
                Ok(self.layers[l][slot].clone())
            },
        )
    }
}

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
