//! The planner: turns a [`Graph`] into a [`Plan`] of fused and unfused steps.
//!
//! Patterns, tried at every matmul in node order (a node joins at most one
//! fused step):
//! - `mul_mat → [reshape] → (act | add | mul | row-bias | glu-as-gate)*`: one
//!   GEMV with an epilogue chain (so `mul_mat → act → mul` fuses into the
//!   activation-times-operand form before a plain activation would);
//! - `glu(act)(mul_mat(W_g, x), mul_mat(W_u, x)) → chain`: one dual GEMV;
//! - `mul(x, signs) → [reshape] → mul_mat(hint = Hadamard)`: one signed FWHT;
//! - `rms_norm(x) → mul(·, g) → mul_mat(W, ·)`, the norm as a **prologue**
//!   of every GEMV (plain or gated) that reads the normed product: each such
//!   step computes `act = (x · s) · g` per column itself ([`NormPrologue`],
//!   in [`crate::norm`]'s order) and feeds it to its dot products as the
//!   unfused mul's output would be fed (f32, or quantized per GGML's mode);
//! - GEMV **tails**, joined to the GEMV step whose result they read: the
//!   key/value append of a decode step whose rows are views of the product
//!   ([`FusedGemv::kv`]) and the argmax of the result, greedy selection on
//!   the output head ([`FusedGemv::argmax`]).
//!
//! **Shared prologue nodes.** The rule "a node joins at most one fused
//! step" has one exception: the norm and mul nodes of a prologue belong to
//! no step and are listed in [`Plan::prologue_nodes`]; every matmul that
//! reads the normed product (q, k and v; the gate and up of a GLU) folds
//! them into its own step, and they are not scheduled at all. That is
//! all or nothing: a normed product that is a graph output or is read by
//! anything but a matmul's activations is refused up front
//! ([`Refusal::NormConsumer`], [`Refusal::GraphOutput`]), and where one of
//! its matmuls then fails to fuse (its own refusal recorded), the planner
//! plans again with the norm and mul as plain nodes for every reader
//! ([`Refusal::NormNotTaken`]). The prologue's predicates: a finite
//! `eps >= 0`, at most [`crate::norm::MAX_PROLOGUE_LEN`] values a column,
//! `x` contiguous F32, `g` an F32 `[K, 1, 1, 1]` vector, the norm used only
//! by the mul, the two elided results sharing memory with nothing outside
//! them, each GEMV's destination off `x` and `g`, and nothing scheduled
//! between the norm and a GEMV writing `x` or `g`.
//!
//! A chain stops at the first consumer that is not element-wise; when a
//! predicate refuses a link, the chain is cut before it and the refusal is
//! recorded. A candidate that fails a whole-pattern check (overlap, a write
//! scheduled inside the pattern) is retried one link shorter. Every refusal
//! lands in [`Plan::refusals`].
//!
//! A fused step runs at the position of its last node, so every operand is
//! ready; the planner checks that nothing scheduled in between overwrites
//! what the step reads.

use alloc::vec::Vec;

pub use crate::argmax_tail::FusedArgmax;
use crate::element::Activation;
use crate::epilogue::{Epilogue, MAX_STAGES, Stage};
use crate::fwht::FwhtDesc;
use crate::graph::{Graph, MatHint, NodeId, Op};
pub use crate::kv_append::FusedKvAppend;
use crate::legality::{
    Refusal, Tensor, check_f32_contiguous, check_fwht_overlap, check_gemv_overlap,
    check_hadamard_size, check_intermediate, check_intermediate_memory, check_norm_prologue,
    check_operand, check_pattern_pair, check_signs, check_weight,
};
use crate::norm::Eps;
use crate::step_order::through_views;

/// Operand nodes by epilogue slot.
pub type Operands = [Option<NodeId>; MAX_STAGES];

/// The RMS-norm prologue of a GEMV: its activations are
/// `mul(rms_norm(x, eps), gamma)`, computed by the step itself per column
/// ([`crate::norm::rms_norm`] with the weight) instead of read from the
/// mul's tensor, which is never written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormPrologue {
    /// The norm's input.
    pub x: NodeId,
    /// The weight `g` (F32 `[K, 1, 1, 1]`).
    pub gamma: NodeId,
    /// The norm's epsilon.
    pub eps: Eps,
    /// The `rms_norm` node (a shared prologue node).
    pub norm: NodeId,
    /// The mul node, the matmul's activation input (a shared prologue node).
    pub mul: NodeId,
}

/// One GEMV with an epilogue chain.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGemv {
    /// The matmul.
    pub matmul: NodeId,
    /// The chain applied to its accumulator.
    pub epilogue: Epilogue,
    /// The operand node of each slot.
    pub operands: Operands,
    /// The node whose tensor receives the result.
    pub out: NodeId,
    /// Every node the step replaces, in graph order (the shared prologue
    /// nodes not among them: [`Plan::prologue_nodes`]).
    pub nodes: Vec<NodeId>,
    /// The norm computed into the activations, if any.
    pub prologue: Option<NormPrologue>,
    /// The key/value append of the result, run as the GEMV's tail: every
    /// row it reads is a view of `out` (q, k and v stacked in one
    /// product), its RoPE pairs are rows `2i, 2i + 1` of `out`, nothing
    /// between the GEMV and the append touches what either reads or
    /// writes, and its nodes are among `nodes`.
    pub kv: Option<FusedKvAppend>,
    /// The argmax of the result, run as the GEMV's tail: it reads the
    /// whole result in the GEMV's layout, its index overlaps nothing the
    /// GEMV reads or writes, nothing between the GEMV and the argmax writes
    /// what either reads or reads the result, and its node is among
    /// `nodes`. Never together with `kv`.
    pub argmax: Option<FusedArgmax>,
}

