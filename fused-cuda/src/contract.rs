//! The core's backend contract on CUDA: a resident plan is the device plan
//! ([`DevicePlan`]: every buffer on the device, one stream, launches built
//! once), or, for a plan the device executor refuses as unsupported, the
//! plan run step by step through the host-slice kernels
//! ([`fused_core::backend::Resident::Host`], with the refusal kept).

use fused_core::Error;
use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Capabilities, CoreErrorSource, Resident};
use fused_core::exec::Executor;
use fused_core::graph::Graph;
use fused_core::planner::Plan;

use crate::{CudaBackend, CudaError, DevicePlan, MAX_COLS};

/// Bytes of the copy that measures the bandwidth ceiling: 256 MiB each
/// way, five times the L2 of the largest device we run on, and long
/// enough (about 0.2 ms at 3 TB/s) that the copy's ramp-up and tail do not
/// count (64 MiB copies timed one at a time read 10-14 % below
/// `cuda-bench`'s 1 GiB copies on the H100).
const COPY_BYTES: usize = 256 << 20;

/// Passes of the copy that measures the bandwidth ceiling.
const COPY_REPS: usize = 5;

impl Backend for CudaBackend {
    type Error = CudaError;
    type Plan<'a> = Resident<'a, DevicePlan<'a>, CudaBackend>;

    fn name(&self) -> String {
        "cuda".to_string()
    }

    fn device(&self) -> String {
        self.device_name()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_cols: MAX_COLS,
            bit_exact_reference: false,
            device_timer: true,
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
    ) -> Result<Self::Plan<'a>, CudaError> {
        Resident::device_or_host(
            DevicePlan::new(self, g, plan, mode, sizes),
            self,
            g,
            plan,
            mode,
            sizes,
        )
    }

    /// 64 MiB each way: beyond the L2 of the devices we run on.
    fn copy_bandwidth_gbs(&self) -> Option<f64> {
        CudaBackend::copy_bandwidth_gbs(self, COPY_BYTES, COPY_REPS).ok()
    }
}

/// The inputs this backend refused before anything ran.
impl CoreErrorSource for CudaError {
    fn core_error(&self) -> Option<&Error> {
        match self {
            CudaError::Core(e) => Some(e),
            _ => None,
        }
    }
}
