//! The Q8 mode: activations quantized on the device (GGML's Q8_0 for Q8_0
//! and Q4_0 weights, Q8_K for Q4_K) and dotted in integers.
//!
//! Tolerances:
//! - quantized activations vs `fused_core::quant::quantize_row`: bit for
//!   bit (codes, scales and the Q8_K code sums).
//! - GEMV and gated GEMV vs the core's same-quantization reference
//!   (`gemm(ActQuant::Q8_0 / Q8_K)`): the integer block sums are exact and
//!   each block's f32 term is the core's; only the order in which the terms
//!   are added differs (and Q4_K rounds its block integer once instead of
//!   in eight lane sums). Elements of magnitude at least 1e-2 of the largest
//!   may differ by [`ULPS`] ulps (fused-verify's budget), and NMSE ≤ 1e-9.
//! - integer dot products vs the plain integer fallback, and every lane
//!   count and shape among themselves where the block order is the same:
//!   the dot and the fallback bit for bit.
//! - fused == unfused: bit for bit.

mod common;

use common::{
    Sweep, assert_no_validation_messages, backend_or_skip, chain, data, first_bit_difference, nmse,
    operands, weights,
};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, Stage};
use fused_core::job::GemvJob;
use fused_core::quant::quantize_row;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_core::{Error, error::Unsupported};
#[cfg(feature = "lab")]
use fused_vulkan::{GemvShape, QuantizeShape};
use fused_vulkan::{MAX_COLS, Tuning, VulkanBackend, VulkanError};

/// fused-verify's ulp budget for reordered sums.
const ULPS: u64 = 4096;
const NMSE: f64 = 1e-9;

/// The weight formats with a Q8-mode shader and their activation mode.
const PAIRS: [(DType, ActQuant); 10] = [
    (DType::Q8_0, ActQuant::Q8_0),
    (DType::Q4_0, ActQuant::Q8_0),
    (DType::Q4_1, ActQuant::Q8_1),
    (DType::Q5_1, ActQuant::Q8_1),
    (DType::Q4_K, ActQuant::Q8_K),
    (DType::Q5_0, ActQuant::Q8_0),
    (DType::IQ4_NL, ActQuant::Q8_0),
    (DType::Q5_K, ActQuant::Q8_K),
    (DType::Q6_K, ActQuant::Q8_K),
    (DType::TQ2_0, ActQuant::Q8_K),
];

fn ulps(a: f32, b: f32) -> u64 {
    let key = |v: f32| {
        let i = v.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    key(a).abs_diff(key(b))
}

/// `got` is within the ulp budget of `want` on every element of magnitude
/// at least 1e-2 of the largest, and within the NMSE budget.
fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let max = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g.is_finite(), "{what}: element {i} is {g}");
        if w.abs() >= 1e-2 * max {
            assert!(
                ulps(*g, *w) <= ULPS,
                "{what}: element {i}: {g} vs {w} ({} ulps)",
                ulps(*g, *w)
            );
        }
    }
    let err = nmse(got, want);
    assert!(err <= NMSE, "{what}: nmse {err:e}");
}

