//! Weight matrices as the GEMV kernels take them: packed rows of one
//! format ([`WeightMatrix`]), and the gate and up pair of a gated dual GEMV
//! ([`GluWeights`]).

use crate::acts::ActQuant;
use crate::dtype::DType;
use crate::error::Error;

/// A row-major weight matrix of `rows × cols` in one format, rows packed.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> WeightMatrix<'a> {
    /// Checks that `data` holds exactly `rows` packed rows of `cols` elements.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, Error> {
        let row_bytes = dtype.row_bytes(cols)?;
        let need = row_bytes.checked_mul(rows).ok_or(Error::Overflow {
            what: "weight size",
        })?;
        if data.len() != need {
            return Err(Error::LengthMismatch {
                what: "weight bytes",
                expected: need,
                actual: data.len(),
            });
        }
        Ok(WeightMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// The format.
    pub const fn dtype(&self) -> DType {
        self.dtype
    }

    /// Output rows `M`.
    pub const fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension `K`.
    pub const fn cols(&self) -> usize {
        self.cols
    }

    /// The bytes of row `r`, or an error when `r >= rows`.
    pub fn row(&self, r: usize) -> Result<&'a [u8], Error> {
        crate::error::check_index("weight row", r, self.rows)?;
        Ok(&self.data[r * self.row_bytes..(r + 1) * self.row_bytes])
    }

    /// The whole matrix.
    pub const fn bytes(&self) -> &'a [u8] {
        self.data
    }
}

/// The two weight matrices of a gated dual GEMV: same format and shape.
#[derive(Clone, Copy, Debug)]
pub struct GluWeights<'a> {
    gate: WeightMatrix<'a>,
    up: WeightMatrix<'a>,
}

impl<'a> GluWeights<'a> {
    /// Pairs `gate` and `up`, which must agree in format and shape.
    pub fn new(gate: WeightMatrix<'a>, up: WeightMatrix<'a>) -> Result<Self, Error> {
        if gate.dtype != up.dtype || gate.rows != up.rows || gate.cols != up.cols {
            return Err(Error::ShapeMismatch {
                what: "GLU gate and up weights",
                expected: [gate.cols, gate.rows, 1, 1],
                actual: [up.cols, up.rows, 1, 1],
            });
        }
        Ok(GluWeights { gate, up })
    }

    /// The gate weights.
    pub const fn gate(&self) -> &WeightMatrix<'a> {
        &self.gate
    }

    /// The up weights.
    pub const fn up(&self) -> &WeightMatrix<'a> {
        &self.up
    }
}

impl ActQuant {
    /// Checks that weights of format `w` can be dotted in this mode.
    pub fn check(self, w: DType) -> Result<(), Error> {
        match self.dtype() {
            None => Ok(()),
            Some(d) if w.vec_dot_type() == Some(d) => Ok(()),
            Some(_) => Err(Error::UnsupportedDType {
                what: "weights for this activation-quantization mode",
                dtype: w,
            }),
        }
    }
}
