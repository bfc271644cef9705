//! Benchmarks of the CUDA kernels on the first device, timed with CUDA
//! events (median of many runs), printed as markdown tables.
//!
//! `cargo build -p fused-cuda --features cuda --release --bin cuda-bench`;
//! `scripts/gpu-bundle` packs it for the GPU machine. `--gemv-only` stops
//! after the GEMV section (for quick A/B runs); `--plans-only` runs the
//! copy ceiling and the device-plan sections only, `--columns-only` the
//! copy ceiling and the several-column table, `--handoff-only` the copy
//! ceiling and the handoff table, `--launch-only` stops after the launch
//! options, `--ahead-only` runs the copy ceiling and the L2 look-ahead
//! table, `--epilogue-only` the copy ceiling and the epilogue's cost,
//! `--timeline-only` the copy ceiling and the traced timeline of dependent
//! GEMV chains (`CudaBackend::trace_gemv_chain`; not in the full run).
//! Sections: the
//! device-to-device copy ceiling (bytes read + written); the per-call
//! floor (tiny dependent GEMVs whose bytes take no time); the handoff
//! between dependent kernels (`fused_cuda::Handoff`); the launch options;
//! each GEMV asking L2 for the next one's first weights
//! (`GemvJob::with_l2_ahead`); GEMV 4096×14336 and
//! 32768×8192 in F16, Q8_0, Q4_0 and Q4_K over rotating weight copies
//! (together > 4× the 60 MB L2, so every call reads HBM), as GB/s and % of
//! the copy ceiling, each call waiting for the one before it and, in a
//! last columns, the same weight copies as one `gemv_batch` of independent
//! calls (one output each, the activations shared; one after the other,
//! overlapping, grouped into one launch); the other weight formats at 4096×14336, 1 column, with
//! f32 activations and in GGML's quantized-activation mode
//! (`FUSED_BENCH_SHAPES=ROWSxK,…` replaces the two shapes of the launch
//! option and GEMV tables); the
//! epilogue's cost over a bare GEMV; the signed FWHT
//! fused against sign multiply + FWHT; a Q4_0 decode layer fused against
//! unfused; the F16 FFN layer that `benches/torch_compare.py` runs in
//! PyTorch; a Q4_0 and an F16 decode layer through the device plan
//! (`DevicePlan`), fused and unfused, launched on the stream and replayed
//! as a CUDA graph.

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::fwht::FwhtDesc;
use fused_core::graph::{Graph, Place};
use fused_core::planner::{Plan, plan};
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::reference::{ActQuant, WeightMatrix};
use fused_core::tensor::{BufferId, TensorDesc};
use fused_cuda::{
    AheadAt, CudaBackend, CudaError, DeviceActs, DevicePlan, DeviceVec, DeviceWeights, GemvJob,
    L2_AHEAD_DEFAULT, LaunchOptions, Submission,
};

/// Bytes the rotating weight copies must add up to: 4× the H200's 60 MB L2.
const ROTATE_BYTES: usize = 240_000_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

thread_local! {
    /// The largest ratio of host enqueue time to the device time it had
    /// (the head start and the batch) of one batch since the last
    /// [`report_host`], with that batch's host and device ms per call.
    static HOST_SHARE: std::cell::Cell<(f64, f64, f64)> = const { std::cell::Cell::new((0.0, 0.0, 0.0)) };
    /// The head start's weights, input and output, and the device ms of one
    /// GEMV over them.
    static HEAD_START: std::cell::RefCell<Option<HeadStart>> =
        const { std::cell::RefCell::new(None) };
}

/// What [`head_start`] runs: an F16 GEMV of [`HEAD_START_DIM`]² (134 MB,
/// more than twice the L2), which reads without leaving dirty lines in L2
/// (copies would leave ~60 MB to write back during the timed calls).
struct HeadStart {
    w: DeviceWeights,
    x: DeviceVec,
    y: DeviceVec,
    ms: f64,
}

/// Rows and K of the head start's GEMV.
const HEAD_START_DIM: usize = 8192;

/// Whether [`time_calls`] gives the device a head start
/// (`FUSED_BENCH_HEAD_START=0`: no).
fn head_start_on() -> bool {
    std::env::var("FUSED_BENCH_HEAD_START").map_or(true, |v| v != "0")
}

/// Enqueues GEMVs that keep the device busy for at least `ms` (none where
/// `ms` is 0 or [`head_start_on`] says no) and leave L2 clean; returns the
/// device ms they take.
fn head_start(be: &CudaBackend, ms: f64) -> Result<f64, CudaError> {
    if ms <= 0.0 || !head_start_on() {
        return Ok(0.0);
    }
    HEAD_START.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let n = HEAD_START_DIM;
            let bytes = weight_bytes(DType::F16, n, n, 11);
            let w = be.upload_weights(&WeightMatrix::new(DType::F16, n, n, &bytes)?)?;
            let x = be.upload(&randv(n, 12))?;
            let mut y = be.alloc(n)?;
            let run =
                |y: &mut DeviceVec| be.gemv(&w, &x, 1, ActQuant::F32, &Epilogue::NONE, &[], y);
            run(&mut y)?;
            let ms = f64::from(be.time_ms(|| run(&mut y))?);
            *slot = Some(HeadStart { w, x, y, ms });
        }
        let h = slot.as_mut().expect("just set");
        let calls = (ms / h.ms).ceil().max(1.0);
        for _ in 0..calls as usize {
            be.gemv(&h.w, &h.x, 1, ActQuant::F32, &Epilogue::NONE, &[], &mut h.y)?;
        }
        Ok(calls * h.ms)
    })
}

/// Frees the head start's buffers when dropped (declared after the backend,
/// so before the backend goes).
struct HeadStartBuffers;

impl Drop for HeadStartBuffers {
    fn drop(&mut self) {
        HEAD_START.with(|cell| cell.borrow_mut().take());
    }
}

/// Median milliseconds per call of `f(i)` for i = 0, 1, …: batches of
/// `per_batch` calls timed with events, after `warm` batches. Each batch
/// starts behind a head start (GEMVs on the stream, before the start
/// event, 1.5× as long as the host took to enqueue the batch before), so
/// that the device runs the batch's calls back to back however long the host
/// takes to enqueue them: the device's time, not the host's
/// (`FUSED_BENCH_HEAD_START=0`: none). Also times the host's enqueueing of
/// each batch (wall clock): where that is close to the head start and the
/// device time together, the device may have waited for the host, and
/// [`report_host`] says so.
fn time_calls(
    be: &CudaBackend,
    per_batch: usize,
    batches: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let mut i = 0;
    let mut samples = Vec::with_capacity(batches);
    let mut worst = (0.0f64, 0.0, 0.0);
    let mut last_wall = 0.0;
    for b in 0..batches + 3 {
        let ahead = head_start(be, 1.5 * last_wall)?;
        let mut wall = 0.0;
        let ms = be.time_ms(|| {
            let t0 = std::time::Instant::now();
            for _ in 0..per_batch {
                f(i)?;
                i += 1;
            }
            wall = t0.elapsed().as_secs_f64() * 1e3;
            Ok(())
        })?;
        last_wall = wall;
        if b >= 3 {
            let dev = ms as f64 / per_batch as f64;
            samples.push(dev);
            let ratio = wall / (ahead + ms as f64);
            if ratio > worst.0 {
                worst = (ratio, wall / per_batch as f64, dev);
            }
        }
    }
    HOST_SHARE.with(|c| {
        if worst.0 > c.get().0 {
            c.set(worst);
        }
    });
    Ok(median(samples))
}

/// The head start before each timed plan run: more than the host takes to
/// restore a plan's inputs and enqueue its run (at most a few dozen
/// launches of a few µs each).
const PLAN_HEAD_START_MS: f64 = 0.3;

/// Median device milliseconds of `reps` runs of the device plan `dp`
/// submitted as `how` (after one untimed run), each run event-timed on its
/// own behind a head start of [`PLAN_HEAD_START_MS`]
/// ([`DevicePlan::time_once_queued`]: the input restore does not wait for
/// the device, which would spend the head start; `FUSED_BENCH_HEAD_START=0`:
/// none, [`DevicePlan::run_timed`]'s timing).
fn plan_ms(
    be: &CudaBackend,
    dp: &DevicePlan,
    reps: usize,
    how: Submission,
) -> Result<f64, CudaError> {
    if !head_start_on() {
        let t = dp.run_timed(reps, how)?;
        return Ok(median(t.into_iter().map(f64::from).collect()));
    }
    dp.restore_inputs()?;
    dp.run_as(how)?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        head_start(be, PLAN_HEAD_START_MS)?;
        t.push(f64::from(dp.time_once_queued(how)?));
    }
    Ok(median(t))
}

/// Prints the largest host/device ratio of the batches timed since the
/// last call (for the section `what`), and starts over.
fn report_host(what: &str) {
    let (ratio, host, dev) = HOST_SHARE.with(|c| c.replace((0.0, 0.0, 0.0)));
    println!(
        "\nHost enqueue time, {what}: at most {:.0} % of the device time it had (head start \
         and batch; {:.2} µs host, {:.2} µs device per call){}\n",
        100.0 * ratio,
        host * 1e3,
        dev * 1e3,
        if ratio > 0.8 {
            ": the host may have held the device back there"
        } else {
            ""
        }
    );
}

