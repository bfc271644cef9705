//! The dispatches of the decode ops ([`fused_core::decode`]): RoPE from a
//! table, the row write, attention of one query token and argmax. Each
//! reads the token position from device memory when it runs (a one-element
//! f32 binding, read as [`fused_core::decode::position`] reads it), so a
//! command buffer recorded once serves every token. Every tensor is
//! addressed at an element offset within its binding (push constants), so
//! the device plan binds tensors in place wherever they lie on a 4-byte
//! boundary.
//!
//! Launch shapes: RoPE one invocation per pair; the row write one per
//! value written; the fused key/value append one per q pair, k pair and v
//! value, in that order; attention one workgroup of 256 invocations per
//! key/value head (the [`attention_heads`] query heads sharing it) and split
//! of the context (an even share of the rows in use, [`attention_splits`]),
//! and where the context has several splits a second pass joining them per
//! query head (flash-decoding);
//! argmax one workgroup per column, or per split of [`ARGMAX_CHUNK`]
//! values and a second pass joining the splits.

use fused_core::Error;
use fused_core::acts::ActQuant;
use fused_core::decode::{AttentionShape, RopeMode};

use crate::backend::VulkanBackend;
use crate::context::{Buffer, DeviceInfo, Dispatch};
use crate::error::VulkanError;
use crate::pipeline::{KernelKey, SPEC_CONSTANTS, Shader, u32_of};

/// Invocations per workgroup of `rope.comp`.
const ROPE_WG: u64 = 64;
/// Invocations per workgroup of `set_row.comp`.
const SET_ROW_WG: u64 = 256;
/// Invocations per workgroup of `kv_append.comp`.
const KV_APPEND_WG: u64 = 64;
/// The most context rows one attention workgroup attends (`CHUNK` of
/// `attention.comp`, which keeps their scores for up to
/// [`ATTENTION_MAX_HEADS`] query heads in shared memory).
pub(crate) const ATTENTION_CHUNK: usize = 256;
/// The fewest rows a split attends (`MIN_CHUNK`): a split of fewer would
/// not repay its workgroup.
const ATTENTION_MIN_CHUNK: usize = 32;
/// Query heads one attention workgroup serves at most (`GMAX`).
const ATTENTION_MAX_HEADS: usize = 8;
/// Query values one attention workgroup keeps in shared memory (`QMAX`).
const ATTENTION_MAX_QUERY: usize = 1024;
/// The largest head `attention.comp` takes (its workgroup size: one
/// invocation per value of the output).
pub(crate) const ATTENTION_MAX_HEAD: usize = 256;
/// Values one argmax workgroup scans where a column is split: enough to
/// keep its 256 invocations busy, few enough that a 128256-value
/// vocabulary spreads over 32 workgroups.
pub(crate) const ARGMAX_CHUNK: usize = 4096;

/// The splits attention of `shape` cuts a cache of `rows` rows into:
/// enough that the longest context runs on about `workgroups` workgroups
/// (the tuning's `attention_workgroups`), no more than one for each
/// [`ATTENTION_MIN_CHUNK`] rows, and at least one for each
/// [`ATTENTION_CHUNK`] rows (a split's most). At run time each split takes
/// an even share of the rows in use (`split_rows` of `attention.comp`).
pub(crate) fn attention_splits(shape: &AttentionShape, rows: usize, workgroups: usize) -> usize {
    let group = shape.n_head / shape.n_kv.max(1);
    let per_split = (shape.n_head / attention_heads(group, shape.head_dim)).max(1);
    rows.div_ceil(ATTENTION_MIN_CHUNK)
        .min(workgroups.div_ceil(per_split))
        .max(rows.div_ceil(ATTENTION_CHUNK))
        .max(1)
}

/// The query heads one attention workgroup serves: the largest divisor
/// of the group (query heads per key/value head) that `attention.comp`'s
/// shared memory holds, so each key and value row is read once for all of
/// them (the whole group wherever it fits: Llama-3-8B's 4, SmolLM2's 3).
pub(crate) fn attention_heads(group: usize, head_dim: usize) -> usize {
    (1..=group.min(ATTENTION_MAX_HEADS))
        .rev()
        .find(|&g| group.is_multiple_of(g) && g * head_dim <= ATTENTION_MAX_QUERY)
        .unwrap_or(1)
}

/// Whether attention's scores take eight lanes a row joined by subgroup
/// shuffles (the row read contiguously): where compute shaders have
/// shuffles and subgroups of at least eight invocations dividing the
/// workgroup.
pub(crate) fn attention_shuffle(info: &DeviceInfo) -> bool {
    let sg = info.subgroup_size;
    info.has_shuffle() && sg.is_power_of_two() && (8..=256).contains(&sg)
}

