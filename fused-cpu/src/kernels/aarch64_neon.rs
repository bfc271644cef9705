//! aarch64 NEON kernels, with and without the dot-product extension.
//!
//! Every kernel is a safe [`RowDot`] that validates its inputs (weight
//! format, activation variant and format, byte lengths: the same checks as
//! the x86 kernels) and then calls an `unsafe fn` compiled with
//! `#[target_feature(enable = "neon")]`. Each kernel exists twice: with
//! `SDOT = false` its signed byte dot products use widening multiplies
//! (`SMULL`, `SADALP`), which every aarch64 core has; with `SDOT = true` they
//! use the `SDOT` instruction of FEAT_DotProd ([`Isa::NeonDotprod`], detected
//! at run time), reached through inline assembly in a function compiled with
//! `#[target_feature(enable = "neon,dotprod")]` because the `vdotq_s32`
//! intrinsic is not stable in Rust 1.89. Both give the same integers.
//!
//! The quantized kernels compute GGML's per-block (or per-sub-block) integer
//! sums exactly in i32 and scale them in f32 per block. For the 32-element
//! formats and TQ2_0 the f32 arithmetic is the scalar reference's, operation
//! for operation, so those kernels are bit-identical to it (the kernel test
//! checks this); the other K-quants and the float formats add in another
//! order. Codes are made signed before the products
//! (`q − 8`, `q − 16`, `q − 32`, `q − 1`, or the IQ4_NL table), so every
//! product is a signed byte times a signed byte, exact for any activation.
//!
//! [`Isa::NeonDotprod`]: crate::isa::Isa::NeonDotprod

use core::arch::aarch64::*;
use core::arch::asm;

use fused_core::blocks::KVALUES_IQ4NL;
use fused_core::acts::ActQuant;
use fused_core::{DType, Error};

use super::RowDot;
use super::common::{check_f32, check_quant, kscales, rd16, rdf16, rdf32};
use crate::acts::Acts;

/// The NEON kernel (using `SDOT` when `dotprod`) for weights of `dtype` fed
/// activations in `mode`, if any. `dotprod` must only be set when the CPU
/// has FEAT_DotProd (the dispatcher passes it for a supported
/// [`crate::Isa::NeonDotprod`]).
pub fn row_dot(dotprod: bool, dtype: DType, mode: ActQuant) -> Option<RowDot> {
    if dotprod {
        row_dot_for::<true>(dtype, mode)
    } else {
        row_dot_for::<false>(dtype, mode)
    }
}

fn row_dot_for<const SDOT: bool>(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) => Some(dot_q4_0_q8_0::<SDOT>),
        (DType::Q5_0, ActQuant::Q8_0) => Some(dot_q5_0_q8_0::<SDOT>),
        (DType::Q8_0, ActQuant::Q8_0) => Some(dot_q8_0_q8_0::<SDOT>),
        (DType::IQ4_NL, ActQuant::Q8_0) => Some(dot_iq4_nl_q8_0::<SDOT>),
        (DType::Q4_1, ActQuant::Q8_1) => Some(dot_q4_1_q8_1::<SDOT>),
        (DType::Q5_1, ActQuant::Q8_1) => Some(dot_q5_1_q8_1::<SDOT>),
        (DType::Q4_K, ActQuant::Q8_K) => Some(dot_q4_k_q8_k::<SDOT>),
        (DType::Q5_K, ActQuant::Q8_K) => Some(dot_q5_k_q8_k::<SDOT>),
        (DType::Q6_K, ActQuant::Q8_K) => Some(dot_q6_k_q8_k::<SDOT>),
        (DType::TQ2_0, ActQuant::Q8_K) => Some(dot_tq2_0_q8_k::<SDOT>),
        // No integer products: the same kernel for both.
        (DType::F16, ActQuant::F32) => Some(dot_f16_f32),
        (DType::BF16, ActQuant::F32) => Some(dot_bf16_f32),
        (DType::F32, ActQuant::F32) => Some(dot_f32_f32),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Safe entry points.