/// The gated dual GEMV: `act(W_g·x) ⊙ (W_u·x)`, then a chain.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedGlu {
    /// The gate matmul.
    pub gate: NodeId,
    /// The up matmul.
    pub up: NodeId,
    /// The GLU node.
    pub glu: NodeId,
    /// The GLU activation.
    pub act: Activation,
    /// The chain applied after the gating.
    pub epilogue: Epilogue,
    /// The operand node of each slot.
    pub operands: Operands,
    /// The node whose tensor receives the result.
    pub out: NodeId,
    /// Every node the step replaces, in graph order (the shared prologue
    /// nodes not among them: [`Plan::prologue_nodes`]).
    pub nodes: Vec<NodeId>,
    /// The norm computed into the activations, if any.
    pub prologue: Option<NormPrologue>,
}

/// `H · (x ⊙ signs)` in one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct FusedFwht {
    /// The input.
    pub x: NodeId,
    /// The sign vector.
    pub signs: NodeId,
    /// The hinted matmul, whose tensor receives the result.
    pub matmul: NodeId,
    /// The transform.
    pub desc: FwhtDesc,
    /// Every node the step replaces, in graph order.
    pub nodes: Vec<NodeId>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A node run as is.
    Node(NodeId),
    /// A fused GEMV.
    Gemv(FusedGemv),
    /// A fused gated dual GEMV.
    GluGemv(FusedGlu),
    /// A fused signed FWHT.
    SignedFwht(FusedFwht),
    /// A fused key/value append (RoPE of k into its cache row, with the
    /// RoPE of q and the v row of the same position).
    KvAppend(FusedKvAppend),
}

impl Step {
    /// Whether the step replaces several nodes.
    pub const fn is_fused(&self) -> bool {
        !matches!(self, Step::Node(_))
    }

    /// The nodes the step covers.
    pub fn nodes(&self) -> &[NodeId] {
        match self {
            Step::Node(id) => core::slice::from_ref(id),
            Step::Gemv(s) => &s.nodes,
            Step::GluGemv(s) => &s.nodes,
            Step::SignedFwht(s) => &s.nodes,
            Step::KvAppend(s) => &s.nodes,
        }
    }
}

/// The pattern a refused candidate was tried as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// A GEMV with an epilogue chain.
    Epilogue,
    /// A gated dual GEMV.
    Glu,
    /// A signed FWHT.
    SignedFwht,
    /// An RMS-norm prologue (anchored at the normed product, the mul).
    NormPrologue,
    /// A key/value append (anchored at the k row write).
    KvAppend,
    /// An argmax as a GEMV's tail (anchored at the argmax).
    ArgmaxTail,
}

/// A candidate the planner refused, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The pattern tried.
    pub pattern: Pattern,
    /// The node the pattern was anchored at (its matmul).
    pub anchor: NodeId,
    /// The reason.
    pub reason: Refusal,
}

/// An ordered list of steps covering every non-input node once, but for
/// the shared prologue nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The steps, in execution order.
    pub steps: Vec<Step>,
    /// Every refused candidate.
    pub refusals: Vec<Refused>,
    /// The `rms_norm` and mul nodes that no step runs: every matmul reading
    /// the normed product computes it in its prologue ([`NormPrologue`]).
    /// The one exception to "a node joins at most one step", in graph order.
    pub prologue_nodes: Vec<NodeId>,
}

impl Plan {
    /// The plan that runs every node by itself.
    pub fn unfused(graph: &Graph) -> Plan {
        let steps = graph
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| n.op() != Op::Input)
            .map(|(i, _)| Step::Node(NodeId(i as u32)))
            .collect();
        Plan {
            steps,
            refusals: Vec::new(),
            prologue_nodes: Vec::new(),
        }
    }

    /// Number of fused steps.
    pub fn fused_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.is_fused()).count()
    }

    /// Number of steps that launch work: fused steps and nodes other than
    /// reshapes and views.
    pub fn kernel_steps(&self, graph: &Graph) -> usize {
        self.steps
            .iter()
            .filter(|s| match s {
                Step::Node(id) => graph.node(*id).map(|n| !n.op().is_view()).unwrap_or(false),
                _ => true,
            })
            .count()
    }
}

#[derive(Clone, Copy, Debug)]
enum LinkStage {
    Act(Activation),
    Add(NodeId),
    Mul(NodeId),
    RowBias(NodeId),
}

#[derive(Clone, Copy, Debug)]
struct Link {
    node: NodeId,
    stages: [Option<LinkStage>; 2],
}

struct Planner<'g> {
    g: &'g Graph,
    owner: Vec<Option<usize>>,
    fused: Vec<Step>,
    refusals: Vec<Refused>,
    /// Anchors whose chains must not leave an add to a later matmul.
    no_defer: Vec<NodeId>,
    /// (anchor, element-wise node) pairs a chain left to a later matmul.
    deferred: Vec<(NodeId, NodeId)>,
    /// Normed products (mul nodes) an earlier round showed some matmul
    /// does not fuse with: planned as plain nodes.
    no_prologue: Vec<NodeId>,
    /// The prologues offered this round.
    prologues: Vec<NormPrologue>,
    /// Whether a node is a shared prologue node this round.
    in_prologue: Vec<bool>,
}

