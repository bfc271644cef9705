//! Launch descriptions of the decode ops (`kernels/decode.cu`, the
//! definitions of `fused_core::decode`): RoPE, the row write, the fused
//! key/value append, attention as split and combine kernels, and the
//! argmax.
//!
//! Every kernel reads the position from device memory, so the launches
//! built here hold for every token: only the shapes (the cache's rows
//! among them) and the device's size fix the grids and scratch sizes, when
//! a plan is built.

use fused_core::Error;
use fused_core::decode::{AttentionShape, MAX_ARGMAX_LEN, RopeMode};
use fused_core::error::Unsupported;

use crate::error::{CudaError, u32_of};
use crate::launch::{Launch, ew_len};
use crate::params::{
    ATTN_COMBINE, ATTN_MAX_SPLITS, ATTN_MIN_CHUNK, ATTN_WARPS, ArgmaxParams, AttnParams,
    DECODE_BLOCK, KvAppendParams, L2Ahead, RopeParams, SetRowParams,
};

/// Values one argmax block scans (8 a thread).
const ARGMAX_CHUNK: usize = 2048;
/// The most argmax blocks of one column (what its last block merges).
const ARGMAX_MAX_BLOCKS: usize = 1024;
/// Threads of a split block.
const ATTN_SPLIT_THREADS: u32 = 32 * ATTN_WARPS;
/// The longest head the split kernels take (32 lanes × 8 values).
const ATTN_MAX_HEAD_DIM: usize = 256;
/// The most query heads one split block takes.
const ATTN_MAX_HEADS: usize = 8;

fn refused(what: &'static str) -> Error {
    Error::Unsupported(Unsupported::Operation(what))
}

/// The pairs a RoPE rotates in `n` values of heads of `head_dim`, which
/// must be whole heads of an even size.
fn rope_pairs(head_dim: usize, n: usize) -> Result<u32, CudaError> {
    if head_dim == 0 || !head_dim.is_multiple_of(2) || !n.is_multiple_of(head_dim) {
        return Err(Error::LengthMismatch {
            what: "RoPE input (whole heads of an even size)",
            expected: n.div_ceil(head_dim.max(2)) * head_dim.max(2),
            actual: n,
        }
        .into());
    }
    ew_len(n / 2)
}

/// The rows of a cache of `rows` rows of `n` values, which the row write's
/// kernel indexes as u32 and which must hold the row it writes.
fn cache_rows(what: &'static str, n: usize, rows: usize) -> Result<u32, CudaError> {
    ew_len(n.checked_mul(rows).ok_or(Error::Overflow {
        what: "row write size",
    })?)?;
    if rows == 0 {
        return Err(Error::LengthMismatch {
            what,
            expected: 1,
            actual: 0,
        }
        .into());
    }
    u32_of("rows", rows)
}

/// One part of a key/value append: the `len` values at `src` written
/// (rotated, for q and k) at `dst`, or into the row of the cache at `dst`
/// that the position addresses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvPart {
    pub(crate) src: u64,
    pub(crate) len: usize,
    pub(crate) dst: u64,
}

/// A key/value append as device addresses and sizes
/// ([`Launch::kv_append`]): the RoPE of k into its cache row, with q's
/// RoPE and the v row write where they joined.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvAppend {
    pub(crate) mode: RopeMode,
    /// Values a head (the table's row length).
    pub(crate) head_dim: usize,
    pub(crate) table: u64,
    pub(crate) table_rows: usize,
    pub(crate) pos: u64,
    /// q into its RoPE's destination.
    pub(crate) q: Option<KvPart>,
    /// k into the key cache, of `k_rows` rows of `k.len` values.
    pub(crate) k: KvPart,
    pub(crate) k_rows: usize,
    /// The v row into the value cache, of `v_rows` rows of `v.len` values.
    pub(crate) v: Option<KvPart>,
    pub(crate) v_rows: usize,
}

/// How an attention spreads over blocks, fixed when the plan is built from
/// the shape, the cache's rows and the device's size: the split kernel's template
/// (`per_lane` head values a lane, `heads` query heads a block), the head
/// slices a group needs, and the splits of the context, each of which
/// takes an even share of the rows in use at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AttnSplits {
    /// Head values a lane: 1, 2, 4 or 8 (`E`).
    pub(crate) per_lane: usize,
    /// Query heads a block: 1, 2, 4 or 8 (`G`).
    pub(crate) heads: usize,
    /// Blocks a group of query heads takes (`⌈group / heads⌉`).
    pub(crate) slices: usize,
    /// Blocks over the context for each key/value head and slice.
    pub(crate) splits: usize,
}

