//! The Vulkan FWHT against the core's reference transform, bit for bit, for
//! every N = 2^k (2..=32768), signed and unsigned, in the variant chosen
//! for the device and, with the `lab` feature, in every variant the device
//! has and in tuned launch shapes.

mod common;

use common::{assert_no_validation_messages, backend_or_skip, data, first_bit_difference};
use fused_core::fwht::{FWHT_MAX_N, FwhtDesc, fwht};
#[cfg(feature = "lab")]
use fused_vulkan::FwhtVariant;
use fused_vulkan::{Tuning, VulkanBackend, VulkanError};
use std::io::Write;

/// The tunings to test: the default and, with `lab`, each variant the
/// device has forced.
fn tunings(b: &VulkanBackend) -> Vec<Tuning> {
    #[cfg(feature = "lab")]
    {
        let shuffle = ash::vk::SubgroupFeatureFlags::SHUFFLE;
        let mut v = vec![
            Tuning::default(),
            Tuning::default().with_fwht_variant(Some(FwhtVariant::Shared)),
        ];
        if b.context().info().subgroup_ops().contains(shuffle) {
            v.push(Tuning::default().with_fwht_variant(Some(FwhtVariant::Shuffle)));
        }
        v
    }
    #[cfg(not(feature = "lab"))]
    {
        let _ = b;
        vec![Tuning::default()]
    }
}

#[test]
fn every_size_matches_the_core_bit_for_bit() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    let _ = writeln!(std::io::stderr(), "device: {:?}", b.context().info());
    for tuning in tunings(&b) {
        b.set_tuning(tuning).unwrap();
        let mut n = 2;
        while n <= FWHT_MAX_N {
            // Enough rows for several workgroups and a partial last one.
            let rows = (20_000 / n).max(3) | 1;
            let x = data(rows * n, n as u64);
            let signs: Vec<f32> = data(2 * n, 7 + n as u64)
                .iter()
                .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
                .collect();
            let unsigned = FwhtDesc::new(n).unwrap();
            let signed = unsigned.with_signs(signs.len()).unwrap();
            let scaled = unsigned.with_scale(0.3);
            for (desc, s) in [(unsigned, None), (signed, Some(&signs[..])), (scaled, None)] {
                let mut want = vec![0.0; x.len()];
                fwht(&desc, &x, s, &mut want).unwrap();
                let mut got = vec![f32::NAN; x.len()];
                b.fwht(&desc, &x, s, &mut got).unwrap();
                assert_eq!(
                    first_bit_difference(&got, &want),
                    None,
                    "{tuning:?} N={n} signed={}",
                    s.is_some(),
                );
            }
            n *= 2;
        }
    }
    assert_no_validation_messages(&b);
}

/// Tuned plans (values per thread, workgroup size, several slabs of rows
/// per workgroup with a partial last one) give the reference's bits too.
#[cfg(feature = "lab")]
#[test]
fn tuned_plans_match_the_core_bit_for_bit() {
    let Some(mut b) = backend_or_skip() else {
        return;
    };
    for tuning in tunings(&b) {
        for n in [16, 1024, 4096] {
            let rows = (30_000 / n).max(5) | 1;
            let x = data(rows * n, 40 + n as u64);
            let signs: Vec<f32> = data(3 * n, 41)
                .iter()
                .map(|v| if *v < 0.0 { -1.0 } else { 1.0 })
                .collect();
            let desc = FwhtDesc::new(n).unwrap().with_signs(signs.len()).unwrap();
            let mut want = vec![0.0; x.len()];
            fwht(&desc, &x, Some(&signs), &mut want).unwrap();
            for (per_thread, workgroup, slabs) in
                [(32, 64, 3), (16, 128, 4), (8, 64, 2), (2, 32, 5)]
            {
                b.set_tuning(tuning.with_fwht_shape(per_thread, workgroup, slabs))
                    .unwrap();
                let plan = b.fwht_plan(n).unwrap();
                let mut got = vec![f32::NAN; x.len()];
                b.fwht(&desc, &x, Some(&signs), &mut got).unwrap();
                assert_eq!(first_bit_difference(&got, &want), None, "N={n} {plan:?}");
            }
        }
    }
    let t = Tuning::default();
    assert!(b.set_tuning(t.with_fwht_shape(3, 64, 1)).is_err());
    assert!(b.set_tuning(t.with_fwht_shape(8, 64, 0)).is_err());
    assert_no_validation_messages(&b);
}

#[test]
fn fused_signs_equal_sign_multiply_then_transform() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    for n in [8, 1024, 32768] {
        let rows = 5;
        let x = data(rows * n, 3);
        let signs: Vec<f32> = data(3 * n, 4).iter().map(|v| v.signum()).collect();
        let signed = FwhtDesc::new(n).unwrap().with_signs(signs.len()).unwrap();
        let mut fused = vec![0.0; x.len()];
        b.fwht(&signed, &x, Some(&signs), &mut fused).unwrap();
        let mut multiplied = vec![0.0; x.len()];
        b.mul_signs(&signed, &x, &signs, &mut multiplied).unwrap();
        let mut unfused = vec![0.0; x.len()];
        b.fwht(&FwhtDesc::new(n).unwrap(), &multiplied, None, &mut unfused)
            .unwrap();
        assert_eq!(first_bit_difference(&fused, &unfused), None, "N={n}");
    }
    assert_no_validation_messages(&b);
}

#[test]
fn bad_inputs_are_errors() {
    let Some(b) = backend_or_skip() else {
        return;
    };
    let d = FwhtDesc::new(8).unwrap();
    let mut out = vec![0.0; 12];
    assert!(matches!(
        b.fwht(&d, &[0.0; 12], None, &mut out),
        Err(VulkanError::Core(_))
    ));
    let mut out = vec![0.0; 8];
    assert!(matches!(
        b.fwht(&d, &[0.0; 8], Some(&[1.0; 8]), &mut out),
        Err(VulkanError::Core(_))
    ));
    let signed = d.with_signs(16).unwrap();
    assert!(matches!(
        b.fwht(&signed, &[0.0; 8], Some(&[1.0; 8]), &mut out),
        Err(VulkanError::Core(_))
    ));
    b.fwht(&d, &[], None, &mut []).unwrap();
    assert_no_validation_messages(&b);
}
