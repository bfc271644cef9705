//! The output head with its argmax tail on the CPU plan: run by parts (the
//! head GEMV, then the argmax), with the logits and the index of the plan
//! with the argmax as a step of its own, bit for bit (the index the core's
//! argmax of the logits): the maximum tied half the head away, NaN logits,
//! every logit NaN; three runs.

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_cpu::CpuBackend;
use fused_testkit::greedy_head::{GreedyHead, HeadShape};

#[test]
fn the_head_and_its_argmax_match_the_split_plan() {
    let be = CpuBackend::new(2).expect("a CPU backend");
    for (i, (dtype, rows, twin, nan_rows, mode)) in [
        (DType::Q4_0, 6_000, true, &[][..], GemvMode::Ggml),
        (DType::Q4_K, 1_000, true, &[], GemvMode::Ggml),
        (DType::F32, 500, false, &[0, 3, 499], GemvMode::F32),
        (DType::F32, 300, false, &[usize::MAX], GemvMode::Ggml),
    ]
    .into_iter()
    .enumerate()
    {
        let shape = HeadShape {
            dtype,
            k: 256,
            rows,
            twin,
            nan_rows,
        };
        let h = GreedyHead::new(shape);
        let case = format!("{dtype:?} × {rows} {mode:?}");
        let [mut tail, mut split] = h.compile_both(&be, mode, 31 + i as u64, &case);
        h.assert_same_results(&mut tail, &mut split, 70, &case);
    }
}
