//! `decode FILE`: a stack of decode layers with the weights of a small GGUF
//! file written here (hidden 256, FFN 512, Q8_0 and F16), fused against
//! unfused on the CPU backends; files that do not fit fail with a message
//! naming the tensor.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{Tensor, quantized_scaled, write_gguf};
use fused_core::DType;

const H: usize = 256;
const F: usize = 512;

/// The four decode weights of `layers` layers, `ffn_down` of layer 1 in
/// F16 (mixed formats), plus tensors the stack does not use; `skip` names a
/// tensor left out.
fn model(name: &str, layers: usize, h: usize, skip: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "fused-verify-{}-decode-{name}.gguf",
        std::process::id()
    ));
    let names: Vec<&'static str> = (0..layers)
        .flat_map(|l| {
            ["attn_output", "ffn_gate", "ffn_up", "ffn_down"]
                .map(|w| &*format!("blk.{l}.{w}.weight").leak())
        })
        .collect();
    let mut tensors: Vec<Tensor> = vec![(
        "token_embd.weight",
        8,
        vec![h as u64, 4],
        quantized_scaled(DType::Q8_0, h, 4, 1.0),
    )];
    for n in names.into_iter().filter(|n| *n != skip) {
        let (k, m) = if n.ends_with("attn_output.weight") {
            (h, h)
        } else if n.ends_with("ffn_down.weight") {
            (F, h)
        } else {
            (h, F)
        };
        let dtype = if n == "blk.1.ffn_down.weight" {
            DType::F16
        } else {
            DType::Q8_0
        };
        let scale = 1.0 / (k as f32).sqrt();
        tensors.push((
            n,
            dtype.ggml_id(),
            vec![k as u64, m as u64],
            quantized_scaled(dtype, k, m, scale),
        ));
    }
    write_gguf(&path, 32, &tensors);
    path
}

fn decode(path: &PathBuf, extra: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["decode", path.to_str().unwrap(), "--backend", "cpu"])
        .args(["--reps", "1", "--threads", "2"])
        .args(extra)
        .output()
        .unwrap();
    std::fs::remove_file(path).ok();
    o
}

#[test]
fn decode_runs_the_layers_of_a_gguf_file_fused_and_unfused() {
    let path = model("ok", 2, H, "");
    let json = path.with_extension("json");
    let o = decode(&path, &["--layers", "4", "--json", json.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(
        (v["hidden"].as_u64(), v["ffn"].as_u64()),
        (Some(256), Some(512))
    );
    assert!(v["gguf"].as_str().unwrap().ends_with("-decode-ok.gguf"));
    assert_eq!(v["errors"].as_array().unwrap().len(), 0, "{out}");
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "{out}");
    for r in rows {
        // The file has two layers: `--layers 4` takes the two there are.
        assert_eq!(r["layers"], 2, "{r}");
        assert_eq!(r["dtype"], "f16+q8_0", "{r}");
        assert_eq!(r["fused_eq_unfused"], true, "{r}");
        assert!(
            r["launches_fused"].as_u64() < r["launches_unfused"].as_u64(),
            "{r}"
        );
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let path = model("missing", 2, H, "blk.1.ffn_up.weight");
    let o = decode(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("blk.1.ffn_up.weight: not in the file"),
        "{out}"
    );
}

#[test]
fn a_shape_that_does_not_fit_is_named() {
    let path = std::env::temp_dir().join(format!(
        "fused-verify-{}-decode-shape.gguf",
        std::process::id()
    ));
    let w = |n, k: usize, m: usize| -> Tensor {
        (
            n,
            8,
            vec![k as u64, m as u64],
            quantized_scaled(DType::Q8_0, k, m, 0.1),
        )
    };
    write_gguf(
        &path,
        32,
        &[
            w("blk.0.attn_output.weight", H, H),
            w("blk.0.ffn_gate.weight", H, F),
            w("blk.0.ffn_up.weight", H, F),
            w("blk.0.ffn_down.weight", F, 2 * H),
        ],
    );
    let o = decode(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("blk.0.ffn_down.weight: shape [512, 512], the stack needs [512, 256]"),
        "{out}"
    );
}

#[test]
fn a_hidden_size_not_a_power_of_two_runs_without_the_rotation() {
    let path = model("npot", 1, 320, "");
    let o = decode(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("hidden size 320 is not a power of two: no Hadamard-rotated projection"),
        "{out}"
    );
}

#[test]
fn a_truncated_file_is_named() {
    let path = model("short", 2, H, "");
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 100).unwrap();
    let o = decode(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("FAIL reading"), "{out}");
    assert!(out.contains("blk.1.ffn_down.weight: "), "{out}");
}

#[test]
fn a_layer_number_at_the_top_of_usize_is_not_a_layer() {
    let path = std::env::temp_dir().join(format!(
        "fused-verify-{}-decode-wrap.gguf",
        std::process::id()
    ));
    let name = format!("blk.{}.ffn_gate.weight", usize::MAX);
    write_gguf(
        &path,
        32,
        &[(
            &*name.leak(),
            DType::Q8_0.ggml_id(),
            vec![H as u64, F as u64],
            quantized_scaled(DType::Q8_0, H, F, 0.1),
        )],
    );
    let o = decode(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("0 `blk.N.` layers in the file"), "{out}");
}
