//! One run of a device plan, command by command (the `lab` feature):
//! [`LaunchProfiler::profile_launches`] records the run once more with a full
//! barrier before every command and a timestamp after it, so that each
//! command's time is the span between the timestamps around it. The
//! barriers serialize what the plan would overlap (independent dispatches
//! between two barriers), so the sum of the spans is more than a run takes;
//! what it answers is which kernels a run's time is made of.
//!
//! [`LaunchProfiler::profile_leaving_out`] answers how much each kernel costs
//! the run as it is: the run recorded again with each kernel's commands
//! left out in turn (and the barriers only the kept commands need), each
//! recording submitted and timed. The results of such runs are wrong (the
//! left-out kernels' outputs are stale); only their times mean anything.

use ash::vk;
use fused_core::launch_profile::{LaunchProfiler, LaunchTime, LeftOutTime, leave_out_sets};

use super::{Cmd, DevicePlan, create_timestamps};
use crate::error::VulkanError;
use crate::pipeline::Shader;

impl LaunchProfiler for DevicePlan<'_> {
    type Error = VulkanError;

    /// One run of the plan, command by command (see the module docs),
    /// after the graph inputs are restored and one untimed warm-up run:
    /// each dispatch or copy with its device time, in run order. State the
    /// plan keeps (a KV cache) is written by both runs, as by any other.
    fn profile_launches(&self) -> Result<Vec<LaunchTime>, VulkanError> {
        let period = self.timestamp_period()?;
        self.restore()?;
        self.run_now()?;
        self.restore()?;
        let count = u32::try_from(self.cmds.len() + 1)
            .map_err(|_| VulkanError::Unsupported("too many commands to profile".into()))?;
        let ticks = self.with_queries(count, |pool| {
            let cb = self.record_timed(pool, Recording::EachCommand)?;
            self.submit_recorded(cb)?;
            self.read_ticks(pool, count)
        })?;
        let mask = self.backend.context().timestamp_mask();
        Ok(self
            .cmds
            .iter()
            .zip(ticks.windows(2))
            .map(|(cmd, t)| {
                let (kernel, weight_bytes) = describe(cmd);
                let span = t[1].wrapping_sub(t[0]) & mask;
                LaunchTime {
                    kernel,
                    weight_bytes,
                    ms: (span as f64 * f64::from(period) * 1e-6) as f32,
                }
            })
            .collect())
    }

    /// The run recorded `runs` + 1 times over (the first untimed) with
    /// nothing left out, then with each kernel's commands left out in turn,
    /// then without every kernel that streams no weights
    /// ([`leave_out_sets`]), each with the barriers its own commands need:
    /// the median device time of each. So the time a kernel's removal saves
    /// is what it costs the run, overlap and barriers included. The graph
    /// inputs are restored before every run; the plan's state (a KV cache)
    /// and outputs are left as the last, incomplete, run wrote them, so run
    /// the plan again before reading it.
    fn profile_leaving_out(&self, runs: usize) -> Result<Vec<LeftOutTime>, VulkanError> {
        let period = self.timestamp_period()?;
        let mask = self.backend.context().timestamp_mask();
        let described: Vec<(String, u64)> = self.cmds.iter().map(describe).collect();
        let named: Vec<(&str, u64)> = described.iter().map(|(k, w)| (k.as_str(), *w)).collect();
        self.with_queries(2, |pool| {
            let mut out = Vec::new();
            for (left_out, skip) in leave_out_sets(&named) {
                let cb = self.record_timed(pool, Recording::LeavingOut(&skip))?;
                let mut ms = Vec::with_capacity(runs);
                let timed = (0..=runs).try_for_each(|i| -> Result<(), VulkanError> {
                    self.restore()?;
                    self.submit_once(cb)?;
                    let t = self.read_ticks(pool, 2)?;
                    if i > 0 {
                        let span = t[1].wrapping_sub(t[0]) & mask;
                        ms.push((span as f64 * f64::from(period) * 1e-6) as f32);
                    }
                    Ok(())
                });
                self.free_recorded(cb);
                timed?;
                out.push(LeftOutTime::median(left_out, skip.len(), ms));
            }
            Ok(out)
        })
    }
}

