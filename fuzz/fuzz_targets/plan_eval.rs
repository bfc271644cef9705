//! The planner over arbitrary graphs and buffer layouts
//! (`fused_fuzz::graph_gen`). Oracle: every plan `planner::plan` returns
//! evaluates, under the reference (`eval_plan`), to the unfused graph's
//! outputs (`eval_graph`) bit for bit (NaNs equal), and errs only where the
//! unfused graph does; the core's executor on the CPU backend's scalar ISA
//! (bit-exact to the reference) gives the same outputs for the plan and for
//! the unfused graph, or a typed error. Values are not compared where a
//! NaN is stored under a view of another format (`fused_fuzz::punning`):
//! NaN payloads are unspecified, and such a view turns them into numbers.

#![no_main]

use std::sync::OnceLock;

use arbitrary::Unstructured;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::exec::Executor;
use fused_core::graph::Graph;
use fused_core::memory::Memory;
use fused_core::planner::plan;
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_cpu::{CpuBackend, Isa};
use fused_fuzz::bits::{assert_same, assert_same_bytes};
use fused_fuzz::graph_gen::build;
use fused_fuzz::punning::nan_through_punning;
use libfuzzer_sys::fuzz_target;

/// The CPU backend's scalar ISA, one thread, made once.
fn scalar() -> &'static CpuBackend {
    static B: OnceLock<CpuBackend> = OnceLock::new();
    B.get_or_init(|| CpuBackend::with_isa(Isa::Scalar, 1).expect("scalar backend"))
}

/// Asserts that the outputs of `g` read the same in `a` and `b`: F32
/// tensors value by value, NaNs equal; tensors of other formats (inputs
/// marked as outputs, which F32 results may have overwritten) byte by byte
/// with NaN words equal, since NaN payloads are not part of the contract
/// and an F16, BF16 or block view of half a NaN is not a NaN).
fn same_outputs(what: &str, g: &Graph, a: &Memory, b: &Memory) {
    for n in g.nodes().iter().filter(|n| n.is_output()) {
        let t = n.tensor();
        match t.dtype() {
            DType::F32 => {
                assert_same(
                    what,
                    &a.read(t).expect("output reads"),
                    &b.read(t).expect("output reads"),
                );
            }
            _ => {
                let r = t.byte_extent();
                let (x, y) = (a.buffer(t.buffer()), b.buffer(t.buffer()));
                let (x, y) = (x.expect("buffer"), y.expect("buffer"));
                assert_same_bytes(what, x, y, r.start, r.end);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(mode) = u.choose(&[GemvMode::F32, GemvMode::Ggml]).copied() else {
        return;
    };
    let Ok(Some(case)) = build(&mut u) else {
        return;
    };
    let g = &case.graph;
    let p = plan(g);

    let mut unfused = case.memory.clone();
    let r_graph = eval_graph(g, &mut unfused, mode);
    let mut fused = case.memory.clone();
    let r_plan = eval_plan(g, &p, &mut fused, mode);
    assert_eq!(
        r_graph.is_ok(),
        r_plan.is_ok(),
        "graph {r_graph:?} vs plan {r_plan:?}\n{p:?}"
    );
    if r_graph.is_err() {
        return;
    }
    // A NaN seen through a punned view is a number that depends on the
    // NaN's payload, which no evaluation promises: no value comparison.
    if nan_through_punning(g, &case.memory, mode) {
        return;
    }
    same_outputs("reference: plan vs graph", g, &unfused, &fused);

    let exec = Executor::new(scalar(), mode);
    let mut mem = case.memory.clone();
    if exec.run(g, &p, &mut mem).is_ok() {
        same_outputs("cpu scalar executor: plan vs reference", g, &unfused, &mem);
    }
    let mut mem = case.memory.clone();
    if exec.run_graph(g, &mut mem).is_ok() {
        same_outputs("cpu scalar executor: graph vs reference", g, &unfused, &mem);
    }
});
