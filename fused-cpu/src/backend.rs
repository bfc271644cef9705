//! The multi-threaded CPU backend: validated entry points over a rayon pool,
//! with counters of parallel regions (each ends in a join: one barrier) and
//! kernel invocations.

use fused_core::error::check_len;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::vec::Vec;

use fused_core::element::Activation;
use fused_core::epilogue::BoundEpilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::reference::gemv::{GluWeights, check_gemm_args};
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_core::{DType, Error};
use rayon::prelude::*;

use crate::acts::{Acts, column, prepared_bytes, quantize_columns};
use crate::gemv::{RowKernels, TILE_ROWS, gemv_glu_rows, gemv_rows};
use crate::isa::Isa;
use crate::kernels::gemm::RT;

/// Work and synchronisation done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Parallel regions run; each ends when every thread is done (a barrier).
    pub barriers: u64,
    /// Kernel invocations (one per GEMV, FWHT or element-wise call).
    pub kernel_calls: u64,
}

/// The CPU backend: an ISA and a thread pool.
#[derive(Debug)]
pub struct CpuBackend {
    isa: Isa,
    pool: rayon::ThreadPool,
    threads: usize,
    barriers: AtomicU64,
    kernel_calls: AtomicU64,
}

/// A raw output pointer shared by the threads of one parallel region, each
/// writing a disjoint set of indices.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `SharedOut` is only built from a `&mut [f32]` that outlives the
// parallel region using it, and every thread writes indices no other thread
// writes (disjoint row ranges); no thread reads through it.
unsafe impl Sync for SharedOut {}
// SAFETY: as above.
unsafe impl Send for SharedOut {}

impl SharedOut {
    fn new(y: &mut [f32]) -> SharedOut {
        SharedOut {
            ptr: y.as_mut_ptr(),
            len: y.len(),
        }
    }

    /// Stores `v` at `i`.
    ///
    /// # Safety
    /// No other thread may access index `i` during the region.
    unsafe fn store(&self, i: usize, v: f32) {
        assert!(i < self.len, "output index out of range");
        // SAFETY: `i < len` so the pointer is inside the borrowed slice, and
        // the caller guarantees exclusive access to index `i`.
        unsafe { self.ptr.add(i).write(v) }
    }
}

impl CpuBackend {
    /// The best ISA of this machine with `threads` threads (≥ 1).
    pub fn new(threads: usize) -> Result<CpuBackend, Error> {
        CpuBackend::with_isa(Isa::detect(), threads)
    }

    /// A given ISA (which this machine must support) with `threads` threads.
    pub fn with_isa(isa: Isa, threads: usize) -> Result<CpuBackend, Error> {
        if threads == 0 {
            return Err(Error::LengthMismatch {
                what: "thread count (must be at least 1)",
                expected: 1,
                actual: 0,
            });
        }
        if !isa.is_supported() {
            return Err(Error::UnsupportedDType {
                what: "instruction set not available on this machine",
                dtype: DType::F32,
            });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| std::format!("fused-cpu-{i}"))
            .build()
            .map_err(|_| Error::Overflow {
                what: "thread pool creation",
            })?;
        Ok(CpuBackend {
            isa,
            pool,
            threads,
            barriers: AtomicU64::new(0),
            kernel_calls: AtomicU64::new(0),
        })
    }

    /// The ISA in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The number of threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Counters since creation or the last reset.
    pub fn counters(&self) -> Counters {
        Counters {
            barriers: self.barriers.load(Ordering::Relaxed),
            kernel_calls: self.kernel_calls.load(Ordering::Relaxed),
        }
    }

    /// Sets the counters to zero.
    pub fn reset_counters(&self) {
        self.barriers.store(0, Ordering::Relaxed);
        self.kernel_calls.store(0, Ordering::Relaxed);
    }

    fn count(&self, barriers: u64) {
        self.barriers.fetch_add(barriers, Ordering::Relaxed);
        self.kernel_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Row chunks for `m` rows: about four per thread, whole tiles (of the
    /// GEMM kernel when one is used for these `n_cols`).
    fn row_chunks(&self, m: usize, kernels: &RowKernels, n_cols: usize) -> Vec<Range<usize>> {
        let tile = match kernels.gemm {
            Some(_) if n_cols >= 2 => TILE_ROWS.max(RT),
            _ => TILE_ROWS,
        };
        let per = m.div_ceil(self.threads * 4).div_ceil(tile).max(1) * tile;
        (0..m).step_by(per).map(|s| s..(s + per).min(m)).collect()
    }

    fn prepare<'a>(
        &self,
        mode: ActQuant,
        x: &'a [f32],
        k: usize,
        n_cols: usize,
        scratch: &'a mut Vec<u8>,
    ) -> Result<Vec<Acts<'a>>, Error> {
        scratch.resize(prepared_bytes(mode, k)? * n_cols, 0);
        quantize_columns(mode, x, k, scratch)?;
        let scratch: &'a [u8] = scratch;
        Ok((0..n_cols)
            .map(|c| column(mode, x, scratch, k, c))
            .collect())
    }

