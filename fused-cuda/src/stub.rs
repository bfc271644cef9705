//! The backend when the crate is built without the `cuda` feature: the same
//! public API as the real one, and no value of its types can exist.

use crate::{
    CudaError, DevicePlanStats, FixedEpilogueCopy, GemvJob, GemvTimeline, KernelForm,
    LaunchOptions, QuantizedActs, Submission, TeamKernel,
};
use core::convert::Infallible;
use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::exec::Buffers;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_core::reference::eval::GemvMode;
use fused_core::reference::gemv::GluWeights;
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_core::tensor::{BufferId, TensorDesc};
use std::marker::PhantomData;

/// A CUDA device, its context, stream and loaded kernels.
///
/// This build has no `cuda` feature: [`CudaDevice::new`] always fails with
/// [`CudaError::NotCompiled`], and no `CudaDevice` can be constructed.
#[derive(Debug)]
pub struct CudaDevice {
    never: Infallible,
}

impl CudaDevice {
    /// Opens the first CUDA device. In this build: always
    /// `Err(CudaError::NotCompiled)`.
    pub fn new() -> Result<CudaDevice, CudaError> {
        Err(CudaError::NotCompiled)
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> &str {
        match self.never {}
    }

    /// The compute capability, `(major, minor)`.
    pub fn capability(&self) -> (i32, i32) {
        match self.never {}
    }

    /// Which compiled form of the kernels runs.
    pub fn kernel_form(&self) -> KernelForm {
        match self.never {}
    }

    /// Runs the probe kernel: `y[i] = a·x[i] + y[i]` (one fused multiply-add).
    pub fn probe_axpy(&self, _a: f32, _x: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }

    /// Runs a chain of handoff kernels (`src/handoff.rs`).
    pub fn handoff_chain(
        &self,
        _handoff: crate::Handoff,
        _kernels: usize,
        _input: &[u32],
        _head_start_cycles: u64,
    ) -> Result<crate::HandoffRun, CudaError> {
        match self.never {}
    }
}

/// Quantized activations in device memory (none can exist in this build).
#[derive(Debug)]
pub struct DeviceActs {
    never: Infallible,
}

impl DeviceActs {
    /// The activation mode.
    pub fn mode(&self) -> ActQuant {
        match self.never {}
    }
    /// Elements per column.
    pub fn k(&self) -> usize {
        match self.never {}
    }
    /// Columns.
    pub fn n_cols(&self) -> usize {
        match self.never {}
    }
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
    /// The format.
    pub fn dtype(&self) -> DType {
        match self.never {}
    }

    /// Output rows `M`.
    pub fn rows(&self) -> usize {
        match self.never {}
    }

    /// Inner dimension `K`.
    pub fn cols(&self) -> usize {
        match self.never {}
    }

