//! The backend's activation evaluation: the vector `exp` against libm's
//! `expf` over a dense sweep, and its slice forms (vectorized per ISA)
//! against the per-element function, bit for bit.

use fused_core::element::Activation;
use fused_cpu::Isa;
use fused_cpu::activation::{ActEval, expf};

/// Distance in ulps between two f32 of the same sign class (0 when both
/// are NaN or equal; `u64::MAX` when only one is NaN).
fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    // Map the bits to a monotonic integer line.
    let key = |v: f32| {
        let b = v.to_bits() as i32;
        i64::from(if b < 0 { i32::MIN - b } else { b })
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Largest ulp distance from libm's `expf` allowed (an exhaustive run over
/// every f32 in [−110, 90], `expf_worst_ulps`, finds 1).
const MAX_ULPS: u64 = 1;

#[test]
fn expf_is_within_one_ulp_of_libm() {
    let mut worst = (0u64, 0.0f32);
    let mut check = |x: f32| {
        let (got, want) = (expf(x), libm::expf(x));
        let d = ulps(got, want);
        if d > worst.0 {
            worst = (d, x);
        }
        assert!(
            d <= MAX_ULPS,
            "expf({x:e} = {:#x}): {got:e} vs libm {want:e} ({d} ulps)",
            x.to_bits()
        );
    };
    // Every 11th f32 between −110 and 90 (about 300 million values on
    // each side would be all of them; this visits every binade densely),
    // which covers the subnormal results, the overflow edge and the tiny
    // arguments.
    for (lo, hi) in [
        (0u32, 90.0f32.to_bits()),
        (0x8000_0000, (-110.0f32).to_bits()),
    ] {
        let mut b = lo;
        while b <= hi {
            check(f32::from_bits(b));
            b += 11;
        }
    }
    // The edges exactly, and the specials.
    for x in [
        88.722_83,
        88.722_84,
        -87.336_54,
        -103.278_93,
        -103.972_08,
        -104.0,
        -104.000_01,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ] {
        check(x);
    }
    assert_eq!(expf(f32::INFINITY), f32::INFINITY);
    assert_eq!(expf(f32::NEG_INFINITY).to_bits(), 0);
    assert!(expf(f32::NAN).is_nan());
    assert_eq!(expf(0.0), 1.0);
    // The bound is tight enough to mean something: the sweep met a
    // difference, and the worst one is reported on failure above.
    assert!(worst.0 >= 1, "expf equal to libm everywhere: {worst:?}");
}

/// Inputs that reach every branch of the activations: specials, the `exp`
/// edges, and random values of every magnitude.
fn inputs() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::from_bits(1),
        88.722_83,
        -88.722_84,
        104.0,
        -104.0,
        1e-30,
        -1e-30,
    ];
    let mut s = 0x9e37_79b9u32;
    for i in 0..2000 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let m = (s >> 9) as f32 / (1u32 << 23) as f32;
        let e = i % 30 - 20;
        v.push((m - 0.5) * 2f32.powi(e) * 16.0);
    }
    v
}

