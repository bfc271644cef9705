//! What the shaders are: the committed SPIR-V modules, the weight and
//! activation formats they read, the keys (module and specialization
//! constants) that name a compute pipeline, and how a pipeline is built.
//! The cache of built pipelines is the context's ([`crate::context`]).

use ash::vk;
use fused_core::acts::ActQuant;
use fused_core::error::Unsupported;
use fused_core::{DType, Error};

use crate::error::VulkanError;

/// The most activation columns one GEMV call takes.
pub const MAX_COLS: usize = 8;

/// A SPIR-V module of `fused-vulkan/spirv/` (built from `shaders/` by
/// `shaders/build-spirv.sh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shader {
    /// A buffer copy in 16-byte words (`copy.comp`), for the bench.
    Copy,
    /// Unfused element-wise kernels (`eltwise.comp`).
    Eltwise,
    /// RMS normalisation, one workgroup per column (`rms_norm.comp`).
    RmsNorm,
    /// RoPE at a position read from memory, one invocation per pair
    /// (`rope.comp`).
    Rope,
    /// The row write at a position read from memory (`set_row.comp`).
    SetRow,
    /// The fused key/value append: RoPE of q and k, k's written into its
    /// cache row, v copied into its own (`kv_append.comp`).
    KvAppend,
    /// Attention of one query token, a workgroup per key/value head (or
    /// part of its query heads) and context split, one invocation a row
    /// for the scores (`attention.comp`).
    Attention,
    /// Attention with eight lanes a row for the scores, their partial sums
    /// joined by subgroup shuffles (`attention.comp -DSHUFFLE`).
    AttentionShuffle,
    /// The split pass also doing the key/value append before it
    /// (`attention.comp -DAPPEND`), one invocation a row.
    AttentionAppend,
    /// The same with eight lanes a row (`-DSHUFFLE -DAPPEND`).
    AttentionShuffleAppend,
    /// The pass joining attention's splits (`attention.comp -DCOMBINE`).
    AttentionCombine,
    /// The joining pass that also writes its output as the next GEMV's
    /// Q8_0 activations (`attention.comp -DCOMBINE -DQUANT`).
    AttentionCombineQ8_0,
    /// The same with Q8_1 activations (`-DQ8_1` too).
    AttentionCombineQ8_1,
    /// Argmax per column, whole or in splits and their join (`argmax.comp`).
    ArgMax,
    /// The L2 look-ahead: reads a window of the next GEMV's weights beside
    /// a small kernel and drops it (`l2_touch.comp`).
    L2Touch,
    /// FWHT exchanging through shared memory only.
    FwhtShared,
    /// FWHT with subgroup shuffles for half-widths below the subgroup size.
    FwhtShuffle,
    /// GEMV for one weight format (`gemv.comp` for F32, F16 and BF16,
    /// `gemv_quant.comp` for the quantized formats), plain or gated (GLU),
    /// reducing through subgroup arithmetic or a shared-memory tree.
    Gemv {
        /// The weight format.
        dtype: GemvType,
        /// The gated dual form.
        glu: bool,
        /// `subgroupAdd` (needs subgroup arithmetic in compute shaders).
        subgroup: bool,
        /// 16-bit weight loads (Q8_0 and Q4_0 only; needs
        /// `storageBuffer16BitAccess`).
        storage16: bool,
    },
    /// The activation quantizer of the Q8 mode (`quantize.comp`).
    Quantize {
        /// The activation format it writes.
        format: QuantFormat,
        /// With the RMS-norm prologue (`-DNORM`): quantizes `(x · s) · g`
        /// (a third binding, the weight `g`, and `eps` in the push
        /// constants).
        norm: bool,
    },
    /// GEMV against quantized activations (`gemv_q8.comp`: Q8_0 and Q4_0
    /// weights with Q8_0 activations, Q4_K with Q8_K; `gemv_blocks.comp`
    /// with `Q8`: Q4_1 and Q5_1 with Q8_1, Q5_0 and IQ4_NL with Q8_0, Q5_K,
    /// Q6_K and TQ2_0 with Q8_K).
    GemvQ8 {
        /// The weight format (any but F32, F16 and BF16).
        dtype: GemvType,
        /// The gated dual form.
        glu: bool,
        /// `subgroupAdd` reduction and lanes sharing a block through
        /// shuffles (needs subgroup arithmetic and shuffles).
        subgroup: bool,
        /// 16-bit weight loads (Q8_0 and Q4_0 only).
        storage16: bool,
        /// Integer dot products (`shaderIntegerDotProduct`).
        dot: bool,
    },
}

