//! Prepared (repacked) weights: rows interleaved in groups of four so that
//! one 64-byte load feeds four rows of a block to the dot kernel.
//!
//! Layout of a [`PackedWeights`] of Q4_0 with `nb = K / 32` blocks per row:
//! for each group of four rows, `nb` 64-byte lines (line `b`: the 16 `qs`
//! bytes of block `b` of rows 0, 1, 2, 3 of the group, in that order), then
//! the group's scales, `nb` × 8 bytes (the four rows' f16 `d` of block `b`),
//! padded to whole lines. Rows past the last full group (`M mod 4` of them)
//! stay in GGML's layout after the groups. Packing changes no value: every
//! block can be put back together ([`PackedWeights::unpack_row`]).
//!
//! [`crate::backend::CpuBackend::gemv_packed`] multiplies them (Q8_0
//! activations only). The epilogue is applied to each accumulator exactly
//! as [`crate::gemv::gemv_rows`] applies it, so fused == unfused holds bit
//! for bit over packed weights too. The accumulators themselves equal
//! `gemv_rows`' only on [`crate::isa::Isa::Scalar`], where both are the
//! core's reference arithmetic. AVX-512 has a group kernel of its own and
//! the other ISAs use the scalar one, so on every SIMD ISA a packed GEMV
//! sums in another order than the plain one (the ISA's row kernels, or its
//! GEMM kernels for two or more columns) and may differ from it in the last
//! bits; both stay within the tests' tolerance of the reference.

use alloc::vec;
use alloc::vec::Vec;
use fused_core::blocks::BlockQ4_0;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};

use crate::kernels::packed::{GROUP_ROWS, LINE};

/// One 64-byte-aligned line of packed data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

/// Weights repacked for the group kernels (Q4_0 only, so far).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedWeights {
    dtype: DType,
    rows: usize,
    cols: usize,
    /// Lines per group: `nb` lines of codes, then the scales.
    group_lines: usize,
    groups: Vec<Line>,
    /// Rows past the last full group, in GGML's layout.
    tail: Vec<u8>,
}

/// Bytes of a Q4_0 block and of its `qs`.
const Q4_0_BYTES: usize = core::mem::size_of::<BlockQ4_0>();
const Q4_0_QS: usize = 16;

impl PackedWeights {
    /// Repacks `w`. Only Q4_0 has a packed layout; other formats are an
    /// [`Error::UnsupportedDType`].
    pub fn pack(w: &WeightMatrix<'_>) -> Result<PackedWeights, Error> {
        if w.dtype() != DType::Q4_0 {
            return Err(Error::UnsupportedDType {
                what: "packed weights (only Q4_0 has a packed layout)",
                dtype: w.dtype(),
            });
        }
        let (rows, cols) = (w.rows(), w.cols());
        let nb = cols / DType::Q4_0.block_len();
        let scale_lines = (nb * 2 * GROUP_ROWS).div_ceil(LINE);
        let group_lines = nb + scale_lines;
        let n_groups = rows / GROUP_ROWS;
        let mut groups = vec![Line([0; LINE]); n_groups * group_lines];
        for (g, lines) in groups.chunks_exact_mut(group_lines.max(1)).enumerate() {
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(lines);
            let (codes, scales) = bytes.split_at_mut(nb * LINE);
            for r in 0..GROUP_ROWS {
                let row = w.row(g * GROUP_ROWS + r)?;
                for (b, blk) in row.chunks_exact(Q4_0_BYTES).enumerate() {
                    let at = b * LINE + r * Q4_0_QS;
                    codes[at..at + Q4_0_QS].copy_from_slice(&blk[2..]);
                    let at = (b * GROUP_ROWS + r) * 2;
                    scales[at..at + 2].copy_from_slice(&blk[..2]);
                }
            }
        }
        let tail_start = n_groups * GROUP_ROWS;
        let rb = DType::Q4_0.row_bytes(cols)?;
        let tail = w.bytes()[tail_start * rb..].to_vec();
        Ok(PackedWeights {
            dtype: w.dtype(),
            rows,
            cols,
            group_lines,
            groups,
            tail,
        })
    }

    /// The weight format.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output rows `M`.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension `K`.
    pub fn cols(&self) -> usize {
        self.cols
    }

    lab_pub! {
        /// Full groups of [`GROUP_ROWS`] rows.
        fn n_groups(&self) -> usize {
            self.rows / GROUP_ROWS
        }
    }

    lab_pub! {
        /// Blocks per row.
        fn blocks_per_row(&self) -> usize {
            self.cols / self.dtype.block_len()
        }
    }

    lab_pub! {
        /// The lines of group `g`: codes then scales (see the module docs).
        fn group(&self, g: usize) -> Result<&[u8], Error> {
            fused_core::error::check_index("packed group", g, self.n_groups())?;
            let lines = &self.groups[g * self.group_lines..(g + 1) * self.group_lines];
            Ok(bytemuck::cast_slice(lines))
        }
    }

    lab_pub! {
        /// Row `r` of the tail (rows from `GROUP_ROWS · n_groups()` on), in
        /// GGML's layout.
        fn tail_row(&self, r: usize) -> Result<&[u8], Error> {
            let first = self.n_groups() * GROUP_ROWS;
            let tail = WeightMatrix::new(self.dtype, self.rows - first, self.cols, &self.tail)?;
            tail.row(r.checked_sub(first).ok_or(Error::LengthMismatch {
                what: "packed tail row (must not be in a group)",
                expected: first,
                actual: r,
            })?)
        }
    }

