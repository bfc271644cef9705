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
use fused_core::reference::ActQuant;
use fused_cuda::{CudaBackend, CudaError};

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
