//! The stacked q/k/v GEMV with its key/value append tail on the Vulkan
//! device plan: the backend runs the tail by parts (the GEMV, then the
//! key/value append), and the attention's split pass after it takes the
//! append on, so the plan has four dispatches fewer than the unfused plan
//! (both RoPEs and both row writes), three with the lab's switch off; at
//! every position (in range, past the cache, NaN) every result equals the
//! unfused plan's bit for bit; no validation message. Skipped without a
//! Vulkan device.

mod common;

use common::{assert_no_validation_messages, backend_or_skip};
use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::decode::RopeMode;
use fused_testkit::stacked_qkv::{StackedQkv, StackedShape};

/// Four query heads of `head_dim` over two key/value heads, K = 256, a
/// cache of `rows` rows, the attention's output projection after it where
/// `o_proj`.
fn layer(dtype: DType, head_dim: usize, rows: usize, o_proj: bool) -> StackedQkv {
    StackedQkv::new(StackedShape {
        dtype,
        k: 256,
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
fn the_stacked_gemv_and_its_append_match_the_unfused_plan() {
    let Some(be) = backend_or_skip() else { return };
    // The third case goes on to the attention's output projection; the
    // last has a cache of several splits (the new row in any of them).
    for (dtype, mode, o_proj, rows) in [
        (DType::Q4_0, GemvMode::Ggml, false, 8),
        (DType::F16, GemvMode::F32, false, 8),
        (DType::Q4_0, GemvMode::Ggml, true, 8),
        (DType::Q8_0, GemvMode::Ggml, false, 200),
    ] {
        let l = layer(dtype, 32, rows, o_proj);
        let case = format!("{dtype:?} {mode:?} {o_proj} {rows}");
        let mut plans = l.compile_both(&be, mode, 9, &case);
        let [fused, unfused] = &mut plans;
        let saved = unfused.stats().launches - fused.stats().launches;
        assert_eq!(saved, 4, "{case}");
        l.assert_same_results(fused, unfused, &case);
    }
    assert_no_validation_messages(&be);
}

/// Two devices, the second with a lab switch off (`off`); `None` (the
/// skip reported) without a device.
#[cfg(feature = "lab")]
fn on_and_off(
    off: impl Fn(fused_vulkan::Tuning) -> fused_vulkan::Tuning,
) -> Option<(fused_vulkan::VulkanBackend, fused_vulkan::VulkanBackend)> {
    let (on, mut other) = (backend_or_skip()?, backend_or_skip()?);
    let tuning = off(other.tuning());
    other.set_tuning(tuning).expect("the switch off");
    Some((on, other))
}

/// With the lab's switch off the append keeps its own dispatch: one more
/// than with it on, and every result the same bit for bit.
#[cfg(feature = "lab")]
#[test]
fn the_append_has_its_own_dispatch_with_the_switch_off() {
    let Some((be, off)) = on_and_off(|t| t.with_append_in_attention(false)) else {
        return;
    };
    for rows in [8, 200] {
        let l = layer(DType::Q4_0, 64, rows, true);
        let case = format!("{rows} rows");
        let [mut inside, _] = l.compile_both(&be, GemvMode::Ggml, 3, &case);
        let [mut apart, _] = l.compile_both(&off, GemvMode::Ggml, 3, &case);
        assert_eq!(
            apart.stats().launches - inside.stats().launches,
            1,
            "{case}"
        );
        l.assert_same_results(&mut inside, &mut apart, &case);
    }
    assert_no_validation_messages(&be);
    assert_no_validation_messages(&off);
}

/// The attention's output, read by the projection's GEMV as Q8_0 or Q8_1
/// activations, is quantized by the pass joining the attention's splits
/// (a 128-row cache: four splits): one dispatch fewer than with the
/// quantizer dispatch (the lab's switch off), and every result, the
/// projection's among them, the same bit for bit at every position. Q8_K
/// activations (Q4_K weights: blocks of 256 across heads of 64) keep their
/// quantizer.
#[cfg(feature = "lab")]
#[test]
fn the_attention_writes_the_next_gemvs_quantized_input() {
    let Some((be, off)) = on_and_off(|t| t.with_fold_attention_quantizer(false)) else {
        return;
    };
    for (dtype, folds) in [
        (DType::Q4_0, true),
        (DType::Q8_0, true),
        (DType::Q4_1, true),
        (DType::Q4_K, false),
    ] {
        let l = layer(dtype, 64, 128, true);
        let case = format!("{dtype:?}");
        let [mut folded, _] = l.compile_both(&be, GemvMode::Ggml, 7, &case);
        let [mut separate, _] = l.compile_both(&off, GemvMode::Ggml, 7, &case);
        let (f, s) = (folded.stats(), separate.stats());
        let fewer = u64::from(folds);
        assert_eq!(
            s.launches - f.launches,
            fewer,
            "{case}: {f:?} against {s:?}"
        );
        assert_eq!(s.quantizations - f.quantizations, fewer, "{case}");
        l.assert_same_results(&mut folded, &mut separate, &case);
    }
    assert_no_validation_messages(&be);
    assert_no_validation_messages(&off);
}
