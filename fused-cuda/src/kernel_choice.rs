//! Which GEMV kernel a launch takes: rows a block, units in flight a lane,
//! row groups a block and the kernel's name, as a pure function of the
//! format, the columns, the rows, the row length and the backend's
//! [`Tuning`] (the table's defaults in `src/tuning.rs`, or a caller's
//! overrides). Every choice computes the same sums in the same order, so
//! none changes a result.

use crate::params::GEMV_BLOCK;
use crate::tuning::{F16_UNITS, Tuning, int_row_groups_default, int_shape_default};
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

/// The shape of an integer GEMV kernel
/// (`fused_gemvq_*_r<R>[s<S>]_c<NC>[_u1]` in `kernels/gemv.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IntShape {
    /// Output rows a block.
    pub(crate) rows: usize,
    /// Units in flight a lane.
    pub(crate) units: usize,
    /// Row groups a block: the block's threads split into this many
    /// groups, each on `rows / groups` rows (1: every thread on every row).
    pub(crate) groups: usize,
}

/// The shape of the integer GEMV kernel for `n_cols` columns of `rows`
/// rows of `k` values of `dtype`, gated where `glu`: the table's default
/// ([`int_shape_default`], [`int_row_groups_default`]) unless `tuning`
/// overrides it (an override of the rows takes the plain kernel of those
/// rows). An override of the several-column kernels applies to the tiled
/// formats (Q8_0, Q4_0, Q4_K) only, where that kernel exists.
pub(crate) fn gemvq_shape(
    dtype: DType,
    n_cols: usize,
    rows: usize,
    k: usize,
    glu: bool,
    tuning: &Tuning,
) -> IntShape {
    let (r, u) = int_shape_default(dtype, n_cols, rows, glu);
    let tiled = matches!(dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_K);
    let plain = |(rows, units)| IntShape {
        rows,
        units,
        groups: 1,
    };
    match n_cols {
        1 => {
            let units = tuning.int_units.unwrap_or(u);
            match tuning.int_rows {
                None if units == 1 && int_row_groups_default(dtype, n_cols, rows, k) => IntShape {
                    rows: 4,
                    units,
                    groups: 2,
                },
                r_over => plain((r_over.unwrap_or(r), units)),
            }
        }
        2..=4 if tiled => plain(tuning.int_shape_2_4.unwrap_or((r, u))),
        5.. if tiled => plain(match tuning.int_rows_5_8 {
            Some(4) if dtype == DType::Q4_K => (r, u),
            Some(1) => (1, 2),
            Some(r) => (r, 1),
            None => (r, u),
        }),
        _ => plain((r, u)),
    }
}

/// The integer GEMV kernel `fused_gemvq[_glu]_<fmt>_r<R>[s<S>]_c<NC>[_u1]`.
pub(crate) fn gemvq_kernel_name(dtype: DType, glu: bool, shape: IntShape, n_cols: usize) -> String {
    format!(
        "fused_gemvq_{}{}_r{}{}_c{n_cols}{}",
        if glu { "glu_" } else { "" },
        dtype.name(),
        shape.rows,
        if shape.groups > 1 {
            format!("s{}", shape.groups)
        } else {
            String::new()
        },
        if shape.units == 1 { "_u1" } else { "" }
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
                        for (rows, k) in [(4096, 4096), (4096, 14336), (32768, 4096)] {
                            let shape = gemvq_shape(dtype, n_cols, rows, k, glu, t);
                            let name = gemvq_kernel_name(dtype, glu, shape, n_cols);
                            assert!(crate::device::gemv_has(&name), "{name} ({t:?})");
                        }
                    }
                }
            }
        }
    }

    /// One-column Q4_K rows of at most 224 units take 4 rows a block in 2
    /// row groups, unless the rows or units are overridden; longer rows,
    /// many rows and several columns the table's plain shapes.
    #[test]
    fn short_q4_k_rows_take_two_row_groups() {
        let t = Tuning::default();
        let shape =
            |n_cols, rows, k, t: &Tuning| gemvq_shape(DType::Q4_K, n_cols, rows, k, false, t);
        let grouped = IntShape {
            rows: 4,
            units: 1,
            groups: 2,
        };
        assert_eq!(shape(1, 4096, 4096, &t), grouped);
        assert_eq!(shape(1, 6144, 256, &t), grouped);
        assert_eq!(
            gemvq_kernel_name(DType::Q4_K, true, grouped, 1),
            "fused_gemvq_glu_q4_K_r4s2_c1_u1"
        );
        assert_eq!(shape(1, 4096, 14336, &t), grouped);
        assert_eq!(shape(1, 4096, 14592, &t).groups, 1);
        assert_eq!(shape(1, 32768, 4096, &t).groups, 1);
        assert_eq!(shape(2, 4096, 4096, &t).groups, 1);
        assert_eq!(gemvq_shape(DType::Q4_0, 1, 4096, 4096, false, &t).groups, 1);
        let rows2 = Tuning::default().with(Knob::IntRows(2)).unwrap();
        let plain = shape(1, 4096, 4096, &rows2);
        assert_eq!((plain.rows, plain.groups), (2, 1));
        let units2 = Tuning::default().with(Knob::IntUnits(2)).unwrap();
        assert_eq!(shape(1, 4096, 4096, &units2).groups, 1);
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
