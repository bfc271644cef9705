//! Reference matrix–vector products.
//!
//! Operation order (this defines the bit-exact reference):
//! - [`ActQuant::F32`]: each weight block is dequantized to f32 and
//!   `acc += w[k] · x[k]` runs for `k = 0, 1, …, K−1` in f32, starting at 0.
//! - [`ActQuant::Q8_0`] / [`ActQuant::Q8_1`] / [`ActQuant::Q8_K`]: the
//!   activation column is quantized once with [`crate::quant::quantize_row`]
//!   (GGML's reference rounding), then each row is [`crate::quant::vec_dot`]
//!   (GGML's generic integer formulas).
//! - f64 ([`gemm_f64`]): weights dequantized to f32, widened, and accumulated in f64.
//!
//! Outputs are column-major as GGML stores a matmul result: element
//! `(row, col)` lives at `col·rows + row`; column `col` of the input is
//! `x[col·K .. (col+1)·K]`.

use crate::acts::ActQuant;
use crate::element::Activation;
use crate::epilogue::BoundEpilogue;
use crate::error::Error;
use crate::error::check_len;
#[cfg(feature = "alloc")]
use crate::job::{GemvJob, GemvWeights};
use crate::quant::{dequantize_row, vec_dot};
use crate::weights::{GluWeights, WeightMatrix};

/// The reference of one [`GemvJob`]: checks it ([`GemvJob::check`]),
/// then [`gemm`] or [`gemm_glu`].
#[cfg(feature = "alloc")]
pub fn gemv_job(job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), Error> {
    let bound = job.check(y.len())?;
    match job.weights {
        GemvWeights::Plain(w) => gemm(w, job.x, job.n_cols, job.mode, &bound, y),
        GemvWeights::Gated { gate, up, act } => {
            let pair = GluWeights::new(*gate, *up)?;
            gemm_glu(&pair, job.x, job.n_cols, job.mode, act, &bound, y)
        }
    }
}

/// The f32-mode dot product of row `r` with `x` (`x.len() == cols`).
pub fn dot_f32(w: &WeightMatrix<'_>, r: usize, x: &[f32]) -> Result<f32, Error> {
    check_len("activation column", w.cols(), x.len())?;
    let blk = w.dtype().block_len();
    let bb = w.dtype().block_bytes();
    let mut tmp = [0.0f32; crate::dtype::QK_K];
    let mut acc = 0.0f32;
    for (b, xs) in w.row(r)?.chunks_exact(bb).zip(x.chunks_exact(blk)) {
        dequantize_row(w.dtype(), b, &mut tmp[..blk])?;
        for (wv, xv) in tmp[..blk].iter().zip(xs) {
            acc += wv * xv;
        }
    }
    Ok(acc)
}

/// The dot product of row `r` with an activation column already quantized
/// into `mode` (`xq` as written by [`crate::quant::quantize_row`]).
pub fn dot_quantized(
    w: &WeightMatrix<'_>,
    r: usize,
    mode: ActQuant,
    xq: &[u8],
) -> Result<f32, Error> {
    mode.check(w.dtype())?;
    match mode.dtype() {
        None => Err(Error::UnsupportedDType {
            what: "dot_quantized needs a quantized mode",
            dtype: w.dtype(),
        }),
        Some(_) => vec_dot(w.dtype(), w.row(r)?, xq, w.cols()),
    }
}

/// The f64 dot product of row `r` with `x`.
pub fn dot_f64(w: &WeightMatrix<'_>, r: usize, x: &[f32]) -> Result<f64, Error> {
    check_len("activation column", w.cols(), x.len())?;
    let blk = w.dtype().block_len();
    let bb = w.dtype().block_bytes();
    let mut tmp = [0.0f32; crate::dtype::QK_K];
    let mut acc = 0.0f64;
    for (b, xs) in w.row(r)?.chunks_exact(bb).zip(x.chunks_exact(blk)) {
        dequantize_row(w.dtype(), b, &mut tmp[..blk])?;
        for (wv, xv) in tmp[..blk].iter().zip(xs) {
            acc += *wv as f64 * *xv as f64;
        }
    }
    Ok(acc)
}

/// Computes every accumulator of `w · x` (`n_cols` columns) in `mode` and
/// hands `(row, col, acc)` to `sink` in row-major order of the output.
#[cfg(feature = "alloc")]
pub fn for_each_acc(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_cols: usize,
    mode: ActQuant,
    mut sink: impl FnMut(usize, usize, f32),
) -> Result<(), Error> {
    mode.check(w.dtype())?;
    let k = w.cols();
    check_acts(k, n_cols, x.len())?;
    let mut xq = alloc::vec::Vec::new();
    for col in 0..n_cols {
        let xc = &x[col * k..(col + 1) * k];
        if let Some(d) = mode.dtype() {
            xq.resize(d.row_bytes(k)?, 0u8);
            crate::quant::quantize_row(d, xc, &mut xq)?;
        }
        for row in 0..w.rows() {
            let acc = match mode {
                ActQuant::F32 => dot_f32(w, row, xc)?,
                _ => dot_quantized(w, row, mode, &xq)?,
            };
            sink(row, col, acc);
        }
    }
    Ok(())
}

