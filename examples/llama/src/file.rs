//! The model file: memory-mapped read-only and checked whole by
//! [`fused_gguf::Gguf::parse`] before anything is read from it, with typed
//! look-ups of the metadata a Llama model needs.

use std::fs::File;
use std::path::{Path, PathBuf};

use fused_core::DType;
use fused_gguf::{Gguf, GgufError, TensorInfo, Value};
use memmap2::Mmap;

use crate::error::LlamaError;

/// A GGUF file mapped into memory, read-only.
#[derive(Debug)]
pub struct ModelFile {
    path: PathBuf,
    map: Mmap,
}

impl ModelFile {
    /// Maps the file at `path`.
    pub fn open(path: &Path) -> Result<ModelFile, LlamaError> {
        let io = |source| LlamaError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; like
        // every reader that maps model files (llama.cpp among them), the
        // runtime requires that no other process truncates or rewrites the
        // file while it runs. The bytes themselves are untrusted and checked
        // by `Gguf::parse` before use.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(ModelFile {
            path: path.to_path_buf(),
            map,
        })
    }

    /// The file, checked: its tensor directory and metadata, or why it is
    /// refused.
    pub fn parse(&self) -> Result<Gguf<'_>, LlamaError> {
        Ok(Gguf::parse(&self.map)?)
    }

    /// The path it was mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// The unsigned integer value of `key`, stored as any GGUF integer type
/// (writers differ: `UINT32`, `UINT64`, `INT32` are all seen).
pub fn get_uint(g: &Gguf<'_>, key: &str) -> Result<u64, LlamaError> {
    let v = g
        .get(key)
        .ok_or_else(|| GgufError::MissingKey { key: key.into() })?;
    let n = v.as_uint();
    n.ok_or_else(|| LlamaError::Config {
        what: key.to_string(),
        why: format!("expected a non-negative integer, found {v:?}"),
    })
}

/// [`get_uint`] as a `usize` no larger than `max`.
pub fn get_usize(g: &Gguf<'_>, key: &str, max: usize) -> Result<usize, LlamaError> {
    let n = get_uint(g, key)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| LlamaError::Config {
            what: key.to_string(),
            why: format!("{n} is above the runtime's limit of {max}"),
        })
}

/// The float value of `key` (`FLOAT32` or `FLOAT64`), or `default` when the
/// file does not have it.
pub fn get_float_or(g: &Gguf<'_>, key: &str, default: f32) -> Result<f32, LlamaError> {
    match g.get(key) {
        None => Ok(default),
        Some(Value::F32(x)) => Ok(*x),
        Some(Value::F64(x)) => Ok(*x as f32),
        Some(v) => Err(LlamaError::Config {
            what: key.to_string(),
            why: format!("expected a float, found {v:?}"),
        }),
    }
}

/// The tensor `name`, or [`LlamaError::MissingTensor`].
pub fn tensor<'a>(g: &Gguf<'a>, name: &str) -> Result<TensorInfo<'a>, LlamaError> {
    g.tensor(name)
        .copied()
        .ok_or_else(|| LlamaError::MissingTensor {
            name: name.to_string(),
        })
}

/// A weight matrix of a file: `m` rows of `k` elements in `dtype`, its
/// bytes borrowed from the map.
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    /// Its GGUF name.
    pub name: &'a str,
    /// Its format, passed through to the backends.
    pub dtype: DType,
    /// Row length (`ne[0]`).
    pub k: usize,
    /// Rows (`ne[1]`).
    pub m: usize,
    /// The packed rows.
    pub data: &'a [u8],
}

/// The matrix `name`, checked to be `[k, m]` in a weight format.
pub fn matrix<'a>(g: &Gguf<'a>, name: &str, k: usize, m: usize) -> Result<Matrix<'a>, LlamaError> {
    let t = tensor(g, name)?;
    check_shape(&t, &[k as u64, m as u64])?;
    let dtype = t.dtype()?;
    if !dtype.is_weight_format() {
        return Err(LlamaError::format(
            name,
            dtype,
            "not a weight format (an activation-only format)",
        ));
    }
    Ok(Matrix {
        name: t.name(),
        dtype,
        k,
        m,
        data: t.data(),
    })
}

/// The vector `name` of `n` elements (F32, F16 or BF16), as f32.
pub fn vector(g: &Gguf<'_>, name: &str, n: usize) -> Result<Vec<f32>, LlamaError> {
    let t = tensor(g, name)?;
    check_shape(&t, &[n as u64])?;
    let dtype = t.dtype()?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(LlamaError::format(
            name,
            dtype,
            "a norm or scale vector must be F32, F16 or BF16",
        ));
    }
    let mut out = vec![0.0f32; n];
    fused_core::quant::dequantize_row(dtype, t.data(), &mut out)
        .map_err(|e| LlamaError::format(name, dtype, e.to_string()))?;
    Ok(out)
}

/// Checks that `t` has the dimensions `want` (trailing 1s ignored).
pub fn check_shape(t: &TensorInfo<'_>, want: &[u64]) -> Result<(), LlamaError> {
    let mut dims = t.dims().to_vec();
    while dims.len() > want.len() && dims.last() == Some(&1) {
        dims.pop();
    }
    if dims != want {
        return Err(LlamaError::Shape {
            name: t.name().to_string(),
            expected: want.to_vec(),
            actual: t.dims().to_vec(),
        });
    }
    Ok(())
}
