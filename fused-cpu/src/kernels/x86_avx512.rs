//! x86-64 AVX-512 (F/BW/VL + VNNI) kernels.
//!
//! Q4_0 and Q8_0 weights against Q8_0 activations work on groups of four
//! 32-element blocks, one `zmm` per half-block set: the first 16 codes of
//! the four blocks in one vector, their last 16 in another, gathered from
//! unaligned loads of the weight row with one `vpermt2w` each (Q4_0: the
//! group's first 64 bytes and its last 16).
//! The activations come pre-arranged in the same order with their offset
//! terms ([`crate::acts::side::Q8_0_SUPER_BYTES`]), so per group and row two
//! chained `vpdpbusd` (unsigned codes × signed activations), started from
//! the exact i32 offset term, leave four i32 lanes per block. Offsets are
//! exact in i32: Q4_0 codes are `u − 8`, so `Σ(u − 8)·y = Σu·y − 8·Σy`;
//! Q8_0 weights are biased to `x + 128`, so `Σx·y = Σ(x + 128)·y − 128·Σy`.
//! The offset term is split over the four lanes, each lane's share taken
//! from the activations that lane meets, so that every lane holds the exact
//! dot of its eight elements.

//! Q4_0 then sums the lanes of four groups (a super-group of sixteen
//! blocks) into one vector of sixteen block dots with four shuffles and
//! three adds, gathers the sixteen f16 `dx` with one masked `vpermw` per
//! group and widens them with one `vcvtph2ps`, and scales by `dx·dy` in one
//! FMA per super-group. Q8_0, whose codes already keep the shuffle port
//! busy, converts its four lanes per block and scales them per group.
//!
//! F16 weights widen sixteen values per `vcvtph2ps` into four FMA
//! accumulators per row. Q4_K and Q6_K take 64 unsigned codes per
//! `maddubs` (exact: codes ≤ 63) and multiply-add the sub-block scales
//! (Q6_K picks them per lane with `vpermw`; Q4_K broadcasts each row's
//! scales to every 128-bit lane once and picks them with in-lane `vpshufb`,
//! one µop against two) with `vpdpwssd` into two accumulators;
//! their offsets (`dmin·Σ m·bsum`, `32·Σ sc·bsum`) come from the Q8_K
//! block sums, as in the AVX2 kernels, so Q6_K adds up each block's lanes
//! (four rows together) before they meet the block's scale (see
//! `q6_k_rows`). Q4_K unpacks the block headers of
//! its four rows together in vector registers (one shuffle and two or three
//! bitwise operations for all their scales, the same for the mins, one
//! conversion for all `d`, `dmin`), since every 512-bit µop counts: both
//! 512-bit ports are busy.
//!
//! Q4_1 and Q5_1 against Q8_1 activations (`d·code + m` weights; no side
//! data: Q8_1 has none) take the same group shape: per group of four
//! blocks, block `j`'s first 16 codes (the low nibbles) in 128-bit lane `j`
//! of one vector and its last 16 (the high nibbles) in lane `j` of
//! another, Q5_1's fifth bits added as `0x10` under byte masks built by
//! scalar code from `qh`. The activations are gathered into the same lanes
//! with two permutes per group, once per call for all its rows. Two chained
//! `vpdpbusd` (unsigned codes, no offset term) per group and row, then, as
//! for Q4_0, `sum_parts` adds each block's lanes exactly (in i32) before
//! its dot meets `dx·dy`; the min terms `mx·sy` take a second FMA. The sixteen `d`,
//! `m` of a super-group (and the activations' `d`, `s`) are gathered as f16
//! by word permutes and widened at once. The last, partial super-group
//! runs the same code with masked loads: missing blocks read as zero
//! activations and scales, so every block count runs in the kernel; when
//! it is a single group (K = 576: 16 + 2 blocks), its lanes are scaled one
//! by one instead (each block's `dx·dy` in its four lanes), which spares
//! that group a whole sum and scaling of its own.
//!
//! Where the CPU has GFNI (`isa::has_gfni`, checked when a kernel is
//! picked), Q4_0 and Q4_K run variants compiled with it that take the high
//! nibbles with one `gf2p8affineqb` instead of a shift and a mask: the same
//! bits, one 512-bit µop less per 64 codes. Where it also has AVX-512 VBMI
//! (`isa::has_vbmi`), Q4_0 gathers a group's codes with a one-source byte
//! permute and a masked load instead of a two-source word permute (three
//! µops, two of them on the shuffle port): 5–7 % faster in L2. Q4_1 and
//! Q5_1 have one such variant, with GFNI and VBMI both (byte permutes for
//! the codes, the activations and the scales, GFNI for the high nibbles).
//!
//! Q8_0, Q4_1 and Q5_1 add up their rows' accumulators in one shuffle tree
//! for the four rows ([`sum_rows`]).
//!
//! Every kernel prefetches its weight rows one call ahead (`prefetch`);
//! Q8_0 and F16 at least 8 KB ahead (`PREFETCH_MIN`), Q8_0 its last,
//! partial group too.
//!
//! The four-row kernels run the same code as the one-row kernels on each of
//! their rows (one generic function over the row count), reading the
//! activations once for the four rows, so their results are bit-identical.
//! Q8_0 takes the blocks after its last whole group (which have no side
//! data) in the same group step, from masked loads of the blocks
//! themselves; Q4_0 takes them with the AVX2 kernel. Activations without
//! side data go through the AVX2 kernels.
//!
//! The AVX-512 intrinsics and `target_feature` names used here are stable
//! since Rust 1.89, the workspace's `rust-version`.

use core::arch::x86_64::*;

use fused_core::acts::ActQuant;
use fused_core::error::check_len;
use fused_core::{DType, Error};

use super::common::check_rows_alike;
use super::x86_avx2::{self as avx2, Q4K_BYTES, Q6K_BYTES, Q8K_BYTES, check_f32, check_quant};
use super::{RowDot, RowDot4, RowTile};
use crate::acts::Acts;
use crate::acts::side::{
    Q8_0_GROUP_BLOCKS, Q8_0_GROUP_BYTES, Q8_0_SUPER_BYTES, Q8_0_SUPER_GROUPS, side_bytes,
};
use crate::isa::{has_gfni, has_vbmi};

/// The entry points of one avx512 kernel: one row, four rows, a tile.
#[derive(Clone, Copy)]
struct Entries {
    one: RowDot,
    four: RowDot4,
    tile: RowTile,
}

/// `Entries` of the kernel named by its three entry points.
macro_rules! entries {
    ($one:ident, $four:ident, $tile:ident) => {
        Some(Entries {
            one: $one,
            four: $four,
            tile: $tile,
        })
    };
}

/// The avx512 kernel for weights of `dtype` fed activations in `mode`, if
/// any: the variant for the features this CPU has.
fn entries(dtype: DType, mode: ActQuant) -> Option<Entries> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) if has_gfni() && has_vbmi() => {
            entries!(dot_q4_0_q8_0_vbmi, dot4_q4_0_q8_0_vbmi, tile_q4_0_q8_0_vbmi)
        }
        (DType::Q4_0, ActQuant::Q8_0) if has_gfni() => {
            entries!(dot_q4_0_q8_0_gfni, dot4_q4_0_q8_0_gfni, tile_q4_0_q8_0_gfni)
        }
        (DType::Q4_0, ActQuant::Q8_0) => entries!(dot_q4_0_q8_0, dot4_q4_0_q8_0, tile_q4_0_q8_0),
        (DType::Q8_0, ActQuant::Q8_0) => entries!(dot_q8_0_q8_0, dot4_q8_0_q8_0, tile_q8_0_q8_0),
        (DType::F16, ActQuant::F32) => entries!(dot_f16_f32, dot4_f16_f32, tile_f16_f32),
        (DType::Q4_K, ActQuant::Q8_K) if has_gfni() => {
            entries!(dot_q4_k_q8_k_gfni, dot4_q4_k_q8_k_gfni, tile_q4_k_q8_k_gfni)
        }
        (DType::Q4_K, ActQuant::Q8_K) => entries!(dot_q4_k_q8_k, dot4_q4_k_q8_k, tile_q4_k_q8_k),
        (DType::Q6_K, ActQuant::Q8_K) => entries!(dot_q6_k_q8_k, dot4_q6_k_q8_k, tile_q6_k_q8_k),
        (DType::Q4_1, ActQuant::Q8_1) if has_gfni() && has_vbmi() => {
            entries!(dot_q4_1_q8_1_vbmi, dot4_q4_1_q8_1_vbmi, tile_q4_1_q8_1_vbmi)
        }
        (DType::Q4_1, ActQuant::Q8_1) => entries!(dot_q4_1_q8_1, dot4_q4_1_q8_1, tile_q4_1_q8_1),
        (DType::Q5_1, ActQuant::Q8_1) if has_gfni() && has_vbmi() => {
            entries!(dot_q5_1_q8_1_vbmi, dot4_q5_1_q8_1_vbmi, tile_q5_1_q8_1_vbmi)
        }
        (DType::Q5_1, ActQuant::Q8_1) => entries!(dot_q5_1_q8_1, dot4_q5_1_q8_1, tile_q5_1_q8_1),
        _ => None,
    }
}

/// The avx512 kernel for weights of `dtype` fed activations in `mode`, if any.
pub fn row_dot(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    entries(dtype, mode).map(|e| e.one)
}

/// The avx512 four-row kernel for weights of `dtype` fed activations in
/// `mode`, if any.
pub fn row_dot4(dtype: DType, mode: ActQuant) -> Option<RowDot4> {
    entries(dtype, mode).map(|e| e.four)
}

/// The avx512 tile kernel for weights of `dtype` fed activations in
/// `mode`, if any.
pub fn row_tile(dtype: DType, mode: ActQuant) -> Option<RowTile> {
    entries(dtype, mode).map(|e| e.tile)
}

// ---------------------------------------------------------------------------
// Safe entry points.

/// An `R`-row kernel over Q8_0 activations with side data: `(weight rows,
/// activation blocks, side data, blocks per row) → accumulators`.
type GroupRows<const R: usize> = unsafe fn([*const u8; R], *const u8, *const u8, usize) -> [f32; R];

/// An AVX2 one-row kernel: `(weight row, activation blocks, blocks) → accumulator`.
type Avx2Row = unsafe fn(*const u8, *const u8, usize) -> f32;

