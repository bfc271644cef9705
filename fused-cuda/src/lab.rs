//! The lab: what exists to measure the device and the kernels or to A/B
//! them, not to run a model (the `lab` feature; `cuda-bench` and the lab's
//! tests use it). The product API does without all of it.
//!
//! - [`CudaBackend::time_ms`], [`CudaBackend::copy_kernel`]: event timing
//!   of enqueued work, the crate's 16-byte copy kernel;
//! - [`CudaBackend::device`] ([`CudaDevice`]: name, capability, the kernels'
//!   form; [`CudaDevice::probe_axpy`], the end-to-end probe kernel;
//!   [`CudaDevice::handoff_chain`], `src/handoff.rs`);
//! - the occupancy probes behind the fixed-chain copies and the team
//!   kernels ([`CudaBackend::fixed_epilogue_copies`],
//!   [`CudaBackend::team_kernels`]);
//! - a GEMV that writes its output quantized ([`CudaBackend::alloc_acts`],
//!   [`GemvJob::with_quantized_output`](crate::GemvJob::with_quantized_output)),
//!   quantized activations read back ([`CudaBackend::download_acts`]);
//! - timed plan runs ([`DevicePlan::run_timed`],
//!   [`DevicePlan::time_once_queued`]), a run timed launch by launch
//!   (`LaunchProfiler` on `DevicePlan`, `src/launch_profile.rs`), traced
//!   GEMV chains (`src/timeline.rs`), the lab's [`Knob`](crate::Knob)s.

use crate::Submission;
use crate::backend::CudaBackend;
use crate::device::{CudaDevice, driver};
use crate::error::CudaError;
use crate::fixed_epi::FixedEpilogueCopy;
use crate::memory::{DeviceActs, DeviceVec};
use crate::plan_exec::DevicePlan;
use crate::qacts::QuantizedActs;
use crate::teams::TeamKernel;
use crate::tuning::{L2_AHEAD_BYTES, Tuning};
use cust::memory::{CopyDestination, DeviceBuffer};
use fused_core::acts::ActQuant;

/// Threads per block of the probe kernel.
const PROBE_BLOCK: u32 = 256;

/// Checks the lengths of a probe call: `x` and `y` equally long, and short
/// enough to index with the kernel's `u32`.
fn check_axpy_lengths(x: usize, y: usize) -> Result<u32, CudaError> {
    if x != y {
        return Err(fused_core::Error::LengthMismatch {
            what: "probe_axpy: y (against x)",
            expected: x,
            actual: y,
        }
        .into());
    }
    u32::try_from(x).map_err(|_| {
        fused_core::Error::Overflow {
            what: "probe_axpy: length as the kernel's u32",
        }
        .into()
    })
}

/// The tuning's switches as one value with public fields, for A/B runs
/// ([`CudaBackend::options`], [`CudaBackend::set_options`]); the kernel
/// shapes stay as the backend's [`Tuning`] has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Programmatic dependent launch (`Knob::Pdl`).
    pub pdl: bool,
    /// Epilogue operands loaded when a GEMV block starts (`Knob::EarlyOperands`).
    pub early_operands: bool,
    /// Independent GEMVs overlap (`Knob::Overlap`).
    pub overlap: bool,
    /// Independent one-column GEMVs of one kernel as one launch (`Knob::Group`).
    pub group: bool,
    /// A plan's GEMV writes the next one's quantized input (`Knob::FoldQuantizers`).
    pub fold_quantizers: bool,
    /// Bytes a plan's integer GEMV asks L2 for ahead (`Knob::L2AheadBytes`).
    pub l2_ahead: usize,
    /// Fixed-chain kernel copies (`Knob::FixedEpilogues`).
    pub fixed_epilogues: bool,
    /// The team kernels (`Knob::Teams`).
    pub teams: bool,
}

impl Default for LaunchOptions {
    fn default() -> LaunchOptions {
        LaunchOptions::of(&Tuning::default())
    }
}

