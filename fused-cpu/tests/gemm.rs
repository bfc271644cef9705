//! The multi-column (GEMM) path: against the core reference in the same
//! activation mode, fused == unfused bit for bit (plain and GLU), results
//! independent of the thread count and of the row range, for every weight
//! format, activation mode, ISA, column count and awkward shape.

use fused_core::DType;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::job::GemvJob;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::WeightMatrix;
use fused_cpu::{CpuBackend, Isa};

mod common;
use common::backend::{Chain, glu_add_fused_and_unfused};
use common::{HOT_FORMATS, Rng, WEIGHT_FORMATS, bits, glu_pair, modes, nmse, tolerance, weights};

/// K values per format: not a multiple of the SIMD width (float formats),
/// more than one K chunk with a short last one (block formats).
fn ks(dtype: DType) -> &'static [usize] {
    match dtype.block_len() {
        1 => &[37, 600],
        32 => &[96, 544],
        _ => &[256, 768],
    }
}

#[test]
fn gemm_matches_reference_and_fused_matches_unfused() {
    let mut rng = Rng::new(0x5eed_1234);
    let backends: Vec<CpuBackend> = Isa::available()
        .flat_map(|isa| [1, 2, 3].map(|t| CpuBackend::with_isa(isa, t).unwrap()))
        .collect();
    for dtype in WEIGHT_FORMATS {
        for &k in ks(dtype) {
            for &(m, n_cols) in &[
                (1usize, 2usize),
                (37, 3),
                (70, 4),
                (33, 5),
                (45, 8),
                (9, 33),
            ] {
                let w = weights(dtype, m, k, &mut rng);
                let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
                let x = rng.vec(k * n_cols);
                let res = rng.vec(m * n_cols);
                let bias = rng.vec(m);
                let none = Epilogue::NONE.bind(&[], m, n_cols).unwrap();
                let chain = Chain {
                    act: Activation::GeluTanh,
                    mul: None,
                    res: &res,
                    bias: &bias,
                };
                let bound = chain.bind(m, n_cols);
                for mode in modes(dtype) {
                    let mut want = vec![0.0f32; m * n_cols];
                    gemm(&wm, &x, n_cols, mode, &none, &mut want).unwrap();
                    let mut first: Option<(Isa, Vec<f32>)> = None;
                    for be in &backends {
                        let (isa, t) = (be.isa(), be.threads());
                        let case = format!("{dtype} {mode:?} {isa} t{t} {m}x{k}x{n_cols}");
                        let mut y = vec![0.0f32; m * n_cols];
                        be.gemv(
                            &GemvJob::new(&wm, &x, n_cols)
                                .with_mode(mode)
                                .with_bound(&none),
                            &mut y,
                        )
                        .unwrap();
                        let e = nmse(&y, &want);
                        assert!(e <= tolerance(isa), "{case}: NMSE {e:e}");
                        // Same ISA, other thread count: the same bits.
                        match &first {
                            Some((i, y0)) if *i == isa => {
                                assert_eq!(bits(&y), bits(y0), "{case}: thread count")
                            }
                            _ => first = Some((isa, y.clone())),
                        }
                        let mut fused = vec![0.0f32; m * n_cols];
                        be.gemv(
                            &GemvJob::new(&wm, &x, n_cols)
                                .with_mode(mode)
                                .with_bound(&bound),
                            &mut fused,
                        )
                        .unwrap();
                        let unfused = chain.unfused(be, &y);
                        assert_eq!(bits(&fused), bits(&unfused), "{case}: fused vs unfused");
                    }
                }
            }
        }
    }
}

