//! The Vulkan backend's entry points over host slices: validated like the
//! CPU backend's, each one uploads, runs one submission and reads back.

use fused_core::Error;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, MAX_STAGES, Stage};
use fused_core::error::{Unsupported, check_len};
use fused_core::fwht::FwhtDesc;
use fused_core::job::{GemvJob, GemvWeights};
use fused_core::weights::WeightMatrix;

use crate::context::{Buffer, Command, ContextOptions, Dispatch, VulkanContext};
use crate::error::VulkanError;
use crate::measure;
use crate::pipeline::{
    GemvType, KernelKey, MAX_COLS, SPEC_CONSTANTS, Shader, check_mode, gemv_type, quantized_bytes,
    u32_of,
};
use crate::tuning::{self, FwhtVariant, QuantizeShape, Tuning};

/// Threads per workgroup of the element-wise kernel (`local_size_x` of
/// `eltwise.comp`).
const ELTWISE_WG: u32 = 256;
/// Threads per workgroup of the copy shader.
const COPY_WG: u32 = 256;
/// 16-byte words each copy-shader thread moves.
const COPY_PER_THREAD: u32 = 4;

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

/// Appends `v` to push-constant bytes.
fn push(bytes: &mut Vec<u8>, v: u32) {
    bytes.extend_from_slice(&v.to_ne_bytes());
}

/// The Vulkan compute backend: a context and the tuning its kernels are
/// chosen with.
#[derive(Debug)]
pub struct VulkanBackend {
    ctx: VulkanContext,
    tuning: Tuning,
}

impl VulkanBackend {
    /// Opens the best device with the default [`ContextOptions`] (no
    /// validation layer).
    pub fn new() -> Result<VulkanBackend, VulkanError> {
        VulkanBackend::with_options(ContextOptions::default())
    }

    /// Opens the best device with `options`.
    pub fn with_options(options: ContextOptions) -> Result<VulkanBackend, VulkanError> {
        Ok(VulkanBackend {
            ctx: VulkanContext::new(options)?,
            tuning: Tuning::default(),
        })
    }

    /// The context (device properties, buffers, validation messages).
    pub fn context(&self) -> &VulkanContext {
        &self.ctx
    }

    /// The tuning every later kernel is chosen with.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Chooses every later kernel with `tuning`. Fails, leaving the tuning
    /// as it was, when a shape it sets does not fit the device or a variant
    /// it forces needs what the device lacks.
    pub fn set_tuning(&mut self, tuning: Tuning) -> Result<(), VulkanError> {
        tuning::check(self.ctx.info(), &tuning)?;
        self.tuning = tuning;
        Ok(())
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

    // ------------------------------------------------------------ copy

    /// The device's copy bandwidth, the ceiling the kernels are measured
    /// against: the faster of two device-to-device copies of `bytes` bytes
    /// (rounded down to 16), `vkCmdCopyBuffer` and a compute shader with
    /// 16-byte loads and stores (some drivers' transfer copy is slower), each
    /// the median of `reps` timed runs; bytes read plus bytes written per
    /// second, in GB/s (10^9 bytes). Needs timestamps on the compute queue.
    pub fn copy_bandwidth_gbs(&self, bytes: u64, reps: usize) -> Result<f64, VulkanError> {
        let bytes = bytes / 16 * 16;
        if bytes == 0 {
            return Err(VulkanError::Unsupported(
                "a copy of fewer than 16 bytes".into(),
            ));
        }
        let src = self.ctx.buffer(bytes)?;
        let dst = self.ctx.buffer(bytes)?;
        let transfer = measure::median_time(&self.ctx, &[Command::Copy(&src, &dst)], reps)?;
        let shader = self.copy_dispatch(bytes, &src, &dst)?;
        let shader = measure::median_time(&self.ctx, &[Command::Dispatch(shader)], reps)?;
        Ok(2.0 * bytes as f64 / transfer.min(shader))
    }

    /// The copy shader's dispatch moving `bytes` (a multiple of 16) from
    /// `src` to `dst`.
    pub(crate) fn copy_dispatch<'b>(
        &self,
        bytes: u64,
        src: &'b Buffer<'b>,
        dst: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        if !bytes.is_multiple_of(16) {
            return Err(VulkanError::Unsupported(format!(
                "shader copy of {bytes} bytes: not a multiple of 16"
            )));
        }
        let quads = u32::try_from(bytes / 16).map_err(|_| Error::Overflow {
            what: "shader copy size",
        })?;
        let key = KernelKey {
            shader: Shader::Copy,
            spec: [COPY_WG, COPY_PER_THREAD, 0, 0, 0, 0],
        };
        self.ctx.kernel(key)?;
        Ok(Dispatch {
            kernel: key,
            buffers: vec![src, dst],
            push: quads.to_ne_bytes().to_vec(),
            groups: self.grid(u64::from(quads).div_ceil(u64::from(COPY_WG * COPY_PER_THREAD)))?,
        })
    }

