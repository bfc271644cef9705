//! Host byte buffers: the memory a graph's tensors live in.
//!
//! [`Memory`] is the plain host form (one `Vec<u8>` a [`BufferId`]); the
//! [`Buffers`] trait is what the executors and resident plans read and write,
//! so a backend's own host memory (an aligned arena) takes part too. The
//! helpers below read one tensor out of a buffer: packed rows ([`packed`])
//! or float values ([`gather_f32`]).

use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;

use crate::dtype::DType;
use crate::error::Error;
use crate::tensor::{BufferId, TensorDesc};

/// The most elements a tensor copied out of memory may have (4 GiB of
/// f32): a view with zero strides can name far more elements than its
/// buffer holds bytes, and gathering it would exhaust memory first.
pub const MAX_GATHER_ELEMENTS: usize = 1 << 30;

/// `Ok` when `t` is small enough to gather ([`MAX_GATHER_ELEMENTS`]).
fn check_gather(t: &TensorDesc) -> Result<(), Error> {
    if t.n_elements() > MAX_GATHER_ELEMENTS {
        return Err(Error::OutOfRange {
            what: "elements gathered from one tensor",
            value: t.n_elements(),
            min: 0,
            max: MAX_GATHER_ELEMENTS,
        });
    }
    Ok(())
}

/// The buffers a graph's tensors live in, indexed by [`BufferId`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    buffers: Vec<Vec<u8>>,
}

impl Memory {
    /// Zeroed buffers of the given byte sizes.
    pub fn new(sizes: &[usize]) -> Memory {
        Memory {
            buffers: sizes.iter().map(|&n| vec![0u8; n]).collect(),
        }
    }

    /// The bytes of buffer `id`.
    pub fn buffer(&self, id: BufferId) -> Result<&[u8], Error> {
        self.buffers
            .get(id.0 as usize)
            .map(Vec::as_slice)
            .ok_or(Error::BadBuffer { buffer: id.0 })
    }

    /// The bytes of buffer `id`, writable.
    pub fn buffer_mut(&mut self, id: BufferId) -> Result<&mut [u8], Error> {
        self.buffers
            .get_mut(id.0 as usize)
            .map(Vec::as_mut_slice)
            .ok_or(Error::BadBuffer { buffer: id.0 })
    }

    /// The byte size of each buffer, in [`BufferId`] order: what a backend
    /// compiles a plan over these buffers with.
    pub fn sizes(&self) -> Vec<usize> {
        self.buffers.iter().map(Vec::len).collect()
    }

    /// Buffer `id` itself (the executor takes it out while it writes it).
    pub(crate) fn buffer_vec_mut(&mut self, id: BufferId) -> Result<&mut Vec<u8>, Error> {
        self.buffers
            .get_mut(id.0 as usize)
            .ok_or(Error::BadBuffer { buffer: id.0 })
    }

    /// Checks that `t` lies inside its buffer.
    pub fn check(&self, t: &TensorDesc) -> Result<(), Error> {
        let len = self.buffer(t.buffer())?.len();
        let end = t.byte_extent().end;
        if end > len {
            return Err(Error::BufferTooShort {
                what: "tensor extent",
                needed: end,
                actual: len,
            });
        }
        Ok(())
    }

