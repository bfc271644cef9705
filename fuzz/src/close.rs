//! Closeness of a result that is not bit-exact to its reference: the
//! normalised mean squared error `Σ(a − b)² / Σb²`, as fused-verify
//! measures it, skipped where the reference is not finite.

/// Panics naming `what` when `a` is further than `budget` (NMSE) from
/// `want`.
pub fn assert_nmse(what: &str, a: &[f32], want: &[f32], budget: f64) {
    assert_eq!(a.len(), want.len(), "{what}: lengths");
    if want.iter().any(|v| !v.is_finite()) {
        return;
    }
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(want) {
        num += (f64::from(*x) - f64::from(*y)).powi(2);
        den += f64::from(*y).powi(2);
    }
    assert!(
        num <= budget * den.max(1e-6),
        "{what}: NMSE {num:e} / {den:e} over budget {budget:e}"
    );
}