/// The device layout `VulkanBackend::quantize_activations` documents,
/// built from the core's quantized blocks.
fn expected_layout(mode: ActQuant, x: &[f32], n_cols: usize) -> Vec<u32> {
    let k = x.len() / n_cols;
    let d = mode.dtype().unwrap();
    let mut codes = Vec::new();
    let mut scales = Vec::new();
    let mut sums = Vec::new();
    for col in x.chunks_exact(k) {
        let mut q = vec![0u8; d.row_bytes(k).unwrap()];
        quantize_row(d, col, &mut q).unwrap();
        for blk in q.chunks_exact(d.block_bytes()) {
            match mode {
                // d: f16, then 32 codes.
                ActQuant::Q8_0 => {
                    scales.push(u32::from(u16::from_le_bytes([blk[0], blk[1]])));
                    codes.extend_from_slice(&blk[2..34]);
                }
                // d, s: f16 (one word, d low), then 32 codes.
                ActQuant::Q8_1 => {
                    scales.push(u32::from_le_bytes(blk[0..4].try_into().unwrap()));
                    codes.extend_from_slice(&blk[4..36]);
                }
                // d: f32, 256 codes, 16 i16 sums of 16.
                _ => {
                    scales.push(u32::from_le_bytes(blk[0..4].try_into().unwrap()));
                    codes.extend_from_slice(&blk[4..260]);
                    let bs: Vec<i32> = blk[260..292]
                        .chunks_exact(2)
                        .map(|c| i32::from(i16::from_le_bytes([c[0], c[1]])))
                        .collect();
                    for pair in bs.chunks_exact(2) {
                        sums.push((pair[0] + pair[1]) as u32);
                    }
                }
            }
        }
    }
    let mut out: Vec<u32> = codes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    out.extend(scales);
    out.extend(sums);
    out
}

/// The first word where `got` and `want` (layouts of `mode`) differ, and
/// how many do. A Q8_1 scale word's `s` may be a NaN of another sign or
/// payload: `d·Σq` is NaN where d is (the core's product keeps d's bits)
/// or where d is infinite and the codes sum to 0, whose NaN is the
/// platform's default (x86: negative).
fn first_difference(mode: ActQuant, got: &[u32], want: &[u32]) -> (Option<usize>, usize) {
    assert_eq!(got.len(), want.len(), "{mode:?}: layout length");
    let nan16 = |h: u32| (h & 0x7fff) > 0x7c00;
    let scales = match mode {
        // Codes: 32 values in 8 words a block, then one scale word a block.
        ActQuant::Q8_1 => (want.len() * 8 / 9)..want.len(),
        _ => 0..0,
    };
    let same = |i: usize, g: u32, w: u32| {
        g == w
            || (scales.contains(&i) && g & 0xffff == w & 0xffff && nan16(g >> 16) && nan16(w >> 16))
    };
    let diffs: Vec<usize> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|&(i, (&g, &w))| !same(i, g, w))
        .map(|(i, _)| i)
        .collect();
    (diffs.first().copied(), diffs.len())
}

/// Activations of every magnitude the formats meet, with rounding ties.
fn activations(k: usize, n_cols: usize, seed: u64) -> Vec<f32> {
    let mut x = data(k * n_cols, seed);
    for (i, blk) in x.chunks_mut(32).enumerate() {
        let scale = [1.0, 3.7e-3, 1e-6, 250.0, 1e-30, 4e30, 0.0, 1.0][i % 8];
        for v in blk.iter_mut() {
            *v *= scale;
        }
        match i % 17 {
            // amax 127: d = 1, id = 1; halves round away from zero (Q8_0).
            3 => {
                blk[0] = 127.0;
                blk[1] = 2.5;
                blk[2] = -3.5;
                blk[3] = 0.5;
                blk[4] = -0.49999997;
            }
            // max -127: iscale = 1; halves round to even (Q8_K).
            5 => {
                blk[0] = -127.0;
                blk[1] = 2.5;
                blk[2] = -3.5;
                blk[3] = 126.5;
            }
            // The largest magnitude twice, with both signs: the first wins.
            7 => {
                blk[5] = 0.9;
                blk[9] = -0.9;
            }
            // Infinities (d infinite, codes 0) and a NaN last in a Q8_0
            // block (the core's maximum: d NaN), one in the middle.
            9 => blk[6] = f32::INFINITY,
            10 => blk[31] = f32::NAN,
            13 if blk.len() > 20 => {
                blk[20] = f32::NAN;
                blk[21] = f32::NEG_INFINITY;
            }
            _ => {}
        }
    }
    x
}

