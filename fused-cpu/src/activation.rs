//! Activation functions as this backend evaluates them, shared by the fused
//! epilogues and the unfused element-wise kernels, so that fused == unfused
//! holds bit for bit on every ISA.
//!
//! The scalar ISA keeps the core's canonical functions
//! ([`Activation::apply`], libm's `expf`), so it stays bit-exact with the
//! core reference. The SIMD ISAs evaluate SiLU, sigmoid and GELU-tanh with [`expf`],
//! an `exp` made of f32 additions, multiplications and bit operations only
//! (no fused multiply-add, no table), so that one lane of a vector and the
//! scalar code give the same bits: the slice functions run the same
//! per-element code in a loop that the compiler vectorizes for the ISA's
//! vector width, and every tail element is that code run alone. GELU-tanh
//! is evaluated there as `x / (1 + e^(−2a))`, `a` the core's `tanh`
//! argument ([`gelu_tanh_arg`]): the core's `x/2 · (1 + tanh a)` without its
//! cancellation for negative `x`. GELU-erf (`erff`) and ReLU keep the
//! core's functions on every ISA.

use fused_core::element::{Activation, gelu_tanh_arg};

use crate::isa::Isa;

/// How a backend evaluates the activation functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActEval {
    /// The core's canonical functions ([`Activation::apply`]).
    Reference,
    /// SiLU, sigmoid and GELU-tanh through [`expf`]; the rest as the
    /// core.
    VectorExp,
}

impl ActEval {
    /// The evaluation used on `isa`: the reference on the scalar ISA and
    /// on the bit-exact Arm DSP one, the vector `exp` on the SIMD ones.
    pub fn for_isa(isa: Isa) -> ActEval {
        if isa.is_reference_exact() {
            ActEval::Reference
        } else {
            ActEval::VectorExp
        }
    }

    /// `act(x)`.
    #[inline(always)]
    pub fn apply(self, act: Activation, x: f32) -> f32 {
        match (self, act) {
            (ActEval::VectorExp, Activation::Silu) => x / (1.0 + expf(-x)),
            (ActEval::VectorExp, Activation::Sigmoid) => 1.0 / (1.0 + expf(-x)),
            (ActEval::VectorExp, Activation::GeluTanh) => gelu_tanh(x),
            _ => act.apply(x),
        }
    }

    /// The gated form `act(gate) · up` (the core's [`fused_core::element::glu`]
    /// with this evaluation of `act`).
    #[inline(always)]
    pub fn glu(self, act: Activation, gate: f32, up: f32) -> f32 {
        self.apply(act, gate) * up
    }

    /// `out[i] = act(a[i])` for `i < min(a.len(), out.len())`.
    pub fn apply_slice(self, act: Activation, a: &[f32], out: &mut [f32]) {
        match (self, act) {
            (ActEval::VectorExp, Activation::Silu) => map(Op::Silu, out, a, a),
            (ActEval::VectorExp, Activation::Sigmoid) => map(Op::Sigmoid, out, a, a),
            (ActEval::VectorExp, Activation::GeluTanh) => map(Op::GeluTanh, out, a, a),
            _ => {
                for (o, x) in out.iter_mut().zip(a) {
                    *o = self.apply(act, *x);
                }
            }
        }
    }

    /// `v[i] = act(v[i])` for every element (the bits of [`ActEval::apply`]).
    pub fn apply_in_place(self, act: Activation, v: &mut [f32]) {
        const CHUNK: usize = 16;
        for c in v.chunks_mut(CHUNK) {
            let mut a = [0.0f32; CHUNK];
            a[..c.len()].copy_from_slice(c);
            self.apply_slice(act, &a[..c.len()], c);
        }
    }

    /// `out[i] = act(gate[i]) · up[i]` for `i` below the shortest length.
    pub fn glu_slice(self, act: Activation, gate: &[f32], up: &[f32], out: &mut [f32]) {
        match (self, act) {
            (ActEval::VectorExp, Activation::Silu) => map(Op::GluSilu, out, gate, up),
            (ActEval::VectorExp, Activation::Sigmoid) => map(Op::GluSigmoid, out, gate, up),
            (ActEval::VectorExp, Activation::GeluTanh) => map(Op::GluGeluTanh, out, gate, up),
            _ => {
                for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
                    *o = self.glu(act, *g, *u);
                }
            }
        }
    }
}

/// SiLU with [`expf`] (the core's formula).
#[inline(always)]
fn silu(x: f32) -> f32 {
    x / (1.0 + expf(-x))
}

/// Sigmoid with [`expf`] (the core's formula).
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + expf(-x))
}

/// GELU-tanh with [`expf`]: `x/2 · (1 + tanh a) = x / (1 + e^(−2a))`.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    x / (1.0 + expf(-2.0 * gelu_tanh_arg(x)))
}

