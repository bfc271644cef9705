//! How a GEMV's activations reach its dot products.
//!
//! [`ActQuant`] is the mode of one GEMV: f32 activations, or activations
//! quantized to one of GGML's Q8 formats first. [`GemvMode`] is the policy
//! of a whole plan, which picks the [`ActQuant`] of each GEMV from its weight
//! format ([`GemvMode::act_quant`]): f32 everywhere, or GGML's choice per
//! format.

use crate::format::DType;

/// How the activations are fed to the dot product.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActQuant {
    /// Plain f32 activations against dequantized weights.
    F32,
    /// Activations quantized to Q8_0 (GGML's CPU path for Q4_0, Q5_0, Q8_0, IQ4_NL).
    Q8_0,
    /// Activations quantized to Q8_1 (GGML's CPU path for Q4_1, Q5_1).
    Q8_1,
    /// Activations quantized to Q8_K (GGML's CPU path for the K-quants and TQ2_0).
    Q8_K,
}

impl ActQuant {
    /// The mode GGML's CPU backend uses for weights of format `w`
    /// (`F32` for the float formats and the activation-only formats).
    pub const fn ggml(w: DType) -> ActQuant {
        match w.vec_dot_type() {
            Some(DType::Q8_0) => ActQuant::Q8_0,
            Some(DType::Q8_1) => ActQuant::Q8_1,
            Some(DType::Q8_K) => ActQuant::Q8_K,
            _ => ActQuant::F32,
        }
    }

    /// The activation block format, `None` for f32.
    pub const fn dtype(self) -> Option<DType> {
        match self {
            ActQuant::F32 => None,
            ActQuant::Q8_0 => Some(DType::Q8_0),
            ActQuant::Q8_1 => Some(DType::Q8_1),
            ActQuant::Q8_K => Some(DType::Q8_K),
        }
    }
}

/// How matmuls feed their activations to the dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemvMode {
    /// f32 activations for every weight format ([`ActQuant::F32`]).
    F32,
    /// Activations quantized as GGML's CPU path does for each weight format
    /// ([`ActQuant::ggml`]).
    Ggml,
}

impl GemvMode {
    /// The activation mode for weights of format `w`.
    pub const fn act_quant(self, w: DType) -> ActQuant {
        match self {
            GemvMode::F32 => ActQuant::F32,
            GemvMode::Ggml => ActQuant::ggml(w),
        }
    }
}