/// Plans `graph`: fuses every legal pattern and records every refusal.
pub fn plan(graph: &Graph) -> Plan {
    let mut no_defer = Vec::new();
    let mut no_prologue = Vec::new();
    let mut earlier: Vec<Refused> = Vec::new();
    loop {
        let mut p = plan_round(graph, no_defer.clone(), no_prologue.clone());
        // A chain that left its add to a later matmul which then did not
        // take it: plan again with that chain keeping the add.
        let missed: Vec<NodeId> = p
            .deferred
            .iter()
            .filter(|(_, u)| p.owner[u.index()].is_none())
            .map(|(a, _)| *a)
            .filter(|a| !no_defer.contains(a))
            .collect();
        // Refusals of earlier rounds stay true of their candidates.
        for r in core::mem::take(&mut p.refusals) {
            if !earlier.contains(&r) {
                earlier.push(r);
            }
        }
        // A prologue some reader did not take: plan again with its norm
        // and mul as nodes.
        let untaken = p.untaken_prologues();
        for &(mul, consumer) in &untaken {
            let r = Refused {
                pattern: Pattern::NormPrologue,
                anchor: mul,
                reason: Refusal::NormNotTaken {
                    node: mul,
                    consumer,
                },
            };
            if !earlier.contains(&r) {
                earlier.push(r);
            }
            no_prologue.push(mul);
        }
        if missed.is_empty() && untaken.is_empty() {
            p.refusals = earlier;
            return p.finish();
        }
        no_defer.extend(missed);
    }
}

fn plan_round(graph: &Graph, no_defer: Vec<NodeId>, no_prologue: Vec<NodeId>) -> Planner<'_> {
    let mut p = Planner {
        g: graph,
        owner: alloc::vec![None; graph.len()],
        fused: Vec::new(),
        refusals: Vec::new(),
        no_defer,
        deferred: Vec::new(),
        no_prologue,
        prologues: Vec::new(),
        in_prologue: alloc::vec![false; graph.len()],
    };
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.op() == Op::Mul {
            p.offer_prologue(NodeId(i as u32));
        }
    }
    for (i, node) in graph.nodes().iter().enumerate() {
        let id = NodeId(i as u32);
        if p.owner[i].is_some() {
            continue;
        }
        match node.op() {
            Op::MulMat(MatHint::None) => p.try_gemv(id),
            Op::MulMat(MatHint::Hadamard) => p.try_signed_fwht(id),
            _ => {}
        }
    }
    for (i, node) in graph.nodes().iter().enumerate() {
        if node.op() == Op::SetRow && p.owner[i].is_none() {
            p.try_kv_append(NodeId(i as u32));
        }
    }
    for i in 0..graph.len() {
        if p.owner[i].is_none()
            && let Some(tail) = FusedArgmax::at(graph, NodeId(i as u32))
        {
            p.attach_argmax_tail(&tail);
        }
    }
    p
}

impl Planner<'_> {
    /// The plan: fused steps at their last node, every other non-input node
    /// as itself.
    fn finish(self) -> Plan {
        let graph = self.g;
        let mut steps = Vec::new();
        let mut emitted = alloc::vec![false; self.fused.len()];
        let mut prologue_nodes = Vec::new();
        for (i, node) in graph.nodes().iter().enumerate() {
            if self.in_prologue[i] {
                prologue_nodes.push(NodeId(i as u32));
                continue;
            }
            match self.owner[i] {
                Some(s) => {
                    let last = *self.fused[s].nodes().last().unwrap_or(&NodeId(0));
                    if last.index() == i && !emitted[s] {
                        emitted[s] = true;
                        steps.push(self.fused[s].clone());
                    }
                }
                None if node.op() != Op::Input => steps.push(Step::Node(NodeId(i as u32))),
                None => {}
            }
        }
        Plan {
            steps,
            refusals: self.refusals,
            prologue_nodes,
        }
    }

    /// `(mul, matmul)` for each prologue offered this round that a matmul
    /// reading it did not fuse with.
    fn untaken_prologues(&self) -> Vec<(NodeId, NodeId)> {
        let mut out = Vec::new();
        for pr in &self.prologues {
            for c in self.g.consumers(pr.mul) {
                let took = self.owner[c.index()].is_some_and(|s| match &self.fused[s] {
                    Step::Gemv(f) => f.prologue == Some(*pr),
                    Step::GluGemv(f) => f.prologue == Some(*pr),
                    _ => false,
                });
                if !took {
                    out.push((pr.mul, c));
                    break;
                }
            }
        }
        out
    }
}

fn is_elementwise(op: Op) -> bool {
    matches!(
        op,
        Op::Add | Op::Mul | Op::AddRowBias | Op::Unary(_) | Op::Glu(_) | Op::Reshape | Op::View
    )
}

impl<'g> Planner<'g> {
    fn t(&self, id: NodeId) -> Tensor {
        (id, *self.g.nodes()[id.index()].tensor())
    }

