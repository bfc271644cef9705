//! What one plan step runs, with its tensors looked up: the reading of a
//! [`Step`] that every executor shares — the host-slice executor
//! ([`crate::exec`]) and the CUDA and Vulkan device plans — so that a node
//! means the same work on every backend and only the launching differs.
//!
//! [`lower`] turns a step into a [`Command`]: a fused or plain GEMV (gated
//! or not), an FWHT (signed or not), a binary element-wise op with the way
//! its second operand is broadcast, a row-bias add, an activation, a copy,
//! or nothing (inputs, reshapes, views).

use crate::decode::{AttentionShape, RopeMode};
use crate::element::Activation;
use crate::epilogue::{Epilogue, MAX_STAGES};
use crate::error::{Error, Unsupported};
use crate::fwht::FwhtDesc;
use crate::graph::{Graph, MatHint, Node, NodeId, Op};
use crate::kv_append::FusedKvAppend;
use crate::norm::Eps;
use crate::planner::{NormPrologue, Operands, Step};
use crate::tensor::TensorDesc;

pub use crate::argmax_tail::ArgmaxOperands;
pub use crate::kv_append::{KvAppendDims, KvAppendOperands};

/// A binary element-wise node's op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a · b`.
    Mul,
    /// `act(a) · b`.
    Glu(Activation),
}

/// How the second operand of a binary node meets the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broadcast {
    /// The same shape: read element by element.
    Elementwise,
    /// Whole rows of `a`'s length (`b`'s `ne[1] = rows`, dividing `a`'s
    /// `ne[1]`; `ne[2] = ne[3] = 1`), repeated over `a`'s rows.
    Rows {
        /// `b`'s rows.
        rows: usize,
    },
    /// Any other of GGML's broadcasts (repeated along higher dimensions).
    Other,
}

impl Broadcast {
    /// How `b` (shape `bne`) is repeated over `a` (shape `ane`).
    pub fn of(ane: [usize; 4], bne: [usize; 4]) -> Broadcast {
        if ane == bne {
            Broadcast::Elementwise
        } else if bne[0] == ane[0]
            && bne[2] == 1
            && bne[3] == 1
            && bne[1] > 0
            && ane[1].is_multiple_of(bne[1])
        {
            Broadcast::Rows { rows: bne[1] }
        } else {
            Broadcast::Other
        }
    }
}

