//! Which GEMV kernel a launch takes: rows a block, units in flight a lane
//! and the kernel's name, by format, columns and rows. The defaults come
//! from `cuda-bench` sweeps on the H200 (each function says which), and
//! `FUSED_CUDA_*` variables override them for A/B runs; every choice
//! computes the same sums in the same order, so none changes a result.

use crate::launch::GEMV_BLOCK;
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
/// block, kernel name tag)`: [`f16_shape_for`], with
/// `FUSED_CUDA_F16_SHAPE` from the environment.
pub(crate) fn f16_shape(k: usize, n_cols: usize) -> Option<(usize, &'static str)> {
    f16_shape_for(
        k,
        n_cols,
        std::env::var("FUSED_CUDA_F16_SHAPE").ok().as_deref(),
    )
}

/// The one-column F16 GEMV kernel for rows of `k` weights, as `(rows per
/// block, kernel name tag)`: `fused_gemv[_glu]_f16_<tag>_c1` (`None`: the
/// default kernel of every format, 4 units of 8 weights in flight per lane).
/// A lane requests its first step of weights before the dependency wait, so
/// its step covers the lane's whole row where it can: 8 units up to K =
/// 8192, 16 up to 16384 (`u8`, `u16`; more units per lane than 16 use the
/// default). From `cuda-bench` on the H200 (2026-12-01 08:27 UTC, two
/// binaries × two runs, % of each run's 16-byte copy kernel, 4274–4284
/// GB/s): at 4096 × 14336 `u16` 90–91 % against 86–87 % (`u8` 82–83 %), at
/// 32768 × 8192 `u8` 102–103 % against 100–101 % (`u16` 88–89 %).
/// `forced` (`u4`, `u8`, `u16`, or `r2`: 2 rows per block) overrides the
/// choice for A/B runs; every shape computes the same sums in the same
/// order.
fn f16_shape_for(k: usize, n_cols: usize, forced: Option<&str>) -> Option<(usize, &'static str)> {
    if n_cols != 1 {
        return None;
    }
    match forced {
        Some("u4") => return None,
        Some("r2") => return Some((2, "r2")),
        Some("u8") => return Some((1, "u8")),
        Some("u16") => return Some((1, "u16")),
        _ => {}
    }
    match k.div_ceil(8 * GEMV_BLOCK as usize) {
        5..=8 => Some((1, "u8")),
        9..=16 => Some((1, "u16")),
        _ => None,
    }
}

