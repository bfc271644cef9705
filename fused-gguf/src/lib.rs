//! # fused-gguf: a GGUF reader for files other people made
//!
//! [`Gguf::parse`] reads a whole GGUF file (versions 2 and 3, little-endian)
//! from a byte slice, usually a memory map, and checks it before returning:
//! once it returns `Ok`, every tensor's bytes lie inside the file, no two
//! tensors share a byte, every key and tensor name is unique UTF-8, and
//! every metadata value, arrays nested to any allowed depth included, has
//! been read and checked. Questions asked afterwards
//! ([`TensorInfo::data`], the [`Array`] iterators) cannot fail.
//!
//! A hostile file gets a typed [`GgufError`] naming the key or tensor and
//! the values at fault, never a panic, an overflow, a read out of bounds, a
//! deep recursion or an allocation sized by a number in the file:
//!
//! - every count is checked against [`Limits`] and against what the bytes
//!   left could hold before anything is allocated or walked;
//! - arrays are walked with an explicit stack bounded by
//!   [`Limits::max_depth`];
//! - every size and offset is computed with checked arithmetic and checked
//!   against the slice;
//! - a tensor's size comes from a table of every GGML type's block (so
//!   tensors of types `fused-core` does not compute on are still checked,
//!   and kept: [`TensorInfo::dtype`] says why they cannot be used); a type
//!   id outside the table is refused.
//!
//! The crate is `no_std` (with `alloc`) and has no `unsafe` code.
//!
//! ## Example
//!
//! ```
//! use fused_gguf::{Gguf, GgufError};
//!
//! // A file with one metadata entry and one 2 × 2 f32 tensor.
//! let mut file = Vec::new();
//! file.extend(b"GGUF");
//! file.extend(3u32.to_le_bytes()); // version
//! file.extend(1u64.to_le_bytes()); // tensors
//! file.extend(1u64.to_le_bytes()); // metadata entries
//! let key = "general.name";
//! file.extend((key.len() as u64).to_le_bytes());
//! file.extend(key.as_bytes());
//! file.extend(8u32.to_le_bytes()); // STRING
//! file.extend(4u64.to_le_bytes());
//! file.extend(b"tiny");
//! let name = "blk.0.ffn_up.weight";
//! file.extend((name.len() as u64).to_le_bytes());
//! file.extend(name.as_bytes());
//! file.extend(2u32.to_le_bytes()); // dimensions
//! file.extend(2u64.to_le_bytes());
//! file.extend(2u64.to_le_bytes());
//! file.extend(0u32.to_le_bytes()); // f32
//! file.extend(0u64.to_le_bytes()); // offset in the data section
//! file.resize(file.len().next_multiple_of(32), 0);
//! for x in [1.0f32, 2.0, 3.0, 4.0] {
//!     file.extend(x.to_le_bytes());
//! }
//!
//! let gguf = Gguf::parse(&file)?;
//! assert_eq!(gguf.get_str("general.name")?, "tiny");
//! let t = gguf.tensor("blk.0.ffn_up.weight").unwrap();
//! assert_eq!(t.dims(), &[2, 2]);
//! assert_eq!(t.rows(1, 1)?, &file[file.len() - 8..]);
//!
//! // One byte less and the tensor runs past the end.
//! let err = Gguf::parse(&file[..file.len() - 1]).unwrap_err();
//! assert!(matches!(err, GgufError::OutOfBounds { .. }));
//! assert_eq!(
//!     err.to_string(),
//!     "blk.0.ffn_up.weight: data ends at byte 144 beyond the end of the file (143 bytes)"
//! );
//! # Ok::<(), GgufError>(())
//! ```
//!
//! ## Modules
//!
//! One concern each, importing downwards only: `vtype` (the value type
//! enum) and `limits`; `error`; `reader` (the checked cursor); `types` (GGML
//! type blocks); `value` (values, the iterative array walk, iterators);
//! `tensor` (tensor infos, sizes, placement); `name` (tensor names as file
//! names); `file` ([`Gguf`]).

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

mod error;
mod file;
mod limits;
mod name;
mod reader;
mod tensor;
mod types;
mod value;
mod vtype;

pub use error::GgufError;
pub use file::Gguf;
pub use limits::Limits;
pub use name::safe_file_stem;
pub use tensor::TensorInfo;
pub use value::{Array, Arrays, Numbers, Strings, Value, ValueType, Values};
