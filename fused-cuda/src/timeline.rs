//! Where a chain of dependent GEMV calls spends its time.
//!
//! One dependent one-column Q4_0 / Q4_K call streams its weights well
//! below the copy rate on the H200, while the same weights in a batch of
//! independent calls stream at about the copy rate (BENCHMARKS.md): time
//! goes by around each handoff. Lab only (the `lab` feature). [`CudaBackend::trace_gemv_chain`] runs a chain of dependent
//! one-column integer GEMVs with traced copies of their kernels (`_trace`
//! in `kernels/gemv.cu`), in which every block (team) writes the GPU's
//! global timer when it starts, when its dependency wait returns, when its
//! sums are done and when it has issued its stores; [`GemvTimeline`] keeps
//! those times and [`GemvTimeline::handoffs`] says, for each call after the
//! first, how long after the previous call's last store its first block was
//! released, how many of its blocks were already resident, and how its
//! blocks' ends spread.

/// One block's (team's) times, ns of the GPU's global timer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockTimes {
    /// The block started (after its rows check).
    pub start: u64,
    /// Its dependency wait returned.
    pub ready: u64,
    /// Its own sums were done (its weights all arrived).
    pub summed: u64,
    /// It had issued its output stores.
    pub stored: u64,
}

/// The traced blocks of a chain of dependent GEMV calls, call by call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GemvTimeline {
    /// Per call, per block (team) of rows.
    pub calls: Vec<Vec<BlockTimes>>,
}

/// One call of a chain against the call before it, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallHandoff {
    /// From the previous call's last store to this call's last store: the
    /// call's share of the chain.
    pub period: u64,
    /// From the previous call's last store to this call's first released
    /// block.
    pub release: u64,
    /// From the previous call's last store to this call's last released
    /// block.
    pub last_release: u64,
    /// Blocks of this call that had started before the previous call's
    /// last store (resident early, under programmatic dependent launch).
    pub early_blocks: usize,
    /// From this call's first block start to its last.
    pub start_spread: u64,
    /// From the median of this call's block ends (stores) to the last.
    pub tail: u64,
    /// The median block's time from release to its sums (its weights'
    /// stream).
    pub median_stream: u64,
}

