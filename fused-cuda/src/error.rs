//! The error type of the CUDA backend.

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
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NotCompiled => {
                f.write_str("fused-cuda was built without the `cuda` feature")
            }
            CudaError::Driver { what, message } => write!(f, "CUDA driver: {what}: {message}"),
            CudaError::Core(e) => write!(f, "{e}"),
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

/// Checks the lengths of a probe call: `x` and `y` equally long, and short
/// enough to index with the kernel's `u32`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn check_axpy_lengths(x: usize, y: usize) -> Result<u32, CudaError> {
    if x != y {
        return Err(fused_core::Error::LengthMismatch {
            what: "probe_axpy: y (against x)",
            expected: x,
            actual: y,
        }
        .into());
    }
    u32::try_from(x).map_err(|_| {
        fused_core::Error::Overflow {
            what: "probe_axpy: length as the kernel's u32",
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axpy_lengths() {
        assert_eq!(check_axpy_lengths(7, 7), Ok(7));
        assert!(matches!(
            check_axpy_lengths(7, 6),
            Err(CudaError::Core(fused_core::Error::LengthMismatch { .. }))
        ));
        #[cfg(target_pointer_width = "64")]
        assert!(matches!(
            check_axpy_lengths(1 << 32, 1 << 32),
            Err(CudaError::Core(fused_core::Error::Overflow { .. }))
        ));
    }

    #[test]
    fn messages() {
        assert_eq!(
            CudaError::NotCompiled.to_string(),
            "fused-cuda was built without the `cuda` feature"
        );
    }
}
