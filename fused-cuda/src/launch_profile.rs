//! Where one run of a device plan spends its time, launch by launch (the
//! `lab` feature): [`DevicePlan::profile_launches`] enqueues a run's
//! launches on the stream with a CUDA event recorded between every two, so
//! each launch's time is the span between the events around it, and
//! [`kernel_totals`](fused_core::launch_profile::kernel_totals) sums those by kernel.
//!
//! The events serialize the launches: a GEMV that would start under
//! programmatic dependent launch, or overlap the one before it, waits for
//! it here, so the sum of the spans is more than a graph replay of the same
//! run takes. What it answers is which kernels a run's time is made of,
//! not how well they overlap.

use crate::device::driver;
use crate::error::CudaError;
use crate::plan_exec::DevicePlan;
use cust::event::{Event, EventFlags};
use fused_core::launch_profile::LaunchTime;

impl DevicePlan<'_> {
    /// One run of the plan, launch by launch on the stream with a CUDA
    /// event between every two (see the module docs), after the graph
    /// inputs are restored and one untimed warm-up run: each launch with
    /// its device time, in run order. State the plan keeps (a KV cache)
    /// is written by both runs, as by any other.
    pub fn profile_launches(&self) -> Result<Vec<LaunchTime>, CudaError> {
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
}