#[test]
fn activations_are_quantized_as_the_core_does() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        for (k, n_cols) in [(256, 1), (768, 3), (2560, 2)] {
            let x = activations(k, n_cols, 21 + k as u64);
            let got = b.quantize_activations(mode, &x, n_cols).unwrap();
            let want = expected_layout(mode, &x, n_cols);
            let (diff, n) = first_difference(mode, &got, &want);
            assert_eq!(diff, None, "{mode:?} k={k} cols={n_cols}: {n} words differ");
        }
    }
    // Not a whole number of blocks, or not a quantized mode: typed errors.
    let x = vec![0.5f32; 96];
    assert!(matches!(
        b.quantize_activations(ActQuant::Q8_K, &x, 1),
        Err(VulkanError::Core(Error::NotBlockAligned { .. }))
    ));
    assert!(matches!(
        b.quantize_activations(ActQuant::F32, &x, 1),
        Err(VulkanError::Core(Error::Unsupported(_)))
    ));
    assert_no_validation_messages(&b);
}

/// Blocks whose scales take the divisions over their whole range: random
/// magnitudes from 2^-100 to 2^100, maxima that 127 divides exactly or
/// that divide 127 (exact quotients), and normal activations small enough
/// that Q8_0's d is subnormal (id infinite) and Q8_K's 127 / max overflows
/// (iscale infinite, codes 0 from nearest_int's -2^22) or its d is
/// subnormal (every fifth 256 values are all that small).
#[cfg(feature = "lab")]
fn division_activations(k: usize, n_cols: usize, seed: u64) -> Vec<f32> {
    let mut x = data(k * n_cols, seed);
    let mut s = seed | 1;
    let mut next = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (s >> 33) as u32
    };
    for (i, blk) in x.chunks_mut(32).enumerate() {
        let r = next();
        let tiny = (i / 8) % 5 == 4;
        match if tiny { 3 } else { i % 4 } {
            0 | 1 => {
                let scale = 2f32.powi((r % 201) as i32 - 100);
                for v in blk.iter_mut() {
                    *v *= scale;
                }
            }
            2 => {
                let m = [
                    127.0,
                    127.0 * 3.0,
                    127.0 * 1021.0,
                    1.0,
                    127.0 * 2f32.powi(-90),
                ][r as usize % 5];
                for v in blk.iter_mut() {
                    *v *= m * 0.99;
                }
                blk[(r >> 8) as usize % 32] = if r & 0x80 != 0 { m } else { -m };
            }
            _ => {
                // Normal values from 2^-126 to 2^-121.
                for v in blk.iter_mut() {
                    let e = (next() % 5) as i32 - 126;
                    *v = v.signum() * (1.0 + v.abs()) * 2f32.powi(e);
                }
            }
        }
    }
    x
}

/// `quantize_activations` with the quantizer's shape for `mode` set to
/// `shape` (the default tuning restored after).
#[cfg(feature = "lab")]
fn quantize_shaped(
    b: &mut VulkanBackend,
    shape: QuantizeShape,
    mode: ActQuant,
    x: &[f32],
    n_cols: usize,
) -> Result<Vec<u32>, VulkanError> {
    let default = Tuning::default();
    b.set_tuning(default.with_quantize_shape(mode, shape))?;
    let r = b.quantize_activations(mode, x, n_cols);
    b.set_tuning(default).unwrap();
    r
}

