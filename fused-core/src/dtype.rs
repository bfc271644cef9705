//! Element formats: the float types and every GGML block format the core knows.
//!
//! [`DType`] and its fixed properties are defined below the error type (which
//! names formats); this module adds what can fail: type ids read from a file
//! and row sizes.

pub use crate::format::{DType, QK_K};

use crate::error::Error;

impl DType {
    /// The format with GGML/GGUF type id `id`, if the core knows it.
    pub fn from_ggml_id(id: u32) -> Result<DType, Error> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.ggml_id() == id)
            .ok_or(Error::UnknownGgmlType { id })
    }

    /// Bytes taken by `n` elements, or an error when `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize, Error> {
        let blk = self.block_len();
        if !n.is_multiple_of(blk) {
            return Err(Error::NotBlockAligned {
                dtype: self,
                len: n,
            });
        }
        (n / blk)
            .checked_mul(self.block_bytes())
            .ok_or(Error::Overflow { what: "row size" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_ggml_id(d.ggml_id()).unwrap(), d);
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert!(DType::from_ggml_id(10).is_err(), "Q2_K is not supported");
    }

    #[test]
    fn row_bytes_checks_blocks() {
        assert_eq!(DType::Q4_0.row_bytes(64).unwrap(), 36);
        assert_eq!(DType::Q6_K.row_bytes(512).unwrap(), 420);
        assert_eq!(DType::F16.row_bytes(3).unwrap(), 6);
        assert!(matches!(
            DType::Q4_K.row_bytes(100),
            Err(Error::NotBlockAligned { .. })
        ));
    }
}
