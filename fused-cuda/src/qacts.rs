//! The device layout of quantized activation columns (the core's
//! [`ActQuant::Q8_0`], [`ActQuant::Q8_1`] and [`ActQuant::Q8_K`] modes), as
//! the quantizer kernels (`fused_quantize_*` in `kernels/gemv.cu`) write it
//! and the integer GEMV kernels read it: four arrays, each 16-byte aligned.
//!
//! - codes: `n_cols · K` signed bytes, column after column (the codes of
//!   [`fused_core::quant::quantize_row`]), in pieces of 16 interleaved
//!   within groups of 32 chunks ([`code_offset`]: chunks of 32 elements for
//!   Q8_0 and Q8_1, 64 for Q8_K), so that the 32 lanes of a warp, one chunk
//!   each, read contiguous bytes: always for Q8_K, for Q8_0 and Q8_1 where
//!   there is more than one column ([`QactsLayout::interleaved`]; one
//!   column keeps element order, which measured faster there);
//! - scales: f32, per block (32 elements for Q8_0 and Q8_1, 256 for Q8_K):
//!   Q8_0 its f16 `d` converted to f32; Q8_1 two, its f16 `d` and `s` (the
//!   f16 of `d·Σq`) converted to f32; Q8_K its f32 `d`;
//! - sums: i32. Q8_0: one per block, the sum of its codes. Q8_1: none (its
//!   kernels take `s`). Q8_K: the 16 `bsums` of each block, reordered so
//!   that the sums the Q4_K GEMV's unit `v = 2c + h` (0..8) needs sit
//!   together: group `g` at `2·(2·(g / 4) + g mod 2) + (g / 2) mod 2`;
//! - counters: u32, one per block, zero whenever no launch runs: a GEMV
//!   that writes these activations as its quantized output counts there
//!   the GEMV blocks done with each activation block (`QuantOut` in
//!   `kernels/gemv.cu`), the last one back to 0.

use fused_core::acts::ActQuant;
use fused_core::error::Unsupported;
use fused_core::{DType, Error};

/// Quantized activations copied back to the host
/// (`CudaBackend::download_acts`).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(not(feature = "lab"), allow(dead_code, unreachable_pub))]
pub struct QuantizedActs {
    /// The codes, column after column, in element order.
    pub codes: Vec<i8>,
    /// Per block (32 elements for Q8_0 and Q8_1, 256 for Q8_K): Q8_0 its
    /// f16 scale as f32; Q8_1 two, its f16 scale `d` and f16 `s = d·Σq` as
    /// f32; Q8_K its f32 scale.
    pub scales: Vec<f32>,
    /// Q8_0: each block's sum of codes. Q8_1: empty. Q8_K: each block's 16 sums of 16
    /// codes, group `g` of a block at `2·(2·(g / 4) + g mod 2) + (g / 2) mod 2`
    /// among its 16 (the order the Q4_K kernel reads them in).
    pub sums: Vec<i32>,
}

/// Where the four arrays lie in one buffer of quantized activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct QactsLayout {
    /// The mode (Q8_0, Q8_1 or Q8_K).
    pub(crate) mode: ActQuant,
    /// Elements per column.
    pub(crate) k: usize,
    /// Columns.
    pub(crate) n_cols: usize,
    /// Byte offset of the scales.
    pub(crate) scales: usize,
    /// Byte offset of the sums.
    pub(crate) sums: usize,
    /// Byte offset of the completion counters (one u32 per block, 0
    /// between launches) of a GEMV that writes these activations as its
    /// quantized output (`Launch::set_quant_out`).
    pub(crate) counters: usize,
    /// Bytes in all.
    pub(crate) bytes: usize,
}

