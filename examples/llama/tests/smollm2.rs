//! The real model through the runtime, when `scripts/fetch-model` has
//! cached it (`.models/SmolLM2-135M-Instruct.Q4_1.gguf`); each test prints
//! `skipped: <why>` and passes otherwise, unless `FUSED_REQUIRE_MODEL` is
//! set (the test command sets it after fetching the model): then a missing
//! model fails.

use std::path::PathBuf;
use std::process::Command;

use fused_core::acts::GemvMode;
use fused_core::backend::{Backend, Capabilities};
use fused_core::error::{Error, Unsupported};
use fused_core::graph::Graph;
use fused_core::planner::Plan;
use fused_cpu::CpuBackend;
use fused_llama::{DecodePath, LlamaError, LoadOptions, Model, ModelFile, Sampler, generate};

use fused_testkit::model_or_skip;

#[test]
fn greedy_decoding_says_paris() {
    let path = model_or_skip!();
    let be = CpuBackend::new(2).expect("a CPU backend");
    let file = ModelFile::open(&path).expect("the model maps");
    let mut model = Model::load(file, &be, LoadOptions::default()).expect("the model loads");
    let prompt = model
        .tokenizer()
        .encode("The capital of France is")
        .expect("the prompt encodes");
    let mut sampler = Sampler::new(0.0, 1.0, 0);
    let out = generate(&mut model, &prompt, 8, &mut sampler, true, |_| {}).expect("decodes");
    println!("generated: {:?}", out.text);
    assert!(out.text.contains(" Paris"), "{:?}", out.text);
    assert_eq!(out.ids.len(), 8);
}

#[test]
fn the_model_tokenizer_round_trips() {
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    let model = Model::load(
        ModelFile::open(&path).expect("the model maps"),
        &be,
        LoadOptions::default(),
    )
    .expect("the model loads");
    let tok = model.tokenizer();
    // The ids of SmolLM2's own tokenizer (no BOS: add_bos_token is false).
    assert_eq!(
        tok.encode("The capital of France is").unwrap(),
        vec![504, 3575, 282, 4649, 314]
    );
    for text in [
        "Hello, world!",
        "Grüße aus Zürich — 東京 🙂",
        "<|im_start|>user\nHi<|im_end|>\n",
        "x = 12345;\n\ty = 0.5",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "{ids:?}");
    }
    assert_eq!(tok.encode("<|im_start|>").unwrap(), vec![1]);
}

#[test]
fn context_overflow_is_a_typed_error() {
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    let opts = LoadOptions {
        max_context: 4,
        ..LoadOptions::default()
    };
    let mut model = Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap();
    let prompt = model
        .tokenizer()
        .encode("The capital of France is")
        .unwrap();
    let mut sampler = Sampler::new(0.0, 1.0, 0);
    let e = generate(&mut model, &prompt, 2, &mut sampler, true, |_| {}).unwrap_err();
    assert!(
        matches!(e, LlamaError::ContextOverflow { pos: 5, max: 4 }),
        "{e}"
    );
    // A cache filled to its end refuses the next position too.
    let mut cache = model.new_cache();
    for &t in &prompt[..4] {
        model.forward(t, &mut cache).unwrap();
    }
    let e = model.forward(prompt[4], &mut cache).unwrap_err();
    assert!(
        matches!(e, LlamaError::ContextOverflow { pos: 4, max: 4 }),
        "{e}"
    );
}