    /// Element `idx` of a float tensor (F32, F16 or BF16), as f32.
    pub fn get(&self, t: &TensorDesc, idx: [usize; 4]) -> Result<f32, Error> {
        let buf = self.buffer(t.buffer())?;
        let at = t.element_offset(idx);
        let bytes = buf
            .get(at..at + t.dtype().block_bytes())
            .ok_or(Error::BufferTooShort {
                what: "element read",
                needed: at + t.dtype().block_bytes(),
                actual: buf.len(),
            })?;
        match t.dtype() {
            DType::F32 => Ok(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            DType::F16 => Ok(half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()),
            DType::BF16 => Ok(half::bf16::from_le_bytes([bytes[0], bytes[1]]).to_f32()),
            dtype => Err(Error::UnsupportedDType {
                what: "element access",
                dtype,
            }),
        }
    }

    /// Stores `v` at element `idx` of an F32 tensor.
    pub fn set(&mut self, t: &TensorDesc, idx: [usize; 4], v: f32) -> Result<(), Error> {
        if t.dtype() != DType::F32 {
            return Err(Error::UnsupportedDType {
                what: "element store (results are F32)",
                dtype: t.dtype(),
            });
        }
        let at = t.element_offset(idx);
        let buf = self.buffer_mut(t.buffer())?;
        let len = buf.len();
        let dst = buf.get_mut(at..at + 4).ok_or(Error::BufferTooShort {
            what: "element store",
            needed: at + 4,
            actual: len,
        })?;
        dst.copy_from_slice(&v.to_le_bytes());
        Ok(())
    }

    /// All elements of a float tensor in GGML order.
    pub fn read(&self, t: &TensorDesc) -> Result<Vec<f32>, Error> {
        self.check(t)?;
        check_gather(t)?;
        (0..t.n_elements())
            .map(|l| self.get(t, t.unravel(l)))
            .collect()
    }

    /// Stores `values` (GGML order) into a float tensor, converting to its format.
    pub fn write(&mut self, t: &TensorDesc, values: &[f32]) -> Result<(), Error> {
        self.check(t)?;
        if values.len() != t.n_elements() {
            return Err(Error::LengthMismatch {
                what: "tensor values",
                expected: t.n_elements(),
                actual: values.len(),
            });
        }
        for (l, &v) in values.iter().enumerate() {
            let at = t.element_offset(t.unravel(l));
            let buf = self.buffer_mut(t.buffer())?;
            match t.dtype() {
                DType::F32 => buf[at..at + 4].copy_from_slice(&v.to_le_bytes()),
                DType::F16 => {
                    buf[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes())
                }
                DType::BF16 => {
                    buf[at..at + 2].copy_from_slice(&half::bf16::from_f32(v).to_le_bytes())
                }
                dtype => {
                    return Err(Error::UnsupportedDType {
                        what: "element store",
                        dtype,
                    });
                }
            }
        }
        Ok(())
    }

    /// Stores packed rows (any format) into a tensor with packed rows.
    pub fn write_rows(&mut self, t: &TensorDesc, bytes: &[u8]) -> Result<(), Error> {
        self.check(t)?;
        let rb = t.row_bytes();
        if bytes.len() != rb * t.n_rows() {
            return Err(Error::LengthMismatch {
                what: "packed rows",
                expected: rb * t.n_rows(),
                actual: bytes.len(),
            });
        }
        for (r, row) in bytes.chunks_exact(rb.max(1)).enumerate() {
            let at = t.element_offset([
                0,
                r % t.ne()[1],
                r / t.ne()[1] % t.ne()[2],
                r / t.ne()[1] / t.ne()[2],
            ]);
            self.buffer_mut(t.buffer())?[at..at + rb].copy_from_slice(row);
        }
        Ok(())
    }

    /// The packed rows of a tensor whose rows are packed (weights).
    pub fn read_rows(&self, t: &TensorDesc) -> Result<Vec<u8>, Error> {
        self.check(t)?;
        let rb = t.row_bytes();
        let buf = self.buffer(t.buffer())?;
        let mut out = Vec::with_capacity(rb * t.n_rows());
        for r in 0..t.n_rows() {
            let at = t.element_offset([
                0,
                r % t.ne()[1],
                r / t.ne()[1] % t.ne()[2],
                r / t.ne()[1] / t.ne()[2],
            ]);
            out.extend_from_slice(&buf[at..at + rb]);
        }
        Ok(out)
    }
}

/// Host byte buffers the executor reads and writes, indexed by [`BufferId`].
pub trait Buffers {
    /// The bytes of buffer `id`.
    fn buffer(&self, id: BufferId) -> Result<&[u8], Error>;

    /// Calls `f` with the bytes of buffer `id` writable and `self` for
    /// reading the other buffers (the executor never reads buffer `id`
    /// through `self` meanwhile; an implementation may make that an error).
    fn with_buffer_mut<R>(
        &mut self,
        id: BufferId,
        f: impl FnOnce(&mut [u8], &Self) -> R,
    ) -> Result<R, Error>;
}

/// Fills every buffer of `mem` (`n` of them, numbered from 0) with the
/// bytes `download` returns for it (a device-resident executor reading its
/// buffers back); a length that differs from the host buffer's is an error.
pub fn fill_buffers<M: Buffers, E: From<Error>>(
    mem: &mut M,
    n: usize,
    mut download: impl FnMut(BufferId) -> Result<Vec<u8>, E>,
) -> Result<(), E> {
    for i in 0..n {
        let id = BufferId(u32::try_from(i).map_err(|_| Error::Overflow {
            what: "buffer index",
        })?);
        let bytes = download(id)?;
        mem.with_buffer_mut(id, |dst, _| {
            crate::error::check_len("host buffer for the device plan", bytes.len(), dst.len())?;
            dst.copy_from_slice(&bytes);
            Ok::<(), Error>(())
        })??;
    }
    Ok(())
}

impl Buffers for Memory {
    fn buffer(&self, id: BufferId) -> Result<&[u8], Error> {
        Memory::buffer(self, id)
    }

