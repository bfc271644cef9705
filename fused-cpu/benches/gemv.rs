//! Benchmarks of the CPU backend, each figure printed next to the
//! memory-read ceiling measured in the same run.
//!
//! The decode layer as a caller runs it goes through the backend contract
//! (`plan`); every other group calls the kernels directly: lab
//! micro-benchmarks of the kernels the plans are made of.
//!
//! Groups (run in this order):
//! - `probe`: read bandwidth of a 1 GiB buffer with 1 and 2 threads
//!   ([`fused_cpu::probe`]); the criterion medians are the ceilings.
//! - `gemv_dram` (lab): 16384×8192 weights, rotated over enough copies that
//!   each call reads ≥ 1 GiB worth of distinct weights before one repeats
//!   (far beyond L3), in Q4_0, Q8_0, F16, Q4_K, Q6_K with GGML's
//!   activation mode; throughput in weight bytes.
//! - `gemv_cache` (lab): 4096×4096, same formats; GEMM with 32 and 512
//!   columns (Q4_0, Q8_0, F16), throughput in 2·M·K·N flops; a small-M GEMM
//!   (64 rows × 4096, 128 columns) of the same formats.
//! - `decode_layer` (lab): attention-out projection plus residual, gate/up
//!   GLU, down plus residual, as direct kernel calls; FUSED (epilogues, 3
//!   kernels) vs UNFUSED (separate add/glu, gate and up as two GEMVs);
//!   H=1024/F=2816 (in cache) and H=4096/F=11008 (rotated copies,
//!   DRAM-bound); Q4_0 and F16. The fused/unfused ratio is given twice:
//!   ratio of the two criterion medians, and the median of per-pair ratios
//!   of fused and unfused layers run back to back; a per-step breakdown.
//! - `plan`: fused-testkit's decode layer (q/k/v, attention output plus
//!   residual, gated feed-forward plus residual) planned fused and unfused
//!   by the core planner, each plan compiled through
//!   [`fused_core::backend::Backend::compile`] on [`CpuBackend`], written
//!   once and timed by [`ResidentPlan::run`] (the residual stream, updated
//!   in place, restored untimed between runs): fused and unfused side by
//!   side, H=1024/F=2816 and H=4096/F=11008, Q4_0 weights, f32 and GGML
//!   activations, 1 and 2 threads, with the plans' launches and barriers.
//!
//! - `focus` (first, and only with `GEMV_FOCUS` set): see [`focus`].
//!
//! Every benchmark also prints `median, GB/s, % of ceiling` to stderr, and a
//! markdown summary of the whole run is printed at the end. Without
//! `--bench` (criterion's test mode, e.g. `cargo test --benches`) the sizes
//! shrink so that the run stays quick.

use std::cell::RefCell;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use fused_core::DType;
use fused_core::acts::{ActQuant, GemvMode};
use fused_core::backend::{Backend, ResidentPlan};
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::job::GemvJob;
use fused_core::planner::{Plan, plan};
use fused_core::quant::quantize_row;
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_cpu::packed::PackedWeights;
use fused_cpu::probe::{BandwidthProbe, STREAM_COUNTS};
use fused_cpu::{CpuBackend, Isa};

/// Criterion samples per benchmark (flat sampling: equal iterations each).
const SAMPLES: usize = 10;
/// Weights read before a rotated copy repeats in the DRAM benchmarks.
const ROTATE_BYTES: usize = 1 << 30;
/// A benchmark whose single call takes longer than this is skipped (the
/// ten samples alone would take too long); the skip is reported.
const MAX_CALL: Duration = Duration::from_millis(1500);
const THREADS: [usize; 2] = [1, 2];
const GEMV_FORMATS: [DType; 5] = [
    DType::Q4_0,
    DType::Q8_0,
    DType::F16,
    DType::Q4_K,
    DType::Q6_K,
];
/// Formats benchmarked in cache only (GEMV, GGML's activation mode).
const CACHE_ONLY_FORMATS: [DType; 1] = [DType::TQ2_0];
/// Further formats the focused mode ([`focus`]) takes, besides
/// [`GEMV_FORMATS`] and [`CACHE_ONLY_FORMATS`].
const FOCUS_ONLY_FORMATS: [DType; 2] = [DType::Q4_1, DType::Q5_1];
const GEMM_FORMATS: [DType; 3] = [DType::Q4_0, DType::Q8_0, DType::F16];
/// Weight rows of the small-M GEMM in `gemv_cache` (one GEMM row tile).
const SMALL_M: usize = 64;
/// Columns of the small-M GEMM.
const SMALL_M_COLS: usize = 128;

/// Read ceilings (GB/s) by thread count, from the `probe` group.
static CEILING: Mutex<[Option<f64>; 3]> = Mutex::new([None; 3]);
/// The probe's fastest stream count per thread count (index).
static PROBE_STREAMS: Mutex<[Option<usize>; 3]> = Mutex::new([None; 3]);
/// Summary lines, printed at the end.
static SUMMARY: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Criterion's test mode (no `--bench`): shrink everything.
fn quick() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn ceiling(threads: usize) -> Option<f64> {
    CEILING
        .lock()
        .ok()
        .and_then(|c| c.get(threads).copied().flatten())
}

fn note(line: String) {
    eprintln!("{line}");
    if let Ok(mut s) = SUMMARY.lock() {
        s.push(line);
    }
}

use fused_testkit::Rng;
use fused_testkit::layer::DecodeLayer;

/// `copies` matrices of `rows × cols` in `dtype`, back to back. A set of 61
/// distinct random rows is quantized with `quantize_row` and the rows are
/// tiled from it (realistic dequantized values, fast to generate).
fn weights(dtype: DType, rows: usize, cols: usize, copies: usize, seed: u64) -> Vec<u8> {
    const DISTINCT: usize = 61;
    let rb = dtype.row_bytes(cols).expect("row bytes");
    let mut rng = Rng::new(seed | 1);
    let mut set = vec![0u8; rb * DISTINCT];
    for row in set.chunks_exact_mut(rb) {
        quantize_row(dtype, &rng.vec_scaled(cols, 0.05), row).expect("quantize");
    }
    let total = rows * copies;
    // On huge pages where the OS grants them, as the backend's resident
    // buffers (`fused_cpu::pages`).
    let mut out: Vec<u8> = fused_cpu::pages::zeroed_vec(rb * total);
    for (r, dst) in out.chunks_exact_mut(rb).enumerate() {
        let i = (r * 7 + r / DISTINCT) % DISTINCT;
        dst.copy_from_slice(&set[i * rb..(i + 1) * rb]);
    }
    out
}

