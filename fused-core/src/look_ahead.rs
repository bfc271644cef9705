//! The L2 look-ahead of a device plan: which window of which coming
//! GEMV's weights each command asks the memory for, so that those bytes
//! stream into the GPU's L2 while short kernels (quantizers, norms,
//! attention) leave the bandwidth idle, and the GEMV finds them there.
//!
//! Both GPU backends place their requests by [`look_ahead_windows`]; they
//! differ only in how a window is asked for (a bulk L2 prefetch inside the
//! kernel, a read dispatched beside it). Weights are constant, so the bits
//! of every result are the same with or without a window.

use alloc::vec;
use alloc::vec::Vec;

/// What one command of a plan is to the look-ahead, in launch order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AheadCommand<'a> {
    /// A GEMV. `parts`: the byte sizes of the weight matrices it streams
    /// side by side (one, or a gated GEMV's gate and up), empty where its
    /// weights cannot be asked for ahead; `ask`: the bytes it asks for
    /// itself of the GEMVs after it (0: none).
    Gemv {
        /// Sizes of the matrices it streams side by side.
        parts: &'a [u64],
        /// Bytes it asks for ahead.
        ask: u64,
    },
    /// Any other command; `ask` bytes of the coming weights (0: none).
    Between {
        /// Bytes it asks for ahead.
        ask: u64,
    },
}

impl AheadCommand<'_> {
    fn ask(&self) -> u64 {
        match *self {
            AheadCommand::Gemv { ask, .. } | AheadCommand::Between { ask } => ask,
        }
    }
}

/// One window a command asks for: `len` bytes at `offset` of part `part`
/// of the GEMV at index `gemv` among the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AheadWindow {
    /// Index of the GEMV command whose weights these are.
    pub gemv: usize,
    /// Which of its parts ([`AheadCommand::Gemv::parts`]).
    pub part: usize,
    /// Byte offset inside that part (a multiple of the alignment).
    pub offset: u64,
    /// Bytes (a multiple of the alignment, never 0).
    pub len: u64,
}

