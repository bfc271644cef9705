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
    let n = desc.n();
    if let (Some(len), Some(s)) = (desc.signs_len(), signs)
        && s.len() != len
    {
        return Err(Error::LengthMismatch {
            what: "FWHT sign vector",
            expected: len,
            actual: s.len(),
        });
    }
    if desc.signs_len().is_some() != signs.is_some() {
        return Err(Error::LengthMismatch {
            what: "FWHT sign vector presence",
            expected: desc.signs_len().unwrap_or(0),
            actual: signs.map_or(0, <[f32]>::len),
        });
    }
    if !x.len().is_multiple_of(n) || out.len() != x.len() {
        return Err(Error::LengthMismatch {
            what: "FWHT rows",
            expected: x.len() / n * n,
            actual: out.len(),
        });
    }
    for (i, (xb, ob)) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)).enumerate() {
        let row = first_row + i;
        for (j, (o, &v)) in ob.iter_mut().zip(xb).enumerate() {
            *o = desc.load(v, signs, row, j);
        }
        butterflies(ob);
    }
    Ok(())
}
