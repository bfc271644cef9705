//! The kernels' ABI: `#[repr(C)]` mirrors of the parameter structs in
//! `kernels/*.cu(h)`, field for field, passed by value to the kernels, and
//! the block sizes and codes the kernels are compiled with.

use crate::error::{CudaError, u32_of};
use crate::schedule::Deps;
use cust::memory::DeviceCopy;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES, Stage};

/// Threads per block of the GEMV kernels (`WARPS` = 4 warps in `kernels/gemv.cu`).
pub(crate) const GEMV_BLOCK: u32 = 128;
/// Threads per block of the element-wise kernels.
pub(crate) const EW_BLOCK: u32 = 256;
/// Threads per block of the activation quantizers (one warp per block of
/// activations).
pub(crate) const QUANT_BLOCK: u32 = 256;

/// A kernel argument as the driver takes it.
pub(crate) fn arg<T>(v: &T) -> *mut std::ffi::c_void {
    v as *const T as *mut std::ffi::c_void
}

/// The kernels' activation code (`ACT_*` in `kernels/common.cuh`).
pub(crate) const fn act_code(act: Activation) -> u32 {
    match act {
        Activation::Identity => 0,
        Activation::Silu => 1,
        Activation::Sigmoid => 2,
        Activation::GeluErf => 3,
        Activation::GeluTanh => 4,
        Activation::Relu => 5,
    }
}

/// Stage kinds (`STAGE_*` in `kernels/common.cuh`).
pub(crate) const STAGE_ACT: u32 = 0;
pub(crate) const STAGE_ADD: u32 = 1;
pub(crate) const STAGE_MUL: u32 = 2;
pub(crate) const STAGE_ROW_BIAS: u32 = 3;

/// `EpiParams` in `kernels/common.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EpiParams {
    n_stages: u32,
    kind: [u32; MAX_STAGES],
    act: [u32; MAX_STAGES],
    /// GEMV kernels: 1 to load the first operands when a block starts.
    early: u32,
    operand: [u64; MAX_STAGES],
}

impl EpiParams {
    /// The chain, with stage `s` reading the device address `operand(slot)`.
    pub(crate) fn new(epilogue: &Epilogue, operand: impl Fn(usize) -> u64) -> EpiParams {
        let mut p = EpiParams::default();
        for (i, st) in epilogue.stages().iter().enumerate() {
            let (kind, act) = match st {
                Stage::Act(a) => (STAGE_ACT, act_code(*a)),
                Stage::Add { .. } => (STAGE_ADD, 0),
                Stage::Mul { .. } => (STAGE_MUL, 0),
                Stage::AddRowBias { .. } => (STAGE_ROW_BIAS, 0),
            };
            p.kind[i] = kind;
            p.act[i] = act;
            p.operand[i] = st.slot().map_or(0, &operand);
        }
        p.n_stages = epilogue.len() as u32;
        p
    }

    /// Whether a GEMV block loads the first operands when it starts
    /// (the tuning's early operands) rather than after its sums.
    pub(crate) fn set_early(&mut self, early: bool) {
        self.early = u32::from(early);
    }

    /// Whether the operands are loaded when a block starts.
    pub(crate) fn early(&self) -> bool {
        self.early != 0
    }

    /// The stages as the kernels' (kind, activation code) pairs, in order.
    pub(crate) fn stage_codes(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let n = (self.n_stages as usize).min(MAX_STAGES);
        self.kind[..n]
            .iter()
            .copied()
            .zip(self.act[..n].iter().copied())
    }
}

/// `L2Ahead` in `kernels/common.cuh`: the first `bytes` bytes at `addr`
/// (the next GEMV's weights) that each block of a GEMV asks L2 for its
/// share of, at its start or its end (`at`: [`L2Ahead::END`] /
/// [`L2Ahead::START`]); `bytes` 0: none.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct L2Ahead {
    pub(crate) addr: u64,
    pub(crate) bytes: u32,
    pub(crate) at: u32,
}

