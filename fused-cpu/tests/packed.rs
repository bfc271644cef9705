//! Packed (row-interleaved) Q4_0 weights: the layout round-trips, the packed
//! GEMV matches the reference (exactly on the scalar path), and fused ==
//! unfused bit for bit over packed weights, for every ISA and 1, 2 and 3
//! threads; bad inputs are typed errors.

use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_core::job::GemvJob;
use fused_core::reference::gemv::{gemm, gemm_glu};
use fused_core::weights::GluWeights;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};
use fused_cpu::packed::PackedWeights;
use fused_cpu::{CpuBackend, Isa};

mod common;
use common::backend::{assert_every_chain_fuses, glu_add_unfused};
use common::{Rng, bits, nmse, weights};

/// An `m × k` Q4_0 matrix from `rng`'s values.
fn q4_0(m: usize, k: usize, rng: &mut Rng) -> Vec<u8> {
    weights(DType::Q4_0, m, k, rng)
}

const SHAPES: [(usize, usize, usize); 6] = [
    (1, 32, 1),
    (3, 64, 1),
    (4, 32, 2),
    (9, 320, 1),
    (37, 96, 3),
    (64, 1024, 1),
];

#[test]
fn packing_round_trips() {
    let mut rng = Rng::new(7);
    for (m, k, _) in SHAPES {
        let w = q4_0(m, k, &mut rng);
        let p = PackedWeights::pack(&WeightMatrix::new(DType::Q4_0, m, k, &w).unwrap()).unwrap();
        assert_eq!((p.rows(), p.cols()), (m, k));
        #[cfg(feature = "lab")]
        assert_eq!(p.n_groups(), m / 4);
        let rb = DType::Q4_0.row_bytes(k).unwrap();
        let mut row = vec![0u8; rb];
        for r in 0..m {
            p.unpack_row(r, &mut row).unwrap();
            assert_eq!(row, w[r * rb..(r + 1) * rb], "{m}x{k} row {r}");
        }
        assert!(p.unpack_row(m, &mut row).is_err());
    }
}

#[test]
fn packed_gemv_matches_reference_and_fused_matches_unfused() {
    let mut rng = Rng::new(0xfeed);
    let mode = ActQuant::Q8_0;
    for (m, k, n) in SHAPES {
        let w = q4_0(m, k, &mut rng);
        let wm = WeightMatrix::new(DType::Q4_0, m, k, &w).unwrap();
        let p = PackedWeights::pack(&wm).unwrap();
        let x = rng.vec(k * n);
        let (res, mul, bias) = (rng.vec(m * n), rng.vec(m * n), rng.vec(m));
        let none = Epilogue::NONE.bind(&[], m, n).unwrap();
        let mut want = vec![0.0f32; m * n];
        gemm(&wm, &x, n, mode, &none, &mut want).unwrap();
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let be = CpuBackend::with_isa(isa, threads).unwrap();
                let mut y = vec![f32::NAN; m * n];
                be.gemv_packed(
                    &GemvJob::new(&p, &x, n).with_mode(mode).with_bound(&none),
                    &mut y,
                )
                .unwrap();
                if isa == Isa::Scalar {
                    assert_eq!(bits(&y), bits(&want), "{isa} t{threads} {m}x{k}x{n}");
                } else {
                    let e = nmse(&y, &want);
                    assert!(e <= 1e-9, "{isa} t{threads} {m}x{k}x{n}: NMSE {e:e}");
                }
                assert_every_chain_fuses(
                    &be,
                    [&mul, &res, &bias],
                    m,
                    n,
                    |epi, out| {
                        be.gemv_packed(
                            &GemvJob::new(&p, &x, n).with_mode(mode).with_bound(epi),
                            out,
                        )
                        .unwrap()
                    },
                    &format!("{isa} t{threads}"),
                );
            }
        }
    }
}

