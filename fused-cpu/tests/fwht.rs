//! FWHT on the CPU backend: equal to the core reference bit for bit, its own
//! inverse, and equal to a dense Hadamard product.

use fused_core::fwht::{FwhtDesc, fwht as reference};
use fused_cpu::CpuBackend;

mod common;
use common::vals;

#[test]
fn matches_reference_and_inverts_for_every_size() {
    for threads in [1, 2, 3] {
        let be = CpuBackend::new(threads).unwrap();
        for log_n in 1..=15 {
            let n = 1usize << log_n;
            let rows = if n >= 4096 { 2 } else { 5 };
            let x = vals(n * rows, log_n);
            let signs: Vec<f32> = vals(2 * n, 7)
                .iter()
                .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
                .collect();
            let d = FwhtDesc::new(n).unwrap();
            let ds = d.with_signs(2 * n).unwrap();
            let (mut y, mut want) = (vec![0.0; n * rows], vec![0.0; n * rows]);
            be.fwht(&ds, &x, Some(&signs), &mut y).unwrap();
            reference(&ds, &x, Some(&signs), &mut want).unwrap();
            assert_eq!(
                y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "N={n} t{threads}"
            );
            // Unsigned transform back, then undo the signs: the input again,
            // within one ulp of the row's scale per butterfly stage.
            let mut z = vec![0.0; n * rows];
            be.fwht(&d, &y, None, &mut z).unwrap();
            let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            for (i, (zi, xi)) in z.iter().zip(&x).enumerate() {
                let s = signs[(i / n % 2) * n + i % n];
                let err = (zi * s - xi).abs();
                assert!(
                    err <= amax * f32::EPSILON * log_n as f32 * 2.0,
                    "N={n} i={i}: {err}"
                );
            }
        }
    }
}

#[test]
fn equals_dense_hadamard() {
    let be = CpuBackend::new(2).unwrap();
    for n in [2usize, 8, 64, 256] {
        let x = vals(3 * n, 11);
        let d = FwhtDesc::new(n).unwrap();
        let mut y = vec![0.0; 3 * n];
        be.fwht(&d, &x, None, &mut y).unwrap();
        for row in 0..3 {
            for r in 0..n {
                let dense: f64 = (0..n)
                    .map(|c| {
                        let h = if (r & c).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        h * x[row * n + c] as f64
                    })
                    .sum::<f64>()
                    / (n as f64).sqrt();
                assert!((dense - y[row * n + r] as f64).abs() < 1e-5, "N={n}");
            }
        }
    }
}

#[test]
fn bad_lengths_are_errors() {
    let be = CpuBackend::new(1).unwrap();
    let d = FwhtDesc::new(8).unwrap();
    assert!(be.fwht(&d, &[0.0; 12], None, &mut [0.0; 12]).is_err());
    assert!(
        be.fwht(&d, &[0.0; 8], Some(&[1.0; 8]), &mut [0.0; 8])
            .is_err()
    );
    let ds = d.with_signs(16).unwrap();
    assert!(
        be.fwht(&ds, &[0.0; 8], Some(&[1.0; 8]), &mut [0.0; 8])
            .is_err()
    );
    assert!(be.fwht(&ds, &[0.0; 8], None, &mut [0.0; 8]).is_err());
}
