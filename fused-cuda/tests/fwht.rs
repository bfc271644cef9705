//! The FWHT kernels against the core's FWHT (bit for bit) for every N, on the
//! first CUDA device (skipped without one).

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip};
use fused_core::fwht::{FwhtDesc, fwht};

#[test]
fn fwht_equals_the_core_for_every_size_signed_and_unsigned() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(6);
    for log2 in 1..=15 {
        let n = 1usize << log2;
        // Enough rows to leave a partly filled warp or block at the end.
        let rows = (1 << 17) / n + 3;
        let x = rng.vec_scaled(rows * n, 4.0);
        let signs = rng.signs(2 * n);
        let plain = FwhtDesc::new(n).unwrap();
        let signed = plain.with_signs(2 * n).unwrap();
        for (desc, s) in [(plain, None), (signed, Some(&signs[..]))] {
            let mut want = vec![0.0f32; x.len()];
            fwht(&desc, &x, s, &mut want).unwrap();
            let mut got = vec![f32::NAN; x.len()];
            common::fwht_host(&be, &desc, &x, s, &mut got).unwrap();
            assert_bits_eq(&got, &want, &format!("N={n} signed={}", s.is_some()));
        }
        // Twice with the default scale is the identity (within rounding).
        let mut once = vec![0.0f32; x.len()];
        common::fwht_host(&be, &plain, &x, None, &mut once).unwrap();
        let mut twice = vec![0.0f32; x.len()];
        common::fwht_host(&be, &plain, &once, None, &mut twice).unwrap();
        let tol = 1e-6 * (log2 as f32 + 1.0) * 4.0;
        for (i, (a, b)) in twice.iter().zip(&x).enumerate() {
            assert!((a - b).abs() <= tol, "N={n}: twice[{i}] = {a}, x = {b}");
        }
    }
}

#[test]
fn fused_signs_equal_sign_multiply_then_fwht() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(7);
    for n in [16usize, 1024, 4096, 32768] {
        let rows = 6;
        let x = be.upload(&rng.vec_scaled(rows * n, 1.0)).unwrap();
        let signs = be.upload(&rng.signs(3 * n)).unwrap();
        let signed = FwhtDesc::new(n).unwrap().with_signs(3 * n).unwrap();
        let mut fused = be.alloc(rows * n).unwrap();
        common::reset_launches(&be);
        be.fwht(&signed, &x, Some(&signs), &mut fused).unwrap();
        assert_eq!(common::launches(&be), 1);
        let mut mid = be.alloc(rows * n).unwrap();
        let mut unfused = be.alloc(rows * n).unwrap();
        be.elementwise(fused_cuda::Elementwise::MulCyclic(&x, &signs), &mut mid)
            .unwrap();
        be.fwht(&FwhtDesc::new(n).unwrap(), &mid, None, &mut unfused)
            .unwrap();
        assert_eq!(common::launches(&be), 3);
        let mut f = vec![0.0; rows * n];
        let mut u = vec![0.0; rows * n];
        be.download(&fused, &mut f).unwrap();
        be.download(&unfused, &mut u).unwrap();
        assert_bits_eq(&f, &u, &format!("N={n}"));
    }
}
