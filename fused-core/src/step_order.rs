//! Where a fused step runs: at its last node, so every operand is ready.
//! Moving work there is sound only where nothing scheduled in between
//! sees the difference; [`check_between`] is that proof for the decode
//! steps and GEMV tails ([`crate::kv_append`], [`crate::argmax_tail`]).

use crate::graph::{Graph, NodeId, Op};
use crate::legality::Refusal;
use crate::tensor::{Overlap, TensorDesc};

/// The node whose result `id` holds: `id` itself, or the source its views
/// and reshapes lead back to.
pub(crate) fn through_views(g: &Graph, mut id: NodeId) -> NodeId {
    while let Ok(n) = g.node(id) {
        match (n.op().is_view(), n.src(0)) {
            (true, Some(s)) => id = s,
            _ => break,
        }
    }
    id
}

/// Whether a step of `nodes` (sorted) that reads `reads` and writes
/// `writes` may run at its last node: nothing between its first and last
/// node overwrites what it reads or reads what it writes earlier in the
/// unfused order.
pub(crate) fn check_between(
    g: &Graph,
    nodes: &[NodeId],
    reads: &[(NodeId, TensorDesc)],
    writes: &[(NodeId, TensorDesc)],
) -> Result<(), Refusal> {
    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
        return Ok(());
    };
    for i in first.index() + 1..last.index() {
        let id = NodeId(i as u32);
        if nodes.contains(&id) {
            continue;
        }
        let n = g.node(id).map_err(|_| Refusal::AlreadyFused { node: id })?;
        // Views and inputs run nothing: what reads through a view is
        // checked at the reader.
        if n.op().is_view() || n.op() == Op::Input {
            continue;
        }
        if let Some((input, _)) = reads
            .iter()
            .find(|(_, t)| t.overlap(n.tensor()) != Overlap::Disjoint)
        {
            return Err(Refusal::ClobberedBetween {
                writer: id,
                input: *input,
            });
        }
        for r in n.srcs() {
            let rt = g.tensor(r).map_err(|_| Refusal::AlreadyFused { node: r })?;
            if let Some((w, _)) = writes
                .iter()
                .find(|(w, wt)| w.index() < i && wt.overlap(rt) != Overlap::Disjoint)
            {
                return Err(Refusal::ReadsMovedResult {
                    reader: id,
                    node: *w,
                });
            }
        }
    }
    Ok(())
}