impl L2Ahead {
    /// `L2_AHEAD_END`: once the block's own weights have all arrived.
    pub(crate) const END: u32 = 0;
    /// `L2_AHEAD_START`: when the block starts.
    pub(crate) const START: u32 = 1;

    /// The first `bytes` at `addr`, rounded down to a multiple of 16 (the
    /// bulk prefetch's granule), asked for at `at` ([`L2Ahead::START`] or
    /// [`L2Ahead::END`]).
    pub(crate) fn new(addr: u64, bytes: usize, at: u32) -> Result<L2Ahead, CudaError> {
        Ok(L2Ahead {
            addr,
            bytes: u32_of("L2 look-ahead bytes", bytes / 16 * 16)?,
            at,
        })
    }
}

/// `ArgmaxTail` in `kernels/gemv.cu`: a one-column GEMV's argmax, written
/// as it stores its outputs, unless `out` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ArgmaxTail {
    /// Scratch: the largest (value, index) key so far, 0 between launches.
    pub(crate) best: u64,
    /// Scratch: the blocks done, 0 between launches.
    pub(crate) done: u64,
    /// The index, as an f32.
    pub(crate) out: u64,
}

/// Blocks that merge their keys into one group key (`ARGMAX_GROUP`).
const ARGMAX_GROUP: usize = 64;

impl ArgmaxTail {
    /// The keys and counts of a GEMV of `rows` rows at `at` in a zeroed
    /// scratch buffer of [`ArgmaxTail::scratch_bytes`]`(rows)` bytes, its
    /// index written to `out`: a key and a count for each group of blocks
    /// (for blocks of one row, the most there can be) and the launch's.
    pub(crate) fn new(rows: usize, at: u64, out: u64) -> ArgmaxTail {
        let slots = rows.div_ceil(ARGMAX_GROUP) + 1;
        ArgmaxTail {
            best: at,
            done: at + 8 * slots as u64,
            out,
        }
    }

    /// Bytes of the scratch of [`ArgmaxTail::new`].
    pub(crate) fn scratch_bytes(rows: usize) -> usize {
        (rows.div_ceil(ARGMAX_GROUP) + 1) * (8 + 4)
    }
}

/// `GemvParams` in `kernels/gemv.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GemvParams {
    pub(crate) w: u64,
    pub(crate) w_up: u64,
    pub(crate) x: u64,
    pub(crate) y: u64,
    pub(crate) rows: u32,
    pub(crate) k: u32,
    pub(crate) row_bytes: u32,
    pub(crate) glu_act: u32,
    pub(crate) deps: Deps,
    pub(crate) pad: u32,
    pub(crate) epi: EpiParams,
    pub(crate) ahead: L2Ahead,
    /// One column: the index of the largest output too.
    pub(crate) argmax: ArgmaxTail,
}

/// `QuantParams` in `kernels/gemv.cu`: one activation quantizer launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QuantParams {
    pub(crate) x: u64,
    pub(crate) codes: u64,
    pub(crate) scales: u64,
    pub(crate) sums: u64,
    pub(crate) k: u32,
    pub(crate) n_blocks: u32,
    /// Q8_0 and Q8_1: 1 to write the codes interleaved
    /// (`QactsLayout::interleaved`); the Q8_K quantizer always does.
    pub(crate) interleave: u32,
    pub(crate) pad: u32,
}

/// `NormParams` in `kernels/gemv.cu`: one RMS-norm launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NormParams {
    pub(crate) x: u64,
    /// The weight, or 0 for none.
    pub(crate) g: u64,
    pub(crate) y: u64,
    pub(crate) k: u32,
    pub(crate) n_cols: u32,
    pub(crate) eps: f32,
    pub(crate) pad: u32,
}

/// `NormQuantParams` in `kernels/gemv.cu`: a GEMV's norm prologue fused
/// into its activation quantizer (`q.x` is the norm's input).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NormQuantParams {
    pub(crate) q: QuantParams,
    pub(crate) g: u64,
    pub(crate) eps: f32,
    pub(crate) n_cols: u32,
}

