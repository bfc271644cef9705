//! Every native (SIMD) row-dot kernel against the scalar reference kernel, on
//! random rows, extreme rows and wrong lengths.

use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::quant::{dequantize_row, quantize_row};
use fused_cpu::Isa;
use fused_cpu::acts::{Acts, column};
use fused_cpu::kernels::{has_native_kernel, row_dot, scalar};

mod common;
use common::{ACT_MODES, Rng, WEIGHT_FORMATS, prepare_columns, without_side};

/// The (dtype, mode) pairs each SIMD ISA must have a native kernel for.
fn claimed(isa: Isa) -> &'static [(DType, ActQuant)] {
    const AVX2: &[(DType, ActQuant)] = &[
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q5_0, ActQuant::Q8_0),
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::IQ4_NL, ActQuant::Q8_0),
        (DType::Q4_K, ActQuant::Q8_K),
        (DType::Q6_K, ActQuant::Q8_K),
        (DType::F16, ActQuant::F32),
        (DType::F32, ActQuant::F32),
        (DType::BF16, ActQuant::F32),
        (DType::Q5_1, ActQuant::Q8_1),
        (DType::Q5_K, ActQuant::Q8_K),
        (DType::TQ2_0, ActQuant::Q8_K),
    ];
    const NEON: &[(DType, ActQuant)] = &[
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q5_0, ActQuant::Q8_0),
        (DType::Q5_1, ActQuant::Q8_1),
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::IQ4_NL, ActQuant::Q8_0),
        (DType::Q4_K, ActQuant::Q8_K),
        (DType::Q5_K, ActQuant::Q8_K),
        (DType::Q6_K, ActQuant::Q8_K),
        (DType::TQ2_0, ActQuant::Q8_K),
        (DType::F16, ActQuant::F32),
        (DType::BF16, ActQuant::F32),
        (DType::F32, ActQuant::F32),
    ];
    match isa {
        Isa::Scalar => &[],
        Isa::Neon | Isa::NeonDotprod => NEON,
        Isa::Avx2 | Isa::Avx512 => AVX2,
    }
}

/// Whether `isa`'s kernel for `dtype` does the scalar kernel's f32
/// arithmetic operation for operation, and so must match it bit for bit.
fn bit_exact(isa: Isa, dtype: DType) -> bool {
    matches!(isa, Isa::Neon | Isa::NeonDotprod)
        && matches!(
            dtype,
            DType::Q4_0
                | DType::Q5_0
                | DType::Q8_0
                | DType::IQ4_NL
                | DType::Q4_1
                | DType::Q5_1
                | DType::TQ2_0
        )
}

/// One activation column of `k` values prepared for `mode`, plus the f32
/// values (dequantized for the quantized modes) used for the error bound.
fn prepare(mode: ActQuant, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let k = x.len();
    let q = prepare_columns(mode, x, k, 1);
    let xd = match mode.dtype() {
        None => x.to_vec(),
        Some(d) => {
            let mut v = vec![0.0; k];
            dequantize_row(d, &q[..d.row_bytes(k).unwrap()], &mut v).unwrap();
            v
        }
    };
    (q, xd)
}

fn acts<'a>(mode: ActQuant, x: &'a [f32], q: &'a [u8]) -> Acts<'a> {
    column(mode, x, q, x.len(), 0).unwrap()
}

/// Compares the `isa` kernel with the scalar one on weights `wf` (f32, to be
/// quantized) and activations `x`.
fn check(isa: Isa, dtype: DType, mode: ActQuant, wf: &[f32], x: &[f32], what: &str) {
    let k = x.len();
    let mut w = vec![0u8; dtype.row_bytes(k).unwrap()];
    quantize_row(dtype, wf, &mut w).unwrap();
    let mut wd = vec![0.0; k];
    dequantize_row(dtype, &w, &mut wd).unwrap();
    let (q, xd) = prepare(mode, x);
    let a = acts(mode, x, &q);
    let want = scalar::row_dot(dtype, &w, &a, k).unwrap();
    let mag: f64 = wd
        .iter()
        .zip(&xd)
        .map(|(a, b)| (f64::from(*a) * f64::from(*b)).abs())
        .sum();
    // With the activations' side data, and without it (kernels then fall
    // back to the blocks alone).
    for (a, how) in [(a, "side data"), (without_side(a), "no side data")] {
        let got = row_dot(isa, dtype, mode)(dtype, &w, &a, k).unwrap();
        if bit_exact(isa, dtype) {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{isa} {dtype:?} {mode:?} k={k} {what}, {how}: got {got}, want {want} (bit-exact kernel)"
            );
        }
        let err = (f64::from(got) - f64::from(want)).abs();
        assert!(
            err <= 1e-5 * (mag + 1e-30),
            "{isa} {dtype:?} {mode:?} k={k} {what}, {how}: got {got}, want {want}, |err| {err:e}, Σ|wx| {mag:e}"
        );
    }
}

