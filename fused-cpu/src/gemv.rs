//! Single-threaded GEMV/GEMM over a range of rows, the epilogue applied to
//! each accumulator tile before the store. `no_std`, no allocation.
//!
//! One column goes through the row-dot kernels ([`Dot`]); two or more go
//! through the GEMM driver ([`crate::gemm`]) when the kernels include a
//! [`GemmKernel`] for the format and mode, and through the row-dot kernels
//! once per (row, column) otherwise.

use core::ops::Range;

use fused_core::element::Activation;
use fused_core::epilogue::BoundEpilogue;
use fused_core::reference::WeightMatrix;
use fused_core::reference::gemv::GluWeights;
use fused_core::{DType, Error};

use crate::activation::ActEval;
use crate::acts::Acts;
use crate::gemm::gemm_rows;
use crate::isa::Isa;
use crate::kernels::gemm::{GemmKernel, gemm_kernel};
use crate::kernels::{Dot, RowDot, dot};

/// The kernels of one GEMV/GEMM call: the row-dot kernels, and the GEMM
/// kernel used for two or more columns where there is one.
#[derive(Clone, Copy, Debug)]
pub struct RowKernels {
    /// The row-dot kernels (one column; several without a GEMM kernel).
    pub dot: Dot,
    /// The GEMM kernel for two or more columns, if any.
    pub gemm: Option<GemmKernel>,
    /// How the epilogue's activations (and a GLU's) are evaluated: the
    /// same as the ISA's unfused element-wise kernels.
    pub act: ActEval,
}

impl RowKernels {
    /// The best kernels of `isa` for weights of `dtype` in `mode`.
    pub fn new(isa: Isa, dtype: DType, mode: fused_core::reference::ActQuant) -> RowKernels {
        RowKernels {
            dot: dot(isa, dtype, mode),
            gemm: gemm_kernel(isa, dtype, mode),
            act: ActEval::for_isa(isa),
        }
    }
}

impl From<Dot> for RowKernels {
    /// Row-dot kernels only: every column goes through them; activations
    /// as the core evaluates them ([`ActEval::Reference`]).
    fn from(dot: Dot) -> RowKernels {
        RowKernels {
            dot,
            gemm: None,
            act: ActEval::Reference,
        }
    }
}

impl From<RowDot> for RowKernels {
    /// One row-dot kernel only: every column goes through it.
    fn from(one: RowDot) -> RowKernels {
        Dot::from(one).into()
    }
}

/// Rows per accumulator tile.
pub const TILE_ROWS: usize = 16;

/// Some of the activation columns of a call: `acts` are columns
/// `first..first + acts.len()` of the call's `total`. Which driver computes
/// them depends on `total` (see [`gemv_rows_cols`]), so a call split into
/// blocks gives the values of the whole.
#[derive(Clone, Copy, Debug)]
pub struct ColumnBlock<'c, 'a> {
    acts: &'c [Acts<'a>],
    first: usize,
    total: usize,
}

impl<'c, 'a> ColumnBlock<'c, 'a> {
    /// Every column of a call.
    pub fn all(acts: &'c [Acts<'a>]) -> ColumnBlock<'c, 'a> {
        ColumnBlock {
            acts,
            first: 0,
            total: acts.len(),
        }
    }

    /// Columns `first..first + acts.len()` of a call of `total` columns, or
    /// a typed error when they do not lie inside it.
    pub fn new(
        acts: &'c [Acts<'a>],
        first: usize,
        total: usize,
    ) -> Result<ColumnBlock<'c, 'a>, Error> {
        match first.checked_add(acts.len()) {
            Some(end) if end <= total => Ok(ColumnBlock { acts, first, total }),
            _ => Err(Error::LengthMismatch {
                what: "GEMV column block (must lie inside the column count)",
                expected: total,
                actual: first.saturating_add(acts.len()),
            }),
        }
    }

    /// Columns `columns` of `all` (every column of a call), or a typed
    /// error when the range does not lie inside it.
    pub fn part(all: &'c [Acts<'a>], columns: Range<usize>) -> Result<ColumnBlock<'c, 'a>, Error> {
        match all.get(columns.clone()) {
            Some(acts) => ColumnBlock::new(acts, columns.start, all.len()),
            None => Err(Error::LengthMismatch {
                what: "GEMV column range (must be an ordered range inside the column count)",
                expected: all.len(),
                actual: columns.end,
            }),
        }
    }

    /// The block's columns.
    pub fn acts(&self) -> &'c [Acts<'a>] {
        self.acts
    }

    /// The call's index of the block's first column.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The call's column count.
    pub fn total(&self) -> usize {
        self.total
    }
}

