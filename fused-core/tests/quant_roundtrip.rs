//! Round trips, error budgets, tie rounding and input validation of the
//! quant module.
//!
//! Error budgets and their measure come from GGML's
//! `tests/test-quantize-fns.cpp` (ggml-org/ggml d99724f2):
//! * data `x[i] = 0.1 + 2·cos(i + offset)`, 4096 values, offset 0 for the
//!   quantized row and 1 for the second dot operand;
//! * total quantization error = `sqrt(Σ (x − deq(q(x)))²) / n` (the sum in
//!   f64) must be below `MAX_QUANTIZATION_TOTAL_ERROR = 0.002`, or
//!   `MAX_QUANTIZATION_TOTAL_ERROR_TERNARY = 0.01` for TQ2_0;
//! * dot product error = `|vec_dot(q(x), q_vdt(y)) − Σ x·y| / n` must be
//!   below `MAX_DOT_PRODUCT_ERROR = 0.02`, or `MAX_DOT_PRODUCT_ERROR_TERNARY =
//!   0.15` for TQ2_0.
//!
//! Both measures are computed so that they equal GGML's at n = 4096 and
//! stay comparable on the shorter rows used under Miri: the total error as
//! `rms / sqrt(4096)` and the dot error as `|error| / (sqrt(n)·sqrt(4096))`.

use fused_core::blocks::{Block, BlockQ8_0, BlockQ8_1, BlockQ8K};
use fused_core::quant::{dequantize_row, quantize_row, vec_dot};
use fused_core::{DType, Error};

const MAX_QUANTIZATION_TOTAL_ERROR: f64 = 0.002;
const MAX_QUANTIZATION_TOTAL_ERROR_TERNARY: f64 = 0.01;
const MAX_DOT_PRODUCT_ERROR: f64 = 0.02;
const MAX_DOT_PRODUCT_ERROR_TERNARY: f64 = 0.15;
/// GGML's test size.
const GGML_N: usize = 32 * 128;

fn test_len() -> usize {
    if cfg!(miri) { 256 } else { GGML_N }
}

/// Row length of the other round-trip tests.
fn short_len() -> usize {
    if cfg!(miri) { 256 } else { 512 }
}

/// GGML's `generate_data`: `0.1 + 2·cosf(i + offset)` (the `0.1` is a double).
fn generate_data(offset: f32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.1f64 + f64::from(2.0 * (i as f32 + offset).cos())) as f32)
        .collect()
}

fn roundtrip(dtype: DType, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let mut q = vec![0u8; dtype.row_bytes(x.len()).unwrap()];
    quantize_row(dtype, x, &mut q).unwrap();
    let mut y = vec![0.0f32; x.len()];
    dequantize_row(dtype, &q, &mut y).unwrap();
    (q, y)
}

/// GGML's total error, normalised to its n = 4096.
fn total_error(x: &[f32], y: &[f32]) -> f64 {
    let sum: f64 = x
        .iter()
        .zip(y)
        .map(|(&a, &b)| {
            let d = f64::from(a - b);
            d * d
        })
        .sum();
    (sum / x.len() as f64).sqrt() / (GGML_N as f64).sqrt()
}

#[test]
fn quantization_error_within_ggml_budget() {
    let n = test_len();
    let x = generate_data(0.0, n);
    for dtype in DType::ALL {
        let (_, y) = roundtrip(dtype, &x);
        let err = total_error(&x, &y);
        let budget = if dtype == DType::TQ2_0 {
            MAX_QUANTIZATION_TOTAL_ERROR_TERNARY
        } else {
            MAX_QUANTIZATION_TOTAL_ERROR
        };
        println!("{dtype:>7} total quantization error {err:.6} (budget {budget})");
        assert!(err < budget, "{dtype}: error {err} ≥ {budget}");
    }
}

