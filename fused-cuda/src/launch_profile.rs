//! Where one run of a device plan spends its time, launch by launch (the
//! `lab` feature): [`DevicePlan::profile_launches`] enqueues a run's
//! launches on the stream with a CUDA event recorded between every two, so
//! each launch's time is the span between the events around it, and
//! [`kernel_totals`] sums those by kernel.
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

/// One launch of a run and the device time it took.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTime {
    /// The kernel as planned (`copy` for a device-to-device copy).
    pub kernel: String,
    /// The weight bytes it streams (GEMV launches; 0 for the others).
    pub weight_bytes: u64,
    /// Device milliseconds from the event before it to the event after it.
    pub ms: f32,
}

/// The launches of one kernel in a run, summed.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTotal {
    /// The kernel.
    pub kernel: String,
    /// How many launches ran it.
    pub launches: usize,
    /// Their device milliseconds, summed.
    pub ms: f64,
    /// The weight bytes they streamed, summed.
    pub weight_bytes: u64,
}

impl KernelTotal {
    /// The weight bytes streamed per second of the kernel's time, in GB/s
    /// (`None` for kernels that stream no weights).
    pub fn weight_gbs(&self) -> Option<f64> {
        (self.weight_bytes > 0 && self.ms > 0.0).then(|| self.weight_bytes as f64 / self.ms / 1e6)
    }
}

/// The launches summed by kernel, the kernel with the most time first
/// (ties in the order the kernels first ran).
pub fn kernel_totals(launches: &[LaunchTime]) -> Vec<KernelTotal> {
    let mut totals: Vec<KernelTotal> = Vec::new();
    for l in launches {
        match totals.iter_mut().find(|t| t.kernel == l.kernel) {
            Some(t) => {
                t.launches += 1;
                t.ms += f64::from(l.ms);
                t.weight_bytes += l.weight_bytes;
            }
            None => totals.push(KernelTotal {
                kernel: l.kernel.clone(),
                launches: 1,
                ms: f64::from(l.ms),
                weight_bytes: l.weight_bytes,
            }),
        }
    }
    // A stable sort keeps first-run order among equal times.
    totals.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    totals
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(kernel: &str, weight_bytes: u64, ms: f32) -> LaunchTime {
        LaunchTime {
            kernel: kernel.to_string(),
            weight_bytes,
            ms,
        }
    }

    #[test]
    fn totals_sum_by_kernel_most_time_first() {
        let t = kernel_totals(&[
            lt("gemv", 1_000_000, 0.5),
            lt("attn", 0, 0.25),
            lt("gemv", 3_000_000, 1.5),
            lt("argmax", 0, 0.25),
        ]);
        let names: Vec<&str> = t.iter().map(|k| k.kernel.as_str()).collect();
        assert_eq!(names, ["gemv", "attn", "argmax"]);
        assert_eq!(t[0].launches, 2);
        assert_eq!(t[0].ms, 2.0);
        assert_eq!(t[0].weight_bytes, 4_000_000);
        // 4 MB in 2 ms.
        assert_eq!(t[0].weight_gbs(), Some(2.0));
        assert_eq!(t[1].weight_gbs(), None);
        assert!(kernel_totals(&[]).is_empty());
    }
}
