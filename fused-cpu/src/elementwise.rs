//! The unfused fallback: element-wise kernels built from the core's element
//! functions, with activations evaluated as the backend's fused epilogues
//! evaluate them ([`ActEval`]; the `_with` forms), so a fused epilogue and
//! these passes give the same bits.

use fused_core::Error;
use fused_core::element::Activation;
use fused_core::error::{check_divides, check_len};

use crate::activation::ActEval;

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

/// `out[i] = act(a[i])`.
pub fn unary(act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
    unary_with(ActEval::Reference, act, a, out)
}

/// [`unary`] with the activation evaluated by `eval` (the backend's ISA's
/// evaluation, the same as its fused epilogues').
pub fn unary_with(eval: ActEval, act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
    check_len("activation output", a.len(), out.len())?;
    eval.apply_slice(act, a, out);
    Ok(())
}

/// `a[i] = act(a[i])`.
pub fn unary_in_place(act: Activation, a: &mut [f32]) {
    for x in a {
        *x = act.apply(*x);
    }
}

/// `out[i] = act(gate[i]) · up[i]`.
pub fn glu(act: Activation, gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<(), Error> {
    glu_with(ActEval::Reference, act, gate, up, out)
}

/// [`glu`] with the activation evaluated by `eval` (the backend's ISA's
/// evaluation, the same as its fused epilogues').
pub fn glu_with(
    eval: ActEval,
    act: Activation,
    gate: &[f32],
    up: &[f32],
    out: &mut [f32],
) -> Result<(), Error> {
    check_len("GLU up", gate.len(), up.len())?;
    check_len("GLU output", gate.len(), out.len())?;
    eval.glu_slice(act, gate, up, out);
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
