//! The GPU backends under verification: Vulkan (feature `vulkan`, on by
//! default; lavapipe runs it on the CPU) and CUDA (feature `cuda`, opt-in).
//!
//! Vulkan runs a plan through its device-resident executor
//! (`fused_vulkan::DevicePlan`: the buffers of the verifier's host
//! [`Memory`] uploaded, the whole plan one command buffer, every buffer read
//! back), falling back to the host-slice path for a plan it refuses (see
//! its docs). CUDA runs a plan with the core's executor
//! ([`fused_core::exec`]) straight over the host [`Memory`], one host-slice
//! kernel call per step (upload, one launch, read back). The device is
//! opened on first use; a
//! machine without one reports a skip with the reason. Their GEMV kernels
//! take f32 activations only, a few weight formats and at most 8 columns:
//! other cases are reported per case as skipped ([`Backend::supports`]).
//! Their results are compared with the reference within the tolerance
//! table (they accumulate in another order), and fused against unfused bit
//! for bit.
//!
//! The timing modes (`perf`, `decode`) need a device-resident executor:
//! the host-slice calls would time the transfers, not the kernels. Vulkan
//! has one (`fused_vulkan::DevicePlan`): the graph's buffers are uploaded
//! once, each plan is recorded into one command buffer, the inputs a plan
//! overwrites in place are restored before each run (not timed), and a run
//! is timed by GPU timestamps around the whole command buffer; its
//! bandwidth ceiling is a device buffer copy measured the same way. CUDA
//! has none yet and is skipped by the timing modes (its crate's bench
//! `cuda-bench` times the kernels).

use std::sync::{Mutex, OnceLock};

use fused_core::Error;
use fused_core::exec::{Executor, StepKernels};
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_core::reference::eval::Memory;

use crate::backend::{Availability, Backend, RunConfig, RunError, RunStats, TimedPlan};

/// What the verifier needs of a GPU backend crate beyond its kernels.
pub trait GpuDevice: StepKernels + Send + Sync + Sized + 'static {
    /// The backend's name in reports.
    const NAME: &'static str;

    /// Opens the device, or says why it cannot be used here.
    fn open() -> Result<Self, String>;

    /// The backend's error as a run error.
    fn run_error(e: Self::Error) -> RunError;

    /// Every message its checker (a validation layer) reported so far, or
    /// `None` when none is running.
    fn messages(&self) -> Option<Vec<String>> {
        None
    }

    /// [`Backend::run_plan`] on this device. Default: the core's executor
    /// over host slices ([`host_slice_run`]).
    fn run_plan(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError> {
        host_slice_run(self, g, plan, mem, cfg)
    }

    /// Whether [`GpuDevice::time_plans`] times plans on the device (a
    /// device-resident executor); the timing modes skip the backend
    /// otherwise.
    const DEVICE_TIMING: bool = false;

    /// [`Backend::time_plans`] with the graph's buffers resident on the
    /// device (default: refused with [`NO_GPU_TIMING`]).
    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        let _ = (g, plans, mem, cfg, reps);
        Err(RunError::Device(NO_GPU_TIMING.to_string()))
    }

    /// The device's bandwidth ceiling in GB/s, measured now (default: none).
    fn bandwidth_gbs(&self) -> Option<f64> {
        None
    }
}

/// Runs `plan` with the core's executor over `mem`, one host-slice kernel
/// call per step.
pub fn host_slice_run<D: GpuDevice>(
    dev: &D,
    g: &Graph,
    plan: &Plan,
    mem: &mut Memory,
    cfg: RunConfig,
) -> Result<RunStats, RunError> {
    let s = Executor::new(dev, cfg.mode)
        .run(g, plan, mem)
        .map_err(D::run_error)?;
    Ok(RunStats {
        kernel_steps: s.kernel_steps,
        barriers: s.counters.barriers,
        kernel_calls: s.counters.kernel_calls,
    })
}

/// The reason the timing modes give for skipping a GPU backend without a
/// device-resident executor.
pub const NO_GPU_TIMING: &str = "GPU perf: no device-resident plan executor for this backend yet \
     (its host-slice calls would time the transfers, not the kernels; see its crate's bench)";

/// A GPU backend, its device opened on first use.
#[derive(Debug)]
pub struct GpuBackend<D> {
    dev: OnceLock<Result<D, String>>,
    /// Checker messages already reported.
    seen: Mutex<usize>,
}