    fn refuse(&mut self, pattern: Pattern, anchor: NodeId, reason: Refusal) {
        let r = Refused {
            pattern,
            anchor,
            reason,
        };
        if !self.refusals.contains(&r) {
            self.refusals.push(r);
        }
    }

    fn claimed(&self, id: NodeId) -> bool {
        self.owner[id.index()].is_some() || self.in_prologue[id.index()]
    }

    /// Offers `mul` as the normed product of a prologue, when it is
    /// `mul(rms_norm(x), g)` read by matmuls; records why not where the
    /// pattern is there but a predicate refuses it.
    fn offer_prologue(&mut self, mul: NodeId) {
        if self.no_prologue.contains(&mul) {
            return;
        }
        match self.prologue_candidate(mul) {
            Ok(Some(pr)) => {
                self.in_prologue[pr.norm.index()] = true;
                self.in_prologue[pr.mul.index()] = true;
                self.prologues.push(pr);
            }
            Ok(None) => {}
            Err(r) => self.refuse(Pattern::NormPrologue, mul, r),
        }
    }

    fn prologue_candidate(&self, mul: NodeId) -> Result<Option<NormPrologue>, Refusal> {
        let g = self.g;
        let mn = &g.nodes()[mul.index()];
        let (Some(norm), Some(gamma)) = (mn.src(0), mn.src(1)) else {
            return Ok(None);
        };
        let nn = &g.nodes()[norm.index()];
        let Op::RmsNorm(eps) = nn.op() else {
            return Ok(None);
        };
        let Some(x) = nn.src(0) else { return Ok(None) };
        let reads_as_acts = |c: NodeId| {
            let cn = &g.nodes()[c.index()];
            cn.op() == Op::MulMat(MatHint::None) && cn.src(1) == Some(mul) && cn.src(0) != Some(mul)
        };
        let consumers: Vec<NodeId> = g.consumers(mul).collect();
        if !consumers.iter().any(|&c| reads_as_acts(c)) {
            return Ok(None);
        }
        if let Some(&c) = consumers.iter().find(|&&c| !reads_as_acts(c)) {
            return Err(Refusal::NormConsumer {
                node: mul,
                consumer: c,
            });
        }
        if mn.is_output() {
            return Err(Refusal::GraphOutput { node: mul });
        }
        check_intermediate(norm, g.use_count(norm), nn.is_output())?;
        if gamma == norm {
            return Err(Refusal::OperandIsIntermediate { node: mul });
        }
        check_norm_prologue(norm, eps.get(), &self.t(x), &self.t(gamma))?;
        // The two elided results: an exact alias of each other at most,
        // and nothing outside them in their memory.
        check_pattern_pair(&self.t(norm), &self.t(mul), false)?;
        for i in [norm, mul] {
            for j in 0..g.len() {
                let o = NodeId(j as u32);
                if o != norm && o != mul {
                    check_intermediate_memory(&self.t(i), &self.t(o), false)?;
                }
            }
        }
        Ok(Some(NormPrologue {
            x,
            gamma,
            eps,
            norm,
            mul,
        }))
    }

    /// The prologue offered for the normed product `x`, if any.
    fn prologue_of(&self, x: NodeId) -> Option<NormPrologue> {
        self.prologues.iter().find(|p| p.mul == x).copied()
    }

    /// What a GEMV reading activations `x` reads for them: `x`, or the
    /// norm's input and weight of its prologue.
    fn act_reads(&self, x: NodeId, prologue: Option<&NormPrologue>) -> Vec<Tensor> {
        match prologue {
            Some(p) => alloc::vec![self.t(p.x), self.t(p.gamma)],
            None => alloc::vec![self.t(x)],
        }
    }

    fn claim(&mut self, step: Step) {
        let s = self.fused.len();
        for id in step.nodes() {
            self.owner[id.index()] = Some(s);
        }
        self.fused.push(step);
    }

    /// The next link after `cur`, `Ok(None)` where the chain simply ends.
    fn follow(&self, anchor: NodeId, cur: NodeId, rows: usize) -> Result<Option<Link>, Refusal> {
        let g = self.g;
        let node = &g.nodes()[cur.index()];
        let consumers: Vec<NodeId> = g.consumers(cur).collect();
        let Some(&u) = consumers.first() else {
            return Ok(None);
        };
        if !consumers
            .iter()
            .any(|c| is_elementwise(g.nodes()[c.index()].op()))
        {
            return Ok(None);
        }
        check_intermediate(cur, g.use_count(cur), node.is_output())?;
        let un = &g.nodes()[u.index()];
        if self.claimed(u) {
            return Err(Refusal::AlreadyFused { node: u });
        }
        let shape = un.tensor().ne();
        let operand_of = |other_slot: usize| -> Result<NodeId, Refusal> {
            let o = un.src(other_slot).unwrap_or(cur);
            if o == cur {
                return Err(Refusal::OperandIsIntermediate { node: u });
            }
            check_operand(u, shape, &self.t(o))?;
            Ok(o)
        };
        let stages = match un.op() {
            Op::Reshape => [None, None],
            Op::View => {
                let (tv, tc) = (un.tensor(), node.tensor());
                if !(tv.is_contiguous()
                    && tv.n_elements() == tc.n_elements()
                    && tv.offset() == tc.offset())
                {
                    return Err(Refusal::PartialView { node: u });
                }
                [None, None]
            }
            Op::Unary(a) => [Some(LinkStage::Act(a)), None],
            Op::Add | Op::Mul => {
                let slot = if un.src(0) == Some(cur) { 1 } else { 0 };
                if self.defers(anchor, u) {
                    return Ok(None);
                }
                if slot == 0 && un.src(1) == Some(cur) && g.tensor(cur).map(|t| t.ne()) != Ok(shape)
                {
                    // The chain value would be the broadcast operand.
                    return Err(Refusal::Broadcast { node: u });
                }
                let o = operand_of(slot)?;
                let st = if un.op() == Op::Add {
                    LinkStage::Add(o)
                } else {
                    LinkStage::Mul(o)
                };
                [Some(st), None]
            }
            Op::AddRowBias => {
                if un.src(0) != Some(cur) {
                    return Ok(None);
                }
                let b = un.src(1).unwrap_or(cur);
                if b == cur {
                    return Err(Refusal::OperandIsIntermediate { node: u });
                }
                if shape[0] != rows {
                    return Err(Refusal::ShapeMismatch { node: u });
                }
                check_f32_contiguous(&self.t(b))?;
                [Some(LinkStage::RowBias(b)), None]
            }
            Op::Glu(a) => {
                if un.src(0) != Some(cur) {
                    return Ok(None);
                }
                let o = operand_of(1)?;
                [Some(LinkStage::Act(a)), Some(LinkStage::Mul(o))]
            }
            _ => return Ok(None),
        };
        Ok(Some(Link { node: u, stages }))
    }

