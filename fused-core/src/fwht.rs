//! Fast Walsh–Hadamard transform descriptors and the reference transform.
//!
//! A transform of block size `N = 2^k` (2 ≤ N ≤ 32768) maps every row of `N`
//! consecutive values to `H_N · (s ⊙ x) · scale`, where `H_N` is the Sylvester
//! Hadamard matrix in natural order (`H[r][c] = (−1)^popcount(r & c)`), `s` is
//! an optional sign (or any F32 multiplier) vector and `scale` defaults to
//! `1/√N`, which makes the transform orthonormal and self-inverse.
//!
//! The reference arithmetic, which defines the bit-exact result: for each
//! element, `v = x · s` (when signs are given), then `v = v · scale`, both
//! rounded to f32 at load; then butterflies `(a, b) → (a + b, a − b)` with
//! half-width `h = 1, 2, 4, …, N/2` in that order, pairing element `j` with
//! `j + h` inside every aligned group of `2h`.

use crate::error::Error;

/// Smallest supported block size.
pub const FWHT_MIN_N: usize = 2;
/// Largest supported block size.
pub const FWHT_MAX_N: usize = 32768;

/// Checks that `n` is a supported block size.
pub fn check_fwht_size(n: usize) -> Result<(), Error> {
    if n.is_power_of_two() && (FWHT_MIN_N..=FWHT_MAX_N).contains(&n) {
        Ok(())
    } else {
        Err(Error::BadFwhtSize { n })
    }
}

/// The default scale `1/√N` for `N = 2^k`, in f32: `2^(−k/2)` for even `k`,
/// `(1/√2 in f32 arithmetic: 1.0 / SQRT_2) · 2^(−(k−1)/2)` for odd `k`. This
/// equals `1.0 / sqrtf(N)` with a correctly rounded `sqrtf` (scaling by a
/// power of two is exact), without calling one, so every backend can
/// reproduce it bit for bit. `n` that is not a power of two gives the scale of
/// the next lower power of two; descriptors only hold valid sizes.
pub fn default_scale(n: usize) -> f32 {
    let k = n.max(1).ilog2() as i32;
    let base = if k % 2 == 0 {
        1.0f32
    } else {
        1.0 / core::f32::consts::SQRT_2
    };
    base * pow2_f32(-(k / 2))
}

/// `2^e` for small `|e|` (normal range).
fn pow2_f32(e: i32) -> f32 {
    f32::from_bits(((127 + e) as u32) << 23)
}

/// `1/√N` in f64 for `N = 2^k`, exact to f64 rounding.
fn default_scale_f64(n: usize) -> f64 {
    let k = n.max(1).ilog2() as i32;
    let base = if k % 2 == 0 {
        1.0f64
    } else {
        core::f64::consts::FRAC_1_SQRT_2
    };
    base * f64::from_bits(((1023 + (-(k / 2)) as i64) as u64) << 52)
}

/// Describes one (signed) Hadamard transform.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FwhtDesc {
    n: usize,
    scale: f32,
    sign_blocks: Option<usize>,
}

impl FwhtDesc {
    /// An unsigned transform of block size `n` with scale `1/√n`.
    pub fn new(n: usize) -> Result<FwhtDesc, Error> {
        check_fwht_size(n)?;
        Ok(FwhtDesc {
            n,
            scale: default_scale(n),
            sign_blocks: None,
        })
    }

    /// The same transform with another scale.
    pub fn with_scale(mut self, scale: f32) -> FwhtDesc {
        self.scale = scale;
        self
    }

    /// The same transform with a sign vector of `signs_len` values, applied at
    /// load: row `r` uses `signs[(r mod n_blk)·N + i]` with `n_blk =
    /// signs_len / N`. `signs_len` must be a positive multiple of `N`.
    pub fn with_signs(mut self, signs_len: usize) -> Result<FwhtDesc, Error> {
        if signs_len == 0 || !signs_len.is_multiple_of(self.n) {
            return Err(Error::BadSigns {
                len: signs_len,
                n: self.n,
            });
        }
        self.sign_blocks = Some(signs_len / self.n);
        Ok(self)
    }