impl AttnSplits {
    /// The split of an attention of `shape` over a cache of `rows` rows:
    /// as many splits as one wave of the split kernel holds (`resident`
    /// gives the blocks of the named kernel, of the given threads, that the
    /// device runs at once), none shorter than `ATTN_MIN_CHUNK` rows; heads
    /// of more than `ATTN_MAX_HEAD_DIM` values are refused. One wave,
    /// because a grid a little past it leaves most of the device idle while
    /// its last blocks run (on an H100 a long context ran 5 % faster per
    /// token on 392 blocks than on 512).
    pub(crate) fn new(
        shape: &AttentionShape,
        rows: usize,
        resident: impl FnOnce(&str, u32) -> Result<usize, CudaError>,
    ) -> Result<AttnSplits, CudaError> {
        shape.check()?;
        if shape.head_dim > ATTN_MAX_HEAD_DIM {
            return Err(
                refused("attention heads of more than 256 values on the CUDA device").into(),
            );
        }
        let per_lane = shape.head_dim.div_ceil(32).next_power_of_two();
        let group = (shape.n_head / shape.n_kv).max(1);
        let heads = group.min(ATTN_MAX_HEADS).next_power_of_two();
        let slices = group.div_ceil(heads);
        let mut s = AttnSplits {
            per_lane,
            heads,
            slices,
            splits: 1,
        };
        let wave = resident(&s.kernel(), ATTN_SPLIT_THREADS)?;
        s.splits = rows
            .div_ceil(ATTN_MIN_CHUNK)
            .min(wave / (shape.n_kv * slices))
            .clamp(1, ATTN_MAX_SPLITS);
        Ok(s)
    }

    /// Bytes of the scratch the splits write: per query head and split,
    /// the partial output, its max and its sum.
    pub(crate) fn scratch_bytes(&self, shape: &AttentionShape) -> usize {
        4 * shape.n_head * self.splits * (shape.head_dim + 2)
    }

    /// The split kernel's symbol.
    pub(crate) fn kernel(&self) -> String {
        format!("fused_attn_split_e{}_g{}", self.per_lane, self.heads)
    }
}

/// The kernels' code of a pair mode (`RopeParams::mode`).
fn rope_mode(mode: RopeMode) -> u32 {
    match mode {
        RopeMode::Adjacent => 0,
        RopeMode::Halves => 1,
    }
}

/// How an argmax over columns of `n` values spreads over blocks: blocks a
/// column, values a block.
pub(crate) fn argmax_blocks(n: usize) -> (usize, usize) {
    let blocks = n.div_ceil(ARGMAX_CHUNK).clamp(1, ARGMAX_MAX_BLOCKS);
    (blocks, n.div_ceil(blocks).max(1))
}

/// Bytes of an argmax's scratch: a (value, index) pair a block and a
/// counter a column.
pub(crate) fn argmax_scratch_bytes(n: usize, cols: usize) -> usize {
    let (blocks, _) = argmax_blocks(n);
    cols * (8 * blocks + 4)
}

