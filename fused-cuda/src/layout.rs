//! The device layout of quantized GEMV weights: lane-interleaved tiles.
//!
//! The GEMV kernels (`kernels/gemv.cu`) read quantized weights with one
//! 16-byte load per lane and the f32 activations with coalesced 16-byte
//! loads (lane `l` reads elements `4l..4l+3` of each 128-element stretch).
//! Both at once need the codes of the elements a lane multiplies to sit in
//! that lane's 16 bytes, which the core's block layout does not give; so
//! [`to_device`] rearranges every quantized matrix once, when it is uploaded.
//! The rearrangement moves bytes and nibbles only: the device copy has
//! exactly the bytes of the original (same length, same values encoded).
//!
//! A *tile* is [`Tiling::elems`] consecutive elements of one row (1024 for
//! Q4_0 and Q4_K, 512 for Q8_0); its codes are 512 bytes, 16 per lane of a
//! warp, and its scales [`Tiling::scale_bytes`]. Element `E` of a tile is in
//! *chunk* `t = E / 128` of lane `l = (E % 128) / 4`, at position
//! `i = E % 4`. In lane `l`'s 16 bytes (4 little-endian words):
//!
//! - 4-bit codes (Q4_0, Q4_K): byte `i` of word `u` holds chunk `2u` in its
//!   low nibble and chunk `2u + 1` in its high nibble;
//! - 8-bit codes (Q8_0): byte `i` of word `u` is chunk `u`.
//!
//! Chunk `t` of lane `l` lies in 32-element block `4t + l/8` of the tile. The
//! scales of a Q4_0 / Q8_0 tile are its blocks' f16 `d`, ordered so that the
//! 8 lanes of group `g = l/8` find theirs together: group `g`, chunk `t` at
//! byte `2(T·g + t)` (`T` = chunks per lane, 8 or 4). A Q4_K tile's scales are
//! its four super-blocks' 16-byte headers (`d`, `dmin`, packed 6-bit scales
//! and mins), unchanged.
//!
//! The matrix: first the codes of every full tile (row `r`, tile `j` at
//! `512·(r·nt + j)`), then their scales (at `C + scale_bytes·(r·nt + j)`, `C`
//! the size of all codes), then each row's remaining blocks (`K` not a
//! multiple of the tile) in the core's block layout, row after row. Every
//! region starts 16-byte aligned.

use fused_core::DType;

/// Bytes of codes per tile: 16 for each of the 32 lanes of a warp.
pub(crate) const TILE_CODE_BYTES: usize = 512;

/// The tile geometry of a quantized format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiling {
    /// Elements of one tile.
    pub(crate) elems: usize,
    /// Bytes of scales of one tile.
    pub(crate) scale_bytes: usize,
}

/// The tiling of `dtype`, or `None` where the device keeps the core's layout
/// (F32, F16).
pub(crate) const fn tiling(dtype: DType) -> Option<Tiling> {
    match dtype {
        DType::Q4_0 => Some(Tiling {
            elems: 1024,
            scale_bytes: 64,
        }),
        DType::Q8_0 => Some(Tiling {
            elems: 512,
            scale_bytes: 32,
        }),
        DType::Q4_K => Some(Tiling {
            elems: 1024,
            scale_bytes: 64,
        }),
        _ => None,
    }
}

/// The code (4 or 8 bits, as stored) of element `e` of the blocks in `src`
/// (whole blocks of `dtype`, the core's layout).
fn code(dtype: DType, src: &[u8], e: usize) -> u8 {
    let (blk, i) = (e / dtype.block_len(), e % dtype.block_len());
    let b = &src[blk * dtype.block_bytes()..(blk + 1) * dtype.block_bytes()];
    match dtype {
        // d (2 bytes), then byte j: element j (low nibble), j + 16 (high).
        DType::Q4_0 => {
            let q = b[2 + i % 16];
            if i < 16 { q & 15 } else { q >> 4 }
        }
        // d (2 bytes), then 32 signed codes.
        DType::Q8_0 => b[2 + i],
        // 16-byte header, then per 64-element chunk c, byte 32c + p: element
        // 64c + p (low nibble) and 64c + 32 + p (high).
        DType::Q4_K => {
            let (c, p) = (i / 64, i % 64);
            let q = b[16 + 32 * c + p % 32];
            if p < 32 { q & 15 } else { q >> 4 }
        }
        _ => unreachable!("not a tiled format"),
    }
}

