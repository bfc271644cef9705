//! The Vulkan backend's entry points over host slices: validated like the
//! CPU backend's, each one uploads, runs one submission and reads back.

use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES, Stage};
use fused_core::error::{Unsupported, check_len};
use fused_core::fwht::FwhtDesc;
use fused_core::reference::WeightMatrix;
use fused_core::reference::gemv::ActQuant;
use fused_core::reference::gemv::{GluWeights, check_gemm_args};
use fused_core::{DType, Error};

use crate::context::{Buffer, Command, ContextOptions, DeviceInfo, Dispatch, VulkanContext};
use crate::error::VulkanError;
use crate::kernels::{GemvType, KernelKey, QuantFormat, SPEC_CONSTANTS, Shader};
use ash::vk;

/// The most columns one GEMV call takes.
pub const MAX_COLS: usize = 8;

/// Threads per workgroup of the element-wise kernel.
const ELTWISE_WG: u32 = 256;
/// Shared memory the FWHT kernel may use for one exchange, in floats (32 KiB,
/// what lavapipe and NVIDIA both have; less when the device has less).
const FWHT_SHARED_FLOATS: u32 = 8192;
/// Values each FWHT thread aims to hold in registers with subgroup
/// shuffles. On the H200 (NVIDIA 580, 2026-11-30, signed N = 1024 over
/// 256 MiB) 8 values (128 threads per row: shuffles below the subgroup
/// size, shared memory above) reached 90 % of the copy bandwidth, 16
/// values 82 %, 32 values (one subgroup of 32 per row, all shuffles, no
/// barrier) 72 to 76 %: more threads keep more loads in flight.
const FWHT_VALUES_PER_THREAD_SHUFFLE: u32 = 8;
/// Values each FWHT thread aims to hold in registers with shared memory
/// only (fewer: more threads per row share the exchanges).
const FWHT_VALUES_PER_THREAD_SHARED: u32 = 8;
/// The largest FWHT workgroup.
const FWHT_MAX_WG: u32 = 1024;
/// The smallest FWHT workgroup the plan aims for (several rows per
/// workgroup when rows are short).
const FWHT_MIN_WG: u32 = 128;
/// Slabs of rows each FWHT workgroup transforms in turn.
const FWHT_SLABS: u32 = 1;
/// The most slabs of rows an FWHT workgroup transforms.
pub const FWHT_MAX_SLABS: u32 = 16;
/// Threads per GEMV workgroup the default shape aims for.
const GEMV_WG: u32 = 128;
/// Rows per workgroup the default shape of quantized GEMVs has.
const GEMV_QUANT_ROWS: u32 = 4;
/// The most rows one GEMV workgroup computes.
pub const GEMV_MAX_ROWS: u32 = 8;
/// The most units each GEMV thread loads per loop trip.
pub const GEMV_MAX_UNROLL: u32 = 4;
/// The activation quantizer's launch shape for Q8_0 (`quantize.comp`).
/// On the H200 (NVIDIA's driver, K = 8192 and 14336, one column; `bench
/// 9 1 quantize`, 2026-12-01) 4 values per thread took 3.05 to 3.25 µs with
/// workgroups of 32 to 256, 8 values 3.25 to 3.4 µs, 16 values 3.75 to 4.1
/// µs, 32 values (one thread per block, as before) 5.0 to 5.5 µs; a minimal
/// dispatch (a 32 KiB shader copy) 2.4 to 2.5 µs.
const QUANTIZE_SHAPE_Q8_0: QuantizeShape = QuantizeShape {
    workgroup: 64,
    values_per_thread: 4,
};
/// The quantizer's launch shape for Q8_K: on the H200 8 values per thread
/// with workgroups of 32 to 128 took 2.9 to 3.1 µs, 4 or 16 values 3.1 to
/// 3.6 µs, 32 values 3.3 to 5.5 µs.
const QUANTIZE_SHAPE_Q8_K: QuantizeShape = QuantizeShape {
    workgroup: 64,
    values_per_thread: 8,
};

/// The quantizer's launch shape for `mode` (Q8_1, the same blocks with one
/// more shared-memory sum, takes Q8_0's; not measured on its own).
fn quantize_shape(mode: ActQuant) -> QuantizeShape {
    if mode == ActQuant::Q8_K {
        QUANTIZE_SHAPE_Q8_K
    } else {
        QUANTIZE_SHAPE_Q8_0
    }
}

/// The launch shape of the activation quantizer: each thread loads and
/// quantizes `values_per_thread` consecutive values; the threads of one
/// block (Q8_0: 32 values, Q8_K: 256) share one workgroup of `workgroup`
/// threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuantizeShape {
    /// Threads per workgroup (a multiple of a block's threads).
    pub workgroup: u32,
    /// Values per thread: 4, 8, 16 or 32.
    pub values_per_thread: u32,
}

/// The launch shape of a GEMV: each workgroup of `workgroup` threads
/// computes `rows` consecutive rows; each thread loads `unroll` units (a few
/// code words of every row and the matching x values) per loop trip; the
/// partial sums are reduced with `subgroupAdd` or a shared-memory tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemvShape {
    /// Threads per workgroup (a power of two).
    pub workgroup: u32,
    /// Rows per workgroup (1 to [`GEMV_MAX_ROWS`]).
    pub rows: u32,
    /// Units per thread per loop trip (1 to [`GEMV_MAX_UNROLL`]).
    pub unroll: u32,
    /// Reduce with subgroup arithmetic (needs `ARITHMETIC` in compute
    /// shaders; in the Q8 mode also `SHUFFLE`); a shared-memory tree
    /// otherwise.
    pub subgroup_reduce: bool,
    /// Q8 mode only (ignored with f32 activations): consecutive threads
    /// sharing one weight block, their integer sums added through subgroup
    /// shuffles (a power of two up to the block's units: Q8_0 4, Q4_0 2,
    /// Q4_K 8; more than 1 needs `subgroup_reduce`).
    pub lanes: u32,
}

/// How the FWHT kernel exchanges values between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FwhtVariant {
    /// Subgroup shuffles for half-widths below the subgroup size, shared
    /// memory above (needs `SHUFFLE` in compute shaders).
    Shuffle,
    /// Shared memory for every cross-thread half-width.
    Shared,
}

