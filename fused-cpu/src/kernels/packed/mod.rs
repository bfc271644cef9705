//! Group kernels for [`crate::packed::PackedWeights`], one file per ISA.

use fused_core::reference::ActQuant;
use fused_core::{DType, Error};

use crate::acts::Acts;
use crate::isa::Isa;
use crate::kernels::row_dot;
use crate::packed::{GROUP_ROWS, LINE, PackedDot};

pub mod scalar;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx512;

/// The kernels for packed weights of `dtype` fed activations in `mode` on
/// `isa`, if packed weights of `dtype` exist and `mode` is the one their
/// kernels take (Q4_0 × Q8_0). An unsupported `isa` gives the scalar kernel.
pub fn packed_dot(isa: Isa, dtype: DType, mode: ActQuant) -> Option<PackedDot> {
    if (dtype, mode) != (DType::Q4_0, ActQuant::Q8_0) {
        return None;
    }
    let one = row_dot(isa, dtype, mode);
    let act = crate::activation::ActEval::for_isa(isa);
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