/// The median of `v` (the lower middle for an even count); 0 when empty.
fn median(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

impl GemvTimeline {
    /// Whether every block's times are in order (start ≤ ready ≤ summed ≤
    /// stored) and no call's block was released before the call before it
    /// had stored everything (what the dependency wait guarantees).
    pub fn is_ordered(&self) -> bool {
        let in_order = self
            .calls
            .iter()
            .flatten()
            .all(|b| b.start <= b.ready && b.ready <= b.summed && b.summed <= b.stored);
        let chained = self.calls.windows(2).all(|w| {
            let last_store = w[0].iter().map(|b| b.stored).max().unwrap_or(0);
            w[1].iter().all(|b| b.ready >= last_store)
        });
        in_order && chained
    }

    /// Each call after the first against the call before it (empty calls
    /// give zeros).
    pub fn handoffs(&self) -> Vec<CallHandoff> {
        self.calls
            .windows(2)
            .map(|w| {
                let (prev, cur) = (&w[0], &w[1]);
                let prev_end = prev.iter().map(|b| b.stored).max().unwrap_or(0);
                let max = |f: fn(&BlockTimes) -> u64| cur.iter().map(f).max().unwrap_or(0);
                let min = |f: fn(&BlockTimes) -> u64| cur.iter().map(f).min().unwrap_or(0);
                let end = max(|b| b.stored);
                CallHandoff {
                    period: end.saturating_sub(prev_end),
                    release: min(|b| b.ready).saturating_sub(prev_end),
                    last_release: max(|b| b.ready).saturating_sub(prev_end),
                    early_blocks: cur.iter().filter(|b| b.start < prev_end).count(),
                    start_spread: max(|b| b.start) - min(|b| b.start),
                    tail: end - median(cur.iter().map(|b| b.stored).collect()),
                    median_stream: median(
                        cur.iter()
                            .map(|b| b.summed.saturating_sub(b.ready))
                            .collect(),
                    ),
                }
            })
            .collect()
    }

    /// The smallest step between two different times of the trace: an
    /// upper bound on the timer's resolution (0 when there are none).
    pub fn timer_step(&self) -> u64 {
        let mut t: Vec<u64> = self
            .calls
            .iter()
            .flatten()
            .flat_map(|b| [b.start, b.ready, b.summed, b.stored])
            .collect();
        t.sort_unstable();
        t.dedup();
        t.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(0)
    }
}

/// The traced kernels (`GEMVQ_TRACE_KERNEL` in `kernels/gemv.cu`): each
/// one-column integer kernel that has a `<name>_trace` copy.
pub(crate) const TRACED_KERNELS: [&str; 4] = [
    "fused_gemvq_q4_0_r4_c1_u1",
    "fused_gemvq_q4_0_r4_c1_u1_t3",
    "fused_gemvq_q4_K_r2_c1_u1",
    "fused_gemvq_q4_K_r4s2_c1_u1",
];

mod device {
    use super::{BlockTimes, GemvTimeline, TRACED_KERNELS};
    use crate::backend::{CudaBackend, JobActs};
    use crate::device::driver;
    use crate::error::CudaError;
    use crate::job::GemvJob;
    use crate::launch::Launch;
    use crate::memory::{DeviceActs, DeviceVec, DeviceWeights};
    use crate::params::arg;
    use cust::memory::{CopyDestination, DeviceBuffer};
    use fused_core::Error;
    use fused_core::error::Unsupported;

    impl CudaBackend {
        /// Runs `weights.len()` dependent one-column GEMVs `y = W_i·x` on
        /// `acts` (each waiting for the one before, as [`CudaBackend::gemv_quantized_batch`]
        /// calls do) with traced copies of their kernels, waits for them and
        /// returns every block's times. Where `l2_ahead` is not 0 each call
        /// but the last asks L2 for the first `l2_ahead` bytes of the next
        /// call's weights as its blocks start
        /// ([`GemvJob::with_l2_ahead`]; at most the next weights' bytes).
        /// No weights: an empty timeline, nothing launched. The kernels the current options pick
        /// must have traced copies (the default one-column Q4_0 kernel, with
        /// or without the lab's [`Knob::Teams`](crate::Knob::Teams),
        /// and Q4_K's 2-row and row-group ones), and the launches must quantize no output;
        /// else [`Unsupported`]. Diagnostics: the traced kernels write four
        /// timer values a block besides their outputs.
        pub fn trace_gemv_chain(
            &self,
            weights: &[&DeviceWeights],
            acts: &DeviceActs,
            l2_ahead: usize,
            y: &mut DeviceVec,
        ) -> Result<GemvTimeline, CudaError> {
            if weights.is_empty() {
                return Ok(GemvTimeline::default());
            }
            let layout = acts.layout;
            let q = acts.addr();
            let mut launches = Vec::new();
            for (i, w) in weights.iter().enumerate() {
                let mut job = GemvJob::new(w, y);
                if let Some(next) = weights.get(i + 1).filter(|_| l2_ahead != 0) {
                    job = job.with_l2_ahead(next, layout.mode, l2_ahead);
                }
                self.check_quantized_job(&job, &layout)?;
                launches.extend(self.gemv_job_launch(&job, JobActs::Quantized { layout, q })?);
            }
            if launches.len() != weights.len() {
                return Err(Error::Unsupported(Unsupported::Operation(
                    "a traced GEMV chain of calls without rows",
                ))
                .into());
            }
            let mut shapes = Vec::new();
            for l in &launches {
                let Launch::GemvQ {
                    name, grid, params, ..
                } = l
                else {
                    return Err(Error::Unsupported(Unsupported::Operation(
                        "a traced GEMV chain on other than an integer GEMV",
                    ))
                    .into());
                };
                let (kernel, teams_grid, block, params) = self.gemvq_shape(name, *grid, params);
                if !TRACED_KERNELS.contains(&kernel.as_ref()) || params.qout.mode != 0 {
                    return Err(Error::Unsupported(Unsupported::Operation(
                        "a traced GEMV chain: the kernel has no traced copy",
                    ))
                    .into());
                }
                // The trace holds one entry per block of rows (a team's).
                shapes.push((
                    format!("{kernel}_trace"),
                    teams_grid,
                    block,
                    params,
                    *grid as usize,
                ));
            }
            let total: usize = shapes.iter().map(|s| 4 * s.4).sum();
            let _use = self.dev().make_current()?;
            let trace = DeviceBuffer::<u64>::zeroed(total).map_err(driver("zero the trace"))?;
            let mut at = 0;
            for (name, grid, block, params, blocks) in &shapes {
                let ptr = trace.as_device_ptr().wrapping_add(at);
                // SAFETY: a GemvQParams and a trace pointer, as every traced
                // kernel takes; the GEMV's addresses were checked above and
                // stay valid until the synchronize below (the caller's
                // buffers outlive this call); the kernel writes 4 u64 for
                // each of its `blocks` blocks of rows from `ptr`, within the
                // `total` of `trace`, which lives until after that
                // synchronize.
                unsafe {
                    self.launch(
                        &self.dev().gemv,
                        name,
                        *grid,
                        *block,
                        0,
                        &[arg(params), arg(&ptr)],
                    )
                }?;
                at += 4 * blocks;
            }
            self.synchronize()?;
            let mut host = vec![0u64; total];
            trace
                .copy_to(&mut host[..])
                .map_err(driver("copy the trace to the host"))?;
            let mut calls = Vec::new();
            let mut rest = &host[..];
            for s in &shapes {
                let (mine, next) = rest.split_at(4 * s.4);
                calls.push(
                    mine.chunks_exact(4)
                        .map(|t| BlockTimes {
                            start: t[0],
                            ready: t[1],
                            summed: t[2],
                            stored: t[3],
                        })
                        .collect(),
                );
                rest = next;
            }
            Ok(GemvTimeline { calls })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(start: u64, ready: u64, summed: u64, stored: u64) -> BlockTimes {
        BlockTimes {
            start,
            ready,
            summed,
            stored,
        }
    }

    #[test]
    fn handoffs_measure_each_call_against_the_one_before() {
        let t = GemvTimeline {
            calls: vec![
                vec![block(0, 10, 100, 110), block(5, 12, 120, 130)],
                // Resident before 130: one block; released at 150 and 160.
                vec![
                    block(120, 150, 250, 260),
                    block(140, 160, 280, 300),
                    block(145, 160, 270, 280),
                ],
            ],
        };
        assert!(t.is_ordered());
        let h = t.handoffs();
        assert_eq!(h.len(), 1);
        assert_eq!(
            h[0],
            CallHandoff {
                period: 170,
                release: 20,
                last_release: 30,
                early_blocks: 1,
                start_spread: 25,
                tail: 20,
                median_stream: 110,
            }
        );
        assert_eq!(t.timer_step(), 2);
    }

    #[test]
    fn a_block_released_before_the_previous_call_stored_is_out_of_order() {
        let mut t = GemvTimeline {
            calls: vec![vec![block(0, 1, 2, 100)], vec![block(50, 120, 130, 140)]],
        };
        assert!(t.is_ordered());
        t.calls[1][0].ready = 90;
        assert!(!t.is_ordered());
        t.calls[1][0] = block(50, 120, 110, 140);
        assert!(!t.is_ordered(), "sums before the release");
    }

    #[test]
    fn empty_timelines_give_no_handoffs() {
        let t = GemvTimeline::default();
        assert!(t.handoffs().is_empty() && t.is_ordered());
        assert_eq!(t.timer_step(), 0);
    }
}