/// The launch shape of one FWHT: threads per row, values per thread,
/// workgroup size and register slots per shared-memory exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwhtPlan {
    /// The variant.
    pub variant: FwhtVariant,
    /// Threads per row.
    pub threads_per_row: u32,
    /// Values per thread (`N / threads_per_row`).
    pub values_per_thread: u32,
    /// Threads per workgroup (a multiple of `threads_per_row`).
    pub workgroup: u32,
    /// Register slots exchanged per shared-memory round.
    pub chunk: u32,
    /// Consecutive values a thread loads and stores together: 4 (one
    /// vec4) where `values_per_thread` allows it, else 1.
    pub group: u32,
    /// Slabs of `workgroup / threads_per_row` rows each workgroup
    /// transforms in turn (the next slab's loads in flight meanwhile).
    pub slabs: u32,
}

/// The unfused element-wise operations (codes of `eltwise.comp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EltOp {
    Add = 0,
    Mul = 1,
    Unary = 2,
    Glu = 3,
    RowBias = 4,
    Signs = 5,
}

/// An epilogue as the GEMV shader's push constants read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChainWords {
    /// Number of stages.
    pub n_stages: u32,
    /// Per stage: kind | activation << 8 (kinds: 0 act, 1 add, 2 mul, 3 row bias).
    pub words: [u32; MAX_STAGES],
    /// Per stage: the element offset of its operand in the packed operands.
    pub offsets: [u32; MAX_STAGES],
}

/// The shader code of an activation (see `shaders/common.glsl`).
fn act_code(a: Activation) -> u32 {
    match a {
        Activation::Identity => 0,
        Activation::Silu => 1,
        Activation::Sigmoid => 2,
        Activation::GeluErf => 3,
        Activation::GeluTanh => 4,
        Activation::Relu => 5,
    }
}

pub(crate) fn gemv_type(d: DType) -> Result<GemvType, Error> {
    match d {
        DType::F32 => Ok(GemvType::F32),
        DType::F16 => Ok(GemvType::F16),
        DType::BF16 => Ok(GemvType::BF16),
        DType::Q8_0 => Ok(GemvType::Q8_0),
        DType::Q4_0 => Ok(GemvType::Q4_0),
        DType::Q4_K => Ok(GemvType::Q4_K),
        DType::Q4_1 => Ok(GemvType::Q4_1),
        DType::Q5_0 => Ok(GemvType::Q5_0),
        DType::Q5_1 => Ok(GemvType::Q5_1),
        DType::IQ4_NL => Ok(GemvType::IQ4_NL),
        DType::Q5_K => Ok(GemvType::Q5_K),
        DType::Q6_K => Ok(GemvType::Q6_K),
        DType::TQ2_0 => Ok(GemvType::TQ2_0),
        other => Err(Error::UnsupportedDType {
            what: "fused-vulkan GEMV weights (every GGML weight format but Q8_1 and Q8_K)",
            dtype: other,
        }),
    }
}

/// Checks that the GEMV of `dtype` weights has a shader for activations
/// fed per `mode`: f32 for every format, and GGML's mode for each quantized
/// one: Q8_0 for Q8_0, Q4_0, Q5_0 and IQ4_NL weights, Q8_1 for Q4_1 and
/// Q5_1, Q8_K for Q4_K, Q5_K, Q6_K and TQ2_0.
pub(crate) fn check_mode(dtype: GemvType, mode: ActQuant) -> Result<(), Error> {
    match (dtype, mode) {
        (_, ActQuant::F32)
        | (GemvType::Q8_0 | GemvType::Q4_0 | GemvType::Q5_0 | GemvType::IQ4_NL, ActQuant::Q8_0)
        | (GemvType::Q4_1 | GemvType::Q5_1, ActQuant::Q8_1)
        | (GemvType::Q4_K | GemvType::Q5_K | GemvType::Q6_K | GemvType::TQ2_0, ActQuant::Q8_K) => {
            Ok(())
        }
        _ => Err(Error::Unsupported(Unsupported::WeightActs {
            dtype: dtype.dtype(),
            mode,
        })),
    }
}

/// Units a quantized weight block is cut into in the Q8 mode (the most
/// lanes that can share it).
fn units_per_block(dtype: GemvType) -> u32 {
    match dtype {
        GemvType::Q8_0 => 4,
        GemvType::Q4_0 => 2,
        GemvType::Q4_K => 8,
        _ => 1,
    }
}

/// The bytes of `n_cols` columns of `k` activations quantized per `mode`
/// in the layout of `shaders/quantize.comp` (codes, then one 32-bit scale
/// word per block, then for Q8_K one 32-bit sum per 32 codes); `None` for
/// f32.
pub(crate) fn quantized_bytes(
    mode: ActQuant,
    k: usize,
    n_cols: usize,
) -> Result<Option<u64>, Error> {
    let (Some(block), Some(format)) = (mode.dtype(), QuantFormat::of(mode)) else {
        return Ok(None);
    };
    let (blk, sums) = (format.block(), format == QuantFormat::Q8_K);
    if !k.is_multiple_of(blk) {
        return Err(Error::NotBlockAligned {
            dtype: block,
            len: k,
        });
    }
    let n = k.checked_mul(n_cols).ok_or(Error::Overflow {
        what: "quantized activations",
    })?;
    let words = n / 4 + n / blk + if sums { n / 32 } else { 0 };
    Ok(Some(4 * words as u64))
}

pub(crate) fn u32_of(what: &'static str, v: usize) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| Error::Overflow { what })
}

/// Appends `v` to push-constant bytes.
fn push(bytes: &mut Vec<u8>, v: u32) {
    bytes.extend_from_slice(&v.to_ne_bytes());
}

/// The Vulkan compute backend.
#[derive(Debug)]
pub struct VulkanBackend {
    ctx: VulkanContext,
    /// A GEMV shape used instead of the picked one (tests, tuning).
    gemv_override: Option<GemvShape>,
    /// Q8_0 and Q4_0 GEMVs read 16-bit words (where the device has
    /// `storageBuffer16BitAccess`); 32-bit words otherwise.
    gemv_16bit: bool,
    /// Q8-mode GEMVs use integer dot products (where the device has
    /// `shaderIntegerDotProduct`); plain integer arithmetic otherwise.
    gemv_dot: bool,
}

impl VulkanBackend {
    /// Opens the best device (validation per [`ContextOptions::from_env`]).
    pub fn new() -> Result<VulkanBackend, VulkanError> {
        VulkanBackend::with_options(ContextOptions::from_env())
    }

    /// Opens the best device with `options`.
    pub fn with_options(options: ContextOptions) -> Result<VulkanBackend, VulkanError> {
        Ok(VulkanBackend {
            ctx: VulkanContext::new(options)?,
            gemv_override: None,
            gemv_16bit: true,
            gemv_dot: true,
        })
    }