#[test]
fn the_cli_ends_with_one_json_line() {
    let path = model_or_skip!();
    let out = Command::new(env!("CARGO_BIN_EXE_fused-llama"))
        .args([
            "--model",
            path.to_str().unwrap(),
            "-n",
            "4",
            "--threads",
            "1",
        ])
        .args(["--prompt", "The capital of France is", "--json"])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap();
    let j: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(
        j["prompt_ids"],
        serde_json::json!([504, 3575, 282, 4649, 314])
    );
    assert_eq!(j["ids"].as_array().unwrap().len(), 4);
    assert!(j["decode_tok_s"].as_f64().unwrap() > 0.0);
    assert!(j["prompt_tok_s"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains(" Paris"), "{stdout}");
}

#[test]
fn bad_files_are_typed_errors() {
    let be = CpuBackend::new(1).expect("a CPU backend");
    let missing = PathBuf::from("/nonexistent/model.gguf");
    assert!(matches!(
        ModelFile::open(&missing),
        Err(LlamaError::Io { .. })
    ));
    let dir = std::env::temp_dir().join(format!("fused-llama-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"this is not a GGUF file at all").unwrap();
    let e = Model::load(
        ModelFile::open(&not_gguf).unwrap(),
        &be,
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, LlamaError::Gguf(_)), "{e}");
    // A valid GGUF of another architecture.
    let mut f = Vec::new();
    f.extend(b"GGUF");
    f.extend(3u32.to_le_bytes());
    f.extend(0u64.to_le_bytes());
    f.extend(1u64.to_le_bytes());
    let (k, v) = ("general.architecture", "gpt2");
    f.extend((k.len() as u64).to_le_bytes());
    f.extend(k.as_bytes());
    f.extend(8u32.to_le_bytes());
    f.extend((v.len() as u64).to_le_bytes());
    f.extend(v.as_bytes());
    let other = dir.join("gpt2.gguf");
    std::fs::write(&other, &f).unwrap();
    let e = Model::load(
        ModelFile::open(&other).unwrap(),
        &be,
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, LlamaError::Architecture { found } if found == "gpt2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_norm_prologue_gives_the_host_norm_bits() {
    // The plans' norm prologue and the host fallback compute the norm in
    // one order (fused_core::norm), so the logits agree bit for bit.
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    for mode in [GemvMode::Ggml, GemvMode::F32] {
        let load = |host_norm: bool| {
            let opts = LoadOptions {
                mode,
                host_norm,
                decode: DecodePath::Layered,
                ..LoadOptions::default()
            };
            Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap()
        };
        let (mut fused, mut host) = (load(false), load(true));
        assert!(fused.norm_fallbacks().is_empty());
        assert_eq!(fused.plan_runs(), (2, 1));
        assert_eq!(host.plan_runs(), (3, 1));
        let prompt = fused
            .tokenizer()
            .encode("The capital of France is")
            .unwrap();
        let (mut cf, mut ch) = (fused.new_cache(), host.new_cache());
        let n = if mode == GemvMode::F32 { 2 } else { 5 };
        for (i, &t) in prompt.iter().take(n).enumerate() {
            let (a, b) = (
                fused.forward(t, &mut cf).unwrap(),
                host.forward(t, &mut ch).unwrap(),
            );
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{mode:?}: logits differ at position {i}");
        }
    }
}

#[test]
fn a_real_layer_runs_its_norms_in_two_plans() {
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    let opts = LoadOptions {
        decode: DecodePath::Layered,
        ..LoadOptions::default()
    };
    let model = Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap();
    let s = model.plan_summaries();
    let steps: Vec<(&str, Vec<String>, usize)> = s
        .iter()
        .map(|(k, s)| (*k, s.steps.clone(), s.prologue_steps))
        .collect();
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0].1, ["gemv[norm]"], "{steps:?}");
    assert_eq!(
        steps[1].1,
        ["gemv + add", "glu(Silu)[norm]", "gemv + add"],
        "{steps:?}"
    );
    assert_eq!(steps[2].1, ["gemv[norm]"], "{steps:?}");
    assert!(steps.iter().all(|(_, _, p)| *p == 1), "{steps:?}");
}

/// The CPU backend refusing every plan with a norm prologue, as a backend
/// without the prologue's kernels does.
#[derive(Debug)]
struct NoPrologue(CpuBackend);

impl Backend for NoPrologue {
    type Error = <CpuBackend as Backend>::Error;
    type Plan<'a> = <CpuBackend as Backend>::Plan<'a>;

    fn name(&self) -> String {
        format!("{}-no-prologue", self.0.name())
    }

    fn device(&self) -> String {
        self.0.device()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn supports(&self, g: &Graph, plan: &Plan, mode: GemvMode) -> Result<(), Error> {
        if !plan.prologue_nodes.is_empty() {
            return Err(Error::Unsupported(Unsupported::Operation(
                "the norm prologue",
            )));
        }
        self.0.supports(g, plan, mode)
    }

    fn compile<'a>(
        &'a self,
        g: &Graph,
        plan: &Plan,
        mode: GemvMode,
        sizes: &[usize],
    ) -> Result<Self::Plan<'a>, Self::Error> {
        self.0.compile(g, plan, mode, sizes)
    }
}

