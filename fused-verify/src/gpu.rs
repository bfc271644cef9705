//! The GPU backends under verification: Vulkan (feature `vulkan`, on by
//! default; lavapipe runs it on the CPU) and CUDA (feature `cuda`, opt-in).
//!
//! Both run a plan through their device-resident executor
//! (`fused_vulkan::DevicePlan`, `fused_cuda::DevicePlan`: the buffers of
//! the verifier's host [`Memory`] uploaded, the whole plan one command
//! buffer on Vulkan and one sequence of launches on one CUDA stream, every
//! buffer read back), falling back to the core's executor
//! ([`fused_core::exec`], one host-slice kernel call per step: upload, one
//! launch, read back) for a plan the device plan refuses (see their docs).
//! The device is opened on first use; a
//! machine without one reports a skip with the reason. Their GEMV kernels
//! take f32 activations, GGML's Q8 activations for some formats, and at
//! most 8 columns: other cases are reported per case as skipped
//! ([`Backend::supports`]).
//! Their results are compared with the reference within the tolerance
//! table (they accumulate in another order), and fused against unfused bit
//! for bit.
//!
//! The timing modes (`perf`, `decode`) need a device-resident executor:
//! the host-slice calls would time the transfers, not the kernels. With
//! the device plans, the graph's buffers are uploaded once, the inputs a
//! plan overwrites in place are restored before each run (not timed), and
//! a run is timed on the device around the whole plan: Vulkan's command
//! buffer by GPU timestamps, CUDA's launches (enqueued on the stream one by
//! one; `cuda-bench` compares that with a CUDA graph replay) by CUDA
//! events. The bandwidth ceiling is a device-to-device copy measured the
//! same way (bytes read plus bytes written).

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use fused_core::Error;
use fused_core::exec::{Executor, StepKernels};
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_core::reference::eval::{GemvMode, Memory};
use fused_core::tensor::BufferId;

use crate::backend::{
    Availability, Backend, RunConfig, RunError, RunStats, TimedPlan, buffer_count,
};

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

/// A device-resident plan executor (`fused_vulkan::DevicePlan`,
/// `fused_cuda::DevicePlan`): what the shared run and timing code below
/// needs of one plan made for one graph.
pub trait ResidentPlan {
    /// The backend's error.
    type Error;

    /// Copies every graph buffer of `mem` to the device.
    fn upload(&mut self, mem: &Memory) -> Result<(), Self::Error>;

    /// Runs the plan once and waits for it.
    fn run(&self) -> Result<(), Self::Error>;

    /// Copies every graph buffer back into `mem`.
    fn download_into(&self, mem: &mut Memory) -> Result<(), Self::Error>;

    /// Restores the graph inputs the plan overwrites in place.
    fn restore_inputs(&self) -> Result<(), Self::Error>;

    /// One run (inputs restored first, not timed), timed on the device.
    fn time_once(&self) -> Result<Duration, Self::Error>;

    /// The plan's launches, barriers and kernel steps as run stats.
    fn run_stats(&self) -> RunStats;
}

/// A GPU device with a device-resident plan executor.
pub trait ResidentDevice: GpuDevice {
    /// Its plan executor, borrowing the device.
    type Plan<'a>: ResidentPlan<Error = Self::Error>
    where
        Self: 'a;

    /// Builds the resident plan of `plan` (made for `g`) over buffers of
    /// the byte sizes `sizes`; refuses what it cannot run with a typed error.
    fn resident<'a>(
        &'a self,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<Self::Plan<'a>, Self::Error>;
}

/// The byte sizes of `mem`'s buffers.
fn sizes(mem: &Memory) -> Result<Vec<usize>, RunError> {
    (0..buffer_count(mem))
        .map(|b| mem.buffer(BufferId(b)).map(<[u8]>::len))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RunError::from)
}