impl<D: GpuDevice> Default for GpuBackend<D> {
    fn default() -> Self {
        GpuBackend {
            dev: OnceLock::new(),
            seen: Mutex::new(0),
        }
    }
}

impl<D: GpuDevice> GpuBackend<D> {
    /// The backend; nothing is opened yet.
    pub fn new() -> GpuBackend<D> {
        GpuBackend::default()
    }

    /// The device, or why there is none.
    pub fn device(&self) -> Result<&D, &str> {
        self.dev
            .get_or_init(D::open)
            .as_ref()
            .map_err(String::as_str)
    }

    fn ready(&self) -> Result<&D, RunError> {
        self.device()
            .map_err(|why| RunError::Device(format!("{} unavailable: {why}", D::NAME)))
    }
}

impl<D: GpuDevice> Backend for GpuBackend<D> {
    fn name(&self) -> &str {
        D::NAME
    }

    fn availability(&self) -> Availability {
        match self.device() {
            Ok(_) => Availability::Ready,
            Err(why) => Availability::Skip(why.to_string()),
        }
    }

    fn bit_exact_reference(&self) -> bool {
        false
    }

    fn supports(&self, g: &Graph, plan: &Plan, cfg: RunConfig) -> Result<(), String> {
        let Ok(dev) = self.device() else {
            return Ok(());
        };
        let ex = Executor::new(dev, cfg.mode);
        match ex
            .check(g, plan)
            .and_then(|()| ex.check(g, &Plan::unfused(g)))
        {
            Err(Error::Unsupported(u)) => Err(format!("unsupported: {u}")),
            // A malformed graph is the run's error to report.
            _ => Ok(()),
        }
    }

    fn timing_availability(&self) -> Availability {
        match self.availability() {
            Availability::Ready if !D::DEVICE_TIMING => {
                Availability::Skip(NO_GPU_TIMING.to_string())
            }
            a => a,
        }
    }

    fn take_diagnostics(&self) -> Option<Vec<String>> {
        let all = self.device().ok()?.messages()?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let new = all.get(*seen..).unwrap_or_default().to_vec();
        *seen = all.len();
        Some(new)
    }

