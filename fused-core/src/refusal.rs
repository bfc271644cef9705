//! Why a candidate fusion was refused: the reason every legality predicate
//! returns. It sits below the error type, which carries it; it is public as
//! [`crate::legality::Refusal`].

use crate::format::DType;
use crate::ids::NodeId;

/// Why a candidate fusion was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// An intermediate is read by more than one node, so it must be stored.
    MultipleUses {
        /// The intermediate.
        node: NodeId,
        /// How many nodes read it.
        uses: usize,
    },
    /// An intermediate is a graph output, so it must be stored.
    GraphOutput {
        /// The intermediate.
        node: NodeId,
    },
    /// An intermediate lives in memory shared with a tensor outside the
    /// pattern (it is a view of something outside): skipping its store would
    /// change what that tensor holds.
    IntermediateAliasesOutside {
        /// The intermediate.
        node: NodeId,
        /// The outside tensor.
        other: NodeId,
    },
    /// Two tensors of the pattern that the unfused graph keeps alive at the
    /// same time share memory: a partial overlap between any two of its
    /// tensors, or any overlap between the two GLU products.
    IntermediatesOverlap {
        /// One tensor.
        a: NodeId,
        /// The other.
        b: NodeId,
    },
    /// An element-wise operand does not have the product's shape.
    ShapeMismatch {
        /// The element-wise node.
        node: NodeId,
    },
    /// An element-wise operand would be broadcast (a silent broadcast is
    /// never fused; a per-row bias must use the explicit row-bias op).
    Broadcast {
        /// The element-wise node.
        node: NodeId,
    },
    /// A tensor the fused kernel reads or writes is not contiguous.
    NotContiguous {
        /// The tensor's node.
        node: NodeId,
    },
    /// A view in the chain selects only part of (or reorders) the product.
    PartialView {
        /// The view node.
        node: NodeId,
    },
    /// A tensor has a format the fused kernels do not take in that role.
    UnsupportedDType {
        /// The tensor's node.
        node: NodeId,
        /// Its format.
        dtype: DType,
    },
    /// An element-wise op follows a Hadamard-hinted matmul: the transform is
    /// not a GEMV and carries no epilogue.
    EpilogueOnHadamard {
        /// The hinted matmul.
        node: NodeId,
    },
    /// The Hadamard block size is not a power of two in `2..=32768`.
    FwhtSize {
        /// The size.
        n: usize,
    },
    /// The sign vector is not F32 `[n_blk·N, 1, 1, 1]` with `n_blk·N` equal to
    /// the row length of `x`.
    SignsShape {
        /// The sign node.
        node: NodeId,
        /// Its element count.
        len: usize,
        /// The Hadamard block size.
        n: usize,
    },
    /// The fused destination overlaps a matmul input (weights, activations or
    /// a row bias).
    DstOverlapsMatmulInput {
        /// The input.
        input: NodeId,
    },
    /// The fused destination overlaps an element-wise operand without
    /// coinciding with it exactly.
    DstPartiallyOverlapsOperand {
        /// The operand.
        operand: NodeId,
    },
    /// The signed FWHT's output overlaps its input or signs.
    FwhtInputOverlapsOutput {
        /// The input.
        input: NodeId,
    },
    /// The epilogue chain would exceed [`crate::epilogue::MAX_STAGES`] stages.
    ChainTooLong {
        /// The first node that did not fit.
        node: NodeId,
    },
    /// A node scheduled between the pattern's first and last nodes writes
    /// memory the fused step reads, so the step cannot move to the end.
    ClobberedBetween {
        /// The writer.
        writer: NodeId,
        /// The input it overwrites.
        input: NodeId,
    },
    /// An element-wise op reads the chain's own value twice (`glu(y, y)`;
    /// for `y + y` the second use is reported first, as [`Refusal::MultipleUses`]).
    OperandIsIntermediate {
        /// The element-wise node.
        node: NodeId,
    },
    /// Gate and up matmuls of a GLU do not share their input, or their
    /// weights differ in format or shape.
    GluMismatch {
        /// The GLU node.
        node: NodeId,
    },
    /// The node already belongs to another fused step.
    AlreadyFused {
        /// The node.
        node: NodeId,
    },
    /// The epsilon of an `rms_norm` is not finite and `>= 0`.
    NormEps {
        /// The norm.
        node: NodeId,
        /// The epsilon's bits (`f32::to_bits`).
        bits: u32,
    },
    /// An `rms_norm` column is longer than the GEMV prologue takes
    /// (`fused_core::norm::MAX_PROLOGUE_LEN`).
    NormLength {
        /// The norm.
        node: NodeId,
        /// Its column length.
        k: usize,
    },
    /// The weight of `mul(rms_norm(x), g)` is not an F32 `[K, 1, 1, 1]`
    /// vector broadcast over the columns.
    NormWeightShape {
        /// The weight's node.
        node: NodeId,
        /// Its element count.
        len: usize,
        /// The norm's column length.
        k: usize,
    },
    /// The normed product is also read by a node that is not a matmul
    /// taking it as its activations: it must be stored, so the norm is not
    /// folded into the matmuls (the planner does not both store and fold).
    NormConsumer {
        /// The normed product (the mul).
        node: NodeId,
        /// The other reader.
        consumer: NodeId,
    },
    /// A matmul reading the normed product did not fuse with the norm
    /// prologue, so the norm and the mul run as nodes for every reader.
    NormNotTaken {
        /// The normed product (the mul).
        node: NodeId,
        /// The matmul that did not take it.
        consumer: NodeId,
    },
    /// The row a key/value append writes is not a RoPE's result.
    NotARope {
        /// The row's node.
        node: NodeId,
    },
    /// A row write is not placed on its destination, so it copies the
    /// whole cache rather than writing one row.
    RowWriteNotInPlace {
        /// The row write.
        node: NodeId,
    },
    /// A row write and the RoPE feeding it read different positions.
    OtherPosition {
        /// The row write.
        node: NodeId,
    },
    /// A node scheduled inside the pattern reads what one of the pattern's
    /// earlier nodes writes, which the fused step writes only at its end.
    ReadsMovedResult {
        /// The reader.
        reader: NodeId,
        /// The pattern's node whose result it reads.
        node: NodeId,
    },
    /// A RoPE's pairs are not rows `2i, 2i + 1` of the GEMV that produces
    /// them (the pairs are half a head apart, or the heads start at an odd
    /// row), so no tile of an even number of rows is sure to hold both
    /// halves of a pair: the GEMV cannot rotate them as it stores them.
    PairsAcrossTiles {
        /// The RoPE.
        node: NodeId,
    },
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refusal::MultipleUses { node, uses } => {
                write!(
                    f,
                    "intermediate {node} has {uses} uses (must have exactly 1)"
                )
            }
            Refusal::GraphOutput { node } => write!(f, "intermediate {node} is a graph output"),
            Refusal::IntermediateAliasesOutside { node, other } => write!(
                f,
                "intermediate {node} shares memory with {other}, outside the pattern"
            ),
            Refusal::IntermediatesOverlap { a, b } => write!(
                f,
                "pattern tensors {a} and {b} share memory while both are live"
            ),
            Refusal::ShapeMismatch { node } => {
                write!(f, "operand of {node} does not have the product's shape")
            }
            Refusal::Broadcast { node } => write!(
                f,
                "operand of {node} would be broadcast (only an explicit row bias may be)"
            ),
            Refusal::NotContiguous { node } => write!(f, "tensor {node} is not contiguous"),
            Refusal::PartialView { node } => {
                write!(f, "view {node} selects only part of the product")
            }
            Refusal::UnsupportedDType { node, dtype } => {
                write!(
                    f,
                    "tensor {node} has format {dtype}, not supported by the fused kernel"
                )
            }
            Refusal::EpilogueOnHadamard { node } => write!(
                f,
                "Hadamard-hinted matmul {node} is an FWHT and takes no epilogue"
            ),
            Refusal::FwhtSize { n } => {
                write!(f, "Hadamard size {n} is not a power of two in 2..=32768")
            }
            Refusal::SignsShape { node, len, n } => write!(
                f,
                "sign vector {node} ({len} values) is not F32 [n_blk*{n}] matching the row length"
            ),
            Refusal::DstOverlapsMatmulInput { input } => {
                write!(f, "fused destination overlaps matmul input {input}")
            }
            Refusal::DstPartiallyOverlapsOperand { operand } => write!(
                f,
                "fused destination overlaps operand {operand} without aliasing it exactly"
            ),
            Refusal::FwhtInputOverlapsOutput { input } => {
                write!(f, "FWHT output overlaps its input {input}")
            }
            Refusal::ChainTooLong { node } => {
                write!(f, "epilogue chain is full before {node}")
            }
            Refusal::ClobberedBetween { writer, input } => write!(
                f,
                "{writer}, scheduled inside the pattern, overwrites input {input}"
            ),
            Refusal::OperandIsIntermediate { node } => {
                write!(f, "{node} reads the chain value as its operand too")
            }
            Refusal::GluMismatch { node } => write!(
                f,
                "GLU {node}: gate and up do not share input, weight format and shape"
            ),
            Refusal::AlreadyFused { node } => {
                write!(f, "{node} already belongs to another fused step")
            }
            Refusal::NormEps { node, bits } => write!(
                f,
                "rms_norm {node}: eps {} is not finite and >= 0",
                f32::from_bits(*bits)
            ),
            Refusal::NormLength { node, k } => write!(
                f,
                "rms_norm {node}: {k} values a column, more than the GEMV prologue takes"
            ),
            Refusal::NormWeightShape { node, len, k } => write!(
                f,
                "norm weight {node} ({len} values) is not an F32 [{k}, 1, 1, 1] vector"
            ),
            Refusal::NormConsumer { node, consumer } => write!(
                f,
                "normed product {node} is also read by {consumer}, not as a matmul's activations"
            ),
            Refusal::NormNotTaken { node, consumer } => write!(
                f,
                "matmul {consumer} did not fuse with the norm prologue of {node}"
            ),
            Refusal::NotARope { node } => {
                write!(f, "the appended row {node} is not a RoPE's result")
            }
            Refusal::RowWriteNotInPlace { node } => write!(
                f,
                "row write {node} is not placed on its destination (it would copy the cache)"
            ),
            Refusal::OtherPosition { node } => write!(
                f,
                "row write {node} and the RoPE feeding it read different positions"
            ),
            Refusal::ReadsMovedResult { reader, node } => write!(
                f,
                "{reader}, scheduled inside the pattern, reads the result of {node}"
            ),
            Refusal::PairsAcrossTiles { node } => write!(
                f,
                "the pairs RoPE {node} rotates are not rows 2i, 2i + 1 of its GEMV, so a GEMV \
                 tile need not hold both rows of a pair"
            ),
        }
    }
}