    // ------------------------------------------------------------ FWHT

    /// The FWHT dispatch of `rows` rows from `x` into `out`, shaped per
    /// `tuning` ([`tuning::fwht_plan`]).
    pub(crate) fn fwht_dispatch<'b>(
        &self,
        tuning: &Tuning,
        desc: &FwhtDesc,
        rows: usize,
        x: &'b Buffer<'b>,
        signs: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let plan = tuning::fwht_plan(self.ctx.info(), tuning, desc.n())?;
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
    /// with the variant and launch shape chosen for this device.
    pub fn fwht(
        &self,
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
        let d = self.fwht_dispatch(&self.tuning, desc, x.len() / desc.n(), &xb, &sb, &ob)?;
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

    // ------------------------------------------------------------ RMS norm

    /// The RMS-norm dispatch of `n_cols` columns of `k` values from `x`
    /// into `out` (`rms_norm.comp`, one workgroup a column), times `gamma`
    /// when `weighted`.
    pub(crate) fn rms_norm_dispatch<'b>(
        &self,
        k: usize,
        n_cols: usize,
        eps: f32,
        weighted: bool,
        buffers: [&'b Buffer<'b>; 3],
    ) -> Result<Dispatch<'b>, VulkanError> {
        let elements = k.checked_mul(n_cols).ok_or(Error::Overflow {
            what: "rms_norm elements",
        })?;
        u32_of("rms_norm elements", elements)?;
        let key = KernelKey {
            shader: Shader::RmsNorm,
            spec: [0; SPEC_CONSTANTS],
        };
        self.ctx.kernel(key)?;
        let mut p = Vec::new();
        push(&mut p, u32_of("rms_norm row length", k)?);
        push(&mut p, u32_of("rms_norm columns", n_cols)?);
        push(&mut p, eps.to_bits());
        push(&mut p, u32::from(weighted));
        Ok(Dispatch {
            kernel: key,
            buffers: buffers.to_vec(),
            push: p,
            groups: self.grid(n_cols as u64)?,
        })
    }

    /// `out = rms_norm(x, eps)` per column of `k` values, times `gamma`
    /// (`k` values) where given, in `fused_core::norm`'s reduction order
    /// (the shader's square root and division: within a few ulps).
    pub fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &[f32],
        gamma: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        fused_core::norm::check(k, x.len(), gamma.map(<[f32]>::len), out.len())?;
        if x.is_empty() {
            return Ok(());
        }
        let xb = self.ctx.upload_f32(x)?;
        let gb = self.ctx.upload_f32(gamma.unwrap_or(&[0.0]))?;
        let ob = self.ctx.buffer(core::mem::size_of_val(out) as u64)?;
        let d = self.rms_norm_dispatch(k, x.len() / k, eps, gamma.is_some(), [&xb, &gb, &ob])?;
        self.ctx.submit(&[Command::Dispatch(d)], false)?;
        self.ctx.read_f32(&ob, out)
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

    fn gemv_impl(
        &self,
        job: &GemvJob<'_, WeightMatrix<'_>>,
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        let (w, up) = match job.weights {
            GemvWeights::Plain(w) => (w, None),
            GemvWeights::Gated { gate, up, act } => (gate, Some((up, act))),
        };
        let (x, n_cols, mode) = (job.x, job.n_cols, job.mode);
        let (epilogue, operands) = (&job.epilogue, job.operands);
        let (m, k) = (w.rows(), w.cols());
        if n_cols == 0 || n_cols > MAX_COLS {
            return Err(Error::LengthMismatch {
                what: "GEMV columns (1 to 8)",
                expected: n_cols.clamp(1, MAX_COLS),
                actual: n_cols,
            }
            .into());
        }
        let dtype = gemv_type(w.dtype())?;
        check_mode(dtype, mode)?;
        job.check(y.len())?;
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
            let d = self.quantize_dispatch(&self.tuning, mode, k, n_cols, &xb, q)?;
            commands.push(Command::Dispatch(d));
        }
        let mut buffers = vec![&wb, qb.as_ref().unwrap_or(&xb), &ob, &pb];
        if let Some(u) = &ub {
            buffers.push(u);
        }
        let d = self.gemv_dispatch(
            &self.tuning,
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
    /// [`VulkanBackend::quantize_activations`] returns, shaped per `tuning`.
    pub(crate) fn quantize_dispatch<'b>(
        &self,
        tuning: &Tuning,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
        x: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        self.quantize_norm_dispatch(tuning, mode, k, n_cols, None, x, out)
    }

    /// [`VulkanBackend::quantize_dispatch`], with `norm = Some((eps,
    /// gamma))` of the normed product `(x · s) · gamma` (s the RMS-norm
    /// scale of each column, as [`VulkanBackend::rms_norm`] computes it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn quantize_norm_dispatch<'b>(
        &self,
        tuning: &Tuning,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
        norm: Option<(f32, &'b Buffer<'b>)>,
        x: &'b Buffer<'b>,
        out: &'b Buffer<'b>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        quantized_bytes(mode, k, n_cols)?;
        let format = tuning::quant_format(mode)?;
        let shape = tuning::quantize_shape(tuning, mode);
        tuning::check_quantize_shape(self.ctx.info(), shape, mode)?;
        let QuantizeShape {
            workgroup,
            values_per_thread,
        } = shape;
        let key = KernelKey {
            shader: Shader::Quantize {
                format,
                norm: norm.is_some(),
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
        let mut buffers = vec![x, out];
        if let Some((eps, gamma)) = norm {
            push(&mut p, eps.to_bits());
            buffers.push(gamma);
        }
        Ok(Dispatch {
            kernel: key,
            buffers,
            push: p,
            groups: self.grid((threads as u64).div_ceil(u64::from(workgroup)))?,
        })
    }

    /// `n_cols` columns of `k = x.len() / n_cols` activations quantized on
    /// the device per `mode` (Q8_0, Q8_1 or Q8_K), as the Q8-mode GEMV reads
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
        let mut out = vec![0u32; (bytes / 4) as usize];
        if x.is_empty() {
            return Ok(out);
        }
        let xb = self.ctx.upload_f32(x)?;
        let qb = self.ctx.buffer(bytes)?;
        let d = self.quantize_dispatch(&self.tuning, mode, k, n_cols, &xb, &qb)?;
        self.ctx.submit(&[Command::Dispatch(d)], false)?;
        self.ctx.read(&qb, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// The GEMV dispatch over uploaded buffers (weights, x — quantized per
    /// `mode` by [`VulkanBackend::quantize_dispatch`] unless f32 — y,
    /// operands and, for the gated form, the up weights), its shader and
    /// shape chosen per `tuning` ([`tuning::gemv_shape`],
    /// [`tuning::gemv_shader`]); `chain` is the stage count, the stage words
    /// and the operand offsets.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemv_dispatch<'b>(
        &self,
        tuning: &Tuning,
        dtype: GemvType,
        mode: ActQuant,
        glu_act: Option<Activation>,
        m: usize,
        k: usize,
        n_cols: usize,
        chain: ChainWords,
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let info = self.ctx.info();
        let glu = glu_act.is_some();
        quantized_bytes(mode, k, n_cols)?;
        let shape = tuning::gemv_shape(info, tuning, dtype, mode, n_cols, glu)?;
        let shader = tuning::gemv_shader(info, tuning, dtype, mode, glu, shape);
        let lanes = if mode == ActQuant::F32 {
            0
        } else {
            shape.lanes
        };
        let key = KernelKey {
            shader,
            spec: [
                u32_of("GEMV columns", n_cols)?,
                shape.workgroup,
                shape.rows,
                shape.unroll,
                tuning::gemv_slots(info, shape),
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

    /// `y = epilogue(W · x)`, or the gated `epilogue(act(W_gate·x) ⊙
    /// (W_up·x))`, as `job` says ([`GemvJob`]), for 1 to 8 f32 columns,
    /// with the activations fed per the job's mode: f32 against weights
    /// dequantized in the shader ([`ActQuant::F32`], every format), or
    /// quantized on the device first (once for both weights of a gated job)
    /// as the core does in GGML's mode for the format ([`ActQuant::Q8_0`]
    /// for Q8_0, Q4_0, Q5_0 and IQ4_NL weights, [`ActQuant::Q8_1`] for Q4_1
    /// and Q5_1, [`ActQuant::Q8_K`] for Q4_K, Q5_K, Q6_K and TQ2_0) and
    /// dotted in integers; other pairs are [`fused_core::Error::Unsupported`].
    /// Output column-major (`y[col·M + row]`), as the core's `gemm`.
    pub fn gemv(
        &self,
        job: &GemvJob<'_, WeightMatrix<'_>>,
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.gemv_impl(job, y)
    }
}
