//! The tuned table and [`Tuning`], the value that overrides it.
//!
//! Every choice the backend makes that changes speed but never a result
//! (which GEMV kernel shape runs, whether independent GEMVs overlap or go
//! out as one launch, how far a GEMV asks L2 ahead) is a pure function of
//! the device, the call's shape and format, and the backend's [`Tuning`].
//! The defaults are the constants and rules below, measured on the H200
//! (`cuda-bench`; the figures and the runs behind them are in
//! BENCHMARKS.md); a [`Tuning`] overrides any of them by a [`Knob`]. Every
//! kernel shape computes the same sums in the same order, so no knob
//! changes a bit of any output.

#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use crate::error::CudaError;
use crate::knob::Knob;
use fused_core::DType;

// ------------------------------------------------------------ the table

/// GEMVs that overlap the GEMVs before them stream at most this many weight
/// bytes (64 MiB), one column: longer ones have no tail worth hiding, and
/// two GEMVs sharing the SMs slowed them down.
pub(crate) const OVERLAP_MAX_WEIGHT_BYTES: u64 = 64 << 20;

/// The most blocks an integer GEMV may launch and still join a group
/// launch: longer jobs were measured up to 8192 blocks only.
pub(crate) const GROUP_MAX_INT_JOB_BLOCKS: u32 = 8192;

/// The same for quantized weights on f32 activations: jobs of more blocks
/// ran slower grouped than alone (float weights join at any length).
pub(crate) const GROUP_MAX_DEQUANT_JOB_BLOCKS: u32 = 4096;

/// Bytes of the next GEMV's weights an integer GEMV of a device plan asks
/// L2 for as its blocks start: the best single choice among 2–16 MiB at
/// the start or the end.
pub(crate) const L2_AHEAD_BYTES: usize = 4 << 20;

/// Bytes of the next GEMV's weights each quantizer, norm quantizer and
/// attention kernel between two GEMVs of a device plan asks L2 for, after
/// those the GEMV before asked for.
pub(crate) const L2_BETWEEN_BYTES: usize = 8 << 20;

/// How many GEMVs ahead a device plan's look-ahead may ask for, once the
/// next GEMV's weights are all asked for (`chain_l2_ahead`).
pub(crate) const L2_REACH: usize = 1;

/// Rows from which the faster integer kernel shape changed between the
/// sweeps' two shapes (4096 and 32768 rows): one-column Q4_K takes 4 rows
/// a block, and 2 or 3 columns of Q8_0 two units in flight.
pub(crate) const MANY_ROWS: usize = 16384;

/// The one-column F16 kernel's units of 8 weights in flight a lane, by a
/// lane's units in one row (`K / 1024`): a lane requests its first step
/// before the dependency wait, so the step covers its whole row where it
/// can; rows of more units take the default kernel (4 units).
pub(crate) const F16_UNITS: [(usize, usize, usize); 2] = [(5, 8, 8), (9, 16, 16)];

/// Units (of 64 elements) a row has at most for one-column Q4_K to take,
/// by default, the kernel of 4 rows in 2 row groups (`r4s2`: each half of
/// the block on 2 rows, the plain kernel's sums): up to K = 14336, the
/// longest row the 8B-shaped token ran it on (at K 4096, 2 rows a block
/// leave half the threads without a unit).
pub(crate) const Q4_K_GROUPED_UNITS: usize = 224;

/// Whether one-column Q4_K of `rows` rows of `k` values takes the kernel
/// of 4 rows in 2 row groups by default ([`Q4_K_GROUPED_UNITS`]; rows from
/// [`MANY_ROWS`] keep 4 plain rows a block).
pub(crate) fn int_row_groups_default(dtype: DType, n_cols: usize, rows: usize, k: usize) -> bool {
    dtype == DType::Q4_K && n_cols == 1 && rows < MANY_ROWS && k / 64 <= Q4_K_GROUPED_UNITS
}

/// `(rows a block, units a lane)` of the integer GEMV kernels by default,
/// for `n_cols` columns of `rows` rows (gated where `glu`). One column: a
/// sweep of rows × units per format; several columns of the tiled formats
/// (Q8_0, Q4_0, Q4_K): kernels of one unit at 2 or 4 rows, so that each
/// activation load serves several rows, where they ran faster.
pub(crate) fn int_shape_default(
    dtype: DType,
    n_cols: usize,
    rows: usize,
    glu: bool,
) -> (usize, usize) {
    use DType::{Q4_0, Q4_K, Q5_K, Q6_K, Q8_0};
    match (n_cols, dtype) {
        (1, Q8_0) => (2, 1),
        (1, Q4_0) => (4, 1),
        (1, Q4_K) if rows >= MANY_ROWS => (4, 1),
        (1, Q4_K) => (2, 1),
        (1, Q5_K | Q6_K) => (4, 2),
        (1, _) => (2, 2),
        (2..=4, Q4_0) if !glu => (4, 1),
        (2..=3, Q8_0) if !glu && rows < MANY_ROWS => (2, 1),
        (2..=4, _) => (2, 2),
        (_, Q8_0 | Q4_0 | Q4_K) if glu => (2, 1),
        (5, Q8_0) | (_, Q4_K) => (2, 1),
        (_, Q8_0 | Q4_0) => (4, 1),
        _ => (1, 2),
    }
}

// ------------------------------------------------------------ overrides

