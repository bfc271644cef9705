//! A parsed GGUF file: the header walk, the file-wide rules (unique keys and
//! names, alignment, data section, no overlap) and the questions a runtime
//! asks of the result.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;

use crate::error::GgufError;
use crate::limits::Limits;
use crate::reader::{Cursor, Short, to_u64};
use crate::tensor::{MIN_TENSOR_INFO, RawTensor, TensorInfo, read_tensor_info};
use crate::value::{Array, Value, ValueType, read_value};

/// The key of the data alignment.
const ALIGNMENT_KEY: &str = "general.alignment";

/// The alignment when the file gives none (`GGUF_DEFAULT_ALIGNMENT`).
const DEFAULT_ALIGNMENT: u32 = 32;

/// Fewest bytes a metadata entry takes: key length, value type, one byte.
const MIN_ENTRY: u64 = 8 + 4 + 1;

/// A GGUF file, parsed and checked, borrowing its bytes.
///
/// Holds the metadata and the tensor directory; tensor data stays in the
/// borrowed bytes (with a memory-mapped file, on disk until touched).
#[derive(Clone, Debug)]
pub struct Gguf<'a> {
    version: u32,
    alignment: u32,
    data_offset: u64,
    metadata: Vec<(&'a str, Value<'a>)>,
    keys: BTreeMap<&'a str, usize>,
    tensors: Vec<TensorInfo<'a>>,
    names: BTreeMap<&'a str, usize>,
}

impl<'a> Gguf<'a> {
    /// Parses and checks `bytes`, a whole GGUF file, with the default
    /// [`Limits`].
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        Gguf::parse_with(bytes, &Limits::default())
    }

    /// Parses and checks `bytes`, a whole GGUF file, with `limits`.
    ///
    /// Allocates the metadata and tensor directories (bounded by what the
    /// bytes can hold, and by `limits`), never anything sized by a count or
    /// length the file gives.
    pub fn parse_with(bytes: &'a [u8], limits: &Limits) -> Result<Gguf<'a>, GgufError> {
        let mut cur = Cursor::new(bytes);
        let header = |what: &'static str| move |s: Short| s.what(what.into());
        let magic = cur.array::<4>().map_err(header("the magic"))?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = cur.u32().map_err(header("the version"))?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        let n_tensors = cur.u64().map_err(header("the tensor count"))?;
        let n_kv = cur.u64().map_err(header("the metadata count"))?;
        if n_tensors > limits.max_tensors {
            return Err(GgufError::TooMany {
                what: "tensors".into(),
                count: n_tensors,
                max: limits.max_tensors,
            });
        }
        if n_kv > limits.max_metadata {
            return Err(GgufError::TooMany {
                what: "metadata entries".into(),
                count: n_kv,
                max: limits.max_metadata,
            });
        }
        let least = n_kv
            .saturating_mul(MIN_ENTRY)
            .saturating_add(n_tensors.saturating_mul(MIN_TENSOR_INFO));
        cur.need(least)
            .map_err(header("the metadata and tensor infos"))?;

        let (metadata, keys) = read_metadata(&mut cur, n_kv, limits)?;
        let alignment = alignment(&metadata, &keys)?;
        let (raw, names) = read_tensor_infos(&mut cur, n_tensors, limits)?;

        let header_end = to_u64(cur.pos());
        let data_offset = header_end
            .checked_next_multiple_of(u64::from(alignment))
            .ok_or_else(|| GgufError::Truncated {
                what: "the padding before the data section".into(),
                offset: header_end,
                needed: u64::MAX,
                available: cur.remaining(),
            })?;
        let tensors = raw
            .into_iter()
            .map(|t| t.place(bytes, data_offset, alignment))
            .collect::<Result<Vec<_>, _>>()?;
        check_overlap(&tensors)?;
        Ok(Gguf {
            version,
            alignment,
            data_offset,
            metadata,
            keys,
            tensors,
            names,
        })
    }

    /// The GGUF version (2 or 3).
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment: `general.alignment`, or 32 when absent.
    pub const fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the data section starts in the file: the end of the header
    /// rounded up to the alignment. Tensor offsets count from here.
    pub const fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> impl ExactSizeIterator<Item = (&'a str, &Value<'a>)> + '_ {
        self.metadata.iter().map(|(k, v)| (*k, v))
    }

    /// The value of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        let i = *self.keys.get(key)?;
        self.metadata.get(i).map(|(_, v)| v)
    }

    /// The `UINT32` value of `key`.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.typed(key, ValueType::U32, |v| match v {
            Value::U32(x) => Some(*x),
            _ => None,
        })
    }

    /// The `UINT64` value of `key`.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.typed(key, ValueType::U64, |v| match v {
            Value::U64(x) => Some(*x),
            _ => None,
        })
    }

    /// The `INT32` value of `key`.
    pub fn get_i32(&self, key: &str) -> Result<i32, GgufError> {
        self.typed(key, ValueType::I32, |v| match v {
            Value::I32(x) => Some(*x),
            _ => None,
        })
    }

    /// The `FLOAT32` value of `key`.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.typed(key, ValueType::F32, |v| match v {
            Value::F32(x) => Some(*x),
            _ => None,
        })
    }

    /// The `BOOL` value of `key`.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.typed(key, ValueType::Bool, |v| match v {
            Value::Bool(x) => Some(*x),
            _ => None,
        })
    }

    /// The `STRING` value of `key`.
    pub fn get_str(&self, key: &str) -> Result<&'a str, GgufError> {
        self.typed(key, ValueType::String, |v| match v {
            Value::String(x) => Some(*x),
            _ => None,
        })
    }

    /// The `ARRAY` value of `key`.
    pub fn get_array(&self, key: &str) -> Result<Array<'a>, GgufError> {
        self.typed(key, ValueType::Array, |v| match v {
            Value::Array(x) => Some(*x),
            _ => None,
        })
    }

    /// The value of `key` through `pick`, which accepts values of type
    /// `expected`: [`GgufError::MissingKey`] or [`GgufError::WrongType`]
    /// otherwise.
    fn typed<T>(
        &self,
        key: &str,
        expected: ValueType,
        pick: impl Fn(&Value<'a>) -> Option<T>,
    ) -> Result<T, GgufError> {
        let v = self
            .get(key)
            .ok_or_else(|| GgufError::MissingKey { key: key.into() })?;
        pick(v).ok_or_else(|| GgufError::WrongType {
            key: key.into(),
            expected,
            found: v.value_type(),
        })
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    /// The tensor called `name`, if the file has it.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.tensors.get(*self.names.get(name)?)
    }
}