macro_rules! quant_entry {
    ($(#[$m:meta])* $name:ident, $dt:expr, $imp:ident) => {
        $(#[$m])*
        fn $name<const SDOT: bool>(
            dtype: DType,
            w_row: &[u8],
            acts: &Acts<'_>,
            k: usize,
        ) -> Result<f32, Error> {
            /// The kernel compiled with the dot-product extension, so that
            /// its `SDOT`s inline.
            ///
            /// # Safety
            /// As for the kernel with `SDOT = true`.
            #[target_feature(enable = "neon,dotprod")]
            unsafe fn with_dotprod(w: *const u8, y: *const u8, nb: usize) -> f32 {
                // SAFETY: forwarded from the caller.
                unsafe { $imp::<true>(w, y, nb) }
            }
            let y = check_quant($dt, dtype, w_row, acts, k)?;
            let nb = k / $dt.block_len();
            // SAFETY: NEON is part of every aarch64 target this module is
            // compiled for (`row_dot` is only reached through `Isa::Neon` or
            // `Isa::NeonDotprod`, which `Isa::is_supported` confirmed), and
            // the `SDOT = true` instance is only handed out for a supported
            // `Isa::NeonDotprod`, i.e. a CPU with FEAT_DotProd.
            // `check_quant` verified that `w_row` and `y` hold exactly `nb`
            // blocks each, which is all the kernel reads.
            Ok(unsafe {
                if SDOT {
                    with_dotprod(w_row.as_ptr(), y.as_ptr(), nb)
                } else {
                    $imp::<false>(w_row.as_ptr(), y.as_ptr(), nb)
                }
            })
        }
    };
}

quant_entry!(
    /// Q4_0 × Q8_0.
    dot_q4_0_q8_0, DType::Q4_0, q4_0_q8_0
);
quant_entry!(
    /// Q5_0 × Q8_0.
    dot_q5_0_q8_0, DType::Q5_0, q5_0_q8_0
);
quant_entry!(
    /// Q8_0 × Q8_0.
    dot_q8_0_q8_0, DType::Q8_0, q8_0_q8_0
);
quant_entry!(
    /// IQ4_NL × Q8_0.
    dot_iq4_nl_q8_0, DType::IQ4_NL, iq4_nl_q8_0
);
quant_entry!(
    /// Q4_1 × Q8_1.
    dot_q4_1_q8_1, DType::Q4_1, q4_1_q8_1
);
quant_entry!(
    /// Q5_1 × Q8_1.
    dot_q5_1_q8_1, DType::Q5_1, q5_1_q8_1
);
quant_entry!(
    /// Q4_K × Q8_K.
    dot_q4_k_q8_k, DType::Q4_K, q4_k_q8_k
);
quant_entry!(
    /// Q5_K × Q8_K.
    dot_q5_k_q8_k, DType::Q5_K, q5_k_q8_k
);
quant_entry!(
    /// Q6_K × Q8_K.
    dot_q6_k_q8_k, DType::Q6_K, q6_k_q8_k
);
quant_entry!(
    /// TQ2_0 × Q8_K.
    dot_tq2_0_q8_k, DType::TQ2_0, tq2_0_q8_k
);

macro_rules! float_entry {
    ($(#[$m:meta])* $name:ident, $dt:expr, $imp:expr) => {
        $(#[$m])*
        fn $name(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
            let x = check_f32($dt, dtype, w_row, acts, k)?;
            // SAFETY: NEON is present (see `quant_entry`); `check_f32`
            // verified that `w_row` holds `k` elements of the format and
            // `x.len() == k`.
            Ok(unsafe { $imp(w_row.as_ptr(), x.as_ptr(), k) })
        }
    };
}

float_entry!(
    /// F16 × F32.
    dot_f16_f32, DType::F16, half_f32::<false>
);
float_entry!(
    /// BF16 × F32.
    dot_bf16_f32, DType::BF16, half_f32::<true>
);
float_entry!(
    /// F32 × F32.
    dot_f32_f32, DType::F32, f32_f32
);

// ---------------------------------------------------------------------------
// Integer dot products.

/// `acc + SDOT(a, b)`: lane `i` gains `Σ_{j<4} a[4i+j]·b[4i+j]`.
///
/// # Safety
/// The CPU must have FEAT_DotProd.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: SDOT only reads the three registers and writes the first; the
    // caller guarantees the instruction exists.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc` plus the sixteen products `a[j]·b[j]`, spread over its four lanes
/// (each lane's share differs between the two paths; the lane total does
/// not). Exact for any signed bytes: each product fits i16.
///
/// # Safety
/// With `SDOT`, the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn dot16<const SDOT: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        // SAFETY: forwarded from the caller.
        unsafe { sdot(acc, a, b) }
    } else {
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        vpadalq_s16(vpadalq_s16(acc, lo), hi)
    }
}

/// `Σ_{j<32} a[j]·b[j]` for the 32 codes `a` and the 32 signed bytes at `y`.
///
/// # Safety
/// `y..y + 32` readable; with `SDOT`, the CPU must have FEAT_DotProd.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn dot32<const SDOT: bool>(a: [int8x16_t; 2], y: *const u8) -> i32 {
    // SAFETY: the caller guarantees the 32 bytes; unaligned loads.
    let (y0, y1) = unsafe { (vld1q_s8(y.cast()), vld1q_s8(y.add(16).cast())) };
    // SAFETY: forwarded from the caller.
    let acc = unsafe { dot16::<SDOT>(dot16::<SDOT>(vdupq_n_s32(0), a[0], y0), a[1], y1) };
    vaddvq_s32(acc)
}

// ---------------------------------------------------------------------------
// Code unpacking.

/// The 32 4-bit codes of a Q4-style `qs` (16 bytes at `p`) in element order:
/// low nibbles (elements 0..16), then high nibbles (16..32).
///
/// # Safety
/// `p..p + 16` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn nibbles32(p: *const u8) -> [uint8x16_t; 2] {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { vld1q_u8(p) };
    [vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q)]
}

