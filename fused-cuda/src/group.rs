//! Group launches: independent one-column GEMVs of one kernel shape run as
//! one grid (`Group` and the `fused_gemv[q]_group_*` kernels in
//! `kernels/gemv.cu`), up to [`GROUP_MAX`] of them.
//!
//! A GEMV of a few thousand rows is short next to its fixed costs: the grid
//! starts, fills the SMs, and drains to its last block. Launched one after
//! another (even overlapping, `schedule.rs`), every job pays them; in one
//! grid the blocks of the next job fill the SMs while the last blocks of
//! the one before finish, and only the group pays the drain. Each block
//! computes exactly what the same block of its job launched alone would,
//! so grouping changes no bit of any output.

use crate::error::CudaError;
use crate::launch::Launch;
use crate::params::{GROUP_MAX, GemvParams, GemvQParams, GroupJobs, GroupParams};
use crate::schedule::{Access, LaunchKind};
use crate::tuning::{GROUP_MAX_DEQUANT_JOB_BLOCKS, GROUP_MAX_INT_JOB_BLOCKS};
use fused_core::{DType, Error};

/// The group kernel that runs `l`'s blocks, where there is one: GEMVs of
/// one column without GLU (integer ones of at most
/// [`GROUP_MAX_INT_JOB_BLOCKS`] blocks, float-activation ones of quantized
/// weights of at most [`GROUP_MAX_DEQUANT_JOB_BLOCKS`]),
/// `fused_gemv[q]_…_c1[_u1]` → `fused_gemv[q]_group_…_c1[_u1]`.
fn group_kernel(l: &Launch) -> Option<String> {
    let (name, prefix, max_blocks) = match l {
        Launch::Gemv {
            name,
            params,
            dtype,
            ..
        } if params.w_up == 0 => {
            let float = matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
            let max = if float {
                u32::MAX
            } else {
                GROUP_MAX_DEQUANT_JOB_BLOCKS
            };
            (name, "fused_gemv_", max)
        }
        Launch::GemvQ { name, params, .. } if params.w_up == 0 => {
            (name, "fused_gemvq_", GROUP_MAX_INT_JOB_BLOCKS)
        }
        _ => return None,
    };
    if l.grid() > max_blocks {
        return None;
    }
    let one_col = name.ends_with("_c1") || name.ends_with("_c1_u1");
    let rest = name.strip_prefix(prefix)?;
    one_col.then(|| format!("{prefix}group_{rest}"))
}

/// The header and job array of a group over `jobs` (1 to [`GROUP_MAX`]),
/// job `i` taking `grids[i]` blocks; the total grid.
fn group_params<P: Copy>(jobs: &[P], grids: &[u32]) -> Result<(GroupParams<P>, u32), CudaError> {
    let last = *jobs.last().expect("a group has a job");
    let mut g = GroupParams {
        n: jobs.len() as u32,
        first_block: [0; GROUP_MAX],
        pad: 0,
        job: [last; GROUP_MAX],
    };
    let mut total = 0u32;
    for (i, (job, grid)) in jobs.iter().zip(grids).enumerate() {
        g.first_block[i] = total;
        g.job[i] = *job;
        total = total.checked_add(*grid).ok_or(Error::Overflow {
            what: "group launch grid",
        })?;
    }
    Ok((g, total))
}

/// One group launch over the run `members` (2 to [`GROUP_MAX`] launches of
/// the group kernel `name`).
fn group_of(members: &[Launch], name: String) -> Result<Launch, CudaError> {
    let grids: Vec<u32> = members.iter().map(Launch::grid).collect();
    let (jobs, grid) = if let Launch::Gemv { .. } = members[0] {
        let p: Vec<GemvParams> = members.iter().filter_map(Launch::gemv_params).collect();
        let (g, grid) = group_params(&p, &grids)?;
        (GroupJobs::Float(Box::new(g)), grid)
    } else {
        let p: Vec<GemvQParams> = members.iter().filter_map(Launch::gemvq_params).collect();
        let (g, grid) = group_params(&p, &grids)?;
        (GroupJobs::Int(Box::new(g)), grid)
    };
    let weight_bytes = members.iter().map(Launch::weight_bytes).sum();
    Ok(Launch::Group {
        name,
        grid,
        jobs,
        kind: LaunchKind::of_gemv(weight_bytes, 1),
        weight_bytes,
    })
}