/// `n` rounded up to a multiple of 16.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const fn align16(n: usize) -> usize {
    n.div_ceil(16) * 16
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl QactsLayout {
    /// The layout of `n_cols` columns of `k` in `mode` (`k` a multiple of
    /// the mode's block length).
    pub(crate) fn new(mode: ActQuant, k: usize, n_cols: usize) -> Result<QactsLayout, Error> {
        let (dtype, sums_per_block) = match mode {
            ActQuant::Q8_0 => (DType::Q8_0, 1),
            ActQuant::Q8_1 => (DType::Q8_1, 0),
            ActQuant::Q8_K => (DType::Q8_K, 16),
            ActQuant::F32 => return Err(Error::Unsupported(Unsupported::ActQuant(mode))),
        };
        let scales_per_block = if mode == ActQuant::Q8_1 { 2 } else { 1 };
        let block = dtype.block_len();
        if !k.is_multiple_of(block) {
            return Err(Error::NotBlockAligned { dtype, len: k });
        }
        let overflow = Error::Overflow {
            what: "quantized activation bytes",
        };
        let codes = k.checked_mul(n_cols).ok_or(overflow)?;
        let blocks = codes / block;
        let scales = align16(codes);
        let sums = scales + align16(4 * blocks * scales_per_block);
        let counters = sums + align16(4 * blocks * sums_per_block);
        let bytes = counters + align16(4 * blocks);
        Ok(QactsLayout {
            mode,
            k,
            n_cols,
            scales,
            sums,
            counters,
            bytes,
        })
    }

    /// The block length (32 or 256).
    pub(crate) fn block(&self) -> usize {
        if self.mode == ActQuant::Q8_K { 256 } else { 32 }
    }

    /// Whether the codes lie interleaved ([`code_offset`]) rather than in
    /// element order: Q8_K always, Q8_0 and Q8_1 from two columns up
    /// (`code_offset` in `kernels/gemv.cu` says why).
    pub(crate) fn interleaved(&self) -> bool {
        self.mode == ActQuant::Q8_K || self.n_cols > 1
    }

    /// Blocks over all columns.
    pub(crate) fn blocks(&self) -> usize {
        self.k * self.n_cols / self.block()
    }

    /// Scales over all columns.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn n_scales(&self) -> usize {
        if self.mode == ActQuant::Q8_1 {
            2 * self.blocks()
        } else {
            self.blocks()
        }
    }

    /// Sums over all columns.
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn n_sums(&self) -> usize {
        match self.mode {
            ActQuant::Q8_K => 16 * self.blocks(),
            ActQuant::Q8_1 => 0,
            _ => self.blocks(),
        }
    }

    /// The codes of all columns in element order, from the device's
    /// `bytes` of this layout (codes first, interleaved pieces placed by
    /// [`code_offset`]).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    pub(crate) fn codes_in_element_order(&self, bytes: &[u8]) -> Vec<i8> {
        let n = self.k * self.n_cols;
        if !self.interleaved() {
            return bytes[..n].iter().map(|&b| b as i8).collect();
        }
        let mut codes = vec![0i8; n];
        for (c, col) in codes.chunks_exact_mut(self.k).enumerate() {
            for (p, piece) in col.chunks_exact_mut(16).enumerate() {
                let at = c * self.k + code_offset(self.mode, self.k, 16 * p);
                for (dst, &src) in piece.iter_mut().zip(&bytes[at..at + 16]) {
                    *dst = src as i8;
                }
            }
        }
        codes
    }
}

/// Elements of a lane's chunk in the code interleave of `mode`: a Q4_K
/// chunk (64) for Q8_K, a block (32) for Q8_0 and Q8_1.
#[cfg_attr(not(feature = "lab"), allow(dead_code))]
const fn code_chunk(mode: ActQuant) -> usize {
    match mode {
        ActQuant::Q8_K => 64,
        _ => 32,
    }
}

/// Byte offset, within a column of `k` codes of `mode` (`k` a multiple of
/// its block), of the 16 codes from element `e` (a multiple of 16). A
/// column's codes lie in groups of 32 chunks ([`code_chunk`] elements each;
/// the last group has `g` ≤ 32 chunks); piece `l` (elements `16l .. 16l +
/// 15`) of chunk `j` of a group sits at `16·(g·l + j)` in it. `code_offset`
/// in `kernels/gemv.cu` is the same map: 32 lanes taking one chunk each
/// read piece `l` of their chunks as one contiguous 512 bytes.
#[cfg_attr(not(feature = "lab"), allow(dead_code))]
pub(crate) const fn code_offset(mode: ActQuant, k: usize, e: usize) -> usize {
    let chunk = code_chunk(mode);
    let group = 32 * chunk;
    let base = e / group * group;
    let g = if (k - base) / chunk < 32 {
        (k - base) / chunk
    } else {
        32
    };
    base + 16 * (g * ((e / 16) % (chunk / 16)) + (e - base) / chunk)
}

