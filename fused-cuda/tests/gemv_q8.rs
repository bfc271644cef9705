//! Quantized activations on the device (GGML's CPU modes, the core's
//! `ActQuant::Q8_0`, `ActQuant::Q8_1` and `ActQuant::Q8_K`) and the integer
//! GEMV kernels for every quantized weight format, on the first CUDA device
//! (skipped without one; see `common::backend_or_skip`).
//!
//! - The quantizers give the core's `quantize_row` codes and scales bit for
//!   bit (compared decoded: the device layout is not GGML's block layout).
//! - The integer GEMV against the core reference in the same mode: each
//!   block's integer sum is exact, only the f32 sum of the scaled block
//!   terms runs in another order, so every output within fused-verify's
//!   ulp budget (4096 ulps where |ref| >= 1% of the largest) and the NMSE
//!   against the f64 reference within its Q8 budget (5e-4).

mod common;

use common::{CoreGemvJob, Rng, backend_or_skip, chain, chain_operands, nmse, weights, wide};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::quant::{dequantize_row, quantize_row};
use fused_core::reference::gemv::{gemm, gemm_f64, gemm_glu, gemm_glu_f64};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_cuda::{CudaBackend, Knob, QuantizedActs};

/// fused-verify's ulp budget of the products (`tolerance::ulp_budget`) and floor.
const ULPS: u64 = 4096;
const ULP_FLOOR: f32 = 1e-2;
/// fused-verify's NMSE budget with Q8 activations.
const NMSE_Q8: f64 = 5e-4;
/// How far the kernel's error against the f64 reference may exceed the
/// same-mode reference's own (the quantization of the activations, which
/// for a product of two quantized GEMVs can pass `NMSE_Q8` on its own).
const NMSE_OVER_REFERENCE: f64 = 1.01;

/// Where bsum group `g` of a Q8_K block lies among its 16 device sums.
fn bsum_slot(g: usize) -> usize {
    2 * (2 * (g / 4) + g % 2) + (g / 2) % 2
}

/// An f16 (two little-endian bytes) as f32, by the core's dequantizer.
fn half(lo: u8, hi: u8) -> f32 {
    let mut v = [0.0f32];
    dequantize_row(DType::F16, &[lo, hi], &mut v).unwrap();
    v[0]
}

/// Columns of test activations: random at several scales, an all-zero
/// block, and exact ties for the roundings (amax 127: d = 1 for Q8_0,
/// iscale = ±1 for Q8_K; equal magnitudes of both signs).
fn columns(rng: &mut Rng, k: usize) -> Vec<Vec<f32>> {
    let mut cols = vec![
        rng.vec_scaled(k, 1.0),
        rng.vec_scaled(k, 1e-3),
        rng.vec_scaled(k, 300.0),
    ];
    let mut special = rng.vec_scaled(k, 50.0);
    special[..32].fill(0.0);
    let ties = [0.5f32, 1.5, -2.5, 3.5, -0.5, 126.5, -126.5, 2.5];
    for (b, blk) in special.chunks_mut(32).enumerate().skip(1) {
        blk[0] = if b % 2 == 0 { -127.0 } else { 127.0 };
        blk[5] = -blk[0];
        for (i, v) in blk[8..16].iter_mut().enumerate() {
            *v = ties[i];
        }
    }
    cols.push(special);
    // Non-finite values: an infinity in one block, NaNs before, inside and
    // at the end of others (the core's amax fold restarts after a NaN).
    let mut odd = rng.vec_scaled(k, 2.0);
    odd[40] = f32::INFINITY;
    odd[64] = f32::NAN;
    odd[100] = f32::NAN;
    odd[127] = f32::NAN;
    odd[200] = f32::NEG_INFINITY;
    cols.push(odd);
    cols
}

/// Equal bits, or both NaN (the NaN payloads of f16 conversions differ
/// between the CPU and the GPU).
fn same_scale(got: f32, want: f32) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