/// Checks a tile (`rows`: `out.len()` rows of equal length back to back)
/// with `check` on its first row, then sets `out[i]` to row `i`'s
/// accumulator: `four` over the rows four at a time from the first, `one`
/// over the rest (as a caller of the four- and one-row entries would),
/// each given what `check` returned.
fn over_tile<T: Copy>(
    rows: &[u8],
    out: &mut [f32],
    check: impl FnOnce(&[u8]) -> Result<T, Error>,
    four: impl Fn(T, [*const u8; 4]) -> [f32; 4],
    one: impl Fn(T, *const u8) -> f32,
) -> Result<(), Error> {
    let rb = rows.len().checked_div(out.len()).unwrap_or(0);
    check_len("SIMD kernel: tile bytes", out.len() * rb, rows.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let t = check(&rows[..rb])?;
    let p = rows.as_ptr();
    let mut chunks = out.chunks_exact_mut(4);
    let mut i = 0;
    for c in &mut chunks {
        c.copy_from_slice(&four(
            t,
            core::array::from_fn(|j| p.wrapping_add((i + j) * rb)),
        ));
        i += 4;
    }
    for o in chunks.into_remainder() {
        *o = one(t, p.wrapping_add(i * rb));
        i += 1;
    }
    Ok(())
}

/// [`group_rows`] over a tile (`rows`: `out.len()` rows back to back),
/// checked once.
#[allow(clippy::too_many_arguments)]
fn group_tile(
    kernel: DType,
    dtype: DType,
    rows: &[u8],
    acts: &Acts<'_>,
    k: usize,
    out: &mut [f32],
    (imp4, imp1): (GroupRows<4>, GroupRows<1>),
    fallback: Avx2Row,
) -> Result<(), Error> {
    let nb = k / kernel.block_len();
    // The activations and, where the AVX-512 kernels can take them, their
    // side data.
    let check = |first: &[u8]| {
        let y = check_quant(kernel, dtype, first, acts, k)?.as_ptr();
        let side = match *acts {
            Acts::Quant { side, .. } if side.len() == side_bytes(DType::Q8_0, k) => {
                Some(side.as_ptr())
            }
            _ => None,
        };
        Ok((y, side))
    };
    // Why the calls below are sound, as in `group_rows`: kernels of this
    // module (or the AVX2 one) reached only for a confirmed Avx512 ISA;
    // `check_quant` verified that the first row and `y` hold exactly `nb`
    // blocks and `over_tile` that every row of the tile has the first's
    // length; `side`, when present, holds the side data of `nb / 4` groups.
    over_tile(
        rows,
        out,
        check,
        |(y, side), w| match side {
            // SAFETY: as said above.
            Some(sp) => unsafe { imp4(w, y, sp, nb) },
            None => w.map(|r| {
                // SAFETY: as said above; the AVX2 kernel reads `nb` blocks.
                unsafe { fallback(r, y, nb) }
            }),
        },
        |(y, side), w| match side {
            // SAFETY: as said above.
            Some(sp) => unsafe { imp1([w], y, sp, nb)[0] },
            // SAFETY: as said above; the AVX2 kernel reads `nb` blocks.
            None => unsafe { fallback(w, y, nb) },
        },
    )
}

/// [`block_rows`] over a tile (`rows`: `out.len()` rows back to back),
/// checked once.
fn block_tile(
    kernel: DType,
    dtype: DType,
    rows: &[u8],
    acts: &Acts<'_>,
    k: usize,
    out: &mut [f32],
    (imp4, imp1): BlockImps,
) -> Result<(), Error> {
    let nb = k / kernel.block_len();
    let check = |first: &[u8]| Ok(check_quant(kernel, dtype, first, acts, k)?.as_ptr());
    // Why the calls below are sound, as in `block_rows`: a kernel of this
    // module reached only for a confirmed Avx512 ISA; `check_quant`
    // verified that the first row and `y` hold exactly `nb` blocks and
    // `over_tile` that every row of the tile has the first's length.
    over_tile(
        rows,
        out,
        check,
        // SAFETY: as said above.
        |y, w| unsafe { imp4(w, y, nb) },
        // SAFETY: as said above.
        |y, w| unsafe { imp1([w], y, nb)[0] },
    )
}

/// The four- and one-row forms of a [`block_rows`] kernel.
type BlockImps = (
    unsafe fn([*const u8; 4], *const u8, usize) -> [f32; 4],
    unsafe fn([*const u8; 1], *const u8, usize) -> [f32; 1],
);

/// Validates `rows` and `acts` for a kernel of `kernel` weights, then runs
/// `imp` on the rows, or `fallback` on each row when the activations carry
/// no side data.
fn group_rows<const R: usize>(
    kernel: DType,
    dtype: DType,
    rows: [&[u8]; R],
    acts: &Acts<'_>,
    k: usize,
    imp: GroupRows<R>,
    fallback: Avx2Row,
) -> Result<[f32; R], Error> {
    let y = check_quant(kernel, dtype, rows[0], acts, k)?;
    check_rows_alike(&rows)?;
    let nb = k / kernel.block_len();
    let w = rows.map(<[u8]>::as_ptr);
    match *acts {
        Acts::Quant { side, .. } if side.len() == side_bytes(DType::Q8_0, k) => {
            // SAFETY: `imp` and `fallback` are kernels of this module or of
            // the AVX2 one, and this function is only reached through
            // `row_dot`/`row_dot4`, which the dispatcher consults only for an
            // ISA that `Isa::is_supported()` confirmed (Avx512), so AVX-512
            // F/BW/VL/VNNI, AVX2, FMA and F16C are present. `check_quant`
            // verified that every row and `y` hold exactly `nb` blocks, and
            // `side` holds the side data of `nb / 4` groups: all that is read.
            Ok(unsafe { imp(w, y.as_ptr(), side.as_ptr(), nb) })
        }
        // SAFETY: as above; the AVX2 kernel reads `nb` blocks of each.
        _ => Ok(w.map(|p| unsafe { fallback(p, y.as_ptr(), nb) })),
    }
}

/// The tile runner of a row runner: [`group_tile`] for [`group_rows`],
/// [`block_tile`] for [`block_rows`].
macro_rules! tile_runner {
    (group_rows) => {
        group_tile
    };
    (block_rows) => {
        block_tile
    };
}

/// The one-row, four-row and tile entry points of an `R`-row kernel
/// `imp`, run by `run` ([`group_rows`] with an AVX2 one-row fallback, or
/// [`block_rows`]) and its tile runner.
macro_rules! row_entries {
    ($(#[$m:meta])* $one:ident, $four:ident, $tile:ident, $run:ident($dt:expr, $imp:ident $(, $fallback:path)?)) => {
        $(#[$m])*
        fn $one(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
            let [v] = $run($dt, dtype, [w_row], acts, k, $imp::<1> $(, $fallback)?)?;
            Ok(v)
        }

        $(#[$m])*
        /// Four rows.
        fn $four(
            dtype: DType,
            rows: [&[u8]; 4],
            acts: &Acts<'_>,
            k: usize,
        ) -> Result<[f32; 4], Error> {
            $run($dt, dtype, rows, acts, k, $imp::<4> $(, $fallback)?)
        }

        $(#[$m])*
        /// A tile.
        fn $tile(
            dtype: DType,
            rows: &[u8],
            acts: &Acts<'_>,
            k: usize,
            out: &mut [f32],
        ) -> Result<(), Error> {
            (tile_runner!($run))($dt, dtype, rows, acts, k, out, ($imp::<4>, $imp::<1>) $(, $fallback)?)
        }
    };
}

row_entries!(
    /// Q4_0 × Q8_0.
    dot_q4_0_q8_0, dot4_q4_0_q8_0, tile_q4_0_q8_0, group_rows(DType::Q4_0, q4_0_rows, avx2::q4_0_q8_0)
);
row_entries!(
    /// Q4_0 × Q8_0, GFNI present (`isa::has_gfni`).
    dot_q4_0_q8_0_gfni, dot4_q4_0_q8_0_gfni, tile_q4_0_q8_0_gfni, group_rows(DType::Q4_0, q4_0_rows_gfni, avx2::q4_0_q8_0)
);
row_entries!(
    /// Q4_0 × Q8_0, GFNI and AVX-512 VBMI present (`isa::has_gfni`, `isa::has_vbmi`).
    dot_q4_0_q8_0_vbmi, dot4_q4_0_q8_0_vbmi, tile_q4_0_q8_0_vbmi, group_rows(DType::Q4_0, q4_0_rows_vbmi, avx2::q4_0_q8_0)
);
row_entries!(
    /// Q8_0 × Q8_0.
    dot_q8_0_q8_0, dot4_q8_0_q8_0, tile_q8_0_q8_0, group_rows(DType::Q8_0, q8_0_rows, avx2::q8_0_q8_0)
);

/// Validates `rows` and `acts` for F16 × F32, then runs the `R`-row kernel.
fn f16_entry<const R: usize>(
    dtype: DType,
    rows: [&[u8]; R],
    acts: &Acts<'_>,
    k: usize,
) -> Result<[f32; R], Error> {
    let x = check_f32(DType::F16, dtype, rows[0], acts, k)?;
    check_rows_alike(&rows)?;
    // SAFETY: only reached through `row_dot`/`row_dot4`, which the
    // dispatcher consults only for a confirmed Avx512 ISA (AVX-512 F/BW/VL,
    // AVX2, FMA, F16C present); `check_f32` verified that every row holds
    // `2·k` bytes and `x` `k` values.
    Ok(unsafe { f16_rows(rows.map(<[u8]>::as_ptr), x.as_ptr(), k) })
}

/// F16 × F32.
fn dot_f16_f32(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let [v] = f16_entry(dtype, [w_row], acts, k)?;
    Ok(v)
}

/// F16 × F32, four rows.
fn dot4_f16_f32(
    dtype: DType,
    rows: [&[u8]; 4],
    acts: &Acts<'_>,
    k: usize,
) -> Result<[f32; 4], Error> {
    f16_entry(dtype, rows, acts, k)
}

/// F16 × F32, a tile (`rows`: `out.len()` rows back to back), checked once.
fn tile_f16_f32(
    dtype: DType,
    rows: &[u8],
    acts: &Acts<'_>,
    k: usize,
    out: &mut [f32],
) -> Result<(), Error> {
    let check = |first: &[u8]| Ok(check_f32(DType::F16, dtype, first, acts, k)?.as_ptr());
    // Why the calls below are sound, as in `f16_entry`: reached only for a
    // confirmed Avx512 ISA; `check_f32` verified that the first row holds
    // `2·k` bytes and `x` `k` values, `over_tile` that every row has the
    // first's length.
    over_tile(
        rows,
        out,
        check,
        // SAFETY: as said above.
        |x, w| unsafe { f16_rows(w, x, k) },
        // SAFETY: as said above.
        |x, w| unsafe { f16_rows([w], x, k)[0] },
    )
}

/// Validates `rows` and `acts` for a kernel of `kernel` weights against
/// plain activation blocks, then runs the `R`-row kernel `imp`.
fn block_rows<const R: usize>(
    kernel: DType,
    dtype: DType,
    rows: [&[u8]; R],
    acts: &Acts<'_>,
    k: usize,
    imp: unsafe fn([*const u8; R], *const u8, usize) -> [f32; R],
) -> Result<[f32; R], Error> {
    let y = check_quant(kernel, dtype, rows[0], acts, k)?;
    check_rows_alike(&rows)?;
    let nb = k / kernel.block_len();
    // SAFETY: `imp` is a kernel of this module, only reached through
    // `row_dot`/`row_dot4`, which the dispatcher consults only for an ISA
    // that `Isa::is_supported()` confirmed (Avx512), so AVX-512 F/BW/VL/VNNI,
    // AVX2, FMA and F16C are present. `check_quant` verified that every row
    // and `y` hold exactly `nb` blocks, which is all the kernel reads.
    Ok(unsafe { imp(rows.map(<[u8]>::as_ptr), y.as_ptr(), nb) })
}

row_entries!(
    /// Q4_K × Q8_K.
    dot_q4_k_q8_k, dot4_q4_k_q8_k, tile_q4_k_q8_k, block_rows(DType::Q4_K, q4_k_rows)
);
row_entries!(
    /// Q4_K × Q8_K, GFNI present (`isa::has_gfni`).
    dot_q4_k_q8_k_gfni, dot4_q4_k_q8_k_gfni, tile_q4_k_q8_k_gfni, block_rows(DType::Q4_K, q4_k_rows_gfni)
);
row_entries!(
    /// Q6_K × Q8_K.
    dot_q6_k_q8_k, dot4_q6_k_q8_k, tile_q6_k_q8_k, block_rows(DType::Q6_K, q6_k_rows)
);
row_entries!(
    /// Q4_1 × Q8_1.
    dot_q4_1_q8_1, dot4_q4_1_q8_1, tile_q4_1_q8_1, block_rows(DType::Q4_1, q4_1_rows)
);
row_entries!(
    /// Q4_1 × Q8_1, GFNI and AVX-512 VBMI present (`isa::has_gfni`, `isa::has_vbmi`).
    dot_q4_1_q8_1_vbmi, dot4_q4_1_q8_1_vbmi, tile_q4_1_q8_1_vbmi, block_rows(DType::Q4_1, q4_1_rows_vbmi)
);
row_entries!(
    /// Q5_1 × Q8_1.
    dot_q5_1_q8_1, dot4_q5_1_q8_1, tile_q5_1_q8_1, block_rows(DType::Q5_1, q5_1_rows)
);
row_entries!(
    /// Q5_1 × Q8_1, GFNI and AVX-512 VBMI present (`isa::has_gfni`, `isa::has_vbmi`).
    dot_q5_1_q8_1_vbmi, dot4_q5_1_q8_1_vbmi, tile_q5_1_q8_1_vbmi, block_rows(DType::Q5_1, q5_1_rows_vbmi)
);

// ---------------------------------------------------------------------------
// Q4_0 and Q8_0 against Q8_0 activations with side data.

/// Hints that the cache line at `p` will be read soon: it is fetched into
/// L2. Every kernel here prefetches, for each weight row it reads, the same
/// position `R` rows further (the row that the next call for the next `R`
/// rows will read at that point, since a matrix's rows are contiguous), so
/// that the whole weight stream is requested once, one call ahead; Q8_0
/// and F16 at least [`PREFETCH_MIN`] bytes ahead. A prefetch past the end of
/// the matrix is harmless (its address is formed with `wrapping_add`).
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    // SAFETY: a prefetch is only a hint: it never faults and has no
    // observable effect whatever the address (`_mm_prefetch` is a safe
    // function in newer Rust versions, hence the `allow`).
    #[allow(unused_unsafe)]
    unsafe {
        _mm_prefetch::<_MM_HINT_T1>(p.cast())
    }
}

/// The least distance, in bytes, at which the Q8_0 and F16 kernels
/// prefetch their weights. One call ahead is only 2.4 KB for four Q8_0
/// rows of K = 576 (a small model's output head, 30 MB of short rows):
/// too little in flight for DRAM. Measured on 49152 × 576 in DRAM (shared
/// 2-core Zen 4, medians of alternated runs): Q8_0 1 thread 12.4 -> 14.9
/// GB/s at 8 KB (14.6 at 16 KB), 2 threads 23.4 -> 26.1 GB/s; F16 (4.6 KB
/// one call ahead) 20-21 -> 24-25 GB/s. Q4_1 at K = 576 gained nothing
/// from it (18.0 -> 17.4 GB/s, 1 thread: compute-bound there), so the
/// other kernels keep one call.
const PREFETCH_MIN: usize = 8 << 10;

/// Indices for `vpermw`/`vpermt2w`: output word `l` takes word `f(l)`.
const fn word_idx(f: [i16; 32]) -> __m512i {
    // SAFETY: `[i16; 32]` and `__m512i` are both 64 plain bytes, and every
    // bit pattern is a valid `__m512i`.
    unsafe { core::mem::transmute::<[i16; 32], __m512i>(f) }
}

/// Output word `8j + i` (`j < 4`, `i < 8`) takes word `base + stride·j + i`
/// of a 64-word source; words 32.. are 0.
const fn gather_words(stride: i16, base: i16) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut l = 0;
    while l < 32 {
        idx[l] = base + stride * (l as i16 / 8) + l as i16 % 8;
        l += 1;
    }
    idx
}

/// Output word `l < 16` takes word `stride·(l / 4)` (the `d` of block
/// `l / 4`, once per i32 lane of the block); words 16.. are 0.
const fn d_words(stride: i16) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut l = 0;
    while l < 16 {
        idx[l] = stride * (l as i16 / 4);
        l += 1;
    }
    idx
}

/// Bytes of a Q8_0 block (weights or activations).
const Q8_0_BYTES: usize = 34;

/// Q4_0 codes of a four-block group from `[bytes 0..64 | bytes 56..72]`
/// (the second source's low 16 bytes; words `28..36` of the group): block
/// `j`'s `qs` are words `9j + 1 .. 9j + 9` of the group, i.e. words
/// `9j + 1 + i` of the first load while below 32, else word `9j + 1 + i −
/// 28` of the second (word 32 + …).
const Q4_0_QS: [i16; 32] = {
    let mut idx = gather_words(9, 1);
    let mut l = 0;
    while l < 32 {
        if idx[l] >= 32 {
            idx[l] += 4;
        }
        l += 1;
    }
    idx
};

/// The side data of group `g` of the super-group at `sg`: low codes, high
/// codes, offset term.
///
/// # Safety
/// AVX-512F present; `sg` holds a whole super-group of side data.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn side_group(sg: *const u8, g: usize) -> (__m512i, __m512i, __m512i) {
    // SAFETY: the caller guarantees the super-group; group `g < 4` is its
    // bytes `256g .. 256g + 192`.
    unsafe {
        let s = sg.add(g * Q8_0_GROUP_BYTES);
        (
            _mm512_loadu_si512(s.cast()),
            _mm512_loadu_si512(s.add(64).cast()),
            _mm512_loadu_si512(s.add(128).cast()),
        )
    }
}

/// The mask of the f16 words `4j + g` (`j < 4`) where group `g` of a
/// super-group puts the `d` of its block `j`.
const fn d_mask(g: usize) -> __mmask32 {
    0x1111 << g
}

/// `acc + Σ` of one Q8_0 group at `wp` (136 bytes) against the activation
/// group `(ylo, yhi, off)` (`off` already scaled to `−128·Σy`, split by
/// lane) with `dy` per lane (lane `4j + i`: the `dy` of block `j`), per
/// lane; prefetches `wp + pf`.
///
/// Q8_0 keeps one FMA per group (the lanes scaled by `dx·dy` per lane)
/// rather than [`sum_parts`]: its codes already take three two-source
/// word permutes per group, and the sum's four shuffles would be a fourth
/// on the same port (5–7 % slower in L2 and L3). That is exact enough only
/// because each lane starts from its own share of the offset
/// ([`crate::acts::side::Q8_0_GROUP_BYTES`]), so that it holds the exact
/// dot of its eight elements, `|·| ≤ 8·128·127`: with the block's whole
/// `−128·Σy` in one lane, the lanes were each far larger than the block's
/// dot where an activation is large, and their cancellation after scaling
/// lost the row's value (1–8 % off with one activation of 1e6).
///
/// # Safety
/// AVX-512 F/BW/VNNI present; `wp..wp + 136` readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn q8_0_group(
    wp: *const u8,
    y: (__m512i, __m512i, __m512i),
    dy: __m512,
    acc: __m512,
    pf: usize,
) -> __m512 {
    let (ylo, yhi, off) = y;
    prefetch(wp.wrapping_add(pf));
    prefetch(wp.wrapping_add(pf + 64));
    prefetch(wp.wrapping_add(pf + 128));
    // SAFETY: the caller guarantees 136 readable bytes: `0..128`, `8..136`.
    let (a0, a1, b0, b1) = unsafe {
        (
            _mm512_loadu_si512(wp.cast()),
            _mm512_loadu_si512(wp.add(64).cast()),
            _mm512_loadu_si512(wp.add(8).cast()),
            _mm512_loadu_si512(wp.add(72).cast()),
        )
    };
    // Block `j`'s `qs` are words `17j + 1 .. 17j + 17` of the group: the
    // first eight from `[a0 | a1]` (words from 0), the last eight from
    // `[b0 | b1]` (words from 4).
    let bias = _mm512_set1_epi8(-128);
    let lo = _mm512_permutex2var_epi16(a0, word_idx(gather_words(17, 1)), a1);
    let hi = _mm512_permutex2var_epi16(b0, word_idx(gather_words(17, 5)), b1);
    let d = _mm512_permutex2var_epi16(a0, word_idx(d_words(17)), a1);
    let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
    let (lo, hi) = (_mm512_xor_si512(lo, bias), _mm512_xor_si512(hi, bias));
    let t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, lo, ylo), hi, yhi);
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dx, dy), acc)
}

