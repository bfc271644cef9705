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
use fused_core::reference::eval::eval_graph;
use fused_gguf::{Gguf, TensorInfo, safe_file_stem};
use memmap2::Mmap;

use crate::backend::{Availability, Backend, RunConfig};
use crate::cases::{Case, Link, Pattern, Special, build};
use crate::tolerance::{self, Tolerance};
use crate::verify::ulp_scale;

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
            norm: false,
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

/// The schema of `DIR/manifest.json`, written by `--dump DIR`.
pub const DUMP_SCHEMA: &str = "fused-verify/gguf-dump/1";

/// The manifest's file name inside the dump folder.
pub const DUMP_MANIFEST: &str = "manifest.json";

/// `DIR/manifest.json`: what `--dump DIR` wrote and how to recompute every
/// output from it (see the README's "The `--dump` folder").
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DumpManifest {
    /// [`DUMP_SCHEMA`].
    pub schema: &'static str,
    /// The version of the `fused-verify` that wrote it.
    pub fused_verify_version: &'static str,
    /// The GGUF file's name (its last path component).
    pub source: String,
    /// How W is obtained (it is not copied).
    pub weights: &'static str,
    /// The `.npy` encoding of every file.
    pub npy: &'static str,
    /// How the matrices lie in the one-dimensional files.
    pub layout: &'static str,
    /// What each activation mode (`backends[].activations`) means.
    pub activations: &'static str,
    /// The element functions of the formulas and how outputs are compared.
    pub functions: &'static str,
    /// Every backend that wrote at least one output, in run order.
    pub backends: Vec<String>,
    /// One entry per tensor, in the file's order.
    pub tensors: Vec<DumpedTensor>,
}

/// One tensor of the dump: its case, operands and outputs.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DumpedTensor {
    /// The tensor's name in the GGUF file.
    pub tensor: String,
    /// The case's id (as in the report).
    pub case: String,
    /// The computation, exactly as run (`y = silu(W·x) + r`).
    pub formula: String,
    /// The weight format: GGML's type name (`q4_0`, `q4_K`, `f16`, ...).
    pub format: &'static str,
    /// The product's shape.
    pub shape: DumpShape,
    /// Where W lies in the GGUF file.
    pub w: DumpedWeights,
    /// The activations' file (`<tensor>.x.npy`): `shape.k · shape.columns` values.
    pub x: String,
    /// The residual's file (`<tensor>.r.npy`): `shape.rows · shape.columns`
    /// values, as they were before the in-place add.
    pub r: String,
    /// The magnitude the ulp check's floor scales (the largest output of
    /// the core reference, or of the case with its activations made the
    /// identity if that is larger).
    pub ulp_scale: f32,
    /// Each backend that ran the case and its output.
    pub backends: Vec<DumpedOutput>,
    /// Each selected backend that did not run it, with the reason.
    pub not_run: Vec<NotRun>,
}

/// The shape of one product: `rows × k` weights times `k × columns` activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DumpShape {
    /// Output rows M (the tensor's first rows).
    pub rows: usize,
    /// The row length K.
    pub k: usize,
    /// Activation columns.
    pub columns: usize,
}

/// Where the weights of one tensor lie: not copied, read from the GGUF file.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DumpedWeights {
    /// A copy of W in the dump folder: always `None` (`null`), W is read
    /// from `source`.
    pub file: Option<String>,
    /// The tensor's name in `source`.
    pub tensor: String,
    /// The GGML type id.
    pub ggml_type: u32,
    /// GGML's type name.
    pub format: &'static str,
    /// The tensor's dimensions in GGML order (`dims[0]` = K).
    pub dims: Vec<u64>,
    /// The tensor's first byte, from the start of the file.
    pub file_offset: u64,
    /// The same from the start of the data section (as the file gives it).
    pub data_offset: u64,
    /// Bytes of one packed row of K.
    pub row_bytes: u64,
    /// Rows used: the first `shape.rows`.
    pub rows: u64,
    /// Bytes used: `rows · row_bytes` from `file_offset`.
    pub bytes: u64,
}