    /// Whether the chain anchored at `anchor` leaves element-wise node `u` to
    /// a later matmul: in `a·x + b·y` each projection keeps its own residual
    /// (the count of fused element-wise ops is the same either way). Not
    /// when an earlier planning round showed that the later matmul does not
    /// take `u` after all.
    fn defers(&self, anchor: NodeId, u: NodeId) -> bool {
        let g = self.g;
        let un = &g.nodes()[u.index()];
        if !matches!(un.op(), Op::Add | Op::Mul) || self.no_defer.contains(&anchor) {
            return false;
        }
        un.srcs().any(|o| {
            let on = &g.nodes()[o.index()];
            on.op() == Op::MulMat(MatHint::None)
                && o > anchor
                && g.use_count(o) == 1
                && !on.is_output()
        })
    }

    /// Follows the chain from `tail` as far as the predicates allow.
    fn extend(&mut self, pattern: Pattern, anchor: NodeId, tail: NodeId, rows: usize) -> Vec<Link> {
        let mut links = Vec::new();
        let mut cur = tail;
        let mut n_stages = 0;
        loop {
            match self.follow(anchor, cur, rows) {
                Ok(Some(link)) => {
                    let k = link.stages.iter().flatten().count();
                    if n_stages + k > MAX_STAGES {
                        self.refuse(pattern, anchor, Refusal::ChainTooLong { node: link.node });
                        break;
                    }
                    n_stages += k;
                    cur = link.node;
                    links.push(link);
                }
                Ok(None) => {
                    if let Some(u) = self.g.consumers(cur).next()
                        && self.g.use_count(cur) == 1
                        && self.defers(anchor, u)
                    {
                        self.deferred.push((anchor, u));
                    }
                    break;
                }
                Err(r) => {
                    self.refuse(pattern, anchor, r);
                    break;
                }
            }
        }
        links
    }

    fn try_gemv(&mut self, mm: NodeId) {
        let g = self.g;
        let rows = g.nodes()[mm.index()].tensor().ne()[0];
        if let Some(glu) = self.glu_candidate(mm)
            && self.try_glu(mm, glu, rows)
        {
            return;
        }
        let w = g.nodes()[mm.index()].src(0).unwrap_or(mm);
        let x = g.nodes()[mm.index()].src(1).unwrap_or(mm);
        let prologue = self.prologue_of(x);
        let links = self.extend(Pattern::Epilogue, mm, mm, rows);
        if links.is_empty() && prologue.is_none() {
            return;
        }
        if let Err(r) = check_weight(&self.t(w)).and_then(|_| check_f32_contiguous(&self.t(x))) {
            self.refuse(Pattern::Epilogue, mm, r);
            return;
        }
        let mut inputs = alloc::vec![self.t(w)];
        inputs.extend(self.act_reads(x, prologue.as_ref()));
        if let Some((epilogue, operands, n)) = self.best_prefix(
            Pattern::Epilogue,
            mm,
            &[mm],
            &links,
            &inputs,
            prologue.as_ref(),
        ) {
            let mut nodes = alloc::vec![mm];
            nodes.extend(links[..n].iter().map(|l| l.node));
            let out = *nodes.last().unwrap_or(&mm);
            self.claim(Step::Gemv(FusedGemv {
                matmul: mm,
                epilogue,
                operands,
                out,
                nodes,
                prologue,
                kv: None,
                argmax: None,
            }));
        }
    }

    /// The GLU node if `mm` is one of its two matmul inputs.
    fn glu_candidate(&self, mm: NodeId) -> Option<NodeId> {
        let g = self.g;
        let u = g.consumers(mm).next()?;
        match g.nodes()[u.index()].op() {
            Op::Glu(_) if !self.claimed(u) => Some(u),
            _ => None,
        }
    }