/// The sums of the sixteen f32 lanes of each of `acc` (`R ≤ 4` rows'
/// accumulators), reduced together: two interleave-and-add steps leave
/// each 128-bit quarter holding the rows' sums of its lanes, then the
/// quarters are added (13 µops for four rows, where one
/// `_mm512_reduce_add_ps` per row takes about 8). Each row's lanes meet
/// only each other, in the same order whatever `R`, so one row gives the
/// bits of the same row among four.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn sum_rows<const R: usize>(acc: [__m512; R]) -> [f32; R] {
    const { assert!(R <= 4) };
    let v: [__m512; 4] =
        core::array::from_fn(|r| acc.get(r).copied().unwrap_or(_mm512_setzero_ps()));
    let pair = |a, b| _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    // Per quarter: `[a0 + a2, b0 + b2, a1 + a3, b1 + b3]`, the same for `c`, `d`.
    let (s01, s23) = (
        _mm512_castps_pd(pair(v[0], v[1])),
        _mm512_castps_pd(pair(v[2], v[3])),
    );
    let q = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(s01, s23)),
        _mm512_castpd_ps(_mm512_unpackhi_pd(s01, s23)),
    );
    let h = _mm256_add_ps(
        _mm512_castps512_ps256(q),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(q))),
    );
    let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
    let mut lanes = [0.0f32; 4];
    // SAFETY: `lanes` holds four f32; unaligned store.
    unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), s) };
    core::array::from_fn(|r| lanes[r])
}

/// The sum of the four lanes of each block of four groups' i32 lanes
/// (`t[g]` lane `4j + i`: part `i` of block `j` of group `g`): lane
/// `4j + g` of the result is the whole dot of block `j` of group `g`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn sum_parts(t: [__m512i; 4]) -> __m512i {
    let pair = |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    // Lane `4j`: parts 0 + 2 of the first, `4j + 1` of the second; lanes
    // `4j + 2`, `4j + 3`: parts 1 + 3.
    let (s01, s23) = (pair(t[0], t[1]), pair(t[2], t[3]));
    _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    )
}

/// The codes of the Q4_0 group at `wp` whose first 64 bytes are `a`:
/// block `j`'s 16 `qs` bytes at bytes `16j ..`, gathered by one
/// two-source word permute of `a` and bytes `56..72`.
///
/// # Safety
/// AVX-512 F/BW present; `wp..wp + 72` readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn q4_0_codes(wp: *const u8, a: __m512i) -> __m512i {
    // SAFETY: bytes `56..72` are readable (the caller's guarantee).
    let b = unsafe { _mm512_zextsi128_si512(_mm_loadu_si128(wp.add(56).cast())) };
    _mm512_permutex2var_epi16(a, word_idx(Q4_0_QS), b)
}

/// Byte `16j + i` (`j < 3`) takes byte `18j + 2 + i` (block `j`'s `qs`);
/// bytes 48.. are filled from memory.
const Q4_0_QS_BYTES: [i8; 64] = {
    let mut idx = [0i8; 64];
    let mut l = 0;
    while l < 48 {
        idx[l] = (18 * (l / 16) + 2 + l % 16) as i8;
        l += 1;
    }
    idx
};

/// [`q4_0_codes`] in two cheaper µops: a one-source byte permute (VBMI) of
/// `a` for blocks 0–2, then block 3's `qs` (bytes `56..72`) loaded straight
/// into bytes 48..64 under a mask (a load and a blend, instead of a second
/// source for a three-µop word permute).
///
/// # Safety
/// AVX-512 F/BW/VBMI present; `wp..wp + 72` readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
unsafe fn q4_0_codes_vbmi(wp: *const u8, a: __m512i) -> __m512i {
    // SAFETY: `[i8; 64]` and `__m512i` are 64 plain bytes.
    let idx = unsafe { core::mem::transmute::<[i8; 64], __m512i>(Q4_0_QS_BYTES) };
    let v = _mm512_permutexvar_epi8(idx, a);
    // SAFETY: only the unmasked bytes 48..64 are read, at `wp + 56 .. wp +
    // 72` (masked-off bytes are not accessed), which the caller guarantees.
    unsafe { _mm512_mask_loadu_epi8(v, 0xffff << 48, wp.add(8).cast()) }
}

/// The Q4_0 × Q8_0 group step `$group` and `R`-row kernel `$rows` (the
/// latter documented at its invocation), compiled for the features
/// `$features`, taking the high nibbles with `$hi` (the two forms give the
/// same bits).
macro_rules! q4_0_kernel {
    ($(#[$m:meta])* $group:ident, $rows:ident, $features:literal, $hi:ident, $codes:ident) => {
        /// The i32 lanes of one Q4_0 group at `wp` (72 bytes) against the
        /// activation group `(ylo, yhi, off)`: lane `4j + i` holds part `i` of the
        /// integer dot of block `j`, the offset term included. Also merges the
        /// group's four f16 `d` into words `4j + g` of `dh`, and prefetches
        /// `wp + pf`.
        ///
        /// # Safety
        /// AVX-512 F/BW/VNNI present; `wp..wp + 72` readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $group(
            wp: *const u8,
            y: (__m512i, __m512i, __m512i),
            dh: __m512i,
            g: usize,
            pf: usize,
        ) -> (__m512i, __m512i) {
            let (ylo, yhi, off) = y;
            prefetch(wp.wrapping_add(pf));
            prefetch(wp.wrapping_add(pf + 64));
            // SAFETY: the caller guarantees 72 readable bytes: `0..64`, and
            // `$codes` reads within them.
            let a = unsafe { _mm512_loadu_si512(wp.cast()) };
            // SAFETY: as above.
            let v = unsafe { $codes(wp, a) };
            let dh = _mm512_mask_permutexvar_epi16(dh, d_mask(g), word_idx(d_words(9)), a);
            let m4 = _mm512_set1_epi8(0x0f);
            let lo = _mm512_and_si512(v, m4);
            let hi = $hi(v);
            let t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, lo, ylo), hi, yhi);
            (t, dh)
        }

        $(#[$m])*
        #[target_feature(enable = $features)]
        unsafe fn $rows<const R: usize>(
            w: [*const u8; R],
            y: *const u8,
            side: *const u8,
            nb: usize,
        ) -> [f32; R] {
            const WB: usize = 18;
            const SG_BLOCKS: usize = Q8_0_SUPER_GROUPS * Q8_0_GROUP_BLOCKS;
            let ng = nb / Q8_0_GROUP_BLOCKS;
            let pf = R * nb * WB;
            let mut acc = [_mm512_setzero_ps(); R];
            /// Super-group `s`, of `N` groups, into `acc`.
            ///
            /// # Safety
            /// As the enclosing function's; super-group `s` of `side` whole, its
            /// `N` groups in every row.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn step<const R: usize, const N: usize>(
                acc: &mut [__m512; R],
                w: [*const u8; R],
                side: *const u8,
                pf: usize,
                s: usize,
            ) {
                // SAFETY: super-group `s` of the side data, whole (the last one
                // is zero-padded).
                let sg = unsafe { side.add(s * Q8_0_SUPER_BYTES) };
                let mut ys = [(
                    _mm512_setzero_si512(),
                    _mm512_setzero_si512(),
                    _mm512_setzero_si512(),
                ); N];
                for (g, yg) in ys.iter_mut().enumerate() {
                    // SAFETY: group `g < 4` of the super-group.
                    *yg = unsafe { side_group(sg, g) };
                }
                let dy_at = Q8_0_SUPER_GROUPS * Q8_0_GROUP_BYTES;
                // SAFETY: bytes `1024..1088` of the super-group: `dy`.
                let dy = unsafe { _mm512_loadu_ps(sg.add(dy_at).cast()) };
                for (a, wr) in acc.iter_mut().zip(w) {
                    let mut t = [_mm512_setzero_si512(); Q8_0_SUPER_GROUPS];
                    let mut dh = _mm512_setzero_si512();
                    for (g, (tg, yg)) in t.iter_mut().zip(ys).enumerate() {
                        // SAFETY: group `4s + g < ng` of row `wr`: blocks up to
                        // `16s + 4g + 4 ≤ nb`.
                        let wg = unsafe { wr.add((s * SG_BLOCKS + g * Q8_0_GROUP_BLOCKS) * WB) };
                        // SAFETY: the 4 blocks at `wg` are readable.
                        (*tg, dh) = unsafe { $group(wg, yg, dh, g, pf) };
                    }
                    let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(dh));
                    let u = _mm512_cvtepi32_ps(sum_parts(t));
                    *a = _mm512_fmadd_ps(u, _mm512_mul_ps(dx, dy), *a);
                }
            }
            let full = ng / Q8_0_SUPER_GROUPS;
            for s in 0..full {
                // SAFETY: super-group `s < full` and its 4 groups.
                unsafe { step::<R, 4>(&mut acc, w, side, pf, s) };
            }
            // SAFETY: the last, partial super-group `full` (zero-padded side data)
            // and its `ng mod 4` groups.
            unsafe {
                match ng % Q8_0_SUPER_GROUPS {
                    1 => step::<R, 1>(&mut acc, w, side, pf, full),
                    2 => step::<R, 2>(&mut acc, w, side, pf, full),
                    3 => step::<R, 3>(&mut acc, w, side, pf, full),
                    _ => {}
                }
            }
            let sums = acc.map(|a| _mm512_reduce_add_ps(a));
            // SAFETY: the caller's guarantees; AVX2, FMA and F16C are part
            // of this function's features.
            unsafe { with_tail(sums, w, y, ng * Q8_0_GROUP_BLOCKS, nb, WB, avx2::q4_0_q8_0) }
        }
    };
}

q4_0_kernel!(
    /// Q4_0 × Q8_0 over super-groups (four groups of four blocks) of `R` rows:
    /// per row, the four groups' i32 lanes are summed to sixteen block dots
    /// ([`sum_parts`]) and scaled by `dx·dy` (the sixteen `dx` gathered as f16
    /// into `dh` and widened at once) in one FMA. The last, partial
    /// super-group runs the same steps over its groups; then the AVX2 kernel
    /// takes the last blocks.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds `nb`
    /// Q4_0 blocks, `y` `nb` Q8_0 blocks and `side` their side data.
    q4_0_group,
    q4_0_rows,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    high_nibbles,
    q4_0_codes
);
q4_0_kernel!(
    /// [`q4_0_rows`] with the high nibbles taken by GFNI.
    ///
    /// # Safety
    /// As [`q4_0_rows`], and GFNI present.
    q4_0_group_gfni,
    q4_0_rows_gfni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni",
    high_nibbles_gfni,
    q4_0_codes
);
q4_0_kernel!(
    /// [`q4_0_rows_gfni`] gathering the codes with VBMI ([`q4_0_codes_vbmi`]).
    ///
    /// # Safety
    /// As [`q4_0_rows`], and GFNI and AVX-512 VBMI present.
    q4_0_group_vbmi,
    q4_0_rows_vbmi,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni,avx512vbmi",
    high_nibbles_gfni,
    q4_0_codes_vbmi
);