/// Deterministic pseudo-random f32 in [-1, 1).
fn randv(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `rows × k` weights in `dtype`: 64 distinct random rows, tiled.
fn weight_bytes(dtype: DType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let rb = dtype.row_bytes(k).expect("block-aligned K");
    let distinct = 64.min(rows);
    let mut tile = vec![0u8; distinct * rb];
    for r in 0..distinct {
        let row = randv(k, seed + r as u64);
        fused_core::quant::quantize_row(dtype, &row, &mut tile[r * rb..(r + 1) * rb])
            .expect("quantize");
    }
    let mut out = Vec::with_capacity(rows * rb);
    while out.len() < rows * rb {
        let take = (rows * rb - out.len()).min(tile.len());
        out.extend_from_slice(&tile[..take]);
    }
    out
}

/// Enough device copies of one weight matrix to exceed [`ROTATE_BYTES`] (at least 2).
fn weight_copies(
    be: &CudaBackend,
    dtype: DType,
    rows: usize,
    k: usize,
) -> Result<Vec<DeviceWeights>, CudaError> {
    let bytes = weight_bytes(dtype, rows, k, 7);
    let w = WeightMatrix::new(dtype, rows, k, &bytes)?;
    let copies = ROTATE_BYTES.div_ceil(bytes.len()).max(2);
    (0..copies).map(|_| be.upload_weights(&w)).collect()
}

fn run() -> Result<(), CudaError> {
    let be = CudaBackend::new()?;
    let _head_start = HeadStartBuffers;
    let dev = be.device();
    println!(
        "# fused-cuda bench on {} (compute capability {:?}, kernels: {:?})\n",
        dev.name(),
        dev.capability(),
        dev.kernel_form()
    );

    // ------------------------------------------------ copy ceiling
    let n = 256 << 20; // 1 GiB of f32 per buffer
    let a = be.upload(&randv(n, 1))?;
    let mut b = be.alloc(n)?;
    let bytes = 2.0 * (n * 4) as f64; // read + written
    let t_memcpy = time_calls(&be, 5, 20, |_| be.copy(&a, &mut b))?;
    let t_kernel = time_calls(&be, 5, 20, |_| be.copy_kernel(&a, &mut b))?;
    let bw_memcpy = bytes / t_memcpy / 1e6;
    let bw_kernel = bytes / t_kernel / 1e6;
    let ceiling = bw_memcpy.max(bw_kernel);
    drop((a, b));
    println!("## Copy ceiling (1 GiB → 1 GiB, bytes read + written)\n");
    println!("| copy | ms | GB/s |\n| --- | ---: | ---: |");
    println!("| cuMemcpyDtoDAsync | {t_memcpy:.3} | {bw_memcpy:.0} |");
    println!("| copy kernel (16-byte) | {t_kernel:.3} | {bw_kernel:.0} |");
    println!("\nceiling used below: {ceiling:.0} GB/s\n");
    let gemv_only = std::env::args().any(|a| a == "--gemv-only");
    if std::env::args().any(|a| a == "--plans-only") {
        return plans(&be, ceiling);
    }
    if std::env::args().any(|a| a == "--columns-only") {
        return several_columns(&be, ceiling);
    }
    if std::env::args().any(|a| a == "--handoff-only") {
        return handoff(&be);
    }
    if std::env::args().any(|a| a == "--ahead-only") {
        return l2_ahead(&be, ceiling);
    }
    if std::env::args().any(|a| a == "--epilogue-only") {
        return epilogue_costs(&be);
    }
    if std::env::args().any(|a| a == "--timeline-only") {
        return timeline(&be);
    }
    per_call_floor(&be)?;
    report_host("per-call floor");
    handoff(&be)?;
    launch_options(&be, ceiling)?;
    report_host("launch options");
    if std::env::args().any(|a| a == "--launch-only") {
        return Ok(());
    }
    l2_ahead(&be, ceiling)?;
    report_host("L2 look-ahead");

    // ------------------------------------------------ GEMV
    println!("## GEMV y = W·x (rows × K), weights rotated over > 240 MB\n");
    println!(
        "Activations: f32 (`F32`), or quantized on the device (`Q8_0`, `Q8_1`, `Q8_K`: \
         GGML's CPU modes, integer dot products): \"µs/call\" includes the quantizer \
         launch, \"GEMV alone\" runs on activations quantized beforehand; each call waits \
         for the one before it. \"batch\": the weight copies as one `gemv_batch` over the \
         same activations (one quantizer launch per batch, included), one output each, \
         one launch after the other; \"overlap\": the same with `LaunchOptions::overlap`, \
         the calls after a batch's first starting without waiting for the call before them \
         where they are of one column over at most 64 MiB of weights; \"group\": with \
         `LaunchOptions::group` too (the defaults), up to 8 one-column calls of one kernel \
         in one launch; \"batch, group, GEMV alone\": the grouped batch on activations \
         quantized beforehand, no quantizer launch (the four batch columns taking turns).\n"
    );
    println!(
        "| shape (rows × K) | format | acts | cols | {GEMV_CELLS_HEADER}\n| --- | --- | --- | ---: | {GEMV_CELLS_RULE}"
    );
    for (m, k) in bench_shapes() {
        for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
            let ws = weight_copies(&be, dtype, m, k)?;
            let mut modes = vec![ActQuant::F32];
            if ActQuant::ggml(dtype) != ActQuant::F32 {
                modes.push(ActQuant::ggml(dtype));
            }
            for &mode in &modes {
                for n_cols in [1usize, 8] {
                    // 8 columns: every integer format in GGML's mode, Q4_0
                    // with f32 activations too.
                    if n_cols == 8
                        && (dtype == DType::F16 || (mode == ActQuant::F32 && dtype != DType::Q4_0))
                    {
                        continue;
                    }
                    let cells = gemv_timing(&be, &ws, mode, m, k, n_cols, ceiling)?;
                    println!("| {m} × {k} | {dtype} | {mode:?} | {n_cols} | {cells}");
                }
            }
            if dtype == DType::Q4_0 && DEFAULT_SHAPES.contains(&(m, k)) {
                epilogue_costs_at(&be, &ws, m, k)?;
                println!(
                    "| shape (rows × K) | format | acts | cols | {GEMV_CELLS_HEADER}\n| --- | --- | --- | ---: | {GEMV_CELLS_RULE}"
                );
            }
        }
    }
    report_host("GEMV table");
    gated_gemv(&be, ceiling)?;
    report_host("gated GEMV");
    several_columns(&be, ceiling)?;
    report_host("several columns");
    other_formats(&be, ceiling)?;
    report_host("other formats");
    if gemv_only {
        return Ok(());
    }

    // ------------------------------------------------ FWHT
    println!("\n## Signed FWHT on 64 MiB of f32 (bytes read + written)\n");
    println!(
        "| N | variant | launches | µs | GB/s (64 MiB in + 64 MiB out) | % of copy |\n| ---: | --- | ---: | ---: | ---: | ---: |"
    );
    let total = 16 << 20; // 64 MiB of f32
    let x = be.upload(&randv(total, 8))?;
    let mut out = be.alloc(total)?;
    let mut mid = be.alloc(total)?;
    for n in [1024usize, 32768] {
        let signs = be.upload(
            &randv(n, 9)
                .iter()
                .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
                .collect::<Vec<f32>>(),
        )?;
        let plain = FwhtDesc::new(n)?;
        let signed = plain.with_signs(n)?;
        let io = 2.0 * (total * 4) as f64;
        let t_plain = time_calls(&be, 10, 20, |_| be.fwht(&plain, &x, None, &mut out))?;
        let t_fused = time_calls(&be, 10, 20, |_| {
            be.fwht(&signed, &x, Some(&signs), &mut out)
        })?;
        let t_unfused = time_calls(&be, 10, 20, |_| {
            be.mul_cyclic(&x, &signs, &mut mid)?;
            be.fwht(&plain, &mid, None, &mut out)
        })?;
        for (name, launches, t) in [
            ("unsigned FWHT", 1, t_plain),
            ("signed, fused", 1, t_fused),
            ("sign multiply + FWHT", 2, t_unfused),
        ] {
            let gbs = io / t / 1e6;
            println!(
                "| {n} | {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
                t * 1e3,
                100.0 * gbs / ceiling
            );
        }
    }
    drop((x, out, mid));
    report_host("FWHT");

    // ------------------------------------------------ decode layer
    for mode in [ActQuant::F32, ActQuant::Q8_0] {
        decode_layer(&be, mode, ceiling)?;
    }
    ffn_f16(&be, ceiling)?;
    plans(&be, ceiling)
}

/// The sections that run device plans (`--plans-only` runs just these):
/// decode layers and q/k/v projections.
fn plans(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    for (dtype, mode) in [
        (DType::Q4_0, GemvMode::Ggml),
        (DType::Q4_0, GemvMode::F32),
        (DType::F16, GemvMode::F32),
    ] {
        plan_layer(be, dtype, mode, ceiling)?;
    }
    for (dtype, mode) in [(DType::Q4_0, GemvMode::Ggml), (DType::F16, GemvMode::F32)] {
        qkv_layers(be, dtype, mode, ceiling)?;
    }
    report_host("decode layers");
    Ok(())
}

/// [`epilogue_cost`] of Q4_0 weights at both default shapes, and of Q4_K
/// at 4096 × 14336 (`--epilogue-only`).
fn epilogue_costs(be: &CudaBackend) -> Result<(), CudaError> {
    for (m, k) in DEFAULT_SHAPES {
        let ws = weight_copies(be, DType::Q4_0, m, k)?;
        epilogue_costs_at(be, &ws, m, k)?;
    }
    let (m, k) = DEFAULT_SHAPES[0];
    epilogue_costs_at(be, &weight_copies(be, DType::Q4_K, m, k)?, m, k)
}

/// The epilogue's cost over the weight copies `ws` (`m × k`; Q4_0: the
/// shortest call at 4096 × 14336, where a fixed cost weighs most): every
/// mode at 4096 rows, GGML's elsewhere.
fn epilogue_costs_at(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    m: usize,
    k: usize,
) -> Result<(), CudaError> {
    for mode in [ActQuant::F32, ActQuant::ggml(ws[0].dtype())] {
        if m == 4096 || mode != ActQuant::F32 {
            epilogue_cost(be, ws, mode, m, k)?;
        }
    }
    Ok(())
}

