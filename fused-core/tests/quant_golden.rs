//! Golden tests of the block formats.
//!
//! 1. Hand-built blocks with known scales and codes dequantize to values
//!    worked out by hand (every block type, the float formats included).
//! 2. GGML's own bytes (`tests/data/ggml_quant_ref.txt`, produced by GGML's C
//!    reference functions; see the file's header): `quantize_row` must
//!    reproduce them byte for byte, and `dequantize_row` / `vec_dot` must
//!    reproduce GGML's dequantized values and generic dot bit for bit.

use fused_core::DType;
use fused_core::blocks::{
    Block, BlockIq4Nl, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, BlockQ8_1, BlockQ8K, BlockTq2_0, KVALUES_IQ4NL,
};
use fused_core::quant::{dequantize_row, quantize_row, vec_dot};

/// Dequantizes `bytes` (one or more blocks of `dtype`), also from an odd
/// address, and checks both give the same values.
fn deq(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / dtype.block_bytes() * dtype.block_len();
    let mut out = vec![0.0f32; n];
    dequantize_row(dtype, bytes, &mut out).unwrap();
    let mut shifted = vec![0u8; bytes.len() + 1];
    shifted[1..].copy_from_slice(bytes);
    let mut out2 = vec![0.0f32; n];
    dequantize_row(dtype, &shifted[1..], &mut out2).unwrap();
    assert_eq!(
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        out2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{dtype}: unaligned read differs"
    );
    out
}

fn le16(x: u16) -> [u8; 2] {
    x.to_le_bytes()
}

#[test]
fn q4_0_block() {
    // d = 0.5 (f16 0x3800); qs[j] = j | (15 - j) << 4.
    let mut b = vec![0x00, 0x38];
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = deq(DType::Q4_0, &b);
    #[rustfmt::skip]
    let want = [
        -4.0, -3.5, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5,
        3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, -3.5, -4.0,
    ];
    assert_eq!(y, want);
    // The struct view of the same bytes.
    let blk = BlockQ4_0::read(&b).unwrap();
    assert_eq!(blk.d.to_f32(), 0.5);
    assert_eq!(blk.qs[1], 0xe1);
}

#[test]
fn q4_1_block() {
    // d = 0.25 (0x3400), m = -1.0 (0xbc00); qs[j] = (15 - j) | j << 4.
    let mut b = vec![0x00, 0x34, 0x00, 0xbc];
    b.extend((0..16u8).map(|j| (15 - j) | (j << 4)));
    let y = deq(DType::Q4_1, &b);
    #[rustfmt::skip]
    let want = [
        2.75, 2.5, 2.25, 2.0, 1.75, 1.5, 1.25, 1.0, 0.75, 0.5, 0.25, 0.0, -0.25, -0.5, -0.75, -1.0,
        -1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75,
    ];
    assert_eq!(y, want);
    assert_eq!(BlockQ4_1::read(&b).unwrap().m.to_f32(), -1.0);
}

#[test]
fn q5_0_block_qh_bits() {
    // d = 1.0; qh = 0x8001_0001: fifth bit set for elements 0, 16 and 31.
    // qs[0] = 0x0f (element 0 low nibble 15, element 16 high nibble 0),
    // qs[15] = 0xf0 (element 15 low nibble 0, element 31 high nibble 15).
    let mut b = vec![0x00, 0x3c, 0x01, 0x00, 0x01, 0x80];
    let mut qs = [0u8; 16];
    qs[0] = 0x0f;
    qs[15] = 0xf0;
    b.extend(qs);
    let y = deq(DType::Q5_0, &b);
    let mut want = [-16.0f32; 32];
    want[0] = 15.0; // 0x0f | 0x10 = 31 → 31 − 16
    want[16] = 0.0; // 0x00 | 0x10 = 16 → 0
    want[31] = 15.0; // 0x0f | 0x10 = 31
    // element 15: low nibble 0, bit 15 clear → −16 (default)
    assert_eq!(y, want);
    let blk = BlockQ5_0::read(&b).unwrap();
    assert_eq!(u32::from_le_bytes(blk.qh), 0x8001_0001);
}

