//! How each launch of a sequence on one stream orders itself against the
//! launch before it ([`Deps`]), and which GEMVs may overlap the launches
//! before them ([`overlap_deps`]).
//!
//! Every kernel of the crate is a programmatic dependent launch on sm_90:
//! it lets the next kernel start, and waits for the previous one
//! (`griddepcontrol.wait`: that grid complete, its writes visible) before
//! it touches shared data. Two facts make overlap safe without that wait:
//!
//! 1. A kernel completes only after it waited (early, or — an
//!    [`Deps::Independent`] GEMV — just before it exits), so a completed
//!    kernel implies that every kernel before it completed.
//! 2. A [`Deps::TriggerAfterWait`] GEMV lets the next kernel start only
//!    after its own wait, so once the next kernel runs, every kernel before
//!    that GEMV has completed. An independent GEMV lets the next one start
//!    at once, so the same holds through a run of them.
//!
//! So in a run `D, I1, …, In` of GEMVs where `D` triggers after its wait
//! and the `I`s are independent, `Ij` may run alongside `D, I1, …, Ij−1`
//! and nothing else: it is safe when it has no hazard (read after write,
//! write after read, write after write) with any of them. A device copy
//! (`cuMemcpyDtoDAsync`) or a kernel of another kind ends a run: those
//! always let the next kernel start before they wait.

use crate::tuning::OVERLAP_MAX_WEIGHT_BYTES;
use fused_core::placement::Region;

/// How a GEMV launch orders itself against the kernel before it on the
/// stream (`DEPS_*` in `kernels/common.cuh`; only GEMV kernels take it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Deps {
    /// Lets the next kernel start at once, waits for the previous kernel
    /// before it reads activations or operands or writes.
    #[default]
    Wait = 0,
    /// Waits first, then lets the next kernel start: while the next kernel
    /// runs, every kernel before this one has completed.
    TriggerAfterWait = 1,
    /// Touches nothing the kernels it may overlap touch in a conflicting
    /// way (see the module docs): works without waiting and waits only
    /// before it exits.
    Independent = 2,
}

/// What one launch of a sequence is, for [`overlap_deps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LaunchKind {
    /// A GEMV kernel short enough to gain from overlap
    /// ([`LaunchKind::of_gemv`]): takes any [`Deps`].
    Gemv,
    /// Another kernel, or a GEMV that is better not overlapped (it keeps
    /// [`Deps::Wait`]): lets the next start, then waits.
    Kernel,
    /// A device-to-device copy: ordered by the stream like a full barrier.
    Copy,
}

impl LaunchKind {
    /// The kind of a GEMV of `n_cols` activation columns that streams
    /// `weight_bytes` of weights (both matrices of a gated GEMV):
    /// [`LaunchKind::Gemv`], which may overlap, for one column over at most
    /// [`OVERLAP_MAX_WEIGHT_BYTES`]; [`LaunchKind::Kernel`], which waits,
    /// otherwise (the table's bound, `src/tuning.rs`).
    pub(crate) fn of_gemv(weight_bytes: u64, n_cols: usize) -> LaunchKind {
        if n_cols == 1 && weight_bytes <= OVERLAP_MAX_WEIGHT_BYTES {
            LaunchKind::Gemv
        } else {
            LaunchKind::Kernel
        }
    }
}

/// The device memory one launch reads and writes (GEMV weights, which no
/// launch writes, may be left out).
#[derive(Clone, Debug)]
pub(crate) struct Access<S> {
    pub(crate) kind: LaunchKind,
    pub(crate) reads: Vec<Region<S>>,
    pub(crate) writes: Vec<Region<S>>,
}

impl<S: PartialEq> Access<S> {
    /// Whether `self` and `other` running at the same time could change
    /// what either reads or leaves behind.
    pub(crate) fn conflicts(&self, other: &Access<S>) -> bool {
        let any =
            |a: &[Region<S>], b: &[Region<S>]| a.iter().any(|x| b.iter().any(|y| x.overlaps(y)));
        any(&self.reads, &other.writes)
            || any(&self.writes, &other.reads)
            || any(&self.writes, &other.writes)
    }
}

