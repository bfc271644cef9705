//! The device when the crate is built without the `cuda` feature: the same
//! public API as the real one, and no value of it can exist.

use crate::CudaError;
use core::convert::Infallible;

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

    /// Runs the probe kernel: `y[i] = a·x[i] + y[i]` (one fused multiply-add).
    pub fn probe_axpy(&self, _a: f32, _x: &[f32], _y: &mut [f32]) -> Result<(), CudaError> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_says_not_compiled() {
        assert_eq!(CudaDevice::new().unwrap_err(), CudaError::NotCompiled);
        const { assert!(!crate::CUDA_ENABLED) };
    }
}
