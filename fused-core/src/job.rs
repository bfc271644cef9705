//! One GEMV as every backend's eager entry point takes it: the weights
//! (plain, or the gate and up pair of a gated dual GEMV), the activation
//! columns, how they are fed, and the epilogue with its operands, grouped
//! in one value ([`GemvJob`]) instead of a long list of arguments.
//!
//! `GemvJob<'_, WeightMatrix>` is what `StepKernels::gemv` and the CPU and
//! Vulkan backends' `gemv` take over host slices; a backend with weights of
//! its own layout (the CPU's packed weights) takes the same job over them.
//! [`GemvJob::check`] validates a job once, for every backend.

use crate::acts::ActQuant;
use crate::dtype::DType;
use crate::element::Activation;
use crate::epilogue::{BoundEpilogue, Epilogue};
use crate::error::{Error, check_len};
use crate::weights::WeightMatrix;

/// The weights of one GEMV.
#[derive(Clone, Copy, Debug)]
pub enum GemvWeights<'a, W> {
    /// `W · x`.
    Plain(&'a W),
    /// The gated dual GEMV `act(W_gate · x) ⊙ (W_up · x)`: gate and up of
    /// one format and shape, the activations prepared once for both.
    Gated {
        /// The gate weights.
        gate: &'a W,
        /// The up weights.
        up: &'a W,
        /// The gate's activation.
        act: Activation,
    },
}

impl<'a, W> GemvWeights<'a, W> {
    /// The gate weights of a gated GEMV, the only weights of a plain one.
    pub fn first(&self) -> &'a W {
        match *self {
            GemvWeights::Plain(w) | GemvWeights::Gated { gate: w, .. } => w,
        }
    }
}

/// One GEMV: `y = epilogue(W · x)`, or `y = epilogue(act(W_gate · x) ⊙
/// (W_up · x))`, for `n_cols` columns of `x` (column-major: column `c` is
/// `x[c·K..(c+1)·K]`, and `y` likewise with `M`).
#[derive(Clone, Copy, Debug)]
pub struct GemvJob<'a, W> {
    /// The weights.
    pub weights: GemvWeights<'a, W>,
    /// The activation columns.
    pub x: &'a [f32],
    /// How many columns `x` holds.
    pub n_cols: usize,
    /// How the activations reach the dot products.
    pub mode: ActQuant,
    /// The chain applied to every accumulator.
    pub epilogue: Epilogue,
    /// The epilogue's operands, in slot order.
    pub operands: &'a [&'a [f32]],
}

impl<'a, W> GemvJob<'a, W> {
    /// `W · x` over `n_cols` columns: f32 activations, no epilogue.
    pub fn new(w: &'a W, x: &'a [f32], n_cols: usize) -> Self {
        GemvJob {
            weights: GemvWeights::Plain(w),
            x,
            n_cols,
            mode: ActQuant::F32,
            epilogue: Epilogue::default(),
            operands: &[],
        }
    }

    /// `act(W_gate · x) ⊙ (W_up · x)` over `n_cols` columns: f32
    /// activations, no epilogue.
    pub fn gated(gate: &'a W, up: &'a W, act: Activation, x: &'a [f32], n_cols: usize) -> Self {
        GemvJob {
            weights: GemvWeights::Gated { gate, up, act },
            ..GemvJob::new(gate, x, n_cols)
        }
    }

    /// The same job with the activations fed per `mode`.
    pub fn with_mode(mut self, mode: ActQuant) -> Self {
        self.mode = mode;
        self
    }

    /// The same job with an epilogue already bound to its operands
    /// ([`Epilogue::bind`]); [`GemvJob::check`] binds it again against the
    /// job's output.
    pub fn with_bound(self, epilogue: &'a BoundEpilogue<'a>) -> Self {
        self.with_epilogue(*epilogue.epilogue(), epilogue.operands())
    }