/// `y = epilogue(w · x)` for `n_cols` columns in `mode`. The epilogue must be
/// bound for `w.rows() × n_cols`.
#[cfg(feature = "alloc")]
pub fn gemm(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_cols: usize,
    mode: ActQuant,
    epilogue: &BoundEpilogue<'_>,
    y: &mut [f32],
) -> Result<(), Error> {
    check_out(w.rows(), n_cols, epilogue, y.len())?;
    let m = w.rows();
    for_each_acc(w, x, n_cols, mode, |row, col, acc| {
        y[col * m + row] = epilogue.apply(acc, row, col);
    })
}

/// The gated dual form `y = chain(act(W_g·x) ⊙ (W_u·x))`, both products in `mode`.
#[cfg(feature = "alloc")]
pub fn gemm_glu(
    w: &GluWeights<'_>,
    x: &[f32],
    n_cols: usize,
    mode: ActQuant,
    act: Activation,
    epilogue: &BoundEpilogue<'_>,
    y: &mut [f32],
) -> Result<(), Error> {
    let (w_gate, w_up) = (w.gate(), w.up());
    check_out(w_gate.rows(), n_cols, epilogue, y.len())?;
    let m = w_gate.rows();
    let mut gate = alloc::vec![0.0f32; y.len()];
    for_each_acc(w_gate, x, n_cols, mode, |row, col, acc| {
        gate[col * m + row] = acc
    })?;
    for_each_acc(w_up, x, n_cols, mode, |row, col, acc| {
        let g = gate[col * m + row];
        y[col * m + row] = epilogue.apply(crate::element::glu(act, g, acc), row, col);
    })
}

/// `y = epilogue(w · x)` computed in f64 (see the module docs).
pub fn gemm_f64(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_cols: usize,
    epilogue: &BoundEpilogue<'_>,
    y: &mut [f64],
) -> Result<(), Error> {
    check_out(w.rows(), n_cols, epilogue, y.len())?;
    let k = w.cols();
    check_acts(k, n_cols, x.len())?;
    let m = w.rows();
    for col in 0..n_cols {
        for row in 0..m {
            let acc = dot_f64(w, row, &x[col * k..(col + 1) * k])?;
            y[col * m + row] = epilogue.apply_f64(acc, row, col);
        }
    }
    Ok(())
}

/// [`gemm_glu`] in f64.
pub fn gemm_glu_f64(
    w: &GluWeights<'_>,
    x: &[f32],
    n_cols: usize,
    act: Activation,
    epilogue: &BoundEpilogue<'_>,
    y: &mut [f64],
) -> Result<(), Error> {
    let (w_gate, w_up) = (w.gate(), w.up());
    check_out(w_gate.rows(), n_cols, epilogue, y.len())?;
    let k = w_gate.cols();
    check_acts(k, n_cols, x.len())?;
    let m = w_gate.rows();
    for col in 0..n_cols {
        let xc = &x[col * k..(col + 1) * k];
        for row in 0..m {
            let g = dot_f64(w_gate, row, xc)?;
            let u = dot_f64(w_up, row, xc)?;
            y[col * m + row] = epilogue.apply_f64(crate::element::glu_f64(act, g, u), row, col);
        }
    }
    Ok(())
}

/// `x` holds `n_cols` columns of `k`.
fn check_acts(k: usize, n_cols: usize, x_len: usize) -> Result<(), Error> {
    let need = k.checked_mul(n_cols).ok_or(Error::Overflow {
        what: "activations",
    })?;
    check_len("activations", need, x_len)
}

/// Checks the arguments of a `rows × k` product over `n_cols` columns: `x`
/// holds `n_cols` columns of `k`, `y` `n_cols` of `rows`, and the epilogue
/// was bound for `rows × n_cols`. Shared by every backend's GEMV entry point.
pub fn check_gemm_args(
    rows: usize,
    k: usize,
    n_cols: usize,
    x_len: usize,
    e: &BoundEpilogue<'_>,
    y_len: usize,
) -> Result<(), Error> {
    check_acts(k, n_cols, x_len)?;
    check_out(rows, n_cols, e, y_len)
}

fn check_out(rows: usize, cols: usize, e: &BoundEpilogue<'_>, y_len: usize) -> Result<(), Error> {
    if e.rows() != rows || e.cols() != cols {
        return Err(Error::ShapeMismatch {
            what: "epilogue bound for another output shape",
            expected: [rows, cols, 1, 1],
            actual: [e.rows(), e.cols(), 1, 1],
        });
    }
    check_len(
        "output",
        rows.checked_mul(cols)
            .ok_or(Error::Overflow { what: "output" })?,
        y_len,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn bad_inputs_are_errors() {
        let w = [0u8; 2 * 18];
        assert!(WeightMatrix::new(DType::Q4_0, 2, 32, &w[..35]).is_err());
        assert!(WeightMatrix::new(DType::Q4_0, 2, 30, &w).is_err());
        let wm = WeightMatrix::new(DType::Q4_0, 2, 32, &w).unwrap();
        assert!(dot_f32(&wm, 2, &[0.0; 32]).is_err(), "row out of range");
        assert!(dot_f32(&wm, 0, &[0.0; 31]).is_err(), "short column");
        assert_eq!(dot_f32(&wm, 1, &[1.0; 32]).unwrap(), 0.0);
        assert!(ActQuant::Q8_K.check(DType::Q4_0).is_err());
        assert!(dot_quantized(&wm, 0, ActQuant::F32, &[]).is_err());
    }
}
