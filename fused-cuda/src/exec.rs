//! The core's plan executor on CUDA: [`StepKernels`] for [`CudaBackend`]
//! over host slices: every step uploads its inputs, launches one kernel
//! and downloads the result (the download waits for the stream).
//!
//! The GEMV kernels take the weight formats and activation modes that
//! [`check_gemv_mode`] lists (f32 activations for every format of
//! [`crate::GEMV_DTYPES`]; GGML's quantized activations for every
//! quantized format), 1 to [`MAX_COLS`] columns; anything else is refused with
//! [`fused_core::Error::Unsupported`] before the step runs. Without the
//! `cuda` feature there is no [`CudaBackend`] to call this on (its
//! constructor returns [`CudaError::NotCompiled`](crate::CudaError::NotCompiled)).

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::error::{Unsupported, check_len};
use fused_core::exec::{Counters, StepKernels};
use fused_core::fwht::FwhtDesc;
use fused_core::job::{GemvJob as CoreGemvJob, GemvWeights};
use fused_core::weights::WeightMatrix;

use crate::backend::CudaBackend;
use crate::error::CudaError;
use crate::job::{Elementwise, GemvJob};
use crate::memory::DeviceVec;
use crate::{MAX_COLS, check_gemv_mode};
use fused_core::Error;

/// Uploads `inputs`, runs `op` over them into a new output of `out.len()`
/// elements and downloads it into `out` (nothing runs when empty).
fn elementwise_host(
    be: &CudaBackend,
    inputs: &[&[f32]],
    out: &mut [f32],
    op: impl FnOnce(&[DeviceVec]) -> Elementwise<'_>,
) -> Result<(), CudaError> {
    if out.is_empty() {
        return Ok(());
    }
    let dev = inputs
        .iter()
        .map(|v| be.upload(v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut o = be.alloc(out.len())?;
    be.elementwise(op(&dev), &mut o)?;
    be.download(&o, out)
}

/// Uploads the activations and operands of a host call and allocates its output.
fn upload_call(
    be: &CudaBackend,
    x: &[f32],
    operands: &[&[f32]],
    y_len: usize,
) -> Result<(DeviceVec, Vec<DeviceVec>, DeviceVec), CudaError> {
    let xd = be.upload(x)?;
    let ops = operands
        .iter()
        .map(|o| be.upload(o))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((xd, ops, be.alloc(y_len)?))
}

impl StepKernels for CudaBackend {
    type Error = CudaError;

    fn supports_gemv(
        &self,
        dtype: DType,
        mode: ActQuant,
        n_cols: usize,
    ) -> Result<(), Unsupported> {
        check_gemv_mode(dtype, mode)?;
        if !(1..=MAX_COLS).contains(&n_cols) {
            return Err(Unsupported::Columns {
                max: MAX_COLS,
                actual: n_cols,
            });
        }
        Ok(())
    }

    /// Every launch is waited for before the next step (its download
    /// synchronises the stream): launches count both.
    fn counters(&self) -> Counters {
        Counters {
            barriers: self.launch_count(),
            kernel_calls: self.launch_count(),
        }
    }

    fn gemv(
        &self,
        job: &CoreGemvJob<'_, WeightMatrix<'_>>,
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        let w = job.weights.first();
        self.supports_gemv(w.dtype(), job.mode, job.n_cols)
            .map_err(Error::from)?;
        job.check(y.len())?;
        let (xd, ops, mut yd) = upload_call(self, job.x, job.operands, y.len())?;
        let ops: Vec<&DeviceVec> = ops.iter().collect();
        let first = self.upload_weights(w)?;
        let up = match job.weights {
            GemvWeights::Plain(_) => None,
            GemvWeights::Gated { up, act, .. } => Some((self.upload_weights(up)?, act)),
        };
        let mut device_job = GemvJob::new(&first, &mut yd).with_epilogue(&job.epilogue, &ops);
        if let Some((up, act)) = &up {
            device_job = device_job.with_glu(up, *act);
        }
        self.gemv_batch(&xd, job.n_cols, job.mode, &mut [device_job])?;
        self.download(&yd, y)
    }

    fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        desc.check(x.len(), signs, y.len())?;
        let xd = self.upload(x)?;
        let sd = signs.map(|s| self.upload(s)).transpose()?;
        let mut od = self.alloc(y.len())?;
        CudaBackend::fwht(self, desc, &xd, sd.as_ref(), &mut od)?;
        self.download(&od, y)
    }

    fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("add operand", a.len(), b.len())?;
        check_len("add output", a.len(), y.len())?;
        elementwise_host(self, &[a, b], y, |d| Elementwise::Add(&d[0], &d[1]))
    }

    fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("mul operand", a.len(), b.len())?;
        check_len("mul output", a.len(), y.len())?;
        elementwise_host(self, &[a, b], y, |d| Elementwise::Mul(&d[0], &d[1]))
    }

    fn glu(
        &self,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        check_len("GLU up", gate.len(), up.len())?;
        check_len("GLU output", gate.len(), y.len())?;
        elementwise_host(self, &[gate, up], y, |d| {
            Elementwise::Glu(act, &d[0], &d[1])
        })
    }

    fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("activation output", a.len(), y.len())?;
        elementwise_host(self, &[a], y, |d| Elementwise::Unary(act, &d[0]))
    }

    fn add_row_bias(&self, a: &[f32], bias: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("row-bias output", a.len(), y.len())?;
        fused_core::error::check_divides("row bias (must divide the output)", bias.len(), a.len())?;
        elementwise_host(self, &[a, bias], y, |d| {
            Elementwise::AddRowBias(&d[0], &d[1])
        })
    }

    fn supports_rms_norm(&self) -> Result<(), Unsupported> {
        Ok(())
    }

    fn rms_norm(
        &self,
        k: usize,
        eps: f32,
        x: &[f32],
        gamma: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        fused_core::norm::check(k, x.len(), gamma.map(<[f32]>::len), y.len())?;
        if y.is_empty() {
            return Ok(());
        }
        let xd = self.upload(x)?;
        let gd = gamma.map(|g| self.upload(g)).transpose()?;
        let mut od = self.alloc(y.len())?;
        CudaBackend::rms_norm(self, k, eps, &xd, gd.as_ref(), &mut od)?;
        self.download(&od, y)
    }

    fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("copy output", a.len(), y.len())?;
        elementwise_host(self, &[a], y, |d| Elementwise::Copy(&d[0]))
    }
}
