//! Deterministic, bounded values: the same seed always gives the same data,
//! so a finding replays exactly.

use fused_core::DType;
use fused_core::quant::quantize_row;

/// `n` values in `[-scale, scale]` from `seed` (a small LCG; no NaN, no
/// infinity).
pub fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// `rows` rows of `cols` elements of `dtype`, quantized from bounded values
/// (`None` when `cols` is not a whole number of blocks).
pub fn weight_bytes(dtype: DType, rows: usize, cols: usize, seed: u32) -> Option<Vec<u8>> {
    let rb = dtype.row_bytes(cols).ok()?;
    let mut out = vec![0u8; rb.checked_mul(rows)?];
    let vals = values(cols, seed, 1.0);
    for (r, row) in out.chunks_exact_mut(rb.max(1)).enumerate().take(rows) {
        let shifted: Vec<f32> = vals
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1.0 + ((r + i) % 7) as f32 * 0.1))
            .collect();
        quantize_row(dtype, &shifted, row).ok()?;
    }
    Some(out)
}
