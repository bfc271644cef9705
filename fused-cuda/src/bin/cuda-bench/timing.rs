//! Timing: medians of CUDA-event-timed calls behind a head start, device plans
//! timed the same way, and the host's share of each batch.

use crate::data::{randv, weight_bytes};
use fused_core::DType;
use fused_core::acts::{ActQuant, GemvMode};
use fused_core::backend::{Backend, Resident};
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_core::weights::WeightMatrix;
use fused_cuda::{
    CudaBackend, CudaError, DevicePlan, DeviceVec, DeviceWeights, GemvJob, Submission,
};

/// `plan` of `g` made resident through the backend contract
/// ([`Backend::compile`]), as a runtime would; the sections that time it
/// need the device plan, so the host fallback is an error here, with the
/// device executor's reason.
pub(crate) fn device_plan<'a>(
    be: &'a CudaBackend,
    g: &Graph,
    plan: &Plan,
    mode: GemvMode,
    sizes: &[usize],
) -> Result<DevicePlan<'a>, CudaError> {
    match Backend::compile(be, g, plan, mode, sizes)? {
        Resident::Device(dp) => Ok(dp),
        Resident::Host(_, reason) => Err(CudaError::Core(reason)),
    }
}

/// The median of `v` (the upper middle for an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

thread_local! {
    /// The largest ratio of host enqueue time to the device time it had
    /// (the head start and the batch) of one batch since the last
    /// [`report_host`], with that batch's host and device ms per call.
    static HOST_SHARE: std::cell::Cell<(f64, f64, f64)> = const { std::cell::Cell::new((0.0, 0.0, 0.0)) };
    /// The head start's weights, input and output, and the device ms of one
    /// GEMV over them.
    static HEAD_START: std::cell::RefCell<Option<HeadStart>> =
        const { std::cell::RefCell::new(None) };
}

/// What [`head_start`] runs: an F16 GEMV of [`HEAD_START_DIM`]² (134 MB,
/// more than twice the L2), which reads without leaving dirty lines in L2
/// (copies would leave ~60 MB to write back during the timed calls).
struct HeadStart {
    w: DeviceWeights,
    x: DeviceVec,
    y: DeviceVec,
    ms: f64,
}

/// Rows and K of the head start's GEMV.
const HEAD_START_DIM: usize = 8192;

/// Whether [`time_calls`] gives the device a head start
/// (`FUSED_BENCH_HEAD_START=0`: no).
fn head_start_on() -> bool {
    std::env::var("FUSED_BENCH_HEAD_START").map_or(true, |v| v != "0")
}

/// Enqueues GEMVs that keep the device busy for at least `ms` (none where
/// `ms` is 0 or [`head_start_on`] says no) and leave L2 clean; returns the
/// device ms they take.
fn head_start(be: &CudaBackend, ms: f64) -> Result<f64, CudaError> {
    if ms <= 0.0 || !head_start_on() {
        return Ok(0.0);
    }
    HEAD_START.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let n = HEAD_START_DIM;
            let bytes = weight_bytes(DType::F16, n, n, 11);
            let w = be.upload_weights(&WeightMatrix::new(DType::F16, n, n, &bytes)?)?;
            let x = be.upload(&randv(n, 12))?;
            let mut y = be.alloc(n)?;
            let run =
                |y: &mut DeviceVec| be.gemv_batch(&x, 1, ActQuant::F32, &mut [GemvJob::new(&w, y)]);
            run(&mut y)?;
            let ms = f64::from(be.time_ms(|| run(&mut y))?);
            *slot = Some(HeadStart { w, x, y, ms });
        }
        let h = slot.as_mut().expect("just set");
        let calls = (ms / h.ms).ceil().max(1.0);
        for _ in 0..calls as usize {
            be.gemv_batch(&h.x, 1, ActQuant::F32, &mut [GemvJob::new(&h.w, &mut h.y)])?;
        }
        Ok(calls * h.ms)
    })
}