/// Copies needed so that `bytes_per_copy · copies ≥ ROTATE_BYTES`.
fn copies_for(bytes_per_copy: usize) -> usize {
    if quick() {
        1
    } else {
        ROTATE_BYTES.div_ceil(bytes_per_copy).max(1)
    }
}

fn mat(dtype: DType, rows: usize, cols: usize, all: &[u8], copy: usize) -> WeightMatrix<'_> {
    let n = dtype.row_bytes(cols).expect("row bytes") * rows;
    WeightMatrix::new(dtype, rows, cols, &all[copy * n..(copy + 1) * n]).expect("weight matrix")
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .without_plots()
}

fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut g = c.benchmark_group(name);
    g.sampling_mode(SamplingMode::Flat);
    g
}

/// What a benchmark's median is reported against.
#[derive(Clone, Copy)]
enum Report {
    /// Bytes of weights (or buffer) read per call, and the thread count of
    /// the ceiling to compare with.
    Bytes(usize, usize),
    /// Flops per call (2·M·K·N), plus the weight bytes and thread count.
    Flops(usize, usize, usize),
}

/// Runs `f` as criterion benchmark `id` in `g` (after one untimed call;
/// skipped when that call exceeds [`MAX_CALL`]), then prints the median of
/// criterion's samples next to the ceiling. Returns the median in seconds.
fn bench(
    g: &mut BenchmarkGroup<'_, WallTime>,
    full: &str,
    id: &str,
    report: Report,
    mut f: impl FnMut(),
) -> Option<f64> {
    bench_timed(g, full, id, report, |iters| {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        t.elapsed()
    })
}

/// [`bench`] over `timed(n)`: `n` calls and the time they took, so that
/// what a call needs before it (untimed) stays out of the figure.
fn bench_timed(
    g: &mut BenchmarkGroup<'_, WallTime>,
    full: &str,
    id: &str,
    report: Report,
    mut timed: impl FnMut(u64) -> Duration,
) -> Option<f64> {
    let first = timed(1);
    if !quick() && first > MAX_CALL {
        note(format!(
            "{full}: SKIPPED, one call took {:.2} s (> {:.1} s limit)",
            first.as_secs_f64(),
            MAX_CALL.as_secs_f64()
        ));
        return None;
    }
    match report {
        Report::Bytes(b, _) => g.throughput(Throughput::Bytes(b as u64)),
        Report::Flops(fl, _, _) => g.throughput(Throughput::Elements(fl as u64)),
    };
    let rec = RefCell::new(Vec::new());
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let e = timed(iters);
            rec.borrow_mut().push(e.as_secs_f64() / iters.max(1) as f64);
            e
        })
    });
    let mut rec = rec.into_inner();
    if rec.is_empty() {
        return None; // filtered out
    }
    let mut samples = rec.split_off(rec.len().saturating_sub(SAMPLES));
    samples.sort_by(f64::total_cmp);
    let med = samples[samples.len() / 2];
    let line = match report {
        Report::Bytes(b, th) => {
            let gbs = b as f64 / med / 1e9;
            let pct = ceiling(th).map_or(String::from("n/a"), |c| {
                format!(
                    "{:.0} % of {th}-thread ceiling {c:.1} GB/s",
                    gbs / c * 100.0
                )
            });
            format!("{full}: median {:.3} ms, {gbs:.2} GB/s, {pct}", med * 1e3)
        }
        Report::Flops(fl, b, th) => {
            let gbs = b as f64 / med / 1e9;
            let pct = ceiling(th).map_or(String::from("n/a"), |c| {
                format!(
                    "{:.0} % of {th}-thread ceiling {c:.1} GB/s",
                    gbs / c * 100.0
                )
            });
            format!(
                "{full}: median {:.3} ms, {:.1} GFLOP/s, weights {gbs:.2} GB/s, {pct}",
                med * 1e3,
                fl as f64 / med / 1e9
            )
        }
    };
    note(line);
    Some(med)
}

fn probe(c: &mut Criterion) {
    let bytes = if quick() { 16 << 20 } else { 1 << 30 };
    let p = BandwidthProbe::new(bytes);
    let mut g = group(c, "probe");
    for t in THREADS {
        let (streams, direct) = p.best_streams(t, 5);
        if let Ok(mut m) = PROBE_STREAMS.lock()
            && let Some(slot) = m.get_mut(t)
        {
            *slot = Some(streams);
        }
        eprintln!(
            "probe: read_bandwidth({bytes} B, {t} threads, 5 reps) = {direct:.2} GB/s \
             ({streams} streams a thread, the fastest of {STREAM_COUNTS:?})"
        );
        let full = format!("probe/read/{t}t");
        let med = bench(
            &mut g,
            &full,
            &format!("read/{t}t"),
            Report::Bytes(bytes, t),
            || {
                black_box(p.read_pass(t, streams));
            },
        );
        // The criterion median is the ceiling; the direct figure stands in
        // when the criterion benchmark is filtered out.
        let gbs = med.map_or(direct, |m| bytes as f64 / m / 1e9);
        if let Ok(mut ceil) = CEILING.lock() {
            ceil[t] = Some(gbs);
        }
    }
    g.finish();
    let copy = p.copy(2, 3);
    note(format!(
        "probe/copy/2t (read+write bytes, 3 reps): {copy:.2} GB/s"
    ));
}

