//! The backend when the crate is built without the `cuda` feature: the same
//! public API as the real one, and no value of its types can exist.

use crate::{CudaError, Elementwise, GemvJob, Submission, Tuning};
use core::convert::Infallible;
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::backend::{PlanStats, PlanTiming, ResidentPlan};
use fused_core::element::Activation;
use fused_core::error::Unsupported;
use fused_core::exec::{Counters, StepKernels};
use fused_core::fwht::FwhtDesc;
use fused_core::graph::Graph;
use fused_core::job::GemvJob as CoreGemvJob;
use fused_core::planner::Plan;
use fused_core::tensor::BufferId;
use fused_core::weights::WeightMatrix;
use std::marker::PhantomData;

/// Quantized activations in device memory (none can exist in this build).
#[derive(Debug)]
pub struct DeviceActs {
    #[allow(dead_code)]
    never: Infallible,
}

/// An f32 vector in device memory (none can exist in this build).
#[derive(Debug)]
pub struct DeviceVec {
    never: Infallible,
}

impl DeviceVec {
    /// Number of f32 elements.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }
}

/// A weight matrix in device memory (none can exist in this build).
#[derive(Debug)]
pub struct DeviceWeights {
    never: Infallible,
}

impl DeviceWeights {
    /// Output rows `M`.
    pub fn rows(&self) -> usize {
        match self.never {}
    }

    /// Inner dimension `K`.
    pub fn cols(&self) -> usize {
        match self.never {}
    }
}

/// The CUDA backend. This build has no `cuda` feature: [`CudaBackend::new`]
/// always fails with [`CudaError::NotCompiled`].
#[derive(Debug)]
pub struct CudaBackend {
    never: Infallible,
}

#[allow(clippy::too_many_arguments, missing_docs)]
impl CudaBackend {
    /// Opens the first CUDA device. In this build: always
    /// `Err(CudaError::NotCompiled)`.
    pub fn new() -> Result<CudaBackend, CudaError> {
        Err(CudaError::NotCompiled)
    }
    pub fn tuning(&self) -> Tuning {
        match self.never {}
    }
    pub fn set_tuning(&self, _tuning: Tuning) {
        match self.never {}
    }
    pub fn synchronize(&self) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn upload(&self, _data: &[f32]) -> Result<DeviceVec, CudaError> {
        match self.never {}
    }
    pub fn alloc(&self, _len: usize) -> Result<DeviceVec, CudaError> {
        match self.never {}
    }
    pub fn download(&self, _v: &DeviceVec, _out: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn upload_weights(&self, _w: &WeightMatrix<'_>) -> Result<DeviceWeights, CudaError> {
        match self.never {}
    }
    pub fn gemv_batch(
        &self,
        _x: &DeviceVec,
        _n_cols: usize,
        _mode: ActQuant,
        _jobs: &mut [GemvJob<'_>],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn quantize_acts(
        &self,
        _mode: ActQuant,
        _x: &DeviceVec,
        _n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        match self.never {}
    }
    pub fn gemv_quantized_batch(
        &self,
        _acts: &DeviceActs,
        _jobs: &mut [GemvJob<'_>],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn fwht(
        &self,
        _desc: &FwhtDesc,
        _x: &DeviceVec,
        _signs: Option<&DeviceVec>,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn rms_norm(
        &self,
        _k: usize,
        _eps: f32,
        _x: &DeviceVec,
        _gamma: Option<&DeviceVec>,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn elementwise(&self, _op: Elementwise<'_>, _out: &mut DeviceVec) -> Result<(), CudaError> {
        match self.never {}
    }
    pub(crate) fn device_name(&self) -> String {
        match self.never {}
    }
    pub fn copy_bandwidth_gbs(&self, _bytes: usize, _reps: usize) -> Result<f64, CudaError> {
        match self.never {}
    }
}

/// The core's plan executor over host slices: no backend exists in this
/// build to run it on.
impl StepKernels for CudaBackend {
    type Error = CudaError;

    fn supports_gemv(&self, _dtype: DType, _mode: ActQuant, _n: usize) -> Result<(), Unsupported> {
        match self.never {}
    }
    fn counters(&self) -> Counters {
        match self.never {}
    }
    fn gemv(
        &self,
        _job: &CoreGemvJob<'_, WeightMatrix<'_>>,
        _y: &mut [f32],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    fn fwht(
        &self,
        _desc: &FwhtDesc,
        _x: &[f32],
        _signs: Option<&[f32]>,
        _y: &mut [f32],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    fn add(&self, _a: &[f32], _b: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn mul(&self, _a: &[f32], _b: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn glu(
        &self,
        _act: Activation,
        _g: &[f32],
        _u: &[f32],
        _y: &mut [f32],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    fn unary(&self, _act: Activation, _a: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn add_row_bias(&self, _a: &[f32], _bias: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn copy(&self, _a: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
}

/// A plan built for the device with its buffers. This build has no `cuda`
/// feature: no [`CudaBackend`] exists to build one on, so none can exist.
#[derive(Debug)]
pub struct DevicePlan<'a> {
    never: Infallible,
    backend: PhantomData<&'a CudaBackend>,
}

#[allow(missing_docs)]
impl<'a> DevicePlan<'a> {
    /// Builds `plan` for `backend` (which cannot exist in this build).
    pub fn new(
        backend: &'a CudaBackend,
        _g: &Graph,
        _plan: &Plan,
        _mode: GemvMode,
        _sizes: &[usize],
    ) -> Result<DevicePlan<'a>, CudaError> {
        match backend.never {}
    }
    pub fn run_as(&self, _how: Submission) -> Result<(), CudaError> {
        let _ = self.backend;
        match self.never {}
    }
    pub fn capture_graph(&mut self) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn time_once_as(&self, _how: Submission) -> Result<PlanTiming, CudaError> {
        match self.never {}
    }
}

impl ResidentPlan for DevicePlan<'_> {
    type Error = CudaError;
    fn buffer_sizes(&self) -> &[usize] {
        match self.never {}
    }
    fn write(&mut self, _id: BufferId, _offset: usize, _bytes: &[u8]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn read(&self, _id: BufferId, _offset: usize, _out: &mut [u8]) -> Result<(), CudaError> {
        match self.never {}
    }
    fn run(&mut self) -> Result<(), CudaError> {
        match self.never {}
    }
    fn restore_inputs(&mut self) -> Result<(), CudaError> {
        match self.never {}
    }
    fn time_once(&mut self) -> Result<PlanTiming, CudaError> {
        match self.never {}
    }
    fn stats(&self) -> PlanStats {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_says_not_compiled() {
        assert_eq!(CudaBackend::new().unwrap_err(), CudaError::NotCompiled);
        const { assert!(!crate::CUDA_ENABLED) };
    }
}
