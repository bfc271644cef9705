//! The device plan's L2 look-ahead: beside each small kernel between two
//! GEMVs (a quantizer, a decode op), a read of the next window of the next
//! GEMV's weights, so that those bytes stream into L2 while the small
//! kernel leaves the memory idle and the GEMV after the barrier finds them
//! there. No barrier separates a look-ahead from its kernel: it reads
//! weights that nothing in the plan writes and writes a word of its own,
//! so the two run together and the next barrier waits for both. The bits
//! of every result are the same with or without it.

use super::{Builder, Cmd, Region, Slot};
use crate::error::VulkanError;
use crate::pipeline::Shader;
use fused_core::look_ahead::{AheadCommand, look_ahead_windows};

/// The value the look-ahead's XOR of its words is compared with.
const KEY: u32 = 0x9e37_79b9;

/// The weights a GEMV dispatch reads (the gate's and the up's for a gated
/// one), where they are bound in place in a graph buffer.
fn gemv_weights(c: &Cmd) -> Option<Vec<Region>> {
    let Cmd::Dispatch {
        kernel, bindings, ..
    } = c
    else {
        return None;
    };
    let glu = match kernel.shader {
        Shader::Gemv { glu, .. } | Shader::GemvQ8 { glu, .. } => glu,
        _ => return None,
    };
    let parts = if glu { [0, 4].as_slice() } else { &[0] };
    let weights: Vec<Region> = parts
        .iter()
        .filter_map(|&i| bindings.get(i).copied())
        .collect();
    // A copy made for the GEMV is written just before it: not read ahead.
    let in_place = weights.iter().all(|w| matches!(w.slot, Slot::Graph(_)));
    Some(if in_place { weights } else { Vec::new() })
}

/// Whether a look-ahead goes beside `c`: the small kernels that run
/// between two GEMVs and leave most of the memory's bandwidth unused.
fn hosts_look_ahead(c: &Cmd) -> bool {
    let Cmd::Dispatch { kernel, .. } = c else {
        return false;
    };
    matches!(
        kernel.shader,
        Shader::Quantize { .. }
            | Shader::KvAppend
            | Shader::Attention
            | Shader::AttentionShuffle
            | Shader::AttentionAppend
            | Shader::AttentionShuffleAppend
            | Shader::AttentionCombine
            | Shader::AttentionCombineQ8_0
            | Shader::RmsNorm
            | Shader::Rope
            | Shader::SetRow
            | Shader::ArgMax
    )
}

impl Builder<'_, '_> {
    /// Puts a look-ahead of `between` bytes (split evenly over a gated
    /// GEMV's two weights) after each small kernel before a GEMV, each
    /// continuing where the one before it for that GEMV stopped, until the
    /// weights are all asked for; then, within `reach` GEMVs, the GEMV
    /// after it (`fused_core::look_ahead`). Counted in `look_aheads`, not
    /// in `dispatches`. Nothing where `between` is 0.
    pub(super) fn add_look_aheads(
        &mut self,
        between: u64,
        reach: usize,
    ) -> Result<(), VulkanError> {
        if between == 0 {
            return Ok(());
        }
        let weights: Vec<Option<Vec<Region>>> = self.cmds.iter().map(gemv_weights).collect();
        let sizes: Vec<Vec<u64>> = weights
            .iter()
            .map(|w| w.iter().flatten().map(|r| r.size).collect())
            .collect();
        let commands: Vec<AheadCommand<'_>> = self
            .cmds
            .iter()
            .zip(&weights)
            .zip(&sizes)
            .map(|((c, w), parts)| match w {
                Some(_) => AheadCommand::Gemv { parts, ask: 0 },
                None => AheadCommand::Between {
                    ask: if hosts_look_ahead(c) { between } else { 0 },
                },
            })
            .collect();
        let windows = look_ahead_windows(&commands, reach, self.align);
        let cmds = std::mem::take(&mut self.cmds);
        let mut out = Vec::with_capacity(cmds.len());
        let mut touches = Vec::new();
        for (c, ws) in cmds.into_iter().zip(windows) {
            out.push(c);
            for w in ws {
                let Some(part) = weights[w.gemv].as_ref().and_then(|r| r.get(w.part)) else {
                    continue;
                };
                let window = Region {
                    offset: part.offset + w.offset,
                    size: w.len,
                    ..*part
                };
                let p = self.placeholder;
                let d = self
                    .backend
                    .l2_touch_dispatch(w.len / 16, KEY, vec![p; 2])?;
                touches.push(out.len());
                out.push(Cmd::Dispatch {
                    kernel: d.kernel,
                    bindings: vec![window, Self::dummy()],
                    writes: vec![1],
                    push: d.push,
                    groups: d.groups,
                });
            }
        }
        // Each look-ahead's own word, so that none waits for another.
        if !touches.is_empty() {
            let sink = self.new_scratch(touches.len() as u64 * self.align)?;
            for (i, &at) in touches.iter().enumerate() {
                if let Cmd::Dispatch { bindings, .. } = &mut out[at] {
                    bindings[1] = Region {
                        slot: Slot::Scratch(sink),
                        offset: i as u64 * self.align,
                        size: 4,
                    };
                }
            }
        }
        self.stats.look_aheads += touches.len() as u64;
        self.cmds = out;
        Ok(())
    }
}
