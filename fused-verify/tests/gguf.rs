//! The `gguf FILE` mode on a small GGUF file written here: metadata of
//! every kind is skipped, the alignment is honoured, weight matrices become
//! cases, other tensors are reported as passed over.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{quantized, write_gguf};
use fused_core::DType;
use fused_verify::gguf::MappedFile;

fn tiny_model(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("fused-verify-{}-{name}.gguf", std::process::id()));
    write_gguf(
        &path,
        64,
        &[
            (
                "blk.0.ffn_up.weight",
                2,
                vec![64, 8],
                quantized(DType::Q4_0, 64, 8),
            ),
            (
                "blk.0.attn_q.weight",
                12,
                vec![256, 3],
                quantized(DType::Q4_K, 256, 3),
            ),
            (
                "output_norm.weight",
                0,
                vec![16],
                quantized(DType::F32, 16, 1),
            ),
            ("blk.0.q2k.weight", 10, vec![256, 2], vec![0u8; 2 * 84]),
            (
                "token_embd.weight",
                0,
                vec![32, 4],
                quantized(DType::F32, 32, 4),
            ),
        ],
    );
    path
}

#[test]
fn reader_finds_every_tensor_at_its_aligned_offset() {
    let path = tiny_model("reader");
    let file = MappedFile::open(&path).unwrap();
    let gguf = file.parse().unwrap();
    let t = gguf.tensors();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(t.len(), 5);
    assert_eq!(t[0].name(), "blk.0.ffn_up.weight");
    assert_eq!((t[0].ggml_type(), t[0].dims().to_vec()), (2, vec![64, 8]));
    for x in t {
        assert_eq!(x.file_offset() % 64, 0, "{}", x.name());
    }
    let want = quantized(DType::Q4_K, 256, 3);
    let at = t[1].file_offset() as usize;
    assert_eq!(&bytes[at..at + want.len()], &want[..]);
}

#[test]
fn gguf_mode_runs_the_weight_matrices() {
    let path = tiny_model("mode");
    let json = path.with_extension("json");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["gguf", path.to_str().unwrap(), "--backend", "cpu", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("SKIP tensor blk.0.q2k.weight: GGML type q2_K (10) has no fused-core format"),
        "{out}"
    );
    assert!(out.contains("SKIP tensor output_norm.weight: shape [16] is not a matrix"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["n_cases"], 3);
    assert_eq!(v["cases"], "gguf");
    let ids: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["case"].as_str().unwrap())
        .collect();
    assert!(
        ids.iter()
            .any(|i| i.contains("gguf:blk.0.attn_q.weight/3x256x1"))
    );
    assert_eq!(v["summary"]["failed"], 0);
}

#[test]
fn a_file_that_is_not_gguf_fails() {
    let path = std::env::temp_dir().join(format!("fused-verify-{}-bad.gguf", std::process::id()));
    std::fs::write(&path, b"GGML not really").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["gguf", path.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("not a GGUF file"), "{out}");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .arg("gguf")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn dump_writes_npy_inputs_and_outputs() {
    let path = tiny_model("dump");
    let dir = path.with_extension("dump");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args([
            "gguf",
            path.to_str().unwrap(),
            "--backend",
            "cpu-scalar",
            "--dump",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    std::fs::remove_file(&path).ok();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    // Little-endian f32 .npy: magic, version 1.0, the header, the data at a
    // multiple of 64 bytes.
    let npy = |name: &str| -> Vec<f32> {
        let b = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00", "{name}");
        let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hl) % 64, 0, "{name}");
        let header = std::str::from_utf8(&b[10..10 + hl]).unwrap();
        assert!(header.contains("'descr': '<f4'"), "{header}");
        let data: Vec<f32> = b[10 + hl..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(
            header.contains(&format!("'shape': ({},)", data.len())),
            "{header}"
        );
        data
    };
    let x = npy("blk.0.ffn_up.weight.x.npy");
    let y = npy("blk.0.ffn_up.weight.cpu-scalar.y.npy");
    assert_eq!((x.len(), y.len()), (64, 8));
    assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|v| *v != 0.0));
    assert_eq!(npy("blk.0.attn_q.weight.cpu-scalar.y.npy").len(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn dump_never_writes_outside_its_folder() {
    let base = std::env::temp_dir().join(format!("fused-verify-{}-escape", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let path = base.join("model.gguf");
    let escaped = base.join("escape.weight.x.npy");
    write_gguf(
        &path,
        32,
        &[(
            "../escape.weight",
            2,
            vec![64, 8],
            quantized(DType::Q4_0, 64, 8),
        )],
    );
    let dir = base.join("dump");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["gguf", path.to_str().unwrap(), "--backend", "cpu-scalar"])
        .arg("--dump")
        .arg(&dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let written = escaped.exists();
    std::fs::remove_dir_all(&base).ok();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL --dump"), "{out}");
    assert!(out.contains("../escape.weight"), "{out}");
    assert!(!written, "a file was written outside the dump folder");
}
