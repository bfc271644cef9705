//! Tensor descriptors: format, 4-D shape, byte strides and placement in a buffer.
//!
//! Shapes follow GGML: `ne[0]` is the innermost dimension (the row length),
//! `nb[i]` is the byte stride of dimension `i`. For block formats `nb[0]` is
//! the block size in bytes and `ne[0]` must be a whole number of blocks.

use crate::dtype::DType;
use crate::error::Error;

/// Names a buffer (an allocation) that tensors live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// A half-open byte range `[start, end)` inside one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl ByteRange {
    /// Number of bytes.
    pub const fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether the range holds no byte.
    pub const fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Whether the two ranges share at least one byte.
    pub const fn intersects(&self, other: &ByteRange) -> bool {
        !self.is_empty() && !other.is_empty() && self.start < other.end && other.start < self.end
    }
}

/// How two tensors' memory relates, as the overlap rules need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// No byte in common (or different buffers).
    Disjoint,
    /// Same buffer, same byte range, same format, shape and strides: every
    /// element sits at the same address in both.
    Exact,
    /// Anything else that shares a byte.
    Partial,
}

/// A tensor: format, shape, strides, and where it lives.
///
/// Built only through validating constructors, so the byte extent is always
/// computable without overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorDesc {
    dtype: DType,
    ne: [usize; 4],
    nb: [usize; 4],
    buffer: BufferId,
    offset: usize,
    extent: ByteRange,
}

impl TensorDesc {
    /// A densely packed tensor of shape `ne` at byte `offset` of `buffer`.
    pub fn contiguous(
        dtype: DType,
        ne: [usize; 4],
        buffer: BufferId,
        offset: usize,
    ) -> Result<TensorDesc, Error> {
        let nb0 = dtype.block_bytes();
        let nb1 = dtype.row_bytes(ne[0])?;
        let nb2 = nb1
            .checked_mul(ne[1])
            .ok_or(Error::Overflow { what: "stride" })?;
        let nb3 = nb2
            .checked_mul(ne[2])
            .ok_or(Error::Overflow { what: "stride" })?;
        TensorDesc::strided(dtype, ne, [nb0, nb1, nb2, nb3], buffer, offset)
    }

    /// A tensor with explicit byte strides. `nb[0]` must equal the block size
    /// of the format; `ne[0]` must be a whole number of blocks; every offset
    /// must fit in `usize`.
    pub fn strided(
        dtype: DType,
        ne: [usize; 4],
        nb: [usize; 4],
        buffer: BufferId,
        offset: usize,
    ) -> Result<TensorDesc, Error> {
        if nb[0] != dtype.block_bytes() {
            return Err(Error::LengthMismatch {
                what: "stride of dimension 0 (must be the block size)",
                expected: dtype.block_bytes(),
                actual: nb[0],
            });
        }
        if !ne[0].is_multiple_of(dtype.block_len()) {
            return Err(Error::NotBlockAligned { dtype, len: ne[0] });
        }
        // The element count must fit too, even where zero strides keep the
        // extent small: `n_elements` and `n_rows` rely on it.
        ne.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or(Error::Overflow {
                what: "tensor element count",
            })?;
        let extent = if ne.contains(&0) {
            ByteRange {
                start: offset,
                end: offset,
            }
        } else {
            let ovf = Error::Overflow {
                what: "tensor extent",
            };
            let mut last = offset;
            let blocks0 = ne[0] / dtype.block_len();
            let counts = [blocks0, ne[1], ne[2], ne[3]];
            for i in 0..4 {
                let step = (counts[i] - 1).checked_mul(nb[i]).ok_or(ovf)?;
                last = last.checked_add(step).ok_or(ovf)?;
            }
            let end = last.checked_add(dtype.block_bytes()).ok_or(ovf)?;
            ByteRange { start: offset, end }
        };
        Ok(TensorDesc {
            dtype,
            ne,
            nb,
            buffer,
            offset,
            extent,
        })
    }

    /// The element format.
    pub const fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape, GGML order.
    pub const fn ne(&self) -> [usize; 4] {
        self.ne
    }

    /// The byte strides, GGML order.
    pub const fn nb(&self) -> [usize; 4] {
        self.nb
    }

    /// The buffer the tensor lives in.
    pub const fn buffer(&self) -> BufferId {
        self.buffer
    }

