//! The RMS-norm prologue: `rms_norm(x) → mul(·, g) → mul_mat`, folded into
//! every GEMV that reads the normed product (q/k/v; a GLU's gate and up),
//! and every reason the planner refuses it. Each case checks the plan's
//! shape and that `eval_plan` equals `eval_graph` bit for bit in both GEMV
//! modes.

mod common;

use common::*;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::graph::{NodeId, Place};
use fused_core::legality::Refusal;
use fused_core::planner::{Pattern, Plan, Step};

const EPS: f32 = 1e-5;

fn compare(b: &Builder) -> Plan {
    let (p, u, f) = run_both(b, GemvMode::F32);
    assert_eq!(u, f, "F32 mode\n{p:#?}");
    let (p2, u, f) = run_both(b, GemvMode::Ggml);
    assert_eq!(u, f, "Ggml mode\n{p:#?}");
    assert_eq!(p, p2);
    p
}

/// `x [k, n]`, `g [k]`, `norm`, `mul`.
fn normed(b: &mut Builder, k: usize, n: usize, eps: f32) -> (NodeId, NodeId, NodeId, NodeId) {
    let x = b.input_f32([k, n, 1, 1]);
    let g = b.input_f32([k, 1, 1, 1]);
    let at = b.place_f32([k, n, 1, 1]);
    let norm = b.g.rms_norm(x, eps, at).unwrap();
    let at = b.place_f32([k, n, 1, 1]);
    let mul = b.g.mul(norm, g, at).unwrap();
    (x, g, norm, mul)
}

fn mm(b: &mut Builder, dtype: DType, x: NodeId, m: usize) -> NodeId {
    let [k, n, _, _] = b.g.tensor(x).unwrap().ne();
    let w = b.weight(dtype, k, m);
    let at = b.place_f32([m, n, 1, 1]);
    b.g.mul_mat(w, x, at).unwrap()
}

fn prologue_steps(p: &Plan) -> usize {
    p.steps
        .iter()
        .filter(|s| match s {
            Step::Gemv(f) => f.prologue.is_some(),
            Step::GluGemv(f) => f.prologue.is_some(),
            _ => false,
        })
        .count()
}

fn refused(p: &Plan, reason: Refusal) -> bool {
    p.refusals.iter().any(|r| r.reason == reason)
}

/// q, k, v read one normed product: three GEMVs with the prologue (one of
/// them with an epilogue), the norm and mul in `prologue_nodes`, not run.
#[test]
fn qkv_share_one_prologue() {
    for dtype in [DType::Q8_0, DType::Q4_K, DType::F16, DType::F32] {
        for n in [1, 3] {
            let mut b = Builder::new(7);
            let (x, g, norm, mul) = normed(&mut b, 256, n, EPS);
            let q = mm(&mut b, dtype, mul, 8);
            let k = mm(&mut b, dtype, mul, 4);
            let v = mm(&mut b, dtype, mul, 4);
            let r = b.input_f32([4, n, 1, 1]);
            let at = b.place_f32([4, n, 1, 1]);
            let v2 = b.g.add(v, r, at).unwrap();
            for o in [q, k, v2] {
                b.g.mark_output(o).unwrap();
            }
            let p = compare(&b);
            assert_eq!(p.prologue_nodes, vec![norm, mul], "{dtype} {p:#?}");
            assert_eq!(prologue_steps(&p), 3, "{dtype} {p:#?}");
            assert_eq!(p.steps.len(), 3);
            let Step::Gemv(s) = &p.steps[0] else {
                panic!("{p:#?}")
            };
            let pr = s.prologue.unwrap();
            assert_eq!((pr.x, pr.gamma, pr.norm, pr.mul), (x, g, norm, mul));
            assert_eq!(pr.eps.get(), EPS);
            assert!(s.epilogue.is_empty());
            assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        }
    }
}

/// The gate and up of a GLU read the normed product: one dual GEMV with
/// the prologue.
#[test]
fn glu_takes_the_prologue() {
    for dtype in [DType::Q4_0, DType::Q6_K, DType::BF16] {
        let mut b = Builder::new(9);
        let (_, _, norm, mul) = normed(&mut b, 256, 2, EPS);
        let gate = mm(&mut b, dtype, mul, 8);
        let up = mm(&mut b, dtype, mul, 8);
        let at = b.place_f32([8, 2, 1, 1]);
        let h = b.g.glu(Activation::Silu, gate, up, at).unwrap();
        b.g.mark_output(h).unwrap();
        let p = compare(&b);
        assert_eq!(p.prologue_nodes, vec![norm, mul]);
        assert!(
            matches!(&p.steps[..], [Step::GluGemv(s)] if s.prologue.is_some()),
            "{dtype} {p:#?}"
        );
    }
}

