//! Files other people made: a small synthetic model (either tokenizer)
//! with bytes of its header changed, or the file cut short, loads or is
//! refused with an error, never a panic; one that loads encodes a prompt
//! and runs a token, or says why not.

use fused_core::DType;
use fused_cpu::CpuBackend;
use fused_gguf::Gguf;
use fused_llama::synth::{SynthSpec, SynthVocab, write_gguf};
use fused_llama::{LoadOptions, Model, ModelFile};
use proptest::prelude::*;

/// The 8B's layout at a size that loads in milliseconds.
fn tiny(vocab_kind: SynthVocab) -> SynthSpec {
    SynthSpec {
        n_layer: 1,
        hidden: 64,
        ffn: 128,
        n_head: 4,
        n_head_kv: 2,
        vocab: 300,
        context: 32,
        head_dtype: DType::Q8_0,
        vocab_kind,
        ..SynthSpec::llama3_8b(DType::Q4_0, 32)
    }
}

/// The file's bytes and where its tensor data starts.
fn file(vocab_kind: SynthVocab) -> (Vec<u8>, usize) {
    let mut bytes = Vec::new();
    write_gguf(&tiny(vocab_kind), &mut bytes).expect("written");
    let g = Gguf::parse(&bytes).expect("parses");
    let first = g.tensors()[0].rows(0, 1).expect("a row");
    let data = first.as_ptr() as usize - bytes.as_ptr() as usize;
    (bytes, data)
}

/// Loads `bytes` from a temporary file on the CPU and, when that works,
/// encodes a prompt and runs its first token.
fn load_and_run(bytes: &[u8], tag: &str) {
    let path =
        std::env::temp_dir().join(format!("fused-damaged-{}-{tag}.gguf", std::process::id()));
    std::fs::write(&path, bytes).expect("a temporary file");
    let be = CpuBackend::new(1).expect("a CPU backend");
    let loaded = ModelFile::open(&path).and_then(|f| Model::load(f, &be, LoadOptions::default()));
    std::fs::remove_file(&path).ok();
    match loaded {
        Err(e) => assert!(!e.to_string().is_empty()),
        Ok(mut model) => {
            if let Ok(ids) = model.tokenizer().encode("Hi") {
                let mut cache = model.new_cache();
                if let Some(&t) = ids.first() {
                    let _ = model.forward(t, &mut cache);
                }
                let _ = model.tokenizer().decode(&ids);
            }
        }
    }
}

#[test]
fn the_undamaged_files_load() {
    for kind in [SynthVocab::ByteBpe, SynthVocab::SentencePiece] {
        let (bytes, _) = file(kind);
        let path =
            std::env::temp_dir().join(format!("fused-undamaged-{}.gguf", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let be = CpuBackend::new(1).unwrap();
        let model = Model::load(ModelFile::open(&path).unwrap(), &be, LoadOptions::default());
        std::fs::remove_file(&path).ok();
        assert!(model.is_ok(), "{kind:?}: {:?}", model.err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Up to four bytes changed, half of them among the first kilobyte
    /// (counts, hyperparameters, the tokenizer's keys), the rest anywhere
    /// in the header (tokens, the tensor table); sometimes the file cut.
    #[test]
    fn a_damaged_file_loads_or_is_refused(
        spm in any::<bool>(),
        edits in proptest::collection::vec((any::<bool>(), 0.0f64..1.0, any::<u8>()), 1..5),
        cut in proptest::option::weighted(0.2, 0.0f64..1.0),
    ) {
        let kind = if spm { SynthVocab::SentencePiece } else { SynthVocab::ByteBpe };
        let (mut bytes, header) = file(kind);
        for (early, at, value) in edits {
            let span = if early { header.min(1024) } else { header };
            let i = ((at * span as f64) as usize).min(span - 1);
            bytes[i] = value;
        }
        if let Some(c) = cut {
            bytes.truncate((c * bytes.len() as f64) as usize);
        }
        load_and_run(&bytes, if spm { "spm" } else { "bpe" });
    }
}