/// One backend's output of one tensor.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DumpedOutput {
    /// The backend's name.
    pub name: String,
    /// Its output's file (`<tensor>.<backend>.y.npy`, the fused plan's).
    pub y: String,
    /// How the activations reached its dot products: `f32`, or the GGML
    /// format they were quantized to first (`q8_0`, `q8_1`, `q8_K`).
    pub activations: &'static str,
    /// Whether it must equal the core reference bit for bit.
    pub bit_exact_reference: bool,
    /// How far from the core reference the run's checks let it be.
    pub tolerance: Tolerance,
}

/// A selected backend that did not run a case.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NotRun {
    /// The backend's name.
    pub name: String,
    /// Why (not available here, or no kernel for the case).
    pub reason: String,
}

const WEIGHTS_DOC: &str = "W is not copied (each tensor's w.file is null): it is the first w.rows \
     rows of the tensor w.tensor of the GGUF file `source`, w.bytes bytes from byte w.file_offset \
     of that file, packed in GGML format w.format";
const NPY_DOC: &str = ".npy format 1.0, dtype '<f4' (little-endian f32), one-dimensional";
const LAYOUT_DOC: &str = "column-major, as GGML stores a matmul: x holds shape.columns columns of \
     shape.k (column c at [c*k, (c+1)*k)); r and every y hold shape.columns columns of shape.rows \
     (element (row, c) at c*rows + row); W row i is the i-th packed row of the tensor";
const ACTIVATIONS_DOC: &str = "f32: each weight block dequantized to f32 and acc += w[j]*x[j] in f32 \
     for j = 0..k-1 from 0; q8_0, q8_1, q8_K: each column of x first quantized to that GGML format \
     (GGML's reference rounding, fused_core::quant::quantize_row), then GGML's vec_dot of the \
     weight format with it (fused_core::quant::vec_dot); the core reference is \
     fused_core::reference::gemv::for_each_acc";
const FUNCTIONS_DOC: &str = "silu(v) = v / (1 + e^-v) in f32 (fused_core::element::Activation::apply, \
     libm); + is one f32 addition; an output with bit_exact_reference equals the core reference bit \
     for bit, another is within tolerance.ulp ulps of it wherever |reference| >= \
     tolerance.ulp_floor * ulp_scale";

/// The formula of a GEMV case whose chain has one operand, `r`
/// (`y = silu(W·x) + r` for the `gguf` cases); an error for any other case.
fn dump_formula(case: &Case) -> Result<String, String> {
    let refuse = |why: &str| Err(format!("{}: --dump writes {why}", case.id()));
    if case.pattern != Pattern::Gemv {
        return refuse("GEMV cases only");
    }
    let mut e = "W·x".to_string();
    let mut operands = 0;
    for link in &case.chain {
        e = match link {
            Link::Act(a) => format!("{}({e})", a.name()),
            Link::Add | Link::AddInPlace => {
                operands += 1;
                format!("{e} + r")
            }
            Link::Mul => {
                operands += 1;
                format!("({e}) ⊙ r")
            }
            Link::RowBias => return refuse("no row bias"),
        };
    }
    if operands != 1 {
        return refuse("chains with exactly one operand");
    }
    Ok(format!("y = {e}"))
}

