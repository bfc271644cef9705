//! Launch options of the CUDA backend (the same type in builds without the
//! `cuda` feature, whose backend cannot be created).

/// How a [`CudaBackend`](crate::CudaBackend) launches its kernels. The
/// defaults are the fastest measured on the H200 (BENCHMARKS.md): all on
/// but `fold_quantizers` and `teams`; `FUSED_CUDA_PDL=0`, `FUSED_CUDA_EARLY_OPERANDS=0`,
/// `FUSED_CUDA_OVERLAP=0`, `FUSED_CUDA_GROUP=0` and
/// `FUSED_CUDA_FIXED_EPILOGUES=0` in the environment turn them off when the
/// backend is created (`FUSED_CUDA_FOLD_QUANTIZERS=1` and
/// `FUSED_CUDA_TEAMS=1` turn those on, `FUSED_CUDA_L2_AHEAD=<bytes>` sets `l2_ahead`),
/// [`CudaBackend::set_options`](crate::CudaBackend::set_options) changes
/// the options later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Programmatic dependent launch (`src/pdl.rs`): every kernel may start
    /// while the kernel before it on the stream still runs (its blocks are
    /// scheduled as the previous kernel's blocks retire) and waits for that
    /// kernel's results before it touches them. Only where the device
    /// supports it ([`CudaBackend::options`](crate::CudaBackend::options)).
    pub pdl: bool,
    /// GEMV blocks load the operands of the first 4 epilogue stages when
    /// they start (after the dependency wait) instead of after their sums,
    /// so that the loads' latency passes while the weights stream.
    pub early_operands: bool,
    /// GEMVs that touch nothing the GEMVs just before them write, and write
    /// nothing those touch, start without waiting for them and overlap their
    /// tail (`src/schedule.rs`): the jobs of
    /// [`CudaBackend::gemv_batch`](crate::CudaBackend::gemv_batch) after
    /// the first, and such GEMV steps of a
    /// [`DevicePlan`](crate::DevicePlan). Only GEMVs of one column over at
    /// most 64 MiB of weights overlap: on the H200 overlap sped those up
    /// (4096 × 14336 Q4_0 batches 71 % → 89 % of copy) and slowed longer
    /// ones (BENCHMARKS.md, 2026-12-02). Needs `pdl`.
    pub overlap: bool,
    /// Consecutive jobs of a
    /// [`CudaBackend::gemv_batch`](crate::CudaBackend::gemv_batch) that
    /// run the same one-column kernel (no GLU) go out as one launch, up to
    /// 8 a launch (`src/group.rs`): the blocks of one job fill the SMs
    /// while the last blocks of the one before finish, and the group pays
    /// one start and one drain. Same results bit for bit.
    pub group: bool,
    /// A [`DevicePlan`](crate::DevicePlan) built with this on lets a
    /// one-column integer GEMV whose output the next step quantizes for
    /// its own integer GEMV (a gated GEMV feeding the down projection)
    /// write that quantization itself (`GemvJob::quantized_output`'s
    /// kernels), instead of a quantizer launch: the same codes, one launch
    /// less. Off by default: on the H200 (BENCHMARKS.md, 2026-12-02 21:09
    /// UTC) the fused Q4_0 × Q8_0 decode layer ran slower so (graph 35.5
    /// against 33.1 µs, 2 of its 3 quantizers folded): each GEMV block's
    /// fence and count before it retires cost more than the quantizer
    /// launch, which under programmatic dependent launch overlaps the GEMV
    /// before it. `FUSED_CUDA_FOLD_QUANTIZERS=1` turns it on.
    pub fold_quantizers: bool,
    /// Each integer GEMV of a [`DevicePlan`](crate::DevicePlan) asks L2,
    /// as its blocks start, for the first `l2_ahead` bytes of the weights
    /// of the plan's next GEMV (one bulk prefetch a block; what
    /// [`GemvJob::with_l2_ahead`](crate::GemvJob::with_l2_ahead) does for
    /// one call), so that memory keeps streaming while the GEMV's tail, the
    /// launches between them and the next GEMV's start go by. 0: off.
    /// Float GEMVs do not ask (they ran no faster so).
    pub l2_ahead: usize,
    /// A one-column GEMV whose epilogue is one of the chains compiled into
    /// kernels of their own (a residual add; silu·mul + residual:
    /// `src/fixed_epi.rs`) runs such a kernel, which has no stage loop or
    /// compares at its blocks' ends, where the launch's default kernel shape
    /// has one and `early_operands` is on. Same results bit for bit.
    pub fixed_epilogues: bool,
    /// A one-column GEMV whose kernel also comes with several teams a
    /// block (the default Q4_0 integer kernel and its fixed-chain copies:
    /// `src/teams.rs`) runs that kernel, a grid of a third as many blocks
    /// (a dependent launch's handoff grows with its blocks), where it fits
    /// as many teams on an SM as the plain kernel blocks and the launch
    /// quantizes no output. The same sums in the same order: the same
    /// bits. Off by default until it has run on a GPU as it is here: an
    /// earlier build of the team kernel ran 1.5–2.5 % faster at 4096 ×
    /// 14336 on the H200 (BENCHMARKS.md, 2026-12-04 21:28 UTC), but this
    /// build's kernels and their tests (`tests/teams.rs`) have not run on
    /// one yet. `FUSED_CUDA_TEAMS=1` turns it on.
    pub teams: bool,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions {
            pdl: true,
            early_operands: true,
            overlap: true,
            group: true,
            fold_quantizers: false,
            l2_ahead: L2_AHEAD_DEFAULT,
            fixed_epilogues: true,
            teams: false,
        }
    }
}

