//! A Llama-architecture GGUF of random weights in the shapes of a model
//! that ships in no package (Llama-3-8B: [`SynthSpec::llama3_8b`]), for
//! measuring speed: the runtime takes every shape from the file, so a
//! synthetic file exercises exactly the plans a real one would. The text it
//! generates is noise.
//!
//! The file is written as a stream (an 8B-shaped Q4_0 file is 5.0 GB):
//! the header with every tensor's offset first, then each tensor's blocks
//! from a seeded generator. Quantized blocks get small finite scales and
//! random codes, so activations stay finite through the layers. The
//! vocabulary ([`SynthVocab`]) is byte-level BPE's or SentencePiece's, with
//! byte tokens and filler up to `vocab` and no merges: the tokenizer
//! encodes a prompt a byte (BPE) or a character (SentencePiece) a token.

use std::io::{self, Write};

use fused_core::DType;

use crate::error::LlamaError;
use crate::gguf_meta::{Meta, header, string};
use crate::tokenizer::TokenType;

/// Alignment of the tensor data (GGUF's default).
const ALIGN: u64 = 32;

/// The shapes and formats of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// Layers.
    pub n_layer: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Feed-forward size.
    pub ffn: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Vocabulary (rows of the embedding table and of the head).
    pub vocab: usize,
    /// `llama.context_length`.
    pub context: usize,
    /// Format of the layers' matrices.
    pub dtype: DType,
    /// Format of the embedding table and of the untied output head.
    pub head_dtype: DType,
    /// Format of the embedding table when not `head_dtype` (Q4_K_M files
    /// keep it in the layers' format and the head in Q6_K).
    pub embd_dtype: Option<DType>,
    /// Format of `attn_v` and `ffn_down` in the layers where llama.cpp's
    /// K-quant mixes give them more bits (the first and last eighth, and
    /// every third layer between; Q4_K_M: Q6_K), when not `dtype`.
    pub more_bits: Option<DType>,
    /// `llama.rope.freq_base`.
    pub rope_base: f32,
    /// Seed of the weights.
    pub seed: u64,
    /// The tokenizer the file carries.
    pub vocab_kind: SynthVocab,
}

/// The tokenizer of a synthetic file; neither has merges, so a prompt
/// encodes a character (or a byte) a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthVocab {
    /// Byte-level BPE (`gpt2`, as Llama 3 files): the 256 byte tokens,
    /// filler tokens, and an end-of-sequence token last.
    ByteBpe,
    /// SentencePiece (`llama`, as Llama 2 files): `<unk>`, `<s>`, `</s>`,
    /// the 256 byte tokens `<0xXX>`, `▁`, then filler pieces.
    SentencePiece,
}

impl SynthSpec {
    /// Llama-3-8B's shapes: 32 layers, hidden 4096, FFN 14336, 32 query and
    /// 8 key/value heads of 128, a vocabulary of 128256, rope base 500000;
    /// the layers in `dtype`, embedding and head in Q8_0 (as in the usual
    /// quantized files) unless `dtype` is wider.
    pub fn llama3_8b(dtype: DType, context: usize) -> SynthSpec {
        SynthSpec {
            n_layer: 32,
            hidden: 4096,
            ffn: 14336,
            n_head: 32,
            n_head_kv: 8,
            vocab: 128_256,
            context,
            dtype,
            head_dtype: if dtype == DType::F16 {
                DType::F16
            } else {
                DType::Q8_0
            },
            rope_base: 500_000.0,
            seed: 1,
            vocab_kind: SynthVocab::ByteBpe,
            embd_dtype: None,
            more_bits: None,
        }
    }

    /// Llama-3-8B's shapes in llama.cpp's Q4_K_M mix: the layers in Q4_K
    /// but for `attn_v` and `ffn_down` of 16 of the 32 layers in Q6_K, the
    /// embedding table in Q4_K and the head in Q6_K.
    pub fn llama3_8b_q4_k_m(context: usize) -> SynthSpec {
        SynthSpec {
            head_dtype: DType::Q6_K,
            embd_dtype: Some(DType::Q4_K),
            more_bits: Some(DType::Q6_K),
            ..SynthSpec::llama3_8b(DType::Q4_K, context)
        }
    }

