//! Host mirrors of a device plan's small inputs and outputs, so that a run
//! with its input written and its output read is one submission, not
//! three: where the graph buffers are device local (reached through
//! staging copies), each graph input of at most [`MIRROR_MAX`] bytes (the
//! embedding of a token, its position, a norm's weight) has a copy in
//! host-visible memory and a recorded copy to its place, and, where the
//! plan overwrites it (a residual stream that starts as the token's
//! embedding), to its pristine copy too, which the next run submits with
//! itself once a write changed the mirror; each graph output of at most [`MIRROR_MAX`] bytes (the greedy
//! token) is copied into host-visible memory at the end of every run. A
//! write that a mirrored input covers then only fills its mirror, and a
//! read of an output since the last run only reads its mirror.
//!
//! An input's mirror always holds what was last written there (every
//! write updates the mirrors it overlaps), so reads of inputs the plan does
//! not overwrite are served from it, and of those it overwrites until the
//! next run; an output's mirror is trusted only from a run until the next
//! restore (a write updates it too).

use std::cell::Cell;

use ash::vk;
use fused_core::graph::{Graph, Op};

use super::{Builder, Region, Slot, any_access, work_stages, write_access};
use crate::context::{Buffer, VulkanContext};
use crate::error::VulkanError;

/// The largest tensor mirrored, in bytes.
pub(crate) const MIRROR_MAX: u64 = 64 << 10;

/// A graph region and where its copy lies in a mirror buffer.
#[derive(Clone, Copy, Debug)]
struct Mirrored {
    region: Region,
    at: u64,
    /// An input the plan overwrites: its pristine copy, which the mirror's
    /// copy also updates.
    pristine: Option<Region>,
}

/// The mirrors of one plan (none where its buffers are host visible).
pub(crate) struct HostMirrors<'a> {
    inputs: Vec<Mirrored>,
    outputs: Vec<Mirrored>,
    upload: Option<Buffer<'a>>,
    readback: Option<Buffer<'a>>,
    /// Each input's recorded copy from its mirror to its place (recorded
    /// with the run, freed with the plan).
    pub(super) copies: Vec<vk::CommandBuffer>,
    /// Each input's mirror differs from the device (a write since the last
    /// run).
    dirty: Vec<Cell<bool>>,
    /// The outputs' mirrors hold what the last run left.
    fresh: Cell<bool>,
}

