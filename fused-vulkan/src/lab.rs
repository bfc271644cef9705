//! The lab's handles on the product types (feature `lab`): every tuning
//! knob, the chosen shapes, the device's limits, and timed plan runs, for
//! tests and the bench. The device-timed kernels are in [`crate::timing`].

use ash::vk;
use fused_core::DType;
use fused_core::acts::ActQuant;

use crate::backend::VulkanBackend;
use crate::context::DeviceInfo;
use crate::error::VulkanError;
use crate::pipeline::gemv_type;
use fused_core::backend::PlanTiming;

use crate::plan_exec::DevicePlan;
use crate::tuning::{self, FwhtPlan, FwhtVariant, GemvShape, QuantizeShape, Tuning};

impl Tuning {
    /// One GEMV shape for every format, mode and column count (`None`: the
    /// table's shapes).
    pub fn with_gemv_shape(self, shape: Option<GemvShape>) -> Tuning {
        Tuning {
            gemv_shape: shape,
            ..self
        }
    }

    /// Attention's scores with eight lanes a row joined by subgroup
    /// shuffles where the device has them (`true`, the default), or one
    /// invocation a row (`false`; the same order of additions).
    pub fn with_attention_shuffle(self, on: bool) -> Tuning {
        Tuning {
            attention_shuffle: on,
            ..self
        }
    }

    /// The attention's joining pass writes its output as the next GEMV's
    /// Q8_0 activations (`true`, the default), or a quantizer dispatch does
    /// (`false`; the same bits).
    pub fn with_fold_attention_quantizer(self, on: bool) -> Tuning {
        Tuning {
            fold_attention_quantizer: on,
            ..self
        }
    }

    /// Attention's split pass does the key/value append recorded just
    /// before it (`true`, the default), or the append keeps its own
    /// dispatch (`false`; the same bits).
    pub fn with_append_in_attention(self, on: bool) -> Tuning {
        Tuning {
            append_in_attention: on,
            ..self
        }
    }

    /// The workgroups the attention splits of a long context aim at (256,
    /// the default; a split keeps 32 to 256 rows whatever the aim). Other
    /// split counts sum in another order: the same result within
    /// attention's tolerance, not the same bits.
    pub fn with_attention_workgroups(self, workgroups: usize) -> Tuning {
        Tuning {
            attention_workgroups: workgroups,
            ..self
        }
    }

    /// Bytes of the next GEMV's weights the device plan reads into L2
    /// beside each small kernel between two GEMVs (0: none; the same bits
    /// either way).
    pub fn with_l2_between(self, bytes: u64) -> Tuning {
        Tuning {
            l2_between: bytes,
            ..self
        }
    }

    /// How many GEMVs ahead the look-ahead may read once the next GEMV's
    /// weights are all read ahead (1: the next only, the default; the
    /// same bits either way).
    pub fn with_l2_reach(self, reach: usize) -> Tuning {
        Tuning {
            l2_reach: reach,
            ..self
        }
    }

    /// The FWHT variant (`None`: shuffles where the device has them).
    pub fn with_fwht_variant(self, variant: Option<FwhtVariant>) -> Tuning {
        Tuning {
            fwht_variant: variant,
            ..self
        }
    }

    /// The FWHT launch shape: `values_per_thread` values a thread and at
    /// least `min_workgroup` threads a workgroup (powers of two; the
    /// device's limits still apply), each workgroup transforming `slabs`
    /// (1 to [`tuning::FWHT_MAX_SLABS`]) slabs of rows in turn.
    pub fn with_fwht_shape(self, values_per_thread: u32, min_workgroup: u32, slabs: u32) -> Tuning {
        Tuning {
            fwht_values_per_thread: values_per_thread,
            fwht_min_workgroup: min_workgroup,
            fwht_slabs: slabs,
            ..self
        }
    }

    /// The activation quantizer's launch shape for `mode` (Q8_0's for
    /// f32, which has no quantizer).
    pub fn quantize_shape(&self, mode: ActQuant) -> QuantizeShape {
        tuning::quantize_shape(self, mode)
    }

    /// The activation quantizer's launch shape for `mode` (Q8_0, Q8_1 or
    /// Q8_K; f32 has no quantizer and is left alone).
    pub fn with_quantize_shape(self, mode: ActQuant, shape: QuantizeShape) -> Tuning {
        let mut t = self;
        match mode {
            ActQuant::Q8_0 => t.quantize_q8_0 = shape,
            ActQuant::Q8_1 => t.quantize_q8_1 = shape,
            ActQuant::Q8_K => t.quantize_q8_k = shape,
            ActQuant::F32 => {}
        }
        t
    }
}

impl VulkanBackend {
    /// The GEMV shape chosen for `dtype` weights, activations fed per
    /// `mode`, and `n_cols` columns, plain or gated (`glu`).
    pub fn gemv_shape(
        &self,
        dtype: DType,
        mode: ActQuant,
        n_cols: usize,
        glu: bool,
    ) -> Result<GemvShape, VulkanError> {
        let t = gemv_type(dtype)?;
        tuning::gemv_shape(self.context().info(), &self.tuning(), t, mode, n_cols, glu)
    }

    /// The FWHT launch shape chosen for block size `n`.
    pub fn fwht_plan(&self, n: usize) -> Result<FwhtPlan, VulkanError> {
        tuning::fwht_plan(self.context().info(), &self.tuning(), n)
    }
}

impl DeviceInfo {
    /// Vulkan API version.
    pub fn api_version(&self) -> u32 {
        self.api_version
    }

    /// Subgroup operations supported in compute shaders (empty when the
    /// compute stage has no subgroup support).
    pub fn subgroup_ops(&self) -> vk::SubgroupFeatureFlags {
        self.subgroup_ops
    }

    /// `maxComputeWorkGroupInvocations`.
    pub fn max_invocations(&self) -> u32 {
        self.max_invocations
    }

    /// `maxComputeSharedMemorySize` in bytes.
    pub fn max_shared_bytes(&self) -> u32 {
        self.max_shared_bytes
    }

    /// `maxStorageBufferRange` in bytes.
    pub fn max_storage_range(&self) -> u32 {
        self.max_storage_range
    }

    /// Whether buffers live in host-visible memory (otherwise they are
    /// device local and reached through staging copies).
    pub fn host_visible_buffers(&self) -> bool {
        self.host_visible_buffers
    }

    /// Whether shaders may read storage buffers as 16-bit words.
    pub fn storage_16bit(&self) -> bool {
        self.storage_16bit
    }

    /// Whether shaders may use integer dot products.
    pub fn integer_dot(&self) -> bool {
        self.integer_dot
    }
}

impl DevicePlan<'_> {
    /// Runs the plan `reps` times, each run starting from the written
    /// inputs (restored before it, not timed), after one untimed warm-up
    /// run.
    pub fn run_timed(&self, reps: usize) -> Result<Vec<PlanTiming>, VulkanError> {
        self.restore()?;
        self.run_now()?;
        (0..reps).map(|_| self.timed_run()).collect()
    }
}