    fn run_plan(
        &self,
        g: &Graph,
        plan: &Plan,
        mem: &mut Memory,
        cfg: RunConfig,
    ) -> Result<RunStats, RunError> {
        self.ready()?.run_plan(g, plan, mem, cfg)
    }

    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        self.ready()?.time_plans(g, plans, mem, cfg, reps)
    }

    fn bandwidth_gbs(&self, _: usize) -> Option<f64> {
        self.device().ok()?.bandwidth_gbs()
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    use fused_core::Error;
    use fused_core::graph::Graph;
    use fused_core::planner::Plan;
    use fused_core::reference::eval::Memory;
    use fused_core::tensor::BufferId;
    use fused_vulkan::{ContextOptions, DevicePlan, DevicePlanStats, VulkanBackend, VulkanError};

    use super::{GpuDevice, RunError, host_slice_run};
    use crate::backend::{RunConfig, RunStats, TimedPlan, buffer_count};

    /// The byte sizes of `mem`'s buffers.
    fn sizes(mem: &Memory) -> Result<Vec<usize>, RunError> {
        (0..buffer_count(mem))
            .map(|b| mem.buffer(BufferId(b)).map(<[u8]>::len))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RunError::from)
    }

    fn run_stats(s: DevicePlanStats) -> RunStats {
        RunStats {
            kernel_steps: s.kernel_steps,
            barriers: s.barriers,
            kernel_calls: s.dispatches,
        }
    }

    /// Bytes of the copy that measures the bandwidth ceiling (each way).
    const CEILING_BYTES: u64 = 64 << 20;

    /// Validation is on unless `FUSED_VK_VALIDATION=0`; where the layer is
    /// not installed the device opens without it (and no checker runs).
    impl GpuDevice for VulkanBackend {
        const NAME: &'static str = "vulkan";

        fn open() -> Result<VulkanBackend, String> {
            let validation = std::env::var_os("FUSED_VK_VALIDATION").is_none_or(|v| v != "0");
            let open = |validation| {
                VulkanBackend::with_options(ContextOptions {
                    validation,
                    staged_buffers: false,
                })
            };
            match open(validation) {
                Err(VulkanError::NoValidationLayer) => open(false),
                r => r,
            }
            .map_err(|e| {
                if e.is_no_device() {
                    e.to_string()
                } else {
                    format!("opening the Vulkan device failed: {e}")
                }
            })
        }

        fn run_error(e: VulkanError) -> RunError {
            match e {
                VulkanError::Core(e) => RunError::Core(e),
                other => RunError::Device(other.to_string()),
            }
        }

        fn messages(&self) -> Option<Vec<String>> {
            let ctx = self.context();
            ctx.validation_enabled().then(|| ctx.validation_messages())
        }

        /// Through the device plan (buffers uploaded, the plan run as one
        /// command buffer, every buffer read back); a plan it refuses
        /// (strided tensors, non-F32 activations, broadcasts other than
        /// over rows) runs through the host-slice executor instead, which
        /// gives the same bits where both run.
        fn run_plan(
            &self,
            g: &Graph,
            plan: &Plan,
            mem: &mut Memory,
            cfg: RunConfig,
        ) -> Result<RunStats, RunError> {
            match DevicePlan::new(self, g, plan, cfg.mode, &sizes(mem)?) {
                Ok(mut dp) => {
                    dp.upload(mem)
                        .and_then(|()| dp.run())
                        .and_then(|()| dp.download_into(mem))
                        .map_err(Self::run_error)?;
                    Ok(run_stats(dp.stats()))
                }
                Err(VulkanError::Core(Error::Unsupported(_) | Error::UnsupportedDType { .. })) => {
                    host_slice_run(self, g, plan, mem, cfg)
                }
                Err(e) => Err(Self::run_error(e)),
            }
        }

        const DEVICE_TIMING: bool = true;

        /// One [`DevicePlan`] per plan, each uploaded once; a run's time is
        /// its GPU timestamps (the wall time from submission to the fence
        /// where the queue has none); the inputs a plan overwrites are
        /// restored before each run, outside the timed part.
        fn time_plans(
            &self,
            g: &Graph,
            plans: &[&Plan],
            mem: &Memory,
            cfg: RunConfig,
            reps: usize,
        ) -> Result<Vec<TimedPlan>, RunError> {
            let sizes = sizes(mem)?;
            let device_plans = plans
                .iter()
                .map(|p| {
                    let mut dp = DevicePlan::new(self, g, p, cfg.mode, &sizes)?;
                    dp.upload(mem)?;
                    dp.restore_inputs()?;
                    dp.run()?; // warm-up
                    Ok(dp)
                })
                .collect::<Result<Vec<_>, VulkanError>>()
                .map_err(Self::run_error)?;
            let mut timed: Vec<TimedPlan> = device_plans
                .iter()
                .map(|dp| TimedPlan {
                    times: Vec::with_capacity(reps),
                    stats: run_stats(dp.stats()),
                })
                .collect();
            for _ in 0..reps.max(1) {
                for (dp, t) in device_plans.iter().zip(timed.iter_mut()) {
                    let run = dp.time_once().map_err(Self::run_error)?;
                    t.times.push(run.device.unwrap_or(run.wall));
                }
            }
            Ok(timed)
        }

        /// The faster of two device-to-device copies of 64 MiB, a transfer
        /// (`vkCmdCopyBuffer`, which under-reads on NVIDIA: about 850 of
        /// 4100 GB/s on the H200) and a compute shader with 16-byte loads:
        /// bytes read plus bytes written per second, GPU-timed.
        fn bandwidth_gbs(&self) -> Option<f64> {
            let transfer = fused_vulkan::timing::copy(self, CEILING_BYTES, 5);
            let shader = fused_vulkan::timing::copy_shader(self, CEILING_BYTES, 5);
            [transfer, shader]
                .into_iter()
                .filter_map(|t| t.ok().map(|t| t.gb_per_s()))
                .reduce(f64::max)
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use fused_cuda::{CudaBackend, CudaError};

    use super::{GpuDevice, RunError};

    impl GpuDevice for CudaBackend {
        const NAME: &'static str = "cuda";

        fn open() -> Result<CudaBackend, String> {
            CudaBackend::new().map_err(|e| e.to_string())
        }

        fn run_error(e: CudaError) -> RunError {
            match e {
                CudaError::Core(e) => RunError::Core(e),
                other => RunError::Device(other.to_string()),
            }
        }
    }
}
