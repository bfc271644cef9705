//! The case generator: pattern × weight format × shape × columns × epilogue
//! chain × threads × seed, and the graph each case builds.
//!
//! Patterns are the planner's: a GEMV with an epilogue chain (activations,
//! add, in-place add, mul, row bias, long chains up to the 8-stage limit),
//! the gated dual GEMV (GLU) with a chain, and the FWHT with and without a
//! sign vector. Shapes cover the edges: one output row, one block of K (one
//! element for the float formats), 63 rows, row counts that are not a
//! multiple of the kernels' tiles, K an odd number of blocks, a large
//! matrix, and inputs that must be refused (see [`Special::BadInput`]).
//!
//! The norm-prologue family (`gemv_norm/…`, `glu_norm/…`, [`Case::norm`]):
//! the GEMV or GLU reads `mul(rms_norm(x), g)`, which the planner folds
//! into the step as its prologue; backends without the norm kernels skip
//! these cases with their reason.
//!
//! [`CaseSet::Quick`] is a covering subset (every format, shape, chain,
//! column count and thread count appears) that runs in seconds;
//! [`CaseSet::Full`] is the cross product, more than 20,000 cases.

use std::sync::Arc;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::graph::{Graph, NodeId, Place};
use fused_core::memory::Memory;
use fused_core::quant::quantize_row;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::{Error, fwht::FwhtDesc};

/// Which case set to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CaseSet {
    /// A covering subset, seconds on two cores.
    Quick,
    /// The cross product (≥ 20,000 cases).
    Full,
}

/// The planner pattern a case exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    /// `mul_mat → chain`.
    Gemv,
    /// `glu(act)(mul_mat(W_g, x), mul_mat(W_u, x)) → chain`.
    Glu,
    /// `mul_mat(hint = Hadamard)` of `x` (not fused: nothing to fold).
    Fwht,
    /// `mul(x, signs) → [reshape] → mul_mat(hint = Hadamard)` (one signed FWHT).
    SignedFwht,
}

impl Pattern {
    /// A short name for reports and filters.
    pub const fn name(self) -> &'static str {
        match self {
            Pattern::Gemv => "gemv",
            Pattern::Glu => "glu",
            Pattern::Fwht => "fwht",
            Pattern::SignedFwht => "fwht_signed",
        }
    }
}

/// One element-wise link after the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Link {
    /// An activation.
    Act(Activation),
    /// `+ operand` into a new tensor.
    Add,
    /// `+ operand`, the result written over the operand (a residual stream).
    AddInPlace,
    /// `· operand`.
    Mul,
    /// `+ bias[row]`.
    RowBias,
}

impl Link {
    fn name(self) -> &'static str {
        match self {
            Link::Act(a) => a.name(),
            Link::Add => "add",
            Link::AddInPlace => "add_inplace",
            Link::Mul => "mul",
            Link::RowBias => "row_bias",
        }
    }
}

/// What is special about a case's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    /// Finite random inputs.
    None,
    /// NaNs in the activations and in the first operand.
    Nan,
    /// ±Inf in the activations and in the first operand.
    Inf,
    /// A weight buffer one byte short: every backend must return an error;
    /// for block formats the core must also refuse a K that is not a whole
    /// number of blocks.
    BadInput,
}

impl Special {
    fn name(self) -> &'static str {
        match self {
            Special::None => "finite",
            Special::Nan => "nan",
            Special::Inf => "inf",
            Special::BadInput => "bad_input",
        }
    }
}

