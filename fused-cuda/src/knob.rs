//! [`Knob`]: one override of the tuned table (`src/tuning.rs`), with its
//! value; plain data, below the error type that reports a value no kernel
//! has.

/// One override of the tuned table, with its value ([`Tuning::with`](crate::Tuning::with)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Knob {
    /// Independent GEMVs of one column start without waiting for the GEMVs
    /// before them and overlap their tail (jobs of
    /// [`CudaBackend::gemv_batch`](crate::CudaBackend::gemv_batch), GEMV
    /// steps of a [`DevicePlan`](crate::DevicePlan); `src/schedule.rs`).
    /// Default on; only where programmatic dependent launch runs (sm_90).
    Overlap(bool),
    /// Consecutive independent one-column GEMVs of one kernel go out as one
    /// launch, up to 8 (`src/group.rs`; for a plan, when it is built).
    /// Default on.
    Group(bool),
    /// Bytes of the next GEMV's weights that each integer GEMV of a
    /// [`DevicePlan`](crate::DevicePlan) asks L2 for (0: none). Default 4 MiB.
    L2AheadBytes(usize),
    /// The one-column F16 kernel: `rows` a block and `units` of 8 weights
    /// in flight a lane: (1, 4), (1, 8), (1, 16) or (2, 4).
    F16Shape {
        /// Rows a block.
        rows: usize,
        /// Units a lane.
        units: usize,
    },
    /// Rows a block of the one-column integer kernels: 1, 2 or 4, the
    /// plain kernel of those rows (by default one-column Q4_K rows of at
    /// most 224 units take 4 rows a block in 2 row groups of 2 rows).
    IntRows(usize),
    /// Units in flight a lane of the one-column integer kernels: 1 or 2.
    IntUnits(usize),
    /// The 2- to 4-column integer kernels of Q8_0, Q4_0 and Q4_K:
    /// `(rows, units)` (2, 2), (2, 1) or (4, 1).
    IntShape2To4 {
        /// Rows a block.
        rows: usize,
        /// Units a lane.
        units: usize,
    },
    /// Rows a block of the 5- to 8-column integer kernels of Q8_0 and Q4_0
    /// (1, 2 or 4) and Q4_K (1 or 2; 4 leaves its default).
    IntRows5To8(usize),
    /// Programmatic dependent launch (`src/pdl.rs`). Default on.
    #[cfg(feature = "lab")]
    Pdl(bool),
    /// GEMV blocks load their first epilogue operands when they start
    /// rather than after their sums. Default on.
    #[cfg(feature = "lab")]
    EarlyOperands(bool),
    /// A chain compiled into a kernel of its own (`src/fixed_epi.rs`) runs
    /// that kernel. Default on.
    #[cfg(feature = "lab")]
    FixedEpilogues(bool),
    /// A plan's one-column integer GEMV writes the next GEMV's quantized
    /// input itself instead of a quantizer launch. Default off (slower on
    /// the H200).
    #[cfg(feature = "lab")]
    FoldQuantizers(bool),
    /// A plan's attention writes the next GEMV's quantized input (Q8_0,
    /// Q8_1) as it merges its splits instead of a quantizer launch.
    /// Default on.
    #[cfg(feature = "lab")]
    FoldAttentionQuantizer(bool),
    /// Bytes of the next GEMV's weights that each quantizer, norm quantizer
    /// and attention kernel between two GEMVs of a
    /// [`DevicePlan`](crate::DevicePlan) asks L2 for (0: none). Default
    /// 8 MiB.
    #[cfg(feature = "lab")]
    L2BetweenBytes(usize),
    /// How many GEMVs ahead a [`DevicePlan`](crate::DevicePlan)'s
    /// look-ahead may ask for once the next GEMV's weights are all asked
    /// for (1: the next only; 0: none). Default 1.
    #[cfg(feature = "lab")]
    L2Reach(usize),
    /// The one-column Q4_0 integer kernel of 3 teams a block
    /// (`src/teams.rs`). Default off (not yet run on a GPU).
    #[cfg(feature = "lab")]
    Teams(bool),
}
