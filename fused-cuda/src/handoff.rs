//! How fast one kernel of a dependent chain starts on the results of the
//! kernel before it: a measurement of the device, not a kernel of the
//! library.
//!
//! Every GEMV the library launches waits for its predecessor with
//! `griddepcontrol.wait` (programmatic dependent launch, `src/pdl.rs`),
//! and on the H200 that wait is most of what a dependent call costs beyond
//! its bytes (BENCHMARKS.md). Lab only (the `lab` feature). [`CudaDevice::handoff_chain`] runs
//! a chain of tiny kernels (`fused_probe_handoff` in `kernels/probe.cu`),
//! each block reading elements all over the vector the kernel before
//! wrote, with each
//! [`Handoff`], so that the wait's cost can be set against other ways to
//! hand results over. `cuda-bench` prints the table.

/// How each kernel of a [`CudaDevice::handoff_chain`] waits for the one
/// before it.
///
/// [`CudaDevice::handoff_chain`]: crate::CudaDevice::handoff_chain
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Launched normally: the stream starts a kernel when the one before
    /// has completed.
    Stream,
    /// Programmatic dependent launch: the kernel starts early, then waits
    /// with `griddepcontrol.wait` until the previous grid has completed and
    /// its writes are visible (how the library's kernels wait).
    Grid,
    /// Programmatic dependent launch, and a counter instead of the grid
    /// wait: each block of the previous kernel raises it (a release) after
    /// its write; one thread a block polls it (acquire) until every block
    /// has.
    Flag,
    /// As [`Handoff::Flag`], with a 64 ns sleep between polls.
    FlagNap,
    /// Programmatic dependent launch and no wait at all: how fast launches
    /// follow one another. Timing only; the results are undefined.
    Unordered,
}

impl Handoff {
    /// Every kind, in the table's order.
    pub const ALL: [Handoff; 5] = [
        Handoff::Stream,
        Handoff::Grid,
        Handoff::Flag,
        Handoff::FlagNap,
        Handoff::Unordered,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Handoff::Stream => "stream order",
            Handoff::Grid => "PDL, griddepcontrol.wait",
            Handoff::Flag => "PDL, counter polled",
            Handoff::FlagNap => "PDL, counter polled, 64 ns naps",
            Handoff::Unordered => "PDL, no wait (unordered)",
        }
    }

    /// Whether a chain's result is defined (every kind but
    /// [`Handoff::Unordered`]).
    pub fn ordered(self) -> bool {
        self != Handoff::Unordered
    }

    /// The kernel's `mode` argument (`HANDOFF_*` in `kernels/probe.cu`).
    fn code(self) -> u32 {
        match self {
            Handoff::Stream => 0,
            Handoff::Grid => 1,
            Handoff::Flag => 2,
            Handoff::FlagNap => 3,
            Handoff::Unordered => 4,
        }
    }
}

/// One timed chain of [`CudaDevice::handoff_chain`].
///
/// [`CudaDevice::handoff_chain`]: crate::CudaDevice::handoff_chain
#[derive(Clone, Debug, PartialEq)]
pub struct HandoffRun {
    /// Device time of the chain (CUDA events) divided by its kernels.
    pub micros_per_kernel: f64,
    /// The vector the last kernel wrote.
    pub result: Vec<u32>,
}

/// Threads a block of `fused_probe_handoff` (its `__launch_bounds__`),
/// and the elements of the previous vector each block reads.
const HANDOFF_BLOCK: usize = 128;

/// The vector a chain of `kernels` handoff kernels leaves, on the host:
/// each kernel writes, for every block `b` of `n = input.len()`,
/// `out[b] = 3·Σ_t in[(b + t·s) mod n] + b + 1` (wrapping u32) over the
/// block's 128 threads `t`, `s = max(1, n / 128)`.
pub fn handoff_expected(input: &[u32], kernels: usize) -> Vec<u32> {
    let n = input.len();
    let stride = (n / HANDOFF_BLOCK).max(1);
    let mut v = input.to_vec();
    for _ in 0..kernels {
        v = (0..n)
            .map(|b| {
                let sum = (0..HANDOFF_BLOCK)
                    .map(|t| v[(b + t * stride) % n])
                    .fold(0u32, u32::wrapping_add);
                sum.wrapping_mul(3).wrapping_add(b as u32 + 1)
            })
            .collect();
    }
    v
}

/// The most blocks (and vector elements) a handoff chain takes.
pub const HANDOFF_MAX_BLOCKS: usize = 1 << 16;

/// The most kernels a handoff chain takes.
pub const HANDOFF_MAX_KERNELS: usize = 1 << 12;

mod run {
    use super::{HANDOFF_MAX_BLOCKS, HANDOFF_MAX_KERNELS, Handoff, HandoffRun};
    use crate::device::{CudaDevice, driver};
    use crate::error::CudaError;
    use crate::params::arg;
    use crate::pdl;
    use cust::event::{Event, EventFlags};
    use cust::memory::{CopyDestination, DeviceBuffer, DevicePointer};
    use fused_core::Error;

    /// Threads a block of `fused_probe_handoff`, as the driver takes it.
    const BLOCK: u32 = super::HANDOFF_BLOCK as u32;