#[test]
fn dot_product_error_within_ggml_budget() {
    let n = test_len();
    let x = generate_data(0.0, n);
    let y = generate_data(1.0, n);
    let exact: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum();
    for dtype in DType::ALL {
        let Some(vdt) = dtype.vec_dot_type() else {
            continue;
        };
        let (qx, _) = roundtrip(dtype, &x);
        let (qy, _) = roundtrip(vdt, &y);
        let got = vec_dot(dtype, &qx, &qy, n).unwrap();
        // GGML's |error| / n at n = 4096; a shorter row (Miri) is scaled as a
        // random-walk sum: |error| / (sqrt(n) · sqrt(4096)).
        let err = (f64::from(got) - exact).abs() / ((n as f64).sqrt() * (GGML_N as f64).sqrt());
        let budget = if dtype == DType::TQ2_0 {
            MAX_DOT_PRODUCT_ERROR_TERNARY
        } else {
            MAX_DOT_PRODUCT_ERROR
        };
        println!("{dtype:>7} dot product error {err:.6} (budget {budget})");
        assert!(err < budget, "{dtype}: dot error {err} ≥ {budget}");
    }
}

/// The dot equals the f32 dot of the dequantized rows up to rounding: the
/// integer part of `vec_dot` is exact.
#[test]
fn vec_dot_agrees_with_dequantized_dot() {
    let n = short_len();
    let x = generate_data(0.5, n);
    let y = generate_data(2.0, n);
    for dtype in DType::ALL {
        let Some(vdt) = dtype.vec_dot_type() else {
            continue;
        };
        let (qx, dx) = roundtrip(dtype, &x);
        let (qy, dy) = roundtrip(vdt, &y);
        let got = f64::from(vec_dot(dtype, &qx, &qy, n).unwrap());
        let mut want: f64 = dx
            .iter()
            .zip(&dy)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        if vdt == DType::Q8_1 {
            // The min term uses the block's f16 `s = f16(d·Σq)` instead of
            // the exact d·Σq: swap one for the other in the expectation.
            for (b, (wb, xb)) in qx
                .chunks_exact(dtype.block_bytes())
                .zip(qy.chunks_exact(36))
                .enumerate()
            {
                let m = f64::from(half::f16::from_le_bytes([wb[2], wb[3]]).to_f32());
                let y = BlockQ8_1::read(xb).unwrap();
                let exact: f64 = dy[32 * b..32 * b + 32].iter().map(|&v| f64::from(v)).sum();
                want += m * (f64::from(y.s.to_f32()) - exact);
            }
        }
        let scale: f64 = dx
            .iter()
            .zip(&dy)
            .map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs())
            .sum();
        assert!(
            (got - want).abs() <= 1e-5 * scale.max(1.0),
            "{dtype}: vec_dot {got} vs dequantized dot {want}"
        );
    }
}

// ---------------------------------------------------------------------------
// Exact ties: Q8_0/Q8_1 round half away from zero, Q8_K half to even.

/// x[0] = ±127 fixes the scale at exactly 1 (Q8_0/Q8_1: d = 127/127; Q8_K:
/// iscale = −127/max = ∓1), so the other values are exact .5 ties.
fn tie_block(first: f32, len: usize) -> Vec<f32> {
    let mut x = vec![0.0f32; len];
    x[..7].copy_from_slice(&[first, 2.5, -2.5, 0.5, -0.5, 1.5, -126.5]);
    x
}

#[test]
fn q8_0_ties_round_away_from_zero() {
    let (q, _) = roundtrip(DType::Q8_0, &tie_block(127.0, 32));
    let b = BlockQ8_0::read(&q).unwrap();
    assert_eq!(b.d.to_bits(), 0x3c00, "d = 1.0");
    assert_eq!(&b.qs[..7], &[127, 3, -3, 1, -1, 2, -127]);
    assert!(b.qs[7..].iter().all(|&v| v == 0));
}

#[test]
fn q8_1_ties_round_away_from_zero_and_sum() {
    let (q, _) = roundtrip(DType::Q8_1, &tie_block(-127.0, 32));
    let b = BlockQ8_1::read(&q).unwrap();
    assert_eq!(b.d.to_bits(), 0x3c00, "d = amax/127 = 1.0");
    assert_eq!(&b.qs[..7], &[-127, 3, -3, 1, -1, 2, -127]);
    // s = f16(d · Σq) = −127 + 3 − 3 + 1 − 1 + 2 − 127 = −252.
    assert_eq!(b.s.to_f32(), -252.0);
}