/// Q8_0 × Q8_0 over groups of four blocks of `R` rows ([`q8_0_group`]),
/// even and odd groups into two accumulators per row; the last `nb mod 4`
/// blocks, which have no side data, go through the same arithmetic from
/// masked loads ([`q8_0_tail_group`]).
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds `nb`
/// Q8_0 blocks, `y` `nb` Q8_0 blocks and `side` their side data.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_0_rows<const R: usize>(
    w: [*const u8; R],
    y: *const u8,
    side: *const u8,
    nb: usize,
) -> [f32; R] {
    let ng = nb / Q8_0_GROUP_BLOCKS;
    let pf = (R * nb * Q8_0_BYTES).max(PREFETCH_MIN);
    // Two accumulators per row (even and odd groups).
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    // Group `$g` into accumulator `$half` of every row.
    macro_rules! step {
        ($g:expr, $half:expr) => {{
            let g = $g;
            let (s, gi) = (g / Q8_0_SUPER_GROUPS, g % Q8_0_SUPER_GROUPS);
            // SAFETY: super-group `s` of the side data (whole, zero-padded):
            // group `gi` with its per-lane `dy`.
            let (ys, dy) = unsafe {
                let sg = side.add(s * Q8_0_SUPER_BYTES);
                let (ylo, yhi, off) = side_group(sg, gi);
                let dy = _mm512_loadu_ps(sg.add(gi * Q8_0_GROUP_BYTES + 192).cast());
                ((ylo, yhi, _mm512_slli_epi32::<4>(off)), dy)
            };
            for (a, wr) in acc.iter_mut().zip(w) {
                // SAFETY: group `g < ng` of row `wr`: blocks `4g .. 4g + 4 ≤ nb`.
                let wg = unsafe { wr.add(g * Q8_0_GROUP_BLOCKS * Q8_0_BYTES) };
                // SAFETY: the 4 blocks at `wg` are readable.
                a[$half] = unsafe { q8_0_group(wg, ys, dy, a[$half], pf) };
            }
        }};
    }
    let mut g = 0;
    while g + 2 <= ng {
        step!(g, 0);
        step!(g + 1, 1);
        g += 2;
    }
    if g < ng {
        step!(g, 0);
    }
    let b = ng * Q8_0_GROUP_BLOCKS;
    if b < nb {
        // The last `nb mod 4` blocks, which have no side data: the same
        // group step from masked loads of the blocks themselves.
        let n = nb - b;
        // SAFETY: blocks `b .. nb` of `y`, `n` of them.
        let yt = unsafe { q8_0_tail_acts(y.add(b * Q8_0_BYTES), n) };
        for (a, wr) in acc.iter_mut().zip(w) {
            let wp = wr.wrapping_add(b * Q8_0_BYTES);
            // The tail's lines too: left out, each row's last line came
            // from DRAM on demand, which halved the rate of K = 576 rows.
            prefetch(wp.wrapping_add(pf));
            prefetch(wp.wrapping_add(pf + 64));
            // SAFETY: blocks `b .. nb` of row `wr`, `n` of them.
            a[1] = unsafe { q8_0_tail_group(wp, n, yt, a[1]) };
        }
    }
    sum_rows(acc.map(|a| _mm512_add_ps(a[0], a[1])))
}

/// The four loads of a Q8_0 group (weights or activations) of which the
/// first `n` blocks (1 to 3) exist: bytes `0..64`, `64..128`, `8..72`,
/// `72..136` of the group, each read only below `34·n` (the rest zero), for
/// the word permutes of [`q8_0_group`].
///
/// # Safety
/// AVX-512 F/BW present; `p..p + 34·n` readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn q8_0_loads(p: *const u8, n: usize) -> [__m512i; 4] {
    let len = n * Q8_0_BYTES;
    // SAFETY: each load reads only its bytes below `len`, which the caller
    // guarantees readable; the others are masked off.
    unsafe {
        [
            load_first(p, len),
            load_first(p.wrapping_add(64), len.saturating_sub(64)),
            load_first(p.wrapping_add(8), len.saturating_sub(8)),
            load_first(p.wrapping_add(72), len.saturating_sub(72)),
        ]
    }
}

/// The activations of a partial Q8_0 group (the last `n` blocks of a
/// column, 1 to 3, which have no side data) as [`q8_0_group`] takes them:
/// `(ylo, yhi, off)` with `off` lane `4j + i` the exact `−128·Σ` of the
/// eight codes that lane meets, and `dy` per lane (lane `4j + i`: the `dy`
/// of block `j`); lanes of missing blocks are zero.
///
/// # Safety
/// AVX-512 F/BW/VNNI present; `yp..yp + 34·n` readable, `1 ≤ n ≤ 3`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn q8_0_tail_acts(yp: *const u8, n: usize) -> ((__m512i, __m512i, __m512i), __m512) {
    // SAFETY: the caller's guarantee.
    let [a0, a1, b0, b1] = unsafe { q8_0_loads(yp, n) };
    let ylo = _mm512_permutex2var_epi16(a0, word_idx(gather_words(17, 1)), a1);
    let yhi = _mm512_permutex2var_epi16(b0, word_idx(gather_words(17, 5)), b1);
    let d = _mm512_permutex2var_epi16(a0, word_idx(d_words(17)), a1);
    let ones = _mm512_set1_epi8(1);
    let sum = _mm512_dpbusd_epi32(
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, ylo),
        ones,
        yhi,
    );
    let off = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sum));
    ((ylo, yhi, off), _mm512_cvtph_ps(_mm512_castsi512_si256(d)))
}

/// `acc +` the partial Q8_0 group at `wp` (its first `n` blocks, 1 to 3)
/// against the activations `y` of [`q8_0_tail_acts`], per lane: the
/// arithmetic of [`q8_0_group`] from masked loads (missing blocks read as
/// zero codes and scales, and meet zero activations).
///
/// # Safety
/// AVX-512 F/BW/VNNI present; `wp..wp + 34·n` readable, `1 ≤ n ≤ 3`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn q8_0_tail_group(
    wp: *const u8,
    n: usize,
    y: ((__m512i, __m512i, __m512i), __m512),
    acc: __m512,
) -> __m512 {
    let ((ylo, yhi, off), dy) = y;
    // SAFETY: the caller's guarantee.
    let [a0, a1, b0, b1] = unsafe { q8_0_loads(wp, n) };
    let bias = _mm512_set1_epi8(-128);
    let lo = _mm512_permutex2var_epi16(a0, word_idx(gather_words(17, 1)), a1);
    let hi = _mm512_permutex2var_epi16(b0, word_idx(gather_words(17, 5)), b1);
    let d = _mm512_permutex2var_epi16(a0, word_idx(d_words(17)), a1);
    let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
    let (lo, hi) = (_mm512_xor_si512(lo, bias), _mm512_xor_si512(hi, bias));
    let t = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, lo, ylo), hi, yhi);
    _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dx, dy), acc)
}

/// `sums` (each row's dot over its first `b` blocks) plus, when `b < nb`,
/// the AVX2 kernel `tail` over each row's last `nb − b` blocks (`wb`
/// weight bytes each) against the same blocks of `y`.
///
/// # Safety
/// AVX2, FMA and F16C present; each `w[r]` holds `nb` blocks of `wb`
/// bytes and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn with_tail<const R: usize>(
    sums: [f32; R],
    w: [*const u8; R],
    y: *const u8,
    b: usize,
    nb: usize,
    wb: usize,
    tail: Avx2Row,
) -> [f32; R] {
    let mut out = sums;
    for (o, wr) in out.iter_mut().zip(w) {
        *o += if b < nb {
            // SAFETY: the last `nb − b` blocks of row `wr` and of `y`; the
            // caller guarantees the features `tail` needs.
            unsafe { tail(wr.add(b * wb), y.add(b * Q8_0_BYTES), nb - b) }
        } else {
            0.0
        };
    }
    out
}

// ---------------------------------------------------------------------------
// Q4_1 and Q5_1 against Q8_1 activations.

/// Bytes of a Q8_1 block: f16 `d`, f16 `s` (`d·Σq`), 32 i8 codes.
const Q8_1_BYTES: usize = 36;
/// Bytes of a Q4_1 block: f16 `d`, f16 `m`, 16 bytes of nibbles.
const Q4_1_BYTES: usize = 20;
/// Bytes of a Q5_1 block: f16 `d`, f16 `m`, the u32 `qh` of fifth bits,
/// 16 bytes of nibbles.
const Q5_1_BYTES: usize = 24;
/// Blocks of an affine group (one 128-bit lane each) and of a super-group
/// (four groups: sixteen block dots, [`sum_parts`]).
const AFFINE_GROUP: usize = 4;
const AFFINE_SUPER: usize = 4 * AFFINE_GROUP;

/// Three vectors: a group's two code (or activation) halves and its
/// merged f16 scales.
type Vec3 = (__m512i, __m512i, __m512i);

/// `[i8; 64]` as a vector of byte indices (for `vpermb`/`vpermt2b`).
const fn byte_idx(v: [i8; 64]) -> __m512i {
    // SAFETY: `[i8; 64]` and `__m512i` are both 64 plain bytes, and every
    // bit pattern is a valid `__m512i`.
    unsafe { core::mem::transmute::<[i8; 64], __m512i>(v) }
}

/// Word indices of a two-source word permute whose first source holds
/// words `0..32` of a group and whose second holds its words from
/// `second` on: output word `l` takes group word `f[l]`.
const fn two_words(f: [i16; 32], second: i16) -> [i16; 32] {
    let mut idx = f;
    let mut l = 0;
    while l < 32 {
        if idx[l] >= 32 {
            idx[l] += 32 - second;
        }
        l += 1;
    }
    idx
}

/// The byte form of [`two_words`]: output byte `l` takes group byte `f[l]`,
/// from the second source (group bytes from `second` on) past byte 63.
const fn two_bytes(f: [i8; 64], second: i8) -> [i8; 64] {
    let mut idx = f;
    let mut l = 0;
    while l < 64 {
        if idx[l] >= 64 {
            idx[l] = idx[l].wrapping_add(64 - second);
        }
        l += 1;
    }
    idx
}

/// Output byte `16j + i` (`j < 4`, `i < 16`) takes byte `base + stride·j +
/// i`; entries past 127 (left for a masked load to fill) are 0.
const fn gather_bytes(stride: i16, base: i16) -> [i8; 64] {
    let mut idx = [0i8; 64];
    let mut l = 0;
    while l < 64 {
        let b = base + stride * (l as i16 / 16) + l as i16 % 16;
        idx[l] = if b < 128 { b as i8 } else { 0 };
        l += 1;
    }
    idx
}

/// Output word `l < 16` takes word `stride·(l / 4)` (the first f16 of
/// block `l / 4`), word `16 + l` the word after it (its second f16).
const fn pair_words(stride: i16) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut l = 0;
    while l < 16 {
        idx[l] = stride * (l as i16 / 4);
        idx[16 + l] = stride * (l as i16 / 4) + 1;
        l += 1;
    }
    idx
}

/// The words `4j + g` and `16 + 4j + g` (`j < 4`) where group `g` of a
/// super-group puts the two f16 fields of its block `j` ([`pair_words`]):
/// the order of [`sum_parts`]' block dots.
const fn pair_mask(g: usize) -> __mmask32 {
    (0x1111 << g) | (0x1111 << (16 + g))
}

/// [`pair_mask`] over bytes: both bytes of each of its words.
const fn pair_byte_mask(g: usize) -> __mmask64 {
    (0x0303_0303 << (2 * g)) | (0x0303_0303 << (32 + 2 * g))
}

/// Word indices as byte indices (for `vpermb`/`vpermt2b`): output bytes
/// `2l`, `2l + 1` take the bytes of word `f[l]`.
const fn word_bytes(f: [i16; 32]) -> [i8; 64] {
    let mut idx = [0i8; 64];
    let mut l = 0;
    while l < 32 {
        idx[2 * l] = (2 * f[l]) as i8;
        idx[2 * l + 1] = (2 * f[l] + 1) as i8;
        l += 1;
    }
    idx
}

/// `dm` with its words `4j + g`, `16 + 4j + g` ([`pair_mask`]) replaced by
/// the words of `a` that the word indices `idx` pick, by a word permute.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn pairs_words(dm: __m512i, g: usize, idx: __m512i, a: __m512i) -> __m512i {
    _mm512_mask_permutexvar_epi16(dm, pair_mask(g), idx, a)
}

/// [`pairs_words`] by a byte permute (VBMI): one µop where the masked
/// word permute takes three, two of them on the shuffle port (LLVM may
/// still pick a word form where it combines them; measured 2–4 % faster
/// in the Q4_1 kernel at K = 512 to 1536).
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
fn pairs_bytes(dm: __m512i, g: usize, idx: __m512i, a: __m512i) -> __m512i {
    _mm512_mask_permutexvar_epi8(dm, pair_byte_mask(g), idx, a)
}

/// Words `4j + g`, `16 + 4j + g` ([`pair_mask`]) taken from the words that
/// `idx` picks of the 64 words `[a | b]` ([`two_words`] indices), the
/// others zero, by a two-source word permute.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn pairs2_words(g: usize, a: __m512i, idx: __m512i, b: __m512i) -> __m512i {
    _mm512_maskz_permutex2var_epi16(pair_mask(g), a, idx, b)
}

/// [`pairs2_words`] by a two-source byte permute (VBMI, one µop).
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
fn pairs2_bytes(g: usize, a: __m512i, idx: __m512i, b: __m512i) -> __m512i {
    _mm512_maskz_permutex2var_epi8(pair_byte_mask(g), a, idx, b)
}

/// The first `len` bytes of 64 as a mask (all of them from 64 on).
const fn first_bytes(len: usize) -> __mmask64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

