//! The core's backend contract on the CPU: a resident plan is the plan run
//! step by step by the core's executor over this backend's aligned host
//! memory ([`CpuMemory`]), timed by the host clock.

use std::format;
use std::string::String;

use fused_core::Error;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Capabilities, HostPlan, std_clock};
use fused_core::exec::Executor;
use fused_core::graph::Graph;
use fused_core::planner::Plan;

use crate::backend::CpuBackend;
use crate::exec::CpuMemory;

impl Backend for CpuBackend {
    type Error = Error;
    type Plan<'a> = HostPlan<'a, CpuBackend, CpuMemory>;

    fn name(&self) -> String {
        format!("cpu-{}", self.isa().name())
    }

    fn device(&self) -> String {
        let n = self.threads();
        format!(
            "{} kernels, {n} thread{}",
            self.isa(),
            if n == 1 { "" } else { "s" }
        )
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_cols: usize::MAX,
            bit_exact_reference: self.isa().is_reference_exact(),
            device_timer: false,
        }
    }

    fn supports(&self, g: &Graph, plan: &Plan, mode: GemvMode) -> Result<(), Error> {
        Executor::new(self, mode).check(g, plan)
    }

    fn compile<'a>(
        &'a self,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<Self::Plan<'a>, Error> {
        Ok(HostPlan::new(self, g, plan, mode, CpuMemory::new(sizes), sizes)?.with_clock(std_clock))
    }

    /// Reads of 256 MiB, well beyond the last-level cache of the machines
    /// we run on.
    fn copy_bandwidth_gbs(&self) -> Option<f64> {
        Some(crate::probe::read_bandwidth(256 << 20, self.threads(), 5))
    }
}