    /// The same job with `epilogue` applied to every accumulator, its
    /// operands in slot order.
    pub fn with_epilogue(mut self, epilogue: Epilogue, operands: &'a [&'a [f32]]) -> Self {
        self.epilogue = epilogue;
        self.operands = operands;
        self
    }
}

/// What a GEMV needs of its weights to check a job.
pub trait GemvShape {
    /// The format.
    fn dtype(&self) -> DType;
    /// Output rows `M`.
    fn rows(&self) -> usize;
    /// Inner dimension `K`.
    fn cols(&self) -> usize;
}

impl GemvShape for WeightMatrix<'_> {
    fn dtype(&self) -> DType {
        WeightMatrix::dtype(self)
    }

    fn rows(&self) -> usize {
        WeightMatrix::rows(self)
    }

    fn cols(&self) -> usize {
        WeightMatrix::cols(self)
    }
}

impl<'a, W: GemvShape> GemvJob<'a, W> {
    /// Checks the job against an output of `y_len` values: gate and up of
    /// one format and shape, the weights' format dotted in `mode`, `x`
    /// holding `n_cols` columns of `K`, `y` `n_cols` columns of `M`; returns
    /// the epilogue bound to that output.
    pub fn check(&self, y_len: usize) -> Result<BoundEpilogue<'a>, Error> {
        let w = self.weights.first();
        if let GemvWeights::Gated { gate, up, .. } = self.weights
            && (gate.dtype() != up.dtype() || gate.rows() != up.rows() || gate.cols() != up.cols())
        {
            return Err(Error::ShapeMismatch {
                what: "gated GEMV up weights (must match the gate's format and shape)",
                expected: [gate.cols(), gate.rows(), 1, 1],
                actual: [up.cols(), up.rows(), 1, 1],
            });
        }
        self.mode.check(w.dtype())?;
        let (m, k) = (w.rows(), w.cols());
        let len = |what, a: usize, b: usize| a.checked_mul(b).ok_or(Error::Overflow { what });
        check_len(
            "activation columns",
            len("activations", k, self.n_cols)?,
            self.x.len(),
        )?;
        check_len("output", len("output", m, self.n_cols)?, y_len)?;
        self.epilogue.bind(self.operands, m, self.n_cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epilogue::Epilogue;

    #[test]
    fn a_job_is_checked_once_for_every_backend() {
        let w = [0u8; 4 * 18];
        let wm = WeightMatrix::new(DType::Q4_0, 4, 32, &w).unwrap();
        let small = WeightMatrix::new(DType::Q4_0, 2, 32, &w[..36]).unwrap();
        let x = [1.0f32; 64];
        assert!(GemvJob::new(&wm, &x, 2).check(8).is_ok());
        assert!(GemvJob::new(&wm, &x, 2).check(7).is_err(), "short output");
        assert!(
            GemvJob::new(&wm, &x[..63], 2).check(8).is_err(),
            "short input"
        );
        assert!(
            GemvJob::new(&wm, &x, 2)
                .with_mode(ActQuant::Q8_K)
                .check(8)
                .is_err()
        );
        assert!(
            GemvJob::new(&wm, &x, 2)
                .with_mode(ActQuant::Q8_0)
                .check(8)
                .is_ok()
        );
        let glu = GemvJob::gated(&wm, &small, Activation::Silu, &x, 2);
        assert!(glu.check(8).is_err(), "gate and up of other shapes");
        let r = [0.5f32; 8];
        let ops: [&[f32]; 1] = [&r];
        let e = Epilogue::NONE.then_add().unwrap();
        assert!(
            GemvJob::new(&wm, &x, 2)
                .with_epilogue(e, &ops)
                .check(8)
                .is_ok()
        );
        assert!(
            GemvJob::new(&wm, &x, 2)
                .with_epilogue(e, &[])
                .check(8)
                .is_err(),
            "no operand"
        );
    }
}
