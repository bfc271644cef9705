//! The one error type of the core, shared by every backend.

use crate::acts::ActQuant;
use crate::format::DType;
use crate::refusal::Refusal;

/// What a backend does not implement (its kernels cannot run this input,
/// although the input itself is valid): the reason a verifier reports a
/// case as skipped on that backend rather than failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported {
    /// The backend has no GEMV kernel for this weight format.
    WeightFormat(DType),
    /// The backend does not feed activations to its GEMV this way (for
    /// example a GPU that keeps them f32 asked for GGML's Q8 activations).
    ActQuant(ActQuant),
    /// The backend has a GEMV for this weight format, but not with
    /// activations fed this way.
    WeightActs {
        /// The weight format.
        dtype: DType,
        /// The activations asked for.
        mode: ActQuant,
    },
    /// More activation columns than one launch of the backend takes.
    Columns {
        /// The most it takes.
        max: usize,
        /// How many were asked for.
        actual: usize,
    },
    /// An operation the backend does not offer at all.
    Operation(&'static str),
}

impl core::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Unsupported::WeightFormat(d) => write!(f, "no GEMV kernel for {d} weights"),
            Unsupported::ActQuant(m) => write!(f, "no GEMV with {m:?} activations"),
            Unsupported::WeightActs { dtype, mode } => {
                write!(f, "no GEMV of {dtype} weights with {mode:?} activations")
            }
            Unsupported::Columns { max, actual } => {
                write!(f, "{actual} activation columns (at most {max})")
            }
            Unsupported::Operation(what) => write!(f, "{what} is not offered"),
        }
    }
}