/// The cost of the epilogue silu·mul + residual over a bare GEMV of the
/// weights `ws` (`m × k`, rotated) with activations fed per `mode`: bare,
/// fused with the operands loaded after the block's sums and when it starts
/// (`LaunchOptions::early_operands`), the latter also with the generic
/// chain instead of its fixed kernel (`LaunchOptions::fixed_epilogues`
/// off), taking turns, and unfused (3
/// element-wise launches after the GEMV); in a quantized mode also the GEMV
/// alone on activations quantized beforehand.
fn epilogue_cost(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    mode: ActQuant,
    m: usize,
    k: usize,
) -> Result<(), CudaError> {
    let x = be.upload(&randv(k, 4))?;
    let gate_like = be.upload(&randv(m, 5))?;
    let residual = be.upload(&randv(m, 6))?;
    let mut y = be.alloc(m)?;
    let epi = Epilogue::NONE
        .then_act(Activation::Silu)
        .and_then(|e| e.then_mul())
        .and_then(|e| e.then_add())?;
    let ops = [&gate_like, &residual];
    let n = ws.len();
    let q = (mode != ActQuant::F32)
        .then(|| be.quantize_acts(mode, &x, 1))
        .transpose()?;
    let saved = be.options();
    let late = LaunchOptions {
        early_operands: false,
        ..saved
    };
    let early = LaunchOptions {
        early_operands: true,
        fixed_epilogues: true,
        ..saved
    };
    let generic = LaunchOptions {
        fixed_epilogues: false,
        ..early
    };
    // Bare, fused with the operands loaded late and early (the fixed chain's
    // kernel, and the generic chain), taking turns; with `alone` the GEMV on
    // activations quantized beforehand.
    let time = |alone: bool, epi: &Epilogue, ops: &[&DeviceVec], y: &mut DeviceVec| {
        time_calls(be, n * 2, 9, |i| {
            if alone {
                be.gemv_quantized(&ws[i % n], q.as_ref().expect("quantized"), epi, ops, y)
            } else {
                be.gemv(&ws[i % n], &x, 1, mode, epi, ops, y)
            }
        })
    };
    let mut t: [Vec<f64>; 4] = Default::default();
    let mut t_alone: [Vec<f64>; 4] = Default::default();
    for _round in 0..3 {
        for (slot, o) in [(0, saved), (1, late), (2, early), (3, generic)] {
            be.set_options(o);
            let (e, ops): (&Epilogue, &[&DeviceVec]) = if slot == 0 {
                (&Epilogue::NONE, &[])
            } else {
                (&epi, &ops)
            };
            t[slot].push(time(false, e, ops, &mut y)?);
            if mode != ActQuant::F32 {
                t_alone[slot].push(time(true, e, ops, &mut y)?);
            }
        }
    }
    // Each stage alone, then pairs of them (operands early), taking turns
    // with the bare GEMV: which part of the chain costs; in a quantized
    // mode also with the GEMV alone (activations quantized beforehand). The
    // chains with kernels of their own (add, silu·mul + add) also with the
    // generic chain.
    let one: [(&str, Epilogue, Vec<&DeviceVec>, LaunchOptions); 10] = [
        ("bare", Epilogue::NONE, vec![], early),
        // The chain's control flow without arithmetic.
        (
            "identity",
            Epilogue::NONE.then_act(Activation::Identity)?,
            vec![],
            early,
        ),
        (
            "silu",
            Epilogue::NONE.then_act(Activation::Silu)?,
            vec![],
            early,
        ),
        ("mul", Epilogue::NONE.then_mul()?, vec![&gate_like], early),
        (
            "add (fixed)",
            Epilogue::NONE.then_add()?,
            vec![&residual],
            early,
        ),
        (
            "add (generic)",
            Epilogue::NONE.then_add()?,
            vec![&residual],
            generic,
        ),
        (
            "silu·mul",
            Epilogue::NONE.then_act(Activation::Silu)?.then_mul()?,
            vec![&gate_like],
            early,
        ),
        (
            "mul + add",
            Epilogue::NONE.then_mul()?.then_add()?,
            vec![&gate_like, &residual],
            early,
        ),
        ("silu·mul + add (fixed)", epi, ops.to_vec(), early),
        ("silu·mul + add (generic)", epi, ops.to_vec(), generic),
    ];
    let alone_modes: &[bool] = if mode == ActQuant::F32 {
        &[false]
    } else {
        &[false, true]
    };
    for &alone in alone_modes {
        let mut t_one: [Vec<f64>; 10] = Default::default();
        for _round in 0..3 {
            for (slot, (_, e, o, opts)) in one.iter().enumerate() {
                be.set_options(*opts);
                t_one[slot].push(time(alone, e, o, &mut y)?);
            }
        }
        let t_one = t_one.map(median);
        let stages: Vec<String> = one
            .iter()
            .zip(t_one)
            .skip(1)
            .map(|((name, _, _, _), t)| {
                format!(
                    "{name} {:.2} µs ({:+.1}%)",
                    t * 1e3,
                    100.0 * (t / t_one[0] - 1.0)
                )
            })
            .collect();
        println!(
            "Epilogue stages one at a time and in pairs ({mode:?}{}, operands early): bare {:.2} µs; {}",
            if alone { ", GEMV alone" } else { "" },
            t_one[0] * 1e3,
            stages.join(", ")
        );
    }
    be.set_options(saved);
    let [bare, late_t, early_t, generic_t] = t.map(median);
    let mut t1 = be.alloc(m)?;
    let mut t2 = be.alloc(m)?;
    let unfused = time_calls(be, n * 2, 25, |i| {
        be.gemv(&ws[i % n], &x, 1, mode, &Epilogue::NONE, &[], &mut y)?;
        be.unary(Activation::Silu, &y, &mut t1)?;
        be.mul(&t1, &gate_like, &mut t2)?;
        be.add(&t2, &residual, &mut t1)
    })?;
    let dtype = ws[0].dtype();
    let pct = |t: f64| 100.0 * (t / bare - 1.0);
    println!(
        "\nEpilogue silu·mul + residual, {dtype} {m} × {k}, {mode:?} activations, 1 column: \
         bare GEMV {:.2} µs; fused epilogue, operands loaded after the sums {:.2} µs ({:+.1}%), \
         loaded when the block starts {:.2} µs ({:+.1}%), the same with the generic chain \
         {:.2} µs ({:+.1}%); unfused (GEMV + 3 element-wise launches) {:.2} µs",
        bare * 1e3,
        late_t * 1e3,
        pct(late_t),
        early_t * 1e3,
        pct(early_t),
        generic_t * 1e3,
        pct(generic_t),
        unfused * 1e3
    );
    // Batched with overlap, and grouped (independent calls, one output
    // each; operands early), bare and fused taking turns.
    be.set_options(early);
    for (what, batching) in [("with overlap", BATCHINGS[1]), ("grouped", BATCHINGS[2])] {
        let mut t_batch: [Vec<f64>; 2] = Default::default();
        for _round in 0..3 {
            let none = &Epilogue::NONE;
            let input = BatchInput::Vector {
                x: &x,
                n_cols: 1,
                mode,
            };
            t_batch[0].push(batch_per_call(be, ws, input, batching, none, &[])?);
            t_batch[1].push(batch_per_call(be, ws, input, batching, &epi, &ops)?);
        }
        let [bare_b, fused_b] = t_batch.map(median);
        println!(
            "Batched {what} ({mode:?} activations, one quantizer per batch where quantized; \
             {n} independent calls, one output each): bare {:.2} µs/call, fused silu·mul + \
             residual {:.2} µs/call ({:+.1}%)",
            bare_b * 1e3,
            fused_b * 1e3,
            100.0 * (fused_b / bare_b - 1.0)
        );
    }
    be.set_options(saved);
    if mode != ActQuant::F32 {
        let [bare, late_t, early_t, generic_t] = t_alone.map(median);
        println!(
            "GEMV alone (activations quantized beforehand): bare {:.2} µs, fused late {:.2} µs \
             ({:+.1}%), early {:.2} µs ({:+.1}%), early with the generic chain {:.2} µs \
             ({:+.1}%)",
            bare * 1e3,
            late_t * 1e3,
            100.0 * (late_t / bare - 1.0),
            early_t * 1e3,
            100.0 * (early_t / bare - 1.0),
            generic_t * 1e3,
            100.0 * (generic_t / bare - 1.0)
        );
    }
    // As a device plan runs a chain of GEMVs (`LaunchOptions::l2_ahead`):
    // each call asking L2 for the next call's first weights as its blocks
    // start; bare and fused taking turns.
    let ahead_bytes = L2_AHEAD_DEFAULT.min(ws[0].bytes());
    let time_ahead = |alone: bool, epi: &Epilogue, ops: &[&DeviceVec], y: &mut DeviceVec| {
        time_calls(be, n * 2, 9, |i| {
            let job = GemvJob::new(&ws[i % n], y)
                .with_epilogue(epi, ops)
                .with_l2_ahead(&ws[(i + 1) % n], mode, ahead_bytes);
            match (alone, &q) {
                (true, Some(q)) => be.gemv_quantized_batch(q, &mut [job]),
                _ => be.gemv_batch(&x, 1, mode, &mut [job]),
            }
        })
    };
    for &alone in alone_modes {
        let mut t_ahead: [Vec<f64>; 2] = Default::default();
        for _round in 0..3 {
            t_ahead[0].push(time_ahead(alone, &Epilogue::NONE, &[], &mut y)?);
            t_ahead[1].push(time_ahead(alone, &epi, &ops, &mut y)?);
        }
        let [bare_a, fused_a] = t_ahead.map(median);
        println!(
            "With the L2 look-ahead ({} MiB of the next call's weights{}): bare {:.2} µs, \
             fused silu·mul + residual {:.2} µs ({:+.1}%)",
            ahead_bytes >> 20,
            if alone { ", GEMV alone" } else { "" },
            bare_a * 1e3,
            fused_a * 1e3,
            100.0 * (fused_a / bare_a - 1.0)
        );
    }
    println!();
    Ok(())
}