/// The 32 fifth bits of a Q5_0/Q5_1 block (`qh` at `p`, a little-endian
/// u32: bit `j` belongs to element `j`) as bytes `0x10` or `0`, in element
/// order.
///
/// # Safety
/// `p..p + 4` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn fifth_bits(p: *const u8) -> [uint8x16_t; 2] {
    // SAFETY: the caller guarantees 4 readable bytes.
    let h = unsafe { [*p, *p.add(1), *p.add(2), *p.add(3)] };
    [bits16(h[0], h[1]), bits16(h[2], h[3])]
}

/// Byte `j` is `0x10` if bit `j % 8` of `a` (for `j < 8`) or of `b` (for
/// `j ≥ 8`) is set, else 0.
#[target_feature(enable = "neon")]
#[inline]
fn bits16(a: u8, b: u8) -> uint8x16_t {
    let sel = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    let v = vcombine_u8(vdup_n_u8(a), vdup_n_u8(b));
    vandq_u8(vtstq_u8(v, sel), vdupq_n_u8(0x10))
}

/// `v − off` as signed bytes, for both halves.
#[target_feature(enable = "neon")]
#[inline]
fn signed(v: [uint8x16_t; 2], off: u8) -> [int8x16_t; 2] {
    let o = vdupq_n_u8(off);
    [
        vreinterpretq_s8_u8(vsubq_u8(v[0], o)),
        vreinterpretq_s8_u8(vsubq_u8(v[1], o)),
    ]
}

/// Bytes `0x10` where bit `n` (0..8) of the same byte of `v` is set, else 0.
#[target_feature(enable = "neon")]
#[inline]
fn bit_as_16(v: uint8x16_t, n: usize) -> uint8x16_t {
    vandq_u8(vtstq_u8(v, vdupq_n_u8(1 << n)), vdupq_n_u8(0x10))
}

// ---------------------------------------------------------------------------
// 32-element block formats against Q8_0 / Q8_1.

