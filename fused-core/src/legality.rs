//! Legality predicates: when a pattern may be fused, and why not.
//!
//! Each predicate is a pure function returning `Ok(())` or the [`Refusal`]
//! that names the reason. The planner runs them on every candidate and keeps
//! every refusal in the plan, so a user can see why something did not fuse.
//!
//! The overlap rule (GGML's fusion bugs came from breaking it):
//! - the fused destination may alias an element-wise operand only exactly
//!   (same buffer, offset, extent and element addresses): each output element
//!   is then written after its own operand element was read, by the same
//!   thread;
//! - it must not overlap any matrix-multiply input (weights, activations, a
//!   row-broadcast bias) at all: other threads still read those while one
//!   writes its rows;
//! - for the signed FWHT, neither `x` nor the signs may overlap the output;
//! - an elided intermediate (never written by the fused kernel) must not share
//!   memory with any tensor outside the pattern, except that it may coincide
//!   exactly with the fused destination (an in-place chain);
//! - tensors of one pattern overlap each other only exactly, and the two
//!   products of a GLU not at all (the unfused graph holds both at once).

use crate::dtype::DType;
use crate::fwht::check_fwht_size;
use crate::graph::NodeId;
use crate::tensor::{Overlap, TensorDesc};

pub use crate::refusal::Refusal;

/// A tensor with the node it belongs to, as the predicates see it.
pub type Tensor = (NodeId, TensorDesc);

/// An intermediate must have exactly one use and must not be a graph output.
pub fn check_intermediate(node: NodeId, uses: usize, is_output: bool) -> Result<(), Refusal> {
    if is_output {
        return Err(Refusal::GraphOutput { node });
    }
    if uses != 1 {
        return Err(Refusal::MultipleUses { node, uses });
    }
    Ok(())
}

/// A weight format the fused GEMV kernels take.
pub fn check_weight(w: &Tensor) -> Result<(), Refusal> {
    let dtype = w.1.dtype();
    if !dtype.is_weight_format() {
        return Err(Refusal::UnsupportedDType { node: w.0, dtype });
    }
    if !w.1.is_contiguous() {
        return Err(Refusal::NotContiguous { node: w.0 });
    }
    Ok(())
}

/// A contiguous F32 tensor (activations, operands, destinations, signs).
pub fn check_f32_contiguous(t: &Tensor) -> Result<(), Refusal> {
    let dtype = t.1.dtype();
    if dtype != DType::F32 {
        return Err(Refusal::UnsupportedDType { node: t.0, dtype });
    }
    if !t.1.is_contiguous() {
        return Err(Refusal::NotContiguous { node: t.0 });
    }
    Ok(())
}

/// An element-wise operand of node `consumer`, whose output has shape
/// `shape`: same shape (no broadcast), F32, contiguous.
pub fn check_operand(consumer: NodeId, shape: [usize; 4], operand: &Tensor) -> Result<(), Refusal> {
    let ne = operand.1.ne();
    if ne != shape {
        let broadcast = (0..4).all(|i| ne[i] != 0 && shape[i].is_multiple_of(ne[i]));
        return Err(if broadcast {
            Refusal::Broadcast { node: consumer }
        } else {
            Refusal::ShapeMismatch { node: consumer }
        });
    }
    check_f32_contiguous(operand)
}

/// A Hadamard block size the FWHT kernels support.
pub fn check_hadamard_size(n: usize) -> Result<(), Refusal> {
    check_fwht_size(n).map_err(|_| Refusal::FwhtSize { n })
}

/// A sign vector for an FWHT of size `n` over rows of length `row_len`:
/// F32, contiguous, shape `[row_len, 1, 1, 1]`, `row_len` a multiple of `n`.
pub fn check_signs(signs: &Tensor, n: usize, row_len: usize) -> Result<(), Refusal> {
    let t = &signs.1;
    let len = t.n_elements();
    let bad = Refusal::SignsShape {
        node: signs.0,
        len,
        n,
    };
    if t.dtype() != DType::F32
        || t.ne() != [row_len, 1, 1, 1]
        || row_len == 0
        || !row_len.is_multiple_of(n)
    {
        return Err(bad);
    }
    if !t.is_contiguous() {
        return Err(Refusal::NotContiguous { node: signs.0 });
    }
    Ok(())
}