/// A Q4_0 decode layer (d = 4096, ff = 11008, 1 token) through the
/// `DeviceVec` entry points with activations fed per `mode`, fused (o-proj
/// with the residual, SiLU-GLU, down with the residual) against unfused
/// (the same GEMV kernels, separate element-wise launches): launches and
/// µs per layer.
fn decode_layer(be: &CudaBackend, mode: ActQuant, ceiling: f64) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    println!(
        "\n## Decode layer (d = {d}, ff = {ff}, Q4_0, {mode:?} activations, 1 token): o-proj + residual, SiLU-GLU, down + residual\n"
    );

    let dtype = DType::Q4_0;
    struct Layer {
        o: DeviceWeights,
        g: DeviceWeights,
        u: DeviceWeights,
        down: DeviceWeights,
    }
    let mk = |rows, k, seed| -> Result<DeviceWeights, CudaError> {
        let bytes = weight_bytes(dtype, rows, k, seed);
        be.upload_weights(&WeightMatrix::new(dtype, rows, k, &bytes)?)
    };
    let layers = (0..3)
        .map(|l| {
            Ok(Layer {
                o: mk(d, d, 10 + l)?,
                g: mk(ff, d, 20 + l)?,
                u: mk(ff, d, 30 + l)?,
                down: mk(d, ff, 40 + l)?,
            })
        })
        .collect::<Result<Vec<_>, CudaError>>()?;
    let layer_bytes =
        (layers[0].o.bytes() + layers[0].g.bytes() + layers[0].u.bytes() + layers[0].down.bytes())
            as f64;
    let attn = be.upload(&randv(d, 11))?;
    let resid = be.upload(&randv(d, 12))?;
    let mut h = be.alloc(d)?;
    let mut t = be.alloc(d)?;
    let mut gate = be.alloc(ff)?;
    let mut up = be.alloc(ff)?;
    let mut act = be.alloc(ff)?;
    let mut out = be.alloc(d)?;
    let add = Epilogue::NONE.then_add()?;
    let fused_layer = |l: &Layer,
                       h: &mut DeviceVec,
                       act: &mut DeviceVec,
                       out: &mut DeviceVec|
     -> Result<(), CudaError> {
        be.gemv(&l.o, &attn, 1, mode, &add, &[&resid], h)?;
        be.gemv_glu(
            &l.g,
            &l.u,
            Activation::Silu,
            h,
            1,
            mode,
            &Epilogue::NONE,
            &[],
            act,
        )?;
        be.gemv(&l.down, act, 1, mode, &add, &[h], out)
    };
    // In a quantized mode, also with the o-projection and the gated GEMV
    // writing their outputs quantized for the next GEMV
    // (`GemvJob::with_quantized_output`): one quantizer launch a layer.
    let folded = (mode != ActQuant::F32)
        .then(|| Ok::<_, CudaError>((be.alloc_acts(mode, d, 1)?, be.alloc_acts(mode, ff, 1)?)))
        .transpose()?;
    let folded_layer = |l: &Layer,
                        h: &mut DeviceVec,
                        act: &mut DeviceVec,
                        out: &mut DeviceVec,
                        (qh, qa): &mut (DeviceActs, DeviceActs)|
     -> Result<(), CudaError> {
        let resid_op = [&resid];
        let o = GemvJob::new(&l.o, h).with_epilogue(&add, &resid_op);
        be.gemv_batch(&attn, 1, mode, &mut [o.with_quantized_output(qh)])?;
        let glu = GemvJob::new(&l.g, act).with_glu(&l.u, Activation::Silu);
        be.gemv_quantized_batch(qh, &mut [glu.with_quantized_output(qa)])?;
        be.gemv_quantized(&l.down, qa, &add, &[h], out)
    };
    be.reset_launches();
    fused_layer(&layers[0], &mut h, &mut act, &mut out)?;
    let launches_fused = be.launches();
    let mut folded = folded
        .map(|mut q| -> Result<_, CudaError> {
            be.reset_launches();
            folded_layer(&layers[0], &mut h, &mut act, &mut out, &mut q)?;
            Ok((q, be.launches()))
        })
        .transpose()?;
    let mut unfused_layer = |l: &Layer| -> Result<(), CudaError> {
        be.gemv(&l.o, &attn, 1, mode, &Epilogue::NONE, &[], &mut t)?;
        be.add(&t, &resid, &mut h)?;
        be.gemv(&l.g, &h, 1, mode, &Epilogue::NONE, &[], &mut gate)?;
        be.gemv(&l.u, &h, 1, mode, &Epilogue::NONE, &[], &mut up)?;
        be.glu(Activation::Silu, &gate, &up, &mut act)?;
        be.gemv(&l.down, &act, 1, mode, &Epilogue::NONE, &[], &mut t)?;
        be.add(&t, &h, &mut out)
    };
    be.reset_launches();
    unfused_layer(&layers[0])?;
    let launches_unfused = be.launches();
    let t_unfused = time_calls(be, 6, 30, |i| unfused_layer(&layers[i % layers.len()]))?;
    let mut h2 = be.alloc(d)?;
    let mut act2 = be.alloc(ff)?;
    let mut out2 = be.alloc(d)?;
    let t_fused = time_calls(be, 6, 30, |i| {
        fused_layer(&layers[i % layers.len()], &mut h2, &mut act2, &mut out2)
    })?;
    let t_folded = match &mut folded {
        Some((q, launches)) => Some((
            *launches,
            time_calls(be, 6, 30, |i| {
                folded_layer(&layers[i % layers.len()], &mut h2, &mut act2, &mut out2, q)
            })?,
        )),
        None => None,
    };
    println!(
        "| variant | launches/layer | µs/layer | weight GB/s | % of copy |\n| --- | ---: | ---: | ---: | ---: |"
    );
    let mut rows = vec![("fused", launches_fused, t_fused)];
    if let Some((launches, tm)) = t_folded {
        rows.insert(0, ("fused, quantizers folded", launches, tm));
    }
    rows.push(("unfused", launches_unfused, t_unfused));
    for (name, launches, tm) in rows {
        let gbs = layer_bytes / tm / 1e6;
        println!(
            "| {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
            tm * 1e3,
            100.0 * gbs / ceiling
        );
    }
    print!("\n(fused/unfused time: {:.3}", t_fused / t_unfused);
    if let Some((_, tm)) = t_folded {
        print!("; with the quantizers folded: {:.3}", tm / t_unfused);
    }
    println!(")");
    Ok(())
}

/// A decode layer as a core graph (`h += W_o · attn(h)`, then `h += W_d ·
/// (silu(W_g·h) ⊙ (W_u·h))`, the residual stream updated in place; weights
/// in buffer 0, activations in buffer 1, `attn` an opaque copy), its
/// memory, and the weight bytes.
fn layer_graph(dtype: DType, d: usize, ff: usize) -> Result<(Graph, Memory, usize), CudaError> {
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let mut wnext = 0;
    let mut weight = |g: &mut Graph, k: usize, m: usize, seed: u64| -> Result<_, CudaError> {
        let t = TensorDesc::contiguous(dtype, [k, m, 1, 1], BufferId(0), wnext)?;
        wnext += (dtype.row_bytes(k)? * m).next_multiple_of(256);
        inits.push((t, weight_bytes(dtype, m, k, seed)));
        Ok(g.input(t)?)
    };
    let w_o = weight(&mut g, d, d, 80)?;
    let w_g = weight(&mut g, d, ff, 81)?;
    let w_u = weight(&mut g, d, ff, 82)?;
    let w_d = weight(&mut g, ff, d, 83)?;
    let mut anext = 4 * d;
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).next_multiple_of(256);
        p
    };
    let res = Place::at(1, 0);
    let h = TensorDesc::contiguous(DType::F32, [d, 1, 1, 1], BufferId(1), 0)?;
    let hv: Vec<u8> = randv(d, 84).iter().flat_map(|v| v.to_le_bytes()).collect();
    inits.push((h, hv));
    let h = g.input(h)?;
    let attn = g.other("attention", &[h], [d, 1, 1, 1], act(d))?;
    let o = g.mul_mat(w_o, attn, act(d))?;
    let h1 = g.add(o, h, res)?;
    let gate = g.mul_mat(w_g, h1, act(ff))?;
    let up = g.mul_mat(w_u, h1, act(ff))?;
    let a = g.glu(Activation::Silu, gate, up, act(ff))?;
    let down = g.mul_mat(w_d, a, act(d))?;
    let h2 = g.add(down, h1, res)?;
    g.mark_output(h2)?;
    let mut mem = Memory::new(&[wnext, anext]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    Ok((g, mem, wnext))
}

/// The decode layer through the device plan (`fused_cuda::DevicePlan`),
/// fused and unfused, each run as launches enqueued on the stream and as a
/// CUDA graph replay: µs per layer (median of 50 event-timed runs, the
/// residual stream restored before each, outside the timing) and launches.
fn plan_layer(
    be: &CudaBackend,
    dtype: DType,
    mode: GemvMode,
    ceiling: f64,
) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    let acts = mode.act_quant(dtype);
    println!(
        "\n## Decode layer through the device plan ({dtype}, {acts:?} activations, d = {d}, ff = {ff}, 1 token): stream vs CUDA graph\n"
    );
    let (g, mem, weight_bytes) = layer_graph(dtype, d, ff)?;
    let sizes: Vec<usize> = (0u32..2)
        .map(|b| mem.buffer(BufferId(b)).map(<[u8]>::len))
        .collect::<Result<_, _>>()?;
    println!(
        "| plan | launches/layer | stream µs | graph µs | graph/stream | weight GB/s (best) | % of copy |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut best = [0.0f64; 7];
    let saved = be.options();
    // The fused plan also with LaunchOptions::fold_quantizers (no
    // quantizer launch where a GEMV produced the input); the unfused plan also
    // with LaunchOptions::overlap (its up GEMV, on the gate GEMV's input,
    // starts without waiting for the gate GEMV) and LaunchOptions::group
    // (the two GEMVs in one launch).
    let batched = |(overlap, group)| LaunchOptions {
        overlap,
        group,
        ..saved
    };
    let folded = LaunchOptions {
        fold_quantizers: true,
        ..saved
    };
    // Both plans also without LaunchOptions::l2_ahead (each integer GEMV
    // asking L2 for the next GEMV's first weights).
    let no_ahead = |o: LaunchOptions| LaunchOptions { l2_ahead: 0, ..o };
    let rows = [
        ("fused", plan(&g), saved),
        ("fused, quantizers folded", plan(&g), folded),
        ("unfused", Plan::unfused(&g), batched(BATCHINGS[0])),
        ("unfused, overlap", Plan::unfused(&g), batched(BATCHINGS[1])),
        ("unfused, group", Plan::unfused(&g), batched(BATCHINGS[2])),
        ("fused, no L2 look-ahead", plan(&g), no_ahead(saved)),
        (
            "unfused, no L2 look-ahead",
            Plan::unfused(&g),
            no_ahead(batched(BATCHINGS[0])),
        ),
    ];
    for (i, (name, p, options)) in rows.into_iter().enumerate() {
        be.set_options(options);
        let mut dp = DevicePlan::new(be, &g, &p, mode, &sizes)?;
        dp.upload(&mem)?;
        dp.capture_graph()?;
        let (stream, graph) = (
            plan_ms(be, &dp, 50, Submission::Stream)?,
            plan_ms(be, &dp, 50, Submission::Graph)?,
        );
        be.set_options(saved);
        best[i] = stream.min(graph);
        let gbs = weight_bytes as f64 / best[i] / 1e6;
        println!(
            "| {name} | {} ({} quantizers, {} folded) | {:.1} | {:.1} | {:.3} | {gbs:.0} | {:.0}% |",
            dp.stats().enqueued(),
            dp.stats().quantizations,
            dp.stats().folded_quantizations,
            stream * 1e3,
            graph * 1e3,
            graph / stream,
            100.0 * gbs / ceiling
        );
    }
    println!(
        "\n(fused/unfused, best of stream and graph: {:.3}; against the unfused plan with \
         overlap: {:.3}, with overlap and group: {:.3}; the fused plan with folded \
         quantizers against the unfused: {:.3}; L2 look-ahead on / off, fused: {:.3}, \
         unfused: {:.3})",
        best[0] / best[2],
        best[0] / best[3],
        best[0] / best[4],
        best[1] / best[2],
        best[0] / best[5],
        best[2] / best[6]
    );
    Ok(())
}

