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
//! GEMV chains (`CudaBackend::trace_gemv_chain`; not in the full run),
//! `--layers-only` the copy ceiling, the Q4_0 decode layer on quantized
//! activations (direct launches) and the device-plan sections.
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

mod ceiling;
mod data;
mod epilogue;
mod fwht;
mod gemv;
mod handoff;
mod layers;
mod timeline;
mod timing;
mod variants;

use crate::ceiling::copy_ceiling;
use crate::epilogue::epilogue_costs;
use crate::fwht::fwht_table;
use crate::gemv::{gated_gemv, gemv_table, other_formats, several_columns};
use crate::handoff::{handoff, per_call_floor};
use crate::layers::{decode_layer, ffn_f16, plans};
use crate::timeline::timeline;
use crate::timing::{HeadStartBuffers, report_host};
use crate::variants::{l2_ahead, launch_options};
use fused_core::acts::ActQuant;
use fused_cuda::{CudaBackend, CudaError, Knob, Tuning};

/// The tuning the `FUSED_CUDA_*` variables ask for, read once at start-up
/// (the library reads no environment): `FUSED_CUDA_PDL`, `_EARLY_OPERANDS`,
/// `_OVERLAP`, `_GROUP`, `_FIXED_EPILOGUES` (`0`: off), `_FOLD_QUANTIZERS`,
/// `_TEAMS` (not `0`: on), `_L2_AHEAD` (bytes), `_Q_ROWS` (1, 2, 4),
/// `_Q_UNROLL` (1, 2), `_Q_ROWS_MC` (1, 2, 4: 5 to 8 columns),
/// `_Q_ROWS_MC24` (`0`: two units at 2 rows; 2, 4: one unit at 2 or 4 rows)
/// and `_F16_SHAPE` (`u4`, `u8`, `u16`, `r2`).
fn tuning_from_env() -> Result<Tuning, CudaError> {
    let var = |name: &str| std::env::var(format!("FUSED_CUDA_{name}")).ok();
    let num = |name: &str| var(name).and_then(|v| v.parse::<usize>().ok());
    let mut knobs = Vec::new();
    type Switch = fn(bool) -> Knob;
    let switches: [(&str, Switch); 7] = [
        ("PDL", Knob::Pdl),
        ("EARLY_OPERANDS", Knob::EarlyOperands),
        ("OVERLAP", Knob::Overlap),
        ("GROUP", Knob::Group),
        ("FIXED_EPILOGUES", Knob::FixedEpilogues),
        ("FOLD_QUANTIZERS", Knob::FoldQuantizers),
        ("TEAMS", Knob::Teams),
    ];
    for (name, knob) in switches {
        if let Some(v) = var(name) {
            knobs.push(knob(v != "0"));
        }
    }
    knobs.extend(num("L2_AHEAD").map(Knob::L2AheadBytes));
    knobs.extend(num("Q_ROWS").map(Knob::IntRows));
    knobs.extend(num("Q_UNROLL").map(Knob::IntUnits));
    knobs.extend(num("Q_ROWS_MC").map(Knob::IntRows5To8));
    knobs.extend(num("Q_ROWS_MC24").map(|r| match r {
        0 => Knob::IntShape2To4 { rows: 2, units: 2 },
        r => Knob::IntShape2To4 { rows: r, units: 1 },
    }));
    let f16 = var("F16_SHAPE").map(|v| match v.as_str() {
        "r2" => (2, 4),
        "u8" => (1, 8),
        "u16" => (1, 16),
        _ => (1, 4),
    });
    knobs.extend(f16.map(|(rows, units)| Knob::F16Shape { rows, units }));
    knobs.into_iter().try_fold(Tuning::default(), Tuning::with)
}

fn run() -> Result<(), CudaError> {
    let be = CudaBackend::new()?;
    be.set_tuning(tuning_from_env()?);
    let _head_start = HeadStartBuffers;
    let dev = be.device();
    println!(
        "# fused-cuda bench on {} (compute capability {:?}, kernels: {:?})\n",
        dev.name(),
        dev.capability(),
        dev.kernel_form()
    );

    let ceiling = copy_ceiling(&be)?;
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
    if std::env::args().any(|a| a == "--layers-only") {
        decode_layer(&be, ActQuant::Q8_0, ceiling)?;
        return plans(&be, ceiling);
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

    gemv_table(&be, ceiling)?;
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

    fwht_table(&be, ceiling)?;
    report_host("FWHT");

    for mode in [ActQuant::F32, ActQuant::Q8_0] {
        decode_layer(&be, mode, ceiling)?;
    }
    ffn_f16(&be, ceiling)?;
    plans(&be, ceiling)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("cuda-bench: {e}");
        std::process::exit(1);
    }
}