/// How the backend chooses: the tuned table (`Tuning::default()`), or the
/// table with some of its choices overridden by [`Knob`]s
/// ([`CudaBackend::set_tuning`](crate::CudaBackend::set_tuning)).
///
/// ```
/// use fused_cuda::{Knob, Tuning};
/// let t = Tuning::default().with(Knob::Overlap(false))?.with(Knob::IntRows(2))?;
/// assert_ne!(t, Tuning::default());
/// assert!(Tuning::default().with(Knob::IntRows(3)).is_err());
/// # Ok::<(), fused_cuda::CudaError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub(crate) overlap: bool,
    pub(crate) group: bool,
    pub(crate) l2_ahead: usize,
    /// `(rows, units)` of the one-column F16 kernel, where overridden.
    pub(crate) f16_shape: Option<(usize, usize)>,
    pub(crate) int_rows: Option<usize>,
    pub(crate) int_units: Option<usize>,
    /// `(rows, units)` of the 2- to 4-column integer kernels.
    pub(crate) int_shape_2_4: Option<(usize, usize)>,
    pub(crate) int_rows_5_8: Option<usize>,
    pub(crate) pdl: bool,
    pub(crate) early_operands: bool,
    pub(crate) fixed_epilogues: bool,
    pub(crate) fold_quantizers: bool,
    pub(crate) fold_attention_quantizer: bool,
    pub(crate) l2_between: usize,
    pub(crate) l2_reach: usize,
    pub(crate) teams: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning::DEFAULT
    }
}

impl Tuning {
    /// The table's choices.
    pub(crate) const DEFAULT: Tuning = Tuning {
        overlap: true,
        group: true,
        l2_ahead: L2_AHEAD_BYTES,
        f16_shape: None,
        int_rows: None,
        int_units: None,
        int_shape_2_4: None,
        int_rows_5_8: None,
        pdl: true,
        early_operands: true,
        fixed_epilogues: true,
        fold_quantizers: false,
        fold_attention_quantizer: true,
        l2_between: L2_BETWEEN_BYTES,
        l2_reach: L2_REACH,
        teams: false,
    };

    /// The same tuning with `knob` set; a value no kernel has is
    /// [`CudaError::Tuning`].
    pub fn with(self, knob: Knob) -> Result<Tuning, CudaError> {
        let bad = Err(CudaError::Tuning(knob));
        let mut t = self;
        match knob {
            Knob::Overlap(on) => t.overlap = on,
            Knob::Group(on) => t.group = on,
            Knob::L2AheadBytes(bytes) if u32::try_from(bytes).is_ok() => t.l2_ahead = bytes,
            Knob::F16Shape { rows, units } => match (rows, units) {
                (1, 4 | 8 | 16) | (2, 4) => t.f16_shape = Some((rows, units)),
                _ => return bad,
            },
            Knob::IntRows(r @ (1 | 2 | 4)) => t.int_rows = Some(r),
            Knob::IntUnits(u @ (1 | 2)) => t.int_units = Some(u),
            Knob::IntShape2To4 { rows, units } => match (rows, units) {
                (2, 2) | (2, 1) | (4, 1) => t.int_shape_2_4 = Some((rows, units)),
                _ => return bad,
            },
            Knob::IntRows5To8(r @ (1 | 2 | 4)) => t.int_rows_5_8 = Some(r),
            #[cfg(feature = "lab")]
            Knob::Pdl(on) => t.pdl = on,
            #[cfg(feature = "lab")]
            Knob::EarlyOperands(on) => t.early_operands = on,
            #[cfg(feature = "lab")]
            Knob::FixedEpilogues(on) => t.fixed_epilogues = on,
            #[cfg(feature = "lab")]
            Knob::FoldQuantizers(on) => t.fold_quantizers = on,
            #[cfg(feature = "lab")]
            Knob::FoldAttentionQuantizer(on) => t.fold_attention_quantizer = on,
            #[cfg(feature = "lab")]
            Knob::L2BetweenBytes(b) => t.l2_between = b,
            #[cfg(feature = "lab")]
            Knob::L2Reach(r) => t.l2_reach = r,
            #[cfg(feature = "lab")]
            Knob::Teams(on) => t.teams = on,
            _ => return bad,
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_without_a_kernel_are_refused_with_the_knob() {
        let t = Tuning::default();
        for knob in [
            Knob::IntRows(3),
            Knob::IntRows(0),
            Knob::IntUnits(4),
            Knob::IntRows5To8(8),
            Knob::F16Shape { rows: 2, units: 8 },
            Knob::F16Shape { rows: 1, units: 2 },
            Knob::IntShape2To4 { rows: 4, units: 2 },
            Knob::IntShape2To4 { rows: 1, units: 1 },
        ] {
            assert_eq!(t.with(knob), Err(CudaError::Tuning(knob)), "{knob:?}");
        }
        #[cfg(target_pointer_width = "64")]
        assert!(t.with(Knob::L2AheadBytes(1 << 32)).is_err());
        let set = t
            .with(Knob::IntRows(1))
            .and_then(|t| t.with(Knob::F16Shape { rows: 2, units: 4 }))
            .unwrap();
        assert_eq!((set.int_rows, set.f16_shape), (Some(1), Some((2, 4))));
        assert_eq!(set.with(Knob::Group(false)).map(|t| t.group), Ok(false));
    }
}
