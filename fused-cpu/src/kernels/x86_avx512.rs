//! x86-64 avx512 kernels (filled in by the SIMD work; until then every format
//! falls back to the scalar kernel).

use fused_core::DType;
use fused_core::reference::ActQuant;

use super::RowDot;

/// The avx512 kernel for weights of `dtype` fed activations in `mode`, if any.
pub fn row_dot(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    let _ = (dtype, mode);
    None
}