#[cfg(feature = "lab")]
#[test]
fn every_quantizer_shape_divides_as_the_core_does() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    let mut tried = 0;
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        // Many blocks in the default shape (8192 Q8_0 and Q8_1 scales, 1024
        // Q8_K).
        let (k, n_cols) = (32768, 8);
        let x = division_activations(k, n_cols, 78);
        let got = b.quantize_activations(mode, &x, n_cols).unwrap();
        let want = expected_layout(mode, &x, n_cols);
        let (diff, n) = first_difference(mode, &got, &want);
        assert_eq!(diff, None, "{mode:?} k={k} cols={n_cols}: {n} words differ");
        let (k, n_cols) = (8192, 3);
        let x = division_activations(k, n_cols, 77);
        let want = expected_layout(mode, &x, n_cols);
        for values_per_thread in [4, 8, 16, 32] {
            for workgroup in [32, 64, 96, 256] {
                let shape = QuantizeShape {
                    workgroup,
                    values_per_thread,
                };
                let threads_per_block = match mode {
                    ActQuant::Q8_K => 256 / values_per_thread,
                    _ => 32 / values_per_thread,
                };
                let got = quantize_shaped(&mut b, shape, mode, &x, n_cols);
                if workgroup % threads_per_block != 0 {
                    assert!(
                        matches!(got, Err(VulkanError::Unsupported(_))),
                        "{mode:?} {shape:?}"
                    );
                    continue;
                }
                let got = got.unwrap();
                let (diff, n) = first_difference(mode, &got, &want);
                assert!(
                    diff.is_none(),
                    "{mode:?} {shape:?}: {n} words differ, the first {diff:?}: got {:x?}, want {:x?}",
                    diff.map(|i| got[i]),
                    diff.map(|i| want[i])
                );
                tried += 1;
            }
        }
    }
    assert!(tried >= 20, "{tried} shapes tried");
    for values_per_thread in [0, 2, 64] {
        let shape = QuantizeShape {
            workgroup: 64,
            values_per_thread,
        };
        let x = vec![0.5f32; 256];
        assert!(matches!(
            quantize_shaped(&mut b, shape, ActQuant::Q8_0, &x, 1),
            Err(VulkanError::Unsupported(_))
        ));
    }
    assert_no_validation_messages(&b);
}

fn unfused_chain(b: &VulkanBackend, e: &Epilogue, ops: &[&[f32]], mut v: Vec<f32>) -> Vec<f32> {
    for st in e.stages() {
        let mut out = vec![0.0; v.len()];
        match *st {
            Stage::Act(a) => b.unary(a, &v, &mut out).unwrap(),
            Stage::Add { slot } => b.add(&v, ops[slot as usize], &mut out).unwrap(),
            Stage::Mul { slot } => b.mul(&v, ops[slot as usize], &mut out).unwrap(),
            Stage::AddRowBias { slot } => b.add_row_bias(&v, ops[slot as usize], &mut out).unwrap(),
        }
        v = out;
    }
    v
}

