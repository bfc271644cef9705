//! The GGML/GGUF block formats as plain `#[repr(C)]` structs.
//!
//! Each struct is byte-for-byte the block GGML writes into GGUF files
//! (ggml-org/ggml `src/ggml-common.h`, the `block_*` structs): the same field
//! order, the same offsets, no padding. Scales stored as IEEE half are
//! [`half::f16`]; the only f32 scale is Q8_K's `d`. Every struct derives
//! [`bytemuck::Pod`], so a block can be read from any byte slice with
//! [`bytemuck::pod_read_unaligned`] (GGUF data carries no alignment promise)
//! and written back with [`bytemuck::bytes_of`].
//!
//! Sizes and field offsets are checked at compile time against
//! [`DType::block_bytes`] and GGML's layout.

use core::mem::{offset_of, size_of};

use half::f16;

use crate::dtype::{DType, QK_K};

/// Elements per block of the 32-element ("legacy") formats and IQ4_NL.
pub const QK32: usize = 32;

/// A GGML block type: ties a `#[repr(C)]` block struct to its [`DType`].
///
/// `size_of::<Self>()` equals `Self::DTYPE.block_bytes()` and `Self::LEN`
/// equals `Self::DTYPE.block_len()`; both are checked at compile time.
pub trait Block: bytemuck::Pod + core::fmt::Debug {
    /// The element format this block belongs to.
    const DTYPE: DType;
    /// Elements per block.
    const LEN: usize;
    /// Bytes per block (the struct's size).
    const BYTES: usize = size_of::<Self>();

    /// Reads one block from exactly [`Self::BYTES`] bytes at any alignment,
    /// or `None` when `bytes` has another length.
    fn read(bytes: &[u8]) -> Option<Self> {
        if bytes.len() == Self::BYTES {
            Some(bytemuck::pod_read_unaligned(bytes))
        } else {
            None
        }
    }
}

/// Q4_0: 32 elements, value = (q − 8)·d.
///
/// `qs[j]` holds element `j` in its low nibble and element `j + 16` in its
/// high nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    /// Scale (offset 0).
    pub d: f16,
    /// 4-bit codes, two per byte (offset 2).
    pub qs: [u8; QK32 / 2],
}

/// Q4_1: 32 elements, value = q·d + m.
///
/// Nibble order as in [`BlockQ4_0`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_1 {
    /// Scale (offset 0).
    pub d: f16,
    /// Minimum, added to every element (offset 2).
    pub m: f16,
    /// 4-bit codes, two per byte (offset 4).
    pub qs: [u8; QK32 / 2],
}

/// Q5_0: 32 elements, value = (q − 16)·d with 5-bit codes.
///
/// The low four bits come from `qs` in [`BlockQ4_0`]'s nibble order; the
/// fifth bit of element `j` is bit `j` of `qh` read as a little-endian u32.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_0 {
    /// Scale (offset 0).
    pub d: f16,
    /// Fifth bits of the 32 codes, a little-endian u32 (offset 2).
    pub qh: [u8; 4],
    /// Low four bits of the codes, two per byte (offset 6).
    pub qs: [u8; QK32 / 2],
}

/// Q5_1: 32 elements, value = q·d + m with 5-bit codes.
///
/// Code bits as in [`BlockQ5_0`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5_1 {
    /// Scale (offset 0).
    pub d: f16,
    /// Minimum, added to every element (offset 2).
    pub m: f16,
    /// Fifth bits of the 32 codes, a little-endian u32 (offset 4).
    pub qh: [u8; 4],
    /// Low four bits of the codes, two per byte (offset 8).
    pub qs: [u8; QK32 / 2],
}

/// Q8_0: 32 elements, value = q·d with signed 8-bit codes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    /// Scale (offset 0).
    pub d: f16,
    /// Signed codes, one per element (offset 2).
    pub qs: [i8; QK32],
}

