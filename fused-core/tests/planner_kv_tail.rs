//! The key/value append as the tail of the GEMV that stacks q, k and v:
//! when the planner attaches it, what it refuses and why, and that the
//! plan computes what the graph does, bit for bit.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::decode::RopeMode;
use fused_core::legality::Refusal;
use fused_core::planner::{Pattern, Plan, Step, plan};
use fused_core::reference::eval::{eval_graph, eval_plan};
use fused_testkit::stacked_qkv::{StackedQkv, StackedShape};

const PLAIN: StackedShape = StackedShape {
    dtype: DType::F32,
    k: 16,
    head_dim: 8,
    n_head: 2,
    n_kv: 1,
    rows: 4,
    mode: RopeMode::Adjacent,
    pad: 0,
    reader_between: false,
    o_proj: false,
};

/// Runs the graph node by node and `p` step by step from the same memory
/// at several positions (the caches carried from one to the next) and
/// checks every result bit for bit.
fn plan_equals_graph(l: &StackedQkv, p: &Plan) {
    let mut mem = l.memory(71);
    for position in [0.0f32, 2.0, 3.0] {
        mem.write(&l.tensor(l.pos), &[position]).unwrap();
        let (mut a, mut b) = (mem.clone(), mem.clone());
        eval_graph(&l.graph, &mut a, GemvMode::F32).unwrap();
        eval_plan(&l.graph, p, &mut b, GemvMode::F32).unwrap();
        for (what, id) in l.results() {
            let t = l.tensor(id);
            assert_eq!(
                a.read(&t).unwrap(),
                b.read(&t).unwrap(),
                "{what} at {position}"
            );
        }
        mem = a;
    }
}

fn kv_refusals(p: &Plan) -> Vec<Refusal> {
    p.refusals
        .iter()
        .filter(|r| r.pattern == Pattern::KvAppend)
        .map(|r| r.reason)
        .collect()
}

#[test]
fn the_append_of_stacked_rows_becomes_the_gemvs_tail() {
    let l = StackedQkv::new(PLAIN);
    let p = plan(&l.graph);
    let fused: Vec<&Step> = p.steps.iter().filter(|s| s.is_fused()).collect();
    let [Step::Gemv(f)] = fused[..] else {
        panic!("{:?}", p.steps);
    };
    let kv = f.kv.as_ref().expect("the append as the GEMV's tail");
    assert_eq!(f.out, l.qkv);
    assert_eq!(
        (kv.q_rope, kv.k_rope, kv.k_write, kv.v_write),
        (Some(l.q_rope), l.k_rope, l.k_write, Some(l.v_write))
    );
    for id in [l.qkv, l.q_rope, l.k_rope, l.k_write, l.v_write] {
        assert!(f.nodes.contains(&id), "{id:?} in {:?}", f.nodes);
    }
    assert!(kv_refusals(&p).is_empty(), "{:?}", p.refusals);
    // The GEMV with its tail, then attention.
    assert_eq!(p.kernel_steps(&l.graph), 2, "{:?}", p.steps);
    plan_equals_graph(&l, &p);
}

/// The append stays a step of its own, after the GEMV, for the reason
/// `reason` gives for the layer.
fn refused_as(s: StackedShape, reason: impl Fn(&StackedQkv) -> Refusal) {
    let l = StackedQkv::new(s);
    let p = plan(&l.graph);
    assert!(kv_refusals(&p).contains(&reason(&l)), "{:?}", p.refusals);
    assert!(
        p.steps
            .iter()
            .all(|st| !matches!(st, Step::Gemv(f) if f.kv.is_some())),
        "{:?}",
        p.steps
    );
    assert!(
        p.steps.iter().any(|st| matches!(st, Step::KvAppend(_))),
        "{:?}",
        p.steps
    );
    plan_equals_graph(&l, &p);
}

#[test]
fn pairs_half_a_head_apart_are_not_a_tail() {
    let s = StackedShape {
        mode: RopeMode::Halves,
        ..PLAIN
    };
    // k's RoPE is the first checked.
    refused_as(s, |l| Refusal::PairsAcrossTiles { node: l.k_rope });
}

#[test]
fn heads_from_an_odd_row_are_not_a_tail() {
    let s = StackedShape { pad: 1, ..PLAIN };
    refused_as(s, |l| Refusal::PairsAcrossTiles { node: l.k_rope });
}

#[test]
fn a_reader_of_the_rows_in_between_keeps_the_append_apart() {
    let s = StackedShape {
        reader_between: true,
        o_proj: false,
        ..PLAIN
    };
    refused_as(s, |l| Refusal::ReadsMovedResult {
        reader: l.reader.expect("a reader"),
        node: l.qkv,
    });
}
