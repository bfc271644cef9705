//! Epilogue descriptors: the element-wise chain applied to a GEMV accumulator
//! before it is stored.
//!
//! An [`Epilogue`] is a small `Copy` value: at most [`MAX_STAGES`] stages,
//! applied in order to the f32 accumulator. Stages that read an operand name an
//! operand *slot*; the operands themselves (same-shape F32 tensors, or a
//! per-row bias) are supplied when the kernel runs and are checked by
//! [`Epilogue::bind`].

use crate::element::Activation;
use crate::error::Error;

/// The most stages one epilogue holds.
pub const MAX_STAGES: usize = 8;

/// One step of an epilogue chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `v = act(v)`.
    Act(Activation),
    /// `v = v + operand[i]`, with the operand the same shape as the output.
    Add {
        /// Operand slot.
        slot: u8,
    },
    /// `v = v · operand[i]`, with the operand the same shape as the output.
    Mul {
        /// Operand slot.
        slot: u8,
    },
    /// `v = v + bias[row]`: an explicit row-broadcast bias (one value per
    /// output row, shared by every column). Never inferred from a shape.
    AddRowBias {
        /// Operand slot.
        slot: u8,
    },
}

impl Stage {
    /// The operand slot the stage reads, if any.
    pub const fn slot(&self) -> Option<usize> {
        match self {
            Stage::Act(_) => None,
            Stage::Add { slot } | Stage::Mul { slot } | Stage::AddRowBias { slot } => {
                Some(*slot as usize)
            }
        }
    }
}

/// An ordered chain of at most [`MAX_STAGES`] stages. No allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epilogue {
    stages: [Stage; MAX_STAGES],
    len: u8,
}

impl Default for Epilogue {
    fn default() -> Self {
        Epilogue::NONE
    }
}

impl Epilogue {
    /// The empty chain: the accumulator is stored as is.
    pub const NONE: Epilogue = Epilogue {
        stages: [Stage::Act(Activation::Identity); MAX_STAGES],
        len: 0,
    };

    /// The chain built from `stages`.
    pub fn from_stages(stages: &[Stage]) -> Result<Epilogue, Error> {
        stages.iter().try_fold(Epilogue::NONE, |e, s| e.then(*s))
    }

    /// The chain with `stage` appended; a stage naming an operand slot at
    /// or beyond [`MAX_STAGES`] is refused ([`Error::BadOperandSlot`]).
    pub fn then(mut self, stage: Stage) -> Result<Epilogue, Error> {
        let i = self.len as usize;
        if i == MAX_STAGES {
            return Err(Error::EpilogueFull { max: MAX_STAGES });
        }
        if let Some(slot) = stage.slot().filter(|&s| s >= MAX_STAGES) {
            return Err(Error::BadOperandSlot {
                slot,
                max: MAX_STAGES,
            });
        }
        self.stages[i] = stage;
        self.len += 1;
        Ok(self)
    }

    /// Appends an activation.
    pub fn then_act(self, act: Activation) -> Result<Epilogue, Error> {
        self.then(Stage::Act(act))
    }

    /// Appends an add of the next free operand slot.
    pub fn then_add(self) -> Result<Epilogue, Error> {
        let slot = self.n_operands() as u8;
        self.then(Stage::Add { slot })
    }

    /// Appends a multiply by the next free operand slot.
    pub fn then_mul(self) -> Result<Epilogue, Error> {
        let slot = self.n_operands() as u8;
        self.then(Stage::Mul { slot })
    }

    /// Appends a row-broadcast bias from the next free operand slot.
    pub fn then_row_bias(self) -> Result<Epilogue, Error> {
        let slot = self.n_operands() as u8;
        self.then(Stage::AddRowBias { slot })
    }

    /// The stages, in order.
    pub fn stages(&self) -> &[Stage] {
        &self.stages[..self.len as usize]
    }

