//! The scalar group kernel: each row's blocks put back together and dotted
//! with the core's reference formula, block by block in order, so the result
//! equals the reference [`fused_core::quant::vec_dot`] of the unpacked row.

use fused_core::{DType, Error};

use super::{GROUP_ROWS, LINE, check_q4_0_group};
use crate::acts::Acts;

/// Q4_0 × Q8_0 for the four rows of a packed group with `nb` blocks a row.
pub fn group_q4_0_q8_0(
    group: &[u8],
    nb: usize,
    acts: &Acts<'_>,
) -> Result<[f32; GROUP_ROWS], Error> {
    let y = check_q4_0_group(group, nb, acts)?;
    let (codes, scales) = group.split_at(nb * LINE);
    let yb = DType::Q8_0.block_bytes();
    let mut out = [0.0f32; GROUP_ROWS];
    let mut blk = [0u8; 18];
    for (r, acc) in out.iter_mut().enumerate() {
        for b in 0..nb {
            let at = (b * GROUP_ROWS + r) * 2;
            blk[..2].copy_from_slice(&scales[at..at + 2]);
            let at = b * LINE + r * 16;
            blk[2..].copy_from_slice(&codes[at..at + 16]);
            *acc += fused_core::quant::vec_dot(DType::Q4_0, &blk, &y[b * yb..(b + 1) * yb], 32)?;
        }
    }
    Ok(out)
}