impl DevicePlan<'_> {
    /// The device's timestamp period in nanoseconds, or `Unsupported`.
    fn timestamp_period(&self) -> Result<f32, VulkanError> {
        self.backend
            .context()
            .info()
            .timestamp_period_ns
            .ok_or_else(|| VulkanError::Unsupported("the device has no timestamp queries".into()))
    }

    /// `f` over a fresh pool of `count` timestamp queries, destroyed after.
    fn with_queries<T>(
        &self,
        count: u32,
        f: impl FnOnce(vk::QueryPool) -> Result<T, VulkanError>,
    ) -> Result<T, VulkanError> {
        let d = &self.backend.context().device;
        let pool = create_timestamps(d, count)?;
        let r = f(pool);
        // SAFETY: every submission that used the pool was waited for (a
        // failed wait waits for the device).
        unsafe { d.destroy_query_pool(pool, None) };
        r
    }

    /// Submits `cb` (recorded by `record_timed`) once and waits for it.
    fn submit_once(&self, cb: vk::CommandBuffer) -> Result<(), VulkanError> {
        // SAFETY: the command buffer is executable, not pending (every
        // submission is waited for) and refers only to objects the plan
        // owns or borrows.
        unsafe { self.backend.context().submit_and_wait(&[cb], self.fence) }
    }

    /// Submits `cb` once, waits for it and frees it.
    fn submit_recorded(&self, cb: vk::CommandBuffer) -> Result<(), VulkanError> {
        let r = self.submit_once(cb);
        self.free_recorded(cb);
        r
    }

    /// Frees a command buffer `record_timed` made, no longer pending.
    fn free_recorded(&self, cb: vk::CommandBuffer) {
        let ctx = self.backend.context();
        let _guard = ctx.kernels.lock();
        // SAFETY: every submission of `cb` was waited for (a failed wait
        // waits for the device); the command pool is used under the lock.
        unsafe { ctx.device.free_command_buffers(ctx.command_pool(), &[cb]) };
    }

    /// The first `count` queries of `pool`, written by a run waited for.
    fn read_ticks(&self, pool: vk::QueryPool, count: u32) -> Result<Vec<u64>, VulkanError> {
        let mut ticks = vec![0u64; count as usize];
        // SAFETY: the queries were written by the submission just waited
        // for; `ticks` holds `count` of them.
        unsafe {
            self.backend.context().device.get_query_pool_results(
                pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(VulkanError::vk("vkGetQueryPoolResults"))?;
        Ok(ticks)
    }

    /// Allocates and records a timed copy of the run over `pool`: per
    /// `how`, every command alone with a timestamp after each (`pool` has
    /// one query per command and one more), or the run's own barriers with
    /// some commands left out, between two timestamps (`pool` has two).
    fn record_timed(
        &self,
        pool: vk::QueryPool,
        how: Recording<'_>,
    ) -> Result<vk::CommandBuffer, VulkanError> {
        let ctx = self.backend.context();
        let d = &ctx.device;
        let kernels = ctx
            .kernels
            .lock()
            .map_err(|_| VulkanError::Unsupported("kernel cache poisoned".into()))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(ctx.command_pool())
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device; the lock is held.
        let cb = unsafe { d.allocate_command_buffers(&alloc) }
            .map_err(VulkanError::vk("vkAllocateCommandBuffers"))?[0];
        let count = match how {
            Recording::EachCommand => self.cmds.len() as u32 + 1,
            Recording::LeavingOut(_) => 2,
        };
        // SAFETY: `cb` is fresh and recorded under the lock; the query pool
        // has the queries `how` needs (the caller); every other handle is
        // the plan's, as in the run command buffer.
        let recorded = unsafe {
            (|| {
                d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                    .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
                d.cmd_reset_query_pool(cb, pool, 0, count);
                self.entry_barrier(cb);
                match how {
                    Recording::EachCommand => {
                        d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 0);
                        self.record_commands(cb, &kernels, Some(pool), &[])?;
                    }
                    Recording::LeavingOut(skip) => {
                        d.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, pool, 0);
                        self.record_commands(cb, &kernels, None, skip)?;
                        d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 1);
                    }
                }
                self.exit_barrier(cb);
                d.end_command_buffer(cb)
                    .map_err(VulkanError::vk("vkEndCommandBuffer"))
            })()
        };
        if let Err(e) = recorded {
            // SAFETY: never submitted; the lock is held.
            unsafe { d.free_command_buffers(ctx.command_pool(), &[cb]) };
            return Err(e);
        }
        Ok(cb)
    }
}

/// What a timed copy of the run records.
#[derive(Clone, Copy)]
enum Recording<'s> {
    /// Every command alone, a timestamp after each.
    EachCommand,
    /// The run without the commands at these indices (sorted).
    LeavingOut(&'s [usize]),
}

/// A command's kernel name and the weight bytes it streams (a GEMV's
/// weight bindings; 0 for the others).
fn describe(cmd: &Cmd) -> (String, u64) {
    match cmd {
        Cmd::Copy { .. } => ("copy".to_string(), 0),
        Cmd::Dispatch {
            kernel, bindings, ..
        } => {
            let weights = match kernel.shader {
                // Binding 0 holds the weights, binding 4 a gated GEMV's up
                // weights (plan_exec's `gemv_step`).
                Shader::Gemv { .. } | Shader::GemvQ8 { .. } => [0, 4]
                    .iter()
                    .filter_map(|&b| bindings.get(b))
                    .map(|r| r.size)
                    .sum(),
                _ => 0,
            };
            (format!("{:?}", kernel.shader), weights)
        }
    }
}