/// Computes rows `rows` of `epilogue(w · x)` for every column in `cols` and
/// hands each result to `store(row, col, value)`: [`gemv_rows_cols`] over
/// all the columns.
pub fn gemv_rows(
    kernels: RowKernels,
    w: &WeightMatrix<'_>,
    cols: &[Acts<'_>],
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    gemv_rows_cols(kernels, w, ColumnBlock::all(cols), rows, epilogue, store)
}

/// Computes rows `rows` of `epilogue(w · x)` for the columns of `cols` and
/// hands each result to `store(row, col, value)` (`col` the call's column
/// index). Weight rows are walked in tiles of [`TILE_ROWS`]; inside a tile
/// every column is processed, so the tile's weights are read from memory
/// once per call. With two or more columns in the call (`cols.total()`, not
/// only this block) and a GEMM kernel, the GEMM driver computes the
/// accumulators and the epilogue is applied to each one before `store`.
/// Every value is the same whatever `rows` and column block it was
/// computed in, so a call may be split across threads by rows and by
/// columns.
pub fn gemv_rows_cols(
    kernels: RowKernels,
    w: &WeightMatrix<'_>,
    cols: ColumnBlock<'_, '_>,
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    let (part, c0) = (cols.acts(), cols.first());
    let ev = kernels.act;
    let act = |a: Activation, v: f32| ev.apply(a, v);
    if cols.total() >= 2
        && let Some(g) = kernels.gemm
    {
        return gemm_rows(g, [w], part, rows, |r, c, [acc]| {
            let c = c0 + c;
            store(r, c, epilogue.apply_act(acc, r, c, act))
        });
    }
    let mut acc = [0.0f32; TILE_ROWS];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + TILE_ROWS).min(rows.end);
        for (col, x) in (c0..).zip(part) {
            tile_accs(kernels.dot, w, x, start..end, &mut acc)?;
            for (a, r) in acc.iter().zip(start..end) {
                store(r, col, epilogue.apply_act(*a, r, col, act));
            }
        }
        start = end;
    }
    Ok(())
}

/// The accumulators of weight rows `rows` (at most [`TILE_ROWS`]) against
/// `x` into `acc[..rows.len()]`: four rows at a time where the kernels have
/// a four-row kernel (bit-identical to the one-row kernel), then one by one.
fn tile_accs(
    kernel: Dot,
    w: &WeightMatrix<'_>,
    x: &Acts<'_>,
    rows: Range<usize>,
    acc: &mut [f32; TILE_ROWS],
) -> Result<(), Error> {
    let (dtype, k) = (w.dtype(), w.cols());
    let (start, end) = (rows.start, rows.end);
    let mut r = start;
    if let Some(four) = kernel.four {
        while r + 4 <= end {
            let rows = [w.row(r)?, w.row(r + 1)?, w.row(r + 2)?, w.row(r + 3)?];
            let v = four(dtype, rows, x, k)?;
            acc[r - start..r - start + 4].copy_from_slice(&v);
            r += 4;
        }
    }
    for (a, r) in acc[r - start..].iter_mut().zip(r..end) {
        *a = (kernel.one)(dtype, w.row(r)?, x, k)?;
    }
    Ok(())
}

/// [`gemv_rows`] for the gated dual form: `epilogue(act(W_g·x) ⊙ (W_u·x))`,
/// both products from the same prepared activations.
pub fn gemv_glu_rows(
    kernels: RowKernels,
    w: &GluWeights<'_>,
    act: Activation,
    cols: &[Acts<'_>],
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    let all = ColumnBlock::all(cols);
    gemv_glu_rows_cols(kernels, w, act, all, rows, epilogue, store)
}

/// [`gemv_rows_cols`] for the gated dual form: `epilogue(act(W_g·x) ⊙
/// (W_u·x))` for rows `rows` and the columns of `cols`.
pub fn gemv_glu_rows_cols(
    kernels: RowKernels,
    w: &GluWeights<'_>,
    act: Activation,
    cols: ColumnBlock<'_, '_>,
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    let (part, c0) = (cols.acts(), cols.first());
    let ev = kernels.act;
    let ev_act = |a: Activation, v: f32| ev.apply(a, v);
    if cols.total() >= 2
        && let Some(g) = kernels.gemm
    {
        return gemm_rows(g, [w.gate(), w.up()], part, rows, |r, c, [g, u]| {
            let c = c0 + c;
            store(r, c, epilogue.apply_act(ev.glu(act, g, u), r, c, ev_act))
        });
    }
    let mut gate = [0.0f32; TILE_ROWS];
    let mut up = [0.0f32; TILE_ROWS];
    let mut gated = [0.0f32; TILE_ROWS];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + TILE_ROWS).min(rows.end);
        for (col, x) in (c0..).zip(part) {
            tile_accs(kernels.dot, w.gate(), x, start..end, &mut gate)?;
            tile_accs(kernels.dot, w.up(), x, start..end, &mut up)?;
            let n = end - start;
            ev.glu_slice(act, &gate[..n], &up[..n], &mut gated[..n]);
            for (v, r) in gated.iter().zip(start..end) {
                store(r, col, epilogue.apply_act(*v, r, col, ev_act));
            }
        }
        start = end;
    }
    Ok(())
}
