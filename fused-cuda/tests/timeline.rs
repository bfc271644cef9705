//! Traced GEMV chains (`CudaBackend::trace_gemv_chain`) on the first CUDA
//! device (skipped without one): the traced kernels' outputs equal the
//! plain kernels' bit for bit, every block's times are in order and no call
//! is released before the call before it stored; kernels without a traced
//! copy, a look-ahead longer than the next weights and weights of another
//! width than the activations are refused before anything runs, and no
//! weights give an empty timeline.

mod common;

use common::{Rng, assert_bits_eq, backend_or_skip, download, upload_weights};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_cuda::{CudaError, DeviceWeights, Knob, LaunchOptions, Tuning};

#[test]
fn traced_chains_compute_the_plain_results_in_order() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(12);
    // Q4_0 (4 rows a block, plain and 3 teams) and Q4_K at fewer than
    // 16384 rows (4 rows a block in 2 row groups, the default, and the
    // plain 2-row kernel); 257 and 1026 rows leave a partial last block.
    let cases = [
        (DType::Q4_0, ActQuant::Q8_0, 1024, 2304, false, None, 4),
        (DType::Q4_0, ActQuant::Q8_0, 257, 2304, true, None, 4),
        (DType::Q4_0, ActQuant::Q8_0, 1024, 2304, true, None, 4),
        (DType::Q4_K, ActQuant::Q8_K, 1026, 2304, false, None, 4),
        (DType::Q4_K, ActQuant::Q8_K, 1026, 2304, false, Some(2), 2),
    ];
    for (dtype, mode, m, k, teams, int_rows, rows_a_block) in cases {
        let tuning = match int_rows {
            Some(r) => Tuning::default().with(Knob::IntRows(r)).unwrap(),
            None => Tuning::default(),
        };
        be.set_tuning(tuning);
        be.set_options(LaunchOptions {
            teams,
            ..LaunchOptions::default()
        });
        let ws: Vec<DeviceWeights> = (0..3)
            .map(|_| upload_weights(&be, &mut rng, dtype, m, k))
            .collect();
        let x = be.upload(&rng.vec_scaled(k, 2.0)).unwrap();
        let q = be.quantize_acts(mode, &x, 1).unwrap();
        let chain: Vec<&DeviceWeights> = ws.iter().chain(ws.iter()).collect();
        let mut y = be.upload(&vec![f32::NAN; m]).unwrap();
        common::reset_launches(&be);
        // Asking L2 for the next weights on the 257-row case (its blocks'
        // share of the bytes uneven).
        let ahead = if m == 257 { ws[0].bytes() / 2 } else { 0 };
        let t = be.trace_gemv_chain(&chain, &q, ahead, &mut y).unwrap();
        let what = format!("{dtype} {m} x {k}, teams {teams}, rows {int_rows:?}");
        assert_eq!(common::launches(&be), chain.len() as u64, "{what}");
        assert_eq!(t.calls.len(), chain.len(), "{what}");
        for call in &t.calls {
            assert_eq!(call.len(), m.div_ceil(rows_a_block), "{what}");
            assert!(
                call.iter().all(|b| b.start > 0),
                "{what}: a block wrote no time"
            );
        }
        assert!(t.is_ordered(), "{what}: {:?}", &t.calls[..2]);
        assert_eq!(t.handoffs().len(), chain.len() - 1);
        // The last call's output against the plain kernel on the same
        // weights.
        let traced = download(&be, &y);
        let mut plain = be.upload(&vec![f32::NAN; m]).unwrap();
        be.gemv_quantized_batch(
            &q,
            &mut [fused_cuda::GemvJob::new(chain[chain.len() - 1], &mut plain)],
        )
        .unwrap();
        assert_bits_eq(&traced, &download(&be, &plain), &what);
        println!(
            "{what}: timer step {} ns, handoffs {:?}",
            t.timer_step(),
            &t.handoffs()[..2]
        );
    }
    be.set_tuning(Tuning::default());
}

#[test]
fn kernels_without_a_traced_copy_are_refused_before_anything_runs() {
    let Some(be) = backend_or_skip() else { return };
    let mut rng = Rng::new(13);
    // Q8_0's one-column kernel has no traced copy; nor has Q4_K's 4-row one
    // (from 16384 rows).
    for (dtype, mode, m) in [
        (DType::Q8_0, ActQuant::Q8_0, 64),
        (DType::Q4_K, ActQuant::Q8_K, 16386),
    ] {
        let k = 256;
        let w = upload_weights(&be, &mut rng, dtype, m, k);
        let x = be.upload(&rng.vec_scaled(k, 1.0)).unwrap();
        let q = be.quantize_acts(mode, &x, 1).unwrap();
        let mut y = be.alloc(m).unwrap();
        common::reset_launches(&be);
        let e = be.trace_gemv_chain(&[&w, &w], &q, 0, &mut y).unwrap_err();
        assert!(matches!(e, CudaError::Core(_)), "{dtype}: {e:?}");
        assert_eq!(
            common::launches(&be),
            0,
            "{dtype}: launched before refusing"
        );
    }
    // Q4_0: a look-ahead longer than the next weights, and weights whose
    // columns are not the activations' length, are refused; no weights is
    // an empty timeline.
    let (m, k) = (64, 256);
    let w = upload_weights(&be, &mut rng, DType::Q4_0, m, k);
    let wide = upload_weights(&be, &mut rng, DType::Q4_0, m, 2 * k);
    let x = be.upload(&rng.vec_scaled(k, 1.0)).unwrap();
    let q = be.quantize_acts(ActQuant::Q8_0, &x, 1).unwrap();
    let mut y = be.alloc(m).unwrap();
    common::reset_launches(&be);
    let too_far = w.bytes() + 4096;
    for (chain, ahead) in [([&w, &w], too_far), ([&w, &wide], 0)] {
        let e = be.trace_gemv_chain(&chain, &q, ahead, &mut y).unwrap_err();
        assert!(matches!(e, CudaError::Core(_)), "{e:?}");
    }
    let empty = be.trace_gemv_chain(&[], &q, 0, &mut y).unwrap();
    assert!(empty.calls.is_empty());
    assert_eq!(common::launches(&be), 0, "launched before refusing");
}
