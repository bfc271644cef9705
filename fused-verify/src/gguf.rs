//! The reader of the `gguf FILE` and `decode FILE` modes: the tensor directory of a GGUF file
//! (versions 2 and 3) and the packed rows of one tensor, read with seeks so
//! that a multi-gigabyte model is never loaded whole.
//!
//! Layout (GGUF spec): magic `GGUF`, version `u32`, tensor count `u64`,
//! metadata count `u64`, the metadata key/value pairs, one tensor info per
//! tensor (name, dimension count `u32`, dimensions `u64`, GGML type `u32`,
//! offset `u64` from the data section), then the data section at the next
//! multiple of `general.alignment` (default 32). All little-endian.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use fused_core::DType;
use fused_core::acts::GemvMode;
use fused_core::element::Activation;
use fused_core::planner::plan;

use crate::backend::{Availability, Backend, RunConfig};
use crate::cases::{Case, Link, Pattern, Special, build};

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// Its name.
    pub name: String,
    /// Its GGML type id.
    pub ggml_type: u32,
    /// Its dimensions, GGML order (`ne[0]` is the row length).
    pub ne: Vec<u64>,
    /// Absolute byte offset of its data in the file.
    pub offset: u64,
}

/// Reads little-endian values and GGUF strings.
struct Reader<R: Read> {
    r: R,
}

impl<R: Read> Reader<R> {
    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(b)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn string(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        if n > 1 << 20 {
            return Err(format!("string of {n} bytes"));
        }
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b).map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }
    fn skip(&mut self, n: u64) -> Result<(), String> {
        let copied = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        if copied == n {
            Ok(())
        } else {
            Err("file ends inside the metadata".to_string())
        }
    }

    /// Reads a metadata value of type `t`; returns it when it is an
    /// unsigned integer (for `general.alignment`).
    fn value(&mut self, t: u32) -> Result<Option<u64>, String> {
        Ok(match t {
            0 | 1 | 7 => Some(u64::from(self.bytes::<1>()?[0])),
            2 | 3 => Some(u64::from(u16::from_le_bytes(self.bytes()?))),
            4 | 5 => Some(u64::from(self.u32()?)),
            6 => {
                self.skip(4)?;
                None
            }
            10 | 11 => Some(self.u64()?),
            12 => {
                self.skip(8)?;
                None
            }
            8 => {
                self.string()?;
                None
            }
            9 => {
                let (et, n) = (self.u32()?, self.u64()?);
                for _ in 0..n {
                    self.value(et)?;
                }
                None
            }
            t => return Err(format!("unknown metadata value type {t}")),
        })
    }
}

/// The tensor directory of the GGUF file at `path`.
pub fn read_tensors(path: &Path) -> Result<Vec<GgufTensor>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = Reader {
        r: BufReader::new(f),
    };
    if &r.bytes::<4>()? != b"GGUF" {
        return Err("not a GGUF file (bad magic)".to_string());
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(format!("GGUF version {version} is not supported (2 or 3)"));
    }
    let (n_tensors, n_kv) = (r.u64()?, r.u64()?);
    let mut alignment = 32u64;
    for _ in 0..n_kv {
        let key = r.string()?;
        let t = r.u32()?;
        let v = r.value(t)?;
        if key == "general.alignment" {
            alignment = v.filter(|a| *a > 0).unwrap_or(32);
        }
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let name = r.string()?;
        let n_dims = r.u32()?;
        if n_dims > 4 {
            return Err(format!("{name}: {n_dims} dimensions"));
        }
        let ne = (0..n_dims)
            .map(|_| r.u64())
            .collect::<Result<Vec<_>, _>>()?;
        let ggml_type = r.u32()?;
        let offset = r.u64()?;
        tensors.push(GgufTensor {
            name,
            ggml_type,
            ne,
            offset,
        });
    }
    let pos = r.r.stream_position().map_err(|e| e.to_string())?;
    let data = pos.div_ceil(alignment) * alignment;
    for t in &mut tensors {
        t.offset += data;
    }
    Ok(tensors)
}

/// The first `rows` packed rows of `t` (a 2-D tensor of a known format).
pub fn read_rows(
    path: &Path,
    t: &GgufTensor,
    dtype: DType,
    rows: usize,
) -> Result<Vec<u8>, String> {
    let k = t.ne.first().copied().unwrap_or(0) as usize;
    let rb = dtype.row_bytes(k).map_err(|e| e.to_string())?;
    let mut f = File::open(path).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(t.offset))
        .map_err(|e| e.to_string())?;
    let mut b = vec![0u8; rb * rows];
    f.read_exact(&mut b)
        .map_err(|e| format!("{}: {e}", t.name))?;
    Ok(b)
}

/// The weight format and the shape `(k, m)` (row length, rows) of `t`, or
/// why it is not a weight matrix: a GGML type the backends have no weight
/// format for, or not two-dimensional (the message names the tensor).
pub fn weight_matrix(t: &GgufTensor) -> Result<(DType, usize, usize), String> {
    let dtype = match DType::from_ggml_id(t.ggml_type) {
        Ok(d) if d.is_weight_format() => d,
        _ => {
            return Err(format!(
                "{}: GGML type {} not supported",
                t.name, t.ggml_type
            ));
        }
    };
    match t.ne.as_slice() {
        [k, m] | [k, m, 1] | [k, m, 1, 1] if *m > 1 => Ok((dtype, *k as usize, *m as usize)),
        _ => Err(format!("{}: shape {:?} is not a matrix", t.name, t.ne)),
    }
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
    let mut cases = Vec::new();
    let mut passed_over = Vec::new();
    for t in read_tensors(path)? {
        let (dtype, k, m) = match weight_matrix(&t) {
            Ok(x) => x,
            Err(why) => {
                passed_over.push(why);
                continue;
            }
        };
        let rows = m.min(max_rows);
        let w = read_rows(path, &t, dtype, rows)?;
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
            weights: Some(Arc::new((t.name.clone(), w))),
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
/// Returns the number of files written.
pub fn dump(dir: &Path, cases: &[Case], backends: &[Box<dyn Backend>]) -> Result<usize, String> {
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
