//! Fused epilogues against the same chains run as unfused kernels, bit for
//! bit, on the first CUDA device (skipped without one); and the launch
//! counts of both.

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip, download, silu_mul_add, upload_weights};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::{Epilogue, Stage};
use fused_cuda::{CudaBackend, DeviceVec, GemvJob, KernelForm, LaunchOptions};

/// Runs `epi`'s stages one unfused kernel each on `v` (operands by slot).
fn unfused_chain(be: &CudaBackend, epi: &Epilogue, v: DeviceVec, ops: &[&DeviceVec]) -> DeviceVec {
    let mut cur = v;
    for st in epi.stages() {
        let mut next = be.alloc(cur.len()).unwrap();
        match *st {
            Stage::Act(a) => be
                .elementwise(fused_cuda::Elementwise::Unary(a, &cur), &mut next)
                .unwrap(),
            Stage::Add { slot } => be
                .elementwise(
                    fused_cuda::Elementwise::Add(&cur, ops[slot as usize]),
                    &mut next,
                )
                .unwrap(),
            Stage::Mul { slot } => be
                .elementwise(
                    fused_cuda::Elementwise::Mul(&cur, ops[slot as usize]),
                    &mut next,
                )
                .unwrap(),
            Stage::AddRowBias { slot } => be
                .elementwise(
                    fused_cuda::Elementwise::AddRowBias(&cur, ops[slot as usize]),
                    &mut next,
                )
                .unwrap(),
        }
        cur = next;
    }
    cur
}

/// Chains that cover every activation and every operand stage.
fn chains(act: Activation) -> Vec<Epilogue> {
    vec![
        Epilogue::NONE.then_act(act).unwrap(),
        Epilogue::NONE
            .then_act(act)
            .and_then(|e| e.then_mul())
            .and_then(|e| e.then_add())
            .unwrap(),
        Epilogue::NONE
            .then_row_bias()
            .and_then(|e| e.then_act(act))
            .and_then(|e| e.then_add())
            .and_then(|e| e.then_act(Activation::Sigmoid))
            .and_then(|e| e.then_mul())
            .unwrap(),
    ]
}

#[test]
fn fused_epilogue_equals_unfused_kernels_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(3);
    // K: two whole tiles of the quantized layout and a rest; 1 column (2
    // rows per block) and 3 (4 rows per block); BF16 and Q6_K stand for the
    // formats read in the core's block layout.
    // Quantized activation modes too (a quantizer launch before the GEMV).
    let cases = [
        (DType::F16, ActQuant::F32),
        (DType::BF16, ActQuant::F32),
        (DType::Q4_0, ActQuant::F32),
        (DType::Q4_K, ActQuant::F32),
        (DType::Q6_K, ActQuant::F32),
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::Q4_K, ActQuant::Q8_K),
        (DType::Q5_0, ActQuant::Q8_0),
        (DType::IQ4_NL, ActQuant::Q8_0),
        (DType::Q4_1, ActQuant::Q8_1),
        (DType::Q5_1, ActQuant::Q8_1),
        (DType::Q5_K, ActQuant::Q8_K),
        (DType::Q6_K, ActQuant::Q8_K),
        (DType::TQ2_0, ActQuant::Q8_K),
    ];
    for (dtype, mode, n_cols) in cases.into_iter().flat_map(|(d, m)| [(d, m, 1), (d, m, 3)]) {
        let q = u64::from(mode != ActQuant::F32);
        let (m, k) = (257, 2304);
        let w = upload_weights(&be, &mut rng, dtype, m, k);
        let x = be.upload(&rng.vec_scaled(k * n_cols, 2.0)).unwrap();
        let bias = be.upload(&rng.vec_scaled(m, 1.0)).unwrap();
        let a = be.upload(&rng.vec_scaled(m * n_cols, 1.0)).unwrap();
        let b = be.upload(&rng.vec_scaled(m * n_cols, 1.0)).unwrap();
        for act in Activation::ALL {
            for epi in chains(act) {
                // Operand slots in the order the builder assigned them.
                let ops: Vec<&DeviceVec> = epi
                    .stages()
                    .iter()
                    .filter_map(|st| match st {
                        Stage::AddRowBias { .. } => Some(&bias),
                        Stage::Add { slot } | Stage::Mul { slot } => {
                            Some(if slot % 2 == 0 { &a } else { &b })
                        }
                        Stage::Act(_) => None,
                    })
                    .collect();
                let poison = vec![f32::NAN; m * n_cols];
                let mut acc = be.upload(&poison).unwrap();
                common::reset_launches(&be);
                be.gemv_batch(&x, n_cols, mode, &mut [GemvJob::new(&w, &mut acc)])
                    .unwrap();
                let unfused = unfused_chain(&be, &epi, acc, &ops);
                assert_eq!(common::launches(&be), 1 + q + epi.len() as u64);
                let u = download(&be, &unfused);
                // The operands loaded when a block starts, and after its sums.
                for early_operands in [true, false] {
                    be.set_options(LaunchOptions {
                        early_operands,
                        ..be.options()
                    });
                    let mut fused = be.upload(&poison).unwrap();
                    common::reset_launches(&be);
                    be.gemv_batch(
                        &x,
                        n_cols,
                        mode,
                        &mut [GemvJob::new(&w, &mut fused).with_epilogue(&epi, &ops)],
                    )
                    .unwrap();
                    assert_eq!(common::launches(&be), 1 + q);
                    let f = download(&be, &fused);
                    assert!(f.iter().all(|v| !v.is_nan()), "unwritten output");
                    let what = format!(
                        "{dtype} {mode:?} {act} {:?} early operands {early_operands}",
                        epi.stages()
                    );
                    assert_bits_eq(&f, &u, &what);
                }
                be.set_options(LaunchOptions::default());
            }
        }
    }
}

