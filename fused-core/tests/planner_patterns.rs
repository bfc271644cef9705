//! The planner, pattern by pattern: every fusion it accepts and every reason
//! it refuses one.
//!
//! Each test builds a small graph, asserts the exact [`Plan`] (steps, the
//! nodes each covers, epilogue stages, operand slots, refusals), and checks
//! that `eval_graph` and `eval_plan` give bit-identical outputs in both
//! [`GemvMode::F32`] and [`GemvMode::Ggml`].

mod common;

use common::*;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES, Stage};
use fused_core::fwht::FwhtDesc;
use fused_core::graph::{NodeId, Place};
use fused_core::legality::Refusal;
use fused_core::planner::{FusedFwht, FusedGemv, FusedGlu, Operands, Pattern, Plan, Refused, Step};
use fused_core::tensor::TensorDesc;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Plans `b`'s graph and evaluates it unfused and fused in both GEMV modes.
/// Asserts bit-identical outputs, that every output holds a non-zero value
/// (so a skipped step cannot hide behind zeroed memory) and that the plan
/// does not depend on the mode. Returns the plan.
/// A node whose result partially overlaps one of its sources.
const PARTIAL: fused_core::Error = fused_core::Error::AliasViolation {
    what: "a result partially overlaps one of its sources",
};

fn plan_and_compare(b: &Builder) -> Plan {
    let (plan, unfused, fused) = run_both(b, GemvMode::F32);
    assert!(!unfused.is_empty(), "the graph marks no output");
    for (i, out) in unfused.iter().enumerate() {
        assert!(
            out.iter().any(|&v| f32::from_bits(v) != 0.0),
            "output {i} is all zeros"
        );
    }
    assert_eq!(
        unfused, fused,
        "F32 mode: eval_plan differs from eval_graph\n{plan:#?}"
    );
    let (plan_ggml, unfused, fused) = run_both(b, GemvMode::Ggml);
    assert_eq!(
        unfused, fused,
        "Ggml mode: eval_plan differs from eval_graph\n{plan:#?}"
    );
    assert_eq!(plan, plan_ggml, "the plan depends on the GEMV mode");
    plan
}

fn shape(b: &Builder, id: NodeId) -> [usize; 4] {
    b.g.tensor(id).unwrap().ne()
}

/// Where node `id`'s tensor starts.
fn place_of(b: &Builder, id: NodeId) -> Place {
    let t = b.g.tensor(id).unwrap();
    Place {
        buffer: t.buffer(),
        offset: t.offset(),
    }
}

/// The place `bytes` bytes after `p`.
fn shifted(p: Place, bytes: usize) -> Place {
    Place {
        buffer: p.buffer,
        offset: p.offset + bytes,
    }
}

fn mul_mat(b: &mut Builder, w: NodeId, x: NodeId) -> NodeId {
    let [_, m, _, _] = shape(b, w);
    let [_, n1, n2, n3] = shape(b, x);
    let at = b.place_f32([m, n1, n2, n3]);
    b.g.mul_mat(w, x, at).unwrap()
}

fn hadamard_mm(b: &mut Builder, h: NodeId, x: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, x));
    b.g.mul_mat_hadamard(h, x, at).unwrap()
}

fn act(b: &mut Builder, a: Activation, src: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, src));
    b.g.unary(a, src, at).unwrap()
}

fn add(b: &mut Builder, x: NodeId, y: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, x));
    b.g.add(x, y, at).unwrap()
}

fn mul(b: &mut Builder, x: NodeId, y: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, x));
    b.g.mul(x, y, at).unwrap()
}

fn row_bias(b: &mut Builder, x: NodeId, bias: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, x));
    b.g.add_row_bias(x, bias, at).unwrap()
}

fn glu(b: &mut Builder, a: Activation, gate: NodeId, up: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, gate));
    b.g.glu(a, gate, up, at).unwrap()
}

/// A strided window of `src` starting at its first byte.
fn view(b: &mut Builder, src: NodeId, ne: [usize; 4], nb: [usize; 4]) -> NodeId {
    b.g.view(src, ne, nb, 0).unwrap()
}

fn other(b: &mut Builder, name: &'static str, src: NodeId) -> NodeId {
    let at = b.place_f32(shape(b, src));
    b.g.other(name, &[src], shape(b, src), at).unwrap()
}

/// An F16 input of shape `ne` filled with random values.
fn input_f16(b: &mut Builder, ne: [usize; 4]) -> NodeId {
    let p = b.place(2 * ne.iter().product::<usize>());
    let t = TensorDesc::contiguous(DType::F16, ne, p.buffer, p.offset).unwrap();
    let v = b.rng.vec(ne.iter().product());
    b.inits.push((t, Init::F32(v)));
    b.g.input(t).unwrap()
}

fn operands(ids: &[NodeId]) -> Operands {
    let mut o = [None; MAX_STAGES];
    for (slot, &id) in o.iter_mut().zip(ids) {
        *slot = Some(id);
    }
    o
}

fn epilogue(stages: &[Stage]) -> Epilogue {
    Epilogue::from_stages(stages).unwrap()
}

