//! The context itself: device properties, the validation messenger, buffers
//! round trips and timestamps.

mod common;

use common::{assert_no_validation_messages, backend_or_skip, data};
use fused_vulkan::timing;

#[test]
fn device_properties_are_sane() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let info = b.context().info();
    assert!(!info.name.is_empty());
    assert!(info.subgroup_size.is_power_of_two(), "{info:?}");
    assert!(info.max_invocations >= 128, "{info:?}");
    assert!(info.max_shared_bytes >= 16384, "{info:?}");
    assert_no_validation_messages(&b);
}

#[test]
fn the_messenger_records_every_message() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    assert!(b.context().validation_messages().is_empty());
    assert!(
        b.context()
            .report_test_message(c"fused-vulkan test message")
    );
    let msgs = b.context().validation_messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].contains("fused-vulkan test message"), "{msgs:?}");
}

#[test]
fn buffers_round_trip_and_copies_are_timed() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let ctx = b.context();
    let v = data(1001, 9);
    let buf = ctx.upload_f32(&v).unwrap();
    let mut back = vec![0.0; v.len()];
    ctx.read_f32(&buf, &mut back).unwrap();
    assert_eq!(back, v);
    let mut too_long = vec![0.0; 2000];
    assert!(ctx.read_f32(&buf, &mut too_long).is_err());
    let t = timing::copy(&b, 1 << 20, 3).unwrap();
    assert!(t.median_ns > 0.0 && t.median_ns.is_finite(), "{t:?}");
    // Two dispatches in one submission: synchronization validation checks
    // the barrier between them.
    let t = timing::fwht(&b, b.fwht_variant(), 64, 64 * 64, false, 1).unwrap();
    assert!(t.median_ns > 0.0, "{t:?}");
    assert_no_validation_messages(&b);
}