    /// Byte offset of element 0 inside the buffer.
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements (it fits in `usize`: the constructors check it).
    pub const fn n_elements(&self) -> usize {
        self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Number of rows (`ne[1]·ne[2]·ne[3]`).
    pub const fn n_rows(&self) -> usize {
        self.ne[1] * self.ne[2] * self.ne[3]
    }

    /// Bytes in one packed row.
    pub const fn row_bytes(&self) -> usize {
        self.ne[0] / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// Whether the elements are densely packed in GGML order (strides of
    /// dimensions of size 1 do not matter).
    pub fn is_contiguous(&self) -> bool {
        let mut expect = self.dtype.block_bytes();
        for i in 0..4 {
            let count = if i == 0 {
                self.ne[0] / self.dtype.block_len()
            } else {
                self.ne[i]
            };
            if count > 1 && self.nb[i] != expect {
                return false;
            }
            expect = expect.saturating_mul(count);
        }
        true
    }

    /// Whether every row is packed (rows may be strided apart).
    pub fn rows_contiguous(&self) -> bool {
        self.nb[0] == self.dtype.block_bytes()
    }

    /// The bytes the tensor may touch: from its offset to one past its last
    /// block. This is what the overlap checks compare.
    pub const fn byte_extent(&self) -> ByteRange {
        self.extent
    }

    /// Whether the two tensors share at least one byte.
    pub fn overlaps(&self, other: &TensorDesc) -> bool {
        self.buffer == other.buffer && self.extent.intersects(&other.extent)
    }

    /// How the two tensors' memory relates.
    pub fn overlap(&self, other: &TensorDesc) -> Overlap {
        if !self.overlaps(other) {
            Overlap::Disjoint
        } else if self.same_layout(other) {
            Overlap::Exact
        } else {
            Overlap::Partial
        }
    }

    /// Same buffer, offset, extent, and the same element addresses: either
    /// the same format, shape and strides, or both contiguous with the same
    /// format and element count (a reshape of the same memory).
    pub fn same_layout(&self, other: &TensorDesc) -> bool {
        self.buffer == other.buffer
            && self.offset == other.offset
            && self.extent == other.extent
            && self.dtype == other.dtype
            && ((self.ne == other.ne && self.nb == other.nb)
                || (self.is_contiguous()
                    && other.is_contiguous()
                    && self.n_elements() == other.n_elements()))
    }

    /// Byte offset (from the buffer start) of the block holding element
    /// `idx`, with `idx[0]` rounded down to its block. Indices are not checked.
    pub const fn element_offset(&self, idx: [usize; 4]) -> usize {
        self.offset
            + idx[0] / self.dtype.block_len() * self.nb[0]
            + idx[1] * self.nb[1]
            + idx[2] * self.nb[2]
            + idx[3] * self.nb[3]
    }

    /// The 4-D index of the element at position `linear` in GGML order
    /// (`ne[0]` fastest).
    pub const fn unravel(&self, linear: usize) -> [usize; 4] {
        let i0 = linear % self.ne[0];
        let r = linear / self.ne[0];
        let i1 = r % self.ne[1];
        let r = r / self.ne[1];
        let i2 = r % self.ne[2];
        let i3 = r / self.ne[2];
        [i0, i1, i2, i3]
    }

    /// The same memory seen as a new shape. The tensor must be contiguous and
    /// the element count must not change.
    pub fn reshaped(&self, ne: [usize; 4]) -> Result<TensorDesc, Error> {
        if !self.is_contiguous() {
            return Err(Error::ShapeMismatch {
                what: "reshape of a non-contiguous tensor",
                expected: self.ne,
                actual: ne,
            });
        }
        if ne.iter().product::<usize>() != self.n_elements() {
            return Err(Error::ShapeMismatch {
                what: "reshape must keep the element count",
                expected: self.ne,
                actual: ne,
            });
        }
        TensorDesc::contiguous(self.dtype, ne, self.buffer, self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: BufferId = BufferId(0);

    #[test]
    fn contiguous_extent_and_predicates() {
        let t = TensorDesc::contiguous(DType::F32, [4, 3, 1, 1], B, 16).unwrap();
        assert_eq!(t.byte_extent(), ByteRange { start: 16, end: 64 });
        assert!(t.is_contiguous());
        let q = TensorDesc::contiguous(DType::Q4_0, [64, 2, 1, 1], B, 0).unwrap();
        assert_eq!(q.byte_extent().len(), 72);
        assert_eq!(q.row_bytes(), 36);
    }

    #[test]
    fn element_counts_that_overflow_are_refused() {
        // Zero strides keep the extent at one element; the count would wrap.
        let huge = 1usize << (usize::BITS / 2);
        let r = TensorDesc::strided(DType::F32, [1, huge, huge, 1], [4, 0, 0, 0], B, 0);
        assert_eq!(
            r,
            Err(Error::Overflow {
                what: "tensor element count"
            })
        );
        let t = TensorDesc::strided(DType::F32, [1, huge, 2, 1], [4, 0, 0, 0], B, 0).unwrap();
        assert_eq!(t.n_elements(), 2 * huge);
        assert_eq!(t.byte_extent().len(), 4);
    }

    #[test]
    fn strided_view_is_not_contiguous() {
        let t = TensorDesc::strided(DType::F32, [2, 3, 1, 1], [4, 16, 48, 48], B, 0).unwrap();
        assert!(!t.is_contiguous());
        assert!(t.rows_contiguous());
        assert_eq!(t.byte_extent().end, 2 * 16 + 8);
        assert!(TensorDesc::strided(DType::F32, [2, 1, 1, 1], [8, 8, 8, 8], B, 0).is_err());
    }

    #[test]
    fn overlap_kinds() {
        let a = TensorDesc::contiguous(DType::F32, [8, 1, 1, 1], B, 0).unwrap();
        let b = TensorDesc::contiguous(DType::F32, [8, 1, 1, 1], B, 4).unwrap();
        let c = TensorDesc::contiguous(DType::F32, [8, 1, 1, 1], B, 32).unwrap();
        let d = TensorDesc::contiguous(DType::F32, [8, 1, 1, 1], BufferId(1), 0).unwrap();
        let r = a.reshaped([2, 4, 1, 1]).unwrap();
        assert_eq!(a.overlap(&a), Overlap::Exact);
        assert_eq!(a.overlap(&r), Overlap::Exact);
        assert_eq!(a.overlap(&b), Overlap::Partial);
        assert_eq!(a.overlap(&c), Overlap::Disjoint);
        assert_eq!(a.overlap(&d), Overlap::Disjoint);
    }

    #[test]
    fn overflow_is_an_error() {
        let e = TensorDesc::contiguous(DType::F32, [usize::MAX / 2, 4, 1, 1], B, 0);
        assert!(matches!(e, Err(Error::Overflow { .. })));
    }
}
