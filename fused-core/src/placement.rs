//! Where a device plan's tensors lie: byte regions of the plan's buffers,
//! and the checks every device plan (CUDA, Vulkan) makes before it binds a
//! tensor to a kernel — contiguous, inside its buffer, f32 where a kernel
//! reads floats, and an input that overlaps the output only where the
//! kernel may read it in place.

use crate::DType;
use crate::error::{Error, Unsupported};
use crate::tensor::{ByteRange, Overlap, TensorDesc};

/// Bytes `[offset, offset + size)` of the buffer `slot` names (a backend's
/// own buffer naming).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region<S> {
    /// The buffer.
    pub slot: S,
    /// The first byte.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

impl<S: PartialEq> Region<S> {
    /// Whether the two regions share a byte.
    pub fn overlaps(&self, other: &Region<S>) -> bool {
        self.slot == other.slot
            && self.offset < other.offset + other.size
            && other.offset < self.offset + self.size
    }
}

/// The buffer index and byte range of contiguous tensor `t` in its graph
/// buffer, `sizes[b]` being buffer `b`'s length; `strided` names the
/// refusal of a strided tensor (which device plan).
pub fn graph_extent(
    t: &TensorDesc,
    sizes: &[usize],
    strided: &'static str,
) -> Result<(usize, ByteRange), Error> {
    if !t.is_contiguous() {
        return Err(Error::Unsupported(Unsupported::Operation(strided)));
    }
    let b = t.buffer().0 as usize;
    let size = *sizes.get(b).ok_or(Error::BadBuffer {
        buffer: t.buffer().0,
    })?;
    let e = t.byte_extent();
    if e.end > size {
        return Err(Error::BufferTooShort {
            what: "tensor extent in its device buffer",
            needed: e.end,
            actual: size,
        });
    }
    Ok((b, e))
}

/// `t` must be F32 (`what` names the tensor in the error).
pub fn require_f32(t: &TensorDesc, what: &'static str) -> Result<(), Error> {
    if t.dtype() != DType::F32 {
        return Err(Error::UnsupportedDType {
            what,
            dtype: t.dtype(),
        });
    }
    Ok(())
}

/// Whether a kernel that writes `dst` may read its input `t` where it lies:
/// always when they are disjoint; when `t` is `dst` itself only if the
/// kernel reads each element in the thread that writes it (`per_element`:
/// element-wise kernels do, a GEMV or an FWHT reads whole rows). A partial
/// overlap is an error.
pub fn reads_in_place(t: &TensorDesc, dst: &TensorDesc, per_element: bool) -> Result<bool, Error> {
    match t.overlap(dst) {
        Overlap::Partial => Err(Error::AliasViolation {
            what: "a kernel input partially overlaps its output",
        }),
        Overlap::Exact => Ok(per_element),
        Overlap::Disjoint => Ok(true),
    }
}