    fn with_buffer_mut<R>(
        &mut self,
        id: BufferId,
        f: impl FnOnce(&mut [u8], &Self) -> R,
    ) -> Result<R, Error> {
        let mut bytes = core::mem::take(self.buffer_vec_mut(id)?);
        let r = f(&mut bytes, self);
        *self.buffer_vec_mut(id)? = bytes;
        Ok(r)
    }
}

/// A tensor's packed bytes (rows in order), borrowed when contiguous.
pub fn packed<'a>(bytes: &'a [u8], t: &TensorDesc) -> Result<Cow<'a, [u8]>, Error> {
    let ext = t.byte_extent();
    if ext.end > bytes.len() {
        return Err(Error::BufferTooShort {
            what: "tensor extent",
            needed: ext.end,
            actual: bytes.len(),
        });
    }
    if t.is_contiguous() {
        return Ok(Cow::Borrowed(&bytes[ext.start..ext.end]));
    }
    if t.nb()[0] != t.dtype().block_bytes() {
        return Err(Error::UnsupportedDType {
            what: "executor input with strided blocks",
            dtype: t.dtype(),
        });
    }
    check_gather(t)?;
    let rb = t.row_bytes();
    let ne = t.ne();
    let mut out = Vec::with_capacity(rb * t.n_rows());
    for r in 0..t.n_rows() {
        let at = t.element_offset([0, r % ne[1], r / ne[1] % ne[2], r / ne[1] / ne[2]]);
        out.extend_from_slice(&bytes[at..at + rb]);
    }
    Ok(Cow::Owned(out))
}

/// Little-endian f32 values of `b` (a whole number of 4-byte words).
pub(crate) fn f32_le(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A float tensor (F32, F16 or BF16) as packed f32 values, borrowed when
/// F32, contiguous and 4-byte aligned.
pub fn gather_f32<'a>(bytes: &'a [u8], t: &TensorDesc) -> Result<Cow<'a, [f32]>, Error> {
    let p = packed(bytes, t)?;
    match t.dtype() {
        DType::F32 => match p {
            Cow::Borrowed(b) => match bytemuck::try_cast_slice::<u8, f32>(b) {
                Ok(f) => Ok(Cow::Borrowed(f)),
                Err(_) => Ok(Cow::Owned(f32_le(b))),
            },
            Cow::Owned(b) => Ok(Cow::Owned(f32_le(&b))),
        },
        DType::F16 | DType::BF16 => {
            let mut out = vec![0.0f32; t.n_elements()];
            crate::quant::dequantize_row(t.dtype(), &p, &mut out)?;
            Ok(Cow::Owned(out))
        }
        dtype => Err(Error::UnsupportedDType {
            what: "element-wise input",
            dtype,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_zero_stride_views_are_not_gathered() {
        let rows = MAX_GATHER_ELEMENTS + 1;
        let t =
            TensorDesc::strided(DType::F32, [1, rows, 1, 1], [4, 0, 0, 0], BufferId(0), 0).unwrap();
        let mem = Memory::new(&[4]);
        let refused = Error::OutOfRange {
            what: "elements gathered from one tensor",
            value: rows,
            min: 0,
            max: MAX_GATHER_ELEMENTS,
        };
        assert_eq!(mem.read(&t), Err(refused));
        assert_eq!(packed(&[0u8; 4], &t).map(|_| ()), Err(refused));
        // A small broadcast view is gathered.
        let small =
            TensorDesc::strided(DType::F32, [1, 3, 1, 1], [4, 0, 0, 0], BufferId(0), 0).unwrap();
        assert_eq!(mem.read(&small).unwrap(), [0.0; 3]);
    }
}
