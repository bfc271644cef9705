//! Activations prepared for the dot kernels: f32, or quantized once per call
//! into the format GGML's CPU path uses for the weight format, plus side data
//! derived from the quantized blocks once per call (so that no kernel
//! recomputes it for every weight row).

use fused_core::DType;
use fused_core::Error;
use fused_core::reference::ActQuant;

/// One activation column as the kernels read it.
#[derive(Clone, Copy, Debug)]
pub enum Acts<'a> {
    /// Plain f32 values.
    F32(&'a [f32]),
    /// Blocks of `dtype` (Q8_0, Q8_1 or Q8_K) as written by
    /// [`fused_core::quant::quantize_row`].
    Quant {
        /// The activation block format.
        dtype: DType,
        /// The blocks.
        bytes: &'a [u8],
        /// Side data derived from `bytes` ([`write_side`]; layout in
        /// [`Q8_0_SUPER_BYTES`]), or empty. Kernels that use it check its
        /// length and fall back to `bytes` alone when it is missing.
        side: &'a [u8],
    },
}

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
/// - `128..192`: sixteen little-endian i32, `−8·Σ qs_j` at lane `4j`, 0 in
///   the other lanes (the exact Q4_0 code-offset term; `·16` gives Q8_0's
///   `−128·Σ qs_j`);
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
/// Q4_0 offset term `−8·Σ qs_b` (a little-endian i32) in a column's side
/// data; its `d` (a little-endian f32) lies [`Q8_0_D_AFTER_OFFSET`] bytes
/// further (see [`Q8_0_GROUP_BYTES`] and [`Q8_0_SUPER_BYTES`]).
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
pub fn side_bytes(d: DType, k: usize) -> usize {
    match d {
        DType::Q8_0 => {
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
    if d != DType::Q8_0 {
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
            let sum: i32 = qs.iter().map(|&q| i32::from(q as i8)).sum();
            off[16 * j..16 * j + 4].copy_from_slice(&(-8 * sum).to_le_bytes());
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

/// Bytes needed to hold one column of `k` activations in `mode` (0 for
/// f32): the quantized blocks followed by their side data.
pub fn prepared_bytes(mode: ActQuant, k: usize) -> Result<usize, Error> {
    match mode.dtype() {
        None => Ok(0),
        Some(d) => Ok(d.row_bytes(k)? + side_bytes(d, k)),
    }
}

/// Quantizes every column of `x` (`n_cols` columns of `k`) into `scratch`
/// (`n_cols · prepared_bytes(mode, k)` bytes), each column's blocks followed
/// by their side data. GGML's reference rounding.
pub fn quantize_columns(
    mode: ActQuant,
    x: &[f32],
    k: usize,
    scratch: &mut [u8],
) -> Result<(), Error> {
    let Some(d) = mode.dtype() else { return Ok(()) };
    let rb = d.row_bytes(k)?;
    let pb = prepared_bytes(mode, k)?;
    if k == 0 || !x.len().is_multiple_of(k) || scratch.len() != x.len() / k * pb {
        return Err(Error::LengthMismatch {
            what: "activation scratch",
            expected: x.len().checked_div(k).unwrap_or(0) * pb,
            actual: scratch.len(),
        });
    }
    for (col, dst) in x.chunks_exact(k).zip(scratch.chunks_exact_mut(pb)) {
        let (blocks, side) = dst.split_at_mut(rb);
        quantize_row(d, col, blocks)?;
        write_side(d, blocks, k, side)?;
    }
    Ok(())
}

/// [`fused_core::quant::quantize_row`], through a vectorized quantizer
/// with the same bytes where this machine has one (Q8_0 and Q8_K on
/// AVX-512).
fn quantize_row(d: DType, col: &[f32], blocks: &mut [u8]) -> Result<(), Error> {
    #[cfg(target_arch = "x86_64")]
    if matches!(d, DType::Q8_0 | DType::Q8_K)
        && crate::isa::Isa::detect() >= crate::isa::Isa::Avx512
    {
        fused_core::error::check_len("activation blocks", d.row_bytes(col.len())?, blocks.len())?;
        // SAFETY: `Isa::detect()` confirmed AVX-512 F/BW/VL (its Avx512
        // level requires them).
        return unsafe {
            if d == DType::Q8_0 {
                crate::kernels::x86_quant::quantize_q8_0(col, blocks)
            } else {
                crate::kernels::x86_quant::quantize_q8_k(col, blocks)
            }
        };
    }
    fused_core::quant::quantize_row(d, col, blocks)
}

/// Column `col` of prepared activations (`scratch` as filled by
/// [`quantize_columns`]).
pub fn column<'a>(
    mode: ActQuant,
    x: &'a [f32],
    scratch: &'a [u8],
    k: usize,
    col: usize,
) -> Acts<'a> {
    match mode.dtype() {
        None => Acts::F32(&x[col * k..(col + 1) * k]),
        Some(d) => {
            let pb = scratch.len() / (x.len() / k).max(1);
            let whole = &scratch[col * pb..(col + 1) * pb];
            let rb = d.row_bytes(k).map_or(pb, |rb| rb.min(pb));
            let (bytes, side) = whole.split_at(rb);
            Acts::Quant {
                dtype: d,
                bytes,
                side,
            }
        }
    }
}