    /// `Ok` when `count` is 1 to `max`, else a length error saying `what`.
    fn check_count(what: &'static str, count: usize, max: usize) -> Result<(), CudaError> {
        if (1..=max).contains(&count) {
            return Ok(());
        }
        Err(Error::LengthMismatch {
            what,
            expected: count.clamp(1, max),
            actual: count,
        }
        .into())
    }

    impl CudaDevice {
        /// Runs `kernels` handoff kernels one after the other on the
        /// device's stream, each over `input.len()` blocks, each block
        /// reading 128 elements all over the vector the kernel before
        /// wrote, each kernel waiting as `handoff` says; the chain starts behind a one-thread kernel that spins
        /// for `head_start_cycles` SM clocks, so that the host has
        /// enqueued the chain before it runs and the time is the device's.
        ///
        /// `input` holds 1 to [`HANDOFF_MAX_BLOCKS`] values, `kernels` is
        /// 1 to [`HANDOFF_MAX_KERNELS`]; else `Err`. The result equals
        /// [`handoff_expected`](super::handoff_expected) for every ordered
        /// kind.
        pub fn handoff_chain(
            &self,
            handoff: Handoff,
            kernels: usize,
            input: &[u32],
            head_start_cycles: u64,
        ) -> Result<HandoffRun, CudaError> {
            let blocks = input.len();
            check_count(
                "handoff chain: blocks (1 to HANDOFF_MAX_BLOCKS)",
                blocks,
                HANDOFF_MAX_BLOCKS,
            )?;
            check_count(
                "handoff chain: kernels (1 to HANDOFF_MAX_KERNELS)",
                kernels,
                HANDOFF_MAX_KERNELS,
            )?;
            let _use = self.make_current()?;
            let n = blocks as u32;
            let wait_count = n;
            let ping = DeviceBuffer::from_slice(input).map_err(driver("copy the chain input"))?;
            let pong = DeviceBuffer::from_slice(input).map_err(driver("copy the chain input"))?;
            let flags = DeviceBuffer::<u32>::zeroed(kernels).map_err(driver("zero the flags"))?;
            let step = self
                .probe
                .get_function("fused_probe_handoff")
                .map_err(driver("find fused_probe_handoff"))?;
            let spin = self
                .probe
                .get_function("fused_probe_spin")
                .map_err(driver("find fused_probe_spin"))?;
            let start = Event::new(EventFlags::DEFAULT).map_err(driver("create an event"))?;
            let stop = Event::new(EventFlags::DEFAULT).map_err(driver("create an event"))?;
            let stream = &self.stream;
            // SAFETY: one u64 argument, as fused_probe_spin takes; the
            // kernel touches no memory.
            unsafe { stream.launch(&spin, 1, 1, 0, &[arg(&head_start_cycles)]) }
                .map_err(driver("launch fused_probe_spin"))?;
            start.record(stream).map_err(driver("record an event"))?;
            let mode = handoff.code();
            for i in 0..kernels {
                let (src, dst) = if i % 2 == 0 {
                    (&ping, &pong)
                } else {
                    (&pong, &ping)
                };
                let src_ptr = src.as_device_ptr();
                let dst_ptr = dst.as_device_ptr();
                let wait_flag = if i == 0 {
                    DevicePointer::<u32>::null()
                } else {
                    flags.as_device_ptr().wrapping_add(i - 1)
                };
                let signal_flag = flags.as_device_ptr().wrapping_add(i);
                let args = [
                    arg(&src_ptr),
                    arg(&dst_ptr),
                    arg(&n),
                    arg(&mode),
                    arg(&wait_flag),
                    arg(&signal_flag),
                    arg(&wait_count),
                ];
                // Both launches below: the arguments match
                // fused_probe_handoff's (const u32*, u32*, u32, u32,
                // const u32*, u32*, u32) in order and type; `src` and `dst`
                // hold `n` u32 and the kernel's `n` blocks touch indices
                // below `n`; the flags are `kernels` u32, `wait_flag` (null
                // for the first kernel) and `signal_flag` within them.
                // Every buffer lives until the stream is synchronised
                // below. Kernels that race (Handoff::Unordered) only race
                // on these buffers' values, never outside them.
                let launched = if handoff == Handoff::Stream {
                    // SAFETY: as above.
                    unsafe { stream.launch(&step, n, BLOCK, 0, &args) }
                        .map_err(driver("launch fused_probe_handoff"))
                } else {
                    // SAFETY: as above; the kernel waits as `mode` says
                    // (griddepcontrol.wait or the counter) before it reads
                    // what the kernel before it writes, but for the
                    // unordered kind, whose values are not used.
                    let r = unsafe {
                        pdl::launch(step.to_raw(), n, BLOCK, 0, stream.as_inner(), &args)
                    };
                    crate::device::check_result(r, "launch fused_probe_handoff (PDL)")
                };
                launched?;
            }
            stop.record(stream).map_err(driver("record an event"))?;
            stop.synchronize()
                .map_err(driver("run the handoff chain"))?;
            let ms = stop
                .elapsed_time_f32(&start)
                .map_err(driver("read an event time"))?;
            let last = if kernels % 2 == 1 { &pong } else { &ping };
            let mut result = vec![0u32; blocks];
            last.copy_to(&mut result[..])
                .map_err(driver("copy the chain's result to the host"))?;
            Ok(HandoffRun {
                micros_per_kernel: f64::from(ms) * 1e3 / kernels as f64,
                result,
            })
        }
    }
}