#[test]
fn q5_1_block_qh_bits() {
    // d = 0.5 (0x3800), m = 2.0 (0x4000), qh = 0x0000_ffff (elements 0..16
    // get +16), qs[j] = j | j << 4.
    let mut b = vec![0x00, 0x38, 0x00, 0x40, 0xff, 0xff, 0x00, 0x00];
    b.extend((0..16u8).map(|j| j | (j << 4)));
    let y = deq(DType::Q5_1, &b);
    for j in 0..16 {
        assert_eq!(y[j], (j + 16) as f32 * 0.5 + 2.0, "element {j}");
        assert_eq!(y[j + 16], j as f32 * 0.5 + 2.0, "element {}", j + 16);
    }
    assert_eq!(y[0], 10.0);
    assert_eq!(y[15], 17.5);
    assert_eq!(y[16], 2.0);
    assert_eq!(y[31], 9.5);
    assert_eq!(BlockQ5_1::read(&b).unwrap().qh, [0xff, 0xff, 0, 0]);
}

#[test]
fn q8_0_block() {
    // d = 0.125 (0x3000), qs = −128, 127, −1, 0, 1, …
    let mut b = vec![0x00, 0x30];
    let qs: Vec<i8> = [-128i8, 127, -1]
        .into_iter()
        .chain((0..29).map(|j| j as i8))
        .collect();
    b.extend(qs.iter().map(|&q| q as u8));
    let y = deq(DType::Q8_0, &b);
    assert_eq!(&y[..5], &[-16.0, 15.875, -0.125, 0.0, 0.125]);
    assert_eq!(y[31], 3.5);
    assert_eq!(BlockQ8_0::read(&b).unwrap().qs[0], -128);
}

#[test]
fn q8_1_block() {
    // d = 2.0 (0x4000), s = 7.0 (0x4700, ignored by dequantization), qs[j] = j − 16.
    let mut b = vec![0x00, 0x40, 0x00, 0x47];
    b.extend((0..32i8).map(|j| (j - 16) as u8));
    let y = deq(DType::Q8_1, &b);
    let want: Vec<f32> = (0..32).map(|j| (j - 16) as f32 * 2.0).collect();
    assert_eq!(y, want);
    assert_eq!(y[0], -32.0);
    assert_eq!(y[31], 30.0);
    assert_eq!(BlockQ8_1::read(&b).unwrap().s.to_f32(), 7.0);
}

/// Sub-block scales and mins used by the Q4_K/Q5_K golden blocks. Sub-blocks
/// 4..8 have values ≥ 16, so their top two bits live in bytes 0–7.
const KSC: [u8; 8] = [1, 2, 3, 4, 20, 33, 47, 63];
const KMN: [u8; 8] = [0, 1, 2, 3, 60, 17, 2, 48];
/// KSC/KMN packed by hand:
/// bytes 0–3: sc0..3 | (sc4..7 >> 4) << 6 = 1|0x40, 2|0x80, 3|0x80, 4|0xc0;
/// bytes 4–7: m0..3 | (m4..7 >> 4) << 6 = 0|0xc0, 1|0x40, 2|0x00, 3|0xc0;
/// bytes 8–11: (sc4..7 & 15) | (m4..7 & 15) << 4 = 0xc4, 0x11, 0x2f, 0x0f.
const KPACKED: [u8; 12] = [
    0x41, 0x82, 0x83, 0xc4, 0xc0, 0x41, 0x02, 0xc3, 0xc4, 0x11, 0x2f, 0x0f,
];

