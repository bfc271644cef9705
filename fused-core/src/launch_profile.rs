//! Where one run of a resident plan spends its time, launch by launch: the
//! record a backend's profiler returns ([`LaunchTime`], one per kernel
//! launch or dispatch, each timed alone) and [`kernel_totals`], which sums
//! those by kernel. The backends' profilers (lab features) separate every
//! two launches, so the times say which kernels a run is made of, not how
//! well they overlap. A leave-out profile answers the other question: the
//! whole run replayed without one kernel's launches ([`leave_out_sets`],
//! [`LeftOutTime`]) takes less by what those launches cost where they
//! overlap with the rest.

use alloc::string::String;
use alloc::vec::Vec;

/// A device plan that profiles its own run, the same way on every
/// backend (each backend's `lab` feature implements it for its device
/// plan), so that a runtime's measurement tools take any backend.
pub trait LaunchProfiler {
    /// The backend's error.
    type Error;

    /// One run, launch by launch, each launch timed alone with every two
    /// separated (see the module docs), in run order.
    fn profile_launches(&self) -> Result<Vec<LaunchTime>, Self::Error>;

    /// The run replayed `runs` times as it runs, then as often with each
    /// of the [`leave_out_sets`] of its launches left out: the median
    /// device time of each. The left-out runs' results are wrong; only
    /// their times mean anything.
    fn profile_leaving_out(&self, runs: usize) -> Result<Vec<LeftOutTime>, Self::Error>;
}

/// One launch of a run and the device time it took.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTime {
    /// The kernel as planned (`copy` for a device-to-device copy).
    pub kernel: String,
    /// The weight bytes it streams (GEMV launches; 0 for the others).
    pub weight_bytes: u64,
    /// Device milliseconds from the event before it to the event after it.
    pub ms: f32,
}

/// The launches of one kernel in a run, summed.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTotal {
    /// The kernel.
    pub kernel: String,
    /// How many launches ran it.
    pub launches: usize,
    /// Their device milliseconds, summed.
    pub ms: f64,
    /// The weight bytes they streamed, summed.
    pub weight_bytes: u64,
}

impl KernelTotal {
    /// The weight bytes streamed per second of the kernel's time, in GB/s
    /// (`None` for kernels that stream no weights).
    pub fn weight_gbs(&self) -> Option<f64> {
        (self.weight_bytes > 0 && self.ms > 0.0).then(|| self.weight_bytes as f64 / self.ms / 1e6)
    }
}

/// The launches summed by kernel, the kernel with the most time first
/// (ties in the order the kernels first ran).
pub fn kernel_totals(launches: &[LaunchTime]) -> Vec<KernelTotal> {
    let mut totals: Vec<KernelTotal> = Vec::new();
    for l in launches {
        match totals.iter_mut().find(|t| t.kernel == l.kernel) {
            Some(t) => {
                t.launches += 1;
                t.ms += f64::from(l.ms);
                t.weight_bytes += l.weight_bytes;
            }
            None => totals.push(KernelTotal {
                kernel: l.kernel.clone(),
                launches: 1,
                ms: f64::from(l.ms),
                weight_bytes: l.weight_bytes,
            }),
        }
    }
    // A stable sort keeps first-run order among equal times.
    totals.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    totals
}

/// A whole run replayed with some launches left out, and how long that
/// took: the difference from the full run is what the left-out launches
/// cost where they overlap with the rest, which launch-by-launch times
/// cannot say.
#[derive(Clone, Debug, PartialEq)]
pub struct LeftOutTime {
    /// What was left out: a kernel's name, `every kernel without weights`,
    /// or `nothing` for the full run.
    pub left_out: String,
    /// How many launches were left out.
    pub launches: usize,
    /// The median device milliseconds of the runs without them.
    pub ms: f32,
}

impl LeftOutTime {
    /// The median of `ms`, the device milliseconds of the runs without
    /// `launches` launches (0 when there are none).
    pub fn median(left_out: String, launches: usize, mut ms: Vec<f32>) -> LeftOutTime {
        ms.sort_unstable_by(f32::total_cmp);
        LeftOutTime {
            left_out,
            launches,
            ms: ms.get(ms.len() / 2).copied().unwrap_or(0.0),
        }
    }
}

/// What a leave-out profile times, for a run whose launches are `launches`
/// (each kernel's name and the weight bytes it streams): nothing left out
/// first, then each kernel in the order it first runs, then every kernel
/// that streams no weights at once (where the run has both kinds). Each is
/// the name and the launches left out (indices into `launches`).
pub fn leave_out_sets(launches: &[(&str, u64)]) -> Vec<(String, Vec<usize>)> {
    let mut sets: Vec<(String, Vec<usize>)> = alloc::vec![(String::from("nothing"), Vec::new())];
    for (i, &(kernel, _)) in launches.iter().enumerate() {
        match sets[1..].iter_mut().find(|(k, _)| k == kernel) {
            Some((_, v)) => v.push(i),
            None => sets.push((String::from(kernel), alloc::vec![i])),
        }
    }
    let light: Vec<usize> = (0..launches.len())
        .filter(|&i| launches[i].1 == 0)
        .collect();
    if !light.is_empty() && light.len() < launches.len() {
        sets.push((String::from("every kernel without weights"), light));
    }
    sets
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn lt(kernel: &str, weight_bytes: u64, ms: f32) -> LaunchTime {
        LaunchTime {
            kernel: kernel.to_string(),
            weight_bytes,
            ms,
        }
    }

    #[test]
    fn totals_sum_by_kernel_most_time_first() {
        let t = kernel_totals(&[
            lt("gemv", 1_000_000, 0.5),
            lt("attn", 0, 0.25),
            lt("gemv", 3_000_000, 1.5),
            lt("argmax", 0, 0.25),
        ]);
        let names: Vec<&str> = t.iter().map(|k| k.kernel.as_str()).collect();
        assert_eq!(names, ["gemv", "attn", "argmax"]);
        assert_eq!(t[0].launches, 2);
        assert_eq!(t[0].ms, 2.0);
        assert_eq!(t[0].weight_bytes, 4_000_000);
        // 4 MB in 2 ms.
        assert_eq!(t[0].weight_gbs(), Some(2.0));
        assert_eq!(t[1].weight_gbs(), None);
        assert!(kernel_totals(&[]).is_empty());
    }
    #[test]
    fn leave_out_sets_name_each_kernel_once_then_the_light_ones() {
        let launches = [
            ("gemv", 1_000_000),
            ("attn", 0),
            ("gemv", 3_000_000),
            ("argmax", 0),
        ];
        let sets = leave_out_sets(&launches);
        let names: Vec<&str> = sets.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "nothing",
                "gemv",
                "attn",
                "argmax",
                "every kernel without weights"
            ]
        );
        assert!(sets[0].1.is_empty());
        assert_eq!(sets[1].1, [0, 2]);
        assert_eq!(sets[4].1, [1, 3]);
        // A run of weightless kernels only gets no set that leaves all out.
        let sets = leave_out_sets(&[("attn", 0)]);
        assert_eq!(sets.len(), 2);
        assert!(leave_out_sets(&[]).len() == 1);
    }
}