impl<'a> HostMirrors<'a> {
    /// The mirrors for the graph `g` built by `b`: its small inputs (with
    /// the pristine copy, from `pristine`, of each that a command of
    /// `written` overwrites), and its small outputs (none where the
    /// device's buffers are host visible).
    pub(super) fn new(
        ctx: &'a VulkanContext,
        g: &Graph,
        b: &Builder<'_, '_>,
        written: &[Region],
        pristine: &[(Region, usize)],
    ) -> Result<HostMirrors<'a>, VulkanError> {
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        let (mut up, mut back) = (0u64, 0u64);
        // Host-visible buffers are written and read in place: no mirrors.
        let nodes = if ctx.info().host_visible_buffers {
            &[]
        } else {
            g.nodes()
        };
        for node in nodes {
            let Ok(region) = b.region(node.tensor()) else {
                continue;
            };
            if region.size == 0 || region.size > MIRROR_MAX {
                continue;
            }
            let input = node.op() == Op::Input && !node.is_state();
            let kept = pristine
                .iter()
                .find(|(r, _)| *r == region)
                .map(|&(r, s)| Region {
                    slot: Slot::Scratch(s),
                    offset: 0,
                    size: r.size,
                });
            let overwritten = written.iter().any(|w| w.overlaps(&region));
            if input && (!overwritten || kept.is_some()) {
                inputs.push(Mirrored {
                    region,
                    at: up,
                    pristine: kept,
                });
                up += region.size.next_multiple_of(4);
            }
            if node.is_output() {
                outputs.push(Mirrored {
                    region,
                    at: back,
                    pristine: None,
                });
                back += region.size.next_multiple_of(4);
            }
        }
        let host = |n: u64| (n > 0).then(|| ctx.host_buffer(n)).transpose();
        let dirty = inputs.iter().map(|_| Cell::new(false)).collect();
        Ok(HostMirrors {
            inputs,
            outputs,
            upload: host(up)?,
            readback: host(back)?,
            copies: Vec::new(),
            dirty,
            fresh: Cell::new(false),
        })
    }

    /// How many inputs are mirrored (the command buffers
    /// [`HostMirrors::record_copies`] needs).
    pub(super) fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Records each input's copy from its mirror to its place (and to its
    /// pristine copy) into `cbs` (one each, fresh), which are then to be
    /// kept in [`HostMirrors::copies`]. The run after them orders them
    /// before its commands with its entry barrier.
    ///
    /// # Safety
    /// Each of `cbs` is a fresh primary command buffer of this device;
    /// `buffer` gives each slot's live buffer.
    pub(super) unsafe fn record_copies(
        &self,
        d: &ash::Device,
        cbs: &[vk::CommandBuffer],
        buffer: impl Fn(Slot) -> vk::Buffer,
    ) -> Result<(), VulkanError> {
        let Some(up) = &self.upload else {
            return Ok(());
        };
        for (m, &cb) in self.inputs.iter().zip(cbs) {
            let copy = vk::BufferCopy {
                src_offset: m.at,
                dst_offset: m.region.offset,
                size: m.region.size,
            };
            // SAFETY: the caller's guarantee; both ranges lie in their
            // buffers.
            unsafe {
                d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                    .map_err(VulkanError::vk("vkBeginCommandBuffer"))?;
                d.cmd_copy_buffer(cb, up.buffer, buffer(m.region.slot), &[copy]);
                if let Some(p) = m.pristine {
                    let keep = vk::BufferCopy {
                        dst_offset: p.offset,
                        ..copy
                    };
                    d.cmd_copy_buffer(cb, up.buffer, buffer(p.slot), &[keep]);
                }
                d.end_command_buffer(cb)
                    .map_err(VulkanError::vk("vkEndCommandBuffer"))?;
            }
        }
        Ok(())
    }

    /// The copies the next run submits before itself: those of the inputs
    /// written since the last run.
    pub(super) fn pending(&self) -> Vec<vk::CommandBuffer> {
        self.copies
            .iter()
            .zip(&self.dirty)
            .filter(|(_, d)| d.get())
            .map(|(&cb, _)| cb)
            .collect()
    }

    /// Records a barrier and the copies of the outputs to their mirrors (at
    /// the end of a run, before its exit barrier).
    ///
    /// # Safety
    /// `cb` is recording; `buffer` gives each slot's live buffer.
    pub(super) unsafe fn record_readbacks(
        &self,
        d: &ash::Device,
        cb: vk::CommandBuffer,
        buffer: impl Fn(Slot) -> vk::Buffer,
    ) {
        let Some(back) = &self.readback else { return };
        // SAFETY: the caller's guarantee.
        unsafe { transfer_barrier(d, cb) };
        for m in &self.outputs {
            let copy = vk::BufferCopy {
                src_offset: m.region.offset,
                dst_offset: m.at,
                size: m.region.size,
            };
            // SAFETY: the caller's guarantee; both ranges lie in their
            // buffers.
            unsafe { d.cmd_copy_buffer(cb, buffer(m.region.slot), back.buffer, &[copy]) };
        }
    }

    /// After a run: the inputs' copies are done and the outputs' mirrors
    /// current (or not, after a failed run).
    pub(super) fn ran(&self, ok: bool) {
        if ok {
            self.dirty.iter().for_each(|d| d.set(false));
        }
        self.fresh.set(ok);
    }

    /// After a restore, which may change an output.
    pub(super) fn restored(&self) {
        self.fresh.set(false);
    }

    /// Puts `bytes`, written at byte `offset` of graph buffer `slot`, into
    /// every mirror they overlap; `true` where the inputs' mirrors alone
    /// cover them (the next run copies them to their place).
    pub(super) fn write(
        &self,
        ctx: &VulkanContext,
        slot: Slot,
        offset: u64,
        bytes: &[u8],
    ) -> Result<bool, VulkanError> {
        let end = offset + bytes.len() as u64;
        let mut covered = false;
        let inputs = self.inputs.iter().zip(self.dirty.iter().map(Some));
        let outputs = self.outputs.iter().zip(std::iter::repeat(None));
        for (m, dirty) in inputs.chain(outputs) {
            let buf = if dirty.is_some() {
                &self.upload
            } else {
                &self.readback
            };
            let (Some(buf), true) = (buf, m.region.slot == slot) else {
                continue;
            };
            let (r, at) = (m.region, m.at);
            let Some((lo, hi)) = clip(&r, offset, end) else {
                continue;
            };
            let part = &bytes[(lo - offset) as usize..(hi - offset) as usize];
            ctx.write_at(buf, (at + lo - r.offset) as usize, part)?;
            if let Some(d) = dirty {
                d.set(true);
                covered |= lo == offset && hi == end;
            }
        }
        Ok(covered)
    }

    /// The inputs whose mirrors hold what their places will hold at the
    /// next run's start: always for an input no command writes, and
    /// for one the plan overwrites until the run that uploads it.
    fn current_inputs(&self) -> impl Iterator<Item = &Mirrored> {
        self.inputs
            .iter()
            .zip(&self.dirty)
            .filter(|(m, d)| m.pristine.is_none() || d.get())
            .map(|(m, _)| m)
    }

    /// Whether `r` is a mirrored input's whole region whose pristine copy
    /// the mirror's copy updates.
    pub(super) fn keeps_pristine(&self, r: &Region) -> bool {
        self.inputs
            .iter()
            .any(|m| m.region == *r && m.pristine.is_some())
    }

    /// Puts the inputs' mirrors' bytes over `out`, read from the device at
    /// byte `offset` of graph buffer `slot`: a write they covered reaches
    /// the device only at the next run.
    pub(super) fn overlay_inputs(
        &self,
        ctx: &VulkanContext,
        slot: Slot,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), VulkanError> {
        let Some(up) = &self.upload else {
            return Ok(());
        };
        let end = offset + out.len() as u64;
        for m in self.current_inputs().filter(|m| m.region.slot == slot) {
            let (r, at) = (m.region, m.at);
            if let Some((lo, hi)) = clip(&r, offset, end) {
                let part = &mut out[(lo - offset) as usize..(hi - offset) as usize];
                ctx.read_at(up, (at + lo - r.offset) as usize, part)?;
            }
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at byte `offset` of graph buffer `slot` from
    /// a mirror that holds them all and is current; `false` where none
    /// does.
    pub(super) fn read(
        &self,
        ctx: &VulkanContext,
        slot: Slot,
        offset: u64,
        out: &mut [u8],
    ) -> Result<bool, VulkanError> {
        let end = offset + out.len() as u64;
        let inside = |m: &&Mirrored| {
            m.region.slot == slot
                && m.region.offset <= offset
                && end <= m.region.offset + m.region.size
        };
        let mut fresh = self.outputs.iter().filter(|_| self.fresh.get());
        let found = match self.current_inputs().find(inside) {
            Some(m) => Some((m, &self.upload)),
            None => fresh.find(inside).map(|m| (m, &self.readback)),
        };
        let Some((m, Some(buf))) = found else {
            return Ok(false);
        };
        ctx.read_at(buf, (m.at + offset - m.region.offset) as usize, out)?;
        Ok(true)
    }
}

/// Orders copies and dispatches on either side of it.
///
/// # Safety
/// `cb` is recording.
unsafe fn transfer_barrier(d: &ash::Device, cb: vk::CommandBuffer) {
    let stages = work_stages();
    let m = vk::MemoryBarrier::default()
        .src_access_mask(write_access())
        .dst_access_mask(any_access());
    // SAFETY: the caller's guarantee.
    unsafe {
        d.cmd_pipeline_barrier(
            cb,
            stages,
            stages,
            vk::DependencyFlags::empty(),
            &[m],
            &[],
            &[],
        )
    };
}

/// The bytes `[lo, hi)` of `r` that `[offset, end)` covers; `None` where
/// they do not meet.
fn clip(r: &Region, offset: u64, end: u64) -> Option<(u64, u64)> {
    let (lo, hi) = (r.offset.max(offset), (r.offset + r.size).min(end));
    (lo < hi).then_some((lo, hi))
}