#[test]
fn q4_k_block_scale_packing() {
    // d = 1.0, dmin = 0.5 (0x3800); qs[32c + l] = (l % 16) | (15 − l % 16) << 4.
    let mut b = vec![0x00, 0x3c, 0x00, 0x38];
    b.extend(KPACKED);
    b.extend((0..128).map(|i| {
        let l = (i % 32 % 16) as u8;
        l | ((15 - l) << 4)
    }));
    assert_eq!(b.len(), 144);
    let y = deq(DType::Q4_K, &b);
    for (e, &v) in y.iter().enumerate() {
        let (l, sb) = (e % 64, e / 32);
        let q = if l < 32 { l % 16 } else { 15 - (l - 32) % 16 };
        let want = KSC[sb] as f32 * q as f32 - 0.5 * KMN[sb] as f32;
        assert_eq!(v, want, "element {e}");
    }
    // Spot checks worked out by hand.
    assert_eq!(y[0], 0.0); // sc 1, m 0, q 0
    assert_eq!(y[31], 15.0); // q 15
    assert_eq!(y[32], 29.5); // sc 2 · 15 − 0.5 · 1
    assert_eq!(y[128], -30.0); // sub-block 4: 20 · 0 − 0.5 · 60
    assert_eq!(y[165], 321.5); // sub-block 5: 33 · 10 − 0.5 · 17
    assert_eq!(y[200], 47.0 * 8.0 - 1.0); // sub-block 6: q = 200 − 192 = 8
    assert_eq!(y[255], -24.0); // sub-block 7: 63 · 0 − 0.5 · 48
    let blk = BlockQ4K::read(&b).unwrap();
    assert_eq!(blk.dmin.to_f32(), 0.5);
}

#[test]
fn q5_k_block_qh_bits() {
    // KPACKED scales, d = 1, dmin = 0.5; qh[l] = 0x55 for even l (the low
    // halves of all four chunks get +16) and 0x80 for odd l (only the high
    // half of chunk 3); qs as in the Q4_K block.
    let mut b = vec![0x00, 0x3c, 0x00, 0x38];
    b.extend(KPACKED);
    b.extend((0..32).map(|l| if l % 2 == 0 { 0x55u8 } else { 0x80 }));
    b.extend((0..128).map(|i| {
        let l = (i % 32 % 16) as u8;
        l | ((15 - l) << 4)
    }));
    assert_eq!(b.len(), 176);
    let y = deq(DType::Q5_K, &b);
    for (e, &v) in y.iter().enumerate() {
        let (c, l) = (e / 64, e % 64);
        let (lo, idx) = (l < 32, l % 32);
        let q4 = if lo { idx % 16 } else { 15 - idx % 16 };
        let high = if idx % 2 == 0 { lo } else { !lo && c == 3 };
        let q = q4 + if high { 16 } else { 0 };
        let sb = e / 32;
        assert_eq!(
            v,
            KSC[sb] as f32 * q as f32 - 0.5 * KMN[sb] as f32,
            "element {e}"
        );
    }
    assert_eq!(y[0], 16.0); // (0 + 16) · 1
    assert_eq!(y[1], 1.0); // odd l, low half: no fifth bit
    assert_eq!(y[224], 63.0 * 15.0 - 24.0); // chunk 3 high, l = 0 (0x55 has no bit 7)
    assert_eq!(y[255], 63.0 * 16.0 - 24.0); // chunk 3 high, l = 31 (0x80)
    assert_eq!(BlockQ5K::read(&b).unwrap().qh[1], 0x80);
}

#[test]
fn q6_k_block() {
    // d = 0.5 (0x3800, last); scales[g] = ±(g + 1), negative for odd g.
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    // First half: ql[0] = 0x5a, ql[32] = 0x3f, qh[0] = 0b11_10_01_00.
    ql[0] = 0x5a;
    ql[32] = 0x3f;
    qh[0] = 0xe4;
    // Second half: ql[64 + 31] = 0xff, ql[64 + 63] = 0x21, qh[32 + 31] = 0xff.
    ql[95] = 0xff;
    ql[127] = 0x21;
    qh[63] = 0xff;
    let scales: Vec<u8> = (0..16i8)
        .map(|g| (if g % 2 == 1 { -(g + 1) } else { g + 1 }) as u8)
        .collect();
    let mut b = Vec::new();
    b.extend(ql);
    b.extend(qh);
    b.extend(&scales);
    b.extend(le16(0x3800));
    assert_eq!(b.len(), 210);
    let y = deq(DType::Q6_K, &b);
    let sc = |e: usize| scales[e / 16] as i8 as f32;
    let mut want: Vec<f32> = (0..256).map(|e| 0.5 * sc(e) * -32.0).collect();
    want[0] = 0.5 * 1.0 * -22.0; // code 0x0a → −22
    want[32] = -(0.5 * 3.0); // 0x0f | 01 << 4 = 31 → −1
    want[64] = 0.5 * 5.0 * 5.0; // 0x5 | 10 << 4 = 37 → 5
    want[96] = 0.5 * 7.0 * 19.0; // 0x3 | 11 << 4 = 51 → 19
    want[159] = 0.5 * -10.0 * 31.0; // 0xf | 11 << 4 = 63 → 31
    want[223] = 0.5 * -14.0 * 31.0; // 0xf | 11 << 4 = 63 → 31
    want[191] = 0.5 * -12.0 * 17.0; // 0x1 | 11 << 4 = 49 → 17
    want[255] = 0.5 * -16.0 * 18.0; // 0x2 | 11 << 4 = 50 → 18
    assert_eq!(y, want);
    assert_eq!(y[0], -11.0);
    assert_eq!(y[1], -16.0);
    assert_eq!(y[159], -155.0);
    assert_eq!(y[255], -144.0);
    let blk = BlockQ6K::read(&b).unwrap();
    assert_eq!(blk.scales[1], -2);
    assert_eq!(blk.d.to_f32(), 0.5);
}

