mod common;
use common::*;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;

#[test]
fn mm_add_fuses_and_matches() {
    let mut b = Builder::new(7);
    let w = b.weight(DType::Q4_0, 64, 8);
    let x = b.input_f32([64, 1, 1, 1]);
    let r = b.input_f32([8, 1, 1, 1]);
    let p1 = b.place_f32([8, 1, 1, 1]);
    let mm = b.g.mul_mat(w, x, p1).unwrap();
    let p2 = b.place_f32([8, 1, 1, 1]);
    let s = b.g.unary(Activation::Silu, mm, p2).unwrap();
    let p3 = b.place_f32([8, 1, 1, 1]);
    let out = b.g.add(s, r, p3).unwrap();
    b.g.mark_output(out).unwrap();
    for mode in [GemvMode::F32, GemvMode::Ggml] {
        let (plan, a, c) = run_both(&b, mode);
        assert_eq!(plan.fused_steps(), 1, "{plan:?}");
        assert_eq!(a, c);
    }
}
