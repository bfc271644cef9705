//! The core's plan executor on Vulkan: [`StepKernels`] for
//! [`VulkanBackend`], through its host-slice entry points (each uploads
//! its inputs, runs one dispatch and reads the result back).
//!
//! `fused_core::exec::Executor::new(&backend, mode).run(&g, &plan, &mut
//! memory)` runs a plan step by step; the GEMV kernels take weights of
//! every core format, 1 to [`MAX_COLS`] columns, with f32 activations
//! ([`ActQuant::F32`], every format) or GGML's quantized activations
//! ([`ActQuant::Q8_0`] for Q8_0, Q4_0, Q5_0 and IQ4_NL weights,
//! [`ActQuant::Q8_1`] for Q4_1 and Q5_1, [`ActQuant::Q8_K`] for Q4_K, Q5_K,
//! Q6_K and TQ2_0, quantized on the
//! device); anything else is refused with
//! [`fused_core::Error::Unsupported`] before the step runs.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::error::Unsupported;
use fused_core::exec::{Counters, StepKernels};
use fused_core::fwht::FwhtDesc;
use fused_core::job::GemvJob;
use fused_core::weights::WeightMatrix;

use crate::backend::VulkanBackend;
use crate::error::VulkanError;
use crate::pipeline::{MAX_COLS, check_mode, gemv_type};

impl StepKernels for VulkanBackend {
    type Error = VulkanError;

    fn supports_gemv(
        &self,
        dtype: DType,
        mode: ActQuant,
        n_cols: usize,
    ) -> Result<(), Unsupported> {
        let Ok(t) = gemv_type(dtype) else {
            return Err(Unsupported::WeightFormat(dtype));
        };
        if check_mode(t, mode).is_err() {
            return Err(Unsupported::WeightActs { dtype, mode });
        }
        if !(1..=MAX_COLS).contains(&n_cols) {
            return Err(Unsupported::Columns {
                max: MAX_COLS,
                actual: n_cols,
            });
        }
        Ok(())
    }

    /// The norm kernel (`rms_norm.comp`) takes every column length the
    /// graph takes; a too-large tensor is refused when it runs.
    fn supports_rms_norm(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn counters(&self) -> Counters {
        let d = self.context().dispatches();
        Counters {
            barriers: d,
            kernel_calls: d,
        }
    }

    fn gemv(&self, job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), VulkanError> {
        let w = job.weights.first();
        self.supports_gemv(w.dtype(), job.mode, job.n_cols)
            .map_err(fused_core::Error::from)?;
        VulkanBackend::gemv(self, job, y)
    }

    fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        VulkanBackend::fwht(self, desc, x, signs, y)
    }

    fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), VulkanError> {
        VulkanBackend::add(self, a, b, y)
    }

    fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), VulkanError> {
        VulkanBackend::mul(self, a, b, y)
    }

    fn glu(
        &self,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        VulkanBackend::glu(self, act, gate, up, y)
    }

    fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), VulkanError> {
        VulkanBackend::unary(self, act, a, y)
    }

    fn add_row_bias(&self, a: &[f32], bias: &[f32], y: &mut [f32]) -> Result<(), VulkanError> {
        VulkanBackend::add_row_bias(self, a, bias, y)
    }

    fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &[f32],
        gamma: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), VulkanError> {
        VulkanBackend::rms_norm(self, k, eps, x, gamma, y)
    }

    /// The identity activation: the element-wise kernel stores its input.
    fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), VulkanError> {
        VulkanBackend::unary(self, Activation::Identity, a, y)
    }
}