/// The fused GEMV over `nodes` (matmul first, output last).
fn gemv(stages: &[Stage], ops: &[NodeId], nodes: &[NodeId]) -> Step {
    Step::Gemv(FusedGemv {
        matmul: nodes[0],
        epilogue: epilogue(stages),
        operands: operands(ops),
        out: nodes[nodes.len() - 1],
        nodes: nodes.to_vec(),
        prologue: None,
        kv: None,
        argmax: None,
    })
}

fn nodes(ids: &[NodeId]) -> Vec<Step> {
    ids.iter().map(|&id| Step::Node(id)).collect()
}

fn refused(pattern: Pattern, anchor: NodeId, reason: Refusal) -> Refused {
    Refused {
        pattern,
        anchor,
        reason,
    }
}

/// A plan that runs `ids` one by one and records `refusals`.
fn unfused(ids: &[NodeId], refusals: Vec<Refused>) -> Plan {
    Plan {
        steps: nodes(ids),
        refusals,
        prologue_nodes: vec![],
    }
}

const SILU: Stage = Stage::Act(Activation::Silu);

fn add_slot(slot: u8) -> Stage {
    Stage::Add { slot }
}

fn mul_slot(slot: u8) -> Stage {
    Stage::Mul { slot }
}

// ---------------------------------------------------------------------------
// A. Accepted patterns
// ---------------------------------------------------------------------------

#[test]
fn a1_mm_act() {
    let mut b = Builder::new(101);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    b.g.mark_output(s).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[SILU], &[], &[m, s])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
    assert_eq!(plan.fused_steps(), 1);
    assert_eq!(plan.kernel_steps(&b.g), 1);
}

/// `mm → silu → mul(y)` for a weight of format `dtype`, `k × rows`.
fn check_act_mul(dtype: DType, k: usize, rows: usize, seed: u64) {
    let mut b = Builder::new(seed);
    let w = b.weight(dtype, k, rows);
    let x = b.input_f32([k, 1, 1, 1]);
    let y = b.input_f32([rows, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    let p = mul(&mut b, s, y);
    b.g.mark_output(p).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[SILU, mul_slot(0)], &[y], &[m, s, p])],
            refusals: vec![],
            prologue_nodes: vec![],
        },
        "weights {dtype}"
    );
}

#[test]
fn a2_mm_act_mul() {
    check_act_mul(DType::Q8_0, 64, 8, 102);
}

#[test]
fn a2_mm_act_mul_every_weight_format() {
    let cases = [
        (DType::F32, 32),
        (DType::F16, 32),
        (DType::BF16, 32),
        (DType::Q4_0, 64),
        (DType::Q4_1, 64),
        (DType::Q5_0, 32),
        (DType::Q5_1, 32),
        (DType::Q8_0, 64),
        (DType::IQ4_NL, 32),
    ];
    for (i, (dtype, k)) in cases.into_iter().enumerate() {
        check_act_mul(dtype, k, 4, 200 + i as u64);
    }
    // The super-block formats need K = 256; two rows keep them cheap.
    for (i, dtype) in [DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::TQ2_0]
        .into_iter()
        .enumerate()
    {
        check_act_mul(dtype, 256, 2, 300 + i as u64);
    }
}

