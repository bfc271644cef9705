//! Side data of quantized activation columns: values derived once per call
//! from the Q8_0 blocks, laid out as the AVX-512 Q8_0 and packed Q4_0
//! kernels load them, so that no kernel recomputes them for every weight
//! row. [`write_side`] writes it; [`crate::acts::quantize_columns`] puts it after
//! each column's blocks.

use fused_core::{DType, Error};

/// Q8_0 blocks per group: the codes of one group fill one 512-bit vector
/// (low and high halves in two).
pub const Q8_0_GROUP_BLOCKS: usize = 4;

/// Groups per side-data super-group: the kernels sum the i32 lanes of four
/// groups into one vector of sixteen per-block sums and scale it once.
pub const Q8_0_SUPER_GROUPS: usize = 4;

/// Bytes of side data per group of [`Q8_0_GROUP_BLOCKS`] Q8_0 activation
/// blocks (`j` = block in the group, `i` = byte or lane):
///
/// - `0..64`: the first 16 codes of each block, `lo[16j + i] = qs_j[i]`;
/// - `64..128`: the last 16, `hi[16j + i] = qs_j[16 + i]`;
/// - `128..192`: sixteen little-endian i32, `−8·Σ qs_j[k]` over the eight
///   codes of lane `4j + i`, `k ∈ 4i..4i + 4` and `16 + 4i..16 + 4i + 4`
///   (the codes that `vpdpbusd` puts in that lane from `lo` and `hi`): the
///   exact Q4_0 code-offset term split by lane, `·16` Q8_0's `−128·Σ qs`.
///   Split so that each lane of the Q8_0 kernel holds the exact dot of its
///   eight elements, offset included: with the whole `−128·Σ qs_j` in one
///   lane, the lanes are each far larger than the block's dot where an
///   activation is large, and the kernel, which scales its lanes one by one,
///   lost the row's value to their cancellation in f32;
/// - `192..256`: sixteen little-endian f32, `d_j` (widened from f16) at
///   lanes `4j..4j + 4` (the Q8_0 kernel's per-lane scale).
pub const Q8_0_GROUP_BYTES: usize = 256;

/// Bytes of side data per super-group of [`Q8_0_SUPER_GROUPS`] groups: the
/// groups' side data ([`Q8_0_GROUP_BYTES`] each, zero for groups past the
/// end of the column), then sixteen little-endian f32 `dy`: the `d` of block
/// `j` of group `g` (widened from f16) at lane `4j + g` (0 for blocks past
/// the end) — the lane where the kernels' sum of four groups puts that
/// block.
///
/// Only whole groups have side data; the last `nb mod 4` blocks have none.
pub const Q8_0_SUPER_BYTES: usize = Q8_0_SUPER_GROUPS * Q8_0_GROUP_BYTES + 64;

/// Where Q8_0 activation block `b` (of a whole group) keeps its exact
/// Q4_0 offset term `−8·Σ qs_b`, split over four little-endian i32 (one per
/// `vpdpbusd` lane) in a column's side data; its `d` (a little-endian f32)
/// lies [`Q8_0_D_AFTER_OFFSET`] bytes further (see [`Q8_0_GROUP_BYTES`] and
/// [`Q8_0_SUPER_BYTES`]).
pub const fn q8_0_offset_term_at(b: usize) -> usize {
    let group = b / Q8_0_GROUP_BLOCKS;
    (group / Q8_0_SUPER_GROUPS) * Q8_0_SUPER_BYTES
        + (group % Q8_0_SUPER_GROUPS) * Q8_0_GROUP_BYTES
        + 128
        + 16 * (b % Q8_0_GROUP_BLOCKS)
}

/// Bytes from a block's offset term to its `d` in the side data
/// ([`q8_0_offset_term_at`]).
pub const Q8_0_D_AFTER_OFFSET: usize = 64;

/// Bytes of side data for one column of `k` activations quantized to `d`.
/// None on 32-bit targets (microcontrollers): only x86-64 kernels read it,
/// and there it would take four times the blocks' memory.
pub fn side_bytes(d: DType, k: usize) -> usize {
    match d {
        DType::Q8_0 if cfg!(target_pointer_width = "64") => {
            let groups = k / d.block_len() / Q8_0_GROUP_BLOCKS;
            groups.div_ceil(Q8_0_SUPER_GROUPS) * Q8_0_SUPER_BYTES
        }
        _ => 0,
    }
}

/// Writes the side data of the quantized column `blocks` (`k` values in
/// format `d`) into `side` (`side_bytes(d, k)` bytes).
pub fn write_side(d: DType, blocks: &[u8], k: usize, side: &mut [u8]) -> Result<(), Error> {
    fused_core::error::check_len("activation blocks", d.row_bytes(k)?, blocks.len())?;
    fused_core::error::check_len("activation side data", side_bytes(d, k), side.len())?;
    if d != DType::Q8_0 || side.is_empty() {
        return Ok(());
    }
    const YB: usize = 34;
    side.fill(0);
    let groups = blocks.chunks_exact(YB * Q8_0_GROUP_BLOCKS);
    for (n, g) in groups.enumerate() {
        let (s, gi) = (n / Q8_0_SUPER_GROUPS, n % Q8_0_SUPER_GROUPS);
        let sg = &mut side[s * Q8_0_SUPER_BYTES..][..Q8_0_SUPER_BYTES];
        let (all, dy) = sg.split_at_mut(Q8_0_SUPER_GROUPS * Q8_0_GROUP_BYTES);
        let out = &mut all[gi * Q8_0_GROUP_BYTES..][..Q8_0_GROUP_BYTES];
        let (codes, rest) = out.split_at_mut(128);
        let (off, lanes) = rest.split_at_mut(64);
        for (j, blk) in g.chunks_exact(YB).enumerate() {
            let qs = &blk[2..];
            codes[16 * j..16 * j + 16].copy_from_slice(&qs[..16]);
            codes[64 + 16 * j..64 + 16 * j + 16].copy_from_slice(&qs[16..]);
            // Lane `i`'s share of `−8·Σ qs`, by SWAR on eight codes at a
            // time: biased to unsigned (`q ^ 0x80 = q + 128`), bytes
            // `4i..4i + 4` and `16 + 4i..` added into the lane's 32 bits.
            const M8: u64 = 0x00ff_00ff_00ff_00ff;
            const M16: u64 = 0x0000_ffff_0000_ffff;
            let word = |at: usize| {
                let b: [u8; 8] = qs[at..at + 8].try_into().expect("8 codes");
                u64::from_le_bytes(b) ^ 0x8080_8080_8080_8080
            };
            for h in 0..2 {
                let (a, b) = (word(8 * h), word(16 + 8 * h));
                let s = (a & M8) + ((a >> 8) & M8) + (b & M8) + ((b >> 8) & M8);
                let t = (s & M16) + ((s >> 16) & M16);
                for (l, biased) in [t as u32, (t >> 32) as u32].into_iter().enumerate() {
                    // At most 8·255: exact in i32.
                    let sum = biased as i32 - 8 * 128;
                    let o = 16 * j + 4 * (2 * h + l);
                    off[o..o + 4].copy_from_slice(&(-8 * sum).to_le_bytes());
                }
            }
            let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            let lane = 4 * j + gi;
            dy[4 * lane..4 * lane + 4].copy_from_slice(&d.to_le_bytes());
            for l in lanes[16 * j..16 * j + 16].chunks_exact_mut(4) {
                l.copy_from_slice(&d.to_le_bytes());
            }
        }
    }
    Ok(())
}
