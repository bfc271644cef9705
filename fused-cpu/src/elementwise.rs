//! The unfused fallback: element-wise kernels built from the core's element
//! functions. `no_std`, no allocation.
//!
//! The activation functions take the [`Isa`] whose fused epilogues they
//! stand in for, and evaluate `act` exactly as that ISA's epilogues do
//! (the core's functions on [`Isa::Scalar`]; on the SIMD ISAs a vector
//! `exp` that gives the same bits in every lane and in scalar code). So
//! `epilogue(w · x)` computed by [`crate::gemv::gemv_rows`] with
//! [`RowKernels::new(isa, ..)`](crate::gemv::RowKernels::new) and the same
//! GEMV without an epilogue followed by these functions with the same `isa`
//! give the same bits. Additions and multiplications are single IEEE
//! operations on every ISA.

use fused_core::Error;
use fused_core::element::Activation;
use fused_core::error::{check_divides, check_len};

use crate::activation::ActEval;
use crate::isa::Isa;

/// `out[i] = a[i] + b[i]`.
pub fn add(a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
    check_len("add operand", a.len(), b.len())?;
    check_len("add output", a.len(), out.len())?;
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
    Ok(())
}

/// `a[i] += b[i]` (the in-place form, output aliasing the first operand).
pub fn add_in_place(a: &mut [f32], b: &[f32]) -> Result<(), Error> {
    check_len("add operand", a.len(), b.len())?;
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
    Ok(())
}

/// `out[i] = a[i] · b[i]`.
pub fn mul(a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
    check_len("mul operand", a.len(), b.len())?;
    check_len("mul output", a.len(), out.len())?;
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x * y;
    }
    Ok(())
}

/// `out[i] = act(a[i])`, with `act` evaluated as the fused epilogues of
/// `isa` evaluate it.
pub fn unary(isa: Isa, act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
    check_len("activation output", a.len(), out.len())?;
    ActEval::for_isa(isa).apply_slice(act, a, out);
    Ok(())
}

/// `out[i] = act(gate[i]) · up[i]`, with `act` evaluated as the fused
/// epilogues (and gated GEMVs) of `isa` evaluate it.
pub fn glu(
    isa: Isa,
    act: Activation,
    gate: &[f32],
    up: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    check_len("GLU up", gate.len(), up.len())?;
    check_len("GLU output", gate.len(), out.len())?;
    ActEval::for_isa(isa).glu_slice(act, gate, up, out);
    Ok(())
}

/// `out[col·rows + r] = a[col·rows + r] + bias[r]` (column-major, `rows = bias.len()`).
pub fn add_row_bias(a: &[f32], bias: &[f32], out: &mut [f32]) -> Result<(), Error> {
    check_len("row-bias output", a.len(), out.len())?;
    check_divides("row bias (must divide the output)", bias.len(), a.len())?;
    for (oc, ac) in out
        .chunks_exact_mut(bias.len())
        .zip(a.chunks_exact(bias.len()))
    {
        for ((o, x), b) in oc.iter_mut().zip(ac).zip(bias) {
            *o = x + b;
        }
    }
    Ok(())
}
