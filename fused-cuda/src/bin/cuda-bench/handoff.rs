//! The per-call floor of tiny dependent GEMVs and the handoff between dependent
//! kernels.

use crate::data::{randv, weight_bytes};
use crate::timing::{device_plan, median, plan_ms, time_calls};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::acts::GemvMode;
use fused_core::backend::ResidentPlan;
use fused_core::graph::{Graph, Place};
use fused_core::memory::Memory;
use fused_core::planner::Plan;
use fused_core::tensor::{BufferId, TensorDesc};
use fused_core::weights::WeightMatrix;
use fused_cuda::{CudaBackend, CudaError, GemvJob, LaunchOptions, Submission};

/// The fixed cost of one dependent GEMV call: GEMVs so small that their
/// bytes take no time (one copy of the weights, resident in L2), called
/// back to back on the stream, each depending on the one before (as in a
/// decode step), with programmatic dependent launch and without; in GGML's
/// mode with the quantizer launch and without it (activations quantized
/// beforehand). A call that moves `b` bytes cannot take less than
/// `b / bandwidth` plus the part of this floor that its first weight loads
/// (requested before the dependency wait) do not hide.
pub(crate) fn per_call_floor(be: &CudaBackend) -> Result<(), CudaError> {
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
                    be.gemv_batch(&x, 1, mode, &mut [GemvJob::new(&w, &mut y)])
                })
            };
            let (t_pdl, t_normal) = (per_call(true)?, per_call(false)?);
            be.set_options(LaunchOptions { pdl: true, ..saved });
            let alone = if mode == ActQuant::F32 {
                String::new()
            } else {
                let q = be.quantize_acts(mode, &x, 1)?;
                let t = time_calls(be, 200, 15, |_| {
                    be.gemv_quantized_batch(&q, &mut [fused_cuda::GemvJob::new(&w, &mut y)])
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
pub(crate) fn handoff(be: &CudaBackend) -> Result<(), CudaError> {
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
    let mut dp = device_plan(be, &g, &Plan::unfused(&g), GemvMode::Ggml, &sizes)?;
    dp.write_all(&mem)?;
    dp.capture_graph()?;
    Ok(plan_ms(be, &dp, 30, Submission::Graph)? / CHAIN as f64)
}
