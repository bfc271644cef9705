//! Device-time medians of recorded commands (timestamp queries around
//! each submission), for the copy-bandwidth ceiling and the lab's timings.

use std::time::{Duration, Instant};

use crate::context::{Command, VulkanContext};
use crate::error::VulkanError;

/// How long each case runs untimed before it is timed.
const WARM_UP: Duration = Duration::from_millis(300);

/// The device time one timed submission aims for: NVIDIA's driver lowers
/// the clocks of a GPU that sits idle between short submissions, so each
/// one runs milliseconds, as a model's stream of kernels does (the
/// measurements behind it are in `BENCHMARKS.md`).
pub(crate) const SUBMISSION_NS: f64 = 4e6;
/// The most repetitions of a command list in one submission.
pub(crate) const MAX_ROUNDS: usize = 1024;

/// Submissions per host call while warming up.
const WARM_UP_BATCH: usize = 4;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Submits `commands` (recorded once, untimed) until [`WARM_UP`] has
/// passed, at least once.
fn warm_up(
    ctx: &VulkanContext,
    commands: &[Command<'_>],
    ordered: bool,
) -> Result<(), VulkanError> {
    let start = Instant::now();
    let mut unused = Vec::new();
    loop {
        ctx.submit_times(commands, false, ordered, WARM_UP_BATCH, &mut unused)?;
        if start.elapsed() >= WARM_UP {
            return Ok(());
        }
    }
}

/// The median device time, in nanoseconds, of one pass of `commands` (with
/// barriers between them) over `reps` submissions (at least one): passes
/// repeated in each submission until it takes about [`SUBMISSION_NS`],
/// after a warm-up.
pub(crate) fn median_time(
    ctx: &VulkanContext,
    commands: &[Command<'_>],
    reps: usize,
) -> Result<f64, VulkanError> {
    let one = ctx.submit(commands, true)?.unwrap_or(f64::NAN);
    let rounds = rounds_for(one);
    let repeated: Vec<Command<'_>> = commands
        .iter()
        .cycle()
        .take(commands.len() * rounds)
        .cloned()
        .collect();
    median_time_of_rounds(ctx, &repeated, true, rounds, reps)
}

/// How many passes of `one_ns` fill a submission of [`SUBMISSION_NS`].
fn rounds_for(one_ns: f64) -> usize {
    if one_ns.is_finite() && one_ns > 0.0 {
        ((SUBMISSION_NS / one_ns).ceil() as usize).clamp(1, MAX_ROUNDS)
    } else {
        1
    }
}

/// The median device time of `commands` divided by `per` (the passes or
/// calls they hold), after a warm-up; barriers between the commands only
/// when `ordered`.
pub(crate) fn median_time_of_rounds(
    ctx: &VulkanContext,
    commands: &[Command<'_>],
    ordered: bool,
    per: usize,
    reps: usize,
) -> Result<f64, VulkanError> {
    warm_up(ctx, commands, ordered)?;
    let mut times = Vec::with_capacity(reps.max(1));
    ctx.submit_times(commands, true, ordered, reps.max(1), &mut times)?;
    Ok(median(
        times.into_iter().map(|t| t / per.max(1) as f64).collect(),
    ))
}