/// `QuantOut` in `kernels/gemv.cu`: where a one-column integer GEMV also
/// writes its output quantized (`mode` 0: it does not).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QuantOut {
    /// The quantizer's arrays (`x` unused, `k` the GEMV's rows).
    pub(crate) q: QuantParams,
    /// Per activation block, the GEMV blocks done (0 between launches).
    pub(crate) counters: u64,
    /// `QOUT_*`: 0 none, 1 Q8_0, 2 Q8_1, 3 Q8_K.
    pub(crate) mode: u32,
    pub(crate) pad: u32,
}

/// `GemvQParams` in `kernels/gemv.cu`: one integer GEMV launch.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GemvQParams {
    pub(crate) w: u64,
    pub(crate) w_up: u64,
    pub(crate) codes: u64,
    pub(crate) scales: u64,
    pub(crate) sums: u64,
    pub(crate) y: u64,
    pub(crate) rows: u32,
    pub(crate) k: u32,
    pub(crate) glu_act: u32,
    pub(crate) deps: Deps,
    pub(crate) epi: EpiParams,
    /// One column: the output quantized too (`QuantOut::mode` not 0).
    pub(crate) qout: QuantOut,
    /// The next GEMV's first weights, asked of L2.
    pub(crate) ahead: L2Ahead,
    /// One column, an even row count a block: the key/value append of rows
    /// of `y` (`kv_tail`), unless `kv.k` is 0.
    pub(crate) kv: KvAppendParams,
    /// One column: the index of the largest output too.
    pub(crate) argmax: ArgmaxTail,
}

/// Jobs of one group launch at most (`GROUP_MAX` in `kernels/gemv.cu`).
pub(crate) const GROUP_MAX: usize = 8;

/// `Group<P>` in `kernels/gemv.cu`: up to [`GROUP_MAX`] GEMVs of one kernel
/// shape in one grid, job `j` owning the blocks from `first_block[j]` on.
/// Slots from `n` on are never read (they repeat the last job).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupParams<P> {
    pub(crate) n: u32,
    pub(crate) first_block: [u32; GROUP_MAX],
    pub(crate) pad: u32,
    pub(crate) job: [P; GROUP_MAX],
}

/// The jobs of one group launch, by kernel family.
#[derive(Clone, Debug)]
pub(crate) enum GroupJobs {
    /// Float activations (`fused_gemv_group_*`).
    Float(Box<GroupParams<GemvParams>>),
    /// Quantized activations (`fused_gemvq_group_*`).
    Int(Box<GroupParams<GemvQParams>>),
}

impl GroupJobs {
    /// Calls `f` with every job slot's `deps` and epilogue.
    fn each_job(&mut self, mut f: impl FnMut(&mut Deps, &mut EpiParams)) {
        match self {
            GroupJobs::Float(g) => g.job.iter_mut().for_each(|j| f(&mut j.deps, &mut j.epi)),
            GroupJobs::Int(g) => g.job.iter_mut().for_each(|j| f(&mut j.deps, &mut j.epi)),
        }
    }

    /// Sets every job's `deps` (a group orders itself as one launch).
    pub(crate) fn set_deps(&mut self, deps: Deps) {
        self.each_job(|d, _| *d = deps);
    }

    /// The jobs' `deps` (all equal).
    pub(crate) fn deps(&self) -> Deps {
        match self {
            GroupJobs::Float(g) => g.job[0].deps,
            GroupJobs::Int(g) => g.job[0].deps,
        }
    }

    /// Sets whether every job's blocks load their epilogue operands early.
    pub(crate) fn set_early(&mut self, early: bool) {
        self.each_job(|_, e| e.set_early(early));
    }
}

/// `FwhtParams` in `kernels/fwht.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct FwhtParams {
    pub(crate) x: u64,
    pub(crate) signs: u64,
    pub(crate) out: u64,
    pub(crate) rows: u32,
    pub(crate) n: u32,
    pub(crate) sign_blocks: u32,
    pub(crate) scale: f32,
}