/// Writes one tile (the whole blocks `src`) as codes and scales.
fn tile(dtype: DType, src: &[u8], codes: &mut [u8], scales: &mut [u8]) {
    let four_bit = dtype != DType::Q8_0;
    for l in 0..32 {
        for u in 0..4 {
            for i in 0..4 {
                let at = |t: usize| 128 * t + 4 * l + i;
                codes[16 * l + 4 * u + i] = if four_bit {
                    code(dtype, src, at(2 * u)) | (code(dtype, src, at(2 * u + 1)) << 4)
                } else {
                    code(dtype, src, at(u))
                };
            }
        }
    }
    match dtype {
        DType::Q4_K => scales.copy_from_slice(
            &src.chunks_exact(dtype.block_bytes())
                .flat_map(|b| b[..16].iter().copied())
                .collect::<Vec<u8>>(),
        ),
        _ => {
            let per_lane = if four_bit { 8 } else { 4 };
            for g in 0..4 {
                for t in 0..per_lane {
                    let b = (4 * t + g) * dtype.block_bytes();
                    let at = 2 * (per_lane * g + t);
                    scales[at..at + 2].copy_from_slice(&src[b..b + 2]);
                }
            }
        }
    }
}

/// `rows × cols` weights of `dtype` (the core's layout, row-major, `bytes`
/// exactly that long) in the device layout; formats without a tiling are
/// returned as they are.
pub(crate) fn to_device(dtype: DType, rows: usize, cols: usize, bytes: &[u8]) -> Vec<u8> {
    let Some(t) = tiling(dtype) else {
        return bytes.to_vec();
    };
    let row_bytes = bytes.len() / rows.max(1);
    let nt = cols / t.elems;
    let tile_src = t.elems / dtype.block_len() * dtype.block_bytes();
    let tail = row_bytes - nt * tile_src;
    let mut out = vec![0u8; bytes.len()];
    let (codes, rest) = out.split_at_mut(rows * nt * TILE_CODE_BYTES);
    let (scales, tails) = rest.split_at_mut(rows * nt * t.scale_bytes);
    for (r, src) in bytes.chunks_exact(row_bytes.max(1)).enumerate().take(rows) {
        for j in 0..nt {
            let at = r * nt + j;
            tile(
                dtype,
                &src[j * tile_src..(j + 1) * tile_src],
                &mut codes[at * TILE_CODE_BYTES..(at + 1) * TILE_CODE_BYTES],
                &mut scales[at * t.scale_bytes..(at + 1) * t.scale_bytes],
            );
        }
        tails[r * tail..(r + 1) * tail].copy_from_slice(&src[nt * tile_src..]);
    }
    out
}

/// The planes of the integer (quantized-activation) layout of `dtype`: byte
/// ranges `(offset, len)` of one of its blocks, in the order the planes lie
/// in the matrix (codes first), or `None` for the formats without integer
/// kernels. Each block's range `p` lies in plane `p` at `len·(r·nb + b)`.
pub(crate) const fn int_planes(dtype: DType) -> Option<&'static [(usize, usize)]> {
    Some(match dtype {
        // qs, then d.
        DType::Q8_0 => &[(2, 32), (0, 2)],
        DType::Q4_0 | DType::IQ4_NL => &[(2, 16), (0, 2)],
        // qs, then d and m.
        DType::Q4_1 => &[(4, 16), (0, 4)],
        // qs, qh, then d (and m).
        DType::Q5_0 => &[(6, 16), (2, 4), (0, 2)],
        DType::Q5_1 => &[(8, 16), (4, 4), (0, 4)],
        // qs, then the 16-byte header (d, dmin, packed scales); Q5_K then qh.
        DType::Q4_K => &[(16, 128), (0, 16)],
        DType::Q5_K => &[(48, 128), (0, 16), (16, 32)],
        // ql, qh, the 16 scales, d.
        DType::Q6_K => &[(0, 128), (128, 64), (192, 16), (208, 2)],
        // qs, d.
        DType::TQ2_0 => &[(0, 64), (64, 2)],
        _ => return None,
    })
}