#[test]
fn packed_glu_matches_reference_and_unfused() {
    let mut rng = Rng::new(0xbeef);
    let mode = ActQuant::Q8_0;
    for (m, k, n) in SHAPES {
        let (wg, wu) = (q4_0(m, k, &mut rng), q4_0(m, k, &mut rng));
        let g = WeightMatrix::new(DType::Q4_0, m, k, &wg).unwrap();
        let u = WeightMatrix::new(DType::Q4_0, m, k, &wu).unwrap();
        let (pg, pu) = (
            PackedWeights::pack(&g).unwrap(),
            PackedWeights::pack(&u).unwrap(),
        );
        let x = rng.vec(k * n);
        let res = rng.vec(m * n);
        let add = Epilogue::NONE.then_add().unwrap();
        let bound = add.bind(&[&res], m, n).unwrap();
        let none = Epilogue::NONE.bind(&[], m, n).unwrap();
        let mut want = vec![0.0f32; m * n];
        let pair = GluWeights::new(g, u).unwrap();
        gemm_glu(&pair, &x, n, mode, Activation::Silu, &bound, &mut want).unwrap();
        for isa in Isa::available() {
            for threads in [1, 2, 3] {
                let be = CpuBackend::with_isa(isa, threads).unwrap();
                let mut fused = vec![f32::NAN; m * n];
                be.gemv_packed(
                    &GemvJob::gated(&pg, &pu, Activation::Silu, &x, n)
                        .with_mode(mode)
                        .with_bound(&bound),
                    &mut fused,
                )
                .unwrap();
                if isa == Isa::Scalar {
                    assert_eq!(bits(&fused), bits(&want), "{isa} t{threads}");
                } else {
                    let e = nmse(&fused, &want);
                    assert!(e <= 1e-9, "{isa} t{threads} {m}x{k}x{n}: NMSE {e:e}");
                }
                // Unfused: two packed GEMVs, GLU, add.
                let (mut a, mut b) = (vec![0.0f32; m * n], vec![0.0f32; m * n]);
                be.gemv_packed(
                    &GemvJob::new(&pg, &x, n).with_mode(mode).with_bound(&none),
                    &mut a,
                )
                .unwrap();
                be.gemv_packed(
                    &GemvJob::new(&pu, &x, n).with_mode(mode).with_bound(&none),
                    &mut b,
                )
                .unwrap();
                let unfused = glu_add_unfused(&be, Activation::Silu, &a, &b, &res);
                assert_eq!(bits(&fused), bits(&unfused), "{isa} t{threads}");
            }
        }
    }
}

/// The group kernels take the activation offset term and `dy` from the
/// side data where it exists and compute them where it does not (the last
/// `nb mod 4` blocks, or activations without side data): the same bits
/// either way.
#[cfg(feature = "lab")]
#[test]
fn group_kernels_with_and_without_side_data_agree() {
    use common::{prepare_columns, without_side};
    let mut rng = Rng::new(0x51de);
    let mode = ActQuant::Q8_0;
    for k in [32, 96, 128, 320, 544, 1024] {
        let w = q4_0(8, k, &mut rng);
        let p = PackedWeights::pack(&WeightMatrix::new(DType::Q4_0, 8, k, &w).unwrap()).unwrap();
        let x = rng.vec(k);
        let scratch = prepare_columns(mode, &x, k, 1);
        let acts = fused_cpu::acts::column(mode, &x, &scratch, k, 0).unwrap();
        for isa in Isa::available() {
            let kernel = fused_cpu::kernels::packed::packed_dot(isa, DType::Q4_0, mode).unwrap();
            for g in 0..p.n_groups() {
                let group = p.group(g).unwrap();
                let nb = p.blocks_per_row();
                let with = (kernel.group)(group, nb, &acts).unwrap();
                let without = (kernel.group)(group, nb, &without_side(acts)).unwrap();
                assert_eq!(bits(&with), bits(&without), "{isa} K={k} group {g}");
            }
        }
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let mut rng = Rng::new(3);
    let f16 = vec![0u8; 2 * 32 * 4];
    let wf = WeightMatrix::new(DType::F16, 4, 32, &f16).unwrap();
    assert!(matches!(
        PackedWeights::pack(&wf),
        Err(Error::UnsupportedDType { .. })
    ));
    let w = q4_0(8, 64, &mut rng);
    let p = PackedWeights::pack(&WeightMatrix::new(DType::Q4_0, 8, 64, &w).unwrap()).unwrap();
    let w2 = q4_0(8, 32, &mut rng);
    let p2 = PackedWeights::pack(&WeightMatrix::new(DType::Q4_0, 8, 32, &w2).unwrap()).unwrap();
    let be = CpuBackend::new(2).unwrap();
    let none = Epilogue::NONE.bind(&[], 8, 1).unwrap();
    let x = rng.vec(64);
    let mut y = vec![0.0f32; 8];
    // f32 activations: the packed kernels take Q8_0 only.
    assert!(
        be.gemv_packed(&GemvJob::new(&p, &x, 1).with_bound(&none), &mut y)
            .is_err()
    );
    // Short activations, short output.
    assert!(
        be.gemv_packed(
            &GemvJob::new(&p, &x[..32], 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&none),
            &mut y
        )
        .is_err()
    );
    assert!(
        be.gemv_packed(
            &GemvJob::new(&p, &x, 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&none),
            &mut y[..7]
        )
        .is_err()
    );
    // GLU halves of different shapes.
    assert!(matches!(
        be.gemv_packed(
            &GemvJob::gated(&p, &p2, Activation::Silu, &x, 1)
                .with_mode(ActQuant::Q8_0)
                .with_bound(&none),
            &mut y
        ),
        Err(Error::ShapeMismatch { .. })
    ));
    be.gemv_packed(
        &GemvJob::new(&p, &x, 1)
            .with_mode(ActQuant::Q8_0)
            .with_bound(&none),
        &mut y,
    )
    .unwrap();
}
