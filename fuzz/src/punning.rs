//! Type punning in a graph's memory: a tensor of another format (F16,
//! BF16, a block format) lying over bytes where an F32 result is stored.
//!
//! NaN payloads are not part of any contract (which operand's NaN an x86
//! operation propagates depends on how the compiler ordered it), so two
//! correct evaluations may store NaNs with different payloads. Read as
//! F32, both are NaN; read through a punned view (half a NaN as a BF16, a
//! NaN word as a block's scale), they are different numbers, and the
//! difference spreads. [`nan_through_punning`] says when a graph is in
//! that case, so that the oracle does not call it a finding.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::graph::{Graph, NodeId, Op};
use fused_core::memory::Memory;
use fused_core::planner::{Plan, Step};
use fused_core::reference::eval::eval_plan;

/// Whether some tensor not in F32 overlaps the result of a compute node.
pub fn has_punning(g: &Graph) -> bool {
    let computed = |op: Op| !matches!(op, Op::Input) && !op.is_view();
    g.nodes().iter().any(|a| {
        a.tensor().dtype() != DType::F32
            && g.nodes()
                .iter()
                .any(|r| computed(r.op()) && r.tensor().overlaps(a.tensor()))
    })
}

/// Whether `g` has punning and its unfused reference evaluation from
/// `mem` stores a NaN in some compute node's result.
pub fn nan_through_punning(g: &Graph, mem: &Memory, mode: GemvMode) -> bool {
    if !has_punning(g) {
        return false;
    }
    let mut mem = mem.clone();
    for (i, n) in g.nodes().iter().enumerate() {
        if n.op() == Op::Input || n.op().is_view() {
            continue;
        }
        let one = Plan {
            steps: vec![Step::Node(NodeId(i as u32))],
            ..Plan::default()
        };
        if eval_plan(g, &one, &mut mem, mode).is_err() {
            return false;
        }
        if mem
            .read(n.tensor())
            .is_ok_and(|v| v.iter().any(|x| x.is_nan()))
        {
            return true;
        }
    }
    false
}