#[test]
fn q8_k_block_and_bsums() {
    // d = −0.25 (f32), qs[j] = j − 128; bsums are not used by dequantization.
    let mut b = Vec::new();
    b.extend((-0.25f32).to_le_bytes());
    b.extend((0..256).map(|j| (j - 128) as i8 as u8));
    b.extend((0..16).flat_map(|g: i16| (g * 100).to_le_bytes()));
    assert_eq!(b.len(), 292);
    let y = deq(DType::Q8_K, &b);
    let want: Vec<f32> = (0..256).map(|j| -0.25 * (j as f32 - 128.0)).collect();
    assert_eq!(y, want);
    assert_eq!(y[0], 32.0);
    assert_eq!(y[255], -31.75);
    assert_eq!(BlockQ8K::read(&b).unwrap().bsums[3], 300);

    // Quantizing: x[0] = 127 → max = 127, iscale = −1, d = −1; each group of
    // 16 repeats k − 7.5 for k = 0..16, so q = nearest-even(7.5 − k) =
    // 8, 6, 6, 4, 4, 2, 2, 0, 0, −2, −2, −4, −4, −6, −6, −8 (sum 0), except
    // q[0] = −127 (so bsums[0] = 0 − 8 − 127 = −135) and group 2, which holds
    // k + 0.5: q = 0, −2, −2, −4, …, −14, −16 (sum −128).
    let mut x: Vec<f32> = (0..256).map(|j| (j % 16) as f32 - 7.5).collect();
    x[0] = 127.0;
    for k in 0..16 {
        x[32 + k] = k as f32 + 0.5;
    }
    let mut q = vec![0u8; 292];
    quantize_row(DType::Q8_K, &x, &mut q).unwrap();
    let blk = BlockQ8K::read(&q).unwrap();
    assert_eq!(blk.d, -1.0);
    let pat: [i8; 16] = [8, 6, 6, 4, 4, 2, 2, 0, 0, -2, -2, -4, -4, -6, -6, -8];
    assert_eq!(blk.qs[0], -127);
    assert_eq!(&blk.qs[1..16], &pat[1..]);
    assert_eq!(&blk.qs[16..32], &pat);
    assert_eq!(
        &blk.qs[32..48],
        &[
            0, -2, -2, -4, -4, -6, -6, -8, -8, -10, -10, -12, -12, -14, -14, -16
        ]
    );
    let mut bsums = [0i16; 16];
    bsums[0] = -135;
    bsums[2] = -128;
    assert_eq!(blk.bsums, bsums);
}

#[test]
fn iq4_nl_block() {
    // d = 0.5; qs[j] = j | (15 − j) << 4.
    let mut b = vec![0x00, 0x38];
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = deq(DType::IQ4_NL, &b);
    #[rustfmt::skip]
    let want = [
        -63.5, -52.0, -41.5, -32.5, -24.5, -17.5, -11.0, -5.0, 0.5, 6.5, 12.5, 19.0, 26.5, 34.5, 44.5, 56.5,
        56.5, 44.5, 34.5, 26.5, 19.0, 12.5, 6.5, 0.5, -5.0, -11.0, -17.5, -24.5, -32.5, -41.5, -52.0, -63.5,
    ];
    assert_eq!(y, want);
    assert_eq!(KVALUES_IQ4NL[0], -127);
    assert_eq!(BlockIq4Nl::read(&b).unwrap().qs[0], 0xf0);
}

