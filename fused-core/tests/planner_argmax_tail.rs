//! Greedy selection as the output head's tail: when the planner makes the
//! argmax part of the GEMV step, what it refuses and why, and that the plan
//! computes what the graph does, bit for bit, in both GEMV modes.

mod common;

use common::*;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::graph::{NodeId, Place};
use fused_core::legality::Refusal;
use fused_core::planner::{FusedGemv, Pattern, Plan, Step};
use fused_core::tensor::TensorDesc;

const K: usize = 64;
const ROWS: usize = 40;

/// Plans `b`'s graph, evaluates it unfused and fused in both modes and
/// asserts equal outputs, bit for bit. Returns the plan.
fn plan_and_compare(b: &Builder) -> Plan {
    let (p, unfused, fused) = run_both(b, GemvMode::F32);
    assert_eq!(unfused, fused, "F32 mode\n{p:#?}");
    let (p2, unfused, fused) = run_both(b, GemvMode::Ggml);
    assert_eq!(unfused, fused, "Ggml mode\n{p:#?}");
    assert_eq!(p, p2, "the plan depends on the mode");
    p
}

fn argmax_refusals(p: &Plan) -> Vec<Refusal> {
    p.refusals
        .iter()
        .filter(|r| r.pattern == Pattern::ArgmaxTail)
        .map(|r| r.reason)
        .collect()
}

/// The GEMV steps of `p` that carry an argmax tail.
fn tails(p: &Plan) -> Vec<&FusedGemv> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Gemv(f) if f.argmax.is_some() => Some(f),
            _ => None,
        })
        .collect()
}

/// `x → rms_norm → · gamma → W (Q8_0, ROWS × K) → logits`; returns the
/// builder, the input and the logits.
fn head(seed: u64) -> (Builder, NodeId, NodeId) {
    let mut b = Builder::new(seed);
    let x = b.input_f32([K, 1, 1, 1]);
    let gamma = b.input_f32([K, 1, 1, 1]);
    let at = b.place_f32([K, 1, 1, 1]);
    let n = b.g.rms_norm(x, 1e-5, at).unwrap();
    let at = b.place_f32([K, 1, 1, 1]);
    let normed = b.g.mul(n, gamma, at).unwrap();
    let w = b.weight(DType::Q8_0, K, ROWS);
    let at = b.place_f32([ROWS, 1, 1, 1]);
    let logits = b.g.mul_mat(w, normed, at).unwrap();
    (b, x, logits)
}

fn argmax(b: &mut Builder, x: NodeId) -> NodeId {
    let at = b.place_f32([1, 1, 1, 1]);
    b.g.argmax(x, at).unwrap()
}

#[test]
fn the_head_takes_the_argmax_as_its_tail() {
    for (seed, keep_logits) in [(1, true), (2, false), (3, true)] {
        let (mut b, _, logits) = head(seed);
        let next = argmax(&mut b, logits);
        if keep_logits {
            b.g.mark_output(logits).unwrap();
        }
        b.g.mark_output(next).unwrap();
        let p = plan_and_compare(&b);
        let [f] = tails(&p)[..] else {
            panic!("{:?}", p.steps);
        };
        assert_eq!(f.argmax.as_ref().map(|a| a.node), Some(next));
        assert!(f.prologue.is_some() && f.nodes.contains(&next), "{f:?}");
        // One launch: the normed head with its argmax.
        assert_eq!(p.kernel_steps(&b.g), 1, "{:?}", p.steps);
        assert!(argmax_refusals(&p).is_empty(), "{:?}", p.refusals);
    }
}

#[test]
fn the_tail_picks_the_first_of_equal_maxima() {
    // Rows 5 and 9 are twice the others, so they tie for the largest
    // product of a positive x.
    let mut b = Builder::new(4);
    let p = b.place_f32([K, 1, 1, 1]);
    let x = TensorDesc::contiguous(DType::F32, [K, 1, 1, 1], p.buffer, p.offset).unwrap();
    b.inits
        .push((x, Init::F32((0..K).map(|i| 1.0 + i as f32 / 8.0).collect())));
    let x = b.g.input(x).unwrap();
    let p = b.place_f32([K, ROWS, 1, 1]);
    let w = TensorDesc::contiguous(DType::F32, [K, ROWS, 1, 1], p.buffer, p.offset).unwrap();
    let rows = (0..ROWS).flat_map(|r| [if r == 5 || r == 9 { 2.0 } else { 1.0 }; K]);
    b.inits.push((w, Init::F32(rows.collect())));
    let w = b.g.input(w).unwrap();
    let at = b.place_f32([ROWS, 1, 1, 1]);
    let logits = b.g.mul_mat(w, x, at).unwrap();
    let next = argmax(&mut b, logits);
    b.g.mark_output(next).unwrap();
    let p = plan_and_compare(&b);
    assert_eq!(tails(&p).len(), 1, "{:?}", p.steps);
    let mut mem = b.memory();
    fused_core::reference::eval::eval_plan(&b.g, &p, &mut mem, GemvMode::F32).unwrap();
    assert_eq!(mem.read(b.g.tensor(next).unwrap()).unwrap(), [5.0]);
}

#[test]
fn an_argmax_through_a_reshape_of_the_same_layout_is_a_tail() {
    let (mut b, _, logits) = head(5);
    let r = b.g.reshape(logits, [ROWS, 1, 1, 1]).unwrap();
    let next = argmax(&mut b, r);
    b.g.mark_output(next).unwrap();
    let p = plan_and_compare(&b);
    assert_eq!(tails(&p).len(), 1, "{:?}", p.steps);
}

/// The argmax stays a node of its own, for `reason`.
fn refused_as(b: &Builder, reason: Refusal) {
    let p = plan_and_compare(b);
    assert!(tails(&p).is_empty(), "{:?}", p.steps);
    assert_eq!(argmax_refusals(&p), [reason], "{:?}", p.refusals);
}

#[test]
fn other_columns_than_the_gemvs_are_not_a_tail() {
    let (mut b, _, logits) = head(6);
    let r = b.g.reshape(logits, [ROWS / 2, 2, 1, 1]).unwrap();
    let next = argmax(&mut b, r);
    b.g.mark_output(next).unwrap();
    refused_as(&b, Refusal::PartialView { node: r });
}

#[test]
fn a_reader_of_the_logits_in_between_keeps_the_argmax_apart() {
    let (mut b, _, logits) = head(7);
    let at = b.place_f32([ROWS, 1, 1, 1]);
    let reader = b.g.other("reader", &[logits], [ROWS, 1, 1, 1], at).unwrap();
    let next = argmax(&mut b, logits);
    b.g.mark_output(reader).unwrap();
    b.g.mark_output(next).unwrap();
    refused_as(
        &b,
        Refusal::ReadsMovedResult {
            reader,
            node: logits,
        },
    );
}

#[test]
fn an_index_written_over_what_the_gemv_reads_is_refused() {
    let (mut b, x, logits) = head(8);
    // The index lands on the norm's input while other rows still read it.
    let t = *b.g.tensor(x).unwrap();
    let at = Place {
        buffer: t.buffer(),
        offset: t.offset(),
    };
    let next = b.g.argmax(logits, at).unwrap();
    b.g.mark_output(next).unwrap();
    refused_as(&b, Refusal::IntermediatesOverlap { a: next, b: x });
}
