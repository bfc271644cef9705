//! The GGUF files of the `gguf FILE` and `decode FILE` modes: memory-mapped
//! read-only and checked whole by [`fused_gguf::Gguf`] before anything is
//! read from them (every tensor inside the file, no two overlapping, names
//! unique UTF-8, metadata walked without recursion), so a multi-gigabyte
//! model is never loaded whole and a hostile one gets a message naming
//! the key or tensor at fault.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::planner::plan;
use fused_gguf::{Gguf, TensorInfo, safe_file_stem};
use memmap2::Mmap;

use crate::backend::{Availability, Backend, RunConfig};
use crate::cases::{Case, Link, Pattern, Special, build};

/// A GGUF file mapped into memory, read-only.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: Mmap,
}

impl MappedFile {
    /// Maps the file at `path`.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: the map is read-only and private to this process; like
        // every reader that maps model files (llama.cpp among them), the
        // CLI requires that no other process truncates or rewrites the file
        // while it runs. The bytes themselves are untrusted and checked by
        // `Gguf::parse` before use.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            map,
        })
    }

    /// The file, checked: its tensor directory and metadata, or why it is
    /// refused.
    pub fn parse(&self) -> Result<Gguf<'_>, String> {
        Gguf::parse(&self.map).map_err(|e| e.to_string())
    }

    /// The path it was mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The weight format and the shape `(k, m)` (row length, rows) of `t`, or
/// why it is not a weight matrix: a GGML type the backends have no weight
/// format for, or not two-dimensional (the message names the tensor).
pub fn weight_matrix(t: &TensorInfo<'_>) -> Result<(DType, usize, usize), String> {
    let dtype = match t.dtype() {
        Ok(d) if d.is_weight_format() => d,
        Ok(d) => return Err(format!("{}: {d} is not a weight format", t.name())),
        Err(e) => return Err(e.to_string()),
    };
    let dim = |d: u64| usize::try_from(d).map_err(|_| format!("{}: dimension {d}", t.name()));
    match t.dims() {
        [k, m] | [k, m, 1] | [k, m, 1, 1] if *m > 1 => Ok((dtype, dim(*k)?, dim(*m)?)),
        dims => Err(format!("{}: shape {dims:?} is not a matrix", t.name())),
    }
}

/// The first `rows` packed rows of the matrix `t`, copied.
pub fn matrix_rows(t: &TensorInfo<'_>, rows: usize) -> Result<Vec<u8>, String> {
    t.rows(0, rows as u64)
        .map(<[u8]>::to_vec)
        .map_err(|e| e.to_string())
}

/// The GEMV cases of a GGUF file: one per 2-D tensor of a weight format,
/// on its first `max_rows` rows, with a SiLU and an in-place residual add,
/// random activations; and the tensors passed over, with the reason.
pub fn gguf_cases(
    path: &Path,
    max_rows: usize,
    seed: u64,
    threads: usize,
) -> Result<(Vec<Case>, Vec<String>), String> {
    let file = MappedFile::open(path)?;
    let gguf = file.parse()?;
    let mut cases = Vec::new();
    let mut passed_over = Vec::new();
    for t in gguf.tensors() {
        let (dtype, k, m) = match weight_matrix(t) {
            Ok(x) => x,
            Err(why) => {
                passed_over.push(why);
                continue;
            }
        };
        let rows = m.min(max_rows);
        let w = matrix_rows(t, rows)?;
        cases.push(Case {
            pattern: Pattern::Gemv,
            dtype,
            shape: "gguf",
            m: rows,
            k,
            cols: 1,
            glu: Activation::Silu,
            chain: vec![Link::Act(Activation::Silu), Link::AddInPlace],
            threads,
            mode: GemvMode::Ggml,
            special: Special::None,
            seed,
            weights: Some(Arc::new((t.name().to_string(), w))),
        });
    }
    Ok((cases, passed_over))
}

/// Writes `values` as a one-dimensional little-endian f32 `.npy` file
/// (format version 1.0: magic, header length, a Python dict literal padded
/// so that the data starts at a multiple of 64 bytes).
pub fn write_npy(path: &Path, values: &[f32]) -> Result<(), String> {
    let dict = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        values.len()
    );
    // 10 bytes of magic, version and length, then the dict and a newline.
    let pad = (64 - (10 + dict.len() + 1) % 64) % 64;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let len = u16::try_from(header.len()).map_err(|_| "npy header too long".to_string())?;
    let mut out = Vec::with_capacity(10 + header.len() + 4 * values.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))
}

/// `--dump DIR`: for every case (one per tensor), the input as
/// `DIR/<tensor>.x.npy` and the fused plan's output on every selected,
/// available backend that supports the case as `DIR/<tensor>.<backend>.y.npy`.
/// Returns the number of files written. A tensor name that is not a plain
/// file name ([`fused_gguf::safe_file_stem`]: a path, `..`, a control
/// character...) is refused before anything is written: nothing is ever
/// written outside `DIR`.
pub fn dump(dir: &Path, cases: &[Case], backends: &[Box<dyn Backend>]) -> Result<usize, String> {
    for case in cases {
        if let Some(named) = &case.weights {
            safe_file_stem(&named.0).map_err(|e| e.to_string())?;
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = 0;
    for case in cases {
        let Some(named) = &case.weights else {
            continue;
        };
        let name = &named.0;
        let b = build(case).map_err(|e| format!("{name}: {e}"))?;
        write_npy(&dir.join(format!("{name}.x.npy")), &b.x)?;
        files += 1;
        let p = plan(&b.graph);
        let cfg = RunConfig {
            threads: case.threads,
            mode: case.mode,
        };
        for be in backends {
            if be.availability() != Availability::Ready || be.supports(&b.graph, &p, cfg).is_err() {
                continue;
            }
            let mut mem = b.mem.clone();
            be.run_plan(&b.graph, &p, &mut mem, cfg)
                .map_err(|e| format!("{name} on {}: {e}", be.name()))?;
            let y = b
                .graph
                .tensor(b.out)
                .and_then(|t| mem.read(t))
                .map_err(|e| format!("{name}: {e}"))?;
            write_npy(&dir.join(format!("{name}.{}.y.npy", be.name())), &y)?;
            files += 1;
        }
    }
    Ok(files)
}