/// An element-wise operation with the vector `exp`.
#[derive(Clone, Copy)]
enum Op {
    /// `silu(a)`.
    Silu,
    /// `sigmoid(a)`.
    Sigmoid,
    /// `silu(a) · b`.
    GluSilu,
    /// `sigmoid(a) · b`.
    GluSigmoid,
    /// `gelu_tanh(a)`.
    GeluTanh,
    /// `gelu_tanh(a) · b`.
    GluGeluTanh,
}

/// `out[i] = op(a[i], b[i])` for `i` below the shortest length: one loop
/// per operation, which the compiler vectorizes for the vector width of
/// the function it is inlined into ([`map`]).
#[inline(always)]
fn each(op: Op, out: &mut [f32], a: &[f32], b: &[f32]) {
    let it = out.iter_mut().zip(a).zip(b);
    match op {
        Op::Silu => it.for_each(|((o, x), _)| *o = silu(*x)),
        Op::Sigmoid => it.for_each(|((o, x), _)| *o = sigmoid(*x)),
        Op::GluSilu => it.for_each(|((o, x), y)| *o = silu(*x) * y),
        Op::GluSigmoid => it.for_each(|((o, x), y)| *o = sigmoid(*x) * y),
        Op::GeluTanh => it.for_each(|((o, x), _)| *o = gelu_tanh(*x)),
        Op::GluGeluTanh => it.for_each(|((o, x), y)| *o = gelu_tanh(*x) * y),
    }
}

/// [`each`], compiled for AVX-512 or AVX2 where the machine has them: the
/// same bits as the scalar code (every operation IEEE-rounded the same way
/// in a lane; no FMA contraction).
fn map(op: Op, out: &mut [f32], a: &[f32], b: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        /// [`each`] for AVX-512.
        ///
        /// # Safety
        /// AVX-512 F/BW/VL present.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        unsafe fn wide(op: Op, out: &mut [f32], a: &[f32], b: &[f32]) {
            each(op, out, a, b);
        }
        /// [`each`] for AVX2.
        ///
        /// # Safety
        /// AVX2 present.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn narrow(op: Op, out: &mut [f32], a: &[f32], b: &[f32]) {
            each(op, out, a, b);
        }
        let isa = Isa::detect();
        if isa >= Isa::Avx512 {
            // SAFETY: `Isa::detect()` confirmed AVX-512 F/BW/VL, AVX2 and FMA.
            return unsafe { wide(op, out, a, b) };
        }
        if isa >= Isa::Avx2 {
            // SAFETY: `Isa::detect()` confirmed AVX2 and FMA.
            return unsafe { narrow(op, out, a, b) };
        }
    }
    each(op, out, a, b);
}

/// `log2(e)`.
const LOG2E: f32 = core::f32::consts::LOG2_E;
/// `ln 2` split in two (Cody–Waite): `LN2_HI` has 16 significant bits, so
/// `n · LN2_HI` is exact for every `|n| ≤ 150`.
const LN2_HI: f32 = 0.693_145_75;
/// `ln 2 − LN2_HI`.
const LN2_LO: f32 = 1.428_606_8e-6;
/// `1.5 · 2^23`: adding it rounds an f32 below `2^22` in magnitude to an
/// integer (to nearest, ties to even), held in the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// Largest `x` with a finite `e^x` in f32.
const X_MAX: f32 = 88.722_83;
/// Below this `e^x` rounds to 0 (it is below half the least subnormal).
const X_MIN: f32 = -104.0;

/// `e^x` in f32 within a few ulp of the correctly rounded value (the
/// tests bound its distance from libm's `expf` over a dense sweep),
/// including subnormal results, `±∞` and NaN, from f32 additions,
/// multiplications and bit operations only, so that every vector lane and
/// the scalar code give the same bits.
///
/// `x = n·ln 2 + r` with `n = round(x·log2 e)` and `|r| ≤ ln 2 / 2`; `e^r`
/// by the polynomial of Cephes' `expf` (`1 + r + r²·q(r)`, `q` of degree
/// 5, Horner, no FMA; its coefficients rounded to f32); the
/// result scaled by `2^(n/2)` then `2^(n − n/2)`, two normal powers of two,
/// so that a subnormal result is rounded once.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    // NaN stays NaN through the clamp and everything below.
    let xc = x.clamp(X_MIN, X_MAX);
    let t = xc * LOG2E + ROUND;
    let nf = t - ROUND;
    // The integer `n` from the low mantissa bits of `t` (|n| ≤ 151).
    let n = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = (xc - nf * LN2_HI) - nf * LN2_LO;
    let z = r * r;
    let p = (((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2)
        * r
        + 0.166_666_66)
        * r
        + 0.5)
        * z
        + r
        + 1.0;
    let h = n >> 1;
    let s1 = f32::from_bits(((h + 127) as u32 & 0xff) << 23);
    let s2 = f32::from_bits(((n - h + 127) as u32 & 0xff) << 23);
    let v = p * s1 * s2;
    if x > X_MAX {
        f32::INFINITY
    } else if x < X_MIN {
        0.0
    } else {
        v
    }
}
