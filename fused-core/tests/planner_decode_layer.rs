//! The planner on a transformer decode layer: attention output projection +
//! residual; RMS norm (opaque); gate/up + SiLU·mul; down + residual; and a
//! down projection whose input is rotated by a signed FWHT. Checks exactly
//! which steps fuse, which candidates are refused and why, and that the fused
//! plan gives bit-identical outputs to the unfused graph.

mod common;

use common::*;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::epilogue::Stage;
use fused_core::graph::NodeId;
use fused_core::legality::Refusal;
use fused_core::planner::{Pattern, Refused, Step};

const H: usize = 64;
const F: usize = 128;
const N: usize = 64;

struct Layer {
    b: Builder,
    o_add: NodeId,
    h1: NodeId,
    glu: NodeId,
    down_add: NodeId,
    q_mm: NodeId,
    fwht_mm: NodeId,
    down2_mm: NodeId,
    out: NodeId,
}

fn layer(dtype: DType) -> Layer {
    let mut b = Builder::new(0xdec0de);
    let h0 = b.input_f32([H, 1, 1, 1]);
    let attn = b.input_f32([H, 1, 1, 1]);
    let w_o = b.weight(dtype, H, H);
    let w_q = b.weight(dtype, H, H);
    let w_g = b.weight(dtype, H, F);
    let w_u = b.weight(dtype, H, F);
    let w_d = b.weight(dtype, F, H);
    let w_d2 = b.weight(dtype, F, H);
    let had = b.hadamard(N);
    let signs = b.signs(F);

    // A query projection whose result feeds two consumers (e.g. two heads'
    // views): never fused with its add.
    let pq = b.place_f32([H, 1, 1, 1]);
    let q_mm = b.g.mul_mat(w_q, h0, pq).unwrap();
    let pq2 = b.place_f32([H, 1, 1, 1]);
    let q_use = b.g.other("rope", &[q_mm], [H, 1, 1, 1], pq2).unwrap();
    let pq3 = b.place_f32([H, 1, 1, 1]);
    let q_add = b.g.add(q_mm, h0, pq3).unwrap();

    // Attention output projection + residual.
    let p = b.place_f32([H, 1, 1, 1]);
    let o = b.g.mul_mat(w_o, attn, p).unwrap();
    let p = b.place_f32([H, 1, 1, 1]);
    let h1 = b.g.add(o, h0, p).unwrap();

    // RMS norm, then the gated FFN.
    let p = b.place_f32([H, 1, 1, 1]);
    let norm = b.g.other("rms_norm", &[h1], [H, 1, 1, 1], p).unwrap();
    let p = b.place_f32([F, 1, 1, 1]);
    let gate = b.g.mul_mat(w_g, norm, p).unwrap();
    let p = b.place_f32([F, 1, 1, 1]);
    let up = b.g.mul_mat(w_u, norm, p).unwrap();
    let p = b.place_f32([F, 1, 1, 1]);
    let glu = b.g.glu(Activation::Silu, gate, up, p).unwrap();
    let p = b.place_f32([H, 1, 1, 1]);
    let down = b.g.mul_mat(w_d, glu, p).unwrap();
    let p = b.place_f32([H, 1, 1, 1]);
    let down_add = b.g.add(down, h1, p).unwrap();

    // A rotated down projection: signs ⊙ glu → FWHT (N = 64 over F = 128) → W.
    let p = b.place_f32([F, 1, 1, 1]);
    let glu2 = b.g.other("copy", &[glu], [F, 1, 1, 1], p).unwrap();
    let p = b.place_f32([F, 1, 1, 1]);
    let signed = b.g.mul(glu2, signs, p).unwrap();
    let r = b.g.reshape(signed, [N, F / N, 1, 1]).unwrap();
    let p = b.place_f32([N, F / N, 1, 1]);
    let fwht_mm = b.g.mul_mat_hadamard(had, r, p).unwrap();
    let back = b.g.reshape(fwht_mm, [F, 1, 1, 1]).unwrap();
    let p = b.place_f32([H, 1, 1, 1]);
    let down2_mm = b.g.mul_mat(w_d2, back, p).unwrap();
    let p = b.place_f32([H, 1, 1, 1]);
    let out = b.g.add(down2_mm, down_add, p).unwrap();

    for id in [q_use, q_add, out] {
        b.g.mark_output(id).unwrap();
    }
    Layer {
        b,
        o_add: h1,
        h1,
        glu,
        down_add,
        q_mm,
        fwht_mm,
        down2_mm,
        out,
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "evaluates ~10^5 dot terms twice: minutes under Miri; runs natively"
)]
fn decode_layer_fuses_exactly_the_expected_steps() {
    // Miri is slow: one format there, three natively.
    let dtypes: &[DType] = if cfg!(miri) {
        &[DType::Q4_0]
    } else {
        &[DType::Q4_0, DType::F16, DType::Q8_0]
    };
    for &dtype in dtypes {
        let l = layer(dtype);
        let (plan, unfused, fused) = run_both(&l.b, GemvMode::F32);
        assert_eq!(unfused, fused, "{dtype}: fused plan differs from the graph");

        let fused_steps: Vec<&Step> = plan.steps.iter().filter(|s| s.is_fused()).collect();
        assert_eq!(fused_steps.len(), 5, "{dtype}: {plan:#?}");

        let find = |out: NodeId| {
            plan.steps
                .iter()
                .find(|s| s.nodes().last() == Some(&out))
                .unwrap_or_else(|| panic!("no step ends at {out}"))
        };
        // o-proj + residual.
        match find(l.o_add) {
            Step::Gemv(s) => assert_eq!(s.epilogue.stages(), &[Stage::Add { slot: 0 }]),
            s => panic!("o-proj: {s:?}"),
        }
        // gate/up + SiLU·mul as one dual GEMV (its result feeds two nodes, so
        // the chain stops at the GLU).
        match find(l.glu) {
            Step::GluGemv(s) => {
                assert_eq!(s.act, Activation::Silu);
                assert!(s.epilogue.is_empty());
                assert_eq!(s.nodes.len(), 3);
            }
            s => panic!("GLU: {s:?}"),
        }
        // down + residual.
        match find(l.down_add) {
            Step::Gemv(s) => {
                assert_eq!(s.epilogue.stages(), &[Stage::Add { slot: 0 }]);
                assert_eq!(s.operands[0], Some(l.h1));
            }
            s => panic!("down: {s:?}"),
        }
        // signs ⊙ x → reshape → FWHT as one signed FWHT.
        match find(l.fwht_mm) {
            Step::SignedFwht(s) => {
                assert_eq!(s.desc.n(), N);
                assert_eq!(s.desc.sign_blocks(), Some(F / N));
                assert_eq!(s.nodes.len(), 3);
            }
            s => panic!("FWHT: {s:?}"),
        }
        // The rotated down projection + residual.
        match find(l.out) {
            Step::Gemv(s) => {
                assert_eq!(s.matmul, l.down2_mm);
                assert_eq!(s.epilogue.stages(), &[Stage::Add { slot: 0 }]);
            }
            s => panic!("rotated down: {s:?}"),
        }

        // Refused: the query projection has two uses.
        assert!(
            plan.refusals.contains(&Refused {
                pattern: Pattern::Epilogue,
                anchor: l.q_mm,
                reason: Refusal::MultipleUses {
                    node: l.q_mm,
                    uses: 2
                },
            }),
            "{:#?}",
            plan.refusals
        );
        // The residual stream after the o-proj add is read twice (norm and
        // the FFN residual), so that chain ends at the add.
        assert!(plan.refusals.contains(&Refused {
            pattern: Pattern::Epilogue,
            anchor: NodeId(l.o_add.0 - 1),
            reason: Refusal::MultipleUses {
                node: l.o_add,
                uses: 2
            },
        }));
        assert_eq!(plan.refusals.len(), 2, "{:#?}", plan.refusals);

        // 14 compute nodes unfused (reshapes excluded) vs 5 fused steps + 4 others.
        let unfused_plan = fused_core::planner::Plan::unfused(&l.b.g);
        assert_eq!(unfused_plan.kernel_steps(&l.b.g), 16);
        assert_eq!(plan.kernel_steps(&l.b.g), 10);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "evaluates ~10^5 dot terms twice: minutes under Miri; runs natively"
)]
fn decode_layer_matches_with_ggml_activation_quantization() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q8_0,
        DType::IQ4_NL,
    ] {
        let l = layer(dtype);
        let (plan, unfused, fused) = run_both(&l.b, GemvMode::Ggml);
        assert_eq!(plan.fused_steps(), 5);
        assert_eq!(unfused, fused, "{dtype}");
    }
}
