//! The checks of the embedded example: `fused-cpu` without `std` and
//! without `alloc`, run on data built in (a fixed pseudo-random sequence)
//! and compared with the core's scalar reference bit for bit.
//!
//! Everything here lives on the stack or in the caller's buffers: there is
//! no allocator. The reference side is composed from the core's no-alloc
//! pieces exactly as `fused_core::reference::gemv::gemm` composes them (that
//! function itself needs `alloc`): activations quantized with
//! [`quantize_row`], each accumulator from [`dot_quantized`] or [`dot_f32`],
//! the gated product from [`element::glu`], and [`BoundEpilogue::apply`].
//!
//! [`run`] prints one line per check (`ok`, or `FAIL` with the first
//! differing value) and a last line `N passed, N failed`; a [`Board`] says
//! how much stack each library call used, where it can measure it.

#![no_std]

use core::fmt::Write;
use core::ops::Range;

use fused_core::acts::ActQuant;
use fused_core::element::{self, Activation};
use fused_core::epilogue::{BoundEpilogue, Epilogue};
use fused_core::fwht::{FwhtDesc, fwht};
use fused_core::quant::quantize_row;
use fused_core::reference::gemv::{dot_f32, dot_quantized};
use fused_core::weights::{GluWeights, WeightMatrix};
use fused_core::{DType, Error};
use fused_cpu::Isa;
use fused_cpu::acts::{Acts, column, prepared_bytes, quantize_columns};
use fused_cpu::elementwise;
use fused_cpu::fwht::fwht_rows;
use fused_cpu::gemv::{RowKernels, gemv_glu_rows, gemv_rows};

/// Output rows of every GEMV: two full tiles of 16 and a short one.
pub const M: usize = 40;
/// Inputs of every GEMV: eight blocks of 32.
pub const K: usize = 256;
/// Activation columns of the multi-column checks (the GEMM driver's path).
pub const COLS: usize = 3;
/// FWHT block size.
pub const FWHT_N: usize = 256;
/// FWHT rows (two sign blocks, so the third row reuses the first's signs).
pub const FWHT_ROWS: usize = 3;

/// Bytes of one Q8_0 row of `K` (the widest weight row used here).
const ROW_BYTES_MAX: usize = K / 32 * 34;
/// Room for one prepared activation column ([`prepared_bytes`] is checked
/// against it): the Q8_0 blocks, and on 64-bit targets the side data of
/// the x86-64 kernels (1088 bytes per 512 values).
const PREP_MAX: usize = ROW_BYTES_MAX + 1088;

/// What one library call used, as far as the board can tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of stack below the caller's frame.
    pub stack: Option<usize>,
    /// Instructions executed (under QEMU's `-icount shift=0`, where the
    /// Cortex-M SysTick counts one tick per 40 instructions).
    pub instructions: Option<u64>,
}

/// What the program runs on: how to measure a call.
pub trait Board {
    /// Runs `f` and says what it used.
    fn measure(&mut self, f: &mut dyn FnMut()) -> Usage;
}

/// A board that measures nothing (the host).
#[derive(Debug, Default)]
pub struct NoProbe;

impl Board for NoProbe {
    fn measure(&mut self, f: &mut dyn FnMut()) -> Usage {
        f();
        Usage::default()
    }
}

/// The counts of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Checks whose every value equals the reference bit for bit.
    pub passed: usize,
    /// Checks with a differing value or an error.
    pub failed: usize,
    /// The deepest stack any measured library call used, in bytes.
    pub max_stack: Option<usize>,
}

/// The ISAs checked bit for bit against the reference on this target: the
/// scalar kernels everywhere, and the best ISA of an Arm microcontroller
/// (whose DSP kernels are exact). x86-64 and aarch64 SIMD sum in other
/// orders and are checked within tolerances by the workspace's tests.
pub fn exact_isas() -> impl Iterator<Item = Isa> {
    let best = Isa::detect();
    let extra = (cfg!(target_arch = "arm") && best != Isa::Scalar).then_some(best);
    core::iter::once(Isa::Scalar).chain(extra)
}