/// The windows each command asks for, in the order the commands run.
///
/// Each command with bytes to ask takes the first of the next `reach`
/// GEMVs after it whose weights are not all asked for yet, and asks for
/// the next `ask` bytes of it, split evenly over its parts, each window
/// continuing where the last request for that GEMV stopped and clipped to
/// its part; one GEMV a command, so a window never spans two. A `reach` of
/// 1 asks only for the next GEMV's weights; 2 lets the commands before a
/// small GEMV go on into the one after it. `align` (a power of two, at
/// least 1) rounds every offset and length down; a share below it asks
/// for nothing.
pub fn look_ahead_windows(
    commands: &[AheadCommand<'_>],
    reach: usize,
    align: u64,
) -> Vec<Vec<AheadWindow>> {
    let align = align.max(1);
    // Bytes of each part asked for so far, per GEMV command.
    let mut asked = vec![0u64; commands.len()];
    let gemvs: Vec<usize> = commands
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(c, AheadCommand::Gemv { .. }))
        .map(|(i, _)| i)
        .collect();
    let mut out = vec![Vec::new(); commands.len()];
    for (i, c) in commands.iter().enumerate() {
        let ask = c.ask();
        if ask == 0 {
            continue;
        }
        let first_after = gemvs.partition_point(|&g| g <= i);
        let candidates = gemvs[first_after..].iter().take(reach);
        for &g in candidates {
            let AheadCommand::Gemv { parts, .. } = commands[g] else {
                continue;
            };
            let Some(&largest) = parts.iter().max() else {
                continue;
            };
            if asked[g] >= largest {
                continue;
            }
            let share = ask / parts.len() as u64 / align * align;
            for (part, &size) in parts.iter().enumerate() {
                let len = share.min(size.saturating_sub(asked[g])) / align * align;
                if len > 0 {
                    out[i].push(AheadWindow {
                        gemv: g,
                        part,
                        offset: asked[g],
                        len,
                    });
                }
            }
            asked[g] += share;
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use AheadCommand::{Between, Gemv};

    const MIB: u64 = 1 << 20;

    fn w(gemv: usize, part: usize, offset: u64, len: u64) -> AheadWindow {
        AheadWindow {
            gemv,
            part,
            offset,
            len,
        }
    }

    #[test]
    fn each_command_continues_where_the_last_stopped_until_the_weights_are_asked() {
        let next = [10 * MIB];
        let cmds = [
            Gemv {
                parts: &[MIB],
                ask: 4 * MIB,
            },
            Between { ask: 4 * MIB },
            Between { ask: 0 },
            Between { ask: 4 * MIB },
            Between { ask: 4 * MIB },
            Gemv {
                parts: &next,
                ask: 4 * MIB,
            },
        ];
        let got = look_ahead_windows(&cmds, 1, 16);
        assert_eq!(got[0], [w(5, 0, 0, 4 * MIB)]);
        assert_eq!(got[1], [w(5, 0, 4 * MIB, 4 * MIB)]);
        assert!(got[2].is_empty());
        assert_eq!(got[3], [w(5, 0, 8 * MIB, 2 * MIB)], "clipped to the part");
        assert!(got[4].is_empty(), "all asked for, and reach 1");
        assert!(got[5].is_empty(), "nothing after the last GEMV");
    }

    #[test]
    fn a_reach_of_two_goes_on_into_the_gemv_after_a_small_one() {
        let small = [6 * MIB];
        let gated = [33 * MIB, 33 * MIB];
        let cmds = [
            Gemv {
                parts: &[MIB],
                ask: 4 * MIB,
            },
            Between { ask: 8 * MIB },
            Between { ask: 8 * MIB },
            Gemv {
                parts: &small,
                ask: 4 * MIB,
            },
            Between { ask: 8 * MIB },
            Gemv {
                parts: &gated,
                ask: 0,
            },
        ];
        let one = look_ahead_windows(&cmds, 1, 16);
        assert_eq!(one[1], [w(3, 0, 4 * MIB, 2 * MIB)]);
        assert!(one[2].is_empty());
        assert_eq!(one[3], [w(5, 0, 0, 2 * MIB), w(5, 1, 0, 2 * MIB)]);
        assert_eq!(
            one[4],
            [w(5, 0, 2 * MIB, 4 * MIB), w(5, 1, 2 * MIB, 4 * MIB)]
        );

        let two = look_ahead_windows(&cmds, 2, 16);
        assert_eq!(two[1], one[1]);
        assert_eq!(two[2], [w(5, 0, 0, 4 * MIB), w(5, 1, 0, 4 * MIB)]);
        assert_eq!(
            two[3],
            [w(5, 0, 4 * MIB, 2 * MIB), w(5, 1, 4 * MIB, 2 * MIB)]
        );
        assert_eq!(
            two[4],
            [w(5, 0, 6 * MIB, 4 * MIB), w(5, 1, 6 * MIB, 4 * MIB)]
        );
    }

    #[test]
    fn windows_are_aligned_and_weights_that_cannot_be_asked_are_passed() {
        let part = [1000];
        let cmds = [
            Between { ask: 100 },
            Gemv { parts: &[], ask: 0 },
            Gemv {
                parts: &part,
                ask: 0,
            },
            Between { ask: 8 },
        ];
        // Reach 1 stops at the GEMV with nothing to ask for.
        assert!(look_ahead_windows(&cmds, 1, 16)[0].is_empty());
        let two = look_ahead_windows(&cmds, 2, 16);
        assert_eq!(two[0], [w(2, 0, 0, 96)]);
        assert!(two[3].is_empty(), "no GEMV after it");
        // A share below the alignment asks for nothing.
        let cmds = [
            Between { ask: 8 },
            Gemv {
                parts: &part,
                ask: 0,
            },
        ];
        assert!(look_ahead_windows(&cmds, 1, 16)[0].is_empty());
        assert!(look_ahead_windows(&cmds, 0, 16)[0].is_empty(), "reach 0");
    }
}
