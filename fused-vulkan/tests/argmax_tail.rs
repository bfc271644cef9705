//! The output head with its argmax tail on the Vulkan device plan: the
//! backend runs the tail by parts (the head GEMV, then the argmax
//! dispatch), so the plan has as many dispatches as with the argmax
//! planned as a step of its own, and the logits and the index equal that
//! plan's bit for bit (the index the core's argmax of the logits): the
//! maximum tied half the head away, NaN logits, every logit NaN; three
//! runs; no validation message. Skipped without a Vulkan device.

mod common;

use common::{assert_no_validation_messages, backend_or_skip};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_testkit::greedy_head::{GreedyHead, HeadShape};

const fn head(dtype: DType, rows: usize, twin: bool, nan_rows: &'static [usize]) -> HeadShape {
    HeadShape {
        dtype,
        k: 256,
        rows,
        twin,
        nan_rows,
    }
}

#[test]
fn the_head_and_its_argmax_match_the_split_plan() {
    let Some(be) = backend_or_skip() else { return };
    for (i, (shape, mode)) in [
        (head(DType::Q4_0, 6_000, true, &[]), GemvMode::Ggml),
        (head(DType::F16, 999, false, &[]), GemvMode::F32),
        (head(DType::F32, 500, false, &[0, 3, 499]), GemvMode::F32),
        (head(DType::F32, 300, false, &[usize::MAX]), GemvMode::F32),
    ]
    .into_iter()
    .enumerate()
    {
        let h = GreedyHead::new(shape);
        let case = format!("{:?} × {} {mode:?}", shape.dtype, shape.rows);
        let [mut tail, mut split] = h.compile_both(&be, mode, 21 + i as u64, &case);
        assert_eq!(tail.stats().launches, split.stats().launches, "{case}");
        h.assert_same_results(&mut tail, &mut split, 60, &case);
    }
    assert_no_validation_messages(&be);
}
