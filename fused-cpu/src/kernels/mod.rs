//! Dot kernels: the accumulator of one weight row against one prepared
//! activation column, one file per ISA.
//!
//! [`row_dot`] picks the kernel for an (ISA, weight format, activation mode)
//! triple once per call; formats an ISA has no kernel for fall back to the
//! scalar kernel, which is the core's reference arithmetic.

use fused_core::acts::ActQuant;
use fused_core::{DType, Error};

use crate::acts::Acts;
use crate::isa::Isa;

#[cfg(all(target_arch = "aarch64", target_endian = "little"))]
pub mod aarch64_neon;
#[cfg(fused_arm_dsp)]
pub mod arm_dsp;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", fused_arm_dsp))]
mod common;
pub mod gemm;
pub mod packed;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx2;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx512;

/// A row-dot kernel: `(weight format, one packed weight row, activations,
/// K) → accumulator`. Inputs were validated by the caller; kernels still
/// return the core's errors rather than panic when handed bad lengths.
pub type RowDot = fn(DType, &[u8], &Acts<'_>, usize) -> Result<f32, Error>;

/// A four-row kernel: the accumulators of four weight rows against one
/// activation column, reading the activations once for the four rows.
pub type RowDot4 = fn(DType, [&[u8]; 4], &Acts<'_>, usize) -> Result<[f32; 4], Error>;

/// A tile kernel: the accumulators of the `out.len()` weight rows laid
/// back to back in `rows` (equal lengths) against one activation column,
/// checked once for the whole tile and run four rows at a time, with the
/// bits of [`RowDot4`] and [`RowDot`]. At K = 576 a four-row call is about
/// 80 ns, so checking every call and returning its four sums cost a
/// small model's decode several percent.
pub type RowTile = fn(DType, &[u8], &Acts<'_>, usize, &mut [f32]) -> Result<(), Error>;

/// The kernels a GEMV uses: one row at a time, and four at a time where the
/// ISA has such a kernel for the format.
#[derive(Clone, Copy, Debug)]
pub struct Dot {
    /// The one-row kernel.
    pub one: RowDot,
    /// The four-row kernel, if any.
    pub four: Option<RowDot4>,
    /// The tile kernel, if any (only where there is a four-row one).
    pub tile: Option<RowTile>,
}

impl From<RowDot> for Dot {
    fn from(one: RowDot) -> Dot {
        Dot {
            one,
            four: None,
            tile: None,
        }
    }
}

/// The one-row, four-row and tile kernels for (`isa`, `dtype`, `mode`).
pub fn dot(isa: Isa, dtype: DType, mode: ActQuant) -> Dot {
    Dot {
        one: row_dot(isa, dtype, mode),
        four: row_dot4(isa, dtype, mode),
        tile: row_tile(isa, dtype, mode),
    }
}

/// The tile kernel for (`isa`, `dtype`, `mode`), if `isa` is supported
/// and has one.
pub fn row_tile(isa: Isa, dtype: DType, mode: ActQuant) -> Option<RowTile> {
    if !isa.is_supported() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return x86_avx512::row_tile(dtype, mode);
    }
    let _ = (dtype, mode);
    None
}

/// The four-row kernel for (`isa`, `dtype`, `mode`), if `isa` is supported
/// and has one.
pub fn row_dot4(isa: Isa, dtype: DType, mode: ActQuant) -> Option<RowDot4> {
    if !isa.is_supported() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::Avx512 {
        return x86_avx512::row_dot4(dtype, mode);
    }
    let _ = (dtype, mode);
    None
}

/// The kernel for weights of `dtype` fed activations in `mode` on `isa`.
/// `isa` must be supported by this machine ([`Isa::is_supported`]); an
/// unsupported one gives the scalar kernel.
pub fn row_dot(isa: Isa, dtype: DType, mode: ActQuant) -> RowDot {
    if !isa.is_supported() {
        return scalar::row_dot;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if isa >= Isa::Avx512
            && let Some(k) = x86_avx512::row_dot(dtype, mode)
        {
            return k;
        }
        if isa >= Isa::Avx2
            && let Some(k) = x86_avx2::row_dot(dtype, mode)
        {
            return k;
        }
    }
    #[cfg(fused_arm_dsp)]
    if isa == Isa::ArmDsp
        && let Some(k) = arm_dsp::row_dot(dtype, mode)
    {
        return k;
    }
    #[cfg(all(target_arch = "aarch64", target_endian = "little"))]
    if matches!(isa, Isa::Neon | Isa::NeonDotprod)
        && let Some(k) = aarch64_neon::row_dot(isa == Isa::NeonDotprod, dtype, mode)
    {
        return k;
    }
    let _ = (dtype, mode);
    scalar::row_dot
}

/// Whether `isa` has a kernel of its own (not the scalar fallback) for
/// weights of `dtype` in `mode`.
pub fn has_native_kernel(isa: Isa, dtype: DType, mode: ActQuant) -> bool {
    !core::ptr::fn_addr_eq(row_dot(isa, dtype, mode), scalar::row_dot as RowDot)
}
