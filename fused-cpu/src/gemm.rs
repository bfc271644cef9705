//! The GEMM driver: the accumulators of a row range of one or two weight
//! matrices against many activation columns, handed to a sink (which applies
//! the epilogue and stores: [`crate::gemv`]). `no_std`, no allocation: the
//! decoded weights, the prepared activations and the accumulators live in
//! fixed-size stack tiles. On x86-64 that is up to about 200 KiB (the int
//! path with two matrices; callers need threads with the usual 2 MiB
//! stacks); on 32-bit targets, whose tiles are smaller
//! ([`crate::kernels::gemm::KC`], [`crate::kernels::gemm::NC`]), the float
//! path takes about 6 KiB (measured on a Cortex-M4: the crate README).
//!
//! Loop nests (sizes in [`crate::kernels::gemm`]):
//!
//! - AVX2 and AVX-512 int, AVX-512 float: for each block of columns (128
//!   int, 64 float), for each tile of weight rows (64 int, 32 float), for each K
//!   chunk, for each matrix: decode the tile's weights once, (int) prepare
//!   the block's activations `NC` columns at a time, and run the
//!   micro-kernel over the columns, accumulating into the tile's
//!   accumulators. The block's activations stay in L2 while every row tile
//!   sweeps them; each decoded weight is reused for the whole block.
//! - Scalar and AVX2 float: for each block of `NC` columns, for each tile
//!   of [`RR`] rows, for each K chunk: decode, then the micro-kernel `CN`
//!   columns at a time.
//!
//! Once K is done a tile's accumulators go to the sink.

use core::ops::Range;

use fused_core::error::check_len;
use fused_core::weights::WeightMatrix;
use fused_core::{DType, Error};

use crate::acts::Acts;
use crate::isa::Isa;
use crate::kernels::gemm::{
    self as kern, CN, FloatAcc, FloatTile, GemmKernel, KC, MAX_LANES, NC, Path, RR,
};