    fn try_glu(&mut self, anchor: NodeId, glu: NodeId, rows: usize) -> bool {
        let g = self.g;
        let gn = &g.nodes()[glu.index()];
        let (Some(gate), Some(up)) = (gn.src(0), gn.src(1)) else {
            return false;
        };
        let Op::Glu(act) = gn.op() else { return false };
        let is_mm = |id: NodeId| g.nodes()[id.index()].op() == Op::MulMat(MatHint::None);
        if !is_mm(gate) || !is_mm(up) {
            return false;
        }
        if gate == up {
            self.refuse(
                Pattern::Glu,
                anchor,
                Refusal::OperandIsIntermediate { node: glu },
            );
            return false;
        }
        if self.claimed(gate) || self.claimed(up) {
            let node = if self.claimed(gate) { gate } else { up };
            self.refuse(Pattern::Glu, anchor, Refusal::AlreadyFused { node });
            return false;
        }
        let (gnode, unode) = (&g.nodes()[gate.index()], &g.nodes()[up.index()]);
        let (wg, wu, x) = (
            gnode.src(0).unwrap_or(gate),
            unode.src(0).unwrap_or(up),
            gnode.src(1).unwrap_or(gate),
        );
        let (twg, twu) = (self.t(wg).1, self.t(wu).1);
        if unode.src(1) != Some(x) || twg.dtype() != twu.dtype() || twg.ne() != twu.ne() {
            self.refuse(Pattern::Glu, anchor, Refusal::GluMismatch { node: glu });
            return false;
        }
        let checks = check_intermediate(gate, g.use_count(gate), gnode.is_output())
            .and_then(|_| check_intermediate(up, g.use_count(up), unode.is_output()))
            .and_then(|_| check_weight(&self.t(wg)))
            .and_then(|_| check_weight(&self.t(wu)))
            .and_then(|_| check_f32_contiguous(&self.t(x)));
        if let Err(r) = checks {
            self.refuse(Pattern::Glu, anchor, r);
            return false;
        }
        let links = self.extend(Pattern::Glu, anchor, glu, rows);
        let mut base = alloc::vec![gate, up, glu];
        base.sort();
        let prologue = self.prologue_of(x);
        let mut inputs = alloc::vec![self.t(wg), self.t(wu)];
        inputs.extend(self.act_reads(x, prologue.as_ref()));
        let Some((epilogue, operands, n)) = self.best_prefix(
            Pattern::Glu,
            anchor,
            &base,
            &links,
            &inputs,
            prologue.as_ref(),
        ) else {
            return false;
        };
        let mut nodes = base;
        nodes.extend(links[..n].iter().map(|l| l.node));
        let out = *nodes.last().unwrap_or(&glu);
        self.claim(Step::GluGemv(FusedGlu {
            gate,
            up,
            glu,
            act,
            epilogue,
            operands,
            out,
            nodes,
            prologue,
        }));
        true
    }

    /// The longest legal prefix of `links` (ending at a link with a stage,
    /// or, for the GLU and a GEMV with a prologue, possibly empty) as an
    /// epilogue. A prologue's norm and mul are checked as elided parts of
    /// the pattern: their memory, and writes scheduled from the norm on.
    fn best_prefix(
        &mut self,
        pattern: Pattern,
        anchor: NodeId,
        base: &[NodeId],
        links: &[Link],
        inputs: &[Tensor],
        prologue: Option<&NormPrologue>,
    ) -> Option<(Epilogue, Operands, usize)> {
        let min = if pattern == Pattern::Glu || prologue.is_some() {
            0
        } else {
            1
        };
        for n in (min..=links.len()).rev() {
            if n > 0 && links[n - 1].stages[0].is_none() {
                continue;
            }
            let (epilogue, operands, elementwise, row_biases) = build_epilogue(&links[..n]);
            let mut nodes: Vec<NodeId> = base.to_vec();
            nodes.extend(links[..n].iter().map(|l| l.node));
            let out = *nodes.last().unwrap_or(&anchor);
            let mut reads: Vec<Tensor> = inputs.to_vec();
            reads.extend(row_biases.iter().map(|&b| self.t(b)));
            let ops: Vec<Tensor> = elementwise.iter().map(|&o| self.t(o)).collect();
            let dst = self.t(out).1;
            let mut all_reads = reads.clone();
            all_reads.extend(ops.iter().copied());
            let mut mem_nodes = nodes.clone();
            if let Some(p) = prologue {
                mem_nodes.extend([p.norm, p.mul]);
            }
            let verdict = check_gemv_overlap(&dst, &reads, &ops)
                .and_then(|_| self.check_memory(&mem_nodes, out, &all_reads));
            match verdict {
                Ok(()) => return Some((epilogue, operands, n)),
                Err(r) => self.refuse(pattern, anchor, r),
            }
        }
        None
    }

