//! The synthetic-model generator: the file it writes parses, has the
//! shapes asked for, loads in the runtime and decodes finite logits; the
//! same seed writes the same bytes; shapes the runtime cannot run are
//! refused.

use fused_core::DType;
use fused_cpu::CpuBackend;
use fused_gguf::Gguf;
use fused_llama::synth::{SynthSpec, SynthVocab, write_gguf};
use fused_llama::{LoadOptions, Model, ModelFile};

/// A small model of the 8B's layout: 2 layers, hidden 256, grouped heads.
fn tiny(dtype: DType) -> SynthSpec {
    SynthSpec {
        n_layer: 2,
        hidden: 256,
        ffn: 512,
        n_head: 4,
        n_head_kv: 2,
        vocab: 300,
        context: 64,
        head_dtype: DType::Q8_0,
        ..SynthSpec::llama3_8b(dtype, 64)
    }
}

/// `bytes` written to a temporary file and loaded on the CPU.
fn load<'b>(be: &'b CpuBackend, bytes: &[u8], tag: &str) -> Model<'b, CpuBackend> {
    let path = std::env::temp_dir().join(format!("fused-synth-{}-{tag}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("a temporary file");
    let model = Model::load(
        ModelFile::open(&path).expect("maps"),
        be,
        LoadOptions::default(),
    )
    .expect("the runtime loads it");
    std::fs::remove_file(&path).ok();
    model
}

/// Runs `ids` through `model`: every logit finite.
fn decode_finite(model: &mut Model<'_, CpuBackend>, ids: &[u32], what: &str) {
    let vocab = model.tokenizer().vocab();
    let mut cache = model.new_cache();
    for &t in ids {
        let logits = model.forward(t, &mut cache).expect("a forward pass");
        assert_eq!(logits.len(), vocab, "{what}");
        assert!(logits.iter().all(|x| x.is_finite()), "{what}");
    }
}

#[test]
fn the_file_loads_and_decodes() {
    for dtype in [
        DType::Q4_0,
        DType::Q4_K,
        DType::Q8_0,
        DType::Q6_K,
        DType::F16,
    ] {
        let spec = tiny(dtype);
        let mut bytes = Vec::new();
        let n = write_gguf(&spec, &mut bytes).expect("written");
        assert_eq!(n as usize, bytes.len());
        assert_eq!(spec.file_bytes().unwrap(), n, "{dtype:?}");
        let g = Gguf::parse(&bytes).expect("a valid GGUF");
        assert_eq!(g.tensors().len(), 3 + 9 * spec.n_layer);
        let q = g.tensor("blk.1.attn_k.weight").expect("attn_k");
        assert_eq!(q.dims(), &[256, 128]);
        assert_eq!(q.dtype().unwrap(), dtype);
        assert_eq!(g.get_u32("llama.attention.head_count_kv").unwrap(), 2);

        let be = CpuBackend::new(1).expect("a CPU backend");
        let mut model = load(&be, &bytes, &format!("{dtype:?}"));
        let ids = model.tokenizer().encode("Hi!").expect("encodes");
        assert_eq!(ids.len(), 3, "no merges: one token a byte");
        decode_finite(&mut model, &ids, &format!("{dtype:?}"));
    }
}

/// A SentencePiece file (Llama 2's tokenizer) loads, encodes a prompt
/// with BOS and the space prefix, decodes it back, and runs.
#[test]
fn a_sentencepiece_file_loads_and_decodes() {
    let spec = SynthSpec {
        vocab_kind: SynthVocab::SentencePiece,
        ..tiny(DType::Q4_0)
    };
    let mut bytes = Vec::new();
    write_gguf(&spec, &mut bytes).expect("written");
    assert_eq!(spec.file_bytes().unwrap(), bytes.len() as u64);
    let g = Gguf::parse(&bytes).expect("a valid GGUF");
    assert_eq!(g.get_str("tokenizer.ggml.model").unwrap(), "llama");
    let be = CpuBackend::new(1).expect("a CPU backend");
    let mut model = load(&be, &bytes, "spm");
    let tok = model.tokenizer();
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    let text = "Hi there, 東京";
    let ids = tok.encode(text).expect("encodes");
    // BOS, `▁` for the space prefix, then `H` as its byte token <0x48>.
    assert_eq!(&ids[..3], &[1, 259, 3 + 0x48]);
    assert_eq!(tok.decode(&ids[1..]).unwrap(), text);
    decode_finite(&mut model, &ids, "spm");
}

/// llama.cpp's Q4_K_M mix: Q6_K `attn_v` / `ffn_down` in the layers
/// `use_more_bits` picks, embedding Q4_K, head Q6_K; the runtime loads the
/// mixed layers and decodes.
#[test]
fn the_q4_k_m_mix_loads_and_decodes() {
    let spec = SynthSpec {
        n_layer: 8,
        ..SynthSpec {
            head_dtype: DType::Q6_K,
            embd_dtype: Some(DType::Q4_K),
            more_bits: Some(DType::Q6_K),
            ..tiny(DType::Q4_K)
        }
    };
    let mut bytes = Vec::new();
    write_gguf(&spec, &mut bytes).expect("written");
    let g = Gguf::parse(&bytes).expect("a valid GGUF");
    let dtype = |name: &str| g.tensor(name).expect(name).dtype().unwrap();
    // Of 8 layers: the first and last eighth (0, 7) and every third from
    // the first eighth on (3, 6).
    for l in 0..8 {
        let wide = if [0, 3, 6, 7].contains(&l) {
            DType::Q6_K
        } else {
            DType::Q4_K
        };
        assert_eq!(dtype(&format!("blk.{l}.attn_v.weight")), wide, "layer {l}");
        assert_eq!(
            dtype(&format!("blk.{l}.ffn_down.weight")),
            wide,
            "layer {l}"
        );
        assert_eq!(dtype(&format!("blk.{l}.attn_k.weight")), DType::Q4_K);
    }
    assert_eq!(dtype("token_embd.weight"), DType::Q4_K);
    assert_eq!(dtype("output.weight"), DType::Q6_K);
    let be = CpuBackend::new(1).expect("a CPU backend");
    let mut model = load(&be, &bytes, "q4km");
    let ids = model.tokenizer().encode("Hi!").expect("encodes");
    decode_finite(&mut model, &ids, "q4_k_m");
    // The 8B in this mix (16 of 32 layers with Q6_K attn_v and ffn_down):
    // 4.916 GB, within a few MB of published Llama-3-8B Q4_K_M files
    // (about 4.92 GB with their 128k-token vocabulary and merges).
    let bytes = SynthSpec::llama3_8b_q4_k_m(512).file_bytes().unwrap();
    assert!((4_910_000_000..4_920_000_000).contains(&bytes), "{bytes}");
}

#[test]
fn one_seed_writes_one_file() {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let spec = tiny(DType::Q4_0);
    write_gguf(&spec, &mut a).unwrap();
    write_gguf(&spec, &mut b).unwrap();
    write_gguf(&SynthSpec { seed: 2, ..spec }, &mut c).unwrap();
    assert!(a == b);
    assert!(a != c);
}

#[test]
fn shapes_the_runtime_cannot_run_are_refused() {
    let spec = tiny(DType::Q4_0);
    for bad in [
        SynthSpec {
            n_head: 3,
            ..spec.clone()
        },
        SynthSpec {
            n_head_kv: 3,
            ..spec.clone()
        },
        SynthSpec {
            vocab: 10,
            ..spec.clone()
        },
        SynthSpec {
            n_layer: 0,
            ..spec.clone()
        },
        SynthSpec {
            dtype: DType::Q5_1,
            ..spec.clone()
        },
    ] {
        let e = write_gguf(&bad, &mut Vec::new()).expect_err("refused");
        assert!(!e.to_string().is_empty());
        assert!(bad.file_bytes().is_err());
    }
}

#[test]
fn the_8b_shapes_are_llama_3s() {
    let s = SynthSpec::llama3_8b(DType::Q4_0, 512);
    // 32 layers of 218 M weights in Q4_0 (3.93 GB) and two tables of 525 M
    // weights in Q8_0 (1.12 GB).
    let bytes = s.file_bytes().unwrap();
    assert!((5_040_000_000..5_050_000_000).contains(&bytes), "{bytes}");
    assert_eq!((s.hidden / s.n_head, s.n_head / s.n_head_kv), (128, 4));
}