/// `rows × cols` weights of `dtype` (a quantized format; the core's layout,
/// row-major, `bytes` exactly that long) in the layout of the integer
/// (quantized-activation) kernels, `QUnit` in `kernels/gemv.cu`: each block
/// cut into the byte ranges of [`int_planes`], every range in a plane of
/// its own, the planes one after the other (block `b` of row `r` at
/// `len·(r·nb + b)` in its plane), so that the kernels' loads of one warp
/// are contiguous and aligned: the code bytes (qs, ql) first, as they are
/// in the block, then the fifth or top bits (qh) and the scale headers.
/// Within a plane the bytes keep the core's order, except the codes of
/// Q8_0 (its 32-byte blocks) and Q4_K (the four 32-byte chunks of each
/// super-block's qs): grouped per row by [`put_grouped_chunk`]. Same length
/// and bytes as the original, rearranged. Other formats: `None`.
pub(crate) fn to_device_int(
    dtype: DType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
) -> Option<Vec<u8>> {
    let planes = int_planes(dtype)?;
    let (bb, nb) = (dtype.block_bytes(), cols / dtype.block_len());
    let n = rows * nb;
    let mut out = vec![0u8; bytes.len()];
    let mut base = 0;
    for (p, &(off, len)) in planes.iter().enumerate() {
        let plane = &mut out[base..base + n * len];
        for (r, row) in bytes.chunks_exact(nb * bb).enumerate().take(rows) {
            for (b, blk) in row.chunks_exact(bb).enumerate() {
                let src = &blk[off..off + len];
                if dtype == DType::Q8_0 && p == 0 {
                    put_grouped_chunk(plane, r, nb, b, src);
                } else if dtype == DType::Q4_K && p == 0 {
                    for (c, chunk) in src.chunks_exact(32).enumerate() {
                        put_grouped_chunk(plane, r, 4 * nb, 4 * b + c, chunk);
                    }
                } else {
                    let at = len * (r * nb + b);
                    plane[at..at + len].copy_from_slice(src);
                }
            }
        }
        base += n * len;
    }
    Some(out)
}