fn gemv_dram(c: &mut Criterion) {
    let (m, k) = if quick() { (256, 8192) } else { (16384, 8192) };
    let mut g = group(c, "gemv_dram");
    let x = Rng::new(7).vec_scaled(k, 1.0);
    let mut y = vec![0.0f32; m];
    let bes: Vec<CpuBackend> = THREADS
        .iter()
        .map(|&t| CpuBackend::new(t).expect("backend"))
        .collect();
    let none = Epilogue::NONE.bind(&[], m, 1).expect("bind");
    for dtype in GEMV_FORMATS {
        let bytes = dtype.row_bytes(k).expect("row bytes") * m;
        let copies = copies_for(bytes);
        let all = weights(dtype, m, k, copies, 11);
        let mode = ActQuant::ggml(dtype);
        eprintln!(
            "gemv_dram: {dtype:?} {m}x{k} = {:.1} MiB per matrix, {copies} copies rotated, mode {mode:?}, isa {}",
            bytes as f64 / (1 << 20) as f64,
            bes[0].isa()
        );
        for be in &bes {
            let t = be.threads();
            let mut i = 0;
            let id = format!("{dtype:?}/{t}t");
            bench(
                &mut g,
                &format!("gemv_dram/{id}"),
                &id,
                Report::Bytes(bytes, t),
                || {
                    let w = mat(dtype, m, k, &all, i % copies);
                    i += 1;
                    be.gemv(
                        &GemvJob::new(&w, &x, 1).with_mode(mode).with_bound(&none),
                        &mut y,
                    )
                    .expect("gemv");
                    black_box(&y);
                },
            );
        }
        if dtype == DType::Q4_0 {
            let packed: Vec<PackedWeights> = (0..copies)
                .map(|c| PackedWeights::pack(&mat(dtype, m, k, &all, c)).expect("pack"))
                .collect();
            for be in &bes {
                let t = be.threads();
                let mut i = 0;
                let id = format!("{dtype:?}_packed/{t}t");
                bench(
                    &mut g,
                    &format!("gemv_dram/{id}"),
                    &id,
                    Report::Bytes(bytes, t),
                    || {
                        let w = &packed[i % copies];
                        i += 1;
                        be.gemv_packed(
                            &GemvJob::new(w, &x, 1).with_mode(mode).with_bound(&none),
                            &mut y,
                        )
                        .expect("gemv_packed");
                        black_box(&y);
                    },
                );
            }
        }
    }
    g.finish();
}

fn gemv_cache(c: &mut Criterion) {
    let (m, k) = if quick() { (64, 4096) } else { (4096, 4096) };
    let mut g = group(c, "gemv_cache");
    let bes: Vec<CpuBackend> = THREADS
        .iter()
        .map(|&t| CpuBackend::new(t).expect("backend"))
        .collect();
    for dtype in GEMV_FORMATS.into_iter().chain(CACHE_ONLY_FORMATS) {
        let bytes = dtype.row_bytes(k).expect("row bytes") * m;
        let all = weights(dtype, m, k, 1, 13);
        let w = mat(dtype, m, k, &all, 0);
        let mode = ActQuant::ggml(dtype);
        let ns: &[usize] = if GEMM_FORMATS.contains(&dtype) {
            &[1, 32, 512]
        } else {
            &[1]
        };
        for &n in ns {
            let x = Rng::new(17).vec_scaled(k * n, 1.0);
            let mut y = vec![0.0f32; m * n];
            let none = Epilogue::NONE.bind(&[], m, n).expect("bind");
            for be in &bes {
                let t = be.threads();
                let (id, report) = if n == 1 {
                    (format!("{dtype:?}/gemv/{t}t"), Report::Bytes(bytes, t))
                } else {
                    (
                        format!("{dtype:?}/gemm{n}/{t}t"),
                        Report::Flops(2 * m * k * n, bytes, t),
                    )
                };
                bench(&mut g, &format!("gemv_cache/{id}"), &id, report, || {
                    be.gemv(
                        &GemvJob::new(&w, &x, n).with_mode(mode).with_bound(&none),
                        &mut y,
                    )
                    .expect("gemv");
                    black_box(&y);
                });
            }
        }
        if GEMM_FORMATS.contains(&dtype) {
            small_m_gemm(&mut g, &bes, dtype, k);
        }
        if dtype == DType::Q4_0 {
            let packed = PackedWeights::pack(&w).expect("pack");
            let x = Rng::new(17).vec_scaled(k, 1.0);
            let mut y = vec![0.0f32; m];
            let none = Epilogue::NONE.bind(&[], m, 1).expect("bind");
            for be in &bes {
                let t = be.threads();
                let id = format!("{dtype:?}_packed/gemv/{t}t");
                let report = Report::Bytes(bytes, t);
                bench(&mut g, &format!("gemv_cache/{id}"), &id, report, || {
                    be.gemv_packed(
                        &GemvJob::new(&packed, &x, 1)
                            .with_mode(mode)
                            .with_bound(&none),
                        &mut y,
                    )
                    .expect("gemv_packed");
                    black_box(&y);
                });
            }
        }
    }
    g.finish();
}

/// A GEMM of few weight rows ([`SMALL_M`]) against [`SMALL_M_COLS`]
/// columns, `K = k` (a prompt through a small projection): fewer row tiles
/// than threads, so the backend splits the columns across threads.
fn small_m_gemm(g: &mut BenchmarkGroup<'_, WallTime>, bes: &[CpuBackend], dtype: DType, k: usize) {
    let (m, n) = (SMALL_M, SMALL_M_COLS);
    let bytes = dtype.row_bytes(k).expect("row bytes") * m;
    let all = weights(dtype, m, k, 1, 19);
    let w = mat(dtype, m, k, &all, 0);
    let mode = ActQuant::ggml(dtype);
    let x = Rng::new(17).vec_scaled(k * n, 1.0);
    let mut y = vec![0.0f32; m * n];
    let none = Epilogue::NONE.bind(&[], m, n).expect("bind");
    for be in bes {
        let t = be.threads();
        let id = format!("{dtype:?}/gemm{n}_m{m}/{t}t");
        let report = Report::Flops(2 * m * k * n, bytes, t);
        bench(g, &format!("gemv_cache/{id}"), &id, report, || {
            be.gemv(
                &GemvJob::new(&w, &x, n).with_mode(mode).with_bound(&none),
                &mut y,
            )
            .expect("gemv");
            black_box(&y);
        });
    }
}

