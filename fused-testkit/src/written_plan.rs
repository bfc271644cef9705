//! A graph's plan compiled on a backend as a device plan and written with
//! its initial memory, as the tail tests compare them.

use core::fmt::Debug;

use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::graph::Graph;
use fused_core::memory::Memory;
use fused_core::planner::Plan;

/// `p` (made for `graph`) compiled on `be` for `mode` over buffers of
/// `sizes` bytes, asserted to run no step on the host, with `mem` written
/// into it; `case` names the test case in a failure.
pub fn written_plan<'b, B: Backend>(
    be: &'b B,
    graph: &Graph,
    p: &Plan,
    mode: GemvMode,
    sizes: &[usize],
    mem: &Memory,
    case: &str,
) -> B::Plan<'b>
where
    B::Error: Debug,
{
    let mut rp = be.compile(graph, p, mode, sizes).expect("a device plan");
    assert!(!rp.stats().host_steps, "{case}: {:?}", rp.stats());
    rp.write_all(mem).expect("the plan's memory");
    rp
}