/// Runs over `nb` blocks of `WB` (weights) and `YB` (activations) bytes,
/// with `$codes` the 32 signed weight codes of the block at `$wp` and the
/// activation codes at `$yp + YQ`; `$term` turns the block's integer sum
/// `$isum` into its f32 contribution, summed in block order.
macro_rules! block_loop {
    ($SDOT:ident, $w:ident, $y:ident, $nb:ident, $WB:expr, $YB:expr, $YQ:expr,
     |$wp:ident, $yp:ident| $codes:expr, |$isum:ident| $term:expr) => {{
        let mut sum = 0.0f32;
        for b in 0..$nb {
            // SAFETY: block `b < nb`, in bounds of both rows.
            let ($wp, $yp) = unsafe { ($w.add(b * $WB), $y.add(b * $YB)) };
            let codes: [int8x16_t; 2] = $codes;
            // SAFETY: `qs` of the activation block; the `SDOT` contract is
            // the caller's.
            let $isum = unsafe { dot32::<$SDOT>(codes, $yp.add($YQ)) };
            sum += $term;
        }
        sum
    }};
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q4_0 blocks
/// and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_0_q8_0<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        18,
        34,
        2,
        // SAFETY: `qs` of the weight block.
        |wp, yp| signed(unsafe { nibbles32(wp.add(2)) }, 8),
        |isum| {
            // SAFETY: the `d` fields of both blocks.
            let (dx, dy) = unsafe { (rdf16(wp), rdf16(yp)) };
            isum as f32 * dx * dy
        }
    )
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q5_0 blocks
/// and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_0_q8_0<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        22,
        34,
        2,
        |wp, yp| {
            // SAFETY: `qh` and `qs` of the weight block.
            let (lo, hi) = unsafe { (nibbles32(wp.add(6)), fifth_bits(wp.add(2))) };
            signed([vorrq_u8(lo[0], hi[0]), vorrq_u8(lo[1], hi[1])], 16)
        },
        // SAFETY: the `d` fields of both blocks.
        |isum| isum as f32 * unsafe { rdf16(wp) * rdf16(yp) }
    )
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` and `y` hold `nb` Q8_0
/// blocks each.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q8_0_q8_0<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        34,
        34,
        2,
        // SAFETY: `qs` of the weight block.
        |wp, yp| unsafe { [vld1q_s8(wp.add(2).cast()), vld1q_s8(wp.add(18).cast())] },
        // SAFETY: the `d` fields of both blocks.
        |isum| isum as f32 * unsafe { rdf16(wp) * rdf16(yp) }
    )
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` IQ4_NL
/// blocks and `y` `nb` Q8_0 blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn iq4_nl_q8_0<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    // SAFETY: the table has 16 entries.
    let tab = unsafe { vld1q_s8(KVALUES_IQ4NL.as_ptr()) };
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        18,
        34,
        2,
        |wp, yp| {
            // SAFETY: `qs` of the weight block.
            let u = unsafe { nibbles32(wp.add(2)) };
            [vqtbl1q_s8(tab, u[0]), vqtbl1q_s8(tab, u[1])]
        },
        // SAFETY: the `d` fields of both blocks.
        |isum| isum as f32 * unsafe { rdf16(wp) * rdf16(yp) }
    )
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q4_1 blocks
/// and `y` `nb` Q8_1 blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_1_q8_1<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        20,
        36,
        4,
        // SAFETY: `qs` of the weight block.
        |wp, yp| signed(unsafe { nibbles32(wp.add(4)) }, 0),
        // SAFETY: the `d`/`m` and `d`/`s` fields of the blocks.
        |isum| unsafe { affine_term(wp, yp, isum) }
    )
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q5_1 blocks
/// and `y` `nb` Q8_1 blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_1_q8_1<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    block_loop!(
        SDOT,
        w,
        y,
        nb,
        24,
        36,
        4,
        |wp, yp| {
            // SAFETY: `qh` and `qs` of the weight block (d, m, qh[4], qs[16]).
            let (lo, hi) = unsafe { (nibbles32(wp.add(8)), fifth_bits(wp.add(4))) };
            signed([vorrq_u8(lo[0], hi[0]), vorrq_u8(lo[1], hi[1])], 0)
        },
        // SAFETY: the `d`/`m` and `d`/`s` fields of the blocks.
        |isum| unsafe { affine_term(wp, yp, isum) }
    )
}

/// One Q4_1/Q5_1 × Q8_1 block's contribution `(dx·dy)·isum + mx·sy`.
///
/// # Safety
/// `wp..wp + 4` and `yp..yp + 4` must be readable.
#[inline(always)]
unsafe fn affine_term(wp: *const u8, yp: *const u8, isum: i32) -> f32 {
    // SAFETY: forwarded from the caller.
    let (dx, mx, dy, sy) = unsafe { (rdf16(wp), rdf16(wp.add(2)), rdf16(yp), rdf16(yp.add(2))) };
    (dx * dy) * isum as f32 + mx * sy
}

// ---------------------------------------------------------------------------
// K-quants and TQ2_0 against Q8_K (292-byte blocks: f32 d, 256 codes, 16
// i16 bsums).

const Q8K_BYTES: usize = 292;
const Q4K_BYTES: usize = 144;
const Q5K_BYTES: usize = 176;
const Q6K_BYTES: usize = 210;
const TQ2_BYTES: usize = 66;

