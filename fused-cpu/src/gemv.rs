//! Single-threaded GEMV/GEMM over a range of rows, the epilogue applied to
//! each accumulator tile before the store. `no_std`, no allocation: the
//! entry points of a bare-metal caller, and what [`crate::backend`] runs on
//! each thread.
//!
//! [`RowKernels::new`] picks the kernels once per (ISA, weight format,
//! activation mode). One column goes through the row-dot kernels; two or
//! more go through the GEMM driver (register-blocked micro-kernels over
//! weight tiles decoded once) where the ISA has one for the format and
//! mode, and through the row-dot kernels once per (row, column) otherwise.
//! Activations come from [`crate::acts`]; the epilogue is a core
//! [`BoundEpilogue`], applied with the activation functions evaluated as
//! [`crate::elementwise`] evaluates them for the same ISA, so fused ==
//! unfused bit for bit.

use core::ops::Range;

use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::BoundEpilogue;
use fused_core::error::out_of_range;
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};

use crate::activation::ActEval;
use crate::acts::Acts;
use crate::gemm::gemm_rows;
use crate::isa::Isa;
#[cfg(feature = "lab")]
use crate::kernels::RowDot;
use crate::kernels::gemm::{GemmKernel, gemm_kernel};
use crate::kernels::{Dot, dot};

/// The kernels of one GEMV/GEMM call: the row-dot kernels, the GEMM
/// kernel used for two or more columns where there is one, and how the
/// epilogue evaluates its activation functions.
#[derive(Clone, Copy, Debug)]
pub struct RowKernels {
    /// The row-dot kernels (one column; several without a GEMM kernel).
    pub(crate) dot: Dot,
    /// The GEMM kernel for two or more columns, if any.
    pub(crate) gemm: Option<GemmKernel>,
    /// How the epilogue's activations (and a GLU's) are evaluated: the
    /// same as the ISA's unfused element-wise kernels.
    pub(crate) act: ActEval,
}

impl RowKernels {
    /// The best kernels of `isa` for weights of `dtype` in `mode`. An ISA
    /// this machine does not run ([`Isa::is_supported`]) gets the scalar
    /// kernels, which are the core's reference arithmetic.
    pub fn new(isa: Isa, dtype: DType, mode: ActQuant) -> RowKernels {
        RowKernels {
            dot: dot(isa, dtype, mode),
            gemm: gemm_kernel(isa, dtype, mode),
            act: ActEval::for_isa(isa),
        }
    }

    lab_pub! {
        /// The GEMM kernel two or more columns go through, if any.
        fn gemm(&self) -> Option<GemmKernel> {
            self.gemm
        }
    }
}

#[cfg(feature = "lab")]
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

#[cfg(feature = "lab")]
impl From<RowDot> for RowKernels {
    /// One row-dot kernel only: every column goes through it.
    fn from(one: RowDot) -> RowKernels {
        Dot::from(one).into()
    }
}

/// Rows per accumulator tile.
pub(crate) const TILE_ROWS: usize = 16;

/// Tiles of one matrix a gated GEMV reads before switching to the other
/// (one on 32-bit targets, whose stacks are small: three f32 arrays of
/// `GLU_TILES · TILE_ROWS` live on the stack).
#[cfg(target_pointer_width = "64")]
const GLU_TILES: usize = 16;
#[cfg(not(target_pointer_width = "64"))]
const GLU_TILES: usize = 1;

/// Some of the activation columns of a call: `acts` are columns
/// `first..first + acts.len()` of the call's `total`. Which driver computes
/// them depends on `total` (see [`gemv_rows_cols`]), so a call split into
/// blocks gives the values of the whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColumnBlock<'c, 'a> {
    acts: &'c [Acts<'a>],
    first: usize,
    total: usize,
}

impl<'c, 'a> ColumnBlock<'c, 'a> {
    /// Every column of a call.
    pub(crate) fn all(acts: &'c [Acts<'a>]) -> ColumnBlock<'c, 'a> {
        ColumnBlock {
            acts,
            first: 0,
            total: acts.len(),
        }
    }

    /// Columns `first..first + acts.len()` of a call of `total` columns, or
    /// a typed error when they do not lie inside it.
    #[cfg(feature = "std")]
    pub(crate) fn new(
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

    /// The block's columns.
    pub(crate) fn acts(&self) -> &'c [Acts<'a>] {
        self.acts
    }

    /// The call's index of the block's first column.
    pub(crate) fn first(&self) -> usize {
        self.first
    }

    /// The call's column count.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// Computes rows `rows` of `epilogue(w · x)` for every column in `cols` and
