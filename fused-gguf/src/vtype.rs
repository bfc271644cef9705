//! The thirteen GGUF metadata value types. This sits below the error type,
//! which names them; [`crate::value`] re-exports it.

/// The type of a metadata value, numbered as the GGUF specification numbers
/// it (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `UINT8` (0).
    U8,
    /// `INT8` (1).
    I8,
    /// `UINT16` (2).
    U16,
    /// `INT16` (3).
    I16,
    /// `UINT32` (4).
    U32,
    /// `INT32` (5).
    I32,
    /// `FLOAT32` (6).
    F32,
    /// `BOOL` (7): one byte, 0 or 1.
    Bool,
    /// `STRING` (8): a `u64` byte length, then UTF-8 bytes.
    String,
    /// `ARRAY` (9): an element type `u32`, a `u64` length, then the elements.
    Array,
    /// `UINT64` (10).
    U64,
    /// `INT64` (11).
    I64,
    /// `FLOAT64` (12).
    F64,
}

impl ValueType {
    /// The type with GGUF type id `id`, if there is one.
    pub const fn from_id(id: u32) -> Option<ValueType> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// The GGUF type id.
    pub const fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// The specification's name for the type (`UINT32`, `STRING`, …).
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "UINT8",
            ValueType::I8 => "INT8",
            ValueType::U16 => "UINT16",
            ValueType::I16 => "INT16",
            ValueType::U32 => "UINT32",
            ValueType::I32 => "INT32",
            ValueType::F32 => "FLOAT32",
            ValueType::Bool => "BOOL",
            ValueType::String => "STRING",
            ValueType::Array => "ARRAY",
            ValueType::U64 => "UINT64",
            ValueType::I64 => "INT64",
            ValueType::F64 => "FLOAT64",
        }
    }

    /// Bytes a value of this type takes, for the fixed-size types.
    pub(crate) const fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes a value of this type can take: its size, or its
    /// header (a string's length, an array's element type and length).
    pub(crate) const fn min_size(self) -> u64 {
        match self.fixed_size() {
            Some(n) => n,
            None => match self {
                ValueType::String => 8,
                _ => 12,
            },
        }
    }
}

impl core::fmt::Display for ValueType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
