//! One run of a device plan, command by command (the `lab` feature):
//! [`DevicePlan::profile_dispatches`] records the run once more with a full
//! barrier before every command and a timestamp after it, so that each
//! command's time is the span between the timestamps around it. The
//! barriers serialize what the plan would overlap (independent dispatches
//! between two barriers), so the sum of the spans is more than a run takes;
//! what it answers is which kernels a run's time is made of.

use ash::vk;
use fused_core::launch_profile::LaunchTime;

use super::{Cmd, DevicePlan, create_timestamps};
use crate::error::VulkanError;
use crate::pipeline::Shader;

impl DevicePlan<'_> {
    /// One run of the plan, command by command (see the module docs),
    /// after the graph inputs are restored and one untimed warm-up run:
    /// each dispatch or copy with its device time, in run order. State the
    /// plan keeps (a KV cache) is written by both runs, as by any other.
    pub fn profile_dispatches(&self) -> Result<Vec<LaunchTime>, VulkanError> {
        let ctx = self.backend.context();
        let period = ctx.info().timestamp_period_ns.ok_or_else(|| {
            VulkanError::Unsupported("the device has no timestamp queries".into())
        })?;
        self.restore()?;
        self.run_now()?;
        self.restore()?;
        let d = &ctx.device;
        let count = u32::try_from(self.cmds.len() + 1)
            .map_err(|_| VulkanError::Unsupported("too many commands to profile".into()))?;
        let pool = create_timestamps(d, count)?;
        let recorded = self.record_profile(pool, count);
        let ran = recorded.and_then(|cb| {
            // SAFETY: the command buffer is executable and refers only to
            // objects the plan owns or borrows; the wait covers it.
            let r = unsafe { ctx.submit_and_wait(&[cb], self.fence) };
            let _guard = ctx.kernels.lock();
            // SAFETY: the submission was waited for (a failed wait waits for
            // the device); the command pool is used under the lock.
            unsafe { d.free_command_buffers(ctx.command_pool(), &[cb]) };
            r
        });
        let mut ticks = vec![0u64; count as usize];
        let read = ran.and_then(|()| {
            // SAFETY: every query was written by the run just waited for.
            unsafe {
                d.get_query_pool_results(
                    pool,
                    0,
                    &mut ticks,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )
            }
            .map_err(VulkanError::vk("vkGetQueryPoolResults"))
        });
        // SAFETY: no submission that uses the pool is pending.
        unsafe { d.destroy_query_pool(pool, None) };
        read?;
        let mask = ctx.timestamp_mask();
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

    /// Allocates and records the profiling command buffer over `pool`
    /// (`count` queries: one before the first command, one after each).
    fn record_profile(
        &self,
        pool: vk::QueryPool,
        count: u32,
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
        // SAFETY: `cb` is fresh and recorded under the lock; the query pool
        // has `count` queries, one per command and one more; every other
        // handle is the plan's, as in the run command buffer.
        let recorded = unsafe {
            (|| {
                d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                    .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
                d.cmd_reset_query_pool(cb, pool, 0, count);
                self.entry_barrier(cb);
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, 0);
                self.record_commands(cb, &kernels, Some(pool))?;
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
