//! Greedy selection as the output head's tail on the CUDA device plan: the
//! head GEMV writes the index of its largest logit as it stores them, one
//! launch fewer than the head followed by the argmax launch, with the same
//! logits and the same index bit for bit (the core's argmax of those
//! logits): over many blocks, with the maximum tied half the head away,
//! with NaN logits and with every logit NaN; integer and float GEMVs; run
//! three times (the tail's scratch left ready for the next run), launch by
//! launch and replayed from a captured CUDA graph. Skipped without a
//! device.

mod common;

use common::backend_or_skip;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_testkit::greedy_head::{GreedyHead, HeadShape};

const fn head(dtype: DType, k: usize, rows: usize, twin: bool) -> HeadShape {
    HeadShape {
        dtype,
        k,
        rows,
        twin,
        nan_rows: &[],
    }
}

/// The heads and how the GEMV takes its activations.
const CASES: [(HeadShape, GemvMode); 7] = [
    // A vocabulary of many blocks, the maximum tied across them.
    (head(DType::Q4_0, 256, 50_000, true), GemvMode::Ggml),
    (head(DType::Q8_0, 512, 3_001, false), GemvMode::Ggml),
    (head(DType::Q4_K, 512, 4_096, true), GemvMode::Ggml),
    (head(DType::Q6_K, 256, 1_000, false), GemvMode::Ggml),
    // Float activations.
    (head(DType::F16, 256, 20_000, true), GemvMode::F32),
    (
        HeadShape {
            nan_rows: &[0, 7, 900, 1_999],
            ..head(DType::F32, 128, 2_000, false)
        },
        GemvMode::F32,
    ),
    (
        HeadShape {
            nan_rows: &[usize::MAX],
            ..head(DType::F32, 128, 777, false)
        },
        GemvMode::Ggml,
    ),
];

#[test]
fn the_head_writes_the_argmax_with_the_split_plans_bits() {
    let Some(be) = backend_or_skip() else { return };
    for (i, (shape, mode)) in CASES.into_iter().enumerate() {
        let h = GreedyHead::new(shape);
        let case = format!("{:?} × {} {mode:?}", shape.dtype, shape.rows);
        let [mut tail, mut split] = h.compile_both(&be, mode, 11 + i as u64, &case);
        let saved = split.stats().launches - tail.stats().launches;
        assert_eq!(saved, 1, "{case}");
        h.assert_same_results(
            &mut tail,
            &mut split,
            40,
            &format!("{case} launch by launch"),
        );
        assert!(tail.record_for_replay().unwrap(), "{case}");
        assert!(split.record_for_replay().unwrap(), "{case}");
        h.assert_same_results(&mut tail, &mut split, 50, &format!("{case} graph replay"));
    }
}