    /// Whether layer `i` of `n` gets more bits in a K-quant mix
    /// (llama.cpp's `use_more_bits`).
    fn more_bits_at(i: usize, n: usize) -> bool {
        // Past the first test i ≥ n / 8, so the difference does not wrap.
        i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
    }

    /// Bytes of the file [`write_gguf`] writes for this spec.
    pub fn file_bytes(&self) -> Result<u64, LlamaError> {
        let (header, tensors) = self.layout()?;
        Ok(header.len() as u64 + tensors.last().map_or(0, |t| t.offset + t.bytes))
    }

    /// Every tensor: name, GGUF dims (`[row length, rows]`), format.
    fn tensors(&self) -> Vec<(String, Vec<u64>, DType)> {
        let (h, f) = (self.hidden as u64, self.ffn as u64);
        let head_dim = self.hidden / self.n_head.max(1);
        let (q, kv) = (h, (self.n_head_kv * head_dim) as u64);
        let mut t = vec![(
            "token_embd.weight".to_string(),
            vec![h, self.vocab as u64],
            self.embd_dtype.unwrap_or(self.head_dtype),
        )];
        for l in 0..self.n_layer {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let wide = match self.more_bits {
                Some(d) if Self::more_bits_at(l, self.n_layer) => d,
                _ => self.dtype,
            };
            t.push((n("attn_norm"), vec![h], DType::F32));
            t.push((n("attn_q"), vec![h, q], self.dtype));
            t.push((n("attn_k"), vec![h, kv], self.dtype));
            t.push((n("attn_v"), vec![h, kv], wide));
            t.push((n("attn_output"), vec![q, h], self.dtype));
            t.push((n("ffn_norm"), vec![h], DType::F32));
            t.push((n("ffn_gate"), vec![h, f], self.dtype));
            t.push((n("ffn_up"), vec![h, f], self.dtype));
            t.push((n("ffn_down"), vec![f, h], wide));
        }
        t.push(("output_norm.weight".to_string(), vec![h], DType::F32));
        t.push((
            "output.weight".to_string(),
            vec![h, self.vocab as u64],
            self.head_dtype,
        ));
        t
    }