#[test]
fn q8_k_ties_round_to_even_with_signed_scale() {
    // max = +127 → iscale = −1, d = −1: q = nearest-even(−x).
    let (q, _) = roundtrip(DType::Q8_K, &tie_block(127.0, 256));
    let b = BlockQ8K::read(&q).unwrap();
    assert_eq!(b.d, -1.0);
    assert_eq!(&b.qs[..7], &[-127, -2, 2, 0, 0, -2, 126]);
    assert_eq!(b.bsums[0], -127 - 2 + 2 - 2 + 126);
    assert!(b.bsums[1..].iter().all(|&s| s == 0));

    // max = −127 → iscale = +1, d = +1.
    let (q, y) = roundtrip(DType::Q8_K, &tie_block(-127.0, 256));
    let b = BlockQ8K::read(&q).unwrap();
    assert_eq!(b.d, 1.0);
    assert_eq!(&b.qs[..7], &[-127, 2, -2, 0, 0, 2, -126]);
    assert_eq!(b.bsums[0], -127 + 2 - 2 + 2 - 126);
    assert_eq!(&y[..7], &[-127.0, 2.0, -2.0, 0.0, 0.0, 2.0, -126.0]);
}

#[test]
fn q8_k_clamps_to_127_and_zero_block() {
    // A zero block gives d = 0, zero codes and zero sums.
    let (q, y) = roundtrip(DType::Q8_K, &[0.0; 256]);
    assert!(q.iter().all(|&b| b == 0));
    assert!(y.iter().all(|&v| v == 0.0));
    // A negative max maps to +127… never to 128.
    let mut x = vec![1.0f32; 256];
    x[9] = -3.0;
    let (q, _) = roundtrip(DType::Q8_K, &x);
    let b = BlockQ8K::read(&q).unwrap();
    assert_eq!(b.qs[9], -127);
    assert!(b.d > 0.0);
    assert!(b.qs.iter().all(|&v| v >= -127));
}

// ---------------------------------------------------------------------------
// Validation: typed errors, never a panic.

#[test]
fn lengths_are_validated() {
    let mut out = [0.0f32; 40];
    assert_eq!(
        dequantize_row(DType::Q4_0, &[0; 18], &mut out),
        Err(Error::NotBlockAligned {
            dtype: DType::Q4_0,
            len: 40
        })
    );
    assert_eq!(
        dequantize_row(DType::Q4_0, &[0; 17], &mut out[..32]),
        Err(Error::LengthMismatch {
            what: "dequantize_row: src bytes",
            expected: 18,
            actual: 17
        })
    );
    assert!(matches!(
        dequantize_row(DType::F16, &[0; 3], &mut out[..1]),
        Err(Error::LengthMismatch { expected: 2, .. })
    ));
    let x = [0.0f32; 300];
    let mut q = [0u8; 400];
    assert!(matches!(
        quantize_row(DType::Q4_K, &x, &mut q),
        Err(Error::NotBlockAligned { len: 300, .. })
    ));
    assert!(matches!(
        quantize_row(DType::Q4_K, &x[..256], &mut q),
        Err(Error::LengthMismatch {
            expected: 144,
            actual: 400,
            ..
        })
    ));
    assert!(matches!(
        quantize_row(DType::BF16, &x[..3], &mut q[..5]),
        Err(Error::LengthMismatch { .. })
    ));
    // Empty rows are fine.
    dequantize_row(DType::Q6_K, &[], &mut []).unwrap();
    quantize_row(DType::TQ2_0, &[], &mut []).unwrap();
    assert_eq!(vec_dot(DType::Q4_0, &[], &[], 0), Ok(0.0));
}

#[test]
fn vec_dot_validates() {
    for dtype in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q8_1,
        DType::Q8_K,
    ] {
        assert_eq!(
            vec_dot(dtype, &[], &[], 0),
            Err(Error::UnsupportedDType {
                what: "vec_dot weights",
                dtype
            })
        );
    }
    let w = [0u8; 20];
    let xq = [0u8; 36];
    assert!(matches!(
        vec_dot(DType::Q4_1, &w, &xq, 33),
        Err(Error::NotBlockAligned { .. })
    ));
    assert_eq!(vec_dot(DType::Q4_1, &w, &xq, 32), Ok(0.0));
    // A Q8_0 activation row (34 bytes) where Q4_1 needs Q8_1 (36 bytes).
    assert!(matches!(
        vec_dot(DType::Q4_1, &w, &xq[..34], 32),
        Err(Error::LengthMismatch {
            expected: 36,
            actual: 34,
            ..
        })
    ));
    assert!(matches!(
        vec_dot(DType::Q4_1, &w[..18], &xq, 32),
        Err(Error::LengthMismatch {
            expected: 20,
            actual: 18,
            ..
        })
    ));
}