/// The weights of `copies` decode layers of one format.
struct Layers {
    dtype: DType,
    h: usize,
    f: usize,
    copies: usize,
    wo: Vec<u8>,
    wg: Vec<u8>,
    wu: Vec<u8>,
    wd: Vec<u8>,
}

impl Layers {
    fn new(dtype: DType, h: usize, f: usize, rotate: bool) -> Layers {
        let per =
            dtype.row_bytes(h).expect("rb") * (h + 2 * f) + dtype.row_bytes(f).expect("rb") * h;
        let copies = if rotate { copies_for(per) } else { 1 };
        Layers {
            dtype,
            h,
            f,
            copies,
            wo: weights(dtype, h, h, copies, 21),
            wg: weights(dtype, f, h, copies, 22),
            wu: weights(dtype, f, h, copies, 23),
            wd: weights(dtype, h, f, copies, 24),
        }
    }

    fn bytes_per_layer(&self) -> usize {
        (self.wo.len() + self.wg.len() + self.wu.len() + self.wd.len()) / self.copies
    }

    fn layer(&self, i: usize) -> [WeightMatrix<'_>; 4] {
        let (d, h, f, c) = (self.dtype, self.h, self.f, i % self.copies);
        [
            mat(d, h, h, &self.wo, c),
            mat(d, f, h, &self.wg, c),
            mat(d, f, h, &self.wu, c),
            mat(d, h, f, &self.wd, c),
        ]
    }
}

/// Activations and outputs of one decode layer.
struct Bufs {
    x: Vec<f32>,
    attn: Vec<f32>,
    h: Vec<f32>,
    g: Vec<f32>,
    out: Vec<f32>,
    // unfused temporaries
    t: Vec<f32>,
    a: Vec<f32>,
    b: Vec<f32>,
    t2: Vec<f32>,
}

impl Bufs {
    fn new(h: usize, f: usize) -> Bufs {
        Bufs {
            x: Rng::new(31).vec_scaled(h, 1.0),
            attn: Rng::new(32).vec_scaled(h, 1.0),
            h: vec![0.0; h],
            g: vec![0.0; f],
            out: vec![0.0; h],
            t: vec![0.0; h],
            a: vec![0.0; f],
            b: vec![0.0; f],
            t2: vec![0.0; h],
        }
    }
}