/// Q8_1: 32 elements, value = q·d, plus the auxiliary sum `s` = d·Σq.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_1 {
    /// Scale (offset 0).
    pub d: f16,
    /// `d` times the sum of the 32 codes, rounded to f16 (offset 2).
    pub s: f16,
    /// Signed codes, one per element (offset 4).
    pub qs: [i8; QK32],
}

/// Q4_K: 256 elements in 8 sub-blocks of 32, value = d·sc·q − dmin·m.
///
/// `scales` packs eight 6-bit scales `sc` and eight 6-bit mins `m`: bytes
/// 0–3 hold sc0..3 and bytes 4–7 hold m0..3 in their low six bits; bytes
/// 8–11 hold the low four bits of sc4..7 (low nibble) and m4..7 (high
/// nibble); the top two bits of bytes 0–3 are the high bits of sc4..7 and
/// those of bytes 4–7 the high bits of m4..7. In each 64-element chunk `c`,
/// `qs[32c + l]` holds element `64c + l` in its low nibble and `64c + 32 + l`
/// in its high nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4K {
    /// Super-block scale of the sub-block scales (offset 0).
    pub d: f16,
    /// Super-block scale of the sub-block mins (offset 2).
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and mins (offset 4).
    pub scales: [u8; 12],
    /// 4-bit codes, two per byte (offset 16).
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: [`BlockQ4K`] plus a fifth code bit per element.
///
/// In chunk `c`, bit `2c` of `qh[l]` is the fifth bit of element `64c + l`
/// and bit `2c + 1` that of element `64c + 32 + l`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ5K {
    /// Super-block scale of the sub-block scales (offset 0).
    pub d: f16,
    /// Super-block scale of the sub-block mins (offset 2).
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and mins, as in [`BlockQ4K`] (offset 4).
    pub scales: [u8; 12],
    /// Fifth code bits (offset 16).
    pub qh: [u8; QK_K / 8],
    /// Low four code bits, two per byte (offset 48).
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: 256 elements, value = d·scales[e/16]·(q − 32) with 6-bit codes.
///
/// In each 128-element half `h`, with `L = ql[64h..]` and `H = qh[32h..]`,
/// for `l` in 0..32: element `l` is `L[l] & 15` with bits 0–1 of `H[l]`,
/// element `l + 32` is `L[l + 32] & 15` with bits 2–3, element `l + 64` is
/// `L[l] >> 4` with bits 4–5 and element `l + 96` is `L[l + 32] >> 4` with
/// bits 6–7 (the `qh` bits are the code's bits 4–5).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ6K {
    /// Low four code bits, two per byte (offset 0).
    pub ql: [u8; QK_K / 2],
    /// High two code bits, four per byte (offset 128).
    pub qh: [u8; QK_K / 4],
    /// Signed 8-bit scale per 16 elements (offset 192).
    pub scales: [i8; QK_K / 16],
    /// Super-block scale (offset 208, last).
    pub d: f16,
}

/// Q8_K: 256 elements, value = d·q; an activation format.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8K {
    /// Scale, an f32 (offset 0); negative when the block's largest-magnitude
    /// element is positive.
    pub d: f32,
    /// Signed codes, one per element (offset 4).
    pub qs: [i8; QK_K],
    /// Sum of the codes of each group of 16 elements (offset 260).
    pub bsums: [i16; QK_K / 16],
}

/// IQ4_NL: 32 elements, value = d·KVALUES_IQ4NL\[q\].
///
/// Nibble order as in [`BlockQ4_0`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockIq4Nl {
    /// Scale (offset 0).
    pub d: f16,
    /// 4-bit table indices, two per byte (offset 2).
    pub qs: [u8; QK32 / 2],
}

/// The IQ4_NL codebook (GGML's `kvalues_iq4nl`).
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// TQ2_0: 256 ternary elements in 2 bits each, value = (q − 1)·d.
///
/// Element `e` is bits `2l..2l+2` of `qs[32j + m]` with `j = e / 128`,
/// `l = (e % 128) / 32`, `m = e % 32`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockTq2_0 {
    /// 2-bit codes, four per byte (offset 0).
    pub qs: [u8; QK_K / 4],
    /// Scale (offset 64, last).
    pub d: f16,
}