    /// Intermediates vs every tensor outside the pattern, and writes
    /// scheduled between the pattern's first and last node vs its reads
    /// (`out`, the destination, need not be the last of `nodes`).
    fn check_memory(&self, nodes: &[NodeId], out: NodeId, reads: &[Tensor]) -> Result<(), Refusal> {
        let g = self.g;
        let first = nodes.iter().min().copied().unwrap_or(out);
        for (a_i, &a) in nodes.iter().enumerate() {
            for &b in &nodes[a_i + 1..] {
                let both_live = matches!(
                    (g.nodes()[a.index()].op(), g.nodes()[b.index()].op()),
                    (Op::MulMat(_), Op::MulMat(_))
                );
                check_pattern_pair(&self.t(a), &self.t(b), both_live)?;
            }
        }
        for &i in nodes.iter().filter(|&&i| i != out) {
            let ti = self.t(i);
            check_intermediate_memory(&ti, &self.t(out), true)?;
            for (j, _) in g.nodes().iter().enumerate() {
                let o = NodeId(j as u32);
                if !nodes.contains(&o) {
                    check_intermediate_memory(&ti, &self.t(o), false)?;
                }
            }
        }
        for j in first.index() + 1..out.index() {
            let b = NodeId(j as u32);
            let bn = &g.nodes()[j];
            if nodes.contains(&b) || bn.op() == Op::Input || bn.op().is_view() {
                continue;
            }
            for (input, t) in reads {
                if through_views(self.g, *input) != b && bn.tensor().overlaps(t) {
                    return Err(Refusal::ClobberedBetween {
                        writer: b,
                        input: *input,
                    });
                }
            }
        }
        Ok(())
    }

    /// The key/value append anchored at the row write `write`
    /// ([`crate::kv_append`]): claimed, or its refusal recorded.
    fn try_kv_append(&mut self, write: NodeId) {
        let owner = &self.owner;
        let in_prologue = &self.in_prologue;
        let free = |id: NodeId| owner[id.index()].is_none() && !in_prologue[id.index()];
        match crate::kv_append::match_kv_append(self.g, write, free) {
            Ok(step) => {
                if !self.attach_kv_tail(&step) {
                    self.claim(Step::KvAppend(step));
                }
            }
            Err(reason) => self.refusals.push(Refused {
                pattern: Pattern::KvAppend,
                anchor: write,
                reason,
            }),
        }
    }

    /// Makes `kv` the tail of the GEMV whose result its rows are views of
    /// (a fused GEMV step, or a plain one-column product made one); `false`
    /// where it stays a step of its own, with the reason recorded where the
    /// tail was refused.
    fn attach_kv_tail(&mut self, kv: &FusedKvAppend) -> bool {
        let g = self.g;
        let Some(k) = g.nodes()[kv.k_rope.index()].src(0) else {
            return false;
        };
        let Some((at, mut step)) = self.tail_host(through_views(g, k)) else {
            return false;
        };
        let reads = self.gemv_reads(&step);
        match crate::kv_append::check_gemv_tail(g, &step.nodes, step.out, &reads, kv) {
            Ok(true) => {}
            Ok(false) => return false,
            Err(r) => {
                self.refuse(Pattern::KvAppend, kv.k_write, r);
                return false;
            }
        }
        step.kv = Some(kv.clone());
        self.join_tail(at, step, &kv.nodes);
        true
    }

    /// Makes the argmax `tail` the tail of the GEMV whose result it reads,
    /// where that is a GEMV step (or a plain product made one); its refusal
    /// recorded where a predicate refuses it. Otherwise the argmax stays a
    /// node of its own.
    fn attach_argmax_tail(&mut self, tail: &FusedArgmax) {
        let Some((at, mut step)) = tail.base(self.g).and_then(|b| self.tail_host(b)) else {
            return;
        };
        let reads = self.gemv_reads(&step);
        match crate::argmax_tail::check_gemv_argmax(self.g, &step.nodes, step.out, &reads, tail) {
            Ok(true) => {}
            Ok(false) => return,
            Err(r) => return self.refuse(Pattern::ArgmaxTail, tail.node, r),
        }
        step.argmax = Some(tail.clone());
        self.join_tail(at, step, &[tail.node]);
    }

    /// The GEMV step a tail reading node `base` would join: a fused one
    /// without a tail yet (its index), or the plain product at `base` as a
    /// new one.
    fn tail_host(&self, base: NodeId) -> Option<(Option<usize>, FusedGemv)> {
        match self.owner[base.index()] {
            Some(s) => match &self.fused[s] {
                Step::Gemv(f) if f.out == base && f.kv.is_none() && f.argmax.is_none() => {
                    Some((Some(s), f.clone()))
                }
                _ => None,
            },
            None => self.plain_gemv(base).map(|f| (None, f)),
        }
    }

    /// `step`, which took a tail of `tail_nodes`, stored back at `at` (its
    /// index) or claimed as a new step.
    fn join_tail(&mut self, at: Option<usize>, mut step: FusedGemv, tail_nodes: &[NodeId]) {
        step.nodes.extend(tail_nodes);
        step.nodes.sort();
        match at {
            Some(s) => {
                for id in tail_nodes {
                    self.owner[id.index()] = Some(s);
                }
                self.fused[s] = Step::Gemv(step);
            }
            None => self.claim(Step::Gemv(step)),
        }
    }

    /// The unclaimed one-column product `mm` as a GEMV step of its own (no
    /// epilogue; the prologue offered for its activations, if any), where
    /// its weights and activations are ones a GEMV takes.
    fn plain_gemv(&self, mm: NodeId) -> Option<FusedGemv> {
        let n = &self.g.nodes()[mm.index()];
        if self.in_prologue[mm.index()] || n.op() != Op::MulMat(MatHint::None) {
            return None;
        }
        let (w, x) = (n.src(0)?, n.src(1)?);
        check_weight(&self.t(w))
            .and_then(|_| check_f32_contiguous(&self.t(x)))
            .ok()?;
        Some(FusedGemv {
            matmul: mm,
            epilogue: Epilogue::NONE,
            operands: [None; MAX_STAGES],
            out: mm,
            nodes: alloc::vec![mm],
            prologue: self.prologue_of(x),
            kv: None,
            argmax: None,
        })
    }