/// The activation formats `quantize.comp` writes (GGML's, the core's
/// [`ActQuant`] modes but F32).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum QuantFormat {
    /// 32-value blocks, an f16 scale.
    Q8_0,
    /// 32-value blocks, an f16 scale and the f16 scaled code sum.
    Q8_1,
    /// 256-value blocks, an f32 scale and the code sums of 32 values.
    Q8_K,
}

impl QuantFormat {
    /// The format of `mode`; `None` for f32 activations.
    pub(crate) fn of(mode: ActQuant) -> Option<QuantFormat> {
        match mode {
            ActQuant::F32 => None,
            ActQuant::Q8_0 => Some(QuantFormat::Q8_0),
            ActQuant::Q8_1 => Some(QuantFormat::Q8_1),
            ActQuant::Q8_K => Some(QuantFormat::Q8_K),
        }
    }

    /// Values per block.
    pub(crate) fn block(self) -> usize {
        match self {
            QuantFormat::Q8_0 | QuantFormat::Q8_1 => 32,
            QuantFormat::Q8_K => 256,
        }
    }
}

/// The weight formats the GEMV shaders read (named as GGML names them).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum GemvType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_K,
    // `gemv_blocks.comp`, f32 activations only:
    Q4_1,
    Q5_0,
    Q5_1,
    IQ4_NL,
    Q5_K,
    Q6_K,
    TQ2_0,
}

impl GemvType {
    /// The weight format.
    pub(crate) const fn dtype(self) -> DType {
        match self {
            GemvType::F32 => DType::F32,
            GemvType::F16 => DType::F16,
            GemvType::BF16 => DType::BF16,
            GemvType::Q8_0 => DType::Q8_0,
            GemvType::Q4_0 => DType::Q4_0,
            GemvType::Q4_K => DType::Q4_K,
            GemvType::Q4_1 => DType::Q4_1,
            GemvType::Q5_0 => DType::Q5_0,
            GemvType::Q5_1 => DType::Q5_1,
            GemvType::IQ4_NL => DType::IQ4_NL,
            GemvType::Q5_K => DType::Q5_K,
            GemvType::Q6_K => DType::Q6_K,
            GemvType::TQ2_0 => DType::TQ2_0,
        }
    }
}