/// Runs the checks, printing one line per check and the summary line `N
/// passed, N failed`: those whose kernels differ by ISA on every ISA of
/// [`exact_isas`], the others once (on the last of them).
pub fn run(out: &mut dyn Write, board: &mut dyn Board) -> Report {
    let mut report = Report::default();
    let last = exact_isas().last().unwrap_or(Isa::Scalar);
    for isa in exact_isas() {
        for check in CHECKS.iter().filter(|c| c.per_isa || isa == last) {
            let mut probe = Probe {
                board: &mut *board,
                calls: [("", Usage::default()); 4],
                n: 0,
            };
            let result = (check.run)(isa, &mut probe);
            let stack = probe.calls[..probe.n]
                .iter()
                .map(|c| c.1.stack)
                .max()
                .flatten();
            report.max_stack = report.max_stack.max(stack);
            let ok = matches!(result, Ok(ref o) if o.mismatches == 0);
            if ok {
                report.passed += 1;
            } else {
                report.failed += 1;
            }
            let _ = write!(
                out,
                "{} {} [{}]: ",
                if ok { "ok  " } else { "FAIL" },
                check.name,
                isa
            );
            let _ = match result {
                Ok(o) if o.mismatches == 0 => {
                    write!(
                        out,
                        "{} values equal to {} bit for bit",
                        o.values, check.against
                    )
                }
                Ok(o) => {
                    let (i, got, want) = o.first.unwrap_or((0, 0.0, 0.0));
                    write!(
                        out,
                        "{} of {} values differ from {}; first at {}: {:e} ({:#010x}), expected {:e} ({:#010x})",
                        o.mismatches,
                        o.values,
                        check.against,
                        i,
                        got,
                        got.to_bits(),
                        want,
                        want.to_bits()
                    )
                }
                Err(e) => write!(out, "error: {e}"),
            };
            for (i, (name, u)) in probe.calls[..probe.n].iter().enumerate() {
                let _ = write!(out, "{} {name}", if i == 0 { ";" } else { "," });
                if let Some(b) = u.stack {
                    let _ = write!(out, " {b} B stack");
                }
                if let Some(n) = u.instructions {
                    let _ = write!(out, " ~{n} insns");
                }
            }
            let _ = writeln!(out);
        }
    }
    let _ = writeln!(out, "{} passed, {} failed", report.passed, report.failed);
    report
}

/// One check: a name and the function that runs it on an ISA.
struct Check {
    name: &'static str,
    /// Whether its kernels differ by ISA (run on each), or not (run once).
    per_isa: bool,
    /// What the results are compared with.
    against: &'static str,
    run: fn(Isa, &mut Probe<'_>) -> Result<Outcome, Error>,
}

/// What most checks compare with.
const REFERENCE: &str = "the core's reference";

/// The checks, in the order they run.
const CHECKS: [Check; 6] = [
    Check {
        name: "q4_0 gemv 40x256, q8_0 acts, silu(acc)*gate+residual",
        per_isa: true,
        against: REFERENCE,
        run: |isa, p| gemv_check(isa, p, DType::Q4_0, ActQuant::Q8_0, 1),
    },
    Check {
        name: "q8_0 gemv 40x256, q8_0 acts, silu(acc)*gate+residual",
        per_isa: true,
        against: REFERENCE,
        run: |isa, p| gemv_check(isa, p, DType::Q8_0, ActQuant::Q8_0, 1),
    },
    Check {
        name: "q4_0 gemm 40x256x3, f32 acts, silu(acc)*gate+residual",
        per_isa: false,
        against: REFERENCE,
        run: |isa, p| gemv_check(isa, p, DType::Q4_0, ActQuant::F32, COLS),
    },
    Check {
        name: "q4_0 glu gemm 40x256x2, f32 acts, silu(gate)*up+residual",
        per_isa: false,
        against: REFERENCE,
        run: |isa, p| glu_check(isa, p, ActQuant::F32, 2),
    },
    Check {
        name: "q4_0 gemv 40x256, q8_0 acts, silu(acc)*gate+residual fused",
        per_isa: false,
        against: "the unfused ops",
        run: unfused_check,
    },
    Check {
        name: "signed fwht 3x256, 2 sign blocks, scale 1/16",
        per_isa: false,
        against: REFERENCE,
        run: fwht_check,
    },
];

/// Measures the library calls of one check (at most four a check).
struct Probe<'b> {
    board: &'b mut dyn Board,
    calls: [(&'static str, Usage); 4],
    n: usize,
}

impl Probe<'_> {
    /// Runs `f` (one library call, `name`) under the board's stack
    /// measurement.
    fn call<R>(&mut self, name: &'static str, f: impl FnOnce() -> R) -> R {
        let mut f = Some(f);
        let mut r = None;
        let used = self.board.measure(&mut || {
            if let Some(f) = f.take() {
                r = Some(f());
            }
        });
        if used != Usage::default()
            && let Some(slot) = self.calls.get_mut(self.n)
        {
            *slot = (name, used);
            self.n += 1;
        }
        r.expect("Board::stack_used runs its closure")
    }
}

/// The comparison of a result with its reference.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    values: usize,
    mismatches: usize,
    /// The first differing value: index, result, reference.
    first: Option<(usize, f32, f32)>,
}