fn native_triples() -> Vec<(Isa, DType, ActQuant)> {
    let mut v = Vec::new();
    for isa in Isa::available() {
        for dtype in WEIGHT_FORMATS {
            for mode in ACT_MODES {
                if mode.check(dtype).is_ok() && has_native_kernel(isa, dtype, mode) {
                    v.push((isa, dtype, mode));
                }
            }
        }
    }
    v
}

#[test]
fn isa_detection() {
    let available: Vec<Isa> = Isa::available().collect();
    eprintln!("available ISAs: {available:?}");
    assert_eq!(available.first(), Some(&Isa::Scalar));
    assert_eq!(available.last(), Some(&Isa::detect()));
    for isa in Isa::ALL {
        assert_eq!(isa.is_supported(), available.contains(&isa), "{isa}");
    }
    if cfg!(all(target_arch = "aarch64", target_endian = "little")) {
        assert!(Isa::Neon.is_supported(), "{available:?}");
        assert!(!Isa::Avx2.is_supported(), "{available:?}");
    }
    if cfg!(target_arch = "x86_64") {
        assert!(!Isa::Neon.is_supported(), "{available:?}");
    }
}

#[test]
fn claimed_kernels_exist() {
    for isa in Isa::available() {
        for &(dtype, mode) in claimed(isa) {
            assert!(
                has_native_kernel(isa, dtype, mode),
                "{isa}: no native kernel for {dtype:?} × {mode:?}"
            );
        }
    }
}

#[test]
fn native_kernels_match_scalar() {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let triples = native_triples();
    let claimed_total: usize = Isa::available().map(|i| claimed(i).len()).sum();
    assert!(triples.len() >= claimed_total, "{triples:?}");
    for (isa, dtype, mode) in triples {
        let blk = dtype.block_len().max(32);
        // 4096 = 128 legacy blocks = 16 super-blocks.
        let big = 4096;
        // Float formats (block length 1) also get a K that leaves a tail
        // after every vector width.
        let odd = if dtype.block_len() == 1 { 37 } else { blk };
        // 18 blocks: K = 576 in the 32-element formats (SmolLM2-135M's
        // rows), one super-group of sixteen and a partial one for AVX-512.
        for k in [blk, odd, 3 * blk, 8 * blk + blk, 18 * blk, big] {
            for rep in 0..2 {
                let wf = rng.vec(k);
                let x: Vec<f32> = rng.vec(k).iter().map(|v| v * 3.0).collect();
                check(isa, dtype, mode, &wf, &x, &format!("random #{rep}"));
            }
            // Extremes: full-range codes (every block's max hit at both
            // signs), zero blocks, constant blocks, a huge dynamic range.
            let n = k / blk;
            let ramp: Vec<f32> = (0..k)
                .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 } * ((i % 7) as f32 + 1.0))
                .collect();
            let maxed: Vec<f32> = (0..k)
                .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
                .collect();
            let zeros = vec![0.0f32; k];
            let mut sparse = rng.vec(k);
            for (b, chunk) in sparse.chunks_mut(blk).enumerate() {
                if b % 2 == 0 || n == 1 {
                    chunk.fill(0.0);
                }
            }
            let scaled: Vec<f32> = rng
                .vec(k)
                .iter()
                .enumerate()
                .map(|(i, v)| v * 10f32.powi((i / blk) as i32 % 7 - 3))
                .collect();
            check(isa, dtype, mode, &maxed, &maxed, "all max");
            check(isa, dtype, mode, &ramp, &maxed, "ramp × max");
            check(isa, dtype, mode, &maxed, &ramp, "max × ramp");
            check(isa, dtype, mode, &zeros, &ramp, "zero weights");
            check(isa, dtype, mode, &ramp, &zeros, "zero activations");
            check(isa, dtype, mode, &sparse, &scaled, "zero blocks");
            check(isa, dtype, mode, &scaled, &sparse, "scaled");
        }
    }
}

