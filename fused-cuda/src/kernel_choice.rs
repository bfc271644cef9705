//! Which GEMV kernel a launch takes: rows a block, units in flight a lane
//! and the kernel's name, as a pure function of the format, the columns,
//! the rows and the backend's [`Tuning`] (the table's defaults in
//! `src/tuning.rs`, or a caller's overrides). Every choice computes the
//! same sums in the same order, so none changes a result.

use crate::params::GEMV_BLOCK;
use crate::tuning::{F16_UNITS, Tuning, int_shape_default};
use fused_core::DType;

/// Output rows one block of the GEMV kernels computes: `RowsPerBlock` in
/// `kernels/gemv.cu` (the float formats 1; the quantized formats share each
/// activation load between 2 rows; Q4_K, and any quantized format from 3
/// columns up, between 4).
pub(crate) fn gemv_rows_per_block(dtype: DType, n_cols: usize) -> usize {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => 1,
        DType::Q4_K => 4,
        _ if n_cols >= 3 => 4,
        _ => 2,
    }
}

/// The one-column F16 GEMV kernel for rows of `k` weights, as `(rows per
/// block, kernel name tag)`: `fused_gemv[_glu]_f16_<tag>_c1` (`None`: the
/// default kernel of every format, 4 units of 8 weights in flight a lane,
/// one row a block). By default the units that cover a lane's whole row
/// ([`F16_UNITS`]); `tuning` may force a shape.
pub(crate) fn f16_shape(k: usize, n_cols: usize, tuning: &Tuning) -> Option<(usize, &'static str)> {
    if n_cols != 1 {
        return None;
    }
    let (rows, units) = tuning.f16_shape.unwrap_or_else(|| {
        let steps = k.div_ceil(8 * GEMV_BLOCK as usize);
        let units = F16_UNITS
            .iter()
            .find(|(from, to, _)| (*from..=*to).contains(&steps))
            .map_or(4, |u| u.2);
        (1, units)
    });
    match (rows, units) {
        (2, _) => Some((2, "r2")),
        (_, 8) => Some((1, "u8")),
        (_, 16) => Some((1, "u16")),
        _ => None,
    }
}

/// `(rows a block, units in flight a lane)` of the integer GEMV kernel
/// (`fused_gemvq_*_r<R>_c<NC>[_u1]` in `kernels/gemv.cu`) for `n_cols`
/// columns of `rows` rows of `dtype`, gated where `glu`: the table's
/// default ([`int_shape_default`]) unless `tuning` overrides it. An
/// override of the several-column kernels applies to the tiled formats
/// (Q8_0, Q4_0, Q4_K) only, where that kernel exists.
pub(crate) fn gemvq_shape(
    dtype: DType,
    n_cols: usize,
    rows: usize,
    glu: bool,
    tuning: &Tuning,
) -> (usize, usize) {
    let (r, u) = int_shape_default(dtype, n_cols, rows, glu);
    let tiled = matches!(dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_K);
    match n_cols {
        1 => (tuning.int_rows.unwrap_or(r), tuning.int_units.unwrap_or(u)),
        2..=4 if tiled => tuning.int_shape_2_4.unwrap_or((r, u)),
        5.. if tiled => match tuning.int_rows_5_8 {
            Some(4) if dtype == DType::Q4_K => (r, u),
            Some(1) => (1, 2),
            Some(r) => (r, 1),
            None => (r, u),
        },
        _ => (r, u),
    }
}

/// The integer GEMV kernel `fused_gemvq[_glu]_<fmt>_r<R>_c<NC>[_u1]`.
pub(crate) fn gemvq_kernel_name(
    dtype: DType,
    glu: bool,
    r: usize,
    n_cols: usize,
    unroll: usize,
) -> String {
    format!(
        "fused_gemvq_{}{}_r{r}_c{n_cols}{}",
        if glu { "glu_" } else { "" },
        dtype.name(),
        if unroll == 1 { "_u1" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_COLS;
    use crate::knob::Knob;

    /// Every shape the default or any override picks names a kernel the
    /// GEMV module defines.
    #[test]
    fn every_chosen_integer_kernel_exists() {
        let mut tunings = vec![Tuning::default()];
        let knobs = [
            Knob::IntRows(1),
            Knob::IntRows(2),
            Knob::IntRows(4),
            Knob::IntUnits(1),
            Knob::IntUnits(2),
            Knob::IntShape2To4 { rows: 2, units: 2 },
            Knob::IntShape2To4 { rows: 2, units: 1 },
            Knob::IntShape2To4 { rows: 4, units: 1 },
            Knob::IntRows5To8(1),
            Knob::IntRows5To8(2),
            Knob::IntRows5To8(4),
        ];
        tunings.extend(knobs.map(|k| Tuning::default().with(k).unwrap()));
        for t in &tunings {
            for dtype in crate::GEMV_DTYPES.into_iter().filter(|d| d.is_quantized()) {
                for glu in [false, true] {
                    for n_cols in 1..=MAX_COLS {
                        for rows in [4096, 32768] {
                            let (r, u) = gemvq_shape(dtype, n_cols, rows, glu, t);
                            let name = gemvq_kernel_name(dtype, glu, r, n_cols, u);
                            assert!(crate::device::gemv_has(&name), "{name} ({t:?})");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_chosen_f16_kernel_exists() {
        let shapes = [(1, 4), (1, 8), (1, 16), (2, 4)];
        let tunings = shapes.map(|(rows, units)| {
            Tuning::default()
                .with(Knob::F16Shape { rows, units })
                .unwrap()
        });
        for t in tunings.iter().chain([&Tuning::default()]) {
            for k in [1024, 4096, 8192, 14336, 16384, 32768] {
                for glu in ["", "glu_"] {
                    let tag =
                        f16_shape(k, 1, t).map_or(String::new(), |(_, tag)| format!("_{tag}"));
                    let name = format!("fused_gemv_{glu}f16{tag}_c1");
                    assert!(crate::device::gemv_has(&name), "{name}");
                }
            }
        }
    }
}
