//! The key/value append as the tail of the stacked q/k/v GEMV on the CUDA
//! device plan: where the GEMV's launch takes it (an integer GEMV of an
//! even number of rows a block) the plan has four launches fewer than the
//! unfused plan (both RoPEs and both row writes), elsewhere three (one
//! key/value append launch after the GEMV), and at every position (in
//! range, past the cache, NaN) every result equals the unfused plan's bit
//! for bit: the product, q's RoPE, both caches and the attention. Once
//! launch by launch, once replayed from a captured CUDA graph. Skipped
//! without a device.

mod common;

use common::backend_or_skip;
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::decode::RopeMode;
use fused_testkit::stacked_qkv::{StackedQkv, StackedShape};

/// The weights, how the GEMV takes its activations, and whether its
/// launch takes the tail.
const CASES: [(DType, GemvMode, bool); 4] = [
    (DType::Q4_0, GemvMode::Ggml, true),
    (DType::Q8_0, GemvMode::Ggml, true),
    (DType::Q4_K, GemvMode::Ggml, true),
    // Float activations: the float GEMV runs the append after it.
    (DType::F16, GemvMode::F32, false),
];

/// The stacked layer of both tests: 4 query and 2 key/value heads of
/// `head_dim` over K = 512, a cache of `rows` rows, with the output
/// projection where `o_proj`.
fn layer(dtype: DType, head_dim: usize, rows: usize, o_proj: bool) -> StackedQkv {
    StackedQkv::new(StackedShape {
        dtype,
        k: 512,
        head_dim,
        n_head: 4,
        n_kv: 2,
        rows,
        mode: RopeMode::Adjacent,
        pad: 0,
        reader_between: false,
        o_proj,
    })
}

#[test]
fn the_append_rides_on_the_integer_gemv_with_the_unfused_bits() {
    let Some(be) = backend_or_skip() else { return };
    for (dtype, mode, tail) in CASES {
        let l = layer(dtype, 64, 16, false);
        let case = format!("{dtype:?} {mode:?}");
        let mut plans = l.compile_both(&be, mode, 5, &case);
        let [fused, unfused] = &mut plans;
        let saved = unfused.stats().launches - fused.stats().launches;
        assert_eq!(saved, if tail { 4 } else { 3 }, "{case}");
        l.assert_same_results(fused, unfused, &format!("{case} launch by launch"));
        assert!(fused.record_for_replay().unwrap(), "{case}");
        l.assert_same_results(fused, unfused, &format!("{case} graph replay"));
    }
}

/// The attention's output, read by the next GEMV as Q8_0, Q8_1 or Q8_K
/// activations, is quantized by the attention itself as it merges its
/// splits (4 of them over a cache of 128 rows; Q8_K: a combine block of 4
/// heads of 64, or of 2 heads of 128, a quantizer block): one launch fewer than with the quantizer launch
/// (the lab's switch off), and every result (the projection's among them)
/// the same bit for bit, launch by launch and replayed from a CUDA graph.
#[cfg(feature = "lab")]
#[test]
fn the_attention_writes_the_next_gemvs_quantized_input() {
    use fused_cuda::Knob;
    let Some(be) = backend_or_skip() else { return };
    let saved = be.tuning();
    let cases = [
        (DType::Q4_0, 64),
        (DType::Q8_0, 64),
        (DType::Q4_1, 64),
        (DType::Q4_K, 64),
        (DType::Q4_K, 128),
    ];
    for (dtype, head_dim) in cases {
        let l = layer(dtype, head_dim, 128, true);
        let case = format!("{dtype:?}, heads of {head_dim}");
        let [mut folded, _] = l.compile_both(&be, GemvMode::Ggml, 7, &case);
        be.set_tuning(saved.with(Knob::FoldAttentionQuantizer(false)).unwrap());
        let [mut separate, _] = l.compile_both(&be, GemvMode::Ggml, 7, &case);
        be.set_tuning(saved);
        let (f, s) = (folded.stats(), separate.stats());
        assert_eq!(s.launches - f.launches, 1, "{case}: {f:?} against {s:?}");
        assert_eq!(s.quantizations - f.quantizations, 1, "{case}");
        l.assert_same_results(
            &mut folded,
            &mut separate,
            &format!("{case} launch by launch"),
        );
        assert!(folded.record_for_replay().unwrap(), "{case}");
        l.assert_same_results(&mut folded, &mut separate, &format!("{case} graph replay"));
    }
}