    /// Number of stages.
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the chain is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One more than the highest operand slot used (0 when none is used).
    pub fn n_operands(&self) -> usize {
        self.stages()
            .iter()
            .filter_map(Stage::slot)
            .map(|s| s + 1)
            .max()
            .unwrap_or(0)
    }

    /// Applies the chain to `v` with operand values fetched by `operand(stage
    /// index, slot)`. This is the one definition of the chain's arithmetic;
    /// backends apply the stages in this order, one f32 rounding per stage.
    pub fn apply_with(&self, v: f32, operand: impl FnMut(&Stage) -> f32) -> f32 {
        self.apply_with_act(v, operand, Activation::apply)
    }

    /// [`Epilogue::apply_with`] with the activation stages evaluated by
    /// `act` (a backend's own evaluation of [`Activation::apply`]'s
    /// functions, e.g. with a vector `exp`) in place of the canonical f32
    /// functions; every other stage is unchanged.
    pub fn apply_with_act(
        &self,
        mut v: f32,
        mut operand: impl FnMut(&Stage) -> f32,
        act: impl Fn(Activation, f32) -> f32,
    ) -> f32 {
        for st in self.stages() {
            v = match st {
                Stage::Act(a) => act(*a, v),
                Stage::Add { .. } | Stage::AddRowBias { .. } => v + operand(st),
                Stage::Mul { .. } => v * operand(st),
            };
        }
        v
    }

    /// [`Epilogue::apply_with`] in f64.
    pub fn apply_with_f64(&self, mut v: f64, mut operand: impl FnMut(&Stage) -> f64) -> f64 {
        for st in self.stages() {
            v = match st {
                Stage::Act(a) => a.apply_f64(v),
                Stage::Add { .. } | Stage::AddRowBias { .. } => v + operand(st),
                Stage::Mul { .. } => v * operand(st),
            };
        }
        v
    }

    /// Checks the operand slices for an output of `rows × cols` (column-major
    /// as GGML stores a matmul result: element `(row, col)` at `col·rows +
    /// row`) and binds them.
    pub fn bind<'a>(
        &self,
        operands: &[&'a [f32]],
        rows: usize,
        cols: usize,
    ) -> Result<BoundEpilogue<'a>, Error> {
        let n_out = rows.checked_mul(cols).ok_or(Error::Overflow {
            what: "output size",
        })?;
        let mut bound = [&[][..]; MAX_STAGES];
        for st in self.stages() {
            if let Some(slot) = st.slot() {
                let op = *operands.get(slot).ok_or(Error::MissingOperand { slot })?;
                let expected = match st {
                    Stage::AddRowBias { .. } => rows,
                    _ => n_out,
                };
                if op.len() != expected {
                    return Err(Error::LengthMismatch {
                        what: "epilogue operand",
                        expected,
                        actual: op.len(),
                    });
                }
                bound[slot] = op;
            }
        }
        Ok(BoundEpilogue {
            epilogue: *self,
            operands: bound,
            rows,
            cols,
        })
    }
}

/// An epilogue whose operands were checked against an output shape.
#[derive(Clone, Copy, Debug)]
pub struct BoundEpilogue<'a> {
    epilogue: Epilogue,
    operands: [&'a [f32]; MAX_STAGES],
    rows: usize,
    cols: usize,
}

impl<'a> BoundEpilogue<'a> {
    /// The chain.
    pub const fn epilogue(&self) -> &Epilogue {
        &self.epilogue
    }

    /// The operands in slot order (empty where no stage reads the slot).
    pub fn operands(&self) -> &[&'a [f32]] {
        &self.operands
    }

    /// Output rows.
    pub const fn rows(&self) -> usize {
        self.rows
    }

    /// Output columns.
    pub const fn cols(&self) -> usize {
        self.cols
    }

    /// The chain applied to the accumulator of output `(row, col)`.
    ///
    /// # Panics
    /// If `row >= rows` or `col >= cols` (the bounds checked by `bind`).
    pub fn apply(&self, acc: f32, row: usize, col: usize) -> f32 {
        self.apply_act(acc, row, col, Activation::apply)
    }

