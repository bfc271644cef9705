//! The multi-threaded CPU backend: validated entry points over a persistent
//! worker pool, with counters of parallel regions (each ends in a join:
//! one barrier) and kernel invocations.
//!
//! [`CpuBackend`] is the eager API: a GEMV or gated dual GEMV with its
//! epilogue (plain or [packed](crate::packed) weights), the signed FWHT and
//! the unfused element-wise ops, each one parallel region. The plan
//! executor ([`crate::exec`]) calls these same entry points, one per step.
//! [`read_bandwidth`] measures the memory ceiling a GEMV is compared with.

use fused_core::error::{check_divides, check_len};
use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::vec;
use std::vec::Vec;

use fused_core::acts::ActQuant;
use fused_core::decode::AttentionShape;
use fused_core::element::Activation;
use fused_core::epilogue::BoundEpilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::job::{GemvJob, GemvWeights};
use fused_core::reference::gemv::check_gemm_args;
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};

use fused_core::error::Unsupported;

use crate::acts::{Acts, prepared_bytes};
use crate::gemv::{ColumnBlock, RowKernels, TILE_ROWS, gemv_glu_rows_cols, gemv_rows_cols};
use crate::isa::Isa;
use crate::kernels::gemm::RT;
use crate::kernels::packed::{PackedDot, packed_dot};
use crate::packed::PackedWeights;
use crate::packed::rows::{gemv_glu_packed_rows, gemv_packed_rows};
use crate::pool::WorkerPool;
use crate::region_acts::RegionActs;

pub use crate::probe::read_bandwidth;

/// Most threads a backend takes: far more than any machine's cores, few
/// enough that a mistaken count fails here rather than in the OS.
const MAX_THREADS: usize = 1024;

/// Fewest weight bytes per GEMV row chunk when chunks are made finer than
/// four per thread ([`CpuBackend::row_chunks`]).
const MIN_CHUNK_BYTES: usize = 1 << 20;

/// Work and synchronisation done so far: on this backend `barriers` counts
/// parallel regions run (each ends when every thread is done; with one
/// thread the region runs inline on the caller), `kernel_calls` one per
/// GEMV, FWHT or element-wise call.
pub use fused_core::exec::Counters;

/// The CPU backend: an ISA and a thread pool.
#[derive(Debug)]
pub struct CpuBackend {
    isa: Isa,
    pool: WorkerPool,
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
// writes (disjoint row ranges, or disjoint row × column blocks); no thread
// reads through it.
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

/// `range` cut into `parts` (≥ 1) consecutive ranges of near-equal sizes.
fn even_parts(range: Range<usize>, parts: usize) -> impl Iterator<Item = Range<usize>> {
    let (start, len, parts) = (range.start, range.len(), parts.max(1));
    (0..parts).map(move |p| start + p * len / parts..start + (p + 1) * len / parts)
}

/// Bytes of prepared activations for `n_cols` columns of `k` in `mode`.
fn scratch_bytes(mode: ActQuant, k: usize, n_cols: usize) -> Result<usize, Error> {
    prepared_bytes(mode, k)?
        .checked_mul(n_cols)
        .ok_or(Error::Overflow {
            what: "activation scratch",
        })
}

impl CpuBackend {
    /// The best ISA of this machine ([`Isa::detect`]) with `threads`
    /// threads, the caller's included (`threads − 1` workers are started).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] for 0 threads or more than 1024;
    /// [`Error::Unsupported`] when the OS refuses to start a worker thread
    /// (the workers started so far are stopped again).
    pub fn new(threads: usize) -> Result<CpuBackend, Error> {
        CpuBackend::with_isa(Isa::detect(), threads)
    }