/// The 64 bytes at `p`, of which only the first `len` are read when `len <
/// 64`, the others zero (a masked load: masked-off bytes are not accessed,
/// so `p` may point anywhere past them).
///
/// # Safety
/// AVX-512 F/BW present; `p..p + min(len, 64)` readable.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn load_first(p: *const u8, len: usize) -> __m512i {
    if len >= 64 {
        // SAFETY: the caller guarantees 64 readable bytes.
        unsafe { _mm512_loadu_si512(p.cast()) }
    } else {
        // SAFETY: only the first `len` bytes are accessed, which the
        // caller guarantees readable.
        unsafe { _mm512_maskz_loadu_epi8(first_bytes(len), p.cast()) }
    }
}

/// Q8_1 `qs` halves of a four-block group in 128-bit lanes: word `8j + i`
/// of the first-half vector takes word `18j + 2 + i` (bytes `36j + 4 ..`)
/// of `[bytes 0..64 | bytes 64..128]`; the second halves are the same
/// words of the two loads 16 bytes further.
const Q8_1_QS_WORDS: [i16; 32] = two_words(gather_words(18, 2), 32);
/// [`Q8_1_QS_WORDS`] as byte indices.
const Q8_1_QS_BYTES: [i8; 64] = two_bytes(gather_bytes(36, 4), 64);
/// The `d` and `s` words of a Q8_1 group's blocks ([`pair_words`]).
const Q8_1_DS_WORDS: [i16; 32] = two_words(pair_words(18), 32);
/// Q4_1 `qs` of a four-block group, from `[bytes 0..64 | bytes 64..80]`:
/// block `j`'s are words `10j + 2 .. 10j + 10`.
const Q4_1_QS_WORDS: [i16; 32] = two_words(gather_words(10, 2), 32);
/// Byte `16j + i` (`j < 3`) takes byte `20j + 4 + i` (block `j`'s `qs`);
/// bytes 48.. are filled from memory.
const Q4_1_QS_BYTES: [i8; 64] = gather_bytes(20, 4);
/// Q5_1 `qs` of a four-block group, from `[bytes 0..64 | bytes 32..96]`:
/// block `j`'s are bytes `24j + 8 .. 24j + 24`.
const Q5_1_QS_WORDS: [i16; 32] = two_words(gather_words(12, 4), 16);
/// [`Q5_1_QS_WORDS`] as byte indices.
const Q5_1_QS_BYTES: [i8; 64] = two_bytes(gather_bytes(24, 8), 32);
/// The `d` and `m` words of a Q5_1 group's blocks, from the same sources.
const Q5_1_DM_WORDS: [i16; 32] = two_words(pair_words(12), 16);

/// The activations of the Q8_1 group at `yp` of which the first `n` blocks
/// (1 to 4) exist (the others read as zero): the first 16 codes of block
/// `j` in lane `j` of one vector, its last 16 in lane `j` of another, and
/// `ds` with its blocks' f16 `d` and `s` merged into words `4j + g` and
/// `16 + 4j + g` ([`pair_mask`]). `$permute` is the two-source permute of
/// the codes (word or byte), with indices `$idx`; `$pairs` that of the
/// scales ([`pairs2_words`] or [`pairs2_bytes`]).
macro_rules! q8_1_group {
    ($(#[$m:meta])* $name:ident, $features:literal, $permute:ident, $idx:expr, $pairs:ident, $ds_idx:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// AVX-512 F/BW present (VBMI for a byte permute); `yp..yp + 36·n`
        /// readable, `1 ≤ n ≤ 4`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name(yp: *const u8, n: usize, ds: __m512i, g: usize) -> Vec3 {
            let len = n * Q8_1_BYTES;
            // SAFETY: each load reads only its bytes below `len` (36·n), which
            // the caller guarantees readable; the others are masked off.
            let (a0, a1, b0, b1) = unsafe {
                (
                    load_first(yp, len),
                    load_first(yp.wrapping_add(64), len.saturating_sub(64)),
                    load_first(yp.wrapping_add(16), len.saturating_sub(16)),
                    load_first(yp.wrapping_add(80), len.saturating_sub(80)),
                )
            };
            let idx = $idx;
            let lo = $permute(a0, idx, a1);
            let hi = $permute(b0, idx, b1);
            let dsg = $pairs(g, a0, $ds_idx, a1);
            (lo, hi, _mm512_or_si512(ds, dsg))
        }
    };
}

q8_1_group!(
    /// Word-permute form.
    q8_1_group_words,
    "avx512f,avx512bw",
    _mm512_permutex2var_epi16,
    word_idx(Q8_1_QS_WORDS),
    pairs2_words,
    const { word_idx(Q8_1_DS_WORDS) }
);
q8_1_group!(
    /// Byte-permute form (AVX-512 VBMI: one µop where the word permute
    /// takes more).
    q8_1_group_vbmi,
    "avx512f,avx512bw,avx512vbmi",
    _mm512_permutex2var_epi8,
    byte_idx(Q8_1_QS_BYTES),
    pairs2_bytes,
    const { byte_idx(word_bytes(Q8_1_DS_WORDS)) }
);

/// The fifth bits of the first `n` blocks (1 to 4) of the Q5_1 group at
/// `wp`, as byte masks in the order of the codes: bit `16j + i` of the
/// first is element `i` of block `j`'s (`qh` bit `i`), of the second
/// element `16 + i`'s (`qh` bit `16 + i`). Scalar work, off the vector
/// ports these kernels are bound by.
///
/// # Safety
/// `wp..wp + 24·n` readable, `n ≤ 4`.
#[inline(always)]
unsafe fn q5_1_fifth_bits(wp: *const u8, n: usize) -> (__mmask64, __mmask64) {
    let (mut lo, mut hi) = (0u64, 0u64);
    for j in 0..n {
        // SAFETY: `qh` of block `j < n` (bytes `24j + 4 .. 24j + 8`).
        let qh = u32::from_le(unsafe { wp.add(Q5_1_BYTES * j + 4).cast::<u32>().read_unaligned() });
        lo |= u64::from(qh & 0xffff) << (16 * j);
        hi |= u64::from(qh >> 16) << (16 * j);
    }
    (lo, hi)
}

/// The Q4_1 codes of the group at `wp` whose first bytes are `a` (its
/// first `min(20·n, 64)`, the rest zero), block `j`'s 16 `qs` bytes at
/// bytes `16j ..`: one two-source word permute of `a` and bytes `64..80`
/// (read only for `n = 4`; lanes of missing blocks hold anything).
///
/// # Safety
/// AVX-512 F/BW present; `wp..wp + 20·n` readable, `1 ≤ n ≤ 4`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn q4_1_codes(wp: *const u8, n: usize, a: __m512i) -> __m512i {
    let b = if n == AFFINE_GROUP {
        // SAFETY: bytes `64..80`, block 3's `qs`, readable for `n = 4`.
        unsafe { _mm512_zextsi128_si512(_mm_loadu_si128(wp.add(64).cast())) }
    } else {
        _mm512_setzero_si512()
    };
    _mm512_permutex2var_epi16(a, word_idx(Q4_1_QS_WORDS), b)
}

/// [`q4_1_codes`] in cheaper µops: a one-source byte permute (VBMI) of `a`
/// for blocks 0–2, then block 3's `qs` (bytes `64..80`) loaded straight
/// into bytes 48..64 under a mask (as [`q4_0_codes_vbmi`]).
///
/// # Safety
/// AVX-512 F/BW/VBMI present; `wp..wp + 20·n` readable, `1 ≤ n ≤ 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
#[inline]
unsafe fn q4_1_codes_vbmi(wp: *const u8, n: usize, a: __m512i) -> __m512i {
    let v = _mm512_permutexvar_epi8(byte_idx(Q4_1_QS_BYTES), a);
    if n == AFFINE_GROUP {
        // SAFETY: only the unmasked bytes 48..64 are read, at `wp + 64 ..
        // wp + 80`: block 3's `qs`, readable for `n = 4` (masked-off bytes
        // are not accessed).
        unsafe { _mm512_mask_loadu_epi8(v, 0xffff << 48, wp.add(16).cast()) }
    } else {
        v
    }
}

/// The Q4_1 (`$wb` = 20) or Q5_1 (24) group decoder `$name`: the codes of
/// the group at `wp` of which the first `n` blocks (1 to 4) exist (block
/// `j`'s first 16 codes in lane `j` of the first vector, its last 16 in
/// lane `j` of the second; lanes past `n` hold anything, to meet
/// activations of zero), and `dm` with the blocks' f16 `d` and `m` merged
/// into words `4j + g` and `16 + 4j + g` ([`pair_mask`]) by `$pairs`
/// (word or byte permutes: [`pairs_words`], [`pairs2_words`] or their byte
/// forms).
macro_rules! affine_group {
    (q4_1, $(#[$m:meta])* $name:ident, $features:literal, $hi:ident, $codes:ident, $pairs:ident, $dm_idx:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The features present; `wp..wp + 20·n` readable, `1 ≤ n ≤ 4`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name(wp: *const u8, n: usize, dm: __m512i, g: usize) -> Vec3 {
            // SAFETY: bytes below `20·n` only (the caller's guarantee).
            let a = unsafe { load_first(wp, n * Q4_1_BYTES) };
            // SAFETY: as above.
            let v = unsafe { $codes(wp, n, a) };
            let dm = $pairs(dm, g, $dm_idx, a);
            (_mm512_and_si512(v, _mm512_set1_epi8(0x0f)), $hi(v), dm)
        }
    };
    (q5_1, $(#[$m:meta])* $name:ident, $features:literal, $hi:ident, $permute:ident, $idx:expr, $pairs:ident, $dm_idx:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The features present; `wp..wp + 24·n` readable, `1 ≤ n ≤ 4`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name(wp: *const u8, n: usize, dm: __m512i, g: usize) -> Vec3 {
            let len = n * Q5_1_BYTES;
            // SAFETY: bytes below `24·n` only (the caller's guarantee); the
            // rest are masked off.
            let (a, b) = unsafe {
                (load_first(wp, len), load_first(wp.wrapping_add(32), len.saturating_sub(32)))
            };
            let v = $permute(a, $idx, b);
            let dmg = $pairs(g, a, $dm_idx, b);
            // SAFETY: the `qh` of the first `n` blocks (the caller's guarantee).
            let (klo, khi) = unsafe { q5_1_fifth_bits(wp, n) };
            let sixteen = _mm512_set1_epi8(0x10);
            let lo = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
            let hi = $hi(v);
            (
                _mm512_mask_add_epi8(lo, klo, lo, sixteen),
                _mm512_mask_add_epi8(hi, khi, hi, sixteen),
                _mm512_or_si512(dm, dmg),
            )
        }
    };
}

affine_group!(
    q4_1,
    /// Q4_1 codes by a two-source word permute, high nibbles by shift and mask.
    q4_1_group,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    high_nibbles,
    q4_1_codes,
    pairs_words,
    const { word_idx(pair_words(10)) }
);
affine_group!(
    q4_1,
    /// Q4_1 codes by a byte permute and a masked load (VBMI), high nibbles
    /// by GFNI.
    q4_1_group_vbmi,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni,avx512vbmi",
    high_nibbles_gfni,
    q4_1_codes_vbmi,
    pairs_bytes,
    const { byte_idx(word_bytes(pair_words(10))) }
);
affine_group!(
    q5_1,
    /// Q5_1 codes by a two-source word permute, high nibbles by shift and mask.
    q5_1_group,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    high_nibbles,
    _mm512_permutex2var_epi16,
    word_idx(Q5_1_QS_WORDS),
    pairs2_words,
    const { word_idx(Q5_1_DM_WORDS) }
);
affine_group!(
    q5_1,
    /// Q5_1 codes by a two-source byte permute (VBMI), high nibbles by GFNI.
    q5_1_group_vbmi,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni,avx512vbmi",
    high_nibbles_gfni,
    _mm512_permutex2var_epi8,
    byte_idx(Q5_1_QS_BYTES),
    pairs2_bytes,
    const { byte_idx(word_bytes(Q5_1_DM_WORDS)) }
);

