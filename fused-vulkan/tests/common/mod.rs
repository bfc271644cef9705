//! Shared test helpers: the device (or a reported skip), validation checks,
//! deterministic data and error measures.

#![allow(dead_code)]

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::quant::quantize_row;
use fused_vulkan::{ContextOptions, VulkanBackend};
use std::io::Write;

/// Whether the tests run under the validation layer: always, unless
/// `FUSED_VK_TEST_VALIDATION=0` (for a machine without the layer installed).
pub(crate) fn validation() -> bool {
    std::env::var_os("FUSED_VK_TEST_VALIDATION").is_none_or(|v| v != "0")
}

/// Opens the device with the validation layer on, or reports the skip and
/// returns `None`. `FUSED_REQUIRE_VULKAN=1` turns a skip into a failure.
pub(crate) fn backend_or_skip() -> Option<VulkanBackend> {
    backend_with_or_skip(ContextOptions {
        validation: validation(),
        staged_buffers: false,
    })
}

/// [`backend_or_skip`] with given options.
pub(crate) fn backend_with_or_skip(options: ContextOptions) -> Option<VulkanBackend> {
    match VulkanBackend::with_options(options) {
        Ok(b) => Some(b),
        Err(e) => {
            if std::env::var_os("FUSED_REQUIRE_VULKAN").is_some_and(|v| v != "0") {
                panic!("FUSED_REQUIRE_VULKAN is set, but: {e}");
            }
            assert!(e.is_no_device(), "opening the device failed: {e}");
            // Past the harness's capture, so that a skip is always visible.
            let _ = writeln!(std::io::stderr(), "skipped: no Vulkan device ({e})");
            None
        }
    }
}

/// Fails the test if the validation layer reported anything.
pub(crate) fn assert_no_validation_messages(b: &VulkanBackend) {
    assert_eq!(b.context().validation_enabled(), validation());
    let msgs = b.context().validation_messages();
    assert!(
        msgs.is_empty(),
        "{} validation message(s):\n{}",
        msgs.len(),
        msgs.join("\n")
    );
}

/// Deterministic values in about [-1, 1) (a small LCG).
pub(crate) fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Normalised mean squared error of `got` against `want`.
pub(crate) fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let d = *g as f64 - *w as f64;
        err += d * d;
        norm += (*w as f64) * (*w as f64);
    }
    if norm == 0.0 { err } else { err / norm }
}

/// Whether two slices are equal bit for bit; the first difference otherwise.
pub(crate) fn first_bit_difference(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, *x, *y))
}

/// `rows × k` weights of `dtype` from [`data`] (seed `seed`), in the core's
/// layout.
pub(crate) fn weights(dtype: DType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let w = data(rows * k, seed);
    let rb = dtype.row_bytes(k).unwrap();
    let mut bytes = vec![0u8; rows * rb];
    for (src, dst) in w.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
        quantize_row(dtype, src, dst).unwrap();
    }
    bytes
}

/// residual add, activation, row bias, multiply: every stage kind.
pub(crate) fn chain(act: Activation) -> Epilogue {
    Epilogue::NONE
        .then_add()
        .and_then(|e| e.then_act(act))
        .and_then(|e| e.then_row_bias())
        .and_then(|e| e.then_mul())
        .unwrap()
}

/// The operands of [`chain`] for `rows × cols` outputs (the multiplier kept
/// away from 0).
pub(crate) fn operands(rows: usize, cols: usize) -> [Vec<f32>; 3] {
    [
        data(rows * cols, 11),
        data(rows, 12),
        data(rows * cols, 13).iter().map(|v| v + 1.5).collect(),
    ]
}

/// Which cells of a test's cross product (formats × column counts, shapes
/// × formats) run. On a GPU, every cell. On a CPU device (lavapipe), which
/// compiles each pipeline (a specialization of shape, format and column
/// count) through LLVM at about a second apiece, a covering sample: cell
/// `(i, j)` runs when `(i + j) % stride == 0`, so every row and every
/// column of the product still runs at least once as long as both axes
/// have `stride` or more entries. `FUSED_VK_TEST_FULL=1` runs every cell
/// there too.
pub(crate) struct Sweep {
    stride: usize,
    ran: usize,
    cells: usize,
}

impl Sweep {
    /// The sweep for `b`'s device: every cell on a GPU, one in `stride` on
    /// a CPU device.
    pub(crate) fn new(b: &VulkanBackend, stride: usize) -> Sweep {
        let full = std::env::var_os("FUSED_VK_TEST_FULL").is_some_and(|v| v != "0");
        let cpu = b.context().info().device_type() == ash::vk::PhysicalDeviceType::CPU;
        Sweep {
            stride: if cpu && !full { stride.max(1) } else { 1 },
            ran: 0,
            cells: 0,
        }
    }

    /// Whether cell `(i, j)` runs (and counts it).
    pub(crate) fn runs(&mut self, i: usize, j: usize) -> bool {
        self.cells += 1;
        let runs = (i + j).is_multiple_of(self.stride);
        self.ran += usize::from(runs);
        runs
    }

    /// Says how much of the product ran when it was sampled (past the
    /// harness's capture, like a skip).
    pub(crate) fn report(&self, what: &str) {
        if self.ran < self.cells {
            let _ = writeln!(
                std::io::stderr(),
                "sampled: {what}: {} of {} cells on a CPU device (FUSED_VK_TEST_FULL=1 runs all)",
                self.ran,
                self.cells
            );
        }
    }
}