/// `h = W_o·attn + x; g = silu(W_g·h) ⊙ (W_u·h); out = W_d·g + h`, with
/// the adds and the GLU in the GEMV epilogues: three kernels.
fn layer_fused(be: &CpuBackend, w: &[WeightMatrix<'_>; 4], s: &mut Bufs, step: &mut impl FnMut()) {
    let [wo, wg, wu, wd] = w;
    let (hd, fd) = (wo.rows(), wg.rows());
    let mode = ActQuant::ggml(wo.dtype());
    let add = Epilogue::NONE.then_add().expect("epilogue");
    be.gemv(
        &GemvJob::new(wo, &s.attn, 1)
            .with_mode(mode)
            .with_bound(&add.bind(&[&s.x], hd, 1).expect("bind")),
        &mut s.h,
    )
    .expect("gemv o");
    step();
    let glu = GluWeights::new(*wg, *wu).expect("glu weights");
    let none = Epilogue::NONE.bind(&[], fd, 1).expect("bind");
    be.gemv(
        &GemvJob::gated(glu.gate(), glu.up(), Activation::Silu, &s.h, 1)
            .with_mode(mode)
            .with_bound(&none),
        &mut s.g,
    )
    .expect("gemv_glu");
    step();
    be.gemv(
        &GemvJob::new(wd, &s.g, 1)
            .with_mode(mode)
            .with_bound(&add.bind(&[&s.h], hd, 1).expect("bind")),
        &mut s.out,
    )
    .expect("gemv d");
    step();
    black_box(&s.out);
}

/// The same layer with no epilogues: four GEMVs (gate and up separately),
/// two `add`s and one `glu`: seven kernels.
fn layer_unfused(
    be: &CpuBackend,
    w: &[WeightMatrix<'_>; 4],
    s: &mut Bufs,
    step: &mut impl FnMut(),
) {
    let [wo, wg, wu, wd] = w;
    let (hd, fd) = (wo.rows(), wg.rows());
    let mode = ActQuant::ggml(wo.dtype());
    let none_h = Epilogue::NONE.bind(&[], hd, 1).expect("bind");
    let none_f = Epilogue::NONE.bind(&[], fd, 1).expect("bind");
    be.gemv(
        &GemvJob::new(wo, &s.attn, 1)
            .with_mode(mode)
            .with_bound(&none_h),
        &mut s.t,
    )
    .expect("gemv o");
    step();
    be.add(&s.t, &s.x, &mut s.h).expect("add");
    step();
    be.gemv(
        &GemvJob::new(wg, &s.h, 1)
            .with_mode(mode)
            .with_bound(&none_f),
        &mut s.a,
    )
    .expect("gemv g");
    step();
    be.gemv(
        &GemvJob::new(wu, &s.h, 1)
            .with_mode(mode)
            .with_bound(&none_f),
        &mut s.b,
    )
    .expect("gemv u");
    step();
    be.glu(Activation::Silu, &s.a, &s.b, &mut s.g).expect("glu");
    step();
    be.gemv(
        &GemvJob::new(wd, &s.g, 1)
            .with_mode(mode)
            .with_bound(&none_h),
        &mut s.t2,
    )
    .expect("gemv d");
    step();
    be.add(&s.t2, &s.h, &mut s.out).expect("add");
    step();
    black_box(&s.out);
}

/// The median over `pairs` of `time(fused) / time(unfused)`, the two run
/// back to back (alternating which goes first, each on its own rotated layer
/// copy): a ratio less sensitive to slow drifts of a shared machine than the
/// ratio of two medians taken seconds apart. `run(fused, copy)` runs one
/// layer.
fn paired_ratio(pairs: usize, mut run: impl FnMut(bool, usize)) -> f64 {
    let mut ratios: Vec<f64> = (0..pairs)
        .map(|i| {
            let mut time = |fused: bool, copy: usize| {
                let t = Instant::now();
                run(fused, copy);
                t.elapsed().as_secs_f64()
            };
            let (f, u) = if i % 2 == 0 {
                let f = time(true, 2 * i);
                (f, time(false, 2 * i + 1))
            } else {
                let u = time(false, 2 * i);
                (time(true, 2 * i + 1), u)
            };
            f / u
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

fn decode_layer(c: &mut Criterion) {
    let mut g = group(c, "decode_layer");
    let bes: Vec<CpuBackend> = THREADS
        .iter()
        .map(|&t| CpuBackend::new(t).expect("backend"))
        .collect();
    let sizes: &[(usize, usize, bool)] = if quick() {
        &[(1024, 2816, false)]
    } else {
        &[(1024, 2816, false), (4096, 11008, true)]
    };
    for &(h, f, rotate) in sizes {
        for dtype in [DType::Q4_0, DType::F16] {
            let layers = Layers::new(dtype, h, f, rotate);
            let bytes = layers.bytes_per_layer();
            eprintln!(
                "decode_layer: {dtype:?} H={h} F={f}: {:.1} MiB of weights per layer, {} copies rotated",
                bytes as f64 / (1 << 20) as f64,
                layers.copies
            );
            let mut s = Bufs::new(h, f);
            for be in &bes {
                let t = be.threads();
                // Barriers of one layer, counted on its own.
                be.reset_counters();
                layer_fused(be, &layers.layer(0), &mut s, &mut || {});
                let cf = be.counters();
                let fused_out = s.out.clone();
                be.reset_counters();
                layer_unfused(be, &layers.layer(0), &mut s, &mut || {});
                let cu = be.counters();
                let diff = fused_out
                    .iter()
                    .zip(&s.out)
                    .map(|(p, q)| (p - q).abs())
                    .fold(0.0f32, f32::max);
                let tag = format!("{dtype:?}/H{h}_F{f}");
                let mut i = 0;
                let fused = bench(
                    &mut g,
                    &format!("decode_layer/{tag}/fused/{t}t"),
                    &format!("{tag}/fused/{t}t"),
                    Report::Bytes(bytes, t),
                    || {
                        layer_fused(be, &layers.layer(i), &mut s, &mut || {});
                        i += 1;
                    },
                );
                let mut i = 0;
                let unfused = bench(
                    &mut g,
                    &format!("decode_layer/{tag}/unfused/{t}t"),
                    &format!("{tag}/unfused/{t}t"),
                    Report::Bytes(bytes, t),
                    || {
                        layer_unfused(be, &layers.layer(i), &mut s, &mut || {});
                        i += 1;
                    },
                );
                if fused.is_none() && unfused.is_none() {
                    continue; // filtered out or skipped (reported by `bench`)
                }
                let (ratio, paired) = match (fused, unfused) {
                    (Some(a), Some(b)) => {
                        let pairs = ((2.0 / (a + b)) as usize).clamp(10, 400);
                        let p = paired_ratio(pairs, |fused_turn, i| {
                            let w = layers.layer(i);
                            if fused_turn {
                                layer_fused(be, &w, &mut s, &mut || {});
                            } else {
                                layer_unfused(be, &w, &mut s, &mut || {});
                            }
                        });
                        (
                            format!("{:.3}", a / b),
                            format!("{p:.3} over {pairs} pairs"),
                        )
                    }
                    _ => (String::from("n/a"), String::from("n/a")),
                };
                note(format!(
                    "decode_layer/{tag}/{t}t: fused/unfused time = {ratio}; interleaved median ratio {paired}; barriers per layer fused {} unfused {}; kernel calls fused {} unfused {}; max |fused - unfused| = {diff:e}",
                    cf.barriers, cu.barriers, cf.kernel_calls, cu.kernel_calls
                ));
                if fused.is_some() && unfused.is_some() {
                    note(breakdown(&tag, be, &layers, &mut s));
                }
            }
        }
    }
    g.finish();
}

/// Where the time of a layer goes: the median time of each step of the
/// unfused and of the fused layer (each step timed on its own inside whole
/// layers run back to back, on rotated copies), the sum of the medians, and
/// the cost of an empty parallel region on the same backend.
fn breakdown(tag: &str, be: &CpuBackend, layers: &Layers, s: &mut Bufs) -> String {
    const UNFUSED: [&str; 7] = ["gemv_o", "add", "gemv_g", "gemv_u", "glu", "gemv_d", "add"];
    const FUSED: [&str; 3] = ["gemv_o+add", "gemv_glu", "gemv_d+add"];
    let reps = if quick() { 5 } else { 200 };
    let mut run = |fused: bool, n: usize| -> Vec<f64> {
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); n];
        for i in 0..reps {
            let w = layers.layer(i);
            let (mut k, mut t) = (0, Instant::now());
            let mut step = || {
                times[k].push(t.elapsed().as_secs_f64());
                k += 1;
                t = Instant::now();
            };
            if fused {
                layer_fused(be, &w, s, &mut step);
            } else {
                layer_unfused(be, &w, s, &mut step);
            }
        }
        times
            .iter_mut()
            .map(|v| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            })
            .collect()
    };
    let (u, f) = (run(false, UNFUSED.len()), run(true, FUSED.len()));
    let empty = {
        let mut v: Vec<f64> = (0..reps)
            .map(|_| {
                let t = Instant::now();
                be.region_probe();
                t.elapsed().as_secs_f64()
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let fmt = |names: &[&str], v: &[f64]| {
        names
            .iter()
            .zip(v)
            .map(|(n, t)| format!("{n} {:.1}", t * 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (su, sf): (f64, f64) = (u.iter().sum(), f.iter().sum());
    format!(
        "decode_layer/{tag}/{}t breakdown (µs, step medians): unfused [{}] sum {:.1}; fused [{}] sum {:.1}; element-wise steps of the unfused layer {:.1}; empty parallel region {:.2}",
        be.threads(),
        fmt(&UNFUSED, &u),
        su * 1e6,
        fmt(&FUSED, &f),
        sf * 1e6,
        (u[1] + u[4] + u[6]) * 1e6,
        empty * 1e6
    )
}

/// The `plan` group: fused-testkit's [`DecodeLayer`] (Q4_0) planned fused
/// ([`plan`]) and unfused ([`Plan::unfused`]), both compiled through
/// [`Backend::compile`] on each [`CpuBackend`], written once
/// ([`ResidentPlan::write_all`]) and timed by [`ResidentPlan::run`], the
/// residual stream restored ([`ResidentPlan::restore_inputs`], untimed)
/// before each run. Throughput in weight bytes; a line per case gives the
/// fused/unfused ratio (of the medians, and interleaved), the launches and
/// barriers of one run of each plan ([`ResidentPlan::stats`]) and whether
/// the two outputs are bit for bit the same.
fn plan_layers(c: &mut Criterion) {
    let mut g = group(c, "plan");
    let bes: Vec<CpuBackend> = THREADS
        .iter()
        .map(|&t| CpuBackend::new(t).expect("backend"))
        .collect();
    let sizes: &[(usize, usize)] = if quick() {
        &[(256, 512)]
    } else {
        &[(1024, 2816), (4096, 11008)]
    };
    let dtype = DType::Q4_0;
    for &(h, f) in sizes {
        let layer = DecodeLayer::new(dtype, h, f, 41);
        let (graph, sizes) = (&layer.graph, layer.mem.sizes());
        let out = graph.tensor(layer.out).expect("the output tensor");
        let bytes: usize = layer
            .weights
            .iter()
            .map(|t| t.byte_extent().end - t.byte_extent().start)
            .sum();
        eprintln!(
            "plan: {dtype:?} decode layer H={h} F={f} (q/k/v, o + residual, GLU, down + residual): {:.1} MiB of weights",
            bytes as f64 / (1 << 20) as f64
        );
        let plans = [plan(graph), Plan::unfused(graph)];
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            for be in &bes {
                let t = be.threads();
                let [mut fused, mut unfused] = [&plans[0], &plans[1]].map(|p| {
                    let mut rp = Backend::compile(be, graph, p, mode, &sizes).expect("compile");
                    rp.write_all(&layer.mem).expect("write");
                    rp
                });
                let [yf, yu] = [&mut fused, &mut unfused].map(|rp| {
                    rp.run().expect("run");
                    let y = rp.read_f32(out).expect("read");
                    rp.restore_inputs().expect("restore");
                    y
                });
                let same = yf.iter().zip(&yu).all(|(p, q)| p.to_bits() == q.to_bits());
                let tag = format!("{dtype:?}/H{h}_F{f}/{mode:?}");
                let mut time = |rp: &mut <CpuBackend as Backend>::Plan<'_>, name: &str| {
                    bench_timed(
                        &mut g,
                        &format!("plan/{tag}/{name}/{t}t"),
                        &format!("{tag}/{name}/{t}t"),
                        Report::Bytes(bytes, t),
                        |iters| {
                            let mut total = Duration::ZERO;
                            for _ in 0..iters {
                                rp.restore_inputs().expect("restore");
                                let s = Instant::now();
                                rp.run().expect("run");
                                total += s.elapsed();
                            }
                            total
                        },
                    )
                };
                let (a, b) = (time(&mut fused, "fused"), time(&mut unfused, "unfused"));
                if a.is_none() && b.is_none() {
                    continue; // filtered out or skipped (reported by `bench_timed`)
                }
                let (ratio, paired) = match (a, b) {
                    (Some(a), Some(b)) => {
                        let pairs = ((2.0 / (a + b)) as usize).clamp(10, 400);
                        let p = paired_ratio(pairs, |fused_turn, _| {
                            let rp = if fused_turn { &mut fused } else { &mut unfused };
                            rp.restore_inputs().expect("restore");
                            rp.run().expect("run");
                        });
                        (
                            format!("{:.3}", a / b),
                            format!("{p:.3} over {pairs} pairs"),
                        )
                    }
                    _ => (String::from("n/a"), String::from("n/a")),
                };
                let (sf, su) = (fused.stats(), unfused.stats());
                note(format!(
                    "plan/{tag}/{t}t: fused/unfused time = {ratio}; interleaved median ratio {paired}; per run: kernel steps fused {} unfused {}, launches fused {} unfused {}, barriers fused {} unfused {}; outputs bit for bit the same: {same}",
                    sf.kernel_steps,
                    su.kernel_steps,
                    sf.launches,
                    su.launches,
                    sf.barriers,
                    su.barriers
                ));
            }
        }
    }
    g.finish();
}

/// One GEMV of a focused run: `(rotated copy, output)`.
type GemvCall<'a> = dyn FnMut(usize, &mut [f32]) + 'a;

/// Focused A/B mode: with `GEMV_FOCUS=Q4_0,Q8_0,…` set, only these formats'
/// single-column GEMVs are timed (no criterion), call by call, and the
/// process exits. `GEMV_WHERE` picks `cache` (4096×4096, one copy), `l2`
/// (about 1.5 MiB of K = 4096 rows, one copy: in L2 or L3, compute-bound) and/or
/// `dram` (16384×8192, rotated copies as in `gemv_dram`), `GEMV_THREADS`
/// the thread counts (default `cache,dram` and `1,2`), `GEMV_ISA` the
/// instruction set (`scalar`, `avx2`, `avx512`; default the best) and
/// `GEMV_COLS` the activation columns (default 1; more runs the GEMM path,
/// and the line then also gives GFLOP/s). Besides the formats of the
/// criterion groups, it takes Q4_1 and Q5_1 ([`FOCUS_ONLY_FORMATS`]).
/// `GEMV_DRAM_SHAPE=MxK` sets the shape of `dram` (default `16384x8192`;
/// e.g. `233016x576`: about as many bytes in short rows, as a small
/// model's matrices have them), and `GEMV_K` the row length of `cache` and
/// `l2` (default 4096). With `GEMV_PACKED=1`, Q4_0 is
/// also timed over packed weights ([`PackedWeights`], the same copies
/// repacked), each packed line right after the plain line of the same
/// place and thread count (`focus Q4_0_packed …`). `GEMV_ROWS` sets the
/// weight rows of `cache` and `l2` (e.g. `GEMV_ROWS=64 GEMV_COLS=128`: a
/// small-M GEMM, whose columns the backend splits across threads). In
/// `cache` and `l2`, with `GEMV_THREADS` starting at 1, a `vs 1t paired`
/// line gives each other thread count's time over the one-thread time,
/// calls of the two alternated ([`paired_scaling`]). Each DRAM line comes
/// with the read ceiling measured just before it (median of 5 passes), so
/// runs of two builds can be compared line by line on a loaded machine, and
/// a `paired` line: the median over rounds of GEMV GB/s ÷ probe GB/s, each
/// round timing one probe pass and one pass over the copies back to back
/// ([`paired_rounds`]; `GEMV_ROUNDS`, default 15).
fn focus(_c: &mut Criterion) {
    let Ok(formats) = std::env::var("GEMV_FOCUS") else {
        return;
    };
    let list = |var: &str, default: &str| -> Vec<String> {
        std::env::var(var)
            .unwrap_or_else(|_| default.into())
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let wheres = list("GEMV_WHERE", "cache,dram");
    let threads: Vec<usize> = list("GEMV_THREADS", "1,2")
        .iter()
        .map(|t| t.parse().expect("thread count"))
        .collect();
    let stats = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[v.len() / 2])
    };
    let isa = std::env::var("GEMV_ISA").map_or(Isa::detect(), |name| {
        Isa::ALL
            .into_iter()
            .find(|i| i.name() == name)
            .expect("GEMV_ISA: an instruction set name")
    });
    let n: usize = list("GEMV_COLS", "1")[0].parse().expect("GEMV_COLS");
    let with_packed = std::env::var("GEMV_PACKED").is_ok_and(|v| v == "1");
    let rows: Option<usize> = std::env::var("GEMV_ROWS")
        .ok()
        .map(|r| r.parse().expect("GEMV_ROWS"));
    let dram_shape = std::env::var("GEMV_DRAM_SHAPE").map_or((16384, 8192), |s| {
        let (m, k) = s.split_once('x').expect("GEMV_DRAM_SHAPE: MxK");
        let n = |v: &str| v.parse::<usize>().expect("GEMV_DRAM_SHAPE: MxK");
        (n(m), n(k))
    });
    let cache_k: usize = list("GEMV_K", "4096")[0].parse().expect("GEMV_K");
    let probe = BandwidthProbe::new(1 << 30);
    for f in formats.split(',') {
        let dtype = GEMV_FORMATS
            .into_iter()
            .chain(CACHE_ONLY_FORMATS)
            .chain(FOCUS_ONLY_FORMATS)
            .find(|d| format!("{d:?}") == f)
            .expect(
                "GEMV_FOCUS: a format of GEMV_FORMATS, CACHE_ONLY_FORMATS or FOCUS_ONLY_FORMATS",
            );
        let mode = ActQuant::ggml(dtype);
        for place in &wheres {
            let (m, k, rotate) = match place.as_str() {
                "cache" => (4096, cache_k, false),
                "l2" => {
                    let rb = dtype.row_bytes(cache_k).expect("row bytes");
                    ((3 << 19) / rb / 16 * 16, cache_k, false)
                }
                _ => (dram_shape.0, dram_shape.1, true),
            };
            let m = if rotate { m } else { rows.unwrap_or(m) };
            let bytes = dtype.row_bytes(k).expect("row bytes") * m;
            let copies = if rotate { copies_for(bytes) } else { 1 };
            let all = weights(dtype, m, k, copies, 11);
            let x = Rng::new(7).vec_scaled(k * n, 1.0);
            let mut y = vec![0.0f32; m * n];
            let none = Epilogue::NONE.bind(&[], m, n).expect("bind");
            let packed: Vec<PackedWeights> = if with_packed && dtype == DType::Q4_0 {
                (0..copies)
                    .map(|c| PackedWeights::pack(&mat(dtype, m, k, &all, c)).expect("pack"))
                    .collect()
            } else {
                Vec::new()
            };
            for &t in &threads {
                let be = CpuBackend::with_isa(isa, t).expect("backend");
                let mut plain = |i: usize, y: &mut [f32]| {
                    let w = mat(dtype, m, k, &all, i % copies);
                    be.gemv(
                        &GemvJob::new(&w, &x, n).with_mode(mode).with_bound(&none),
                        y,
                    )
                    .expect("gemv");
                };
                let mut over_packed = |i: usize, y: &mut [f32]| {
                    be.gemv_packed(
                        &GemvJob::new(&packed[i % copies], &x, n)
                            .with_mode(mode)
                            .with_bound(&none),
                        y,
                    )
                    .expect("gemv_packed");
                };
                let mut layouts: Vec<(String, &mut GemvCall<'_>)> =
                    vec![(f.to_owned(), &mut plain)];
                if !packed.is_empty() {
                    layouts.push((format!("{f}_packed"), &mut over_packed));
                }
                for (label, call) in layouts {
                    let ceil = rotate.then(|| {
                        let v = (0..5)
                            .map(|_| {
                                let s = Instant::now();
                                black_box(probe.read_pass(t, probe_streams(&probe, t)));
                                probe.bytes() as f64 / s.elapsed().as_secs_f64() / 1e9
                            })
                            .collect();
                        stats(v).1
                    });
                    let calls = if rotate {
                        4 * copies
                    } else {
                        (2_000_000_000 / bytes.max(1)).clamp(50, 5000)
                    };
                    let mut times = Vec::with_capacity(calls);
                    for i in 0..calls + 2 {
                        let s = Instant::now();
                        call(i, &mut y);
                        black_box(&y);
                        if i >= 2 {
                            times.push(s.elapsed().as_secs_f64());
                        }
                    }
                    let (min, med) = stats(times);
                    let paired = rotate.then(|| {
                        paired_rounds(&probe, t, bytes, copies, |i| {
                            call(i, &mut y);
                            black_box(&y);
                        })
                    });
                    let gbs = |s: f64| bytes as f64 / s / 1e9;
                    let pct = ceil.map_or(String::new(), |c| {
                        format!(
                            ", ceiling {c:.2} GB/s: {:.0} % (median), {:.0} % (best)",
                            gbs(med) / c * 100.0,
                            gbs(min) / c * 100.0
                        )
                    });
                    let flops = (n > 1).then(|| {
                        let gf = 2.0 * (m * k * n) as f64 / med / 1e9;
                        format!(", {n} columns: {gf:.1} GFLOP/s (median)")
                    });
                    eprintln!(
                        "focus {label} {place} {isa} {t}t: median {:.3} ms {:.2} GB/s, best {:.3} ms {:.2} GB/s{pct}{}",
                        med * 1e3,
                        gbs(med),
                        min * 1e3,
                        gbs(min),
                        flops.unwrap_or_default()
                    );
                    if let Some((ratio, g, p, n)) = paired {
                        eprintln!(
                            "focus {label} {place} {t}t paired: {:.1} % of the probe (median of {n} rounds; medians: gemv {g:.2} GB/s, probe {p:.2} GB/s)",
                            ratio * 100.0
                        );
                    }
                }
            }
            if !rotate && threads.first() == Some(&1) {
                let w = mat(dtype, m, k, &all, 0);
                let base = CpuBackend::with_isa(isa, 1).expect("backend");
                for &t in &threads[1..] {
                    let be = CpuBackend::with_isa(isa, t).expect("backend");
                    let pairs = (500_000_000 / bytes.max(1)).clamp(50, 1000);
                    let ratio = paired_scaling(pairs, |many| {
                        let b = if many { &be } else { &base };
                        b.gemv(
                            &GemvJob::new(&w, &x, n).with_mode(mode).with_bound(&none),
                            &mut y,
                        )
                        .expect("gemv");
                        black_box(&y);
                    });
                    eprintln!(
                        "focus {f} {place} {isa} {t}t vs 1t paired: time ratio {ratio:.3} (median of {pairs} pairs)"
                    );
                }
            }
        }
    }
    std::process::exit(0);
}

/// The median over `pairs` of `time(call(true)) / time(call(false))`, the
/// two sides back to back, alternating which goes first: the speed-up of
/// one setting over another (here: many threads over one) measured so that
/// a change in the load of a shared machine hits both sides of each pair.
/// Each side makes one untimed call first, so that the timed one finds the
/// pool's workers awake, as in a run of calls (the other side's call can
/// outlast their spinning, [`fused_cpu::pool::SPIN`]).
fn paired_scaling(pairs: usize, mut call: impl FnMut(bool)) -> f64 {
    let mut time = |many: bool| {
        call(many);
        let s = Instant::now();
        call(many);
        s.elapsed().as_secs_f64()
    };
    let mut ratios: Vec<f64> = (0..pairs)
        .map(|i| {
            let (a, b) = if i % 2 == 0 {
                let a = time(true);
                (a, time(false))
            } else {
                let b = time(false);
                (time(true), b)
            };
            a / b
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// The probe's fastest stream count with `threads` threads
/// (`BandwidthProbe::best_streams`), found once per thread count.
fn probe_streams(probe: &BandwidthProbe, threads: usize) -> usize {
    if let Some(s) = PROBE_STREAMS
        .lock()
        .ok()
        .and_then(|m| m.get(threads).copied().flatten())
    {
        return s;
    }
    let (s, _) = probe.best_streams(threads, 3);
    if let Ok(mut m) = PROBE_STREAMS.lock()
        && let Some(slot) = m.get_mut(threads)
    {
        *slot = Some(s);
    }
    s
}

/// GEMV bandwidth as a fraction of the probe's, measured in rounds that
/// each time one probe pass (`probe.read_pass(threads, streams)`) and one pass of
/// GEMV calls over all `copies` rotated copies (`call(i)`, `bytes` each:
/// about as many bytes as the probe reads), back to back, alternating which
/// goes first: the ratio of each round sees the same machine conditions,
/// which drift on a shared machine faster than a whole run. Returns the
/// median ratio, the median GEMV and probe GB/s, and the round count.
fn paired_rounds(
    probe: &BandwidthProbe,
    threads: usize,
    bytes: usize,
    copies: usize,
    mut call: impl FnMut(usize),
) -> (f64, f64, f64, usize) {
    let rounds: usize = std::env::var("GEMV_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let streams = probe_streams(probe, threads);
    let probe_pass = || {
        let s = Instant::now();
        black_box(probe.read_pass(threads, streams));
        probe.bytes() as f64 / s.elapsed().as_secs_f64() / 1e9
    };
    let mut gemv_pass = || {
        let s = Instant::now();
        for i in 0..copies {
            call(i);
        }
        (bytes * copies) as f64 / s.elapsed().as_secs_f64() / 1e9
    };
    let (mut ratios, mut gs, mut ps) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds.max(1) {
        let (g, p) = if r % 2 == 0 {
            let p = probe_pass();
            (gemv_pass(), p)
        } else {
            let g = gemv_pass();
            (g, probe_pass())
        };
        ratios.push(g / p);
        gs.push(g);
        ps.push(p);
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (med(ratios), med(gs), med(ps), rounds.max(1))
}

fn summary(_c: &mut Criterion) {
    if let Ok(s) = SUMMARY.lock() {
        eprintln!("\n==== summary (medians of {SAMPLES} criterion samples) ====");
        for line in s.iter() {
            eprintln!("{line}");
        }
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = focus, probe, gemv_dram, gemv_cache, decode_layer, plan_layers, summary
}
criterion_main!(benches);