/// `launches` in stream order, each with what it reads and writes
/// (`access`, same order), with every run of consecutive launches that
/// share a group kernel and have no hazard with each other (in a group they
/// run at once), cut at [`GROUP_MAX`], replaced by one group launch that
/// reads and writes what they all do. Each group waits for the launch before
/// it as its first job would.
pub(crate) fn group_launches<S: PartialEq + Clone>(
    launches: Vec<Launch>,
    access: Vec<Access<S>>,
) -> Result<(Vec<Launch>, Vec<Access<S>>), CudaError> {
    assert_eq!(launches.len(), access.len(), "an access per launch");
    let names: Vec<Option<String>> = launches.iter().map(group_kernel).collect();
    let (mut out, mut out_access) = (Vec::new(), Vec::new());
    let mut start = 0;
    while start < launches.len() {
        let mut end = start + 1;
        while end < launches.len()
            && end - start < GROUP_MAX
            && names[start].is_some()
            && names[end] == names[start]
            && access[start..end]
                .iter()
                .all(|a| !a.conflicts(&access[end]))
        {
            end += 1;
        }
        match &names[start] {
            Some(name) if end - start > 1 => {
                let members = &launches[start..end];
                let l = group_of(members, name.clone())?;
                out_access.push(Access {
                    kind: l.kind(),
                    reads: access[start..end]
                        .iter()
                        .flat_map(|a| a.reads.clone())
                        .collect(),
                    writes: access[start..end]
                        .iter()
                        .flat_map(|a| a.writes.clone())
                        .collect(),
                });
                out.push(l);
            }
            _ => {
                out.push(launches[start].clone());
                out_access.push(access[start].clone());
            }
        }
        start = end;
    }
    Ok((out, out_access))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::Tuning;

    /// The tuned table.
    const T: Tuning = Tuning::DEFAULT;
    use crate::launch::GemvShape;
    use crate::params::EpiParams;
    use crate::qacts::QactsLayout;
    use crate::schedule::Deps;
    use fused_core::acts::ActQuant;
    use fused_core::element::Activation;
    use fused_core::epilogue::Epilogue;
    use fused_core::placement::Region;

    const ID: Activation = Activation::Identity;

    fn epi() -> EpiParams {
        EpiParams::new(&Epilogue::NONE, |_| 0)
    }

    /// An integer GEMV of `rows` rows of K = 4096, y at `y`, gated where `glu`.
    fn q(dtype: DType, rows: usize, n_cols: usize, glu: bool, y: u64) -> Launch {
        let mode = ActQuant::ggml(dtype);
        let layout = QactsLayout::new(mode, 4096, n_cols).unwrap();
        let up = glu.then_some(9);
        Launch::gemv_q(&T, dtype, rows, &layout, 1, up, ID, 2, y, epi())
            .unwrap()
            .unwrap()
    }

    fn f(dtype: DType, rows: usize, y: u64) -> Launch {
        let shape = GemvShape {
            dtype,
            rows,
            cols: 4096,
            row_bytes: dtype.row_bytes(4096).unwrap(),
            n_cols: 1,
        };
        Launch::gemv(&T, shape, 1, None, ID, 2, y, epi())
            .unwrap()
            .unwrap()
    }

    fn region(slot: u8, offset: u64) -> Region<u8> {
        Region {
            slot,
            offset,
            size: 64,
        }
    }

    /// Launches that all read buffer 0 and each write their own part of 1.
    fn independent(ls: &[Launch]) -> Vec<Access<u8>> {
        (0..ls.len() as u64)
            .zip(ls)
            .map(|(i, l)| Access {
                kind: l.kind(),
                reads: vec![region(0, 0)],
                writes: vec![region(1, 64 * i)],
            })
            .collect()
    }

    /// The inputs each output launch covers, as job counts.
    fn sizes(ls: &[Launch]) -> Vec<u32> {
        ls.iter()
            .map(|l| match l {
                Launch::Group { jobs, .. } => match jobs {
                    GroupJobs::Float(g) => g.n,
                    GroupJobs::Int(g) => g.n,
                },
                _ => 1,
            })
            .collect()
    }

    #[test]
    fn runs_of_one_kernel_become_groups_of_at_most_eight() {
        let ls: Vec<Launch> = (0..10)
            .map(|i| q(DType::Q4_0, 4096, 1, false, 100 + i))
            .collect();
        let (g, access) = group_launches(ls.clone(), independent(&ls)).unwrap();
        assert_eq!(sizes(&g), [8, 2]);
        let Launch::Group {
            name, grid, jobs, ..
        } = &g[0]
        else {
            panic!("a group: {:?}", g[0]);
        };
        let Launch::GemvQ { name: single, .. } = &ls[0] else {
            panic!()
        };
        assert_eq!(
            name.as_str(),
            single.replacen("fused_gemvq_", "fused_gemvq_group_", 1)
        );
        assert!(name.starts_with("fused_gemvq_group_q4_0_r") && name.ends_with("_c1_u1"));
        assert_eq!(*grid, 8 * ls[0].grid());
        let GroupJobs::Int(p) = jobs else { panic!() };
        assert_eq!(p.n, 8);
        for i in 0..8 {
            assert_eq!(p.first_block[i], i as u32 * ls[0].grid());
            assert_eq!(p.job[i].y, 100 + i as u64, "job {i} keeps its output");
        }
        // The group reads and writes what its jobs do.
        assert_eq!(access.len(), 2);
        assert_eq!(access[0].writes.len(), 8);
        assert_eq!(access[1].writes, [region(1, 64 * 8), region(1, 64 * 9)]);
        assert_eq!(access[0].reads.len(), 8);
    }

    #[test]
    fn different_kernels_glu_and_several_columns_stay_apart() {
        let ls = vec![
            q(DType::Q4_0, 4096, 1, false, 1),
            q(DType::Q8_0, 4096, 1, false, 2),
            q(DType::Q8_0, 1024, 1, false, 3),
            q(DType::Q8_0, 1024, 1, true, 4),
            q(DType::Q8_0, 1024, 1, true, 5),
            q(DType::Q8_0, 1024, 2, false, 6),
            q(DType::Q8_0, 1024, 2, false, 7),
            f(DType::F16, 1024, 8),
            f(DType::F16, 4096, 9),
        ];
        let (g, _) = group_launches(ls.clone(), independent(&ls)).unwrap();
        // Q8_0 of 4096 and 1024 rows share a kernel (and a group); the two
        // F16 GEMVs too, whose K picks the same shape.
        assert_eq!(sizes(&g), [1, 2, 1, 1, 1, 1, 2]);
        let Launch::Group { grid, jobs, .. } = &g[1] else {
            panic!()
        };
        let GroupJobs::Int(p) = jobs else { panic!() };
        assert_eq!((p.n, p.first_block[1]), (2, 4096 / 2));
        assert_eq!(*grid, (4096 + 1024) / 2);
        let Launch::Group { name, jobs, .. } = &g[6] else {
            panic!()
        };
        assert!(name.starts_with("fused_gemv_group_f16_"), "{name}");
        assert!(matches!(jobs, GroupJobs::Float(_)));
        for l in &g[2..6] {
            assert!(!matches!(l, Launch::Group { .. }), "{l:?}");
        }
    }

    #[test]
    fn every_group_kernel_a_launch_names_exists() {
        let has = crate::device::gemv_has;
        let mut groups = 0;
        for dtype in crate::GEMV_DTYPES {
            for rows in [64, 4096, 20000] {
                let mut ls = vec![f(dtype, rows, 1)];
                if ActQuant::ggml(dtype) != ActQuant::F32 {
                    ls.push(q(dtype, rows, 1, false, 1));
                }
                for l in &ls {
                    let (Launch::Gemv { name, .. } | Launch::GemvQ { name, .. }) = l else {
                        panic!()
                    };
                    assert!(has(name), "{name}");
                    if let Some(g) = group_kernel(l) {
                        assert!(has(&g), "{g}, the group kernel of {name}");
                        groups += 1;
                    }
                }
            }
        }
        assert!(groups > 20, "{groups} group kernels checked");
    }

    #[test]
    fn long_gemvs_stay_alone() {
        // One column: Q4_0 takes 4 rows a block on quantized activations, 2
        // on f32 ones.
        let int_rows = 4 * GROUP_MAX_INT_JOB_BLOCKS as usize;
        for (rows, want) in [(int_rows, vec![2]), (int_rows + 1, vec![1, 1])] {
            let ls: Vec<Launch> = (0..2).map(|i| q(DType::Q4_0, rows, 1, false, i)).collect();
            let (g, _) = group_launches(ls.clone(), independent(&ls)).unwrap();
            assert_eq!(sizes(&g), want, "{rows} rows");
        }
        let float_rows = 2 * GROUP_MAX_DEQUANT_JOB_BLOCKS as usize;
        for (rows, want) in [(float_rows, vec![2]), (float_rows + 1, vec![1, 1])] {
            let ls: Vec<Launch> = (0..2).map(|i| f(DType::Q4_0, rows, i)).collect();
            let (g, _) = group_launches(ls.clone(), independent(&ls)).unwrap();
            assert_eq!(sizes(&g), want, "{rows} rows, f32 activations");
        }
        // Float weights group at any length.
        let ls: Vec<Launch> = (0..2).map(|i| f(DType::F16, 65536, i)).collect();
        let (g, _) = group_launches(ls.clone(), independent(&ls)).unwrap();
        assert_eq!(sizes(&g), [2]);
    }

    #[test]
    fn a_launch_with_a_hazard_against_the_run_starts_a_new_one() {
        let ls: Vec<Launch> = (0..4).map(|i| q(DType::Q4_0, 256, 1, false, i)).collect();
        let mut access = independent(&ls);
        // The third reads what the first writes: it cannot run alongside.
        access[2].reads.push(region(1, 0));
        let (g, out) = group_launches(ls, access).unwrap();
        assert_eq!(sizes(&g), [2, 2]);
        assert!(out[1].reads.contains(&region(1, 0)));
    }

    #[test]
    fn a_group_overlaps_by_the_weights_of_all_its_jobs() {
        // Q4_0 rows of K = 4096: 2304 bytes; 16384 rows twice is 72 MiB.
        for (rows, want) in [(4096, LaunchKind::Gemv), (16384, LaunchKind::Kernel)] {
            let ls: Vec<Launch> = (0..2).map(|i| q(DType::Q4_0, rows, 1, false, i)).collect();
            assert!(ls.iter().all(|l| l.kind() == LaunchKind::Gemv));
            let (g, access) = group_launches(ls.clone(), independent(&ls)).unwrap();
            assert_eq!(g[0].kind(), want, "{rows} rows");
            assert_eq!(access[0].kind, want);
            assert_eq!(g[0].weight_bytes(), 2 * 2304 * rows as u64);
        }
    }

    #[test]
    fn deps_and_early_operands_reach_every_job() {
        let ls: Vec<Launch> = (0..3).map(|i| f(DType::F32, 256, i)).collect();
        let (mut g, _) = group_launches(ls.clone(), independent(&ls)).unwrap();
        g[0].set_deps(Deps::TriggerAfterWait);
        let Launch::Group { mut jobs, .. } = g.remove(0) else {
            panic!()
        };
        assert_eq!(jobs.deps(), Deps::TriggerAfterWait);
        jobs.set_early(true);
        let GroupJobs::Float(p) = &jobs else { panic!() };
        assert!(p.job.iter().all(|j| j.deps == Deps::TriggerAfterWait));
    }
}
