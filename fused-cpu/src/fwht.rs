//! Signed and unsigned FWHT over rows, the sign multiply fused into the load.
//! Same arithmetic as the core's reference, so results are bit-identical.

use fused_core::Error;
use fused_core::fwht::{FwhtDesc, butterflies};

/// Transforms rows `rows` (each `desc.n()` values) of `x` into the matching
/// rows of `out`; `x` and `out` hold exactly those rows.
pub fn fwht_rows(
    desc: &FwhtDesc,
    x: &[f32],
    signs: Option<&[f32]>,
    first_row: usize,
    out: &mut [f32],
) -> Result<(), Error> {
    desc.check(x.len(), signs, out.len())?;
    let n = desc.n();
    for (i, (xb, ob)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
        let row = first_row + i;
        for (j, (o, &v)) in ob.iter_mut().zip(xb).enumerate() {
            *o = desc.load(v, signs, row, j);
        }
        butterflies(ob)?;
    }
    Ok(())
}
