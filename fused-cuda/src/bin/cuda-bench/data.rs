//! Bench inputs: pseudo-random vectors and weights, the rotating weight copies,
//! the shapes.

use fused_core::DType;
use fused_core::weights::WeightMatrix;
use fused_cuda::{CudaBackend, CudaError, DeviceWeights};

/// Bytes the rotating weight copies must add up to: 4× the H200's 60 MB L2.
pub(crate) const ROTATE_BYTES: usize = 240_000_000;

/// Deterministic pseudo-random f32 in [-1, 1).
pub(crate) fn randv(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `rows × k` weights in `dtype`: 64 distinct random rows, tiled.
pub(crate) fn weight_bytes(dtype: DType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let rb = dtype.row_bytes(k).expect("block-aligned K");
    let distinct = 64.min(rows);
    let mut tile = vec![0u8; distinct * rb];
    for r in 0..distinct {
        let row = randv(k, seed + r as u64);
        fused_core::quant::quantize_row(dtype, &row, &mut tile[r * rb..(r + 1) * rb])
            .expect("quantize");
    }
    let mut out = Vec::with_capacity(rows * rb);
    while out.len() < rows * rb {
        let take = (rows * rb - out.len()).min(tile.len());
        out.extend_from_slice(&tile[..take]);
    }
    out
}

/// Enough device copies of one weight matrix to exceed [`ROTATE_BYTES`] (at least 2).
pub(crate) fn weight_copies(
    be: &CudaBackend,
    dtype: DType,
    rows: usize,
    k: usize,
) -> Result<Vec<DeviceWeights>, CudaError> {
    let bytes = weight_bytes(dtype, rows, k, 7);
    let w = WeightMatrix::new(dtype, rows, k, &bytes)?;
    let copies = ROTATE_BYTES.div_ceil(bytes.len()).max(2);
    (0..copies).map(|_| be.upload_weights(&w)).collect()
}

/// The two GEMV shapes (rows × K).
pub(crate) const DEFAULT_SHAPES: [(usize, usize); 2] = [(4096, 14336), (32768, 8192)];

/// The GEMV shapes (rows × K) of the launch-option and GEMV tables:
/// 4096 × 14336 and 32768 × 8192, or those that `FUSED_BENCH_SHAPES` lists
/// (`ROWSxK,…`, e.g. `3584x16384,4096x14336`; each K a multiple of 256).
pub(crate) fn bench_shapes() -> Vec<(usize, usize)> {
    let default = DEFAULT_SHAPES.to_vec();
    let Ok(list) = std::env::var("FUSED_BENCH_SHAPES") else {
        return default;
    };
    let parsed: Option<Vec<(usize, usize)>> = list
        .split(',')
        .map(|s| {
            let (m, k) = s.trim().split_once('x')?;
            let (m, k) = (m.parse().ok()?, k.parse().ok()?);
            (m > 0 && k > 0 && k % 256 == 0).then_some((m, k))
        })
        .collect();
    parsed.unwrap_or_else(|| {
        eprintln!("FUSED_BENCH_SHAPES={list:?}: not ROWSxK,… with K a multiple of 256; defaults");
        default
    })
}