#[test]
fn a3_mm_reshape_add() {
    let mut b = Builder::new(103);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([4, 2, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let r = b.g.reshape(m, [4, 2, 1, 1]).unwrap();
    let a = add(&mut b, r, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[add_slot(0)], &[res], &[m, r, a])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a4_long_chain() {
    let mut b = Builder::new(104);
    let w = b.weight(DType::Q8_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let bias = b.input_f32([8, 2, 1, 1]);
    let y = b.input_f32([8, 2, 1, 1]);
    let z = b.input_f32([8, 2, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let a1 = add(&mut b, m, bias);
    let g = act(&mut b, Activation::GeluErf, a1);
    let p = mul(&mut b, g, y);
    // The chain value as the second source of the add.
    let a2 = add(&mut b, z, p);
    b.g.mark_output(a2).unwrap();
    let plan = plan_and_compare(&b);
    let stages = [
        add_slot(0),
        Stage::Act(Activation::GeluErf),
        mul_slot(1),
        add_slot(2),
    ];
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&stages, &[bias, y, z], &[m, a1, g, p, a2])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a5_mm_row_bias_two_columns() {
    let mut b = Builder::new(105);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let bias = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let rb = row_bias(&mut b, m, bias);
    b.g.mark_output(rb).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[Stage::AddRowBias { slot: 0 }], &[bias], &[m, rb])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

/// `glu(silu)(W_g·x, W_u·x) + res` for weights of format `dtype`.
fn check_glu_add(dtype: DType, k: usize, rows: usize, seed: u64) {
    let mut b = Builder::new(seed);
    let wg = b.weight(dtype, k, rows);
    let wu = b.weight(dtype, k, rows);
    let x = b.input_f32([k, 1, 1, 1]);
    let res = b.input_f32([rows, 1, 1, 1]);
    let g = mul_mat(&mut b, wg, x);
    let u = mul_mat(&mut b, wu, x);
    let gl = glu(&mut b, Activation::Silu, g, u);
    let a = add(&mut b, gl, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let want = Step::GluGemv(FusedGlu {
        gate: g,
        up: u,
        glu: gl,
        act: Activation::Silu,
        epilogue: epilogue(&[add_slot(0)]),
        operands: operands(&[res]),
        out: a,
        nodes: vec![g, u, gl, a],
        prologue: None,
    });
    assert_eq!(
        plan,
        Plan {
            steps: vec![want],
            refusals: vec![],
            prologue_nodes: vec![],
        },
        "weights {dtype}"
    );
}

#[test]
fn a6_glu_dual_gemv_with_add() {
    check_glu_add(DType::Q4_0, 64, 8, 106);
    check_glu_add(DType::F32, 32, 4, 107);
    check_glu_add(DType::Q4_K, 256, 2, 108);
}

#[test]
fn a6_glu_dual_gemv_alone() {
    let mut b = Builder::new(109);
    let wg = b.weight(DType::Q8_0, 64, 8);
    let wu = b.weight(DType::Q8_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    // Up is computed before gate: the step is still anchored where it starts.
    let u = mul_mat(&mut b, wu, x);
    let g = mul_mat(&mut b, wg, x);
    let gl = glu(&mut b, Activation::GeluTanh, g, u);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    let want = Step::GluGemv(FusedGlu {
        gate: g,
        up: u,
        glu: gl,
        act: Activation::GeluTanh,
        epilogue: Epilogue::NONE,
        operands: [None; MAX_STAGES],
        out: gl,
        nodes: vec![u, g, gl],
        prologue: None,
    });
    assert_eq!(
        plan,
        Plan {
            steps: vec![want],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a7_signed_fwht_with_reshape() {
    let mut b = Builder::new(110);
    let x = b.input_f32([64, 1, 1, 1]);
    let s = b.signs(64);
    let h = b.hadamard(32);
    let xs = mul(&mut b, x, s);
    let r = b.g.reshape(xs, [32, 2, 1, 1]).unwrap();
    let t = hadamard_mm(&mut b, h, r);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let want = Step::SignedFwht(FusedFwht {
        x,
        signs: s,
        matmul: t,
        desc: FwhtDesc::new(32).unwrap().with_signs(64).unwrap(),
        nodes: vec![xs, r, t],
    });
    assert_eq!(
        plan,
        Plan {
            steps: vec![want],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a7_signed_fwht_without_reshape() {
    let mut b = Builder::new(111);
    let x = b.input_f32([32, 2, 1, 1]);
    let s = b.signs(32);
    let h = b.hadamard(32);
    let xs = mul(&mut b, x, s);
    let t = hadamard_mm(&mut b, h, xs);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let want = Step::SignedFwht(FusedFwht {
        x,
        signs: s,
        matmul: t,
        desc: FwhtDesc::new(32).unwrap().with_signs(32).unwrap(),
        nodes: vec![xs, t],
    });
    assert_eq!(
        plan,
        Plan {
            steps: vec![want],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a8_dst_exactly_aliasing_operand() {
    let mut b = Builder::new(112);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let res = b.input_f32([8, 2, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = place_of(&b, res);
    let a = b.g.add(m, res, at).unwrap();
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[add_slot(0)], &[res], &[m, a])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a8_in_place_chain() {
    // mm, silu and add all at one place: the intermediates coincide exactly
    // with the destination.
    let mut b = Builder::new(113);
    let w = b.weight(DType::Q8_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let p = b.place_f32([8, 1, 1, 1]);
    let m = b.g.mul_mat(w, x, p).unwrap();
    let s = b.g.unary(Activation::Silu, m, p).unwrap();
    let a = b.g.add(s, res, p).unwrap();
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[SILU, add_slot(0)], &[res], &[m, s, a])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a9_mm_as_glu_gate() {
    let mut b = Builder::new(114);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let y = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let gl = glu(&mut b, Activation::GeluTanh, m, y);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(
                &[Stage::Act(Activation::GeluTanh), mul_slot(0)],
                &[y],
                &[m, gl]
            )],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a9_mm_as_glu_up_is_not_a_chain() {
    // The matmul on the up side of a GLU whose gate is an input: the chain
    // ends there, nothing is fused and nothing is refused.
    let mut b = Builder::new(115);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let y = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let gl = glu(&mut b, Activation::Silu, y, m);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(plan, unfused(&[m, gl], vec![]));
}

#[test]
fn a10_two_projections_summed() {
    // `W1·x + W2·y`: the earlier matmul leaves the add to the later one,
    // which reads the earlier product as its operand.
    let mut b = Builder::new(116);
    let w1 = b.weight(DType::Q4_0, 64, 8);
    let w2 = b.weight(DType::Q8_0, 32, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let y = b.input_f32([32, 1, 1, 1]);
    let m1 = mul_mat(&mut b, w1, x);
    let m2 = mul_mat(&mut b, w2, y);
    let a = add(&mut b, m1, m2);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![Step::Node(m1), gemv(&[add_slot(0)], &[m1], &[m2, a])],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a10_two_projections_summed_when_the_later_cannot_fuse() {
    // The later matmul has activation-only Q8_K weights and takes no add, so
    // the earlier one keeps it (a second planning round) instead of leaving
    // the add unfused.
    let mut b = Builder::new(117);
    let w1 = b.weight(DType::Q4_0, 64, 8);
    let w2 = b.weight(DType::Q8_K, 256, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let y = b.input_f32([256, 1, 1, 1]);
    let m1 = mul_mat(&mut b, w1, x);
    let m2 = mul_mat(&mut b, w2, y);
    let a = add(&mut b, m1, m2);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::UnsupportedDType {
        node: w2,
        dtype: DType::Q8_K,
    };
    assert_eq!(
        plan,
        Plan {
            steps: vec![Step::Node(m2), gemv(&[add_slot(0)], &[m2], &[m1, a])],
            refusals: vec![
                refused(Pattern::Epilogue, m2, why),
                refused(Pattern::Epilogue, m2, Refusal::AlreadyFused { node: a }),
            ],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn a11_operand_produced_between_through_a_reshape() {
    // The residual is produced between the matmul and its add and reached
    // through a reshape: producing it is not clobbering it.
    let mut b = Builder::new(118);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let z = b.input_f32([4, 2, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let r0 = other(&mut b, "norm", z);
    let rv = b.g.reshape(r0, [8, 1, 1, 1]).unwrap();
    let a = add(&mut b, m, rv);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        Plan {
            steps: vec![
                Step::Node(r0),
                Step::Node(rv),
                gemv(&[add_slot(0)], &[rv], &[m, a])
            ],
            refusals: vec![],
            prologue_nodes: vec![],
        }
    );
}

// ---------------------------------------------------------------------------
// B. Refusals
// ---------------------------------------------------------------------------

#[test]
fn b_multiple_uses() {
    // The product itself is read twice.
    let mut b = Builder::new(120);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    let o = other(&mut b, "norm", m);
    b.g.mark_output(s).unwrap();
    b.g.mark_output(o).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::MultipleUses { node: m, uses: 2 };
    assert_eq!(
        plan,
        unfused(&[m, s, o], vec![refused(Pattern::Epilogue, m, why)])
    );

    // A later intermediate is read twice: the chain is cut before its consumer.
    let mut b = Builder::new(121);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    let a = add(&mut b, s, res);
    let o = other(&mut b, "norm", s);
    b.g.mark_output(a).unwrap();
    b.g.mark_output(o).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::MultipleUses { node: s, uses: 2 };
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[SILU], &[], &[m, s]), Step::Node(a), Step::Node(o)],
            refusals: vec![refused(Pattern::Epilogue, m, why)],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn b_graph_output() {
    let mut b = Builder::new(122);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    b.g.mark_output(m).unwrap();
    b.g.mark_output(s).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::GraphOutput { node: m };
    assert_eq!(
        plan,
        unfused(&[m, s], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_intermediate_aliases_outside() {
    // The product is placed on an input that a later node reads: eliding its
    // store would change what that node sees.
    let mut b = Builder::new(123);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let p = b.place_f32([8, 1, 1, 1]);
    let z = b.input_f32_at([8, 1, 1, 1], p);
    let m = b.g.mul_mat(w, x, p).unwrap();
    let s = act(&mut b, Activation::Silu, m);
    let o = other(&mut b, "norm", z);
    b.g.mark_output(s).unwrap();
    b.g.mark_output(o).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::IntermediateAliasesOutside { node: m, other: z };
    assert_eq!(
        plan,
        unfused(&[m, s, o], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_intermediates_overlap() {
    // The product partially overlaps the destination of the node that
    // reads it: refused when the graph is built.
    let mut b = Builder::new(124);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let p = b.place_f32([8, 1, 1, 1]);
    let m = b.g.mul_mat(w, x, p).unwrap();
    assert_eq!(b.g.unary(Activation::Silu, m, shifted(p, 4)), Err(PARTIAL));

    // Two elided intermediates partially overlap each other (neither reads
    // the other); the destination is elsewhere. The whole chain is refused,
    // then its prefix up to the silu (the product would alias `t`, outside it).
    let mut b = Builder::new(157);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let p = b.place_f32([8, 1, 1, 1]);
    let m = b.g.mul_mat(w, x, p).unwrap();
    let s = act(&mut b, Activation::Silu, m);
    let t = b.g.unary(Activation::Relu, s, shifted(p, 4)).unwrap();
    let a = add(&mut b, t, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::IntermediatesOverlap { a: m, b: t };
    let outside = Refusal::IntermediateAliasesOutside { node: m, other: t };
    assert_eq!(
        plan,
        unfused(
            &[m, s, t, a],
            vec![
                refused(Pattern::Epilogue, m, why),
                refused(Pattern::Epilogue, m, outside)
            ]
        )
    );

    // The two GLU products at the same place: the unfused graph needs both
    // at once. The GLU is refused from both anchors; the gate-side chain
    // (which would elide the gate product only) then finds it on the up
    // product, outside its pattern.
    let mut b = Builder::new(158);
    let wg = b.weight(DType::Q4_0, 64, 8);
    let wu = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let p = b.place_f32([8, 1, 1, 1]);
    let g = b.g.mul_mat(wg, x, p).unwrap();
    let u = b.g.mul_mat(wu, x, p).unwrap();
    let gl = glu(&mut b, Activation::Silu, g, u);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::IntermediatesOverlap { a: g, b: u };
    assert_eq!(
        plan,
        unfused(
            &[g, u, gl],
            vec![
                refused(Pattern::Glu, g, why),
                refused(
                    Pattern::Epilogue,
                    g,
                    Refusal::IntermediateAliasesOutside { node: g, other: u }
                ),
                refused(Pattern::Glu, u, why),
            ]
        )
    );
}

#[test]
fn b_shape_mismatch() {
    // A row bias after a reshape that changed the row length.
    let mut b = Builder::new(125);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let bias = b.input_f32([4, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let r = b.g.reshape(m, [4, 2, 1, 1]).unwrap();
    let rb = row_bias(&mut b, r, bias);
    b.g.mark_output(rb).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::ShapeMismatch { node: rb };
    assert_eq!(
        plan,
        unfused(&[m, r, rb], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_broadcast() {
    // The operand would be broadcast over the product's columns.
    let mut b = Builder::new(126);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let o = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let a = add(&mut b, m, o);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::Broadcast { node: a };
    assert_eq!(
        plan,
        unfused(&[m, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    // The product itself would be broadcast into a larger operand.
    let mut b = Builder::new(127);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let big = b.input_f32([8, 2, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let p = mul(&mut b, big, m);
    b.g.mark_output(p).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::Broadcast { node: p };
    assert_eq!(
        plan,
        unfused(&[m, p], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_not_contiguous() {
    // A strided view used as operand.
    let mut b = Builder::new(128);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let wide = b.input_f32([16, 2, 1, 1]);
    let v = view(&mut b, wide, [8, 2, 1, 1], [4, 64, 128, 128]);
    let m = mul_mat(&mut b, w, x);
    let a = add(&mut b, m, v);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::NotContiguous { node: v };
    assert_eq!(
        plan,
        unfused(&[v, m, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    // Non-contiguous activations (every other column).
    let mut b = Builder::new(129);
    let w = b.weight(DType::Q4_0, 64, 8);
    let xb = b.input_f32([64, 4, 1, 1]);
    let xv = view(&mut b, xb, [64, 2, 1, 1], [4, 512, 1024, 1024]);
    let m = mul_mat(&mut b, w, xv);
    let s = act(&mut b, Activation::Silu, m);
    b.g.mark_output(s).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::NotContiguous { node: xv };
    assert_eq!(
        plan,
        unfused(&[xv, m, s], vec![refused(Pattern::Epilogue, m, why)])
    );

    // Weight rows strided apart (every other row of a larger matrix).
    let mut b = Builder::new(130);
    let wb = b.weight(DType::Q4_0, 64, 16);
    let wv = view(&mut b, wb, [64, 8, 1, 1], [18, 72, 576, 576]);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, wv, x);
    let s = act(&mut b, Activation::Silu, m);
    b.g.mark_output(s).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::NotContiguous { node: wv };
    assert_eq!(
        plan,
        unfused(&[wv, m, s], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_not_contiguous_fwht_input() {
    // A strided FWHT input.
    let mut b = Builder::new(131);
    let xb = b.input_f32([32, 4, 1, 1]);
    let xv = view(&mut b, xb, [32, 2, 1, 1], [4, 256, 512, 512]);
    let s = b.signs(32);
    let h = b.hadamard(32);
    let xs = mul(&mut b, xv, s);
    let t = hadamard_mm(&mut b, h, xs);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::NotContiguous { node: xv };
    assert_eq!(
        plan,
        unfused(&[xv, xs, t], vec![refused(Pattern::SignedFwht, t, why)])
    );
}

#[test]
fn b_partial_view() {
    let mut b = Builder::new(132);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([4, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let v = view(&mut b, m, [4, 1, 1, 1], [4, 16, 16, 16]);
    let a = add(&mut b, v, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::PartialView { node: v };
    assert_eq!(
        plan,
        unfused(&[m, v, a], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_unsupported_dtype() {
    // An F16 element-wise operand.
    let mut b = Builder::new(133);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = input_f16(&mut b, [8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let a = add(&mut b, m, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::UnsupportedDType {
        node: res,
        dtype: DType::F16,
    };
    assert_eq!(
        plan,
        unfused(&[m, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    // Activation-only formats as weights.
    for (i, (dtype, k)) in [(DType::Q8_K, 256), (DType::Q8_1, 32)]
        .into_iter()
        .enumerate()
    {
        let mut b = Builder::new(134 + i as u64);
        let w = b.weight(dtype, k, 2);
        let x = b.input_f32([k, 1, 1, 1]);
        let m = mul_mat(&mut b, w, x);
        let s = act(&mut b, Activation::Silu, m);
        b.g.mark_output(s).unwrap();
        let plan = plan_and_compare(&b);
        let why = Refusal::UnsupportedDType { node: w, dtype };
        assert_eq!(
            plan,
            unfused(&[m, s], vec![refused(Pattern::Epilogue, m, why)]),
            "weights {dtype}"
        );
    }
}

#[test]
fn b_epilogue_on_hadamard() {
    // A plain hinted matmul followed by an add.
    let mut b = Builder::new(136);
    let h = b.hadamard(32);
    let x = b.input_f32([32, 1, 1, 1]);
    let res = b.input_f32([32, 1, 1, 1]);
    let t = hadamard_mm(&mut b, h, x);
    let a = add(&mut b, t, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::EpilogueOnHadamard { node: t };
    assert_eq!(
        plan,
        unfused(&[t, a], vec![refused(Pattern::Epilogue, t, why)])
    );

    // The same through a reshape.
    let mut b = Builder::new(159);
    let h = b.hadamard(32);
    let x = b.input_f32([32, 1, 1, 1]);
    let res = b.input_f32([16, 2, 1, 1]);
    let t = hadamard_mm(&mut b, h, x);
    let r = b.g.reshape(t, [16, 2, 1, 1]).unwrap();
    let a = add(&mut b, r, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::EpilogueOnHadamard { node: t };
    assert_eq!(
        plan,
        unfused(&[t, r, a], vec![refused(Pattern::Epilogue, t, why)])
    );

    // A signed FWHT followed by an add: the FWHT still fuses, the add does not.
    let mut b = Builder::new(137);
    let h = b.hadamard(32);
    let x = b.input_f32([32, 1, 1, 1]);
    let s = b.signs(32);
    let res = b.input_f32([32, 1, 1, 1]);
    let xs = mul(&mut b, x, s);
    let t = hadamard_mm(&mut b, h, xs);
    let a = add(&mut b, t, res);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let fwht = Step::SignedFwht(FusedFwht {
        x,
        signs: s,
        matmul: t,
        desc: FwhtDesc::new(32).unwrap().with_signs(32).unwrap(),
        nodes: vec![xs, t],
    });
    let why = Refusal::EpilogueOnHadamard { node: t };
    assert_eq!(
        plan,
        Plan {
            steps: vec![fwht, Step::Node(a)],
            refusals: vec![refused(Pattern::Epilogue, t, why)],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn b_fwht_size() {
    // N = 48 is not a power of two: the hinted matmul is refused when the
    // graph is built (before, the reference ran it as a dense matmul and
    // the planner refused the signed FWHT with `Refusal::FwhtSize`).
    let mut b = Builder::new(138);
    let h = b.hadamard(48);
    let x = b.input_f32([48, 1, 1, 1]);
    let s = b.signs(48);
    let xs = mul(&mut b, x, s);
    let at = b.place_f32([48, 1, 1, 1]);
    assert_eq!(
        b.g.mul_mat_hadamard(h, xs, at),
        Err(fused_core::Error::BadFwhtSize { n: 48 })
    );
}

#[test]
fn b_signs_shape() {
    // Signs shorter than the row (broadcast by the mul, not by the FWHT).
    let mut b = Builder::new(139);
    let x = b.input_f32([64, 1, 1, 1]);
    let s = b.signs(32);
    let h = b.hadamard(32);
    let xs = mul(&mut b, x, s);
    let r = b.g.reshape(xs, [32, 2, 1, 1]).unwrap();
    let t = hadamard_mm(&mut b, h, r);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::SignsShape {
        node: s,
        len: 32,
        n: 32,
    };
    assert_eq!(
        plan,
        unfused(&[xs, r, t], vec![refused(Pattern::SignedFwht, t, why)])
    );

    // Signs that are not 1-D.
    let mut b = Builder::new(140);
    let x = b.input_f32([32, 2, 1, 1]);
    let s2 = b.input_f32([32, 2, 1, 1]);
    let h = b.hadamard(32);
    let xs = mul(&mut b, x, s2);
    let t = hadamard_mm(&mut b, h, xs);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::SignsShape {
        node: s2,
        len: 64,
        n: 32,
    };
    assert_eq!(
        plan,
        unfused(&[xs, t], vec![refused(Pattern::SignedFwht, t, why)])
    );
}

#[test]
fn b_dst_overlaps_matmul_input() {
    // The add's destination on the activations.
    let mut b = Builder::new(141);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = place_of(&b, x);
    let a = b.g.add(m, res, at).unwrap();
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::DstOverlapsMatmulInput { input: x };
    assert_eq!(
        plan,
        unfused(&[m, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    // The same after an activation: retried one link shorter, mm → silu fuses.
    let mut b = Builder::new(142);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let s = act(&mut b, Activation::Silu, m);
    let at = place_of(&b, x);
    let a = b.g.add(s, res, at).unwrap();
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::DstOverlapsMatmulInput { input: x };
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[SILU], &[], &[m, s]), Step::Node(a)],
            refusals: vec![refused(Pattern::Epilogue, m, why)],
            prologue_nodes: vec![],
        }
    );

    // The destination (two columns) over the row bias it reads: a partial
    // overlap, refused when the graph is built.
    let mut b = Builder::new(143);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 2, 1, 1]);
    let bias = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = place_of(&b, bias);
    assert_eq!(b.g.add_row_bias(m, bias, at), Err(PARTIAL));

    // In place on a residual that is also the activations: the exact alias
    // of an operand is allowed, that of a matmul input is not.
    let mut b = Builder::new(162);
    let w = b.weight(DType::F32, 8, 8);
    let x = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = place_of(&b, x);
    let a = b.g.add(m, x, at).unwrap();
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::DstOverlapsMatmulInput { input: x };
    assert_eq!(
        plan,
        unfused(&[m, a], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_dst_partially_overlaps_operand() {
    let mut b = Builder::new(144);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = shifted(place_of(&b, res), 4);
    // Refused when the graph is built: the add would overwrite part of the
    // operand it reads.
    assert_eq!(b.g.add(m, res, at), Err(PARTIAL));
}

#[test]
fn b_fwht_input_overlaps_output() {
    for on_signs in [false, true] {
        let mut b = Builder::new(145 + on_signs as u64);
        let x = b.input_f32([32, 1, 1, 1]);
        let s = b.signs(32);
        let h = b.hadamard(32);
        let xs = mul(&mut b, x, s);
        let victim = if on_signs { s } else { x };
        let at = place_of(&b, victim);
        let t = b.g.mul_mat_hadamard(h, xs, at).unwrap();
        b.g.mark_output(t).unwrap();
        let plan = plan_and_compare(&b);
        let why = Refusal::FwhtInputOverlapsOutput { input: victim };
        assert_eq!(
            plan,
            unfused(&[xs, t], vec![refused(Pattern::SignedFwht, t, why)]),
            "output on the signs: {on_signs}"
        );
    }
}

#[test]
fn b_chain_too_long() {
    // Nine activations: the first eight fuse, the ninth does not fit.
    let acts = [
        Activation::Silu,
        Activation::Sigmoid,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Relu,
        Activation::Identity,
        Activation::Silu,
        Activation::Sigmoid,
        Activation::GeluErf,
    ];
    let mut b = Builder::new(147);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let mut chain = vec![m];
    for a in acts {
        let prev = chain[chain.len() - 1];
        chain.push(act(&mut b, a, prev));
    }
    let last = chain[9];
    b.g.mark_output(last).unwrap();
    let plan = plan_and_compare(&b);
    let stages: Vec<Stage> = acts[..MAX_STAGES].iter().map(|&a| Stage::Act(a)).collect();
    let why = Refusal::ChainTooLong { node: last };
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&stages, &[], &chain[..9]), Step::Node(last)],
            refusals: vec![refused(Pattern::Epilogue, m, why)],
            prologue_nodes: vec![],
        }
    );

    // Seven activations, then a gate-side GLU that needs two more stages.
    let mut b = Builder::new(148);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let y = b.input_f32([8, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let mut chain = vec![m];
    for &a in &acts[..7] {
        let prev = chain[chain.len() - 1];
        chain.push(act(&mut b, a, prev));
    }
    let gl = glu(&mut b, Activation::Silu, chain[7], y);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    let stages: Vec<Stage> = acts[..7].iter().map(|&a| Stage::Act(a)).collect();
    let why = Refusal::ChainTooLong { node: gl };
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&stages, &[], &chain), Step::Node(gl)],
            refusals: vec![refused(Pattern::Epilogue, m, why)],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn b_clobbered_between() {
    // Between the matmul and its add, a node overwrites the activations.
    let mut b = Builder::new(149);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let res = b.input_f32([8, 1, 1, 1]);
    let z = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let at = place_of(&b, x);
    let o = b.g.other("clobber", &[z], [64, 1, 1, 1], at).unwrap();
    let a = add(&mut b, m, res);
    b.g.mark_output(a).unwrap();
    b.g.mark_output(o).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::ClobberedBetween {
        writer: o,
        input: x,
    };
    assert_eq!(
        plan,
        unfused(&[m, o, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    // Between the gate and up matmuls, a node overwrites their shared `x`:
    // refused as a GLU from both anchors and as the gate-side chain.
    let mut b = Builder::new(161);
    let wg = b.weight(DType::Q4_0, 64, 8);
    let wu = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let z = b.input_f32([64, 1, 1, 1]);
    let g = mul_mat(&mut b, wg, x);
    let at = place_of(&b, x);
    let o = b.g.other("clobber", &[z], [64, 1, 1, 1], at).unwrap();
    let u = mul_mat(&mut b, wu, x);
    let gl = glu(&mut b, Activation::Silu, g, u);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::ClobberedBetween {
        writer: o,
        input: x,
    };
    assert_eq!(
        plan,
        unfused(
            &[g, o, u, gl],
            vec![
                refused(Pattern::Glu, g, why),
                refused(Pattern::Epilogue, g, why),
                refused(Pattern::Glu, u, why),
            ]
        )
    );
}

#[test]
fn b_clobbered_between_fwht() {
    // Between the sign multiply and the transform, a node overwrites `x`.
    let mut b = Builder::new(160);
    let x = b.input_f32([32, 1, 1, 1]);
    let s = b.signs(32);
    let h = b.hadamard(32);
    let z = b.input_f32([32, 1, 1, 1]);
    let xs = mul(&mut b, x, s);
    let at = place_of(&b, x);
    let o = b.g.other("clobber", &[z], [32, 1, 1, 1], at).unwrap();
    let t = hadamard_mm(&mut b, h, xs);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::ClobberedBetween {
        writer: o,
        input: x,
    };
    assert_eq!(
        plan,
        unfused(&[xs, o, t], vec![refused(Pattern::SignedFwht, t, why)])
    );
}

#[test]
fn b_operand_is_intermediate() {
    // glu(mm, mm): gate and up are the same node.
    let mut b = Builder::new(150);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let gl = glu(&mut b, Activation::Silu, m, m);
    b.g.mark_output(gl).unwrap();
    let plan = plan_and_compare(&b);
    assert_eq!(
        plan,
        unfused(
            &[m, gl],
            vec![
                refused(Pattern::Glu, m, Refusal::OperandIsIntermediate { node: gl }),
                refused(
                    Pattern::Epilogue,
                    m,
                    Refusal::MultipleUses { node: m, uses: 2 }
                ),
            ]
        )
    );

    // add(mm, mm), directly or through one reshape read twice: refused, but
    // the use count is checked first, so the reason is MultipleUses.
    let mut b = Builder::new(151);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let a = add(&mut b, m, m);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::MultipleUses { node: m, uses: 2 };
    assert_eq!(
        plan,
        unfused(&[m, a], vec![refused(Pattern::Epilogue, m, why)])
    );

    let mut b = Builder::new(152);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m = mul_mat(&mut b, w, x);
    let r = b.g.reshape(m, [4, 2, 1, 1]).unwrap();
    let a = add(&mut b, r, r);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::MultipleUses { node: r, uses: 2 };
    assert_eq!(
        plan,
        unfused(&[m, r, a], vec![refused(Pattern::Epilogue, m, why)])
    );
}

#[test]
fn b_glu_mismatch() {
    // Gate and up read different `x` (then: the same `x`, but their weights
    // differ in format). The GLU is refused; the gate matmul still fuses with
    // the GLU as its gate-side stage, reading the up product as an operand,
    // and the up matmul finds the GLU already taken.
    for different_x in [true, false] {
        let mut b = Builder::new(153 + different_x as u64);
        let wg = b.weight(DType::Q4_0, 64, 8);
        let wu = b.weight([DType::Q8_0, DType::Q4_0][different_x as usize], 64, 8);
        let x1 = b.input_f32([64, 1, 1, 1]);
        let x2 = if different_x {
            b.input_f32([64, 1, 1, 1])
        } else {
            x1
        };
        let g = mul_mat(&mut b, wg, x1);
        let u = mul_mat(&mut b, wu, x2);
        let gl = glu(&mut b, Activation::Silu, g, u);
        b.g.mark_output(gl).unwrap();
        let plan = plan_and_compare(&b);
        assert_eq!(
            plan,
            Plan {
                steps: vec![Step::Node(u), gemv(&[SILU, mul_slot(0)], &[u], &[g, gl])],
                refusals: vec![
                    refused(Pattern::Glu, g, Refusal::GluMismatch { node: gl }),
                    refused(Pattern::Epilogue, u, Refusal::AlreadyFused { node: gl }),
                ],
                prologue_nodes: vec![],
            },
            "different x: {different_x}"
        );
    }
}

#[test]
fn b_already_fused() {
    // A later matmul's chain reaches an add that an earlier chain took.
    let mut b = Builder::new(156);
    let w1 = b.weight(DType::Q4_0, 64, 8);
    let w2 = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let m1 = mul_mat(&mut b, w1, x);
    let m2 = mul_mat(&mut b, w2, x);
    let s2 = act(&mut b, Activation::Silu, m2);
    let a = add(&mut b, m1, s2);
    b.g.mark_output(a).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::AlreadyFused { node: a };
    assert_eq!(
        plan,
        Plan {
            steps: vec![
                gemv(&[SILU], &[], &[m2, s2]),
                gemv(&[add_slot(0)], &[s2], &[m1, a]),
            ],
            refusals: vec![refused(Pattern::Epilogue, m2, why)],
            prologue_nodes: vec![],
        }
    );
}

#[test]
fn b_already_fused_fwht_mul() {
    // The signed FWHT's mul is the tail of an earlier matmul chain.
    let mut b = Builder::new(155);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let s = b.signs(8);
    let h = b.hadamard(8);
    let m = mul_mat(&mut b, w, x);
    let ms = mul(&mut b, m, s);
    let t = hadamard_mm(&mut b, h, ms);
    b.g.mark_output(t).unwrap();
    let plan = plan_and_compare(&b);
    let why = Refusal::AlreadyFused { node: ms };
    assert_eq!(
        plan,
        Plan {
            steps: vec![gemv(&[mul_slot(0)], &[s], &[m, ms]), Step::Node(t)],
            refusals: vec![refused(Pattern::SignedFwht, t, why)],
            prologue_nodes: vec![],
        }
    );
}