/// The [`Deps`] of each launch of `seq` (in stream order) so that every
/// GEMV that has no hazard with the run of GEMVs it would overlap (the
/// module docs) starts without waiting, and the GEMV that opens such a run
/// lets its successor start only after its own wait. Launches that are not
/// GEMVs get [`Deps::Wait`] (they ignore it).
pub(crate) fn overlap_deps<S: PartialEq>(seq: &[Access<S>]) -> Vec<Deps> {
    let mut deps = vec![Deps::Wait; seq.len()];
    // The open run: the index of its waiting GEMV, while the launches since
    // are all GEMVs.
    let mut run: Option<usize> = None;
    for (i, a) in seq.iter().enumerate() {
        if a.kind != LaunchKind::Gemv {
            run = None;
            continue;
        }
        if let Some(d) = run
            && seq[d..i].iter().all(|b| !a.conflicts(b))
        {
            deps[d] = Deps::TriggerAfterWait;
            deps[i] = Deps::Independent;
            continue;
        }
        run = Some(i);
    }
    deps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(slot: u8, offset: u64, size: u64) -> Region<u8> {
        Region { slot, offset, size }
    }

    fn gemv(reads: &[Region<u8>], writes: &[Region<u8>]) -> Access<u8> {
        Access {
            kind: LaunchKind::Gemv,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
        }
    }

    use Deps::{Independent as I, TriggerAfterWait as T, Wait as W};

    #[test]
    fn gemvs_over_one_input_with_their_own_outputs_overlap() {
        // q, k, v projections of one (quantized) input.
        let x = r(0, 0, 64);
        let seq = [
            gemv(&[x], &[r(1, 0, 64)]),
            gemv(&[x], &[r(1, 64, 16)]),
            gemv(&[x], &[r(1, 80, 16)]),
        ];
        assert_eq!(overlap_deps(&seq), [T, I, I]);
    }

    #[test]
    fn a_gemv_reading_what_the_run_writes_waits_and_opens_a_run() {
        let seq = [
            gemv(&[r(0, 0, 64)], &[r(1, 0, 64)]),
            // Reads the first one's output: waits.
            gemv(&[r(1, 0, 64)], &[r(2, 0, 64)]),
            // Independent of the second (the first is complete when it runs).
            gemv(&[r(1, 0, 64)], &[r(3, 0, 64)]),
        ];
        assert_eq!(overlap_deps(&seq), [W, T, I]);
    }

    #[test]
    fn every_hazard_with_any_launch_of_the_run_makes_a_gemv_wait() {
        let base = [
            gemv(&[r(0, 0, 64)], &[r(1, 0, 64)]),
            gemv(&[r(0, 0, 64)], &[r(2, 0, 64)]),
        ];
        let cases = [
            // Write after read: overwrites the run's first input.
            gemv(&[r(5, 0, 4)], &[r(0, 60, 8)]),
            // Write after write with the first of the run.
            gemv(&[r(5, 0, 4)], &[r(1, 63, 1)]),
            // Read after write of the run's second.
            gemv(&[r(2, 0, 4)], &[r(6, 0, 4)]),
        ];
        for c in cases {
            let seq = [base[0].clone(), base[1].clone(), c];
            assert_eq!(overlap_deps(&seq), [T, I, W]);
        }
        // Touching regions only: no hazard.
        let seq = [
            base[0].clone(),
            base[1].clone(),
            gemv(&[r(1, 64, 4)], &[r(0, 64, 4)]),
        ];
        assert_eq!(overlap_deps(&seq), [T, I, I]);
    }

    #[test]
    fn copies_and_other_kernels_end_a_run() {
        let other = |kind| Access {
            kind,
            reads: vec![r(7, 0, 4)],
            writes: vec![r(8, 0, 4)],
        };
        for kind in [LaunchKind::Copy, LaunchKind::Kernel] {
            let seq = [
                gemv(&[r(0, 0, 64)], &[r(1, 0, 64)]),
                other(kind),
                gemv(&[r(0, 0, 64)], &[r(2, 0, 64)]),
                gemv(&[r(0, 0, 64)], &[r(3, 0, 64)]),
            ];
            assert_eq!(overlap_deps(&seq), [W, W, T, I], "{kind:?}");
        }
        assert!(overlap_deps::<u8>(&[]).is_empty());
    }

    #[test]
    fn only_short_one_column_gemvs_may_overlap() {
        let max = OVERLAP_MAX_WEIGHT_BYTES;
        assert_eq!(LaunchKind::of_gemv(0, 1), LaunchKind::Gemv);
        assert_eq!(LaunchKind::of_gemv(max, 1), LaunchKind::Gemv);
        assert_eq!(LaunchKind::of_gemv(max + 1, 1), LaunchKind::Kernel);
        for n_cols in [2, 8] {
            assert_eq!(LaunchKind::of_gemv(1024, n_cols), LaunchKind::Kernel);
        }
    }
}
