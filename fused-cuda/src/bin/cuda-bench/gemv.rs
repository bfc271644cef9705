//! GEMV tables: one call after another and batches over rotating copies, gated
//! GEMVs, several columns, the other weight formats.

use crate::data::{DEFAULT_SHAPES, bench_shapes, randv, weight_copies};
use crate::epilogue::epilogue_costs_at;
use crate::timing::{median, time_calls};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_cuda::{
    CudaBackend, CudaError, DeviceActs, DeviceVec, DeviceWeights, GemvJob, LaunchOptions,
};

/// The gated GEMV `silu(W_g·x) ⊙ (W_u·x)` at 4096 × 14336 (each matrix),
/// GEMV alone on activations quantized beforehand, 1 and 8 columns, the
/// gate and up weights taken from rotated copies; so that its kernels'
/// rows per block (`FUSED_CUDA_Q_ROWS_MC` at 8 columns) can be timed.
pub(crate) fn gated_gemv(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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
                be.gemv_quantized_batch(
                    &q,
                    &mut [fused_cuda::GemvJob::new(gate, &mut y).with_glu(up, Activation::Silu)],
                )
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
pub(crate) fn several_columns(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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
                    be.gemv_quantized_batch(
                        &q,
                        &mut [fused_cuda::GemvJob::new(&ws[i % ws.len()], &mut y)],
                    )
                })?;
                let gated = if m <= 4096 {
                    let tg = time_calls(be, ws.len() * 2, 25, |i| {
                        let (gate, up) = (&ws[i % ws.len()], &ws[(i + 1) % ws.len()]);
                        be.gemv_quantized_batch(
                            &q,
                            &mut [fused_cuda::GemvJob::new(gate, &mut y)
                                .with_glu(up, Activation::Silu)],
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
pub(crate) const BATCHINGS: [(bool, bool); 3] = [(false, false), (true, false), (true, true)];

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
        be.gemv_batch(&x, n_cols, mode, &mut [GemvJob::new(w, &mut y)])
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
                be.gemv_quantized_batch(
                    q,
                    &mut [fused_cuda::GemvJob::new(&ws[i % ws.len()], &mut y)],
                )
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
pub(crate) enum BatchInput<'a> {
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
pub(crate) fn batch_per_call(
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
pub(crate) fn other_formats(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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

/// The main GEMV table: every bench shape in F16, Q8_0, Q4_0 and Q4_K,
/// f32 and GGML's activations, 1 and 8 columns, each call waiting for the
/// one before and as batches; the epilogue's cost after the Q4_0 rows.
pub(crate) fn gemv_table(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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
            let ws = weight_copies(be, dtype, m, k)?;
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
                    let cells = gemv_timing(be, &ws, mode, m, k, n_cols, ceiling)?;
                    println!("| {m} × {k} | {dtype} | {mode:?} | {n_cols} | {cells}");
                }
            }
            if dtype == DType::Q4_0 && DEFAULT_SHAPES.contains(&(m, k)) {
                epilogue_costs_at(be, &ws, m, k)?;
                println!(
                    "| shape (rows × K) | format | acts | cols | {GEMV_CELLS_HEADER}\n| --- | --- | --- | ---: | {GEMV_CELLS_RULE}"
                );
            }
        }
    }
    Ok(())
}
