//! Error metrics: NMSE against the f64 reference, maximum absolute error,
//! maximum distance in ulps against the same-quantization reference, bit
//! identity, and finiteness.

/// Normalised mean squared error `Σ(got − want)² / Σ want²` (test-backend-ops'
/// `nmse`). `0` when both are exactly zero; `+∞` when `want` is all zero and
/// `got` is not; NaN when any value is not finite.
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(g, w)| (f64::from(*g) - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if num == 0.0 { 0.0 } else { num / den }
}

/// The largest `|got − want|` (NaN when any value is not finite; 0 for empty input).
pub fn max_abs(got: &[f32], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (f64::from(*g) - w).abs())
        .fold(0.0, |m: f64, e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        })
}

/// `v`'s position on the number line counted in ulps: adjacent floats differ
/// by one, `-0.0` and `+0.0` are both 0.
fn ordered(v: f32) -> i64 {
    let b = v.to_bits() as i32;
    if b < 0 {
        -i64::from(b & 0x7fff_ffff)
    } else {
        i64::from(b)
    }
}

/// The distance between `a` and `b` in ulps: the number of representable
/// f32 values between them, 0 for two NaNs, `u64::MAX` when only one is NaN.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => 0,
        (true, false) | (false, true) => u64::MAX,
        _ => ordered(a).abs_diff(ordered(b)),
    }
}

/// The largest ulp distance between corresponding elements of `a` and `b`,
/// counting only elements with `|b| ≥ floor` (the ulp of a value produced
/// by cancellation says nothing about the computation; NMSE covers those).
pub fn max_ulp(a: &[f32], b: &[f32], floor: f32) -> u64 {
    a.iter()
        .zip(b)
        .filter(|(_, w)| w.is_nan() || w.abs() >= floor)
        .map(|(g, w)| ulp_distance(*g, *w))
        .max()
        .unwrap_or(0)
}

/// The index of the first element whose bits differ, `None` when `a` and
/// `b` are bit for bit the same (a length difference counts at the shorter length).
pub fn first_bit_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    if let Some(i) = a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
    {
        return Some(i);
    }
    (a.len() != b.len()).then_some(a.len().min(b.len()))
}

/// [`first_bit_difference`] where any two NaNs count as equal: Rust leaves
/// the sign and payload of a NaN produced by arithmetic unspecified (RFC
/// 3514), so only "is NaN" can be required of them.
pub fn first_difference_nan_equal(a: &[f32], b: &[f32]) -> Option<usize> {
    if let Some(i) = a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits() && !(x.is_nan() && y.is_nan()))
    {
        return Some(i);
    }
    (a.len() != b.len()).then_some(a.len().min(b.len()))
}

/// Whether every value is finite.
pub fn all_finite<T: Copy + Into<f64>>(v: &[T]) -> bool {
    v.iter().all(|x| (*x).into().is_finite())
}

/// The largest finite `|x|` of `v` (0 when there is none): NaN and
/// infinities are left out, so a non-finite output does not hide the
/// finite ones' scale.
pub fn max_magnitude(v: &[f32]) -> f32 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0f32, |m, x| m.max(x.abs()))
}

/// Whether the non-finite pattern of `a` (which elements are NaN, +Inf,
/// −Inf) equals that of `b`.
pub fn same_nonfinite_pattern(a: &[f32], b: &[f32]) -> bool {
    let class = |v: f32| {
        if v.is_nan() {
            1u8
        } else if v == f32::INFINITY {
            2
        } else if v == f32::NEG_INFINITY {
            3
        } else {
            0
        }
    };
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| class(*x) == class(*y))
}

/// The median of `t` (the upper one of an even count; zero when empty).
pub fn median(mut t: Vec<std::time::Duration>) -> std::time::Duration {
    t.sort_unstable();
    t.get(t.len() / 2).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmse_known_values() {
        assert_eq!(nmse(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        // Σ(err²) = 0.25 + 0.25, Σ want² = 1 + 4.
        assert!((nmse(&[1.5, 1.5], &[1.0, 2.0]) - 0.1).abs() < 1e-15);
        assert!(nmse(&[1.0], &[0.0]).is_infinite());
        assert!(nmse(&[f32::NAN], &[1.0]).is_nan());
        assert_eq!(nmse(&[0.0], &[0.0]), 0.0);
    }

    #[test]
    fn max_abs_known_values() {
        assert_eq!(max_abs(&[1.0, -2.0, 3.0], &[1.5, -2.0, 2.0]), 1.0);
        assert_eq!(max_abs(&[], &[]), 0.0);
        assert!(max_abs(&[f32::NAN, 0.0], &[0.0, 5.0]).is_nan());
    }

    #[test]
    fn ulp_known_values() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(f32::from_bits(1), -f32::from_bits(1)), 2);
        assert_eq!(ulp_distance(f32::NAN, f32::NAN), 0);
        assert_eq!(ulp_distance(f32::NAN, 1.0), u64::MAX);
        assert_eq!(ulp_distance(f32::MAX, f32::INFINITY), 1);
        let a = [1.0f32, 1e-9];
        let b = [f32::from_bits(1.0f32.to_bits() + 2), 2e-9];
        assert_eq!(max_ulp(&a, &b, 0.0), ulp_distance(1e-9, 2e-9));
        assert_eq!(
            max_ulp(&a, &b, 1e-3),
            2,
            "the tiny element is below the floor"
        );
    }

    #[test]
    fn identity_and_finiteness() {
        assert_eq!(first_bit_difference(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(first_bit_difference(&[1.0, 0.0], &[1.0, -0.0]), Some(1));
        assert_eq!(first_bit_difference(&[1.0], &[1.0, 2.0]), Some(1));
        assert_eq!(first_bit_difference(&[f32::NAN], &[-f32::NAN]), Some(0));
        assert_eq!(
            first_difference_nan_equal(&[f32::NAN, 1.0], &[-f32::NAN, 1.0]),
            None
        );
        assert_eq!(
            first_difference_nan_equal(&[f32::NAN, 0.0], &[f32::NAN, -0.0]),
            Some(1)
        );
        assert!(all_finite(&[1.0f32, -3.0]));
        assert!(!all_finite(&[1.0f64, f64::INFINITY]));
        assert!(same_nonfinite_pattern(
            &[f32::NAN, 1.0, f32::INFINITY],
            &[-f32::NAN, 2.0, f32::INFINITY]
        ));
        assert!(!same_nonfinite_pattern(
            &[f32::INFINITY],
            &[f32::NEG_INFINITY]
        ));
        assert_eq!(max_magnitude(&[-4.0, 2.0]), 4.0);
        assert_eq!(max_magnitude(&[f32::NAN, -3.0, f32::INFINITY]), 3.0);
    }
}