/// Plain and gated GEMV, with and without a chain, against the core's
/// same-quantization reference, and fused == unfused.
fn check_all(b: &VulkanBackend, m: usize, cols: &[usize], sweep: &mut Sweep, what: &str) {
    for (i, (dtype, mode)) in PAIRS.into_iter().enumerate() {
        let k = if dtype.block_len() == 256 { 768 } else { 320 };
        let wb = weights(dtype, m, k, 1);
        let ub = weights(dtype, m, k, 2);
        let w = WeightMatrix::new(dtype, m, k, &wb).unwrap();
        let u = WeightMatrix::new(dtype, m, k, &ub).unwrap();
        let glu = GluWeights::new(w, u).unwrap();
        for (j, &n_cols) in cols.iter().enumerate() {
            if !sweep.runs(i, j) {
                continue;
            }
            let what = format!("{what} {dtype:?} x {mode:?} k={k} cols={n_cols}");
            let x: Vec<f32> = data(k * n_cols, 3 + n_cols as u64)
                .iter()
                .map(|v| v * 2.0)
                .collect();
            let ops = operands(m, n_cols);
            let ops: Vec<&[f32]> = ops.iter().map(|v| &v[..]).collect();
            let e = chain(Activation::Silu);
            let bound = e.bind(&ops, m, n_cols).unwrap();
            let none = Epilogue::NONE.bind(&[], m, n_cols).unwrap();
            let mut want = vec![0.0; m * n_cols];
            let mut got = vec![f32::NAN; m * n_cols];
            // Plain, no chain.
            gemm(&w, &x, n_cols, mode, &none, &mut want).unwrap();
            b.gemv(&GemvJob::new(&w, &x, n_cols).with_mode(mode), &mut got)
                .unwrap();
            assert_close(&got, &want, &what);
            let plain = got.clone();
            // With the chain; fused == GEMV + unfused kernels.
            gemm(&w, &x, n_cols, mode, &bound, &mut want).unwrap();
            b.gemv(
                &GemvJob::new(&w, &x, n_cols)
                    .with_mode(mode)
                    .with_epilogue(e, &ops),
                &mut got,
            )
            .unwrap();
            assert_close(&got, &want, &format!("chain {what}"));
            let unfused = unfused_chain(b, &e, &ops, plain.clone());
            assert_eq!(first_bit_difference(&got, &unfused), None, "chain {what}");
            // Gated; fused == 2 GEMV + glu + unfused chain.
            for act in [Activation::Silu, Activation::GeluErf] {
                gemm_glu(&glu, &x, n_cols, mode, act, &bound, &mut want).unwrap();
                b.gemv(
                    &GemvJob::gated(glu.gate(), glu.up(), act, &x, n_cols)
                        .with_mode(mode)
                        .with_epilogue(e, &ops),
                    &mut got,
                )
                .unwrap();
                let err = nmse(&got, &want);
                assert!(err <= 1e-6, "glu {act:?} {what}: nmse {err:e}");
                let mut up = vec![0.0; m * n_cols];
                b.gemv(&GemvJob::new(&u, &x, n_cols).with_mode(mode), &mut up)
                    .unwrap();
                let mut gated = vec![0.0; m * n_cols];
                b.glu(act, &plain, &up, &mut gated).unwrap();
                let unfused = unfused_chain(b, &e, &ops, gated);
                assert_eq!(
                    first_bit_difference(&got, &unfused),
                    None,
                    "glu {act:?} {what}"
                );
            }
        }
    }
}

#[test]
fn q8_gemv_matches_the_reference_for_every_column_count() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let cols: Vec<usize> = (1..=MAX_COLS).collect();
    let mut sweep = Sweep::new(&b, 3);
    check_all(&b, 37, &cols, &mut sweep, "picked shape");
    sweep.report("pairs x column counts");
    assert_no_validation_messages(&b);
}

/// The whole matrix without integer dot products: the same bits in plain
/// integer arithmetic (the same shaders where the device has none).
#[test]
fn q8_gemv_without_integer_dot_matches() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    b.set_tuning(Tuning::default().with_integer_dot(false))
        .unwrap();
    let mut sweep = Sweep::new(&b, 2);
    check_all(&b, 19, &[1, 3], &mut sweep, "fallback");
    sweep.report("pairs x column counts");
    assert_no_validation_messages(&b);
}