impl LaunchOptions {
    /// The switches of `t`.
    fn of(t: &Tuning) -> LaunchOptions {
        LaunchOptions {
            pdl: t.pdl,
            early_operands: t.early_operands,
            overlap: t.overlap,
            group: t.group,
            fold_quantizers: t.fold_quantizers,
            l2_ahead: t.l2_ahead,
            fixed_epilogues: t.fixed_epilogues,
            teams: t.teams,
        }
    }
}

/// The table's L2 look-ahead bytes (`Knob::L2AheadBytes`' default).
pub const L2_AHEAD_DEFAULT: usize = L2_AHEAD_BYTES;

impl CudaBackend {
    /// The switches in effect (programmatic dependent launch only where
    /// the device runs it, overlap only with it).
    pub fn options(&self) -> LaunchOptions {
        LaunchOptions::of(&self.tuning_in_effect())
    }

    /// Sets the tuning's switches to `o` (the kernel shapes unchanged).
    pub fn set_options(&self, o: LaunchOptions) {
        let t = self.tuning();
        self.set_tuning(Tuning {
            pdl: o.pdl,
            early_operands: o.early_operands,
            overlap: o.overlap,
            group: o.group,
            fold_quantizers: o.fold_quantizers,
            l2_ahead: o.l2_ahead,
            fixed_epilogues: o.fixed_epilogues,
            teams: o.teams,
            ..t
        });
    }

    /// Kernel launches (and device-to-device copies) since creation or the
    /// last [`CudaBackend::reset_launches`].
    pub fn launches(&self) -> u64 {
        self.launch_count()
    }

    /// Sets the launch counter to zero.
    pub fn reset_launches(&self) {
        self.reset_launch_count();
    }

    /// The device.
    pub fn device(&self) -> &CudaDevice {
        self.dev()
    }

    /// Milliseconds the work that `f` enqueues takes on the device, measured
    /// with CUDA events recorded around it on the backend's stream.
    pub fn time_ms(&self, f: impl FnOnce() -> Result<(), CudaError>) -> Result<f32, CudaError> {
        self.event_time_ms(f)
    }

    /// `out = a` by the crate's own copy kernel (16-byte loads and stores;
    /// the length must be a multiple of 4).
    pub fn copy_kernel(&self, a: &DeviceVec, out: &mut DeviceVec) -> Result<(), CudaError> {
        self.copy4(a, out)
    }

    /// The GEMV kernels' copies with an epilogue chain compiled in, each
    /// with its and its kernel's blocks per SM on this device: a launch
    /// runs a copy only where the two are equal ([`FixedEpilogueCopy::used`]).
    pub fn fixed_epilogue_copies(&self) -> &[FixedEpilogueCopy] {
        self.fixed_copies.all()
    }

    /// The GEMV kernels that also come with several teams a block, each
    /// with its and its team kernel's blocks per SM on this device: a
    /// launch runs the team kernel only where it holds as many teams an SM
    /// as the plain kernel blocks ([`TeamKernel::used`]).
    pub fn team_kernels(&self) -> &[TeamKernel] {
        self.team_kernels.all()
    }

    /// Zeroed quantized activations: `n_cols` columns of `k` in `mode`
    /// ([`ActQuant::Q8_0`], [`ActQuant::Q8_1`] or [`ActQuant::Q8_K`]; `k` a
    /// multiple of its block), for [`GemvJob::with_quantized_output`](crate::GemvJob::with_quantized_output).
    pub fn alloc_acts(
        &self,
        mode: ActQuant,
        k: usize,
        n_cols: usize,
    ) -> Result<DeviceActs, CudaError> {
        self.zeroed_acts(mode, k, n_cols)
    }