/// Chunk `j` (32 bytes) of the `n` chunks of row `r` into `plane`, in
/// groups of 32 chunks per row (the last group `g` ≤ 32 chunks): the
/// group's first 16 bytes of each chunk, then their last 16 (chunk `i` of
/// a group at `16·i` and `16·(g + i)`), so that one warp's 16-byte loads
/// of the first halves, and then of the second, are contiguous.
fn put_grouped_chunk(plane: &mut [u8], r: usize, n: usize, j: usize, chunk: &[u8]) {
    let (grp, i) = (j / 32, j % 32);
    let g = (n - 32 * grp).min(32);
    let at = r * n * 32 + 1024 * grp;
    plane[at + 16 * i..at + 16 * i + 16].copy_from_slice(&chunk[..16]);
    plane[at + 16 * (g + i)..at + 16 * (g + i) + 16].copy_from_slice(&chunk[16..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use fused_core::quant::{dequantize_row, quantize_row};

    fn half(lo: u8, hi: u8) -> f32 {
        let mut v = [0.0f32];
        dequantize_row(DType::F16, &[lo, hi], &mut v).unwrap();
        v[0]
    }

    /// Element `e` of row `r` read back from the device layout the way the
    /// kernels read it, dequantized as the core does.
    fn read_back(dtype: DType, dev: &[u8], rows: usize, cols: usize, r: usize, e: usize) -> f32 {
        let t = tiling(dtype).unwrap();
        let nt = cols / t.elems;
        let (j, el) = (e / t.elems, e % t.elems);
        if j >= nt {
            let tail_bytes =
                dtype.row_bytes(cols).unwrap() - nt * dtype.row_bytes(t.elems).unwrap();
            let base = rows * nt * (TILE_CODE_BYTES + t.scale_bytes) + r * tail_bytes;
            let mut out = vec![0.0; cols - nt * t.elems];
            dequantize_row(dtype, &dev[base..base + tail_bytes], &mut out).unwrap();
            return out[e - nt * t.elems];
        }
        let at = r * nt + j;
        let codes = &dev[at * TILE_CODE_BYTES..];
        let scales = &dev[rows * nt * TILE_CODE_BYTES + at * t.scale_bytes..];
        let (ch, l, i) = (el / 128, (el % 128) / 4, el % 4);
        let (g, per_lane) = (l / 8, if dtype == DType::Q8_0 { 4 } else { 8 });
        let q = match dtype {
            DType::Q8_0 => codes[16 * l + 4 * ch + i],
            _ => (codes[16 * l + 4 * (ch / 2) + i] >> (4 * (ch % 2))) & 15,
        };
        match dtype {
            DType::Q4_0 | DType::Q8_0 => {
                let s = 2 * (per_lane * g + ch);
                let d = half(scales[s], scales[s + 1]);
                let v = if dtype == DType::Q4_0 {
                    q as i32 - 8
                } else {
                    q as i8 as i32
                };
                v as f32 * d
            }
            _ => {
                // Super-block ch / 2, sub-block 4·(ch mod 2) + g.
                let h = &scales[16 * (ch / 2)..16 * (ch / 2) + 16];
                q4k_value(h, 4 * (ch % 2) + g, q)
            }
        }
    }

    /// Element `e` of row `r` read back from the integer layout the way
    /// `QUnit` in `kernels/gemv.cu` reads it, dequantized as the core does.
    fn read_back_int(
        dtype: DType,
        dev: &[u8],
        rows: usize,
        cols: usize,
        r: usize,
        e: usize,
    ) -> f32 {
        let nb = cols / dtype.block_len();
        let (b, i) = (e / dtype.block_len(), e % dtype.block_len());
        let at = r * nb + b;
        match dtype {
            DType::Q4_0 => {
                let q = dev[16 * at + i % 16];
                let q = if i < 16 { q & 15 } else { q >> 4 };
                let s = rows * nb * 16 + 2 * at;
                (q as i32 - 8) as f32 * half(dev[s], dev[s + 1])
            }
            DType::Q8_0 => {
                let q = grouped_chunk_byte(dev, r * nb * 32, nb, b, i);
                let s = rows * nb * 32 + 2 * at;
                q as i8 as f32 * half(dev[s], dev[s + 1])
            }
            _ => {
                // Chunk c of block b: row chunk 4b + c, its byte p (the
                // grouped order of put_grouped_chunk).
                let (c, p) = (i / 64, i % 32);
                let n = 4 * nb;
                let q = grouped_chunk_byte(dev, r * n * 32, n, 4 * b + c, p);
                let q = if i % 64 < 32 { q & 15 } else { q >> 4 };
                let h = &dev[rows * nb * 128 + 16 * at..rows * nb * 128 + 16 * at + 16];
                q4k_value(h, i / 32, q)
            }
        }
    }

    /// Byte `p` (0..32) of chunk `j` of a row of `n` 32-byte chunks whose
    /// codes start at `row_base`, in the grouped order of
    /// `put_grouped_chunk` (groups of 32 chunks, first halves then second).
    fn grouped_chunk_byte(dev: &[u8], row_base: usize, n: usize, j: usize, p: usize) -> u8 {
        let (grp, jj) = (j / 32, j % 32);
        let g = (n - 32 * grp).min(32);
        let base = row_base + 1024 * grp;
        if p < 16 {
            dev[base + 16 * jj + p]
        } else {
            dev[base + 16 * (g + jj) + p - 16]
        }
    }

    /// The value of code `q` in sub-block `sub` of the Q4_K super-block
    /// whose 16-byte header (d, dmin, packed scales) is `h`, as the core
    /// dequantizes it.
    fn q4k_value(h: &[u8], sub: usize, q: u8) -> f32 {
        let s = &h[4..16];
        let (sc, m) = if sub < 4 {
            (s[sub] & 63, s[sub + 4] & 63)
        } else {
            (
                (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4),
                (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4),
            )
        };
        let (d, dmin) = (half(h[0], h[1]), half(h[2], h[3]));
        d * sc as f32 * q as f32 - dmin * m as f32
    }

    /// Random rows of `dtype` in the core's layout.
    fn random_rows(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
        let rb = dtype.row_bytes(cols).unwrap();
        let mut bytes = vec![0u8; rows * rb];
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for r in 0..rows {
            let row: Vec<f32> = (0..cols)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            quantize_row(dtype, &row, &mut bytes[r * rb..(r + 1) * rb]).unwrap();
        }
        bytes
    }

    #[test]
    fn int_layout_holds_every_element_where_the_kernels_read_it() {
        for dtype in [DType::Q4_0, DType::Q8_0, DType::Q4_K] {
            // Q8_0 rows of 40 blocks: one whole group of 32 and one of 8.
            for (rows, cols) in [(3, 1280), (2, 256), (1, 2048 + 256)] {
                let bytes = random_rows(dtype, rows, cols);
                let dev = to_device_int(dtype, rows, cols, &bytes).unwrap();
                assert_eq!(dev.len(), bytes.len());
                let rb = dtype.row_bytes(cols).unwrap();
                for r in 0..rows {
                    let mut want = vec![0.0; cols];
                    dequantize_row(dtype, &bytes[r * rb..(r + 1) * rb], &mut want).unwrap();
                    for (e, w) in want.iter().enumerate() {
                        let got = read_back_int(dtype, &dev, rows, cols, r, e);
                        assert_eq!(
                            got.to_bits(),
                            w.to_bits(),
                            "{dtype} {rows}x{cols} r{r} e{e}"
                        );
                    }
                }
            }
        }
        assert!(to_device_int(DType::F16, 1, 32, &[0; 64]).is_none());
    }

    #[test]
    fn int_planes_split_every_block_into_its_bytes() {
        for dtype in crate::GEMV_DTYPES {
            let Some(planes) = int_planes(dtype) else {
                assert!(!dtype.is_quantized(), "{dtype}");
                continue;
            };
            // The ranges tile the block exactly once.
            let mut seen = vec![0u8; dtype.block_bytes()];
            for &(off, len) in planes {
                seen[off..off + len].iter_mut().for_each(|s| *s += 1);
            }
            assert!(seen.iter().all(|&s| s == 1), "{dtype}");
            if matches!(dtype, DType::Q8_0 | DType::Q4_K) {
                continue; // their grouped codes: the test above
            }
            let (rows, cols) = (3, 2 * 256);
            let bytes = random_rows(dtype, rows, cols);
            let dev = to_device_int(dtype, rows, cols, &bytes).unwrap();
            let (bb, nb) = (dtype.block_bytes(), cols / dtype.block_len());
            let n = rows * nb;
            for (at, blk) in bytes.chunks_exact(bb).enumerate() {
                let mut base = 0;
                for &(off, len) in planes {
                    let got = &dev[base + len * at..base + len * (at + 1)];
                    assert_eq!(got, &blk[off..off + len], "{dtype} block {at}");
                    base += n * len;
                }
                assert_eq!(base, dev.len());
            }
        }
    }

    #[test]
    fn device_layout_holds_every_element_where_the_kernels_read_it() {
        for dtype in [DType::Q4_0, DType::Q8_0, DType::Q4_K] {
            let t = tiling(dtype).unwrap();
            for (rows, cols) in [(3, 2 * t.elems), (2, t.elems + 3 * 256), (2, 256)] {
                let rb = dtype.row_bytes(cols).unwrap();
                let bytes = random_rows(dtype, rows, cols);
                let dev = to_device(dtype, rows, cols, &bytes);
                assert_eq!(dev.len(), bytes.len());
                for r in 0..rows {
                    let mut want = vec![0.0; cols];
                    dequantize_row(dtype, &bytes[r * rb..(r + 1) * rb], &mut want).unwrap();
                    for (e, w) in want.iter().enumerate() {
                        let got = read_back(dtype, &dev, rows, cols, r, e);
                        assert_eq!(
                            got.to_bits(),
                            w.to_bits(),
                            "{dtype} {rows}x{cols} r{r} e{e}"
                        );
                    }
                }
            }
        }
    }
}