/// The work of one plan step, its tensors looked up in the graph.
// A short-lived value, one per step as it is lowered: the GEMV with its
// prologue's two tensors is the large variant, and boxing it would cost
// `Copy` for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Command {
    /// Nothing runs: an input, a reshape or a view (or an op the core does
    /// not model that has no source).
    Nothing,
    /// A GEMV, with its prologue, epilogue and tail ([`GemvCommand`]).
    Gemv(GemvCommand),
    /// The FWHT of every row of `x` (times `signs` first where given).
    Fwht {
        /// The transform.
        desc: FwhtDesc,
        /// The input.
        x: TensorDesc,
        /// The sign vector of a signed transform.
        signs: Option<TensorDesc>,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = a op b`, `b` repeated over `a` per `broadcast`.
    Binary {
        /// The op.
        op: BinaryOp,
        /// The first operand.
        a: TensorDesc,
        /// The second operand.
        b: TensorDesc,
        /// How `b` meets `a`.
        broadcast: Broadcast,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = a + bias`, the bias (`rows` values) added to every column of
    /// `a` (checked: `a` holds a whole number of columns).
    AddRowBias {
        /// The input.
        a: TensorDesc,
        /// The bias.
        bias: TensorDesc,
        /// The bias's length: `a`'s rows.
        rows: usize,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = act(a)`.
    Unary {
        /// The activation.
        act: Activation,
        /// The input.
        a: TensorDesc,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = rms_norm(x, eps)`, column by column ([`crate::norm`]).
    RmsNorm {
        /// The epsilon.
        eps: Eps,
        /// The input.
        x: TensorDesc,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = rope(x)` at the position in `pos`, angles from `table`
    /// ([`crate::decode::rope`]).
    Rope {
        /// Which elements pair up.
        mode: RopeMode,
        /// The input, `[head_dim, heads]`.
        x: TensorDesc,
        /// The angles, `[head_dim, rows]`.
        table: TensorDesc,
        /// The position (one F32 value).
        pos: TensorDesc,
        /// The destination.
        out: TensorDesc,
    },
    /// `out = dst` with row `pos` replaced by `row`; when `out` is `dst`
    /// itself, only that row is written.
    SetRow {
        /// The rows, `[n, rows]`.
        dst: TensorDesc,
        /// The new row (`n` values).
        row: TensorDesc,
        /// The position (one F32 value).
        pos: TensorDesc,
        /// The destination.
        out: TensorDesc,
    },
    /// One query token's attention over cache rows `0..=pos`
    /// ([`crate::decode::attention`]).
    Attention {
        /// Heads and scale.
        shape: AttentionShape,
        /// The query, `[head_dim, n_head]`.
        q: TensorDesc,
        /// The keys, `[head_dim, n_kv, rows]`.
        k: TensorDesc,
        /// The values, the keys' shape.
        v: TensorDesc,
        /// The position (one F32 value).
        pos: TensorDesc,
        /// The destination, `q`'s shape.
        out: TensorDesc,
    },
    /// The fused key/value append: RoPE of `k` into row `pos` of `k_cache`
    /// (in place), with the RoPE of q into its own destination and `v` into
    /// row `pos` of `v_cache` (in place) where they joined. `k_rope` is the
    /// RoPE's own tensor, which the fused kernel does not write: a backend
    /// without the fused kernel runs the parts through it
    /// ([`CommandSink::kv_append`]'s default).
    KvAppend(KvAppendOperands),
    /// `out[c] = argmax(x[.., c])` per column ([`crate::decode::argmax`]).
    ArgMax {
        /// The input, `[n, cols]`.
        x: TensorDesc,
        /// The destination, `[1, cols]`.
        out: TensorDesc,
    },
    /// `out = a`: an op the core does not model, run as a copy of its
    /// first source (as GGML's view-like ops are).
    Copy {
        /// The source.
        a: TensorDesc,
        /// The destination.
        out: TensorDesc,
    },
}

/// `out = epilogue(w · x)`, or with `up = Some((w_up, act))`
/// `out = epilogue(act(w · x) ⊙ (w_up · x))`; the epilogue's operand of
/// slot `i` is node `operands[i]`. With a `prologue`, the activations are
/// not read from `x` (never written) but computed per column from the
/// prologue's tensors. With a `kv` tail, the key/value append of rows of
/// `out` follows ([`CommandSink::gemv_kv_append`]); with an `argmax` tail,
/// the argmax of each column of `out` ([`CommandSink::gemv_argmax`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemvCommand {
    /// The weights (the gate's, for a gated GEMV).
    pub w: TensorDesc,
    /// The up weights and the gate's activation of a gated GEMV.
    pub up: Option<(TensorDesc, Activation)>,
    /// The activations.
    pub x: TensorDesc,
    /// The chain applied to the result.
    pub epilogue: Epilogue,
    /// The operand node of each slot.
    pub operands: Operands,
    /// The destination.
    pub out: TensorDesc,
    /// The activations' RMS-norm prologue.
    pub prologue: Option<NormLoad>,
    /// The key/value append of the result, whose q, k and v rows are views
    /// of `out` (one column; RoPE pairs are rows `2i, 2i + 1` of it).
    pub kv: Option<KvAppendOperands>,
    /// The argmax of the result, its input `out` itself or a view of it
    /// in the same layout.
    pub argmax: Option<ArgmaxOperands>,
}

/// A GEMV's norm prologue with its tensors looked up: the activations are
/// `(x · s) · gamma` per column, as [`crate::norm::rms_norm`] computes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormLoad {
    /// The norm's input (`[K, N, ..]`, the matmul's activation shape).
    pub x: TensorDesc,
    /// The weight (`[K, 1, 1, 1]`).
    pub gamma: TensorDesc,
    /// The epsilon.
    pub eps: Eps,
}

impl NormLoad {
    fn of(g: &Graph, p: &Option<NormPrologue>) -> Result<Option<NormLoad>, Error> {
        p.map(|p| {
            Ok(NormLoad {
                x: *g.tensor(p.x)?,
                gamma: *g.tensor(p.gamma)?,
                eps: p.eps,
            })
        })
        .transpose()
    }
}

/// Source `i` of `node`.
pub fn src(g: &Graph, node: &Node, i: usize) -> Result<TensorDesc, Error> {
    let id = node.src(i).ok_or(Error::BadNode { index: usize::MAX })?;
    Ok(*g.tensor(id)?)
}

/// The command of `step` (made by the planner for `g`).
pub fn lower(g: &Graph, step: &Step) -> Result<Command, Error> {
    Ok(match step {
        Step::Node(id) => lower_node(g, g.node(*id)?)?,
        Step::Gemv(s) => {
            let mm = g.node(s.matmul)?;
            Command::Gemv(GemvCommand {
                w: src(g, mm, 0)?,
                up: None,
                x: src(g, mm, 1)?,
                epilogue: s.epilogue,
                operands: s.operands,
                out: *g.tensor(s.out)?,
                prologue: NormLoad::of(g, &s.prologue)?,
                kv: s.kv.as_ref().map(|kv| kv_operands(g, kv)).transpose()?,
                argmax: s
                    .argmax
                    .as_ref()
                    .map(|a| {
                        a.operands(g).ok_or(Error::BadNode {
                            index: a.node.index(),
                        })
                    })
                    .transpose()?,
            })
        }
        Step::GluGemv(s) => {
            let (gn, un) = (g.node(s.gate)?, g.node(s.up)?);
            Command::Gemv(GemvCommand {
                w: src(g, gn, 0)?,
                up: Some((src(g, un, 0)?, s.act)),
                x: src(g, gn, 1)?,
                epilogue: s.epilogue,
                operands: s.operands,
                out: *g.tensor(s.out)?,
                prologue: NormLoad::of(g, &s.prologue)?,
                kv: None,
                argmax: None,
            })
        }
        Step::KvAppend(s) => Command::KvAppend(kv_operands(g, s)?),
        Step::SignedFwht(s) => Command::Fwht {
            desc: s.desc,
            x: *g.tensor(s.x)?,
            signs: Some(*g.tensor(s.signs)?),
            out: *g.tensor(s.matmul)?,
        },
    })
}

/// The operands of a key/value append step.
fn kv_operands(g: &Graph, s: &FusedKvAppend) -> Result<KvAppendOperands, Error> {
    let t = |id: NodeId| -> Result<TensorDesc, Error> { Ok(*g.tensor(id)?) };
    let kw = g.node(s.k_write)?;
    let kr = g.node(s.k_rope)?;
    let q = s
        .q_rope
        .map(|id| Ok::<_, Error>((src(g, g.node(id)?, 0)?, t(id)?)))
        .transpose()?;
    let v = s
        .v_write
        .map(|id| {
            let n = g.node(id)?;
            Ok::<_, Error>((src(g, n, 1)?, src(g, n, 0)?))
        })
        .transpose()?;
    Ok(KvAppendOperands {
        mode: s.mode,
        table: t(s.table)?,
        pos: t(s.pos)?,
        k: src(g, kr, 0)?,
        k_rope: t(s.k_rope)?,
        k_cache: src(g, kw, 0)?,
        q,
        v,
    })
}

/// The command of one node run as is.
fn lower_node(g: &Graph, node: &Node) -> Result<Command, Error> {
    let out = *node.tensor();
    Ok(match node.op() {
        Op::Input | Op::Reshape | Op::View => Command::Nothing,
        Op::MulMat(hint) => {
            let (w, x) = (src(g, node, 0)?, src(g, node, 1)?);
            let n = w.ne()[0];
            // The graph checked N (`Graph::mul_mat_hadamard`).
            if hint == MatHint::Hadamard {
                Command::Fwht {
                    desc: FwhtDesc::new(n)?,
                    x,
                    signs: None,
                    out,
                }
            } else {
                Command::Gemv(GemvCommand {
                    w,
                    up: None,
                    x,
                    epilogue: Epilogue::NONE,
                    operands: [None; MAX_STAGES],
                    out,
                    prologue: None,
                    kv: None,
                    argmax: None,
                })
            }
        }
        Op::Add | Op::Mul | Op::Glu(_) => {
            let (a, b) = (src(g, node, 0)?, src(g, node, 1)?);
            let op = match node.op() {
                Op::Add => BinaryOp::Add,
                Op::Mul => BinaryOp::Mul,
                Op::Glu(act) => BinaryOp::Glu(act),
                _ => unreachable!("matched Add, Mul and Glu above"),
            };
            let broadcast = Broadcast::of(a.ne(), b.ne());
            Command::Binary {
                op,
                a,
                b,
                broadcast,
                out,
            }
        }
        Op::AddRowBias => {
            let (a, bias) = (src(g, node, 0)?, src(g, node, 1)?);
            let rows = bias.n_elements();
            if rows == 0 || !a.n_elements().is_multiple_of(rows) {
                return Err(Error::LengthMismatch {
                    what: "row-bias input (a whole number of columns of bias rows)",
                    expected: a.n_elements().div_ceil(rows.max(1)) * rows,
                    actual: a.n_elements(),
                });
            }
            Command::AddRowBias { a, bias, rows, out }
        }
        Op::Unary(act) => Command::Unary {
            act,
            a: src(g, node, 0)?,
            out,
        },
        Op::RmsNorm(eps) => Command::RmsNorm {
            eps,
            x: src(g, node, 0)?,
            out,
        },
        Op::Rope(mode) => Command::Rope {
            mode,
            x: src(g, node, 0)?,
            table: src(g, node, 1)?,
            pos: src(g, node, 2)?,
            out,
        },
        Op::SetRow => Command::SetRow {
            dst: src(g, node, 0)?,
            row: src(g, node, 1)?,
            pos: src(g, node, 2)?,
            out,
        },
        Op::Attention(scale) => {
            let (q, k) = (src(g, node, 0)?, src(g, node, 1)?);
            let shape = AttentionShape {
                head_dim: q.ne()[0],
                n_head: q.ne()[1],
                n_kv: k.ne()[1],
                scale: scale.get(),
            };
            shape.check()?;
            Command::Attention {
                shape,
                q,
                k,
                v: src(g, node, 2)?,
                pos: src(g, node, 3)?,
                out,
            }
        }
        Op::ArgMax => Command::ArgMax {
            x: src(g, node, 0)?,
            out,
        },
        Op::Other(_) => match node.src(0) {
            None => Command::Nothing,
            Some(s) => Command::Copy {
                a: *g.tensor(s)?,
                out,
            },
        },
    })
}

/// What a backend does with each kind of [`Command`]: records a launch
/// (the device plans) or runs a kernel. [`lower_into`] lowers a step and
/// calls the method of its kind.
pub trait CommandSink {
    /// The backend's error type; every core error converts into it.
    type Error: From<Error>;

    /// A [`Command::Gemv`]; `g` is the graph the operand nodes belong to.
    #[allow(clippy::too_many_arguments)]
    fn gemv(
        &mut self,
        g: &Graph,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        operands: &Operands,
        out: &TensorDesc,
    ) -> Result<(), Self::Error>;

    /// A [`Command::Fwht`].
    fn fwht(
        &mut self,
        desc: &FwhtDesc,
        x: &TensorDesc,
        signs: Option<&TensorDesc>,
        out: &TensorDesc,
    ) -> Result<(), Self::Error>;

    /// A [`Command::Binary`].
    fn binary(
        &mut self,
        op: BinaryOp,
        broadcast: Broadcast,
        a: &TensorDesc,
        b: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), Self::Error>;

    /// A [`Command::AddRowBias`].
    fn add_row_bias(
        &mut self,
        a: &TensorDesc,
        bias: &TensorDesc,
        rows: usize,
        out: &TensorDesc,
    ) -> Result<(), Self::Error>;

    /// A [`Command::Unary`].
    fn unary(
        &mut self,
        act: Activation,
        a: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), Self::Error>;

    /// A [`Command::Copy`].
    fn copy(&mut self, a: &TensorDesc, out: &TensorDesc) -> Result<(), Self::Error>;

    /// A [`Command::Gemv`] with a norm prologue (`x` is the mul's tensor,
    /// which the step does not read). By default refused as
    /// [`Unsupported::Operation`] (a backend without the norm kernels).
    #[allow(clippy::too_many_arguments)]
    fn norm_gemv(
        &mut self,
        g: &Graph,
        prologue: &NormLoad,
        w: &TensorDesc,
        up: Option<(&TensorDesc, Activation)>,
        x: &TensorDesc,
        epilogue: &Epilogue,
        operands: &Operands,
        out: &TensorDesc,
    ) -> Result<(), Self::Error> {
        let _ = (g, prologue, w, up, x, epilogue, operands, out);
        Err(Error::Unsupported(Unsupported::Operation(RMS_NORM)).into())
    }

    /// A [`Command::RmsNorm`]. By default refused as
    /// [`Unsupported::Operation`] (a backend without the kernel).
    fn rms_norm(&mut self, eps: Eps, x: &TensorDesc, out: &TensorDesc) -> Result<(), Self::Error> {
        let _ = (eps, x, out);
        Err(Error::Unsupported(Unsupported::Operation(RMS_NORM)).into())
    }

    /// A [`Command::Rope`]. By default refused as
    /// [`Unsupported::Operation`]`(`[`ROPE`]`)`.
    fn rope(
        &mut self,
        mode: RopeMode,
        x: &TensorDesc,
        table: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), Self::Error> {
        let _ = (mode, x, table, pos, out);
        Err(Error::Unsupported(Unsupported::Operation(ROPE)).into())
    }

    /// A [`Command::SetRow`]. By default refused as
    /// [`Unsupported::Operation`]`(`[`SET_ROW`]`)`.
    fn set_row(
        &mut self,
        dst: &TensorDesc,
        row: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), Self::Error> {
        let _ = (dst, row, pos, out);
        Err(Error::Unsupported(Unsupported::Operation(SET_ROW)).into())
    }

    /// A [`Command::Attention`]. By default refused as
    /// [`Unsupported::Operation`]`(`[`ATTENTION`]`)`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<(), Self::Error> {
        let _ = (shape, q, k, v, pos, out);
        Err(Error::Unsupported(Unsupported::Operation(ATTENTION)).into())
    }

    /// A [`Command::KvAppend`]. By default its parts one by one
    /// ([`kv_append_by_parts`]); a backend with the fused kernel runs them
    /// as one.
    fn kv_append(&mut self, a: &KvAppendOperands) -> Result<(), Self::Error> {
        kv_append_by_parts(self, a)
    }

    /// A [`Command::Gemv`] with a key/value append tail (`kv`, whose rows
    /// are views of `gemv.out`). By default the GEMV, then the append
    /// ([`gemv_kv_append_by_parts`]); a backend whose GEMV tiles hold both
    /// rows of every RoPE pair rotates and writes them as it stores.
    fn gemv_kv_append(
        &mut self,
        g: &Graph,
        gemv: &GemvCommand,
        kv: &KvAppendOperands,
    ) -> Result<(), Self::Error> {
        gemv_kv_append_by_parts(self, g, gemv, kv)
    }

    /// A [`Command::Gemv`] with an argmax tail (`argmax.x` is `gemv.out` or
    /// a view of it in the same layout). By default the GEMV, then the
    /// argmax ([`gemv_argmax_by_parts`]); a backend whose GEMV reduces as
    /// it stores writes the index with the result.
    fn gemv_argmax(
        &mut self,
        g: &Graph,
        gemv: &GemvCommand,
        argmax: &ArgmaxOperands,
    ) -> Result<(), Self::Error> {
        gemv_argmax_by_parts(self, g, gemv, argmax)
    }

    /// A [`Command::ArgMax`]. By default refused as
    /// [`Unsupported::Operation`]`(`[`ARGMAX`]`)`.
    fn argmax(&mut self, x: &TensorDesc, out: &TensorDesc) -> Result<(), Self::Error> {
        let _ = (x, out);
        Err(Error::Unsupported(Unsupported::Operation(ARGMAX)).into())
    }
}

/// A key/value append as its parts, in the unfused order: the q RoPE, the
/// k RoPE into its own tensor, the k row write, the v row write. The
/// default of [`CommandSink::kv_append`], and what a backend with the fused
/// kernel runs where its kernel cannot take the operands.
pub fn kv_append_by_parts<S: CommandSink + ?Sized>(
    sink: &mut S,
    a: &KvAppendOperands,
) -> Result<(), S::Error> {
    if let Some((x, out)) = &a.q {
        sink.rope(a.mode, x, &a.table, &a.pos, out)?;
    }
    sink.rope(a.mode, &a.k, &a.table, &a.pos, &a.k_rope)?;
    sink.set_row(&a.k_cache, &a.k_rope, &a.pos, &a.k_cache)?;
    if let Some((row, cache)) = &a.v {
        sink.set_row(cache, row, &a.pos, cache)?;
    }
    Ok(())
}

/// The GEMV of `c` (its tails left out), through
/// [`CommandSink::gemv`], or [`CommandSink::norm_gemv`] with a prologue.
pub fn issue_gemv<S: CommandSink + ?Sized>(
    sink: &mut S,
    g: &Graph,
    c: &GemvCommand,
) -> Result<(), S::Error> {
    let up = c.up.as_ref().map(|(u, act)| (u, *act));
    match &c.prologue {
        None => sink.gemv(g, &c.w, up, &c.x, &c.epilogue, &c.operands, &c.out),
        Some(p) => sink.norm_gemv(g, p, &c.w, up, &c.x, &c.epilogue, &c.operands, &c.out),
    }
}

/// A GEMV and its key/value append tail one after the other: the default of
/// [`CommandSink::gemv_kv_append`], and what a backend with the fused tail
/// runs where its tiles cannot take it.
pub fn gemv_kv_append_by_parts<S: CommandSink + ?Sized>(
    sink: &mut S,
    g: &Graph,
    gemv: &GemvCommand,
    kv: &KvAppendOperands,
) -> Result<(), S::Error> {
    issue_gemv(sink, g, gemv)?;
    sink.kv_append(kv)
}

/// A GEMV and its argmax tail one after the other: the default of
/// [`CommandSink::gemv_argmax`], and what a backend with the fused tail
/// runs where its GEMV cannot take it.
pub fn gemv_argmax_by_parts<S: CommandSink + ?Sized>(
    sink: &mut S,
    g: &Graph,
    gemv: &GemvCommand,
    argmax: &ArgmaxOperands,
) -> Result<(), S::Error> {
    issue_gemv(sink, g, gemv)?;
    sink.argmax(&argmax.x, &argmax.out)
}

/// The names under which a backend without the decode kernels refuses
/// their commands ([`Unsupported::Operation`]).
pub const ROPE: &str = "rope";
/// See [`ROPE`].
pub const SET_ROW: &str = "set_row";
/// See [`ROPE`].
pub const ATTENTION: &str = "attention";
/// See [`ROPE`].
pub const ARGMAX: &str = "argmax";

/// The name under which a backend without the norm kernels refuses
/// `rms_norm` and the GEMV's norm prologue ([`Unsupported::Operation`]).
pub const RMS_NORM: &str = "rms_norm";

/// Lowers `step` (made by the planner for `g`) and hands its command to
/// `sink`: `Ok(false)` when nothing runs, `Ok(true)` when a command did.
pub fn lower_into<S: CommandSink>(g: &Graph, step: &Step, sink: &mut S) -> Result<bool, S::Error> {
    match lower(g, step)? {
        Command::Nothing => return Ok(false),
        Command::Gemv(c) => match (&c.kv, &c.argmax) {
            (Some(kv), _) => sink.gemv_kv_append(g, &c, kv)?,
            (None, Some(a)) => sink.gemv_argmax(g, &c, a)?,
            (None, None) => issue_gemv(sink, g, &c)?,
        },
        Command::Fwht {
            desc,
            x,
            signs,
            out,
        } => sink.fwht(&desc, &x, signs.as_ref(), &out)?,
        Command::Binary {
            op,
            a,
            b,
            broadcast,
            out,
        } => sink.binary(op, broadcast, &a, &b, &out)?,
        Command::AddRowBias { a, bias, rows, out } => sink.add_row_bias(&a, &bias, rows, &out)?,
        Command::Unary { act, a, out } => sink.unary(act, &a, &out)?,
        Command::Copy { a, out } => sink.copy(&a, &out)?,
        Command::RmsNorm { eps, x, out } => sink.rms_norm(eps, &x, &out)?,
        Command::Rope {
            mode,
            x,
            table,
            pos,
            out,
        } => sink.rope(mode, &x, &table, &pos, &out)?,
        Command::SetRow { dst, row, pos, out } => sink.set_row(&dst, &row, &pos, &out)?,
        Command::Attention {
            shape,
            q,
            k,
            v,
            pos,
            out,
        } => sink.attention(&shape, &q, &k, &v, &pos, &out)?,
        Command::ArgMax { x, out } => sink.argmax(&x, &out)?,
        Command::KvAppend(a) => sink.kv_append(&a)?,
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_kinds() {
        let a = [8, 6, 1, 1];
        assert_eq!(Broadcast::of(a, a), Broadcast::Elementwise);
        assert_eq!(Broadcast::of(a, [8, 1, 1, 1]), Broadcast::Rows { rows: 1 });
        assert_eq!(Broadcast::of(a, [8, 3, 1, 1]), Broadcast::Rows { rows: 3 });
        // 4 rows do not divide 6; another row length; higher dimensions.
        assert_eq!(Broadcast::of(a, [8, 4, 1, 1]), Broadcast::Other);
        assert_eq!(Broadcast::of(a, [4, 1, 1, 1]), Broadcast::Other);
        assert_eq!(Broadcast::of([8, 6, 2, 1], [8, 1, 2, 1]), Broadcast::Other);
        // Rows repeat across the higher dimensions too (flattened rows).
        assert_eq!(
            Broadcast::of([8, 6, 2, 1], [8, 6, 1, 1]),
            Broadcast::Rows { rows: 6 }
        );
    }
}
