//! Group kernels for [`crate::packed::PackedWeights`], one file per ISA.

use fused_core::DType;
use fused_core::reference::ActQuant;

use crate::isa::Isa;
use crate::kernels::row_dot;
use crate::packed::PackedDot;

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
    #[cfg(target_arch = "x86_64")]
    if isa.is_supported() && isa >= Isa::Avx512 {
        return Some(PackedDot {
            group: x86_avx512::group_q4_0_q8_0,
            one,
        });
    }
    Some(PackedDot {
        group: scalar::group_q4_0_q8_0,
        one,
    })
}