#[test]
fn fixed_chain_kernels_equal_the_generic_chain_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(6);
    // Every kernel with copies for the fixed chains (src/fixed_epi.rs): F16
    // at K 16384 (u16); Q8_0 / Q4_0 / Q4_K on f32 activations; the integer
    // kernels of Q4_0 (4 rows a block) and Q4_K (4 in 2 row groups up to
    // K 14336, 2 above, and 4 from 16384 rows);
    // and kernels without (F16 at K 2304 and 8192, integer Q8_0), where the
    // option changes nothing.
    let cases = [
        (DType::F16, ActQuant::F32, 130, 2304),
        (DType::F16, ActQuant::F32, 130, 8192),
        (DType::F16, ActQuant::F32, 130, 16384),
        (DType::Q8_0, ActQuant::F32, 257, 2304),
        (DType::Q4_0, ActQuant::F32, 257, 2304),
        (DType::Q4_K, ActQuant::F32, 257, 2304),
        (DType::Q8_0, ActQuant::Q8_0, 257, 2304),
        (DType::Q4_0, ActQuant::Q8_0, 257, 2304),
        (DType::Q4_K, ActQuant::Q8_K, 257, 2304),
        (DType::Q4_K, ActQuant::Q8_K, 257, 14592),
        (DType::Q4_K, ActQuant::Q8_K, 16387, 512),
    ];
    let chains = [Epilogue::NONE.then_add().unwrap(), silu_mul_add()];
    for (dtype, mode, m, k) in cases {
        let w = upload_weights(&be, &mut rng, dtype, m, k);
        let x = be.upload(&rng.vec_scaled(k, 2.0)).unwrap();
        let a = be.upload(&rng.vec_scaled(m, 1.0)).unwrap();
        let b = be.upload(&rng.vec_scaled(m, 1.0)).unwrap();
        for epi in &chains {
            let ops: Vec<&DeviceVec> = [&a, &b][2 - epi.n_operands()..].to_vec();
            let mut outs = Vec::new();
            for fixed_epilogues in [true, false] {
                be.set_options(LaunchOptions {
                    fixed_epilogues,
                    ..LaunchOptions::default()
                });
                let mut y = be.upload(&vec![f32::NAN; m]).unwrap();
                common::reset_launches(&be);
                be.gemv_batch(
                    &x,
                    1,
                    mode,
                    &mut [GemvJob::new(&w, &mut y).with_epilogue(epi, &ops)],
                )
                .unwrap();
                assert_eq!(common::launches(&be), 1 + u64::from(mode != ActQuant::F32));
                let y = download(&be, &y);
                assert!(y.iter().all(|v| !v.is_nan()), "unwritten output");
                outs.push(y);
            }
            let what = format!("{dtype} {mode:?} {m} x {k} {:?}", epi.stages());
            assert_bits_eq(&outs[0], &outs[1], &what);
        }
    }
    be.set_options(LaunchOptions::default());
}

#[test]
fn fixed_chain_copies_run_only_at_their_kernels_occupancy() {
    let Some(be) = backend_or_skip() else { return };
    let copies = be.fixed_epilogue_copies();
    // Eight kernels, two chains each.
    assert_eq!(copies.len(), 16, "{copies:?}");
    for c in copies {
        println!(
            "{} _e{}: {} / {} blocks an SM, {}",
            c.kernel,
            c.chain,
            c.kernel_blocks_per_sm,
            c.copy_blocks_per_sm,
            if c.used() { "used" } else { "not used" }
        );
        assert!(
            c.kernel_blocks_per_sm > 0 && c.copy_blocks_per_sm > 0,
            "{c:?}"
        );
    }
    // The kernels' bounds (kernels/gemv.cu) give every copy its kernel's
    // occupancy in the sm_90 cubin.
    let dev = be.device();
    if dev.capability() == (9, 0) && dev.kernel_form() == KernelForm::Cubin {
        let unused: Vec<_> = copies.iter().filter(|c| !c.used()).collect();
        assert!(unused.is_empty(), "copies at another occupancy: {unused:?}");
    }
}