macro_rules! impl_block {
    ($($ty:ty => $dt:expr),* $(,)?) => {$(
        impl Block for $ty {
            const DTYPE: DType = $dt;
            const LEN: usize = $dt.block_len();
        }
        const _: () = assert!(size_of::<$ty>() == $dt.block_bytes());
        const _: () = assert!(<$ty as Block>::BYTES == $dt.block_bytes());
        const _: () = assert!($dt.is_quantized());
    )*};
}

impl_block! {
    BlockQ4_0 => DType::Q4_0,
    BlockQ4_1 => DType::Q4_1,
    BlockQ5_0 => DType::Q5_0,
    BlockQ5_1 => DType::Q5_1,
    BlockQ8_0 => DType::Q8_0,
    BlockQ8_1 => DType::Q8_1,
    BlockQ4K => DType::Q4_K,
    BlockQ5K => DType::Q5_K,
    BlockQ6K => DType::Q6_K,
    BlockQ8K => DType::Q8_K,
    BlockIq4Nl => DType::IQ4_NL,
    BlockTq2_0 => DType::TQ2_0,
}

// Field offsets, as GGML lays them out (ggml-facts §1).
const _: () = {
    assert!(offset_of!(BlockQ4_0, qs) == 2);
    assert!(offset_of!(BlockQ4_1, m) == 2);
    assert!(offset_of!(BlockQ4_1, qs) == 4);
    assert!(offset_of!(BlockQ5_0, qh) == 2);
    assert!(offset_of!(BlockQ5_0, qs) == 6);
    assert!(offset_of!(BlockQ5_1, m) == 2);
    assert!(offset_of!(BlockQ5_1, qh) == 4);
    assert!(offset_of!(BlockQ5_1, qs) == 8);
    assert!(offset_of!(BlockQ8_0, qs) == 2);
    assert!(offset_of!(BlockQ8_1, s) == 2);
    assert!(offset_of!(BlockQ8_1, qs) == 4);
    assert!(offset_of!(BlockQ4K, dmin) == 2);
    assert!(offset_of!(BlockQ4K, scales) == 4);
    assert!(offset_of!(BlockQ4K, qs) == 16);
    assert!(offset_of!(BlockQ5K, dmin) == 2);
    assert!(offset_of!(BlockQ5K, scales) == 4);
    assert!(offset_of!(BlockQ5K, qh) == 16);
    assert!(offset_of!(BlockQ5K, qs) == 48);
    assert!(offset_of!(BlockQ6K, qh) == 128);
    assert!(offset_of!(BlockQ6K, scales) == 192);
    assert!(offset_of!(BlockQ6K, d) == 208);
    assert!(offset_of!(BlockQ8K, qs) == 4);
    assert!(offset_of!(BlockQ8K, bsums) == 260);
    assert!(offset_of!(BlockIq4Nl, qs) == 2);
    assert!(offset_of!(BlockTq2_0, d) == 64);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_checks_length_and_accepts_any_alignment() {
        let mut buf = [0u8; 1 + 34];
        buf[1] = 0x00;
        buf[2] = 0x3c; // f16 1.0, little-endian
        buf[3] = 0xff; // qs[0] = -1
        let b = BlockQ8_0::read(&buf[1..]).unwrap();
        assert_eq!(b.d, f16::ONE);
        assert_eq!(b.qs[0], -1);
        assert!(BlockQ8_0::read(&buf).is_none());
        assert!(BlockQ8_0::read(&buf[2..]).is_none());
    }

    #[test]
    fn lengths_match_dtype() {
        fn check<B: Block>() {
            assert_eq!(B::LEN, B::DTYPE.block_len());
            assert_eq!(B::BYTES, B::DTYPE.block_bytes());
        }
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIq4Nl>();
        check::<BlockTq2_0>();
    }
}