impl Shader {
    fn spirv(self) -> &'static [u8] {
        macro_rules! spv {
            ($name:expr) => {
                include_bytes!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/spirv/",
                    $name,
                    ".spv"
                ))
            };
        }
        match self {
            Shader::Copy => spv!("copy"),
            Shader::Eltwise => spv!("eltwise"),
            Shader::RmsNorm => spv!("rms_norm"),
            Shader::Rope => spv!("rope"),
            Shader::SetRow => spv!("set_row"),
            Shader::KvAppend => spv!("kv_append"),
            Shader::Attention => spv!("attention"),
            Shader::AttentionShuffle => spv!("attention_shuffle"),
            Shader::AttentionAppend => spv!("attention_append"),
            Shader::AttentionShuffleAppend => spv!("attention_shuffle_append"),
            Shader::AttentionCombine => spv!("attention_combine"),
            Shader::AttentionCombineQ8_0 => spv!("attention_combine_q8_0"),
            Shader::AttentionCombineQ8_1 => spv!("attention_combine_q8_1"),
            Shader::ArgMax => spv!("argmax"),
            Shader::L2Touch => spv!("l2_touch"),
            Shader::FwhtShared => spv!("fwht_shared"),
            Shader::FwhtShuffle => spv!("fwht_shuffle"),
            Shader::Gemv {
                dtype,
                glu,
                subgroup,
                storage16,
            } => {
                // [glu][subgroup] for one weight format.
                let pick = |v: [[&'static [u8]; 2]; 2]| v[usize::from(glu)][usize::from(subgroup)];
                macro_rules! gemv {
                    ($t:literal) => {
                        pick([
                            [spv!(concat!("gemv_", $t)), spv!(concat!("gemv_sg_", $t))],
                            [
                                spv!(concat!("gemv_glu_", $t)),
                                spv!(concat!("gemv_sg_glu_", $t)),
                            ],
                        ])
                    };
                }
                match (dtype, storage16) {
                    (GemvType::F32, _) => gemv!("f32"),
                    (GemvType::F16, _) => gemv!("f16"),
                    (GemvType::BF16, _) => gemv!("bf16"),
                    (GemvType::Q8_0, false) => gemv!("q8_0"),
                    (GemvType::Q8_0, true) => gemv!("q8_0_s16"),
                    (GemvType::Q4_0, false) => gemv!("q4_0"),
                    (GemvType::Q4_0, true) => gemv!("q4_0_s16"),
                    (GemvType::Q4_K, _) => gemv!("q4_k"),
                    (GemvType::Q4_1, _) => gemv!("q4_1"),
                    (GemvType::Q5_0, _) => gemv!("q5_0"),
                    (GemvType::Q5_1, _) => gemv!("q5_1"),
                    (GemvType::IQ4_NL, _) => gemv!("iq4_nl"),
                    (GemvType::Q5_K, _) => gemv!("q5_k"),
                    (GemvType::Q6_K, _) => gemv!("q6_k"),
                    (GemvType::TQ2_0, _) => gemv!("tq2_0"),
                }
            }
            Shader::Quantize { format, norm } => match (format, norm) {
                (QuantFormat::Q8_0, false) => spv!("quantize_q8_0"),
                (QuantFormat::Q8_1, false) => spv!("quantize_q8_1"),
                (QuantFormat::Q8_K, false) => spv!("quantize_q8_k"),
                (QuantFormat::Q8_0, true) => spv!("quantize_norm_q8_0"),
                (QuantFormat::Q8_1, true) => spv!("quantize_norm_q8_1"),
                (QuantFormat::Q8_K, true) => spv!("quantize_norm_q8_k"),
            },
            Shader::GemvQ8 {
                dtype,
                glu,
                subgroup,
                storage16,
                dot,
            } => {
                // [glu][subgroup][dot] for one weight format.
                let pick = |v: [[[&'static [u8]; 2]; 2]; 2]| {
                    v[usize::from(glu)][usize::from(subgroup)][usize::from(dot)]
                };
                macro_rules! q8 {
                    ($t:literal) => {
                        pick([
                            [
                                [
                                    spv!(concat!("gemv_q8_", $t)),
                                    spv!(concat!("gemv_q8_dot_", $t)),
                                ],
                                [
                                    spv!(concat!("gemv_q8_sg_", $t)),
                                    spv!(concat!("gemv_q8_sg_dot_", $t)),
                                ],
                            ],
                            [
                                [
                                    spv!(concat!("gemv_q8_glu_", $t)),
                                    spv!(concat!("gemv_q8_glu_dot_", $t)),
                                ],
                                [
                                    spv!(concat!("gemv_q8_glu_sg_", $t)),
                                    spv!(concat!("gemv_q8_glu_sg_dot_", $t)),
                                ],
                            ],
                        ])
                    };
                }
                match (dtype, storage16) {
                    (GemvType::Q8_0, false) => q8!("q8_0"),
                    (GemvType::Q8_0, true) => q8!("q8_0_s16"),
                    (GemvType::Q4_0, false) => q8!("q4_0"),
                    (GemvType::Q4_0, true) => q8!("q4_0_s16"),
                    (GemvType::Q4_K, _) => q8!("q4_k"),
                    (GemvType::Q4_1, _) => q8!("q4_1"),
                    (GemvType::Q5_1, _) => q8!("q5_1"),
                    (GemvType::Q5_0, _) => q8!("q5_0"),
                    (GemvType::IQ4_NL, _) => q8!("iq4_nl"),
                    (GemvType::Q5_K, _) => q8!("q5_k"),
                    (GemvType::Q6_K, _) => q8!("q6_k"),
                    (GemvType::TQ2_0, _) => q8!("tq2_0"),
                    // F32, F16 and BF16 have no Q8-mode shader (check_mode
                    // refuses them before a key is built).
                    (_, _) => q8!("q4_k"),
                }
            }
        }
    }

    /// Storage buffers, bound 0, 1, ... in this order.
    fn bindings(self) -> u32 {
        match self {
            Shader::Copy | Shader::ArgMax | Shader::L2Touch => 2,
            Shader::AttentionCombine => 3,
            Shader::AttentionCombineQ8_0 | Shader::AttentionCombineQ8_1 => 4,
            Shader::Rope | Shader::SetRow => 4,
            Shader::KvAppend => 8,
            Shader::Attention | Shader::AttentionShuffle => 5,
            Shader::AttentionAppend | Shader::AttentionShuffleAppend => 9,
            Shader::Eltwise | Shader::RmsNorm | Shader::FwhtShared | Shader::FwhtShuffle => 3,
            Shader::Gemv { glu: false, .. } => 4,
            Shader::Gemv { glu: true, .. } => 5,
            Shader::Quantize { norm: false, .. } => 2,
            Shader::Quantize { norm: true, .. } => 3,
            Shader::GemvQ8 { glu: false, .. } => 4,
            Shader::GemvQ8 { glu: true, .. } => 5,
        }
    }

    /// Push-constant bytes.
    fn push_bytes(self) -> u32 {
        match self {
            Shader::Copy => 4,
            Shader::L2Touch => 8,
            Shader::Eltwise => 20,
            Shader::RmsNorm => 16,
            Shader::Rope => 32,
            Shader::KvAppend => 64,
            Shader::SetRow | Shader::ArgMax => 28,
            Shader::Attention | Shader::AttentionShuffle => 56,
            Shader::AttentionAppend | Shader::AttentionShuffleAppend => 84,
            Shader::AttentionCombine
            | Shader::AttentionCombineQ8_0
            | Shader::AttentionCombineQ8_1 => 24,
            Shader::FwhtShared | Shader::FwhtShuffle => 12,
            Shader::Gemv { .. } | Shader::GemvQ8 { .. } => 80,
            Shader::Quantize { norm: false, .. } => 8,
            Shader::Quantize { norm: true, .. } => 12,
        }
    }
}

/// The number of specialization constants a kernel key carries.
pub(crate) const SPEC_CONSTANTS: usize = 6;

/// A module with its specialization constants (`constant_id` 0, 1, ...;
/// modules with fewer ignore the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey {
    pub shader: Shader,
    pub spec: [u32; SPEC_CONSTANTS],
}

/// A compute pipeline and its layouts.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub pipeline: vk::Pipeline,
    pub layout: vk::PipelineLayout,
    pub set_layout: vk::DescriptorSetLayout,
}

