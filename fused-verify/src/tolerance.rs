//! The tolerance table: how far a backend may be from the references, per
//! op and activation format.
//!
//! | op | activations | NMSE vs f64 | source |
//! |---|---|---|---|
//! | GEMV / GLU + chain | f32 (F32, F16, BF16 weights, or `f32acts` mode) | 1e-7 | test-backend-ops' default `max_nmse_err` |
//! | GEMV / GLU + chain | Q8_0 / Q8_1 / Q8_K (GGML's CPU path) | 5e-4 | test-backend-ops' `test_mul_mat::max_nmse_err` |
//! | FWHT, signed FWHT | f32 | 1e-10 | log2 N f32 roundings per element |
//!
//! Against the same-quantization reference (the core's evaluator, same
//! activation rounding) a backend that declares
//! [`crate::backend::Backend::bit_exact_reference`] must match in every bit
//! (0 ulp). Others may accumulate in another order: they may differ by
//! [`Tolerance::ulp`] ulps on every element whose magnitude is at least
//! [`Tolerance::ulp_floor`] times the largest output (smaller values come
//! from cancellation, where an ulp count says nothing; NMSE covers them).
//! The budget, 4096 ulps for every format, was set from the largest
//! differences measured on the AVX2 and AVX-512 kernels over the full case
//! set (842 ulps for F32 weights, 649 for Q6_K × Q8_K), with a margin.
//!
//! Fused against unfused on the same backend has no tolerance: any bit
//! difference fails.

use fused_core::acts::ActQuant;

use crate::cases::{Case, Pattern};

/// How far one case may be from the references.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Tolerance {
    /// Largest NMSE against the f64 reference.
    pub nmse: f64,
    /// Largest ulp distance against the same-quantization reference.
    pub ulp: u64,
    /// Elements below `ulp_floor · max|reference|` are not ulp-checked.
    pub ulp_floor: f32,
}

/// NMSE budget with f32 activations (test-backend-ops' default).
pub const NMSE_F32: f64 = 1e-7;
/// NMSE budget with Q8 activations (test-backend-ops' mul_mat budget).
pub const NMSE_Q8: f64 = 5e-4;
/// NMSE budget of the FWHT.
pub const NMSE_FWHT: f64 = 1e-10;
/// Relative magnitude below which elements are not ulp-checked.
pub const ULP_FLOOR: f32 = 1e-2;

/// The ulp budget of a non-bit-exact backend for `pattern` (the same for
/// every weight format and activation mode).
pub fn ulp_budget(pattern: Pattern) -> u64 {
    match pattern {
        // Butterflies in the reference order on every ISA.
        Pattern::Fwht | Pattern::SignedFwht => 0,
        // f32 dot products reordered across SIMD lanes; for the quantized
        // modes the integer block sums are exact and only the f32 sum of
        // scaled block sums (and the K-quants' scale and min terms) is reordered.
        Pattern::Gemv | Pattern::Glu => 4096,
    }
}

/// The tolerance of `case` on a backend that is (`bit_exact`) or is not
/// required to match the reference bit for bit, scaled by `scale` (1 for
/// the table; 0 demands exact agreement everywhere).
pub fn for_case(case: &Case, bit_exact: bool, scale: f64) -> Tolerance {
    let act = case.mode.act_quant(case.dtype);
    let nmse = match case.pattern {
        Pattern::Fwht | Pattern::SignedFwht => NMSE_FWHT,
        Pattern::Gemv | Pattern::Glu if act == ActQuant::F32 => NMSE_F32,
        Pattern::Gemv | Pattern::Glu => NMSE_Q8,
    };
    let ulp = if bit_exact {
        0
    } else {
        ulp_budget(case.pattern)
    };
    Tolerance {
        nmse: nmse * scale,
        ulp: (ulp as f64 * scale) as u64,
        ulp_floor: ULP_FLOOR,
    }
}