/// The `R`-row affine-format × Q8_1 kernel `$rows` (documented at its
/// invocation), for weight blocks of `$wb` bytes decoded by `$group`,
/// activations by `$acts`, compiled for `$features`.
macro_rules! affine_kernel {
    ($(#[$m:meta])* $rows:ident, $features:literal, $wb:expr, $group:ident, $acts:ident) => {
        $(#[$m])*
        #[target_feature(enable = $features)]
        unsafe fn $rows<const R: usize>(w: [*const u8; R], y: *const u8, nb: usize) -> [f32; R] {
            /// Blocks `b0 .. b0 + nbs` of every row into `acc`: `G` groups
            /// (`4·(G − 1) < nbs ≤ 4·G`; `G = 4`, `nbs = 16` when `FULL`, a
            /// whole super-group). The group count is a constant, so that
            /// every loop here unrolls; only the last group's block count
            /// varies, unless `FULL`.
            ///
            /// # Safety
            /// As the enclosing function's; `b0 + nbs ≤ nb`.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn step<const R: usize, const G: usize, const FULL: bool>(
                acc: &mut [__m512; R],
                w: [*const u8; R],
                y: *const u8,
                pf: usize,
                b0: usize,
                nbs: usize,
            ) {
                let zero = _mm512_setzero_si512();
                // Blocks of group `g < G`.
                let blocks = |g: usize| {
                    if FULL || g + 1 < G {
                        AFFINE_GROUP
                    } else {
                        nbs - AFFINE_GROUP * g
                    }
                };
                // The activations, once for all rows.
                let mut ys = [(zero, zero); G];
                let mut ds = zero;
                for (g, yg) in ys.iter_mut().enumerate() {
                    let n = blocks(g);
                    // SAFETY: blocks `b0 + 4g .. b0 + 4g + n ≤ nb` of `y`.
                    let yp = unsafe { y.add((b0 + AFFINE_GROUP * g) * Q8_1_BYTES) };
                    // SAFETY: as above: the `n` blocks at `yp`.
                    let (lo, hi, d) = unsafe { $acts(yp, n, ds, g) };
                    (*yg, ds) = ((lo, hi), d);
                }
                let mut dy = _mm512_cvtph_ps(_mm512_castsi512_si256(ds));
                let sy = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(ds));
                if G == 1 {
                    // One group (group 0: block `j` at lane `4j`): scaled
                    // per lane, each block's `dy` in its four lanes.
                    dy = _mm512_permute_ps::<0>(dy);
                }
                for (a, wr) in acc.iter_mut().zip(w) {
                    // Groups past `G` stay zero.
                    let mut t = [zero; AFFINE_SUPER / AFFINE_GROUP];
                    let mut dm = zero;
                    for (g, (tg, yg)) in t.iter_mut().zip(ys).enumerate() {
                        let n = blocks(g);
                        let wg = wr.wrapping_add((b0 + AFFINE_GROUP * g) * $wb);
                        prefetch(wg.wrapping_add(pf));
                        prefetch(wg.wrapping_add(pf + 64));
                        // SAFETY: blocks `b0 + 4g .. b0 + 4g + n ≤ nb` of
                        // row `wr`, at `wg`.
                        let (lo, hi, d) = unsafe { $group(wg, n, dm, g) };
                        dm = d;
                        *tg = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, yg.0), hi, yg.1);
                    }
                    let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
                    let mx = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(dm));
                    let (u, dx) = if G == 1 {
                        // Lane `4j + i`: part `i` of block `j`'s dot (exact,
                        // at most 8·31·127), by its block's `dx·dy`: for one
                        // group, cheaper than summing the parts first. The
                        // min terms stay in lanes `4j`.
                        (_mm512_cvtepi32_ps(t[0]), _mm512_permute_ps::<0>(dx))
                    } else {
                        (_mm512_cvtepi32_ps(sum_parts(t)), dx)
                    };
                    *a = _mm512_fmadd_ps(u, _mm512_mul_ps(dx, dy), *a);
                    *a = _mm512_fmadd_ps(mx, sy, *a);
                }
            }
            let pf = R * nb * $wb;
            let mut acc = [_mm512_setzero_ps(); R];
            let full = nb / AFFINE_SUPER;
            for s in 0..full {
                // SAFETY: super-group `s < full`: blocks `16s .. 16s + 16 ≤ nb`.
                unsafe { step::<R, 4, true>(&mut acc, w, y, pf, s * AFFINE_SUPER, AFFINE_SUPER) };
            }
            let (b0, rest) = (full * AFFINE_SUPER, nb % AFFINE_SUPER);
            // SAFETY: the last blocks, `b0 .. nb`, in `⌈rest / 4⌉` groups.
            unsafe {
                match rest.div_ceil(AFFINE_GROUP) {
                    1 => step::<R, 1, false>(&mut acc, w, y, pf, b0, rest),
                    2 => step::<R, 2, false>(&mut acc, w, y, pf, b0, rest),
                    3 => step::<R, 3, false>(&mut acc, w, y, pf, b0, rest),
                    4 => step::<R, 4, false>(&mut acc, w, y, pf, b0, rest),
                    _ => {}
                }
            }
            sum_rows(acc)
        }
    };
}

affine_kernel!(
    /// Q4_1 × Q8_1 over super-groups of sixteen blocks of `R` rows: each
    /// group of four blocks is one 64-byte vector of codes per half (block
    /// `j`'s first 16 codes, the low nibbles, in 128-bit lane `j` of one,
    /// its last 16 in lane `j` of the other) against the activation
    /// halves gathered the same way (once for all rows), two chained
    /// `vpdpbusd` (unsigned codes × signed activations). Per row, the four
    /// groups' i32 lanes are summed to sixteen exact block dots
    /// ([`sum_parts`]) before they meet `dx·dy`, and the min terms
    /// `mx·sy` are added in a second FMA; the sixteen `dx`, `mx` (and,
    /// for the activations, `dy`, `sy`) are gathered as f16 and widened at
    /// once. The last, partial super-group runs the same steps with masked
    /// loads (missing blocks read as zero codes, activations and scales);
    /// a single group there scales its four lanes per block one by one
    /// rather than summing them first. The rows' sums come out of one
    /// shuffle tree ([`sum_rows`]).
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds
    /// `nb` Q4_1 blocks and `y` `nb` Q8_1 blocks.
    q4_1_rows,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    Q4_1_BYTES,
    q4_1_group,
    q8_1_group_words
);
affine_kernel!(
    /// [`q4_1_rows`] with codes and activations gathered by byte permutes
    /// (VBMI) and the high nibbles taken by GFNI.
    ///
    /// # Safety
    /// As [`q4_1_rows`], and GFNI and AVX-512 VBMI present.
    q4_1_rows_vbmi,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni,avx512vbmi",
    Q4_1_BYTES,
    q4_1_group_vbmi,
    q8_1_group_vbmi
);
affine_kernel!(
    /// Q5_1 × Q8_1: [`q4_1_rows`] with each code's fifth bit (from `qh`,
    /// turned into byte masks by scalar code) added as `0x10`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds
    /// `nb` Q5_1 blocks and `y` `nb` Q8_1 blocks.
    q5_1_rows,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    Q5_1_BYTES,
    q5_1_group,
    q8_1_group_words
);
affine_kernel!(
    /// [`q5_1_rows`] with codes and activations gathered by byte permutes
    /// (VBMI) and the high nibbles taken by GFNI.
    ///
    /// # Safety
    /// As [`q5_1_rows`], and GFNI and AVX-512 VBMI present.
    q5_1_rows_vbmi,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni,avx512vbmi",
    Q5_1_BYTES,
    q5_1_group_vbmi,
    q8_1_group_vbmi
);

// ---------------------------------------------------------------------------
// F16 against f32 activations.

/// # Safety
/// AVX-512F, AVX2, FMA and F16C present; each `w[r]` holds `k` f16 and `x`
/// `k` f32.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn f16_rows<const R: usize>(w: [*const u8; R], x: *const f32, k: usize) -> [f32; R] {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    let pf = (R * 2 * k).max(PREFETCH_MIN);
    let mut i = 0usize;
    while i + 64 <= k {
        for j in 0..4 {
            // SAFETY: elements `i + 16j .. i + 16j + 16 ≤ k`.
            let xv = unsafe { _mm512_loadu_ps(x.add(i + 16 * j)) };
            for (a, wr) in acc.iter_mut().zip(w) {
                let p = wr.wrapping_add(2 * (i + 16 * j));
                if j % 2 == 0 {
                    prefetch(p.wrapping_add(pf));
                }
                // SAFETY: the same elements of row `wr`.
                let wv = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) };
                a[j] = _mm512_fmadd_ps(wv, xv, a[j]);
            }
        }
        i += 64;
    }
    while i + 16 <= k {
        // SAFETY: elements `i .. i + 16 ≤ k`.
        let xv = unsafe { _mm512_loadu_ps(x.add(i)) };
        for (a, wr) in acc.iter_mut().zip(w) {
            // SAFETY: the same elements of row `wr`.
            let wv = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(wr.add(2 * i).cast())) };
            a[0] = _mm512_fmadd_ps(wv, xv, a[0]);
        }
        i += 16;
    }
    let mut out = [0.0f32; R];
    for ((o, a), wr) in out.iter_mut().zip(acc).zip(w) {
        let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(
            _mm512_add_ps(a[0], a[1]),
            _mm512_add_ps(a[2], a[3]),
        ));
        for e in i..k {
            // SAFETY: element `e < k` of row `wr` and of `x`.
            sum += unsafe { avx2::rdf16(wr.add(2 * e)) * *x.add(e) };
        }
        *o = sum;
    }
    out
}

// ---------------------------------------------------------------------------
// K-quants against Q8_K.

/// Word indices picking, for each half of a 64-code vector, the i16 scale
/// of its sub-block from a vector of scales: output word `l` takes word
/// `first + (l / per)·step`.
const fn scale_words(first: i16, per: i16, step: i16) -> [i16; 32] {
    let mut idx = [0i16; 32];
    let mut l = 0;
    while l < 32 {
        idx[l] = first + (l as i16 / per) * step;
        l += 1;
    }
    idx
}

/// Two 32-byte halves, `p` in the low and `q` in the high half.
///
/// # Safety
/// AVX-512F present; `p..p + 32` and `q..q + 32` readable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn halves(p: *const u8, q: *const u8) -> __m512i {
    // SAFETY: the caller guarantees both 32-byte reads; unaligned loads.
    let (a, b) = unsafe { (_mm256_loadu_si256(p.cast()), _mm256_loadu_si256(q.cast())) };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
}

/// `acc + a·b` by i16 pairs into i32 lanes (`vpdpwssd`), as that one
/// instruction. Through `asm!` because LLVM's machine combiner otherwise
/// rewrites links of a chain of `_mm512_dpwssd_epi32` into `vpmaddwd` +
/// `vpaddd` to shorten the chain: one more µop on the two 512-bit ports
/// the K-quant kernels are bound by, for a latency that the out-of-order
/// core hides anyway (rows and blocks are independent).
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
fn dpwssd(mut acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    // SAFETY: a register-only AVX-512 VNNI instruction (enabled for this
    // function): no memory access, no flags, no stack.
    unsafe {
        core::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Per-lane (128-bit) `vpshufb` indices on a Q4_K block's first 16 bytes
/// (`d`, `dmin`, then the twelve scale bytes `q` at 4..16) pairing, in
/// word `j`, the bytes that scale `j` is made of: the low six bits of
/// `q[j]` for `j < 4`; for `j ≥ 4` the low nibble of `q[j + 4]` (low byte)
/// and the top two bits of `q[j − 4]` (high byte). `−1` gives a zero byte.
const Q4K_SC_BYTES: [i8; 16] = [4, -1, 5, -1, 6, -1, 7, -1, 12, 4, 13, 5, 14, 6, 15, 7];
/// The same for the mins: `q[j + 4]` for `j < 4`; for `j ≥ 4` the high
/// nibble of `q[j + 4]` and the top two bits of `q[j]`.
const Q4K_MIN_BYTES: [i8; 16] = [8, -1, 9, -1, 10, -1, 11, -1, 12, 8, 13, 9, 14, 10, 15, 11];
/// Per-word right shifts of the mins' low-byte field: the high nibble for
/// `j ≥ 4`.
const Q4K_MIN_SHIFT: [i16; 8] = [0, 0, 0, 0, 4, 4, 4, 4];
/// Per-word masks of the low-byte field (six bits for `j < 4`, a nibble
/// for `j ≥ 4`); their complement takes the top two bits of the high byte,
/// shifted down by 10 to bits 4..6.
const Q4K_LOW: [i16; 8] = [63, 63, 63, 63, 15, 15, 15, 15];

/// `v` repeated to `M` elements (a 128-bit lane pattern repeated in the
/// four lanes of a 512-bit vector; `fill` only initializes).
const fn lanes4<T: Copy, const N: usize, const M: usize>(v: [T; N], fill: T) -> [T; M] {
    let mut out = [fill; M];
    let mut i = 0;
    while i < M {
        out[i] = v[i % N];
        i += 1;
    }
    out
}

/// The scales (words `8r..8r + 8`) and mins (likewise) of the Q4_K blocks
/// at `p[r]`, zero-extended to i16 — [`avx2::kscales`]' values for up to
/// four rows at once — and their `[d, dmin]` f16 pairs in dwords `0..R`.
///
/// # Safety
/// AVX-512 F/BW/VL present; `p[r]..p[r] + 16` readable; `R ≤ 4`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn q4_k_headers<const R: usize>(p: [*const u8; R]) -> (__m512i, __m512i, __m128i) {
    use core::mem::transmute;
    // SAFETY: the caller guarantees 16 readable bytes at each `p[r]`.
    let h = unsafe {
        let mut h = _mm512_zextsi128_si512(_mm_loadu_si128(p[0].cast()));
        if R > 1 {
            h = _mm512_inserti32x4::<1>(h, _mm_loadu_si128(p[1].cast()));
        }
        if R > 2 {
            h = _mm512_inserti32x4::<2>(h, _mm_loadu_si128(p[2].cast()));
        }
        if R > 3 {
            h = _mm512_inserti32x4::<3>(h, _mm_loadu_si128(p[3].cast()));
        }
        h
    };
    const SC_IDX: [i8; 64] = lanes4(Q4K_SC_BYTES, 0);
    const MIN_IDX: [i8; 64] = lanes4(Q4K_MIN_BYTES, 0);
    const MIN_SHIFT: [i16; 32] = lanes4(Q4K_MIN_SHIFT, 0);
    const LOW: [i16; 32] = lanes4(Q4K_LOW, 0);
    // SAFETY: `[i8; 64]`/`[i16; 32]` and `__m512i` are 64 plain bytes.
    let (sc_idx, min_idx, min_shift, low) = unsafe {
        (
            transmute::<[i8; 64], __m512i>(SC_IDX),
            transmute::<[i8; 64], __m512i>(MIN_IDX),
            transmute::<[i16; 32], __m512i>(MIN_SHIFT),
            transmute::<[i16; 32], __m512i>(LOW),
        )
    };
    // Where `low` is set the low-byte field, elsewhere the high byte's top
    // two bits moved to bits 4..6: `(a & low) | (b & !low)`.
    let ws = _mm512_shuffle_epi8(h, sc_idx);
    let sc = _mm512_ternarylogic_epi32::<0xE4>(ws, _mm512_srli_epi16::<10>(ws), low);
    let wm = _mm512_shuffle_epi8(h, min_idx);
    let mins = _mm512_ternarylogic_epi32::<0xE4>(
        _mm512_srlv_epi16(wm, min_shift),
        _mm512_srli_epi16::<10>(wm),
        low,
    );
    let d = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        h,
    );
    (sc, mins, _mm512_castsi512_si128(d))
}

