//! The probe kernel against the host, on the first CUDA device.
//!
//! Without a device (or without the `cuda` feature) the test passes and says
//! `skipped: no CUDA device (<reason>)` on stderr; set `FUSED_REQUIRE_CUDA=1`
//! to make that a failure instead (for runs on a GPU machine).

use fused_cuda::{CudaDevice, CudaError};
use std::io::Write;

/// Opens the device, or reports the skip and returns `None`.
fn device_or_skip() -> Option<CudaDevice> {
    match CudaDevice::new() {
        Ok(dev) => Some(dev),
        Err(e) => {
            if !fused_cuda::CUDA_ENABLED {
                assert_eq!(e, CudaError::NotCompiled);
            }
            if std::env::var_os("FUSED_REQUIRE_CUDA").is_some_and(|v| v != "0") {
                panic!("FUSED_REQUIRE_CUDA is set, but: {e}");
            }
            // Straight to stderr, past the test harness's output capture, so
            // that a skip is always visible.
            let _ = writeln!(std::io::stderr(), "skipped: no CUDA device ({e})");
            None
        }
    }
}

#[test]
fn probe_axpy_matches_the_host() {
    let Some(dev) = device_or_skip() else {
        return;
    };
    let _ = writeln!(std::io::stderr(), "running on {}", dev.name());
    let a = 1.5_f32;
    for n in [1_usize, 255, 256, 257, 100_003] {
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25 - 12.0).collect();
        let y0: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.5).collect();
        let mut y = y0.clone();
        dev.probe_axpy(a, &x, &mut y).unwrap();
        for i in 0..n {
            // The kernel uses fmaf, so the exact host answer is mul_add.
            let want = a.mul_add(x[i], y0[i]);
            assert_eq!(y[i].to_bits(), want.to_bits(), "n={n} i={i}");
        }
    }
    let mut empty: [f32; 0] = [];
    dev.probe_axpy(a, &[], &mut empty).unwrap();
    assert!(matches!(
        dev.probe_axpy(a, &[1.0, 2.0], &mut [0.0]),
        Err(CudaError::Core(_))
    ));
}