/// hands each result to `store(row, col, value)`.
///
/// Weight rows are walked in tiles of 16; inside a tile every column is
/// processed, so the tile's weights are read from memory once per call.
/// With two or more columns and a GEMM kernel, the GEMM driver computes the
/// accumulators and the epilogue is applied to each one before `store`.
/// Every value is the same whatever `rows` it was computed in, so a call
/// may be split across threads (or across time) by rows. Bad lengths,
/// a row range outside `w` or columns not prepared in the kernels' mode
/// are typed errors.
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
pub(crate) fn gemv_rows_cols(
    kernels: RowKernels,
    w: &WeightMatrix<'_>,
    cols: ColumnBlock<'_, '_>,
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    check_epilogue(epilogue, w.rows(), cols.total())?;
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
            // The epilogue over the finished tile, a stage at a time (the
            // same bits as element by element, vectorised).
            let span = &mut acc[..end - start];
            epilogue.apply_span(span, start, col, |a, v| ev.apply_in_place(a, v));
            for (a, r) in span.iter().zip(start..end) {
                store(r, col, *a);
            }
        }
        start = end;
    }
    Ok(())
}

/// Errors unless `epilogue` was bound for an output of `rows × cols`.
fn check_epilogue(epilogue: &BoundEpilogue<'_>, rows: usize, cols: usize) -> Result<(), Error> {
    if (epilogue.rows(), epilogue.cols()) != (rows, cols) {
        return Err(Error::ShapeMismatch {
            what: "epilogue bound for another output shape",
            expected: [rows, cols, 1, 1],
            actual: [epilogue.rows(), epilogue.cols(), 1, 1],
        });
    }
    Ok(())
}

/// The accumulators of weight rows `rows` (at most [`TILE_ROWS`]) against
/// `x` into `acc[..rows.len()]`: four rows at a time where the kernels have
/// a four-row kernel (bit-identical to the one-row kernel), then one by one.
/// The row range is checked against `w` once for the tile (a row past the
/// last is an error, as [`WeightMatrix::row`] has it), and the rows are
/// sliced from the tile's bytes.
fn tile_accs(
    kernel: Dot,
    w: &WeightMatrix<'_>,
    x: &Acts<'_>,
    rows: Range<usize>,
    acc: &mut [f32; TILE_ROWS],
) -> Result<(), Error> {
    let (dtype, k) = (w.dtype(), w.cols());
    let (start, end) = (rows.start, rows.end);
    if start >= end {
        return Ok(());
    }
    if end > w.rows() {
        // The first row that `w.row` would refuse.
        return Err(out_of_range("weight row", start.max(w.rows()), w.rows()));
    }
    // `w` holds `w.rows() ≥ end > 0` rows of equal length.
    let rb = w.bytes().len() / w.rows();
    let tile = &w.bytes()[start * rb..end * rb];
    let row = |i: usize| &tile[i * rb..(i + 1) * rb];
    let n = end - start;
    if let Some(whole) = kernel.tile {
        return whole(dtype, tile, x, k, &mut acc[..n]);
    }
    let mut i = 0;
    if let Some(four) = kernel.four {
        while i + 4 <= n {
            let v = four(dtype, [row(i), row(i + 1), row(i + 2), row(i + 3)], x, k)?;
            acc[i..i + 4].copy_from_slice(&v);
            i += 4;
        }
    }
    for (a, i) in acc[i..n].iter_mut().zip(i..) {
        *a = (kernel.one)(dtype, row(i), x, k)?;
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
pub(crate) fn gemv_glu_rows_cols(
    kernels: RowKernels,
    w: &GluWeights<'_>,
    act: Activation,
    cols: ColumnBlock<'_, '_>,
    rows: Range<usize>,
    epilogue: &BoundEpilogue<'_>,
    mut store: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    check_epilogue(epilogue, w.gate().rows(), cols.total())?;
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
    // Each matrix is read in runs of GLU_TILES tiles before the other:
    // switching between the two streams every tile cost the gated GEMV
    // against two plain ones.
    const SPAN: usize = GLU_TILES * TILE_ROWS;
    let mut gate = [0.0f32; SPAN];
    let mut up = [0.0f32; SPAN];
    let mut gated = [0.0f32; SPAN];
    let mut start = rows.start;
    while start < rows.end {
        let end = (start + SPAN).min(rows.end);
        let n = end - start;
        for (col, x) in (c0..).zip(part) {
            for (w, acc) in [(w.gate(), &mut gate), (w.up(), &mut up)] {
                for (i, t) in (start..end).step_by(TILE_ROWS).enumerate() {
                    let tile: &mut [f32; TILE_ROWS] = (&mut acc
                        [i * TILE_ROWS..(i + 1) * TILE_ROWS])
                        .try_into()
                        .expect("a whole tile");
                    tile_accs(kernels.dot, w, x, t..(t + TILE_ROWS).min(end), tile)?;
                }
            }
            ev.glu_slice(act, &gate[..n], &up[..n], &mut gated[..n]);
            let span = &mut gated[..n];
            epilogue.apply_span(span, start, col, |a, v| ev.apply_in_place(a, v));
            for (v, r) in span.iter().zip(start..end) {
                store(r, col, *v);
            }
        }
        start = end;
    }
    Ok(())
}