    /// Block size `N`.
    pub const fn n(&self) -> usize {
        self.n
    }

    /// `log2 N`.
    pub const fn log2_n(&self) -> u32 {
        self.n.trailing_zeros()
    }

    /// The scale applied at load.
    pub const fn scale(&self) -> f32 {
        self.scale
    }

    /// `n_blk`, the number of N-blocks in the sign vector, if signed.
    pub const fn sign_blocks(&self) -> Option<usize> {
        self.sign_blocks
    }

    /// Length of the sign vector, if signed.
    pub fn signs_len(&self) -> Option<usize> {
        self.sign_blocks.map(|b| b * self.n)
    }

    /// Checks a call: `x` and `out` the same whole number of rows, `signs`
    /// present exactly when the descriptor is signed, with the right length.
    pub fn check(&self, x_len: usize, signs: Option<&[f32]>, out_len: usize) -> Result<(), Error> {
        if !x_len.is_multiple_of(self.n) {
            return Err(Error::LengthMismatch {
                what: "FWHT input (must be a whole number of blocks)",
                expected: x_len / self.n * self.n,
                actual: x_len,
            });
        }
        if out_len != x_len {
            return Err(Error::LengthMismatch {
                what: "FWHT output",
                expected: x_len,
                actual: out_len,
            });
        }
        match (self.signs_len(), signs) {
            (None, None) => Ok(()),
            (Some(len), Some(s)) if s.len() == len => Ok(()),
            (Some(len), Some(s)) => Err(Error::LengthMismatch {
                what: "FWHT sign vector",
                expected: len,
                actual: s.len(),
            }),
            (Some(len), None) => Err(Error::LengthMismatch {
                what: "FWHT sign vector (descriptor is signed)",
                expected: len,
                actual: 0,
            }),
            (None, Some(s)) => Err(Error::LengthMismatch {
                what: "FWHT sign vector (descriptor is unsigned)",
                expected: 0,
                actual: s.len(),
            }),
        }
    }

    /// The value loaded for element `i` of row `row`: `(x · sign) · scale`.
    ///
    /// # Panics
    /// If `signs` is shorter than the descriptor's sign length or `i >= N`
    /// (both checked by [`FwhtDesc::check`]).
    #[inline]
    pub fn load(&self, x: f32, signs: Option<&[f32]>, row: usize, i: usize) -> f32 {
        let v = match (signs, self.sign_blocks) {
            (Some(s), Some(nb)) => x * s[(row % nb) * self.n + i],
            _ => x,
        };
        v * self.scale
    }
}

/// The reference butterflies on one block, in place; a block whose length
/// is not a power of two is refused ([`Error::BadFwhtSize`]), untouched.
pub fn butterflies(v: &mut [f32]) -> Result<(), Error> {
    check_block(v.len())?;
    butterflies_in(v);
    Ok(())
}

/// [`butterflies`] in f64.
pub fn butterflies_f64(v: &mut [f64]) -> Result<(), Error> {
    check_block(v.len())?;
    butterflies_in(v);
    Ok(())
}

fn check_block(n: usize) -> Result<(), Error> {
    if n.is_power_of_two() {
        Ok(())
    } else {
        Err(Error::BadFwhtSize { n })
    }
}

/// `(a, b) → (a + b, a − b)` with half-width `h = 1, 2, …, len/2`, in order.
fn butterflies_in<T: Copy + core::ops::Add<Output = T> + core::ops::Sub<Output = T>>(v: &mut [T]) {
    let n = v.len();
    let mut h = 1;
    while h < n {
        for group in v.chunks_exact_mut(2 * h) {
            let (lo, hi) = group.split_at_mut(h);
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                let (x, y) = (*a, *b);
                *a = x + y;
                *b = x - y;
            }
        }
        h *= 2;
    }
}

/// The reference transform of every row of `x` into `out`.
pub fn fwht(
    desc: &FwhtDesc,
    x: &[f32],
    signs: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), Error> {
    desc.check(x.len(), signs, out.len())?;
    let n = desc.n();
    for (row, (xb, ob)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
        for (i, (o, &xi)) in ob.iter_mut().zip(xb).enumerate() {
            *o = desc.load(xi, signs, row, i);
        }
        butterflies(ob)?;
    }
    Ok(())
}