/// Compares bit for bit.
fn compare(got: &[f32], want: &[f32]) -> Outcome {
    let mut o = Outcome {
        values: got.len(),
        mismatches: 0,
        first: None,
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.to_bits() != w.to_bits() || !w.is_finite() {
            o.mismatches += 1;
            o.first.get_or_insert((i, *g, *w));
        }
    }
    if got.len() != want.len() {
        o.mismatches += 1;
    }
    o
}

/// A fixed pseudo-random sequence (xorshift32) of values in [-1, 1).
struct Rng(u32);

impl Rng {
    fn next(&mut self) -> f32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        (x >> 8) as f32 * (2.0 / (1u32 << 24) as f32) - 1.0
    }

    fn fill(&mut self, v: &mut [f32]) {
        for x in v {
            *x = self.next();
        }
    }
}

/// Quantizes an `M × K` matrix of pseudo-random values into `w` (a row at
/// a time: no `M × K` f32 buffer).
fn weights(dtype: DType, seed: u32, w: &mut [u8]) -> Result<WeightMatrix<'_>, Error> {
    let rb = dtype.row_bytes(K)?;
    let mut rng = Rng(seed);
    let mut vals = [0.0f32; K];
    for row in w[..M * rb].chunks_exact_mut(rb) {
        rng.fill(&mut vals);
        quantize_row(dtype, &vals, row)?;
    }
    WeightMatrix::new(dtype, M, K, &w[..M * rb])
}

/// `silu(acc) · gate + residual` bound for `M × cols` (or `+ residual`
/// alone when `act` is `None`).
fn epilogue<'a>(
    act: Option<Activation>,
    gate: &'a [f32],
    residual: &'a [f32],
    cols: usize,
) -> Result<BoundEpilogue<'a>, Error> {
    match act {
        Some(a) => {
            Epilogue::NONE
                .then_act(a)?
                .then_mul()?
                .then_add()?
                .bind(&[gate, residual], M, cols)
        }
        None => Epilogue::NONE.then_add()?.bind(&[residual], M, cols),
    }
}

/// Prepares `cols` columns of `x` in `mode` into `scratch` (through the
/// probe) and hands them to `f`.
fn with_columns<R>(
    p: &mut Probe<'_>,
    mode: ActQuant,
    x: &[f32],
    cols: usize,
    scratch: &mut [u8],
    f: impl FnOnce(&mut Probe<'_>, &[Acts<'_>]) -> Result<R, Error>,
) -> Result<R, Error> {
    let pb = prepared_bytes(mode, K)?;
    let scratch = scratch.get_mut(..cols * pb).ok_or(Error::Overflow {
        what: "the example's activation scratch",
    })?;
    if mode.dtype().is_some() {
        p.call("quantize_columns", || quantize_columns(mode, x, K, scratch))?;
    }
    let scratch = &*scratch;
    let mut acts = [Acts::F32(&[]); COLS];
    for (c, a) in acts[..cols].iter_mut().enumerate() {
        *a = column(mode, x, scratch, K, c)?;
    }
    f(p, &acts[..cols])
}