/// The splits argmax cuts a column of `n` values into.
pub(crate) fn argmax_splits(n: usize) -> usize {
    n.div_ceil(ARGMAX_CHUNK).max(1)
}

/// The sizes of a fused key/value append: heads of `d` values, the table's
/// rows and each cache's rows; `q_heads` and `v_len` are 0 where q or v did
/// not join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KvAppendShape {
    pub mode: RopeMode,
    pub d: usize,
    pub q_heads: usize,
    pub k_heads: usize,
    pub v_len: usize,
    pub table_rows: usize,
    pub k_rows: usize,
    pub v_rows: usize,
}

fn mode_word(mode: RopeMode) -> u32 {
    match mode {
        RopeMode::Adjacent => 0,
        RopeMode::Halves => 1,
    }
}

/// The key/value append done by attention's split pass: the RoPE mode and
/// table rows, and the element offsets of the table, the new key row, the
/// new value row and q's destination within their bindings; `write_q`:
/// q's destination is written (not where the attention's output covers it
/// exactly).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AppendInAttention {
    pub mode: RopeMode,
    pub table_rows: usize,
    pub at: [u32; 4],
    pub write_q: bool,
}

/// One pass of `argmax.comp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgMaxPass {
    /// Each column whole, its index written.
    Whole = 0,
    /// Each split of each column, its (value, index) written.
    Splits = 1,
    /// The splits' pairs of each column joined, its index written.
    Join = 2,
}

/// 16-byte words one workgroup of `l2_touch.comp` reads (WG * LOADS).
const L2_TOUCH_WORDS_PER_GROUP: u32 = 256 * 8;

/// Push-constant bytes of `words`.
fn push(words: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(words).to_vec()
}

impl VulkanBackend {
    /// The key of `shader` (no specialization), its pipeline built.
    fn decode_kernel(&self, shader: Shader) -> Result<KernelKey, VulkanError> {
        let key = KernelKey {
            shader,
            spec: [0; SPEC_CONSTANTS],
        };
        self.context().kernel(key)?;
        Ok(key)
    }