#[test]
fn tq2_0_block_scale_last() {
    // All codes 1 (value 0) except qs[0] = 0b00_01_10_00 and qs[37] = 0xaa;
    // d = 2.0 stored last, at bytes 64..66.
    let mut b = vec![0x55u8; 64];
    b[0] = 0x18;
    b[37] = 0xaa;
    b.extend(le16(0x4000));
    assert_eq!(b.len(), 66);
    let y = deq(DType::TQ2_0, &b);
    let mut want = [0.0f32; 256];
    want[0] = -2.0; // qs[0] bits 0–1 = 0 → −1
    want[32] = 2.0; // bits 2–3 = 2 → +1
    want[64] = 0.0; // bits 4–5 = 1 → 0
    want[96] = -2.0; // bits 6–7 = 0 → −1
    for e in [133, 165, 197, 229] {
        want[e] = 2.0; // qs[32 + 5]: j = 1, m = 5, l = 0..4
    }
    assert_eq!(y, want);
    assert_eq!(BlockTq2_0::read(&b).unwrap().d.to_f32(), 2.0);
}

#[test]
fn float_formats() {
    let f32s = [1.5f32.to_le_bytes(), (-0.0f32).to_le_bytes()].concat();
    assert_eq!(deq(DType::F32, &f32s), [1.5, -0.0]);
    // f16: 1.0, −2.0, smallest subnormal 2^−24, 65504, +inf.
    let f16s = [0x3c00u16, 0xc000, 0x0001, 0x7bff, 0x7c00]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<_>>();
    assert_eq!(
        deq(DType::F16, &f16s),
        [1.0, -2.0, 5.960_464_5e-8, 65504.0, f32::INFINITY]
    );
    // bf16: 1.0, −3.0, 2^−133 (subnormal).
    let bf16s = [0x3f80u16, 0xc040, 0x0001]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<_>>();
    assert_eq!(
        deq(DType::BF16, &bf16s),
        [1.0, -3.0, f32::from_bits(0x0001_0000)]
    );
}

// ---------------------------------------------------------------------------
// GGML reference fixture.

/// The fixture's input generator (documented in its header).
fn input(kind: &str, seed: u64, n: usize) -> Vec<f32> {
    const SCALES: [f32; 8] = [1.0, 0.01, 100.0, 3.0, 1e-6, 0.5, 3000.0, 7.25];
    let kind = match kind {
        "uni" => 0,
        "ties" => 1,
        "zeroblk" => 2,
        "sat" => 3,
        _ => panic!("unknown generator {kind}"),
    };
    let mut state = seed;
    let mut x = Vec::with_capacity(n);
    for i in 0..n {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let u = ((z ^ (z >> 31)) >> 40) as u32;
        let uni = (u as f32 * (1.0 / 8_388_608.0) - 1.0) * SCALES[(i / 32) % 8];
        x.push(match kind {
            0 => uni,
            1 if i % 32 == 0 => {
                if (i / 32) % 2 == 0 {
                    127.0
                } else {
                    -127.0
                }
            }
            1 => ((u % 254) as i32 - 127) as f32 + 0.5,
            2 if (i / 32) % 8 == 3 || (i / 256) % 2 == 1 => 0.0,
            2 => uni,
            _ => {
                let sign = if i % 3 == 0 { -1.0 } else { 1.0 };
                sign * (u as f32 * (1.0 / 16_777_216.0) * 0.5 + 0.5) * SCALES[(i / 32) % 8]
            }
        });
    }
    x
}

