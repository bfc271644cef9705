//! Greedy selection as a GEMV's tail ([`FusedArgmax`]): the argmax of a
//! GEMV's result (the output head's logits) computed by the GEMV as it
//! stores the result, so the logits are not read back by a pass of their
//! own and the token costs one launch fewer.
//!
//! Anchored at the argmax node; it joins the GEMV step whose result it
//! reads, through reshapes and views, and the predicates, each with its
//! refusal:
//! - the argmax reads the whole result in the GEMV's own layout (its
//!   columns are the GEMV's columns: [`Refusal::PartialView`] otherwise);
//! - the index it writes overlaps nothing the GEMV reads or writes
//!   ([`Refusal::IntermediatesOverlap`]);
//! - the step runs at the argmax, so nothing scheduled between the GEMV and
//!   the argmax overwrites what the GEMV reads or the result itself
//!   ([`Refusal::ClobberedBetween`])
//!   or reads the result the step now writes later
//!   ([`Refusal::ReadsMovedResult`]).
//!
//! The result is still written (it may be a graph output, as the logits
//! are where a caller wants them too); a backend whose GEMV cannot reduce
//! as it stores runs the GEMV and then the argmax.

use alloc::vec::Vec;

use crate::graph::{Graph, NodeId, Op};
use crate::legality::Refusal;
use crate::step_order::{check_between, through_views};
use crate::tensor::{Overlap, TensorDesc};

/// The argmax of a GEMV's result, run as the GEMV's tail
/// ([`crate::planner::FusedGemv::argmax`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedArgmax {
    /// The argmax node.
    pub node: NodeId,
}

/// The operands of an argmax tail as a backend receives them
/// ([`crate::lower::GemvCommand::argmax`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArgmaxOperands {
    /// The argmax's input: the GEMV's result, `[n, cols]`.
    pub x: TensorDesc,
    /// The index of each column's maximum, `[1, cols]` F32.
    pub out: TensorDesc,
}

impl FusedArgmax {
    /// The tail anchored at `node`, if it is an argmax.
    pub(crate) fn at(g: &Graph, node: NodeId) -> Option<FusedArgmax> {
        (g.node(node).ok()?.op() == Op::ArgMax).then_some(FusedArgmax { node })
    }

    /// The GEMV result the argmax reads, through reshapes and views.
    pub(crate) fn base(&self, g: &Graph) -> Option<NodeId> {
        let x = g.node(self.node).ok()?.src(0)?;
        Some(through_views(g, x))
    }

    /// Its operands, looked up in `g`.
    pub(crate) fn operands(&self, g: &Graph) -> Option<ArgmaxOperands> {
        let n = g.node(self.node).ok()?;
        Some(ArgmaxOperands {
            x: *g.tensor(n.src(0)?).ok()?,
            out: *n.tensor(),
        })
    }
}

/// Whether `tail` may run as the tail of the GEMV step of `gemv_nodes`
/// (sorted) whose result is node `out` and which reads `gemv_reads`:
/// `Ok(false)` where the argmax does not read that result at all.
pub(crate) fn check_gemv_argmax(
    g: &Graph,
    gemv_nodes: &[NodeId],
    out: NodeId,
    gemv_reads: &[(NodeId, TensorDesc)],
    tail: &FusedArgmax,
) -> Result<bool, Refusal> {
    let gone = || Refusal::AlreadyFused { node: tail.node };
    if tail.base(g) != Some(out) {
        return Ok(false);
    }
    let a = tail.operands(g).ok_or_else(gone)?;
    let out_t = *g.tensor(out).map_err(|_| gone())?;
    let x_node = g
        .node(tail.node)
        .ok()
        .and_then(|n| n.src(0))
        .ok_or_else(gone)?;
    // The same bytes as the same columns: the tail reduces each column of
    // the GEMV as it stores it.
    let same = a.x.overlap(&out_t) != Overlap::Disjoint
        && a.x.byte_extent() == out_t.byte_extent()
        && a.x.is_contiguous()
        && out_t.is_contiguous()
        && a.x.ne()[0] == out_t.ne()[0];
    if !same {
        return Err(Refusal::PartialView { node: x_node });
    }
    for (r, rt) in gemv_reads.iter().chain([&(out, out_t)]) {
        if a.out.overlap(rt) != Overlap::Disjoint {
            return Err(Refusal::IntermediatesOverlap {
                a: tail.node,
                b: *r,
            });
        }
    }
    let mut nodes: Vec<NodeId> = gemv_nodes.to_vec();
    nodes.push(tail.node);
    nodes.sort();
    // The argmax reads the result where the unfused order has it: nothing
    // in between may overwrite it either.
    let mut reads = gemv_reads.to_vec();
    reads.push((out, out_t));
    let writes = [(out, out_t), (tail.node, a.out)];
    check_between(g, &nodes, &reads, &writes).map(|()| true)
}