#[test]
fn fused_glu_equals_unfused_kernels_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(4);
    // K = 33 blocks: Q8_0's integer layout has a group of 32 and one of 1.
    let cases = [
        (DType::F32, ActQuant::F32),
        (DType::Q8_0, ActQuant::F32),
        (DType::Q8_0, ActQuant::Q8_0),
        (DType::Q4_0, ActQuant::Q8_0),
        (DType::Q5_1, ActQuant::Q8_1),
        (DType::IQ4_NL, ActQuant::Q8_0),
    ];
    for (dtype, mode) in cases {
        let q = u64::from(mode != ActQuant::F32);
        let (m, k, n_cols) = (130, 1056, 2);
        let g = upload_weights(&be, &mut rng, dtype, m, k);
        let u = upload_weights(&be, &mut rng, dtype, m, k);
        let x = be.upload(&rng.vec_scaled(k * n_cols, 1.0)).unwrap();
        let res = be.upload(&rng.vec_scaled(m * n_cols, 1.0)).unwrap();
        let epi = Epilogue::NONE.then_add().unwrap();
        for act in Activation::ALL {
            let mut fused = be.alloc(m * n_cols).unwrap();
            common::reset_launches(&be);
            be.gemv_batch(
                &x,
                n_cols,
                mode,
                &mut [fused_cuda::GemvJob::new(&g, &mut fused)
                    .with_glu(&u, act)
                    .with_epilogue(&epi, &[&res])],
            )
            .unwrap();
            assert_eq!(
                common::launches(&be),
                1 + q,
                "one quantizer for both weights"
            );
            let mut gate = be.alloc(m * n_cols).unwrap();
            let mut up = be.alloc(m * n_cols).unwrap();
            let mut gated = be.alloc(m * n_cols).unwrap();
            common::reset_launches(&be);
            be.gemv_batch(&x, n_cols, mode, &mut [GemvJob::new(&g, &mut gate)])
                .unwrap();
            be.gemv_batch(&x, n_cols, mode, &mut [GemvJob::new(&u, &mut up)])
                .unwrap();
            be.elementwise(fused_cuda::Elementwise::Glu(act, &gate, &up), &mut gated)
                .unwrap();
            let unfused = unfused_chain(&be, &epi, gated, &[&res]);
            assert_eq!(common::launches(&be), 4 + 2 * q);
            assert_bits_eq(
                &download(&be, &fused),
                &download(&be, &unfused),
                &format!("glu {dtype} {mode:?} {act}"),
            );
        }
    }
}

#[test]
fn unfused_kernels_track_the_core_element_functions() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(5);
    let n = 100_003;
    let a = rng.vec_scaled(n, 8.0);
    let b = rng.vec_scaled(n, 8.0);
    let (da, db) = (be.upload(&a).unwrap(), be.upload(&b).unwrap());
    let mut out = be.alloc(n).unwrap();
    let mut got = vec![0.0; n];
    for act in Activation::ALL {
        be.elementwise(fused_cuda::Elementwise::Unary(act, &da), &mut out)
            .unwrap();
        be.download(&out, &mut got).unwrap();
        for i in 0..n {
            let want = act.apply(a[i]);
            assert!(
                (got[i] - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{act}({}) = {} on the GPU, {want} in the core",
                a[i],
                got[i]
            );
        }
        be.elementwise(fused_cuda::Elementwise::Glu(act, &da, &db), &mut out)
            .unwrap();
        be.download(&out, &mut got).unwrap();
        for i in 0..n {
            let want = fused_core::element::glu(act, a[i], b[i]);
            assert!(
                (got[i] - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "glu {act}"
            );
        }
    }
    be.elementwise(fused_cuda::Elementwise::Add(&da, &db), &mut out)
        .unwrap();
    be.download(&out, &mut got).unwrap();
    assert!((0..n).all(|i| got[i].to_bits() == (a[i] + b[i]).to_bits()));
    be.elementwise(fused_cuda::Elementwise::Mul(&da, &db), &mut out)
        .unwrap();
    be.download(&out, &mut got).unwrap();
    assert!((0..n).all(|i| got[i].to_bits() == (a[i] * b[i]).to_bits()));
    let m = 7;
    let bias = &b[..m];
    let dbias = be.upload(bias).unwrap();
    let mut out2 = be.alloc(m * 1000).unwrap();
    let a2 = be.upload(&a[..m * 1000]).unwrap();
    be.elementwise(fused_cuda::Elementwise::AddRowBias(&a2, &dbias), &mut out2)
        .unwrap();
    let mut got2 = vec![0.0; m * 1000];
    be.download(&out2, &mut got2).unwrap();
    assert!((0..m * 1000).all(|i| got2[i].to_bits() == (a[i] + bias[i % m]).to_bits()));
    be.elementwise(fused_cuda::Elementwise::Copy(&da), &mut out)
        .unwrap();
    be.download(&out, &mut got).unwrap();
    assert_eq!(got, a);
}