/// The metadata entries in file order and their index by key.
type Metadata<'a> = (Vec<(&'a str, Value<'a>)>, BTreeMap<&'a str, usize>);

/// Reads the `n_kv` metadata entries, refusing duplicate keys.
fn read_metadata<'a>(
    cur: &mut Cursor<'a>,
    n_kv: u64,
    limits: &Limits,
) -> Result<Metadata<'a>, GgufError> {
    let room = usize::try_from(cur.remaining() / MIN_ENTRY).unwrap_or(usize::MAX);
    let mut entries = Vec::with_capacity(usize::try_from(n_kv).unwrap_or(usize::MAX).min(room));
    let mut keys = BTreeMap::new();
    for i in 0..n_kv {
        let key = cur.str(limits.max_string_len, || format!("metadata key {i}"))?;
        if keys.insert(key, entries.len()).is_some() {
            return Err(GgufError::DuplicateKey { key: key.into() });
        }
        let type_id = cur
            .u32()
            .map_err(|s| s.what(format!("the value type of key `{key}`")))?;
        let t = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.into(),
            type_id,
        })?;
        entries.push((key, read_value(cur, t, key, limits)?));
    }
    Ok((entries, keys))
}

/// `general.alignment`: a `UINT32` power of two, 32 when absent.
fn alignment(
    metadata: &[(&str, Value<'_>)],
    keys: &BTreeMap<&str, usize>,
) -> Result<u32, GgufError> {
    let Some((_, v)) = keys.get(ALIGNMENT_KEY).and_then(|&i| metadata.get(i)) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match *v {
        Value::U32(a) if a.is_power_of_two() => Ok(a),
        Value::U32(a) => Err(GgufError::BadAlignment { alignment: a }),
        ref other => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.into(),
            expected: ValueType::U32,
            found: other.value_type(),
        }),
    }
}

/// The tensor infos in file order and their index by name.
type Directory<'a> = (Vec<RawTensor<'a>>, BTreeMap<&'a str, usize>);

/// Reads the `n_tensors` tensor infos, refusing duplicate names.
fn read_tensor_infos<'a>(
    cur: &mut Cursor<'a>,
    n_tensors: u64,
    limits: &Limits,
) -> Result<Directory<'a>, GgufError> {
    let room = usize::try_from(cur.remaining() / MIN_TENSOR_INFO).unwrap_or(usize::MAX);
    let mut raw = Vec::with_capacity(usize::try_from(n_tensors).unwrap_or(usize::MAX).min(room));
    let mut names = BTreeMap::new();
    for i in 0..n_tensors {
        let t = read_tensor_info(cur, i, limits)?;
        if names.insert(t.name, raw.len()).is_some() {
            return Err(GgufError::DuplicateTensor {
                tensor: t.name.into(),
            });
        }
        raw.push(t);
    }
    Ok((raw, names))
}

/// Refuses two tensors that share a byte (empty tensors share none).
fn check_overlap(tensors: &[TensorInfo<'_>]) -> Result<(), GgufError> {
    let mut spans: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter(|t| t.byte_len() > 0)
        .map(|t| {
            (
                t.file_offset(),
                t.file_offset().saturating_add(t.byte_len()),
                t.name(),
            )
        })
        .collect();
    spans.sort_unstable();
    // Sorted by start, so with no overlap so far the last span reaches furthest.
    let mut last: Option<(u64, &str)> = None;
    for (start, end, name) in spans {
        if let Some((reach, first)) = last
            && start < reach
        {
            return Err(GgufError::Overlap {
                first: first.into(),
                second: name.into(),
            });
        }
        last = Some((end, name));
    }
    Ok(())
}
