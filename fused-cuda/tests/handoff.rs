//! The handoff chains (`CudaDevice::handoff_chain`): every ordered way of
//! waiting for the previous kernel leaves the vector the host computes, at
//! grids of one block to several waves, and bad sizes are refused.

mod common;

use common::{Rng, backend_or_skip};
use fused_cuda::{HANDOFF_MAX_BLOCKS, HANDOFF_MAX_KERNELS, Handoff, handoff_expected};

/// A short head start: the chains here are checked, not timed.
const HEAD_START: u64 = 10_000;

#[test]
fn every_ordered_handoff_leaves_the_hosts_vector() {
    let Some(be) = backend_or_skip() else { return };
    let dev = be.device();
    let mut rng = Rng::new(0x4A4D);
    for blocks in [1usize, 7, 132, 1056, 4096] {
        let input: Vec<u32> = (0..blocks).map(|_| rng.next_u64() as u32).collect();
        for kernels in [1usize, 2, 33] {
            let want = handoff_expected(&input, kernels);
            for handoff in Handoff::ALL.into_iter().filter(|h| h.ordered()) {
                let run = dev
                    .handoff_chain(handoff, kernels, &input, HEAD_START)
                    .unwrap();
                assert_eq!(
                    run.result, want,
                    "{handoff:?}, {blocks} blocks, {kernels} kernels"
                );
                assert!(run.micros_per_kernel > 0.0, "{handoff:?}: no time");
            }
        }
    }
}

#[test]
fn the_unordered_chain_runs_to_its_end() {
    let Some(be) = backend_or_skip() else { return };
    let run = be
        .device()
        .handoff_chain(Handoff::Unordered, 16, &[1, 2, 3], HEAD_START)
        .unwrap();
    assert_eq!(run.result.len(), 3);
}

#[test]
fn bad_chain_sizes_are_refused() {
    let Some(be) = backend_or_skip() else { return };
    let dev = be.device();
    let too_many = vec![0u32; HANDOFF_MAX_BLOCKS + 1];
    for (kernels, input) in [
        (1, &[][..]),
        (0, &[1u32][..]),
        (HANDOFF_MAX_KERNELS + 1, &[1u32][..]),
        (1, &too_many[..]),
    ] {
        let e = dev
            .handoff_chain(Handoff::Grid, kernels, input, HEAD_START)
            .unwrap_err();
        assert!(
            e.to_string().contains("handoff chain"),
            "{kernels} kernels, {} blocks: {e}",
            input.len()
        );
    }
}

#[test]
fn the_host_chain_follows_the_kernels_formula() {
    // One kernel over [1, 2]: each block's 128 threads read elements
    // b, b + 1, … mod 2, 64 of each: sum 192, out[b] = 576 + b + 1.
    assert_eq!(handoff_expected(&[1, 2], 1), vec![577, 578]);
    // Two: sum 64·577 + 64·578 = 73920, out[b] = 221760 + b + 1.
    assert_eq!(handoff_expected(&[1, 2], 2), vec![221_761, 221_762]);
    // Wrapping: 64·(2^32 − 1) + 64·1 = 0 mod 2^32.
    assert_eq!(handoff_expected(&[u32::MAX, 1], 1), vec![1, 2]);
    // 256 elements: stride 2, block b reads b, b + 2, …, b + 254.
    let input: Vec<u32> = (0..256).collect();
    let out = handoff_expected(&input, 1);
    let sum0: u32 = (0..128).map(|t| 2 * t).sum();
    assert_eq!(out[0], 3 * sum0 + 1);
    assert_eq!(out[1], 3 * (sum0 + 128) + 2);
}
