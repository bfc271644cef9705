//! Transformer decode layers as a core graph, and the `decode` mode: a
//! stack of layers run fused and unfused on each backend, checked bit for
//! bit against each other, timed per token, kernel launches and barriers
//! per token (as the timed executor counts them). GGML's activation mode,
//! or f32 activations on a backend without GGML's quantized ones (the GPU
//! kernels; the row's `acts` says which).
//!
//! One layer: `h += W_o · attn(h)`; `h += W_d · (silu(W_g · n) ⊙ (W_u · n))`
//! with `n = norm(h)`; `h += W_r · H(norm(h) ⊙ signs)` (a Hadamard-rotated
//! projection). Attention and the norms are opaque ops the planner does not
//! fuse; the residual stream is updated in place. The planner fuses five
//! steps per layer: the three residual projections with their adds, the
//! GLU, and the signed FWHT.

use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{DType, Error};

use crate::backend::{Backend, RunConfig, RunError, registry, selected, skip_unavailable};
use crate::cases::Rng;
use crate::cli::Cli;
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

/// `layers` decode layers of hidden size `h` and FFN size `f` with weights
/// of `dtype`; `h` and `f` must be whole blocks of `dtype` and `h` a power
/// of two (the Hadamard rotation spans the hidden vector).
pub fn build_stack(
    dtype: DType,
    layers: usize,
    h: usize,
    f: usize,
    seed: u64,
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
    let mut weight = |g: &mut Graph,
                      k: usize,
                      m: usize,
                      rng: &mut Rng,
                      inits: &mut Vec<(TensorDesc, Vec<u8>)>|
     -> Result<NodeId, Error> {
        let rb = dtype.row_bytes(k)?;
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext)?;
        wnext += (rb * m).div_ceil(64) * 64;
        let mut bytes = vec![0u8; rb * m];
        // Small weights keep the residual stream in range over many layers.
        let scale = 1.0 / (k as f32).sqrt();
        for row in bytes.chunks_exact_mut(rb) {
            let v: Vec<f32> = rng.vec(k).iter().map(|x| x * scale).collect();
            quantize_row(dtype, &v, row)?;
        }
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
    let had = g.input(TensorDesc::strided(
        DType::F32,
        [h, h, 1, 1],
        [4, 0, 0, 0],
        BufferId(2),
        0,
    )?)?;
    let vec = [h, 1, 1, 1];
    for _ in 0..layers {
        let w_o = weight(&mut g, h, h, &mut rng, &mut inits)?;
        let w_g = weight(&mut g, h, f, &mut rng, &mut inits)?;
        let w_u = weight(&mut g, h, f, &mut rng, &mut inits)?;
        let w_d = weight(&mut g, f, h, &mut rng, &mut inits)?;
        let w_r = weight(&mut g, h, h, &mut rng, &mut inits)?;
        let signs: Vec<f32> = (0..h)
            .map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
            .collect();
        let signs = f32_input(&mut g, act(h), signs, &mut inits)?;
        let attn = g.other("attention", &[cur], vec, act(h))?;
        let o = g.mul_mat(w_o, attn, act(h))?;
        let h1 = g.add(o, cur, residual)?;
        let norm = g.other("rms_norm", &[h1], vec, act(h))?;
        let gate = g.mul_mat(w_g, norm, act(f))?;
        let up = g.mul_mat(w_u, norm, act(f))?;
        let a = g.glu(Activation::Silu, gate, up, act(f))?;
        let down = g.mul_mat(w_d, a, act(h))?;
        let h2 = g.add(down, h1, residual)?;
        let norm2 = g.other("rms_norm", &[h2], vec, act(h))?;
        let signed = g.mul(norm2, signs, act(h))?;
        let rot = g.mul_mat_hadamard(had, signed, act(h))?;
        let proj = g.mul_mat(w_r, rot, act(h))?;
        cur = g.add(proj, h2, residual)?;
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

/// Runs the `decode` mode: `--layers` layers of hidden size 1024 and FFN
/// size 2816, one token.
pub fn run_decode(cli: &Cli, print: bool) -> DecodeReport {
    let (h, f) = (1024, 2816);
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let dtypes: Vec<DType> = match &cli.filter {
        Some(name) => DType::from_name(name).into_iter().collect(),
        None => DEFAULT_DTYPES.to_vec(),
    };
    let mut report = DecodeReport {
        schema: "fused-verify/decode/1",
        hidden: h,
        ffn: f,
        rows: Vec::new(),
        errors: Vec::new(),
    };
    if dtypes.is_empty() {
        report
            .errors
            .push("--filter names no weight format (e.g. q4_0)".to_string());
    }
    if print {
        println!(
            "{:<12} {:<7} {:<5} {:>6} {:>14} {:>14} {:>8} {:>10} {:>10}",
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
        for &d in &dtypes {
            let cfg = RunConfig {
                threads,
                mode: GemvMode::Ggml,
            };
            let res = build_stack(d, cli.layers, h, f, cli.seed)
                .map_err(RunError::from)
                .and_then(|s| {
                    let p = plan(&s.graph);
                    decode_one(be.as_ref(), &s, &p, cfg, cli.reps)
                });
            match res {
                Ok(t) => {
                    let same = t.same;
                    let row = DecodeRow {
                        backend: be.name().to_string(),
                        dtype: d.name().to_string(),
                        layers: cli.layers,
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
                            "{:<12} {:<7} {:<5} {:>6} {:>14.1} {:>14.1} {:>8.2} {:>5}/{:<4} {:>5}/{:<4}{}",
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
    if print {
        for e in &report.errors {
            println!("FAIL {e}");
        }
    }
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