    /// Bytes in device memory.
    pub fn bytes(&self) -> usize {
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
    pub fn device(&self) -> &CudaDevice {
        match self.never {}
    }
    pub fn launches(&self) -> u64 {
        match self.never {}
    }
    pub fn reset_launches(&self) {
        match self.never {}
    }
    pub fn options(&self) -> LaunchOptions {
        match self.never {}
    }
    pub fn set_options(&self, _options: LaunchOptions) {
        match self.never {}
    }
    pub fn fixed_epilogue_copies(&self) -> &[FixedEpilogueCopy] {
        match self.never {}
    }
    pub fn team_kernels(&self) -> &[TeamKernel] {
        match self.never {}
    }
    pub fn trace_gemv_chain(
        &self,
        _weights: &[&DeviceWeights],
        _acts: &DeviceActs,
        _l2_ahead: usize,
        _y: &mut DeviceVec,
    ) -> Result<GemvTimeline, CudaError> {
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
    pub fn gemv(
        &self,
        _w: &DeviceWeights,
        _x: &DeviceVec,
        _n_cols: usize,
        _mode: ActQuant,
        _epilogue: &Epilogue,
        _operands: &[&DeviceVec],
        _y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn gemv_glu(
        &self,
        _gate: &DeviceWeights,
        _up: &DeviceWeights,
        _act: Activation,
        _x: &DeviceVec,
        _n_cols: usize,
        _mode: ActQuant,
        _epilogue: &Epilogue,
        _operands: &[&DeviceVec],
        _y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
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
    pub fn alloc_acts(
        &self,
        _mode: ActQuant,
        _k: usize,
        _n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        match self.never {}
    }
    pub fn download_acts(&self, _acts: &DeviceActs) -> Result<QuantizedActs, CudaError> {
        match self.never {}
    }
    pub fn gemv_quantized(
        &self,
        _w: &DeviceWeights,
        _acts: &DeviceActs,
        _epilogue: &Epilogue,
        _operands: &[&DeviceVec],
        _y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu_quantized(
        &self,
        _gate: &DeviceWeights,
        _up: &DeviceWeights,
        _act: Activation,
        _acts: &DeviceActs,
        _epilogue: &Epilogue,
        _operands: &[&DeviceVec],
        _y: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn gemv_quantized_batch(
        &self,
        _acts: &DeviceActs,
        _jobs: &mut [GemvJob<'_>],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn gemv_host(
        &self,
        _w: &WeightMatrix<'_>,
        _x: &[f32],
        _n_cols: usize,
        _mode: ActQuant,
        _epilogue: &Epilogue,
        _operands: &[&[f32]],
        _y: &mut [f32],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn gemv_glu_host(
        &self,
        _w: &GluWeights<'_>,
        _act: Activation,
        _x: &[f32],
        _n_cols: usize,
        _mode: ActQuant,
        _epilogue: &Epilogue,
        _operands: &[&[f32]],
        _y: &mut [f32],
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
    pub fn fwht_host(
        &self,
        _desc: &FwhtDesc,
        _x: &[f32],
        _signs: Option<&[f32]>,
        _out: &mut [f32],
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn add(
        &self,
        _a: &DeviceVec,
        _b: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn mul(
        &self,
        _a: &DeviceVec,
        _b: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn mul_cyclic(
        &self,
        _a: &DeviceVec,
        _b: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn unary(
        &self,
        _act: Activation,
        _a: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn glu(
        &self,
        _act: Activation,
        _gate: &DeviceVec,
        _up: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn add_row_bias(
        &self,
        _a: &DeviceVec,
        _bias: &DeviceVec,
        _out: &mut DeviceVec,
    ) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn copy(&self, _a: &DeviceVec, _out: &mut DeviceVec) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn copy_kernel(&self, _a: &DeviceVec, _out: &mut DeviceVec) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn time_ms(&self, _f: impl FnOnce() -> Result<(), CudaError>) -> Result<f32, CudaError> {
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
    pub fn stats(&self) -> DevicePlanStats {
        let _ = self.backend;
        match self.never {}
    }
    pub fn n_buffers(&self) -> usize {
        match self.never {}
    }
    pub fn has_graph(&self) -> bool {
        match self.never {}
    }
    pub fn waits(&self) -> u64 {
        match self.never {}
    }
    pub fn upload<M: Buffers>(&mut self, _mem: &M) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn run(&self) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn run_as(&self, _how: Submission) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn capture_graph(&mut self) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn restore_inputs(&self) -> Result<(), CudaError> {
        match self.never {}
    }
    pub fn run_timed(&self, _reps: usize, _how: Submission) -> Result<Vec<f32>, CudaError> {
        match self.never {}
    }
    pub fn time_once(&self, _how: Submission) -> Result<f32, CudaError> {
        match self.never {}
    }
    pub fn time_once_queued(&self, _how: Submission) -> Result<f32, CudaError> {
        match self.never {}
    }
    pub fn download(&self, _id: BufferId) -> Result<Vec<u8>, CudaError> {
        match self.never {}
    }
    pub fn read_f32(&self, _t: &TensorDesc) -> Result<Vec<f32>, CudaError> {
        match self.never {}
    }
    pub fn download_into<M: Buffers>(&self, _mem: &mut M) -> Result<(), CudaError> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_says_not_compiled() {
        assert_eq!(CudaDevice::new().unwrap_err(), CudaError::NotCompiled);
        assert_eq!(CudaBackend::new().unwrap_err(), CudaError::NotCompiled);
        const { assert!(!crate::CUDA_ENABLED) };
    }
}
