//! Where one run of a device plan spends its time, launch by launch (the
//! `lab` feature): [`LaunchProfiler::profile_launches`] enqueues a run's
//! launches on the stream with a CUDA event recorded between every two, so
//! each launch's time is the span between the events around it, and
//! [`kernel_totals`](fused_core::launch_profile::kernel_totals) sums those by kernel.
//!
//! The events serialize the launches: a GEMV that would start under
//! programmatic dependent launch, or overlap the one before it, waits for
//! it here, so the sum of the spans is more than a graph replay of the same
//! run takes. What it answers is which kernels a run's time is made of,
//! not how well they overlap.
//!
//! [`LaunchProfiler::profile_leaving_out`] answers that one: the run captured
//! as a CUDA graph with each kernel's launches left out in turn, each graph
//! replayed and timed, so the time a kernel's removal saves is what it costs
//! the replayed run. The results of such runs are wrong (the left-out
//! kernels' outputs are stale); only their times mean anything.

use crate::cuda_graph::CapturedGraph;
use crate::device::driver;
use crate::error::CudaError;
use crate::plan_exec::DevicePlan;
use cust::event::{Event, EventFlags};
use fused_core::launch_profile::{LaunchProfiler, LaunchTime, LeftOutTime, leave_out_sets};

impl LaunchProfiler for DevicePlan<'_> {
    type Error = CudaError;

    /// One run of the plan, launch by launch on the stream with a CUDA
    /// event between every two (see the module docs), after the graph
    /// inputs are restored and one untimed warm-up run: each launch with
    /// its device time, in run order. State the plan keeps (a KV cache)
    /// is written by both runs, as by any other.
    fn profile_launches(&self) -> Result<Vec<LaunchTime>, CudaError> {
        self.restore()?;
        let r = self.enqueue(self.launches());
        self.finish(r)?;
        self.restore()?;
        let launches = self.launches();
        let events = (0..=launches.len())
            .map(|_| Event::new(EventFlags::DEFAULT).map_err(driver("create an event")))
            .collect::<Result<Vec<_>, _>>()?;
        let stream = self.stream();
        let enqueued = (|| {
            events[0]
                .record(stream)
                .map_err(driver("record an event"))?;
            for (l, e) in launches.iter().zip(&events[1..]) {
                self.enqueue(core::slice::from_ref(l))?;
                e.record(stream).map_err(driver("record an event"))?;
            }
            Ok(())
        })();
        self.finish(enqueued)?;
        launches
            .iter()
            .zip(events.windows(2))
            .map(|(l, w)| {
                Ok(LaunchTime {
                    kernel: l.kernel().to_string(),
                    weight_bytes: l.weight_bytes(),
                    ms: w[1]
                        .elapsed_time_f32(&w[0])
                        .map_err(driver("read an event time"))?,
                })
            })
            .collect()
    }

    /// The run replayed as a CUDA graph `runs` times (after one untimed
    /// replay) with nothing left out, then with each kernel's launches left
    /// out in turn, then without every kernel that streams no weights
    /// ([`leave_out_sets`]): the median device time of each. The graph
    /// inputs are restored before every replay; the plan's state (a KV
    /// cache) and outputs are left as the last, incomplete, replay wrote
    /// them, so run the plan again before reading it.
    fn profile_leaving_out(&self, runs: usize) -> Result<Vec<LeftOutTime>, CudaError> {
        // Capture needs an idle stream.
        self.backend().synchronize()?;
        let launches = self.launches();
        let named: Vec<(&str, u64)> = launches
            .iter()
            .map(|l| (l.kernel(), l.weight_bytes()))
            .collect();
        let mut out = Vec::new();
        for (left_out, skip) in leave_out_sets(&named) {
            let kept: Vec<_> = launches
                .iter()
                .enumerate()
                .filter(|(i, _)| skip.binary_search(i).is_err())
                .map(|(_, l)| l.clone())
                .collect();
            let graph = CapturedGraph::capture(self.backend(), || self.enqueue(&kept))?;
            let mut ms = Vec::with_capacity(runs);
            for i in 0..=runs {
                self.restore()?;
                let t = self.time_enqueued(|| graph.launch(self.backend()))?;
                if i > 0 {
                    ms.push(t);
                }
            }
            out.push(LeftOutTime::median(left_out, skip.len(), ms));
        }
        Ok(out)
    }
}