/// Everything that can be wrong with an input to the core or a backend.
///
/// Every public entry point validates its inputs and returns one of these
/// rather than panicking, reading out of bounds or computing a wrong answer.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A slice or buffer has the wrong number of elements or bytes.
    LengthMismatch {
        /// What was measured.
        what: &'static str,
        /// The length the call needs.
        expected: usize,
        /// The length it got.
        actual: usize,
    },
    /// A buffer is shorter than the call needs.
    BufferTooShort {
        /// What was measured.
        what: &'static str,
        /// Bytes or elements needed.
        needed: usize,
        /// Bytes or elements available.
        actual: usize,
    },
    /// Two shapes that must agree do not.
    ShapeMismatch {
        /// What was compared.
        what: &'static str,
        /// The shape the call needs (GGML order: `ne[0]` is the row length).
        expected: [usize; 4],
        /// The shape it got.
        actual: [usize; 4],
    },
    /// A row length is not a whole number of blocks of its format.
    NotBlockAligned {
        /// The block format.
        dtype: DType,
        /// The offending element count.
        len: usize,
    },
    /// An offset or stride is not a multiple of the alignment it needs.
    Misaligned {
        /// What was misaligned.
        what: &'static str,
        /// The required alignment in bytes.
        align: usize,
        /// The offending offset or stride in bytes.
        value: usize,
    },
    /// The operation does not support this format in this role.
    UnsupportedDType {
        /// Where the format was used.
        what: &'static str,
        /// The offending format.
        dtype: DType,
    },
    /// A GGML type id the core does not know.
    UnknownGgmlType {
        /// The id.
        id: u32,
    },
    /// A Hadamard block size that is not a power of two in `2..=32768`.
    BadFwhtSize {
        /// The offending size.
        n: usize,
    },
    /// A sign vector whose length is not a positive multiple of the block size
    /// that divides the row length.
    BadSigns {
        /// Length of the sign vector.
        len: usize,
        /// The Hadamard block size.
        n: usize,
    },
    /// Buffers overlap in a way the operation forbids.
    AliasViolation {
        /// Which pair overlaps and why that is forbidden.
        what: &'static str,
    },
    /// An epilogue chain or operand table is full.
    EpilogueFull {
        /// The maximum number of stages.
        max: usize,
    },
    /// An index or a count outside the range it must lie in.
    OutOfRange {
        /// What the value is.
        what: &'static str,
        /// The value given.
        value: usize,
        /// The smallest value allowed.
        min: usize,
        /// The largest value allowed (below `min` when no value is).
        max: usize,
    },
    /// An epilogue stage names an operand slot beyond the chain's table.
    BadOperandSlot {
        /// The slot named.
        slot: usize,
        /// The number of slots (slots run from 0 to `max - 1`).
        max: usize,
    },
    /// An epilogue stage names an operand slot that was not supplied.
    MissingOperand {
        /// The operand slot.
        slot: usize,
    },
    /// A node id that does not belong to the graph, or refers forward.
    BadNode {
        /// The offending index.
        index: usize,
    },
    /// A buffer id with no memory behind it.
    BadBuffer {
        /// The offending buffer id.
        buffer: u32,
    },
    /// A size computation overflowed `usize`.
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// A fused entry point was called on inputs its legality predicate refuses.
    Refused(Refusal),
    /// Valid input that this backend has no kernel for.
    Unsupported(Unsupported),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::LengthMismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what}: expected length {expected}, got {actual}"),
            Error::BufferTooShort {
                what,
                needed,
                actual,
            } => write!(f, "{what}: needs {needed}, only {actual} available"),
            Error::ShapeMismatch {
                what,
                expected,
                actual,
            } => write!(f, "{what}: expected shape {expected:?}, got {actual:?}"),
            Error::NotBlockAligned { dtype, len } => write!(
                f,
                "{len} elements is not a whole number of {dtype} blocks of {}",
                dtype.block_len()
            ),
            Error::Misaligned { what, align, value } => {
                write!(f, "{what}: {value} is not a multiple of {align} bytes")
            }
            Error::UnsupportedDType { what, dtype } => {
                write!(f, "{what}: format {dtype} is not supported here")
            }
            Error::UnknownGgmlType { id } => write!(f, "unknown or unsupported GGML type id {id}"),
            Error::BadFwhtSize { n } => write!(
                f,
                "Hadamard block size {n} is not a power of two in 2..=32768"
            ),
            Error::BadSigns { len, n } => write!(
                f,
                "sign vector of length {len} is not a positive multiple of the block size {n}"
            ),
            Error::AliasViolation { what } => write!(f, "forbidden overlap: {what}"),
            Error::EpilogueFull { max } => {
                write!(f, "epilogue chain is full ({max} stages at most)")
            }
            Error::OutOfRange {
                what,
                value,
                min,
                max,
            } => {
                if min > max {
                    write!(f, "{what} {value}: there is none (the range is empty)")
                } else {
                    write!(f, "{what} {value} is outside {min}..={max}")
                }
            }
            Error::BadOperandSlot { slot, max } => write!(
                f,
                "epilogue operand slot {slot} does not exist (slots 0 to {})",
                max - 1
            ),
            Error::MissingOperand { slot } => {
                write!(f, "epilogue operand slot {slot} was not supplied")
            }
            Error::BadNode { index } => {
                write!(
                    f,
                    "node {index} does not exist or is not before its consumer"
                )
            }
            Error::BadBuffer { buffer } => write!(f, "buffer {buffer} does not exist"),
            Error::Overflow { what } => write!(f, "{what} overflows usize"),
            Error::Refused(r) => write!(f, "fusion refused: {r}"),
            Error::Unsupported(u) => write!(f, "not supported by this backend: {u}"),
        }
    }
}

impl core::error::Error for Error {}

/// `Ok(())` when `actual == expected`, else [`Error::LengthMismatch`] for `what`.
pub fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), Error> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}

/// Checks that `period` (a repeated operand's length, e.g. a per-row bias
/// or a sign vector) is non-zero and divides `len` (the output's length).
pub fn check_divides(what: &'static str, period: usize, len: usize) -> Result<(), Error> {
    if period != 0 && len.is_multiple_of(period) {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            expected: period,
            actual: len,
        })
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Error::Refused(r)
    }
}

/// `Ok` when `value < len`, else [`out_of_range`]`(what, value, len)`.
pub fn check_index(what: &'static str, value: usize, len: usize) -> Result<(), Error> {
    if value < len {
        Ok(())
    } else {
        Err(out_of_range(what, value, len))
    }
}

/// [`Error::OutOfRange`] for `value` as an index into `len` items named
/// by `what` (with no item, the empty range `1..=0`).
pub fn out_of_range(what: &'static str, value: usize, len: usize) -> Error {
    let (min, max) = match len.checked_sub(1) {
        Some(last) => (0, last),
        None => (1, 0),
    };
    Error::OutOfRange {
        what,
        value,
        min,
        max,
    }
}

impl From<Unsupported> for Error {
    fn from(u: Unsupported) -> Self {
        Error::Unsupported(u)
    }
}