/// `Σ_g bsums[g]·m[g / 2]` for the sixteen `bsums` at `p` and the eight mins
/// in the bytes of `m`.
///
/// # Safety
/// `p..p + 32` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn min_sum(p: *const u8, m: u64) -> i32 {
    // SAFETY: the caller guarantees 32 readable bytes.
    let (b0, b1) = unsafe { (vld1q_s16(p.cast()), vld1q_s16(p.add(16).cast())) };
    let m16 = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(m)));
    // [m0, m0, m1, m1, …]: each min serves two groups of 16.
    let (m0, m1) = (vzip1q_s16(m16, m16), vzip2q_s16(m16, m16));
    let acc = vmull_s16(vget_low_s16(b0), vget_low_s16(m0));
    let acc = vmlal_high_s16(acc, b0, m0);
    let acc = vmlal_s16(acc, vget_low_s16(b1), vget_low_s16(m1));
    vaddvq_s32(vmlal_high_s16(acc, b1, m1))
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q4_K blocks
/// and `y` `nb` Q8_K blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_k_q8_k<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { q4_5_k_q8_k::<SDOT, false>(w, y, nb) }
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q5_K blocks
/// and `y` `nb` Q8_K blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q5_k_q8_k<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    // SAFETY: forwarded from the caller.
    unsafe { q4_5_k_q8_k::<SDOT, true>(w, y, nb) }
}

/// Q4_K (`Q5 = false`) or Q5_K (`Q5 = true`: Q4_K's fields with `qh[32]`
/// before `qs`, whose bits are the codes' fifth bits) × Q8_K:
/// `Σ_b dx·dy·Σ_s sc_s·Σ code·q − dminx·dy·Σ_g m_{g/2}·bsum_g`.
///
/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` blocks of
/// the format and `y` `nb` Q8_K blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q4_5_k_q8_k<const SDOT: bool, const Q5: bool>(
    w: *const u8,
    y: *const u8,
    nb: usize,
) -> f32 {
    let (wb, qs_at) = if Q5 { (Q5K_BYTES, 48) } else { (Q4K_BYTES, 16) };
    let mut sum = 0.0f32;
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * wb), y.add(b * Q8K_BYTES)) };
        // SAFETY: the header fields of both blocks, `bsums` of the
        // activation block.
        let (d, dmin, sc, mins) = unsafe {
            let dy = rdf32(yp);
            let (sc, m) = kscales(wp.add(4));
            (
                rdf16(wp) * dy,
                rdf16(wp.add(2)) * dy,
                sc.to_le_bytes(),
                min_sum(yp.add(260), m),
            )
        };
        let qh = if Q5 {
            // SAFETY: `qh[0..32]` of the Q5_K block.
            unsafe { [vld1q_u8(wp.add(16)), vld1q_u8(wp.add(32))] }
        } else {
            [vdupq_n_u8(0); 2]
        };
        let mut isum = 0i32;
        for c in 0..4 {
            // SAFETY: `qs[32c..32c + 32]` of the weight block.
            let q = unsafe {
                [
                    vld1q_u8(wp.add(qs_at + 32 * c)),
                    vld1q_u8(wp.add(qs_at + 32 * c + 16)),
                ]
            };
            let m4 = vdupq_n_u8(0x0f);
            let mut lo = [vandq_u8(q[0], m4), vandq_u8(q[1], m4)];
            let mut hi = [vshrq_n_u8::<4>(q[0]), vshrq_n_u8::<4>(q[1])];
            if Q5 {
                // Bit 2c of qh[l] is the fifth bit of element 64c + l, bit
                // 2c + 1 that of element 64c + 32 + l.
                for h in 0..2 {
                    lo[h] = vorrq_u8(lo[h], bit_as_16(qh[h], 2 * c));
                    hi[h] = vorrq_u8(hi[h], bit_as_16(qh[h], 2 * c + 1));
                }
            }
            // SAFETY: activation codes `64c .. 64c + 64`; the `SDOT`
            // contract is the caller's.
            let (s0, s1) = unsafe {
                (
                    dot32::<SDOT>(signed(lo, 0), yp.add(4 + 64 * c)),
                    dot32::<SDOT>(signed(hi, 0), yp.add(4 + 64 * c + 32)),
                )
            };
            isum += i32::from(sc[2 * c]) * s0 + i32::from(sc[2 * c + 1]) * s1;
        }
        sum += d * isum as f32 - dmin * mins as f32;
    }
    sum
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` Q6_K blocks
/// and `y` `nb` Q8_K blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn q6_k_q8_k<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let m4 = vdupq_n_u8(0x0f);
    let m3 = vdupq_n_u8(0x03);
    let mut sum = 0.0f32;
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * Q6K_BYTES), y.add(b * Q8K_BYTES)) };
        // SAFETY: `d` (last) of the weight block, `d` of the activations.
        let d = unsafe { rdf16(wp.add(208)) * rdf32(yp) };
        let mut isum = 0i32;
        for h in 0..2 {
            for u in 0..2 {
                // Elements `128h + 32t + 16u + i`, i < 16, for t = 0..4:
                // `ql[64h + 16u + i]` (t even) or `ql[64h + 32 + 16u + i]`
                // (t odd), low nibble for t < 2, high for t ≥ 2; bits 2t,
                // 2t + 1 of `qh[32h + 16u + i]` on top.
                // SAFETY: `ql[64h..64h + 64]` and `qh[32h..32h + 32]`.
                let (l0, l1, qh) = unsafe {
                    (
                        vld1q_u8(wp.add(64 * h + 16 * u)),
                        vld1q_u8(wp.add(64 * h + 32 + 16 * u)),
                        vld1q_u8(wp.add(128 + 32 * h + 16 * u)),
                    )
                };
                let low = [
                    vandq_u8(l0, m4),
                    vandq_u8(l1, m4),
                    vshrq_n_u8::<4>(l0),
                    vshrq_n_u8::<4>(l1),
                ];
                let high = [
                    vandq_u8(qh, m3),
                    vandq_u8(vshrq_n_u8::<2>(qh), m3),
                    vandq_u8(vshrq_n_u8::<4>(qh), m3),
                    vshrq_n_u8::<6>(qh),
                ];
                for t in 0..4 {
                    let code = vorrq_u8(low[t], vshlq_n_u8::<4>(high[t]));
                    let code = vreinterpretq_s8_u8(vsubq_u8(code, vdupq_n_u8(32)));
                    let e = 128 * h + 32 * t + 16 * u;
                    // SAFETY: activation codes `e .. e + 16` and scale
                    // `e / 16` of the weight block; the `SDOT` contract is
                    // the caller's.
                    let (yv, sc) =
                        unsafe { (vld1q_s8(yp.add(4 + e).cast()), *wp.add(192 + e / 16)) };
                    // SAFETY: as above.
                    let s = vaddvq_s32(unsafe { dot16::<SDOT>(vdupq_n_s32(0), code, yv) });
                    isum += i32::from(sc as i8) * s;
                }
            }
        }
        sum += d * isum as f32;
    }
    sum
}

