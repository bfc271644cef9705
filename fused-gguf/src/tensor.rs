//! Tensor infos: reading one from the header, computing its byte size from
//! its GGML type, and placing it in the file.

use alloc::format;
use fused_core::DType;

use crate::error::GgufError;
use crate::limits::Limits;
use crate::reader::{Cursor, to_u64};
use crate::types::{GgmlType, lookup};

/// GGML's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;

/// One tensor of a parsed file: its name, shape and GGML type, and where its
/// bytes are. Its data lies inside the file and shares no byte with any
/// other tensor's (both checked at parse time).
///
/// Two infos are equal when they describe the same tensor over the same
/// bytes in memory (the data is compared by address, not read).
#[derive(Clone, Copy, Debug)]
pub struct TensorInfo<'a> {
    name: &'a str,
    n_dims: u32,
    ne: [u64; 4],
    ty: GgmlType,
    offset: u64,
    file_offset: u64,
    n_rows: u64,
    row_bytes: u64,
    data: &'a [u8],
}

impl PartialEq for TensorInfo<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.n_dims == other.n_dims
            && self.ne == other.ne
            && self.ty == other.ty
            && self.offset == other.offset
            && self.file_offset == other.file_offset
            && core::ptr::eq(self.data, other.data)
    }
}

impl Eq for TensorInfo<'_> {}

impl<'a> TensorInfo<'a> {
    /// Its name (checked UTF-8; not checked as a file name: see
    /// [`safe_file_stem`](crate::safe_file_stem)).
    pub const fn name(&self) -> &'a str {
        self.name
    }

    /// Its dimensions as the file gives them (1 to 4, GGML order: `ne[0]`
    /// is the row length).
    pub fn dims(&self) -> &[u64] {
        let n = usize::try_from(self.n_dims).unwrap_or(4).min(4);
        self.ne.get(..n).unwrap_or(&self.ne)
    }

    /// Its four GGML dimensions, those beyond [`dims`](Self::dims) being 1.
    pub const fn ne(&self) -> [u64; 4] {
        self.ne
    }

    /// Its GGML type id.
    pub const fn ggml_type(&self) -> u32 {
        self.ty.id
    }

    /// GGML's name of its type (`ggml_type_name`: `"q4_K"`, `"iq2_xs"`, …).
    pub const fn type_name(&self) -> &'static str {
        self.ty.name
    }

    /// Its `fused-core` format, or [`GgufError::UnsupportedType`] for a GGML
    /// type the core does not compute on (the tensor is valid all the same).
    pub fn dtype(&self) -> Result<DType, GgufError> {
        DType::from_ggml_id(self.ty.id).map_err(|_| GgufError::UnsupportedType {
            tensor: self.name.into(),
            type_name: self.ty.name,
            type_id: self.ty.id,
        })
    }

    /// Its offset from the start of the data section, as the file gives it.
    pub const fn offset(&self) -> u64 {
        self.offset
    }

    /// Its offset from the start of the file.
    pub const fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// Its size in bytes.
    pub const fn byte_len(&self) -> u64 {
        to_u64(self.data.len())
    }

    /// Its rows: the product of every dimension but the first.
    pub const fn n_rows(&self) -> u64 {
        self.n_rows
    }

    /// Bytes of one packed row (`ne[0]` elements).
    pub const fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// Its bytes: a view of the file (with a memory-mapped file, the OS
    /// reads them when they are touched).
    pub const fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The packed bytes of `count` rows from row `first`, or
    /// [`GgufError::RowsOutOfRange`] when they run past its last row.
    pub fn rows(&self, first: u64, count: u64) -> Result<&'a [u8], GgufError> {
        let out_of_range = || GgufError::RowsOutOfRange {
            tensor: self.name.into(),
            first,
            count,
            rows: self.n_rows,
        };
        let end = first.checked_add(count).ok_or_else(out_of_range)?;
        if end > self.n_rows {
            return Err(out_of_range());
        }
        // Both products are at most the tensor's size, which fits.
        let start = first.checked_mul(self.row_bytes).ok_or_else(out_of_range)?;
        let end = end.checked_mul(self.row_bytes).ok_or_else(out_of_range)?;
        let start = usize::try_from(start).map_err(|_| out_of_range())?;
        let end = usize::try_from(end).map_err(|_| out_of_range())?;
        self.data.get(start..end).ok_or_else(out_of_range)
    }
}

/// A tensor info read from the header, its size known, not yet placed in
/// the file (the data section starts after the last one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawTensor<'a> {
    pub(crate) name: &'a str,
    n_dims: u32,
    ne: [u64; 4],
    ty: GgmlType,
    offset: u64,
    n_rows: u64,
    row_bytes: u64,
    size: u64,
}

/// Fewest bytes a tensor info takes: name length, dimension count, one
/// dimension, type, offset.
pub(crate) const MIN_TENSOR_INFO: u64 = 8 + 4 + 8 + 4 + 8;

