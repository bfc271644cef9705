//! Armv7E-M DSP kernels (Cortex-M4, Cortex-M7: the `thumbv7em-*` targets):
//! the integer dot products of Q4_0 and Q8_0 weights against Q8_0
//! activations through `SMLAD`, two signed 16-bit products added to an
//! accumulator in one single-cycle instruction.
//!
//! Four signed bytes of a 32-bit word are split into two words of two
//! signed halves each (`SXTB16`, and `SXTB16` of the word rotated by 8: the
//! even and the odd bytes); `SMLAD` then multiplies the weights' halves by
//! the activations' and adds both products. Q4_0's codes are made signed
//! four at a time (`SSUB8` of 8 from each byte) before the split. A block's
//! 32 products are summed exactly in i32 — the same integer as the
//! reference's sum in any order — and scaled in f32 with the reference's
//! operations in the reference's order, so each kernel equals the scalar
//! one bit for bit (checked on the target by `examples/embedded`).
//!
//! Per 32-element block that is 4 (Q4_0) or 8 (Q8_0) `SMLAD` pairs in
//! place of 32 byte loads, nibble extractions and multiply-adds; see the
//! crate README for the instruction counts. The DSP extension has no
//! stable Rust intrinsics (`core::arch::arm`'s are unstable), so the
//! instructions are written as inline assembly; this module is compiled
//! only for targets whose name says Armv7E-M (`build.rs` sets
//! `fused_arm_dsp`), where every core has the extension.

use core::arch::asm;

use fused_core::acts::ActQuant;
use fused_core::{DType, Error};

use super::RowDot;
use super::common::check_quant;
use crate::acts::Acts;

/// Bytes of a Q4_0 block: an f16 scale and 16 bytes of 4-bit codes.
const Q4_0_BYTES: usize = 18;
/// Bytes of a Q8_0 block: an f16 scale and 32 signed bytes.
const Q8_0_BYTES: usize = 34;

/// The DSP kernel for weights of `dtype` fed activations in `mode`, if any
/// (Q4_0 and Q8_0 against Q8_0; every other pair uses the scalar kernel).
pub fn row_dot(dtype: DType, mode: ActQuant) -> Option<RowDot> {
    match (dtype, mode) {
        (DType::Q4_0, ActQuant::Q8_0) => Some(dot_q4_0_q8_0),
        (DType::Q8_0, ActQuant::Q8_0) => Some(dot_q8_0_q8_0),
        _ => None,
    }
}

/// Q4_0 weights against Q8_0 activations: per block `s = Σ (q − 8)·x` in
/// i32, then `sumf += s · d_w · d_x` as the reference computes it.
fn dot_q4_0_q8_0(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let x = check_quant(DType::Q4_0, dtype, w_row, acts, k)?;
    let (wb, _) = w_row.as_chunks::<Q4_0_BYTES>();
    let (xb, _) = x.as_chunks::<Q8_0_BYTES>();
    let mut sumf = 0.0f32;
    for (bw, bx) in wb.iter().zip(xb) {
        let mut s = 0i32;
        for i in 0..4 {
            // Codes of elements 4i..4i+4 (low nibbles) and 16+4i..20+4i
            // (high nibbles), made signed: q − 8 in −8..=7.
            let w = word(bw, 2 + 4 * i);
            let lo = ssub8(w & 0x0f0f_0f0f, 0x0808_0808);
            let hi = ssub8((w >> 4) & 0x0f0f_0f0f, 0x0808_0808);
            let (xl, xh) = (word(bx, 2 + 4 * i), word(bx, 18 + 4 * i));
            s = smlad(sxtb16(lo), sxtb16(xl), s);
            s = smlad(sxtb16_ror8(lo), sxtb16_ror8(xl), s);
            s = smlad(sxtb16(hi), sxtb16(xh), s);
            s = smlad(sxtb16_ror8(hi), sxtb16_ror8(xh), s);
        }
        sumf += s as f32 * f16_at(bw) * f16_at(bx);
    }
    Ok(sumf)
}

/// Q8_0 weights against Q8_0 activations: per block `s = Σ w·x` in i32,
/// then `sumf += s · (d_w · d_x)` as the reference computes it.
fn dot_q8_0_q8_0(dtype: DType, w_row: &[u8], acts: &Acts<'_>, k: usize) -> Result<f32, Error> {
    let x = check_quant(DType::Q8_0, dtype, w_row, acts, k)?;
    let (wb, _) = w_row.as_chunks::<Q8_0_BYTES>();
    let (xb, _) = x.as_chunks::<Q8_0_BYTES>();
    let mut sumf = 0.0f32;
    for (bw, bx) in wb.iter().zip(xb) {
        let mut s = 0i32;
        for i in 0..8 {
            let (w, x) = (word(bw, 2 + 4 * i), word(bx, 2 + 4 * i));
            s = smlad(sxtb16(w), sxtb16(x), s);
            s = smlad(sxtb16_ror8(w), sxtb16_ror8(x), s);
        }
        sumf += s as f32 * (f16_at(bw) * f16_at(bx));
    }
    Ok(sumf)
}

/// The block's f16 scale (its first two bytes), widened to f32.
#[inline(always)]
fn f16_at<const N: usize>(b: &[u8; N]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Bytes `at..at + 4` of a block as a little-endian word (one unaligned
/// `LDR`: Armv7-M allows it for normal memory).
#[inline(always)]
fn word<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// `SMLAD`: `acc + a[15:0]·b[15:0] + a[31:16]·b[31:16]`, signed halves.
#[inline(always)]
fn smlad(a: u32, b: u32, acc: i32) -> i32 {
    let r: i32;
    // SAFETY: a register-only instruction of the DSP extension, which every
    // Armv7E-M core has (this module is compiled only for those targets);
    // it touches no memory and no stack. It may set the sticky Q flag on a
    // 32-bit overflow (a block's sums stay far below it), which Rust does
    // not read.
    unsafe {
        asm!("smlad {r}, {a}, {b}, {c}", r = lateout(reg) r, a = in(reg) a, b = in(reg) b,
             c = in(reg) acc, options(pure, nomem, nostack));
    }
    r
}

/// `SXTB16`: bytes 0 and 2 of `a`, sign-extended into two 16-bit halves.
#[inline(always)]
fn sxtb16(a: u32) -> u32 {
    let r: u32;
    // SAFETY: a register-only DSP instruction (see `smlad`); no memory, no
    // flags.
    unsafe {
        asm!("sxtb16 {r}, {a}", r = lateout(reg) r, a = in(reg) a,
             options(pure, nomem, nostack, preserves_flags));
    }
    r
}

/// `SXTB16` of `a` rotated right by 8: bytes 1 and 3, sign-extended.
#[inline(always)]
fn sxtb16_ror8(a: u32) -> u32 {
    let r: u32;
    // SAFETY: as in `sxtb16`.
    unsafe {
        asm!("sxtb16 {r}, {a}, ror #8", r = lateout(reg) r, a = in(reg) a,
             options(pure, nomem, nostack, preserves_flags));
    }
    r
}

/// `SSUB8`: `a − b` in each of the four signed bytes.
#[inline(always)]
fn ssub8(a: u32, b: u32) -> u32 {
    let r: u32;
    // SAFETY: a register-only DSP instruction (see `smlad`); it sets the GE
    // flags, which Rust does not read.
    unsafe {
        asm!("ssub8 {r}, {a}, {b}", r = lateout(reg) r, a = in(reg) a, b = in(reg) b,
             options(pure, nomem, nostack));
    }
    r
}