#[cfg(feature = "lab")]
#[test]
fn q8_gemv_shapes_lanes_and_the_integer_fallback() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    let info = b.context().info().clone();
    let sg = b
        .gemv_shape(DType::Q4_K, ActQuant::Q8_K, 1, false)
        .unwrap()
        .subgroup_reduce;
    // Rows not dividing M, more outputs than threads, loop tails, every
    // lane count a format allows (lanes above 1 need the subgroup path;
    // more than a format's units are refused). Shapes stay small: lavapipe
    // compiles every unrolled load slot.
    let mut shapes = vec![
        GemvShape {
            workgroup: 32,
            rows: 3,
            unroll: 1,
            subgroup_reduce: false,
            lanes: 1,
        },
        GemvShape {
            workgroup: 16,
            rows: 5,
            unroll: 2,
            subgroup_reduce: sg,
            lanes: if sg { 2 } else { 1 },
        },
    ];
    if sg {
        for lanes in [2, 4, 8] {
            if lanes <= info.subgroup_size() {
                shapes.push(GemvShape {
                    workgroup: 64,
                    rows: 2,
                    unroll: 2,
                    subgroup_reduce: true,
                    lanes,
                });
            }
        }
    }
    let m = 23;
    let mut sweep = Sweep::new(&b, 3.min(shapes.len()));
    for (i, shape) in shapes.into_iter().enumerate() {
        let tuning = Tuning::default().with_gemv_shape(Some(shape));
        b.set_tuning(tuning).unwrap();
        for (j, (dtype, mode)) in PAIRS.into_iter().enumerate() {
            if !sweep.runs(i, j) {
                continue;
            }
            let k = if dtype.block_len() == 256 { 1280 } else { 1056 };
            let wb = weights(dtype, m, k, 5);
            let w = WeightMatrix::new(dtype, m, k, &wb).unwrap();
            for n_cols in [1, 5] {
                let what = format!("{shape:?} {dtype:?} k={k} cols={n_cols}");
                let x = data(k * n_cols, 6);
                let none = Epilogue::NONE.bind(&[], m, n_cols).unwrap();
                let mut want = vec![0.0; m * n_cols];
                gemm(&w, &x, n_cols, mode, &none, &mut want).unwrap();
                let mut got = vec![f32::NAN; m * n_cols];
                let r = b.gemv(&GemvJob::new(&w, &x, n_cols).with_mode(mode), &mut got);
                let units = match dtype {
                    DType::Q8_0 => 4,
                    DType::Q4_0 => 2,
                    DType::Q4_K => 8,
                    _ => 1, // gemv_blocks.comp: one lane a block
                };
                if shape.lanes > units {
                    assert!(r.is_err(), "{what}");
                    continue;
                }
                r.unwrap();
                assert_close(&got, &want, &what);
                if info.integer_dot() {
                    b.set_tuning(tuning.with_integer_dot(false)).unwrap();
                    let mut plain = vec![f32::NAN; m * n_cols];
                    b.gemv(&GemvJob::new(&w, &x, n_cols).with_mode(mode), &mut plain)
                        .unwrap();
                    b.set_tuning(tuning).unwrap();
                    assert_eq!(first_bit_difference(&got, &plain), None, "fallback {what}");
                }
                if info.storage_16bit() && dtype != DType::Q4_K {
                    b.set_tuning(tuning.with_16bit_loads(false)).unwrap();
                    let mut w32 = vec![f32::NAN; m * n_cols];
                    b.gemv(&GemvJob::new(&w, &x, n_cols).with_mode(mode), &mut w32)
                        .unwrap();
                    b.set_tuning(tuning).unwrap();
                    assert_eq!(first_bit_difference(&got, &w32), None, "32-bit {what}");
                }
            }
        }
    }
    sweep.report("shapes x pairs");
    assert_no_validation_messages(&b);
}

#[test]
fn pairs_without_a_shader_are_unsupported() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let (m, k) = (4, 256);
    let x = data(k, 1);
    let mut y = vec![0.0; m];
    for (dtype, mode) in [
        (DType::F16, ActQuant::Q8_0),
        (DType::F32, ActQuant::Q8_K),
        (DType::Q4_K, ActQuant::Q8_0),
        (DType::Q8_0, ActQuant::Q8_K),
        (DType::Q4_0, ActQuant::Q8_1),
        (DType::Q4_1, ActQuant::Q8_0),
        (DType::Q5_1, ActQuant::Q8_K),
    ] {
        let wb = weights(dtype, m, k, 3);
        let w = WeightMatrix::new(dtype, m, k, &wb).unwrap();
        let r = b.gemv(&GemvJob::new(&w, &x, 1).with_mode(mode), &mut y);
        assert!(
            matches!(
                r,
                Err(VulkanError::Core(Error::Unsupported(Unsupported::WeightActs {
                    dtype: d,
                    mode: a
                }))) if a == mode && d == dtype
            ),
            "{dtype:?} {mode:?}: {r:?}"
        );
    }
    assert_no_validation_messages(&b);
}
