//! Comparisons that say where they fail.

/// The bits of `v` with every NaN made one NaN (Rust leaves a NaN's sign
/// and payload unspecified).
pub fn canonical_bits(v: f32) -> u32 {
    if v.is_nan() {
        f32::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

/// The first index where `a` and `b` differ in their bits (NaNs equal), or
/// where one ends.
pub fn first_bit_difference(a: &[f32], b: &[f32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| canonical_bits(*x) != canonical_bits(*y))
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// Panics, naming the first difference, unless `got` equals `want` bit for
/// bit.
#[track_caller]
pub fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    if let Some(i) = first_bit_difference(got, want) {
        panic!(
            "{what}: differs at {i} of {} (got {:?}, want {:?})",
            got.len().max(want.len()),
            got.get(i),
            want.get(i)
        );
    }
}

/// Normalised mean squared error of `got` against `want`:
/// `Σ (g − w)² / Σ w²` (0 when both are all zero).
pub fn nmse(got: &[f32], want: &[f32]) -> f64 {
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (f64::from(*g), f64::from(*w));
        err += (g - w) * (g - w);
        norm += w * w;
    }
    if norm == 0.0 { err } else { err / norm }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_found() {
        assert_eq!(first_bit_difference(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(first_bit_difference(&[1.0, 2.0], &[1.0, 3.0]), Some(1));
        assert_eq!(first_bit_difference(&[1.0], &[1.0, 3.0]), Some(1));
        assert_eq!(first_bit_difference(&[0.0], &[-0.0]), Some(0));
        assert_eq!(first_bit_difference(&[f32::NAN], &[-f32::NAN]), None);
        assert!(nmse(&[1.0, 2.0], &[1.0, 2.0]) == 0.0);
        assert!((nmse(&[2.0], &[1.0]) - 1.0).abs() < 1e-12);
    }
}