#[test]
fn quantizers_match_the_core_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(21);
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        let d = mode.dtype().unwrap();
        for k in [256usize, 1024 + 256, 4096] {
            let cols = columns(&mut rng, k);
            let n_cols = cols.len();
            let x: Vec<f32> = cols.concat();
            let xd = be.upload(&x).unwrap();
            let acts = be.quantize_acts(mode, &xd, n_cols).unwrap();
            let got: QuantizedActs = be.download_acts(&acts).unwrap();
            for (c, col) in cols.iter().enumerate() {
                let mut want = vec![0u8; d.row_bytes(k).unwrap()];
                quantize_row(d, col, &mut want).unwrap();
                let nb = k / d.block_len();
                for (b, blk) in want.chunks_exact(d.block_bytes()).enumerate() {
                    let gb = c * nb + b;
                    let what = format!("{mode:?} k={k} col {c} block {b}");
                    let bl = d.block_len();
                    let codes = &got.codes[gb * bl..(gb + 1) * bl];
                    if mode == ActQuant::Q8_0 {
                        let want_codes: Vec<i8> = blk[2..].iter().map(|&v| v as i8).collect();
                        assert_eq!(codes, &want_codes[..], "{what}: codes");
                        let dq = half(blk[0], blk[1]);
                        assert!(
                            same_scale(got.scales[gb], dq),
                            "{what}: d {} vs {dq}",
                            got.scales[gb]
                        );
                        let sum: i32 = want_codes.iter().map(|&v| i32::from(v)).sum();
                        assert_eq!(got.sums[gb], sum, "{what}: sum");
                    } else if mode == ActQuant::Q8_1 {
                        let want_codes: Vec<i8> = blk[4..].iter().map(|&v| v as i8).collect();
                        assert_eq!(codes, &want_codes[..], "{what}: codes");
                        for (i, name) in [(0, "d"), (1, "s")] {
                            let want = half(blk[2 * i], blk[2 * i + 1]);
                            let got = got.scales[2 * gb + i];
                            assert!(same_scale(got, want), "{what}: {name} {got} vs {want}");
                        }
                        assert!(got.sums.is_empty(), "{what}: Q8_1 keeps no sums");
                    } else {
                        let dk = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
                        assert!(
                            same_scale(got.scales[gb], dk),
                            "{what}: d {} vs {dk}",
                            got.scales[gb]
                        );
                        let want_codes: Vec<i8> = blk[4..260].iter().map(|&v| v as i8).collect();
                        assert_eq!(codes, &want_codes[..], "{what}: codes");
                        for g in 0..16 {
                            let bs = i16::from_le_bytes([blk[260 + 2 * g], blk[261 + 2 * g]]);
                            assert_eq!(
                                got.sums[16 * gb + bsum_slot(g)],
                                i32::from(bs),
                                "{what}: bsum {g}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The largest ulp distance between `got` and `want` over the elements with
/// |want| >= ULP_FLOOR · max |want|.
fn max_ulps(got: &[f32], want: &[f32]) -> u64 {
    let top = want.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let key = |v: f32| {
        let b = v.to_bits() as i64;
        if b < 0 { i64::MIN - b } else { b }
    };
    got.iter()
        .zip(want)
        .filter(|(_, w)| w.abs() >= ULP_FLOOR * top)
        .map(|(g, w)| key(*g).abs_diff(key(*w)))
        .max()
        .unwrap_or(0)
}

/// K values: one block, odd counts of blocks (Q8_0: groups of 32 blocks
/// and a partial group), and more blocks than a launch's 128 lanes take in
/// one pass.
fn ks(dtype: DType) -> Vec<usize> {
    if dtype.block_len() == 256 {
        vec![256, 768, 2304, 9216 + 256]
    } else {
        vec![32, 96, 1056, 8192 + 160]
    }
}

#[allow(clippy::too_many_arguments)]
fn check(
    be: &CudaBackend,
    rng: &mut Rng,
    dtype: DType,
    mode: ActQuant,
    m: usize,
    k: usize,
    n_cols: usize,
    glu: Option<Activation>,
    worst: &mut (u64, f64),
    fails: &mut Vec<String>,
) {
    let gb = weights(rng, dtype, m, k);
    let ub = weights(rng, dtype, m, k);
    let gw = WeightMatrix::new(dtype, m, k, &gb).unwrap();
    let uw = WeightMatrix::new(dtype, m, k, &ub).unwrap();
    let x = rng.vec_scaled(k * n_cols, 1.0);
    let [o0, o1, bias] = chain_operands(rng, m, n_cols);
    let ops: [&[f32]; 3] = [&o0, &o1, &bias];
    for epi in [Epilogue::NONE, chain()] {
        let bound = epi.bind(&ops, m, n_cols).unwrap();
        let mut want = vec![0.0f32; m * n_cols];
        let mut want64 = vec![0.0f64; m * n_cols];
        let mut got = vec![f32::NAN; m * n_cols];
        match glu {
            None => {
                gemm(&gw, &x, n_cols, mode, &bound, &mut want).unwrap();
                gemm_f64(&gw, &x, n_cols, &bound, &mut want64).unwrap();
                common::gemv_host(
                    be,
                    &CoreGemvJob::new(&gw, &x, n_cols)
                        .with_mode(mode)
                        .with_epilogue(epi, &ops),
                    &mut got,
                )
                .unwrap();
            }
            Some(act) => {
                let w = GluWeights::new(gw, uw).unwrap();
                gemm_glu(&w, &x, n_cols, mode, act, &bound, &mut want).unwrap();
                gemm_glu_f64(&w, &x, n_cols, act, &bound, &mut want64).unwrap();
                common::gemv_host(
                    be,
                    &CoreGemvJob::gated(w.gate(), w.up(), act, &x, n_cols)
                        .with_mode(mode)
                        .with_epilogue(epi, &ops),
                    &mut got,
                )
                .unwrap();
            }
        }
        let what = format!(
            "{dtype} {mode:?} m={m} k={k} cols={n_cols} glu={glu:?} stages={}",
            epi.len()
        );
        let ulps = max_ulps(&got, &want);
        let e64 = nmse(&got, &want64);
        let e_same = nmse(&got, &wide(&want));
        // The budget: fused-verify's, or what quantizing the activations
        // costs the same-mode reference itself, whichever is larger.
        let budget = NMSE_Q8.max(NMSE_OVER_REFERENCE * nmse(&want, &want64));
        worst.0 = worst.0.max(ulps);
        worst.1 = worst.1.max(e_same);
        if ulps > ULPS {
            fails.push(format!("{what}: {ulps} ulps from the same-mode reference"));
        }
        if e64.is_nan() || e64 > budget {
            fails.push(format!(
                "{what}: nmse {e64:e} against the f64 reference (budget {budget:e})"
            ));
        }
    }
}

/// Fails with every message in `fails` (all formats are checked before a
/// test fails, so that one run shows every format's result).
fn assert_no_failures(fails: &[String]) {
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
}

/// Every quantized weight format in GGML's mode for it.
fn cases() -> Vec<(DType, ActQuant)> {
    fused_cuda::GEMV_DTYPES
        .into_iter()
        .filter(|d| d.is_quantized())
        .map(|d| (d, ActQuant::ggml(d)))
        .collect()
}

#[test]
fn every_quantized_format_takes_ggmls_mode_and_no_other() {
    for d in fused_cuda::GEMV_DTYPES {
        for mode in [
            ActQuant::F32,
            ActQuant::Q8_0,
            ActQuant::Q8_1,
            ActQuant::Q8_K,
        ] {
            let ok = mode == ActQuant::F32 || (d.is_quantized() && mode == ActQuant::ggml(d));
            assert_eq!(
                fused_cuda::check_gemv_mode(d, mode).is_ok(),
                ok,
                "{d} {mode:?}"
            );
        }
    }
    assert_eq!(cases().len(), 10);
}

#[test]
fn integer_gemv_matches_the_same_mode_reference() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(22);
    let mut fails = Vec::new();
    for (dtype, mode) in cases() {
        let mut worst = (0, 0.0);
        for k in ks(dtype) {
            for n_cols in 1..=8 {
                // Rows: not a multiple of the 2 or 4 rows a block computes.
                let (w, f) = (&mut worst, &mut fails);
                check(&be, &mut rng, dtype, mode, 67, k, n_cols, None, w, f);
            }
        }
        eprintln!(
            "integer GEMV {dtype} {mode:?}: worst {} ulps, NMSE {:e} against the same-mode reference",
            worst.0, worst.1
        );
    }
    assert_no_failures(&fails);
}

#[test]
fn integer_glu_matches_the_same_mode_reference() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(23);
    let mut fails = Vec::new();
    for (dtype, mode) in cases() {
        let mut worst = (0, 0.0);
        let k = ks(dtype)[2];
        for (n_cols, act) in [1, 2, 5, 8].into_iter().zip(Activation::ALL) {
            let (w, f) = (&mut worst, &mut fails);
            check(&be, &mut rng, dtype, mode, 33, k, n_cols, Some(act), w, f);
        }
        eprintln!(
            "integer GLU {dtype} {mode:?}: worst {} ulps, NMSE {:e} against the same-mode reference",
            worst.0, worst.1
        );
    }
    assert_no_failures(&fails);
}

/// One-column Q4_K rows of at most 224 units (K ≤ 14336) take 4 rows a
/// block in 2 row groups by default; every output equals the plain kernel
/// of 2 rows a block (`Knob::IntRows(2)`) bit for bit, each thread adding
/// the units of the plain kernel's lanes it stands for into their own
/// sums: plain, gated, with the fixed add chain and the generic chain,
/// rows of fewer units than threads and of more (a last step part full),
/// over row counts that end inside a block.
#[test]
fn q4_k_row_groups_give_the_plain_kernels_bits() {
    let Some(be) = backend_or_skip() else { return };
    let grouped = be.tuning();
    let plain = grouped.with(Knob::IntRows(2)).unwrap();
    let mut rng = Rng::new(24);
    let add = Epilogue::NONE.then_add().unwrap();
    for k in [256, 2304, 4096, 4352, 14336] {
        for m in [67, 1030] {
            let gb = weights(&mut rng, DType::Q4_K, m, k);
            let ub = weights(&mut rng, DType::Q4_K, m, k);
            let gw = WeightMatrix::new(DType::Q4_K, m, k, &gb).unwrap();
            let uw = WeightMatrix::new(DType::Q4_K, m, k, &ub).unwrap();
            let w = GluWeights::new(gw, uw).unwrap();
            let x = rng.vec_scaled(k, 1.0);
            let [o0, o1, bias] = chain_operands(&mut rng, m, 1);
            let chain_ops: [&[f32]; 3] = [&o0, &o1, &bias];
            let add_ops: [&[f32]; 1] = [&o1];
            for (epi, ops) in [
                (Epilogue::NONE, &chain_ops[..0]),
                (add, &add_ops[..]),
                (chain(), &chain_ops[..]),
            ] {
                for gated in [false, true] {
                    let run = |tuning| {
                        be.set_tuning(tuning);
                        let job = if gated {
                            CoreGemvJob::gated(w.gate(), w.up(), Activation::Silu, &x, 1)
                        } else {
                            CoreGemvJob::new(&gw, &x, 1)
                        };
                        let job = job.with_mode(ActQuant::Q8_K).with_epilogue(epi, ops);
                        let mut y = vec![f32::NAN; m];
                        common::gemv_host(&be, &job, &mut y).unwrap();
                        y.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                    };
                    let (g, p) = (run(grouped), run(plain));
                    assert_eq!(g, p, "k={k} m={m} stages={} gated={gated}", epi.len());
                }
            }
        }
    }
}