/// The reference accumulator of row `r` against column `c` of `x`, as
/// `fused_core::reference::gemv::for_each_acc` computes it.
fn reference_acc(
    w: &WeightMatrix<'_>,
    mode: ActQuant,
    x: &[f32],
    c: usize,
    r: usize,
) -> Result<f32, Error> {
    let xc = &x[c * K..(c + 1) * K];
    match mode.dtype() {
        None => dot_f32(w, r, xc),
        Some(d) => {
            let mut xq = [0u8; ROW_BYTES_MAX];
            let xq = &mut xq[..d.row_bytes(K)?];
            quantize_row(d, xc, xq)?;
            dot_quantized(w, r, mode, xq)
        }
    }
}

/// Every row of the call.
const ROWS: Range<usize> = 0..M;

/// `epilogue(W·x)` with `W` of `dtype`, activations in `mode`, `cols`
/// columns, through [`gemv_rows`] on `isa`, against the reference.
fn gemv_check(
    isa: Isa,
    p: &mut Probe<'_>,
    dtype: DType,
    mode: ActQuant,
    cols: usize,
) -> Result<Outcome, Error> {
    let mut wb = [0u8; M * ROW_BYTES_MAX];
    let w = weights(dtype, 0x1234_5678 ^ dtype as u32, &mut wb)?;
    let mut rng = Rng(0x9e37_79b9);
    let (mut x, mut gate, mut residual) =
        ([0.0f32; COLS * K], [0.0f32; M * COLS], [0.0f32; M * COLS]);
    let n = M * cols;
    rng.fill(&mut x[..cols * K]);
    rng.fill(&mut gate[..n]);
    rng.fill(&mut residual[..n]);
    let (x, gate, residual) = (&x[..cols * K], &gate[..n], &residual[..n]);
    let ep = epilogue(Some(Activation::Silu), gate, residual, cols)?;

    let mut y = [0.0f32; M * COLS];
    let kernels = RowKernels::new(isa, dtype, mode);
    let mut scratch = [0u8; COLS * PREP_MAX];
    with_columns(p, mode, x, cols, &mut scratch, |p, acts| {
        p.call("gemv_rows", || {
            gemv_rows(kernels, &w, acts, ROWS, &ep, |r, c, v| y[c * M + r] = v)
        })
    })?;

    let mut want = [0.0f32; M * COLS];
    for c in 0..cols {
        for r in ROWS {
            want[c * M + r] = ep.apply(reference_acc(&w, mode, x, c, r)?, r, c);
        }
    }
    Ok(compare(&y[..n], &want[..n]))
}

/// `epilogue(silu(W_g·x) ⊙ (W_u·x))` with Q4_0 weights, through
/// [`gemv_glu_rows`] on `isa`, against the reference.
fn glu_check(isa: Isa, p: &mut Probe<'_>, mode: ActQuant, cols: usize) -> Result<Outcome, Error> {
    const Q4_ROW: usize = K / 32 * 18;
    let dtype = DType::Q4_0;
    let (mut gb, mut ub) = ([0u8; M * Q4_ROW], [0u8; M * Q4_ROW]);
    let wg = weights(dtype, 0x0bad_cafe, &mut gb)?;
    let wu = weights(dtype, 0x5eed_f00d, &mut ub)?;
    let pair = GluWeights::new(wg, wu)?;
    let mut rng = Rng(0x7f4a_7c15);
    let (mut x, mut residual) = ([0.0f32; COLS * K], [0.0f32; M * COLS]);
    let n = M * cols;
    rng.fill(&mut x[..cols * K]);
    rng.fill(&mut residual[..n]);
    let (x, residual) = (&x[..cols * K], &residual[..n]);
    let ep = epilogue(None, &[], residual, cols)?;

    let act = Activation::Silu;
    let mut y = [0.0f32; M * COLS];
    let kernels = RowKernels::new(isa, dtype, mode);
    let mut scratch = [0u8; COLS * PREP_MAX];
    with_columns(p, mode, x, cols, &mut scratch, |p, acts| {
        p.call("gemv_glu_rows", || {
            gemv_glu_rows(kernels, &pair, act, acts, ROWS, &ep, |r, c, v| {
                y[c * M + r] = v
            })
        })
    })?;

    let mut want = [0.0f32; M * COLS];
    for c in 0..cols {
        for r in ROWS {
            let g = reference_acc(&wg, mode, x, c, r)?;
            let u = reference_acc(&wu, mode, x, c, r)?;
            want[c * M + r] = ep.apply(element::glu(act, g, u), r, c);
        }
    }
    Ok(compare(&y[..n], &want[..n]))
}