/// [`Backend::run_plan`] through the device plan (buffers uploaded, the
/// plan run, every buffer read back); a plan it refuses (strided tensors,
/// non-F32 activations, broadcasts other than over rows) runs through the
/// host-slice executor instead, which gives the same bits where both run.
pub fn resident_run<D: ResidentDevice>(
    dev: &D,
    g: &Graph,
    plan: &Plan,
    mem: &mut Memory,
    cfg: RunConfig,
) -> Result<RunStats, RunError> {
    match dev.resident(g, plan, cfg.mode, &sizes(mem)?) {
        Ok(mut dp) => {
            dp.upload(mem)
                .and_then(|()| dp.run())
                .and_then(|()| dp.download_into(mem))
                .map_err(D::run_error)?;
            Ok(dp.run_stats())
        }
        Err(e) => match D::run_error(e) {
            RunError::Core(Error::Unsupported(_) | Error::UnsupportedDType { .. }) => {
                host_slice_run(dev, g, plan, mem, cfg)
            }
            other => Err(other),
        },
    }
}

/// [`Backend::time_plans`] through device plans: one per plan, each
/// uploaded once and run once untimed; then the plans run interleaved,
/// each run timed on the device with the inputs it overwrites restored
/// first (not timed).
pub fn resident_time<D: ResidentDevice>(
    dev: &D,
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
            let mut dp = dev.resident(g, p, cfg.mode, &sizes)?;
            dp.upload(mem)?;
            dp.restore_inputs()?;
            dp.run()?; // warm-up
            Ok(dp)
        })
        .collect::<Result<Vec<_>, D::Error>>()
        .map_err(D::run_error)?;
    let mut timed: Vec<TimedPlan> = device_plans
        .iter()
        .map(|dp| TimedPlan {
            times: Vec::with_capacity(reps),
            stats: dp.run_stats(),
        })
        .collect();
    for _ in 0..reps.max(1) {
        for (dp, t) in device_plans.iter().zip(timed.iter_mut()) {
            t.times.push(dp.time_once().map_err(D::run_error)?);
        }
    }
    Ok(timed)
}

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

/// Plans run and are timed on the device ([`resident_run`],
/// [`resident_time`]).
impl<D: ResidentDevice> Backend for GpuBackend<D> {
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
        resident_run(self.ready()?, g, plan, mem, cfg)
    }

    fn time_plans(
        &self,
        g: &Graph,
        plans: &[&Plan],
        mem: &Memory,
        cfg: RunConfig,
        reps: usize,
    ) -> Result<Vec<TimedPlan>, RunError> {
        resident_time(self.ready()?, g, plans, mem, cfg, reps)
    }

    fn bandwidth_gbs(&self, _: usize) -> Option<f64> {
        self.device().ok()?.bandwidth_gbs()
    }
}

#[cfg(feature = "vulkan")]
mod vulkan {
    use std::time::Duration;

    use fused_core::graph::Graph;
    use fused_core::planner::Plan;
    use fused_core::reference::eval::{GemvMode, Memory};
    use fused_vulkan::{ContextOptions, DevicePlan, VulkanBackend, VulkanError};

    use super::{GpuDevice, ResidentDevice, ResidentPlan, RunError};
    use crate::backend::RunStats;

    impl ResidentPlan for DevicePlan<'_> {
        type Error = VulkanError;

        fn upload(&mut self, mem: &Memory) -> Result<(), VulkanError> {
            DevicePlan::upload(self, mem)
        }

        fn run(&self) -> Result<(), VulkanError> {
            DevicePlan::run(self)
        }

        fn download_into(&self, mem: &mut Memory) -> Result<(), VulkanError> {
            DevicePlan::download_into(self, mem)
        }

        fn restore_inputs(&self) -> Result<(), VulkanError> {
            DevicePlan::restore_inputs(self)
        }

        fn time_once(&self) -> Result<Duration, VulkanError> {
            let t = DevicePlan::time_once(self)?;
            Ok(t.device.unwrap_or(t.wall))
        }