/// Output rows one block of the integer GEMV kernels computes
/// (`fused_gemvq_*_r<R>_c<NC>` in `kernels/gemv.cu`). One column, with
/// [`gemvq_unroll`], from a sweep of `cuda-bench` on the H200 (2026-12-01
/// 00:19 UTC, R ∈ {1, 2, 4} × U ∈ {1, 2} taking turns, GEMV alone at 4096 ×
/// 14336 / 32768 × 8192, % of copy): Q8_0 R 2, U 1 (92 / 103, was 87 / 104
/// at R 4, U 2), Q4_0 R 4, U 1 (75 / 98, was 72 / 99 at R 2, U 2), Q4_K R 2,
/// U 1 (71 / 89, was 65 / 90 at R 4, U 2). The other formats (A/B of 2 rows
/// against 4 at 00:07 UTC, 4096 × 14336, GEMV alone): Q5_0 1.23x, Q5_1
/// 1.24x, IQ4_NL 1.08x, TQ2_0 1.09x, Q4_1 equal: 2 rows; Q5_K and Q6_K
/// within 1 % (Q6_K with its quantizer 0.96x): 4. Q4_K with many rows
/// (`rows` from [`MANY_ROWS`]) takes 4 too: at 32768 × 8192 the
/// same sweep gave R 4 93 % (87 with its quantizer) against R 2 89 % (84).
/// `FUSED_CUDA_Q_ROWS` (1, 2 or 4) overrides it, for A/B runs of
/// `cuda-bench`.
pub(crate) fn gemvq_rows_per_block(dtype: DType, n_cols: usize, rows: usize, glu: bool) -> usize {
    let four = matches!(dtype, DType::Q4_0 | DType::Q5_K | DType::Q6_K)
        || (dtype == DType::Q4_K && rows >= MANY_ROWS);
    match n_cols {
        1 => std::env::var("FUSED_CUDA_Q_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|r| [1, 2, 4].contains(r))
            .unwrap_or(if four { 4 } else { 2 }),
        2..=4 => mc_rows(dtype, n_cols, rows, glu).unwrap_or(2),
        _ => mc_rows(dtype, n_cols, rows, glu).unwrap_or(1),
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

/// Rows a block of the several-column kernels of the tiled formats with
/// one unit in flight a lane (`fused_gemvq[_glu]_<fmt>_r<R>_c<NC>_u1`,
/// kernels/gemv.cu: GEMVQ_MC_KERNELS) for `n_cols` columns of `rows`
/// rows; `None` where the format and shape take two units in flight and
/// one row a block (from 5 columns) or two (2 to 4). With fewer rows a
/// block each activation load serves fewer rows (at one row an 8-column
/// call moved ~16× the weights' bytes through L1); with two units a lane
/// has more weights in flight. On the H200, GEMV alone, µs at 1 / 2 / 4
/// rows (BENCHMARKS.md):
/// - 8 columns (2026-12-04 05:25, one run): 4096 × 14336 Q4_0 30.2 / 27.3 /
///   21.2, Q8_0 32.9 / 26.2 / 22.0, Q4_K 38.0 / 28.8 / —; 32768 × 8192
///   Q4_0 121.0 / 95.2 / 76.6, Q8_0 120.4 / 86.1 / 81.8, Q4_K 152.9 /
///   104.6 / — (Q4_K's 4-row kernel would need more than 255 registers).
/// - 5, 6, 7 columns (2026-12-04 12:56, two runs that agreed within 1.6 %),
///   4096 × 14336: Q8_0 25.7 / 20.7 / 22.1, 26.1 / 23.1 / 18.7, 29.1 /
///   24.9 / 20.8; Q4_0 21.9 / 19.1 / 15.0, 23.7 / 20.9 / 16.9, 27.8 / 27.6
///   / 18.2; Q4_K 24.7 / 21.9, 28.3 / 24.8, 32.1 / 28.9. 32768 × 8192:
///   Q8_0 88.4 / 69.7 / 69.8, 95.8 / 74.5 / 73.7, 108.7 / 81.0 / 78.2;
///   Q4_0 83.1 / 69.1 / 59.0, 95.0 / 74.7 / 65.4, 110.0 / 89.8 / 70.5;
///   Q4_K 115.0 / 88.2, 122.9 / 94.7, 140.6 / 107.0.
/// - 2, 3, 4 columns (2026-12-04 13:03, two runs within 1.1 %), µs with two
///   units at 2 rows (the default before) / one unit at 2 / at 4 rows,
///   4096 × 14336: Q8_0 19.2 / 17.4 / 19.8, 19.9 / 18.1 / 20.0, 20.8 /
///   20.6 / 20.2; Q4_0 14.2 / 11.8 / 11.5, 15.2 / 13.2 / 11.9, 15.6 / 16.5
///   / 12.7; Q4_K 12.2 / 13.3 / 14.3, 14.6 / 14.8 / 15.8, 16.1 / 16.5 /
///   17.4. 32768 × 8192: Q8_0 65.4 / 67.0 / 68.5, 66.3 / 67.2 / 67.9, 67.2
///   / 68.2 / 68.2; Q4_0 40.3 / 43.1 / 40.4, 48.0 / 48.6 / 47.7, 55.9 /
///   57.7 / 52.0; Q4_K 52.1 / 46.6 / 57.3, 58.9 / 60.1 / 63.7, 74.5 / 66.3
///   / 70.6. So Q4_0 takes 4 rows, and Q8_0 at 2 or 3 columns of fewer
///   than [`MANY_ROWS`] rows one unit at 2 rows; Q4_K keeps two units.
///
/// The gated (GLU) kernels take 2 rows from 5 columns (at 4 rows the
/// 8-column ones need 220–249 registers), two units at 2 rows below:
/// 4096 × 14336 each, µs at 1 / 2 / 4 rows, 8 columns (06:18, three
/// processes in turn): Q8_0 42.0 / 38.2 / 43.5, Q4_0 40.4 / 38.6 / 38.9,
/// Q4_K 55.1 / 46.2 / —; 5, 6, 7 columns (12:56): Q8_0 40.3 / 36.4 / 36.4,
/// 43.9 / 41.9 / 39.6, 42.3 / 37.0 / 45.9; Q4_0 30.5 / 27.0 / 31.0, 33.1 /
/// 29.7 / 33.5, 37.2 / 34.0 / 36.0; Q4_K 42.9 / 36.5, 46.0 / 39.4, 41.8 /
/// 42.8 (the one count where one row was faster, by 2.6 %); 2, 3, 4
/// columns as above (13:03): Q8_0 31.1 / 32.5 / 29.5, 32.6 / 32.3 / 32.0,
/// 34.0 / 34.7 / 33.8; Q4_0 20.6 / 21.1 / 20.3, 22.1 / 22.0 / 24.9, 25.2 /
/// 23.5 / 28.1; Q4_K 22.9 / 26.5 / 28.4, 27.0 / 29.4 / 34.7, 29.8 / 32.8 /
/// 41.0 (no choice better everywhere).
///
/// `FUSED_CUDA_Q_ROWS_MC` (1, 2 or 4; Q4_K 1 or 2) sets the rows of both
/// from 5 columns, `FUSED_CUDA_Q_ROWS_MC24` (2 or 4; `0`: two units) those
/// at 2 to 4 columns, for A/B runs of `cuda-bench`.
fn mc_rows(dtype: DType, n_cols: usize, rows: usize, glu: bool) -> Option<usize> {
    let (allowed, default): (&[usize], usize) = match dtype {
        DType::Q8_0 if n_cols == 5 => (&[1, 2, 4], 2),
        DType::Q8_0 | DType::Q4_0 => (&[1, 2, 4], 4),
        DType::Q4_K => (&[1, 2], 2),
        _ => return None,
    };
    let env_rows = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    let r = match n_cols {
        2..=4 => match env_rows("FUSED_CUDA_Q_ROWS_MC24").filter(|r| [0, 2, 4].contains(r)) {
            Some(r) => r,
            None if glu => 0,
            None => match dtype {
                DType::Q4_0 => 4,
                DType::Q8_0 if n_cols <= 3 && rows < MANY_ROWS => 2,
                _ => 0,
            },
        },
        5..=8 => env_rows("FUSED_CUDA_Q_ROWS_MC")
            .filter(|r| allowed.contains(r))
            .unwrap_or(if glu { 2 } else { default }),
        _ => return None,
    };
    (r > 1).then_some(r)
}

/// Rows from which one-column Q4_K takes 4 rows per block, and 2 or 3
/// columns of Q8_0 two units in flight: between the sweeps' two shapes
/// (4096 and 32768 rows), where the faster choice changed.
const MANY_ROWS: usize = 16384;

/// Units in flight per lane of the integer kernels (`Q_UNROLL` in
/// `kernels/gemv.cu`): 1 for one column of Q8_0, Q4_0 and Q4_K (kernels
/// `…_c1_u1`: fewer registers, more blocks per SM; see
/// [`gemvq_rows_per_block`]), else 2. `FUSED_CUDA_Q_UNROLL` (1 or 2)
/// overrides it at one column, for A/B runs of `cuda-bench`. (4 units, a
/// lane's whole row at K = 8192 and 14336 requested before the dependency
/// wait, as the F16 kernel does, ran slower at every R on the H200,
/// 2026-12-01 08:36 UTC: BENCHMARKS.md.)
pub(crate) fn gemvq_unroll(dtype: DType, n_cols: usize, rows: usize, glu: bool) -> usize {
    if n_cols != 1 {
        return if mc_rows(dtype, n_cols, rows, glu).is_some() {
            1
        } else {
            2
        };
    }
    std::env::var("FUSED_CUDA_Q_UNROLL")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|u| [1, 2].contains(u))
        .unwrap_or(
            if matches!(dtype, DType::Q8_0 | DType::Q4_0 | DType::Q4_K) {
                1
            } else {
                2
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_COLS;

    #[test]
    fn several_columns_take_the_measured_rows_and_units() {
        for var in ["FUSED_CUDA_Q_ROWS_MC", "FUSED_CUDA_Q_ROWS_MC24"] {
            if std::env::var_os(var).is_some() {
                println!("skipped: {var} is set, so the defaults do not apply");
                return;
            }
        }
        for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K] {
            for n_cols in 2..=8 {
                for m in [4096, 32768] {
                    // (rows a block, units in flight), plain and gated.
                    let plain = match (dtype, n_cols) {
                        (DType::Q4_0, _) => (4, 1),
                        (DType::Q4_K, 2..=4) => (2, 2),
                        (DType::Q4_K, _) => (2, 1),
                        (DType::Q8_0, 2..=3) if m < MANY_ROWS => (2, 1),
                        (DType::Q8_0, 2..=4) => (2, 2),
                        (DType::Q8_0, 5) => (2, 1),
                        _ => (4, 1),
                    };
                    let gated = if n_cols <= 4 { (2, 2) } else { (2, 1) };
                    for (glu, want) in [(false, plain), (true, gated)] {
                        let got = (
                            gemvq_rows_per_block(dtype, n_cols, m, glu),
                            gemvq_unroll(dtype, n_cols, m, glu),
                        );
                        assert_eq!(got, want, "{dtype} {m} rows, {n_cols} columns, GLU {glu}");
                    }
                }
            }
        }
        assert_eq!(gemvq_rows_per_block(DType::Q5_0, 8, 4096, false), 1);
    }

    #[test]
    fn the_several_column_kernels_of_several_rows_exist() {
        let ptx = crate::device::gemv_ptx();
        for (dtype, rows) in [(DType::Q8_0, 4), (DType::Q4_0, 4), (DType::Q4_K, 2)] {
            for glu in [false, true] {
                for n_cols in 2..=MAX_COLS {
                    for r in [2, rows, 4] {
                        if r == 4 && n_cols > 4 && dtype == DType::Q4_K {
                            continue;
                        }
                        let name = gemvq_kernel_name(dtype, glu, r, n_cols, 1);
                        assert!(ptx.contains(&format!(".entry {name}(")), "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn one_column_f16_kernels_take_a_lanes_whole_row_in_one_step() {
        // (K, n_cols, shape): a lane's units of 8 weights per row are
        // K / 1024; the step covers them up to 16.
        for (k, n_cols, want) in [
            (4096, 1, None),
            (4104, 1, Some((1, "u8"))),
            (8192, 1, Some((1, "u8"))),
            (11008, 1, Some((1, "u16"))),
            (14336, 1, Some((1, "u16"))),
            (16384, 1, Some((1, "u16"))),
            (16392, 1, None),
            (14336, 2, None),
        ] {
            assert_eq!(
                f16_shape_for(k, n_cols, None),
                want,
                "K = {k}, {n_cols} columns"
            );
        }
        // A forced shape wins at one column only; an unknown one is ignored.
        assert_eq!(f16_shape_for(14336, 1, Some("u4")), None);
        assert_eq!(f16_shape_for(4096, 1, Some("r2")), Some((2, "r2")));
        assert_eq!(f16_shape_for(4096, 1, Some("u16")), Some((1, "u16")));
        assert_eq!(f16_shape_for(4096, 2, Some("u16")), None);
        assert_eq!(f16_shape_for(8192, 1, Some("x")), Some((1, "u8")));
    }
}