/// The fused Q4_0 GEMV with `silu(acc) · gate + residual` against the
/// same GEMV with no epilogue followed by the unfused element-wise ops of
/// the same ISA ([`elementwise`]), bit for bit.
fn unfused_check(isa: Isa, p: &mut Probe<'_>) -> Result<Outcome, Error> {
    let (dtype, mode) = (DType::Q4_0, ActQuant::Q8_0);
    let mut wb = [0u8; M * ROW_BYTES_MAX];
    let w = weights(dtype, 0x2545_f491, &mut wb)?;
    let mut rng = Rng(0x6c07_8965);
    let (mut x, mut gate, mut residual) = ([0.0f32; K], [0.0f32; M], [0.0f32; M]);
    rng.fill(&mut x);
    rng.fill(&mut gate);
    rng.fill(&mut residual);
    let fused_ep = epilogue(Some(Activation::Silu), &gate, &residual, 1)?;
    let none = Epilogue::NONE.bind(&[], M, 1)?;
    let kernels = RowKernels::new(isa, dtype, mode);
    let mut scratch = [0u8; PREP_MAX];
    let (mut fused, mut acc) = ([0.0f32; M], [0.0f32; M]);
    let xq = prepared_bytes(mode, K)?;
    let scratch = scratch.get_mut(..xq).ok_or(Error::Overflow {
        what: "the example's activation scratch",
    })?;
    quantize_columns(mode, &x, K, scratch)?;
    let cols = [column(mode, &x, scratch, K, 0)?];
    gemv_rows(kernels, &w, &cols, ROWS, &fused_ep, |r, _, v| fused[r] = v)?;
    gemv_rows(kernels, &w, &cols, ROWS, &none, |r, _, v| acc[r] = v)?;
    let (mut act, mut prod, mut unfused) = ([0.0f32; M], [0.0f32; M], [0.0f32; M]);
    p.call("unary", || {
        elementwise::unary(isa, Activation::Silu, &acc, &mut act)
    })?;
    p.call("mul", || elementwise::mul(&act, &gate, &mut prod))?;
    p.call("add", || elementwise::add(&prod, &residual, &mut unfused))?;
    Ok(compare(&fused, &unfused))
}

/// The signed FWHT through [`fwht_rows`] (which has no ISA variants: the
/// same code on every ISA) against the core's [`fwht`].
fn fwht_check(_isa: Isa, p: &mut Probe<'_>) -> Result<Outcome, Error> {
    const LEN: usize = FWHT_N * FWHT_ROWS;
    let mut rng = Rng(0xdead_beef);
    let (mut x, mut signs) = ([0.0f32; LEN], [0.0f32; 2 * FWHT_N]);
    rng.fill(&mut x);
    for s in &mut signs {
        *s = if rng.next() < 0.0 { -1.0 } else { 1.0 };
    }
    let desc = FwhtDesc::new(FWHT_N)?.with_signs(signs.len())?;
    let mut out = [0.0f32; LEN];
    p.call("fwht_rows", || {
        fwht_rows(&desc, &x, Some(&signs), 0, &mut out)
    })?;
    let mut want = [0.0f32; LEN];
    fwht(&desc, &x, Some(&signs), &mut want)?;
    Ok(compare(&out, &want))
}