#[test]
fn native_kernels_reject_wrong_lengths() {
    let mut rng = Rng::new(42);
    for (isa, dtype, mode) in native_triples() {
        let kernel = row_dot(isa, dtype, mode);
        let k = dtype.block_len().max(32) * 2;
        let mut w = vec![0u8; dtype.row_bytes(k).unwrap()];
        quantize_row(dtype, &rng.vec(k), &mut w).unwrap();
        let x = rng.vec(k);
        let (q, _) = prepare(mode, &x);
        let a = acts(mode, &x, &q);
        assert!(kernel(dtype, &w, &a, k).is_ok());
        // Weights one byte short / long.
        assert!(kernel(dtype, &w[..w.len() - 1], &a, k).is_err());
        let mut long = w.clone();
        long.push(0);
        assert!(kernel(dtype, &long, &a, k).is_err());
        // K not a whole number of blocks, or not matching the row.
        if dtype.block_len() > 1 {
            assert!(kernel(dtype, &w, &a, k - 1).is_err());
        }
        assert!(kernel(dtype, &w, &a, k / 2).is_err());
        // Activations too short.
        let short = match a {
            Acts::F32(xs) => Acts::F32(&xs[..k - 1]),
            Acts::Quant {
                dtype: d,
                bytes,
                side,
            } => Acts::Quant {
                dtype: d,
                bytes: &bytes[..bytes.len() - 1],
                side,
            },
        };
        assert!(kernel(dtype, &w, &short, k).is_err());
        // Wrong activation variant / format, wrong weight format.
        let wrong = match a {
            Acts::F32(_) => Acts::Quant {
                dtype: DType::Q8_0,
                bytes: &q,
                side: &[],
            },
            Acts::Quant { .. } => Acts::F32(&x),
        };
        assert!(kernel(dtype, &w, &wrong, k).is_err());
        if let Acts::Quant {
            bytes,
            dtype: d,
            side,
        } = a
        {
            let other = if d == DType::Q8_K {
                DType::Q8_0
            } else {
                DType::Q8_K
            };
            let wrong = Acts::Quant {
                dtype: other,
                bytes,
                side,
            };
            assert!(kernel(dtype, &w, &wrong, k).is_err());
        }
        let other = if dtype == DType::Q4_0 {
            DType::Q8_0
        } else {
            DType::Q4_0
        };
        assert!(kernel(other, &w, &a, k).is_err());
    }
}