/// Threads per block of the decode kernels (`kernels/decode.cu`) but the
/// attention's split kernels.
pub(crate) const DECODE_BLOCK: u32 = 256;
/// Warps per block of the attention's split kernels (`ATTN_WARPS`).
pub(crate) const ATTN_WARPS: u32 = 4;
/// The fewest cache rows an attention split takes (`ATTN_MIN_CHUNK`).
pub(crate) const ATTN_MIN_CHUNK: usize = 32;
/// The attention's combine kernel.
pub(crate) const ATTN_COMBINE: &str = "fused_attn_combine";

/// The combine's `qmode` for a Q8_K output (`ATTN_QMODE_Q8_K`): each of
/// its blocks then takes the heads of one Q8_K block.
pub(crate) const ATTN_QMODE_Q8_K: u32 = 3;
/// The most splits the attention's combine kernel merges
/// (`ATTN_MAX_SPLITS`).
pub(crate) const ATTN_MAX_SPLITS: usize = 256;

/// `RopeParams` in `kernels/decode.cu`: one RoPE launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RopeParams {
    pub(crate) x: u64,
    pub(crate) table: u64,
    pub(crate) pos: u64,
    pub(crate) out: u64,
    pub(crate) head_dim: u32,
    /// Pairs of all heads.
    pub(crate) pairs: u32,
    /// The table's rows.
    pub(crate) rows: u32,
    /// 0: adjacent pairs; 1: halves.
    pub(crate) mode: u32,
}

/// `SetRowParams` in `kernels/decode.cu`: one row write.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SetRowParams {
    /// The rows, or 0 when `out` is them (in place).
    pub(crate) dst: u64,
    pub(crate) row: u64,
    pub(crate) pos: u64,
    pub(crate) out: u64,
    pub(crate) n: u32,
    pub(crate) rows: u32,
    /// `n · rows`.
    pub(crate) total: u32,
    pub(crate) pad: u32,
}

/// `KvAppendParams` in `kernels/decode.cu`: one key/value append (the
/// RoPE of k into its cache row, with q's RoPE and the v row write where
/// they joined).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KvAppendParams {
    /// q, or 0 without the q part.
    pub(crate) q: u64,
    /// q's RoPE destination (may be `q`).
    pub(crate) q_out: u64,
    pub(crate) k: u64,
    pub(crate) k_cache: u64,
    /// The v row, or 0 without the v part.
    pub(crate) v: u64,
    pub(crate) v_cache: u64,
    pub(crate) table: u64,
    pub(crate) pos: u64,
    pub(crate) head_dim: u32,
    /// Pairs of q's heads (0 without the q part).
    pub(crate) q_pairs: u32,
    /// Pairs of k's heads (half a key cache row).
    pub(crate) k_pairs: u32,
    /// Values of the v row (0 without the v part).
    pub(crate) v_n: u32,
    pub(crate) table_rows: u32,
    pub(crate) k_rows: u32,
    pub(crate) v_rows: u32,
    /// As [`RopeParams::mode`].
    pub(crate) mode: u32,
}

/// `AttnParams` in `kernels/decode.cu`: both kernels of one attention.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AttnParams {
    pub(crate) q: u64,
    pub(crate) k: u64,
    pub(crate) v: u64,
    pub(crate) pos: u64,
    /// Scratch for the splits' partial results.
    pub(crate) part: u64,
    pub(crate) out: u64,
    pub(crate) head_dim: u32,
    pub(crate) n_head: u32,
    pub(crate) n_kv: u32,
    pub(crate) group: u32,
    pub(crate) rows: u32,
    pub(crate) splits: u32,
    pub(crate) slices: u32,
    pub(crate) scale: f32,
    /// 0, or the output also written quantized: 1 Q8_0, 2 Q8_1,
    /// [`ATTN_QMODE_Q8_K`] Q8_K, into `qout`'s arrays
    /// (`Launch::set_attention_quant_out`).
    pub(crate) qmode: u32,
    pub(crate) qpad: u32,
    pub(crate) qout: QuantParams,
}

