//! Tables of one-column GEMV chains under several launch variants taking turns:
//! launch options and kernel knobs, the L2 look-ahead.

use crate::data::{bench_shapes, randv, weight_copies};
use crate::timing::{median, time_calls};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_cuda::{
    AheadAt, CudaBackend, CudaError, DeviceActs, DeviceVec, DeviceWeights, GemvJob, Knob,
    LaunchOptions, Tuning,
};

/// Kernel-shape knobs a variant sets (the tuning's other choices as the
/// bench started).
type Knobs<'a> = &'a [Knob];

/// The tuning when the bench started (an A/B run may set it for the whole
/// bench, `FUSED_CUDA_*` at start-up).
static STARTING_TUNING: std::sync::OnceLock<Tuning> = std::sync::OnceLock::new();

/// Sets exactly the kernel-shape knobs `knobs`, the others back to their
/// values when the bench started, keeping the launch options.
fn set_knobs(be: &CudaBackend, knobs: Knobs) -> Result<(), CudaError> {
    let options = be.options();
    let mut t = *STARTING_TUNING.get_or_init(|| be.tuning());
    for k in knobs {
        t = t.with(*k)?;
    }
    be.set_tuning(t);
    be.set_options(options);
    Ok(())
}

const R1_U1: Knobs = &[Knob::IntRows(1), Knob::IntUnits(1)];
const R2_U1: Knobs = &[Knob::IntRows(2), Knob::IntUnits(1)];
const R4_U1: Knobs = &[Knob::IntRows(4), Knob::IntUnits(1)];
const R2_U2: Knobs = &[Knob::IntRows(2), Knob::IntUnits(2)];
const F16_U4: Knobs = &[Knob::F16Shape { rows: 1, units: 4 }];
const F16_U8: Knobs = &[Knob::F16Shape { rows: 1, units: 8 }];
const F16_U16: Knobs = &[Knob::F16Shape { rows: 1, units: 16 }];

/// GEMV time per launch option (`LaunchOptions`: normal launches or
/// programmatic dependent launch), the options taking turns in 3 rounds
/// (median of the rounds' medians), at both target shapes: f32
/// activations, the quantized mode with its quantizer, and the GEMV alone.
pub(crate) fn launch_options(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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
        ("PDL, int. R = 1, U = 1", pdl, R1_U1),
        ("PDL, int. R = 2, U = 1", pdl, R2_U1),
        ("PDL, int. R = 4, U = 1", pdl, R4_U1),
        ("PDL, int. R = 2, U = 2", pdl, R2_U2),
        ("PDL, F16 U = 4", pdl, F16_U4),
        ("PDL, F16 U = 8", pdl, F16_U8),
        ("PDL, F16 U = 16", pdl, F16_U16),
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
                    set_knobs(be, knobs)?;
                    let t = time_calls(be, n * 2, 9, |i| match which {
                        0 => be.gemv_batch(
                            x,
                            1,
                            ActQuant::F32,
                            &mut [GemvJob::new(&ws[i % n], &mut *y)],
                        ),
                        1 => be.gemv_batch(x, 1, mode, &mut [GemvJob::new(&ws[i % n], &mut *y)]),
                        _ => be.gemv_quantized_batch(
                            q.as_ref().expect("quantized"),
                            &mut [fused_cuda::GemvJob::new(&ws[i % n], &mut *y)],
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
    set_knobs(be, &[])?;
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
pub(crate) fn l2_ahead(be: &CudaBackend, ceiling: f64) -> Result<(), CudaError> {
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
                            job = job.with_l2_ahead_at(next, mode, bytes, at);
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

/// What the tables of one-column GEMV variants time at one shape and
/// format ([`one_column`]).
pub(crate) struct OneColumn {
    /// Weight copies, rotated.
    pub(crate) ws: Vec<DeviceWeights>,
    /// Bytes a call moves: weights, x and y.
    moved: f64,
    /// GGML's activation mode for the format.
    pub(crate) mode: ActQuant,
    /// `x` quantized in `mode` (none for F32).
    pub(crate) q: Option<DeviceActs>,
}

/// [`OneColumn`] for `dtype` at `m × k` over the activations `x`.
pub(crate) fn one_column(
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