/// One generated case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The pattern.
    pub pattern: Pattern,
    /// The weight format (F32 for the FWHT, which has no weights).
    pub dtype: DType,
    /// The shape's name (`one_row`, `one_block`, `63`, `tail`, `medium`, `large`, ...).
    pub shape: &'static str,
    /// Output rows `M` (the FWHT block size `N` for the FWHT).
    pub m: usize,
    /// Inner dimension `K` (the FWHT row length, a multiple of `N`).
    pub k: usize,
    /// Activation columns (FWHT: rows of length `K`).
    pub cols: usize,
    /// The GLU activation (GLU only).
    pub glu: Activation,
    /// The chain after the product.
    pub chain: Vec<Link>,
    /// Worker threads.
    pub threads: usize,
    /// How activations are fed to the dot products.
    pub mode: GemvMode,
    /// The input kind.
    pub special: Special,
    /// The random seed of the inputs.
    pub seed: u64,
    /// Real weights instead of random ones: a tensor name and its first
    /// `m` packed rows (the `gguf` mode).
    pub weights: Option<Arc<(String, Vec<u8>)>>,
    /// GEMV and GLU: the activations are `mul(rms_norm(x, NORM_EPS), g)`
    /// (the norm-prologue family).
    pub norm: bool,
}

/// The epsilon of the norm-prologue cases.
pub const NORM_EPS: f32 = 1e-5;

impl Case {
    /// A unique, filterable id: `pattern/dtype/shape/MxKxC/chain/mode/tT/input/sSEED`.
    pub fn id(&self) -> String {
        let chain = if self.chain.is_empty() {
            "none".to_string()
        } else {
            self.chain
                .iter()
                .map(|l| l.name())
                .collect::<Vec<_>>()
                .join("+")
        };
        let chain = match self.pattern {
            Pattern::Glu => format!("{}:{chain}", self.glu.name()),
            _ => chain,
        };
        let mode = match self.mode {
            GemvMode::Ggml => "ggml",
            GemvMode::F32 => "f32acts",
        };
        let shape = match &self.weights {
            Some(w) => format!("{}:{}", self.shape, w.0),
            None => self.shape.to_string(),
        };
        let pattern = if self.norm {
            format!("{}_norm", self.pattern.name())
        } else {
            self.pattern.name().to_string()
        };
        format!(
            "{}/{}/{}/{}x{}x{}/{}/{}/t{}/{}/s{}",
            pattern,
            self.dtype,
            shape,
            self.m,
            self.k,
            self.cols,
            chain,
            mode,
            self.threads,
            self.special.name(),
            self.seed
        )
    }