/// `vpshufb` indices on one row's eight i16 scales repeated in every 128-bit
/// lane ([`q4_k_headers`]' words `8r..8r + 8`): every word of lanes 0–1
/// takes scale `a`, every word of lanes 2–3 scale `b`.
const fn scale_bytes(a: i8, b: i8) -> [i8; 64] {
    let mut v = [0i8; 64];
    let mut i = 0;
    while i < 64 {
        v[i] = 2 * if i < 32 { a } else { b } + (i % 2) as i8;
        i += 1;
    }
    v
}

/// The scales of half `h`'s low (`[h][0]`) and high (`[h][1]`) nibble
/// codes, as [`scale_bytes`]: low nibbles are sub-blocks `4h` and `4h + 2`,
/// high nibbles `4h + 1` and `4h + 3`.
const Q4K_SCALE_BYTES: [[[i8; 64]; 2]; 2] = [
    [scale_bytes(0, 2), scale_bytes(1, 3)],
    [scale_bytes(4, 6), scale_bytes(5, 7)],
];

/// The high nibble of every byte of `q`, by shift and mask.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn high_nibbles(q: __m512i) -> __m512i {
    _mm512_and_si512(_mm512_srli_epi16::<4>(q), _mm512_set1_epi8(0x0f))
}

/// The high nibble of every byte of `q` in one GFNI affine transform (bit
/// `i` of each output byte is bit `i + 4` of the input byte, bits 4–7
/// zero): one µop instead of two on the ports these kernels are bound by.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
#[inline]
fn high_nibbles_gfni(q: __m512i) -> __m512i {
    // Row `i` of the bit matrix (byte `7 − i` of the qword) selects input
    // bit `i + 4`.
    _mm512_gf2p8affine_epi64_epi8::<0>(q, _mm512_set1_epi64(0x1020_4080_0000_0000))
}

/// The Q4_K × Q8_K `R`-row kernel `$name`, compiled for the features
/// `$features`, taking the high nibbles with `$hi` (the two forms give the
/// same bits).
macro_rules! q4_k_kernel {
    ($(#[$m:meta])* $name:ident, $features:literal, $hi:ident) => {
        $(#[$m])*
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(w: [*const u8; R], y: *const u8, nb: usize) -> [f32; R] {
            const { assert!(R <= 4) };
            let m4 = _mm512_set1_epi8(0x0f);
            let pf = R * nb * Q4K_BYTES;
            // `[d·dy, dmin·dy]` of row `r` sit in lanes `2r`, `2r + 1`.
            let dmin_idx = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
            // SAFETY: `[i8; 64]` and `__m512i` are both 64 plain bytes.
            let sidx = Q4K_SCALE_BYTES.map(|h| h.map(|v| unsafe { core::mem::transmute::<[i8; 64], __m512i>(v) }));
            let mut acc = [_mm512_setzero_ps(); R];
            let mut accm = _mm512_setzero_ps();
            for b in 0..nb {
                // SAFETY: block `b < nb` of the activations (292 bytes): `d`,
                // `bsums` and the four 64-code vectors in sub-block order.
                let (dy, bsums, yv) = unsafe {
                    let yp = y.add(b * Q8K_BYTES);
                    let q = yp.add(4);
                    (
                        avx2::rdf32(yp),
                        {
                            // The eight 32-element sums `bsums[2i] + bsums[2i + 1]`
                            // (|·| ≤ 32·127: exact in i16), once for all rows, in
                            // every 128-bit lane.
                            let b16 = _mm256_loadu_si256(yp.add(260).cast());
                            let b32 = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
                            _mm512_broadcast_i32x4(_mm_packs_epi32(
                                _mm256_castsi256_si128(b32),
                                _mm256_extracti128_si256::<1>(b32),
                            ))
                        },
                        [
                            [halves(q, q.add(64)), halves(q.add(32), q.add(96))],
                            [
                                halves(q.add(128), q.add(192)),
                                halves(q.add(160), q.add(224)),
                            ],
                        ],
                    )
                };
                let wp = w.map(|p| p.wrapping_add(b * Q4K_BYTES));
                for &p in &wp {
                    prefetch(p.wrapping_add(pf));
                    prefetch(p.wrapping_add(pf + 64));
                    prefetch(p.wrapping_add(pf + 128));
                }
                // SAFETY: block `b < nb` of every row: its first 16 bytes.
                let (sc, mins, dh) = unsafe { q4_k_headers(wp) };
                let dd = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(dh), _mm256_set1_ps(dy)));
                let mins = _mm512_madd_epi16(bsums, mins);
                accm = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(mins),
                    _mm512_permutexvar_ps(dmin_idx, dd),
                    accm,
                );
                for (r, a) in acc.iter_mut().enumerate() {
                    // Row `r`'s scales (128-bit lane `r`) in every lane, for
                    // the in-lane shuffles below (one µop each, where a
                    // cross-lane word permute takes two).
                    let scr = match r {
                        0 => _mm512_shuffle_i32x4::<0x00>(sc, sc),
                        1 => _mm512_shuffle_i32x4::<0x55>(sc, sc),
                        2 => _mm512_shuffle_i32x4::<0xAA>(sc, sc),
                        _ => _mm512_shuffle_i32x4::<0xFF>(sc, sc),
                    };
                    let d = _mm512_permutexvar_ps(_mm512_set1_epi32(2 * r as i32), dd);
                    let mut isum = _mm512_setzero_si512();
                    for (h, idx) in sidx.iter().enumerate() {
                        // SAFETY: `qs[64h..64h + 64]` of block `b` of row `r`.
                        let q = unsafe { _mm512_loadu_si512(wp[r].add(16 + 64 * h).cast()) };
                        let lo = _mm512_and_si512(q, m4);
                        let hi = $hi(q);
                        let slo = _mm512_shuffle_epi8(scr, idx[0]);
                        let shi = _mm512_shuffle_epi8(scr, idx[1]);
                        isum = dpwssd(isum, _mm512_maddubs_epi16(lo, yv[h][0]), slo);
                        isum = dpwssd(isum, _mm512_maddubs_epi16(hi, yv[h][1]), shi);
                    }
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, *a);
                }
            }
            // SAFETY: `__m512` and `[__m128; 4]` are 64 plain bytes.
            let accm: [__m128; 4] = unsafe { core::mem::transmute(accm) };
            let mut out = [0.0f32; R];
            for ((o, a), am) in out.iter_mut().zip(acc).zip(accm) {
                let m2 = _mm_add_ps(am, _mm_movehl_ps(am, am));
                let mins = _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
                *o = _mm512_reduce_add_ps(a) - mins;
            }
            out
        }
    };
}

q4_k_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds
    /// `nb` Q4_K blocks and `y` `nb` Q8_K blocks; `R ≤ 4`.
    ///
    /// Per 64 weight bytes (half `h` of a block), the low nibbles are
    /// sub-blocks `4h` and `4h + 2` (activations `128h + 0..32` and
    /// `128h + 64..96`), the high nibbles sub-blocks `4h + 1` and `4h + 3`;
    /// `maddubs` (exact: codes ≤ 15) then `vpdpwssd` with the sub-block
    /// scales, which in-lane byte shuffles spread from the row's scales.
    ///
    /// The `R` rows' block headers are unpacked together in vector
    /// registers ([`q4_k_headers`]): their `d`, `dmin` widened in one
    /// `vcvtph2ps` and scaled by `dy` in one multiply, their min terms
    /// `dmin·Σ m·bsum` in one 512-bit `madd`, convert and FMA (row `r` in
    /// lanes `4r..4r + 4`). Every lane sees the operations of the one-row
    /// form, so one and four rows give the same bits.
    q4_k_rows,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    high_nibbles
);
q4_k_kernel!(
    /// [`q4_k_rows`] with the high nibbles taken by GFNI.
    ///
    /// # Safety
    /// As [`q4_k_rows`], and GFNI present.
    q4_k_rows_gfni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni",
    high_nibbles_gfni
);

/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; each `w[r]` holds `nb`
/// Q6_K blocks and `y` `nb` Q8_K blocks.
///
/// Half `h` of a block gives two 64-code vectors: `[ql & 15 | ql' & 15]`
/// and `[ql >> 4 | ql' >> 4]` (`ql`, `ql'` the two 32-byte runs of
/// `ql[64h..64h + 64]`) with the two high bits from `qh[32h..32h + 32]`
/// shifted per 256-bit half; they match activations `128h + 0..64` and
/// `128h + 64..128` in order. `maddubs` (exact: codes ≤ 63) then `vpdpwssd`
/// with the 16-element sub-block scales.
///
/// The lanes of a block's integer sum are added up (exactly, in i32) before
/// they meet its scale `dx·dy`, as in the reference: they are partial sums
/// that can be far larger than the block's, since an element's `sc·q·y` and
/// its offset `−32·sc·y` (from the `bsums`) land in different lanes. Scaled
/// one by one, they overflow or cancel and swallow the rest of the row when
/// one activation is huge (3e38 makes `dy = −3e38/127` and its code −127:
/// lanes near `f32::MAX` of opposite signs even where its weight is 0,
/// which gave 0 for a row of ~2). The four rows' block sums come out of one
/// shuffle tree ([`block_sums4`]), and are scaled and added in one 128-bit
/// FMA, lane `r` for row `r`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn q6_k_rows<const R: usize>(w: [*const u8; R], y: *const u8, nb: usize) -> [f32; R] {
    let pf = R * nb * Q6K_BYTES;
    let m4 = _mm512_set1_epi8(0x0f);
    let m30 = _mm512_set1_epi8(0x30);
    // Per-half shift counts: `qh << 4 | qh << 2` and `qh >> 0 | qh >> 2`.
    let shl = _mm512_inserti64x4::<1>(_mm512_set1_epi16(4), _mm256_set1_epi16(2));
    let shr = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(2));
    let sidx = [
        [
            word_idx(scale_words(0, 8, 1)),
            word_idx(scale_words(4, 8, 1)),
        ],
        [
            word_idx(scale_words(8, 8, 1)),
            word_idx(scale_words(12, 8, 1)),
        ],
    ];
    const { assert!(R <= 4) };
    // Lane `r`: row `r`'s sum over the blocks so far.
    let mut acc = _mm_setzero_ps();
    for b in 0..nb {
        // SAFETY: block `b < nb` of the activations (292 bytes): `d`,
        // `bsums` and the four 64-code vectors.
        let (dy, bsums, yv) = unsafe {
            let yp = y.add(b * Q8K_BYTES);
            let q = yp.add(4);
            (
                avx2::rdf32(yp),
                _mm256_loadu_si256(yp.add(260).cast()),
                [
                    [
                        _mm512_loadu_si512(q.cast()),
                        _mm512_loadu_si512(q.add(64).cast()),
                    ],
                    [
                        _mm512_loadu_si512(q.add(128).cast()),
                        _mm512_loadu_si512(q.add(192).cast()),
                    ],
                ],
            )
        };
        let mut isums = [_mm512_setzero_si512(); 4];
        for (is, wr) in isums.iter_mut().zip(w) {
            // SAFETY: block `b < nb` of row `wr`.
            let wp = unsafe { wr.add(b * Q6K_BYTES) };
            prefetch(wp.wrapping_add(pf));
            prefetch(wp.wrapping_add(pf + 64));
            prefetch(wp.wrapping_add(pf + 128));
            prefetch(wp.wrapping_add(pf + 192));
            // SAFETY: `scales` of the weight block.
            let sc8 = unsafe { _mm_loadu_si128(wp.add(192).cast()) };
            // Σ sc·(q − 32)·y = Σ sc·q·y − 32·Σ_g sc_g·bsum_g.
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            let corr = _mm256_madd_epi16(bsums, sc16);
            let corr = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
            let mut i0 = _mm512_zextsi256_si512(corr);
            let mut i1 = _mm512_setzero_si512();
            let s16 = _mm512_castsi256_si512(sc16);
            for h in 0..2 {
                // SAFETY: `ql[64h..64h + 64]` and `qh[32h..32h + 32]`.
                let (l, qh) = unsafe {
                    (
                        _mm512_loadu_si512(wp.add(64 * h).cast()),
                        _mm512_broadcast_i64x4(_mm256_loadu_si256(wp.add(128 + 32 * h).cast())),
                    )
                };
                let c0 = _mm512_or_si512(
                    _mm512_and_si512(l, m4),
                    _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30),
                );
                let c1 = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4),
                    _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30),
                );
                let s0 = _mm512_permutexvar_epi16(sidx[h][0], s16);
                let s1 = _mm512_permutexvar_epi16(sidx[h][1], s16);
                i0 = _mm512_dpwssd_epi32(i0, _mm512_maddubs_epi16(c0, yv[h][0]), s0);
                i1 = _mm512_dpwssd_epi32(i1, _mm512_maddubs_epi16(c1, yv[h][1]), s1);
            }
            *is = _mm512_add_epi32(i0, i1);
        }
        // The rows' `dx` (0 past the last row), times `dy`.
        let mut dx = 0u64;
        for (r, wr) in w.iter().enumerate() {
            // SAFETY: `d` of block `b < nb` of row `wr`.
            dx |= unsafe { avx2::rd16(wr.add(b * Q6K_BYTES + 208)) } << (16 * r);
        }
        let d = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(dx as i64)), _mm_set1_ps(dy));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(block_sums4(isums)), d, acc);
    }
    let mut out = [0.0f32; R];
    let mut lanes = [0.0f32; 4];
    // SAFETY: `lanes` holds four f32; unaligned store.
    unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), acc) };
    out.copy_from_slice(&lanes[..R]);
    out
}