    /// The header (metadata and tensor table, padded) and each tensor's
    /// place in the data section.
    fn layout(&self) -> Result<(Vec<u8>, Vec<Placed>), LlamaError> {
        self.check()?;
        let tensors = self.tensors();
        let mut placed = Vec::with_capacity(tensors.len());
        let mut next = 0u64;
        for (name, dims, dtype) in tensors {
            let row = dtype
                .row_bytes(dims[0] as usize)
                .map_err(|e| LlamaError::format(&name, dtype, e.to_string()))?;
            let bytes = row as u64 * dims.get(1).copied().unwrap_or(1);
            placed.push(Placed {
                name,
                dims,
                dtype,
                offset: next,
                bytes,
            });
            next = (next + bytes).next_multiple_of(ALIGN);
        }
        let mut h = header(placed.len(), &self.metadata());
        for t in &placed {
            string(&mut h, &t.name);
            h.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend(d.to_le_bytes());
            }
            h.extend(t.dtype.ggml_id().to_le_bytes());
            h.extend(t.offset.to_le_bytes());
        }
        h.resize((h.len() as u64).next_multiple_of(ALIGN) as usize, 0);
        Ok((h, placed))
    }

    /// Shapes the runtime can run, or which one is not.
    fn check(&self) -> Result<(), LlamaError> {
        let bad = |what: &str, why: String| {
            Err(LlamaError::Config {
                what: what.into(),
                why,
            })
        };
        let min_vocab = match self.vocab_kind {
            SynthVocab::ByteBpe => 257,
            SynthVocab::SentencePiece => 260,
        };
        if self.n_layer == 0 || self.hidden == 0 || self.ffn == 0 || self.vocab < min_vocab {
            return bad(
                "synthetic model",
                format!(
                    "needs layers, a hidden and an FFN size, and a vocabulary of at least \
                     {min_vocab} ({:?})",
                    self.vocab_kind
                ),
            );
        }
        if self.n_head == 0
            || self.n_head_kv == 0
            || !self.hidden.is_multiple_of(self.n_head)
            || !self.n_head.is_multiple_of(self.n_head_kv)
            || !(self.hidden / self.n_head).is_multiple_of(2)
        {
            return bad(
                "synthetic model heads",
                format!(
                    "{} query and {} key/value heads do not divide hidden {} into even heads",
                    self.n_head, self.n_head_kv, self.hidden
                ),
            );
        }
        let extra = [self.embd_dtype, self.more_bits];
        for d in [self.dtype, self.head_dtype]
            .into_iter()
            .chain(extra.into_iter().flatten())
        {
            if !matches!(
                d,
                DType::Q4_0 | DType::Q8_0 | DType::Q4_K | DType::Q6_K | DType::F16
            ) {
                return bad(
                    "synthetic weight format",
                    format!("{d:?}: the generator writes Q4_0, Q8_0, Q4_K, Q6_K or F16"),
                );
            }
        }
        Ok(())
    }

    /// The metadata the runtime reads.
    fn metadata(&self) -> Vec<(&'static str, Meta)> {
        let u = |v: usize| Meta::U32(v as u32);
        let mut kv = vec![
            ("general.architecture", Meta::Str("llama".into())),
            ("general.name", Meta::Str("fused synthetic".into())),
            ("general.alignment", Meta::U32(ALIGN as u32)),
            ("llama.block_count", u(self.n_layer)),
            ("llama.embedding_length", u(self.hidden)),
            ("llama.feed_forward_length", u(self.ffn)),
            ("llama.attention.head_count", u(self.n_head)),
            ("llama.attention.head_count_kv", u(self.n_head_kv)),
            ("llama.context_length", u(self.context)),
            ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
            ("llama.rope.freq_base", Meta::F32(self.rope_base)),
        ];
        match self.vocab_kind {
            SynthVocab::ByteBpe => {
                let mut tokens: Vec<String> = (0u8..=255).map(byte_token).collect();
                tokens.extend((256..self.vocab - 1).map(|i| format!("<|synth_{i}|>")));
                tokens.push("<|synth_eos|>".into());
                let mut types = vec![TokenType::NORMAL; self.vocab - 1];
                types.push(TokenType::CONTROL);
                kv.extend([
                    ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
                    ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
                    ("tokenizer.ggml.token_type", Meta::I32s(types)),
                    ("tokenizer.ggml.merges", Meta::Strs(Vec::new())),
                    ("tokenizer.ggml.eos_token_id", u(self.vocab - 1)),
                    ("tokenizer.ggml.add_bos_token", Meta::Bool(false)),
                ]);
            }
            SynthVocab::SentencePiece => {
                // Llama 2's layout: <unk>, <s>, </s>, the byte tokens, `▁`,
                // then pieces (here filler) of falling scores.
                let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).into();
                let mut types = vec![TokenType::UNKNOWN, TokenType::CONTROL, TokenType::CONTROL];
                tokens.extend((0u8..=255).map(|b| format!("<0x{b:02X}>")));
                types.extend([TokenType::BYTE; 256]);
                tokens.push("\u{2581}".into());
                tokens.extend((tokens.len()..self.vocab).map(|i| format!("\u{2581}synth{i}")));
                types.resize(self.vocab, TokenType::NORMAL);
                let scores: Vec<f32> = (0..self.vocab).map(|i| -(i as f32)).collect();
                kv.extend([
                    ("tokenizer.ggml.model", Meta::Str("llama".into())),
                    ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
                    ("tokenizer.ggml.scores", Meta::F32s(scores)),
                    ("tokenizer.ggml.token_type", Meta::I32s(types)),
                    ("tokenizer.ggml.bos_token_id", u(1)),
                    ("tokenizer.ggml.eos_token_id", u(2)),
                    ("tokenizer.ggml.unknown_token_id", u(0)),
                ]);
            }
        }
        kv
    }
}

