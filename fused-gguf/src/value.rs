//! Metadata values: the value model, the iterative reader that checks a
//! value (arrays of any depth, with an explicit stack, never recursion), and
//! the typed iterators over arrays checked that way.

use alloc::format;
use alloc::vec::Vec;
use core::slice::ChunksExact;

use crate::error::GgufError;
use crate::limits::Limits;
use crate::reader::Cursor;
pub use crate::vtype::ValueType;

/// One metadata value. Strings and arrays borrow the file's bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// `UINT8`.
    U8(u8),
    /// `INT8`.
    I8(i8),
    /// `UINT16`.
    U16(u16),
    /// `INT16`.
    I16(i16),
    /// `UINT32`.
    U32(u32),
    /// `INT32`.
    I32(i32),
    /// `FLOAT32`.
    F32(f32),
    /// `BOOL`.
    Bool(bool),
    /// `STRING`, checked UTF-8.
    String(&'a str),
    /// `ARRAY`, checked in full and decoded on demand.
    Array(Array<'a>),
    /// `UINT64`.
    U64(u64),
    /// `INT64`.
    I64(i64),
    /// `FLOAT64`.
    F64(f64),
}

impl Value<'_> {
    /// The value's type.
    pub const fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as a non-negative integer, whatever integer type stores
    /// it (writers differ: `UINT32`, `UINT64` and `INT32` are all seen for
    /// the same key); `None` for a negative integer or another type.
    pub fn as_uint(&self) -> Option<u64> {
        match *self {
            Value::U8(x) => Some(u64::from(x)),
            Value::U16(x) => Some(u64::from(x)),
            Value::U32(x) => Some(u64::from(x)),
            Value::U64(x) => Some(x),
            Value::I8(x) => u64::try_from(x).ok(),
            Value::I16(x) => u64::try_from(x).ok(),
            Value::I32(x) => u64::try_from(x).ok(),
            Value::I64(x) => u64::try_from(x).ok(),
            _ => None,
        }
    }
}

/// An array value: its element type, its length and the bytes of its
/// elements, all checked when the file was parsed (every string UTF-8, every
/// bool 0 or 1, every nested array within the limits), so that iterating
/// cannot fail.
#[derive(Clone, Copy, Debug)]
pub struct Array<'a> {
    key: &'a str,
    elem: ValueType,
    len: usize,
    bytes: &'a [u8],
}

impl PartialEq for Array<'_> {
    /// Equal element types and bytes (the key the array came from aside).
    fn eq(&self, other: &Self) -> bool {
        self.elem == other.elem && self.len == other.len && self.bytes == other.bytes
    }
}

impl<'a> Array<'a> {
    /// The type of its elements.
    pub const fn elem_type(&self) -> ValueType {
        self.elem
    }

    /// Its number of elements.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no elements.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its elements, whatever their type.
    pub fn iter(&self) -> Values<'a> {
        Values {
            cur: Cursor::new(self.bytes),
            key: self.key,
            elem: self.elem,
            left: self.len,
        }
    }

    /// Its elements, when they are strings.
    pub fn strings(&self) -> Result<Strings<'a>, GgufError> {
        self.expect(ValueType::String)?;
        Ok(Strings {
            cur: Cursor::new(self.bytes),
            left: self.len,
        })
    }

    /// Its elements, when they are `UINT32`.
    pub fn u32s(&self) -> Result<Numbers<'a, u32>, GgufError> {
        self.numbers(ValueType::U32, |b| {
            b.try_into().map(u32::from_le_bytes).unwrap_or_default()
        })
    }

    /// Its elements, when they are `INT32`.
    pub fn i32s(&self) -> Result<Numbers<'a, i32>, GgufError> {
        self.numbers(ValueType::I32, |b| {
            b.try_into().map(i32::from_le_bytes).unwrap_or_default()
        })
    }

    /// Its elements, when they are `FLOAT32`.
    pub fn f32s(&self) -> Result<Numbers<'a, f32>, GgufError> {
        self.numbers(ValueType::F32, |b| {
            b.try_into().map(f32::from_le_bytes).unwrap_or_default()
        })
    }

    /// Its elements, when they are arrays.
    ///
    /// Each step walks the element to find where it ends, so a full pass
    /// costs time in proportion to the array's bytes, times the nesting
    /// depth for the inner levels (at most [`Limits::max_depth`] unless the
    /// caller raised it).
    pub fn arrays(&self) -> Result<Arrays<'a>, GgufError> {
        self.expect(ValueType::Array)?;
        Ok(Arrays {
            cur: Cursor::new(self.bytes),
            key: self.key,
            left: self.len,
        })
    }

    fn expect(&self, t: ValueType) -> Result<(), GgufError> {
        if self.elem == t {
            Ok(())
        } else {
            Err(GgufError::WrongType {
                key: self.key.into(),
                expected: t,
                found: self.elem,
            })
        }
    }

    fn numbers<T>(
        &self,
        t: ValueType,
        decode: fn(&[u8]) -> T,
    ) -> Result<Numbers<'a, T>, GgufError> {
        self.expect(t)?;
        let size = t
            .fixed_size()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(1);
        Ok(Numbers {
            chunks: self.bytes.chunks_exact(size),
            decode,
        })
    }
}

