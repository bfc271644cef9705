//! The `gguf FILE` mode on a small GGUF file written here: metadata of
//! every kind is skipped, the alignment is honoured, weight matrices become
//! cases, other tensors are reported as passed over.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{quantized, write_gguf};
use fused_core::DType;
use fused_core::acts::ActQuant;
use fused_core::element::Activation;
use fused_core::reference::gemv::for_each_acc;
use fused_core::weights::WeightMatrix;
use fused_verify::gguf::MappedFile;
use fused_verify::metrics::ulp_distance;
use serde_json::Value;

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

/// Reads a one-dimensional little-endian f32 `.npy` file (format 1.0:
/// magic, version, header length, a dict literal, the data at a multiple
/// of 64 bytes), checking its header.
fn read_npy(path: &Path) -> Vec<f32> {
    let name = path.display();
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00", "{name}");
    let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hl) % 64, 0, "{name}");
    let header = std::str::from_utf8(&b[10..10 + hl]).unwrap();
    assert!(header.ends_with('\n'), "{header}");
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(",)").next())
        .unwrap_or_else(|| panic!("{name}: no one-dimensional shape in {header}"));
    let n: usize = shape.trim().parse().unwrap();
    let data = &b[10 + hl..];
    assert_eq!(data.len(), 4 * n, "{name}");
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
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
    let npy = |name: &str| read_npy(&dir.join(name));
    let x = npy("blk.0.ffn_up.weight.x.npy");
    let y = npy("blk.0.ffn_up.weight.cpu-scalar.y.npy");
    assert_eq!((x.len(), y.len()), (64, 8));
    assert_eq!(npy("blk.0.ffn_up.weight.r.npy").len(), 8);
    assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|v| *v != 0.0));
    assert_eq!(npy("blk.0.attn_q.weight.cpu-scalar.y.npy").len(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

/// The dump alone (its manifest, x and r, and W read from the GGUF file
/// where the manifest says it lies) recomputes every backend's y with the
/// core reference: bit for bit on a backend that is bit-exact with it,
/// within the recorded tolerance on the others.
#[test]
fn dump_is_self_contained_and_recomputes_every_output() {
    let path = tiny_model("selfcontained");
    let dir = path.with_extension("dump");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["gguf", path.to_str().unwrap(), "--backend", "cpu", "--dump"])
        .arg(&dir)
        .output()
        .unwrap();
    let gguf = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("manifest.json"), "{out}");

    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let m: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(m["schema"], "fused-verify/gguf-dump/1");
    assert_eq!(m["fused_verify_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(m["source"], path.file_name().unwrap().to_str().unwrap());
    let top: Vec<&str> = m["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert!(top.contains(&"cpu-scalar"), "{top:?}");

    let mut named = BTreeSet::from(["manifest.json".to_string()]);
    let mut file = |v: &Value| -> Vec<f32> {
        let name = v.as_str().unwrap().to_string();
        let data = read_npy(&dir.join(&name));
        assert!(named.insert(name.clone()), "{name} named twice");
        data
    };
    let tensors = m["tensors"].as_array().unwrap();
    let names: Vec<&str> = tensors
        .iter()
        .map(|t| t["tensor"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "blk.0.ffn_up.weight",
            "blk.0.attn_q.weight",
            "token_embd.weight"
        ]
    );
    let (mut exact, mut within) = (0, 0);
    for t in tensors {
        let name = t["tensor"].as_str().unwrap();
        assert_eq!(t["formula"], "y = silu(W·x) + r", "{name}");
        let dtype = DType::from_name(t["format"].as_str().unwrap()).unwrap();
        let dim = |v: &Value| v.as_u64().unwrap() as usize;
        let (rows, k, cols) = (
            dim(&t["shape"]["rows"]),
            dim(&t["shape"]["k"]),
            dim(&t["shape"]["columns"]),
        );
        // W: not copied, read from the GGUF file where the manifest says.
        let w = &t["w"];
        assert!(w["file"].is_null(), "{name}: W is not copied");
        assert_eq!(w["tensor"], name);
        assert_eq!(w["format"], t["format"]);
        assert_eq!(w["ggml_type"].as_u64(), Some(u64::from(dtype.ggml_id())));
        assert_eq!(dim(&w["rows"]), rows);
        let (at, len) = (dim(&w["file_offset"]), dim(&w["bytes"]));
        assert_eq!(len, rows * dtype.row_bytes(k).unwrap(), "{name}");
        let wm = WeightMatrix::new(dtype, rows, k, &gguf[at..at + len]).unwrap();
        let x = file(&t["x"]);
        let r = file(&t["r"]);
        assert_eq!((x.len(), r.len()), (k * cols, rows * cols), "{name}");
        assert_eq!(t["x"], format!("{name}.x.npy"));
        assert_eq!(t["r"], format!("{name}.r.npy"));
        let backends = t["backends"].as_array().unwrap();
        assert!(backends.iter().any(|b| b["name"] == "cpu-scalar"), "{name}");
        for be in backends {
            let be_name = be["name"].as_str().unwrap();
            assert!(top.contains(&be_name), "{be_name}");
            let mode = [
                ActQuant::F32,
                ActQuant::Q8_0,
                ActQuant::Q8_1,
                ActQuant::Q8_K,
            ]
            .into_iter()
            .find(|a| a.dtype().map_or("f32", DType::name) == be["activations"])
            .unwrap_or_else(|| panic!("{name}: activations {}", be["activations"]));
            assert_eq!(mode, ActQuant::ggml(dtype), "{name} on {be_name}");
            // y = silu(W·x) + r with the core reference.
            let mut want = vec![0.0f32; rows * cols];
            for_each_acc(&wm, &x, cols, mode, |row, col, acc| {
                let i = col * rows + row;
                want[i] = Activation::Silu.apply(acc) + r[i];
            })
            .unwrap();
            assert_eq!(be["y"], format!("{name}.{be_name}.y.npy"));
            let y = file(&be["y"]);
            assert_eq!(y.len(), want.len(), "{name} on {be_name}");
            assert!(want.iter().all(|v| v.is_finite()), "{name}");
            if be["bit_exact_reference"].as_bool().unwrap() {
                for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{name} on {be_name} at {i}");
                }
                exact += 1;
            } else {
                let tol = &be["tolerance"];
                let ulps = tol["ulp"].as_u64().unwrap();
                let floor = tol["ulp_floor"].as_f64().unwrap() * t["ulp_scale"].as_f64().unwrap();
                for (i, (g, w)) in y.iter().zip(&want).enumerate() {
                    if f64::from(w.abs()) >= floor {
                        let d = ulp_distance(*g, *w);
                        assert!(d <= ulps, "{name} on {be_name} at {i}: {d} ulps > {ulps}");
                    }
                }
                within += 1;
            }
        }
    }
    assert!(exact >= 3, "cpu-scalar is bit-exact on every tensor");
    // The manifest names every file of the folder, and only those.
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(present, named);
    eprintln!("{exact} outputs bit for bit, {within} within tolerance");
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