/// A tensor's place in the data section.
struct Placed {
    name: String,
    dims: Vec<u64>,
    dtype: DType,
    offset: u64,
    bytes: u64,
}

/// Byte-level BPE's token for byte `b`: printable bytes stand for
/// themselves, the others for the code points from U+0100 on, in order.
fn byte_token(b: u8) -> String {
    let printable = |c: u8| matches!(c, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
    if printable(b) {
        char::from(b).to_string()
    } else {
        let n = (0..b).filter(|&c| !printable(c)).count() as u32;
        char::from_u32(256 + n).map_or_else(String::new, |c| c.to_string())
    }
}

/// Writes the GGUF of `spec` to `out`; returns the bytes written.
pub fn write_gguf(spec: &SynthSpec, out: &mut impl Write) -> Result<u64, LlamaError> {
    let (header, placed) = spec.layout()?;
    let io = |e: io::Error| LlamaError::Usage(format!("writing the synthetic model: {e}"));
    out.write_all(&header).map_err(io)?;
    let mut written = header.len() as u64;
    let mut rng = SplitMix(spec.seed);
    let mut chunk = Vec::new();
    for t in &placed {
        let pad = t.offset - (written - header.len() as u64);
        out.write_all(&vec![0u8; pad as usize]).map_err(io)?;
        written += pad;
        if t.dtype == DType::F32 {
            // Norm weights: ones, so that the norms keep unit scale.
            chunk.clear();
            (0..t.bytes / 4).for_each(|_| chunk.extend(1.0f32.to_le_bytes()));
            out.write_all(&chunk).map_err(io)?;
        } else {
            let block = t.dtype.block_bytes() as u64;
            let mut left = t.bytes / block;
            while left > 0 {
                let n = left.min(1 << 14);
                chunk.clear();
                (0..n).for_each(|_| random_block(t.dtype, &mut rng, &mut chunk));
                out.write_all(&chunk).map_err(io)?;
                left -= n;
            }
        }
        written += t.bytes;
    }
    out.flush().map_err(io)?;
    Ok(written)
}

/// Appends one random block of `dtype` with small, finite scales.
fn random_block(dtype: DType, rng: &mut SplitMix, out: &mut Vec<u8>) {
    // Scales such that a weight is a few hundredths.
    let f16 = |x: f32| half::f16::from_f32(x).to_le_bytes();
    // A scale in [0.5, 1.5) · `unit`.
    let scale = |rng: &mut SplitMix, unit: f32| f16(unit * (0.5 + rng.unit()));
    let start = out.len();
    match dtype {
        DType::Q4_0 => {
            out.extend(scale(rng, 0.004));
            rng.fill(out, 16);
        }
        DType::Q8_0 => {
            out.extend(scale(rng, 0.0005));
            rng.fill(out, 32);
        }
        DType::Q4_K => {
            out.extend(scale(rng, 0.0001));
            out.extend(scale(rng, 0.0001));
            rng.fill(out, 12 + 128);
        }
        DType::Q6_K => {
            rng.fill(out, 128 + 64 + 16);
            out.extend(scale(rng, 0.00001));
        }
        _ => {
            // F16 (the only other format `check` lets through).
            for _ in 0..dtype.block_len() {
                out.extend(f16(0.04 * (rng.unit() - 0.5)));
            }
        }
    }
    debug_assert_eq!(out.len() - start, dtype.block_bytes());
}

/// SplitMix64: a small, fast, seeded generator.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Appends `n` random bytes.
    fn fill(&mut self, out: &mut Vec<u8>, n: usize) {
        let mut left = n;
        while left > 0 {
            let b = self.next().to_le_bytes();
            let k = left.min(8);
            out.extend(&b[..k]);
            left -= k;
        }
    }
}
