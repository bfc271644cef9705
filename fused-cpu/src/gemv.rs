//! Single-threaded GEMV/GEMM over a range of rows, the epilogue applied to
//! each accumulator tile before the store. `no_std`, no allocation.

use core::ops::Range;

use fused_core::element::glu;
use fused_core::epilogue::BoundEpilogue;
use fused_core::reference::WeightMatrix;
use fused_core::reference::gemv::GluWeights;
use fused_core::{DType, Error};

use crate::acts::Acts;
use crate::kernels::RowDot;

/// Rows per accumulator tile.
pub const TILE_ROWS: usize = 16;

/// Computes rows `rows` of `epilogue(w · x)` for every column in `cols` and
/// hands each result to `store(row, col, value)`. Weight rows are walked in
/// tiles of [`TILE_ROWS`]; inside a tile every column is processed, so the
/// tile's weights are read from memory once per call.
pub fn gemv_rows(
    kernel: RowDot,
    w: &WeightMatrix<'_>,
    cols: &[Acts<'_>],
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    let (dtype, k) = (w.dtype(), w.cols());
    let mut acc = [0.0f32; TILE_ROWS];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + TILE_ROWS).min(rows.end);
        for (col, x) in cols.iter().enumerate() {
            for (a, r) in acc.iter_mut().zip(start..end) {
                *a = kernel(dtype, w.row(r)?, x, k)?;
            }
            for (a, r) in acc.iter().zip(start..end) {
                store(r, col, epilogue.apply(*a, r, col));
            }
        }
        start = end;
    }
    Ok(())
}

/// [`gemv_rows`] for the gated dual form: `epilogue(act(W_g·x) ⊙ (W_u·x))`,
/// both products from the same prepared activations.
pub fn gemv_glu_rows(
    kernel: RowDot,
    w: &GluWeights<'_>,
    act: fused_core::element::Activation,
    cols: &[Acts<'_>],
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    let (dtype, k): (DType, usize) = (w.gate().dtype(), w.gate().cols());
    let mut gate = [0.0f32; TILE_ROWS];
    let mut up = [0.0f32; TILE_ROWS];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + TILE_ROWS).min(rows.end);
        for (col, x) in cols.iter().enumerate() {
            for ((g, u), r) in gate.iter_mut().zip(up.iter_mut()).zip(start..end) {
                *g = kernel(dtype, w.gate().row(r)?, x, k)?;
                *u = kernel(dtype, w.up().row(r)?, x, k)?;
            }
            for ((g, u), r) in gate.iter().zip(&up).zip(start..end) {
                store(r, col, epilogue.apply(glu(act, *g, *u), r, col));
            }
        }
        start = end;
    }
    Ok(())
}