/// `ArgmaxParams` in `kernels/decode.cu`: one argmax launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ArgmaxParams {
    pub(crate) x: u64,
    pub(crate) out: u64,
    /// Scratch: a (value, index) pair per block.
    pub(crate) part: u64,
    /// Scratch: a counter per column, zero between launches.
    pub(crate) counters: u64,
    pub(crate) n: u32,
    pub(crate) cols: u32,
    /// Blocks a column.
    pub(crate) blocks: u32,
    /// Values a block.
    pub(crate) chunk: u32,
}

// SAFETY: plain `#[repr(C)]` data (integers, f32 and device addresses as
// u64) with no host pointers or references: a bitwise copy to the device is
// exactly what the kernels read.
unsafe impl DeviceCopy for EpiParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for GemvParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for FwhtParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for QuantParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for GemvQParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for NormParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for NormQuantParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for QuantOut {}
// SAFETY: as above.
unsafe impl DeviceCopy for L2Ahead {}
// SAFETY: as above.
unsafe impl DeviceCopy for RopeParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for SetRowParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for KvAppendParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for AttnParams {}
// SAFETY: as above.
unsafe impl DeviceCopy for ArgmaxParams {}
// SAFETY: as above: a `#[repr(C)]` header of u32 and an array of one of
// the parameter blocks above.
unsafe impl DeviceCopy for GroupParams<GemvParams> {}
// SAFETY: as above.
unsafe impl DeviceCopy for GroupParams<GemvQParams> {}

// The layouts the kernels assume (C rules on a 64-bit target).
const _: () = {
    assert!(core::mem::size_of::<EpiParams>() == 4 + 32 + 32 + 4 + 64);
    assert!(core::mem::offset_of!(EpiParams, early) == 68);
    assert!(core::mem::offset_of!(EpiParams, operand) == 72);
    assert!(core::mem::offset_of!(GemvParams, deps) == 48);
    assert!(core::mem::offset_of!(GemvParams, epi) == 56);
    assert!(core::mem::offset_of!(GemvQParams, deps) == 60);
    assert!(core::mem::size_of::<FwhtParams>() == 40);
    assert!(core::mem::size_of::<QuantParams>() == 48);
    assert!(core::mem::size_of::<NormParams>() == 40);
    assert!(core::mem::size_of::<NormQuantParams>() == 64);
    assert!(core::mem::offset_of!(GemvQParams, epi) == 64);
    assert!(core::mem::offset_of!(GemvParams, ahead) == 192);
    assert!(core::mem::offset_of!(GemvParams, argmax) == 208);
    assert!(core::mem::size_of::<GemvParams>() == 232);
    assert!(core::mem::size_of::<QuantOut>() == 64);
    assert!(core::mem::offset_of!(GemvQParams, qout) == 200);
    assert!(core::mem::offset_of!(GemvQParams, ahead) == 264);
    assert!(core::mem::offset_of!(GemvQParams, kv) == 280);
    assert!(core::mem::offset_of!(GemvQParams, argmax) == 376);
    assert!(core::mem::size_of::<GemvQParams>() == 400);
    assert!(core::mem::offset_of!(GroupParams<GemvQParams>, job) == 40);
    assert!(core::mem::size_of::<GroupParams<GemvParams>>() == 40 + 8 * 232);
    assert!(core::mem::size_of::<GroupParams<GemvQParams>>() == 40 + 8 * 400);
    assert!(core::mem::size_of::<RopeParams>() == 48);
    assert!(core::mem::size_of::<SetRowParams>() == 48);
    assert!(core::mem::size_of::<KvAppendParams>() == 96);
    assert!(core::mem::size_of::<AttnParams>() == 136);
    assert!(core::mem::size_of::<ArgmaxParams>() == 48);
};