/// The norm of a GEMV prologue `mul(rms_norm(x, eps), g)` with columns of
/// `k` values: `eps` finite and `>= 0`, `k` at most
/// [`crate::norm::MAX_PROLOGUE_LEN`], `x` contiguous F32, `g` a contiguous
/// F32 `[k, 1, 1, 1]` vector.
pub fn check_norm_prologue(
    norm: NodeId,
    eps: f32,
    x: &Tensor,
    gamma: &Tensor,
) -> Result<(), Refusal> {
    let k = x.1.ne()[0];
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Refusal::NormEps {
            node: norm,
            bits: eps.to_bits(),
        });
    }
    if k > crate::norm::MAX_PROLOGUE_LEN {
        return Err(Refusal::NormLength { node: norm, k });
    }
    check_f32_contiguous(x)?;
    let t = &gamma.1;
    if t.dtype() != DType::F32 || t.ne() != [k, 1, 1, 1] {
        return Err(Refusal::NormWeightShape {
            node: gamma.0,
            len: t.n_elements(),
            k,
        });
    }
    check_f32_contiguous(gamma)
}

/// The destination of a fused GEMV against its inputs: disjoint from every
/// matmul input; disjoint from, or exactly aliasing, every element-wise operand.
pub fn check_gemv_overlap(
    dst: &TensorDesc,
    matmul_inputs: &[Tensor],
    operands: &[Tensor],
) -> Result<(), Refusal> {
    for (node, t) in matmul_inputs {
        if dst.overlaps(t) {
            return Err(Refusal::DstOverlapsMatmulInput { input: *node });
        }
    }
    for (node, t) in operands {
        if dst.overlap(t) == Overlap::Partial {
            return Err(Refusal::DstPartiallyOverlapsOperand { operand: *node });
        }
    }
    Ok(())
}

/// The output of a signed FWHT against its input and signs: no overlap at all.
pub fn check_fwht_overlap(dst: &TensorDesc, x: &Tensor, signs: &Tensor) -> Result<(), Refusal> {
    for (node, t) in [x, signs] {
        if dst.overlaps(t) {
            return Err(Refusal::FwhtInputOverlapsOutput { input: *node });
        }
    }
    Ok(())
}

/// Two tensors inside one pattern: with `both_live`, as the two GLU
/// products, they must be disjoint; otherwise disjoint or an exact alias (an
/// in-place element-wise step).
pub fn check_pattern_pair(a: &Tensor, b: &Tensor, both_live: bool) -> Result<(), Refusal> {
    match a.1.overlap(&b.1) {
        Overlap::Disjoint => Ok(()),
        Overlap::Exact if !both_live => Ok(()),
        _ => Err(Refusal::IntermediatesOverlap { a: a.0, b: b.0 }),
    }
}