    /// [`BoundEpilogue::apply`] with the activation stages evaluated by
    /// `act` ([`Epilogue::apply_with_act`]).
    ///
    /// # Panics
    /// If `row >= rows` or `col >= cols` (the bounds checked by `bind`).
    pub fn apply_act(
        &self,
        acc: f32,
        row: usize,
        col: usize,
        act: impl Fn(Activation, f32) -> f32,
    ) -> f32 {
        assert!(
            row < self.rows && col < self.cols,
            "output index out of range"
        );
        let at = col * self.rows + row;
        self.epilogue.apply_with_act(
            acc,
            |st| match st {
                Stage::AddRowBias { slot } => self.operands[*slot as usize][row],
                Stage::Add { slot } | Stage::Mul { slot } => self.operands[*slot as usize][at],
                Stage::Act(_) => 0.0,
            },
            act,
        )
    }

    /// The chain applied to the accumulators of outputs `(row0 + i, col)`,
    /// `i < accs.len()`, in place, one stage at a time over the whole span:
    /// the activation stages by `act` (a backend's evaluation of
    /// [`Activation::apply`] over a slice, which must give each element the
    /// bits its scalar form gives), the operand stages element by element.
    /// Each element sees the operations of [`BoundEpilogue::apply_act`] in
    /// the same order, so the same bits; a backend vectorises the span.
    ///
    /// # Panics
    /// If the span leaves the rows or `col >= cols` (the bounds checked by
    /// `bind`).
    pub fn apply_span(
        &self,
        accs: &mut [f32],
        row0: usize,
        col: usize,
        mut act: impl FnMut(Activation, &mut [f32]),
    ) {
        assert!(
            row0 + accs.len() <= self.rows && col < self.cols,
            "output span out of range"
        );
        let at = col * self.rows + row0;
        let n = accs.len();
        for st in self.epilogue.stages() {
            match st {
                Stage::Act(a) => act(*a, accs),
                Stage::Add { slot } => {
                    let op = &self.operands[*slot as usize][at..at + n];
                    accs.iter_mut().zip(op).for_each(|(v, o)| *v += *o);
                }
                Stage::Mul { slot } => {
                    let op = &self.operands[*slot as usize][at..at + n];
                    accs.iter_mut().zip(op).for_each(|(v, o)| *v *= *o);
                }
                Stage::AddRowBias { slot } => {
                    let op = &self.operands[*slot as usize][row0..row0 + n];
                    accs.iter_mut().zip(op).for_each(|(v, o)| *v += *o);
                }
            }
        }
    }

    /// [`BoundEpilogue::apply`] in f64 (operands widened from f32).
    ///
    /// # Panics
    /// If `row >= rows` or `col >= cols`.
    pub fn apply_f64(&self, acc: f64, row: usize, col: usize) -> f64 {
        assert!(
            row < self.rows && col < self.cols,
            "output index out of range"
        );
        let at = col * self.rows + row;
        self.epilogue.apply_with_f64(acc, |st| match st {
            Stage::AddRowBias { slot } => self.operands[*slot as usize][row] as f64,
            Stage::Add { slot } | Stage::Mul { slot } => self.operands[*slot as usize][at] as f64,
            Stage::Act(_) => 0.0,
        })
    }
}

/// The gated dual form: `out = act(W_gate·x) ⊙ (W_up·x)`, then a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GluEpilogue {
    /// The activation applied to the gate product.
    pub act: Activation,
    /// The chain applied to the gated value.
    pub then: Epilogue,
}

