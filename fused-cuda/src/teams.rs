//! GEMV kernels of several teams a block.
//!
//! A dependent launch's handoff grows with its grid's blocks: on the H200
//! chains of tiny kernels took 1.47 µs a kernel at 132 blocks and 2.86 µs
//! at 1056 (BENCHMARKS.md, the handoff table). The default one-column Q4_0
//! integer kernel launches one block of 4 rows for every 4 rows (1024 blocks
//! at 4096 rows), so it also comes with 3 *teams* a block (`Team` in
//! `kernels/common.cuh`, `_t3` kernels in `kernels/gemv.cu`): each team of
//! 128 threads computes what one block of the plain kernel does, with its
//! own barrier, in a grid of a third as many blocks, at the plain kernel's
//! warps an SM. On the H200 an earlier build of it ran 1.5–2.5 % faster at
//! 4096 × 14336 and no slower at 32768 × 8192; the same for Q8_0 and Q4_K
//! did not pay (not kept). The sums are the plain kernel's, in the same
//! order: the same bits. The lab's `Knob::Teams` turns it on (off by
//! default until this build has run on a GPU).
//!
//! A team kernel runs only where the device fits as many of its teams on an
//! SM as blocks of the plain kernel ([`TeamKernels::probe`]), which the
//! kernels' bounds arrange for the H200's cubin; and never for a launch that
//! quantizes its output (that counts whole blocks of the plain kernel).

use crate::error::CudaError;
use crate::fixed_epi::FixedChain;
use crate::params::GEMV_BLOCK as TEAM_THREADS;
use std::borrow::Cow;

/// A GEMV kernel that also comes with several teams a block and whether
/// this device runs that kernel: only where it fits as many teams on an
/// SM as the plain kernel blocks (the same warps an SM), else launches run
/// the plain kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeamKernel {
    /// The plain kernel (or one of its fixed-chain copies).
    pub kernel: String,
    /// Teams of 128 threads a block of the team kernel (`<kernel>_t<teams>`).
    pub teams: u32,
    /// Blocks per SM of `kernel` (128 threads) on this device.
    pub kernel_blocks_per_sm: u32,
    /// Blocks per SM of the team kernel on this device.
    pub team_blocks_per_sm: u32,
}

impl TeamKernel {
    /// Whether launches run the team kernel (as many teams an SM as blocks
    /// of the plain kernel).
    pub fn used(&self) -> bool {
        self.team_blocks_per_sm * self.teams == self.kernel_blocks_per_sm
    }
}

/// The one-column kernels that come with teams, and how many a block
/// (`GEMVQ_TEAM_KERNEL` in `kernels/gemv.cu`); each kernel's fixed-chain
/// copies (`src/fixed_epi.rs`) come with them too.
pub(crate) const KERNELS_WITH_TEAMS: [(&str, u32); 1] = [("fused_gemvq_q4_0_r4_c1_u1", 3)];

/// The name of `kernel`'s kernel of `teams` teams a block.
pub(crate) fn team_kernel_name(kernel: &str, teams: u32) -> String {
    format!("{kernel}_t{teams}")
}

/// Every kernel with teams, its copies included, and whether this device
/// runs them.
#[derive(Clone, Debug, Default)]
pub(crate) struct TeamKernels {
    kernels: Vec<TeamKernel>,
}

impl TeamKernels {
    /// Every kernel of [`KERNELS_WITH_TEAMS`] and its fixed-chain copies,
    /// with the blocks per SM `blocks_per_sm` gives for a kernel's name at a
    /// block size (the driver's occupancy).
    pub(crate) fn probe(
        blocks_per_sm: impl Fn(&str, u32) -> Result<u32, CudaError>,
    ) -> Result<TeamKernels, CudaError> {
        let mut kernels = Vec::new();
        for (base, teams) in KERNELS_WITH_TEAMS {
            let names = std::iter::once(base.to_string())
                .chain(FixedChain::ALL.into_iter().map(|c| c.copy_of(base)));
            for kernel in names {
                let team = team_kernel_name(&kernel, teams);
                kernels.push(TeamKernel {
                    kernel_blocks_per_sm: blocks_per_sm(&kernel, TEAM_THREADS)?,
                    team_blocks_per_sm: blocks_per_sm(&team, TEAM_THREADS * teams)?,
                    kernel,
                    teams,
                });
            }
        }
        Ok(TeamKernels { kernels })
    }

    /// Every kernel with teams (for reports).
    pub(crate) fn all(&self) -> &[TeamKernel] {
        &self.kernels
    }

    /// The teams a block with which launches of `kernel` may run, if any.
    fn teams_for(&self, kernel: &str) -> Option<u32> {
        self.kernels
            .iter()
            .find(|t| t.kernel == kernel && t.used())
            .map(|t| t.teams)
    }
}