#[test]
fn gemm_glu_fused_matches_unfused_and_reference() {
    let mut rng = Rng::new(0xfeed);
    for dtype in WEIGHT_FORMATS {
        let k = ks(dtype)[1];
        let (m, n_cols) = (41, 6);
        let (wg, wu) = (
            weights(dtype, m, k, &mut rng),
            weights(dtype, m, k, &mut rng),
        );
        let pair = glu_pair(dtype, m, k, &wg, &wu);
        let x = rng.vec(k * n_cols);
        let res = rng.vec(m * n_cols);
        let bound = Epilogue::NONE
            .then_add()
            .unwrap()
            .bind(&[&res], m, n_cols)
            .unwrap();
        for mode in modes(dtype) {
            let mut want = vec![0.0f32; m * n_cols];
            gemm_glu(&pair, &x, n_cols, mode, Activation::Silu, &bound, &mut want).unwrap();
            for isa in Isa::available() {
                for threads in [1, 2, 3] {
                    let case = format!("{dtype} {mode:?} {isa} t{threads}");
                    let be = CpuBackend::with_isa(isa, threads).unwrap();
                    let (fused, unfused) = glu_add_fused_and_unfused(
                        &be,
                        &pair,
                        Activation::Silu,
                        &x,
                        n_cols,
                        mode,
                        &res,
                    );
                    let e = nmse(&fused, &want);
                    assert!(e <= tolerance(isa) * 10.0, "{case}: NMSE {e:e}");
                    assert_eq!(bits(&fused), bits(&unfused), "{case}");
                }
            }
        }
    }
}

/// A few weight rows against many columns (fewer row chunks than threads,
/// so the backend splits the columns too): every thread count gives the
/// one-thread bits, plain, with a fused chain whose operands differ per
/// column, and GLU; and the plain result is the reference within the
/// ISA's tolerance.
#[test]
fn small_m_gemm_splits_columns_bit_identically() {
    let mut rng = Rng::new(0x5a11);
    for dtype in HOT_FORMATS {
        let k = ks(dtype)[0];
        for &(m, n) in &[(64usize, 3usize), (64, 32), (128, 37), (5, 9)] {
            let (w, w2) = (
                weights(dtype, m, k, &mut rng),
                weights(dtype, m, k, &mut rng),
            );
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            let pair = glu_pair(dtype, m, k, &w, &w2);
            let x = rng.vec(k * n);
            let (res, mul, bias) = (rng.vec(m * n), rng.vec(m * n), rng.vec(m));
            let none = Epilogue::NONE.bind(&[], m, n).unwrap();
            let chain = Chain {
                act: Activation::Silu,
                mul: Some(&mul),
                res: &res,
                bias: &bias,
            };
            let bound = chain.bind(m, n);
            for mode in modes(dtype) {
                let mut want = vec![0.0f32; m * n];
                gemm(&wm, &x, n, mode, &none, &mut want).unwrap();
                for isa in Isa::available() {
                    let run = |threads: usize| {
                        let be = CpuBackend::with_isa(isa, threads).unwrap();
                        let mut out = [(); 3].map(|_| vec![f32::NAN; m * n]);
                        let [plain, fused, glu] = &mut out;
                        be.gemv(
                            &GemvJob::new(&wm, &x, n).with_mode(mode).with_bound(&none),
                            plain,
                        )
                        .unwrap();
                        be.gemv(
                            &GemvJob::new(&wm, &x, n).with_mode(mode).with_bound(&bound),
                            fused,
                        )
                        .unwrap();
                        be.gemv(
                            &GemvJob::gated(pair.gate(), pair.up(), Activation::Silu, &x, n)
                                .with_mode(mode)
                                .with_bound(&bound),
                            glu,
                        )
                        .unwrap();
                        out
                    };
                    let one = run(1);
                    let case = format!("{dtype} {mode:?} {isa} {m}x{k}x{n}");
                    let e = nmse(&one[0], &want);
                    assert!(e <= tolerance(isa), "{case}: NMSE {e:e}");
                    for threads in [2, 3] {
                        let got = run(threads);
                        for (what, (a, b)) in
                            ["plain", "fused", "glu"].iter().zip(one.iter().zip(&got))
                        {
                            assert_eq!(bits(b), bits(a), "{case} t{threads} {what}");
                        }
                    }
                }
            }
        }
    }
}