/// Every refusal leaves the norm and mul as nodes and the answer unchanged.
#[test]
fn refusals_keep_the_norm_as_nodes() {
    type Build = fn(&mut Builder) -> Refusal;
    let cases: [(&str, Build); 8] = [
        ("output", |b| {
            let (_, _, _, mul) = normed(b, 64, 1, EPS);
            let q = mm(b, DType::Q8_0, mul, 4);
            b.g.mark_output(q).unwrap();
            b.g.mark_output(mul).unwrap();
            Refusal::GraphOutput { node: mul }
        }),
        ("other reader", |b| {
            let (_, _, _, mul) = normed(b, 64, 1, EPS);
            let q = mm(b, DType::Q8_0, mul, 4);
            let at = b.place_f32([64, 1, 1, 1]);
            let s = b.g.unary(Activation::Silu, mul, at).unwrap();
            b.g.mark_output(q).unwrap();
            b.g.mark_output(s).unwrap();
            Refusal::NormConsumer {
                node: mul,
                consumer: s,
            }
        }),
        ("eps", |b| {
            let (_, _, norm, mul) = normed(b, 64, 1, -1.0);
            let q = mm(b, DType::Q8_0, mul, 4);
            b.g.mark_output(q).unwrap();
            Refusal::NormEps {
                node: norm,
                bits: (-1.0f32).to_bits(),
            }
        }),
        ("weight shape", |b| {
            let x = b.input_f32([64, 2, 1, 1]);
            let g = b.input_f32([64, 2, 1, 1]);
            let at = b.place_f32([64, 2, 1, 1]);
            let norm = b.g.rms_norm(x, EPS, at).unwrap();
            let at = b.place_f32([64, 2, 1, 1]);
            let mul = b.g.mul(norm, g, at).unwrap();
            let q = mm(b, DType::Q8_0, mul, 4);
            b.g.mark_output(q).unwrap();
            Refusal::NormWeightShape {
                node: g,
                len: 128,
                k: 64,
            }
        }),
        ("norm in place over x", |b| {
            let x = b.input_f32([64, 1, 1, 1]);
            let g = b.input_f32([64, 1, 1, 1]);
            let t = *b.g.tensor(x).unwrap();
            let at = Place {
                buffer: t.buffer(),
                offset: t.offset(),
            };
            let norm = b.g.rms_norm(x, EPS, at).unwrap();
            let at = b.place_f32([64, 1, 1, 1]);
            let mul = b.g.mul(norm, g, at).unwrap();
            let q = mm(b, DType::Q8_0, mul, 4);
            b.g.mark_output(q).unwrap();
            b.g.mark_output(x).unwrap();
            Refusal::IntermediateAliasesOutside {
                node: norm,
                other: x,
            }
        }),
        ("destination over gamma", |b| {
            let (_, g, _, mul) = normed(b, 64, 1, EPS);
            let w = b.weight(DType::Q8_0, 64, 4);
            let t = *b.g.tensor(g).unwrap();
            let at = Place {
                buffer: t.buffer(),
                offset: t.offset(),
            };
            let q = b.g.mul_mat(w, mul, at).unwrap();
            b.g.mark_output(q).unwrap();
            Refusal::DstOverlapsMatmulInput { input: g }
        }),
        ("x overwritten between", |b| {
            let (x, _, _, mul) = normed(b, 64, 1, EPS);
            let q = mm(b, DType::Q8_0, mul, 4);
            let t = *b.g.tensor(x).unwrap();
            let at = Place {
                buffer: t.buffer(),
                offset: t.offset(),
            };
            let s = b.g.other("scratch", &[], [64, 1, 1, 1], at).unwrap();
            let k = mm(b, DType::Q8_0, mul, 4);
            for o in [q, k, s] {
                b.g.mark_output(o).unwrap();
            }
            Refusal::ClobberedBetween {
                writer: s,
                input: x,
            }
        }),
        ("a hadamard reader", |b| {
            let (_, _, _, mul) = normed(b, 64, 1, EPS);
            let q = mm(b, DType::Q8_0, mul, 4);
            let h = b.hadamard(64);
            let at = b.place_f32([64, 1, 1, 1]);
            let hm = b.g.mul_mat_hadamard(h, mul, at).unwrap();
            b.g.mark_output(q).unwrap();
            b.g.mark_output(hm).unwrap();
            Refusal::NormConsumer {
                node: mul,
                consumer: hm,
            }
        }),
    ];
    for (what, build) in cases {
        let mut b = Builder::new(3);
        let want = build(&mut b);
        let p = compare(&b);
        assert!(
            refused(&p, want),
            "{what}: {want:?} not in {:#?}",
            p.refusals
        );
        assert!(p.prologue_nodes.is_empty(), "{what}");
        assert_eq!(prologue_steps(&p), 0, "{what}");
        let r = p.refusals.iter().find(|r| r.reason == want).unwrap();
        assert!(
            matches!(r.pattern, Pattern::NormPrologue | Pattern::Epilogue),
            "{what}"
        );
        // The refusal prints a reason.
        assert!(!format!("{}", r.reason).is_empty());
    }
}

/// A matmul that cannot fuse with the prologue (its destination over the
/// weight `g`) puts the norm back for its siblings too.
#[test]
fn one_reader_not_taking_it_refuses_for_all() {
    let mut b = Builder::new(5);
    let (_, g, norm, mul) = normed(&mut b, 64, 1, EPS);
    let q = mm(&mut b, DType::Q8_0, mul, 4);
    let w = b.weight(DType::Q8_0, 64, 4);
    let t = *b.g.tensor(g).unwrap();
    let at = Place {
        buffer: t.buffer(),
        offset: t.offset(),
    };
    let k = b.g.mul_mat(w, mul, at).unwrap();
    b.g.mark_output(q).unwrap();
    b.g.mark_output(k).unwrap();
    let p = compare(&b);
    assert!(refused(
        &p,
        Refusal::NormNotTaken {
            node: mul,
            consumer: k
        }
    ));
    assert!(p.prologue_nodes.is_empty());
    assert!(p.steps.contains(&Step::Node(norm)));
    assert!(p.steps.contains(&Step::Node(mul)));
}