#[test]
fn q8_0_side_data_follows_its_layout() {
    use fused_cpu::acts::side::{Q8_0_GROUP_BYTES, Q8_0_SUPER_BYTES, side_bytes, write_side};
    let mut rng = Rng::new(7);
    // 25 blocks: one whole super-group of four groups, a partial one of two
    // groups, and one block without side data.
    let k = 25 * 32;
    let x: Vec<f32> = rng.vec(k).iter().map(|v| v * 5.0).collect();
    let mode = ActQuant::Q8_0;
    let (q, _) = prepare(mode, &x);
    let Acts::Quant { bytes, side, .. } = acts(mode, &x, &q) else {
        panic!("Q8_0 activations are quantized");
    };
    assert_eq!(side.len(), side_bytes(DType::Q8_0, k));
    assert_eq!(side.len(), 2 * Q8_0_SUPER_BYTES);
    let lane =
        |s: &[u8], o: usize, l: usize| <[u8; 4]>::try_from(&s[o + 4 * l..o + 4 * l + 4]).unwrap();
    for (b, blk) in bytes.chunks_exact(34).take(24).enumerate() {
        let sg = &side[b / 16 * Q8_0_SUPER_BYTES..][..Q8_0_SUPER_BYTES];
        let (gi, j) = (b / 4 % 4, b % 4);
        let g = &sg[gi * Q8_0_GROUP_BYTES..][..Q8_0_GROUP_BYTES];
        assert_eq!(&g[16 * j..16 * j + 16], &blk[2..18], "low codes, block {b}");
        assert_eq!(
            &g[64 + 16 * j..64 + 16 * j + 16],
            &blk[18..34],
            "high codes, block {b}"
        );
        // Lane `i`'s share: codes `4i..4i + 4` and `16 + 4i..16 + 4i + 4`.
        for i in 0..4 {
            let qs = &blk[2..];
            let codes = qs[4 * i..4 * i + 4]
                .iter()
                .chain(&qs[16 + 4 * i..20 + 4 * i]);
            let sum: i32 = codes.map(|&c| i32::from(c as i8)).sum();
            assert_eq!(
                i32::from_le_bytes(lane(g, 128, 4 * j + i)),
                -8 * sum,
                "offset, block {b}, lane {i}"
            );
        }
        let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        for l in 0..4 {
            assert_eq!(
                f32::from_le_bytes(lane(g, 192, 4 * j + l)),
                d,
                "lane dy, block {b}"
            );
        }
        let dy = f32::from_le_bytes(lane(sg, 4 * Q8_0_GROUP_BYTES, 4 * j + gi));
        assert_eq!(dy, d, "dy, block {b}");
    }
    // The partial super-group is zero past its two groups.
    let last = &side[Q8_0_SUPER_BYTES..];
    assert!(
        last[2 * Q8_0_GROUP_BYTES..4 * Q8_0_GROUP_BYTES]
            .iter()
            .all(|&v| v == 0)
    );
    for j in 0..4 {
        for gi in 2..4 {
            assert_eq!(lane(last, 4 * Q8_0_GROUP_BYTES, 4 * j + gi), [0; 4]);
        }
    }
    // Wrong lengths are errors, not panics.
    let mut out = vec![0u8; side.len()];
    assert!(write_side(DType::Q8_0, bytes, k, &mut out).is_ok());
    assert_eq!(out, side);
    assert!(write_side(DType::Q8_0, &bytes[1..], k, &mut out).is_err());
    assert!(write_side(DType::Q8_0, bytes, k, &mut out[1..]).is_err());
    assert!(write_side(DType::Q8_K, bytes, k, &mut out).is_err());
}

#[test]
fn activation_quantizers_match_the_core() {
    use fused_cpu::acts::{prepared_bytes, quantize_columns};
    let mut rng = Rng::new(0x051a_b1e5);
    // Segments of 256 (whole Q8_0, Q8_1 and Q8_K blocks) of edge cases: exact
    // ties after scaling (amax 127 gives Q8_0 d = 1 and Q8_K iscale = −1),
    // the largest |v| twice with both signs (the first one sets Q8_K's
    // sign), zeros, signed zeros and subnormals, huge values, NaN and
    // infinities, then random values at several scales.
    let mut x: Vec<f32> = Vec::new();
    let ties: Vec<f32> = (0..256)
        .map(|i| match i % 32 {
            0 => 127.0,
            j => (j as f32 - 16.0) + if i % 2 == 0 { 0.5 } else { -0.5 },
        })
        .collect();
    x.extend(&ties);
    x.extend(ties.iter().map(|v| -v));
    let mut twice = rng.vec(256);
    (twice[3], twice[40]) = (-5.0, 5.0);
    x.extend(twice);
    x.extend([0.0f32; 256]);
    x.extend((0..256).map(|i| if i % 2 == 0 { -0.0 } else { 1e-45 * i as f32 }));
    x.extend((0..256).map(|i| 3.0e38 * if i % 3 == 0 { -1.0 } else { 0.5 }));
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut b = rng.vec(256);
        b[7] = special;
        b[200] = special;
        x.extend(b);
    }
    x.extend([f32::NAN; 256]);
    for scale in [1e-30f32, 1e-3, 1.0, 7.0, 1e20] {
        x.extend(rng.vec(256 * 3).iter().map(|v| v * scale));
    }
    let k = x.len();
    for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
        let d = mode.dtype().unwrap();
        let mut scratch = vec![0u8; prepared_bytes(mode, k).unwrap()];
        quantize_columns(mode, &x, k, &mut scratch).unwrap();
        let mut want = vec![0u8; d.row_bytes(k).unwrap()];
        quantize_row(d, &x, &mut want).unwrap();
        let bb = d.row_bytes(d.block_len()).unwrap();
        for (b, (got, want)) in scratch
            .chunks_exact(bb)
            .zip(want.chunks_exact(bb))
            .enumerate()
        {
            assert_eq!(got, want, "{d} block {b}");
        }
    }
}