/// The GEMM driver and its kernels called directly (the `lab` feature).
#[cfg(feature = "lab")]
mod kernels {
    use super::*;
    use common::prepare_columns;
    use fused_core::acts::ActQuant;
    use fused_cpu::acts::column;
    use fused_cpu::gemm::gemm_rows;
    use fused_cpu::kernels::gemm::gemm_kernel;

    #[test]
    fn accumulators_do_not_depend_on_the_row_range() {
        let mut rng = Rng::new(77);
        for dtype in HOT_FORMATS {
            let (m, k, n) = (70, 512, 5);
            let w = weights(dtype, m, k, &mut rng);
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            let x = rng.vec(k * n);
            for isa in Isa::available() {
                for mode in modes(dtype) {
                    let Some(kern) = gemm_kernel(isa, dtype, mode) else {
                        continue;
                    };
                    let scratch = prepare_columns(mode, &x, k, n);
                    let cols: Vec<_> = (0..n)
                        .map(|c| column(mode, &x, &scratch, k, c).unwrap())
                        .collect();
                    let mut full = vec![0.0f32; m * n];
                    gemm_rows(kern, [&wm], &cols, 0..m, |r, c, [a]| full[c * m + r] = a).unwrap();
                    let mut parts = vec![f32::NAN; m * n];
                    for rows in [0..5, 5..38, 38..39, 39..70] {
                        gemm_rows(kern, [&wm], &cols, rows, |r, c, [a]| parts[c * m + r] = a)
                            .unwrap();
                    }
                    assert_eq!(bits(&full), bits(&parts), "{dtype} {isa} {mode:?}");
                    // The second matrix of a pair gets the same accumulators.
                    let mut second = vec![0.0f32; m * n];
                    gemm_rows(kern, [&wm, &wm], &cols, 0..m, |r, c, [a, b]| {
                        assert_eq!(a.to_bits(), b.to_bits());
                        second[c * m + r] = b;
                    })
                    .unwrap();
                    assert_eq!(bits(&full), bits(&second), "{dtype} {isa} {mode:?} pair");
                }
            }
        }
    }

    #[test]
    fn bad_gemm_inputs_are_typed_errors() {
        let mut rng = Rng::new(5);
        let (m, k, n) = (8, 64, 3);
        let w = weights(DType::Q4_0, m, k, &mut rng);
        let wm = WeightMatrix::new(DType::Q4_0, m, k, &w).unwrap();
        let x = rng.vec(k * n);
        let kern = gemm_kernel(Isa::Scalar, DType::Q4_0, ActQuant::F32).unwrap();
        let cols: Vec<_> = (0..n)
            .map(|c| column(ActQuant::F32, &x, &[], k, c).unwrap())
            .collect();
        // Rows past the matrix.
        assert!(gemm_rows(kern, [&wm], &cols, 0..m + 1, |_, _, [_]| ()).is_err());
        // Columns prepared in another mode.
        let q = prepare_columns(ActQuant::Q8_0, &x, k, n);
        let qcols: Vec<_> = (0..n)
            .map(|c| column(ActQuant::Q8_0, &x, &q, k, c).unwrap())
            .collect();
        assert!(gemm_rows(kern, [&wm], &qcols, 0..m, |_, _, [_]| ()).is_err());
        // A short column.
        let short = [cols[0], fused_cpu::acts::Acts::F32(&x[..k - 1])];
        assert!(gemm_rows(kern, [&wm], &short, 0..m, |_, _, [_]| ()).is_err());
        // Weights of another format than the kernel's.
        let w8 = weights(DType::Q8_0, m, k, &mut rng);
        let wm8 = WeightMatrix::new(DType::Q8_0, m, k, &w8).unwrap();
        assert!(gemm_rows(kern, [&wm8], &cols, 0..m, |_, _, [_]| ()).is_err());
        // A pair of different shapes.
        let w2 = weights(DType::Q4_0, m - 1, k, &mut rng);
        let wm2 = WeightMatrix::new(DType::Q4_0, m - 1, k, &w2).unwrap();
        assert!(gemm_rows(kern, [&wm, &wm2], &cols, 0..m - 1, |_, _, [_, _]| ()).is_err());
        // No kernel for a mode the weights cannot take, nor for an int format
        // without an int kernel.
        assert!(gemm_kernel(Isa::Scalar, DType::Q4_0, ActQuant::Q8_K).is_none());
        assert!(gemm_kernel(Isa::Scalar, DType::Q4_0, ActQuant::Q8_0).is_none());
    }

