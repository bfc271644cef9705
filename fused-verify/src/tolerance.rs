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
//! The largest output is taken from the case with its activations made the
//! identity where that is larger ([`crate::verify::ulp_scale`]): an
//! activation that squashes a large pre-activation to near zero does not
//! lower the floor. The budget, 4096 ulps for every format, was set from
//! the largest differences measured on the AVX2 and AVX-512 kernels over
//! the full case set (842 ulps for F32 weights, 649 for Q6_K × Q8_K), with
//! a margin; it is the budget of the products, and each nonlinear
//! activation multiplies it by its condition bound ([`condition_bound`]).
//!
//! Fused against unfused on the same backend has no tolerance: any bit
//! difference fails.

use fused_core::acts::ActQuant;

use fused_core::element::Activation;

use crate::cases::{Case, Link, Pattern};

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

/// How many times an activation `f` can magnify a relative error of its
/// input, `max |x·f′(x) / f(x)|`, rounded up, over the outputs the ulp check
/// looks at: those with `|f(x)| ≥ ULP_FLOOR · |x|` (the floor's scale is at
/// least the pre-activation, [`crate::verify::ulp_scale`]). An output `n`
/// ulps off in its pre-activation is about `condition_bound · n` ulps off.
///
/// | activation | checked region | largest `|x·f′/f|` there |
/// |---|---|---|
/// | identity, ReLU | everywhere / `x > 0` | 1 |
/// | SiLU `x·σ(x)` | `σ(x) ≥ 0.01`: `x ≥ −4.60` | `|1 + x(1 − σ(x))|` = 3.55 at −4.60 |
/// | sigmoid `σ(x)` | `σ(x) ≥ 0.01·|x|`: `x ≥ −3.36` | `|x|(1 − σ(x))` = 3.25 at −3.36 |
/// | GELU (erf and tanh) `x·Φ(x)` | `Φ(x) ≥ 0.01`: `x ≥ −2.33` | `|1 + x·φ(x)/Φ(x)|` = 5.2 at −2.33 |
pub fn condition_bound(act: Activation) -> u64 {
    match act {
        Activation::Identity | Activation::Relu => 1,
        Activation::Silu => 4,
        Activation::Sigmoid => 4,
        Activation::GeluErf | Activation::GeluTanh => 6,
    }
}

/// The ulp budget of a non-bit-exact backend for `case`: that of its
/// products (the same for every weight format and activation mode), times
/// the condition bound of every nonlinear activation it applies; a GLU's
/// output carries the gate's error magnified and the up product's as is.
pub fn ulp_budget(case: &Case) -> u64 {
    let mut budget = products_ulp_budget(case.pattern);
    if case.pattern == Pattern::Glu && case.glu != Activation::Identity {
        budget *= condition_bound(case.glu) + 1;
    }
    for link in &case.chain {
        if let Link::Act(a) = link {
            budget *= condition_bound(*a);
        }
    }
    budget
}

/// The ulp budget of the products of `pattern`, before any activation.
fn products_ulp_budget(pattern: Pattern) -> u64 {
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
    let ulp = if bit_exact { 0 } else { ulp_budget(case) };
    Tolerance {
        nmse: nmse * scale,
        ulp: (ulp as f64 * scale) as u64,
        ulp_floor: ULP_FLOOR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{CaseSet, generate};
    use crate::verify::ulp_scale;

    #[test]
    fn nonlinear_activations_multiply_the_products_budget() {
        let cases = generate(CaseSet::Full, 1);
        let find = |f: &dyn Fn(&Case) -> bool| cases.iter().find(|c| f(c)).cloned().unwrap();
        let glu = find(&|c| c.pattern == Pattern::Glu && c.glu == Activation::GeluErf);
        let chain_acts: u64 = glu
            .chain
            .iter()
            .map(|l| match l {
                Link::Act(a) => condition_bound(*a),
                _ => 1,
            })
            .product();
        assert_eq!(ulp_budget(&glu), 4096 * 7 * chain_acts);
        let linear = find(&|c| c.pattern == Pattern::Gemv && !c.has_nonlinearity());
        assert_eq!(ulp_budget(&linear), 4096);
        assert_eq!(ulp_budget(&glu.linearized()), 4096);
    }

    #[test]
    fn squashing_activations_do_not_lower_the_ulp_scale() {
        // A one-row GELU case: its output alone may be tiny while the
        // product it came from is not; the scale is the larger of the two.
        let cases = generate(CaseSet::Full, 1);
        let mut raised = 0;
        for c in cases
            .iter()
            .filter(|c| c.has_nonlinearity() && c.m * c.cols <= 2)
            .take(200)
        {
            let b = crate::cases::build(c).unwrap();
            let mut mem = b.mem.clone();
            fused_core::reference::eval::eval_graph(&b.graph, &mut mem, c.mode).unwrap();
            let out = mem.read(b.graph.tensor(b.out).unwrap()).unwrap();
            let own = crate::metrics::max_magnitude(&out);
            let scale = ulp_scale(c, &out);
            assert!(scale >= own, "{}: {scale} < {own}", c.id());
            raised += usize::from(scale > 2.0 * own);
        }
        assert!(raised > 0, "no small-output case had a larger linear scale");
    }
}