fn fnv1a(y: &[f32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in y {
        let bits = v.to_bits();
        for k in 0..4 {
            h ^= u64::from((bits >> (8 * k)) & 0xff);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

fn unhex(s: &str) -> Vec<u8> {
    let nib = |c: u8| (c as char).to_digit(16).expect("hex digit") as u8;
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| (nib(p[0]) << 4) | nib(p[1]))
        .collect()
}

/// The formats whose quantizer must reproduce GGML's bytes.
fn byte_identical(dtype: DType) -> bool {
    !matches!(dtype, DType::Q4_K | DType::Q5_K | DType::Q6_K)
}

/// Checks every case of a fixture (under Miri only the `uni` cases); returns
/// how many cases it read.
fn check_fixture(text: &str) -> usize {
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    let mut cases = 0;
    while let Some(head) = lines.next() {
        let f: Vec<&str> = head.split_whitespace().collect();
        assert_eq!(f[0], "case", "bad fixture line {head}");
        let dtype = DType::from_name(f[1]).unwrap();
        let (kind, seed, n) = (f[2], f[3].parse::<u64>().unwrap(), f[4].parse().unwrap());
        let q = unhex(lines.next().unwrap().strip_prefix("q ").unwrap());
        let deq_line = lines.next().unwrap().strip_prefix("deq ").unwrap();
        let dot_line = lines.next().unwrap().strip_prefix("dot ").unwrap();
        let ctx = head;
        cases += 1;
        if cfg!(miri) && kind != "uni" {
            // Miri is slow; one case per type is enough to check for UB.
            continue;
        }

        let x = input(kind, seed, n);
        if byte_identical(dtype) {
            let mut mine = vec![0u8; q.len()];
            quantize_row(dtype, &x, &mut mine).unwrap();
            if let Some(i) = (0..q.len()).find(|&i| mine[i] != q[i]) {
                let bb = dtype.block_bytes();
                panic!(
                    "{ctx}: quantize_row differs from GGML at byte {i} (block {}, offset {})\n mine: {:02x?}\n ggml: {:02x?}",
                    i / bb,
                    i % bb,
                    &mine[i / bb * bb..(i / bb + 1) * bb],
                    &q[i / bb * bb..(i / bb + 1) * bb]
                );
            }
        }
        if deq_line != "-" {
            let mut y = vec![0.0f32; n];
            dequantize_row(dtype, &q, &mut y).unwrap();
            assert_eq!(
                fnv1a(&y),
                u64::from_str_radix(deq_line, 16).unwrap(),
                "{ctx}: dequantize_row differs from GGML"
            );
        }
        if dot_line != "-" {
            let vdt = dtype.vec_dot_type().unwrap();
            let a = input(kind, seed + 1000, n);
            let mut qa = vec![0u8; vdt.row_bytes(n).unwrap()];
            quantize_row(vdt, &a, &mut qa).unwrap();
            let s = vec_dot(dtype, &q, &qa, n).unwrap();
            let want = f32::from_bits(u32::from_str_radix(dot_line, 16).unwrap());
            assert_eq!(
                s.to_bits(),
                want.to_bits(),
                "{ctx}: vec_dot differs from GGML ({s} vs {want})"
            );
        }
    }
    cases
}

#[test]
fn matches_ggml_reference_fixture() {
    let cases = check_fixture(include_str!("data/ggml_quant_ref.txt"));
    // 12 quantized types × 4 generators, minus iq4_nl's zero case, + f16 + bf16.
    assert_eq!(cases, 12 * 4 - 1 + 2);
}

/// The same check against a larger fixture produced by the same harness
/// (`FUSED_GGML_REF=/path/to/big.txt cargo test -- --ignored`).
#[test]
#[ignore = "needs a GGML-generated fixture named by FUSED_GGML_REF"]
fn matches_ggml_reference_external() {
    let path = std::env::var("FUSED_GGML_REF").expect("set FUSED_GGML_REF");
    let text = std::fs::read_to_string(path).unwrap();
    let cases = check_fixture(&text);
    println!("{cases} GGML reference cases match");
    assert!(cases > 0);
}

#[test]
fn block_trait_ties_structs_to_dtypes() {
    assert_eq!(BlockQ4K::DTYPE, DType::Q4_K);
    assert_eq!(BlockQ8K::LEN, 256);
    assert_eq!(BlockTq2_0::BYTES, 66);
}