#[test]
fn slices_match_the_per_element_function_bit_for_bit() {
    let xs = inputs();
    let ups: Vec<f32> = xs.iter().map(|x| 1.5 - x * 0.25).collect();
    for eval in [ActEval::Reference, ActEval::VectorExp] {
        for act in Activation::ALL {
            // Every length up to 40 (each vector width and tail) and all.
            for n in (0..=40).chain([xs.len() - 7]) {
                for off in [0, 1, 7] {
                    let (a, u) = (&xs[off..off + n], &ups[off..off + n]);
                    let mut out = vec![0.0f32; n];
                    eval.apply_slice(act, a, &mut out);
                    for (i, (o, x)) in out.iter().zip(a).enumerate() {
                        let want = eval.apply(act, *x);
                        assert!(
                            o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                            "{eval:?} {act} n={n} i={i} x={x:e}: {o:e} vs {want:e}"
                        );
                    }
                    eval.glu_slice(act, a, u, &mut out);
                    for (i, ((o, x), y)) in out.iter().zip(a).zip(u).enumerate() {
                        let want = eval.glu(act, *x, *y);
                        assert!(
                            o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()),
                            "{eval:?} {act} glu n={n} i={i} x={x:e}: {o:e} vs {want:e}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn the_scalar_isa_keeps_the_core_functions() {
    assert_eq!(ActEval::for_isa(Isa::Scalar), ActEval::Reference);
    for x in inputs() {
        for act in Activation::ALL {
            let (got, want) = (ActEval::Reference.apply(act, x), act.apply(x));
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
        }
    }
    for isa in Isa::available().filter(|i| *i != Isa::Scalar) {
        assert_eq!(ActEval::for_isa(isa), ActEval::VectorExp, "{isa}");
    }
}

#[test]
fn vector_silu_and_sigmoid_stay_close_to_the_core() {
    // A few ulps of `exp` move SiLU and sigmoid by at most a few ulps
    // where they are not tiny.
    for x in inputs() {
        for act in [Activation::Silu, Activation::Sigmoid] {
            let (got, want) = (ActEval::VectorExp.apply(act, x), act.apply(x));
            if want.is_nan() {
                assert!(got.is_nan(), "{act} {x:e}");
                continue;
            }
            assert!(ulps(got, want) <= 4, "{act} {x:e}: {got:e} vs {want:e}");
        }
    }
}

#[test]
#[ignore = "prints the worst distance; run with --ignored --nocapture"]
fn expf_worst_ulps() {
    let mut worst = (0u64, 0.0f32, 0usize);
    for (lo, hi) in [
        (0u32, 90.0f32.to_bits()),
        (0x8000_0000, (-110.0f32).to_bits()),
    ] {
        for b in lo..=hi {
            let x = f32::from_bits(b);
            let d = ulps(expf(x), libm::expf(x));
            if d > worst.0 {
                worst = (d, x, 0);
            }
            if d == worst.0 {
                worst.2 += 1;
            }
        }
    }
    println!(
        "worst {} ulps at {:e}; {} values at that distance",
        worst.0, worst.1, worst.2
    );
}

#[test]
fn vector_gelu_tanh_tracks_the_f64_function() {
    // `x / (1 + e^(−2a))` is accurate to the f32 rounding of its argument
    // `a` (four roundings and the constants': up to ≈ 3ε relative, times
    // `2|a|` through the exponential) plus a few ulps; the core's f32
    // `x/2 · (1 + tanh a)` loses more to cancellation for negative `x`,
    // hence the comparison with the f64 function.
    #![allow(clippy::excessive_precision)]
    let eps = f64::from(f32::EPSILON);
    for x in inputs() {
        let got = ActEval::VectorExp.apply(Activation::GeluTanh, x);
        // The f64 function in the same cancellation-free form (the core's
        // `apply_f64` rounds `1 + tanh a` to 0 below x ≈ −9).
        let xd = f64::from(x);
        let a64 = 0.797_884_560_802_865_4 * xd * (1.0 + f64::from(0.044_715f32) * xd * xd);
        let want = xd / (1.0 + libm::exp(-2.0 * a64));
        if want.is_nan() {
            assert!(got.is_nan(), "{x:e}");
            continue;
        }
        if want.is_infinite() {
            assert_eq!(f64::from(got), want, "{x:e}");
            continue;
        }
        let a = f64::from(fused_core::element::gelu_tanh_arg(x)).abs();
        if !a.is_finite() {
            // `x²` overflowed: ±0 for negative `x`, `x` itself for positive.
            assert_eq!(f64::from(got), want, "{x:e}");
            continue;
        }
        let bound = (4.0 + 6.0 * a) * eps * want.abs() + 1e-37;
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= bound,
            "{x:e}: {got:e} vs {want:e}, |err| {err:e} > {bound:e}"
        );
    }
}