impl Kernel {
    /// Destroys the pipeline and its layouts.
    ///
    /// # Safety
    /// The device is idle and the handles are not used again.
    pub(crate) unsafe fn destroy(self, device: &ash::Device) {
        // SAFETY: guaranteed by the caller.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

/// Builds the compute pipeline of `key` on `d`.
pub(crate) fn build(d: &ash::Device, key: KernelKey) -> Result<Kernel, VulkanError> {
    let words = ash::util::read_spv(&mut std::io::Cursor::new(key.shader.spirv()))
        .map_err(|_| VulkanError::Unsupported("malformed SPIR-V".into()))?;
    let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..key.shader.bindings())
        .map(|b| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(b)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let ranges = [vk::PushConstantRange {
        stage_flags: vk::ShaderStageFlags::COMPUTE,
        offset: 0,
        size: key.shader.push_bytes(),
    }];
    let entries: Vec<vk::SpecializationMapEntry> = (0..SPEC_CONSTANTS as u32)
        .map(|i| vk::SpecializationMapEntry {
            constant_id: i,
            offset: 4 * i,
            size: 4,
        })
        .collect();
    let spec_data: &[u8] = bytemuck::cast_slice(&key.spec);
    let spec = vk::SpecializationInfo::default()
        .map_entries(&entries)
        .data(spec_data);
    // SAFETY: every create info below is valid and refers to live locals;
    // partially built objects are destroyed on the error paths.
    unsafe {
        let module = d
            .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
            .map_err(VulkanError::vk("vkCreateShaderModule"))?;
        let set_layout = match d.create_descriptor_set_layout(
            &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
            None,
        ) {
            Ok(l) => l,
            Err(e) => {
                d.destroy_shader_module(module, None);
                return Err(VulkanError::vk("vkCreateDescriptorSetLayout")(e));
            }
        };
        let set_layouts = [set_layout];
        let layout = match d.create_pipeline_layout(
            &vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(&ranges),
            None,
        ) {
            Ok(l) => l,
            Err(e) => {
                d.destroy_descriptor_set_layout(set_layout, None);
                d.destroy_shader_module(module, None);
                return Err(VulkanError::vk("vkCreatePipelineLayout")(e));
            }
        };
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main")
            .specialization_info(&spec);
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout);
        let pipeline = d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
        d.destroy_shader_module(module, None);
        match pipeline {
            Ok(p) => Ok(Kernel {
                pipeline: p[0],
                layout,
                set_layout,
            }),
            Err((_, e)) => {
                d.destroy_pipeline_layout(layout, None);
                d.destroy_descriptor_set_layout(set_layout, None);
                Err(VulkanError::vk("vkCreateComputePipelines")(e))
            }
        }
    }
}

/// The GEMV shader family of `d` weights.
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
pub(crate) fn units_per_block(dtype: GemvType) -> u32 {
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

/// `v` as a 32-bit push constant or launch parameter.
pub(crate) fn u32_of(what: &'static str, v: usize) -> Result<u32, Error> {
    u32::try_from(v).map_err(|_| Error::Overflow { what })
}