#[test]
fn a_backend_refusing_the_prologue_gets_host_norms() {
    let path = model_or_skip!();
    let be = NoPrologue(CpuBackend::new(1).expect("a CPU backend"));
    let mut model =
        Model::load(ModelFile::open(&path).unwrap(), &be, LoadOptions::default()).unwrap();
    let kinds: Vec<&str> = model.norm_fallbacks().iter().map(|(k, _)| *k).collect();
    // The whole token reads its norms as prologues too: refused first.
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert_eq!(kinds[0], "whole token", "{kinds:?}");
    assert!(!model.whole_token());
    for (_, why) in model.norm_fallbacks() {
        assert!(why.contains("the norm prologue is not offered"), "{why}");
    }
    assert_eq!(model.plan_runs(), (3, 1));
    let prompt = model
        .tokenizer()
        .encode("The capital of France is")
        .unwrap();
    let mut sampler = Sampler::new(0.0, 1.0, 0);
    let out = generate(&mut model, &prompt, 8, &mut sampler, true, |_| {}).unwrap();
    assert!(out.text.contains(" Paris"), "{:?}", out.text);
}

#[test]
fn the_whole_token_runs_as_one_plan_and_gives_the_layered_bits() {
    // The whole-token plan and the layered path share every GEMV and norm,
    // and both run the core's RoPE and attention, which the CPU computes
    // exactly as defined: the same logits bit for bit, in both activation
    // modes, from one plan run a token.
    let path = model_or_skip!();
    let be = CpuBackend::new(2).expect("a CPU backend");
    for mode in [GemvMode::F32, GemvMode::Ggml] {
        let load = |decode| {
            let opts = LoadOptions {
                decode,
                mode,
                ..LoadOptions::default()
            };
            Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap()
        };
        let (mut whole, mut layered) = (load(DecodePath::WholeToken), load(DecodePath::Layered));
        assert!(whole.whole_token() && !layered.whole_token());
        assert!(
            whole.norm_fallbacks().is_empty(),
            "{:?}",
            whole.norm_fallbacks()
        );
        assert_eq!(whole.plan_runs(), (0, 1));
        let s = whole.plan_summaries();
        assert_eq!(s.len(), 1);
        let steps = &s[0].1.steps;
        let n_layer = whole.config().n_layer;
        // A layer: q/k/v with its norm and, as its tail, the key/value
        // append (both RoPEs and both row writes), attention, o-proj +
        // residual, the gated FFN with its norm, down + residual.
        let layer = [
            "gemv[norm] + rope(q, k) → k, v rows",
            "attention",
            "gemv + add",
            "glu(Silu)[norm]",
            "gemv + add",
        ];
        assert_eq!(steps.len(), layer.len() * n_layer + 1, "{steps:?}");
        for (i, l) in steps.chunks(layer.len()).take(n_layer).enumerate() {
            assert_eq!(l, layer, "layer {i}");
        }
        // The head with the final norm, and greedy selection as its tail.
        assert_eq!(
            steps.last().map(String::as_str),
            Some("gemv[norm] + argmax")
        );
        let prompt = whole
            .tokenizer()
            .encode("The capital of France is")
            .unwrap();
        let (mut cw, mut cl) = (whole.new_cache(), layered.new_cache());
        let mut token = prompt[0];
        for i in 0..12 {
            let a = whole.forward(token, &mut cw).unwrap().to_vec();
            let b = layered.forward(token, &mut cl).unwrap();
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{mode:?}: logits differ at position {i}");
            token = match prompt.get(i + 1) {
                Some(&t) => t,
                None => greedy(&a),
            };
        }
    }
}

/// The index of the largest logit, the first on ties.
fn greedy(v: &[f32]) -> u32 {
    (0..v.len())
        .max_by(|&x, &y| v[x].total_cmp(&v[y]).then(y.cmp(&x)))
        .unwrap() as u32
}

#[test]
fn forks_decode_alike_on_both_paths() {
    // Sequences forked from one prefix and decoded in turn: the whole-token
    // model moves each one's rows between its device caches and the host
    // as it switches, and gives the layered path's logits bit for bit;
    // a cleared cache starts over on both.
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    let load = |decode| {
        let opts = LoadOptions {
            decode,
            ..LoadOptions::default()
        };
        Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap()
    };
    let mut models = [load(DecodePath::WholeToken), load(DecodePath::Layered)];
    let prompt = models[0].tokenizer().encode("The capital of").unwrap();
    let mut logits: Vec<Vec<Vec<f32>>> = Vec::new();
    for model in &mut models {
        let mut seen = Vec::new();
        let mut a = model.new_cache();
        for &t in &prompt {
            seen.push(model.forward(t, &mut a).unwrap().to_vec());
        }
        let mut b = a.clone();
        let mut c = a.clone();
        // Interleaved: a, b and c take turns from the shared prefix, with
        // tokens of their own.
        for step in 0..3u32 {
            for (cache, first) in [(&mut a, 100u32), (&mut b, 200), (&mut c, 300)] {
                seen.push(model.forward(first + step, cache).unwrap().to_vec());
            }
        }
        // A fork of a fork, then the original continues.
        let mut d = b.clone();
        seen.push(model.forward(7, &mut d).unwrap().to_vec());
        seen.push(model.forward(8, &mut a).unwrap().to_vec());
        seen.push(model.forward(9, &mut d).unwrap().to_vec());
        a.clear();
        seen.push(model.forward(prompt[0], &mut a).unwrap().to_vec());
        seen.push(model.forward(10, &mut b).unwrap().to_vec());
        logits.push(seen);
    }
    assert_eq!(logits[0].len(), logits[1].len());
    for (i, (w, l)) in logits[0].iter().zip(&logits[1]).enumerate() {
        let same = w.iter().zip(l).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "pass {i}: the whole token and the layered path differ"
        );
    }
    // The fresh pass after clear() equals the very first pass.
    let n = logits[0].len();
    assert!(
        logits[0][n - 2]
            .iter()
            .zip(&logits[0][0])
            .all(|(x, y)| x.to_bits() == y.to_bits())
    );
}

