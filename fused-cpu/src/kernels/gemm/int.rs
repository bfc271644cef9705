//! The tiles of the integer GEMM kernels (x86 AVX2 and AVX-512 VNNI):
//! decoded weight codes in a rows-in-lanes layout, prepared activation
//! columns, and the per-row integer corrections, which are plain integer
//! arithmetic shared by both ISAs.
//!
//! Layout: for each group of four consecutive `k`, the 256 bytes
//! `codes[kg]` hold the four signed 8-bit codes of row `r` at bytes
//! `4r..4r + 4`. A vector of `L` 32-bit lanes loaded at byte `4r0` then
//! holds one group of rows `r0..r0 + L`, so one multiply-add instruction
//! against a broadcast activation word adds four products to every row at
//! once (`vpdpbusd` on AVX-512, `vpmaddubsw` + `vpmaddwd` on AVX2) and no
//! horizontal sum is ever needed.
//!
//! Activations are stored with `+128` (the sign bit flipped) as unsigned
//! bytes, so `Σ (y + 128)·w` is computed; the excess `128·Σw` is a per-row
//! constant of the weights, subtracted through the starting value of each
//! block's sum (`start_values`).

use super::{IntFormat, KC, RT};

/// Bytes of a Q8_K block (f32 d, 256 codes, 16 i16 bsums).
pub(crate) const Q8K: usize = 292;
/// Bytes of a Q8_0 block (f16 d, 32 codes).
pub(crate) const Q8_0: usize = 34;
/// Super-blocks per K chunk.
pub(crate) const SB: usize = KC / 256;
/// 16-row vectors per int tile.
pub const RV: usize = RT / 16;

/// The accumulators of one column of an int tile, 16 rows per entry.
pub type IntAcc = [[f32; 16]; RV];

/// One K chunk of [`RT`] weight rows decoded for the int kernels.
#[derive(Debug)]
pub struct IntTile {
    /// `[k group][16-row vector][lane·4 + j]`: code `j` of the group's four
    /// (see the module documentation).
    pub(crate) codes: [[[u8; 64]; RV]; KC / 4],
    /// Row-major codes before the transpose.
    pub(crate) rows: [[u8; KC]; RT],
    /// Σ of the codes of each 16-element group, per row.
    pub(crate) sum16: [[i32; RT]; KC / 16],
    /// Legacy: `−128·Σ codes` of each block, per row.
    pub(crate) corr: [[i32; RT]; KC / 32],
    /// K-quants: the integer scale of each group (32 elements for Q4_K,
    /// 16 for Q6_K), per row.
    pub(crate) gsc: [[i32; RT]; KC / 16],
    /// K-quants: the starting value of the super-block sum, per row.
    pub(crate) sbcorr: [[i32; RT]; SB],
    /// K-quants: i16 pairs multiplied with the bsum pairs (Q4_K: `(m, m)`,
    /// Q6_K: `(−32·sc, −32·sc')`), per super-block, pair and row.
    pub(crate) pairs: [[[i32; RT]; 8]; SB],
    /// Legacy: `dx` per block; K-quants: `d` per super-block (first `SB`).
    pub(crate) scale: [[f32; RT]; KC / 32],
    /// Q4_K: `dmin` per super-block.
    pub(crate) scale2: [[f32; RT]; SB],
}

impl IntTile {
    /// A zeroed tile.
    pub const fn new() -> IntTile {
        IntTile {
            codes: [[[0; 64]; RV]; KC / 4],
            rows: [[0; KC]; RT],
            sum16: [[0; RT]; KC / 16],
            corr: [[0; RT]; KC / 32],
            gsc: [[0; RT]; KC / 16],
            sbcorr: [[0; RT]; SB],
            pairs: [[[0; RT]; 8]; SB],
            scale: [[0.0; RT]; KC / 32],
            scale2: [[0.0; RT]; SB],
        }
    }
}

impl Default for IntTile {
    fn default() -> IntTile {
        IntTile::new()
    }
}

/// One K chunk of up to [`super::NC`] activation columns prepared for the
/// int kernels.
#[derive(Debug)]
pub struct IntActs {
    /// Codes `+ 128`, per column.
    pub(crate) codes: [[u8; KC]; super::NC],
    /// The activation scale per block (Q8_0) or super-block (Q8_K).
    pub(crate) dy: [[f32; KC / 32]; super::NC],
    /// Q8_K: the 16 bsums of each super-block as eight i16 pairs.
    pub(crate) bsums: [[i32; 8 * SB]; super::NC],
}

impl IntActs {
    /// A zeroed buffer.
    pub const fn new() -> IntActs {
        IntActs {
            codes: [[0; KC]; super::NC],
            dy: [[0.0; KC / 32]; super::NC],
            bsums: [[0; 8 * SB]; super::NC],
        }
    }
}

impl Default for IntActs {
    fn default() -> IntActs {
        IntActs::new()
    }
}

/// Fills the starting values of each block's integer sum from the code sums
/// `t.sum16` of the first `len` elements: `−128·Σ codes` per legacy block,
/// and per K-quant super-block `−128·Σ_g scale_g·Σ codes_g`, so that the
/// `+128` of the prepared activations cancels exactly (wrapping i32
/// arithmetic whose true result fits).
pub(crate) fn start_values(fmt: IntFormat, len: usize, t: &mut IntTile) {
    match fmt {
        IntFormat::Legacy(_) => {
            for b in 0..len / 32 {
                for r in 0..RT {
                    t.corr[b][r] = (t.sum16[2 * b][r] + t.sum16[2 * b + 1][r]).wrapping_mul(-128);
                }
            }
        }
        IntFormat::Q4K | IntFormat::Q6K => {
            // Q4_K: one scale per 32 elements (two sum16 groups); Q6_K: one
            // per 16.
            let per = if fmt == IntFormat::Q4K { 2 } else { 1 };
            for sb in 0..len / 256 {
                for r in 0..RT {
                    let mut s = 0i32;
                    for g in 0..16 / per {
                        let codes: i32 = (0..per).map(|i| t.sum16[16 * sb + per * g + i][r]).sum();
                        let sc = t.gsc[(16 / per) * sb + g][r];
                        s = s.wrapping_add(codes.wrapping_mul(sc));
                    }
                    t.sbcorr[sb][r] = s.wrapping_mul(-128);
                }
            }
        }
    }
}