/// # Safety
/// NEON present (and FEAT_DotProd with `SDOT`); `w` holds `nb` TQ2_0 blocks
/// and `y` `nb` Q8_K blocks.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn tq2_0_q8_k<const SDOT: bool>(w: *const u8, y: *const u8, nb: usize) -> f32 {
    let m3 = vdupq_n_u8(3);
    let mut sumf = 0.0f32;
    for b in 0..nb {
        // SAFETY: block `b < nb`, in bounds of both rows.
        let (wp, yp) = unsafe { (w.add(b * TQ2_BYTES), y.add(b * Q8K_BYTES)) };
        let mut isum = 0i32;
        for j in 0..2 {
            // SAFETY: `qs[32j..32j + 32]` of the weight block.
            let q = unsafe { [vld1q_u8(wp.add(32 * j)), vld1q_u8(wp.add(32 * j + 16))] };
            let mut q = q;
            for l in 0..4 {
                // Bits 2l..2l + 2 of `qs[32j + m]` are element 128j + 32l + m.
                let codes = [vandq_u8(q[0], m3), vandq_u8(q[1], m3)];
                // SAFETY: activation codes `128j + 32l .. + 32`; the `SDOT`
                // contract is the caller's.
                isum += unsafe { dot32::<SDOT>(signed(codes, 1), yp.add(4 + 128 * j + 32 * l)) };
                q = [vshrq_n_u8::<2>(q[0]), vshrq_n_u8::<2>(q[1])];
            }
        }
        // SAFETY: `d` (last) of the weight block, `d` of the activations.
        let d = unsafe { rdf32(yp) * rdf16(wp.add(64)) };
        sumf += isum as f32 * d;
    }
    sumf
}

