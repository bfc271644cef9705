//! The error type of the CUDA backend.

use crate::knob::Knob;
use std::fmt;

/// Everything that can go wrong in the CUDA backend.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CudaError {
    /// The crate was compiled without the `cuda` feature, so there is no GPU code in it.
    NotCompiled,
    /// A call into the CUDA driver failed (for example: no driver, no device).
    Driver {
        /// What the backend was doing.
        what: &'static str,
        /// The driver's error, as the driver describes it.
        message: String,
    },
    /// The inputs were refused before anything ran on the device.
    Core(fused_core::Error),
    /// A [`Knob`] value no kernel is compiled for ([`Tuning::with`]).
    ///
    /// [`Tuning::with`]: crate::Tuning::with
    Tuning(Knob),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NotCompiled => {
                f.write_str("fused-cuda was built without the `cuda` feature")
            }
            CudaError::Driver { what, message } => write!(f, "CUDA driver: {what}: {message}"),
            CudaError::Core(e) => write!(f, "{e}"),
            CudaError::Tuning(k) => write!(f, "no kernel for the tuning {k:?}"),
        }
    }
}

impl std::error::Error for CudaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CudaError::Core(e) => Some(e),
            _ => None,
        }
    }
}

impl From<fused_core::Error> for CudaError {
    fn from(e: fused_core::Error) -> Self {
        CudaError::Core(e)
    }
}

/// `v` as a u32, or [`fused_core::Error::Overflow`] naming `what`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn u32_of(what: &'static str, v: usize) -> Result<u32, CudaError> {
    u32::try_from(v).map_err(|_| fused_core::Error::Overflow { what }.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(
            CudaError::NotCompiled.to_string(),
            "fused-cuda was built without the `cuda` feature"
        );
    }
}
