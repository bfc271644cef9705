//! GEMV kernels of several teams a block (`LaunchOptions::teams`,
//! `src/teams.rs`) against the plain kernels, bit for bit, on the first
//! CUDA device (skipped without one): bare, with the fixed chains and a
//! generic one, with the L2 look-ahead, with an output quantizer (which
//! keeps the plain kernel), at row counts that leave a block's last teams
//! without rows; and the team kernels' occupancy.

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip, download, silu_mul_add, upload_weights};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::epilogue::Epilogue;
use fused_cuda::{AheadAt, DeviceVec, GemvJob, KernelForm, LaunchOptions};

#[test]
fn team_kernels_run_only_at_their_kernels_occupancy() {
    let Some(be) = backend_or_skip() else { return };
    let kernels = be.team_kernels();
    // The Q4_0 kernel and its two fixed-chain copies.
    assert_eq!(kernels.len(), 3, "{kernels:?}");
    for t in kernels {
        println!(
            "{} _t{}: {} blocks an SM / {} blocks of {} teams, {}",
            t.kernel,
            t.teams,
            t.kernel_blocks_per_sm,
            t.team_blocks_per_sm,
            t.teams,
            if t.used() { "used" } else { "not used" }
        );
        assert!(
            t.kernel_blocks_per_sm > 0 && t.team_blocks_per_sm > 0,
            "{t:?}"
        );
    }
    // The kernels' bounds (kernels/gemv.cu) give every team kernel its plain
    // kernel's warps an SM in the sm_90 cubin.
    let dev = be.device();
    if dev.capability() == (9, 0) && dev.kernel_form() == KernelForm::Cubin {
        let unused: Vec<_> = kernels.iter().filter(|t| !t.used()).collect();
        assert!(
            unused.is_empty(),
            "team kernels at another occupancy: {unused:?}"
        );
    }
}

#[test]
fn team_kernels_equal_the_plain_kernels_bit_for_bit() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(11);
    let chains = [
        Epilogue::NONE,
        Epilogue::NONE.then_add().unwrap(),
        silu_mul_add(),
        // A chain without a fixed copy: the team kernel's generic chain.
        Epilogue::NONE.then_act(Activation::GeluTanh).unwrap(),
    ];
    let (dtype, mode) = (DType::Q4_0, ActQuant::Q8_0);
    // 4 rows a team, 3 teams a block: 4096 rows fill every team; 4 and 20
    // leave a block's last teams without rows; 257 ends in a team with one
    // row.
    for (m, k) in [(4096, 512), (4, 2304), (20, 2304), (257, 2304)] {
        let w = upload_weights(&be, &mut rng, dtype, m, k);
        let next = upload_weights(&be, &mut rng, dtype, m, k);
        let x = be.upload(&rng.vec_scaled(k, 2.0)).unwrap();
        let a = be.upload(&rng.vec_scaled(m, 1.0)).unwrap();
        let b = be.upload(&rng.vec_scaled(m, 1.0)).unwrap();
        // Quantized outputs only where the rows fill Q8_0 blocks.
        let mut q = (m % 32 == 0).then(|| be.alloc_acts(mode, m, 1).unwrap());
        for epi in &chains {
            let ops: Vec<&DeviceVec> = [&a, &b][2 - epi.n_operands()..].to_vec();
            // Plain call; the look-ahead at the blocks' start and end; an
            // output quantizer (the plain kernel either way).
            for variant in 0..4 {
                let mut outs = Vec::new();
                let mut codes = Vec::new();
                for teams in [true, false] {
                    be.set_options(LaunchOptions {
                        teams,
                        ..LaunchOptions::default()
                    });
                    let mut y = be.upload(&vec![f32::NAN; m]).unwrap();
                    let mut job = GemvJob::new(&w, &mut y).with_epilogue(epi, &ops);
                    if variant == 1 || variant == 2 {
                        let at = if variant == 1 {
                            AheadAt::Start
                        } else {
                            AheadAt::End
                        };
                        job = job.with_l2_ahead_at(&next, mode, next.bytes() / 2, at);
                    }
                    if let (3, Some(q)) = (variant, q.as_mut()) {
                        job = job.with_quantized_output(q);
                    }
                    common::reset_launches(&be);
                    be.gemv_batch(&x, 1, mode, &mut [job]).unwrap();
                    assert_eq!(common::launches(&be), 2, "quantizer and GEMV");
                    let y = download(&be, &y);
                    assert!(y.iter().all(|v| !v.is_nan()), "unwritten output");
                    outs.push(y);
                    if let (3, Some(q)) = (variant, q.as_ref()) {
                        codes.push(be.download_acts(q).unwrap());
                    }
                }
                let what = format!("{m} x {k} {:?} variant {variant}", epi.stages());
                assert_bits_eq(&outs[0], &outs[1], &what);
                if let [with, without] = &codes[..] {
                    assert_eq!(with, without, "{what}: quantized output");
                }
            }
        }
    }
    be.set_options(LaunchOptions::default());
}