/// The transform computed in f64 from the f32 inputs (signs and scale
/// widened; the scale is the exact `1/√N`, not the f32 one), for NMSE checks.
pub fn fwht_f64(
    desc: &FwhtDesc,
    x: &[f32],
    signs: Option<&[f32]>,
    out: &mut [f64],
) -> Result<(), Error> {
    desc.check(x.len(), signs, out.len())?;
    let n = desc.n();
    let scale = if desc.scale() == default_scale(n) {
        default_scale_f64(n)
    } else {
        desc.scale() as f64
    };
    for (row, (xb, ob)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
        for (i, (o, &xi)) in ob.iter_mut().zip(xb).enumerate() {
            let s = match (signs, desc.sign_blocks()) {
                (Some(s), Some(nb)) => s[(row % nb) * n + i] as f64,
                _ => 1.0,
            };
            *o = xi as f64 * s * scale;
        }
        butterflies_f64(ob)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn butterflies_refuse_blocks_that_are_not_powers_of_two() {
        for n in [0usize, 3, 6, 12] {
            let mut v = [1.0f32; 12];
            assert_eq!(butterflies(&mut v[..n]), Err(Error::BadFwhtSize { n }));
            assert!(v.iter().all(|&x| x == 1.0), "untouched");
            let mut w = [1.0f64; 12];
            assert_eq!(butterflies_f64(&mut w[..n]), Err(Error::BadFwhtSize { n }));
        }
        let mut v = [1.0f32, 2.0];
        butterflies(&mut v).unwrap();
        assert_eq!(v, [3.0, -1.0]);
    }

    #[test]
    fn sizes() {
        assert!(FwhtDesc::new(1).is_err());
        assert!(FwhtDesc::new(2).is_ok());
        assert!(FwhtDesc::new(3).is_err());
        assert!(FwhtDesc::new(32768).is_ok());
        assert!(FwhtDesc::new(65536).is_err());
        assert!(FwhtDesc::new(8).unwrap().with_signs(12).is_err());
        assert!(FwhtDesc::new(8).unwrap().with_signs(0).is_err());
        assert_eq!(
            FwhtDesc::new(8)
                .unwrap()
                .with_signs(24)
                .unwrap()
                .sign_blocks(),
            Some(3)
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "libm::sqrtf is inline asm on x86_64")]
    fn default_scale_is_one_over_sqrt_n() {
        for k in 1..=15 {
            let n = 1usize << k;
            assert_eq!(
                default_scale(n).to_bits(),
                (1.0 / libm::sqrtf(n as f32)).to_bits(),
                "N = {n}"
            );
            let exact = 1.0 / libm::sqrt(n as f64);
            assert!(
                (default_scale_f64(n) - exact).abs() <= f64::EPSILON * exact,
                "N = {n}"
            );
        }
    }

    #[test]
    fn matches_dense_hadamard() {
        let n = 8;
        let d = FwhtDesc::new(n).unwrap().with_signs(2 * n).unwrap();
        let x: [f32; 16] = core::array::from_fn(|i| libm::sinf(i as f32 * 0.37));
        let s: [f32; 16] = core::array::from_fn(|i| if (i * 7) % 3 == 0 { -1.0 } else { 1.0 });
        let mut y = [0.0f32; 16];
        fwht(&d, &x, Some(&s), &mut y).unwrap();
        for row in 0..2 {
            for r in 0..n {
                let mut acc = 0.0f64;
                for c in 0..n {
                    let h = if (r & c).count_ones() % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    };
                    acc += h * (x[row * n + c] * s[row * n + c]) as f64;
                }
                acc /= (n as f64).sqrt();
                assert!((acc - y[row * n + r] as f64).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn rejects_bad_lengths() {
        let d = FwhtDesc::new(4).unwrap();
        let mut out = [0.0; 6];
        assert!(fwht(&d, &[0.0; 6], None, &mut out).is_err());
        let mut out = [0.0; 8];
        assert!(fwht(&d, &[0.0; 8], Some(&[1.0; 4]), &mut out).is_err());
    }
}