/// An elided intermediate against a tensor outside the pattern: disjoint, or
/// (for the fused destination only) an exact alias.
pub fn check_intermediate_memory(
    intermediate: &Tensor,
    other: &Tensor,
    other_is_dst: bool,
) -> Result<(), Refusal> {
    match intermediate.1.overlap(&other.1) {
        Overlap::Disjoint => Ok(()),
        Overlap::Exact if other_is_dst => Ok(()),
        _ => Err(Refusal::IntermediateAliasesOutside {
            node: intermediate.0,
            other: other.0,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::BufferId;

    fn f32t(node: u32, ne: [usize; 4], buf: u32, off: usize) -> Tensor {
        (
            NodeId(node),
            TensorDesc::contiguous(DType::F32, ne, BufferId(buf), off).unwrap(),
        )
    }

    #[test]
    fn intermediate_rules() {
        assert_eq!(check_intermediate(NodeId(1), 1, false), Ok(()));
        assert_eq!(
            check_intermediate(NodeId(1), 2, false),
            Err(Refusal::MultipleUses {
                node: NodeId(1),
                uses: 2
            })
        );
        assert_eq!(
            check_intermediate(NodeId(1), 1, true),
            Err(Refusal::GraphOutput { node: NodeId(1) })
        );
    }

    #[test]
    fn operand_rules() {
        let shape = [8, 2, 1, 1];
        assert_eq!(
            check_operand(NodeId(5), shape, &f32t(3, shape, 0, 0)),
            Ok(())
        );
        assert_eq!(
            check_operand(NodeId(5), shape, &f32t(3, [8, 1, 1, 1], 0, 0)),
            Err(Refusal::Broadcast { node: NodeId(5) })
        );
        assert_eq!(
            check_operand(NodeId(5), shape, &f32t(3, [16, 1, 1, 1], 0, 0)),
            Err(Refusal::ShapeMismatch { node: NodeId(5) })
        );
        let h = (
            NodeId(3),
            TensorDesc::contiguous(DType::F16, shape, BufferId(0), 0).unwrap(),
        );
        assert_eq!(
            check_operand(NodeId(5), shape, &h),
            Err(Refusal::UnsupportedDType {
                node: NodeId(3),
                dtype: DType::F16
            })
        );
        let strided = (
            NodeId(3),
            TensorDesc::strided(DType::F32, shape, [4, 64, 128, 128], BufferId(0), 0).unwrap(),
        );
        assert_eq!(
            check_operand(NodeId(5), shape, &strided),
            Err(Refusal::NotContiguous { node: NodeId(3) })
        );
    }

    #[test]
    fn overlap_rules() {
        let dst = f32t(9, [8, 1, 1, 1], 0, 64).1;
        let x_far = f32t(1, [8, 1, 1, 1], 0, 0);
        let x_touch = f32t(1, [8, 1, 1, 1], 0, 60);
        let op_exact = f32t(2, [8, 1, 1, 1], 0, 64);
        let op_shift = f32t(2, [8, 1, 1, 1], 0, 68);
        assert_eq!(check_gemv_overlap(&dst, &[x_far], &[op_exact]), Ok(()));
        assert_eq!(
            check_gemv_overlap(&dst, &[x_touch], &[]),
            Err(Refusal::DstOverlapsMatmulInput { input: NodeId(1) })
        );
        assert_eq!(
            check_gemv_overlap(&dst, &[op_exact], &[]),
            Err(Refusal::DstOverlapsMatmulInput { input: NodeId(2) }),
            "an exact alias of a matmul input is still forbidden"
        );
        assert_eq!(
            check_gemv_overlap(&dst, &[x_far], &[op_shift]),
            Err(Refusal::DstPartiallyOverlapsOperand { operand: NodeId(2) })
        );
        let signs = f32t(4, [8, 1, 1, 1], 1, 0);
        assert_eq!(
            check_fwht_overlap(&dst, &op_exact, &signs),
            Err(Refusal::FwhtInputOverlapsOutput { input: NodeId(2) })
        );
        assert_eq!(check_fwht_overlap(&dst, &x_far, &signs), Ok(()));
    }

    #[test]
    fn hadamard_and_signs() {
        assert_eq!(check_hadamard_size(1024), Ok(()));
        assert_eq!(check_hadamard_size(96), Err(Refusal::FwhtSize { n: 96 }));
        assert_eq!(
            check_hadamard_size(65536),
            Err(Refusal::FwhtSize { n: 65536 })
        );
        assert_eq!(check_signs(&f32t(4, [64, 1, 1, 1], 0, 0), 32, 64), Ok(()));
        assert!(matches!(
            check_signs(&f32t(4, [48, 1, 1, 1], 0, 0), 32, 48),
            Err(Refusal::SignsShape { .. })
        ));
        assert!(matches!(
            check_signs(&f32t(4, [64, 2, 1, 1], 0, 0), 32, 64),
            Err(Refusal::SignsShape { .. })
        ));
    }

    #[test]
    fn norm_prologue_rules() {
        let x = f32t(1, [64, 2, 1, 1], 0, 0);
        let g = f32t(2, [64, 1, 1, 1], 0, 1024);
        let n = NodeId(3);
        assert_eq!(check_norm_prologue(n, 1e-6, &x, &g), Ok(()));
        assert_eq!(
            check_norm_prologue(n, -1.0, &x, &g),
            Err(Refusal::NormEps {
                node: n,
                bits: (-1.0f32).to_bits()
            })
        );
        assert!(matches!(
            check_norm_prologue(n, f32::NAN, &x, &g),
            Err(Refusal::NormEps { .. })
        ));
        assert_eq!(
            check_norm_prologue(n, 0.0, &x, &f32t(2, [64, 2, 1, 1], 0, 1024)),
            Err(Refusal::NormWeightShape {
                node: NodeId(2),
                len: 128,
                k: 64
            })
        );
        let big = f32t(1, [crate::norm::MAX_PROLOGUE_LEN + 32, 1, 1, 1], 1, 0);
        assert!(matches!(
            check_norm_prologue(n, 0.0, &big, &g),
            Err(Refusal::NormLength { .. })
        ));
        let strided = (
            NodeId(1),
            TensorDesc::strided(
                DType::F32,
                [64, 2, 1, 1],
                [4, 512, 1024, 1024],
                BufferId(0),
                0,
            )
            .unwrap(),
        );
        assert_eq!(
            check_norm_prologue(n, 0.0, &strided, &g),
            Err(Refusal::NotContiguous { node: NodeId(1) })
        );
    }

    #[test]
    fn intermediate_memory() {
        let inter = f32t(3, [8, 1, 1, 1], 0, 0);
        assert_eq!(
            check_intermediate_memory(&inter, &f32t(7, [8, 1, 1, 1], 0, 0), true),
            Ok(())
        );
        assert_eq!(
            check_intermediate_memory(&inter, &f32t(7, [8, 1, 1, 1], 0, 0), false),
            Err(Refusal::IntermediateAliasesOutside {
                node: NodeId(3),
                other: NodeId(7)
            })
        );
        assert_eq!(
            check_intermediate_memory(&inter, &f32t(7, [8, 1, 1, 1], 0, 32), false),
            Ok(())
        );
    }
}
