//! The context itself: device properties, the validation messenger, buffers
//! round trips and timestamps.

mod common;

use common::{
    assert_no_validation_messages, backend_or_skip, backend_with_or_skip, data,
    first_bit_difference,
};
use fused_core::DType;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::job::GemvJob;
use fused_core::quant::quantize_row;
use fused_core::weights::WeightMatrix;
use fused_vulkan::{ContextOptions, VulkanBackend};

#[test]
fn device_properties_are_sane() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let info = b.context().info();
    assert!(!info.name().is_empty());
    assert!(info.subgroup_size().is_power_of_two(), "{info:?}");
    #[cfg(feature = "lab")]
    {
        assert!(info.max_invocations() >= 128, "{info:?}");
        assert!(info.max_shared_bytes() >= 16384, "{info:?}");
    }
    assert_no_validation_messages(&b);
}

#[test]
fn the_messenger_records_every_message() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    assert!(b.context().validation_messages().is_empty());
    if !common::validation() {
        assert!(!b.context().report_test_message(c"no messenger"));
        return;
    }
    assert!(
        b.context()
            .report_test_message(c"fused-vulkan test message")
    );
    let msgs = b.context().validation_messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("fused-vulkan test message"), "{msgs:?}");
}

#[test]
fn buffers_round_trip_and_the_copy_bandwidth_is_measured() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let ctx = b.context();
    let v: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
    let buf = ctx.upload(&v).unwrap();
    let mut back = vec![0; v.len()];
    ctx.read(&buf, &mut back).unwrap();
    assert_eq!(back, v);
    let mut too_long = vec![0; 2000];
    assert!(ctx.read(&buf, &mut too_long).is_err());
    let gbs = b.copy_bandwidth_gbs(1 << 20, 3).unwrap();
    assert!(gbs > 0.0 && gbs.is_finite(), "{gbs}");
    assert!(b.copy_bandwidth_gbs(15, 1).is_err(), "less than 16 bytes");
    assert_no_validation_messages(&b);
}

/// A GEMV with a chain and a signed FWHT, as one backend computes them.
fn sample_results(b: &VulkanBackend) -> (Vec<f32>, Vec<f32>) {
    let (m, k, n_cols) = (19, 128, 2);
    let w = data(m * k, 31);
    let rb = DType::Q8_0.row_bytes(k).unwrap();
    let mut wb = vec![0u8; m * rb];
    for (src, dst) in w.chunks_exact(k).zip(wb.chunks_exact_mut(rb)) {
        quantize_row(DType::Q8_0, src, dst).unwrap();
    }
    let wm = WeightMatrix::new(DType::Q8_0, m, k, &wb).unwrap();
    let x = data(k * n_cols, 32);
    let res = data(m * n_cols, 33);
    let e = Epilogue::NONE.then_add().unwrap();
    let mut y = vec![0.0; m * n_cols];
    b.gemv(
        &GemvJob::new(&wm, &x, n_cols).with_epilogue(e, &[&res]),
        &mut y,
    )
    .unwrap();
    let n = 4096;
    let xs = data(3 * n, 34);
    let signs: Vec<f32> = data(n, 35).iter().map(|v| v.signum()).collect();
    let d = FwhtDesc::new(n).unwrap().with_signs(n).unwrap();
    let mut f = vec![0.0; xs.len()];
    b.fwht(&d, &xs, Some(&signs), &mut f).unwrap();
    (y, f)
}

#[test]
fn staged_buffers_give_the_same_bits() {
    let Some(plain) = backend_or_skip() else {
        return;
    };
    let staged = backend_with_or_skip(ContextOptions {
        validation: common::validation(),
        staged_buffers: true,
    })
    .expect("the device opened once already");
    #[cfg(feature = "lab")]
    assert!(!staged.context().info().host_visible_buffers());
    let (y0, f0) = sample_results(&plain);
    let (y1, f1) = sample_results(&staged);
    assert_eq!(first_bit_difference(&y0, &y1), None, "GEMV");
    assert_eq!(first_bit_difference(&f0, &f1), None, "FWHT");
    let v: Vec<u8> = (0..77u8).collect();
    let buf = staged.context().upload(&v).unwrap();
    let mut back = vec![0; v.len()];
    staged.context().read(&buf, &mut back).unwrap();
    assert_eq!(back, v);
    assert_no_validation_messages(&plain);
    assert_no_validation_messages(&staged);
}