// ---------------------------------------------------------------------------
// Float weights against f32 activations.

/// Four f16 values (or bf16 when `BF16`) at `p` widened to f32.
///
/// # Safety
/// `p..p + 8` must be readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn half4<const BF16: bool>(p: *const u8) -> float32x4_t {
    // SAFETY: the caller guarantees 8 readable bytes.
    let v = unsafe { vld1_u16(p.cast()) };
    if BF16 {
        // A bf16 is the high half of the f32 with the same bits.
        vreinterpretq_f32_u32(vshll_n_u16::<16>(v))
    } else {
        let out: float32x4_t;
        // SAFETY: FCVTL (half to single precision) is in the aarch64 base
        // instruction set; it only reads `v` and writes `out`. (The
        // `vcvt_f32_f16` intrinsic needs the unstable `f16` type.)
        unsafe {
            asm!(
                "fcvtl {o:v}.4s, {i:v}.4h",
                o = lateout(vreg) out,
                i = in(vreg) v,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        out
    }
}

/// One f16 (or bf16 when `BF16`) at `p` widened to f32.
///
/// # Safety
/// `p..p + 2` must be readable.
#[inline(always)]
unsafe fn half1<const BF16: bool>(p: *const u8) -> f32 {
    if BF16 {
        // SAFETY: forwarded from the caller.
        half::bf16::from_bits(unsafe { rd16(p) } as u16).to_f32()
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { rdf16(p) }
    }
}

/// F16 (or BF16 when `BF16`) weights × f32 activations.
///
/// # Safety
/// NEON present; `w` holds `k` 16-bit floats and `x` `k` f32.
#[target_feature(enable = "neon")]
unsafe fn half_f32<const BF16: bool>(w: *const u8, x: *const f32, k: usize) -> f32 {
    let mut a = [vdupq_n_f32(0.0); 4];
    let mut i = 0usize;
    while i + 16 <= k {
        for (j, aj) in a.iter_mut().enumerate() {
            // SAFETY: elements `i + 4j .. i + 4j + 4 ≤ k`.
            let (wv, xv) = unsafe {
                (
                    half4::<BF16>(w.add(2 * (i + 4 * j))),
                    vld1q_f32(x.add(i + 4 * j)),
                )
            };
            *aj = vfmaq_f32(*aj, wv, xv);
        }
        i += 16;
    }
    while i + 4 <= k {
        // SAFETY: elements `i .. i + 4 ≤ k`.
        let (wv, xv) = unsafe { (half4::<BF16>(w.add(2 * i)), vld1q_f32(x.add(i))) };
        a[0] = vfmaq_f32(a[0], wv, xv);
        i += 4;
    }
    let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
    while i < k {
        // SAFETY: element `i < k`.
        sum += unsafe { half1::<BF16>(w.add(2 * i)) * *x.add(i) };
        i += 1;
    }
    sum
}

/// # Safety
/// NEON present; `w` holds `k` little-endian f32 and `x` `k` f32.
#[target_feature(enable = "neon")]
unsafe fn f32_f32(w: *const u8, x: *const f32, k: usize) -> f32 {
    let mut a = [vdupq_n_f32(0.0); 4];
    let mut i = 0usize;
    while i + 16 <= k {
        for (j, aj) in a.iter_mut().enumerate() {
            // SAFETY: elements `i + 4j .. i + 4j + 4 ≤ k`; aarch64 Linux is
            // little-endian, so the bytes are the f32 values.
            let (wv, xv) = unsafe {
                (
                    vld1q_f32(w.add(4 * (i + 4 * j)).cast()),
                    vld1q_f32(x.add(i + 4 * j)),
                )
            };
            *aj = vfmaq_f32(*aj, wv, xv);
        }
        i += 16;
    }
    while i + 4 <= k {
        // SAFETY: elements `i .. i + 4 ≤ k`, as above.
        let (wv, xv) = unsafe { (vld1q_f32(w.add(4 * i).cast()), vld1q_f32(x.add(i))) };
        a[0] = vfmaq_f32(a[0], wv, xv);
        i += 4;
    }
    let mut sum = vaddvq_f32(vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3])));
    while i < k {
        // SAFETY: element `i < k`.
        sum += unsafe { rdf32(w.add(4 * i)) * *x.add(i) };
        i += 1;
    }
    sum
}