    /// The context (device properties, buffers, validation messages).
    pub fn context(&self) -> &VulkanContext {
        &self.ctx
    }

    /// The 2-D grid for `groups` workgroups within the device's limits.
    pub(crate) fn grid(&self, groups: u64) -> Result<[u32; 3], VulkanError> {
        let [max_x, max_y] = self.ctx.info().max_groups;
        let x = groups.clamp(1, u64::from(max_x));
        let y = groups.div_ceil(x).max(1);
        if y > u64::from(max_y) {
            return Err(VulkanError::Unsupported(format!(
                "{groups} workgroups exceed the device's grid"
            )));
        }
        Ok([x as u32, y as u32, 1])
    }

    // ------------------------------------------------------------ FWHT

    /// The variant picked for this device: shuffles when compute shaders
    /// have them, shared memory otherwise.
    pub fn fwht_variant(&self) -> FwhtVariant {
        if self.ctx.info().has_shuffle() && self.ctx.info().subgroup_size > 1 {
            FwhtVariant::Shuffle
        } else {
            FwhtVariant::Shared
        }
    }

    /// The launch shape for block size `n` (a checked power of two).
    pub fn fwht_plan(&self, variant: FwhtVariant, n: usize) -> Result<FwhtPlan, VulkanError> {
        plan_fwht(self.ctx.info(), variant, n)
    }

    /// The launch shape for block size `n` aiming at `values_per_thread`
    /// values per thread and at least `min_workgroup` threads per workgroup
    /// (powers of two; the device's limits still apply), each workgroup
    /// transforming `slabs` (1 to [`FWHT_MAX_SLABS`]) slabs of rows: for
    /// tuning.
    pub fn fwht_plan_tuned(
        &self,
        variant: FwhtVariant,
        n: usize,
        values_per_thread: u32,
        min_workgroup: u32,
        slabs: u32,
    ) -> Result<FwhtPlan, VulkanError> {
        if !values_per_thread.is_power_of_two()
            || !min_workgroup.is_power_of_two()
            || !(1..=FWHT_MAX_SLABS).contains(&slabs)
        {
            return Err(VulkanError::Unsupported(format!(
                "FWHT tuning: {values_per_thread} values per thread, workgroup {min_workgroup}: \
                 not powers of two, or {slabs} slabs not 1 to {FWHT_MAX_SLABS}"
            )));
        }
        let mut plan = plan_fwht_tuned(
            self.ctx.info(),
            variant,
            n,
            values_per_thread,
            min_workgroup,
        )?;
        plan.slabs = slabs;
        Ok(plan)
    }