/// splitmix64 bytes for the robustness tests.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

#[test]
fn arbitrary_bytes_never_panic() {
    let rounds = if cfg!(miri) { 2 } else { 50 };
    for seed in 0..rounds {
        for dtype in DType::ALL {
            let n = dtype.block_len() * 2;
            let bytes = noise(seed, dtype.row_bytes(n).unwrap() + 1);
            let mut y = vec![0.0f32; n];
            // Also from an odd offset.
            dequantize_row(dtype, &bytes[1..], &mut y).unwrap();
            if let Some(vdt) = dtype.vec_dot_type() {
                let xq = noise(seed + 99, vdt.row_bytes(n).unwrap());
                let a = vec_dot(dtype, &bytes[1..], &xq, n).unwrap();
                let b = vec_dot(dtype, &bytes[..bytes.len() - 1], &xq, n).unwrap();
                let _ = (a, b);
            }
        }
    }
}

#[test]
fn non_finite_inputs_never_panic() {
    let all = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        -0.0,
        65520.0,
        1e30,
    ];
    let specials = if cfg!(miri) { &all[..2] } else { &all[..] };
    for dtype in DType::ALL {
        let n = dtype.block_len().max(32) * if cfg!(miri) { 1 } else { 2 };
        for (k, &s) in specials.iter().enumerate() {
            let mut x: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
            x[k % n] = s;
            let all_same = vec![s; n];
            for row in [&x, &all_same] {
                let mut q = vec![0u8; dtype.row_bytes(n).unwrap()];
                quantize_row(dtype, row, &mut q).unwrap();
                let mut y = vec![0.0f32; n];
                dequantize_row(dtype, &q, &mut y).unwrap();
            }
        }
    }
}

#[test]
fn unaligned_rows_give_identical_results() {
    let n = short_len();
    let x = generate_data(0.25, n);
    let a = generate_data(3.0, n);
    for dtype in DType::ALL {
        let (q, y) = roundtrip(dtype, &x);
        let mut shifted = vec![0u8; q.len() + 3];
        shifted[3..].copy_from_slice(&q);
        let mut y2 = vec![0.0f32; n];
        dequantize_row(dtype, &shifted[3..], &mut y2).unwrap();
        assert_eq!(bits(&y), bits(&y2), "{dtype}");
        // Quantizing into an odd-offset buffer gives the same bytes.
        quantize_row(dtype, &x, &mut shifted[3..]).unwrap();
        assert_eq!(&shifted[3..], &q[..], "{dtype}");
        if let Some(vdt) = dtype.vec_dot_type() {
            let (qa, _) = roundtrip(vdt, &a);
            let mut qa_shifted = vec![0u8; qa.len() + 1];
            qa_shifted[1..].copy_from_slice(&qa);
            let d1 = vec_dot(dtype, &q, &qa, n).unwrap();
            let d2 = vec_dot(dtype, &shifted[3..], &qa_shifted[1..], n).unwrap();
            assert_eq!(d1.to_bits(), d2.to_bits(), "{dtype}");
        }
    }
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn float_formats_round_to_nearest_even() {
    // F32 is a byte copy, bit patterns included.
    let x = [1.5f32, -0.0, f32::from_bits(0x7fc0_0001), f32::MIN_POSITIVE];
    let (q, y) = roundtrip(DType::F32, &x);
    assert_eq!(&q[..4], &1.5f32.to_le_bytes());
    assert_eq!(bits(&y), bits(&x));
    // F16: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 → even (1.0);
    // 1 + 3·2^-11 ties to 1 + 2^-9 (even mantissa); 65520 overflows to inf.
    let x = [1.0 + 2f32.powi(-11), 1.0 + 3.0 * 2f32.powi(-11), 65520.0];
    let (q, _) = roundtrip(DType::F16, &x);
    assert_eq!(q, [0x00, 0x3c, 0x02, 0x3c, 0x00, 0x7c]);
    // BF16: 1 + 2^-8 ties to 1.0; 1 + 3·2^-8 ties to 1 + 2^-6.
    let x = [1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8)];
    let (q, _) = roundtrip(DType::BF16, &x);
    assert_eq!(q, [0x80, 0x3f, 0x82, 0x3f]);
}

#[test]
fn block_len_consistency() {
    assert_eq!(BlockQ8K::LEN, DType::Q8_K.block_len());
}