/// Frees the head start's buffers when dropped (declared after the backend,
/// so before the backend goes).
pub(crate) struct HeadStartBuffers;

impl Drop for HeadStartBuffers {
    fn drop(&mut self) {
        HEAD_START.with(|cell| cell.borrow_mut().take());
    }
}

/// Median milliseconds per call of `f(i)` for i = 0, 1, …: batches of
/// `per_batch` calls timed with events, after `warm` batches. Each batch
/// starts behind a head start (GEMVs on the stream, before the start
/// event, 1.5× as long as the host took to enqueue the batch before), so
/// that the device runs the batch's calls back to back however long the host
/// takes to enqueue them: the device's time, not the host's
/// (`FUSED_BENCH_HEAD_START=0`: none). Also times the host's enqueueing of
/// each batch (wall clock): where that is close to the head start and the
/// device time together, the device may have waited for the host, and
/// [`report_host`] says so.
pub(crate) fn time_calls(
    be: &CudaBackend,
    per_batch: usize,
    batches: usize,
    mut f: impl FnMut(usize) -> Result<(), CudaError>,
) -> Result<f64, CudaError> {
    let mut i = 0;
    let mut samples = Vec::with_capacity(batches);
    let mut worst = (0.0f64, 0.0, 0.0);
    let mut last_wall = 0.0;
    for b in 0..batches + 3 {
        let ahead = head_start(be, 1.5 * last_wall)?;
        let mut wall = 0.0;
        let ms = be.time_ms(|| {
            let t0 = std::time::Instant::now();
            for _ in 0..per_batch {
                f(i)?;
                i += 1;
            }
            wall = t0.elapsed().as_secs_f64() * 1e3;
            Ok(())
        })?;
        last_wall = wall;
        if b >= 3 {
            let dev = ms as f64 / per_batch as f64;
            samples.push(dev);
            let ratio = wall / (ahead + ms as f64);
            if ratio > worst.0 {
                worst = (ratio, wall / per_batch as f64, dev);
            }
        }
    }
    HOST_SHARE.with(|c| {
        if worst.0 > c.get().0 {
            c.set(worst);
        }
    });
    Ok(median(samples))
}

/// The head start before each timed plan run: more than the host takes to
/// restore a plan's inputs and enqueue its run (at most a few dozen
/// launches of a few µs each).
const PLAN_HEAD_START_MS: f64 = 0.3;

/// Median device milliseconds of `reps` runs of the device plan `dp`
/// submitted as `how` (after one untimed run), each run event-timed on its
/// own behind a head start of [`PLAN_HEAD_START_MS`]
/// ([`DevicePlan::time_once_queued`]: the input restore does not wait for
/// the device, which would spend the head start; `FUSED_BENCH_HEAD_START=0`:
/// none, [`DevicePlan::run_timed`]'s timing).
pub(crate) fn plan_ms(
    be: &CudaBackend,
    dp: &DevicePlan,
    reps: usize,
    how: Submission,
) -> Result<f64, CudaError> {
    if !head_start_on() {
        let t = dp.run_timed(reps, how)?;
        return Ok(median(t.into_iter().map(f64::from).collect()));
    }
    // Restored inputs and one untimed warm-up run.
    dp.run_timed(0, how)?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        head_start(be, PLAN_HEAD_START_MS)?;
        t.push(f64::from(dp.time_once_queued(how)?));
    }
    Ok(median(t))
}

/// Prints the largest host/device ratio of the batches timed since the
/// last call (for the section `what`), and starts over.
pub(crate) fn report_host(what: &str) {
    let (ratio, host, dev) = HOST_SHARE.with(|c| c.replace((0.0, 0.0, 0.0)));
    println!(
        "\nHost enqueue time, {what}: at most {:.0} % of the device time it had (head start \
         and batch; {:.2} µs host, {:.2} µs device per call){}\n",
        100.0 * ratio,
        host * 1e3,
        dev * 1e3,
        if ratio > 0.8 {
            ": the host may have held the device back there"
        } else {
            ""
        }
    );
}
