//! The core's plan executor on CUDA: [`StepKernels`] for [`CudaBackend`],
//! through its host-slice entry points. The GEMV and FWHT use the
//! `*_host` calls; an element-wise step uploads its inputs, launches one
//! kernel and downloads the result (the download waits for the stream).
//!
//! The GEMV kernels take the weight formats and activation modes that
//! [`check_gemv_mode`] lists (f32 activations for every format of
//! [`crate::GEMV_DTYPES`]; GGML's quantized activations for every
//! quantized format), 1 to [`MAX_COLS`] columns; anything else is refused with
//! [`fused_core::Error::Unsupported`] before the step runs. Without the
//! `cuda` feature there is no [`CudaBackend`] to call this on (its
//! constructor returns [`CudaError::NotCompiled`]).

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::error::{Unsupported, check_len};
use fused_core::exec::{Counters, StepKernels};
use fused_core::fwht::FwhtDesc;
use fused_core::reference::gemv::GluWeights;
use fused_core::reference::{ActQuant, WeightMatrix};

use crate::{CudaBackend, CudaError, DeviceVec, MAX_COLS, check_gemv_mode};

impl CudaBackend {
    /// Uploads `inputs`, runs `launch` into a new output of `out.len()`
    /// elements and downloads it into `out` (nothing runs when empty).
    fn elementwise_host(
        &self,
        inputs: &[&[f32]],
        out: &mut [f32],
        launch: impl FnOnce(&[DeviceVec], &mut DeviceVec) -> Result<(), CudaError>,
    ) -> Result<(), CudaError> {
        if out.is_empty() {
            return Ok(());
        }
        let dev = inputs
            .iter()
            .map(|v| self.upload(v))
            .collect::<Result<Vec<_>, _>>()?;
        let mut o = self.alloc(out.len())?;
        launch(&dev, &mut o)?;
        self.download(&o, out)
    }
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
            barriers: self.launches(),
            kernel_calls: self.launches(),
        }
    }

    fn gemv(
        &self,
        w: &WeightMatrix<'_>,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        self.supports_gemv(w.dtype(), mode, n_cols)
            .map_err(fused_core::Error::from)?;
        self.gemv_host(w, x, n_cols, mode, epilogue, operands, y)
    }

    fn gemv_glu(
        &self,
        w: &GluWeights<'_>,
        act: Activation,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &Epilogue,
        operands: &[&[f32]],
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        self.supports_gemv(w.gate().dtype(), mode, n_cols)
            .map_err(fused_core::Error::from)?;
        self.gemv_glu_host(w, act, x, n_cols, mode, epilogue, operands, y)
    }

    fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), CudaError> {
        self.fwht_host(desc, x, signs, y)
    }

    fn add(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("add operand", a.len(), b.len())?;
        check_len("add output", a.len(), y.len())?;
        self.elementwise_host(&[a, b], y, |d, o| CudaBackend::add(self, &d[0], &d[1], o))
    }

    fn mul(&self, a: &[f32], b: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("mul operand", a.len(), b.len())?;
        check_len("mul output", a.len(), y.len())?;
        self.elementwise_host(&[a, b], y, |d, o| CudaBackend::mul(self, &d[0], &d[1], o))
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
        self.elementwise_host(&[gate, up], y, |d, o| {
            CudaBackend::glu(self, act, &d[0], &d[1], o)
        })
    }

    fn unary(&self, act: Activation, a: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("activation output", a.len(), y.len())?;
        self.elementwise_host(&[a], y, |d, o| CudaBackend::unary(self, act, &d[0], o))
    }

    fn add_row_bias(&self, a: &[f32], bias: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("row-bias output", a.len(), y.len())?;
        fused_core::error::check_divides("row bias (must divide the output)", bias.len(), a.len())?;
        self.elementwise_host(&[a, bias], y, |d, o| {
            CudaBackend::add_row_bias(self, &d[0], &d[1], o)
        })
    }

    fn copy(&self, a: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        check_len("copy output", a.len(), y.len())?;
        self.elementwise_host(&[a], y, |d, o| CudaBackend::copy(self, &d[0], o))
    }
}