    /// Weights of an int format whose code bytes are random bit patterns, so
    /// the extreme codes (Q8_0 −128 and 127, Q6_K 63, IQ4_NL −127) are common;
    /// the f16 scales are set to small finite values.
    fn extreme_weights(dtype: DType, m: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
        let bb = dtype.block_bytes();
        let mut w: Vec<u8> = (0..m * dtype.row_bytes(k).unwrap())
            .map(|_| (rng.f32().to_bits() >> 7) as u8)
            .collect();
        // Byte offsets of the f16 scales in a block.
        let scales: &[usize] = match dtype {
            DType::Q4_K => &[0, 2],
            DType::Q6_K => &[208],
            _ => &[0],
        };
        for block in w.chunks_exact_mut(bb) {
            for &at in scales {
                let d = half::f16::from_f32(0.01 + 0.01 * rng.f32().abs());
                block[at..at + 2].copy_from_slice(&d.to_le_bytes());
            }
        }
        w
    }

    /// The int GEMM kernels (AVX2 `vpmaddubsw` and AVX-512 VNNI) on codes at
    /// the ends of their ranges and large activations, where an i16 pair sum
    /// could saturate: within the reference tolerance, and the two ISAs give
    /// the same bits.
    #[test]
    fn int_gemm_exact_at_extreme_codes_and_equal_across_isas() {
        let mut rng = Rng::new(0xe7e7);
        let int_formats = [
            DType::Q4_0,
            DType::Q5_0,
            DType::Q8_0,
            DType::IQ4_NL,
            DType::Q4_K,
            DType::Q6_K,
        ];
        for dtype in int_formats {
            let (m, k, n) = (70, 512, 6);
            let w = extreme_weights(dtype, m, k, &mut rng);
            let wm = WeightMatrix::new(dtype, m, k, &w).unwrap();
            // Activations of one sign and full scale per block push the Q8
            // codes to ±127.
            let x: Vec<f32> = (0..k * n)
                .map(|i| if (i / 3) % 2 == 0 { 4.0 } else { -4.0 } * (1.0 + rng.f32().abs()))
                .collect();
            let mode = ActQuant::ggml(dtype);
            let none = Epilogue::NONE.bind(&[], m, n).unwrap();
            let mut want = vec![0.0f32; m * n];
            gemm(&wm, &x, n, mode, &none, &mut want).unwrap();
            let scratch = prepare_columns(mode, &x, k, n);
            let cols: Vec<_> = (0..n)
                .map(|c| column(mode, &x, &scratch, k, c).unwrap())
                .collect();
            let mut seen: Vec<(Isa, Vec<f32>)> = Vec::new();
            for isa in Isa::available().filter(|i| *i >= Isa::Avx2) {
                let kern = gemm_kernel(isa, dtype, mode).expect("an int kernel");
                assert!(kern.is_int(), "{dtype} {isa}");
                let mut y = vec![f32::NAN; m * n];
                gemm_rows(kern, [&wm], &cols, 0..m, |r, c, [a]| y[c * m + r] = a).unwrap();
                let e = nmse(&y, &want);
                assert!(e <= tolerance(isa), "{dtype} {isa}: NMSE {e:e}");
                seen.push((isa, y));
            }
            if let [(a, ya), (b, yb), ..] = seen.as_slice() {
                assert_eq!(bits(ya), bits(yb), "{dtype}: {a} vs {b}");
            }
        }
    }
}