/// Attention input projections of a stack of decode layers through the
/// device plan: per layer q = W_q·h, k = W_k·h, v = W_v·h (d = 4096, GQA
/// kv = 1024), then an opaque attention node (a device copy of q) that
/// feeds the next layer; 8 layers, so the weights exceed L2. In a quantized
/// mode h is quantized once per layer for the three GEMVs. Timed without
/// and with `LaunchOptions::overlap` (k and v start without waiting for
/// the GEMV before them), and with `LaunchOptions::group` too (the three
/// in one launch), the plans taking turns: µs per layer.
fn qkv_layers(
    be: &CudaBackend,
    dtype: DType,
    mode: GemvMode,
    ceiling: f64,
) -> Result<(), CudaError> {
    let (d, kv, layers) = (4096usize, 1024usize, 8usize);
    let acts = mode.act_quant(dtype);
    println!(
        "\n## Attention input projections through the device plan ({dtype}, {acts:?} activations, \
         d = {d}, kv = {kv}, {layers} layers): without and with overlap, and grouped\n"
    );
    let mut g = Graph::new();
    let mut inits: Vec<(TensorDesc, Vec<u8>)> = Vec::new();
    let (mut wnext, mut anext) = (0usize, 0usize);
    let mut act = |n: usize| {
        let p = Place::at(1, anext);
        anext += (4 * n).next_multiple_of(256);
        p
    };
    let h0 = TensorDesc::contiguous(DType::F32, [d, 1, 1, 1], BufferId(1), act(d).offset)?;
    inits.push((
        h0,
        randv(d, 90).iter().flat_map(|v| v.to_le_bytes()).collect(),
    ));
    let mut h = g.input(h0)?;
    for l in 0..layers as u64 {
        let mut proj = |g: &mut Graph, m: usize, seed: u64| -> Result<_, CudaError> {
            let t = TensorDesc::contiguous(dtype, [d, m, 1, 1], BufferId(0), wnext)?;
            wnext += (dtype.row_bytes(d)? * m).next_multiple_of(256);
            inits.push((t, weight_bytes(dtype, m, d, seed)));
            let w = g.input(t)?;
            Ok(g.mul_mat(w, h, act(m))?)
        };
        let q = proj(&mut g, d, 100 + 3 * l)?;
        let k = proj(&mut g, kv, 101 + 3 * l)?;
        let v = proj(&mut g, kv, 102 + 3 * l)?;
        h = g.other("attention", &[q, k, v], [d, 1, 1, 1], act(d))?;
    }
    g.mark_output(h)?;
    let mut mem = Memory::new(&[wnext, anext]);
    for (t, bytes) in &inits {
        mem.write_rows(t, bytes)?;
    }
    let sizes = [wnext, anext];
    let p = plan(&g);
    let saved = be.options();
    let mut dps = Vec::new();
    for (overlap, group) in BATCHINGS {
        be.set_options(LaunchOptions {
            overlap,
            group,
            ..saved
        });
        let mut dp = DevicePlan::new(be, &g, &p, mode, &sizes)?;
        dp.upload(&mem)?;
        dp.capture_graph()?;
        dps.push(dp);
    }
    // Rounds taking turns; the options as each plan was captured with.
    let mut t: [[Vec<f64>; 2]; 3] = Default::default();
    for _round in 0..3 {
        for (i, dp) in dps.iter().enumerate() {
            let (overlap, group) = BATCHINGS[i];
            be.set_options(LaunchOptions {
                overlap,
                group,
                ..saved
            });
            for (j, how) in [Submission::Stream, Submission::Graph]
                .into_iter()
                .enumerate()
            {
                t[i][j].push(plan_ms(be, dp, 20, how)?);
            }
        }
    }
    be.set_options(saved);
    println!(
        "| overlap | group | launches/run | quantizers | stream µs/layer | graph µs/layer | weight GB/s (best) | % of copy |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let mut best = [0.0f64; 3];
    let on = |b: bool| if b { "on" } else { "off" };
    for (i, dp) in dps.iter().enumerate() {
        let [stream, graph] = t[i].clone().map(median);
        best[i] = stream.min(graph);
        let gbs = wnext as f64 / best[i] / 1e6;
        let (overlap, group) = BATCHINGS[i];
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {gbs:.0} | {:.0}% |",
            on(overlap),
            on(group),
            dp.stats().enqueued(),
            dp.stats().quantizations,
            stream * 1e3 / layers as f64,
            graph * 1e3 / layers as f64,
            100.0 * gbs / ceiling
        );
    }
    println!(
        "\n(against neither, best of stream and graph: with overlap {:.3}, with overlap and \
         group {:.3})",
        best[1] / best[0],
        best[2] / best[0]
    );
    Ok(())
}

/// The F16 FFN decode layer that `fused-cuda/benches/torch_compare.py`
/// measures in PyTorch: `down · (silu(gate·h) ⊙ (up·h)) + h`, d = 4096,
/// ff = 11008, one token, layers rotated over > 240 MB; µs per layer.
fn ffn_f16(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let (d, ff) = (4096usize, 11008usize);
    println!(
        "\n## F16 FFN decode layer (d = {d}, ff = {ff}, 1 token): down·(silu(gate·h) ⊙ up·h) + h\n"
    );
    let mk = |rows, k, seed| -> Result<DeviceWeights, CudaError> {
        let bytes = weight_bytes(DType::F16, rows, k, seed);
        be.upload_weights(&WeightMatrix::new(DType::F16, rows, k, &bytes)?)
    };
    let layer_bytes = 3 * d * ff * 2;
    let n = ROTATE_BYTES.div_ceil(layer_bytes).max(2);
    let layers = (0..n as u64)
        .map(|l| Ok([mk(ff, d, 50 + l)?, mk(ff, d, 60 + l)?, mk(d, ff, 70 + l)?]))
        .collect::<Result<Vec<_>, CudaError>>()?;
    let h = be.upload(&randv(d, 13))?;
    let (mut gate, mut up, mut act) = (be.alloc(ff)?, be.alloc(ff)?, be.alloc(ff)?);
    let (mut t, mut out) = (be.alloc(d)?, be.alloc(d)?);
    let add = Epilogue::NONE.then_add()?;
    let t_fused = time_calls(be, 2 * n, 30, |i| {
        let [g, u, down] = &layers[i % n];
        be.gemv_glu(
            g,
            u,
            Activation::Silu,
            &h,
            1,
            ActQuant::F32,
            &Epilogue::NONE,
            &[],
            &mut act,
        )?;
        be.gemv(down, &act, 1, ActQuant::F32, &add, &[&h], &mut out)
    })?;
    let t_unfused = time_calls(be, 2 * n, 30, |i| {
        let [g, u, down] = &layers[i % n];
        be.gemv(g, &h, 1, ActQuant::F32, &Epilogue::NONE, &[], &mut gate)?;
        be.gemv(u, &h, 1, ActQuant::F32, &Epilogue::NONE, &[], &mut up)?;
        be.glu(Activation::Silu, &gate, &up, &mut act)?;
        be.gemv(down, &act, 1, ActQuant::F32, &Epilogue::NONE, &[], &mut t)?;
        be.add(&t, &h, &mut out)
    })?;
    println!(
        "| variant | launches/layer | µs/layer | weight GB/s | % of copy |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for (name, launches, tm) in [("fused", 2, t_fused), ("unfused", 5, t_unfused)] {
        let gbs = layer_bytes as f64 / tm / 1e6;
        println!(
            "| {name} | {launches} | {:.1} | {gbs:.0} | {:.0}% |",
            tm * 1e3,
            100.0 * gbs / ceiling
        );
    }
    println!("\n({n} layer copies; PyTorch: fused-cuda/benches/torch_compare.py)");
    Ok(())
}

/// GEMV time per launch option (`LaunchOptions`: normal launches or
/// programmatic dependent launch), the options taking turns in 3 rounds
/// (median of the rounds' medians), at both target shapes: f32
/// activations, the quantized mode with its quantizer, and the GEMV alone.
/// The launch-shape knobs of `src/launch.rs` (A/B runs only).
/// The two GEMV shapes (rows × K).
const DEFAULT_SHAPES: [(usize, usize); 2] = [(4096, 14336), (32768, 8192)];

/// The GEMV shapes (rows × K) of the launch-option and GEMV tables:
/// 4096 × 14336 and 32768 × 8192, or those that `FUSED_BENCH_SHAPES` lists
/// (`ROWSxK,…`, e.g. `3584x16384,4096x14336`; each K a multiple of 256).
fn bench_shapes() -> Vec<(usize, usize)> {
    let default = DEFAULT_SHAPES.to_vec();
    let Ok(list) = std::env::var("FUSED_BENCH_SHAPES") else {
        return default;
    };
    let parsed: Option<Vec<(usize, usize)>> = list
        .split(',')
        .map(|s| {
            let (m, k) = s.trim().split_once('x')?;
            let (m, k) = (m.parse().ok()?, k.parse().ok()?);
            (m > 0 && k > 0 && k % 256 == 0).then_some((m, k))
        })
        .collect();
    parsed.unwrap_or_else(|| {
        eprintln!("FUSED_BENCH_SHAPES={list:?}: not ROWSxK,… with K a multiple of 256; defaults");
        default
    })
}

const Q_ROWS: &str = "FUSED_CUDA_Q_ROWS";
const Q_UNROLL: &str = "FUSED_CUDA_Q_UNROLL";
const F_SHAPE: &str = "FUSED_CUDA_F16_SHAPE";

/// Knob settings: (environment variable, value).
type Knobs<'a> = &'a [(&'a str, &'a str)];

/// The knobs' values when the bench started (an A/B run may set them for
/// the whole bench).
static STARTING_KNOBS: std::sync::OnceLock<Vec<(&str, Option<String>)>> =
    std::sync::OnceLock::new();