impl Launch {
    /// RoPE (`mode`) of the `n` values at `x` (heads of `head_dim`) into
    /// `out` (which may be `x`), at the position at `pos` among the `rows`
    /// rows of the table at `table`; `None` when there is nothing to do.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rope(
        mode: RopeMode,
        head_dim: usize,
        n: usize,
        rows: usize,
        x: u64,
        table: u64,
        pos: u64,
        out: u64,
    ) -> Result<Option<Launch>, CudaError> {
        let pairs = rope_pairs(head_dim, n)?;
        if pairs == 0 {
            return Ok(None);
        }
        let params = RopeParams {
            x,
            table,
            pos,
            out,
            head_dim: u32_of("RoPE head size", head_dim)?,
            pairs,
            rows: u32_of("RoPE table rows", rows)?,
            mode: rope_mode(mode),
        };
        let grid = pairs.div_ceil(DECODE_BLOCK);
        Ok(Some(Launch::Rope { grid, params }))
    }

    /// Row `pos` of the `rows` rows of `n` values at `out` set to the row
    /// at `row`: only that row where `dst` is `None` (`out` is the rows),
    /// else `out` written whole as the rows at `dst` with that row
    /// replaced; `None` when there is nothing to do.
    pub(crate) fn set_row(
        n: usize,
        rows: usize,
        dst: Option<u64>,
        row: u64,
        pos: u64,
        out: u64,
    ) -> Result<Option<Launch>, CudaError> {
        let total = ew_len(n.checked_mul(rows).ok_or(Error::Overflow {
            what: "row write size",
        })?)?;
        if total == 0 {
            return Ok(None);
        }
        let params = SetRowParams {
            dst: dst.unwrap_or(0),
            row,
            pos,
            out,
            n: u32_of("row length", n)?,
            rows: u32_of("rows", rows)?,
            total,
            pad: 0,
        };
        let written = if dst.is_some() { total } else { params.n };
        let grid = written.div_ceil(DECODE_BLOCK);
        Ok(Some(Launch::SetRow { grid, params }))
    }

    /// The key/value append `a` as one launch (`fused_kv_append`): one
    /// thread a q pair, a k pair or a v value, q's pairs rotated into
    /// their destination (which may be q), k's into the key cache's row
    /// and v copied into the value cache's row at the position the kernel
    /// reads; `None` when there is nothing to do.
    pub(crate) fn kv_append(a: &KvAppend) -> Result<Option<Launch>, CudaError> {
        let k_pairs = rope_pairs(a.head_dim, a.k.len)?;
        let q_pairs = match &a.q {
            Some(q) => rope_pairs(a.head_dim, q.len)?,
            None => 0,
        };
        let k_rows = cache_rows("key cache rows (at least one)", a.k.len, a.k_rows)?;
        let (v_n, v_rows) = match &a.v {
            Some(v) => (
                ew_len(v.len)?,
                cache_rows("value cache rows (at least one)", v.len, a.v_rows)?,
            ),
            None => (0, 0),
        };
        if a.table_rows == 0 {
            return Err(Error::LengthMismatch {
                what: "RoPE table rows (at least one)",
                expected: 1,
                actual: 0,
            }
            .into());
        }
        let items = ew_len(q_pairs as usize + k_pairs as usize + v_n as usize)?;
        if items == 0 {
            return Ok(None);
        }
        let part = |p: &Option<KvPart>| p.map_or((0, 0), |p| (p.src, p.dst));
        let ((q, q_out), (v, v_cache)) = (part(&a.q), part(&a.v));
        let params = KvAppendParams {
            q,
            q_out,
            k: a.k.src,
            k_cache: a.k.dst,
            v,
            v_cache,
            table: a.table,
            pos: a.pos,
            head_dim: u32_of("RoPE head size", a.head_dim)?,
            q_pairs,
            k_pairs,
            v_n,
            table_rows: u32_of("RoPE table rows", a.table_rows)?,
            k_rows,
            v_rows,
            mode: rope_mode(a.mode),
        };
        Ok(Some(Launch::KvAppend {
            grid: items.div_ceil(DECODE_BLOCK),
            params,
        }))
    }

    /// The attention of `shape` of the query at `q` over the cache rows
    /// at `k` and `v` (`rows` rows), up to the position at `pos`, into
    /// `out`: the split kernel, writing its partials to the scratch at
    /// `part` (`splits.scratch_bytes(shape)` bytes), then the combine;
    /// `None` when there are no heads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        splits: &AttnSplits,
        shape: &AttentionShape,
        rows: usize,
        q: u64,
        k: u64,
        v: u64,
        pos: u64,
        part: u64,
        out: u64,
    ) -> Result<Option<[Launch; 2]>, CudaError> {
        shape.check()?;
        if shape.n_head == 0 {
            return Ok(None);
        }
        let params = AttnParams {
            q,
            k,
            v,
            pos,
            part,
            out,
            head_dim: u32_of("attention head size", shape.head_dim)?,
            n_head: u32_of("attention heads", shape.n_head)?,
            n_kv: u32_of("attention key/value heads", shape.n_kv)?,
            group: u32_of("attention group", shape.n_head / shape.n_kv)?,
            rows: u32_of("attention cache rows", rows)?,
            splits: u32_of("attention splits", splits.splits)?,
            slices: u32_of("attention head slices", splits.slices)?,
            scale: shape.scale,
            ..AttnParams::default()
        };
        let blocks = shape
            .n_kv
            .checked_mul(splits.slices * splits.splits)
            .ok_or(Error::Overflow {
                what: "attention grid",
            })?;
        let split = Launch::Attention {
            name: splits.kernel(),
            grid: u32_of("attention grid", blocks)?,
            block: ATTN_SPLIT_THREADS,
            params,
            ahead: L2Ahead::default(),
        };
        let combine = Launch::Attention {
            name: ATTN_COMBINE.to_string(),
            grid: params.n_head,
            block: DECODE_BLOCK,
            params,
            ahead: L2Ahead::default(),
        };
        Ok(Some([split, combine]))
    }

    /// The index (as an f32) of the first maximum of each of the `cols`
    /// columns of `n` values at `x` into `out`, with the scratch at
    /// `scratch` (`argmax_scratch_bytes(n, cols)` bytes, zeroed before the
    /// first launch; every launch leaves its counters zero); `None` when
    /// there are no columns.
    pub(crate) fn argmax(
        n: usize,
        cols: usize,
        x: u64,
        out: u64,
        scratch: u64,
    ) -> Result<Option<Launch>, CudaError> {
        if n > MAX_ARGMAX_LEN {
            return Err(Error::LengthMismatch {
                what: "argmax column (at most 2^24 values)",
                expected: MAX_ARGMAX_LEN,
                actual: n,
            }
            .into());
        }
        if cols == 0 {
            return Ok(None);
        }
        let (blocks, chunk) = argmax_blocks(n);
        let grid = cols.checked_mul(blocks).ok_or(Error::Overflow {
            what: "argmax grid",
        })?;
        let params = ArgmaxParams {
            x,
            out,
            part: scratch,
            counters: scratch + (8 * blocks * cols) as u64,
            n: u32_of("argmax column", n)?,
            cols: u32_of("argmax columns", cols)?,
            blocks: u32_of("argmax blocks", blocks)?,
            chunk: u32_of("argmax chunk", chunk)?,
        };
        Ok(Some(Launch::ArgMax {
            grid: u32_of("argmax grid", grid)?,
            params,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::decode_has;
    use crate::params::ATTN_QMODE_Q8_K;

    fn shape(head_dim: usize, n_head: usize, n_kv: usize) -> AttentionShape {
        AttentionShape {
            head_dim,
            n_head,
            n_kv,
            scale: 0.125,
        }
    }

    /// An H100's wave of a split kernel at 3 blocks an SM.
    fn h100(_: &str, _: u32) -> Result<usize, CudaError> {
        Ok(132 * 3)
    }

    #[test]
    fn attention_splits_follow_the_rows_and_fill_one_wave() {
        // Llama-3 8B: heads of 128, 32 query heads over 8 key/value heads;
        // 8 × 49 blocks are one wave of 396.
        let mut asked = String::new();
        let s = AttnSplits::new(&shape(128, 32, 8), 8192, |name, threads| {
            asked = format!("{name} {threads}");
            h100(name, threads)
        })
        .unwrap();
        assert_eq!((s.per_lane, s.heads, s.slices, s.splits), (4, 4, 1, 49));
        assert_eq!(s.kernel(), "fused_attn_split_e4_g4");
        assert_eq!(asked, format!("{} 128", s.kernel()));
        // A short cache: no split of fewer than 32 rows.
        let s = AttnSplits::new(&shape(128, 32, 8), 40, h100).unwrap();
        assert_eq!(s.splits, 2);
        // SmolLM2-135M: heads of 64, 9 query heads over 3 (groups of 3 in a
        // block of 4 heads).
        let s = AttnSplits::new(&shape(64, 9, 3), 3000, h100).unwrap();
        assert_eq!((s.per_lane, s.heads, s.slices, s.splits), (2, 4, 1, 94));
        // Groups above 8 take several slices; odd heads round up; a large
        // device meets the combine's limit.
        let s = AttnSplits::new(&shape(80, 9, 1), 1 << 20, |_, _| Ok(4096)).unwrap();
        assert_eq!((s.per_lane, s.heads, s.slices), (4, 8, 2));
        assert_eq!(s.splits, ATTN_MAX_SPLITS);
        assert_eq!(s.scratch_bytes(&shape(80, 9, 1)), 4 * 9 * 256 * 82);
        // A device that holds fewer blocks than key/value heads: one split.
        let s = AttnSplits::new(&shape(128, 32, 8), 8192, |_, _| Ok(4)).unwrap();
        assert_eq!(s.splits, 1);
        assert!(AttnSplits::new(&shape(257, 4, 4), 10, h100).is_err());
        assert!(AttnSplits::new(&shape(64, 4, 3), 10, h100).is_err());
        // The occupancy query's failure is the plan's.
        let failed = AttnSplits::new(&shape(128, 32, 8), 64, |_, _| {
            Err(CudaError::Driver {
                what: "find a kernel's occupancy",
                message: "no device".to_owned(),
            })
        });
        assert!(matches!(failed, Err(CudaError::Driver { .. })));
    }

    #[test]
    fn only_the_combine_of_whole_quantizer_blocks_writes_them_quantized() {
        use crate::qacts::QactsLayout;
        use fused_core::acts::ActQuant;
        let launches = |head_dim, n_head| {
            let s = shape(head_dim, n_head, n_head);
            let splits = AttnSplits::new(&s, 64, h100).unwrap();
            Launch::attention(&splits, &s, 64, 1, 2, 3, 4, 5, 6)
                .unwrap()
                .unwrap()
        };
        let layout = |mode, k, n_cols| QactsLayout::new(mode, k, n_cols).unwrap();
        // 8 heads of 128: one column of 1024 values.
        let [split, combine] = launches(128, 8);
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_0, 1024, 1)),
            Some(1)
        );
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_1, 1024, 1)),
            Some(2)
        );
        // A Q8_K block of 256 takes two whole heads; the split kernel
        // writes partials; another length or more columns are another
        // vector.
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_K, 1024, 1)),
            Some(ATTN_QMODE_Q8_K)
        );
        assert_eq!(
            split.attention_quant_mode(&layout(ActQuant::Q8_0, 1024, 1)),
            None
        );
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_0, 2048, 1)),
            None
        );
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_0, 512, 2)),
            None
        );
        // Heads of 80 values end inside a quantizer block; heads of 96
        // fill Q8_0 blocks but not Q8_K ones.
        let [_, combine] = launches(80, 8);
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_0, 640, 1)),
            None
        );
        let [_, combine] = launches(96, 8);
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_0, 768, 1)),
            Some(1)
        );
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_K, 768, 1)),
            None
        );
        // Setting it fills the combine's parameters; on the split, nothing.
        let [mut split, mut combine] = launches(128, 8);
        let l = layout(ActQuant::Q8_0, 1024, 1);
        assert!(combine.set_attention_quant_out(&l, 0x10000).unwrap());
        let Launch::Attention { params, .. } = combine else {
            panic!("an attention launch")
        };
        assert_eq!((params.qmode, params.qout.codes), (1, 0x10000));
        assert_eq!(params.qout.scales, 0x10000 + l.scales as u64);
        assert!(!split.set_attention_quant_out(&l, 0x10000).unwrap());
        // Q8_K: a combine block per 256 values, 4 of 8 heads of 128.
        let [_, mut combine] = launches(128, 8);
        let l = layout(ActQuant::Q8_K, 1024, 1);
        assert!(combine.set_attention_quant_out(&l, 0x10000).unwrap());
        let Launch::Attention { params, grid, .. } = combine else {
            panic!("an attention launch")
        };
        assert_eq!((params.qmode, grid), (ATTN_QMODE_Q8_K, 4));
        // Eight heads of 32 a Q8_K block: the splits of a long context
        // (128 each) overflow the combine's shared weights.
        let s = shape(32, 8, 1);
        let long = AttnSplits::new(&s, 4096, h100).unwrap();
        assert_eq!(long.splits, 128);
        let [_, combine] = Launch::attention(&long, &s, 4096, 1, 2, 3, 4, 5, 6)
            .unwrap()
            .unwrap();
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_K, 256, 1)),
            None
        );
        let short = AttnSplits::new(&s, 1024, h100).unwrap();
        let [_, combine] = Launch::attention(&short, &s, 1024, 1, 2, 3, 4, 5, 6)
            .unwrap()
            .unwrap();
        assert_eq!(
            combine.attention_quant_mode(&layout(ActQuant::Q8_K, 256, 1)),
            Some(ATTN_QMODE_Q8_K)
        );
    }

    #[test]
    fn every_kernel_the_launches_name_exists() {
        for e in [1, 2, 4, 8] {
            for g in [1, 2, 4, 8] {
                let name = format!("fused_attn_split_e{e}_g{g}");
                assert!(decode_has(&name), "{name}");
            }
        }
        for name in [
            "fused_attn_combine",
            "fused_rope",
            "fused_set_row",
            "fused_kv_append",
            "fused_argmax",
        ] {
            assert!(decode_has(name), "{name}");
        }
    }

    #[test]
    fn argmax_blocks_cover_every_value() {
        for n in [0, 1, 2047, 2048, 2049, 128256, MAX_ARGMAX_LEN] {
            let (blocks, chunk) = argmax_blocks(n);
            assert!((1..=ARGMAX_MAX_BLOCKS).contains(&blocks), "{n}");
            assert!(blocks * chunk >= n, "{n}");
            assert!((blocks - 1) * chunk < n.max(1), "{n}: no empty block");
        }
        assert_eq!(argmax_blocks(128256), (63, 2036));
        let Ok(Some(Launch::ArgMax { grid, params })) = Launch::argmax(128256, 2, 8, 16, 256)
        else {
            panic!()
        };
        assert_eq!(
            (grid, params.blocks, params.counters),
            (126, 63, 256 + 8 * 126)
        );
        assert_eq!(argmax_scratch_bytes(128256, 2), 2 * (8 * 63 + 4));
        assert!(Launch::argmax(MAX_ARGMAX_LEN + 1, 1, 8, 16, 256).is_err());
    }

    #[test]
    fn rope_and_row_launches_cover_their_elements() {
        let Ok(Some(Launch::Rope { grid, params })) =
            Launch::rope(RopeMode::Halves, 64, 64 * 9, 100, 1, 2, 3, 4)
        else {
            panic!()
        };
        assert_eq!((grid, params.pairs, params.mode), (2, 288, 1));
        assert!(Launch::rope(RopeMode::Adjacent, 3, 9, 4, 1, 2, 3, 4).is_err());
        assert!(Launch::rope(RopeMode::Adjacent, 4, 6, 4, 1, 2, 3, 4).is_err());
        // In place: the row alone; else the whole destination.
        let Ok(Some(Launch::SetRow { grid, params })) = Launch::set_row(512, 3000, None, 1, 2, 3)
        else {
            panic!()
        };
        assert_eq!((grid, params.dst, params.total), (2, 0, 512 * 3000));
        let Ok(Some(Launch::SetRow { grid, .. })) = Launch::set_row(512, 3000, Some(9), 1, 2, 3)
        else {
            panic!()
        };
        assert_eq!(grid, 6000);
    }

    #[test]
    fn the_key_value_append_covers_every_part_in_one_launch() {
        // SmolLM2-135M: 9 query heads and 3 key/value heads of 64.
        let part = |src, len, dst| KvPart { src, len, dst };
        let mut a = KvAppend {
            mode: RopeMode::Halves,
            head_dim: 64,
            table: 1,
            table_rows: 8192,
            pos: 2,
            q: Some(part(3, 576, 4)),
            k: part(5, 192, 6),
            k_rows: 2048,
            v: Some(part(7, 192, 8)),
            v_rows: 2048,
        };
        let Ok(Some(Launch::KvAppend { grid, params })) = Launch::kv_append(&a) else {
            panic!()
        };
        assert_eq!(
            (params.q_pairs, params.k_pairs, params.v_n, params.mode),
            (288, 96, 192, 1)
        );
        assert_eq!((params.q_out, params.k_cache, params.v_cache), (4, 6, 8));
        assert_eq!(grid, (288 + 96 + 192u32).div_ceil(DECODE_BLOCK));
        // Without q and v: the k pairs alone, null q and v.
        a.q = None;
        a.v = None;
        let Ok(Some(Launch::KvAppend { grid, params })) = Launch::kv_append(&a) else {
            panic!()
        };
        assert_eq!((grid, params.q, params.v, params.v_n), (1, 0, 0, 0));
        // Odd heads, partial heads and an empty cache are refused.
        a.head_dim = 63;
        assert!(Launch::kv_append(&a).is_err());
        a.head_dim = 64;
        a.q = Some(part(3, 100, 4));
        assert!(Launch::kv_append(&a).is_err());
        a.q = None;
        a.k_rows = 0;
        assert!(Launch::kv_append(&a).is_err());
    }
}
