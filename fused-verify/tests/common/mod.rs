//! Writing small GGUF files for the tests.
#![allow(dead_code)]

use std::path::Path;

use fused_core::DType;
use fused_core::quant::quantize_row;

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// (name, GGML type id, dims, data)
pub(crate) type Tensor = (&'static str, u32, Vec<u64>, Vec<u8>);

pub(crate) fn write_gguf(path: &Path, alignment: u32, tensors: &[Tensor]) {
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes());
    f.extend((tensors.len() as u64).to_le_bytes());
    f.extend(4u64.to_le_bytes());
    string(&mut f, "general.name");
    f.extend(8u32.to_le_bytes());
    string(&mut f, "tiny");
    string(&mut f, "tokenizer.tokens");
    f.extend(9u32.to_le_bytes());
    f.extend(8u32.to_le_bytes());
    f.extend(2u64.to_le_bytes());
    string(&mut f, "a");
    string(&mut f, "bc");
    string(&mut f, "rope.freq_base");
    f.extend(6u32.to_le_bytes());
    f.extend(10000.0f32.to_le_bytes());
    string(&mut f, "general.alignment");
    f.extend(4u32.to_le_bytes());
    f.extend(alignment.to_le_bytes());
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for (name, ty, dims, data) in tensors {
        string(&mut f, name);
        f.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            f.extend(d.to_le_bytes());
        }
        f.extend(ty.to_le_bytes());
        f.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + data.len() as u64).div_ceil(u64::from(alignment)) * u64::from(alignment);
    }
    let start = f.len().div_ceil(alignment as usize) * alignment as usize;
    f.resize(start, 0);
    for ((_, _, _, data), off) in tensors.iter().zip(offsets) {
        f.resize(start + off as usize, 0);
        f.extend(data);
    }
    std::fs::write(path, f).unwrap();
}

/// A GGUF file with one metadata key, `general.architecture` = `arch`,
/// and no tensors.
pub(crate) fn write_gguf_with_arch(path: &Path, arch: &str) {
    let mut f = b"GGUF".to_vec();
    f.extend(3u32.to_le_bytes());
    f.extend(0u64.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    string(&mut f, "general.architecture");
    f.extend(8u32.to_le_bytes());
    string(&mut f, arch);
    std::fs::write(path, f).unwrap();
}

/// `m` rows of `k` deterministic values in [-1, 1] times `scale`, packed as `dtype`.
pub(crate) fn quantized_scaled(dtype: DType, k: usize, m: usize, scale: f32) -> Vec<u8> {
    let rb = dtype.row_bytes(k).unwrap();
    let mut b = vec![0u8; rb * m];
    for (r, row) in b.chunks_exact_mut(rb).enumerate() {
        let v: Vec<f32> = (0..k)
            .map(|i| (((i * 7 + r * 3) % 11) as f32 / 5.0 - 1.0) * scale)
            .collect();
        quantize_row(dtype, &v, row).unwrap();
    }
    b
}

/// `m` rows of `k` deterministic values in [-1, 1], packed as `dtype`.
pub(crate) fn quantized(dtype: DType, k: usize, m: usize) -> Vec<u8> {
    quantized_scaled(dtype, k, m, 1.0)
}
