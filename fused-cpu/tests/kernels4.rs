//! Four-row and tile kernels: equal, bit for bit, to their one-row kernel
//! on each row.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_cpu::Isa;
use fused_cpu::acts::column;
use fused_cpu::kernels::{row_dot, row_dot4, row_tile};

mod common;
use common::{HOT_FORMATS, prepare_columns, quantized, without_side};

/// The formats with AVX-512 four-row and tile kernels, with their
/// activations.
const FORMATS: [(DType, ActQuant); 7] = [
    (DType::Q4_0, ActQuant::Q8_0),
    (DType::Q8_0, ActQuant::Q8_0),
    (DType::F16, ActQuant::F32),
    (DType::Q4_K, ActQuant::Q8_K),
    (DType::Q6_K, ActQuant::Q8_K),
    (DType::Q4_1, ActQuant::Q8_1),
    (DType::Q5_1, ActQuant::Q8_1),
];

/// On an AVX-512 machine, every hot format's `kind` kernel was checked.
fn all_checked(checked: &[DType], kind: &str) {
    if Isa::detect() >= Isa::Avx512 {
        for dtype in HOT_FORMATS.into_iter().chain([DType::Q4_1, DType::Q5_1]) {
            assert!(
                checked.contains(&dtype),
                "this machine has AVX-512 but the {dtype} {kind} kernel was not checked"
            );
        }
    }
}

#[test]
fn four_rows_equal_one_row_each() {
    let mut checked = Vec::new();
    for isa in Isa::available() {
        for (dtype, mode) in FORMATS {
            let Some(four) = row_dot4(isa, dtype, mode) else {
                continue;
            };
            let one = row_dot(isa, dtype, mode);
            // 576 and 1536: SmolLM2-135M's rows (18 and 48 legacy blocks).
            let ks = [
                32usize, 224, 256, 288, 416, 576, 1280, 1536, 4096, 4100, 4352,
            ];
            for k in ks.into_iter().filter(|k| k % dtype.block_len() == 0) {
                let rb = dtype.row_bytes(k).unwrap();
                let w = quantized(dtype, 4, k, |r| {
                    (0..k)
                        .map(|i| (((i * 7 + r * 13) % 29) as f32 - 14.0) * 0.1)
                        .collect()
                });
                let x: Vec<f32> = (0..k).map(|i| ((i * 5 % 17) as f32 - 8.0) * 0.3).collect();
                let q = prepare_columns(mode, &x, k, 1);
                let a = column(mode, &x, &q, k, 0).unwrap();
                let rows = [&w[..rb], &w[rb..2 * rb], &w[2 * rb..3 * rb], &w[3 * rb..]];
                // With side data and without (the fallback path).
                for a in [a, without_side(a)] {
                    let got = four(dtype, rows, &a, k).unwrap();
                    for r in 0..4 {
                        let want = one(dtype, rows[r], &a, k).unwrap();
                        assert_eq!(
                            got[r].to_bits(),
                            want.to_bits(),
                            "{isa} {dtype} k={k} row {r}"
                        );
                    }
                }
                // Bad input is an error, not a panic.
                let short = [&w[..rb - 1], rows[1], rows[2], rows[3]];
                assert!(four(dtype, short, &a, k).is_err());
                let short_last = [rows[0], rows[1], rows[2], &w[..rb - 1]];
                assert!(four(dtype, short_last, &a, k).is_err());
                checked.push(dtype);
            }
        }
    }
    all_checked(&checked, "four-row");
}

#[test]
fn a_tile_equals_its_rows_one_at_a_time() {
    let mut checked = Vec::new();
    for isa in Isa::available() {
        for (dtype, mode) in FORMATS {
            let Some(tile) = row_tile(isa, dtype, mode) else {
                continue;
            };
            let one = row_dot(isa, dtype, mode);
            for k in [256usize, 576, 1536]
                .into_iter()
                .filter(|k| k % dtype.block_len() == 0)
            {
                let rb = dtype.row_bytes(k).unwrap();
                let w = quantized(dtype, 11, k, |r| {
                    (0..k)
                        .map(|i| (((i * 3 + r * 17) % 31) as f32 - 15.0) * 0.07)
                        .collect()
                });
                let x: Vec<f32> = (0..k).map(|i| ((i * 5 % 19) as f32 - 9.0) * 0.2).collect();
                let q = prepare_columns(mode, &x, k, 1);
                let a = column(mode, &x, &q, k, 0).unwrap();
                for a in [a, without_side(a)] {
                    // Every tile length up to 11 rows: four-row steps and a rest.
                    for n in 0..=11 {
                        let mut got = vec![f32::NAN; n];
                        tile(dtype, &w[..n * rb], &a, k, &mut got).unwrap();
                        for (r, g) in got.iter().enumerate() {
                            let want = one(dtype, &w[r * rb..(r + 1) * rb], &a, k).unwrap();
                            assert_eq!(
                                g.to_bits(),
                                want.to_bits(),
                                "{isa} {dtype} k={k} n={n} row {r}"
                            );
                        }
                    }
                }
                // Bad input is an error, not a panic: bytes that do not split
                // into the rows asked for, rows of another length.
                let mut out = [0.0f32; 3];
                assert!(tile(dtype, &w[..3 * rb - 1], &a, k, &mut out).is_err());
                assert!(tile(dtype, &w[..3 * rb], &a, k + dtype.block_len(), &mut out).is_err());
                assert!(tile(dtype, &w[..3], &a, k, &mut out).is_err());
                checked.push(dtype);
            }
        }
    }
    all_checked(&checked, "tile");
}