impl GluEpilogue {
    /// `act(gate)·up`, then the chain (operands as in [`Epilogue::apply_with`]).
    pub fn apply_with(&self, gate: f32, up: f32, operand: impl FnMut(&Stage) -> f32) -> f32 {
        self.then
            .apply_with(crate::element::glu(self.act, gate, up), operand)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_assigns_slots_and_limits_length() {
        let e = Epilogue::NONE
            .then_act(Activation::Silu)
            .and_then(|e| e.then_mul())
            .and_then(|e| e.then_add())
            .unwrap();
        assert_eq!(e.n_operands(), 2);
        assert_eq!(e.stages()[1], Stage::Mul { slot: 0 });
        assert_eq!(e.stages()[2], Stage::Add { slot: 1 });
        let mut full = Epilogue::NONE;
        for _ in 0..MAX_STAGES {
            full = full.then_act(Activation::Relu).unwrap();
        }
        assert_eq!(
            full.then_act(Activation::Relu),
            Err(Error::EpilogueFull { max: MAX_STAGES })
        );
    }

    #[test]
    fn slots_beyond_the_table_are_refused() {
        let bad = MAX_STAGES as u8;
        for stage in [
            Stage::Add { slot: bad },
            Stage::Mul { slot: u8::MAX },
            Stage::AddRowBias { slot: bad },
        ] {
            assert_eq!(
                Epilogue::from_stages(&[stage]),
                Err(Error::BadOperandSlot {
                    slot: stage.slot().unwrap(),
                    max: MAX_STAGES
                })
            );
        }
        let last = Epilogue::from_stages(&[Stage::Add { slot: bad - 1 }]).unwrap();
        assert_eq!(last.n_operands(), MAX_STAGES);
    }

    #[test]
    fn bind_checks_lengths_and_applies_in_order() {
        let e = Epilogue::NONE
            .then_add()
            .and_then(|e| e.then_act(Activation::Relu))
            .and_then(|e| e.then_row_bias())
            .unwrap();
        let res = [1.0f32, -5.0, 2.0, 0.5];
        let bias = [10.0f32, 20.0];
        assert!(e.bind(&[&res], 2, 2).is_err(), "missing bias operand");
        assert!(e.bind(&[&res[..3], &bias], 2, 2).is_err(), "short residual");
        let b = e.bind(&[&res, &bias], 2, 2).unwrap();
        // (acc + res) -> relu -> + bias[row]
        assert_eq!(b.apply(1.0, 0, 0), 12.0);
        assert_eq!(b.apply(1.0, 1, 0), 20.0);
        assert_eq!(b.apply(-1.0, 1, 1), 20.0, "relu(-1 + 0.5) + 20");
    }

    #[test]
    fn a_span_gets_the_bits_of_each_element() {
        let e = Epilogue::NONE
            .then_act(Activation::Silu)
            .and_then(|e| e.then_mul())
            .and_then(|e| e.then_row_bias())
            .and_then(|e| e.then_add())
            .unwrap();
        let (rows, cols) = (7, 3);
        let v = |i: usize| ((i as f32) * 0.731).sin() * 3.0;
        let mul: [f32; 21] = core::array::from_fn(|i| v(i + 1));
        let bias: [f32; 7] = core::array::from_fn(|i| v(i + 50));
        let add: [f32; 21] = core::array::from_fn(|i| v(i + 99));
        let b = e.bind(&[&mul, &bias, &add], rows, cols).unwrap();
        for col in 0..cols {
            for (row0, n) in [(0, rows), (2, 4), (6, 1), (3, 0)] {
                let mut buf: [f32; 7] = core::array::from_fn(|i| v(10 * col + i));
                let span = &mut buf[..n];
                let want: [u32; 7] = core::array::from_fn(|i| {
                    span.get(i)
                        .map_or(0, |&a| b.apply(a, row0 + i, col).to_bits())
                });
                b.apply_span(span, row0, col, |a, xs| {
                    xs.iter_mut().for_each(|x| *x = a.apply(*x))
                });
                let got: [u32; 7] =
                    core::array::from_fn(|i| span.get(i).map_or(0, |x| x.to_bits()));
                assert_eq!(got, want, "col {col} rows {row0}..{}", row0 + n);
            }
        }
    }
}
