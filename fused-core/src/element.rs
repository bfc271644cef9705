//! The element functions, defined once.
//!
//! Every backend's fused epilogue and unfused element-wise kernel must compute
//! exactly these f32 functions: the result depends only on the input value,
//! never on its position, tile or vector lane. They use `libm`, so the CPU
//! backend's scalar path calls them directly and is bit-identical to the
//! reference; the GPU backends and the CPU's SIMD paths (a vector `exp`)
//! compare against them with a tolerance but match themselves bit for bit
//! between fused and unfused.

/// An element-wise activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `x`.
    Identity,
    /// `x / (1 + e^-x)`.
    Silu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x/2 · (1 + erf(x/√2))`.
    GeluErf,
    /// `x/2 · (1 + tanh(√(2/π) · x · (1 + 0.044715·x²)))`.
    GeluTanh,
    /// `x` where `x > 0`, else `0`; NaN stays NaN.
    Relu,
}

const FRAC_1_SQRT_2_F32: f32 = core::f32::consts::FRAC_1_SQRT_2;
const SQRT_2_OVER_PI_F32: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;
const SQRT_2_OVER_PI_F64: f64 = 0.797_884_560_802_865_4;

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 6] = [
        Activation::Identity,
        Activation::Silu,
        Activation::Sigmoid,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Relu,
    ];

    /// A short lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Activation::Identity => "identity",
            Activation::Silu => "silu",
            Activation::Sigmoid => "sigmoid",
            Activation::GeluErf => "gelu_erf",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Relu => "relu",
        }
    }

    /// The canonical f32 function, evaluated left to right with one rounding
    /// per operation and no fused multiply-add.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Identity => x,
            Activation::Silu => x / (1.0 + libm::expf(-x)),
            Activation::Sigmoid => 1.0 / (1.0 + libm::expf(-x)),
            Activation::GeluErf => 0.5 * x * (1.0 + libm::erff(x * FRAC_1_SQRT_2_F32)),
            Activation::GeluTanh => 0.5 * x * (1.0 + libm::tanhf(gelu_tanh_arg(x))),
            Activation::Relu => {
                if x > 0.0 || x.is_nan() {
                    x
                } else {
                    0.0
                }
            }
        }
    }

    /// The same function in f64, the "truth" that NMSE checks compare with.
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            Activation::Identity => x,
            Activation::Silu => x / (1.0 + libm::exp(-x)),
            Activation::Sigmoid => 1.0 / (1.0 + libm::exp(-x)),
            Activation::GeluErf => {
                0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2))
            }
            Activation::GeluTanh => {
                0.5 * x
                    * (1.0
                        + libm::tanh(SQRT_2_OVER_PI_F64 * x * (1.0 + GELU_COEF_A as f64 * x * x)))
            }
            Activation::Relu => {
                if x > 0.0 || x.is_nan() {
                    x
                } else {
                    0.0
                }
            }
        }
    }
}

impl core::fmt::Display for Activation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// The argument of `tanh` in [`Activation::GeluTanh`],
/// `√(2/π) · x · (1 + 0.044715·x²)`, in the f32 operation order of
/// [`Activation::apply`] (for backends that evaluate GELU-tanh in another
/// form, e.g. `x · sigmoid(2·arg)`).
pub fn gelu_tanh_arg(x: f32) -> f32 {
    SQRT_2_OVER_PI_F32 * x * (1.0 + GELU_COEF_A * x * x)
}

/// The gated form used by GLU layers: `act(gate) · up`.
pub fn glu(act: Activation, gate: f32, up: f32) -> f32 {
    act.apply(gate) * up
}

/// [`glu`] in f64.
pub fn glu_f64(act: Activation, gate: f64, up: f64) -> f64 {
    act.apply_f64(gate) * up
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(Activation::Silu.apply(0.0), 0.0);
        assert_eq!(Activation::Sigmoid.apply(0.0), 0.5);
        assert_eq!(Activation::Relu.apply(-3.0), 0.0);
        assert_eq!(Activation::Relu.apply(2.5), 2.5);
        assert!(Activation::Relu.apply(f32::NAN).is_nan());
        assert!((Activation::Silu.apply(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((Activation::GeluErf.apply(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((Activation::GeluTanh.apply(1.0) - 0.841_192).abs() < 1e-5);
        // -inf / (1 + e^inf) = -inf/inf: NaN, as GGML's scalar SiLU gives.
        assert!(Activation::Silu.apply(f32::NEG_INFINITY).is_nan());
        assert_eq!(Activation::Sigmoid.apply(f32::NEG_INFINITY), 0.0);
        assert!(Activation::Silu.apply(f32::NAN).is_nan());
    }

    #[test]
    fn f32_tracks_f64() {
        for act in Activation::ALL {
            for i in -200..200 {
                let x = i as f32 * 0.05;
                let a = act.apply(x) as f64;
                let b = act.apply_f64(x as f64);
                assert!(
                    (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                    "{act} at {x}: {a} vs {b}"
                );
            }
        }
    }
}