/// Sets exactly the knobs `knobs`, the others back to their values when
/// the bench started.
fn set_knobs(knobs: Knobs) {
    let start = STARTING_KNOBS.get_or_init(|| {
        [Q_ROWS, Q_UNROLL, F_SHAPE]
            .map(|name| (name, std::env::var(name).ok()))
            .to_vec()
    });
    // SAFETY: the bench runs on one thread; nothing reads the environment
    // concurrently.
    unsafe {
        for (name, value) in start {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
        for (name, value) in knobs {
            std::env::set_var(name, value);
        }
    }
}

/// The fixed cost of one dependent GEMV call: GEMVs so small that their
/// bytes take no time (one copy of the weights, resident in L2), called
/// back to back on the stream, each depending on the one before (as in a
/// decode step), with programmatic dependent launch and without; in GGML's
/// mode with the quantizer launch and without it (activations quantized
/// beforehand). A call that moves `b` bytes cannot take less than
/// `b / bandwidth` plus the part of this floor that its first weight loads
/// (requested before the dependency wait) do not hide.
fn per_call_floor(be: &CudaBackend) -> Result<(), CudaError> {
    let saved = be.options();
    println!("## Per-call floor: tiny dependent GEMVs (weights in L2, 1 column)\n");
    println!(
        "Calls enqueued one by one from the host (PDL and normal launches; in GGML's mode also \
         the GEMV alone on activations quantized beforehand), and a chain of {CHAIN} dependent \
         GEMVs (each reading the one before's output) through the device plan, replayed as a \
         CUDA graph: the device's own floor, without the host's enqueueing.\n"
    );
    println!(
        "| format | acts | rows × K | weight bytes | µs/call, PDL | µs/call, normal launches | \
         GEMV alone, PDL | graph chain µs/GEMV |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
        for (m, k) in [(4usize, 256usize), (256, 256), (64, 1024)] {
            let bytes = weight_bytes(dtype, m, k, 5);
            let w = be.upload_weights(&WeightMatrix::new(dtype, m, k, &bytes)?)?;
            let x = be.upload(&randv(k, 3))?;
            let mut y = be.alloc(m)?;
            let mode = ActQuant::ggml(dtype);
            let mut per_call = |pdl: bool| {
                be.set_options(LaunchOptions { pdl, ..saved });
                time_calls(be, 200, 15, |_| {
                    be.gemv(&w, &x, 1, mode, &Epilogue::NONE, &[], &mut y)
                })
            };
            let (t_pdl, t_normal) = (per_call(true)?, per_call(false)?);
            be.set_options(LaunchOptions { pdl: true, ..saved });
            let alone = if mode == ActQuant::F32 {
                String::new()
            } else {
                let q = be.quantize_acts(mode, &x, 1)?;
                let t = time_calls(be, 200, 15, |_| {
                    be.gemv_quantized(&w, &q, &Epilogue::NONE, &[], &mut y)
                })?;
                format!("{:.2}", t * 1e3)
            };
            let chain = if m == k {
                format!("{:.2}", chain_floor(be, dtype, k)? * 1e3)
            } else {
                String::new()
            };
            println!(
                "| {dtype} | {mode:?} | {m} × {k} | {} | {:.2} | {:.2} | {alone} | {chain} |",
                bytes.len(),
                t_pdl * 1e3,
                t_normal * 1e3
            );
        }
    }
    be.set_options(saved);
    println!();
    Ok(())
}

/// Kernels in each timed handoff chain.
const HANDOFF_KERNELS: usize = 256;

/// The handoff table: chains of tiny kernels, each block reading 128
/// elements all over the vector the kernel before wrote, for each way of
/// waiting (`fused_cuda::Handoff`), at 132, 264, 528 and 1056 blocks (1 to
/// 8 an SM of the H200, whose 132 SMs the sizes are fixed to); the kinds
/// take turns, 7 rounds, median µs a kernel. Ordered chains are checked
/// against the host.
fn handoff(be: &CudaBackend) -> Result<(), CudaError> {
    let dev = be.device();
    println!("## Handoff: how soon a kernel starts on the previous kernel's results\n");
    println!(
        "Chains of {HANDOFF_KERNELS} tiny kernels (128 threads a block, each block reading 128 \
         elements spread over the whole vector the kernel before wrote, one a thread, and \
         writing one element), behind a head start; \
         the kinds take turns, 7 rounds, median device µs a kernel. \"counter polled\": each \
         block of a kernel raises a counter after its write (release), one thread a block of the \
         next polls it (acquire) instead of griddepcontrol.wait.\n"
    );
    let sms = 132; // the H200's SMs: the sizes stay the same on any device
    let sizes = [sms, 2 * sms, 4 * sms, 8 * sms];
    print!("| handoff |");
    for b in sizes {
        print!(" {b} blocks µs/kernel |");
    }
    println!(" results |\n| --- |{} --- |", " ---: |".repeat(sizes.len()));
    let mut times = vec![vec![Vec::new(); sizes.len()]; fused_cuda::Handoff::ALL.len()];
    let mut checked = vec![true; fused_cuda::Handoff::ALL.len()];
    let inputs: Vec<Vec<u32>> = sizes
        .iter()
        .map(|&b| {
            (0..b as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect()
        })
        .collect();
    let wants: Vec<Vec<u32>> = inputs
        .iter()
        .map(|x| fused_cuda::handoff_expected(x, HANDOFF_KERNELS))
        .collect();
    for _round in 0..7 {
        for (h, &handoff) in fused_cuda::Handoff::ALL.iter().enumerate() {
            for (s, input) in inputs.iter().enumerate() {
                // 10M SM clocks (~5 ms at 1.98 GHz): the host enqueues the
                // chain's launches well within it.
                let run = dev.handoff_chain(handoff, HANDOFF_KERNELS, input, 10_000_000)?;
                times[h][s].push(run.micros_per_kernel);
                checked[h] &= !handoff.ordered() || run.result == wants[s];
            }
        }
    }
    for (h, &handoff) in fused_cuda::Handoff::ALL.iter().enumerate() {
        print!("| {} |", handoff.name());
        for t in &times[h] {
            print!(" {:.2} |", median(t.clone()));
        }
        let verdict = if !handoff.ordered() {
            "undefined (not checked)"
        } else if checked[h] {
            "equal the host's"
        } else {
            "WRONG"
        };
        println!(" {verdict} |");
    }
    println!();
    if checked.iter().all(|&c| c) {
        Ok(())
    } else {
        Err(CudaError::Driver {
            what: "handoff chain",
            message: "a chain's result differs from the host's".into(),
        })
    }
}

/// GEMVs in the chain of [`chain_floor`].
const CHAIN: usize = 64;

/// Milliseconds per GEMV of a chain of [`CHAIN`] dependent `d × d` GEMVs
/// in `dtype` (GGML's activation mode: with the quantizer where the format
/// has one), each reading the output of the one before, through the
/// device plan replayed as a CUDA graph (median of 30 replays).
fn chain_floor(be: &CudaBackend, dtype: DType, d: usize) -> Result<f64, CudaError> {
    let mut g = Graph::new();
    let wt = TensorDesc::contiguous(dtype, [d, d, 1, 1], BufferId(0), 0)?;
    let w = g.input(wt)?;
    let xt = TensorDesc::contiguous(DType::F32, [d, 1, 1, 1], BufferId(1), 0)?;
    let mut x = g.input(xt)?;
    let stride = (4 * d).next_multiple_of(256);
    for i in 1..=CHAIN {
        x = g.mul_mat(w, x, Place::at(1, i * stride))?;
    }
    g.mark_output(x)?;
    let wbytes = weight_bytes(dtype, d, d, 90);
    let mut mem = Memory::new(&[wbytes.len(), (CHAIN + 1) * stride]);
    mem.write_rows(&wt, &wbytes)?;
    let xv: Vec<u8> = randv(d, 91).iter().flat_map(|v| v.to_le_bytes()).collect();
    mem.write_rows(&xt, &xv)?;
    let sizes = [wbytes.len(), (CHAIN + 1) * stride];
    let mut dp = DevicePlan::new(be, &g, &Plan::unfused(&g), GemvMode::Ggml, &sizes)?;
    dp.upload(&mem)?;
    dp.capture_graph()?;
    Ok(plan_ms(be, &dp, 30, Submission::Graph)? / CHAIN as f64)
}

fn launch_options(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let saved = be.options();
    let pdl = LaunchOptions { pdl: true, ..saved };
    let normal = LaunchOptions {
        pdl: false,
        ..saved
    };
    // (label, options, the shape knobs it sets: the 1-column integer
    // kernels' rows per block and units in flight per lane, the F16
    // kernel's rows per block; none for the defaults).
    let variants: [(&str, LaunchOptions, Knobs); 9] = [
        ("normal", normal, &[]),
        ("PDL", pdl, &[]),
        (
            "PDL, int. R = 1, U = 1",
            pdl,
            &[(Q_ROWS, "1"), (Q_UNROLL, "1")],
        ),
        (
            "PDL, int. R = 2, U = 1",
            pdl,
            &[(Q_ROWS, "2"), (Q_UNROLL, "1")],
        ),
        (
            "PDL, int. R = 4, U = 1",
            pdl,
            &[(Q_ROWS, "4"), (Q_UNROLL, "1")],
        ),
        (
            "PDL, int. R = 2, U = 2",
            pdl,
            &[(Q_ROWS, "2"), (Q_UNROLL, "2")],
        ),
        ("PDL, F16 U = 4", pdl, &[(F_SHAPE, "u4")]),
        ("PDL, F16 U = 8", pdl, &[(F_SHAPE, "u8")]),
        ("PDL, F16 U = 16", pdl, &[(F_SHAPE, "u16")]),
    ];
    println!(
        "## Launch options: GEMV % of copy (1 column, weights rotated; µs/call in brackets)\n"
    );
    println!(
        "Kernels launched normally, and with programmatic dependent launch (PDL: a kernel's \
         blocks start as the previous kernel's blocks retire, then wait for its results); \
         with PDL also the integer kernels' rows per block R and units in flight per lane U \
         (defaults R / U: Q8_0 2 / 1, Q4_0 4 / 1, Q4_K 2 / 1, from 16384 rows 4 / 1), and the \
         F16 kernel's units of 8 weights in flight per lane U (default: those that cover a \
         lane's row, up to 16: 16 at K = 14336, 8 at K = 8192). Options take turns, 3 rounds.\n"
    );
    print_variant_header(&variants.map(|v| v.0));
    each_one_column(be, |m, k, dtype, c, x, y| {
        let OneColumn { ws, moved, mode, q } = c;
        let (n, mode) = (ws.len(), *mode);
        // (label, call): f32 acts; the quantized mode; the GEMV alone.
        let mut rows: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
        let labels = [
            Some("F32".to_owned()),
            q.as_ref().map(|_| format!("{mode:?}")),
            q.as_ref().map(|_| format!("{mode:?}, GEMV alone")),
        ];
        for (which, label) in labels.iter().enumerate() {
            let Some(label) = label else { continue };
            let mut per_variant = vec![Vec::new(); variants.len()];
            for _round in 0..3 {
                for (vi, (_, o, knobs)) in variants.iter().enumerate() {
                    be.set_options(*o);
                    set_knobs(knobs);
                    let t = time_calls(be, n * 2, 9, |i| match which {
                        0 => be.gemv(
                            &ws[i % n],
                            x,
                            1,
                            ActQuant::F32,
                            &Epilogue::NONE,
                            &[],
                            &mut *y,
                        ),
                        1 => be.gemv(&ws[i % n], x, 1, mode, &Epilogue::NONE, &[], &mut *y),
                        _ => be.gemv_quantized(
                            &ws[i % n],
                            q.as_ref().expect("quantized"),
                            &Epilogue::NONE,
                            &[],
                            &mut *y,
                        ),
                    })?;
                    per_variant[vi].push(t);
                }
            }
            rows.push((label.clone(), per_variant));
        }
        for (label, per_variant) in rows {
            let cells = variant_cells(per_variant, *moved, ceiling, 0);
            println!("| {m} × {k} | {dtype} | {label} | {cells} |");
        }
        Ok(())
    })?;
    be.set_options(saved);
    set_knobs(&[]);
    println!("\nDefault options: {saved:?}\n");
    Ok(())
}

/// The L2 look-ahead variants [`l2_ahead`] times: (label, bytes asked for,
/// when); the first asks for none.
const AHEAD_VARIANTS: [(&str, usize, AheadAt); 7] = [
    ("none", 0, AheadAt::End),
    ("start 2 MiB", 2 << 20, AheadAt::Start),
    ("start 3 MiB", 3 << 20, AheadAt::Start),
    ("start 4 MiB", 4 << 20, AheadAt::Start),
    ("start 6 MiB", 6 << 20, AheadAt::Start),
    ("end 3 MiB", 3 << 20, AheadAt::End),
    ("end 4 MiB", 4 << 20, AheadAt::End),
];

/// One-column GEMVs, each call asking L2 for the first bytes of the next
/// call's weights (`GemvJob::with_l2_ahead`, [`AHEAD_VARIANTS`]), in a chain
/// of dependent calls over rotated weight copies: F16 on f32 activations,
/// the integer formats in GGML's mode with the quantizer launch and alone.
fn l2_ahead(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    println!(
        "## The next call's weights asked of L2: GEMV % of copy (1 column; µs/call in brackets)\n"
    );
    println!(
        "Each call asks L2 for the first bytes of the next call's weights (the next weight \
         copy), each block its share: at its end (once its own weights have arrived) or at \
         its start. Variants take turns, 3 rounds; bytes counted as in the GEMV table.\n"
    );
    print_variant_header(&AHEAD_VARIANTS.map(|v| v.0));
    each_one_column(be, |m, k, dtype, c, x, y| {
        let OneColumn { ws, moved, mode, q } = c;
        let (n, mode) = (ws.len(), *mode);
        let labels = match &q {
            None => vec![format!("{mode:?}")],
            Some(_) => vec![format!("{mode:?}"), format!("{mode:?}, GEMV alone")],
        };
        for (which, label) in labels.iter().enumerate() {
            let mut per_variant = vec![Vec::new(); AHEAD_VARIANTS.len()];
            for _round in 0..3 {
                for (vi, &(_, bytes, at)) in AHEAD_VARIANTS.iter().enumerate() {
                    let t = time_calls(be, n * 2, 9, |i| {
                        let mut job = GemvJob::new(&ws[i % n], &mut *y);
                        if bytes != 0 {
                            let next = &ws[(i + 1) % n];
                            let bytes = bytes.min(next.bytes());
                            job = job.with_l2_ahead(next, mode, bytes);
                            if let Some(h) = &mut job.l2_ahead {
                                h.at = at;
                            }
                        }
                        match (which, &q) {
                            (1, Some(q)) => be.gemv_quantized_batch(q, &mut [job]),
                            _ => be.gemv_batch(x, 1, mode, &mut [job]),
                        }
                    })?;
                    per_variant[vi].push(t);
                }
            }
            let cells = variant_cells(per_variant, *moved, ceiling, 1);
            println!("| {m} × {k} | {dtype} | {label} | {cells} |");
        }
        Ok(())
    })?;
    println!();
    Ok(())
}

/// Calls `f(m, k, dtype, inputs, x, y)` for every bench shape and F16,
/// Q8_0, Q4_0 and Q4_K: the inputs of a one-column table row ([`one_column`]),
/// the activations `x` and an output `y`.
fn each_one_column(
    be: &CudaBackend,
    mut f: impl FnMut(
        usize,
        usize,
        DType,
        &OneColumn,
        &DeviceVec,
        &mut DeviceVec,
    ) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    for (m, k) in bench_shapes() {
        let x = be.upload(&randv(k, 3))?;
        let mut y = be.alloc(m)?;
        for dtype in [DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K] {
            f(m, k, dtype, &one_column(be, dtype, m, k, &x)?, &x, &mut y)?;
        }
    }
    Ok(())
}

/// Where a chain of dependent one-column integer GEMVs spends its time
/// ([`CudaBackend::trace_gemv_chain`]): Q4_0 with and without teams a block
/// and Q4_K (2 rows a block; shapes below 16384 rows), on activations
/// quantized beforehand, over the rotating weight copies.
fn timeline(be: &CudaBackend) -> Result<(), CudaError> {
    println!(
        "## Timeline of dependent one-column GEMVs (traced kernels, ns of the global timer)\n"
    );
    println!(
        "Chains of twice as many dependent calls as weight copies, 5 chains; each \
         column the median over every call after a chain's first. release / last release: \
         from the previous call's last store to this call's first / last block past its \
         dependency wait; early: blocks started before that store; start spread: first to \
         last block start; tail: median block store to the last; stream: the median block's \
         release to its sums; period: last store to last store. µs/call: the same chain \
         untraced (as the GEMV tables time it). \"L2 look-ahead\": each call asks L2 for \
         the next call's first 4 MiB as its blocks start.\n"
    );
    println!(
        "| shape | format | kernel | blocks | period | release | last release | early | start spread | tail | stream | timer step | µs/call untraced |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let saved = be.options();
    for (m, k) in bench_shapes() {
        let x = be.upload(&randv(k, 3))?;
        let mut y = be.alloc(m)?;
        for dtype in [DType::Q4_0, DType::Q4_K] {
            if dtype == DType::Q4_K && m >= 16384 {
                continue; // 4 rows a block there: no traced copy
            }
            let c = one_column(be, dtype, m, k, &x)?;
            let q = c.q.as_ref().expect("an integer format");
            let n = c.ws.len();
            let chain: Vec<&DeviceWeights> = (0..2 * n).map(|i| &c.ws[i % n]).collect();
            let teams = if dtype == DType::Q4_0 {
                &[false, true][..]
            } else {
                &[false][..]
            };
            let variants = teams
                .iter()
                .flat_map(|&t| [(t, 0), (t, L2_AHEAD_DEFAULT.min(c.ws[0].bytes()))]);
            for (t, ahead) in variants {
                be.set_options(LaunchOptions { teams: t, ..saved });
                let mut calls = Vec::new();
                let mut step = u64::MAX;
                let mut blocks = 0;
                for _ in 0..5 {
                    let tl = be.trace_gemv_chain(&chain, q, ahead, &mut y)?;
                    if !tl.is_ordered() {
                        return Err(CudaError::Driver {
                            what: "trace a GEMV chain",
                            message: "a block's times out of order, or released before the call \
                                      before it stored"
                                .into(),
                        });
                    }
                    blocks = tl.calls[0].len();
                    step = step.min(tl.timer_step());
                    calls.extend(tl.handoffs());
                }
                let med = |f: fn(&fused_cuda::CallHandoff) -> u64| {
                    median(calls.iter().map(|h| f(h) as f64).collect())
                };
                let untraced = time_calls(be, 2 * n, 9, |i| {
                    let next = &c.ws[(i + 1) % n];
                    let mut job = GemvJob::new(&c.ws[i % n], &mut y);
                    if ahead != 0 {
                        job = job.with_l2_ahead(next, c.mode, ahead);
                    }
                    be.gemv_quantized_batch(q, &mut [job])
                })?;
                println!(
                    "| {m} × {k} | {dtype} | {}{} | {blocks} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {step} | {:.2} |",
                    if t { "3 teams a block" } else { "plain" },
                    if ahead != 0 {
                        ", L2 look-ahead 4 MiB"
                    } else {
                        ""
                    },
                    med(|h| h.period),
                    med(|h| h.release),
                    med(|h| h.last_release),
                    med(|h| h.early_blocks as u64),
                    med(|h| h.start_spread),
                    med(|h| h.tail),
                    med(|h| h.median_stream),
                    untraced * 1e3
                );
            }
        }
    }
    be.set_options(saved);
    println!();
    Ok(())
}

/// What the tables of one-column GEMV variants time at one shape and
/// format ([`one_column`]).
struct OneColumn {
    /// Weight copies, rotated.
    ws: Vec<DeviceWeights>,
    /// Bytes a call moves: weights, x and y.
    moved: f64,
    /// GGML's activation mode for the format.
    mode: ActQuant,
    /// `x` quantized in `mode` (none for F32).
    q: Option<DeviceActs>,
}

/// [`OneColumn`] for `dtype` at `m × k` over the activations `x`.
fn one_column(
    be: &CudaBackend,
    dtype: DType,
    m: usize,
    k: usize,
    x: &DeviceVec,
) -> Result<OneColumn, CudaError> {
    let ws = weight_copies(be, dtype, m, k)?;
    let moved = (ws[0].bytes() + 4 * (k + m)) as f64;
    let mode = ActQuant::ggml(dtype);
    let q = (mode != ActQuant::F32)
        .then(|| be.quantize_acts(mode, x, 1))
        .transpose()?;
    Ok(OneColumn { ws, moved, mode, q })
}

/// The header of a table of variants by shape, format and activations.
fn print_variant_header(names: &[&str]) {
    println!("| shape | format | acts | {} |", names.join(" | "));
    println!("| --- | --- | --- |{}", " ---: |".repeat(names.len()));
}

/// One row's cells: per variant, % of `ceiling` for `moved` bytes at the
/// median of its times and the median µs, with `digits` decimals (one more
/// for the µs).
fn variant_cells(per_variant: Vec<Vec<f64>>, moved: f64, ceiling: f64, digits: usize) -> String {
    per_variant
        .into_iter()
        .map(|ts| {
            let t = median(ts);
            let pct = 100.0 * moved / t / 1e6 / ceiling;
            format!("{pct:.digits$}% ({:.prec$})", t * 1e3, prec = digits + 1)
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The gated GEMV `silu(W_g·x) ⊙ (W_u·x)` at 4096 × 14336 (each matrix),
/// GEMV alone on activations quantized beforehand, 1 and 8 columns, the
/// gate and up weights taken from rotated copies; so that its kernels'
/// rows per block (`FUSED_CUDA_Q_ROWS_MC` at 8 columns) can be timed.
fn gated_gemv(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let (m, k) = (4096, 14336);
    println!("\n## Gated GEMV silu(W_g·x) ⊙ (W_u·x), {m} × {k} each, GEMV alone\n");
    println!(
        "Activations quantized beforehand in GGML's mode; call i takes copies i and i + 1 as gate and up.\n"
    );
    println!("| format | acts | cols | µs/call | GB/s (2 weights + x + y) | % of copy |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K] {
        let ws = weight_copies(be, dtype, m, k)?;
        let mode = ActQuant::ggml(dtype);
        for n_cols in [1usize, 8] {
            let x = be.upload(&randv(k * n_cols, 3))?;
            let q = be.quantize_acts(mode, &x, n_cols)?;
            let mut y = be.alloc(m * n_cols)?;
            let t = time_calls(be, ws.len() * 2, 25, |i| {
                let (gate, up) = (&ws[i % ws.len()], &ws[(i + 1) % ws.len()]);
                be.gemv_glu_quantized(gate, up, Activation::Silu, &q, &Epilogue::NONE, &[], &mut y)
            })?;
            let moved = (2 * ws[0].bytes() + 4 * (k + m) * n_cols) as f64;
            let gbs = moved / t / 1e6;
            println!(
                "| {dtype} | {mode:?} | {n_cols} | {:.1} | {gbs:.0} | {:.0}% |",
                t * 1e3,
                100.0 * gbs / ceiling
            );
        }
    }
    Ok(())
}

/// Integer GEMVs of several columns, GEMV alone on activations quantized
/// beforehand in GGML's mode: Q8_0, Q4_0 and Q4_K at the GEMV table's
/// shapes, plain and (at 4096 rows) gated, for the column counts that
/// `FUSED_BENCH_COLS` lists (default 2 to 8), so that the kernels' rows
/// per block (`FUSED_CUDA_Q_ROWS_MC24`, `FUSED_CUDA_Q_ROWS_MC`) can be
/// timed across runs.
fn several_columns(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let cols: Vec<usize> = std::env::var("FUSED_BENCH_COLS")
        .ok()
        .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
        .unwrap_or_else(|| (2..=8).collect());
    let var = |v: &str| std::env::var(v).unwrap_or_else(|_| "unset".to_owned());
    println!(
        "\n## Several columns, GEMV alone (FUSED_CUDA_Q_ROWS_MC24 {}, FUSED_CUDA_Q_ROWS_MC {})\n",
        var("FUSED_CUDA_Q_ROWS_MC24"),
        var("FUSED_CUDA_Q_ROWS_MC")
    );
    println!(
        "Activations quantized beforehand; % of copy counts weights + x + y (f32); gated: \
         silu(W_g·x) ⊙ (W_u·x), call i taking copies i and i + 1.\n"
    );
    println!(
        "| shape (rows × K) | format | cols | µs/call | % of copy | gated µs/call | % of copy |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for (m, k) in bench_shapes() {
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K] {
            let ws = weight_copies(be, dtype, m, k)?;
            let mode = ActQuant::ggml(dtype);
            for &n_cols in &cols {
                let x = be.upload(&randv(k * n_cols, 3))?;
                let q = be.quantize_acts(mode, &x, n_cols)?;
                let mut y = be.alloc(m * n_cols)?;
                let pct = |t: f64, mats: usize| {
                    100.0 * (mats * ws[0].bytes() + 4 * (k + m) * n_cols) as f64 / t / 1e6 / ceiling
                };
                let t = time_calls(be, ws.len() * 2, 25, |i| {
                    be.gemv_quantized(&ws[i % ws.len()], &q, &Epilogue::NONE, &[], &mut y)
                })?;
                let gated = if m <= 4096 {
                    let tg = time_calls(be, ws.len() * 2, 25, |i| {
                        let (gate, up) = (&ws[i % ws.len()], &ws[(i + 1) % ws.len()]);
                        be.gemv_glu_quantized(
                            gate,
                            up,
                            Activation::Silu,
                            &q,
                            &Epilogue::NONE,
                            &[],
                            &mut y,
                        )
                    })?;
                    format!("{:.1} | {:.0}%", tg * 1e3, pct(tg, 2))
                } else {
                    " | ".to_owned()
                };
                println!(
                    "| {m} × {k} | {dtype} | {n_cols} | {:.1} | {:.0}% | {gated} |",
                    t * 1e3,
                    pct(t, 1)
                );
            }
        }
    }
    Ok(())
}

/// The columns of [`gemv_timing`]'s cells, and their rule.
const GEMV_CELLS_HEADER: &str = "copies | µs/call | GB/s (weights + x + y) | % of copy | GEMV alone µs | % of copy | batch µs/call | % of copy | batch, overlap µs/call | % of copy | batch, group µs/call | % of copy | batch, group, GEMV alone µs/call | % of copy |";
const GEMV_CELLS_RULE: &str = "---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// The three ways [`batch_per_call`] runs a batch: one call after the other,
/// overlapping (`LaunchOptions::overlap`), and overlapping with runs of one
/// kernel grouped into one launch (`LaunchOptions::group`, the defaults).
const BATCHINGS: [(bool, bool); 3] = [(false, false), (true, false), (true, true)];

/// The timing cells of one GEMV table row: `W·x` over the weight copies
/// `ws` (`m × k`) for `n_cols` columns in `mode` (a quantized mode: the
/// quantizer launch included), µs per call, GB/s and % of `ceiling`; then,
/// in a quantized mode, the GEMV alone on activations quantized
/// beforehand (µs, % of copy), else two empty cells.
fn gemv_timing(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    mode: ActQuant,
    m: usize,
    k: usize,
    n_cols: usize,
    ceiling: f64,
) -> Result<String, CudaError> {
    let x = be.upload(&randv(k * n_cols, 3))?;
    let mut y = be.alloc(m * n_cols)?;
    let t = time_calls(be, ws.len() * 2, 25, |i| {
        let w = &ws[i % ws.len()];
        be.gemv(w, &x, n_cols, mode, &Epilogue::NONE, &[], &mut y)
    })?;
    let moved = (ws[0].bytes() + 4 * (k + m) * n_cols) as f64;
    let pct = |t: f64| 100.0 * moved / t / 1e6 / ceiling;
    let q = (mode != ActQuant::F32)
        .then(|| be.quantize_acts(mode, &x, n_cols))
        .transpose()?;
    let alone = match &q {
        None => "| | |".to_owned(),
        Some(q) => {
            let ta = time_calls(be, ws.len() * 2, 25, |i| {
                be.gemv_quantized(&ws[i % ws.len()], q, &Epilogue::NONE, &[], &mut y)
            })?;
            format!("| {:.1} | {:.0}% |", ta * 1e3, pct(ta))
        }
    };
    // The three batchings on `x` (with the quantizer), then the grouped
    // batch on the activations quantized beforehand, taking turns.
    let mut tb: [Vec<f64>; 4] = Default::default();
    let input = BatchInput::Vector {
        x: &x,
        n_cols,
        mode,
    };
    for _round in 0..3 {
        for (i, batching) in BATCHINGS.into_iter().enumerate() {
            tb[i].push(batch_per_call(
                be,
                ws,
                input,
                batching,
                &Epilogue::NONE,
                &[],
            )?);
        }
        if let Some(q) = &q {
            let input = BatchInput::Quantized(q);
            tb[3].push(batch_per_call(
                be,
                ws,
                input,
                BATCHINGS[2],
                &Epilogue::NONE,
                &[],
            )?);
        }
    }
    let [tb, to, tg, ta] = tb.map(|v| (!v.is_empty()).then(|| median(v)));
    let [tb, to, tg] = [tb, to, tg].map(|t| t.expect("timed every round"));
    let group_alone = ta.map_or("| |".to_owned(), |t| {
        format!("| {:.1} | {:.0}% |", t * 1e3, pct(t))
    });
    Ok(format!(
        "{} | {:.1} | {:.0} | {:.0}% {alone} {:.1} | {:.0}% | {:.1} | {:.0}% | {:.1} | {:.0}% {group_alone}",
        ws.len(),
        t * 1e3,
        moved / t / 1e6,
        pct(t),
        tb * 1e3,
        pct(tb),
        to * 1e3,
        pct(to),
        tg * 1e3,
        pct(tg)
    ))
}

/// What a batch of [`batch_per_call`] reads: `n_cols` columns `x` fed per
/// `mode` (a quantized mode: one quantizer launch per batch, included), or
/// activations quantized beforehand (no quantizer launch).
#[derive(Clone, Copy)]
enum BatchInput<'a> {
    Vector {
        x: &'a DeviceVec,
        n_cols: usize,
        mode: ActQuant,
    },
    Quantized(&'a DeviceActs),
}

/// Median milliseconds per GEMV of the weight copies `ws` run as one
/// `gemv_batch` of independent calls on `input` (`BatchInput`), one
/// output each, epilogue `epi` over `ops`, with `LaunchOptions::overlap`
/// and `LaunchOptions::group` set to `(overlap, group)` (the other options
/// as they are). The first call of
/// each batch waits for the batch before it.
fn batch_per_call(
    be: &CudaBackend,
    ws: &[DeviceWeights],
    input: BatchInput<'_>,
    (overlap, group): (bool, bool),
    epi: &Epilogue,
    ops: &[&DeviceVec],
) -> Result<f64, CudaError> {
    let saved = be.options();
    be.set_options(LaunchOptions {
        overlap,
        group,
        ..saved
    });
    let m = ws[0].rows();
    let n_cols = match input {
        BatchInput::Vector { n_cols, .. } => n_cols,
        BatchInput::Quantized(acts) => acts.n_cols(),
    };
    let mut ys = ws
        .iter()
        .map(|_| be.alloc(m * n_cols))
        .collect::<Result<Vec<_>, _>>()?;
    let t = time_calls(be, 2, 25, |_| {
        let mut jobs: Vec<GemvJob<'_>> = ws
            .iter()
            .zip(ys.iter_mut())
            .map(|(w, y)| GemvJob::new(w, y).with_epilogue(epi, ops))
            .collect();
        match input {
            BatchInput::Vector { x, n_cols, mode } => be.gemv_batch(x, n_cols, mode, &mut jobs),
            BatchInput::Quantized(acts) => be.gemv_quantized_batch(acts, &mut jobs),
        }
    });
    be.set_options(saved);
    Ok(t? / ws.len() as f64)
}

/// The formats outside the targets (read in the core's block layout, or
/// BF16 and F32), one column at 4096 × 14336, weights rotated.
fn other_formats(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
    let (m, k) = (4096usize, 14336usize);
    println!("\n## GEMV, the other weight formats, {m} × {k}, 1 column\n");
    println!(
        "Activations f32, or quantized on the device in GGML's mode for the format \
         (\"µs/call\" with the quantizer, \"GEMV alone\" without).\n"
    );
    println!("| format | acts | {GEMV_CELLS_HEADER}\n| --- | --- | {GEMV_CELLS_RULE}");
    for dtype in fused_cuda::GEMV_DTYPES {
        if matches!(dtype, DType::F16 | DType::Q8_0 | DType::Q4_0 | DType::Q4_K) {
            continue;
        }
        let ws = weight_copies(be, dtype, m, k)?;
        let mut modes = vec![ActQuant::F32];
        if ActQuant::ggml(dtype) != ActQuant::F32 {
            modes.push(ActQuant::ggml(dtype));
        }
        for mode in modes {
            let cells = gemv_timing(be, &ws, mode, m, k, 1, ceiling)?;
            println!("| {dtype} | {mode:?} | {cells}");
        }
    }
    println!();
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("cuda-bench: {e}");
        std::process::exit(1);
    }
}