#[cfg(feature = "lab")]
#[test]
fn the_fused_token_gives_the_unfused_bits() {
    // The whole token planned with its fusions (norm prologues, residual
    // epilogues, the gated dual GEMV) and planned node by node: the same
    // logits bit for bit, with at most half the kernel steps.
    let path = model_or_skip!();
    let be = CpuBackend::new(2).expect("a CPU backend");
    for mode in [GemvMode::F32, GemvMode::Ggml] {
        let load = |unfused| {
            let opts = LoadOptions {
                mode,
                unfused,
                ..LoadOptions::default()
            };
            Model::load(ModelFile::open(&path).unwrap(), &be, opts).unwrap()
        };
        let (mut fused, mut unfused) = (load(false), load(true));
        let steps = |m: &Model<'_, CpuBackend>| m.plan_summaries()[0].1.kernel_steps;
        // Fused, a layer is five steps (q/k/v GEMV with the norm prologue
        // and the key/value append as its tail, attention, o GEMV +
        // residual, GLU with the norm prologue, down GEMV + residual) and
        // the head one (GEMV with the norm prologue and the argmax as its
        // tail); unfused, more than twice that.
        let layers = fused.config().n_layer;
        let (f, u) = (steps(&fused), steps(&unfused));
        assert_eq!(f, 5 * layers + 1, "fused steps of {layers} layers");
        assert!(2 * f <= u, "{f} fused against {u} unfused steps");
        let prompt = fused
            .tokenizer()
            .encode("The capital of France is")
            .unwrap();
        let (mut cf, mut cu) = (fused.new_cache(), unfused.new_cache());
        for (i, &t) in prompt.iter().enumerate() {
            let a = fused.forward(t, &mut cf).unwrap().to_vec();
            let b = unfused.forward(t, &mut cu).unwrap();
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{mode:?}: logits differ at position {i}");
        }
    }
}

#[test]
fn the_device_argmax_is_the_host_argmax_of_the_logits() {
    // Two models fed the same tokens: one reads the logits back and takes
    // their argmax on the host, the other asks for the greedy token alone
    // (the whole-token plan's argmax; nothing else comes back).
    let path = model_or_skip!();
    let be = CpuBackend::new(1).expect("a CPU backend");
    let load =
        || Model::load(ModelFile::open(&path).unwrap(), &be, LoadOptions::default()).unwrap();
    let (mut host, mut device) = (load(), load());
    let prompt = host.tokenizer().encode("The capital of France is").unwrap();
    let (mut ch, mut cd) = (host.new_cache(), device.new_cache());
    let mut token = prompt[0];
    for i in 0..10 {
        let want = fused_llama::sampling::argmax(host.forward(token, &mut ch).unwrap());
        let got = device.forward_greedy(token, &mut cd).unwrap();
        assert_eq!(got, want, "position {i}");
        assert!(
            device.logits().is_empty(),
            "the logits stayed on the backend"
        );
        token = prompt.get(i + 1).copied().unwrap_or(got);
    }
    // Fed without reading anything back, then continued: the same logits.
    let mut a = device.new_cache();
    for &t in &prompt[..4] {
        device.feed(t, &mut a).unwrap();
    }
    let mut b = host.new_cache();
    for &t in &prompt[..4] {
        host.forward(t, &mut b).unwrap();
    }
    let x = device.forward(prompt[4], &mut a).unwrap().to_vec();
    let y = host.forward(prompt[4], &mut b).unwrap();
    assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
}