    /// Writes row `r` back in GGML's layout into `out` (one row's bytes).
    pub fn unpack_row(&self, r: usize, out: &mut [u8]) -> Result<(), Error> {
        let rb = self.dtype.row_bytes(self.cols)?;
        fused_core::error::check_len("unpacked row", rb, out.len())?;
        fused_core::error::check_index("weight row", r, self.rows)?;
        if r >= self.n_groups() * GROUP_ROWS {
            out.copy_from_slice(self.tail_row(r)?);
            return Ok(());
        }
        let nb = self.blocks_per_row();
        let (codes, scales) = self.group(r / GROUP_ROWS)?.split_at(nb * LINE);
        let i = r % GROUP_ROWS;
        for (b, blk) in out.chunks_exact_mut(Q4_0_BYTES).enumerate() {
            let at = (b * GROUP_ROWS + i) * 2;
            blk[..2].copy_from_slice(&scales[at..at + 2]);
            let at = b * LINE + i * Q4_0_QS;
            blk[2..].copy_from_slice(&codes[at..at + Q4_0_QS]);
        }
        Ok(())
    }
}

/// The GEMV drivers over packed weights that the backend's threads run
/// (the epilogue applied to each accumulator before `store`).
#[cfg(feature = "std")]
pub(crate) mod rows {
    use core::ops::Range;

    use fused_core::Error;
    use fused_core::element::Activation;
    use fused_core::epilogue::BoundEpilogue;

    use super::PackedWeights;
    use crate::acts::Acts;
    use crate::kernels::packed::{GROUP_ROWS, PackedDot};

    /// Computes groups `groups` of `epilogue(w · x)` (every row of each group)
    /// plus, when `tail` is set, the tail rows, for every column in `cols`,
    /// handing each result to `store(row, col, value)`.
    pub(crate) fn gemv_packed_rows(
        kernel: PackedDot,
        w: &PackedWeights,
        cols: &[Acts<'_>],
        groups: Range<usize>,
        tail: bool,
        epilogue: &BoundEpilogue<'_>,
        mut store: impl FnMut(usize, usize, f32),
    ) -> Result<(), Error> {
        each_acc(kernel, [w], cols, groups, tail, |r, c, [acc]| {
            store(
                r,
                c,
                epilogue.apply_act(acc, r, c, |a, v| kernel.act.apply(a, v)),
            );
        })
    }

    /// [`gemv_packed_rows`] for the gated dual form:
    /// `epilogue(act(W_g·x) ⊙ (W_u·x))`, both from the same activations.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_glu_packed_rows(
        kernel: PackedDot,
        gate: &PackedWeights,
        up: &PackedWeights,
        act: Activation,
        cols: &[Acts<'_>],
        groups: Range<usize>,
        tail: bool,
        epilogue: &BoundEpilogue<'_>,
        mut store: impl FnMut(usize, usize, f32),
    ) -> Result<(), Error> {
        each_acc(kernel, [gate, up], cols, groups, tail, |r, c, [g, u]| {
            let ev = kernel.act;
            store(
                r,
                c,
                epilogue.apply_act(ev.glu(act, g, u), r, c, |a, v| ev.apply(a, v)),
            );
        })
    }

    /// The accumulators of `N` matrices of one shape, row by row within each
    /// group (then the tail rows when `tail` is set), column by column:
    /// `f(row, col, [acc of each matrix])`.
    fn each_acc<const N: usize>(
        kernel: PackedDot,
        ws: [&PackedWeights; N],
        cols: &[Acts<'_>],
        groups: Range<usize>,
        tail: bool,
        mut f: impl FnMut(usize, usize, [f32; N]),
    ) -> Result<(), Error> {
        let Some(w0) = ws.first() else { return Ok(()) };
        let (nb, k) = (w0.blocks_per_row(), w0.cols());
        for g in groups {
            let mut bytes: [&[u8]; N] = [&[]; N];
            for (b, w) in bytes.iter_mut().zip(ws) {
                *b = w.group(g)?;
            }
            for (c, x) in cols.iter().enumerate() {
                let mut acc = [[0.0f32; GROUP_ROWS]; N];
                for (a, b) in acc.iter_mut().zip(bytes) {
                    *a = (kernel.group)(b, nb, x)?;
                }
                let by_row: [[f32; N]; GROUP_ROWS] =
                    core::array::from_fn(|i| core::array::from_fn(|j| acc[j][i]));
                for (i, a) in by_row.into_iter().enumerate() {
                    f(g * GROUP_ROWS + i, c, a);
                }
            }
        }
        if tail {
            for r in w0.n_groups() * GROUP_ROWS..w0.rows() {
                for (c, x) in cols.iter().enumerate() {
                    let mut acc = [0.0f32; N];
                    for (a, w) in acc.iter_mut().zip(ws) {
                        *a = (kernel.one)(w.dtype(), w.tail_row(r)?, x, k)?;
                    }
                    f(r, c, acc);
                }
            }
        }
        Ok(())
    }
}

/// What a [`GemvJob`](fused_core::job::GemvJob) over packed weights checks.
impl fused_core::job::GemvShape for PackedWeights {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }
}