    /// The FWHT dispatch of `rows` rows from `x` into `out`.
    pub(crate) fn fwht_dispatch<'b>(
        &self,
        desc: &FwhtDesc,
        variant: FwhtVariant,
        rows: usize,
        x: &'b Buffer<'b>,
        signs: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let plan = self.fwht_plan(variant, desc.n())?;
        self.fwht_dispatch_planned(desc, plan, rows, x, signs, out)
    }

    /// [`VulkanBackend::fwht_dispatch`] with a plan for `desc.n()` from
    /// [`VulkanBackend::fwht_plan`] or [`VulkanBackend::fwht_plan_tuned`].
    pub(crate) fn fwht_dispatch_planned<'b>(
        &self,
        desc: &FwhtDesc,
        plan: FwhtPlan,
        rows: usize,
        x: &'b Buffer<'b>,
        signs: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        if plan.threads_per_row * plan.values_per_thread != u32_of("FWHT block size", desc.n())? {
            return Err(VulkanError::Unsupported(format!(
                "FWHT plan {plan:?} is not for N = {}",
                desc.n()
            )));
        }
        let key = KernelKey {
            shader: match plan.variant {
                FwhtVariant::Shuffle => Shader::FwhtShuffle,
                FwhtVariant::Shared => Shader::FwhtShared,
            },
            spec: [
                plan.workgroup,
                plan.threads_per_row,
                plan.values_per_thread,
                plan.chunk,
                plan.group,
                plan.slabs,
            ],
        };
        self.ctx.kernel(key)?;
        let rows_per_group = u64::from(plan.workgroup / plan.threads_per_row * plan.slabs);
        let groups = self.grid((rows as u64).div_ceil(rows_per_group))?;
        let mut p = Vec::new();
        push(&mut p, u32_of("FWHT rows", rows)?);
        push(
            &mut p,
            u32_of("FWHT sign blocks", desc.sign_blocks().unwrap_or(0))?,
        );
        push(&mut p, desc.scale().to_bits());
        Ok(Dispatch {
            kernel: key,
            buffers: vec![x, signs, out],
            push: p,
            groups,
        })
    }

    /// Every row of `x` transformed into `out` (signs fused into the load),
    /// with the variant picked for this device.
    pub fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.fwht_with(self.fwht_variant(), desc, x, signs, out)
    }

    /// [`VulkanBackend::fwht`] with a given variant.
    pub fn fwht_with(
        &self,
        variant: FwhtVariant,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.fwht_planned(self.fwht_plan(variant, desc.n())?, desc, x, signs, out)
    }

    /// [`VulkanBackend::fwht`] with a given plan for `desc.n()` (from
    /// [`VulkanBackend::fwht_plan`] or [`VulkanBackend::fwht_plan_tuned`]).
    pub fn fwht_planned(
        &self,
        plan: FwhtPlan,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        desc.check(x.len(), signs, out.len())?;
        u32_of("FWHT input length", x.len())?;
        if x.is_empty() {
            return Ok(());
        }
        let xb = self.ctx.upload_f32(x)?;
        let sb = self.ctx.upload_f32(signs.unwrap_or(&[0.0]))?;
        let ob = self.ctx.buffer(core::mem::size_of_val(out) as u64)?;
        let d = self.fwht_dispatch_planned(desc, plan, x.len() / desc.n(), &xb, &sb, &ob)?;
        self.ctx.submit(&[Command::Dispatch(d)], false)?;
        self.ctx.read_f32(&ob, out)
    }

    // ------------------------------------------------------------ element-wise

    pub(crate) fn eltwise_dispatch<'b>(
        &self,
        op: EltOp,
        act: Activation,
        params: [u32; 2],
        n: usize,
        buffers: [&'b Buffer<'b>; 3],
    ) -> Result<Dispatch<'b>, VulkanError> {
        let key = KernelKey {
            shader: Shader::Eltwise,
            spec: [0; SPEC_CONSTANTS],
        };
        self.ctx.kernel(key)?;
        let mut p = Vec::new();
        push(&mut p, u32_of("element count", n)?);
        push(&mut p, op as u32);
        push(&mut p, act_code(act));
        push(&mut p, params[0]);
        push(&mut p, params[1]);
        Ok(Dispatch {
            kernel: key,
            buffers: buffers.to_vec(),
            push: p,
            groups: self.grid((n as u64).div_ceil(u64::from(ELTWISE_WG)))?,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn eltwise(
        &self,
        op: EltOp,
        act: Activation,
        params: [u32; 2],
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        check_len("element-wise output", a.len(), out.len())?;
        if a.is_empty() {
            return Ok(());
        }
        let ab = self.ctx.upload_f32(a)?;
        let bb = self.ctx.upload_f32(if b.is_empty() { &[0.0] } else { b })?;
        let ob = self.ctx.buffer(core::mem::size_of_val(out) as u64)?;
        let d = self.eltwise_dispatch(op, act, params, a.len(), [&ab, &bb, &ob])?;
        self.ctx.submit(&[Command::Dispatch(d)], false)?;
        self.ctx.read_f32(&ob, out)
    }

    /// Unfused `out = a + b`.
    pub fn add(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), VulkanError> {
        check_len("add operand", a.len(), b.len())?;
        self.eltwise(EltOp::Add, Activation::Identity, [0; 2], a, b, out)
    }

    /// Unfused `out = a · b`.
    pub fn mul(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), VulkanError> {
        check_len("mul operand", a.len(), b.len())?;
        self.eltwise(EltOp::Mul, Activation::Identity, [0; 2], a, b, out)
    }

    /// Unfused `out = act(a)`.
    pub fn unary(&self, act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), VulkanError> {
        self.eltwise(EltOp::Unary, act, [0; 2], a, &[], out)
    }

    /// Unfused `out = act(gate) · up`.
    pub fn glu(
        &self,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        check_len("glu up operand", gate.len(), up.len())?;
        self.eltwise(EltOp::Glu, act, [0; 2], gate, up, out)
    }

    /// Unfused `out[i] = a[i] + bias[i mod rows]` for a column-major output
    /// of `bias.len()` rows.
    pub fn add_row_bias(
        &self,
        a: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        let rows = bias.len();
        if rows == 0 || !a.len().is_multiple_of(rows) {
            return Err(Error::LengthMismatch {
                what: "row-bias input (a whole number of columns of bias.len() rows)",
                expected: a.len().div_ceil(rows.max(1)) * rows,
                actual: a.len(),
            }
            .into());
        }
        let rows = u32_of("bias rows", rows)?;
        self.eltwise(
            EltOp::RowBias,
            Activation::Identity,
            [rows, 0],
            a,
            bias,
            out,
        )
    }

    /// Unfused sign multiply of an FWHT input: `out = x ⊙ signs` with the
    /// row layout of [`FwhtDesc::with_signs`] (the first half of an unfused
    /// signed FWHT).
    pub fn mul_signs(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        desc.check(x.len(), Some(signs), out.len())?;
        let params = [
            u32_of("FWHT block size", desc.n())?,
            u32_of("FWHT sign blocks", desc.sign_blocks().unwrap_or(1))?,
        ];
        self.eltwise(EltOp::Signs, Activation::Identity, params, x, signs, out)
    }

    // ------------------------------------------------------------ GEMV

    /// Checks the epilogue operands and packs every operand into one buffer,
    /// with the stage words and operand offsets for the push constants.
    pub(crate) fn pack_epilogue(
        epilogue: &Epilogue,
        operands: &[&[f32]],
        rows: usize,
        cols: usize,
    ) -> Result<(Vec<f32>, ChainWords), VulkanError> {
        epilogue.bind(operands, rows, cols)?;
        let mut packed = Vec::new();
        let mut offsets = [0u32; MAX_STAGES];
        let mut words = [0u32; MAX_STAGES];
        let mut slot_offset = [None; MAX_STAGES];
        for (i, st) in epilogue.stages().iter().enumerate() {
            words[i] = match st {
                Stage::Act(a) => act_code(*a) << 8,
                Stage::Add { .. } => 1,
                Stage::Mul { .. } => 2,
                Stage::AddRowBias { .. } => 3,
            };
            if let Some(slot) = st.slot() {
                let off = match slot_offset[slot] {
                    Some(o) => o,
                    None => {
                        let o = u32_of("epilogue operands", packed.len())?;
                        packed.extend_from_slice(operands[slot]);
                        slot_offset[slot] = Some(o);
                        o
                    }
                };
                offsets[i] = off;
            }
        }
        if packed.is_empty() {
            packed.push(0.0);
        }
        let chain = ChainWords {
            n_stages: epilogue.len() as u32,
            words,
            offsets,
        };
        Ok((packed, chain))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_impl(
        &self,
        w: &WeightMatrix<'_>,
        up: Option<(&WeightMatrix<'_>, Activation)>,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        let (m, k) = (w.rows(), w.cols());
        if n_cols == 0 || n_cols > MAX_COLS {
            return Err(Error::LengthMismatch {
                what: "GEMV columns (1 to 8)",
                expected: n_cols.clamp(1, MAX_COLS),
                actual: n_cols,
            }
            .into());
        }
        let bound = epilogue.bind(operands, m, n_cols)?;
        check_gemm_args(m, k, n_cols, x.len(), &bound, y.len())?;
        let dtype = gemv_type(w.dtype())?;
        check_mode(dtype, mode)?;
        let q_bytes = quantized_bytes(mode, k, n_cols)?;
        if m == 0 {
            return Ok(());
        }
        let (packed, chain) = Self::pack_epilogue(epilogue, operands, m, n_cols)?;
        let wb = self.ctx.upload(w.bytes())?;
        let ub = match up {
            Some((u, _)) => Some(self.ctx.upload(u.bytes())?),
            None => None,
        };
        let xb = self.ctx.upload_f32(x)?;
        let qb = match q_bytes {
            Some(bytes) => Some(self.ctx.buffer(bytes)?),
            None => None,
        };
        let ob = self.ctx.buffer(core::mem::size_of_val(y) as u64)?;
        let pb = self.ctx.upload_f32(&packed)?;
        let mut commands = Vec::new();
        if let Some(q) = &qb {
            let d = self.quantize_dispatch(mode, k, n_cols, &xb, q)?;
            commands.push(Command::Dispatch(d));
        }
        let mut buffers = vec![&wb, qb.as_ref().unwrap_or(&xb), &ob, &pb];
        if let Some(u) = &ub {
            buffers.push(u);
        }
        let d = self.gemv_dispatch(
            dtype,
            mode,
            up.map(|(_, a)| a),
            m,
            k,
            n_cols,
            chain,
            buffers,
        )?;
        commands.push(Command::Dispatch(d));
        self.ctx.submit(&commands, false)?;
        self.ctx.read_f32(&ob, y)
    }

    /// The dispatch that quantizes `n_cols` columns of `k` activations
    /// from `x` into `out` per `mode` (Q8_0, Q8_1 or Q8_K), in the layout
    /// [`VulkanBackend::quantize_activations`] returns.
    pub(crate) fn quantize_dispatch<'b>(
        &self,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
        x: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        self.quantize_dispatch_shaped(quantize_shape(mode), mode, k, n_cols, x, out)
    }

    /// `Unsupported` unless `quantize.comp` can take `shape` for `mode`
    /// (Q8_0 or Q8_K) on this device.
    fn check_quantize_shape(
        &self,
        shape: QuantizeShape,
        mode: ActQuant,
    ) -> Result<(), VulkanError> {
        let QuantizeShape {
            workgroup,
            values_per_thread,
        } = shape;
        let block = QuantFormat::of(mode).map_or(32, QuantFormat::block) as u32;
        if workgroup == 0
            || ![4, 8, 16, 32].contains(&values_per_thread)
            || !workgroup.is_multiple_of(block / values_per_thread)
            || workgroup > self.ctx.info().max_invocations
        {
            return Err(VulkanError::Unsupported(format!(
                "quantizer shape {shape:?} for {mode:?}: values per thread not 4, 8, 16 or 32, \
                 or a workgroup not a multiple of a block's threads or above the device's limit"
            )));
        }
        Ok(())
    }

    /// [`VulkanBackend::quantize_dispatch`] with a given launch shape (for
    /// tuning); a shape the shader cannot take, or that the device's
    /// workgroup limit refuses, is `Unsupported`.
    pub(crate) fn quantize_dispatch_shaped<'b>(
        &self,
        shape: QuantizeShape,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
        x: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        quantized_bytes(mode, k, n_cols)?;
        self.check_quantize_shape(shape, mode)?;
        let QuantizeShape {
            workgroup,
            values_per_thread,
        } = shape;
        let key = KernelKey {
            shader: Shader::Quantize {
                format: QuantFormat::of(mode)
                    .ok_or(Error::Unsupported(Unsupported::ActQuant(mode)))?,
            },
            spec: [workgroup, values_per_thread, 0, 0, 0, 0],
        };
        self.ctx.kernel(key)?;
        let threads =
            (k / values_per_thread as usize)
                .checked_mul(n_cols)
                .ok_or(Error::Overflow {
                    what: "quantized activations",
                })?;
        let mut p = Vec::new();
        push(&mut p, u32_of("GEMV inner dimension", k)?);
        push(&mut p, u32_of("GEMV columns", n_cols)?);
        Ok(Dispatch {
            kernel: key,
            buffers: vec![x, out],
            push: p,
            groups: self.grid((threads as u64).div_ceil(u64::from(workgroup)))?,
        })
    }

    /// `n_cols` columns of `k = x.len() / n_cols` activations quantized on
    /// the device per `mode` (Q8_0 or Q8_K), as the Q8-mode GEMV reads
    /// them: 32-bit words holding first the int8 codes (column after
    /// column, four a word, little-endian), then one scale word per block
    /// (Q8_0: the f16 bits of `d`; Q8_1: those of `d` in the low half and
    /// of `s` in the high half; Q8_K: the f32 bits of `d`), then for Q8_K the
    /// sum of every 32 codes (an i32). Codes and scales are those of
    /// `fused_core::quant::quantize_row`.
    pub fn quantize_activations(
        &self,
        mode: ActQuant,
        x: &[f32],
        n_cols: usize,
    ) -> Result<Vec<u32>, VulkanError> {
        self.quantize_activations_shaped(quantize_shape(mode), mode, x, n_cols)
    }

    /// [`VulkanBackend::quantize_activations`] with a given launch shape
    /// (for tuning; every shape gives the same words). A shape the shader
    /// cannot take is `Unsupported`.
    pub fn quantize_activations_shaped(
        &self,
        shape: QuantizeShape,
        mode: ActQuant,
        x: &[f32],
        n_cols: usize,
    ) -> Result<Vec<u32>, VulkanError> {
        if n_cols == 0 || !x.len().is_multiple_of(n_cols) {
            return Err(Error::LengthMismatch {
                what: "activations (a whole number of columns)",
                expected: x.len().div_ceil(n_cols.max(1)) * n_cols.max(1),
                actual: x.len(),
            }
            .into());
        }
        let k = x.len() / n_cols;
        let Some(bytes) = quantized_bytes(mode, k, n_cols)? else {
            return Err(Error::Unsupported(Unsupported::ActQuant(mode)).into());
        };
        self.check_quantize_shape(shape, mode)?;
        let mut out = vec![0u32; (bytes / 4) as usize];
        if x.is_empty() {
            return Ok(out);
        }
        let xb = self.ctx.upload_f32(x)?;
        let qb = self.ctx.buffer(bytes)?;
        let d = self.quantize_dispatch_shaped(shape, mode, k, n_cols, &xb, &qb)?;
        self.ctx.submit(&[Command::Dispatch(d)], false)?;
        self.ctx.read(&qb, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Makes every later GEMV use `shape` (`None`: the shape picked for the
    /// device, [`VulkanBackend::gemv_shape`]). Fails, leaving the setting
    /// as it was, when the shape does not fit the device.
    pub fn set_gemv_shape(&mut self, shape: Option<GemvShape>) -> Result<(), VulkanError> {
        if let Some(s) = shape {
            check_gemv_shape(self.ctx.info(), s, 1, false, None)?;
        }
        self.gemv_override = shape;
        Ok(())
    }

    /// The GEMV shape for F32, F16 and BF16 weights ([`VulkanBackend::gemv_shape_for`]).
    pub fn gemv_shape(&self, n_cols: usize, glu: bool) -> Result<GemvShape, VulkanError> {
        self.shape_for(GemvType::F16, ActQuant::F32, n_cols, glu)
    }

    /// The GEMV shape for `dtype` weights, activations fed per `mode`, and
    /// `n_cols` columns, plain or gated (`glu`): the one set by
    /// [`VulkanBackend::set_gemv_shape`], or the one picked from the weight
    /// format, the mode and the device's subgroup properties and limits.
    pub fn gemv_shape_for(
        &self,
        dtype: DType,
        mode: ActQuant,
        n_cols: usize,
        glu: bool,
    ) -> Result<GemvShape, VulkanError> {
        let t = gemv_type(dtype)?;
        check_mode(t, mode)?;
        self.shape_for(t, mode, n_cols, glu)
    }

    pub(crate) fn shape_for(
        &self,
        dtype: GemvType,
        mode: ActQuant,
        n_cols: usize,
        glu: bool,
    ) -> Result<GemvShape, VulkanError> {
        let n_cols = u32_of("GEMV columns", n_cols)?;
        let q8 = (mode != ActQuant::F32).then_some(dtype);
        let shape = match self.gemv_override {
            Some(s) => s,
            None => pick_gemv_shape(self.ctx.info(), dtype, q8.is_some(), n_cols, glu),
        };
        check_gemv_shape(self.ctx.info(), shape, n_cols, glu, q8)?;
        Ok(shape)
    }

    /// Whether Q8_0 and Q4_0 GEMVs read their 2-byte-aligned blocks as
    /// 16-bit words: on by default where the device has
    /// `storageBuffer16BitAccess`; off, they cut 16-bit words out of 32-bit
    /// loads. Turning it on fails on a device without the feature.
    pub fn set_gemv_16bit_loads(&mut self, on: bool) -> Result<(), VulkanError> {
        if on && !self.ctx.info().storage_16bit {
            return Err(VulkanError::Unsupported(
                "16-bit storage-buffer access (storageBuffer16BitAccess)".into(),
            ));
        }
        self.gemv_16bit = on;
        Ok(())
    }

    /// Whether Q8-mode GEMVs use integer dot products: on by default where
    /// the device has `shaderIntegerDotProduct`; off, the same integer sums
    /// in plain integer arithmetic (the same bits). Turning it on fails on
    /// a device without the feature.
    pub fn set_gemv_integer_dot(&mut self, on: bool) -> Result<(), VulkanError> {
        if on && !self.ctx.info().integer_dot {
            return Err(VulkanError::Unsupported(
                "integer dot products (shaderIntegerDotProduct)".into(),
            ));
        }
        self.gemv_dot = on;
        Ok(())
    }

    /// Whether GEMVs of `dtype` use 16-bit loads now.
    pub(crate) fn gemv_uses_16bit(&self, dtype: GemvType) -> bool {
        self.gemv_16bit
            && self.ctx.info().storage_16bit
            && matches!(dtype, GemvType::Q8_0 | GemvType::Q4_0)
    }

    /// Whether Q8-mode GEMVs use integer dot products now.
    pub(crate) fn gemv_uses_dot(&self) -> bool {
        self.gemv_dot && self.ctx.info().integer_dot
    }

    /// The GEMV dispatch over uploaded buffers (weights, x — quantized per
    /// `mode` by [`VulkanBackend::quantize_dispatch`] unless f32 — y,
    /// operands and, for the gated form, the up weights) with the shape of
    /// [`VulkanBackend::gemv_shape_for`]; `chain` is the stage count, the
    /// stage words and the operand offsets.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_dispatch<'b>(
        &self,
        dtype: GemvType,
        mode: ActQuant,
        glu_act: Option<Activation>,
        m: usize,
        k: usize,
        n_cols: usize,
        chain: ChainWords,
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let shape = self.shape_for(dtype, mode, n_cols, glu_act.is_some())?;
        let storage16 = self.gemv_uses_16bit(dtype);
        self.gemv_dispatch_shaped(
            shape, storage16, dtype, mode, glu_act, m, k, n_cols, chain, buffers,
        )
    }

    /// [`VulkanBackend::gemv_dispatch`] with a given (checked) shape and
    /// 16-bit loads on or off (`storage16`: only where
    /// [`VulkanBackend::gemv_uses_16bit`] allows them).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_dispatch_shaped<'b>(
        &self,
        shape: GemvShape,
        storage16: bool,
        dtype: GemvType,
        mode: ActQuant,
        glu_act: Option<Activation>,
        m: usize,
        k: usize,
        n_cols: usize,
        chain: ChainWords,
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        check_mode(dtype, mode)?;
        quantized_bytes(mode, k, n_cols)?;
        let n_cols = u32_of("GEMV columns", n_cols)?;
        let glu = glu_act.is_some();
        let q8 = mode != ActQuant::F32;
        check_gemv_shape(self.ctx.info(), shape, n_cols, glu, q8.then_some(dtype))?;
        let storage16 = storage16 && self.gemv_uses_16bit(dtype);
        let subgroup = shape.subgroup_reduce;
        let (shader, lanes) = if q8 {
            let shader = Shader::GemvQ8 {
                dtype,
                glu,
                subgroup,
                storage16,
                dot: self.gemv_uses_dot(),
            };
            (shader, shape.lanes)
        } else {
            let shader = Shader::Gemv {
                dtype,
                glu,
                subgroup,
                storage16,
            };
            (shader, 0)
        };
        let key = KernelKey {
            shader,
            spec: [
                n_cols,
                shape.workgroup,
                shape.rows,
                shape.unroll,
                gemv_slots(self.ctx.info(), shape),
                lanes,
            ],
        };
        self.ctx.kernel(key)?;
        let mut p = Vec::new();
        push(&mut p, u32_of("GEMV rows", m)?);
        push(&mut p, u32_of("GEMV inner dimension", k)?);
        push(&mut p, chain.n_stages);
        push(&mut p, glu_act.map_or(0, act_code));
        for v in chain.words.iter().chain(chain.offsets.iter()) {
            push(&mut p, *v);
        }
        Ok(Dispatch {
            kernel: key,
            buffers,
            push: p,
            groups: self.grid((m as u64).div_ceil(u64::from(shape.rows)))?,
        })
    }

    /// `y = epilogue(W · x)` for `n_cols` (1 to 8) f32 columns, with the
    /// activations fed per `mode`: f32 against weights dequantized in the
    /// shader ([`ActQuant::F32`], every format), or quantized on the device
    /// first as the core does in GGML's mode for the format
    /// ([`ActQuant::Q8_0`] for Q8_0, Q4_0, Q5_0 and IQ4_NL weights,
    /// [`ActQuant::Q8_1`] for Q4_1 and Q5_1, [`ActQuant::Q8_K`] for Q4_K,
    /// Q5_K, Q6_K and TQ2_0) and dotted in integers; other pairs are
    /// [`fused_core::Error::Unsupported`]. Output column-major
    /// (`y[col·M + row]`), as the core's `gemm`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv(
        &self,
        w: &WeightMatrix<'_>,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.gemv_impl(w, None, x, n_cols, mode, epilogue, operands, y)
    }

    /// The gated dual GEMV `y = epilogue(act(W_gate·x) ⊙ (W_up·x))`, the
    /// activations fed per `mode` as in [`VulkanBackend::gemv`] (quantized
    /// once for both weights).
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu(
        &self,
        w: &GluWeights<'_>,
        act: Activation,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.gemv_impl(
            w.gate(),
            Some((w.up(), act)),
            x,
            n_cols,
            mode,
            epilogue,
            operands,
            y,
        )
    }
}

/// The FWHT launch shape for block size `n` on a device with `info`.
fn plan_fwht(info: &DeviceInfo, variant: FwhtVariant, n: usize) -> Result<FwhtPlan, VulkanError> {
    let per_thread = match variant {
        FwhtVariant::Shuffle => FWHT_VALUES_PER_THREAD_SHUFFLE,
        FwhtVariant::Shared => FWHT_VALUES_PER_THREAD_SHARED,
    };
    plan_fwht_tuned(info, variant, n, per_thread, FWHT_MIN_WG)
}

/// [`plan_fwht`] aiming at `per_thread` values per thread and at least
/// `min_wg` threads per workgroup (both powers of two).
fn plan_fwht_tuned(
    info: &DeviceInfo,
    variant: FwhtVariant,
    n: usize,
    per_thread: u32,
    min_wg: u32,
) -> Result<FwhtPlan, VulkanError> {
    if variant == FwhtVariant::Shuffle && !info.has_shuffle() {
        return Err(VulkanError::Unsupported(
            "subgroup shuffles in compute shaders".into(),
        ));
    }
    let n = u32_of("FWHT block size", n)?;
    let sg = info.subgroup_size.max(1);
    let max_wg = prev_pow2(info.max_invocations.min(FWHT_MAX_WG));
    // At least a subgroup's worth of threads per row when N allows it.
    let tpr = (n / per_thread).max(n.min(sg)).min(max_wg).max(1);
    let workgroup = tpr.max(min_wg.max(sg).min(max_wg));
    let shared = prev_pow2((info.max_shared_bytes / 4).min(FWHT_SHARED_FLOATS));
    let values = n / tpr;
    let chunk = (shared / workgroup).clamp(1, values);
    if workgroup % sg != 0 && variant == FwhtVariant::Shuffle {
        return Err(VulkanError::Unsupported(format!(
            "workgroup {workgroup} is not a multiple of the subgroup size {sg}"
        )));
    }
    Ok(FwhtPlan {
        variant,
        threads_per_row: tpr,
        values_per_thread: values,
        workgroup,
        chunk,
        group: if values.is_multiple_of(4) { 4 } else { 1 },
        slabs: FWHT_SLABS,
    })
}

/// The GEMV shape picked for a device, weight format and activation mode
/// (`q8`: quantized activations): subgroup reduction where compute shaders
/// have subgroup arithmetic (and shuffles, in the Q8 mode), [`GEMV_WG`]
/// threads (fewer when the device allows fewer), and for up to two columns
/// several rows per workgroup, so that each x load serves them all: two
/// for F32, F16 and BF16, four for the quantized formats with f32 activations,
/// whose x values (4 bytes each) outweigh their weights (0.56 to 1.06
/// bytes); one row for more columns (the weights are already reused across
/// columns). Two units in flight per thread, except in the Q8 mode, whose
/// (rows, unroll, lanes) per format come from a sweep on the H200 (NVIDIA
/// 580, 2026-11-30, one column, barrier between calls, 4096×14336 and
/// 32768×8192): Q8_0 (2, 1, 2) 70 / 88 % of the copy bandwidth, Q4_0
/// (4, 2, 1) 56 / 80 %, Q4_K (2, 1, 4) 57 / 80 % (lanes only where the
/// subgroup reduction and its size allow them).
fn pick_gemv_shape(
    info: &DeviceInfo,
    dtype: GemvType,
    q8: bool,
    n_cols: u32,
    glu: bool,
) -> GemvShape {
    let subgroup_reduce = has_subgroup_add(info) && (!q8 || info.has_shuffle());
    let workgroup = prev_pow2(info.max_invocations.min(GEMV_WG));
    let (rows, unroll, lanes) = match (q8, dtype) {
        (false, GemvType::F32 | GemvType::F16 | GemvType::BF16) => (2, 2, 1),
        (false, _) => (GEMV_QUANT_ROWS, 2, 1),
        (true, GemvType::Q8_0) => (2, 1, 2),
        (true, GemvType::Q4_K) => (2, 1, 4),
        (true, _) => (4, 2, 1),
    };
    let rows = if n_cols >= 3 { 1 } else { rows };
    let lanes = if subgroup_reduce {
        lanes.min(prev_pow2(info.subgroup_size.max(1)))
    } else {
        1
    };
    let mut shape = GemvShape {
        workgroup,
        rows,
        unroll,
        subgroup_reduce,
        lanes: lanes.min(workgroup),
    };
    let q8_type = q8.then_some(dtype);
    // Shrink until the partial sums fit in shared memory.
    while check_gemv_shape(info, shape, n_cols, glu, q8_type).is_err() && shape.workgroup > 1 {
        if shape.rows > 1 {
            shape.rows /= 2;
        } else {
            shape.workgroup /= 2;
            shape.lanes = shape.lanes.min(shape.workgroup);
        }
    }
    shape
}

/// Whether compute shaders may use `subgroupAdd`.
fn has_subgroup_add(info: &DeviceInfo) -> bool {
    info.subgroup_size > 0
        && info
            .subgroup_ops
            .contains(vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC)
}

/// The partial sums per value the GEMV shader keeps in shared memory: one
/// per subgroup, or one per thread for the tree.
fn gemv_slots(info: &DeviceInfo, shape: GemvShape) -> u32 {
    if shape.subgroup_reduce {
        shape.workgroup.div_ceil(info.subgroup_size.max(1))
    } else {
        shape.workgroup
    }
}

/// Checks that `shape` is valid and fits the device for `n_cols` columns,
/// with f32 activations (`q8` `None`) or in the Q8 mode for weights `q8`.
fn check_gemv_shape(
    info: &DeviceInfo,
    shape: GemvShape,
    n_cols: u32,
    glu: bool,
    q8: Option<GemvType>,
) -> Result<(), VulkanError> {
    let bad = |why: String| {
        Err(VulkanError::Unsupported(format!(
            "GEMV shape {shape:?}: {why}"
        )))
    };
    if !shape.workgroup.is_power_of_two() || shape.workgroup > info.max_invocations {
        return bad(format!(
            "the workgroup must be a power of two up to {}",
            info.max_invocations
        ));
    }
    if !(1..=GEMV_MAX_ROWS).contains(&shape.rows) || !(1..=GEMV_MAX_UNROLL).contains(&shape.unroll)
    {
        return bad(format!(
            "rows 1 to {GEMV_MAX_ROWS}, unroll 1 to {GEMV_MAX_UNROLL}"
        ));
    }
    if shape.subgroup_reduce && !has_subgroup_add(info) {
        return bad("the device has no subgroup arithmetic in compute shaders".into());
    }
    if !shape.lanes.is_power_of_two() || shape.lanes > shape.workgroup {
        return bad("lanes must be a power of two up to the workgroup".into());
    }
    if let Some(dtype) = q8 {
        if shape.subgroup_reduce && !info.has_shuffle() {
            return bad("the device has no subgroup shuffles in compute shaders".into());
        }
        if shape.lanes > units_per_block(dtype)
            || (shape.lanes > 1
                && (!shape.subgroup_reduce || shape.lanes > info.subgroup_size.max(1)))
        {
            return bad(format!(
                "lanes above 1 need the subgroup reduction, at most {} (the block's units) \
                 and the subgroup size {}",
                units_per_block(dtype),
                info.subgroup_size
            ));
        }
    }
    let values = u64::from(shape.rows) * u64::from(n_cols) * if glu { 2 } else { 1 };
    let shared = 4 * values * u64::from(gemv_slots(info, shape));
    if shared > u64::from(info.max_shared_bytes) {
        return bad(format!(
            "{shared} bytes of shared memory for {n_cols} columns exceed {}",
            info.max_shared_bytes
        ));
    }
    Ok(())
}

/// The largest power of two `<= v` (1 for 0).
fn prev_pow2(v: u32) -> u32 {
    if v == 0 { 1 } else { 1 << v.ilog2() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ash::vk;

    fn device(subgroup: u32, invocations: u32, shared_kib: u32) -> DeviceInfo {
        DeviceInfo {
            name: "synthetic".into(),
            device_type: vk::PhysicalDeviceType::OTHER,
            api_version: vk::API_VERSION_1_1,
            subgroup_size: subgroup,
            subgroup_ops: vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::SHUFFLE,
            max_invocations: invocations,
            max_groups: [65535, 65535],
            max_shared_bytes: shared_kib * 1024,
            max_storage_range: u32::MAX,
            timestamp_period_ns: Some(1.0),
            host_visible_buffers: false,
            storage_16bit: false,
            integer_dot: false,
        }
    }

    /// Every N on lavapipe-, NVIDIA-, AMD-like and minimal devices gives a
    /// launch shape within the device's limits that covers the row.
    #[test]
    fn fwht_plans_fit_every_device_and_size() {
        for info in [
            device(8, 1024, 32),
            device(32, 1024, 48),
            device(64, 1024, 64),
            device(4, 128, 16),
            device(128, 1024, 16),
        ] {
            for (variant, tuning) in [
                (FwhtVariant::Shuffle, None),
                (FwhtVariant::Shared, None),
                (FwhtVariant::Shuffle, Some((16, 512))),
                (FwhtVariant::Shared, Some((32, 64))),
            ] {
                let mut n = 2u32;
                while n <= 32768 {
                    let p = match tuning {
                        None => plan_fwht(&info, variant, n as usize).unwrap(),
                        Some((v, wg)) => {
                            plan_fwht_tuned(&info, variant, n as usize, v, wg).unwrap()
                        }
                    };
                    let what = format!("{info:?} {p:?} N={n}");
                    assert_eq!(p.threads_per_row * p.values_per_thread, n, "{what}");
                    for v in [p.threads_per_row, p.values_per_thread, p.workgroup, p.chunk] {
                        assert!(v.is_power_of_two(), "{what}");
                    }
                    assert_eq!(p.workgroup % p.threads_per_row, 0, "{what}");
                    assert_eq!(p.values_per_thread % p.chunk, 0, "{what}");
                    assert_eq!(p.values_per_thread % p.group, 0, "{what}");
                    assert!(p.group == 1 || p.group == 4, "{what}");
                    assert!(p.workgroup <= info.max_invocations, "{what}");
                    assert!(p.workgroup * p.chunk * 4 <= info.max_shared_bytes, "{what}");
                    if variant == FwhtVariant::Shuffle {
                        assert_eq!(p.workgroup % info.subgroup_size, 0, "{what}");
                    }
                    n *= 2;
                }
            }
        }
        let mut no_shuffle = device(32, 1024, 48);
        no_shuffle.subgroup_ops = vk::SubgroupFeatureFlags::BASIC;
        assert!(plan_fwht(&no_shuffle, FwhtVariant::Shuffle, 64).is_err());
    }

    /// The picked GEMV shape fits lavapipe-, NVIDIA-, AMD-like and minimal
    /// devices for every column count, plain and gated, and reduces through
    /// subgroups only where the device has subgroup arithmetic.
    #[test]
    fn gemv_shapes_fit_every_device() {
        let mut arith = device(8, 1024, 32);
        arith.subgroup_ops |= vk::SubgroupFeatureFlags::ARITHMETIC;
        for info in [
            arith,
            device(32, 1024, 48),
            device(64, 256, 64),
            device(4, 128, 16),
            device(1, 64, 2),
        ] {
            for n_cols in 1..=MAX_COLS as u32 {
                for glu in [false, true] {
                    for (dtype, q8) in [
                        (GemvType::F16, false),
                        (GemvType::BF16, false),
                        (GemvType::Q4_0, false),
                        (GemvType::Q8_0, true),
                        (GemvType::Q4_0, true),
                        (GemvType::Q4_K, true),
                    ] {
                        let s = pick_gemv_shape(&info, dtype, q8, n_cols, glu);
                        let q8_type = q8.then_some(dtype);
                        assert!(
                            check_gemv_shape(&info, s, n_cols, glu, q8_type).is_ok(),
                            "{info:?} {s:?}"
                        );
                        let sg = has_subgroup_add(&info) && (!q8 || info.has_shuffle());
                        assert_eq!(s.subgroup_reduce, sg);
                    }
                }
            }
        }
    }
}