    /// Waits for the stream and copies quantized activations to the host.
    pub fn download_acts(&self, acts: &DeviceActs) -> Result<QuantizedActs, CudaError> {
        self.synchronize()?;
        let mut all = vec![0u8; acts.buf.len()];
        acts.buf
            .copy_to(&mut all[..])
            .map_err(driver("copy to the host"))?;
        let l = &acts.layout;
        let word = |b: &[u8]| [b[0], b[1], b[2], b[3]];
        Ok(QuantizedActs {
            codes: l.codes_in_element_order(&all),
            scales: all[l.scales..l.scales + 4 * l.n_scales()]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(word(b)))
                .collect(),
            sums: all[l.sums..l.sums + 4 * l.n_sums()]
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(word(b)))
                .collect(),
        })
    }
}

impl CudaDevice {
    /// Runs the probe kernel: `y[i] = a·x[i] + y[i]` (one fused multiply-add).
    ///
    /// `x` and `y` must be equally long (at most `u32::MAX`).
    pub fn probe_axpy(&self, a: f32, x: &[f32], y: &mut [f32]) -> Result<(), CudaError> {
        let n = check_axpy_lengths(x.len(), y.len())?;
        if n == 0 {
            return Ok(());
        }
        let _use = self.make_current()?;
        let x_dev = DeviceBuffer::from_slice(x).map_err(driver("copy x to the device"))?;
        let y_dev = DeviceBuffer::from_slice(y).map_err(driver("copy y to the device"))?;
        let function = self
            .probe
            .get_function("fused_probe_axpy_f32")
            .map_err(driver("find fused_probe_axpy_f32"))?;
        let stream = &self.stream;
        let grid = n.div_ceil(PROBE_BLOCK);
        // SAFETY: the arguments match the kernel's signature in kernels/probe.cu,
        // (float, const float*, float*, unsigned int), in order and type; both
        // buffers hold `n` f32 and stay alive until the stream is synchronised
        // below; the kernel touches only indices `< n`.
        let launched = unsafe {
            cust::launch!(function<<<grid, PROBE_BLOCK, 0, stream>>>(
                a,
                x_dev.as_device_ptr(),
                y_dev.as_device_ptr(),
                n
            ))
        };
        launched.map_err(driver("launch fused_probe_axpy_f32"))?;
        stream
            .synchronize()
            .map_err(driver("run fused_probe_axpy_f32"))?;
        y_dev.copy_to(y).map_err(driver("copy y to the host"))?;
        Ok(())
    }
}

impl DevicePlan<'_> {
    /// Runs the plan `reps` times submitted as `how` says, each run
    /// starting from the written inputs (restored before it, not timed),
    /// after one untimed warm-up run: the device milliseconds of each, from
    /// CUDA events recorded around the whole run.
    pub fn run_timed(&self, reps: usize, how: Submission) -> Result<Vec<f32>, CudaError> {
        self.restore()?;
        self.run_as(how)?;
        (0..reps)
            .map(|_| {
                self.restore()?;
                self.time_run(how)
            })
            .collect()
    }

    /// As [`DevicePlan::time_once_as`], but the host does not wait between the
    /// restore and the run: the restore copies and the timed run are
    /// enqueued behind whatever the stream holds, so that work enqueued
    /// before (a benchmark's head start) keeps the device busy while the
    /// host enqueues the run, and the events time the device alone.
    pub fn time_once_queued(&self, how: Submission) -> Result<f32, CudaError> {
        self.enqueue(&self.restore)
            .or_else(|e| self.finish(Err(e)))?;
        self.time_run(how)
    }

    /// Whether a CUDA graph of the run has been captured.
    pub fn graph_captured(&self) -> bool {
        self.has_graph()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axpy_lengths() {
        assert_eq!(check_axpy_lengths(7, 7), Ok(7));
        assert!(matches!(
            check_axpy_lengths(7, 6),
            Err(CudaError::Core(fused_core::Error::LengthMismatch { .. }))
        ));
        #[cfg(target_pointer_width = "64")]
        assert!(matches!(
            check_axpy_lengths(1 << 32, 1 << 32),
            Err(CudaError::Core(fused_core::Error::Overflow { .. }))
        ));
    }
}