    /// The seed of the case's inputs: the base seed mixed with every
    /// dimension except the thread count (FNV-1a of the id), so that cases
    /// differing only in threads see the same data and all others differ.
    pub fn data_seed(&self) -> u64 {
        let id = self.id();
        let key = id
            .split('/')
            .filter(|part| !(part.starts_with('t') && part[1..].parse::<usize>().is_ok()))
            .collect::<Vec<_>>()
            .join("/");
        key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// Whether an activation of the case (the GLU's or the chain's) is not
    /// the identity.
    pub fn has_nonlinearity(&self) -> bool {
        (self.pattern == Pattern::Glu && self.glu != Activation::Identity)
            || self
                .chain
                .iter()
                .any(|l| matches!(l, Link::Act(a) if *a != Activation::Identity))
    }

    /// The case with every activation replaced by the identity: the same
    /// products, adds and multiplies, without a nonlinearity squashing
    /// them. Built on the original's inputs ([`build_seeded`] with its
    /// [`Case::data_seed`]), its outputs are the magnitudes the original's
    /// outputs are computed at.
    pub fn linearized(&self) -> Case {
        let mut c = self.clone();
        c.glu = Activation::Identity;
        for l in &mut c.chain {
            if let Link::Act(a) = l {
                *a = Activation::Identity;
            }
        }
        c
    }

    /// The number of fused steps the planner must produce for this case.
    pub fn expected_fused_steps(&self) -> usize {
        match self.pattern {
            Pattern::Gemv => usize::from(!self.chain.is_empty() || self.norm),
            Pattern::Glu | Pattern::SignedFwht => 1,
            Pattern::Fwht => 0,
        }
    }

    /// Bytes of weights and activations one run reads and writes at least
    /// (the traffic a fused kernel cannot avoid), for GB/s figures.
    pub fn min_bytes(&self) -> usize {
        let out = 4 * self.m * self.cols;
        match self.pattern {
            Pattern::Fwht | Pattern::SignedFwht => 2 * 4 * self.k * self.cols,
            Pattern::Gemv | Pattern::Glu => {
                let mats = if self.pattern == Pattern::Glu { 2 } else { 1 };
                let w = self.dtype.row_bytes(self.k).unwrap_or(0) * self.m * mats;
                let ops = self
                    .chain
                    .iter()
                    .map(|l| match l {
                        Link::Act(_) => 0,
                        Link::RowBias => 4 * self.m,
                        _ => out,
                    })
                    .sum::<usize>();
                let gamma = if self.norm { 4 * self.k } else { 0 };
                w + 4 * self.k * self.cols + gamma + ops + out
            }
        }
    }
}

/// The weight formats a GEMV can use (all but the activation-only Q8_1 and Q8_K).
pub fn weight_dtypes() -> Vec<DType> {
    DType::ALL
        .into_iter()
        .filter(|d| d.is_weight_format())
        .collect()
}

/// The GEMV chains: none, each activation, each operand kind, short
/// combinations, a long chain and one of the maximal 8 stages.
pub fn gemv_chains() -> Vec<Vec<Link>> {
    use Activation::*;
    use Link::*;
    let mut v: Vec<Vec<Link>> = vec![vec![]];
    v.extend(Activation::ALL.iter().map(|a| vec![Act(*a)]));
    v.extend([
        vec![Add],
        vec![AddInPlace],
        vec![Mul],
        vec![RowBias],
        vec![Act(Silu), Mul],
        vec![Add, Act(Silu)],
        vec![RowBias, Act(GeluTanh)],
        vec![RowBias, Act(GeluErf), Mul, AddInPlace],
        vec![
            Act(Sigmoid),
            Add,
            Act(Relu),
            Mul,
            RowBias,
            Act(GeluTanh),
            Mul,
            AddInPlace,
        ],
    ]);
    v
}

/// The GLU chains.
pub fn glu_chains() -> Vec<Vec<Link>> {
    vec![vec![], vec![Link::AddInPlace], vec![Link::Mul, Link::Add]]
}

/// The GLU activations.
pub const GLU_ACTS: [Activation; 5] = [
    Activation::Silu,
    Activation::GeluTanh,
    Activation::GeluErf,
    Activation::Sigmoid,
    Activation::Relu,
];

/// The GEMV shapes for weights of `dtype`: (name, M, K).
pub fn shapes(dtype: DType) -> Vec<(&'static str, usize, usize)> {
    let b = dtype.block_len();
    let blocks = |n: usize| if b == 1 { n } else { n * b };
    vec![
        ("one_row", 1, blocks(if b == 1 { 64 } else { 2 })),
        ("one_block", 5, b),
        ("63", 63, if b == 1 { 63 } else { 3 * b }),
        ("tail", 19, if b == 1 { 67 } else { 5 * b }),
        ("medium", 64, if b == 256 { 512 } else { 256 }),
        ("large", 512, 4096),
    ]
}

/// The FWHT shapes: (name, N, row length K).
pub fn fwht_shapes() -> Vec<(&'static str, usize, usize)> {
    vec![
        ("n2", 2, 2),
        ("n16x4", 16, 64),
        ("n128", 128, 128),
        ("n256x3", 256, 768),
        ("n1024", 1024, 1024),
        ("n32768", 32768, 32768),
    ]
}

/// Column counts.
pub const COLS: [usize; 3] = [1, 2, 5];
/// Thread counts.
pub const THREADS: [usize; 3] = [1, 2, 3];

/// Generates the case set with base seed `seed`.
pub fn generate(set: CaseSet, seed: u64) -> Vec<Case> {
    match set {
        CaseSet::Quick => quick(seed),
        CaseSet::Full => full(seed),
    }
}

fn base(pattern: Pattern, dtype: DType, seed: u64) -> Case {
    Case {
        pattern,
        dtype,
        shape: "",
        m: 0,
        k: 0,
        cols: 1,
        glu: Activation::Silu,
        chain: Vec::new(),
        threads: 1,
        mode: GemvMode::Ggml,
        special: Special::None,
        seed,
        weights: None,
        norm: false,
    }
}

/// The norm-prologue family: per weight format a GEMV (no chain, and an
/// in-place residual) and a GLU on the small and medium shapes, both
/// activation modes for the block formats, several column counts, NaN
/// and Inf activations.
fn norm_family(seed: u64, full: bool) -> Vec<Case> {
    let mut v = Vec::new();
    for (di, &d) in weight_dtypes().iter().enumerate() {
        let sh = shapes(d);
        let modes: &[GemvMode] = if d.is_quantized() {
            &[GemvMode::Ggml, GemvMode::F32]
        } else {
            &[GemvMode::Ggml]
        };
        let picked: Vec<usize> = if full {
            vec![0, 1, 2, 3, 4]
        } else {
            vec![2 + di % 3]
        };
        for &si in &picked {
            for (mi, &mode) in modes.iter().enumerate() {
                for (j, chain) in [vec![], vec![Link::AddInPlace]].into_iter().enumerate() {
                    let mut c = with_shape(base(Pattern::Gemv, d, seed + 7), sh[si]);
                    c.norm = true;
                    c.chain = chain;
                    c.mode = mode;
                    c.cols = COLS[(di + mi + j) % COLS.len()];
                    c.threads = THREADS[(di + j) % THREADS.len()];
                    v.push(c);
                }
                let mut c = with_shape(base(Pattern::Glu, d, seed + 7), sh[si]);
                c.norm = true;
                c.glu = GLU_ACTS[(di + mi) % GLU_ACTS.len()];
                c.mode = mode;
                c.cols = 2;
                c.threads = 2;
                v.push(c);
            }
            for sp in [Special::Nan, Special::Inf] {
                let mut c = with_shape(base(Pattern::Gemv, d, seed + 8), sh[si]);
                c.norm = true;
                c.special = sp;
                c.chain = vec![Link::Act(Activation::Silu)];
                c.cols = 2;
                c.threads = 2;
                v.push(c);
            }
        }
    }
    v
}

fn with_shape(mut c: Case, (name, m, k): (&'static str, usize, usize)) -> Case {
    c.shape = name;
    c.m = m;
    c.k = k;
    c
}

/// A covering subset: for every format, every shape (with a rotating chain,
/// column count and thread count), every chain on a small shape, every GLU
/// activation, the NaN/Inf/bad-input kinds, and for the block formats every
/// shape and a GLU with f32 activations; every FWHT shape signed and not.
fn quick(seed: u64) -> Vec<Case> {
    let mut v = Vec::new();
    let chains = gemv_chains();
    let glu = glu_chains();
    for (di, &d) in weight_dtypes().iter().enumerate() {
        let sh = shapes(d);
        for (si, &s) in sh.iter().enumerate() {
            for rot in [0, 7] {
                let mut c = with_shape(base(Pattern::Gemv, d, seed), s);
                c.chain = chains[(si * 5 + di + rot) % chains.len()].clone();
                c.cols = COLS[(si + di + rot) % COLS.len()];
                c.threads = THREADS[(si + 2 * di + rot) % THREADS.len()];
                if s.0 == "large" {
                    c.cols = 1;
                }
                v.push(c);
            }
        }
        for (ci, chain) in chains.iter().enumerate() {
            for (j, &s) in [sh[2], sh[3]].iter().enumerate() {
                let mut c = with_shape(base(Pattern::Gemv, d, seed + 1), s);
                c.chain = chain.clone();
                c.cols = COLS[(ci + di + j) % COLS.len()];
                c.threads = THREADS[(ci + di + 2 * j) % THREADS.len()];
                v.push(c);
            }
        }
        for (ai, &act) in GLU_ACTS.iter().enumerate() {
            let mut c = with_shape(base(Pattern::Glu, d, seed + 2), sh[(ai + di) % 5]);
            c.glu = act;
            c.chain = glu[(ai + di) % glu.len()].clone();
            c.cols = COLS[(ai + 2 * di) % COLS.len()];
            c.threads = THREADS[(ai + di) % THREADS.len()];
            v.push(c);
        }
        for (i, sp) in [Special::Nan, Special::Inf, Special::BadInput]
            .into_iter()
            .enumerate()
        {
            let mut c = with_shape(base(Pattern::Gemv, d, seed + 3), sh[1 + i]);
            c.chain = vec![Link::Add, Link::Act(Activation::Silu), Link::Mul];
            c.special = sp;
            c.cols = 2;
            c.threads = 2;
            v.push(c);
        }
        if d.is_quantized() {
            // f32 activations (the GPU backends' mode for the formats
            // without a Q8 kernel) on every shape, and one GLU.
            for (si, &s) in sh.iter().enumerate() {
                let mut c = with_shape(base(Pattern::Gemv, d, seed + 4), s);
                c.mode = GemvMode::F32;
                if si == 4 {
                    c.chain = vec![Link::Act(Activation::GeluTanh), Link::AddInPlace];
                    c.threads = 2;
                } else {
                    c.chain = chains[(si * 3 + di) % chains.len()].clone();
                    c.cols = if s.0 == "large" {
                        1
                    } else {
                        COLS[(si + di) % COLS.len()]
                    };
                    c.threads = THREADS[(si + di) % THREADS.len()];
                }
                v.push(c);
            }
            let mut c = with_shape(base(Pattern::Glu, d, seed + 4), sh[di % 5]);
            c.glu = GLU_ACTS[di % GLU_ACTS.len()];
            c.chain = glu[di % glu.len()].clone();
            c.cols = 2;
            c.mode = GemvMode::F32;
            v.push(c);
        }
    }
    for (i, s) in fwht_shapes().into_iter().enumerate() {
        for pattern in [Pattern::Fwht, Pattern::SignedFwht] {
            let mut c = with_shape(base(pattern, DType::F32, seed + 5), s);
            c.cols = if s.1 >= 32768 {
                1
            } else {
                COLS[i % COLS.len()]
            };
            c.threads = THREADS[i % THREADS.len()];
            v.push(c);
        }
    }
    let mut c = with_shape(
        base(Pattern::SignedFwht, DType::F32, seed + 6),
        ("n64", 64, 64),
    );
    c.special = Special::Nan;
    c.cols = 2;
    v.push(c);
    v.extend(norm_family(seed, false));
    v
}

/// The cross product: every format × shape × chain × column count × thread
/// count (the large shape with one column), GLU acts × chains, both
/// activation modes for the block formats, NaN/Inf/bad inputs, FWHT sizes.
fn full(seed: u64) -> Vec<Case> {
    let mut v = Vec::new();
    let chains = gemv_chains();
    for &d in &weight_dtypes() {
        let modes: &[GemvMode] = if d.is_quantized() {
            &[GemvMode::Ggml, GemvMode::F32]
        } else {
            &[GemvMode::Ggml]
        };
        for &s in &shapes(d) {
            let large = s.0 == "large";
            for chain in &chains {
                for &cols in if large { &COLS[..1] } else { &COLS[..] } {
                    for &threads in if large { &THREADS[1..2] } else { &THREADS[..] } {
                        for &mode in modes {
                            let mut c = with_shape(base(Pattern::Gemv, d, seed), s);
                            c.chain = chain.clone();
                            c.cols = cols;
                            c.threads = threads;
                            c.mode = mode;
                            v.push(c);
                        }
                    }
                }
            }
            if large {
                continue;
            }
            for &act in &GLU_ACTS {
                for chain in &glu_chains() {
                    for &threads in &THREADS {
                        let mut c = with_shape(base(Pattern::Glu, d, seed + 1), s);
                        c.glu = act;
                        c.chain = chain.clone();
                        c.cols = 2;
                        c.threads = threads;
                        v.push(c);
                    }
                }
            }
            for sp in [Special::Nan, Special::Inf, Special::BadInput] {
                for chain in &chains[1..] {
                    let mut c = with_shape(base(Pattern::Gemv, d, seed + 2), s);
                    c.chain = chain.clone();
                    c.special = sp;
                    c.cols = 2;
                    c.threads = 2;
                    v.push(c);
                }
            }
        }
    }
    for s in fwht_shapes() {
        for pattern in [Pattern::Fwht, Pattern::SignedFwht] {
            for &cols in &COLS {
                for &threads in &THREADS {
                    for sp in [Special::None, Special::Nan, Special::Inf] {
                        let mut c = with_shape(base(pattern, DType::F32, seed + 3), s);
                        c.cols = cols;
                        c.threads = threads;
                        c.special = sp;
                        v.push(c);
                    }
                }
            }
        }
    }
    v.extend(norm_family(seed, true));
    v
}

pub use fused_testkit::Rng;

/// A case built: its graph, initial memory, output node and the f32 values
/// of its inputs (for the f64 reference).
#[derive(Debug)]
pub struct Built {
    /// The graph.
    pub graph: Graph,
    /// The inputs in memory (everything else zero).
    pub mem: Memory,
    /// The output node.
    pub out: NodeId,
    /// The f32 activation columns, column-major.
    pub x: Vec<f32>,
    /// The packed weight rows (GEMV/GLU gate).
    pub w: Vec<u8>,
    /// The packed up-weight rows (GLU).
    pub w_up: Vec<u8>,
    /// The chain's operand values in epilogue slot order.
    pub operands: Vec<Vec<f32>>,
    /// The chain as an epilogue (GEMV/GLU).
    pub epilogue: Epilogue,
    /// The sign vector (signed FWHT).
    pub signs: Vec<f32>,
    /// The FWHT descriptor (FWHT patterns).
    pub fwht: Option<FwhtDesc>,
}

/// Lays tensors out in one buffer, 64-byte aligned.
struct Arena {
    buffer: u32,
    next: usize,
}

impl Arena {
    fn take(&mut self, bytes: usize) -> Place {
        let p = Place::at(self.buffer, self.next);
        self.next += bytes.div_ceil(64).max(1) * 64;
        p
    }
}

/// Puts a non-finite value at a few positions of `v`.
fn inject(v: &mut [f32], special: Special, rng: &mut Rng) {
    let bad = match special {
        Special::Nan => f32::NAN,
        Special::Inf => f32::INFINITY,
        _ => return,
    };
    for i in 0..v.len().div_ceil(97) {
        let at = (rng.next_u64() as usize) % v.len();
        v[at] = if i % 2 == 0 { bad } else { -bad };
    }
}

/// Builds the graph and inputs of `case`.
pub fn build(case: &Case) -> Result<Built, Error> {
    build_seeded(case, case.data_seed())
}

/// Builds the graph of `case` on the inputs drawn from `data_seed` (the
/// linearized twin of a case draws its original's inputs).
pub fn build_seeded(case: &Case, data_seed: u64) -> Result<Built, Error> {
    let mut rng = Rng::new(data_seed);
    let mut g = Graph::new();
    let mut weights = Arena { buffer: 0, next: 0 };
    let mut acts = Arena { buffer: 1, next: 0 };
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let input_f32 = |g: &mut Graph,
                     acts: &mut Arena,
                     ne: [usize; 4],
                     v: &[f32],
                     inits: &mut Vec<(TensorDesc, Vec<u8>)>|
     -> Result<(NodeId, Place), Error> {
        let p = acts.take(4 * v.len());
        let t = TensorDesc::contiguous(DType::F32, ne, p.buffer, p.offset)?;
        inits.push((t, f32_bytes(v)));
        Ok((g.input(t)?, p))
    };
    let (m, k, cols) = (case.m, case.k, case.cols);
    let mut x = rng.vec(k * cols);
    inject(&mut x, case.special, &mut rng);
    let mut built = Built {
        graph: Graph::new(),
        mem: Memory::new(&[]),
        out: NodeId(0),
        x: Vec::new(),
        w: Vec::new(),
        w_up: Vec::new(),
        operands: Vec::new(),
        epilogue: Epilogue::NONE,
        signs: Vec::new(),
        fwht: None,
    };
    let mut hadamard_bytes = 0;
    let out = match case.pattern {
        Pattern::Gemv | Pattern::Glu => {
            let mut weight = |g: &mut Graph, rng: &mut Rng| -> Result<(NodeId, Vec<u8>), Error> {
                let rb = case.dtype.row_bytes(k)?;
                let mut bytes = vec![0u8; rb * m];
                match &case.weights {
                    Some(w) if w.1.len() == bytes.len() => bytes.copy_from_slice(&w.1),
                    Some(w) => {
                        return Err(Error::LengthMismatch {
                            what: "case weights",
                            expected: bytes.len(),
                            actual: w.1.len(),
                        });
                    }
                    None => {
                        for row in bytes.chunks_exact_mut(rb) {
                            quantize_row(case.dtype, &rng.vec(k), row)?;
                        }
                    }
                }
                let p = weights.take(bytes.len());
                let t = TensorDesc::contiguous(case.dtype, [k, m, 1, 1], BufferId(0), p.offset)?;
                inits.push((t, bytes.clone()));
                Ok((g.input(t)?, bytes))
            };
            let (w, wb) = weight(&mut g, &mut rng)?;
            built.w = wb;
            let up = if case.pattern == Pattern::Glu {
                let (u, ub) = weight(&mut g, &mut rng)?;
                built.w_up = ub;
                Some(u)
            } else {
                None
            };
            let (mut xn, _) = input_f32(&mut g, &mut acts, [k, cols, 1, 1], &x, &mut inits)?;
            if case.norm {
                // `mul(rms_norm(x), g)`; the f64 reference reads the normed
                // product as the core defines it.
                let gamma: Vec<f32> = rng.vec(k).iter().map(|v| 1.0 + 0.5 * v).collect();
                let (gn, _) = input_f32(&mut g, &mut acts, [k, 1, 1, 1], &gamma, &mut inits)?;
                let norm = g.rms_norm(xn, NORM_EPS, acts.take(4 * k * cols))?;
                xn = g.mul(norm, gn, acts.take(4 * k * cols))?;
                let mut normed = vec![0.0f32; k * cols];
                fused_core::norm::rms_norm(k, NORM_EPS, &x, Some(&gamma), &mut normed)?;
                x = normed;
            }
            let mut cur = match up {
                None => g.mul_mat(w, xn, acts.take(4 * m * cols))?,
                Some(u) => {
                    let gate = g.mul_mat(w, xn, acts.take(4 * m * cols))?;
                    let upn = g.mul_mat(u, xn, acts.take(4 * m * cols))?;
                    g.glu(case.glu, gate, upn, acts.take(4 * m * cols))?
                }
            };
            let mut e = Epilogue::NONE;
            for link in &case.chain {
                cur = match link {
                    Link::Act(a) => {
                        e = e.then_act(*a)?;
                        g.unary(*a, cur, acts.take(4 * m * cols))?
                    }
                    Link::RowBias => {
                        let b = rng.vec(m);
                        let (bn, _) = input_f32(&mut g, &mut acts, [m, 1, 1, 1], &b, &mut inits)?;
                        built.operands.push(b);
                        e = e.then_row_bias()?;
                        g.add_row_bias(cur, bn, acts.take(4 * m * cols))?
                    }
                    Link::Add | Link::AddInPlace | Link::Mul => {
                        let mut o = rng.vec(m * cols);
                        if built.operands.is_empty() {
                            inject(&mut o, case.special, &mut rng);
                        }
                        let (on, op) =
                            input_f32(&mut g, &mut acts, [m, cols, 1, 1], &o, &mut inits)?;
                        built.operands.push(o);
                        match link {
                            Link::Mul => {
                                e = e.then_mul()?;
                                g.mul(cur, on, acts.take(4 * m * cols))?
                            }
                            Link::Add => {
                                e = e.then_add()?;
                                g.add(cur, on, acts.take(4 * m * cols))?
                            }
                            _ => {
                                e = e.then_add()?;
                                g.add(cur, on, op)?
                            }
                        }
                    }
                };
            }
            built.epilogue = e;
            cur
        }
        Pattern::Fwht | Pattern::SignedFwht => {
            let n = m;
            let mut desc = FwhtDesc::new(n)?;
            let (xn, _) = input_f32(&mut g, &mut acts, [k, cols, 1, 1], &x, &mut inits)?;
            let mut src = xn;
            if case.pattern == Pattern::SignedFwht {
                let signs: Vec<f32> = (0..k)
                    .map(|_| if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 })
                    .collect();
                let (sn, _) = input_f32(&mut g, &mut acts, [k, 1, 1, 1], &signs, &mut inits)?;
                src = g.mul(xn, sn, acts.take(4 * k * cols))?;
                desc = desc.with_signs(k)?;
                built.signs = signs;
            }
            if k != n {
                src = g.reshape(src, [n, k / n * cols, 1, 1])?;
            }
            // The Hadamard weight is never read (the hint computes it by an
            // FWHT); a zero row stride keeps its buffer one row long.
            let had = TensorDesc::strided(DType::F32, [n, n, 1, 1], [4, 0, 0, 0], BufferId(2), 0)?;
            hadamard_bytes = 4 * n;
            let hn = g.input(had)?;
            built.fwht = Some(desc);
            g.mul_mat_hadamard(hn, src, acts.take(4 * k * cols))?
        }
    };
    g.mark_output(out)?;
    let mut mem = Memory::new(&[weights.next.max(64), acts.next, hadamard_bytes.max(64)]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    built.graph = g;
    built.mem = mem;
    built.out = out;
    built.x = x;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_covers_every_format_chain_and_pattern() {
        let cases = generate(CaseSet::Quick, 1);
        for d in weight_dtypes() {
            assert!(
                cases
                    .iter()
                    .any(|c| c.dtype == d && c.pattern == Pattern::Glu)
            );
            for chain in gemv_chains() {
                assert!(
                    cases.iter().any(|c| c.dtype == d && c.chain == chain),
                    "{d} {chain:?}"
                );
            }
            for (name, _, _) in shapes(d) {
                assert!(cases.iter().any(|c| c.dtype == d && c.shape == name));
            }
        }
        for p in [Pattern::Fwht, Pattern::SignedFwht] {
            assert!(cases.iter().any(|c| c.pattern == p));
        }
        for d in weight_dtypes() {
            for p in [Pattern::Gemv, Pattern::Glu] {
                assert!(
                    cases
                        .iter()
                        .any(|c| c.norm && c.dtype == d && c.pattern == p),
                    "norm {d} {p:?}"
                );
            }
        }
        let ids: std::collections::HashSet<String> = cases.iter().map(Case::id).collect();
        assert_eq!(ids.len(), cases.len(), "ids are unique");
    }

    #[test]
    fn full_has_at_least_20000_unique_cases() {
        let cases = generate(CaseSet::Full, 1);
        assert!(cases.len() >= 20_000, "{}", cases.len());
        let ids: std::collections::HashSet<String> = cases.iter().map(Case::id).collect();
        assert_eq!(ids.len(), cases.len());
    }

    #[test]
    fn every_quick_case_builds_and_plans_as_expected() {
        for c in generate(CaseSet::Quick, 7) {
            if c.special == Special::BadInput {
                continue;
            }
            let b = build(&c).unwrap_or_else(|e| panic!("{}: {e}", c.id()));
            let p = fused_core::planner::plan(&b.graph);
            assert_eq!(
                p.fused_steps(),
                c.expected_fused_steps(),
                "{}: {:?}",
                c.id(),
                p.refusals
            );
        }
    }
}