impl<'a> IntoIterator for &Array<'a> {
    type Item = Value<'a>;
    type IntoIter = Values<'a>;
    fn into_iter(self) -> Values<'a> {
        self.iter()
    }
}

/// The elements of an [`Array`] as [`Value`]s ([`Array::iter`]).
#[derive(Clone, Debug)]
pub struct Values<'a> {
    cur: Cursor<'a>,
    key: &'a str,
    elem: ValueType,
    left: usize,
}

impl<'a> Iterator for Values<'a> {
    type Item = Value<'a>;
    fn next(&mut self) -> Option<Value<'a>> {
        self.left = self.left.checked_sub(1)?;
        // Checked at parse time, so this cannot fail; if it did, stop.
        let v = read_value(&mut self.cur, self.elem, self.key, &Limits::NONE).ok();
        if v.is_none() {
            self.left = 0;
        }
        v
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Values<'_> {}

/// The elements of an array of strings ([`Array::strings`]).
#[derive(Clone, Debug)]
pub struct Strings<'a> {
    cur: Cursor<'a>,
    left: usize,
}

impl<'a> Iterator for Strings<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        self.left = self.left.checked_sub(1)?;
        let s = self.cur.str(u64::MAX, alloc::string::String::new).ok();
        if s.is_none() {
            self.left = 0;
        }
        s
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Strings<'_> {}

/// The elements of an array of fixed-size numbers ([`Array::u32s`],
/// [`Array::i32s`], [`Array::f32s`]).
#[derive(Clone, Debug)]
pub struct Numbers<'a, T> {
    chunks: ChunksExact<'a, u8>,
    decode: fn(&[u8]) -> T,
}

impl<T> Iterator for Numbers<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.chunks.next().map(self.decode)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl<T> ExactSizeIterator for Numbers<'_, T> {}

/// The elements of an array of arrays ([`Array::arrays`]).
#[derive(Clone, Debug)]
pub struct Arrays<'a> {
    cur: Cursor<'a>,
    key: &'a str,
    left: usize,
}

impl<'a> Iterator for Arrays<'a> {
    type Item = Array<'a>;
    fn next(&mut self) -> Option<Array<'a>> {
        self.left = self.left.checked_sub(1)?;
        let a = read_array(&mut self.cur, self.key, &Limits::NONE).ok();
        if a.is_none() {
            self.left = 0;
        }
        a
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Arrays<'_> {}

/// Reads and checks a value of type `t` (the value of `key`) at the cursor.
pub(crate) fn read_value<'a>(
    cur: &mut Cursor<'a>,
    t: ValueType,
    key: &'a str,
    limits: &Limits,
) -> Result<Value<'a>, GgufError> {
    let what = || format!("the value of key `{key}`");
    let short = |s: crate::reader::Short| s.what(what());
    Ok(match t {
        ValueType::U8 => Value::U8(cur.u8().map_err(short)?),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::U32 => Value::U32(cur.u32().map_err(short)?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::Bool => Value::Bool(bool_byte(cur.u8().map_err(short)?, key)?),
        ValueType::String => Value::String(cur.str(limits.max_string_len, what)?),
        ValueType::Array => Value::Array(read_array(cur, key, limits)?),
        ValueType::U64 => Value::U64(cur.u64().map_err(short)?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array().map_err(short)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array().map_err(short)?)),
    })
}

