//! The lab's device-timed kernels (feature `lab`): copies, GEMV benches
//! with and without barriers, FWHT fused and unfused, the quantizer.

#![cfg(feature = "lab")]

mod common;

use common::{assert_no_validation_messages, backend_or_skip};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_vulkan::timing;

#[test]
fn copies_gemvs_fwhts_and_quantizers_are_timed() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let t = timing::copy(&b, 1 << 20, 3).unwrap();
    assert!(t.median_ns > 0.0 && t.median_ns.is_finite(), "{t:?}");
    let t = timing::copy_shader(&b, 1 << 20, 3).unwrap();
    assert!(t.median_ns > 0.0 && t.median_ns.is_finite(), "{t:?}");
    assert!(
        timing::copy_shader(&b, 1000, 1).is_err(),
        "not a multiple of 16"
    );
    // Back-to-back GEMVs without barriers and with them: synchronization
    // validation checks that the unordered calls do not conflict.
    let g = timing::GemvBench::with_copies(&b, DType::Q4_0, 64, 256, 2, 2).unwrap();
    assert_eq!((g.copies(), g.calls()), (2, 4));
    for ordered in [false, true] {
        let t = g.time(None, ordered, 1).unwrap();
        assert!(t.median_ns > 0.0 && t.median_ns.is_finite(), "{t:?}");
    }
    drop(g);
    // Two dispatches in one submission: synchronization validation checks
    // the barrier between them.
    let t = timing::fwht(&b, 64, 64 * 64, false, 1).unwrap();
    assert!(t.median_ns > 0.0, "{t:?}");
    let t = timing::quantize(&b, ActQuant::Q8_K, 256, 2, 1).unwrap();
    assert!(t.median_ns > 0.0, "{t:?}");
    assert!(timing::quantize(&b, ActQuant::F32, 256, 1, 1).is_err());
    assert_no_validation_messages(&b);
}
