//! The key/value append folded into the attention after it: where the
//! command recorded last is the append (q and v joined) whose q
//! destination, caches and position are exactly the attention's q, k, v
//! and position, attention's split pass does the append itself
//! (`attention.comp -DAPPEND`: q's heads rotated into shared memory, the
//! new key and value rows used from shared memory and written into the
//! caches), so the append's dispatch and the barrier after it go away.
//! The values are the append's, bit for bit: the same rotation, the same
//! clamped rows.

use fused_core::decode::AttentionShape;
use fused_core::tensor::TensorDesc;

use super::{AppendBindings, Builder};
use crate::decode::AppendInAttention;
use crate::error::VulkanError;

impl Builder<'_, '_> {
    /// Takes the last recorded append into the attention over (`q`, `k`,
    /// `v`, `pos`) into `out` where it can: removes its command and returns
    /// the append's part of the split pass (whose q is then the product's
    /// q rows). `None`, changing nothing, where the
    /// append is not the last command, its tensors are not exactly the
    /// attention's, its caches' rows are not the attention's, an output
    /// overlaps a source, or the tuning's switch is off.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn append_into_attention(
        &mut self,
        shape: &AttentionShape,
        rows: usize,
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        pos: &TensorDesc,
        out: &TensorDesc,
    ) -> Result<Option<AppendBindings>, VulkanError> {
        let Some(a) = self.last_append.take() else {
            return Ok(None);
        };
        if !self.backend.tuning().append_in_attention || a.cmd + 1 != self.cmds.len() {
            return Ok(None);
        }
        let [table, a_pos, k_new, k_cache, q_new, q_out, v_new, v_cache] = a.exact;
        let same = self.region(q)? == q_out
            && self.region(k)? == k_cache
            && self.region(v)? == v_cache
            && self.region(pos)? == a_pos;
        let s = a.shape;
        let fits = s.d == shape.head_dim
            && s.q_heads == shape.n_head
            && s.k_heads == shape.n_kv
            && s.v_len == shape.kv_dim()
            && s.k_rows == rows
            && s.v_rows == rows;
        let out_r = self.region(out)?;
        // The product's rows are read by every split while the first
        // writes q's destination and the attention's output is written:
        // none of them may share a byte, but for an output exactly on q's
        // destination (which the output then overwrites anyway).
        let sources = [table, k_new, q_new, v_new];
        let apart = !sources
            .iter()
            .any(|r| r.overlaps(&q_out) || r.overlaps(&out_r));
        let write_q = out_r != q_out;
        if !same || !fits || !apart || (write_q && out_r.overlaps(&q_out)) {
            return Ok(None);
        }
        self.cmds.pop();
        self.stats.dispatches -= 1;
        let w = a.windows;
        let (table_w, k_new_w, q_new_w, q_out_w, v_new_w) = (w[0], w[2], w[4], w[5], w[6]);
        Ok(Some(AppendBindings {
            q: q_new_w,
            bindings: [table_w.0, k_new_w.0, v_new_w.0, q_out_w.0],
            words: AppendInAttention {
                mode: s.mode,
                table_rows: s.table_rows,
                at: [table_w.1, k_new_w.1, v_new_w.1, q_out_w.1],
                write_q,
            },
        }))
    }
}
