//! The core's backend contract on Vulkan: a resident plan is the device
//! plan ([`DevicePlan`]: one command buffer a run, barriers only between
//! dependent dispatches), or, for a plan the device executor refuses as
//! unsupported, the plan run step by step through the host-slice kernels
//! ([`fused_core::backend::Resident::Host`], with the refusal kept).

use fused_core::Error;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Capabilities, CoreErrorSource, Resident};
use fused_core::exec::Executor;
use fused_core::graph::Graph;
use fused_core::planner::Plan;

use crate::backend::VulkanBackend;
use crate::error::VulkanError;
use crate::pipeline::MAX_COLS;
use crate::plan_exec::DevicePlan;

/// Bytes of the copy that measures the bandwidth ceiling: 256 MiB each
/// way, five times the L2 of the largest device we run on, so that the
/// barrier between the timed copies counts for little; less where the
/// device's `maxStorageBufferRange` is less (lavapipe's is 128 MiB).
const COPY_BYTES: u64 = 256 << 20;

/// Passes of the copy that measures the bandwidth ceiling.
const COPY_REPS: usize = 5;

impl Backend for VulkanBackend {
    type Error = VulkanError;
    type Plan<'a> = Resident<'a, DevicePlan<'a>, VulkanBackend>;

    fn name(&self) -> String {
        "vulkan".to_string()
    }

    fn device(&self) -> String {
        let info = self.context().info();
        format!("{} ({:?})", info.name(), info.device_type())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_cols: MAX_COLS,
            bit_exact_reference: false,
            device_timer: self.context().info().timestamp_period_ns().is_some(),
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
    ) -> Result<Self::Plan<'a>, VulkanError> {
        Resident::device_or_host(
            DevicePlan::new(self, g, plan, mode, sizes),
            self,
            g,
            plan,
            mode,
            sizes,
        )
    }

    fn messages(&self) -> Option<Vec<String>> {
        let ctx = self.context();
        ctx.validation_enabled().then(|| ctx.validation_messages())
    }

    /// 256 MiB each way (at most the device's storage buffer range):
    /// beyond the L2 of the devices we run on.
    fn copy_bandwidth_gbs(&self) -> Option<f64> {
        let range = u64::from(self.context().info().max_storage_range);
        VulkanBackend::copy_bandwidth_gbs(self, COPY_BYTES.min(range), COPY_REPS).ok()
    }
}

/// The inputs this backend refused before anything ran.
impl CoreErrorSource for VulkanError {
    fn core_error(&self) -> Option<&Error> {
        match self {
            VulkanError::Core(e) => Some(e),
            _ => None,
        }
    }
}