fn bool_byte(byte: u8, key: &str) -> Result<bool, GgufError> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::BadBool {
            key: key.into(),
            byte,
        }),
    }
}

/// Reads and checks an array (the value of `key`, or an element of it) at
/// the cursor, its header included.
///
/// Nested arrays are walked with an explicit stack of the elements left in
/// each open array of arrays, at most `limits.max_depth` entries, so a file
/// nesting arrays a million deep costs a refusal, not the call stack.
fn read_array<'a>(
    cur: &mut Cursor<'a>,
    key: &'a str,
    limits: &Limits,
) -> Result<Array<'a>, GgufError> {
    if limits.max_depth == 0 {
        return Err(GgufError::NestingTooDeep {
            key: key.into(),
            max: limits.max_depth,
        });
    }
    let (elem, len) = array_header(cur, key, limits)?;
    let start = cur.pos();
    let mut open: Vec<u64> = Vec::new();
    if elements(cur, elem, len, key, limits)? {
        open.push(len);
    }
    while let Some(left) = open.last_mut() {
        if *left == 0 {
            open.pop();
            continue;
        }
        *left -= 1;
        // The array about to be read sits at depth `open.len() + 1`.
        if open.len() >= limits.max_depth {
            return Err(GgufError::NestingTooDeep {
                key: key.into(),
                max: limits.max_depth,
            });
        }
        let (e, n) = array_header(cur, key, limits)?;
        if elements(cur, e, n, key, limits)? {
            open.push(n);
        }
    }
    let len = usize::try_from(len).map_err(|_| GgufError::TooMany {
        what: format!("elements in an array of key `{key}`"),
        count: len,
        max: crate::reader::to_u64(usize::MAX),
    })?;
    Ok(Array {
        key,
        elem,
        len,
        bytes: cur.since(start),
    })
}

/// Reads an array header (element type, length) and checks the length
/// against the limit and against the bytes left, before anything walks it.
fn array_header(
    cur: &mut Cursor<'_>,
    key: &str,
    limits: &Limits,
) -> Result<(ValueType, u64), GgufError> {
    let what = || format!("an array header of key `{key}`");
    let id = cur.u32().map_err(|s| s.what(what()))?;
    let elem = ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.into(),
        type_id: id,
    })?;
    let len = cur.u64().map_err(|s| s.what(what()))?;
    if len > limits.max_array_len {
        return Err(GgufError::TooMany {
            what: format!("elements in an array of key `{key}`"),
            count: len,
            max: limits.max_array_len,
        });
    }
    cur.need(len.saturating_mul(elem.min_size()))
        .map_err(|s| s.what(format!("the {len} elements of an array of key `{key}`")))?;
    Ok((elem, len))
}

/// Reads and checks the `len` elements of type `elem` of an array, unless
/// they are arrays: then returns `true` and reads nothing (the caller walks
/// them).
fn elements(
    cur: &mut Cursor<'_>,
    elem: ValueType,
    len: u64,
    key: &str,
    limits: &Limits,
) -> Result<bool, GgufError> {
    let what = || format!("the elements of an array of key `{key}`");
    match elem {
        ValueType::Array => return Ok(true),
        ValueType::String => {
            for _ in 0..len {
                cur.str(limits.max_string_len, || {
                    format!("a string in an array of key `{key}`")
                })?;
            }
        }
        fixed => {
            let size = fixed.fixed_size().unwrap_or(1);
            let n = len.saturating_mul(size);
            let bytes = cur.take(n).map_err(|s| s.what(what()))?;
            if fixed == ValueType::Bool {
                for &b in bytes {
                    bool_byte(b, key)?;
                }
            }
        }
    }
    Ok(false)
}