/// The sums of the sixteen i32 lanes of each of `v[0..4]`, in lanes 0..4
/// (exact, wrapping): three interleave-and-add steps leave each 128-bit
/// quarter holding the four vectors' sums of its lanes, then the quarters
/// are added.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn block_sums4(v: [__m512i; 4]) -> __m128i {
    let pair = |a, b| _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    // Per quarter: lanes `[v0, v1, v0, v1]`, then `[v2, v3, v2, v3]`,
    // then `[v0, v1, v2, v3]` (partial sums).
    let (s01, s23) = (pair(v[0], v[1]), pair(v[2], v[3]));
    let q = _mm512_add_epi32(
        _mm512_unpacklo_epi64(s01, s23),
        _mm512_unpackhi_epi64(s01, s23),
    );
    let h = _mm256_add_epi32(_mm512_castsi512_si256(q), _mm512_extracti64x4_epi64::<1>(q));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::io::Write;
    use std::vec;

    /// Whether this machine runs AVX-512 (and GFNI, with `gfni`); else the
    /// test says it is skipped, on stderr past the test harness's capture
    /// (`scripts/test` counts such lines as skipped, not passed).
    fn avx512_here(gfni: bool) -> bool {
        let here = crate::isa::Isa::Avx512.is_supported() && (!gfni || has_gfni());
        if !here {
            let what = if gfni { "AVX-512 with GFNI" } else { "AVX-512" };
            let _ = writeln!(std::io::stderr(), "skipped: no {what} on this machine");
        }
        here
    }

    /// A xorshift64 generator from `state` (not 0).
    fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    /// The Q4_0 kernels (high nibbles by shift and mask or by GFNI, codes
    /// gathered by word permute or by VBMI)
    /// give the same bits, for one and four rows and a partial last
    /// super-group, on random blocks against random Q8_0 activations with
    /// their side data.
    #[test]
    fn q4_0_gfni_matches_shift_and_mask() {
        if !avx512_here(true) {
            return;
        }
        let vbmi = has_vbmi();
        if !vbmi {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no AVX-512 VBMI on this machine"
            );
        }
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        // 4 super-groups and 3 groups, then the AVX2 tail's block (the
        // tail is the same code in both).
        let nb = 16 * 4 + 4 * 3 + 1;
        let k = 32 * nb;
        for _ in 0..50 {
            let mut w = vec![0u8; 4 * nb * 18];
            w.iter_mut().for_each(|b| *b = next() as u8);
            let mut y = vec![0u8; nb * Q8_0_BYTES];
            y.iter_mut().for_each(|b| *b = next() as u8);
            for blk in w.chunks_exact_mut(18).chain(y.chunks_exact_mut(Q8_0_BYTES)) {
                // f16 `d` with an exponent well inside the finite range.
                blk[1] = 0x20 | (blk[1] & 0x1f);
            }
            let mut side = vec![0u8; side_bytes(DType::Q8_0, k)];
            crate::acts::side::write_side(DType::Q8_0, &y, k, &mut side).expect("side data");
            let rows: [*const u8; 4] = core::array::from_fn(|r| w[r * nb * 18..].as_ptr());
            let (yp, sp) = (y.as_ptr(), side.as_ptr());
            // SAFETY: AVX-512 F/BW/VL/VNNI (with AVX2, FMA, F16C) and GFNI
            // confirmed above; each row holds `nb` blocks, `y` `nb` blocks
            // and `side` their side data.
            let (a4, b4, a1, b1) = unsafe {
                (
                    q4_0_rows::<4>(rows, yp, sp, nb),
                    q4_0_rows_gfni::<4>(rows, yp, sp, nb),
                    q4_0_rows::<1>([rows[1]], yp, sp, nb),
                    q4_0_rows_gfni::<1>([rows[1]], yp, sp, nb),
                )
            };
            assert_eq!(a4.map(f32::to_bits), b4.map(f32::to_bits));
            assert_eq!(a1[0].to_bits(), b1[0].to_bits());
            assert_eq!(a1[0].to_bits(), a4[1].to_bits());
            if vbmi {
                // SAFETY: as above, and AVX-512 VBMI confirmed.
                let (c4, c1) = unsafe {
                    (
                        q4_0_rows_vbmi::<4>(rows, yp, sp, nb),
                        q4_0_rows_vbmi::<1>([rows[1]], yp, sp, nb),
                    )
                };
                assert_eq!(a4.map(f32::to_bits), c4.map(f32::to_bits));
                assert_eq!(a1[0].to_bits(), c1[0].to_bits());
            }
        }
    }

    /// The two Q4_K kernels (high nibbles by shift and mask, or by GFNI)
    /// give the same bits, for one and four rows, on random blocks (`d`,
    /// `dmin` kept finite) against random Q8_K activations.
    #[test]
    fn q4_k_gfni_matches_shift_and_mask() {
        if !avx512_here(true) {
            return;
        }
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let nb = 9;
        for _ in 0..50 {
            let mut w = vec![0u8; 4 * nb * Q4K_BYTES];
            w.iter_mut().for_each(|b| *b = next() as u8);
            for blk in w.chunks_exact_mut(Q4K_BYTES) {
                // f16 `d`, `dmin` with exponents well inside the finite range.
                blk[1] = 0x20 | (blk[1] & 0x1f);
                blk[3] = 0x20 | (blk[3] & 0x1f);
            }
            let mut y = vec![0u8; nb * Q8K_BYTES];
            y.iter_mut().for_each(|b| *b = next() as u8);
            for blk in y.chunks_exact_mut(Q8K_BYTES) {
                blk[..4].copy_from_slice(&(next() as f32 / u64::MAX as f32).to_le_bytes());
            }
            let rows: [*const u8; 4] = core::array::from_fn(|r| w[r * nb * Q4K_BYTES..].as_ptr());
            // SAFETY: AVX-512 F/BW/VL/VNNI (with AVX2, FMA, F16C) and GFNI
            // confirmed above; each row holds `nb` blocks, `y` `nb` blocks.
            let (a4, b4, a1, b1) = unsafe {
                (
                    q4_k_rows::<4>(rows, y.as_ptr(), nb),
                    q4_k_rows_gfni::<4>(rows, y.as_ptr(), nb),
                    q4_k_rows::<1>([rows[2]], y.as_ptr(), nb),
                    q4_k_rows_gfni::<1>([rows[2]], y.as_ptr(), nb),
                )
            };
            assert_eq!(a4.map(f32::to_bits), b4.map(f32::to_bits));
            assert_eq!(a1[0].to_bits(), b1[0].to_bits());
            assert_eq!(a1[0].to_bits(), a4[2].to_bits());
        }
    }

    /// `Σ_b |dx·dy|·Σ|code·q| + |mx·sy|` over the Q4_1 (`wb` = 20) or Q5_1
    /// (24) row `w` against the Q8_1 blocks `y`: the scale of the error
    /// that reordering the f32 sums may cause (the block dots are exact).
    fn affine_magnitude(wb: usize, w: &[u8], y: &[u8]) -> f64 {
        let f16 = |b: &[u8], i: usize| {
            f64::from(half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()).abs()
        };
        let mut mag = 0.0;
        for (bw, by) in w.chunks_exact(wb).zip(y.chunks_exact(Q8_1_BYTES)) {
            let (qs, qh) = match wb {
                Q5_1_BYTES => (&bw[8..24], u32::from_le_bytes([bw[4], bw[5], bw[6], bw[7]])),
                _ => (&bw[4..20], 0),
            };
            let dot: f64 = (0..32)
                .map(|e| {
                    let nib = if e < 16 { qs[e] & 15 } else { qs[e - 16] >> 4 };
                    let code = u32::from(nib) | ((qh >> e) & 1) << 4;
                    f64::from(code) * f64::from(by[4 + e] as i8).abs()
                })
                .sum();
            mag += f16(bw, 0) * f16(by, 0) * dot + f16(bw, 2) * f16(by, 2);
        }
        mag
    }

    /// An `R`-row affine-format kernel of this module.
    type AffineRows<const R: usize> = unsafe fn([*const u8; R], *const u8, usize) -> [f32; R];

    /// The Q4_1 and Q5_1 kernels against the core's reference
    /// (`fused_core::quant::vec_dot`), within `1e-5·Σ|term|`
    /// ([`affine_magnitude`]), on random blocks (`d`, `m` and the
    /// activations' `d`, `s` kept finite; then extreme activation codes,
    /// −128 and 127 only, and full-range weight codes) for block counts
    /// around every group and super-group boundary and those of K = 576
    /// and 1536 (18 and 48 blocks); the two forms (word permutes, or VBMI
    /// and GFNI) give the same bits, and one row the bits of the same row
    /// among four.
    #[test]
    fn affine_kernels_match_reference() {
        if !avx512_here(false) {
            return;
        }
        let vbmi = has_gfni() && has_vbmi();
        if !vbmi {
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no GFNI and AVX-512 VBMI on this machine (the VBMI forms)"
            );
        }
        let kernels: [(DType, usize, [AffineRows<4>; 2], [AffineRows<1>; 2]); 2] = [
            (
                DType::Q4_1,
                Q4_1_BYTES,
                [q4_1_rows::<4>, q4_1_rows_vbmi::<4>],
                [q4_1_rows::<1>, q4_1_rows_vbmi::<1>],
            ),
            (
                DType::Q5_1,
                Q5_1_BYTES,
                [q5_1_rows::<4>, q5_1_rows_vbmi::<4>],
                [q5_1_rows::<1>, q5_1_rows_vbmi::<1>],
            ),
        ];
        // An f16 high byte with an exponent well inside the finite range.
        let finite = |b: u8| (b & 0x80) | 0x20 | (b & 0x1f);
        let mut next = xorshift(0x6a09_e667_f3bc_c909);
        for (dtype, wb, four, one) in kernels {
            for nb in [
                1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 18, 19, 20, 31, 32, 33, 35, 48,
            ] {
                for rep in 0..20 {
                    let mut w = vec![0u8; 4 * nb * wb];
                    w.iter_mut().for_each(|b| *b = next() as u8);
                    for blk in w.chunks_exact_mut(wb) {
                        (blk[1], blk[3]) = (finite(blk[1]), finite(blk[3]));
                        if rep == 1 {
                            blk[4..].fill(0xff);
                        }
                    }
                    let mut y = vec![0u8; nb * Q8_1_BYTES];
                    y.iter_mut().for_each(|b| *b = next() as u8);
                    for blk in y.chunks_exact_mut(Q8_1_BYTES) {
                        (blk[1], blk[3]) = (finite(blk[1]), finite(blk[3]));
                        if rep == 0 {
                            for b in &mut blk[4..] {
                                *b = if *b & 1 == 0 { 0x80 } else { 0x7f };
                            }
                        }
                    }
                    let rb = nb * wb;
                    let rows: [*const u8; 4] = core::array::from_fn(|r| w[r * rb..].as_ptr());
                    let yp = y.as_ptr();
                    let forms = if vbmi { 2 } else { 1 };
                    // SAFETY: AVX-512 F/BW/VL/VNNI (with AVX2, FMA, F16C)
                    // confirmed above, and GFNI and VBMI for the second
                    // forms; each row holds `nb` blocks, `y` `nb` blocks.
                    let got: [_; 2] = core::array::from_fn(|f| unsafe {
                        (f < forms).then(|| (four[f](rows, yp, nb), one[f]([rows[3]], yp, nb)))
                    });
                    let Some((a4, a1)) = got[0] else {
                        unreachable!("the first form always runs")
                    };
                    let what = format!("{dtype} nb={nb} rep {rep}");
                    assert_eq!(a1[0].to_bits(), a4[3].to_bits(), "{what}: one row vs four");
                    if let Some((b4, b1)) = got[1] {
                        assert_eq!(a4.map(f32::to_bits), b4.map(f32::to_bits), "{what}: VBMI");
                        assert_eq!(a1[0].to_bits(), b1[0].to_bits(), "{what}: VBMI, one row");
                    }
                    for (r, got) in a4.iter().enumerate() {
                        let row = &w[r * rb..(r + 1) * rb];
                        let want = fused_core::quant::vec_dot(dtype, row, &y, 32 * nb)
                            .expect("the reference");
                        let mag = affine_magnitude(wb, row, &y);
                        let err = (f64::from(*got) - f64::from(want)).abs();
                        assert!(
                            err <= 1e-5 * mag,
                            "{what} row {r}: got {got:e}, want {want:e}, |err| {err:e}, Σ|term| {mag:e}"
                        );
                    }
                }
            }
        }
    }

    /// The vector Q4_K header unpacking gives [`avx2::kscales`]' scales
    /// and mins, and the `d`, `dmin` bits, for every row of one to four:
    /// random headers, and each byte alone through all 256 values.
    #[test]
    fn q4_k_headers_match_kscales() {
        if !avx512_here(false) {
            return;
        }
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut headers = [[0u8; 16]; 4];
        for round in 0..(20_000 + 16 * 256) {
            for (r, h) in headers.iter_mut().enumerate() {
                if round < 20_000 {
                    *h = core::array::from_fn(|_| next() as u8);
                } else {
                    let (pos, v) = ((round - 20_000) / 256, (round - 20_000) % 256);
                    *h = [0; 16];
                    h[pos] = (v as u8).wrapping_add(r as u8);
                }
            }
            let p = headers.each_ref().map(|h| h.as_ptr());
            // SAFETY: AVX-512 F/BW/VL confirmed above; 16 bytes at each `p[r]`.
            let got = unsafe { q4_k_headers::<4>(p) };
            // SAFETY: `__m512i` is `[u16; 32]`, `__m128i` `[u32; 4]`: plain bytes.
            let (sc, mins, d): ([u16; 32], [u16; 32], [u32; 4]) = unsafe {
                (
                    core::mem::transmute::<__m512i, [u16; 32]>(got.0),
                    core::mem::transmute::<__m512i, [u16; 32]>(got.1),
                    core::mem::transmute::<__m128i, [u32; 4]>(got.2),
                )
            };
            for (r, h) in headers.iter().enumerate() {
                // SAFETY: `h` holds 16 bytes, the 12 scale bytes at 4.
                let (s, m) = unsafe { avx2::kscales(h.as_ptr().add(4)) };
                let bytes =
                    |v: u64| -> [u16; 8] { core::array::from_fn(|i| (v >> (8 * i)) as u8 as u16) };
                assert_eq!(sc[8 * r..8 * r + 8], bytes(s), "scales, header {h:?}");
                assert_eq!(mins[8 * r..8 * r + 8], bytes(m), "mins, header {h:?}");
                assert_eq!(
                    d[r],
                    u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
                    "d, header {h:?}"
                );
            }
        }
    }
}
