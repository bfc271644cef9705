//! `model FILE` on the shipped model (`.models/SmolLM2-135M-Instruct.Q4_1.gguf`,
//! cached by `scripts/fetch-model`): the mode itself, and the NMSE
//! thresholds against deliberately broken references. Each test that needs
//! the model prints `skipped: <why>` and passes without it, unless
//! `FUSED_REQUIRE_MODEL` is set (the test command sets it after fetching
//! the model): then a missing model fails. The errors of a missing file and
//! of a GGUF file of another architecture need no model.

mod common;

use std::process::Command;

use fused_core::acts::GemvMode;
use fused_verify::model::checks::{check_logits, threshold};
use fused_verify::model::config::Hyper;
use fused_verify::model::decoding::{forced_and_greedy, greedy};
use fused_verify::model::mode::load_reference;
use fused_verify::model::weights::Weights;
use fused_verify::model::{ModelError, PROMPT, Reference};

use fused_testkit::model_or_skip;

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Teacher-forced steps of the broken-reference test: the mode's default.
const STEPS: usize = 16;

/// A reference with one fault each against the good one: GGML's default
/// RoPE base 10⁴ instead of the file's 10⁵ and a skipped layer fail the
/// logits check of both activation modes, a RoPE base 1 % off that of the
/// f32 mode (it is inside the quantization noise of GGML's mode, as the
/// threshold's documentation says). The thresholds catch real bugs.
#[test]
fn broken_references_fail_the_thresholds() {
    let path = model_or_skip!();
    let (reference, tok) = load_reference(&path, threads()).unwrap();
    let prompt = tok.encode(PROMPT).unwrap();
    let good = greedy(&mut &reference, &prompt, STEPS).unwrap();
    let (h, w) = reference.into_parts();
    assert_eq!(h.rope_base, 100_000.0);
    // Each broken reference takes the weights, runs the steps forced with
    // the good reference's tokens, checks, and gives the weights back.
    let run = |what: &str, h: Hyper, w: Weights, fails: &[GemvMode]| -> Weights {
        let broken = Reference::new(h, w, threads()).unwrap();
        let p = forced_and_greedy(&mut &broken, &prompt, &good.tokens, STEPS, 1).unwrap();
        for mode in [GemvMode::F32, GemvMode::Ggml] {
            let c = check_logits(&p.forced, &good.logits, threshold(mode));
            println!(
                "{what}, {mode:?} threshold: NMSE mean {:.2e}, worst {:.2e}",
                c.mean, c.worst
            );
            assert_eq!(c.ok, !fails.contains(&mode), "{what}: {c:?}");
        }
        broken.into_parts().1
    };
    let both = [GemvMode::F32, GemvMode::Ggml];
    let base = |b| Hyper {
        rope_base: b,
        ..h.clone()
    };
    let w = run("RoPE base 1e4", base(1e4), w, &both);
    let mut w = run("RoPE base 1 % off", base(1.01e5), w, &[GemvMode::F32]);
    w.layers.remove(h.n_layer / 2);
    let skipped = Hyper {
        n_layer: h.n_layer - 1,
        ..h.clone()
    };
    run("the middle layer skipped", skipped, w, &both);
    // The good reference's logits, rounded to f32 as a backend returns
    // them, pass the f32 threshold, and the rounding is all they differ by.
    let c = check_logits(&good.logits, &good.logits, threshold(GemvMode::F32));
    assert!(c.ok && c.worst < 1e-14 && c.worst > 0.0, "{c:?}");
}

/// The mode on the shipped model, CPU only, a short run (the test command
/// runs the full default on CPU and lavapipe in release).
#[test]
fn model_mode_passes_on_the_cpu() {
    let path = model_or_skip!();
    let json = std::env::temp_dir().join(format!("fused-verify-{}-model.json", std::process::id()));
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["model", path.to_str().unwrap(), "--backend", "cpu"])
        .args(["--steps", "4", "--tokens", "6", "--mode", "ggml", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    println!("{out}");
    assert!(o.status.success(), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).ok();
    assert_eq!(v["schema"], "fused-verify/model/1");
    assert_eq!(
        v["prompt_ids"],
        serde_json::json!([504, 3575, 282, 4649, 314])
    );
    assert_eq!(
        v["reference"]["tokens"][0], 7042,
        "the reference says \" Paris\""
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{out}");
    assert_eq!(runs[0]["nmse"].as_array().unwrap().len(), 4);
    assert!(runs[0]["text"].as_str().unwrap().starts_with(" Paris"));
    // The reference's " Paris", then logits, greedy and paris on the CPU;
    // Vulkan and CUDA are not selected.
    assert_eq!(v["summary"]["passed"], 4, "{out}");
    assert_eq!(v["summary"]["failed"], 0, "{out}");
    assert!(out.ends_with("4 passed, 0 failed, 0 skipped\n"), "{out}");
}

#[test]
fn a_missing_file_is_a_typed_error() {
    let path = std::env::temp_dir().join("fused-verify-no-such-model.gguf");
    match load_reference(&path, 1) {
        Err(ModelError::Io { path: p, .. }) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["model", path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("FAIL ") && out.contains("no-such-model.gguf: "),
        "{out}"
    );
    assert!(out.ends_with("0 passed, 1 failed, 0 skipped\n"), "{out}");
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .arg("model")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("`model` needs a FILE"), "{out}");
}

#[test]
fn a_file_of_another_architecture_is_refused_by_name() {
    // tests/common writes a GGUF file without `general.architecture`, and
    // one with it set to another architecture.
    let dir = std::env::temp_dir();
    let none = dir.join(format!("fused-verify-{}-noarch.gguf", std::process::id()));
    common::write_gguf(&none, 32, &[]);
    let e = load_reference(&none, 1).unwrap_err();
    std::fs::remove_file(&none).ok();
    assert!(matches!(e, ModelError::Gguf(_)), "{e:?}");
    assert!(e.to_string().contains("general.architecture"), "{e}");
    let other = dir.join(format!("fused-verify-{}-gpt2.gguf", std::process::id()));
    common::write_gguf_with_arch(&other, "gpt2");
    let e = load_reference(&other, 1).unwrap_err();
    let o = Command::new(env!("CARGO_BIN_EXE_fused-verify"))
        .args(["model", other.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&other).ok();
    assert!(
        matches!(&e, ModelError::NotLlama { found } if found == "gpt2"),
        "{e:?}"
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("general.architecture is `gpt2`: the model mode checks Llama-architecture"),
        "{out}"
    );
}