/// Reads tensor info number `index` at the cursor and computes its size.
pub(crate) fn read_tensor_info<'a>(
    cur: &mut Cursor<'a>,
    index: u64,
    limits: &Limits,
) -> Result<RawTensor<'a>, GgufError> {
    let name = cur.str(limits.max_string_len, || {
        format!("the name of tensor {index}")
    })?;
    let what = || format!("the tensor info of `{name}`");
    let n_dims = cur.u32().map_err(|s| s.what(what()))?;
    if !(1..=MAX_DIMS).contains(&n_dims) {
        return Err(GgufError::BadDims {
            tensor: name.into(),
            n_dims,
        });
    }
    let mut ne = [1u64; 4];
    for d in ne.iter_mut().take(n_dims as usize) {
        *d = cur.u64().map_err(|s| s.what(what()))?;
    }
    let type_id = cur.u32().map_err(|s| s.what(what()))?;
    let offset = cur.u64().map_err(|s| s.what(what()))?;
    let ty = lookup(type_id).ok_or_else(|| GgufError::UnknownTensorType {
        tensor: name.into(),
        type_id,
    })?;
    let (n_rows, row_bytes, size) = sizes(ne, ty).ok_or_else(|| GgufError::SizeOverflow {
        tensor: name.into(),
        ne,
    })?;
    let [ne0, ..] = ne;
    if !ne0.is_multiple_of(ty.block_len) {
        return Err(GgufError::NotBlockAligned {
            tensor: name.into(),
            type_name: ty.name,
            ne0,
            block_len: ty.block_len,
        });
    }
    Ok(RawTensor {
        name,
        n_dims,
        ne,
        ty,
        offset,
        n_rows,
        row_bytes,
        size,
    })
}

/// Rows, bytes per row and bytes of a tensor of shape `ne` and type `ty`,
/// or `None` when the element or row count exceeds GGML's `int64_t` or the
/// byte size exceeds `u64`. Rows are counted separately because with
/// `ne[0] == 0` they need not fit although the element count does.
fn sizes(ne: [u64; 4], ty: GgmlType) -> Option<(u64, u64, u64)> {
    let int64_max = i64::MAX.unsigned_abs();
    let [ne0, ne1, ne2, ne3] = ne;
    let n_rows = ne1.checked_mul(ne2)?.checked_mul(ne3)?;
    let n_elems = ne0.checked_mul(n_rows)?;
    if n_rows > int64_max || n_elems > int64_max {
        return None;
    }
    let row_bytes = ne0.checked_div(ty.block_len)?.checked_mul(ty.block_bytes)?;
    let size = n_rows.checked_mul(row_bytes)?;
    Some((n_rows, row_bytes, size))
}

impl<'a> RawTensor<'a> {
    /// Places the tensor in `file`, whose data section starts at
    /// `data_start` and whose tensors are aligned to `alignment` (non-zero).
    pub(crate) fn place(
        self,
        file: &'a [u8],
        data_start: u64,
        alignment: u32,
    ) -> Result<TensorInfo<'a>, GgufError> {
        if !self.offset.is_multiple_of(u64::from(alignment)) {
            return Err(GgufError::MisalignedOffset {
                tensor: self.name.into(),
                offset: self.offset,
                alignment,
            });
        }
        let overflow = || GgufError::OffsetOverflow {
            tensor: self.name.into(),
            offset: self.offset,
            size: self.size,
        };
        let start = data_start.checked_add(self.offset).ok_or_else(overflow)?;
        let end = start.checked_add(self.size).ok_or_else(overflow)?;
        let file_len = to_u64(file.len());
        let out = || GgufError::OutOfBounds {
            tensor: self.name.into(),
            end,
            file_len,
        };
        if end > file_len {
            return Err(out());
        }
        let (s, e) = (usize::try_from(start), usize::try_from(end));
        let data = match (s, e) {
            (Ok(s), Ok(e)) => file.get(s..e).ok_or_else(out)?,
            _ => return Err(out()),
        };
        Ok(TensorInfo {
            name: self.name,
            n_dims: self.n_dims,
            ne: self.ne,
            ty: self.ty,
            offset: self.offset,
            file_offset: start,
            n_rows: self.n_rows,
            row_bytes: self.row_bytes,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_blocks() {
        let q4k = lookup(12).unwrap();
        assert_eq!(sizes([512, 3, 1, 1], q4k), Some((3, 288, 864)));
        let f32_ = lookup(0).unwrap();
        assert_eq!(sizes([1 << 32, 1 << 32, 1, 1], f32_), None);
        assert_eq!(sizes([1 << 31, 1 << 31, 1, 1], f32_), None, "2^64 bytes");
        assert_eq!(sizes([0, 1 << 40, 1 << 40, 1], f32_), None, "rows overflow");
        assert_eq!(sizes([0, 7, 1, 1], f32_), Some((7, 0, 0)));
    }
}