    /// `y = epilogue(w · x)` for `n_cols` columns (column-major `x`: column
    /// `c` is `x[c·K..(c+1)·K]`; `y` likewise with `M`). Activations are
    /// prepared once for the call in `mode`, rows split across threads.
    pub fn gemv(
        &self,
        w: &WeightMatrix<'_>,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &BoundEpilogue<'_>,
        y: &mut [f32],
    ) -> Result<(), Error> {
        let (m, k) = (w.rows(), w.cols());
        mode.check(w.dtype())?;
        check_gemm_args(m, k, n_cols, x.len(), epilogue, y.len())?;
        let mut scratch = Vec::new();
        let cols = self.prepare(mode, x, k, n_cols, &mut scratch)?;
        let kernel = RowKernels::new(self.isa, w.dtype(), mode);
        let out = SharedOut::new(y);
        let chunks = self.row_chunks(m, &kernel, n_cols);
        self.pool.install(|| {
            chunks.par_iter().try_for_each(|rows| {
                gemv_rows(kernel, w, &cols, rows.clone(), epilogue, |r, c, v| {
                    // SAFETY: chunks are disjoint row ranges, so index
                    // c·m + r is written by this chunk only.
                    unsafe { out.store(c * m + r, v) }
                })
            })
        })?;
        self.count(1);
        Ok(())
    }

    /// `y = epilogue(act(W_g·x) ⊙ (W_u·x))`: one pass, activations prepared
    /// once for both weights.
    #[allow(clippy::too_many_arguments)]
    pub fn gemv_glu(
        &self,
        w: &GluWeights<'_>,
        act: Activation,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &BoundEpilogue<'_>,
        y: &mut [f32],
    ) -> Result<(), Error> {
        let (m, k) = (w.gate().rows(), w.gate().cols());
        mode.check(w.gate().dtype())?;
        check_gemm_args(m, k, n_cols, x.len(), epilogue, y.len())?;
        let mut scratch = Vec::new();
        let cols = self.prepare(mode, x, k, n_cols, &mut scratch)?;
        let kernel = RowKernels::new(self.isa, w.gate().dtype(), mode);
        let out = SharedOut::new(y);
        let chunks = self.row_chunks(m, &kernel, n_cols);
        self.pool.install(|| {
            chunks.par_iter().try_for_each(|rows| {
                gemv_glu_rows(kernel, w, act, &cols, rows.clone(), epilogue, |r, c, v| {
                    // SAFETY: chunks are disjoint row ranges, so index
                    // c·m + r is written by this chunk only.
                    unsafe { out.store(c * m + r, v) }
                })
            })
        })?;
        self.count(1);
        Ok(())
    }

    /// The (signed) FWHT of every row of `x` into `out`, rows split across threads.
    pub fn fwht(
        &self,
        desc: &FwhtDesc,
        x: &[f32],
        signs: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<(), Error> {
        desc.check(x.len(), signs, out.len())?;
        let n = desc.n();
        let rows = x.len() / n;
        let per = rows.div_ceil(self.threads * 4).max(1);
        self.pool.install(|| {
            out.par_chunks_mut(per * n)
                .zip(x.par_chunks(per * n))
                .enumerate()
                .try_for_each(|(i, (o, xi))| crate::fwht::fwht_rows(desc, xi, signs, i * per, o))
        })?;
        self.count(1);
        Ok(())
    }

    fn elementwise(&self, n: usize, out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Sync) {
        let per = n.div_ceil(self.threads * 4).max(1024);
        self.pool.install(|| {
            out.par_chunks_mut(per)
                .enumerate()
                .for_each(|(i, o)| f(i * per, o));
        });
        self.count(1);
    }

    /// `out = a` (stands in for ops the core does not model).
    pub fn copy(&self, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("copy output", a.len(), out.len())?;
        self.elementwise(a.len(), out, |s, o| o.copy_from_slice(&a[s..s + o.len()]));
        Ok(())
    }

    /// Unfused `out = a + b`.
    pub fn add(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("add operand", a.len(), b.len())?;
        check_len("add output", a.len(), out.len())?;
        self.elementwise(a.len(), out, |s, o| {
            let _ = crate::elementwise::add(&a[s..s + o.len()], &b[s..s + o.len()], o);
        });
        Ok(())
    }

    /// Unfused `out = a · b`.
    pub fn mul(&self, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("mul operand", a.len(), b.len())?;
        check_len("mul output", a.len(), out.len())?;
        self.elementwise(a.len(), out, |s, o| {
            let _ = crate::elementwise::mul(&a[s..s + o.len()], &b[s..s + o.len()], o);
        });
        Ok(())
    }

    /// Unfused `out = act(a)`.
    pub fn unary(&self, act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("activation output", a.len(), out.len())?;
        self.elementwise(a.len(), out, |s, o| {
            let _ = crate::elementwise::unary(act, &a[s..s + o.len()], o);
        });
        Ok(())
    }

    /// Unfused `out = act(gate) · up`.
    pub fn glu(
        &self,
        act: Activation,
        gate: &[f32],
        up: &[f32],
        out: &mut [f32],
    ) -> Result<(), Error> {
        check_len("GLU up", gate.len(), up.len())?;
        check_len("GLU output", gate.len(), out.len())?;
        self.elementwise(gate.len(), out, |s, o| {
            let _ = crate::elementwise::glu(act, &gate[s..s + o.len()], &up[s..s + o.len()], o);
        });
        Ok(())
    }

    /// Unfused `out = a + bias[row]` (column-major, `bias.len()` rows).
    pub fn add_row_bias(&self, a: &[f32], bias: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("row-bias output", a.len(), out.len())?;
        if bias.is_empty() || !a.len().is_multiple_of(bias.len()) {
            return Err(Error::LengthMismatch {
                what: "row bias (must divide the output)",
                expected: bias.len(),
                actual: a.len(),
            });
        }
        let m = bias.len();
        self.elementwise(a.len(), out, |s, o| {
            for (i, v) in o.iter_mut().enumerate() {
                *v = a[s + i] + bias[(s + i) % m];
            }
        });
        Ok(())
    }
}
