//! The float formats F32, F16 and BF16, little-endian.

use half::{bf16, f16};

pub(super) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(super) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

pub(super) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(2).zip(dst) {
        *y = bf16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

pub(super) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

pub(super) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (&x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f16::from_f32(x).to_le_bytes());
    }
}

pub(super) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (&x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&bf16::from_f32(x).to_le_bytes());
    }
}