    /// A given ISA with `threads` threads: as [`CpuBackend::new`], and
    /// [`Error::UnsupportedDType`] when this machine cannot run `isa`
    /// ([`Isa::is_supported`]).
    pub fn with_isa(isa: Isa, threads: usize) -> Result<CpuBackend, Error> {
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(Error::OutOfRange {
                what: "thread count",
                value: threads,
                min: 1,
                max: MAX_THREADS,
            });
        }
        if !isa.is_supported() {
            return Err(Error::UnsupportedDType {
                what: "instruction set not available on this machine",
                dtype: DType::F32,
            });
        }
        let pool = WorkerPool::new(threads, "fused-cpu").map_err(|_| {
            Error::Unsupported(Unsupported::Operation(
                "a worker thread (the OS refused to start one)",
            ))
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

    /// Counts one kernel call run on the calling thread (no barrier).
    pub(crate) fn count_call(&self) {
        self.count(0);
    }

    fn count(&self, barriers: u64) {
        self.barriers.fetch_add(barriers, Ordering::Relaxed);
        self.kernel_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Row chunks for `m` rows of `row_bytes` bytes each (per weight
    /// matrix): whole tiles (of the GEMM kernel when one is used for these
    /// `n_cols`), about sixteen per thread, but never fewer rows than
    /// [`MIN_CHUNK_BYTES`] of weights or than a four-per-thread split
    /// allows. Tasks are claimed one by one, so the threads finish at most
    /// one chunk apart: finer chunks shrink that tail where a matrix is
    /// large enough that a chunk's fixed costs do not count.
    fn row_chunks(
        &self,
        m: usize,
        row_bytes: usize,
        kernels: &RowKernels,
        n_cols: usize,
    ) -> Vec<Range<usize>> {
        let tile = match kernels.gemm {
            Some(_) if n_cols >= 2 => TILE_ROWS.max(RT),
            _ => TILE_ROWS,
        };
        let fine = m.div_ceil(self.threads * 16);
        let coarse = m.div_ceil(self.threads * 4);
        let min_rows = MIN_CHUNK_BYTES.div_ceil(row_bytes.max(1));
        let per = fine.max(coarse.min(min_rows)).div_ceil(tile).max(1) * tile;
        (0..m).step_by(per).map(|s| s..(s + per).min(m)).collect()
    }

    /// Column blocks for a call of `n_cols` columns whose rows were split
    /// into `row_chunks` chunks: all columns in one block while there are
    /// at least as many row chunks as threads; otherwise (a few weight rows
    /// against many columns) one contiguous block per thread, of near-equal
    /// sizes, so that every thread gets work. Each (row chunk, column block)
    /// pair is one task; the values do not depend on the split
    /// ([`gemv_rows_cols`]).
    fn column_blocks(&self, row_chunks: usize, n_cols: usize) -> Vec<Range<usize>> {
        let blocks = if row_chunks < self.threads {
            self.threads.min(n_cols).max(1)
        } else {
            1
        };
        even_parts(0..n_cols, blocks).collect()
    }

    /// The pieces the activation columns of a call are prepared in
    /// ([`RegionActs`]): each column block cut into one piece per task
    /// reading it (`readers`), at most two per thread, so that the tasks
    /// reading a block share its quantization; one piece per block when
    /// a single task reads it, which then prepares exactly the columns it
    /// multiplies.
    fn pieces(&self, blocks: &[Range<usize>], readers: usize) -> Vec<Range<usize>> {
        let per_block = readers.min(2 * self.threads).max(1);
        blocks
            .iter()
            .flat_map(|b| even_parts(b.clone(), per_block.min(b.len()).max(1)))
            .collect()
    }

    /// One GEMV/GEMM region over `m` rows (split into `rows`) and `n_cols`
    /// columns: the tasks are every row chunk times every column block
    /// ([`CpuBackend::column_blocks`]); each prepares the activations it
    /// reads (in `mode`, into `scratch`: [`scratch_bytes`]; each piece once:
    /// [`CpuBackend::pieces`]) and runs `body(rows, columns, store)`, where
    /// `store(row, col, value)` writes `y`. Returns the columns quantized
    /// (`n_cols` in a quantized mode: each exactly once).
    #[allow(clippy::too_many_arguments)]
    fn gemm_region(
        &self,
        m: usize,
        rows: Vec<Range<usize>>,
        x: &[f32],
        k: usize,
        n_cols: usize,
        mode: ActQuant,
        scratch: &mut [u8],
        y: &mut [f32],
        body: impl Fn(
            Range<usize>,
            ColumnBlock<'_, '_>,
            &mut dyn FnMut(usize, usize, f32),
        ) -> Result<(), Error>
        + Sync,
    ) -> Result<usize, Error> {
        check_len("GEMM output", m.saturating_mul(n_cols), y.len())?;
        let blocks = self.column_blocks(rows.len(), n_cols);
        let pieces = self.pieces(&blocks, rows.len());
        let tasks: Vec<_> = rows
            .iter()
            .flat_map(|r| blocks.iter().map(move |c| (r.clone(), c.clone())))
            .collect();
        let acts = RegionActs::new(mode, x, k, n_cols, &pieces, scratch)?;
        let out = SharedOut::new(y);
        self.parallel(tasks.len(), |i| {
            let (rows, columns) = tasks[i].clone();
            let cols = acts.columns(columns.clone())?;
            let block = ColumnBlock::new(&cols, columns.start, n_cols)?;
            body(rows, block, &mut |r, c, v| {
                // SAFETY: tasks cover disjoint (row range, column range)
                // pairs, so index c·m + r is written by this task only.
                unsafe { out.store(c * m + r, v) }
            })
        })?;
        Ok(acts.quantized_columns())
    }

    /// `y = epilogue(W · x)`, or the gated `epilogue(act(W_g·x) ⊙ (W_u·x))`,
    /// as `job` says ([`GemvJob`]; column-major `x`: column `c` is
    /// `x[c·K..(c+1)·K]`; `y` likewise with `M`). Activations are prepared
    /// once for the call in the job's mode (once for both weights of a gated
    /// job), inside the call's one parallel region by the threads that read
    /// them; rows split across threads (and columns too when there are fewer
    /// row chunks than threads: a few weight rows against many columns, each
    /// thread then quantizing the columns it multiplies; the values do not
    /// depend on the split).
    pub fn gemv(&self, job: &GemvJob<'_, WeightMatrix<'_>>, y: &mut [f32]) -> Result<(), Error> {
        let epilogue = &job.check(y.len())?;
        let (x, n_cols, mode) = (job.x, job.n_cols, job.mode);
        let w = job.weights.first();
        let (m, k) = (w.rows(), w.cols());
        let kernel = RowKernels::new(self.isa, w.dtype(), mode);
        let mut scratch = vec![0; scratch_bytes(mode, k, n_cols)?];
        match job.weights {
            GemvWeights::Plain(w) => {
                let rows = self.row_chunks(m, w.dtype().row_bytes(k)?, &kernel, n_cols);
                let region =
                    |rows, cols: ColumnBlock<'_, '_>, store: &mut dyn FnMut(usize, usize, f32)| {
                        gemv_rows_cols(kernel, w, cols, rows, epilogue, store)
                    };
                self.gemm_region(m, rows, x, k, n_cols, mode, &mut scratch, y, region)?;
            }
            GemvWeights::Gated { gate, up, act } => {
                let pair = GluWeights::new(*gate, *up)?;
                let rows = self.row_chunks(m, 2 * w.dtype().row_bytes(k)?, &kernel, n_cols);
                let region =
                    |rows, cols: ColumnBlock<'_, '_>, store: &mut dyn FnMut(usize, usize, f32)| {
                        gemv_glu_rows_cols(kernel, &pair, act, cols, rows, epilogue, store)
                    };
                self.gemm_region(m, rows, x, k, n_cols, mode, &mut scratch, y, region)?;
            }
        }
        Ok(())
    }

    /// [`CpuBackend::gemv`] over prepared (packed) weights: the same job
    /// with [`PackedWeights`]. The packed layout has kernels for Q8_0
    /// activations only ([`ActQuant::Q8_0`]).
    pub fn gemv_packed(
        &self,
        job: &GemvJob<'_, PackedWeights>,
        y: &mut [f32],
    ) -> Result<(), Error> {
        let epilogue = &job.check(y.len())?;
        let (x, n_cols, mode) = (job.x, job.n_cols, job.mode);
        match job.weights {
            GemvWeights::Plain(w) => self.packed_region(
                w,
                x,
                n_cols,
                mode,
                epilogue,
                y,
                |kernel, cols, groups, tail, store| {
                    gemv_packed_rows(kernel, w, cols, groups, tail, epilogue, store)
                },
            ),
            GemvWeights::Gated { gate, up, act } => {
                let region =
                    |kernel,
                     cols: &[Acts<'_>],
                     groups,
                     tail,
                     store: &mut dyn FnMut(usize, usize, f32)| {
                        gemv_glu_packed_rows(
                            kernel, gate, up, act, cols, groups, tail, epilogue, store,
                        )
                    };
                self.packed_region(gate, x, n_cols, mode, epilogue, y, region)
            }
        }
    }

    /// One parallel region over the groups of `w` (and a task for its tail
    /// rows): checks the arguments, prepares the activations once, and runs
    /// `rows(kernel, columns, groups, tail, store)` per task.
    #[allow(clippy::too_many_arguments)]
    fn packed_region(
        &self,
        w: &PackedWeights,
        x: &[f32],
        n_cols: usize,
        mode: ActQuant,
        epilogue: &BoundEpilogue<'_>,
        y: &mut [f32],
        rows: impl Fn(
            PackedDot,
            &[Acts<'_>],
            Range<usize>,
            bool,
            &mut dyn FnMut(usize, usize, f32),
        ) -> Result<(), Error>
        + Sync,
    ) -> Result<(), Error> {
        let (m, k) = (w.rows(), w.cols());
        let kernel = self.packed_kernel(w.dtype(), mode)?;
        check_gemm_args(m, k, n_cols, x.len(), epilogue, y.len())?;
        let chunks = self.group_chunks(w.n_groups());
        // Every task reads every column: they share its preparation.
        let all = 0..n_cols;
        let pieces = self.pieces(core::slice::from_ref(&all), chunks.len() + 1);
        let mut scratch = vec![0; scratch_bytes(mode, k, n_cols)?];
        let acts = RegionActs::new(mode, x, k, n_cols, &pieces, &mut scratch)?;
        let out = SharedOut::new(y);
        self.parallel(chunks.len() + 1, |i| {
            let (groups, tail) = chunks.get(i).map_or((0..0, true), |g| (g.clone(), false));
            let cols = acts.columns(0..n_cols)?;
            rows(kernel, &cols, groups, tail, &mut |r, c, v| {
                // SAFETY: tasks cover disjoint groups (or the tail rows
                // after every group), so index c·m + r is written by this
                // task only.
                unsafe { out.store(c * m + r, v) }
            })
        })
    }

    fn packed_kernel(&self, dtype: DType, mode: ActQuant) -> Result<PackedDot, Error> {
        mode.check(dtype)?;
        packed_dot(self.isa, dtype, mode).ok_or(Error::UnsupportedDType {
            what: "activation mode for packed weights (Q4_0 takes Q8_0)",
            dtype,
        })
    }

    /// Group chunks for `n` groups: about four per thread.
    fn group_chunks(&self, n: usize) -> Vec<Range<usize>> {
        let per = n.div_ceil(self.threads * 4).max(1);
        (0..n).step_by(per).map(|s| s..(s + per).min(n)).collect()
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
        self.for_each_chunk(out, per * n, |start, o| {
            let xi = &x[start..start + o.len()];
            crate::fwht::fwht_rows(desc, xi, signs, start / n, o)
        })?;
        Ok(())
    }

    fn elementwise(&self, n: usize, out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Sync) {
        let per = n.div_ceil(self.threads * 4).max(1024);
        let _ = self.for_each_chunk(out, per, |start, o| {
            f(start, o);
            Ok(())
        });
    }

    /// One parallel region (one barrier): `task(i)` for `i < n_tasks`;
    /// the error of the lowest-numbered failing task, if any.
    fn parallel(
        &self,
        n_tasks: usize,
        task: impl Fn(usize) -> Result<(), Error> + Sync,
    ) -> Result<(), Error> {
        let first_error: Mutex<Option<(usize, Error)>> = Mutex::new(None);
        self.pool.run(n_tasks, &|i| {
            if let Err(e) = task(i) {
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                if slot.as_ref().is_none_or(|(j, _)| i < *j) {
                    *slot = Some((i, e));
                }
            }
        });
        self.count(1);
        match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// One parallel region over consecutive chunks of `per` elements of
    /// `out`: `f(start, chunk)` with `start` the chunk's first index.
    fn for_each_chunk(
        &self,
        out: &mut [f32],
        per: usize,
        f: impl Fn(usize, &mut [f32]) -> Result<(), Error> + Sync,
    ) -> Result<(), Error> {
        let per = per.max(1);
        let chunks: Vec<Mutex<&mut [f32]>> = out.chunks_mut(per).map(Mutex::new).collect();
        self.parallel(chunks.len(), |i| {
            let mut chunk = chunks[i].lock().unwrap_or_else(|p| p.into_inner());
            f(i * per, &mut chunk)
        })
    }

    lab_pub! {
        /// Runs one empty parallel region (one task per thread), counted as
        /// a barrier: what a region costs on this backend, for benchmarks.
        fn region_probe(&self) {
            let _ = self.parallel(self.threads, |_| Ok(()));
        }
    }

    /// One query token's attention over the first `len` rows of the caches
    /// `k` and `v` ([`fused_core::decode::attention`]): one task a query
    /// head, each computed by the core's own [`attend_head`], so the result
    /// is the definition's bit for bit. A short context runs on the calling
    /// thread, where a parallel region would cost more than the work.
    ///
    /// [`attend_head`]: fused_core::decode::attend_head
    pub(crate) fn attention(
        &self,
        shape: &AttentionShape,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        len: usize,
        out: &mut [f32],
    ) -> Result<(), Error> {
        // Below this many multiply-adds a region's wake-up costs more.
        const PARALLEL_MIN: usize = 1 << 16;
        let d = shape.head_dim;
        if shape.q_dim() * len < PARALLEL_MIN || self.threads == 1 {
            let mut scores = vec![0.0f32; len];
            self.count_call();
            return fused_core::decode::attention(shape, q, k, v, len, &mut scores, out);
        }
        fused_core::decode::check_attention(shape, q.len(), k.len(), v.len(), len, out.len())?;
        let (kv, group) = (shape.kv_dim(), shape.n_head / shape.n_kv);
        self.for_each_chunk(out, d, |start, o| {
            let (h, mut scores) = (start / d, vec![0.0f32; len]);
            let g = h / group;
            fused_core::decode::attend_head(
                d,
                shape.scale,
                &q[start..start + d],
                |t| &k[t * kv + g * d..t * kv + (g + 1) * d],
                |t| &v[t * kv + g * d..t * kv + (g + 1) * d],
                &mut scores,
                o,
            );
            Ok(())
        })
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

    /// Unfused `out = act(a)`, `act` evaluated as this backend's fused
    /// epilogues evaluate it ([`crate::elementwise::unary`]).
    pub fn unary(&self, act: Activation, a: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("activation output", a.len(), out.len())?;
        self.elementwise(a.len(), out, |s, o| {
            let _ = crate::elementwise::unary(self.isa, act, &a[s..s + o.len()], o);
        });
        Ok(())
    }

    /// Unfused `out = act(gate) · up`, `act` evaluated as this backend's
    /// fused epilogues evaluate it ([`crate::elementwise::glu`]).
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
            let (g, u) = (&gate[s..s + o.len()], &up[s..s + o.len()]);
            let _ = crate::elementwise::glu(self.isa, act, g, u, o);
        });
        Ok(())
    }

    /// Unfused `out = a + bias[row]` (column-major, `bias.len()` rows).
    pub fn add_row_bias(&self, a: &[f32], bias: &[f32], out: &mut [f32]) -> Result<(), Error> {
        check_len("row-bias output", a.len(), out.len())?;
        check_divides("row bias (must divide the output)", bias.len(), a.len())?;
        let m = bias.len();
        self.elementwise(a.len(), out, |s, o| {
            for (i, v) in o.iter_mut().enumerate() {
                *v = a[s + i] + bias[(s + i) % m];
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acts::{column, quantize_columns};
    use std::format;

    /// The bytes an `Acts` points at: blocks and side data (or the f32s).
    fn acts_bytes(a: &Acts<'_>) -> (Vec<u8>, Vec<u8>) {
        match *a {
            Acts::F32(v) => (bytemuck::cast_slice(v).to_vec(), Vec::new()),
            Acts::Quant { bytes, side, .. } => (bytes.to_vec(), side.to_vec()),
        }
    }

    /// Every column of a GEMV/GEMM region is quantized exactly once, by
    /// whichever thread, into the bytes one thread writes for the whole
    /// call, and every task sees its columns' bytes: 1, 2 and 3 threads,
    /// row counts that split the columns (few rows) or the rows (many),
    /// column counts not divisible by the thread count.
    #[test]
    fn region_quantizes_each_column_once_as_one_thread_does() {
        let modes = [
            (ActQuant::Q8_0, DType::Q4_0, &[160usize, 512][..]),
            (ActQuant::Q8_1, DType::Q4_1, &[160, 512]),
            (ActQuant::Q8_K, DType::Q4_K, &[512]),
            (ActQuant::F32, DType::F16, &[40]),
        ];
        let mut seed = 0x2545_f491u32;
        for (mode, dtype, ks) in modes {
            for &k in ks {
                for n in [1usize, 2, 5, 7, 37] {
                    let x: Vec<f32> = (0..k * n)
                        .map(|_| {
                            seed ^= seed << 13;
                            seed ^= seed >> 17;
                            seed ^= seed << 5;
                            seed as f32 / u32::MAX as f32 * 4.0 - 2.0
                        })
                        .collect();
                    let mut want = vec![0u8; scratch_bytes(mode, k, n).unwrap()];
                    quantize_columns(mode, &x, k, &mut want).unwrap();
                    for threads in [1, 2, 3] {
                        let be = CpuBackend::with_isa(Isa::detect(), threads).unwrap();
                        let kernel = RowKernels::new(be.isa, dtype, mode);
                        for m in [5usize, 64, 128, 4096] {
                            let case = format!("{mode:?} k={k} n={n} t{threads} m={m}");
                            let rows = be.row_chunks(m, dtype.row_bytes(k).unwrap(), &kernel, n);
                            let mut y = vec![0.0f32; m * n];
                            let mut got = vec![0u8; want.len()];
                            let seen = Mutex::new(Vec::new());
                            let quantized = be
                                .gemm_region(
                                    m,
                                    rows,
                                    &x,
                                    k,
                                    n,
                                    mode,
                                    &mut got,
                                    &mut y,
                                    |_, b, _| {
                                        for (c, a) in (b.first()..).zip(b.acts()) {
                                            let w = column(mode, &x, &want, k, c).unwrap();
                                            assert_eq!(
                                                acts_bytes(a),
                                                acts_bytes(&w),
                                                "{case} col {c}"
                                            );
                                        }
                                        let mut s = seen.lock().unwrap();
                                        s.extend(b.first()..b.first() + b.acts().len());
                                        Ok(())
                                    },
                                )
                                .unwrap();
                            let want_count = if mode == ActQuant::F32 { 0 } else { n };
                            assert_eq!(quantized, want_count, "{case}: columns quantized");
                            assert!(got == want, "{case}: bytes differ from one thread's");
                            let mut seen = seen.into_inner().unwrap();
                            seen.sort_unstable();
                            seen.dedup();
                            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "{case}: columns read");
                        }
                    }
                }
            }
        }
    }
}