    /// What GEMV step `f` reads from memory: its weights, its activations
    /// (or its prologue's tensors) and its epilogue's operands.
    fn gemv_reads(&self, f: &FusedGemv) -> Vec<Tensor> {
        let mn = &self.g.nodes()[f.matmul.index()];
        let (w, x) = (mn.src(0).unwrap_or(f.matmul), mn.src(1).unwrap_or(f.matmul));
        let mut reads = alloc::vec![self.t(w)];
        reads.extend(self.act_reads(x, f.prologue.as_ref()));
        reads.extend(f.operands.iter().flatten().map(|&o| self.t(o)));
        reads
    }

    fn try_signed_fwht(&mut self, mm: NodeId) {
        let g = self.g;
        let mn = &g.nodes()[mm.index()];
        // An element-wise consumer of a Hadamard transform is never fused.
        let mut cur = mm;
        while let (1, Some(u)) = (g.use_count(cur), g.consumers(cur).next()) {
            let op = g.nodes()[u.index()].op();
            if op.is_view() {
                cur = u;
            } else {
                if is_elementwise(op) {
                    self.refuse(
                        Pattern::Epilogue,
                        mm,
                        Refusal::EpilogueOnHadamard { node: mm },
                    );
                }
                break;
            }
        }
        let Some(src) = mn.src(1) else { return };
        let (mul, reshape) = match g.nodes()[src.index()].op() {
            Op::Mul => (src, None),
            Op::Reshape => match g.nodes()[src.index()].src(0) {
                Some(m) if g.nodes()[m.index()].op() == Op::Mul => (m, Some(src)),
                _ => return,
            },
            _ => return,
        };
        let n = self.t(mm).1.ne()[0];
        if let Err(r) = self.signed_fwht_checks(mm, mul, reshape, n) {
            self.refuse(Pattern::SignedFwht, mm, r);
        }
    }

    fn signed_fwht_checks(
        &mut self,
        mm: NodeId,
        mul: NodeId,
        reshape: Option<NodeId>,
        n: usize,
    ) -> Result<(), Refusal> {
        let g = self.g;
        check_hadamard_size(n)?;
        for id in [Some(mul), reshape].into_iter().flatten() {
            if self.claimed(id) {
                return Err(Refusal::AlreadyFused { node: id });
            }
            let node = &g.nodes()[id.index()];
            check_intermediate(id, g.use_count(id), node.is_output())?;
        }
        let mn = &g.nodes()[mul.index()];
        let (a, b) = (mn.src(0).unwrap_or(mul), mn.src(1).unwrap_or(mul));
        let is_vec = |id: NodeId| {
            let ne = self.t(id).1.ne();
            ne[1] == 1 && ne[2] == 1 && ne[3] == 1
        };
        let (x, signs) = if is_vec(b) || !is_vec(a) {
            (a, b)
        } else {
            (b, a)
        };
        let (tx, ts) = (self.t(x), self.t(signs));
        check_f32_contiguous(&tx)?;
        check_signs(&ts, n, tx.1.ne()[0])?;
        let dst = self.t(mm).1;
        check_fwht_overlap(&dst, &tx, &ts)?;
        let mut nodes = alloc::vec![mul];
        nodes.extend(reshape);
        nodes.push(mm);
        self.check_memory(&nodes, mm, &[tx, ts])?;
        let desc = FwhtDesc::new(n)
            .and_then(|d| d.with_signs(ts.1.n_elements()))
            .map_err(|_| Refusal::FwhtSize { n })?;
        self.claim(Step::SignedFwht(FusedFwht {
            x,
            signs,
            matmul: mm,
            desc,
            nodes,
        }));
        Ok(())
    }
}

/// The epilogue for `links`, its operand table, the element-wise operands
/// (which may alias the destination exactly) and the row biases (which may not).
fn build_epilogue(links: &[Link]) -> (Epilogue, Operands, Vec<NodeId>, Vec<NodeId>) {
    let mut e = Epilogue::NONE;
    let mut operands: Operands = [None; MAX_STAGES];
    let mut elementwise = Vec::new();
    let mut row_biases = Vec::new();
    for st in links.iter().flat_map(|l| l.stages.iter().flatten()) {
        let slot = e.n_operands();
        let stage = match *st {
            LinkStage::Act(a) => Stage::Act(a),
            LinkStage::Add(o) | LinkStage::Mul(o) | LinkStage::RowBias(o) => {
                operands[slot] = Some(o);
                match *st {
                    LinkStage::RowBias(_) => {
                        row_biases.push(o);
                        Stage::AddRowBias { slot: slot as u8 }
                    }
                    LinkStage::Add(_) => {
                        elementwise.push(o);
                        Stage::Add { slot: slot as u8 }
                    }
                    _ => {
                        elementwise.push(o);
                        Stage::Mul { slot: slot as u8 }
                    }
                }
            }
        };
        // `extend` never collects more than MAX_STAGES stages.
        e = e.then(stage).unwrap_or(e);
    }
    (e, operands, elementwise, row_biases)
}
