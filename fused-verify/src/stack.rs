//! Transformer decode layers as a core graph: a stack of layers with its
//! inputs, from random weights ([`build_stack`], one stack per format) or
//! those of a GGUF file ([`GgufWeights`]), for the `decode` mode and the
//! self-check.
//!
//! One layer: `h += W_o · attn(h)`; `h += W_d · (silu(W_g · n) ⊙ (W_u · n))`
//! with `n = norm(h)`; `h += W_r · H(norm(h) ⊙ signs)` (a Hadamard-rotated
//! projection). Attention and the norms are opaque ops the planner does not
//! fuse; the residual stream is updated in place. The planner fuses five
//! steps per layer: the three residual projections with their adds, the
//! GLU, and the signed FWHT.
//!
//! A GGUF file's weights: per layer `blk.N.attn_output`, `blk.N.ffn_gate`,
//! `blk.N.ffn_up` and `blk.N.ffn_down` in their stored formats, the hidden
//! and FFN sizes from `blk.0.ffn_gate` (`ne[0]`, `ne[1]`). A GGUF file has
//! no rotated projection: the stack reuses `attn_output` (same shape) for
//! it, and leaves the rotation out (with a printed note) when the hidden
//! size is not a power of two. Both build the same graph.

use fused_core::element::Activation;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::quant::quantize_row;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{DType, Error};

use std::path::Path;

use crate::cases::Rng;
use crate::gguf;

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
        let file = gguf::MappedFile::open(path)?;
        let tensors = file.parse()?;
        // Layers are numbered from 0; a number that cannot be one more than
        // a layer index is not a layer (no wrap to 0).
        let in_file = tensors
            .tensors()
            .iter()
            .filter_map(|t| {
                t.name()
                    .strip_prefix("blk.")?
                    .split('.')
                    .next()?
                    .parse::<usize>()
                    .ok()?
                    .checked_add(1)
            })
            .max()
            .unwrap_or(0);
        if layers == 0 || in_file == 0 {
            return Err(format!(
                "no layers to run (--layers {layers}, {in_file} `blk.N.` layers in the file)"
            ));
        }
        let find = |name: &str| {
            tensors
                .tensor(name)
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
                // Tensors never overlap (the file is refused otherwise), so
                // the copies add up to at most the file's size.
                layer.push((dtype, gguf::matrix_rows(t, m)?));
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
