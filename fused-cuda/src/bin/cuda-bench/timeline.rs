//! The traced timeline of dependent GEMV chains.

use crate::data::{bench_shapes, randv};
use crate::timing::{median, time_calls};
use crate::variants::one_column;
use fused_core::DType;
use fused_cuda::{CudaBackend, CudaError, DeviceWeights, GemvJob, L2_AHEAD_DEFAULT, LaunchOptions};

/// Where a chain of dependent one-column integer GEMVs spends its time
/// ([`CudaBackend::trace_gemv_chain`]): Q4_0 with and without teams a block
/// and Q4_K (4 rows a block in 2 row groups; shapes below 16384 rows), on activations
/// quantized beforehand, over the rotating weight copies.
pub(crate) fn timeline(be: &CudaBackend) -> Result<(), CudaError> {
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
