//! `fused-llama-synth`: writes a Llama-architecture GGUF of random weights
//! in Llama-3-8B's shapes (or fewer layers), for measuring the runtime's
//! speed on a model that ships in no package.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use fused_core::DType;
use fused_llama::synth::{SynthSpec, SynthVocab, write_gguf};

/// Writes a Llama-3-8B-shaped GGUF of random weights (the text it makes
/// fused-llama generate is noise; its speed is the point)
#[derive(Parser, Debug)]
#[command(name = "fused-llama-synth")]
struct Args {
    /// The GGUF file to write
    out: PathBuf,
    /// Format of the layers' matrices (embedding and head: Q8_0, or F16
    /// for F16); q4_k_m: llama.cpp's mix (Q4_K layers, attn_v and ffn_down
    /// of half of them in Q6_K, embedding Q4_K, head Q6_K)
    #[arg(long, value_enum, default_value = "q4_0")]
    format: Format,
    /// `llama.context_length`
    #[arg(long, default_value_t = 4096)]
    ctx: usize,
    /// Layers (default: Llama-3-8B's 32)
    #[arg(long)]
    layers: Option<usize>,
    /// Seed of the weights
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The tokenizer: byte-level BPE (`gpt2`, as Llama 3) or SentencePiece
    /// (`llama`, as Llama 2)
    #[arg(long, value_enum, default_value = "bpe")]
    vocab: Vocab,
}

/// The tokenizers the generator writes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Vocab {
    Bpe,
    Spm,
}

/// The layers' weight formats the generator writes.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q4_k_m")]
    Q4KM,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q6_k")]
    Q6K,
    #[value(name = "f16")]
    F16,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let uniform = |d| SynthSpec::llama3_8b(d, args.ctx);
    let mut spec = match args.format {
        Format::Q4_0 => uniform(DType::Q4_0),
        Format::Q4K => uniform(DType::Q4_K),
        Format::Q4KM => SynthSpec::llama3_8b_q4_k_m(args.ctx),
        Format::Q8_0 => uniform(DType::Q8_0),
        Format::Q6K => uniform(DType::Q6_K),
        Format::F16 => uniform(DType::F16),
    };
    spec.seed = args.seed;
    spec.vocab_kind = match args.vocab {
        Vocab::Bpe => SynthVocab::ByteBpe,
        Vocab::Spm => SynthVocab::SentencePiece,
    };
    if let Some(n) = args.layers {
        spec.n_layer = n;
    }
    let run = || -> Result<u64, Box<dyn std::error::Error>> {
        let bytes = spec.file_bytes()?;
        eprintln!(
            "writing {} ({:.2} GB, {} layers of {:?})",
            args.out.display(),
            bytes as f64 / 1e9,
            spec.n_layer,
            args.format
        );
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&args.out)?);
        Ok(write_gguf(&spec, &mut out)?)
    };
    match run() {
        Ok(n) => {
            eprintln!("wrote {n} bytes");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