/// The kernel, grid and block size that run a launch of kernel `name` (the
/// plain kernel or a fixed-chain copy) over `grid` blocks of `block`
/// threads: its kernel of several teams a block where `on` (the tuning's
/// teams), the launch quantizes no output (`quantizes_output`) and `kernels`
/// runs one for `name` (a grid that many times smaller, as many times more
/// threads a block); else the launch as it is.
pub(crate) fn launch_shape<'a>(
    name: Cow<'a, str>,
    grid: u32,
    block: u32,
    quantizes_output: bool,
    on: bool,
    kernels: &TeamKernels,
) -> (Cow<'a, str>, u32, u32) {
    let teams = kernels.teams_for(&name).filter(|_| on && !quantizes_output);
    match teams {
        Some(g) => (
            Cow::Owned(team_kernel_name(&name, g)),
            grid.div_ceil(g),
            block * g,
        ),
        None => (name, grid, block),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q4_0: &str = "fused_gemvq_q4_0_r4_c1_u1";

    /// Kernels probed with 9 blocks an SM for every plain kernel and copy,
    /// 3 for every team kernel but `odd`'s (2).
    fn probed(odd: &str) -> TeamKernels {
        let odd_team = team_kernel_name(odd, 3);
        TeamKernels::probe(|k, threads| {
            Ok(match (k.ends_with("_t3"), k == odd_team) {
                (false, _) => {
                    assert_eq!(threads, TEAM_THREADS, "{k}");
                    9
                }
                (true, odd) => {
                    assert_eq!(threads, 3 * TEAM_THREADS, "{k}");
                    if odd { 2 } else { 3 }
                }
            })
        })
        .unwrap()
    }

    fn shape(name: &str, qout: bool, on: bool, k: &TeamKernels) -> (String, u32, u32) {
        let (n, g, b) = launch_shape(Cow::Borrowed(name), 1024, 128, qout, on, k);
        (n.into_owned(), g, b)
    }

    #[test]
    fn every_kernel_and_copy_with_teams_is_probed() {
        let k = probed("none");
        let names: Vec<&str> = k.all().iter().map(|t| t.kernel.as_str()).collect();
        assert_eq!(
            names,
            [
                Q4_0,
                "fused_gemvq_q4_0_r4_c1_u1_eadd",
                "fused_gemvq_q4_0_r4_c1_u1_esilu_mul_add"
            ]
        );
        assert!(k.all().iter().all(|t| t.used() && t.teams == 3));
    }

    #[test]
    fn a_launch_takes_teams_only_where_they_exist_and_may_run() {
        let (on, off) = (true, false);
        let copy = FixedChain::SiluMulAdd.copy_of(Q4_0);
        let k = probed("none");
        assert_eq!(shape(Q4_0, false, on, &k), (format!("{Q4_0}_t3"), 342, 384));
        assert_eq!(
            shape(&copy, false, on, &k),
            (format!("{copy}_t3"), 342, 384)
        );
        // Off, with an output quantizer, or a kernel without teams: as is.
        assert_eq!(shape(Q4_0, false, off, &k), (Q4_0.into(), 1024, 128));
        assert_eq!(shape(Q4_0, true, on, &k), (Q4_0.into(), 1024, 128));
        let q8 = "fused_gemvq_q8_0_r2_c1_u1";
        assert_eq!(shape(q8, false, on, &k), (q8.into(), 1024, 128));
        // A team kernel at another occupancy than its plain kernel's
        // (6 teams an SM against 9 blocks): the plain kernel, for that
        // kernel only.
        let k = probed(&copy);
        assert!(!k.all().iter().find(|t| t.kernel == copy).unwrap().used());
        assert_eq!(shape(&copy, false, on, &k), (copy.clone(), 1024, 128));
        assert_eq!(shape(Q4_0, false, on, &k).1, 342);
        // Nothing probed (the stub's state): nothing runs with teams.
        let none = TeamKernels::default();
        assert_eq!(shape(Q4_0, false, on, &none), (Q4_0.into(), 1024, 128));
    }

    #[test]
    fn the_kernel_source_instantiates_every_team_kernel() {
        // One macro line a kernel and copy; a launch of a missing one fails.
        let src = include_str!("../kernels/gemv.cu");
        for (base, teams) in KERNELS_WITH_TEAMS {
            let rest = base.strip_prefix("fused_gemvq_").expect("an integer GEMV");
            let (fmt, shape) = rest.split_once("_r").expect("rows in the name");
            let rows = shape.split('_').next().expect("rows");
            let head = format!(
                "GEMVQ_TEAM_KERNEL({fmt}, FMT_{}, {rows}, {teams}, ",
                fmt.to_uppercase()
            );
            for (suffix, epi) in [
                ("", "GenericEpi"),
                ("_eadd", "EpiAdd"),
                ("_esilu_mul_add", "EpiSiluMulAdd"),
            ] {
                let found = src
                    .lines()
                    .any(|l| l.starts_with(&head) && l.ends_with(&format!(", {suffix}, {epi})")));
                assert!(
                    found,
                    "{base}{suffix}_t{teams}: no `{head}…` line in gemv.cu"
                );
            }
        }
    }
}