/// Hands `(row, col, [acc of each matrix])` to `sink` for every row in
/// `rows` and every column of `cols`, the accumulators of `mats[i] · x`
/// computed by `kernel`. The matrices must share format and shape, `rows`
/// must lie inside them and every column must be prepared in the kernel's
/// activation mode; otherwise a typed error is returned before any work.
/// Each accumulator depends only on its row, its column and the kernel —
/// not on `rows`, on the other columns nor on `NM`.
pub fn gemm_rows<const NM: usize>(
    kernel: GemmKernel,
    mats: [&WeightMatrix<'_>; NM],
    cols: &[Acts<'_>],
    rows: Range<usize>,
    sink: impl FnMut(usize, usize, [f32; NM]),
) -> Result<(), Error> {
    check(&kernel, &mats, cols, &rows)?;
    if rows.is_empty() || cols.is_empty() || NM == 0 {
        return Ok(());
    }
    match kernel.path {
        #[cfg(target_arch = "x86_64")]
        Path::Float(Isa::Avx512) => float_lanes_rows(kernel.dtype, mats, cols, rows, sink),
        Path::Float(isa) => float_rows(isa, kernel.dtype, mats, cols, rows, sink),
        #[cfg(target_arch = "x86_64")]
        Path::Int(isa, fmt) => int_rows(isa, fmt, mats, cols, rows, sink),
        #[cfg(not(target_arch = "x86_64"))]
        Path::Int(..) => Err(Error::UnsupportedDType {
            what: "integer GEMM kernel on this architecture",
            dtype: kernel.dtype,
        }),
    }
}

/// Validates formats, shapes, the row range and every column.
fn check<const NM: usize>(
    kernel: &GemmKernel,
    mats: &[&WeightMatrix<'_>; NM],
    cols: &[Acts<'_>],
    rows: &Range<usize>,
) -> Result<(), Error> {
    let Some(first) = mats.first() else {
        return Ok(());
    };
    let (m, k) = (first.rows(), first.cols());
    for w in mats {
        if w.dtype() != kernel.dtype {
            return Err(Error::UnsupportedDType {
                what: "weights for this GEMM kernel",
                dtype: w.dtype(),
            });
        }
        check_len("GEMM weight rows", m, w.rows())?;
        check_len("GEMM weight columns", k, w.cols())?;
    }
    if rows.start > rows.end || rows.end > m {
        return Err(Error::LengthMismatch {
            what: "GEMM row range end (must not pass the row count)",
            expected: m,
            actual: rows.end,
        });
    }
    for x in cols {
        match (kernel.mode.dtype(), x) {
            (None, Acts::F32(x)) => check_len("GEMM activation column", k, x.len())?,
            (Some(want), Acts::Quant { dtype, bytes, .. }) if *dtype == want => {
                check_len("GEMM activation bytes", want.row_bytes(k)?, bytes.len())?
            }
            (_, Acts::F32(_)) | (_, Acts::Quant { .. }) => {
                return Err(Error::UnsupportedDType {
                    what: "activations prepared for another mode than the GEMM kernel's",
                    dtype: kernel.dtype,
                });
            }
        }
    }
    Ok(())
}

/// The bytes of elements `k0..k0 + len` (whole blocks) of a packed row.
fn blocks(dtype: DType, row: &[u8], k0: usize, len: usize) -> &[u8] {
    let (blk, bb) = (dtype.block_len(), dtype.block_bytes());
    &row[k0 / blk * bb..(k0 + len) / blk * bb]
}

/// Column `c` of the chunk starting at `c0` with `cn` columns, padded with
/// copies of the last one.
fn padded(c0: usize, cn: usize, c: usize) -> usize {
    c0 + c.min(cn - 1)
}

// The accumulator tiles are indexed [matrix][column][row]; index loops
// read more plainly than nested iterators here.
#[allow(clippy::needless_range_loop)]
fn float_rows<const NM: usize>(
    isa: Isa,
    dtype: DType,
    mats: [&WeightMatrix<'_>; NM],
    cols: &[Acts<'_>],
    rows: Range<usize>,
    mut sink: impl FnMut(usize, usize, [f32; NM]),
) -> Result<(), Error> {
    let k = mats[0].cols();
    let mut tile: FloatTile = [[0.0; KC]; RR];
    // Column blocks outside row tiles: a block's activations stay in L2.
    for c0 in (0..cols.len()).step_by(NC) {
        let cn = NC.min(cols.len() - c0);
        let xs = f32_columns(&cols[c0..c0 + cn]);
        for r0 in rows.clone().step_by(RR) {
            let rn = RR.min(rows.end - r0);
            let mut acc = [[[[0.0f32; MAX_LANES]; RR]; NC]; NM];
            for k0 in (0..k).step_by(KC) {
                let len = KC.min(k - k0);
                for (w, acc) in mats.iter().zip(acc.iter_mut()) {
                    for (i, t) in tile.iter_mut().enumerate() {
                        let row = w.row(r0 + i.min(rn - 1))?;
                        float_decode(isa, dtype, blocks(dtype, row, k0, len), &mut t[..len])?;
                    }
                    for (g, a) in acc[..cn.next_multiple_of(CN)]
                        .chunks_exact_mut(CN)
                        .enumerate()
                    {
                        let x: [&[f32]; CN] =
                            core::array::from_fn(|j| &xs[padded(0, cn, CN * g + j)][k0..k0 + len]);
                        let a: &mut [FloatAcc; CN] = a.try_into().map_err(|_| Error::Overflow {
                            what: "GEMM column group",
                        })?;
                        float_micro(isa, &tile, len, x, a);
                    }
                }
            }
            for j in 0..cn {
                for i in 0..rn {
                    let v = core::array::from_fn(|m| float_reduce(isa, &acc[m][j][i]));
                    sink(r0 + i, c0 + j, v);
                }
            }
        }
    }
    Ok(())
}

/// The AVX-512 float path: weights decoded to f32 and transposed (rows in
/// lanes), so each activation is broadcast once per 32 rows; column blocks
/// of `NC` outside row tiles keep the block's activations in L2.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // as in `float_rows`
fn float_lanes_rows<const NM: usize>(
    dtype: DType,
    mats: [&WeightMatrix<'_>; NM],
    cols: &[Acts<'_>],
    rows: Range<usize>,
    mut sink: impl FnMut(usize, usize, [f32; NM]),
) -> Result<(), Error> {
    use kern::x86_avx512::{self as v, FCN, FKC, FRT, FloatRows, FloatRowsAcc};

    let k = mats[0].cols();
    let mut tile = FloatRows::new();
    let mut wr: [&[u8]; FRT] = [&[]; FRT];
    for c0 in (0..cols.len()).step_by(NC) {
        let cn = NC.min(cols.len() - c0);
        let xs = f32_columns(&cols[c0..c0 + cn]);
        for r0 in rows.clone().step_by(FRT) {
            let rn = FRT.min(rows.end - r0);
            let mut acc = [[[[0.0f32; 16]; 2]; NC]; NM];
            for k0 in (0..k).step_by(FKC) {
                let len = FKC.min(k - k0);
                for (w, acc) in mats.iter().zip(acc.iter_mut()) {
                    for (i, r) in wr.iter_mut().enumerate() {
                        let row = w.row(r0 + i.min(rn - 1))?;
                        *r = &row[blocks(dtype, row, 0, k0).len()..];
                    }
                    // SAFETY: a `Path::Float(Avx512)` is only built by
                    // `gemm_kernel` after `Isa::Avx512.is_supported()`.
                    unsafe { v::decode_rows(dtype, &wr, len, &mut tile)? };
                    let groups = acc[..cn.next_multiple_of(FCN)].chunks_exact_mut(FCN);
                    for (g, a) in groups.enumerate() {
                        let x: [&[f32]; FCN] =
                            core::array::from_fn(|j| &xs[padded(0, cn, FCN * g + j)][k0..k0 + len]);
                        let a: &mut [FloatRowsAcc; FCN] =
                            a.try_into().map_err(|_| Error::Overflow {
                                what: "GEMM column group",
                            })?;
                        // SAFETY: as above.
                        unsafe { v::micro_rows(&tile, x, a) };
                    }
                }
            }
            for j in 0..cn {
                for i in 0..rn {
                    let v = core::array::from_fn(|m| acc[m][j][i / 16][i % 16]);
                    sink(r0 + i, c0 + j, v);
                }
            }
        }
    }
    Ok(())
}

/// The f32 values of a block of at most `NC` columns (`check` verified the
/// variant and the length); the slots past the block stay empty.
fn f32_columns<'a>(block: &[Acts<'a>]) -> [&'a [f32]; NC] {
    let mut xs: [&[f32]; NC] = [&[]; NC];
    for (x, col) in xs.iter_mut().zip(block) {
        if let Acts::F32(v) = *col {
            *x = v;
        }
    }
    xs
}

fn float_decode(isa: Isa, dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), Error> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Path::Float(isa)` is only built by `gemm_kernel` after
        // `isa.is_supported()`, so AVX2/FMA/F16C are present.
        Isa::Avx2 => unsafe { kern::x86_avx2::decode(dtype, src, dst) },
        _ => kern::scalar::decode(dtype, src, dst),
    }
}

fn float_micro(isa: Isa, w: &FloatTile, len: usize, x: [&[f32]; CN], acc: &mut [FloatAcc; CN]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the ISA is present (see `float_decode`); `len ≤ KC` and
        // every `x[c]` has exactly `len` values (sliced by the caller).
        Isa::Avx2 => unsafe { kern::x86_avx2::micro(w, len, x, acc) },
        _ => kern::scalar::micro(w, len, x, acc),
    }
}

fn float_reduce(isa: Isa, lanes: &[f32; MAX_LANES]) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the ISA is present (see `float_decode`); 8 lanes.
        Isa::Avx2 => unsafe { kern::x86_avx2::reduce(lanes) },
        _ => kern::scalar::reduce(lanes),
    }
}

/// Columns whose accumulators one int row tile keeps (decoding the tile's
/// weights once for all of them): 16 KiB of accumulators per matrix, and
/// about 0.5 MiB of Q8 activations for K = 4096.
#[cfg(target_arch = "x86_64")]
const INT_COLS: usize = 2 * NC;

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // as in `float_rows`
fn int_rows<const NM: usize>(
    isa: Isa,
    fmt: kern::IntFormat,
    mats: [&WeightMatrix<'_>; NM],
    cols: &[Acts<'_>],
    rows: Range<usize>,
    mut sink: impl FnMut(usize, usize, [f32; NM]),
) -> Result<(), Error> {
    use kern::int::{IntAcc, IntActs, IntTile, RV};
    use kern::{IntFormat, RT, x86_avx2 as v2};

    let (k, wdt) = (mats[0].cols(), mats[0].dtype());
    let adt = match fmt {
        IntFormat::Legacy(_) => DType::Q8_0,
        IntFormat::Q4K | IntFormat::Q6K => DType::Q8_K,
    };
    let mut tile = IntTile::new();
    let mut acts = IntActs::new();
    let mut cb: [&[u8]; NC] = [&[]; NC];
    let mut wr: [&[u8]; RT] = [&[]; RT];
    // Column blocks outside row tiles: a block's activations (up to
    // `INT_COLS` columns) stay in L2 while every row tile sweeps them; each
    // tile's weights are decoded once per K chunk for the whole block.
    for s0 in (0..cols.len()).step_by(INT_COLS) {
        let sn = INT_COLS.min(cols.len() - s0);
        for r0 in rows.clone().step_by(RT) {
            let rn = RT.min(rows.end - r0);
            let mut acc = [[[[0.0f32; 16]; RV]; INT_COLS]; NM];
            for k0 in (0..k).step_by(KC) {
                let len = KC.min(k - k0);
                for (w, acc) in mats.iter().zip(acc.iter_mut()) {
                    for (i, r) in wr.iter_mut().enumerate() {
                        let row = w.row(r0 + i.min(rn - 1))?;
                        *r = &row[blocks(wdt, row, 0, k0).len()..];
                    }
                    // SAFETY: the kernel was built by `gemm_kernel` only on
                    // a supported AVX2 or AVX-512; `len ≤ KC` is a whole
                    // number of weight blocks and every row slice holds them.
                    unsafe { int_decode(isa, fmt, &wr, len, &mut tile) };
                    if k0 + KC >= k {
                        // Last chunk: ask for the next tile's first one.
                        let n = blocks(wdt, w.row(0)?, 0, KC.min(k)).len();
                        for r in (r0 + RT..rows.end).take(RT) {
                            // SAFETY: as above (a prefetch hint).
                            unsafe { v2::prefetch(&w.row(r)?[..n]) };
                        }
                    }
                    for c0 in (0..sn).step_by(NC) {
                        let cn = NC.min(sn - c0);
                        for (b, col) in cb.iter_mut().zip(&cols[s0 + c0..s0 + c0 + cn]) {
                            // `check` verified the variant, format and length.
                            if let Acts::Quant { bytes, .. } = col {
                                *b = blocks(adt, bytes, k0, len);
                            }
                        }
                        // SAFETY: as above; `cn ≤ NC` and `len` is a whole
                        // number of Q8_0 / Q8_K blocks each column holds.
                        unsafe { v2::prep_acts(fmt, &cb[..cn], len, &mut acts) };
                        let groups = acc[c0..c0 + cn.next_multiple_of(CN)].chunks_exact_mut(CN);
                        for (g, a) in groups.enumerate() {
                            let cs: [usize; CN] =
                                core::array::from_fn(|j| padded(0, cn, CN * g + j));
                            let a: &mut [IntAcc; CN] =
                                a.try_into().map_err(|_| Error::Overflow {
                                    what: "GEMM column group",
                                })?;
                            // SAFETY: as above; `tile` and `acts` hold these
                            // `len` elements and every `cs[j] < cn ≤ NC`.
                            unsafe { int_micro(isa, fmt, &tile, &acts, cs, len, a) };
                        }
                    }
                }
            }
            for j in 0..sn {
                for i in 0..rn {
                    let v = core::array::from_fn(|m| acc[m][j][i / 16][i % 16]);
                    sink(r0 + i, s0 + j, v);
                }
            }
        }
    }
    Ok(())
}

/// Decodes an int tile on `isa`.
///
/// # Safety
/// `isa` (AVX2 or AVX-512) must be supported; as the decoders otherwise.
#[cfg(target_arch = "x86_64")]
unsafe fn int_decode(
    isa: Isa,
    fmt: kern::IntFormat,
    rows: &[&[u8]; kern::RT],
    len: usize,
    tile: &mut kern::int::IntTile,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match isa {
            Isa::Avx512 => kern::x86_avx512::decode_int(fmt, rows, len, tile),
            _ => kern::x86_avx2::decode_int(fmt, rows, len, tile),
        }
    }
}

/// Runs the int micro-kernel of `isa` and `fmt` over every row of the tile
/// for the prepared columns `cs`.
///
/// # Safety
/// `isa` (AVX2 or AVX-512) must be supported; `tile` and `acts` hold `len`
/// elements; every `cs[j] < NC`.
#[cfg(target_arch = "x86_64")]
unsafe fn int_micro(
    isa: Isa,
    fmt: kern::IntFormat,
    tile: &kern::int::IntTile,
    acts: &kern::int::IntActs,
    cs: [usize; CN],
    len: usize,
    a: &mut [kern::int::IntAcc; CN],
) {
    use kern::{IntFormat, RT, x86_avx2 as v2, x86_avx512 as v5};
    // SAFETY: (every call below) forwarded from the caller; `h` stays below
    // the ISA's number of calls per tile.
    unsafe {
        if isa == Isa::Avx512 {
            for h in 0..RT / 32 {
                match fmt {
                    IntFormat::Legacy(_) => v5::micro_legacy(tile, acts, cs, len, h, a),
                    IntFormat::Q4K => v5::micro_kquant::<8, true>(tile, acts, cs, len, h, a),
                    IntFormat::Q6K => v5::micro_kquant::<4, false>(tile, acts, cs, len, h, a),
                }
            }
            return;
        }
        for h in 0..v2::INT_CALLS {
            match fmt {
                IntFormat::Legacy(DType::Q8_0 | DType::IQ4_NL) => {
                    v2::micro_legacy::<true>(tile, acts, cs, len, h, a)
                }
                IntFormat::Legacy(_) => v2::micro_legacy::<false>(tile, acts, cs, len, h, a),
                IntFormat::Q4K => v2::micro_kquant::<8, true>(tile, acts, cs, len, h, a),
                IntFormat::Q6K => v2::micro_kquant::<4, false>(tile, acts, cs, len, h, a),
            }
        }
    }
}