    /// RoPE of `heads` heads of `d` values at the position read from the
    /// table's `rows` rows; bindings x, table, position, y, each at the
    /// element offset `at` gives.
    pub(crate) fn rope_dispatch<'b>(
        &self,
        mode: RopeMode,
        d: usize,
        heads: usize,
        rows: usize,
        at: [u32; 4],
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let pairs = heads
            .checked_mul(d / 2)
            .ok_or(Error::Overflow { what: "RoPE pairs" })?;
        let words = [
            u32_of("RoPE head size", d)?,
            u32_of("RoPE pairs", pairs)?,
            u32_of("RoPE table rows", rows)?,
            mode_word(mode),
            at[0],
            at[1],
            at[2],
            at[3],
        ];
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::Rope)?,
            buffers,
            push: push(&words),
            groups: self.grid((pairs as u64).div_ceil(ROPE_WG))?,
        })
    }

    /// The write of a row of `n` values into `rows` rows at the position
    /// read: the row alone (`whole` false: the output is the destination
    /// itself) or the whole result, the other rows copied from the
    /// destination; bindings destination, row, position, output.
    pub(crate) fn set_row_dispatch<'b>(
        &self,
        n: usize,
        rows: usize,
        whole: bool,
        at: [u32; 4],
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let all = n.checked_mul(rows).ok_or(Error::Overflow {
            what: "row-write destination",
        })?;
        let words = [
            u32_of("row length", n)?,
            u32_of("row-write rows", rows)?,
            u32::from(whole),
            at[0],
            at[1],
            at[2],
            at[3],
        ];
        u32_of("row-write destination", all)?;
        let threads = if whole { all } else { n };
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::SetRow)?,
            buffers,
            push: push(&words),
            groups: self.grid((threads as u64).div_ceil(SET_ROW_WG))?,
        })
    }

    /// The fused key/value append of `s`, one invocation per q pair, k
    /// pair and v value; bindings table, position, k, key cache, q, q's
    /// destination, v, value cache, each at the element offset `at` gives.
    pub(crate) fn kv_append_dispatch<'b>(
        &self,
        s: &KvAppendShape,
        at: [u32; 8],
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let overflow = || Error::Overflow {
            what: "key/value append items",
        };
        let pairs = |heads: usize| heads.checked_mul(s.d / 2).ok_or_else(overflow);
        let (q_pairs, k_pairs) = (pairs(s.q_heads)?, pairs(s.k_heads)?);
        let items = q_pairs
            .checked_add(k_pairs)
            .and_then(|n| n.checked_add(s.v_len))
            .ok_or_else(overflow)?;
        u32_of("key/value append items", items)?;
        // The shader addresses a cache row as position × row length.
        for (n, rows) in [(2 * k_pairs, s.k_rows), (s.v_len, s.v_rows)] {
            u32_of("key/value cache", n.checked_mul(rows).ok_or_else(overflow)?)?;
        }
        let words = [
            u32_of("RoPE head size", s.d)?,
            u32_of("RoPE pairs", q_pairs)?,
            u32_of("RoPE pairs", k_pairs)?,
            u32_of("row length", s.v_len)?,
            mode_word(s.mode),
            u32_of("RoPE table rows", s.table_rows)?,
            u32_of("key cache rows", s.k_rows)?,
            u32_of("value cache rows", s.v_rows)?,
            at[0],
            at[1],
            at[2],
            at[3],
            at[4],
            at[5],
            at[6],
            at[7],
        ];
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::KvAppend)?,
            buffers,
            push: push(&words),
            groups: self.grid((items as u64).div_ceil(KV_APPEND_WG))?,
        })
    }

    /// The first attention pass over caches of `rows` rows cut into
    /// `splits` ([`attention_splits`]): with one split the output itself,
    /// else each split's (max, sum, unnormalized output) for
    /// [`VulkanBackend::attention_combine_dispatch`]; bindings q, k, v,
    /// position, output or partials. With `append`, the pass also does the
    /// key/value append before it: q is the product's rows, k and v the
    /// caches it writes row pos of, then bindings table, new key row, new
    /// value row, q's destination.
    pub(crate) fn attention_dispatch<'b>(
        &self,
        shape: &AttentionShape,
        rows: usize,
        splits: usize,
        at: [u32; 5],
        append: Option<&AppendInAttention>,
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let group = shape.n_head / shape.n_kv;
        let heads = attention_heads(group, shape.head_dim);
        let groups = (shape.n_head / heads)
            .checked_mul(splits)
            .ok_or(Error::Overflow {
                what: "attention workgroups",
            })?;
        let mut words = vec![
            u32_of("attention head size", shape.head_dim)?,
            u32_of("attention heads", shape.n_head)?,
            u32_of("attention group", group)?,
            u32_of("attention cache rows", rows)?,
            u32_of("attention cache row", shape.kv_dim())?,
            shape.scale.to_bits(),
            u32_of("attention splits", splits)?,
            u32::from(splits == 1),
            u32_of("attention heads a workgroup", heads)?,
            at[0],
            at[1],
            at[2],
            at[3],
            at[4],
        ];
        if let Some(a) = append {
            words.extend([
                mode_word(a.mode),
                u32_of("RoPE table rows", a.table_rows)?,
                a.at[0],
                a.at[1],
                a.at[2],
                a.at[3],
                u32::from(a.write_q),
            ]);
        }
        let shuffle = self.tuning().attention_shuffle && attention_shuffle(self.context().info());
        let shader = match (shuffle, append.is_some()) {
            (true, false) => Shader::AttentionShuffle,
            (false, false) => Shader::Attention,
            (true, true) => Shader::AttentionShuffleAppend,
            (false, true) => Shader::AttentionAppend,
        };
        Ok(Dispatch {
            kernel: self.decode_kernel(shader)?,
            buffers,
            push: push(&words),
            groups: self.grid(groups as u64)?,
        })
    }

    /// The pass joining attention's `splits` partial results, one
    /// workgroup a query head; bindings partials, position, output.
    pub(crate) fn attention_combine_dispatch<'b>(
        &self,
        shape: &AttentionShape,
        rows: usize,
        splits: usize,
        at: [u32; 2],
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let words = [
            u32_of("attention head size", shape.head_dim)?,
            u32_of("attention heads", shape.n_head)?,
            u32_of("attention cache rows", rows)?,
            u32_of("attention splits", splits)?,
            at[0],
            at[1],
        ];
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::AttentionCombine)?,
            buffers,
            push: push(&words),
            groups: self.grid(shape.n_head as u64)?,
        })
    }

    /// The joining pass's kernel that also writes its output as `mode`
    /// activations (a fourth binding): Q8_0 or Q8_1, `None` for another
    /// mode.
    pub(crate) fn quantizing_combine_kernel(
        &self,
        mode: ActQuant,
    ) -> Result<Option<KernelKey>, VulkanError> {
        let shader = match mode {
            ActQuant::Q8_0 => Shader::AttentionCombineQ8_0,
            ActQuant::Q8_1 => Shader::AttentionCombineQ8_1,
            _ => return Ok(None),
        };
        self.decode_kernel(shader).map(Some)
    }

    /// The L2 look-ahead's read of `words` 16-byte words (`l2_touch.comp`);
    /// bindings the window, the look-ahead's own word. `key` is a value
    /// the words' XOR is compared with so that the loads stay (any value
    /// works; a match writes the word).
    pub(crate) fn l2_touch_dispatch<'b>(
        &self,
        words: u64,
        key: u32,
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let count = u32::try_from(words).map_err(|_| Error::Overflow {
            what: "L2 look-ahead window",
        })?;
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::L2Touch)?,
            buffers,
            push: push(&[count, key]),
            groups: self.grid(u64::from(count.div_ceil(L2_TOUCH_WORDS_PER_GROUP)))?,
        })
    }

    /// One argmax pass over `cols` columns of `n` values cut into `splits`
    /// ([`argmax_splits`]); bindings source, destination.
    pub(crate) fn argmax_dispatch<'b>(
        &self,
        pass: ArgMaxPass,
        n: usize,
        cols: usize,
        splits: usize,
        at: [u32; 2],
        buffers: Vec<&'b Buffer<'b>>,
    ) -> Result<Dispatch<'b>, VulkanError> {
        let groups = match pass {
            ArgMaxPass::Splits => cols.checked_mul(splits).ok_or(Error::Overflow {
                what: "argmax workgroups",
            })?,
            ArgMaxPass::Whole | ArgMaxPass::Join => cols,
        };
        let words = [
            u32_of("argmax column length", n)?,
            u32_of("argmax columns", cols)?,
            pass as u32,
            u32_of("argmax splits", splits)?,
            u32_of("argmax split length", ARGMAX_CHUNK)?,
            at[0],
            at[1],
        ];
        Ok(Dispatch {
            kernel: self.decode_kernel(Shader::ArgMax)?,
            buffers,
            push: push(&words),
            groups: self.grid(groups as u64)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_device_and_never_exceed_a_chunk() {
        let shape = |n_head, n_kv, head_dim| AttentionShape {
            head_dim,
            n_head,
            n_kv,
            scale: 1.0,
        };
        // Llama-3-8B: 8 workgroups a split, 64 splits to reach 512.
        let llama = shape(32, 8, 128);
        assert_eq!(attention_splits(&llama, 1, 512), 1);
        assert_eq!(attention_splits(&llama, ATTENTION_MIN_CHUNK, 512), 1);
        assert_eq!(attention_splits(&llama, ATTENTION_MIN_CHUNK + 1, 512), 2);
        assert_eq!(attention_splits(&llama, 512, 512), 16);
        assert_eq!(attention_splits(&llama, 4096, 512), 64);
        assert_eq!(attention_splits(&llama, 4096, 256), 32);
        // A split's most rows bound the fewest splits, whatever the aim.
        assert_eq!(attention_splits(&shape(1, 1, 64), 70_000, 256), 274);
        // 256 workgroups a split: two would do, but 3000 rows need 12.
        let wide = shape(256, 256, 64);
        assert_eq!(attention_splits(&wide, 3000, 512), 12);
        for s in [llama, wide, shape(9, 3, 64), shape(7, 7, 256)] {
            for rows in [1, 31, 32, 33, 255, 256, 257, 700, 3000, 131_072] {
                for workgroups in [0, 1, 100, 512, 4096] {
                    let splits = attention_splits(&s, rows, workgroups);
                    assert!(
                        splits >= 1 && rows.div_ceil(splits) <= ATTENTION_CHUNK,
                        "{rows} {workgroups}"
                    );
                }
            }
        }
        assert_eq!(argmax_splits(37), 1);
        assert_eq!(argmax_splits(128_256), 32);
    }

    #[test]
    fn attention_workgroups_take_whole_groups_where_shared_memory_holds_them() {
        assert_eq!(attention_heads(1, 256), 1);
        assert_eq!(attention_heads(4, 128), 4); // Llama-3-8B
        assert_eq!(attention_heads(3, 64), 3); // SmolLM2
        assert_eq!(attention_heads(8, 128), 8);
        assert_eq!(attention_heads(8, 256), 4);
        assert_eq!(attention_heads(6, 256), 3);
        assert_eq!(attention_heads(12, 64), 6);
        assert_eq!(attention_heads(7, 256), 1);
        for (group, d) in [(1, 1), (5, 200), (16, 64), (9, 100), (32, 256)] {
            let h = attention_heads(group, d);
            assert!(group.is_multiple_of(h) && h <= ATTENTION_MAX_HEADS);
            assert!(h * d <= ATTENTION_MAX_QUERY);
        }
    }
}