/// Where bsum group `g` (0..16) of a Q8_K block lies among its 16 sums
/// (`bsum_slot` in `kernels/gemv.cu`).
#[cfg(test)]
const fn bsum_slot(g: usize) -> usize {
    2 * (2 * (g / 4) + g % 2) + (g / 2) % 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_aligned_and_refuse_other_modes() {
        let l = QactsLayout::new(ActQuant::Q8_0, 96, 3).unwrap();
        assert_eq!(
            (l.scales, l.sums, l.blocks(), l.n_sums()),
            (288, 288 + 48, 9, 9)
        );
        assert_eq!((l.counters, l.bytes), (288 + 48 + 48, 288 + 48 + 48 + 48));
        let l = QactsLayout::new(ActQuant::Q8_K, 512, 1).unwrap();
        assert_eq!(
            (l.scales, l.sums, l.counters, l.bytes),
            (512, 528, 528 + 128, 528 + 128 + 16)
        );
        let l = QactsLayout::new(ActQuant::Q8_1, 96, 1).unwrap();
        assert_eq!(
            (l.scales, l.sums, l.bytes, l.n_scales(), l.n_sums()),
            (96, 96 + 32, 96 + 32 + 16, 6, 0)
        );
        assert!(matches!(
            QactsLayout::new(ActQuant::F32, 32, 1),
            Err(Error::Unsupported(Unsupported::ActQuant(ActQuant::F32)))
        ));
        assert!(matches!(
            QactsLayout::new(ActQuant::Q8_K, 32, 1),
            Err(Error::NotBlockAligned { .. })
        ));
    }

    #[test]
    fn code_offsets_are_a_permutation_of_the_pieces() {
        for (mode, ks) in [
            (
                ActQuant::Q8_K,
                &[256usize, 1024 + 256, 2048, 4096, 11008, 14336][..],
            ),
            (
                ActQuant::Q8_0,
                &[32, 96, 1024, 1024 + 32, 4096, 11008, 14336][..],
            ),
            (ActQuant::Q8_1, &[32, 2048 + 64][..]),
        ] {
            let chunk = code_chunk(mode);
            for &k in ks {
                let mut seen = vec![false; k / 16];
                for e in (0..k).step_by(16) {
                    let at = code_offset(mode, k, e);
                    assert!(
                        at.is_multiple_of(16) && at < k,
                        "{mode:?} k={k} e={e}: {at}"
                    );
                    assert!(!seen[at / 16], "{mode:?} k={k} e={e}: {at} twice");
                    seen[at / 16] = true;
                    // The pieces of a chunk stay in its group of 32 chunks.
                    assert_eq!(at / (32 * chunk), e / (32 * chunk), "{mode:?} k={k} e={e}");
                }
                // Piece l of consecutive chunks is contiguous.
                if k >= 32 * chunk {
                    for l in 0..chunk / 16 {
                        let at: Vec<usize> = (0..32)
                            .map(|j| code_offset(mode, k, chunk * j + 16 * l))
                            .collect();
                        assert!(
                            at.windows(2).all(|w| w[1] == w[0] + 16),
                            "{mode:?} k={k} l={l}: {at:?}"
                        );
                    }
                }
            }
        }
        // The last, partial group of k = 11008: Q8_K 172 chunks, 12 in it;
        // Q8_0 344 blocks, 24 in it.
        let k = 11008;
        assert_eq!(
            code_offset(ActQuant::Q8_K, k, 5 * 2048 + 16),
            5 * 2048 + 16 * 12
        );
        assert_eq!(
            code_offset(ActQuant::Q8_0, k, 10 * 1024 + 16),
            10 * 1024 + 16 * 24
        );
    }

    #[test]
    fn codes_come_back_in_element_order() {
        for mode in [ActQuant::Q8_0, ActQuant::Q8_1, ActQuant::Q8_K] {
            for n_cols in [1, 2] {
                let l = QactsLayout::new(mode, 2048 + 256, n_cols).unwrap();
                assert_eq!(l.interleaved(), mode == ActQuant::Q8_K || n_cols == 2);
                let mut bytes = vec![0u8; l.bytes];
                for e in 0..l.k * l.n_cols {
                    let (c, i) = (e / l.k, e % l.k);
                    let at = if l.interleaved() {
                        c * l.k + code_offset(mode, l.k, i / 16 * 16) + i % 16
                    } else {
                        e
                    };
                    bytes[at] = e as u8;
                }
                let codes = l.codes_in_element_order(&bytes);
                assert!(
                    codes.iter().enumerate().all(|(e, &q)| q == e as u8 as i8),
                    "{mode:?} {n_cols} columns"
                );
            }
        }
    }

    #[test]
    fn bsum_slots_are_a_permutation_pairing_each_units_groups() {
        let mut seen = [false; 16];
        for g in 0..16 {
            seen[bsum_slot(g)] = true;
        }
        assert!(seen.iter().all(|&s| s));
        // Unit v = 2c + h reads groups 4c + h and 4c + 2 + h at 2v, 2v + 1.
        for v in 0..8 {
            let (c, h) = (v / 2, v % 2);
            assert_eq!(
                (bsum_slot(4 * c + h), bsum_slot(4 * c + 2 + h)),
                (2 * v, 2 * v + 1)
            );
        }
    }
}