/// `--dump DIR` of the cases of the GGUF file `source`: for every case
/// (one per tensor) its operands, `DIR/<tensor>.x.npy` (the activations)
/// and `DIR/<tensor>.r.npy` (the residual, before the add), the fused
/// plan's output on every selected, available backend that supports the
/// case as `DIR/<tensor>.<backend>.y.npy`, and last `DIR/manifest.json`
/// ([`DumpManifest`]: the formula, format, shape, activation mode, where W
/// lies in `source`, the files). `tolerance_scale` scales the tolerances
/// it records, as the run's. Returns the number of `.npy` files written.
/// A tensor name that is not a plain file name
/// ([`fused_gguf::safe_file_stem`]: a path, `..`, a control character...)
/// is refused before anything is written: nothing is ever written outside
/// `DIR`.
pub fn dump(
    dir: &Path,
    source: &Path,
    cases: &[Case],
    backends: &[Box<dyn Backend>],
    tolerance_scale: f64,
) -> Result<usize, String> {
    for case in cases {
        if let Some(named) = &case.weights {
            safe_file_stem(&named.0).map_err(|e| e.to_string())?;
            dump_formula(case)?;
        }
    }
    let file = MappedFile::open(source)?;
    let gguf = file.parse()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut manifest = DumpManifest {
        schema: DUMP_SCHEMA,
        fused_verify_version: env!("CARGO_PKG_VERSION"),
        source: source
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        weights: WEIGHTS_DOC,
        npy: NPY_DOC,
        layout: LAYOUT_DOC,
        activations: ACTIVATIONS_DOC,
        functions: FUNCTIONS_DOC,
        backends: Vec::new(),
        tensors: Vec::new(),
    };
    let mut files = 0;
    for case in cases {
        let Some(named) = &case.weights else {
            continue;
        };
        let name = &named.0;
        let t = gguf
            .tensors()
            .iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| format!("{name}: not a tensor of {}", source.display()))?;
        let b = build(case).map_err(|e| format!("{name}: {e}"))?;
        let [r] = b.operands.as_slice() else {
            return Err(format!("{name}: {} operands, not one", b.operands.len()));
        };
        let reference = (|| {
            let mut mem = b.mem.clone();
            eval_graph(&b.graph, &mut mem, case.mode)?;
            mem.read(b.graph.tensor(b.out)?)
        })()
        .map_err(|e| format!("{name}: the core reference: {e}"))?;
        let x_file = format!("{name}.x.npy");
        let r_file = format!("{name}.r.npy");
        write_npy(&dir.join(&x_file), &b.x)?;
        write_npy(&dir.join(&r_file), r)?;
        files += 2;
        let rows = case.m as u64;
        let mut entry = DumpedTensor {
            tensor: name.clone(),
            case: case.id(),
            formula: dump_formula(case)?,
            format: case.dtype.name(),
            shape: DumpShape {
                rows: case.m,
                k: case.k,
                columns: case.cols,
            },
            w: DumpedWeights {
                file: None,
                tensor: name.clone(),
                ggml_type: t.ggml_type(),
                format: t.type_name(),
                dims: t.dims().to_vec(),
                file_offset: t.file_offset(),
                data_offset: t.offset(),
                row_bytes: t.row_bytes(),
                rows,
                bytes: rows * t.row_bytes(),
            },
            x: x_file,
            r: r_file,
            ulp_scale: ulp_scale(case, &reference),
            backends: Vec::new(),
            not_run: Vec::new(),
        };
        let p = plan(&b.graph);
        let cfg = RunConfig {
            threads: case.threads,
            mode: case.mode,
        };
        for be in backends {
            let ready = match be.availability() {
                Availability::Ready => be.supports(&b.graph, &p, cfg),
                Availability::Skip(why) => Err(why),
            };
            if let Err(reason) = ready {
                entry.not_run.push(NotRun {
                    name: be.name().to_string(),
                    reason,
                });
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
            let y_file = format!("{name}.{}.y.npy", be.name());
            write_npy(&dir.join(&y_file), &y)?;
            files += 1;
            let bit_exact = be.bit_exact_reference();
            entry.backends.push(DumpedOutput {
                name: be.name().to_string(),
                y: y_file,
                activations: case
                    .mode
                    .act_quant(case.dtype)
                    .dtype()
                    .map_or("f32", DType::name),
                bit_exact_reference: bit_exact,
                tolerance: tolerance::for_case(case, bit_exact, tolerance_scale),
            });
            if !manifest.backends.iter().any(|n| n == be.name()) {
                manifest.backends.push(be.name().to_string());
            }
        }
        manifest.tensors.push(entry);
    }
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    let path = dir.join(DUMP_MANIFEST);
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(files)
}
