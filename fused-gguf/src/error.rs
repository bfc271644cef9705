//! The one error type: everything that can be wrong with a GGUF file, or
//! with a question asked of a parsed one. Each variant names the key or the
//! tensor concerned and the values that broke the rule.

use alloc::string::String;
use core::fmt;

use crate::vtype::ValueType;

/// Why a GGUF file was refused, or why a question about it has no answer.
///
/// Names read from the file (keys, tensor names) are kept verbatim in the
/// fields; [`Display`](fmt::Display) escapes their control characters, so a
/// hostile name cannot rewrite a terminal or forge a log line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GgufError {
    /// The file ends before something it announces.
    Truncated {
        /// What was being read ("value of key `general.name`", …).
        what: String,
        /// Where it starts in the file.
        offset: u64,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// The file does not start with `GGUF`.
    BadMagic {
        /// Its first four bytes.
        found: [u8; 4],
    },
    /// A GGUF version other than 2 or 3 (or a big-endian file, whose
    /// version reads byte-swapped).
    UnsupportedVersion {
        /// The version field, read little-endian.
        version: u32,
    },
    /// A count above its [`Limits`](crate::Limits) entry.
    TooMany {
        /// What was counted ("tensors", "elements in the array of key `x`", …).
        what: String,
        /// The count the file gives.
        count: u64,
        /// The limit.
        max: u64,
    },
    /// A key, tensor name or string value that is not UTF-8.
    BadUtf8 {
        /// Which one ("metadata key 3", "value of key `x`", …).
        what: String,
    },
    /// Two metadata entries with one key.
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// Two tensors with one name.
    DuplicateTensor {
        /// The name.
        tensor: String,
    },
    /// A metadata value type id outside the thirteen GGUF types.
    UnknownValueType {
        /// The key whose value (or array element) has it.
        key: String,
        /// The type id.
        type_id: u32,
    },
    /// A boolean stored as a byte other than 0 or 1.
    BadBool {
        /// The key whose value (or array element) it is.
        key: String,
        /// The byte.
        byte: u8,
    },
    /// Arrays nested deeper than [`Limits::max_depth`](crate::Limits::max_depth).
    NestingTooDeep {
        /// The key whose value they are.
        key: String,
        /// The limit.
        max: usize,
    },
    /// A value (or array element) of another type than the one required.
    WrongType {
        /// The key.
        key: String,
        /// The type required.
        expected: ValueType,
        /// The type the file has.
        found: ValueType,
    },
    /// A key asked for that the file does not have.
    MissingKey {
        /// The key.
        key: String,
    },
    /// `general.alignment` is zero or not a power of two.
    BadAlignment {
        /// Its value.
        alignment: u32,
    },
    /// A tensor with no dimensions or more than GGML's four.
    BadDims {
        /// The tensor.
        tensor: String,
        /// Its dimension count.
        n_dims: u32,
    },
    /// A GGML type id with no known block size (never defined, or removed
    /// from GGUF files), so the tensor's extent cannot be checked.
    UnknownTensorType {
        /// The tensor.
        tensor: String,
        /// The type id.
        type_id: u32,
    },
    /// A GGML type the file may use but `fused-core` has no format for
    /// (from [`TensorInfo::dtype`](crate::TensorInfo::dtype); the file itself
    /// is accepted).
    UnsupportedType {
        /// The tensor.
        tensor: String,
        /// GGML's name of the type.
        type_name: &'static str,
        /// The type id.
        type_id: u32,
    },
    /// A tensor whose element count exceeds GGML's `int64_t`, or whose byte
    /// size exceeds `u64`.
    SizeOverflow {
        /// The tensor.
        tensor: String,
        /// Its dimensions, GGML order, padded with 1.
        ne: [u64; 4],
    },
    /// A row length (`ne[0]`) that is not a whole number of blocks.
    NotBlockAligned {
        /// The tensor.
        tensor: String,
        /// GGML's name of its type.
        type_name: &'static str,
        /// The row length.
        ne0: u64,
        /// Elements per block of the type.
        block_len: u64,
    },
    /// A tensor offset that is not a multiple of the file's alignment.
    MisalignedOffset {
        /// The tensor.
        tensor: String,
        /// Its offset from the start of the data section.
        offset: u64,
        /// The alignment.
        alignment: u32,
    },
    /// A tensor whose end, as a file position, does not fit in `u64`.
    OffsetOverflow {
        /// The tensor.
        tensor: String,
        /// Its offset from the start of the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
    },
    /// A tensor whose data runs past the end of the file.
    OutOfBounds {
        /// The tensor.
        tensor: String,
        /// The file position one past its last byte.
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// Two tensors that share bytes.
    Overlap {
        /// The one that starts first.
        first: String,
        /// The one that starts inside it.
        second: String,
    },
    /// Rows asked of a tensor beyond its last row.
    RowsOutOfRange {
        /// The tensor.
        tensor: String,
        /// The first row asked for.
        first: u64,
        /// The number of rows asked for.
        count: u64,
        /// Its row count.
        rows: u64,
    },
    /// A tensor name that would not stay one plain file name in a directory
    /// (see [`safe_file_stem`](crate::safe_file_stem)).
    UnsafeName {
        /// The name.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
}

/// Writes `s` with its control characters escaped (`\n`, `\u{1b}`, …).
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_debug())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Truncated {
                what,
                offset,
                needed,
                available,
            } => write!(
                f,
                "the file ends inside {}: {needed} bytes needed at byte {offset}, {available} left",
                Escaped(what)
            ),
            GgufError::BadMagic { found } => write!(
                f,
                "not a GGUF file: it starts with \"{}\", not \"GGUF\"",
                found.escape_ascii()
            ),
            GgufError::UnsupportedVersion { version } => {
                let swapped = version.swap_bytes();
                if (1..=3).contains(&swapped) {
                    write!(
                        f,
                        "GGUF version field {version:#010x} is version {swapped} written big-endian; \
                         only little-endian files are read"
                    )
                } else if *version == 1 {
                    f.write_str("GGUF version 1 (32-bit counts) is not supported (2 or 3)")
                } else {
                    write!(f, "GGUF version {version} is not supported (2 or 3)")
                }
            }
            GgufError::TooMany { what, count, max } => write!(
                f,
                "{count} {} is more than the limit of {max}",
                Escaped(what)
            ),
            GgufError::BadUtf8 { what } => write!(f, "{} is not valid UTF-8", Escaped(what)),
            GgufError::DuplicateKey { key } => {
                write!(f, "metadata key {} appears twice", Escaped(key))
            }
            GgufError::DuplicateTensor { tensor } => {
                write!(f, "tensor name {} appears twice", Escaped(tensor))
            }
            GgufError::UnknownValueType { key, type_id } => {
                write!(f, "{}: unknown metadata value type {type_id}", Escaped(key))
            }
            GgufError::BadBool { key, byte } => write!(
                f,
                "{}: boolean stored as byte {byte} (must be 0 or 1)",
                Escaped(key)
            ),
            GgufError::NestingTooDeep { key, max } => {
                write!(f, "{}: arrays nested more than {max} deep", Escaped(key))
            }
            GgufError::WrongType {
                key,
                expected,
                found,
            } => write!(f, "{}: expected {expected}, found {found}", Escaped(key)),
            GgufError::MissingKey { key } => write!(f, "no metadata key {}", Escaped(key)),
            GgufError::BadAlignment { alignment } => write!(
                f,
                "general.alignment is {alignment}, not a non-zero power of two"
            ),
            GgufError::BadDims { tensor, n_dims } => write!(
                f,
                "{}: {n_dims} dimensions (GGML tensors have 1 to 4)",
                Escaped(tensor)
            ),
            GgufError::UnknownTensorType { tensor, type_id } => write!(
                f,
                "{}: GGML type id {type_id} is unknown or removed, so its size cannot be checked",
                Escaped(tensor)
            ),
            GgufError::UnsupportedType {
                tensor,
                type_name,
                type_id,
            } => write!(
                f,
                "{}: GGML type {type_name} ({type_id}) has no fused-core format",
                Escaped(tensor)
            ),
            GgufError::SizeOverflow { tensor, ne } => write!(
                f,
                "{}: shape {ne:?} has more elements than GGML's int64 or more bytes than u64 holds",
                Escaped(tensor)
            ),
            GgufError::NotBlockAligned {
                tensor,
                type_name,
                ne0,
                block_len,
            } => write!(
                f,
                "{}: row length {ne0} is not a multiple of the {type_name} block length {block_len}",
                Escaped(tensor)
            ),
            GgufError::MisalignedOffset {
                tensor,
                offset,
                alignment,
            } => write!(
                f,
                "{}: data offset {offset} is not a multiple of the alignment {alignment}",
                Escaped(tensor)
            ),
            GgufError::OffsetOverflow {
                tensor,
                offset,
                size,
            } => write!(
                f,
                "{}: data at offset {offset}, {size} bytes long, ends beyond byte 2^64",
                Escaped(tensor)
            ),
            GgufError::OutOfBounds {
                tensor,
                end,
                file_len,
            } => write!(
                f,
                "{}: data ends at byte {end} beyond the end of the file ({file_len} bytes)",
                Escaped(tensor)
            ),
            GgufError::Overlap { first, second } => write!(
                f,
                "tensors {} and {} share bytes",
                Escaped(first),
                Escaped(second)
            ),
            GgufError::RowsOutOfRange {
                tensor,
                first,
                count,
                rows,
            } => write!(
                f,
                "{}: {count} rows from row {first} asked for, the tensor has {rows}",
                Escaped(tensor)
            ),
            GgufError::UnsafeName { name, reason } => {
                write!(f, "tensor name {name:?} is not a safe file name: {reason}")
            }
        }
    }
}

impl core::error::Error for GgufError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn messages_escape_control_characters() {
        let e = GgufError::DuplicateTensor {
            tensor: "a\n\u{1b}[2Jb".into(),
        };
        assert_eq!(e.to_string(), "tensor name a\\n\\u{1b}[2Jb appears twice");
    }

    #[test]
    fn big_endian_versions_are_named() {
        let e = GgufError::UnsupportedVersion {
            version: 0x0300_0000,
        };
        assert!(e.to_string().contains("big-endian"), "{e}");
    }
}
