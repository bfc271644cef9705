//! Group kernels for packed (row-interleaved) weights, one file per ISA:
//! the accumulators of the four rows of a group at once. The layout is
//! described with [`crate::packed`], which builds it; its two sizes are
//! here, below both.

use fused_core::acts::ActQuant;
use fused_core::{DType, Error};

use super::{RowDot, row_dot};
use crate::activation::ActEval;
use crate::acts::Acts;
use crate::isa::Isa;

pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx512;

/// Rows per interleaved group.
pub const GROUP_ROWS: usize = 4;

/// Bytes of one cache line, the unit of the packed layout.
pub const LINE: usize = 64;

/// A group kernel: the accumulators of the four rows of one packed group
/// (`group` bytes of packed weights with `nb` blocks per row) against one
/// activation column. Kernels may prefetch past the end of `group` (the
/// next group's lines, which follow it in memory: a hint only).
pub type GroupDot = fn(&[u8], usize, &Acts<'_>) -> Result<[f32; GROUP_ROWS], Error>;

/// The kernels of a packed GEMV: the group kernel and the one-row kernel
/// for the tail rows (GGML layout).
#[derive(Clone, Copy, Debug)]
pub struct PackedDot {
    /// Four rows of a group at a time.
    pub group: GroupDot,
    /// One tail row.
    pub one: RowDot,
    /// How the epilogue's activations (and a GLU's) are evaluated: the
    /// same as the ISA's unfused element-wise kernels.
    pub act: ActEval,
}

/// The kernels for packed weights of `dtype` fed activations in `mode` on
/// `isa`, if packed weights of `dtype` exist and `mode` is the one their
/// kernels take (Q4_0 × Q8_0). An unsupported `isa` gives the scalar kernel.
pub fn packed_dot(isa: Isa, dtype: DType, mode: ActQuant) -> Option<PackedDot> {
    if (dtype, mode) != (DType::Q4_0, ActQuant::Q8_0) {
        return None;
    }
    let one = row_dot(isa, dtype, mode);
    let act = ActEval::for_isa(isa);
    #[cfg(target_arch = "x86_64")]
    if isa.is_supported() && isa >= Isa::Avx512 {
        return Some(PackedDot {
            group: x86_avx512::group_q4_0_q8_0,
            one,
            act,
        });
    }
    Some(PackedDot {
        group: scalar::group_q4_0_q8_0,
        one,
        act,
    })
}

/// Checks a packed Q4_0 group of `nb` blocks a row and its activations
/// (`nb` Q8_0 blocks); returns the activation bytes.
pub(crate) fn check_q4_0_group<'a>(
    group: &[u8],
    nb: usize,
    acts: &Acts<'a>,
) -> Result<&'a [u8], Error> {
    let need = nb * LINE + nb * 2 * GROUP_ROWS;
    if group.len() < need {
        return Err(Error::BufferTooShort {
            what: "packed Q4_0 group",
            needed: need,
            actual: group.len(),
        });
    }
    match *acts {
        Acts::Quant {
            dtype: DType::Q8_0,
            bytes,
            ..
        } => {
            fused_core::error::check_len(
                "Q8_0 activation bytes",
                nb * DType::Q8_0.block_bytes(),
                bytes.len(),
            )?;
            Ok(bytes)
        }
        Acts::Quant { dtype, .. } => Err(Error::UnsupportedDType {
            what: "activation format for packed Q4_0 (Q8_0 expected)",
            dtype,
        }),
        Acts::F32(_) => Err(Error::UnsupportedDType {
            what: "f32 activations for packed Q4_0 (Q8_0 expected)",
            dtype: DType::F32,
        }),
    }
}