/// [`LaunchOptions::l2_ahead`]'s default: 4 MiB asked for as the blocks
/// start, the best single choice among 2–16 MiB at the start or the end
/// for chains of one-column integer GEMVs on the H200 (BENCHMARKS.md,
/// 2026-12-04 16:34–17:18 UTC, four runs: 4096 × 14336 GEMV alone Q4_0
/// 81–82 → 85 % of copy, Q8_0 91–92 → 93–94 %, Q4_K 78 → 81–82 %; 6 MiB
/// and more no better or worse). With the one-column Q4_0 kernel at 9
/// blocks an SM (19:29 UTC): Q4_0 alone 80.7 → 81.4 %, with its quantizer
/// 69.5 → 72.2 %.
pub const L2_AHEAD_DEFAULT: usize = 4 << 20;

impl LaunchOptions {
    /// The defaults, with `pdl` off where `FUSED_CUDA_PDL=0` is set,
    /// `early_operands` off where `FUSED_CUDA_EARLY_OPERANDS=0` is,
    /// `overlap` off where `FUSED_CUDA_OVERLAP=0` is, `group` off where
    /// `FUSED_CUDA_GROUP=0` is, `fixed_epilogues` off where
    /// `FUSED_CUDA_FIXED_EPILOGUES=0` is, `teams` on where
    /// `FUSED_CUDA_TEAMS` is set to other than 0, `fold_quantizers` on where
    /// `FUSED_CUDA_FOLD_QUANTIZERS` is set to other than 0, and `l2_ahead`
    /// to `FUSED_CUDA_L2_AHEAD` where that is a number of bytes.
    pub fn from_env() -> LaunchOptions {
        let d = LaunchOptions::default();
        let on = |var: &str, default: bool| std::env::var(var).map_or(default, |v| v != "0");
        LaunchOptions {
            pdl: on("FUSED_CUDA_PDL", d.pdl),
            early_operands: on("FUSED_CUDA_EARLY_OPERANDS", d.early_operands),
            overlap: on("FUSED_CUDA_OVERLAP", d.overlap),
            group: on("FUSED_CUDA_GROUP", d.group),
            fold_quantizers: on("FUSED_CUDA_FOLD_QUANTIZERS", d.fold_quantizers),
            l2_ahead: std::env::var("FUSED_CUDA_L2_AHEAD")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d.l2_ahead),
            fixed_epilogues: on("FUSED_CUDA_FIXED_EPILOGUES", d.fixed_epilogues),
            teams: on("FUSED_CUDA_TEAMS", d.teams),
        }
    }
}

/// One fixed-chain copy of a GEMV kernel (`LaunchOptions::fixed_epilogues`)
/// and whether this device runs it: only where the copy and the kernel it
/// stands for fit the same number of blocks on an SM (occupancy moved
/// results more than the chain did on the H200), else that kernel runs the
/// generic chain. [`CudaBackend::fixed_epilogue_copies`](crate::CudaBackend::fixed_epilogue_copies)
/// lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedEpilogueCopy {
    /// The kernel the copy stands for.
    pub kernel: &'static str,
    /// The chain compiled into the copy (`add`, `silu_mul_add`).
    pub chain: &'static str,
    /// Blocks per SM of `kernel` on this device.
    pub kernel_blocks_per_sm: u32,
    /// Blocks per SM of the copy on this device.
    pub copy_blocks_per_sm: u32,
}

impl FixedEpilogueCopy {
    /// Whether launches run the copy (same blocks per SM as its kernel).
    pub fn used(&self) -> bool {
        self.kernel_blocks_per_sm == self.copy_blocks_per_sm
    }
}

/// A GEMV kernel that also comes with several teams a block
/// ([`LaunchOptions::teams`]) and whether this device runs that kernel:
/// only where it fits as many teams on an SM as the plain kernel blocks (the
/// same warps an SM), else launches run the plain kernel.
/// [`CudaBackend::team_kernels`](crate::CudaBackend::team_kernels) lists
/// them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamKernel {
    /// The plain kernel (or one of its fixed-chain copies).
    pub kernel: String,
    /// Teams of 128 threads a block of the team kernel (`<kernel>_t<teams>`).
    pub teams: u32,
    /// Blocks per SM of `kernel` (128 threads) on this device.
    pub kernel_blocks_per_sm: u32,
    /// Blocks per SM of the team kernel on this device.
    pub team_blocks_per_sm: u32,
}

impl TeamKernel {
    /// Whether launches run the team kernel (as many teams an SM as blocks
    /// of the plain kernel).
    pub fn used(&self) -> bool {
        self.team_blocks_per_sm * self.teams == self.kernel_blocks_per_sm
    }
}