        fn run_stats(&self) -> RunStats {
            let s = self.stats();
            RunStats {
                kernel_steps: s.kernel_steps,
                barriers: s.barriers,
                kernel_calls: s.dispatches,
            }
        }
    }

    impl ResidentDevice for VulkanBackend {
        type Plan<'a> = DevicePlan<'a>;

        fn resident<'a>(
            &'a self,
            g: &Graph,
            plan: &Plan,
            mode: GemvMode,
            sizes: &[usize],
        ) -> Result<DevicePlan<'a>, VulkanError> {
            DevicePlan::new(self, g, plan, mode, sizes)
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
    use std::time::Duration;

    use fused_core::graph::Graph;
    use fused_core::planner::Plan;
    use fused_core::reference::eval::{GemvMode, Memory};
    use fused_cuda::{CudaBackend, CudaError, DevicePlan, DeviceVec, Submission};

    use super::{GpuDevice, ResidentDevice, ResidentPlan, RunError};
    use crate::backend::RunStats;

    impl ResidentPlan for DevicePlan<'_> {
        type Error = CudaError;

        fn upload(&mut self, mem: &Memory) -> Result<(), CudaError> {
            DevicePlan::upload(self, mem)
        }

        fn run(&self) -> Result<(), CudaError> {
            DevicePlan::run(self)
        }

        fn download_into(&self, mem: &mut Memory) -> Result<(), CudaError> {
            DevicePlan::download_into(self, mem)
        }

        fn restore_inputs(&self) -> Result<(), CudaError> {
            DevicePlan::restore_inputs(self)
        }

        fn time_once(&self) -> Result<Duration, CudaError> {
            let ms = DevicePlan::time_once(self, Submission::Stream)?;
            Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
        }

        /// Every launch (kernels and added copies) is a kernel call; a
        /// barrier is a step's launch waiting, in stream order, for the step
        /// before (the copies a step adds are ordered inside it; the one
        /// wait for the host is not counted; with
        /// `LaunchOptions::overlap`, GEMVs that start without waiting are
        /// not either: `DevicePlan::waits`).
        fn run_stats(&self) -> RunStats {
            let s = self.stats();
            RunStats {
                kernel_steps: s.kernel_steps,
                barriers: self.waits(),
                kernel_calls: s.enqueued(),
            }
        }
    }

    impl ResidentDevice for CudaBackend {
        type Plan<'a> = DevicePlan<'a>;

        fn resident<'a>(
            &'a self,
            g: &Graph,
            plan: &Plan,
            mode: GemvMode,
            sizes: &[usize],
        ) -> Result<DevicePlan<'a>, CudaError> {
            DevicePlan::new(self, g, plan, mode, sizes)
        }
    }

    /// f32 elements of the copy that measures the bandwidth ceiling (64 MiB each way).
    const CEILING_ELEMS: usize = 16 << 20;

    /// The median of `reps` event-timed runs of `f`, in milliseconds.
    fn median_ms(
        b: &CudaBackend,
        reps: usize,
        mut f: impl FnMut() -> Result<(), CudaError>,
    ) -> Result<f32, CudaError> {
        f()?; // warm-up
        let mut t = (0..reps)
            .map(|_| b.time_ms(&mut f))
            .collect::<Result<Vec<f32>, _>>()?;
        t.sort_by(f32::total_cmp);
        Ok(t[t.len() / 2])
    }

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

        /// The faster of two device-to-device copies of 64 MiB, the
        /// driver's (`cuMemcpyDtoDAsync`) and the crate's 16-byte copy
        /// kernel: bytes read plus bytes written per second, the median of
        /// 5 event-timed runs each.
        fn bandwidth_gbs(&self) -> Option<f64> {
            let src = self.alloc(CEILING_ELEMS).ok()?;
            let mut dst = self.alloc(CEILING_ELEMS).ok()?;
            let bytes = 2.0 * 4.0 * CEILING_ELEMS as f64;
            type Copy = fn(&CudaBackend, &DeviceVec, &mut DeviceVec) -> Result<(), CudaError>;
            let copies: [Copy; 2] = [CudaBackend::copy, CudaBackend::copy_kernel];
            copies
                .into_iter()
                .filter_map(|copy| median_ms(self, 5, || copy(self, &src, &mut dst)).ok())
                .filter(|ms| *ms > 0.0)
                .map(|ms| bytes / (f64::from(ms) * 1e-3) / 1e9)
                .reduce(f64::max)
        }
    }
}
